/* The packed time models' step durations (step.h). */
#include <math.h>

#include "step.h"

KV_EXPORT const char kv_layout_timing[] = " | agg=" AGG_SLOTS(KV_SLOT_SPEC) " | kind=" TIME_KIND_SLOTS(KV_SLOT_SPEC)
                                          " | roofline=" ROOFLINE_SLOTS(KV_SLOT_SPEC)
                                          " | calibrated=" CALIBRATED_SLOTS(KV_SLOT_SPEC);

/* tm[start:start+n] rises: the segment i (0..n-2) holding x, its ends extended */
static i64 segment(const f64 *tm, i64 start, i64 n, f64 x) {
    i64 lo = 0, hi = n - 2;
    while (lo < hi) {
        i64 mid = (lo + hi + 1) / 2;
        if (tm[start + mid] <= x) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static inline f64 lerp(f64 x1, f64 y1, f64 x2, f64 y2, f64 x) { return (y2 - y1) / (x2 - x1) * (x - x1) + y1; }

static f64 roofline(const f64 *tm, const f64 *agg) {
    f64 tokens = agg[AGG_PREFILL_NEW] + agg[AGG_DECODE_REQS] + agg[AGG_SPEC_TOKENS];
    f64 flops = 2.0 * tm[R_ACTIVE_PARAMS] * tokens
                + 4.0 * tm[R_ATTN_WIDTH] * (tm[R_LAYERS_FULL] * agg[AGG_KEYS_FULL] + tm[R_LAYERS_SW] * agg[AGG_KEYS_SW]);
    f64 weights = kv_fmin(tm[R_WEIGHT_BYTES], tm[R_ACTIVE_WEIGHT_BYTES] * tokens) / tm[R_TP];
    f64 kv = tm[R_KV_LAYER_TOKEN] * (tm[R_LAYERS_FULL] * agg[AGG_TOUCHED_FULL] + tm[R_LAYERS_SW] * agg[AGG_TOUCHED_SW]);
    return kv_fmax(flops / tm[R_TP] / tm[R_FLOPS], (weights + kv) / tm[R_BYTES_PER_S]) + tm[R_OVERHEAD];
}

/* a GEMM's time from its compute and memory times (roofline.py soft_max; p 0: their max) */
static f64 soft_max(f64 compute, f64 memory, f64 p) {
    if (p <= 0) return kv_fmax(compute, memory);
    return pow(pow(compute, p) + pow(memory, p), 1.0 / p);
}

/* the layers' GEMMs (roofline.py layer_gemms): each at its shape, and/or one GEMM of the body */
static f64 layer_gemms(const f64 *tm, f64 tokens) {
    f64 bw = tm[C_BW], layers = tm[C_LAYERS];
    /* fp8: the rows its tiles compute (C_TILE_ROWS 0: every row as it is) */
    f64 rows_computed = tokens;
    if (tm[C_TILE_ROWS] > 0 && tokens > tm[C_TILE_ABOVE]) {  /* (and a partial last block's cost) */
        rows_computed = ceil(tokens / tm[C_TILE_ROWS]) * tm[C_TILE_ROWS];
        rows_computed += (rows_computed - tokens) / (tm[C_TILE_ROWS] - 1.0) * tm[C_TILE_PARTIAL];
    }
    /* fp8: the compute efficiency at these rows (roofline.py fp8_gemm_efficiency) */
    f64 e_gemm = tm[C_E_GEMM];
    if (tm[C_E_GEMM_LARGE] > 0) {
        f64 w = kv_fmin(kv_fmax((tokens - tm[C_LARGE_FROM]) / (tm[C_LARGE_AT] - tm[C_LARGE_FROM]), 0.0), 1.0);
        e_gemm += w * (tm[C_E_GEMM_LARGE] - e_gemm);
    }
    f64 layer = 0.0;
    for (i64 g = 0; g < (i64)tm[C_GEMMS]; g++) {
        f64 n = tm[C_G1_N + 2 * g], k = tm[C_G1_K + 2 * g];
        f64 compute = 2.0 * rows_computed * n * (k + tm[C_GEMM_K0]) / (tm[C_PEAK] * e_gemm);
        f64 memory = (tm[C_GEMM_IN_BYTES] * tokens * k + tm[C_GEMM_W_BYTES] * k * n + 2.0 * tokens * n)
                     / (bw * tm[C_E_WEIGHTS]);
        layer += soft_max(compute, memory, tm[C_GEMM_P]) + tm[C_GEMM_FLOOR];
    }
    f64 t = tm[C_GEMMS] > 0 ? layers * layer : 0.0;
    if (tm[C_GEMMS] > 0 && tm[C_BODY_BESIDE] == 0) return t;
    /* one GEMM of the body (beside an MLA's projections) */
    f64 flops = 2.0 * tm[C_BODY_PARAMS] * rows_computed / tm[C_TP];
    f64 weights = kv_fmin(tm[C_BODY_WEIGHT_BYTES], tm[C_ACTIVE_BODY_WEIGHT_BYTES] * tokens) / tm[C_TP];
    return t + (soft_max(flops / (tm[C_PEAK] * e_gemm), weights / (bw * tm[C_E_WEIGHTS]), tm[C_GEMM_P])
                + tm[C_BODY_GEMMS] * layers * tm[C_GEMM_FLOOR]);
}

/* the served-routing factor of a step of `tokens` tokens (roofline.py served_routing): linear in
 * log2(tokens) between the knots at 2^0 .. 2^14, the end knots' beyond */
static f64 moe_routing(const f64 *tm, f64 tokens) {
    f64 x = tokens > 1.0 ? log2(tokens) : 0.0;
    if (x >= MOE_ROUTING_KNOTS - 1) return tm[C_MOE_ROUTE + MOE_ROUTING_KNOTS - 1];
    int i = (int)x;
    f64 f = x - i;
    return tm[C_MOE_ROUTE + i] * (1.0 - f) + tm[C_MOE_ROUTE + i + 1] * f;
}

/* an MoE's routed experts (roofline.py moe_layer_time), over its MoE layers: `tokens` the ones
 * gathered to them; under expert parallelism a rank's experts take 1 / C_MOE_EP of their routings */
static f64 moe_experts(const f64 *tm, f64 tokens) {
    f64 h = tm[C_HIDDEN], inter = tm[C_MOE_INTER], k0 = tm[C_MOE_K0];
    f64 routed = tokens * tm[C_MOE_TOPK] / kv_fmax(1.0, tm[C_MOE_EP]), active = kv_fmin(tm[C_MOE_EXPERTS], routed);
    f64 tile = tokens > tm[C_MOE_TILE_ABOVE] ? tm[C_MOE_TILE_ROWS_LARGE] : tm[C_MOE_TILE_ROWS];
    f64 moe_rows = kv_fmax(routed, active * tile);
    f64 flops = 2.0 * moe_rows * (2.0 * (h + k0) * inter + (inter + k0) * h);
    f64 weights = active * 3.0 * h * inter * tm[C_MOE_W_BYTES];
    return tm[C_MOE_LAYERS] * (soft_max(flops / (tm[C_MOE_PEAK] * tm[C_MOE_E_GEMM]), weights / (tm[C_BW] * tm[C_MOE_E_WEIGHTS]),
                                        tm[C_MOE_P]) + tm[C_MOE_FLOOR] + tm[C_MOE_PER_TOKEN] * routed)
           * moe_routing(tm, tokens);
}

/* an MoE's routed experts as one GEMM of their own over `tokens` gathered tokens, split over
 * C_DPX_GPUS GPUs (data parallelism, the experts not apart: roofline.py dp_expert_gemm) */
static f64 dp_expert_gemm(const f64 *tm, f64 tokens) {
    f64 rows = tokens, gpus = tm[C_DPX_GPUS];
    if (tm[C_TILE_ROWS] > 0 && tokens > tm[C_TILE_ABOVE]) {
        rows = ceil(tokens / tm[C_TILE_ROWS]) * tm[C_TILE_ROWS];
        rows += (rows - tokens) / (tm[C_TILE_ROWS] - 1.0) * tm[C_TILE_PARTIAL];
    }
    f64 flops = 2.0 * tm[C_DPX_PARAMS] * rows / gpus;
    f64 weights = kv_fmin(tm[C_DPX_BYTES], tm[C_DPX_ACTIVE_BYTES] * tokens) / gpus;
    return soft_max(flops / (tm[C_PEAK] * tm[C_E_GEMM]), weights / (tm[C_BW] * tm[C_E_WEIGHTS]), tm[C_GEMM_P]);
}

/* the prefills' attention over the attention layers (roofline.py terms()) */
static f64 prefill_attention(const f64 *tm, const f64 *agg) {
    f64 kv = tm[C_KV_LAYER_TOKEN], lf = tm[C_LAYERS_FULL], lsw = tm[C_LAYERS_SW];
    f64 attn_layers = tm[C_ATTN_LAYERS]; /* (all of them but Mamba / linear-attention layers) */
    f64 keys_f = agg[AGG_KEYS_FULL] - agg[AGG_DECODE_CTX], keys_s = agg[AGG_KEYS_SW] - agg[AGG_DECODE_SW];
    f64 touched_f = agg[AGG_TOUCHED_FULL] - agg[AGG_DECODE_CTX], touched_s = agg[AGG_TOUCHED_SW] - agg[AGG_DECODE_SW];
    f64 width_p = tm[C_ATTN_WIDTH_PREFILL];
    f64 f = 4.0 * width_p * (lf * keys_f + lsw * keys_s);
    f64 b = kv * (lf * touched_f + lsw * touched_s) + 4.0 * width_p * agg[AGG_PREFILL_NEW] * attn_layers;
    return attn_layers * tm[C_ATTN_FLOOR_PREFILL]
           + kv_fmax(f / (tm[C_ATTN_PEAK] * tm[C_E_ATTN_PREFILL]), b / (tm[C_BW] * tm[C_E_KV_PREFILL]));
}

/* the decodes' attention over the attention layers (roofline.py terms()) */
static f64 decode_attention(const f64 *tm, const f64 *agg) {
    f64 width = tm[C_ATTN_WIDTH], kv = tm[C_KV_LAYER_TOKEN], lf = tm[C_LAYERS_FULL], lsw = tm[C_LAYERS_SW];
    f64 ctx = agg[AGG_DECODE_CTX], ctx_s = agg[AGG_DECODE_SW];
    f64 f = 4.0 * width * (lf * ctx + lsw * ctx_s), b = kv * (lf * ctx + lsw * ctx_s);
    if (tm[C_KV_HEADS_GPU] > 0) b *= 1.0 + tm[C_ATTN_SPLIT] / (agg[AGG_DECODE_REQS] * tm[C_KV_HEADS_GPU]);
    return tm[C_ATTN_LAYERS] * (tm[C_ATTN_FLOOR_DECODE] + agg[AGG_DECODE_REQS] * tm[C_ATTN_PER_REQ_DECODE])
           + kv_fmax(f / (tm[C_ATTN_PEAK] * tm[C_E_ATTN_DECODE]), b / (tm[C_BW] * tm[C_E_KV_DECODE]));
}

/* one all-reduce of `bytes` (roofline.py allreduce_time): vLLM's custom all-reduce in one stage or
   two below 8 MiB, NCCL above at the degree's own terms (C_AR_LINK 0: the ring for every message) */
static f64 allreduce(const f64 *tm, f64 bytes) {
    f64 tp = tm[C_TP];
    f64 ring = 2.0 * (tp - 1.0) / tp * bytes / tm[C_AR_BUS];
    if (tm[C_AR_LINK] <= 0) return tm[C_AR_LATENCY] + ring;
    int custom = tp <= 8 && bytes < 8.0 * 1048576.0;
    int one = tp == 2 || (tp <= 4 && bytes < 512.0 * 1024.0) || (tp <= 8 && bytes < 256.0 * 1024.0);
    if (custom && one) return tm[C_AR_LATENCY] + (tp - 1.0) * bytes / tm[C_AR_LINK];
    if (custom) return tm[C_AR_LATENCY] + ring + tm[C_AR_LATENCY2];
    return tm[C_AR_LATENCY] + tm[C_AR_NCCL_LATENCY] + 2.0 * (tp - 1.0) / tp * bytes / tm[C_AR_NCCL_BUS];
}

/* the DP ranks' token exchange over `gathered` tokens (timing/exchange.py Exchange.seconds): at each
   MoE layer an all-gather and a reduce-scatter over C_XCH_GROUP GPUs, latency + (n - 1) / n x bytes / bus;
   sequence-parallel (C_XCH_SP > 1, Exchange.output_gather_seconds), the MoE output of the rank's own
   `tokens` all-gathered over its C_XCH_SP TP GPUs too, padded to C_XCH_SP equal chunks */
static f64 dp_exchange(const f64 *tm, f64 gathered, f64 tokens) {
    f64 g = tm[C_XCH_GROUP], ring = (g - 1.0) / g * gathered;
    f64 t = tm[C_XCH_AG_LATENCY] + ring * tm[C_XCH_DISPATCH_BYTES] / tm[C_XCH_AG_BUS]
            + tm[C_XCH_RS_LATENCY] + ring * tm[C_XCH_COMBINE_BYTES] / tm[C_XCH_RS_BUS];
    f64 sp = tm[C_XCH_SP];
    if (sp > 1) {
        f64 padded = sp * ceil(tokens / sp);
        t += tm[C_XCH_TPG_LATENCY] + (sp - 1.0) / sp * padded * tm[C_XCH_COMBINE_BYTES] / tm[C_XCH_TPG_BUS];
    }
    return tm[C_XCH_LAYERS] * t;
}

/* Mamba / linear-attention layers: Gated DeltaNet on its fitted kernel (roofline.py gdn_layer_time)
   or the state term (mamba_term) */
static f64 linear_layers(const f64 *tm, f64 tokens, f64 rows, int prefill) {
    f64 tp = tm[C_TP], bw = tm[C_BW];
    if (tm[C_GDN] > 0) {
        f64 st = tm[C_STATE_BYTES] / tp, flops = 6.0 * st / 2.0 * tokens;
        f64 nbytes = 2.0 * st * rows + tm[C_GDN_ACT] * tokens, layer;
        if (prefill) {
            f64 occupancy = kv_fmax(1.0, tm[C_GDN_PARALLEL] / (rows * tm[C_GDN_VHEADS]));
            layer = tm[C_GDN_FLOOR_PREFILL] + kv_fmax(flops * occupancy / (tm[C_ATTN_PEAK] * tm[C_GDN_E_PREFILL]),
                                                      nbytes / (bw * tm[C_GDN_E_BYTES_PREFILL]))
                    + tm[C_GDN_PER_REQ_PREFILL] * rows;
        } else {
            layer = tm[C_GDN_FLOOR_DECODE] + kv_fmax(flops / (tm[C_ATTN_PEAK] * tm[C_GDN_E_DECODE]),
                                                     nbytes / (bw * tm[C_GDN_E_BYTES_DECODE]))
                    + tm[C_GDN_PER_REQ_DECODE] * rows;
        }
        return tm[C_MAMBA_LAYERS] * layer;
    }
    f64 m = tm[C_MAMBA_LAYERS], state = tm[C_STATE_BYTES];
    f64 nbytes = 2.0 * state * m * rows / tp, f = 6.0 * state / 2.0 * m * tokens / tp;
    f64 floor_s = prefill ? tm[C_ATTN_FLOOR_PREFILL] : tm[C_ATTN_FLOOR_DECODE];
    f64 e = prefill ? tm[C_E_ATTN_PREFILL] : tm[C_E_ATTN_DECODE];
    return m * floor_s + kv_fmax(f / (tm[C_ATTN_PEAK] * e), nbytes / (bw * tm[C_E_KV_DECODE]));
}

/* the calibrated roofline: the sum of its kernels' times (serving/timing/roofline.py terms()) */
static f64 calibrated(const f64 *tm, const f64 *agg) {
    f64 tp = tm[C_TP], layers = tm[C_LAYERS], bw = tm[C_BW];
    f64 prefill_reqs = agg[AGG_PREFILL_REQS], decodes = agg[AGG_DECODE_REQS];
    /* (a verification pass's draft tokens run the GEMMs and the LM head as more rows) */
    f64 tokens = agg[AGG_PREFILL_NEW] + decodes + agg[AGG_SPEC_TOKENS], rows = prefill_reqs + decodes + agg[AGG_SPEC_TOKENS];
    f64 t = layer_gemms(tm, tokens);
    f64 gathered = agg[AGG_EXPERT_TOKENS] > 0 ? agg[AGG_EXPERT_TOKENS] : tokens;
    if (tm[C_MOE_LAYERS] > 0) t += moe_experts(tm, gathered);
    if (tm[C_DPX_GPUS] > 0) t += dp_expert_gemm(tm, gathered);
    if (tm[C_XCH_LAYERS] > 0) t += dp_exchange(tm, gathered, tokens);
    if (tm[C_QUANT_BYTES_PER_TOKEN] > 0)  /* fp8: the GEMM inputs' quantisation */
        t += tokens * tm[C_QUANT_BYTES_PER_TOKEN] / (bw * tm[C_E_QUANT]);
    if (tm[C_HEAD_PARAMS] > 0)
        t += soft_max(2.0 * tm[C_HEAD_PARAMS] * rows / tp / (tm[C_ATTN_PEAK] * tm[C_HEAD_E_GEMM]),
                      tm[C_HEAD_WEIGHT_BYTES] / tp / (bw * tm[C_HEAD_E_WEIGHTS]), tm[C_HEAD_P]) + tm[C_HEAD_FLOOR];
    if (prefill_reqs > 0) t += prefill_attention(tm, agg);
    if (decodes > 0) t += decode_attention(tm, agg);
    if (tm[C_MLA_FLOOR] > 0 || tm[C_MLA_PER_TOKEN] > 0)  /* the MLA module's floor and elementwise kernels */
        t += tm[C_ATTN_LAYERS] * (tm[C_MLA_FLOOR] + tm[C_MLA_PER_TOKEN] * tokens
                                  + tm[C_MLA_CONTEXT_FLOPS] * agg[AGG_PREFILL_CACHED] / (tm[C_PEAK] * tm[C_E_GEMM]));
    if (tm[C_MAMBA_LAYERS] > 0) t += linear_layers(tm, tokens, rows, prefill_reqs > 0);
    if (tp > 1 && tm[C_HIDDEN] > 0) {  /* (sequence-parallel MoE: its layers' all-reduce replaced, exchange.py) */
        f64 reduces = 2.0 * layers - (tm[C_XCH_SP] > 1 ? tm[C_XCH_LAYERS] : 0.0);
        t += reduces * allreduce(tm, tokens * tm[C_HIDDEN] * 2.0);
    }
    if (tm[C_QK_NORM_ALLREDUCES] > 0)  /* q and k normed over every head: their variances, 8 bytes a token */
        t += tm[C_QK_NORM_ALLREDUCES] * allreduce(tm, tokens * 8.0);
    if (tm[C_EW_KERNELS] > 0)  /* the elementwise kernels (roofline.py elementwise_work) */
        t += tm[C_EW_KERNELS] * tm[C_EW_FLOOR] + tokens * tm[C_EW_BYTES] / (bw * tm[C_E_EW]);
    t += layers * tm[C_PER_LAYER] + tm[C_PER_STEP];
    f64 scale = prefill_reqs > 0 ? (decodes > 0 ? tm[C_SCALE_MIXED] : tm[C_SCALE_PREFILL]) : tm[C_SCALE_DECODE];
    /* a step above vLLM's largest CUDA graph runs eager: its kernels launched one by one from the host,
       which overlaps the GPU's work, so the step takes the longer of the two (models.py eager_step) */
    if (tm[C_LAUNCH_LAYER_S] > 0 && tokens > tm[C_EAGER_ABOVE]) return kv_fmax(t * scale, layers * tm[C_LAUNCH_LAYER_S]);
    return t * scale;
}

/* Dynamo's NPZ profile: prefill by the batch's new tokens, decode by (active KV, context) */
static f64 npz(const f64 *tm, const f64 *agg) {
    i64 n = (i64)tm[2];
    i64 px = 3, py = 3 + n;
    i64 r = (i64)tm[3 + 2 * n], c = (i64)tm[4 + 2 * n];
    i64 dx = 5 + 2 * n, dy = 5 + 2 * n + r, dz = dy + c;
    f64 prefill = 0.0, decode = 0.0;
    f64 k = agg[AGG_PREFILL_REQS];
    if (k > 0) {
        f64 prefix = agg[AGG_PREFILL_CACHED];
        f64 isl = prefix + agg[AGG_PREFILL_NEW];
        f64 fresh = floor(isl / k) - floor(prefix / k);
        if (fresh > 0) {
            f64 x = k * fresh;
            i64 i = segment(tm, px, n, x);
            prefill = kv_fmax(lerp(tm[px + i], tm[py + i], tm[px + i + 1], tm[py + i + 1], x), 0.0);
        }
    }
    f64 b = agg[AGG_DECODE_REQS];
    if (b > 0) {
        f64 x = agg[AGG_ACTIVE_KV];
        f64 y = floor(agg[AGG_DECODE_CTX] / b);
        i64 i = segment(tm, dx, r, x), j = segment(tm, dy, c, y);
        f64 x1 = tm[dx + i], x2 = tm[dx + i + 1], y1 = tm[dy + j], y2 = tm[dy + j + 1];
        f64 z1 = lerp(x1, tm[dz + i * c + j], x2, tm[dz + (i + 1) * c + j], x);
        f64 z2 = lerp(x1, tm[dz + i * c + j + 1], x2, tm[dz + (i + 1) * c + j + 1], x);
        decode = kv_fmax(lerp(y1, z1, y2, z2, y), tm[1]);
    }
    return (prefill + decode) / 1000.0;
}

/* a polynomial in the batch's variables (serving/timing.py POLY_VARIABLES order) */
static f64 polynomial(const f64 *tm, const f64 *agg) {
    f64 b = agg[AGG_DECODE_REQS];
    f64 v[6] = {agg[AGG_PREFILL_NEW], agg[AGG_PREFILL_REQS], agg[AGG_PREFILL_CACHED], b, agg[AGG_DECODE_CTX],
                b > 0 ? agg[AGG_DECODE_CTX] / b : 0.0};
    f64 total = 0.0;
    i64 terms = (i64)tm[3];
    for (i64 t = 0; t < terms; t++) {
        const f64 *term = tm + 4 + t * 7;
        /* the products grouped as serving/timing.py groups them (same rounding) */
        f64 value = term[0];
        value *= pow(v[0], term[1]) * pow(v[1], term[2]) * pow(v[2], term[3]);
        value *= pow(v[3], term[4]) * pow(v[4], term[5]) * pow(v[5], term[6]);
        total += value;
    }
    return kv_fmax(total, tm[2]) * tm[1];
}

f64 kv_step_seconds(const f64 *tm, const f64 *agg) {
    i64 kind = (i64)tm[0];
    if (kind == KIND_INSTANT || (agg[AGG_PREFILL_REQS] == 0 && agg[AGG_DECODE_REQS] == 0)) return 0.0;
    if (kind == KIND_ROOFLINE) return roofline(tm, agg);
    if (kind == KIND_NPZ) return npz(tm, agg);
    if (kind == KIND_CALIBRATED) return calibrated(tm, agg);
    return polynomial(tm, agg);
}

i64 kv_sum_min(i64 a, i64 b, i64 w) {
    if (b <= w) return (a + b) * (b - a + 1) / 2;
    if (a > w) return w * (b - a + 1);
    return (a + w) * (w - a + 1) / 2 + w * (b - w);
}

KV_EXPORT f64 kv_prefill_estimate(const f64 *tm, i64 prompt_tokens, i64 cached) {
    if (cached >= prompt_tokens) cached = prompt_tokens > 0 ? prompt_tokens - 1 : 0;
    i64 fresh = prompt_tokens - cached;
    if (fresh <= 0) return 0.0;
    f64 agg[NUM_AGG] = {0};
    agg[AGG_PREFILL_REQS] = 1;
    agg[AGG_PREFILL_NEW] = (f64)fresh;
    agg[AGG_PREFILL_CACHED] = (f64)cached;
    agg[AGG_KEYS_FULL] = (f64)fresh * (f64)cached + (f64)fresh * (f64)(fresh + 1) / 2;
    agg[AGG_TOUCHED_FULL] = (f64)(cached + fresh);
    return kv_step_seconds(tm, agg);
}

i64 kv_time_model_window(const f64 *tm) {
    if ((i64)tm[0] == KIND_ROOFLINE) return (i64)tm[R_WINDOW];
    if ((i64)tm[0] == KIND_CALIBRATED) return (i64)tm[C_WINDOW];
    return 0;
}

/* for tests: the step time of one aggregate array (serving/timing.py compares it with step_time) */
KV_EXPORT f64 kv_step_seconds_of(const f64 *tm, const f64 *agg) { return kv_step_seconds(tm, agg); }
