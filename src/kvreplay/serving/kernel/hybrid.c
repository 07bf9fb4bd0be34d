/* A request's blocks under vLLM 0.33.0's hybrid KV cache manager (MODE_HYBRID: the vLLM style
 * with a hybrid model's layer groups). requests.c hands its admission, growth and release here;
 * docs/engines.md, "Hybrid layer groups", states the rules.
 *
 * Each instance has one pool (with reference counts: requests overlap), each running request a
 * block table per KV cache group: the coordinator's (hybrid/coordinator.c), which this file drives
 * through its table (hybrid/engine.h HybridCoordinator). Its steps are allocate_slots
 * (kv_cache_manager.py:380-627):
 *
 * - admission (a waiting or preempted request, scheduler.py:1434 with
 *   full_sequence_must_fit): the coordinator's hit (find_hit) for its num_tokens; then the
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

#include "ids.h"
#include "sim.h"

static inline const i32 *ids_of(const Sim *s, i64 j, i64 i) { return policy_ids(s, j) + s->io->offsets[i]; }

static inline i64 positions(const Sim *s, i64 i) { return s->io->offsets[i + 1] - s->io->offsets[i]; }

static inline const HybridCoordinator *co(const Sim *s) { return s->engine->coordinator; }

static void error(Sim *s, i64 j, int code) {
    s->inst[j].counters[hybrid_error] = code;
    s->failed = 1;
}

int hyb_setup(Sim *s) {
    const i64 *cfg = s->io->cfg;
    HybridSetup c = {.capacity = s->capacity, .block_size = s->bs, .num_specs = cfg[HYBRID_GROUPS],
                     .groups = s->io->groups, .retention = cfg[RETENTION], .max_batched = cfg[MAX_BATCHED],
                     .max_model_len = cfg[MAX_MODEL_LEN]};
    return engine_setup(s, &hybrid_coordinator, c);
}

void hyb_teardown(Sim *s) {
    if (s->mode == MODE_HYBRID) engine_teardown(s, s->io->hybrid_counters);
}

void hyb_step_starts(Sim *s, i64 j) { co(s)->step_starts(engine_of(s, j)); }

int hyb_mamba(const Sim *s) { return co(s)->has_mamba(engine_of(s, 0)); }

i64 hyb_split(const Sim *s, i64 i, i64 start, i64 n) {
    return co(s)->mamba_split(engine_of(s, 0), engine_req(s, i), s->io->L[i], s->io->L[i] + s->generated[i],
                              s->io->cfg[MAX_BATCHED], start, n);
}

i64 hyb_admit(Sim *s, i64 j, i64 i, i64 budget, int partial) {
    const HybridCoordinator *c = co(s);
    void *p = engine_of(s, j), *rq = engine_req(s, i);
    const i32 *ids = ids_of(s, j, i);
    i64 N = s->target[i], bs = s->bs, max_len = s->io->cfg[MAX_MODEL_LEN];
    i64 k = c->start(p, rq, ids, positions(s, i), N, s->io->L[i]);
    if (k < 0) {
        error(s, j, (int)k);
        return 0;
    }
    i64 hit = k * bs, want = N - hit;
    if (!partial && want > budget) return 0;
    i64 n = kv_min(want, budget);
    if (c->has_mamba(p)) {
        n = hyb_split(s, i, hit, n);
        if (n == 0) return 0;
        if (c->hit_cached_this_step(p, ids, k)) return -1;
    }
    i64 whole = max_len > 0 ? kv_min(N, max_len) : N;
    int rc = c->allocate_first(p, rq, ids, k, hit + n, kv_min(hit + n, N), whole);
    if (rc == 0) return -1;
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
    int rc = co(s)->allocate(engine_of(s, j), engine_req(s, i), ids_of(s, j, i), tokens, kv_min(tokens, s->target[i]),
                             s->computed[i]);
    if (rc <= 0) {
        if (rc < 0) error(s, j, rc);
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
    void *p = engine_of(s, j), *rq = engine_req(s, i);
    if (!s->engine->holds(rq)) return;
    s->engine->finish(p, rq);
    s->engine->request_release(p, rq);
}

i64 hyb_peak(const Sim *s, i64 tokens) { return co(s)->peak(engine_of(s, 0), tokens); }

i64 hyb_held(const Sim *s, i64 j) { return s->engine->held(engine_of(s, j)); }

i64 hyb_prefix(const Sim *s, i64 j, const i32 *ids, i64 nids, i64 tokens) {
    return co(s)->find_hit(engine_of(s, j), ids, nids, tokens);
}
