/* A step's batch: its aggregates and duration when it starts (the time model prices it), and
 * what its end does: each request's tokens computed, a token out for every request whose tokens
 * are all computed (its first token, or the next one of its decode), finishes and handovers. */
#include <math.h>

#include "../timing/step.h"
#include "route.h"
#include "sim.h"

/* What the host CPU adds to a step of `requests` requests whose GPU work takes `gpu` seconds
 * (serving/timing/host.py step_seconds): the engine core's CPU per step (vLLM 0.33.0's
 * Scheduler.schedule and update_from_output, v1/core/sched/scheduler.py:699 and 2259, and the
 * model runner's _prepare_inputs, v1/worker/gpu_model_runner.py:1924). In order, after the GPU's
 * work, in vLLM's synchronous loop (EngineCore.step, v1/engine/core.py:667); beside it under async
 * scheduling (EngineCore.step_with_batch_queue, core.py:708: the next step is scheduled and its
 * inputs prepared while this one runs), where the step takes the longer of the two. */
static f64 host_step(const SimIO *io, f64 gpu, i64 requests) {
    f64 cpu = io->fcfg[HOST_STEP_S] + io->fcfg[HOST_STEP_REQUEST_S] * (f64)requests;
    if (!(cpu > 0.0)) return gpu;
    if (io->cfg[ASYNC_SCHEDULING]) return gpu > cpu ? gpu : cpu;
    return gpu + cpu;
}

/* The drafter's time after a step whose decoding requests propose k draft tokens each: k passes
 * of one token per request, each priced as a decode step of those requests by a draft model's own
 * time model (tm_draft), or as SPEC_HEAD_FRACTION of the target's (an EAGLE head or an MTP module:
 * one layer of the target's shape out of its layers); 0 for n-gram (a lookup on the host). */
static f64 draft_seconds(const Sim *s, const f64 *agg) {
    i64 k = s->io->cfg[SPEC_K];
    f64 frac = s->io->fcfg[SPEC_HEAD_FRACTION];
    int own = s->io->tm_draft[0] != KIND_INSTANT;
    if (k <= 0 || agg[AGG_DECODE_REQS] <= 0 || (!own && frac <= 0.0)) return 0.0;
    f64 d[NUM_AGG];
    for (int a = 0; a < NUM_AGG; a++) d[a] = 0.0;
    d[AGG_DECODE_REQS] = agg[AGG_DECODE_REQS];
    d[AGG_DECODE_CTX] = d[AGG_KEYS_FULL] = d[AGG_TOUCHED_FULL] = d[AGG_ACTIVE_KV] = agg[AGG_DECODE_CTX];
    d[AGG_DECODE_SW] = d[AGG_KEYS_SW] = d[AGG_TOUCHED_SW] = agg[AGG_DECODE_SW];
    f64 pass = own ? kv_step_seconds(s->io->tm_draft, d) : frac * kv_step_seconds(s->io->tm, d);
    return (f64)k * pass;
}

/* Instance j's step's aggregates (its requests' new_tokens) into agg, and the KV its requests load
 * from the tiers (*load, seconds, taken from them): the requests in the step (0: it is empty). */
static i64 batch_aggregate(Sim *s, i64 j, f64 *agg, f64 *load) {
    Inst *q = &s->inst[j];
    i64 window = s->io->cfg[WINDOW], nbatch = 0;
    *load = 0.0;
    for (int a = 0; a < NUM_AGG; a++) agg[a] = 0.0;
    for (i64 r = 0; r < q->nrun; r++) {
        i64 i = q->running[r], m = s->new_tokens[i];
        if (m <= 0) continue;
        nbatch++;
        *load += s->load_s[i];
        s->load_s[i] = 0.0;
        i64 c = s->computed[i];
        if (!s->decoding[i]) {
            agg[AGG_PREFILL_REQS] += 1;
            agg[AGG_PREFILL_NEW] += (f64)m;
            agg[AGG_PREFILL_CACHED] += (f64)c;
            agg[AGG_KEYS_FULL] += (f64)(m * c + m * (m + 1) / 2);
            agg[AGG_TOUCHED_FULL] += (f64)(c + m);
            if (window > 0) {
                agg[AGG_KEYS_SW] += (f64)kv_sum_min(c + 1, c + m, window);
                agg[AGG_TOUCHED_SW] += (f64)kv_min(c + m, window + m - 1);
            }
        } else if (m > 1) {
            /* a verification pass: the token sampled last and m - 1 draft tokens over the
             * request's KV, as one decode with m query tokens (its GEMMs over m tokens) */
            i64 x = c + m;
            agg[AGG_DECODE_REQS] += 1;
            agg[AGG_SPEC_TOKENS] += (f64)(m - 1);
            agg[AGG_DECODE_CTX] += (f64)x;
            agg[AGG_KEYS_FULL] += (f64)(m * c + m * (m + 1) / 2);
            agg[AGG_TOUCHED_FULL] += (f64)x;
            if (window > 0) {
                agg[AGG_KEYS_SW] += (f64)kv_sum_min(c + 1, c + m, window);
                agg[AGG_TOUCHED_SW] += (f64)kv_min(x, window + m - 1);
                agg[AGG_DECODE_SW] += (f64)kv_min(x, window + m - 1);
            }
        } else {
            i64 x = c + 1;
            agg[AGG_DECODE_REQS] += 1;
            agg[AGG_DECODE_CTX] += (f64)x;
            agg[AGG_KEYS_FULL] += (f64)x;
            agg[AGG_TOUCHED_FULL] += (f64)x;
            if (window > 0) {
                agg[AGG_KEYS_SW] += (f64)kv_min(x, window);
                agg[AGG_TOUCHED_SW] += (f64)kv_min(x, window);
                agg[AGG_DECODE_SW] += (f64)kv_min(x, window);
            }
        }
    }
    agg[AGG_ACTIVE_KV] = agg[AGG_DECODE_CTX];  /* the decoding requests' tokens (Dynamo's decode input) */
    return nbatch;
}

/* The duration of instance j's step of `nbatch` requests with aggregates agg: the time model's,
 * the drafter's and the tiers' loads (counted on j), then the host's. */
static f64 batch_seconds(Sim *s, i64 j, const f64 *agg, f64 load, i64 nbatch) {
    f64 dt = kv_step_seconds(s->io->tm, agg);
    i64 *c = s->inst[j].counters;
    f64 draft = draft_seconds(s, agg);
    if (draft > 0.0) {
        c[draft_us] += (i64)(draft * 1e6 + 0.5);
        dt += draft;
    }
    if (load > 0.0) {
        /* KV loaded from the tiers: before the step's compute, or beside it layer by layer */
        c[load_us] += (i64)(load * 1e6 + 0.5);
        dt = s->io->cfg[TIER_OVERLAP] ? (dt > load ? dt : load) : dt + load;
    }
    return host_step(s->io, dt, nbatch);
}

/* Instance j runs a step of `dt` seconds from now (its work agg; NULL: a dummy batch): 0 when no
 * clock or counter can hold it (the run stops, and Python refuses it naming the inputs). */
static int batch_commit(Sim *s, i64 j, const f64 *agg, f64 dt) {
    Inst *q = &s->inst[j];
    i64 *c = q->counters;
    if (!(dt >= 0.0) || dt > SIM_MAX_STEP_S || s->now + dt > SIM_MAX_TIME_S) {
        c[time_overflow] = 1;
        s->failed = 1;
        return 0;
    }
    q->end_t = s->now + dt;
    q->busy = 1;
    if (agg == NULL) {
        c[dummy_steps] += 1;
        return 1;
    }
    c[busy_us] += (i64)(dt * 1e6 + 0.5);
    c[steps] += 1;
    if (agg[AGG_PREFILL_REQS] > 0) c[prefill_steps] += 1;
    c[prefill_tokens] += (i64)agg[AGG_PREFILL_NEW];
    c[decode_tokens] += (i64)agg[AGG_DECODE_REQS];  /* (batch_end adds the accepted draft tokens) */
    if (agg[AGG_SPEC_TOKENS] > 0) c[spec_drafted] += (i64)agg[AGG_SPEC_TOKENS];
    metrics_peaks(s, j);
    return 1;
}

/* Price instance j's step (its requests' new_tokens); 0 when the step is empty. */
int batch_start(Sim *s, i64 j) {
    f64 load;
    i64 nbatch = batch_aggregate(s, j, s->agg, &load);
    if (nbatch == 0) return 0;
    batch_commit(s, j, s->agg, batch_seconds(s, j, s->agg, load, nbatch));
    return 1;
}

/* The tokens rank j's forward runs (its step's, or a dummy batch's one: execute_dummy_batch runs
 * uniform_decode_query_len = 1 token, v1/worker/gpu_worker.py:1466-1472) */
static f64 rank_tokens(const f64 *agg) {
    f64 t = agg[AGG_PREFILL_NEW] + agg[AGG_DECODE_REQS] + agg[AGG_SPEC_TOKENS];
    return t > 0 ? t : 1.0;
}

/* Data parallelism for an MoE, as vLLM 0.33.0 runs it (docs/clusters.md, "Data parallelism"): the
 * ranks step together, since every MoE layer exchanges tokens between them (DPEngineCoreProc, only
 * for MoE models, v1/engine/core.py:1546 and 2295): a rank without work runs a dummy batch while
 * any rank works (run_busy_loop, core.py:2499-2507). Before each forward the ranks agree on their
 * token counts (coordinate_batch_across_dp, v1/worker/dp_utils.py:190): when every rank's step
 * fits a CUDA graph (at most DP_GRAPH_TOKENS tokens) all pad to the largest count (dp_utils.py:
 * 175-185 and 99-111), else each runs its own. The routed experts run over every rank's tokens,
 * gathered (all2all_backend allgather_reducescatter, the default, config/parallel.py:220), each
 * rank holding its share (the time model's C_MOE_EP / C_MOE_INTER: dataparallel.py); the gather
 * and scatter are priced in the step (timing/step.c dp_exchange). Sequence-parallel (C_XCH_SP > 1:
 * expert parallelism at TP > 1) each rank's count is its TP GPUs' chunks, padded to equal ones
 * (forward_context.py:60-77). Each rank's time is its own step's (its attention,
 * its dense layers, its host CPU) with the experts over the gathered tokens; the step lasts the
 * longest rank's. A dummy batch is priced as one decode of one token over no context. */
int batch_start_lockstep(Sim *s, int dummy) {
    i64 N = s->N, work = 0;
    f64 most = 0.0, sum = 0.0, sp = (i64)s->io->tm[0] == KIND_CALIBRATED ? s->io->tm[C_XCH_SP] : 0.0;
    for (i64 j = 0; j < N; j++) {
        f64 *agg = s->rank_agg + j * NUM_AGG;
        s->rank_batch[j] = batch_aggregate(s, j, agg, &s->rank_load[j]);
        work += s->rank_batch[j];
        if (s->rank_batch[j] == 0) { /* a dummy batch: one token, its KV nothing */
            agg[AGG_DECODE_REQS] = 1;
            agg[AGG_DECODE_CTX] = agg[AGG_KEYS_FULL] = agg[AGG_TOUCHED_FULL] = agg[AGG_ACTIVE_KV] = 1;
            if (s->io->cfg[WINDOW] > 0) agg[AGG_DECODE_SW] = agg[AGG_KEYS_SW] = agg[AGG_TOUCHED_SW] = 1;
        }
        f64 t = rank_tokens(agg);
        if (sp > 1) t = sp * ceil(t / sp);  /* (sequence-parallel: its TP GPUs' equal chunks, exchange.py sp_padded) */
        most = t > most ? t : most;
        sum += t;
    }
    if (work == 0 && !dummy) return 0;
    f64 graphs = (f64)s->io->cfg[DP_GRAPH_TOKENS];
    f64 gathered = most <= graphs ? most * (f64)N : sum;
    f64 dt = 0.0;
    for (i64 j = 0; j < N; j++) {
        f64 *agg = s->rank_agg + j * NUM_AGG;
        agg[AGG_EXPERT_TOKENS] = gathered;
        f64 t = s->rank_batch[j] > 0 ? batch_seconds(s, j, agg, s->rank_load[j], s->rank_batch[j])
                                     : host_step(s->io, kv_step_seconds(s->io->tm, agg), 0);
        dt = t > dt ? t : dt;
    }
    for (i64 j = 0; j < N; j++)
        if (!batch_commit(s, j, s->rank_batch[j] > 0 ? s->rank_agg + j * NUM_AGG : NULL, dt)) return 1;
    return 1;
}

/* splitmix64: a uniform in [0, 1) from a key */
static f64 spec_uniform(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return (f64)(x >> 11) * (1.0 / 9007199254740992.0);
}

i64 spec_draw(const Sim *s, i64 i, i64 drafted) {
    /* keyed by (seed, request, its output position, draft position): the same request gets the
     * same acceptances whatever else runs beside it (a preempted request draws them again) */
    uint64_t base = (uint64_t)s->io->cfg[SEED] * 0x100000001B3ULL ^ (uint64_t)i * 0xD1B54A32D192ED03ULL
                    ^ (uint64_t)s->generated[i] * 0x8CB92BA72F3D8DD7ULL;
    i64 acc = 0;
    while (acc < drafted && spec_uniform(base + (uint64_t)acc * 0x9E3779B97F4A7C15ULL) < s->io->spec_accept[acc]) acc++;
    return acc;
}

/* Request i's last token came out on instance j (finished, its client has it `out` seconds
 * later), or its prompt is done on a prefill instance: it leaves j. Its blocks stay cached
 * there; a handover waits for its KV transfer. */
static void leave(Sim *s, i64 j, i64 i, f64 out) {
    SimIO *io = s->io;
    if (s->generated[i] >= s->outputs[i]) {
        req_finish(s, j, i); /* (its tree may take its pages first: requests.c) */
        io->status[i] = FINISHED;
        io->finish_s[i] = s->now + out;
        release_ended_at(s, i, s->now + out);  /* (the client has the last token then) */
    } else {
        req_release(s, j, i);
        io->status[i] = WAITING_ARRIVAL;
        s->target[i] = s->computed[i] + 1;
        s->inst[j].counters[handoffs] += 1;
        s->inst[j].counters[transfer_us] += (i64)(io->transfer_s[i] * 1e6 + 0.5);
        heap_push(s, s->now + io->transfer_s[i], i);
    }
    s->inst[j].view[V_REQUESTS] -= 1;
    if (s->router != NULL && s->router->kind->left != NULL) s->router->kind->left(s->router->state, s, i, j);
}

/* One token out of request i on instance j, stamped when its client has it: `out` seconds after
 * the step's end (its output processing and streaming). */
static void token_out(Sim *s, i64 j, i64 i, f64 out) {
    SimIO *io = s->io;
    f64 t = s->now + out;
    s->generated[i] += 1;
    if (s->generated[i] == 1) {
        io->first_token_s[i] = t;
        s->inst[j].view[V_PREFILL_TOKENS] -= (f64)(io->L[i] - s->routed_overlap[i]);
        if (s->router != NULL && s->router->kind->first_token != NULL)
            s->router->kind->first_token(s->router->state, s, i, j);
    } else {
        metrics_token_gap(s, t - s->last_token[i]);
    }
    s->last_token[i] = t;
}

/* How long a token takes from the end of its step to its client (serving/timing/host.py
 * output_seconds): the engine core's output IPC, then the API server's output processor over the
 * step's `outputs` requests (vLLM 0.33.0 AsyncLLM.output_handler, v1/engine/async_llm.py:876,
 * OutputProcessor.process_outputs, v1/engine/output_processor.py:728: each request's detokenizer
 * and output queue, one after another) and the stream's chunk to the client. */
static f64 host_output(const SimIO *io, i64 outputs) {
    return io->fcfg[HOST_OUTPUT_REQUEST_S] * (f64)outputs;
}

void batch_end(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    q->busy = 0;
    int prefill_only = s->disagg && j < s->n_prefill;
    i64 outputs = 0;  /* the requests that output a token this step */
    for (i64 r = 0; r < q->nrun; r++) {
        i64 i = q->running[r];
        if (s->new_tokens[i] > 0 && s->computed[i] + s->new_tokens[i] >= s->target[i]) outputs++;
    }
    f64 out = host_output(s->io, outputs);
    for (i64 r = 0; r < q->nrun; r++) {
        i64 i = q->running[r], m = s->new_tokens[i];
        if (m <= 0) continue;
        s->new_tokens[i] = 0;
        i64 extra = 0; /* accepted draft tokens that come out with this step's token */
        if (s->decoding[i] && m > 1) {
            /* the verification: accepted drafts advance the request, rejected ones are taken back
             * (update_from_output: num_computed_tokens -= num_rejected, scheduler.py:2346-2364);
             * their KV slots stay the request's and the next step overwrites them */
            i64 acc = spec_draw(s, i, m - 1);
            q->counters[spec_steps] += 1;
            q->counters[spec_accepted] += acc;
            for (i64 p = 0; p < acc; p++) s->io->spec_accepted_at[p] += 1;
            extra = kv_min(acc, s->outputs[i] - s->generated[i] - 1);
            if (extra < 0) extra = 0;
            m = 1 + extra;
            q->counters[decode_tokens] += extra;
        }
        s->computed[i] += m;
        s->io->computed_total[i] += m;
        if (s->mode == MODE_RADIX_HYBRID && !s->decoding[i]) {
            /* SGLang's tree takes what a prefill step computed of a request that stays */
            int goes_on = s->computed[i] < s->target[i] || s->generated[i] + 1 < s->outputs[i];
            if (!sgh_prefilled(s, j, i, goes_on)) return;
        } else if (!s->decoding[i] && (s->computed[i] < s->target[i] || s->generated[i] + 1 < s->outputs[i])) {
            req_prefilled(s, j, i); /* (the SGLang style's checkpoint_kv_cache: requests.c) */
        }
        if (s->computed[i] < s->target[i]) continue;
        if (s->io->cfg[STYLE] == STYLE_TRTLLM && !s->decoding[i]) req_store(s, j, i); /* (storeContextBlocks) */
        token_out(s, j, i, out);
        s->generated[i] += extra; /* (the accepted drafts come out with it: one inter-token gap) */
        if (s->generated[i] < s->outputs[i] && !prefill_only) {
            s->target[i] = s->computed[i] + 1;
            s->decoding[i] = 1;
            continue;
        }
        leave(s, j, i, out);
    }
    /* the running list without the requests that left, order kept */
    i64 w = 0;
    for (i64 r = 0; r < q->nrun; r++)
        if (s->io->status[q->running[r]] == RUNNING) q->running[w++] = q->running[r];
    if (w < q->nrun) q->batch_full = 0;  /* SGLang: a request left the running batch */
    q->nrun = w;
    q->view[V_HELD] = (f64)req_held(s, j);
    metrics_series(s);
}
