/* A request's blocks on its instance: the only code of the simulator that pins and unpins
 * (policies/base.py's hold contract; engine/driver.c's kv_request_start starts it, as it starts
 * overlapping requests in the engine). docs/serving.md, "The pool", states the rules.
 *
 * What request i holds: base_len[i] positions pinned at its admission (its prompt blocks, and the
 * decode blocks a recomputation needs) as one pin_request of base_n[i] handles, then dec_pinned[i]
 * decode blocks pinned one at a time as its tokens need them. Handles live at
 * handles[offsets[i] + i + position]. */
#include "../../engine/driver.h"
#include "ids.h"
#include "sim.h"

static inline i64 *ctr(Sim *s, i64 j) { return s->inst[j].counters; }
static inline const i32 *to_global(Sim *s, i64 j) { return s->inst[j].ids == NULL ? NULL : s->inst[j].ids->to_global; }
static inline const i32 *local_ids(Sim *s, i64 j) { return s->inst[j].ids == NULL ? NULL : s->lblocks; }
static inline const i32 *policy_ids(Sim *s, i64 j) { return s->inst[j].ids == NULL ? s->io->blocks : s->lblocks; }

/* Decode positions a request needs with `tokens` in KV, beyond its prompt's blocks. */
static inline i64 extra_blocks(i64 tokens, i64 prompt_tokens, i64 bs) {
    i64 e = kv_ceil_div(tokens, bs) - kv_ceil_div(prompt_tokens, bs);
    return e > 0 ? e : 0;
}

i64 req_needed_positions(const Sim *s, i64 i, i64 tokens) {
    return s->io->P[i] + (s->output_kv ? extra_blocks(tokens, s->io->L[i], s->bs) : 0);
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

/* Give request i's positions instance j's ids (at its routing, or its handover to a decode
 * instance); 0 when j's id space is full (the run stops; Python sizes it again). */
int req_route_ids(Sim *s, i64 j, i64 i) {
    Ids *ids = s->inst[j].ids;
    if (ids == NULL) return 1;
    for (i64 q = s->io->offsets[i]; q < s->io->offsets[i + 1]; q++) {
        i64 local = ids_add(ids, s->io->blocks[q]);
        if (local < 0) {
            ctr(s, j)[ids_out_of_room] = 1;
            s->failed = 1;
            return 0;
        }
        s->lblocks[q] = (i32)local;
    }
    return 1;
}

/* Admit request i on instance j for target[i] tokens: scan its prefix (HBM, then the tiers),
 * pin its positions (all or nothing). Returns its hit tokens, or -1 when it does not fit now
 * (nothing held). *hit_blocks: the prefix in blocks, through the tiers. */
static i64 admit(Sim *s, i64 j, i64 i, i64 *hit_blocks) {
    void *st = s->inst[j].state;
    KvHolds *h = (KvHolds *)st;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], target = s->target[i];
    i64 n_pos = req_needed_positions(s, i, target);
    if (s->precheck) {
        /* block-level policies: does the start fit beside the held blocks? (so a request that must
         * wait touches nothing) */
        i64 unheld = 0;
        for (i64 q = 0; q < n_pos; q++) unheld += h->pins[ids[start + q]] == 0;
        if (h->hold[HELD] + unheld > s->capacity) return -1;
    }
    if (!room(s, j, n_pos)) return -1;
    int first = s->io->preemptions[i] == 0;
    i64 *row = first ? s->io->tier_hits + i * (s->T + 1) : NULL;
    KvStart r = kv_request_start(s->policy, st, s->T > 0 ? s->tiers : NULL, j, to_global(s, j), i, s->io->blocks,
                                 local_ids(s, j), start, start + n_pos, target, s->bs, s->io->handles, start + i,
                                 s->tier_scratch, row);
    if (r.refused) {
        if (r.held > 0) {
            s->policy->unpin_request(st, i, ids, start, start + n_pos, target, s->bs, s->io->handles, start + i, r.held);
            if (s->T > 0) kv_tier_drain(s->policy, st, s->tiers, j, to_global(s, j));
        }
        return -1;
    }
    s->load_s[i] += r.load_s;
    s->base_len[i] = n_pos;
    s->base_input[i] = target;
    s->base_n[i] = r.held;
    s->dec_pinned[i] = 0;
    *hit_blocks = r.reach;
    return kv_min(r.reach * s->bs, target);
}

/* Request i was admitted with `hit` tokens cached: its first schedule is recorded (a
 * recomputation after a preemption is counted apart), and it runs. A request whose KV came from a
 * prefill instance starts decoding: everything but its next token is in KV. */
static void started(Sim *s, i64 j, i64 i, i64 hit, i64 hit_blocks) {
    SimIO *io = s->io;
    if (s->kv_in[i]) {
        s->kv_in[i] = 0;
        io->status[i] = RUNNING;
        s->computed[i] = s->target[i] - 1;
        s->decoding[i] = 1;
        return;
    }
    if (io->preemptions[i] == 0) {
        io->scheduled_s[i] = s->now;
        io->hit_tokens[i] = hit;
        io->hit_blocks[i] = hit_blocks;
        ctr(s, j)[first_hit_tokens] += hit;
        ctr(s, j)[first_prompt_tokens] += io->L[i];
    } else {
        ctr(s, j)[recomputed_tokens] += s->target[i] - hit;
    }
    io->status[i] = RUNNING;
    /* the last prompt token is always computed (it gives the first token's logits), even when a
     * block-level policy hit the whole prompt */
    s->computed[i] = hit < s->target[i] ? hit : s->target[i] - 1;
}

i64 req_schedule(Sim *s, i64 j, i64 i) {
    i64 hit_blocks = 0;
    i64 hit = admit(s, j, i, &hit_blocks);
    if (hit < 0) {
        ctr(s, j)[refused_admissions] += 1;
        return 0;
    }
    started(s, j, i, hit, hit_blocks);
    return 1;
}

int req_grow(Sim *s, i64 j, i64 i, i64 want) {
    void *st = s->inst[j].state;
    KvHolds *h = (KvHolds *)st;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i];
    while (s->base_len[i] + s->dec_pinned[i] < want) {
        if (h->hold[HELD] >= s->capacity) return 0;
        i64 q = s->base_len[i] + s->dec_pinned[i];
        if (!room(s, j, 1)) return 0;
        i64 refusals = h->hold[REFUSALS];
        s->policy->pin_request(st, i, ids, start + q, start + q + 1, 0, s->bs, s->bs, s->io->handles, start + i + q);
        if (s->T > 0) kv_tier_drain(s->policy, st, s->tiers, j, to_global(s, j));
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
    /* its decode singles tail first, then its admitted range */
    for (i64 q = s->base_len[i] + s->dec_pinned[i] - 1; q >= s->base_len[i]; q--)
        s->policy->unpin_request(st, i, ids, start + q, start + q + 1, s->bs, s->bs, s->io->handles, base + q, 1);
    s->policy->unpin_request(st, i, ids, start, start + s->base_len[i], s->base_input[i], s->bs, s->io->handles, base,
                             s->base_n[i]);
    if (s->T > 0) kv_tier_drain(s->policy, st, s->tiers, j, to_global(s, j));  /* (ttl may expire released blocks) */
    s->dec_pinned[i] = 0;
    s->base_n[i] = 0;
    s->base_len[i] = 0;
}

i64 req_take_back(Sim *s, i64 j, i64 v) {
    i64 given = s->new_tokens[v];
    s->new_tokens[v] = 0;
    req_release(s, j, v);
    s->computed[v] = 0;
    s->decoding[v] = 0;
    s->target[v] = s->io->L[v] + s->generated[v];
    s->io->status[v] = WAITING;
    s->io->preemptions[v] += 1;
    ctr(s, j)[preemptions] += 1;
    return given;
}

/* the cached prefix (blocks) request i would get on its instance j now, for `tokens` tokens
 * (SGLang's longest-prefix ordering and its admission budget read it) */
i64 req_cached_prefix(Sim *s, i64 j, i64 i, i64 tokens) {
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i];
    void *st = s->inst[j].state;
    i64 limit = s->policy->hit_limit(st, s->io->P[i], tokens, s->bs);
    i64 k = 0;
    while (k < limit && s->policy->resident(st, ids[start + k])) k++;
    return k;
}
