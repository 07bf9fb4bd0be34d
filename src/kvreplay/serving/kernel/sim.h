/* The serving simulator's compiled loop: what its files share (docs/serving.md, "The simulator"
 * and "Schedulers", states every rule with its source; serving/kernel/__init__.py builds the
 * inputs and reads the outputs).
 *
 *   loop.c      the event loop: step ends, arrivals (routed), KV transfers, router snapshots
 *   queues.c    the waiting queue of each instance and the heap of transfers in flight (below the rest)
 *   start.c     a request's start, recorded (the end of every admission path, below them)
 *   vllm.c      the vLLM v1 scheduler style, its one preemption routine
 *   sglang.c    the SGLang scheduler style, its one retraction routine
 *   trtllm.c    TensorRT-LLM's in-flight batching (capacity and micro-batch schedulers), its pauses
 *   batch.c     a step's batch: its aggregates and duration, then what its end does
 *   requests.c  a request's blocks: admission, growth, release (the only caller of pin/unpin)
 *   metrics.c   the inter-token histogram, the time series, peaks
 *   ids.c       per-instance block ids: each instance's policy state is sized by the ids routed to it
 *   release.c   closed-loop arrivals: a request arrives when the requests it waits for have ended
 *   hybrid.c    a request's blocks under vLLM's hybrid KV cache manager (a hybrid model's layer groups)
 *   sglang_hybrid.c  a request's KV under SGLang's UnifiedRadixCache (the SGLang style, a hybrid model)
 *
 * Requests are in arrival order. Request i's block positions are blocks[offsets[i]:offsets[i+1]]:
 * its P[i] prompt blocks (the trace's ids), then its decode blocks (ids no prompt has). Those are
 * global ids; an instance's policy state, tier pools and router tables use its own local ids
 * (ids.c), which a request's positions take when it is routed or handed over (lblocks).
 */
#ifndef KV_SIM_H
#define KV_SIM_H

#include "../../engine/tiers/pools.h"
#include "../../hybrid/engine.h"
#include "../../include/policy.h"

/* ---- settings: named slots of cfg (i64) and fcfg (f64); Python fills them by these names ---- */
#define SIM_CFG_SLOTS(S)                                                                              \
    S(STYLE) S(MAX_BATCHED) S(MAX_SEQS) S(CHUNKED) S(CAPACITY) S(BLOCK_SIZE) S(PRECHECK) S(ONE_AT_A_TIME) \
    S(OUTPUT_KV) S(LPM) S(CHUNK_SIZE) S(LPM_FCFS_ABOVE) S(MAX_PREFILL) S(WINDOW) S(ROUTER) S(TIER_OVERLAP) \
    S(PREFILL_INSTANCES) S(INSTANCES) S(REQUESTS) S(CLIP_MAX_NEW) S(SEED) S(LOCAL_IDS) S(MAX_MODEL_LEN) \
    S(HYBRID_GROUPS) S(RETENTION) S(RADIX_HYBRID) S(TRACE_IDS) S(ROUTE_BITS) S(TRT_POLICY) S(ASYNC_SCHEDULING) \
    S(CLOSED) S(SPEC_K) S(SPEC_LOOKAHEAD) S(SPEC_DRAFT_SLOTS) S(SPEC_EAGLE_DROP) \
    S(DP_LOCKSTEP) S(DP_SYNC_INTERVAL) S(DP_GRAPH_TOKENS)
/* HOST_*: what the host CPU adds (serving/timing/host.py): the engine core's CPU per step and per
 * request in it, and a token's delay out of the engine per request out that step */
#define SIM_FCFG_SLOTS(S) S(RATIO_INIT) S(RATIO_MIN) S(RATIO_DECAY) S(ROUTER_LAG_S) S(HOST_STEP_S) \
    S(HOST_STEP_REQUEST_S) S(HOST_OUTPUT_REQUEST_S) S(SPEC_HEAD_FRACTION)
enum { SIM_CFG_SLOTS(KV_SLOT_ENUM) NUM_SIM_CFG };
enum { SIM_FCFG_SLOTS(KV_SLOT_ENUM) NUM_SIM_FCFG };
enum { STYLE_VLLM, STYLE_SGLANG, STYLE_TRTLLM };
/* how requests hold their blocks (requests.c) */
enum { MODE_WHOLE, MODE_PIECEWISE, MODE_PAGED, MODE_HYBRID, MODE_RADIX_HYBRID };
#define ROUTER_FIXED (-1)

/* ---- per-instance counters (a row each); Python reads them by these names ---- */
#define SIM_COUNTER_SLOTS(S)                                                                          \
    S(steps) S(preemptions) S(decode_blocks) S(peak_held_blocks) S(peak_running) S(peak_waiting)       \
    S(rejected) S(prefill_steps) S(stalls) S(recomputed_tokens) S(prefill_tokens) S(decode_tokens)     \
    S(refused_admissions) S(pin_calls) S(positions_pinned) S(state_out_of_room) S(max_pin_calls)       \
    S(max_positions) S(first_hit_tokens) S(first_prompt_tokens) S(busy_us) S(never_admitted) S(stuck)  \
    S(load_us) S(handoffs) S(transfer_us) S(ids_out_of_room) S(refused_context) S(time_overflow)           \
    S(hybrid_error) S(aborted) S(spec_steps) S(spec_drafted) S(spec_accepted) S(draft_us) S(dummy_steps)
enum { SIM_COUNTER_SLOTS(KV_SLOT_ENUM) NUM_SIM_COUNTERS };

/* the longest step and the latest simulated time a run may reach (seconds): beyond them the
 * microsecond counters (i64) and the clock lose their meaning, so the run stops */
#define SIM_MAX_STEP_S 1e7
#define SIM_MAX_TIME_S 1e11

/* request status (Python reads these names too) */
#define SIM_STATUS_SLOTS(S) S(WAITING_ARRIVAL) S(WAITING) S(RUNNING) S(FINISHED) S(REJECTED) S(REFUSED)
enum { SIM_STATUS_SLOTS(KV_SLOT_ENUM) NUM_SIM_STATUS };

/* the time series' columns */
#define SIM_SERIES_SLOTS(S) S(S_TIME) S(S_RUNNING) S(S_WAITING) S(S_HELD) S(S_HIT) S(S_PROMPT)
enum { SIM_SERIES_SLOTS(KV_SLOT_ENUM) NUM_SERIES };

/* the inter-token latency array: sum, max, count, then a log histogram: bin 0 holds gaps <=
 * ITL_MIN_S, bin k >= 1 gaps in (ITL_MIN_S x ITL_RATIO^(k-1), ITL_MIN_S x ITL_RATIO^k] (0.1%
 * apart, as Dynamo's DDSketch); the last bin also takes every longer gap */
#define SIM_ITL_SLOTS(S) S(ITL_SUM) S(ITL_MAX) S(ITL_COUNT)
enum { SIM_ITL_SLOTS(KV_SLOT_ENUM) ITL_HEAD };
#define ITL_MIN_S 1e-6
#define ITL_RATIO 1.001
/* an input O that marks SGLang's prefill-only request (parallel sampling's first request, serving/samples.py) */
#define PREFILL_ONLY (-1)

/* what a router sees of each instance: its own bookkeeping (always current), then what instances
 * report (lagged by ROUTER_LAG_S when set) */
#define SIM_VIEW_SLOTS(S) S(V_REQUESTS) S(V_PREFILL_TOKENS) S(V_BLOCKS) S(V_QUEUE_S) S(V_RUNNING) S(V_WAITING) S(V_HELD)
enum { SIM_VIEW_SLOTS(KV_SLOT_ENUM) NUM_VIEW };
#define V_REPORTED V_RUNNING /* the first reported column */

/* ---- the inputs and outputs Python passes (bound by name: serving/kernel/__init__.py) ---- */
#define SIM_FIELDS(F)                                                                                  \
    F(i64, offsets) F(i32, blocks) F(i64, P) F(i64, L) F(i64, O) F(f64, arrival) F(i64, assigned)       \
    F(f64, transfer_s) F(i64, states) F(i64, state_ids) F(f64, tm) F(i64, cfg) F(f64, fcfg) F(f64, rparams) \
    F(f64, scheduled_s) F(f64, first_token_s) F(f64, finish_s) F(i64, hit_tokens) F(i64, hit_blocks)       \
    F(i64, preemptions) F(i64, computed_total) F(i8, status) F(i64, instance) F(i64, decode_instance)     \
    F(i64, tier_hits) F(i64, counters) F(f64, series) F(i64, series_meta) F(f64, itl) F(i64, handles)     \
    F(f64, end_s) F(i64, groups) F(i64, hybrid_counters) F(i64, radix) F(i64, radix_counters)          \
    F(i64, waits) F(i64, next_offsets) F(i64, next_ids) F(f64, next_delay_s) F(i8, next_on_send) F(f64, arrived_s)  \
    F(i64, session) F(i64, lane_queue) F(f64, lane_delay_s) F(f64, send_delay_s) F(f64, spec_accept) F(i64, spec_accepted_at) F(f64, tm_draft)

typedef struct { SIM_FIELDS(KV_FIELD) } SimIO;

/* ---- the kernel's own state ---- */
typedef struct Ids Ids; /* ids.c */
typedef struct Router Router; /* route.h */

typedef struct {
    void *state;       /* its policy state (a record) */
    Ids *ids;          /* its local block ids (NULL: global ids are local ones) */
    i64 *counters;     /* its row of SimIO.counters */
    i64 *running;      /* running requests, in admission order */
    i64 nrun;
    i64 qhead, qtail, qlen; /* its waiting queue: a list over requests */
    f64 end_t;         /* the end of its step in flight (busy) or when it schedules next; inf: idle */
    int busy;
    f64 ratio;         /* SGLang's new-token ratio */
    i64 chunk_req;     /* SGLang: the request whose prompt is being chunked (-1: none) */
    int batch_full;    /* SGLang's running_batch.batch_is_full: no prefill until a request leaves */
    i64 refresh_calls; /* SGLang's _waiting_prefix_refresh_calls */
    f64 *view;         /* its row of the router's view (NUM_VIEW) */
    f64 scheduled_at;  /* when it last scheduled a step */
    int ahead;         /* async scheduling: that step is in flight, so this schedule ran as it started */
} Inst;

/* Python's growth of instance j's policy state to `ids` local ids when its ids run out: the new
 * state's record (its ids 0..count-1 as they were), or 0 (refused: the run stops, and Python runs
 * it again with more room) */
typedef i64 (*SimGrow)(i64 instance, i64 ids);

typedef struct Sim {
    SimIO *io;
    SimGrow grow;
    const KvPolicy *policy;
    KvTiers *tiers;
    i64 n, N, n_prefill, bs, capacity, T;
    int disagg, output_kv, precheck, mode;
    Inst *inst;
    Router *router;
    /* per request */
    i64 *computed, *target, *generated, *new_tokens;
    i64 *base_len, *base_input, *base_n, *dec_pinned; /* what it holds: requests.c */
    i8 *decoding, *kv_in;
    i64 *outputs;
    i8 *prefill_only; /* SGLang's prefill-only request (max_new_tokens 0; its input O is PREFILL_ONLY):
                       * one forward over its prompt, KV of its prompt, nothing reserved for outputs */
    f64 *load_s, *last_token;
    f64 *joined;       /* when it last joined a waiting queue (async scheduling's visibility) */
    i64 *qnext, *qprev;
    i64 *routed_overlap;
    i32 *lblocks;      /* its positions' local ids on the instance that holds it */
    i64 *lpm_key, *order;
    i64 *tier_scratch; /* T + 1 */
    /* routing */
    i32 *route_scratch; /* a prompt's ids on an instance it is not routed to yet */
    i32 *key_scratch;   /* a request's key in the SGLang style's tree (requests.c tree_key) */
    i64 *ids_cap;       /* per instance: how many ids its state and tables hold */
    i32 **router_tables;
    uint64_t rng;
    /* routers' prefix scans (routing/scan.c; cfg ROUTE_BITS: 1 with these residency bits, 0 without,
     * -1 every scan per instance, the reference): every instance's residency as a bit per trace id
     * (bit_words words an id; NULL: each instance's cache is probed instead), kept by requests.c
     * from the policy's own answers; a pick's prefixes for every instance at once */
    uint64_t *res_bits, *bit_scratch;
    i64 bit_words, pick, prefix_pick;
    i64 *route_prefix, *route_limit;
    /* the router's view of every instance, and its lagged copy */
    f64 *view, *seen;
    /* transfers in flight (disaggregation): a heap by arrival time */
    f64 *heap_t;
    i64 *heap_i, heap_n;
    /* time series */
    i64 steps_all, stride, nseries;
    f64 itl_gap;  /* the last inter-token gap binned, and its bin (a decode step's gaps repeat) */
    i64 itl_bin;
    f64 agg[16];
    i64 done;
    f64 now;
    /* MODE_HYBRID and MODE_RADIX_HYBRID: the hybrid engine (vLLM's coordinator, hybrid.c; SGLang's
     * UnifiedRadixCache, sglang_hybrid.c), each instance's engine state (engines_ready of them set
     * up) and each request's, opaque (engine_of, engine_req) */
    const HybridEngine *engine;
    char *engines, *engine_reqs;
    i64 engines_ready;
    i64 *batch_scratch; /* a prefill batch's requests (sglang.c prefill_batch) */
    i64 *rkoff, *rkeys;
    i64 *trt;          /* STYLE_TRTLLM: the step's arrays (trtllm.c), 17 n + 64 */
    int failed;        /* a state ran out of room: the run stops (Python sizes it again) */
    /* closed-loop arrivals (release.c) */
    int closed;
    i64 *waits_left;   /* per request: the requests it still waits for */
    f64 *ready_at;     /* per request: the latest time one of them released it to (its send, once none is left) */
    f64 *rel_t;        /* released requests not arrived yet: a heap by arrival time, then request */
    i64 *rel_i, rel_n;
    i64 arrived;       /* requests that have arrived */
    i64 *session_left; /* per session: its requests not ended yet (lanes) */
    i64 lane_next;     /* the next entry of lane_queue a freed lane takes */
    i64 turn;          /* the next instance of a round-robin made at arrival (assigned < 0) */
    /* data parallelism in lockstep (cfg DP_LOCKSTEP: an MoE's DP ranks, the instances; batch.c
     * batch_start_lockstep): the wave's steps so far (vLLM's step_counter), whether a wave runs,
     * each rank's step aggregates, requests and KV load seconds while the group's step is priced */
    i64 wave_steps;
    int wave;
    f64 *rank_agg, *rank_load;
    i64 *rank_batch;
    i64 snapshots;     /* the router's snapshots taken so far (a lagged router's state knows a new one) */
} Sim;

/* ---- requests.c ---- */
/* positions request i needs with `tokens` tokens in KV (its prompt's, then decode blocks) */
i64 req_needed_positions(const Sim *s, i64 i, i64 tokens);
/* admit waiting request i for at most `budget` tokens this step (`partial`: it may take fewer than
 * it needs): the tokens it computes, 0 when it waits (nothing held) */
i64 req_admit(Sim *s, i64 j, i64 i, i64 budget, int partial);
/* admit waiting request i with all it needs held at once (SGLang), its hit at most max_hits blocks
 * (negative: no bound): 1, or 0 when it waits */
i64 req_schedule(Sim *s, i64 j, i64 i, i64 max_hits, i64 tokens);
/* hold what request i needs with `tokens` tokens in KV: 0 when the pool is out of room */
int req_grow(Sim *s, i64 j, i64 i, i64 tokens);
/* release request i's blocks (finished, preempted or handed over) */
void req_release(Sim *s, i64 j, i64 i);
/* request i finished: the SGLang style's tree takes its pages first (requests.c), then req_release */
void req_finish(Sim *s, i64 j, i64 i);
/* the SGLang style over the radix tree without tiers: a request holds its path and its own pages
 * as SGLang's scheduler does (requests.c req_tree_held) */
int req_tree_held(const Sim *s);
/* a prefill step of request i ended and it goes on: the SGLang style's checkpoint */
void req_prefilled(Sim *s, i64 j, i64 i);
/* the next chunk of request i, up to `tokens` tokens: its pages (0: they do not fit now) */
int req_extend(Sim *s, i64 j, i64 i, i64 tokens);
/* the SGLang style: a prefill batch of `requests` requests evicts once for their new pages */
void req_batch_room(Sim *s, i64 j, i64 requests);
/* request i's prompt is computed: its full blocks are stored for reuse while it runs (a policy
 * with store_request: TensorRT-LLM's storeContextBlocks) */
void req_store(Sim *s, i64 j, i64 i);
/* preempt (vLLM) or retract (SGLang) request v: released, it waits to recompute its prompt and
 * outputs; the tokens it had this step */
i64 req_take_back(Sim *s, i64 j, i64 v);
/* the cached prefix (blocks) request i would get now on instance j, at most max_blocks (negative:
 * no bound); a policy's scan (a radix tree's cursor) ends there */
i64 req_cached_prefix(Sim *s, i64 j, i64 i, i64 max_blocks);
/* a radix tree's match of waiting request i's first n blocks, which stamps its path: the blocks
 * matched (a policy without touch_prefix: its cached prefix, touching nothing) */
i64 req_touch_prefix(Sim *s, i64 j, i64 i, i64 n);
/* a radix tree's eviction until `blocks` blocks are free (SGLang's decode allocates a page per
 * request ahead: allocation.py alloc_paged_token_slots_decode) */
void req_evict_ahead(Sim *s, i64 j, i64 blocks);
/* of the k blocks req_cached_prefix has just matched for request i, how many no request holds */
i64 req_unheld_prefix(Sim *s, i64 j, i64 i, i64 k);
/* give request i's positions instance j's ids (at routing or handover); 0 when j's ids are full */
int req_route_ids(Sim *s, i64 j, i64 i);

/* the blocks instance j's requests hold */
i64 req_held(const Sim *s, i64 j);
/* request i starts on instance j with `hit` tokens cached (hit_blocks through the tiers) (start.c) */
void req_started(Sim *s, i64 j, i64 i, i64 hit, i64 hit_blocks);

/* instance j's hybrid engine state and request i's (MODE_HYBRID, MODE_RADIX_HYBRID) */
static inline void *engine_of(const Sim *s, i64 j) { return s->engines + (size_t)j * s->engine->state_size; }
static inline void *engine_req(const Sim *s, i64 i) { return s->engine_reqs + (size_t)i * s->engine->request_size; }

/* ---- engine.c: the hybrid engine's states ---- */
/* each instance's engine set up from c (its num_blocks: the instance's ids): 0 when one could not
 * be (hybrid_error says why; the run stops) */
int engine_setup(Sim *s, const HybridEngine *e, HybridSetup c);
/* each instance's counters (the engine's counters columns) into counters, every state freed */
void engine_teardown(Sim *s, i64 *counters);

/* ---- hybrid.c: MODE_HYBRID's side of the functions above ---- */
int hyb_setup(Sim *s);  /* 0: a pool could not be set up (hybrid_error says why; the run stops) */
void hyb_teardown(Sim *s);
i64 hyb_admit(Sim *s, i64 j, i64 i, i64 budget, int partial);
int hyb_grow(Sim *s, i64 j, i64 i, i64 tokens);
void hyb_release(Sim *s, i64 j, i64 i);
i64 hyb_held(const Sim *s, i64 j);
/* the blocks a request with `tokens` tokens in KV holds at its peak, alone */
i64 hyb_peak(const Sim *s, i64 tokens);
void hyb_step_starts(Sim *s, i64 j); /* (vLLM's new_step_starts) */
int hyb_mamba(const Sim *s);         /* the layout has a Mamba group */
/* request i's chunk of n tokens from `start`, cut where the scheduler's Mamba split cuts it
 * (HybridCoordinator.mamba_split); 0: none fits this step */
i64 hyb_split(const Sim *s, i64 i, i64 start, i64 n);
/* the hit a request of `tokens` tokens with these (instance j's) ids would get on instance j, blocks */
i64 hyb_prefix(const Sim *s, i64 j, const i32 *ids, i64 nids, i64 tokens);

/* ---- sglang_hybrid.c: MODE_RADIX_HYBRID (a request's KV in SGLang's UnifiedRadixCache) ---- */
int sgh_setup(Sim *s); /* 0: a tree could not be set up (hybrid_error says why; the run stops) */
void sgh_teardown(Sim *s);
/* match_prefix of waiting request i (it stamps the path): the hit in pages */
i64 sgh_touch(Sim *s, i64 j, i64 i);
/* request i is matched and locked for admission: its hit tokens; -1: no state slot (nothing held) */
i64 sgh_begin(Sim *s, i64 j, i64 i);
/* its KV (and state slots) up to `end` tokens: 0 when they do not fit (sgh_drop gives it back) */
int sgh_extend(Sim *s, i64 j, i64 i, i64 end);
/* unlocked, all it holds outside the tree freed, nothing inserted (refused, or retracted) */
void sgh_drop(Sim *s, i64 j, i64 i);
void sgh_decode_prepare(Sim *s, i64 j);
int sgh_allocate_batch(Sim *s, i64 j, const i64 *batch, i64 n);
/* a prefill step of request i ended; goes_on: it stays running (cache_unfinished_req). 0: failed */
int sgh_prefilled(Sim *s, i64 j, i64 i, int goes_on);
/* one decode token's KV for request i: 0 when it does not fit */
int sgh_decode(Sim *s, i64 j, i64 i);
/* request i finished: inserted, freed, unlocked */
void sgh_release(Sim *s, i64 j, i64 i);
/* evict until `tokens` are free in each KV pool (check_decode_mem) */
void sgh_make_room(Sim *s, i64 j, i64 tokens);
/* instance j's free and evictable room (hybrid/engine.h ROOM_COLUMNS) */
void sgh_room(const Sim *s, i64 j, i64 *out);
/* instance j's sliding window in tokens (0: no SWA component) and its SWA pool in pages */
i64 sgh_window(const Sim *s, i64 j);
i64 sgh_swa_pages(const Sim *s, i64 j);
i64 sgh_held(const Sim *s, i64 j); /* full-KV pages running requests hold (their own and locked ones) */
/* the hit request i's prompt would get on instance j now, pages (a look: nothing is touched) */
i64 sgh_probe(const Sim *s, i64 j, i64 i);

/* ---- release.c: closed-loop arrivals ---- */
/* Closed loop (cfg CLOSED): request i waits for waits[i] links, and the links e in
 * [next_offsets[i], next_offsets[i + 1]) go from it to next_ids[e]: when request i is sent
 * (next_on_send[e]: when its client sends it, send_delay_s[i] before the engine sees it) or when it
 * ends (otherwise), next_ids[e] may be sent next_delay_s[e] later.
 * A request is sent at the latest of its links' times, once all have fired; one without links at
 * arrival[i]. Lanes: with session[i] (one per request, 0..S-1), each time a session's last request
 * ends, the next request of lane_queue (a later session's first, which counts that lane among its
 * waits) may be sent lane_delay_s[k] later (its entry's: what the host adds before it reaches the
 * engine). Open loop: every request at arrival[i]. */
void release_setup(Sim *s);
void release_teardown(Sim *s);
/* request i reached the engine (its links that fire on its client's send fired when it was released) */
void release_sent(Sim *s, i64 i);
/* request i ended (finished, rejected or refused): it is done, and its links that fire on its end */
void release_ended(Sim *s, i64 i);
void release_ended_at(Sim *s, i64 i, f64 t);
/* the earliest release not arrived yet (INFINITY: none), and taking it */
f64 release_next_t(const Sim *s);
i64 release_pop(Sim *s);

/* ---- queues (queues.c) ---- */
void queue_push_back(Sim *s, Inst *q, i64 i);
void queue_push_front(Sim *s, Inst *q, i64 i);
i64 queue_pop_front(Sim *s, Inst *q);
/* the transfers in flight: push one arriving at t, pop the earliest (heap_t[0], heap_i[0]) */
void heap_push(Sim *s, f64 t, i64 i);
void heap_pop(Sim *s);

/* ---- schedulers: fill new_tokens of the instance's step; the running list may change ---- */
void vllm_schedule(Sim *s, i64 j);
void sglang_schedule(Sim *s, i64 j);
void trtllm_schedule(Sim *s, i64 j);

/* ---- speculative decoding (batch.c; serving/speculative.py resolves the acceptance) ---- */
/* the draft tokens request i's verification accepts out of `drafted` (a seeded draw per request and
 * per output position: position p is accepted when every position before it was and a uniform draw
 * falls below spec_accept[p], the conditional acceptance rate) */
i64 spec_draw(const Sim *s, i64 i, i64 drafted);

/* ---- batch.c ---- */
int batch_start(Sim *s, i64 j);
void batch_end(Sim *s, i64 j);
/* the DP ranks' step in lockstep, every rank scheduled (new_tokens set): its duration the longest
 * rank's, ranks without work running a dummy batch; dummy: a step of dummy batches only (the wave's
 * tail). 0: no rank has work and dummy is 0 (nothing priced) */
int batch_start_lockstep(Sim *s, int dummy);

/* ---- metrics.c ---- */
void metrics_token_gap(Sim *s, f64 gap);
void metrics_series(Sim *s);
void metrics_peaks(Sim *s, i64 j);

/* ---- the time model (serving/timing/step.c) ---- */
f64 kv_step_seconds(const f64 *tm, const f64 *agg);
f64 kv_prefill_estimate(const f64 *tm, i64 prompt_tokens, i64 cached);
i64 kv_time_model_window(const f64 *tm);

static inline i64 sim_full_blocks(i64 prompt_tokens, i64 prompt_blocks, i64 bs) {
    /* the prompt's full blocks, as Dynamo hashes them (at most its block ids) */
    return kv_min(prompt_tokens / bs, prompt_blocks);
}

static inline i64 sim_ceil_page(i64 tokens, i64 bs) { return (tokens + bs - 1) / bs * bs; }

/* instance q's bit of trace id `id` in a bitset of `words` words an id (Sim.res_bits, a router's) */
static inline void sim_bit(uint64_t *bits, i64 words, i64 id, i64 q, int on) {
    uint64_t *w = bits + id * words + q / 64, b = (uint64_t)1 << (q % 64);
    *w = on ? (*w | b) : (*w & ~b);
}

/* the ids instance j's policy state (or hybrid pool) knows request positions by: its local ids,
 * or the trace's when it has no id map */
static inline const i32 *policy_ids(const Sim *s, i64 j) { return s->inst[j].ids == NULL ? s->io->blocks : s->lblocks; }

#endif
