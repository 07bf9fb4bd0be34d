/* The SGLang scheduler style (docs/engines.md, "SGLang" cites sglang/srt/managers/scheduler.py and
 * schedule_policy.py's PrefillAdder): a prefill batch when one can be formed (decodes pause), else
 * a decode batch. The prefill batch continues the prompt being chunked, then adds waiting
 * requests (longest cached prefix first when few wait, else first come first served) while the
 * pool's room, after reserving the running requests' outputs at the new-token ratio, the chunk
 * size and the prefill token budget allow. A decode batch retracts requests (fewest generated
 * tokens first, the longest prompt on ties) while a decoding request finds no block. */
#include "route.h"
#include "sim.h"

/* Stable insertion sort of order[:count] by key[order[q]], largest first. */
static void sort_by_key_desc(i64 *order, i64 count, const i64 *key) {
    for (i64 a = 1; a < count; a++) {
        i64 v = order[a], b = a - 1;
        while (b >= 0 && key[order[b]] < key[v]) {
            order[b + 1] = order[b];
            b--;
        }
        order[b + 1] = v;
    }
}

/* The pages a prompt still to compute shares with the ones in flight (Pending: requests admitted
 * in this pass and the one being chunked), with tiers. SGLang matches a prefix against its tree,
 * which a page enters once computed (batch_result_processor.py checkpoint_kv_cache); so does
 * kvreplay's without tiers (requests.c req_tree_held), but with tiers its tree holds an admitted
 * prompt whole. So there a prefix of k pages is cut at the first page a request in flight has
 * still to compute (prompts share positions: ids are chained). */
typedef struct {
    i64 chunk;      /* the request being chunked when the pass began, or -1 */
    i64 first_new;  /* the pass's admissions: the running list from here on */
} Pending;

/* the pages request i shares with request r (at most k) */
static i64 shared_pages(Sim *s, i64 i, i64 r, i64 k) {
    const i64 *off = s->io->offsets;
    const i32 *ids = s->io->blocks;
    i64 n = kv_min(k, kv_min(off[r + 1] - off[r], off[i + 1] - off[i])), q = 0;
    while (q < n && ids[off[i] + q] == ids[off[r] + q]) q++;
    return q;
}

/* k cut at the first page request r has still to compute, if i shares the pages up to it and no
 * other request computed them: `covered`, the prefix of i some running request has computed
 * (two requests can hold the same uncomputed pages: parallel sampling's samples, admitted while
 * an earlier one of them is being chunked; SGLang's tree has a page once either computed it) */
static i64 cut_at(Sim *s, i64 i, i64 r, i64 k, i64 covered) {
    i64 from = kv_max(s->computed[r] / s->bs, covered);
    if (from >= k) return k;
    return shared_pages(s, i, r, k) > from ? from : k;
}

/* the first pages of request i (at most k) that another running request shares and has computed */
static i64 covered_pages(Sim *s, i64 j, i64 i, i64 k) {
    Inst *q = &s->inst[j];
    i64 covered = 0;
    for (i64 r = 0; r < q->nrun; r++) {
        i64 o = q->running[r];
        if (o != i) covered = kv_max(covered, kv_min(shared_pages(s, i, o, k), s->computed[o] / s->bs));
    }
    return covered;
}

static i64 cut_by_pending(Sim *s, i64 j, i64 i, i64 k, const Pending *p, i64 covered) {
    Inst *q = &s->inst[j];
    if (p->chunk >= 0) k = cut_at(s, i, p->chunk, k, covered);
    for (i64 r = p->first_new; r < q->nrun; r++) k = cut_at(s, i, q->running[r], k, covered);
    return k;
}

static i64 computed_prefix(Sim *s, i64 j, i64 i, i64 k, const Pending *p) {
    if (req_tree_held(s)) return k; /* (its tree has computed pages only, as SGLang's) */
    i64 cut = cut_by_pending(s, j, i, k, p, 0);
    if (cut == k) return k;
    i64 covered = covered_pages(s, j, i, k); /* (only where a request in flight cuts it) */
    return covered > cut ? cut_by_pending(s, j, i, k, p, covered) : cut;
}

/* request i's cached prefix (blocks) as SGLang's tree has it; *cut: where a request in flight cut
 * it (-1: nowhere) */
static i64 tree_prefix(Sim *s, i64 j, i64 i, const Pending *p, i64 *cut) {
    i64 k = req_cached_prefix(s, j, i, -1);
    i64 seen = computed_prefix(s, j, i, k, p);
    *cut = -1;
    if (seen < k) {
        k = req_cached_prefix(s, j, i, seen);  /* the scan ends there: req_unheld_prefix looks at it */
        *cut = seen;
    }
    return k;
}

/* match_prefix of waiting request i's whole sequence (prompt and outputs, whole pages), which
 * stamps its path */
static i64 touch_waiting(Sim *s, i64 j, i64 i, const Pending *p) {
    if (s->mode == MODE_RADIX_HYBRID) return sgh_touch(s, j, i); /* (its tree holds computed pages only) */
    i64 n = s->target[i] / s->bs;
    return req_touch_prefix(s, j, i, computed_prefix(s, j, i, n, p));
}

enum {
    IN_BATCH_PREFIX_TOKENS = 32,  /* IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = ..._DEPRIORITIZE_THRESHOLD */
    WAITING_QUEUE_PREFIX_MATCH_MAX = 128,
    WAITING_PREFIX_REFRESH_INTERVAL = 32,
};

/* Does request i share its first IN_BATCH_PREFIX_TOKENS tokens with request r? (ids are per
 * block: the blocks that hold them, with both sequences that long) */
static int shares_short_prefix(Sim *s, i64 i, i64 r) {
    i64 m = kv_ceil_div(IN_BATCH_PREFIX_TOKENS, s->bs);
    const i64 *off = s->io->offsets;
    if (s->target[i] < IN_BATCH_PREFIX_TOKENS || s->target[r] < IN_BATCH_PREFIX_TOKENS) return 0;
    if (off[i + 1] - off[i] < m || off[r + 1] - off[r] < m) return 0;
    for (i64 q = 0; q < m; q++)
        if (s->io->blocks[off[i] + q] != s->io->blocks[off[r] + q]) return 0;
    return 1;
}

/* lpm (SchedulePolicy._compute_prefix_matches, _sort_by_longest_prefix): every waiting request is
 * matched in queue order; one whose cached prefix is at most IN_BATCH_PREFIX_TOKENS and that shares
 * that many tokens with an earlier such request goes last (in-batch prefix caching: the first one
 * will cache them); the others sort by their prefix, longest first (stable). */
static void longest_prefix_first(Sim *s, i64 j, const Pending *p) {
    Inst *q = &s->inst[j];
    i64 count = 0;
    for (i64 i = q->qhead; i >= 0; i = s->qnext[i]) {
        i64 k = touch_waiting(s, j, i, p);
        s->lpm_key[i] = k;
        if (k * s->bs <= IN_BATCH_PREFIX_TOKENS)
            for (i64 a = 0; a < count; a++) {
                i64 r = s->order[a];  /* in the waiting tree: matched short, not put last */
                if (s->lpm_key[r] >= 0 && s->lpm_key[r] * s->bs <= IN_BATCH_PREFIX_TOKENS && shares_short_prefix(s, i, r)) {
                    s->lpm_key[i] = -1;
                    break;
                }
            }
        s->order[count++] = i;
    }
    sort_by_key_desc(s->order, count, s->lpm_key);
    q->qhead = q->qtail = -1;
    q->qlen = 0;
    for (i64 k = 0; k < count; k++) queue_push_back(s, q, s->order[k]);
}

/* SchedulePolicy.calc_priority: lpm while at most LPM_FCFS_ABOVE wait, else first come first
 * served, when every WAITING_PREFIX_REFRESH_INTERVAL-th pass touches the first
 * WAITING_QUEUE_PREFIX_MATCH_MAX waiting sequences, the head last (_touch_waiting_prefixes). */
static void calc_priority(Sim *s, i64 j, const Pending *p) {
    Inst *q = &s->inst[j];
    if (q->qlen == 0) return;
    if (s->io->cfg[LPM] != 0 && q->qlen <= s->io->cfg[LPM_FCFS_ABOVE]) {
        longest_prefix_first(s, j, p);
        return;
    }
    if (q->refresh_calls++ % WAITING_PREFIX_REFRESH_INTERVAL != 0) return;
    i64 count = 0;
    for (i64 i = q->qhead; i >= 0 && count < WAITING_QUEUE_PREFIX_MATCH_MAX; i = s->qnext[i]) s->order[count++] = i;
    for (i64 a = count - 1; a >= 0; a--) touch_waiting(s, j, s->order[a], p);
}

/* what a request may still decode, as the budget counts it (at most CLIP_MAX_NEW; a prefill-only
 * request's max_new_tokens is 0: nothing) */
static inline i64 reserved(Sim *s, i64 i) {
    if (s->prefill_only[i]) return 0;
    i64 left = s->outputs[i] - s->generated[i], clip = s->io->cfg[CLIP_MAX_NEW];
    return left < clip ? left : clip;
}

/* what an admitted prompt's last chunk reserves for its outputs (min(max_new_tokens, CLIP)) */
static inline i64 reserved_at_last_chunk(Sim *s, i64 i) {
    return s->prefill_only[i] ? 0 : kv_min(s->outputs[i], s->io->cfg[CLIP_MAX_NEW]);
}

/* One prefill pass's budgets (PrefillAdder, mem_cache/prefill_budget.py PrefillBudget):
 * rem_total is remaining_total, the pool's free and evictable tokens less what admitted requests
 * will still take; rem_chunk and rem_input the chunk size and the prefill token budget left. */
typedef struct {
    f64 rem_total;
    i64 rem_chunk, rem_input;
    int chunking;
    i64 window; /* MODE_RADIX_HYBRID with SWA: the window (SWAPrefillBudget), else 0 */
    f64 rem_swa; /* its remaining_swa: SWA free and evictable less the pass's reservations */
} Budget;

enum { CONTINUE, NO_TOKEN, OTHER };  /* AddReqResult */

static int budget_state(const Budget *b) {
    if (b->rem_total <= 0 || (b->window > 0 && b->rem_swa <= 0)) return NO_TOKEN;
    if (b->rem_input <= 0) return OTHER;
    if (b->chunking && b->rem_chunk <= 0) return OTHER;
    return CONTINUE;
}

/* _update_prefill_budget: an admitted extend is charged in whole pages, plus a page of rounding
 * and the outputs it reserves. */
static void charge(Budget *b, i64 extend, i64 outputs, i64 bs) {
    i64 paged = sim_ceil_page(extend, bs);
    b->rem_total -= (f64)(paged + bs + outputs);
    b->rem_input -= paged;
    b->rem_chunk -= paged;
}

/* The pass's starting budget. With tiers kvreplay holds a chunked prompt whole from its first
 * chunk; SGLang has allocated only the pages of its computed tokens, so there the rest counts as
 * room here. */
static Budget start_budget(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const i64 *cfg = s->io->cfg;
    i64 bs = s->bs;
    Budget b = {0.0, 0, cfg[MAX_PREFILL], cfg[CHUNKED] != 0, 0, 0.0};
    if (s->mode == MODE_RADIX_HYBRID) { /* SWAPrefillBudget / PrefillBudget over the tree's pools */
        i64 room[ROOM_COLUMNS];
        sgh_room(s, j, room);
        b.rem_total = (f64)(room[ROOM_FULL_FREE] + room[ROOM_FULL_EVICTABLE]);
        b.window = sgh_window(s, j);
        b.rem_swa = (f64)(room[ROOM_SWA_FREE] + room[ROOM_SWA_EVICTABLE]);
    } else {
        b.rem_total = (f64)((s->capacity - ((KvHolds *)q->state)->hold[HELD]) * bs);
    }
    b.rem_chunk = b.chunking ? cfg[CHUNK_SIZE] : (i64)1 << 62;
    for (i64 r = 0; r < q->nrun; r++)
        if (q->running[r] != q->chunk_req) b.rem_total -= (f64)reserved(s, q->running[r]) * q->ratio;
    if (q->chunk_req >= 0 && s->mode != MODE_RADIX_HYBRID && !req_tree_held(s)) {
        /* (not the pages another running request computed: SGLang's tree holds them, for it) */
        i64 i = q->chunk_req, done = kv_ceil_div(s->computed[i], bs);
        if (done < s->base_len[i]) done = kv_max(done, covered_pages(s, j, i, s->base_len[i]));
        i64 ahead = s->base_len[i] - done;
        if (ahead > 0) b.rem_total += (f64)(ahead * bs);
    }
    return b;
}

/* add_chunked_req: the next chunk of the prompt being chunked, at most the chunk size and the
 * room left (it always makes progress). */
static void next_chunk_hybrid(Sim *s, i64 j, Budget *b);
static void abort_alone(Sim *s, i64 j, i64 i, i64 *r);

static void next_chunk(Sim *s, i64 j, Budget *b) {
    Inst *q = &s->inst[j];
    if (s->mode == MODE_RADIX_HYBRID) {
        next_chunk_hybrid(s, j, b);
        return;
    }
    i64 i = q->chunk_req, m = s->target[i] - s->computed[i];
    i64 room = kv_min(b->rem_chunk, (i64)b->rem_total);
    if (room <= 0) room = b->rem_chunk;
    int last = m <= room;
    if (!last) m = room;
    if (!req_extend(s, j, i, s->computed[i] + m)) return; /* (its pages do not fit: no chunk this pass) */
    if (last) q->chunk_req = -1;
    s->new_tokens[i] = m;
    charge(b, m, last ? reserved_at_last_chunk(s, i) : 0, s->bs);
}

/* add_one_req for the head of the queue: admits it (the whole prompt, or a first chunk of whole
 * pages) or says why not. *npre counts the batch's requests. */
static int add_one(Sim *s, i64 j, Budget *b, Pending *p, i64 *npre) {
    Inst *q = &s->inst[j];
    i64 bs = s->bs, i = q->qhead, cut;
    i64 k = tree_prefix(s, j, i, p, &cut);
    i64 unheld = req_unheld_prefix(s, j, i, k) * bs;  /* locked before the check (schedule_policy.py _lock_node) */
    i64 hit = kv_min(k * bs, s->target[i]);
    i64 extend = hit < s->target[i] ? s->target[i] - hit : 1;  /* (a block-level policy may hit it all) */
    i64 n = extend, outputs = reserved_at_last_chunk(s, i);
    int chunked = b->chunking && sim_ceil_page(extend, bs) > b->rem_chunk;
    if (chunked) n = (hit + b->rem_chunk / bs * bs) / bs * bs - hit;  /* whole pages, ending on a page */
    int res = CONTINUE;
    if (!((f64)(extend + reserved(s, i) + bs) < b->rem_total - (f64)unheld)) res = NO_TOKEN;
    /* without chunked prefill the first request may exceed the prefill budget */
    else if (!b->chunking && *npre > 0 && sim_ceil_page(extend, bs) >= b->rem_input) res = OTHER;
    else if (chunked && n <= 0) res = OTHER;
    if (res != CONTINUE) {
        req_touch_prefix(s, j, i, k);  /* it was matched (init_next_round_input) */
        return res;
    }
    if (chunked) outputs = 0;
    /* (its pages up to this pass's tokens; held whole, with tiers: it may not fit yet) */
    if (!req_schedule(s, j, i, cut, kv_min(hit + n, s->target[i]))) return OTHER;
    queue_pop_front(s, q);
    q->running[q->nrun++] = i;
    *npre += 1;
    s->new_tokens[i] = chunked ? n : s->target[i] - s->computed[i];
    if (chunked) q->chunk_req = i;
    b->rem_total -= (f64)unheld;
    charge(b, n, outputs, bs);
    return budget_state(b);
}

/* ---- MODE_RADIX_HYBRID: SGLang's hybrid trees, KV allocated chunk by chunk (sglang_hybrid.c) ---- */

/* estimate_swa_kv_tokens (prefill_budget.py): a request's peak SWA reservation; limit < 0: none */
static i64 swa_tokens(const Budget *b, i64 extend, i64 max_new, i64 limit, i64 bs) {
    if (b->window <= 0) return extend + max_new + bs;
    i64 allocated = limit < 0 ? extend : kv_min(extend, limit);
    return kv_max(allocated - b->window, 0) + kv_min(extend + max_new, b->window) + bs;
}

/* SWAPrefillBudget.check_prefill's SWA half: the chunk limit it allows (limit < 0: none), or -2
 * when the request must wait. A shortfall shrinks the chunk only when the request could never
 * fit the SWA pool (_chunk_cap); transient pressure waits. */
static i64 swa_check(Sim *s, i64 j, const Budget *b, i64 extend, i64 max_new, i64 limit, f64 unheld_swa) {
    i64 bs = s->bs;
    f64 rem = b->rem_swa - unheld_swa;
    i64 needed = swa_tokens(b, sim_ceil_page(extend, bs), max_new, limit, bs);
    if ((f64)needed < rem) return limit;
    if (needed < sgh_swa_pages(s, j) * bs) return -2;
    i64 cap = ((i64)rem - swa_tokens(b, 0, max_new, -1, bs)) / bs * bs;
    if (limit < 0 || cap <= 0) return -2;
    return kv_min(limit, cap);
}

/* add_one_req (the no-host-hit path of _select_prefill_admission): the head of the queue is
 * matched and locked, checked against the budgets with its lock's effect on what is evictable, and
 * admitted (its first chunk's KV comes with the batch's: prefill_batch), or unlocked. */
static int add_one_hybrid(Sim *s, i64 j, Budget *b, i64 *npre) {
    Inst *q = &s->inst[j];
    i64 bs = s->bs, i = q->qhead, before[ROOM_COLUMNS], after[ROOM_COLUMNS];
    sgh_room(s, j, before);
    i64 hit = sgh_begin(s, j, i);
    if (hit < 0) return s->failed ? OTHER : NO_TOKEN; /* no state slot for its copy-on-write */
    sgh_room(s, j, after);
    f64 unheld = (f64)(before[ROOM_FULL_EVICTABLE] - after[ROOM_FULL_EVICTABLE]);
    f64 unheld_swa = (f64)(before[ROOM_SWA_EVICTABLE] - after[ROOM_SWA_EVICTABLE]);
    i64 extend = s->target[i] - hit, max_new = reserved(s, i);
    i64 limit = b->chunking ? b->rem_chunk : -1;
    int res = CONTINUE;
    if (!((f64)(extend + max_new + bs) < b->rem_total - unheld)) res = NO_TOKEN;
    else if (b->window > 0 && (limit = swa_check(s, j, b, extend, max_new, limit, unheld_swa)) == -2) res = NO_TOKEN;
    else if (!b->chunking && *npre > 0 && sim_ceil_page(extend, bs) >= b->rem_input) res = OTHER;
    i64 n = extend;
    int chunked = res == CONTINUE && limit >= 0 && sim_ceil_page(extend, bs) > limit;
    if (chunked) {
        n = (hit + limit / bs * bs) / bs * bs - hit;
        if (n <= 0) res = OTHER;
    }
    if (res != CONTINUE) {
        sgh_drop(s, j, i);
        if (res == NO_TOKEN) q->counters[refused_admissions] += 1;
        return res;
    }
    queue_pop_front(s, q);
    q->running[q->nrun++] = i;
    *npre += 1;
    req_started(s, j, i, hit, hit / bs);
    s->new_tokens[i] = n;
    if (chunked) q->chunk_req = i;
    b->rem_total -= unheld;
    b->rem_swa -= unheld_swa + (f64)swa_tokens(b, sim_ceil_page(n, bs), max_new, limit, bs);
    charge(b, n, chunked ? 0 : reserved_at_last_chunk(s, i), bs);
    return budget_state(b);
}

/* add_chunked_req: the next chunk, at most what the budgets allow (available_chunk_tokens: none
 * this pass when the SWA pool has less than a page to spare); its KV comes with the batch's */
static void next_chunk_hybrid(Sim *s, i64 j, Budget *b) {
    Inst *q = &s->inst[j];
    i64 i = q->chunk_req, bs = s->bs, m = s->target[i] - s->computed[i];
    i64 room = kv_min(b->rem_chunk, (i64)b->rem_total);
    if (b->window > 0) room = kv_min(room, (i64)b->rem_swa - bs);
    else if (room <= 0) room = b->rem_chunk;
    if (room <= 0 && q->nrun == 1) abort_alone(s, j, i, NULL); /* (rem_swa counts what is evictable) */
    if (room <= 0) return;
    int last = m <= room;
    if (!last) m = room;
    if (last) q->chunk_req = -1;
    s->new_tokens[i] = m;
    b->rem_swa -= (f64)swa_tokens(b, sim_ceil_page(m, bs), last ? reserved_at_last_chunk(s, i) : 0, -1, bs);
    charge(b, m, last ? reserved_at_last_chunk(s, i) : 0, bs);
}

/* The prefill batch (get_new_batch_prefill); returns the requests in it. */
static i64 prefill_batch(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const i64 *cfg = s->io->cfg;
    i64 running = q->nrun - (q->chunk_req >= 0), npre = 0;
    /* with a sliding-window pool SGLang clears the flag at every pass, so a refused request is
     * tried again at once (_get_new_batch_prefill_raw, scheduler.py:4090-4092: is_hybrid_swa);
     * else only an empty batch clears it here */
    if (running == 0 || (s->mode == MODE_RADIX_HYBRID && sgh_window(s, j) > 0)) q->batch_full = 0;
    if (q->chunk_req < 0) {
        if (q->batch_full || q->qlen == 0) return 0;
        if (running >= cfg[MAX_SEQS]) {
            q->batch_full = 1;
            return 0;
        }
    }
    Pending pending = {q->chunk_req, q->nrun};
    calc_priority(s, j, &pending);
    Budget b = start_budget(s, j);
    i64 was = q->chunk_req;
    if (q->chunk_req >= 0) {
        next_chunk(s, j, &b);
        npre += s->new_tokens[was] > 0;
    }
    i64 first_new = q->nrun; /* (after next_chunk: it may abort the request) */
    while (q->qlen > 0 && budget_state(&b) != OTHER) {
        if (q->nrun >= cfg[MAX_SEQS]) {
            q->batch_full = 1;
            break;
        }
        if (q->batch_full) break;
        int res = s->mode == MODE_RADIX_HYBRID ? add_one_hybrid(s, j, &b, &npre) : add_one(s, j, &b, &pending, &npre);
        if (res == CONTINUE) continue;
        if (res == NO_TOKEN) q->batch_full = npre > 0 || running > 0;
        break;
    }
    req_batch_room(s, j, npre); /* (its tree without tiers: requests.c) */
    if (s->mode == MODE_RADIX_HYBRID && npre > 0) {
        /* the batch: the continuing chunk first, then the admitted requests (can_run_list) */
        i64 *batch = s->batch_scratch, n = 0;
        if (was >= 0 && s->new_tokens[was] > 0) batch[n++] = was;
        for (i64 k = first_new; k < q->nrun; k++) batch[n++] = q->running[k];
        if (!sgh_allocate_batch(s, j, batch, n)) return 0;
    }
    return npre;
}

/* Retract one decoding request of instance j for a request that found no block: the fewest
 * generated tokens first, the longest prompt on ties, the last admitted of equals (SGLang pops
 * the end of a stable sort), never the last one; it waits at the back
 * of the queue. Returns it, or -1 when none may go. *r: the caller's place in the running list. */
static i64 retract(Sim *s, i64 j, i64 *r) {
    Inst *q = &s->inst[j];
    i64 v = -1;
    for (i64 k = 0; k < q->nrun; k++) {
        i64 u = q->running[k];
        if (!s->decoding[u]) continue;
        if (v < 0 || s->generated[u] < s->generated[v]
            || (s->generated[u] == s->generated[v] && s->io->L[u] >= s->io->L[v]))
            v = u;
    }
    if (v < 0 || q->nrun <= 1) return -1;
    req_take_back(s, j, v);
    queue_push_back(s, q, v);
    i64 w = 0;
    for (i64 k = 0; k < q->nrun; k++) {
        if (q->running[k] != v) q->running[w++] = q->running[k];
        else if (k < *r) *r -= 1;
    }
    q->nrun = w;
    return v;
}

/* A request alone on its instance that can never go on, its KV freed, nothing inserted; it counts
 * as rejected (and aborted). Only a hybrid model's sliding-window pool gets here (admission
 * reserves a full-attention request's outputs), two ways:
 * - decoding, the last request of the batch with no room even with every other one retracted:
 *   SGLang aborts it ("Out of memory even after retracting all other requests in the decode
 *   batch", ScheduleBatch.retract_decode, schedule_batch.py:3508-3520);
 * - a chunked prefill whose next chunk gets no SWA room (available_chunk_tokens is None,
 *   prefill_budget.py:274-278) with nothing else running to free any: SGLang would skip it at
 *   every pass for ever; the simulator aborts it to end the run.
 * r: the caller's place in the running list (NULL: none). */
static void abort_alone(Sim *s, i64 j, i64 i, i64 *r) {
    Inst *q = &s->inst[j];
    s->new_tokens[i] = 0;
    if (s->mode == MODE_RADIX_HYBRID) sgh_drop(s, j, i); /* (release_kv_cache(checkpoint=False)) */
    else req_release(s, j, i);
    s->decoding[i] = 0;
    s->io->status[i] = REJECTED;
    release_ended(s, i);
    q->counters[rejected] += 1;
    q->counters[aborted] += 1;
    q->view[V_REQUESTS] -= 1;
    if (s->router != NULL && s->router->kind->left != NULL) s->router->kind->left(s->router->state, s, i, j);
    i64 w = 0;
    for (i64 k = 0; k < q->nrun; k++) {
        if (q->running[k] != i) q->running[w++] = q->running[k];
        else if (r != NULL && k < *r) *r -= 1;
    }
    q->nrun = w;
    if (q->chunk_req == i) q->chunk_req = -1;
}

/* The decode batch: every decoding request feeds one token; then the new-token ratio moves. */
static void decode_batch(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    int retracted = 0;
    /* a page per decoding request is made free ahead, but not in the instant limit, which is the
     * sequential replay */
    if (s->mode == MODE_RADIX_HYBRID) {
        sgh_decode_prepare(s, j); /* (in the instant limit too: the sequential replay does the same) */
    } else if (s->io->cfg[ONE_AT_A_TIME] == 0) {
        i64 decoding = 0;
        for (i64 r = 0; r < q->nrun; r++) decoding += s->decoding[q->running[r]];
        req_evict_ahead(s, j, decoding);
    }
    for (i64 r = 0; r < q->nrun;) {
        i64 i = q->running[r];
        if (!s->decoding[i]) {
            r++;
            continue;
        }
        int ok = 1;
        while (!req_grow(s, j, i, s->computed[i] + 1)) {
            if (s->failed) return;
            i64 v = retract(s, j, &r);
            if (v < 0) {
                ok = 0;
                break;
            }
            retracted = 1;
            q->batch_full = 0;  /* a request left the running batch */
            if (v == i) {
                ok = 0;
                break;
            }
        }
        if (!ok) {
            if (s->io->status[i] == RUNNING && q->nrun <= 1) abort_alone(s, j, i, &r);
            else if (s->io->status[i] == RUNNING) r++; /* (no decoding request to retract: it waits) */
            continue;
        }
        s->new_tokens[i] = 1;
        r++;
    }
    const f64 *fcfg = s->io->fcfg;
    if (retracted) {
        i64 out_sum = 0, max_sum = 0;
        for (i64 k = 0; k < q->nrun; k++) {
            out_sum += s->generated[q->running[k]];
            max_sum += s->outputs[q->running[k]];
        }
        q->ratio = kv_fmin(((f64)out_sum + 20.0 * (f64)q->nrun) / ((f64)max_sum + 1.0), 1.0);
    } else {
        q->ratio = kv_fmax(q->ratio - fcfg[RATIO_DECAY], fcfg[RATIO_MIN]);
    }
}

void sglang_schedule(Sim *s, i64 j) {
    if (prefill_batch(s, j) == 0) decode_batch(s, j);
}
