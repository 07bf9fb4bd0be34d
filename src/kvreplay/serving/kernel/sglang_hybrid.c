/* A request's KV under SGLang 0.5.23's UnifiedRadixCache (MODE_RADIX_HYBRID: the SGLang style with
 * a hybrid model's sliding-window and / or Mamba layers, policy radix). sglang.c's admission and
 * requests.c's growth and release hand their requests here; docs/serving.md, "Hybrid layer
 * groups", states the rules.
 *
 * Each instance has one tree with its pools (hybrid/unified_radix.h: full KV, SWA KV, Mamba state
 * slots), each request its RhReq. A request's life, as SGLang's scheduler drives the cache:
 *
 * - admission (PrefillAdder.add_one_req, after init_next_round_input's match_prefix): match with
 *   limit tokens - 1, the Mamba copy-on-write, the lock; then its first chunk's KV and slots
 *   (alloc_for_extend), or it is unlocked and waits;
 * - after each prefill step that leaves it running (a chunk that is not the last, or its last one
 *   when it goes on decoding): cache_unfinished_req (checkpoint_kv_cache), which inserts what it
 *   computed and frees its SWA KV left of the window; the next chunk's KV when it is scheduled;
 * - each decode step: maybe_evict_swa, then one token's KV (0 when it does not fit: the scheduler
 *   retracts);
 * - finished: release_kv_cache(checkpoint=True): the prompt and outputs inserted, the rest freed,
 *   unlocked; retracted: release_kv_cache(checkpoint=False): freed and unlocked, nothing inserted.
 *
 * Keys: a request's page q is the trace's block id while the page is a full page of its prompt
 * with an id, else a key of its own (a page of outputs, or of a prompt's partial block, is the
 * request's alone). */
#include <stdlib.h>

#include "../../hybrid/unified_radix.h"
#include "sim.h"

static void fail(Sim *s, i64 j, i64 code) {
    s->inst[j].counters[hybrid_error] = code;
    s->failed = 1;
}

int sgh_setup(Sim *s) {
    i64 n = s->n, bs = s->bs;
    s->trees = calloc((size_t)s->N, sizeof(RhTree));
    s->rreqs = calloc((size_t)(n > 0 ? n : 1), sizeof(RhReq));
    s->rkoff = calloc((size_t)n + 1, sizeof(i64));
    s->batch_scratch = calloc((size_t)(n > 0 ? n : 1), sizeof(i64));
    if (!s->trees || !s->rreqs || !s->rkoff || !s->batch_scratch) {
        fail(s, 0, -1);
        return 0;
    }
    for (i64 i = 0; i < n; i++) s->rkoff[i + 1] = s->rkoff[i] + (s->io->L[i] + s->outputs[i]) / bs + 1;
    s->rkeys = malloc((size_t)(s->rkoff[n] > 0 ? s->rkoff[n] : 1) * sizeof(i64));
    if (!s->rkeys) {
        fail(s, 0, -1);
        return 0;
    }
    const i64 *off = s->io->offsets;
    for (i64 i = 0; i < n; i++) {
        i64 known = kv_min(s->io->P[i], s->io->L[i] / bs), pages = s->rkoff[i + 1] - s->rkoff[i];
        i64 *k = s->rkeys + s->rkoff[i];
        for (i64 q = 0; q < pages; q++) k[q] = q < known ? (i64)s->io->blocks[off[i] + q] : -(s->rkoff[i] + q) - 1;
    }
    for (i64 q = 0; q < s->N; q++) {
        i64 rc = rh_init(&s->trees[q], s->io->radix);
        if (rc) {
            fail(s, q, rc);
            return 0;
        }
    }
    return 1;
}

/* the tree's counters, then its pages, live SWA pages and states (radix_counters' row q) */
static void report(Sim *s, i64 q) {
    RhTree *u = &s->trees[q];
    i64 *out = s->io->radix_counters + q * (RH_COUNTERS + 3);
    for (int k = 0; k < RH_COUNTERS; k++) out[k] = u->stats[k];
    out[RH_COUNTERS] = u->tree_pages;
    out[RH_COUNTERS + 1] = u->swa_live;
    out[RH_COUNTERS + 2] = u->states;
}

void sgh_teardown(Sim *s) {
    if (s->trees != NULL) {
        /* the requests still running (a run that stopped) give back what they hold, then each tree
         * must account for every page and slot */
        for (i64 i = 0; s->rreqs != NULL && i < s->n; i++)
            if (s->io->status[i] == RUNNING && s->rreqs[i].keys != NULL) rh_drop(&s->trees[s->io->instance[i]], &s->rreqs[i]);
        for (i64 q = 0; q < s->N; q++) {
            if (s->trees[q].n == NULL) continue;
            report(s, q);
            if (!s->failed && !rh_consistent(&s->trees[q], 0, 0, 0)) s->inst[q].counters[hybrid_error] = -3;
            rh_free(&s->trees[q]);
        }
    }
    free(s->trees);
    free(s->rreqs);
    free(s->batch_scratch);
    free(s->rkoff);
    free(s->rkeys);
    s->trees = NULL;
    s->rreqs = NULL;
    s->batch_scratch = NULL;
    s->rkoff = NULL;
    s->rkeys = NULL;
}

static inline const i64 *keys_of(const Sim *s, i64 i) { return s->rkeys + s->rkoff[i]; }

i64 sgh_touch(Sim *s, i64 j, i64 i) {
    i64 k = rh_touch(&s->trees[j], keys_of(s, i), (s->target[i] - 1) / s->bs);
    if (k < 0) fail(s, j, -1);
    return k < 0 ? 0 : k;
}

i64 sgh_begin(Sim *s, i64 j, i64 i) {
    RhReq *r = &s->rreqs[i];
    i64 k = rh_begin(&s->trees[j], r, keys_of(s, i), s->target[i]);
    if (k == -1) fail(s, j, -1);
    if (k < 0) {
        r->keys = NULL;
        return -1;
    }
    return k * s->bs;
}

int sgh_extend(Sim *s, i64 j, i64 i, i64 end) {
    if (rh_extend(&s->trees[j], &s->rreqs[i], end)) return 1;
    if (s->trees[j].failed < 0) fail(s, j, -1);
    return 0;
}

/* alloc_for_extend over a prefill batch (allocation.py): every request's state slots, then one
 * eviction for the batch's tokens (and a page a request: alloc_paged_token_slots_extend), then
 * each request's KV, in batch order. `batch`: the requests with their chunk in s->new_tokens.
 * 0 when one does not fit (the budgets said it would: the run stops) */
int sgh_allocate_batch(Sim *s, i64 j, const i64 *batch, i64 n) {
    RhTree *u = &s->trees[j];
    i64 tokens = 0;
    for (i64 k = 0; k < n; k++) {
        if (!rh_extend_states(u, &s->rreqs[batch[k]])) {
            fail(s, j, u->failed < 0 ? -1 : -5);
            return 0;
        }
        tokens += s->new_tokens[batch[k]] + (s->bs > 1 ? s->bs : 0);
    }
    rh_make_room(u, tokens);
    for (i64 k = 0; k < n; k++) {
        i64 i = batch[k];
        if (!rh_extend(u, &s->rreqs[i], s->computed[i] + s->new_tokens[i])) {
            fail(s, j, u->failed < 0 ? -1 : -5);
            return 0;
        }
    }
    return 1;
}

void sgh_drop(Sim *s, i64 j, i64 i) {
    RhReq *r = &s->rreqs[i];
    if (r->keys == NULL) return;
    rh_drop(&s->trees[j], r);
    r->keys = NULL;
}

int sgh_prefilled(Sim *s, i64 j, i64 i, int goes_on) {
    RhReq *r = &s->rreqs[i];
    if (!goes_on) {
        r->computed = s->computed[i];
        return 1;
    }
    if (rh_computed(&s->trees[j], r, s->computed[i])) return 1;
    fail(s, j, s->trees[j].failed > 0 ? -2 : -1);
    return 0;
}

int sgh_decode(Sim *s, i64 j, i64 i) {
    RhReq *r = &s->rreqs[i];
    i64 before = r->computed;
    if (!rh_decode_alloc(&s->trees[j], r)) return 0;
    if ((before + s->bs - 1) / s->bs < (r->computed + s->bs - 1) / s->bs) s->inst[j].counters[decode_blocks] += 1;
    return 1;
}

/* ScheduleBatch before a decode batch's tokens, over its decoding requests: check_decode_mem's
 * eviction (a page for each request that starts one: new_tokens_required_next_decode,
 * schedule_batch.py:3403-3417), maybe_evict_swa for each (schedule_batch.py:4068-4123), then
 * alloc_paged_token_slots_decode's eviction (a page for each, allocation.py:571-583); the tokens
 * follow (sgh_decode) */
void sgh_decode_prepare(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    RhTree *u = &s->trees[j];
    i64 n = 0, starting = 0;
    for (i64 k = 0; k < q->nrun; k++) {
        i64 i = q->running[k];
        if (!s->decoding[i]) continue;
        n++;
        starting += s->rreqs[i].computed % s->bs == 0;
    }
    if (n == 0) return;
    rh_make_room(u, starting * s->bs);
    for (i64 k = 0; k < q->nrun; k++)
        if (s->decoding[q->running[k]]) rh_evict_window(u, &s->rreqs[q->running[k]]);
    rh_make_room(u, n * s->bs);
}

void sgh_release(Sim *s, i64 j, i64 i) {
    RhReq *r = &s->rreqs[i];
    if (r->keys == NULL) return;
    if (!rh_finish(&s->trees[j], r)) fail(s, j, s->trees[j].failed > 0 ? -2 : -1);
    r->keys = NULL;
}

void sgh_make_room(Sim *s, i64 j, i64 tokens) { rh_make_room(&s->trees[j], tokens); }

void sgh_room(const Sim *s, i64 j, i64 *out) { rh_room(&s->trees[j], out); }

i64 sgh_probe(const Sim *s, i64 j, i64 i) { return rh_probe(&s->trees[j], keys_of(s, i), (s->io->L[i] - 1) / s->bs); }

i64 sgh_held(const Sim *s, i64 j) {
    const RhTree *u = &s->trees[j]; /* the requests' own pages and the tree's pages they lock */
    return u->full_pages - u->full_free - (u->tree_pages - u->locked_full);
}
