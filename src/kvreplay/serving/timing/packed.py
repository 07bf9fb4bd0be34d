"""The time models in the form the compiled loop reads (serving/timing/step.c).

``packed(model)`` flattens a time model into one float64 array (its first slot says which model);
``step_seconds(packed, agg)`` is the C step time of a step's aggregates (AGG slots, named by the C
side), the same formulas as each model's ``step_time``: tests/serving/test_timing.py holds the two
together on random batches.
"""

from __future__ import annotations

import ctypes
import math
from functools import lru_cache

import numpy as np

from ... import native
from ...errors import ConfigError
from .models import InstantTimeModel, RooflineTimeModel, StepBatch, TimeModel, _sum_min
from .profiles import POLY_VARIABLES, DynamoNpzProfile, PolynomialProfile
from .roofline import (FP8_LARGE_AT, FP8_LARGE_FROM, FP8_TILE_ABOVE, FP8_TILE_ROWS, MOE_ROUTING_KNOTS, MOE_TILE_ABOVE, CalibratedRooflineTimeModel,
                       nccl_terms)

AGG = native.slots("timing", "agg")  # (native.Absent without the core: the catalog still loads)
KIND = native.slots("timing", "kind")
ROOF = native.slots("timing", "roofline")
CAL = native.slots("timing", "calibrated")
NUM_AGG = len(AGG.names)
KIND_INSTANT, KIND_ROOFLINE, KIND_NPZ, KIND_POLY = KIND.KIND_INSTANT, KIND.KIND_ROOFLINE, KIND.KIND_NPZ, KIND.KIND_POLY
KIND_CALIBRATED = KIND.KIND_CALIBRATED


def packed(model: TimeModel) -> np.ndarray:
    """`model` as the float64 array ``step_seconds`` reads (see above)."""
    if isinstance(model, InstantTimeModel):
        return np.array([KIND_INSTANT], dtype=np.float64)
    if isinstance(model, CalibratedRooflineTimeModel):
        return _calibrated(model)
    if isinstance(model, RooflineTimeModel):
        return _roofline(model)
    if isinstance(model, DynamoNpzProfile):
        z = np.asarray(model.decode_itl, dtype=np.float64)
        return np.concatenate([[KIND_NPZ, model.min_decode_ms, len(model.prefill_isl)], model.prefill_isl,
                               model.prefill_ttft_ms, [z.shape[0], z.shape[1]], model.decode_active_kv_tokens,
                               model.decode_context_length, z.ravel()]).astype(np.float64)
    if isinstance(model, PolynomialProfile):
        names = list(POLY_VARIABLES)
        out = [KIND_POLY, model.scale, model.min_value, len(model.terms)]
        for coef, powers in model.terms:
            exps = [0.0] * len(names)
            for var, exp in powers:
                exps[names.index(var)] = exp
            out += [coef, *exps]
        return np.array(out, dtype=np.float64)
    raise ConfigError(f"the simulator cannot run the time model {type(model).__name__}: it needs one of "
                      "instant, roofline, a Dynamo .npz or a polynomial .json (or packed() for it)")


def _roofline(model: RooflineTimeModel) -> np.ndarray:
    values = {"R_KIND": KIND_ROOFLINE, "R_ACTIVE_PARAMS": model.model.active_params, "R_ATTN_WIDTH": model.attn_width,
              "R_LAYERS_FULL": model.layers_full, "R_LAYERS_SW": model.layers_sw, "R_WINDOW": model.window or 0,
              "R_WEIGHT_BYTES": model.weight_bytes, "R_ACTIVE_WEIGHT_BYTES": model.active_weight_bytes,
              "R_TP": model.tp, "R_KV_LAYER_TOKEN": model.kv_per_layer_token_gpu,
              "R_FLOPS": model.peak_flops * model.mfu, "R_BYTES_PER_S": model.bandwidth * model.mbu,
              "R_OVERHEAD": model.overhead_s}
    return np.array([values[name] for name in ROOF.names], dtype=np.float64)


def _p(p) -> float:
    """A soft_max exponent for step.c: 0 for none (the plain max)."""
    return 0.0 if p == float("inf") else float(p)


def _calibrated(model: CalibratedRooflineTimeModel) -> np.ndarray:
    c, scale = model.c, model.scale
    values = {"C_KIND": KIND_CALIBRATED, "C_LAYERS": model.model.num_layers, "C_LAYERS_FULL": model.layers_full,
              "C_LAYERS_SW": model.layers_sw, "C_WINDOW": model.window or 0, "C_TP": model.tp,
              "C_BODY_PARAMS": model.body_flop_params, "C_BODY_WEIGHT_BYTES": model.body_weight_bytes,
              "C_ACTIVE_BODY_WEIGHT_BYTES": model.active_body_weight_bytes, "C_HEAD_PARAMS": model.head_flop_params,
              "C_HEAD_WEIGHT_BYTES": model.head_weight_bytes, "C_HIDDEN": model.hidden,
              "C_ATTN_WIDTH": model.attn_width / model.tp, "C_KV_LAYER_TOKEN": model.kv_per_layer_token_gpu,
              "C_PEAK": model.peak_flops, "C_ATTN_PEAK": model.attn_peak, "C_BW": model.bandwidth,
              "C_E_GEMM": model.gemm_c[0], "C_E_WEIGHTS": model.gemm_c[1], "C_GEMM_FLOOR": model.gemm_c[2],
              "C_HEAD_E_GEMM": c["e_gemm"], "C_HEAD_E_WEIGHTS": c["e_weights"],
              "C_HEAD_FLOOR": c["gemm_floor_s"], "C_QUANT_BYTES_PER_TOKEN": model.quant_bytes_per_token,
              "C_E_QUANT": c.get("e_quant_fp8", 1.0),
              "C_TILE_ABOVE": FP8_TILE_ABOVE, "C_TILE_ROWS": FP8_TILE_ROWS if model.fp8 else 0,
              "C_E_ATTN_PREFILL": model.e_attn[0], "C_E_KV_PREFILL": c["e_kv_prefill"],
              "C_ATTN_FLOOR_PREFILL": c["attn_floor_prefill_s"], "C_E_ATTN_DECODE": model.e_attn[1],
              "C_E_KV_DECODE": c["e_kv_decode"], "C_ATTN_FLOOR_DECODE": c["attn_floor_decode_s"],
              "C_AR_LATENCY": model.allreduce_latency_s, "C_AR_BUS": c["allreduce_bus_bytes_per_s"],
              "C_PER_LAYER": c["per_layer_s"], "C_PER_STEP": c["per_step_s"], "C_SCALE_PREFILL": scale["prefill"],
              "C_SCALE_DECODE": scale["decode"], "C_SCALE_MIXED": scale["mixed"], "C_ATTN_LAYERS": model.attn_layers,
              "C_MAMBA_LAYERS": model.mamba_layers, "C_STATE_BYTES": model.state_bytes if model.mamba_layers else 0.0,
              "C_TILE_PARTIAL": c["fp8_partial_rows"] if model.fp8 else 0.0, "C_E_GEMM_LARGE": model.gemm_e_large,
              "C_LARGE_FROM": FP8_LARGE_FROM, "C_LARGE_AT": FP8_LARGE_AT,
              "C_GEMM_P": _p(model.gemm_p), "C_HEAD_P": _p(c["gemm_overlap_p"]),
              "C_ATTN_PER_REQ_DECODE": c["attn_per_request_decode_s"], "C_GEMMS": len(model.gemm_shapes),
              "C_GEMM_K0": model.gemm_k0, "C_GEMM_IN_BYTES": model.gemm_bytes[0], "C_GEMM_W_BYTES": model.gemm_bytes[1],
              "C_ATTN_WIDTH_PREFILL": model.attn_width_prefill / model.tp, "C_BODY_BESIDE": 1.0 if model.body_beside else 0.0,
              "C_BODY_GEMMS": model.body_gemms, "C_MLA_FLOOR": model.mla_floor_s, "C_MLA_PER_TOKEN": model.mla_per_token_s,
              "C_MLA_CONTEXT_FLOPS": model.mla_context_flops, "C_AR_LATENCY2": c["allreduce_latency_s"],
              "C_AR_LINK": c["allreduce_link_bytes_per_s"], "C_ATTN_SPLIT": c["attn_split_decode"],
              "C_KV_HEADS_GPU": model.kv_heads_gpu, "C_EW_KERNELS": model.ew_kernels, "C_EW_BYTES": model.ew_bytes_per_token,
              "C_EW_FLOOR": c["ew_floor_s"], "C_E_EW": c["e_ew"] or 1.0,
              "C_LAUNCH_LAYER_S": model.launch_layer_s if math.isfinite(model.eager_above) else 0.0,
              "C_EAGER_ABOVE": model.eager_above if math.isfinite(model.eager_above) else 0.0,
              **dict(zip(("C_AR_NCCL_LATENCY", "C_AR_NCCL_BUS"), map(float, nccl_terms(model.tp, c))))}
    moe = model.moe or {}  # an MoE's routed experts (0 layers: none apart)
    values.update({"C_MOE_LAYERS": moe.get("layers", 0), "C_MOE_EXPERTS": moe.get("experts", 0),
                   "C_MOE_TOPK": moe.get("experts_per_token", 0), "C_MOE_INTER": model.moe_inter if moe else 0.0,
                   "C_MOE_W_BYTES": model.moe_weight_bytes if moe else 0.0, "C_MOE_PEAK": model.moe_peak if moe else 1.0})
    for name, value in zip(("C_MOE_E_GEMM", "C_MOE_E_WEIGHTS", "C_MOE_FLOOR", "C_MOE_P", "C_MOE_PER_TOKEN",
                            "C_MOE_TILE_ROWS", "C_MOE_K0", "C_MOE_TILE_ROWS_LARGE"),
                           model.moe_c if moe else (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)):
        values[name] = _p(value) if name == "C_MOE_P" else value
    values["C_MOE_TILE_ABOVE"] = MOE_TILE_ABOVE
    dpx = model.dp_experts or (0.0, 0.0, 0.0, 0.0)  # (data parallelism, the experts not apart: dataparallel.py)
    values.update(C_DPX_PARAMS=dpx[0], C_DPX_BYTES=dpx[1], C_DPX_ACTIVE_BYTES=dpx[2], C_DPX_GPUS=dpx[3])
    if moe:  # (data parallelism: a rank's share of the experts, dataparallel.py)
        values.update(C_MOE_EXPERTS=model.moe_experts, C_MOE_EP=model.moe_ep if model.moe_ep > 1 else 0.0)
    else:
        values["C_MOE_EP"] = 0.0
    xch = model.dp_exchange  # (data parallelism over an MoE: the ranks' token exchange, timing/exchange.py)
    values.update(xch.packed() if xch is not None else {
        "C_XCH_LAYERS": 0.0, "C_XCH_GROUP": 1.0, "C_XCH_DISPATCH_BYTES": 0.0, "C_XCH_COMBINE_BYTES": 0.0,
        "C_XCH_AG_LATENCY": 0.0, "C_XCH_AG_BUS": 1.0, "C_XCH_RS_LATENCY": 0.0, "C_XCH_RS_BUS": 1.0,
        "C_XCH_SP": 0.0, "C_XCH_TPG_LATENCY": 0.0, "C_XCH_TPG_BUS": 1.0})
    values["C_QK_NORM_ALLREDUCES"] = model.qk_norm_allreduces  # one more all-reduce a layer (MiniMax-M2's q/k norm)
    # served routing's factor at each knot (all 1: balanced routing)
    for i, f in enumerate(model.moe_route if moe and model.moe_route else (1.0,) * MOE_ROUTING_KNOTS):
        values["C_MOE_ROUTE" + (f"_{i}" if i else "")] = f
    gdn = model.gdn is not None  # Gated DeltaNet layers on their fitted kernel
    values.update({"C_GDN": 1.0 if gdn else 0.0, "C_GDN_ACT": model.gdn_act if gdn else 0.0,
                   "C_GDN_VHEADS": model.gdn_v_heads if gdn else 1.0})
    for name, value in zip(("C_GDN_PARALLEL", "C_GDN_FLOOR_PREFILL", "C_GDN_E_PREFILL", "C_GDN_E_BYTES_PREFILL",
                            "C_GDN_PER_REQ_PREFILL", "C_GDN_FLOOR_DECODE", "C_GDN_E_DECODE", "C_GDN_E_BYTES_DECODE",
                            "C_GDN_PER_REQ_DECODE"), model.gdn_c if gdn else (0.0,) + (1.0,) * 8):
        values[name] = value
    for i in range(4):  # (n, k) of each layer GEMM, 0 past the model's
        n, k = model.gemm_shapes[i] if i < len(model.gemm_shapes) else (0, 0)
        values[f"C_G{i + 1}_N"], values[f"C_G{i + 1}_K"] = n, k
    return np.array([values[name] for name in CAL.names], dtype=np.float64)


def roofline_window(tm: np.ndarray) -> int:
    """The sliding window a packed model needs the simulator's aggregates for (0: none)."""
    if tm[0] == KIND_ROOFLINE:
        return int(tm[ROOF.R_WINDOW])
    if tm[0] == KIND_CALIBRATED:
        return int(tm[CAL.C_WINDOW])
    return 0


@lru_cache(maxsize=None)
def _c_step_seconds():
    return native.function("kv_step_seconds_of", ctypes.c_double, ctypes.c_void_p, ctypes.c_void_p)


def step_seconds(tm: np.ndarray, agg: np.ndarray) -> float:
    """The compiled loop's duration of a step with aggregates `agg` under the packed model `tm`."""
    tm = np.ascontiguousarray(tm, dtype=np.float64)
    agg = np.ascontiguousarray(agg, dtype=np.float64)
    if agg.shape != (NUM_AGG,):
        raise ConfigError(f"aggregates must be {NUM_AGG} numbers, got shape {agg.shape}")
    return float(_c_step_seconds()(tm.ctypes.data, agg.ctypes.data))


def aggregates(batch: StepBatch, window: int = 0) -> np.ndarray:
    """The AGG_* array of a StepBatch, as the simulator's kernel accumulates it (kernel/batch.c)."""
    agg = np.zeros(NUM_AGG, dtype=np.float64)
    for n, c in zip(batch.prefill_new, batch.prefill_cached):
        n, c = int(n), int(c)
        if n <= 0:
            continue
        agg[AGG.AGG_PREFILL_REQS] += 1
        agg[AGG.AGG_PREFILL_NEW] += n
        agg[AGG.AGG_PREFILL_CACHED] += c
        agg[AGG.AGG_KEYS_FULL] += n * c + n * (n + 1) // 2
        agg[AGG.AGG_TOUCHED_FULL] += c + n
        if window:
            agg[AGG.AGG_KEYS_SW] += _sum_min(c + 1, c + n, window)
            agg[AGG.AGG_TOUCHED_SW] += min(c + n, window + n - 1)
    for x in batch.decode_context:
        x = int(x)
        agg[AGG.AGG_DECODE_REQS] += 1
        agg[AGG.AGG_DECODE_CTX] += x
        agg[AGG.AGG_KEYS_FULL] += x
        agg[AGG.AGG_TOUCHED_FULL] += x
        if window:
            agg[AGG.AGG_KEYS_SW] += min(x, window)
            agg[AGG.AGG_TOUCHED_SW] += min(x, window)
            agg[AGG.AGG_DECODE_SW] += min(x, window)
    agg[AGG.AGG_ACTIVE_KV] = agg[AGG.AGG_DECODE_CTX] if batch.active_kv_tokens is None else batch.active_kv_tokens
    agg[AGG.AGG_EXPERT_TOKENS] = batch.expert_tokens or 0
    return agg