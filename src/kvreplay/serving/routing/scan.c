/* What routers share (router.h): prefix scans of an instance they may route to, random ties,
 * tables over an instance's ids. */
#include <math.h>
#include <stdlib.h>

#include "../kernel/ids.h"
#include "router.h"

i64 route_local_id(Sim *s, i64 q, i64 b) {
    Ids *ids = s->inst[q].ids;
    return ids == NULL ? b : ids_get(ids, b);
}

void route_bits_prefix(Sim *s, const uint64_t *bits, i64 i, i64 limit, i64 *out) {
    const i32 *ids = s->io->blocks + s->io->offsets[i];
    i64 words = s->bit_words, n = s->n_prefill, k = 0;
    uint64_t *alive = s->bit_scratch, any = 0;
    for (i64 w = 0; w < words; w++) {
        i64 m = n - 64 * w;
        alive[w] = m >= 64 ? ~(uint64_t)0 : m > 0 ? ((uint64_t)1 << m) - 1 : 0;
        any |= alive[w];
    }
    /* one pass over the prompt: an instance drops out at the first id without its bit */
    for (; k < limit && any; k++) {
        const uint64_t *row = bits + (i64)ids[k] * words;
        any = 0;
        for (i64 w = 0; w < words; w++) {
            uint64_t keep = alive[w] & row[w];
            for (uint64_t dead = alive[w] & ~keep; dead != 0; dead &= dead - 1)
                out[64 * w + __builtin_ctzll(dead)] = k;
            alive[w] = keep;
            any |= keep;
        }
    }
    for (i64 w = 0; w < words; w++)
        for (uint64_t left = alive[w]; left != 0; left &= left - 1) out[64 * w + __builtin_ctzll(left)] = k;
}

i64 route_bits_scan(Sim *s, const uint64_t *bits, i64 i, i64 q, i64 limit) {
    i64 start = s->io->offsets[i], k = 0;
    while (k < limit) {
        i64 g = s->io->blocks[start + k];
        if (route_local_id(s, q, g) < 0 || !((bits[g * s->bit_words + q / 64] >> (q % 64)) & 1)) break;
        k++;
    }
    return k;
}

/* route_gpu_prefix through the residency bits: every instance's prefix for request i in one pass,
 * each cut at its policy's hit limit */
static i64 bits_gpu_prefix(Sim *s, i64 q, i64 i) {
    if (s->prefix_pick != s->pick) {
        i64 P = s->io->P[i], L = s->io->L[i], longest = 0;
        for (i64 p = 0; p < s->n_prefill; p++) {
            s->route_limit[p] = s->policy->hit_limit(s->inst[p].state, P, L, s->bs);
            longest = kv_max(longest, s->route_limit[p]);
        }
        route_bits_prefix(s, s->res_bits, i, longest, s->route_prefix);
        for (i64 p = 0; p < s->n_prefill; p++) s->route_prefix[p] = kv_min(s->route_prefix[p], s->route_limit[p]);
        s->prefix_pick = s->pick;
    }
    return s->route_prefix[q];
}

i64 route_gpu_prefix(Sim *s, i64 q, i64 i) {
    void *st = s->inst[q].state;
    i64 start = s->io->offsets[i], P = s->io->P[i];
    if (s->mode == MODE_HYBRID) {
        /* the coordinator's hit on q over the prompt's ids there, up to the first id never routed
         * to q (no group has it cached; with a full-attention group the hit ends before it) */
        i64 m = 0;
        for (; m < P; m++) {
            i64 b = route_local_id(s, q, s->io->blocks[start + m]);
            if (b < 0) break;
            s->route_scratch[m] = (i32)b;
        }
        return hyb_prefix(s, q, s->route_scratch, m, s->io->L[i]);
    }
    if (s->mode == MODE_RADIX_HYBRID) return sgh_probe(s, q, i);
    if (s->res_bits != NULL) return bits_gpu_prefix(s, q, i);
    i64 limit = s->policy->hit_limit(st, P, s->io->L[i], s->bs);
    i64 k = 0;
    while (k < limit) {
        i64 b = route_local_id(s, q, s->io->blocks[start + k]);
        if (b < 0 || !s->policy->resident(st, b)) break;
        k++;
    }
    return k;
}

i64 route_tier_prefix(Sim *s, i64 q, i64 i, i64 k, i64 *counts) {
    void *st = s->inst[q].state;
    i64 start = s->io->offsets[i], P = s->io->P[i];
    i64 limit = s->policy->hit_limit(st, P, s->io->L[i], s->bs);
    /* the prompt's ids on q (-1: never routed there), for the policy's probes */
    for (i64 m = 0; m < P; m++) s->route_scratch[m] = (i32)route_local_id(s, q, s->io->blocks[start + m]);
    return kv_tier_prefix(s->policy, st, s->tiers, q, s->io->blocks + start, s->route_scratch, 0, k, limit, counts, 0);
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

i64 route_random_below(uint64_t *rng, i64 n) {
    /* unbiased: reject the top of the range that n does not divide */
    uint64_t limit = UINT64_MAX - UINT64_MAX % (uint64_t)n;
    uint64_t x;
    do x = splitmix64(rng); while (x >= limit);
    return (i64)(x % (uint64_t)n);
}

void route_lowest(uint64_t *rng, Lowest *l, f64 cost, i64 q) {
    if (cost < l->cost) {
        l->cost = cost;
        l->best = q;
        l->ties = 1;
    } else if (cost == l->cost) {
        l->ties += 1;
        if (route_random_below(rng, l->ties) == 0) l->best = q;
    }
}

/* For tests: router k's rule on given inputs (tests/serving/test_routers.py works each by hand). */
KV_EXPORT i64 kv_route_rule(i64 k, const f64 *params, const f64 *view, const i64 *overlap, const i64 *depth,
                            const f64 *fetch, i64 instances, i64 prompt_blocks, i64 prompt_tokens, i64 block_size,
                            const f64 *tm, f64 capacity, i64 seed) {
    uint64_t rng = (uint64_t)seed;
    RouteInput in = {view, overlap, depth, fetch, instances, prompt_blocks, prompt_tokens, block_size, tm, capacity,
                     &rng};
    return kv_routers[k]->rule(params, &in);
}

