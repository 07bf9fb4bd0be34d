/* A step's duration from its aggregates, for each packed time model (serving/timing.py's
 * ``packed`` lays them out; its ``step_time`` methods are the same formulas in Python, and
 * tests/serving/test_timing.py holds the two together). */
#ifndef KV_TIMING_STEP_H
#define KV_TIMING_STEP_H

#include "../../include/kv.h"

/* a step's aggregates (batch.c accumulates them over the requests in the step); AGG_SPEC_TOKENS:
 * the draft tokens the decoding requests' verification passes add to the step's GEMMs;
 * AGG_EXPERT_TOKENS: the tokens an MoE's routed experts run over when the step's own are not all
 * (data parallelism: every DP rank's, gathered; 0: the step's own) */
#define AGG_SLOTS(S) S(AGG_PREFILL_REQS) S(AGG_PREFILL_NEW) S(AGG_PREFILL_CACHED) S(AGG_DECODE_REQS) \
    S(AGG_DECODE_CTX) S(AGG_ACTIVE_KV) S(AGG_KEYS_FULL) S(AGG_TOUCHED_FULL) S(AGG_KEYS_SW) S(AGG_TOUCHED_SW) \
    S(AGG_DECODE_SW) S(AGG_SPEC_TOKENS) S(AGG_EXPERT_TOKENS)
enum { AGG_SLOTS(KV_SLOT_ENUM) NUM_AGG };

/* tm[0]: the model's kind */
#define TIME_KIND_SLOTS(S) S(KIND_INSTANT) S(KIND_ROOFLINE) S(KIND_NPZ) S(KIND_POLY) S(KIND_CALIBRATED)
enum { TIME_KIND_SLOTS(KV_SLOT_ENUM) NUM_TIME_KINDS };

/* the roofline's slots, after the kind */
#define ROOFLINE_SLOTS(S) S(R_KIND) S(R_ACTIVE_PARAMS) S(R_ATTN_WIDTH) S(R_LAYERS_FULL) S(R_LAYERS_SW) S(R_WINDOW) \
    S(R_WEIGHT_BYTES) S(R_ACTIVE_WEIGHT_BYTES) S(R_TP) S(R_KV_LAYER_TOKEN) S(R_FLOPS) S(R_BYTES_PER_S) S(R_OVERHEAD)
enum { ROOFLINE_SLOTS(KV_SLOT_ENUM) NUM_ROOFLINE };

/* the calibrated roofline's slots (serving/timing/roofline.py): the model's shape per GPU, the
 * GPU's peaks, the fitted coefficients, then a factor per kind of step (1; an end of the
 * calibration's band when the simulator runs the band); a dense model's layer GEMMs one by one
 * (C_GEMMS of them, each (n, k) on one GPU; 0: one GEMM of the body's parameters); an MoE's routed
 * experts apart (C_MOE_LAYERS > 0: roofline.py moe_layer_time, C_MOE_INTER each expert's width / tp);
 * Gated DeltaNet layers on their fitted kernel (C_GDN > 0: roofline.py gdn_layer_time); an MLA
 * model's projections as the C_GEMMS, the rest of its body one GEMM beside them (C_BODY_BESIDE),
 * prefill attention at its own width (C_ATTN_WIDTH_PREFILL) and the MLA module's floor and cost
 * per token per layer (C_MLA_FLOOR, C_MLA_PER_TOKEN: roofline.py _mla_apart), and the kv_b FLOPs
 * per cached token per layer a prefill decompresses (C_MLA_CONTEXT_FLOPS); vLLM's custom all-reduce's
 * one stage (C_AR_LINK > 0: roofline.py allreduce_time; C_AR_LATENCY2 its second stage's barrier) and
 * NCCL's terms at the group's degree above it (C_AR_NCCL_LATENCY, C_AR_NCCL_BUS: roofline.py nccl_terms),
 * the decode attention's split over (request, KV head) pairs (C_ATTN_SPLIT, C_KV_HEADS_GPU) and the
 * elementwise kernels (C_EW_KERNELS a step, C_EW_BYTES a token: roofline.py elementwise_work); the
 * host's kernel launches of a step vLLM runs without a CUDA graph, more than C_EAGER_ABOVE tokens
 * (C_LAUNCH_LAYER_S per layer, 0: none; models.py eager_step); the expert-parallel group the routed
 * tokens are split over (C_MOE_EP, 0 or 1: none; each rank then holds C_MOE_EXPERTS of them whole); an
 * MoE whose experts are not apart, under data parallelism: its routed experts out of the body's GEMM
 * into one GEMM of their own over the gathered tokens, split over C_DPX_GPUS GPUs (C_DPX_PARAMS the
 * active ones a token, C_DPX_BYTES all their bytes, C_DPX_ACTIVE_BYTES a token's; roofline.py dp_experts);
 * an MoE's experts under served routing,
 * their time x a factor linear in log2(tokens) between knots at 2^0 .. 2^14 tokens (C_MOE_ROUTE and
 * the 14 slots after it; all 1: balanced routing, as the MoE tables time it; roofline.py served_routing);
 * C_QK_NORM_ALLREDUCES all-reduces of 8 bytes a token more per step (q and k normed over every head:
 * roofline.py QK_NORM_BYTES_PER_TOKEN, one a layer under TP; 0: none); the DP ranks' token exchange
 * at each of C_XCH_LAYERS MoE layers (0: none; timing/exchange.py): an all-gather of C_XCH_DISPATCH_BYTES
 * and a reduce-scatter of C_XCH_COMBINE_BYTES a gathered token over C_XCH_GROUP GPUs, each at its
 * latency and bus bandwidth (C_XCH_AG_*, C_XCH_RS_*); C_XCH_SP > 1: the MoE sequence-parallel over
 * that many TP GPUs (C_XCH_GROUP is DP x TP, the gathered tokens each GPU's chunk padded: kernel/batch.c
 * batch_start_lockstep), each MoE layer's output all-gathered over them (C_XCH_TPG_* its latency and
 * bus) in place of its TP all-reduce (0: not sequence-parallel); an fp8 GEMM's compute efficiency
 * C_E_GEMM up to C_LARGE_FROM rows, C_E_GEMM_LARGE from C_LARGE_AT, linear between (0: C_E_GEMM at
 * every size; roofline.py fp8_gemm_efficiency) */
#define CALIBRATED_SLOTS(S) S(C_KIND) S(C_LAYERS) S(C_LAYERS_FULL) S(C_LAYERS_SW) S(C_WINDOW) S(C_TP)            \
    S(C_BODY_PARAMS) S(C_BODY_WEIGHT_BYTES) S(C_ACTIVE_BODY_WEIGHT_BYTES) S(C_HEAD_PARAMS) S(C_HEAD_WEIGHT_BYTES) \
    S(C_HIDDEN) S(C_ATTN_WIDTH) S(C_KV_LAYER_TOKEN) S(C_PEAK) S(C_ATTN_PEAK) S(C_BW)                           \
    S(C_E_GEMM) S(C_E_WEIGHTS) S(C_GEMM_FLOOR) S(C_E_ATTN_PREFILL) S(C_E_KV_PREFILL) S(C_ATTN_FLOOR_PREFILL)   \
    S(C_E_ATTN_DECODE) S(C_E_KV_DECODE) S(C_ATTN_FLOOR_DECODE) S(C_AR_LATENCY) S(C_AR_BUS) S(C_PER_LAYER)       \
    S(C_PER_STEP) S(C_SCALE_PREFILL) S(C_SCALE_DECODE) S(C_SCALE_MIXED) S(C_HEAD_E_GEMM)                   \
    S(C_HEAD_E_WEIGHTS) S(C_HEAD_FLOOR) S(C_QUANT_BYTES_PER_TOKEN) S(C_E_QUANT) S(C_TILE_ABOVE) S(C_TILE_ROWS) \
    S(C_ATTN_LAYERS) S(C_MAMBA_LAYERS) S(C_STATE_BYTES) S(C_TILE_PARTIAL)  \
    S(C_GEMM_P) S(C_HEAD_P) S(C_ATTN_PER_REQ_DECODE)                                                          \
    S(C_GEMMS) S(C_G1_N) S(C_G1_K) S(C_G2_N) S(C_G2_K) S(C_G3_N) S(C_G3_K) S(C_G4_N) S(C_G4_K)                 \
    S(C_GEMM_K0) S(C_GEMM_IN_BYTES) S(C_GEMM_W_BYTES)                                                        \
    S(C_MOE_LAYERS) S(C_MOE_EXPERTS) S(C_MOE_TOPK) S(C_MOE_INTER) S(C_MOE_W_BYTES) S(C_MOE_PEAK)                \
    S(C_MOE_E_GEMM) S(C_MOE_E_WEIGHTS) S(C_MOE_FLOOR) S(C_MOE_P) S(C_MOE_PER_TOKEN) S(C_MOE_TILE_ROWS) S(C_MOE_K0) \
    S(C_GDN) S(C_GDN_ACT) S(C_GDN_VHEADS) S(C_GDN_PARALLEL) S(C_GDN_FLOOR_PREFILL) S(C_GDN_E_PREFILL)              \
    S(C_GDN_E_BYTES_PREFILL) S(C_GDN_PER_REQ_PREFILL) S(C_GDN_FLOOR_DECODE) S(C_GDN_E_DECODE) S(C_GDN_E_BYTES_DECODE) \
    S(C_GDN_PER_REQ_DECODE) S(C_ATTN_WIDTH_PREFILL) S(C_BODY_BESIDE) S(C_BODY_GEMMS)                             \
    S(C_MLA_FLOOR) S(C_MLA_PER_TOKEN) S(C_MLA_CONTEXT_FLOPS) S(C_MOE_TILE_ROWS_LARGE) S(C_MOE_TILE_ABOVE)    \
    S(C_AR_LATENCY2) S(C_AR_LINK) S(C_ATTN_SPLIT) S(C_KV_HEADS_GPU) S(C_EW_KERNELS) S(C_EW_BYTES) S(C_EW_FLOOR)  \
    S(C_E_EW) S(C_LAUNCH_LAYER_S) S(C_EAGER_ABOVE) S(C_MOE_EP) \
    S(C_DPX_PARAMS) S(C_DPX_BYTES) S(C_DPX_ACTIVE_BYTES) S(C_DPX_GPUS) S(C_MOE_ROUTE)                          \
    S(C_MOE_ROUTE_1) S(C_MOE_ROUTE_2) S(C_MOE_ROUTE_3) S(C_MOE_ROUTE_4) S(C_MOE_ROUTE_5) S(C_MOE_ROUTE_6)        \
    S(C_MOE_ROUTE_7) S(C_MOE_ROUTE_8) S(C_MOE_ROUTE_9) S(C_MOE_ROUTE_10) S(C_MOE_ROUTE_11) S(C_MOE_ROUTE_12)     \
    S(C_MOE_ROUTE_13) S(C_MOE_ROUTE_14) S(C_QK_NORM_ALLREDUCES) S(C_AR_NCCL_LATENCY) S(C_AR_NCCL_BUS)      \
    S(C_XCH_LAYERS) S(C_XCH_GROUP) S(C_XCH_DISPATCH_BYTES) S(C_XCH_COMBINE_BYTES) S(C_XCH_AG_LATENCY) S(C_XCH_AG_BUS) \
    S(C_XCH_RS_LATENCY) S(C_XCH_RS_BUS) S(C_E_GEMM_LARGE) S(C_LARGE_FROM) S(C_LARGE_AT)                     \
    S(C_XCH_SP) S(C_XCH_TPG_LATENCY) S(C_XCH_TPG_BUS)
/* an MoE's served-routing factor at 2^0 .. 2^14 tokens (roofline.py SERVED_ROUTING), from C_MOE_ROUTE on */
#define MOE_ROUTING_KNOTS 15
enum { CALIBRATED_SLOTS(KV_SLOT_ENUM) NUM_CALIBRATED };

f64 kv_step_seconds(const f64 *tm, const f64 *agg);
/* one prefill of `prompt_tokens` with `cached` of them cached (the last token is always computed) */
f64 kv_prefill_estimate(const f64 *tm, i64 prompt_tokens, i64 cached);
/* the sliding window the model needs aggregates for (0: none) */
i64 kv_time_model_window(const f64 *tm);
/* sum(min(k, w) for k in a..b), a <= b */
i64 kv_sum_min(i64 a, i64 b, i64 w);

#endif
