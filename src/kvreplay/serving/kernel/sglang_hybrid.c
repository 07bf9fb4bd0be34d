/* A request's KV under SGLang 0.5.23's UnifiedRadixCache (MODE_RADIX_HYBRID: the SGLang style with
 * a hybrid model's sliding-window and / or Mamba layers, policy radix). sglang.c's admission and
 * requests.c's growth and release hand their requests here; docs/engines.md, "Hybrid layer
 * groups", states the rules.
 *
 * Each instance has one tree with its pools (full KV, SWA KV, Mamba state slots), each request its
 * state: the engine's (hybrid/unified_radix.c), which this file drives through its table
 * (hybrid/engine.h HybridRadix). A request's life, as SGLang's scheduler drives the cache:
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

#include "sim.h"

static void fail(Sim *s, i64 j, i64 code) {
    s->inst[j].counters[hybrid_error] = code;
    s->failed = 1;
}

static inline const HybridRadix *tree(const Sim *s) { return s->engine->radix; }

int sgh_setup(Sim *s) {
    i64 n = s->n, bs = s->bs;
    s->rkoff = calloc((size_t)n + 1, sizeof(i64));
    s->batch_scratch = calloc((size_t)(n > 0 ? n : 1), sizeof(i64));
    if (!s->rkoff || !s->batch_scratch) {
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
    HybridSetup c = {.radix = s->io->radix};
    return engine_setup(s, &hybrid_unified_radix, c);
}

void sgh_teardown(Sim *s) {
    if (s->mode == MODE_RADIX_HYBRID && s->engine != NULL && s->engines != NULL && s->engine_reqs != NULL) {
        /* the requests still running (a run that stopped) give back what they hold, then each tree
         * must account for every page and slot */
        for (i64 i = 0; i < s->n; i++)
            if (s->io->status[i] == RUNNING && s->engine->holds(engine_req(s, i)))
                s->engine->drop(engine_of(s, s->io->instance[i]), engine_req(s, i));
        for (i64 q = 0; q < s->engines_ready; q++)
            if (!s->failed && !tree(s)->consistent(engine_of(s, q))) s->inst[q].counters[hybrid_error] = -3;
    }
    if (s->mode == MODE_RADIX_HYBRID) engine_teardown(s, s->io->radix_counters);
    free(s->batch_scratch);
    free(s->rkoff);
    free(s->rkeys);
    s->batch_scratch = NULL;
    s->rkoff = NULL;
    s->rkeys = NULL;
}

static inline const i64 *keys_of(const Sim *s, i64 i) { return s->rkeys + s->rkoff[i]; }

i64 sgh_touch(Sim *s, i64 j, i64 i) {
    i64 k = tree(s)->touch(engine_of(s, j), keys_of(s, i), (s->target[i] - 1) / s->bs);
    if (k < 0) fail(s, j, -1);
    return k < 0 ? 0 : k;
}

i64 sgh_begin(Sim *s, i64 j, i64 i) {
    i64 k = tree(s)->begin(engine_of(s, j), engine_req(s, i), keys_of(s, i), s->target[i]);
    if (k == -1) fail(s, j, -1);
    return k < 0 ? -1 : k * s->bs; /* (when it failed it holds nothing) */
}

int sgh_extend(Sim *s, i64 j, i64 i, i64 end) {
    void *u = engine_of(s, j);
    if (tree(s)->extend(u, engine_req(s, i), end)) return 1;
    if (tree(s)->failed(u) < 0) fail(s, j, -1);
    return 0;
}

/* alloc_for_extend over a prefill batch (allocation.py): every request's state slots, then one
 * eviction for the batch's tokens (and a page a request: alloc_paged_token_slots_extend), then
 * each request's KV, in batch order. `batch`: the requests with their chunk in s->new_tokens.
 * 0 when one does not fit (the budgets said it would: the run stops) */
int sgh_allocate_batch(Sim *s, i64 j, const i64 *batch, i64 n) {
    const HybridRadix *t = tree(s);
    void *u = engine_of(s, j);
    i64 tokens = 0;
    for (i64 k = 0; k < n; k++) {
        if (!t->extend_states(u, engine_req(s, batch[k]))) {
            fail(s, j, t->failed(u) < 0 ? -1 : -5);
            return 0;
        }
        tokens += s->new_tokens[batch[k]] + (s->bs > 1 ? s->bs : 0);
    }
    t->make_room(u, tokens);
    for (i64 k = 0; k < n; k++) {
        i64 i = batch[k];
        if (!t->extend(u, engine_req(s, i), s->computed[i] + s->new_tokens[i])) {
            fail(s, j, t->failed(u) < 0 ? -1 : -5);
            return 0;
        }
    }
    return 1;
}

void sgh_drop(Sim *s, i64 j, i64 i) {
    void *r = engine_req(s, i);
    if (s->engine->holds(r)) s->engine->drop(engine_of(s, j), r);
}

int sgh_prefilled(Sim *s, i64 j, i64 i, int goes_on) {
    void *u = engine_of(s, j), *r = engine_req(s, i);
    if (!goes_on) {
        tree(s)->note_computed(r, s->computed[i]);
        return 1;
    }
    if (tree(s)->computed(u, r, s->computed[i])) return 1;
    fail(s, j, tree(s)->failed(u) > 0 ? -2 : -1);
    return 0;
}

int sgh_decode(Sim *s, i64 j, i64 i) {
    int rc = tree(s)->decode_alloc(engine_of(s, j), engine_req(s, i));
    if (rc == 2) s->inst[j].counters[decode_blocks] += 1; /* (its token starts a page) */
    return rc != 0;
}

/* ScheduleBatch before a decode batch's tokens, over its decoding requests: check_decode_mem's
 * eviction (a page for each request that starts one: new_tokens_required_next_decode,
 * schedule_batch.py:3403-3417), maybe_evict_swa for each (schedule_batch.py:4068-4123), then
 * alloc_paged_token_slots_decode's eviction (a page for each, allocation.py:571-583); the tokens
 * follow (sgh_decode) */
void sgh_decode_prepare(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const HybridRadix *t = tree(s);
    void *u = engine_of(s, j);
    i64 n = 0, starting = 0;
    for (i64 k = 0; k < q->nrun; k++) {
        i64 i = q->running[k];
        if (!s->decoding[i]) continue;
        n++;
        starting += t->request_computed(engine_req(s, i)) % s->bs == 0;
    }
    if (n == 0) return;
    t->make_room(u, starting * s->bs);
    for (i64 k = 0; k < q->nrun; k++)
        if (s->decoding[q->running[k]]) t->evict_window(u, engine_req(s, q->running[k]));
    t->make_room(u, n * s->bs);
}

void sgh_release(Sim *s, i64 j, i64 i) {
    void *u = engine_of(s, j), *r = engine_req(s, i);
    if (!s->engine->holds(r)) return;
    if (!s->engine->finish(u, r)) fail(s, j, tree(s)->failed(u) > 0 ? -2 : -1);
}

void sgh_make_room(Sim *s, i64 j, i64 tokens) { tree(s)->make_room(engine_of(s, j), tokens); }

void sgh_room(const Sim *s, i64 j, i64 *out) { tree(s)->room(engine_of(s, j), out); }

i64 sgh_window(const Sim *s, i64 j) { return tree(s)->window(engine_of(s, j)); }

i64 sgh_swa_pages(const Sim *s, i64 j) { return tree(s)->swa_pages(engine_of(s, j)); }

i64 sgh_probe(const Sim *s, i64 j, i64 i) {
    return tree(s)->probe(engine_of(s, j), keys_of(s, i), (s->io->L[i] - 1) / s->bs);
}

i64 sgh_held(const Sim *s, i64 j) { return s->engine->held(engine_of(s, j)); }
