/* vLLM 0.33.0's hybrid KV cache manager, compiled: the rules and the reference engine are
 * hybrid/coordinator.py (HybridPool, replay_hybrid); this is the same replay, request by request,
 * with the trace's dense block ids for hash ids.
 *
 * The pool: block ids 1..capacity (0 is "no block", vLLM's null block and the reference's None).
 * Its free queue is three runs, as in vllm.c: freed blocks without a hash (a ring, head reused
 * first, a batch prepended in its order), the never-used blocks (a counter), freed blocks with a
 * hash (a list linked through the blocks, least recently freed at the head). A cached block has a
 * key, dense id * G + gid (G: the number of KV cache group ids, so one id's keys share a cache
 * line); the blocks holding one key are a list linked through the blocks in the order they got
 * it (keys[key] is its head, what a lookup returns, duplicates after it; the head's hp is the
 * tail, so a key costs 4 bytes).
 *
 * A request's block table per KV cache group id is an array of block ids with 0 for a skipped
 * slot; `lo` bounds its run of leading zeros (every entry below it is 0), so the walks that free
 * skipped blocks and the finish start where the blocks are, not at block 0. A Mamba group's
 * table is mostly gaps (a state per chunk, the older ones freed): it keeps only its states, with
 * their indexes, in order. Every array is allocated here and freed before returning; nothing is
 * global. */
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"

/* ---- the free queue ---------------------------------------------------------------------- */

/* x / bs for x >= 0 (a shift for the usual power-of-2 block sizes: a division costs tens of cycles) */
static inline i64 hy_div(const HPool *p, i64 x) { return p->shift >= 0 ? x >> p->shift : x / p->bs; }

static inline void hy_lru_unlink(HPool *p, i32 b) {
    HBlock *blk = p->blk, *x = &blk[b];
    blk[x->lp].ln = x->ln;
    blk[x->ln].lp = x->lp;
    x->lp = -1;
    p->lru_count--;
}

static inline void hy_push_front(HPool *p, i32 b) {
    p->ring_head = p->ring_head == 0 ? p->capacity - 1 : p->ring_head - 1;
    p->ring[p->ring_head] = b;
    p->ring_count++;
}

/* The cached run's head, which loses its hash (an eviction). 0: none left. */
static inline i32 hy_evict_head(HPool *p) {
    i32 b = p->blk[0].ln;
    if (KV_UNLIKELY(!b)) return 0;
    hy_lru_unlink(p, b);
    HBlock *x = &p->blk[b];
    i32 *head = &p->keys[x->key];
    if (*head == b) {
        if (x->hn) p->blk[x->hn].hp = x->hp; /* the tail */
        *head = x->hn;
    } else {
        p->blk[x->hp].hn = x->hn;
        if (x->hn) p->blk[x->hn].hp = x->hp; else p->blk[*head].hp = x->hp;
    }
    x->hp = x->hn = 0;
    x->key = -1;
    p->c[HY_EVICTIONS]++;
    i32 next = p->blk[0].ln;
    if (next) __builtin_prefetch(&p->keys[p->blk[next].key], 1); /* the next eviction's key */
    return b;
}

/* A free block from the queue's head; one with a hash loses it (an eviction). 0: none left. */
static inline i32 hy_pop(HPool *p) {
    if (p->ring_count) {
        i32 b = p->ring[p->ring_head];
        p->ring_head = p->ring_head + 1 == p->capacity ? 0 : p->ring_head + 1;
        p->ring_count--;
        return b;
    }
    if (p->next_unused <= p->capacity) return (i32)p->next_unused++;
    return hy_evict_head(p);
}

/* `count` calls of hy_pop into dst, each run of the queue in turn: 1, or 0 when it ran dry. */
static int hy_pop_n(HPool *p, i32 *dst, i64 count) {
    i64 k = 0;
    for (; k < count && p->ring_count; k++) {
        dst[k] = p->ring[p->ring_head];
        p->ring_head = p->ring_head + 1 == p->capacity ? 0 : p->ring_head + 1;
        p->ring_count--;
    }
    for (; k < count && p->next_unused <= p->capacity; k++) dst[k] = (i32)p->next_unused++;
    for (; k < count; k++)
        if (!(dst[k] = hy_evict_head(p))) return 0;
    return 1;
}

/* pool.free_blocks of t[hi-1], t[hi-2], ..., t[lo] (zeros skipped): the hashed ones appended to
 * the cached run in that order, the others prepended to the hashless run as a batch in that order;
 * with reference counts (`refs`, a constant in each caller), only the blocks no request holds. */
static inline __attribute__((always_inline)) void hy_free_desc_(HPool *p, const i32 *t, i64 lo, i64 hi,
                                                               const int refs) {
    HBlock *blk = p->blk;
    i32 *const ref = p->ref;
    i32 *batch = p->scratch;
    i32 tail = blk[0].lp;
    i64 n = 0, appended = 0;
    for (i64 i = hi - 1; i >= lo; i--) {
        i32 b = t[i];
        if (!b || (refs && --ref[b] > 0)) continue; /* (still held by another request) */
        HBlock *x = &blk[b];
        if (x->key >= 0) { /* appended to the cached run */
            x->lp = tail;
            x->ln = 0;
            blk[tail].ln = b;
            tail = b;
            appended++;
        } else {
            batch[n++] = b;
        }
    }
    blk[0].lp = tail;
    p->lru_count += appended;
    while (n) hy_push_front(p, batch[--n]);
}

static void hy_free_desc(HPool *p, const i32 *t, i64 lo, i64 hi) {
    if (p->ref) hy_free_desc_(p, t, lo, hi, 1);
    else hy_free_desc_(p, t, lo, hi, 0);
}

/* pool.free_blocks of one block */
static inline void hy_free_one(HPool *p, i32 b) {
    if (p->ref && --p->ref[b] > 0) return;
    HBlock *blk = p->blk, *x = &blk[b];
    if (x->key < 0) {
        hy_push_front(p, b);
        return;
    }
    i32 tail = blk[0].lp;
    x->lp = tail;
    x->ln = 0;
    blk[tail].ln = b;
    blk[0].lp = b;
    p->lru_count++;
}

/* Block b (without a hash) is cached by group gid under dense id `id`, last among its holders. */
static inline void hy_cache(HPool *p, i64 gid, i64 id, i32 b) {
    i64 key = id * p->G + gid;
    i32 *head = &p->keys[key];
    HBlock *x = &p->blk[b];
    x->hn = 0;
    if (*head) {
        p->c[HY_DUPLICATES]++;
        HBlock *h = &p->blk[*head];
        p->blk[h->hp].hn = b;
        x->hp = h->hp;
        h->hp = b;
    } else {
        *head = b;
        x->hp = b;
    }
    x->key = (i32)key;
    p->c[HY_ADMISSIONS]++;
}

/* ---- step 1: the hit --------------------------------------------------------------------- */

/* Every copy of spec group s has a block cached under id. */
static inline int hy_cached(const HPool *p, const HSpec *s, i64 id) {
    const i32 *k = p->keys + id * p->G + s->gid0;
    if (KV_LIKELY(s->copies == 1)) return *k != 0;
    for (i64 c = 0; c < s->copies; c++)
        if (!k[c]) return 0;
    return 1;
}

static i64 hy_find(const HPool *p, const HSpec *s, const i32 *ids, i64 bound) {
    switch (s->kind) {
    case K_FULL: {
        i64 k = 0;
        while (k < bound && hy_cached(p, s, ids[k])) k++;
        return k;
    }
    case K_SLIDING: {
        i64 run = 0;
        for (i64 i = bound - 1; i >= 0; i--) {
            if (hy_cached(p, s, ids[i])) {
                run++;
                if (run >= s->need) return i + s->need;
            } else {
                run = 0;
            }
        }
        return run;
    }
    case K_CHUNKED: {
        i64 k = (bound * p->bs) / s->chunk * s->chunk / p->bs;
        while (k < bound && hy_cached(p, s, ids[k])) k++;
        return k;
    }
    default: /* mamba */
        for (i64 i = bound - 1; i >= 0; i--)
            if (hy_cached(p, s, ids[i])) return i + 1;
        return 0;
    }
}

/* (hit, junction) as HybridPool.find_hit */
i64 hy_find_hit(const HPool *p, const i32 *ids, i64 nids, i64 tokens, i64 *junction) {
    i64 bound = tokens >= 1 ? hy_div(p, tokens - 1) : 0;
    if (bound > nids) bound = nids;
    i64 longest = 0;
    for (;;) {
        i64 start = bound;
        for (i64 o = 0; o < p->S; o++) {
            bound = hy_find(p, &p->spec[p->order[o]], ids, bound);
            if (bound > longest) longest = bound;
        }
        if (bound >= start || p->simple) break;
    }
    *junction = longest > bound ? longest : 0;
    return bound;
}

/* Is block id cached by every full-attention spec group? (0 without one.) For the miss account's
 * layer-groups cause: full attention had it, another group did not. */
static int hy_in_full(const HPool *p, i64 id) {
    int any = 0;
    for (i64 o = 0; o < p->S; o++) {
        const HSpec *s = &p->spec[o];
        if (s->kind != K_FULL) continue;
        if (!hy_cached(p, s, id)) return 0;
        any = 1;
    }
    return any;
}

/* ---- steps 2 and 3 ----------------------------------------------------------------------- */

static inline i64 hy_skipped(const HPool *p, const HGroup *g, i64 computed) {
    switch (g->kind) {
    case K_SLIDING: return hy_div(p, kv_max(0, computed - g->window + 1));
    case K_CHUNKED: return hy_div(p, computed / g->chunk * g->chunk);
    case K_MAMBA: return hy_div(p, kv_max(0, computed - 1));
    default: return 0;
    }
}

int hy_grow(HPool *p, HReq *rq, i64 need) {
    if (need <= rq->tcap && need <= p->scap) return 1;
    if (need > (i64)(SIZE_MAX / sizeof(i64)) / 2) return 0;
    if (need > rq->tcap) {
        i64 cap = kv_max(need, 2 * rq->tcap);
        for (i64 gid = 0; gid < p->G; gid++) {
            HGroup *g = &rq->g[gid];
            i32 *t = realloc(g->table, (size_t)cap * sizeof(i32));
            if (!t) return 0;
            g->table = t;
            if (g->kind == K_MAMBA) { /* (its states' indexes) */
                i64 *q = realloc(g->pos, (size_t)cap * sizeof(i64));
                if (!q) return 0;
                g->pos = q;
            }
        }
        rq->tcap = cap;
    }
    if (need > p->scap) {
        i64 cap = kv_max(need, 2 * p->scap);
        i32 *q = realloc(p->scratch, (size_t)cap * sizeof(i32));
        if (!q) return 0;
        p->scratch = q;
        p->scap = cap;
    }
    return 1;
}

void hy_remove_skipped(HPool *p, HReq *rq, i64 computed) {
    i64 ceil_blocks = hy_div(p, computed + p->bs - 1);
    for (i64 gid = 0; gid < p->G; gid++) {
        HGroup *g = &rq->g[gid];
        if (g->kind == K_FULL) continue; /* skips nothing */
        i32 *t = g->table;
        i64 k = kv_min(hy_skipped(p, g, computed), g->len);
        if (g->kind == K_MAMBA) { /* the walk goes on through the gaps: every state below k */
            i64 m = 0;
            while (m < g->ns && g->pos[m] < k) m++;
            i64 last = g->last;
            int drop_last = last >= 0 && last < ceil_blocks - 1;
            if (m == 1) hy_free_one(p, t[0]);
            else if (m) hy_free_desc(p, t, 0, m);
            i64 w = 0;
            for (i64 r = m; r < g->ns; r++) {
                if (drop_last && g->pos[r] == last) { /* the state the previous chunk started from */
                    hy_free_one(p, t[r]);
                    continue;
                }
                t[w] = t[r], g->pos[w] = g->pos[r], w++;
            }
            g->ns = w;
            continue;
        }
        i64 i = k - 1; /* the walk stops at the first skipped slot below k */
        while (i >= g->lo && t[i]) i--;
        if (i + 1 < k) {
            hy_free_desc(p, t, i + 1, k);
            memset(t + i + 1, 0, (size_t)(k - i - 1) * sizeof(i32));
            if (i < g->lo) g->lo = k;
        }
    }
}

/* The block indexes group g may hash in this request (reachable_block_mask), as two ranges in
 * order, disjoint: e1 the prompt's floor((P - 1) / bs), e2 the junction (0: none). */
static void hy_keep_ranges(const HPool *p, HGroup *g, i64 e1, i64 e2) {
    i64 *r = g->keep;
    if (p->dense || g->kind == K_FULL || g->kind == K_CHUNKED) {
        r[0] = 0, r[1] = INT64_MAX, r[2] = r[3] = 0;
        return;
    }
    i64 span = g->kind == K_MAMBA ? 1 : g->need; /* mamba: the state block ending there */
    i64 a0 = kv_max(0, e1 - span), a1 = e1, b0 = 0, b1 = 0;
    if (e2) b0 = kv_max(0, e2 - span), b1 = e2;
    if (b0 < a0) {
        i64 t0 = a0, t1 = a1;
        a0 = b0, a1 = b1, b0 = t0, b1 = t1;
    }
    if (b0 < a1) { /* overlapping: one range */
        a1 = kv_max(a1, b1);
        b0 = b1 = 0;
    }
    r[0] = a0, r[1] = a1, r[2] = b0, r[3] = b1;
}

/* New blocks group g needs for `slots` slots, holding `have` */
static inline i64 hy_new_count(const HGroup *g, i64 slots, i64 have) {
    return g->kind == K_MAMBA ? (slots > have) : kv_max(0, slots - have);
}

/* A sliding-window or chunked-local group's max_admission_blocks_per_request (kv_cache_interface.py
 * SlidingWindowSpec / ChunkedLocalAttentionSpec): what one request may hold at its peak. */
static inline i64 hy_admission_cap(const HPool *p, int kind, i64 window, i64 chunk) {
    i64 limit = p->max_len > 0 ? p->max_len : INT64_MAX / 4;
    if (kind == K_SLIDING) return kv_ceil_div(kv_min(window - 1 + p->in_flight, limit), p->bs) + 1;
    if (kind == K_CHUNKED) return kv_ceil_div(kv_min(chunk + p->in_flight, limit), p->bs);
    return INT64_MAX;
}

/* MambaSpec.max_memory_usage_bytes in align mode: 2 state pages per request (no speculative or
 * prefill-checkpoint blocks), the most it holds at once. */
static inline i64 hy_peak_cap(const HPool *p, const HSpec *sp) {
    return sp->kind == K_MAMBA ? 2 : hy_admission_cap(p, sp->kind, sp->window, sp->chunk);
}

int hy_hit_cached_this_step(const HPool *p, const i32 *ids, i64 hit) {
    if (!p->stamp || hit < 1) return 0;
    const i32 *stamp = p->stamp + (i64)ids[hit - 1] * p->G;
    for (i64 s = 0; s < p->S; s++)
        if (p->spec[s].kind == K_MAMBA)
            for (i64 c = 0; c < p->spec[s].copies; c++)
                if (stamp[p->spec[s].gid0 + c] == p->step) return 1;
    return 0;
}

i64 hy_peak(const HPool *p, i64 tokens) {
    i64 slots = kv_ceil_div(tokens, p->bs), total = 0;
    for (i64 k = 0; k < p->S; k++) {
        const HSpec *sp = &p->spec[k];
        total += sp->copies * kv_min(slots, hy_peak_cap(p, sp));
    }
    return total;
}

i64 hy_needed(const HPool *p, const HReq *rq, const i32 *ids, i64 hit, i64 tokens, int first, int admission) {
    i64 slots = hy_div(p, tokens + p->bs - 1), total = 0;
    for (i64 gid = 0; gid < p->G; gid++) {
        const HGroup *g = &rq->g[gid];
        i64 required = admission ? kv_min(slots, hy_admission_cap(p, g->kind, g->window, g->chunk)) : slots;
        /* a Mamba group (align mode) takes one state block a step at most: physical_block_cap
         * (stm:1692-1795) */
        i64 cap = g->kind == K_MAMBA ? 1 : INT64_MAX;
        if (!first) { /* a running request: no new hits (stm:230-236) */
            total += kv_min(kv_max(required - g->len, 0), cap);
            continue;
        }
        /* the blocks beyond the hit and the window's skipped blocks, then the hit blocks a touch
         * takes out of the free queue (stm:238-266) */
        i64 skipped = hy_skipped(p, g, hit * p->bs);
        total += kv_min(kv_max(required - kv_max(skipped, hit), 0), cap);
        const i32 *k = p->keys + gid;
        for (i64 j = kv_min(skipped, hit); j < hit; j++) {
            i32 b = k[(i64)ids[j] * p->G];
            if (b && p->blk[b].lp >= 0) total++;
        }
    }
    return total;
}

static inline __attribute__((always_inline)) int hy_take_(HPool *p, HReq *rq, const i32 *ids, i64 hit, i64 end,
                                                         i64 cached, int first) {
    const i64 G = p->G, bs = p->bs;
    HGroup *groups = rq->g;
    i32 *const ref = p->ref;
    i64 slots = hy_div(p, end + bs - 1);
    if ((slots > rq->tcap || slots > p->scap) && !hy_grow(p, rq, slots)) return HY_NOMEM;
    if (first) { /* touch the hit blocks each group keeps (add_local_computed_blocks): they leave the free queue */
        for (i64 gid = 0; gid < G; gid++) {
            HGroup *g = &groups[gid];
            i64 skip = kv_min(hy_skipped(p, g, hit * bs), hit);
            const i32 *k = p->keys + gid;
            i32 *t = g->table;
            int mamba = g->kind == K_MAMBA;
            if (!mamba) memset(t, 0, (size_t)skip * sizeof(i32));
            i64 lo = skip;
            for (i64 j = skip; j < hit; j++) {
                i32 b = k[(i64)ids[j] * G];
                if (!b) {
                    if (!mamba) t[j] = 0;
                    if (lo == j) lo++;
                    continue;
                }
                if (ref) { /* held by other requests too, or taken out of the free queue */
                    if (ref[b]++ == 0) hy_lru_unlink(p, b);
                } else {
                    if (KV_UNLIKELY(p->blk[b].lp < 0)) return HY_REPEAT; /* touched twice: a repeated id */
                    hy_lru_unlink(p, b);
                }
                if (mamba) t[g->ns] = b, g->pos[g->ns++] = j;
                else t[j] = b;
            }
            g->len = g->cached_upto = hit;
            g->lo = lo;
        }
    }
    for (i64 gid = 0; gid < G; gid++) { /* new blocks, group by group */
        HGroup *g = &groups[gid];
        i64 newc = hy_new_count(g, slots, g->len);
        if (!newc) continue;
        if (g->kind == K_MAMBA) {
            if (g->len) g->last = g->len - 1;
            i32 b = hy_pop(p);
            if (KV_UNLIKELY(!b)) return HY_INTERNAL;
            if (ref) ref[b] = 1;
            g->table[g->ns] = b, g->pos[g->ns++] = slots - 1;
            g->len = slots;
        } else {
            i32 *dst = g->table + g->len;
            if (KV_UNLIKELY(!hy_pop_n(p, dst, newc))) return HY_INTERNAL;
            if (ref)
                for (i64 k = 0; k < newc; k++) ref[dst[k]] = 1;
            g->len += newc;
        }
    }
    i64 full = hy_div(p, cached);
    for (i64 gid = 0; gid < G; gid++) { /* cache_blocks */
        HGroup *g = &groups[gid];
        if (g->cached_upto >= full) continue;
        i64 top = kv_min(full, g->len);
        if (g->kind == K_MAMBA) { /* the states not cached yet: the last ones */
            const i64 *r = g->keep;
            i64 q = g->ns;
            while (q > 0 && g->pos[q - 1] >= g->cached_upto) q--;
            for (; q < g->ns; q++) {
                i64 j = g->pos[q];
                if (j < top && ((j >= r[0] && j < r[1]) || (j >= r[2] && j < r[3]))) {
                    hy_cache(p, gid, ids[j], g->table[q]);
                    if (p->stamp) p->stamp[(i64)ids[j] * G + gid] = p->step;
                }
            }
            g->cached_upto = full;
            continue;
        }
        for (int r = 0; r < 4; r += 2) {
            i64 lo = kv_max(g->cached_upto, g->keep[r]), hi = kv_min(top, g->keep[r + 1]);
            for (i64 j = lo; j < hi; j++) {
                i32 b = g->table[j];
                if (b) hy_cache(p, gid, ids[j], b);
            }
        }
        g->cached_upto = full;
    }
    return 1;
}

int hy_take(HPool *p, HReq *rq, const i32 *ids, i64 hit, i64 end, i64 cached, int first) {
    return hy_take_(p, rq, ids, hit, end, cached, first);
}

/* One allocate_slots of the sequential replay: tokens done..end. 1: done; 0: does not fit; < 0:
 * an error code. (Its fit check counts every slot of the hit, skipped ones too, as the reference
 * does; the simulator asks hy_needed, vLLM's own count.) */
static int hy_allocate(HPool *p, HReq *rq, const i32 *ids, i64 nids, i64 hit, i64 done, i64 end, int first) {
    hy_remove_skipped(p, rq, done);
    i64 slots = hy_div(p, end + p->bs - 1);
    i64 total = first ? hit * p->G : 0;
    for (i64 gid = 0; gid < p->G; gid++) total += hy_new_count(&rq->g[gid], slots, first ? hit : rq->g[gid].len);
    if (total > hy_free_count(p)) return 0;
    return hy_take_(p, rq, ids, hit, end, kv_min(end, nids * p->bs), first);
}

i64 hy_start(HPool *p, HReq *rq, const i32 *ids, i64 nids, i64 tokens, i64 prompt, i64 *junction) {
    i64 hit = hy_find_hit(p, ids, nids, tokens, junction);
    for (i64 gid = 0; gid < p->G; gid++) {
        HGroup *g = &rq->g[gid];
        g->len = g->lo = g->cached_upto = g->ns = 0;
        g->last = -1;
        hy_keep_ranges(p, g, prompt >= 1 ? hy_div(p, prompt - 1) : 0, *junction);
    }
    return hit;
}

void hy_finish(HPool *p, HReq *rq) {
    for (i64 gid = 0; gid < p->G; gid++) {
        HGroup *g = &rq->g[gid];
        if (g->kind == K_MAMBA) {
            if (g->ns == 1) hy_free_one(p, g->table[0]);
            else hy_free_desc(p, g->table, 0, g->ns);
        }
        else if (g->len > g->lo) hy_free_desc(p, g->table, g->lo, g->len);
    }
}

i64 hy_mamba_split(i64 bs, i64 prompt, i64 num_tokens, i64 max_prefill, i64 junction, i64 start, i64 n) {
    i64 prefill_end = kv_max(prompt, num_tokens - 1);
    if (start >= prefill_end) return n;
    i64 last_cache = kv_max((num_tokens - 1) / bs * bs, 0); /* get_mamba_prefill_checkpoint_position */
    i64 end = start + n;
    if (end < prefill_end) { /* chunk ends block aligned (the prompt's last chunk exempt) */
        i64 aligned = end / bs * bs;
        if (aligned > start || bs <= max_prefill) end = aligned;
    }
    i64 stops[3] = {start % bs ? (start / bs + 1) * bs : 0, last_cache,
                    start < junction && junction < end ? start + (junction - start) / bs * bs : 0};
    i64 stop = end;
    for (int k = 0; k < 3; k++)
        if (start < stops[k] && stops[k] < stop) stop = stops[k];
    return kv_max(stop - start, 0);
}

/* One request, start to finish, prefill only (the sequential replay): its hit in blocks (< 0: an
 * error code). */
static i64 hy_serve(HPool *p, HReq *rq, const i32 *ids, i64 nids, i64 prompt) {
    const i64 bs = p->bs;
    i64 junction;
    i64 hit = hy_start(p, rq, ids, nids, prompt, prompt, &junction);
    if (!hy_grow(p, rq, hit)) return HY_NOMEM;
    i64 t = hit * bs;
    int first = 1;
    while (t < prompt) {
        i64 end = p->chunk_tokens < prompt - t ? t + p->chunk_tokens : prompt;
        if (p->has_mamba) /* (never 0 with the whole budget) */
            end = t + hy_mamba_split(bs, prompt, prompt, p->chunk_tokens, junction * bs, t, end - t);
        int r = hy_allocate(p, rq, ids, nids, hit, t, end, first);
        if (r < 0) return r;
        if (!r) {
            p->c[HY_OVERSIZE]++;
            break;
        }
        t = end;
        first = 0;
    }
    hy_finish(p, rq);
    return hit;
}

int hy_req_init(const HPool *p, HReq *rq) {
    rq->tcap = 0;
    rq->g = calloc((size_t)p->G, sizeof(HGroup));
    if (!rq->g) return 0;
    for (i64 s = 0; s < p->S; s++) {
        const HSpec *sp = &p->spec[s];
        for (i64 c = 0; c < sp->copies; c++) {
            HGroup *g = &rq->g[sp->gid0 + c];
            g->kind = sp->kind;
            g->window = sp->window;
            g->chunk = sp->chunk;
            g->need = sp->need;
            g->last = -1;
        }
    }
    return 1;
}

void hy_req_release(const HPool *p, HReq *rq) {
    if (rq->g)
        for (i64 gid = 0; gid < p->G; gid++) free(rq->g[gid].table), free(rq->g[gid].pos);
    free(rq->g);
    rq->g = NULL;
}

void hy_counters(HPool *p, i64 *out) {
    p->c[HY_RESIDENT] = p->c[HY_ADMISSIONS] - p->c[HY_EVICTIONS]; /* every admission is resident or evicted */
    for (int k = 0; k < HY_COUNTERS; k++) out[k] = p->c[k];
}

void hy_release(HPool *p) {
    free(p->ref);
    free(p->stamp);
    free(p->scratch);
    free(p->order);
    free(p->spec);
    free(p->ring);
    free(p->keys);
    free(p->blk);
}

int hy_pool_init(HPool *p, i64 capacity, i64 block_size, i64 num_blocks, i64 num_specs, const i64 *kind,
                 const i64 *copies, const i64 *window, const i64 *chunk, i64 retention, i64 chunk_tokens, int refs) {
    memset(p, 0, sizeof *p);
    /* (tokens, far from overflowing any sum the pool makes) */
    const i64 too_long = (i64)1 << 52;
    if (capacity < 1 || capacity >= INT32_MAX || block_size < 1 || block_size > (1 << 24) || num_specs < 1 ||
        chunk_tokens < 1 || num_blocks < 0)
        return HY_BADARG;
    p->capacity = capacity;
    p->bs = block_size;
    p->nb = num_blocks;
    p->S = num_specs;
    p->chunk_tokens = chunk_tokens;
    p->dense = retention < 0;
    p->next_unused = 1;
    p->shift = -1;
    for (int k = 0; k < 62; k++)
        if (block_size == (i64)1 << k) p->shift = k;
    i64 G = 0;
    for (i64 s = 0; s < num_specs; s++) {
        if (kind[s] < K_FULL || kind[s] > K_MAMBA || copies[s] < 1 || copies[s] > INT32_MAX) return HY_BADARG;
        if (kind[s] == K_SLIDING && (window[s] < 1 || window[s] > too_long)) return HY_BADARG;
        if (kind[s] == K_CHUNKED && (chunk[s] < 1 || chunk[s] > too_long)) return HY_BADARG;
        G += copies[s];
        if (G > INT32_MAX) return HY_BADARG;
    }
    p->G = G;
    if (num_blocks > 0 && G > INT32_MAX / num_blocks) return HY_NOMEM; /* a key is an i32 */
    i64 nkeys = G * num_blocks;
    p->blk = malloc((size_t)(capacity + 1) * sizeof(HBlock));
    p->keys = calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(i32));
    p->ring = malloc((size_t)capacity * sizeof(i32));
    p->spec = malloc((size_t)num_specs * sizeof(HSpec));
    p->order = malloc((size_t)num_specs * sizeof(int));
    p->ref = refs ? calloc((size_t)(capacity + 1), sizeof(i32)) : NULL;
    if (!p->blk || !p->keys || !p->ring || !p->spec || !p->order || (refs && !p->ref)) {
        hy_release(p);
        memset(p, 0, sizeof *p);
        return HY_NOMEM;
    }
    for (i64 b = 0; b <= capacity; b++) p->blk[b] = (HBlock){-1, -1, 0, 0, 0};
    p->blk[0].lp = p->blk[0].ln = 0; /* the cached run's sentinel: empty */
    i64 gid = 0, o = 0;
    for (i64 s = 0; s < num_specs; s++) {
        HSpec *sp = &p->spec[s];
        sp->kind = (int)kind[s];
        sp->window = window[s];
        sp->chunk = chunk[s];
        sp->need = sp->kind == K_SLIDING ? kv_ceil_div(window[s] - 1, block_size) : 0;
        sp->gid0 = gid;
        sp->copies = copies[s];
        if (sp->kind == K_MAMBA) p->has_mamba = 1;
        gid += copies[s];
        if (sp->kind == K_FULL) p->order[o++] = (int)s;
    }
    for (i64 s = 0; s < num_specs; s++)
        if (kind[s] != K_FULL) p->order[o++] = (int)s;
    p->simple = num_specs == 2 && p->spec[p->order[0]].kind == K_FULL;
    if (refs && p->has_mamba) {
        p->stamp = calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(i32));
        if (!p->stamp) {
            hy_release(p);
            memset(p, 0, sizeof *p);
            return HY_NOMEM;
        }
    }
    return 0;
}

/* The whole trace through one pool (replay_hybrid_compiled in hybrid.py).
 * offsets (n + 1), blocks (num_accesses dense ids < num_blocks), input_length (n): the trace;
 * kind/copies/window/chunk (num_specs): the spec groups in vLLM's order (kind: 0 full,
 * 1 sliding_window, 2 chunked_local, 3 mamba); retention: -1 dense (None), else sparse;
 * hits (n): out, hit blocks per request; counters (5): out, admissions, evictions,
 * duplicate_blocks, oversize_requests, resident blocks at the end; in_full (num_accesses, or
 * NULL): out, per position, is its block cached by every full-attention group when its request
 * arrives (the miss account's layer-groups cause: hybrid.py's replay_hybrid records the same).
 * Returns 0, HY_NOMEM (-1), HY_BADARG (-2), HY_INTERNAL (-3), or r > 0: request r - 1 repeats a
 * hash id within its hit. */
KV_EXPORT i64 kv_hybrid_replay(const i64 *offsets, i64 n, const i32 *blocks, i64 num_accesses, i64 num_blocks,
                               const i64 *input_length,
                               i64 capacity, i64 block_size, i64 num_specs, const i64 *kind, const i64 *copies,
                               const i64 *window, const i64 *chunk, i64 retention, i64 chunk_tokens, i64 *hits,
                               i64 *counters, i8 *in_full) {
    const i64 too_long = (i64)1 << 52; /* (tokens, far from overflowing any sum below) */
    if (n < 0 || num_blocks < 0) return HY_BADARG; /* (the pool's settings: hy_pool_init) */
    if (offsets[0] < 0 || offsets[n] > num_accesses) return HY_BADARG;
    for (i64 i = 0; i < n; i++)
        if (offsets[i + 1] < offsets[i] || input_length[i] > too_long) return HY_BADARG;
    /* (branch free, one type: vectorized; an i32 id is below 2^31, so beyond it only negatives are out) */
    const uint32_t limit = num_blocks > INT32_MAX ? (uint32_t)1 << 31 : (uint32_t)num_blocks;
    uint32_t out_of_range = 0;
    for (i64 j = offsets[0]; j < offsets[n]; j++) out_of_range |= (uint32_t)blocks[j] >= limit;
    if (out_of_range) return HY_BADARG;
    HPool pool;
    HPool *p = &pool;
    int init = hy_pool_init(p, capacity, block_size, num_blocks, num_specs, kind, copies, window, chunk, retention,
                            chunk_tokens, 0);
    if (init) return init;
    HReq req; /* one at a time: each request's state in turn */
    if (!hy_req_init(p, &req)) {
        hy_release(p);
        return HY_NOMEM;
    }
    i64 rc = 0;
    for (i64 i = 0; i < n; i++) {
        if (in_full != NULL)
            for (i64 j = offsets[i]; j < offsets[i + 1]; j++) in_full[j] = (i8)hy_in_full(p, blocks[j]);
        i64 h = hy_serve(p, &req, blocks + offsets[i], offsets[i + 1] - offsets[i], input_length[i]);
        if (h < 0) {
            rc = h == HY_REPEAT ? i + 1 : h;
            break;
        }
        hits[i] = h;
    }
    hy_counters(p, counters);
    hy_req_release(p, &req);
    hy_release(p);
    return rc;
}

/* ---- the table the serving kernel drives the coordinator through (engine.h) ---------------------- */

static int co_init(void *st, const HybridSetup *c) {
    HPool *p = st;
    const i64 *g = c->groups, S = c->num_specs; /* kinds, then copies, windows, chunks: S each */
    int rc = hy_pool_init(p, c->capacity, c->block_size, c->num_blocks, S, g, g + S, g + 2 * S, g + 3 * S, c->retention,
                          kv_max(1, c->max_batched), 1);
    p->in_flight = c->max_batched; /* max_concurrent_batches 1: one step's tokens */
    p->max_len = c->max_model_len;
    return rc;
}

static void co_release(void *st) {
    if (((HPool *)st)->blk != NULL) hy_release(st);
}

static void co_report(void *st, i64 *out) { hy_counters(st, out); }

static i64 co_held(const void *st) { return ((const HPool *)st)->capacity - hy_free_count(st); }

static int co_holds(const void *rq) { return ((const HReq *)rq)->g != NULL; }

static int co_finish(void *st, void *rq) {
    hy_finish(st, rq);
    return 1;
}

static void co_drop(void *st, void *rq) { hy_finish(st, rq); }

static void co_request_release(const void *st, void *rq) { hy_req_release(st, rq); }

static void co_step_starts(void *st) { hy_step_starts(st); }

static int co_has_mamba(const void *st) { return ((const HPool *)st)->has_mamba; }

static i64 co_start(void *st, void *rq, const i32 *ids, i64 nids, i64 tokens, i64 prompt) {
    HPool *p = st;
    HReq *r = rq;
    if (r->g == NULL && !hy_req_init(p, r)) return HY_NOMEM;
    i64 junction;
    i64 k = hy_start(p, r, ids, nids, tokens, prompt, &junction); /* (touches nothing yet) */
    r->junction = junction * p->bs;
    return k;
}

static i64 co_find_hit(const void *st, const i32 *ids, i64 nids, i64 tokens) {
    i64 junction;
    return hy_find_hit(st, ids, nids, tokens, &junction);
}

static i64 co_mamba_split(const void *st, const void *rq, i64 prompt, i64 num_tokens, i64 max_prefill, i64 start,
                          i64 n) {
    return hy_mamba_split(((const HPool *)st)->bs, prompt, num_tokens, max_prefill, ((const HReq *)rq)->junction, start,
                          n);
}

static int co_hit_cached_this_step(const void *st, const i32 *ids, i64 hit) { return hy_hit_cached_this_step(st, ids, hit); }

static int co_allocate_first(void *st, void *rq, const i32 *ids, i64 hit, i64 end, i64 cached, i64 whole) {
    i64 free_now = hy_free_count(st);
    if (hy_needed(st, rq, ids, hit, whole, 1, 1) > free_now || hy_needed(st, rq, ids, hit, end, 1, 0) > free_now)
        return 0;
    return hy_take(st, rq, ids, hit, end, cached, 1);
}

static int co_allocate(void *st, void *rq, const i32 *ids, i64 end, i64 cached, i64 computed) {
    hy_remove_skipped(st, rq, computed); /* (even when the step's slots then do not fit) */
    if (hy_needed(st, rq, NULL, 0, end, 0, 0) > hy_free_count(st)) return 0;
    return hy_take(st, rq, ids, 0, end, cached, 0);
}

static i64 co_peak(const void *st, i64 tokens) { return hy_peak(st, tokens); }

static const HybridCoordinator coordinator = {
    .step_starts = co_step_starts, .has_mamba = co_has_mamba, .start = co_start, .find_hit = co_find_hit,
    .mamba_split = co_mamba_split, .hit_cached_this_step = co_hit_cached_this_step,
    .allocate_first = co_allocate_first, .allocate = co_allocate, .peak = co_peak,
};

const HybridEngine hybrid_coordinator = {
    .name = "vLLM 0.33.0 hybrid KV cache coordinator", .state_size = sizeof(HPool), .request_size = sizeof(HReq),
    .counters = HY_COUNTERS, .init = co_init, .release = co_release, .report = co_report, .held = co_held,
    .holds = co_holds, .finish = co_finish, .drop = co_drop, .request_release = co_request_release,
    .coordinator = &coordinator, .radix = NULL,
};
