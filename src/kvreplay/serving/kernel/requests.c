/* A request's blocks on its instance: the only code of the simulator that holds and releases
 * blocks (policies/base.py's hold contract; engine/driver.c's kv_request_start starts a request,
 * as it starts overlapping requests in the engine). docs/memory.md states the pool's rules.
 *
 * Three ways to hold a request's blocks (Sim.mode, chosen by the scheduler style and the policy):
 *
 * - PAGED (vLLM style, the vllm policy): as vLLM's KVCacheManager does it (kv_cache_manager.py
 *   allocate_slots / free of vLLM 0.33.0). Admission checks that the whole sequence fits, then
 *   holds the hit blocks and only the blocks of this step's tokens; each step adds the blocks its
 *   tokens need. A block gets its hash (it is cached) when the tokens scheduled so far fill it,
 *   generated tokens included; a request is freed last block first, blocks without a hash to the
 *   head of the free queue. base_len[i]: blocks held; base_n[i]: of them hashed (their handles).
 * - PIECEWISE (vLLM style, block-level policies): the same chunk by chunk holding, through
 *   pin_request over consecutive ranges (which block-level policies compose): base_len[i]
 *   positions held, base_n[i] handles.
 * - WHOLE (SGLang style; policies whose pin_request does not compose: radix, ttl, lru-tail,
 *   belady): a request's prompt (and what a recomputation needs) is held at admission, base_len[i]
 *   positions in one pin_request of base_n[i] handles; decode blocks then one at a time
 *   (dec_pinned[i]), released tail first before the admitted range. Under the SGLang style the
 *   radix tree without tiers is held as SGLang's scheduler holds it instead (req_tree_held):
 *   its matched path locked, its other pages its own until a checkpoint.
 *
 * A fourth, HYBRID (vLLM style, the vllm policy, a hybrid model's layer groups), is vLLM's hybrid
 * KV cache manager: hybrid.c holds those requests' blocks.
 *
 * Handles live at handles[offsets[i] + i + position]. */
#include <stdlib.h>
#include <string.h>

#include "../../engine/driver.h"
#include "ids.h"
#include "sim.h"

static inline i64 *ctr(Sim *s, i64 j) { return s->inst[j].counters; }
static inline const i32 *to_global(Sim *s, i64 j) { return s->inst[j].ids == NULL ? NULL : s->inst[j].ids->to_global; }
static inline const i32 *local_ids(Sim *s, i64 j) { return s->inst[j].ids == NULL ? NULL : s->lblocks; }

/* The routers' residency bits of instance j (sim.h res_bits) after an operation: the blocks its
 * eviction log holds, and request i's positions [from, to) (i < 0: none), as the policy has them
 * now (a block an operation evicted and cached again is resident). Only an operation's own
 * positions can become resident and every eviction is logged (policies/base.py's contract), so
 * the bits are the policy's residency whenever a router reads them. A full log (never: it is
 * sized for one operation) would lose that: the scans go back to probing each instance. */
static void settle_bits(Sim *s, i64 j, i64 i, i64 from, i64 to) {
    void *st = s->inst[j].state;
    KvHolds *h = (KvHolds *)st;
    const i32 *global = to_global(s, j);
    i64 words = s->bit_words;
    if (h->hold[LOG_LOST] != 0) {
        free(s->res_bits);
        s->res_bits = NULL;
        return;
    }
    for (i64 q = 0, n = h->hold[LOG_COUNT]; q < n; q++) {
        i64 b = h->hold[LOG_HEAD + q];
        sim_bit(s->res_bits, words, global == NULL ? b : global[b], j, s->policy->resident(st, b));
    }
    h->hold[LOG_COUNT] = 0;
    if (i < 0) return;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i];
    for (i64 q = start + from; q < start + to; q++)
        sim_bit(s->res_bits, words, s->io->blocks[q], j, s->policy->resident(st, ids[q]));
}

/* After an operation on instance j (on request i's positions [from, to); i < 0: none): its
 * evictions go down to the tiers, or the routers' residency bits follow them (never both: the
 * bits are kept without tiers). */
static inline void settle(Sim *s, i64 j, i64 i, i64 from, i64 to) {
    if (s->res_bits != NULL) settle_bits(s, j, i, from, to);
    else if (s->T > 0) kv_tier_drain(s->policy, s->inst[j].state, s->tiers, j, to_global(s, j));
}

static inline void drain(Sim *s, i64 j) { settle(s, j, -1, 0, 0); }

/* Decode positions a request needs with `tokens` in KV, beyond its prompt's blocks. */
static inline i64 extra_blocks(i64 tokens, i64 prompt_tokens, i64 bs) {
    i64 e = kv_ceil_div(tokens, bs) - kv_ceil_div(prompt_tokens, bs);
    return e > 0 ? e : 0;
}

i64 req_needed_positions(const Sim *s, i64 i, i64 tokens) {
    return s->io->P[i] + (s->output_kv ? extra_blocks(tokens, s->io->L[i], s->bs) : 0);
}

/* tokens that take room in KV (generated ones do not without output KV) */
static inline i64 kv_tokens(const Sim *s, i64 i, i64 tokens) {
    return s->output_kv ? tokens : kv_min(tokens, s->io->L[i]);
}

/* The SGLang style over the radix tree, without tiers: a request is held as SGLang's scheduler
 * holds it (sglang.c): its matched path locked, its other pages (each chunk's as it is scheduled,
 * then each decode page) its own, outside the tree, until a checkpoint after each prefill step and
 * its finish puts the computed whole pages in (mem_cache/common.py checkpoint_kv_cache,
 * release_kv_cache). base_n[i]: the pages of its locked path (handles[offsets[i] + i]: its end
 * node); base_len[i]: the pages it holds, path and own. (With tiers a prompt is held whole from
 * its admission, its decode pages each a leaf of its own: the tiers' loads count on that.) */
int req_tree_held(const Sim *s) {
    return s->mode == MODE_WHOLE && s->io->cfg[STYLE] == STYLE_SGLANG && s->policy->tree != NULL && s->T == 0;
}

/* Count one more pin_request of `positions` blocks, or say no (and stop the run) when the policy
 * state was sized for fewer: radix and belady allocate per call and per position (Python sizes
 * them, and runs again with more room when this says no). */
static int room(Sim *s, i64 j, i64 positions) {
    i64 *c = ctr(s, j);
    if (c[state_out_of_room] != 0) return 0;
    if ((c[max_pin_calls] >= 0 && c[pin_calls] + 1 > c[max_pin_calls])
        || (c[max_positions] >= 0 && c[positions_pinned] + positions > c[max_positions])) {
        c[state_out_of_room] = 1;
        s->failed = 1;
        return 0;
    }
    c[pin_calls] += 1;
    c[positions_pinned] += positions;
    return 1;
}

/* Instance j's ids are all taken: about twice as many (Python's grant, written to state_ids[j]),
 * its policy state grown by Python (sim.h SimGrow), its id map and the router's tables over its
 * ids with it. 0 when that cannot be done. */
static int grow_ids(Sim *s, i64 j) {
    Ids *ids = s->inst[j].ids;
    i64 state = s->grow == NULL ? 0 : s->grow(j, 2 * ids->cap);
    i64 cap = s->io->state_ids[j];
    if (state == 0 || cap <= ids->cap) return 0;
    s->inst[j].state = (void *)state;
    if (!ids_grow(ids, cap)) return 0;
    if (s->router_tables != NULL) {
        i32 *table = realloc(s->router_tables[j], (size_t)cap * sizeof(i32));
        if (table == NULL) return 0;
        i64 old = kv_max(1, s->ids_cap[j]);
        memset(table + old, 0, (size_t)(cap - old) * sizeof(i32));
        s->router_tables[j] = table;
    }
    s->ids_cap[j] = cap;
    return 1;
}

int req_route_ids(Sim *s, i64 j, i64 i) {
    Ids *ids = s->inst[j].ids;
    if (ids == NULL) return 1;
    for (i64 q = s->io->offsets[i]; q < s->io->offsets[i + 1]; q++) {
        i64 local = ids_add(ids, s->io->blocks[q]);
        if (local < 0 && grow_ids(s, j)) local = ids_add(ids, s->io->blocks[q]);
        if (local < 0) {
            ctr(s, j)[ids_out_of_room] = 1;
            s->failed = 1;
            return 0;
        }
        s->lblocks[q] = (i32)local;
    }
    return 1;
}

/* The longest prefix request i finds on instance j for target[i] tokens (blocks), through the
 * tiers too when `reach` is given (a look: nothing is touched). */
static i64 probe(Sim *s, i64 j, i64 i, i64 positions, i64 *reach) {
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i];
    i64 limit = s->policy->hit_limit(st, positions, s->target[i], s->bs);
    i64 k = 0;
    while (k < limit && s->policy->resident(st, ids[start + k])) k++;
    if (reach != NULL)
        *reach = s->T > 0 ? kv_tier_prefix(s->policy, st, s->tiers, j, s->io->blocks, local_ids(s, j), start, k, limit,
                                            s->tier_scratch, 0)
                          : k;
    return k;
}

i64 req_cached_prefix(Sim *s, i64 j, i64 i, i64 max_blocks) {
    i64 positions = s->io->P[i];
    return probe(s, j, i, max_blocks >= 0 && max_blocks < positions ? max_blocks : positions, NULL);
}

i64 req_touch_prefix(Sim *s, i64 j, i64 i, i64 n) {
    const KvPolicy *p = s->policy;
    n = kv_min(n, s->io->P[i]);
    if (p->tree == NULL) return req_cached_prefix(s, j, i, n);
    i64 *c = ctr(s, j);
    /* a split makes a node: count it as a call in the state's room (each has room for three) */
    if (c[state_out_of_room] != 0) return 0;
    if (c[max_pin_calls] >= 0 && c[pin_calls] + 1 > c[max_pin_calls]) {
        c[state_out_of_room] = 1;
        s->failed = 1;
        return 0;
    }
    i64 made = 0;
    i64 k = p->tree->touch_prefix(s->inst[j].state, policy_ids(s, j), s->io->offsets[i], n, &made);
    c[pin_calls] += made;
    return k;
}

void req_evict_ahead(Sim *s, i64 j, i64 blocks) {
    if (s->mode == MODE_RADIX_HYBRID) {
        sgh_make_room(s, j, blocks * s->bs);
        return;
    }
    if (s->policy->tree == NULL) return;
    s->policy->tree->evict_to_free(s->inst[j].state, blocks);
    drain(s, j);
}

i64 req_unheld_prefix(Sim *s, i64 j, i64 i, i64 k) {
    return kv_unheld_prefix(s->policy, s->inst[j].state, policy_ids(s, j), s->io->offsets[i], k);
}

/* ---- held whole, or chunk by chunk through pin_request ---- */

/* Hold positions [0, want) of request i, its hit prefix (at most max_hits blocks: negative, no
 * bound) counted at its start: -1 when they do not fit now (nothing held), else its hit tokens;
 * *hit_blocks through the tiers. */
static i64 start_positions(Sim *s, i64 j, i64 i, i64 want, i64 max_hits, i64 *hit_blocks) {
    void *st = s->inst[j].state;
    KvHolds *h = (KvHolds *)st;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], target = s->target[i];
    if (!room(s, j, want)) return -1;
    int first = s->io->preemptions[i] == 0;
    i64 *row = first ? s->io->tier_hits + i * (s->T + 1) : NULL;
    KvStart r = kv_request_start(s->policy, st, s->T > 0 ? s->tiers : NULL, j, to_global(s, j), i, s->io->blocks,
                                 local_ids(s, j), start, start + want, target, s->bs, max_hits, s->io->handles, start + i,
                                 s->tier_scratch, row);
    if (r.refused) {
        if (r.held > 0) {
            s->policy->unpin_request(st, i, ids, start, start + want, target, s->bs, s->io->handles, start + i, r.held);
            drain(s, j);
        }
        if (s->res_bits != NULL) settle(s, j, i, 0, want);
        return -1;
    }
    if (s->res_bits != NULL) settle(s, j, i, 0, want);  /* (kv_request_start drains the tiers itself) */
    (void)h;
    s->load_s[i] += r.load_s;
    s->base_len[i] = want;
    s->base_input[i] = target;
    s->base_n[i] = r.held;
    s->dec_pinned[i] = 0;
    *hit_blocks = r.reach;
    return kv_min(r.reach * s->bs, target);
}

/* block-level policies: do `positions` positions of request i fit beside the held blocks? (so a
 * request that must wait touches nothing) */
static int fits(Sim *s, i64 j, i64 i, i64 from, i64 to) {
    if (!s->precheck) return 1;
    KvHolds *h = (KvHolds *)s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], unheld = 0;
    for (i64 q = from; q < to; q++) unheld += h->pins[ids[start + q]] == 0;
    return h->hold[HELD] + unheld <= s->capacity;
}

/* ---- vLLM's pool, chunk by chunk ---- */

/* Give the blocks of request i that its first `tokens` tokens fill their hashes. */
static void paged_cache_full(Sim *s, i64 j, i64 i, i64 tokens) {
    const KvPaged *pool = s->policy->paged;
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i];
    i64 full = kv_min(kv_min(tokens, s->target[i]), kv_tokens(s, i, s->target[i])) / s->bs;
    full = kv_min(full, s->base_len[i]);
    i64 from = s->base_n[i];
    for (i64 q = from; q < full; q++) {
        s->io->handles[start + i + q] = pool->cache(st, ids[start + q]);
        if (s->T > 0) kv_tier_entered(s->tiers, j, s->io->blocks[start + q]);  /* it is in HBM now */
    }
    if (full > s->base_n[i]) s->base_n[i] = full;
    /* the step's evictions go down only now: a block this step evicted and cached again stays in
     * HBM alone, as in the sequential replay (engine/tiers/replay.c drains after the access) */
    settle(s, j, i, from, kv_max(from, full));
}

/* vLLM's admission of request i for at most `budget` tokens this step: the whole sequence must
 * fit (its blocks beyond the hit, plus the hit blocks sitting in the free queue), then it holds its
 * hit blocks and the blocks of this step's tokens. Returns the tokens it computes this step, 0
 * when it must wait (chunked prefill off and too few tokens left), -1 when it does not fit. */
static i64 paged_admit(Sim *s, i64 j, i64 i, i64 budget, int partial) {
    const KvPaged *pool = s->policy->paged;
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], bs = s->bs, N = s->target[i];
    i64 positions = s->io->offsets[i + 1] - start;
    i64 reach;
    i64 k = probe(s, j, i, positions, &reach);
    if (s->io->cfg[SPEC_EAGLE_DROP] && !s->kv_in[i] && reach > 0) {
        /* EAGLE and MTP drafters recompute the hit's last block (single_type_kv_cache_manager.py
         * 829-830: drop_eagle_block; config/speculative.py:2122-2149 use_eagle_block_drop) */
        reach -= 1;
        k = kv_min(k, reach);
    }
    /* (< N: vLLM's limit leaves the last token); a request whose KV came from a prefill instance
     * has all but its next token */
    i64 hit = s->kv_in[i] ? N - 1 : reach * bs;
    i64 want = N - hit;
    if (!partial && want > budget) return 0;
    i64 n = kv_min(want, budget);
    i64 evictable = pool->evictable(st, ids, start, k);
    if (kv_ceil_div(kv_tokens(s, i, N), bs) - k + evictable > pool->free_blocks(st)) return -1;
    /* (and the drafter's lookahead slots: allocate_slots' num_lookahead_tokens, scheduler.py:1403-1440,
     * which must fit too: kv_cache_manager.py:550-588, beside the whole sequence's check above) */
    i64 blocks_now = kv_ceil_div(kv_tokens(s, i, hit + n + s->io->cfg[SPEC_LOOKAHEAD]), bs);
    if (blocks_now - k + evictable > pool->free_blocks(st)) return -1;
    int first = s->io->preemptions[i] == 0;
    if (s->T > 0) {
        /* the blocks found in the tiers are loaded: touch them there, as the scan that admits does */
        kv_tier_prefix(s->policy, st, s->tiers, j, s->io->blocks, local_ids(s, j), start, k,
                       s->policy->hit_limit(st, positions, N, bs), s->tier_scratch, 1);
    }
    pool->touch(st, ids, start, k, s->io->handles, start + i);
    pool->allocate(st, blocks_now - k);
    s->base_len[i] = blocks_now;
    s->base_n[i] = k;
    s->base_input[i] = N;
    s->dec_pinned[i] = 0;
    if (s->T > 0)  /* the load time of what the tiers hold (those blocks leave them when cached, below) */
        s->load_s[i] += kv_tier_admitted(s->tiers, j, s->io->blocks, start, k, k, s->tier_scratch,
                                         first ? s->io->tier_hits + i * (s->T + 1) : NULL);
    req_started(s, j, i, hit, reach);
    paged_cache_full(s, j, i, s->computed[i] + n);
    return n;
}

static int paged_grow(Sim *s, i64 j, i64 i, i64 tokens) {
    const KvPaged *pool = s->policy->paged;
    void *st = s->inst[j].state;
    i64 need = kv_ceil_div(kv_tokens(s, i, tokens), s->bs) - s->base_len[i];
    if (need > pool->free_blocks(st)) return 0;
    if (need > 0) {
        pool->allocate(st, need);
        s->base_len[i] += need;
        i64 decode_from = kv_max(s->base_len[i] - need, s->io->P[i]);
        if (s->base_len[i] > decode_from) ctr(s, j)[decode_blocks] += s->base_len[i] - decode_from;
    } else if (kv_min(tokens, s->target[i]) / s->bs <= s->base_n[i]) {
        return 1;  /* no block filled, none allocated: nothing to cache or drain */
    }
    paged_cache_full(s, j, i, tokens);  /* (it drains the evictions) */
    return 1;
}

/* ---- the SGLang style's tree (req_tree_held) ---- */

/* The key of request i's first n pages as its tree has them: its ids, but the page its prompt
 * ends inside (filled by its outputs: no other request has those tokens) its own, -(1 + i) */
static const i32 *tree_key(Sim *s, i64 j, i64 i, i64 n) {
    const i32 *ids = policy_ids(s, j) + s->io->offsets[i];
    i64 partial = s->io->L[i] % s->bs != 0 ? s->io->L[i] / s->bs : -1;
    if (partial < 0 || partial >= n) return ids;
    memcpy(s->key_scratch, ids, (size_t)n * sizeof(i32));
    s->key_scratch[partial] = (i32)(-(1 + i));
    return s->key_scratch;
}

/* A checkpoint of request i (checkpoint_kv_cache after a prefill step, release_kv_cache(checkpoint=
 * True) when it finishes): the whole pages of its tokens in KV enter the tree (radix_cache.py
 * checkpoint, _insert_cache; its path is stamped even when none is new), its lock moves to their
 * end, and the pages of its own the tree now has are freed (duplicates too). */
static void tree_checkpoint(Sim *s, i64 j, i64 i) {
    i64 n = kv_max(kv_min(kv_tokens(s, i, s->computed[i]) / s->bs, s->base_len[i]), s->base_n[i]);
    if (s->failed || (n > s->base_n[i] && !room(s, j, n - s->base_n[i]))) return; /* (none new: it stamps its path) */
    void *st = s->inst[j].state;
    s->policy->tree->checkpoint(st, tree_key(s, j, i, n), n, s->io->handles, s->io->offsets[i] + i);
    s->policy->tree->free_pages(st, n - s->base_n[i]);
    s->base_n[i] = n;
    settle(s, j, i, 0, n);
}

void req_prefilled(Sim *s, i64 j, i64 i) {
    if (req_tree_held(s)) tree_checkpoint(s, j, i);
}

/* Request i finished on instance j: under the SGLang style its tree first takes the whole pages of
 * its prompt and outputs (every output but the last is in KV), the ones past its path as a leaf
 * below it; then it is released. */
void req_finish(Sim *s, i64 j, i64 i) {
    if (req_tree_held(s)) tree_checkpoint(s, j, i);
    req_release(s, j, i);
}

/* Request i starts on instance j under the SGLang style (req_tree_held): its scan (at most
 * max_hits blocks: negative, no bound) locks its match, and it holds its pages up to `tokens`
 * tokens (its first chunk's end, or its whole sequence); the room for them is evicted once for
 * the whole prefill batch (req_batch_room). 0 when they can never fit beside what is held. */
static int tree_start(Sim *s, i64 j, i64 i, i64 max_hits, i64 tokens) {
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], target = s->target[i], bs = s->bs;
    i64 limit = s->policy->hit_limit(st, req_needed_positions(s, i, target), target, bs);
    if (max_hits >= 0 && max_hits < limit) limit = max_hits;
    i64 k = 0;
    while (k < limit && s->policy->resident(st, ids[start + k])) k++;
    if (s->kv_in[i]) tokens = target;
    i64 pages = kv_max(kv_ceil_div(kv_tokens(s, i, tokens), bs), k);
    s->io->handles[start + i] = 0;
    if (s->policy->tree->hold_request(st, k, pages, s->io->handles, start + i) == 0) {
        drain(s, j);
        return 0;
    }
    drain(s, j);
    s->base_n[i] = k;
    s->base_len[i] = pages;
    s->base_input[i] = target;
    s->dec_pinned[i] = 0;
    req_started(s, j, i, kv_min(k * bs, target), k);
    if (s->computed[i] > k * bs) tree_checkpoint(s, j, i); /* (its KV came from a prefill instance) */
    return 1;
}

/* the next chunk of request i: its pages up to `tokens` tokens (0: they do not fit; the room for
 * them is evicted with the batch's, req_batch_room) */
int req_extend(Sim *s, i64 j, i64 i, i64 tokens) {
    if (!req_tree_held(s)) return 1; /* (held whole from its admission) */
    i64 more = kv_ceil_div(kv_tokens(s, i, tokens), s->bs) - s->base_len[i];
    if (more <= 0) return 1;
    if (!s->policy->tree->hold_pages(s->inst[j].state, more)) return 0;
    s->base_len[i] += more;
    return 1;
}

/* A prefill batch of `requests` requests was formed: the allocator evicts once for all their new
 * pages and a page each (allocation.py alloc_paged_token_slots_extend, conservative_num_tokens;
 * allocator/base.py evict_to_free_tokens), after the batch's admissions locked their matches */
void req_batch_room(Sim *s, i64 j, i64 requests) {
    if (req_tree_held(s) && requests > 0) req_evict_ahead(s, j, requests);
}

/* ---- what the schedulers call ---- */

i64 req_admit(Sim *s, i64 j, i64 i, i64 budget, int partial) {
    if (s->mode == MODE_PAGED || s->mode == MODE_HYBRID) {
        i64 n = s->mode == MODE_PAGED ? paged_admit(s, j, i, budget, partial) : hyb_admit(s, j, i, budget, partial);
        if (n < 0) ctr(s, j)[refused_admissions] += 1;
        return n > 0 ? n : 0;
    }
    i64 target = s->target[i];
    i64 reach;
    i64 full = req_needed_positions(s, i, target);
    probe(s, j, i, full, &reach);
    i64 hit = kv_min(reach * s->bs, target);
    i64 computed = hit < target && !s->kv_in[i] ? hit : target - 1;
    i64 want = target - computed;
    if (!partial && want > budget) return 0;
    i64 n = kv_min(want, budget);
    i64 hit_blocks = 0;
    i64 got = -1;
    if (fits(s, j, i, 0, full)) {
        i64 now = s->mode == MODE_PIECEWISE ? kv_max(req_needed_positions(s, i, computed + n), reach) : full;
        got = start_positions(s, j, i, kv_min(now, full), -1, &hit_blocks);
    }
    if (got < 0) {
        ctr(s, j)[refused_admissions] += 1;
        return 0;
    }
    req_started(s, j, i, got, hit_blocks);
    return kv_min(target - s->computed[i], budget);
}

i64 req_schedule(Sim *s, i64 j, i64 i, i64 max_hits, i64 tokens) {
    if (req_tree_held(s)) {
        if (tree_start(s, j, i, max_hits, tokens)) return 1;
        ctr(s, j)[refused_admissions] += 1;
        return 0;
    }
    i64 target = s->target[i];
    i64 full = req_needed_positions(s, i, target), hit_blocks = 0;
    i64 got = fits(s, j, i, 0, full) ? start_positions(s, j, i, full, max_hits, &hit_blocks) : -1;
    if (got < 0) {
        ctr(s, j)[refused_admissions] += 1;
        return 0;
    }
    req_started(s, j, i, got, hit_blocks);
    return 1;
}

int req_grow(Sim *s, i64 j, i64 i, i64 tokens) {
    if (s->mode == MODE_PAGED) return paged_grow(s, j, i, tokens);
    if (s->mode == MODE_RADIX_HYBRID) return sgh_decode(s, j, i); /* (the SGLang style grows by decode tokens) */
    if (s->mode == MODE_HYBRID) return hyb_grow(s, j, i, tokens);
    void *st = s->inst[j].state;
    KvHolds *h = (KvHolds *)st;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], want = req_needed_positions(s, i, tokens);
    if (s->mode == MODE_PIECEWISE) {
        i64 from = s->base_len[i];
        if (from >= want) return 1;
        if (!fits(s, j, i, from, want) || !room(s, j, want - from)) return 0;
        i64 refusals = h->hold[REFUSALS];
        i64 n = s->policy->pin_request(st, i, ids, start + from, start + want, 0, s->target[i], s->bs, s->io->handles,
                                       start + i + from);
        settle(s, j, i, from, want);
        s->base_n[i] += n;
        s->base_len[i] = from + n;
        if (h->hold[REFUSALS] != refusals) return 0;
        i64 decode_from = kv_max(from, s->io->P[i]);
        if (want > decode_from) ctr(s, j)[decode_blocks] += want - decode_from;
        return 1;
    }
    if (req_tree_held(s)) { /* its own pages, one at a time */
        want = kv_ceil_div(kv_tokens(s, i, tokens), s->bs);
        while (s->base_len[i] < want) {
            if (h->hold[HELD] >= s->capacity) return 0;
            s->policy->tree->evict_to_free(st, 1 + (s->bs > 1)); /* (its shortfall and a page, as pin_request) */
            if (!s->policy->tree->hold_pages(st, 1)) return 0;
            drain(s, j);
            s->base_len[i] += 1;
            if (s->base_len[i] > s->io->P[i]) ctr(s, j)[decode_blocks] += 1;
        }
        return 1;
    }
    /* WHOLE: decode blocks one at a time */
    while (s->base_len[i] + s->dec_pinned[i] < want) {
        if (h->hold[HELD] >= s->capacity) return 0;
        i64 q = s->base_len[i] + s->dec_pinned[i];
        if (!room(s, j, 1)) return 0;
        i64 refusals = h->hold[REFUSALS];
        s->policy->pin_request(st, i, ids, start + q, start + q + 1, 0, s->bs, s->bs, s->io->handles, start + i + q);
        settle(s, j, i, q, q + 1);
        if (h->hold[REFUSALS] != refusals) return 0;
        s->dec_pinned[i] += 1;
        ctr(s, j)[decode_blocks] += 1;
    }
    return 1;
}

void req_release(Sim *s, i64 j, i64 i) {
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], base = start + i;
    if (s->mode == MODE_HYBRID) {
        hyb_release(s, j, i);
    } else if (s->mode == MODE_RADIX_HYBRID) {
        sgh_release(s, j, i);
    } else if (s->mode == MODE_PAGED) {
        s->policy->paged->release(st, s->io->handles, base, s->base_n[i], s->base_len[i] - s->base_n[i]);
    } else if (req_tree_held(s)) {
        if (s->base_len[i] > 0) {
            s->policy->tree->free_pages(st, s->base_len[i] - s->base_n[i]);
            s->policy->tree->release(st, s->io->handles, base);
        }
    } else {
        /* its decode singles tail first, then its admitted range */
        for (i64 q = s->base_len[i] + s->dec_pinned[i] - 1; q >= s->base_len[i]; q--)
            s->policy->unpin_request(st, i, ids, start + q, start + q + 1, s->bs, s->bs, s->io->handles, base + q, 1);
        s->policy->unpin_request(st, i, ids, start, start + s->base_len[i], s->base_input[i], s->bs, s->io->handles,
                                 base, s->base_n[i]);
    }
    /* (ttl may expire released blocks; a policy may cache a request's blocks as it releases them) */
    if (s->mode == MODE_PAGED) drain(s, j);
    else settle(s, j, i, 0, s->base_len[i] + s->dec_pinned[i]);
    s->dec_pinned[i] = 0;
    s->base_n[i] = 0;
    s->base_len[i] = 0;
}

void req_store(Sim *s, i64 j, i64 i) {
    if (s->policy->store_request == NULL || s->mode != MODE_WHOLE) return;
    i64 start = s->io->offsets[i];
    s->policy->store_request(s->inst[j].state, i, policy_ids(s, j), start, start + s->base_len[i], s->base_input[i],
                             s->bs, s->io->handles, start + i, s->base_n[i]);
    drain(s, j);
}

i64 req_held(const Sim *s, i64 j) {
    if (s->mode == MODE_RADIX_HYBRID) return sgh_held(s, j);
    return s->mode == MODE_HYBRID ? hyb_held(s, j) : ((KvHolds *)s->inst[j].state)->hold[HELD];
}

i64 req_take_back(Sim *s, i64 j, i64 v) {
    i64 given = s->new_tokens[v];
    s->new_tokens[v] = 0;
    if (s->mode == MODE_RADIX_HYBRID) sgh_drop(s, j, v); /* (release_kv_cache(checkpoint=False)) */
    else req_release(s, j, v);
    s->computed[v] = 0;
    s->decoding[v] = 0;
    s->target[v] = s->io->L[v] + s->generated[v];
    s->io->status[v] = WAITING;
    s->io->preemptions[v] += 1;
    ctr(s, j)[preemptions] += 1;
    return given;
}
