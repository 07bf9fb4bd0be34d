/* A request's blocks under vLLM 0.33.0's hybrid KV cache manager (MODE_HYBRID: the vLLM style
 * with a hybrid model's layer groups). requests.c hands its admission, growth and release here;
 * docs/serving.md, "Hybrid layer groups", states the rules.
 *
 * Each instance has one pool (hybrid/coordinator.h, with reference counts: requests overlap), each
 * running request a block table per KV cache group. Its steps are allocate_slots
 * (kv_cache_manager.py:380-627):
 *
 * - admission (a waiting or preempted request, scheduler.py:1434 with
 *   full_sequence_must_fit): the coordinator's hit (hy_find_hit) for its num_tokens; then the
 *   whole sequence must fit, counted by get_num_blocks_to_allocate with the admission cap
 *   (sliding-window and chunked-local groups hold at most max_admission_blocks_per_request,
 *   from max_num_batched_tokens and max_model_len), and this step's slots must fit, counted
 *   without it; then the hit blocks are touched, the step's new blocks taken, and blocks cached;
 * - each later step: remove_skipped_blocks at the tokens computed so far (a window's blocks
 *   behind it are freed), then the step's slots (0 when they do not fit: the scheduler
 *   preempts), cached up to num_tokens;
 * - release (finished or preempted): every group's blocks, tail first.
 *
 * A Mamba group (align mode, MambaManager) holds one state block per step, the previous one
 * freed a step later; its prefill chunks end where the scheduler's _mamba_block_aligned_split
 * ends them (hyb_split: block aligned, at the last cacheable boundary and at the shared-prefix
 * junction), and a request whose hit state another request cached in this step waits a step.
 *
 * The block ids are the instance's (requests.c's policy_ids); generated tokens' blocks have ids
 * no prompt has, so only the request that made them hits them (after a preemption). */
#include <stdlib.h>

#include "../../hybrid/coordinator.h"
#include "ids.h"
#include "sim.h"

static inline const i32 *ids_of(const Sim *s, i64 j, i64 i) { return policy_ids(s, j) + s->io->offsets[i]; }

static inline i64 positions(const Sim *s, i64 i) { return s->io->offsets[i + 1] - s->io->offsets[i]; }

static void error(Sim *s, i64 j, int code) {
    s->inst[j].counters[hybrid_error] = code;
    s->failed = 1;
}

int hyb_setup(Sim *s) {
    const i64 *cfg = s->io->cfg, *g = s->io->groups; /* kinds, then copies, windows, chunks: S each */
    i64 S = cfg[HYBRID_GROUPS];
    s->pools = calloc((size_t)s->N, sizeof(HPool));
    s->hreqs = calloc((size_t)(s->n > 0 ? s->n : 1), sizeof(HReq));
    if (!s->pools || !s->hreqs) {
        error(s, 0, HY_NOMEM);
        return 0;
    }
    for (i64 q = 0; q < s->N; q++) {
        HPool *p = &s->pools[q];
        int rc = hy_pool_init(p, s->capacity, s->bs, kv_max(1, s->ids_cap[q]), S, g, g + S, g + 2 * S, g + 3 * S,
                              cfg[RETENTION], kv_max(1, cfg[MAX_BATCHED]), 1);
        if (rc) {
            error(s, q, rc);
            return 0;
        }
        p->in_flight = cfg[MAX_BATCHED]; /* max_concurrent_batches 1: one step's tokens */
        p->max_len = cfg[MAX_MODEL_LEN];
    }
    return 1;
}

void hyb_teardown(Sim *s) {
    if (s->pools == NULL || s->hreqs == NULL) { /* (its setup ran out of memory before any pool) */
        free(s->pools);
        free(s->hreqs);
        s->pools = NULL;
        s->hreqs = NULL;
        return;
    }
    for (i64 i = 0; i < s->n; i++)
        if (s->hreqs[i].g != NULL) hy_req_release(&s->pools[0], &s->hreqs[i]);
    for (i64 q = 0; q < s->N; q++)
        if (s->pools[q].blk != NULL) {
            hy_counters(&s->pools[q], s->io->hybrid_counters + q * HY_COUNTERS);
            hy_release(&s->pools[q]);
        }
    free(s->pools);
    free(s->hreqs);
    s->pools = NULL;
    s->hreqs = NULL;
}

void hyb_step_starts(Sim *s, i64 j) { hy_step_starts(&s->pools[j]); }

int hyb_mamba(const Sim *s) { return s->pools[0].has_mamba; }

i64 hyb_split(const Sim *s, i64 i, i64 start, i64 n) {
    return hy_mamba_split(s->bs, s->io->L[i], s->io->L[i] + s->generated[i], s->io->cfg[MAX_BATCHED],
                          s->hreqs[i].junction, start, n);
}

i64 hyb_admit(Sim *s, i64 j, i64 i, i64 budget, int partial) {
    HPool *p = &s->pools[j];
    HReq *rq = &s->hreqs[i];
    const i32 *ids = ids_of(s, j, i);
    i64 nids = positions(s, i), N = s->target[i], bs = s->bs;
    if (rq->g == NULL && !hy_req_init(p, rq)) {
        error(s, j, HY_NOMEM);
        return 0;
    }
    i64 junction;
    i64 k = hy_start(p, rq, ids, nids, N, s->io->L[i], &junction); /* (touches nothing yet) */
    rq->junction = junction * bs;
    i64 hit = k * bs, want = N - hit;
    if (!partial && want > budget) return 0;
    i64 n = kv_min(want, budget), free_now = hy_free_count(p);
    if (p->has_mamba) {
        n = hyb_split(s, i, hit, n);
        if (n == 0) return 0;
        if (hy_hit_cached_this_step(p, ids, k)) return -1;
    }
    i64 whole = p->max_len > 0 ? kv_min(N, p->max_len) : N;
    if (hy_needed(p, rq, ids, k, whole, 1, 1) > free_now || hy_needed(p, rq, ids, k, hit + n, 1, 0) > free_now)
        return -1;
    int rc = hy_take(p, rq, ids, k, hit + n, kv_min(hit + n, N), 1);
    if (rc < 0) {
        error(s, j, rc);
        return 0;
    }
    s->base_len[i] = kv_ceil_div(hit + n, bs);
    s->base_input[i] = N;
    req_started(s, j, i, hit, k);
    return n;
}

int hyb_grow(Sim *s, i64 j, i64 i, i64 tokens) {
    HPool *p = &s->pools[j];
    HReq *rq = &s->hreqs[i];
    hy_remove_skipped(p, rq, s->computed[i]); /* (even when the step's slots then do not fit) */
    if (hy_needed(p, rq, NULL, 0, tokens, 0, 0) > hy_free_count(p)) return 0;
    int rc = hy_take(p, rq, ids_of(s, j, i), 0, tokens, kv_min(tokens, s->target[i]), 0);
    if (rc < 0) {
        error(s, j, rc);
        return 0;
    }
    i64 slots = kv_ceil_div(tokens, s->bs);
    if (slots > s->base_len[i]) {
        i64 decode_from = kv_max(s->base_len[i], s->io->P[i]);
        if (slots > decode_from) s->inst[j].counters[decode_blocks] += slots - decode_from;
        s->base_len[i] = slots;
    }
    return 1;
}

void hyb_release(Sim *s, i64 j, i64 i) {
    HReq *rq = &s->hreqs[i];
    if (rq->g == NULL) return;
    hy_finish(&s->pools[j], rq);
    hy_req_release(&s->pools[j], rq);
}

i64 hyb_peak(const Sim *s, i64 tokens) { return hy_peak(&s->pools[0], tokens); }

i64 hyb_held(const Sim *s, i64 j) { return s->capacity - hy_free_count(&s->pools[j]); }

i64 hyb_prefix(const Sim *s, i64 j, const i32 *ids, i64 nids, i64 tokens) {
    i64 junction;
    return hy_find_hit(&s->pools[j], ids, nids, tokens, &junction);
}
