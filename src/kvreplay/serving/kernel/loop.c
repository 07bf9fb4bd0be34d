/* The simulator's event loop (sim.h lists the files it calls). Time jumps from event to event:
 *
 * - the end of an instance's step (batch.c: tokens out, finishes, handovers);
 * - an arrival: the router picks an instance, the request joins its queue (or is rejected when it
 *   could never fit), an idle instance wakes. Open loop: the trace's arrivals in order; closed loop:
 *   the requests release.c has released (their predecessors ended), by time;
 * - a request's KV arriving at a decode instance after its transfer (disaggregation);
 * - an instance scheduling its next step (vllm.c or sglang.c, then batch.c prices it);
 * - a snapshot of what instances report, every ROUTER_LAG_S seconds, for a lagged router.
 *
 * Ties: a step that ends at an arrival's time is applied first, and an arrival at a step end
 * joins before the instance schedules. With instant time (ONE_AT_A_TIME) a request runs to its
 * end, through its decode instance, before the next one arrives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../timing/step.h"
#include "ids.h"
#include "route.h"
#include "sim.h"

KV_EXPORT const char kv_layout_sim[] = SIM_FIELDS(KV_FIELD_SPEC) " | cfg=" SIM_CFG_SLOTS(KV_SLOT_SPEC)
    " | fcfg=" SIM_FCFG_SLOTS(KV_SLOT_SPEC) " | counters=" SIM_COUNTER_SLOTS(KV_SLOT_SPEC)
    " | status=" SIM_STATUS_SLOTS(KV_SLOT_SPEC) " | series=" SIM_SERIES_SLOTS(KV_SLOT_SPEC)
    " | itl=" SIM_ITL_SLOTS(KV_SLOT_SPEC) " | view=" SIM_VIEW_SLOTS(KV_SLOT_SPEC) " | mode= MODE_WHOLE MODE_PIECEWISE MODE_PAGED MODE_HYBRID MODE_RADIX_HYBRID";

/* ---- events ---- */

static inline void wake(Inst *q, f64 now) {
    if (!q->busy && q->end_t == INFINITY) q->end_t = now;
}

/* Can request i never fit an empty instance? (then it is rejected on arrival) */
static int never_fits(Sim *s, i64 i) {
    i64 bs = s->bs, L = s->io->L[i];
    if (s->mode == MODE_HYBRID) return hyb_peak(s, L + s->outputs[i] - 1) > s->capacity;
    if (s->mode == MODE_RADIX_HYBRID && kv_ceil_div(L + s->outputs[i] - 1, bs) > s->capacity) return 1;
    /* speculative decoding: its last verification holds k drafts and the lookahead slots beyond
     * the last token (alone it could only preempt itself, forever) */
    i64 spec = s->io->cfg[SPEC_LOOKAHEAD] + (s->outputs[i] > 1 ? s->io->cfg[SPEC_K] : 0);
    if (req_needed_positions(s, i, L + s->outputs[i] - 1 + spec) > s->capacity) return 1;
    /* TensorRT-LLM's GUARANTEED_NO_EVICT starts a request once the blocks of its prompt and all its
     * outputs are free (getRemainingBlocksToCompletion) */
    if (s->io->cfg[STYLE] == STYLE_TRTLLM && kv_ceil_div(s->output_kv ? L + s->outputs[i] : L, bs) > s->capacity)
        return 1;
    /* without chunked context its whole prompt must fit max_num_tokens (TensorRT-LLM refuses it) */
    if (s->io->cfg[STYLE] == STYLE_TRTLLM && s->io->cfg[CHUNKED] == 0 && L > s->io->cfg[MAX_BATCHED]) return 1;
    if (s->io->cfg[STYLE] == STYLE_SGLANG) {
        /* SGLang's admission needs prompt + reserved outputs + a page below the pool */
        i64 clip = s->io->cfg[CLIP_MAX_NEW];
        i64 left = s->prefill_only[i] ? 0 : s->outputs[i] < clip ? s->outputs[i] : clip;
        if (L + left + bs >= s->capacity * bs) return 1;
    }
    return 0;
}

/* Request i joins instance j's queue (the instance's ids given to its blocks), or is rejected
 * when it could never fit: 1 when it joined. */
static int join(Sim *s, i64 j, i64 i, int never) {
    Inst *q = &s->inst[j];
    if (never) {
        s->io->status[i] = REJECTED;
        q->counters[rejected] += 1;
        release_ended(s, i);
        return 0;
    }
    if (!req_route_ids(s, j, i)) return 0;
    s->io->status[i] = WAITING;
    s->joined[i] = s->now;
    queue_push_back(s, q, i);
    q->view[V_REQUESTS] += 1;
    return 1;
}

static void arrival(Sim *s, i64 i) {
    SimIO *io = s->io;
    i64 j;
    io->arrived_s[i] = s->now;
    s->arrived += 1;
    release_sent(s, i);
    if (io->cfg[MAX_MODEL_LEN] > 0 && io->L[i] + s->outputs[i] > io->cfg[MAX_MODEL_LEN]) {
        /* past the model's context: refused before any instance sees it, as vLLM's frontend
         * refuses prompt + max_tokens > max_model_len (counted on instance 0's row) */
        io->status[i] = REFUSED;
        io->instance[i] = -1;
        s->inst[0].counters[refused_context] += 1;
        release_ended(s, i);
        return;
    }
    if (s->router == NULL) {
        j = io->assigned[i];
        if (j < 0) j = s->turn++ % s->n_prefill; /* round-robin in the order requests arrive (closed loop) */
    } else {
        const f64 *view = s->view;
        if (io->fcfg[ROUTER_LAG_S] > 0) {
            /* the router's own counts are current; what instances report is the snapshot's */
            for (i64 q = 0; q < s->N; q++)
                memcpy(s->seen + q * NUM_VIEW, s->view + q * NUM_VIEW, V_REPORTED * sizeof(f64));
            view = s->seen;
        }
        j = route_pick(s, i, view, s->n_prefill);
    }
    io->instance[i] = j;
    Inst *q = &s->inst[j];
    if (!join(s, j, i, never_fits(s, i))) return;
    s->target[i] = io->L[i];
    s->routed_overlap[i] = s->router == NULL ? 0 : kv_min(s->router->overlap[j] * s->bs, io->L[i]);
    q->view[V_PREFILL_TOKENS] += (f64)(io->L[i] - s->routed_overlap[i]);
    if (s->router != NULL && s->router->kind->routed != NULL) s->router->kind->routed(s->router->state, s, i, j);
    wake(q, s->now);
}

/* request i's KV arrives from its prefill instance: the least loaded decode instance (fewest
 * requests in flight) takes it */
static void handover(Sim *s, i64 i) {
    SimIO *io = s->io;
    i64 j = s->n_prefill;
    for (i64 q = s->n_prefill + 1; q < s->N; q++)
        if (s->inst[q].view[V_REQUESTS] < s->inst[j].view[V_REQUESTS]) j = q;
    io->decode_instance[i] = j;
    if (!join(s, j, i, req_needed_positions(s, i, io->L[i] + s->outputs[i] - 1) > s->capacity)) return;
    s->kv_in[i] = 1;
    wake(&s->inst[j], s->now);
}

/* Async scheduling (vLLM 0.33.0's default, config/vllm.py:1685-1719; EngineCore.step_with_batch_queue,
 * v1/engine/core.py:708, with two batches in flight, config/vllm.py:588): while a step runs, the
 * engine core has already scheduled the next one, when the running step was launched. So a step
 * that starts now was scheduled when the step that just ended started, and sees only the requests
 * that had joined by then: the ones that joined later (at the tail of the queue: requests join in
 * time order, preempted ones go to its front) are set aside while it schedules. When the previous
 * schedule launched nothing (the engine waited for work) it schedules now, seeing every request.
 * Returns how many it set aside; `unhide` puts them back. */
static i64 hide_late(Sim *s, Inst *q, i64 *first) {
    *first = -1;
    if (!s->io->cfg[ASYNC_SCHEDULING] || !q->ahead) return 0;
    i64 k = 0, i = q->qtail;
    while (i >= 0 && s->joined[i] > q->scheduled_at) {
        *first = i;
        i = s->qprev[i];
        k++;
    }
    if (k == 0) return 0;
    /* the queue ends before `first` for now */
    q->qtail = i;
    if (i >= 0) s->qnext[i] = -1;
    else q->qhead = -1;
    s->qprev[*first] = -1;
    q->qlen -= k;
    return k;
}

static void unhide(Sim *s, Inst *q, i64 first, i64 k, i64 last) {
    if (k == 0) return;
    s->qprev[first] = q->qtail;
    if (q->qtail >= 0) s->qnext[q->qtail] = first;
    else q->qhead = first;
    q->qtail = last;
    q->qlen += k;
}

/* The requests no instance can ever start are rejected once nothing runs and nothing will arrive
 * (schedule() and schedule_lockstep() call it for instance j): 0 when some are stuck running (a bug). */
static int settle_stalled(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    i64 *c = q->counters;
    while (q->qlen > 0) {
        i64 i = queue_pop_front(s, q);
        s->io->status[i] = REJECTED;
        c[rejected] += 1;
        c[never_admitted] += 1;
        release_ended(s, i);
        q->view[V_REQUESTS] -= 1;
    }
    if (q->nrun == 0) return 1;
    c[stuck] = q->nrun;  /* running requests that can no longer be scheduled: a bug */
    return 0;
}

/* what instance j reports once it has scheduled (waiting, running, blocks held), and when */
static void scheduled(Sim *s, Inst *q, i64 j) {
    q->view[V_WAITING] = (f64)q->qlen;
    q->view[V_RUNNING] = (f64)q->nrun;
    q->view[V_HELD] = (f64)req_held(s, j);
    q->scheduled_at = s->now;
}

/* Instance j schedules a step: 0 when the run must stop (a state out of room, or a stall). */
static int schedule(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    i64 *c = q->counters;
    if (q->nrun == 0 && q->qlen == 0) {
        q->ratio = s->io->fcfg[RATIO_INIT];  /* SGLang resets its estimate when idle */
        q->end_t = INFINITY;
        q->ahead = 0;
        return 1;
    }
    if (q->qlen > c[peak_waiting]) c[peak_waiting] = q->qlen;
    i64 preempted = c[preemptions], aborted_before = c[aborted];
    i64 first, last = q->qtail, hidden = hide_late(s, q, &first);
    if (s->io->cfg[STYLE] == STYLE_SGLANG) sglang_schedule(s, j);
    else if (s->io->cfg[STYLE] == STYLE_TRTLLM) trtllm_schedule(s, j);
    else vllm_schedule(s, j);
    unhide(s, q, first, hidden, last);
    if (s->failed) return 0;
    scheduled(s, q, j);
    q->ahead = batch_start(s, j);
    if (q->ahead) return 1;
    if (hidden > 0) {
        /* the step scheduled ahead was empty: the engine schedules again at once, seeing them */
        q->end_t = s->now;
        return 1;
    }
    c[stalls] += 1;
    if (c[preemptions] != preempted || c[aborted] != aborted_before) {
        /* a step that only preempted (a request preempting itself, alone) or aborted the request
         * alone on it: the engine schedules again at once, and waiting requests may start now */
        q->end_t = s->now;
        return 1;
    }
    q->end_t = INFINITY;
    if (s->arrived < s->n || s->heap_n > 0) return 1;  /* it waits for a request routed to it */
    /* nothing runs, nothing will arrive, and the waiting requests do not fit an empty instance
     * (the arrival rule catches all but SGLang's retracted requests whose outputs outgrow its
     * reservation clip): they are rejected and counted */
    return settle_stalled(s, j);
}

/* Does any DP rank hold a request (running or waiting)? (vLLM's has_unfinished_requests) */
static int group_unfinished(const Sim *s) {
    for (i64 j = 0; j < s->N; j++)
        if (s->inst[j].nrun > 0 || s->inst[j].qlen > 0) return 1;
    return 0;
}

/* The DP ranks in lockstep (cfg DP_LOCKSTEP, batch.c batch_start_lockstep) schedule together: each
 * rank's scheduler, then one step of them all. A wave (DPEngineCoreProc.run_busy_loop, v1/engine/
 * core.py:2465-2552) runs from the first step after idle until, at a step whose count is 1 or a
 * multiple of dp_sync_interval (16, config/parallel.py:163; _has_global_unfinished_reqs, core.py:
 * 2554-2559), no rank holds a request: until then every rank keeps stepping, dummy batches when it
 * has nothing to run. 0 when the run must stop. */
static int schedule_lockstep(Sim *s) {
    i64 N = s->N, redo = 0;
    for (i64 j = 0; j < N; j++) {
        Inst *q = &s->inst[j];
        i64 *c = q->counters;
        if (q->qlen > c[peak_waiting]) c[peak_waiting] = q->qlen;
        i64 preempted = c[preemptions], aborted_before = c[aborted];
        i64 first, last = q->qtail, hidden = hide_late(s, q, &first);
        if (q->nrun > 0 || q->qlen > 0) vllm_schedule(s, j); /* (one without requests does not: core.py:675) */
        unhide(s, q, first, hidden, last);
        if (s->failed) return 0;
        scheduled(s, q, j);
        /* schedule again at once when the step scheduled ahead hid requests, or only preempted or aborted */
        redo += hidden > 0 || c[preemptions] != preempted || c[aborted] != aborted_before;
    }
    int unfinished = group_unfinished(s);
    if (batch_start_lockstep(s, s->wave && !unfinished)) {
        s->wave = 1;
        for (i64 j = 0; j < N; j++) s->inst[j].ahead = s->rank_batch[j] > 0; /* (a dummy batch schedules nothing ahead) */
        return 1;
    }
    for (i64 j = 0; j < N; j++) {
        s->inst[j].ahead = 0;
        s->inst[j].end_t = redo > 0 ? s->now : INFINITY;
    }
    if (redo > 0 || !unfinished) return 1; /* (nothing held: the ranks idle until an arrival) */
    for (i64 j = 0; j < N; j++) s->inst[j].counters[stalls] += s->inst[j].qlen > 0;
    if (s->arrived < s->n) return 1;  /* they wait for a request routed to them */
    for (i64 j = 0; j < N; j++)
        if (!settle_stalled(s, j)) return 0;
    return 1;
}

/* The DP ranks' step ends (all at once): each rank's batch ends, and the wave's step is counted */
static void lockstep_end(Sim *s) {
    for (i64 j = 0; j < s->N; j++) batch_end(s, j);
    s->wave_steps += 1;
    i64 every = s->io->cfg[DP_SYNC_INTERVAL];
    if ((s->wave_steps == 1 || s->wave_steps % every == 0) && !group_unfinished(s)) {
        s->wave = 0;  /* the ranks agree none holds a request: the wave ends */
        s->wave_steps = 0;
    }
}

static void run(Sim *s) {
    SimIO *io = s->io;
    i64 n = s->n, next_arrival = 0;
    int one_at_a_time = io->cfg[ONE_AT_A_TIME] != 0;
    f64 lag = io->fcfg[ROUTER_LAG_S], snap_k = 0.0;
    f64 next_snap = lag > 0 ? 0.0 : INFINITY;
    f64 last_now = 0.0;
    while (s->done < n) {
        /* the earliest instance event, and the next arrival or transfer */
        i64 j = -1;
        f64 te = INFINITY;
        for (i64 q = 0; q < s->N; q++)
            if (s->inst[q].end_t < te) {
                te = s->inst[q].end_t;
                j = q;
            }
        f64 ta_trace = s->closed ? release_next_t(s) : next_arrival < n ? io->arrival[next_arrival] : INFINITY;
        f64 th = s->heap_n > 0 ? s->heap_t[0] : INFINITY;
        if (one_at_a_time) {
            if (j >= 0 || s->heap_n > 0) ta_trace = INFINITY;
            if (j >= 0) th = INFINITY;
        }
        f64 ta = ta_trace <= th ? ta_trace : th;
        if (next_snap <= ta && next_snap <= te && next_snap < INFINITY) {
            /* what instances report (running, waiting, blocks held) reaches the router every `lag`
             * seconds: the state at k x lag (no snapshot while nothing changes) */
            for (i64 q = 0; q < s->N; q++)
                memcpy(s->seen + q * NUM_VIEW + V_REPORTED, s->view + q * NUM_VIEW + V_REPORTED,
                       (NUM_VIEW - V_REPORTED) * sizeof(f64));
            s->snapshots += 1;
            f64 nxt = ta < te ? ta : te;
            if (nxt == INFINITY) {
                next_snap = INFINITY;
            } else {
                f64 k_last = floor(nxt / lag);
                snap_k = k_last <= snap_k ? snap_k + 1.0 : k_last;
                next_snap = snap_k * lag;
            }
            continue;
        }
        if (j >= 0 && s->inst[j].busy && te <= ta) {
            s->now = last_now = te;
            if (io->cfg[DP_LOCKSTEP]) lockstep_end(s);
            else batch_end(s, j);
            continue;
        }
        if (ta < INFINITY && ta <= te) {
            s->now = last_now = ta;
            if (ta != ta_trace) {
                i64 i = s->heap_i[0];
                heap_pop(s);
                handover(s, i);
            } else {
                arrival(s, s->closed ? release_pop(s) : next_arrival++);
            }
            if (s->failed) break;
            continue;
        }
        if (j < 0) {
            /* nothing is scheduled and nothing arrives: an instance that stalled waiting for an
             * arrival that was then refused or rejected settles its queue now (schedule() runs its
             * waiting requests, or rejects those that cannot start) */
            int settle = 0;
            for (i64 q = 0; q < s->N; q++)
                if (s->inst[q].qlen > 0 && !s->inst[q].busy) {
                    s->inst[q].end_t = s->now;
                    settle = 1;
                }
            if (!settle) break;  /* nothing will happen any more */
            continue;
        }
        s->now = last_now = te;
        if (!(io->cfg[DP_LOCKSTEP] ? schedule_lockstep(s) : schedule(s, j)) || s->failed) break;
    }
    io->series_meta[0] = s->nseries;
    io->series_meta[1] = s->stride;
    io->end_s[0] = last_now;
}

/* ---- setting up and tearing down ---- */

static void *zeros(i64 n, size_t size) { return calloc((size_t)(n > 0 ? n : 1), size); }

/* How a policy's requests hold their blocks under a scheduler style (requests.c). */
KV_EXPORT i64 kv_sim_mode(const KvPolicy *policy, i64 style) {
    if (style != STYLE_VLLM) return MODE_WHOLE;
    if (policy->paged != NULL) return MODE_PAGED;
    return policy->piecewise ? MODE_PIECEWISE : MODE_WHOLE;
}

static void setup(Sim *s, SimIO *io, const KvPolicy *policy, KvTiers *tiers, const KvRouterKind *router_kind) {
    memset(s, 0, sizeof *s);
    const i64 *cfg = io->cfg;
    s->mode = (int)kv_sim_mode(policy, cfg[STYLE]);
    s->io = io;
    s->policy = policy;
    s->tiers = tiers;
    s->T = tiers == NULL ? 0 : kv_tiers_count(tiers);
    s->n = cfg[REQUESTS];
    s->N = cfg[INSTANCES];
    s->disagg = cfg[PREFILL_INSTANCES] > 0;
    s->n_prefill = s->disagg ? cfg[PREFILL_INSTANCES] : s->N;
    s->bs = cfg[BLOCK_SIZE];
    s->capacity = cfg[CAPACITY];
    s->output_kv = cfg[OUTPUT_KV] != 0;
    s->precheck = cfg[PRECHECK] != 0;
    s->stride = 1;
    s->rng = (uint64_t)cfg[SEED];
    release_setup(s);
    i64 n = s->n, positions = io->offsets[n];
    s->computed = zeros(n, sizeof(i64));
    s->target = zeros(n, sizeof(i64));
    s->generated = zeros(n, sizeof(i64));
    s->new_tokens = zeros(n, sizeof(i64));
    s->base_len = zeros(n, sizeof(i64));
    s->base_input = zeros(n, sizeof(i64));
    s->base_n = zeros(n, sizeof(i64));
    s->dec_pinned = zeros(n, sizeof(i64));
    s->decoding = zeros(n, sizeof(i8));
    s->kv_in = zeros(n, sizeof(i8));
    s->outputs = zeros(n, sizeof(i64));
    s->prefill_only = zeros(n, sizeof(i8));
    for (i64 i = 0; i < n; i++) {
        s->outputs[i] = io->O[i] > 1 ? io->O[i] : 1;
        s->prefill_only[i] = io->O[i] == PREFILL_ONLY;
    }
    s->load_s = zeros(n, sizeof(f64));
    s->last_token = zeros(n, sizeof(f64));
    s->joined = zeros(n, sizeof(f64));
    s->qnext = malloc((size_t)(n > 0 ? n : 1) * sizeof(i64));
    s->qprev = malloc((size_t)(n > 0 ? n : 1) * sizeof(i64));
    for (i64 i = 0; i < n; i++) s->qnext[i] = s->qprev[i] = -1;
    s->routed_overlap = zeros(n, sizeof(i64));
    s->lblocks = zeros(positions, sizeof(i32));
    s->lpm_key = zeros(n, sizeof(i64));
    s->order = zeros(n + 1, sizeof(i64));
    s->tier_scratch = zeros(s->T + 1, sizeof(i64));
    s->trt = cfg[STYLE] == STYLE_TRTLLM ? zeros(17 * n + 64, sizeof(i64)) : NULL;
    i64 max_prompt = 1;
    for (i64 i = 0; i < n; i++) max_prompt = kv_max(max_prompt, io->P[i]);
    s->route_scratch = zeros(max_prompt, sizeof(i32));
    i64 max_positions = 1;
    for (i64 i = 0; i < n; i++) max_positions = kv_max(max_positions, io->offsets[i + 1] - io->offsets[i]);
    s->key_scratch = zeros(max_positions, sizeof(i32));
    s->view = zeros(s->N * NUM_VIEW, sizeof(f64));
    s->seen = zeros(s->N * NUM_VIEW, sizeof(f64));
    s->heap_t = zeros(n + 1, sizeof(f64));
    s->heap_i = zeros(n + 1, sizeof(i64));
    s->ids_cap = zeros(s->N, sizeof(i64));
    s->inst = zeros(s->N, sizeof(Inst));
    s->rank_agg = zeros(s->N * NUM_AGG, sizeof(f64));
    s->rank_load = zeros(s->N, sizeof(f64));
    s->rank_batch = zeros(s->N, sizeof(i64));
    i64 rcap = (n < cfg[MAX_SEQS] ? n : cfg[MAX_SEQS]) + 1;
    for (i64 q = 0; q < s->N; q++) {
        Inst *in = &s->inst[q];
        in->state = (void *)io->states[q];
        in->ids = io->state_ids[q] > 0 ? ids_new(io->state_ids[q]) : NULL;
        s->ids_cap[q] = io->state_ids[q] > 0 ? io->state_ids[q] : -io->state_ids[q];
        in->counters = io->counters + q * NUM_SIM_COUNTERS;
        in->running = zeros(rcap, sizeof(i64));
        in->qhead = in->qtail = -1;
        in->end_t = INFINITY;
        in->ratio = io->fcfg[RATIO_INIT];
        in->chunk_req = -1;
        in->batch_full = 0;
        in->view = s->view + q * NUM_VIEW;
    }
    if (cfg[HYBRID_GROUPS] > 0) { /* a hybrid model's layer groups (the vLLM style, policy vllm: Python checks) */
        s->mode = MODE_HYBRID;
        hyb_setup(s); /* (a failure sets hybrid_error and s->failed) */
    } else if (cfg[RADIX_HYBRID] != 0) { /* SGLang's hybrid trees (the SGLang style, policy radix: Python checks) */
        s->mode = MODE_RADIX_HYBRID;
        sgh_setup(s);
    }
    s->bit_words = (s->N + 63) / 64;
    s->bit_scratch = zeros(s->bit_words, sizeof(uint64_t));
    s->route_prefix = zeros(s->N, sizeof(i64));
    s->route_limit = zeros(s->N, sizeof(i64));
    s->prefix_pick = -1;
    if (cfg[ROUTE_BITS] > 0 && s->T == 0 && (s->mode == MODE_PAGED || s->mode == MODE_PIECEWISE || s->mode == MODE_WHOLE))
        s->res_bits = zeros(kv_max(1, cfg[TRACE_IDS]) * s->bit_words, sizeof(uint64_t));
    if (router_kind != NULL) {
        Router *r = s->router = calloc(1, sizeof(Router));
        r->kind = router_kind;
        r->params = io->rparams;
        r->overlap = zeros(s->N, sizeof(i64));
        r->depth = zeros(s->N, sizeof(i64));
        r->fetch = zeros(s->N, sizeof(f64));
        r->state = router_kind->init == NULL ? NULL : router_kind->init(s);
    }
}

static void teardown(Sim *s) {
    if (s->router != NULL) {
        if (s->router->kind->release != NULL) s->router->kind->release(s->router->state);
        free(s->router->overlap);
        free(s->router->depth);
        free(s->router->fetch);
        free(s->router);
    }
    route_free_tables(s, s->router_tables);
    hyb_teardown(s);
    sgh_teardown(s);
    release_teardown(s);
    for (i64 q = 0; q < s->N; q++) {
        free(s->inst[q].running);
        ids_free(s->inst[q].ids);
    }
    void *owned[] = {s->computed, s->target, s->generated, s->new_tokens, s->base_len, s->base_input, s->base_n,
                     s->dec_pinned, s->decoding, s->kv_in, s->outputs, s->prefill_only, s->load_s, s->last_token, s->joined, s->qnext,
                     s->qprev, s->routed_overlap, s->lblocks, s->lpm_key, s->order, s->tier_scratch, s->trt,
                     s->route_scratch, s->key_scratch,
                     s->view, s->seen, s->heap_t, s->heap_i, s->ids_cap, s->inst, s->res_bits, s->bit_scratch,
                     s->route_prefix, s->route_limit, s->rank_agg, s->rank_load, s->rank_batch};
    for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++) free(owned[k]);
}

/* Run the simulation `io` describes (serving/kernel/__init__.py fills it): io->cfg[ROUTER] is an
 * index into kv_routers, or ROUTER_FIXED (io->assigned gives each request's instance). Every
 * instance's policy state is a record at io->states[q] over io->state_ids[q] local ids (> 0), or
 * over the trace's -io->state_ids[q] ids (<= 0: no id map). `grow` (NULL: none) gives an instance whose ids
 * ran out a bigger state (requests.c req_route_ids). */
KV_EXPORT void kv_simulate(SimIO *io, const KvPolicy *policy, KvTiers *tiers, SimGrow grow) {
    Sim s;
    i64 router = io->cfg[ROUTER];
    setup(&s, io, policy, tiers, router == ROUTER_FIXED ? NULL : kv_routers[router]);
    s.grow = grow;
    if (!s.failed) run(&s); /* (a hybrid pool that could not be set up: Python refuses the run) */
    teardown(&s);
}
