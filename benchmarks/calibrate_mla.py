"""The MLA half of benchmarks/calibrate.py: vLLM's MLA modules in aiconfigurator's tables, the MLA
term of the roofline fitted on them (kvreplay.serving.timing.roofline ``MLA_COEFFICIENTS``), and
DeepSeek-V3's steps composed from them (since 2026-12-05; docs/timing.md, "MLA layers", and
benchmarks/RESULTS.md, the calibration record).

- **The tables**: ``systems/data/<gpu>/mla/vllm/<version>/mla_{context,generation}_module_perf.parquet``
  of the same wheel: DeepSeek-V3's attention module as vLLM runs it (the fused q_a/kv_a projection,
  the norms and rope, q_b, kv_b, attention and o, one layer), at 1-128 heads per GPU, block-fp8
  GEMMs and a bf16 KV cache; prefill ("context") of 1-256 requests of 1-32,768 tokens without a
  cached prefix, decode of 1-1,024 requests at contexts of 2-131,072.
- **The module's roofline** (``module_model``), as the step model times an MLA layer
  (roofline.py ``terms``): the four projection GEMMs one by one at the fitted fp8 GEMM coefficients
  with their inputs' quantisation (calibrate.gemm_fp8_model), attention at the MLA widths
  (prefill unabsorbed: q.k over nope + rope, then v; decode absorbed: over the latent and rope,
  then the latent; vLLM 0.24 ``model_executor/layers/attention/mla_attention.py`` forward_mha and
  forward_mqa) with the attention terms' floors and KV efficiencies, and the MLA term's floor and
  costs per token and per head and token.
- **The fit**: the five MLA coefficients on the GPU's modules at 8-128 heads per GPU (DeepSeek-V3
  at TP 1-16, Kimi-K2 at TP 1-8), every other coefficient as fitted on the kernels before.
"""

from __future__ import annotations

import numpy as np
from calibrate_stats import RATIO_COLUMNS, print_table, ratio_cells, ratio_stats

#: the MLA MoE model whose steps the tables compose, at the TP degrees tried
MLA_MODEL, MLA_TPS = "DeepSeek-V3", (4, 8)
#: the module rows fitted and checked: heads per GPU of the catalog's MLA models at TP <= 16
MLA_HEADS = (8, 16, 32, 64, 128)
#: the MLA term's starting point, in roofline.MLA_COEFFICIENTS' order
MLA_START = (5e-5, 0.7, 0.6, 2e-8, 1e-9)


def mla_modules(t, gpu_dir: str):
    """The MLA module's prefill and decode tables (bf16 KV, block-fp8 GEMMs), or None."""
    prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/mla/vllm/"
    if not any(n.startswith(prefix) and n.endswith("/mla_context_module_perf.parquet") for n in t.names):
        return None

    def sel(a):
        a = a[(a.kv_cache_dtype == "bfloat16") & (a.gemm_type == "fp8_block")]
        return a.astype({c: int for c in ("num_heads", "batch_size", "isl", "step")})

    return (sel(t.read(gpu_dir, "mla", "mla_context_module_perf.parquet")),
            sel(t.read(gpu_dir, "mla", "mla_generation_module_perf.parquet")))


def module_args(table, prefill: bool):
    """heads per GPU, requests, tokens, causal query-key pairs (prefill) or context (decode)."""
    h, b = table.num_heads.to_numpy(float), table.batch_size.to_numpy(float)
    if prefill:
        s = table.isl.to_numpy(float)
        return h, b, b * s, b * s * (s + 1) / 2, b * s
    ctx = table.step.to_numpy(float)
    return h, b, b, b * ctx, b * ctx


class ModuleModel:
    """One MLA layer of MLA_MODEL at coefficients `c` on `gpu` (a GPUSpec at its streaming
    bandwidth), its projections timed by `gemm_fp8_model` (calibrate.py's) once per table: they hold
    no MLA coefficient."""

    def __init__(self, c: dict, gpu, table, prefill: bool, gemm_fp8_model):
        from kvreplay.analysis.models import get_model

        spec = get_model(MLA_MODEL)
        self.c, self.gpu, self.prefill = c, gpu, prefill
        self.h, self.b, self.tokens, self.pairs, self.touched = module_args(table, prefill)
        m = spec.mla
        self.width = (m["qk_nope_head_dim"] + spec.qk_rope_head_dim + m["v_head_dim"]) / 2.0 if prefill \
            else (2.0 * spec.kv_lora_rank + spec.qk_rope_head_dim) / 2.0  # per head
        self.kv_bytes = 2.0 * (spec.kv_lora_rank + spec.qk_rope_head_dim)  # the latent and rope, bf16
        self.gemms = np.zeros(len(self.h))
        for heads in np.unique(self.h):
            at = self.h == heads
            for n, k in spec.mla_gemm_shapes(spec.num_attention_heads // int(heads)):
                self.gemms[at] += gemm_fp8_model(c, gpu, self.tokens[at], n, k)

    def __call__(self, x: dict) -> np.ndarray:
        c, peak, bw = {**self.c, **x}, self.gpu.peak_flops("bf16"), self.gpu.bandwidth_bytes_per_s
        f = 4.0 * self.h * self.width * self.pairs
        if self.prefill:
            b = self.kv_bytes * self.touched + 4.0 * self.h * self.width * self.tokens
            attn = np.maximum(f / (peak * c["mla_e_attn_prefill"]), b / (bw * c["e_kv_prefill"])) + c["attn_floor_prefill_s"]
        else:
            attn = (np.maximum(f / (peak * c["mla_e_attn_decode"]), self.kv_bytes * self.touched / (bw * c["e_kv_decode"]))
                    + c["attn_floor_decode_s"] + self.b * c["attn_per_request_decode_s"])
        per_token = c["mla_per_token_s"] + c["mla_per_head_token_s"] * self.h
        return self.gemms + attn + c["mla_floor_s"] + per_token * self.tokens


def _rows(modules):
    """The module tables at MLA_HEADS, each with its phase."""
    return [(tab[tab.num_heads.isin(MLA_HEADS)], prefill) for tab, prefill in zip(modules, (True, False))]


def fit_mla(modules, gpu, c: dict, fit_family, gemm) -> tuple[dict, float]:
    """The MLA coefficients fitted on a GPU's module tables (both phases together; twice, the second
    fit restarting from the first's optimum), the others fixed at `c`."""
    from kvreplay.serving.timing.roofline import MLA_COEFFICIENTS

    parts = [(ModuleModel(c, gpu, tab, prefill, gemm), tab.latency.to_numpy(float) / 1e3) for tab, prefill in _rows(modules)]
    y = np.concatenate([p[1] for p in parts])
    start = {**c, **dict(zip(MLA_COEFFICIENTS, MLA_START))}
    for _ in range(2):
        fitted, err = fit_family(list(MLA_COEFFICIENTS), start,
                                 lambda cc: np.concatenate([m({k: cc[k] for k in MLA_COEFFICIENTS}) for m, _ in parts]), y)
        start.update(fitted)
    return {k: float(start[k]) for k in MLA_COEFFICIENTS}, err


def mla_table(modules, gpu, c: dict, gemm) -> dict:
    """The modules' measured / predicted by phase, and by heads per GPU ({}: no table, or `c`
    without the MLA coefficients)."""
    from kvreplay.serving.timing.roofline import MLA_COEFFICIENTS

    if modules is None or not set(MLA_COEFFICIENTS) <= set(c):
        return {}
    out = {}
    for tab, prefill in _rows(modules):
        model = ModuleModel(c, gpu, tab, prefill, gemm)
        ratios = tab.latency.to_numpy(float) / 1e3 / model({})
        phase = "prefill" if prefill else "decode"
        out[phase] = {**ratio_stats(ratios), "by_heads": {int(h): ratio_stats(ratios[tab.num_heads.to_numpy() == h])["mape"]
                                                          for h in MLA_HEADS}}
    return out


def print_mla(title, s):
    heads = ("error at " + " / ".join(str(h) for h in MLA_HEADS) + " heads per GPU", False)
    print_table(title, (("phase", False), *RATIO_COLUMNS, heads),
                ([phase, *ratio_cells(v), " / ".join(f"{100 * e:.1f}%" for e in v["by_heads"].values())]
                 for phase, v in s.items()))


def _module(table, heads, batch, key, x):
    """The module's latency (s) at `heads` per GPU, `batch` requests and `key` (isl or step) `x`,
    log-interpolated in x (None: not measured)."""
    q = table[(table.num_heads == heads) & (table.batch_size == batch)].sort_values(key)
    if len(q) < 2:
        return None
    return float(np.interp(np.log(x), np.log(q[key].to_numpy(float)), q.latency.to_numpy(float))) / 1e3


def experts_within_memory(meas8, spec, tp: int, tokens: int, bw: float) -> bool:
    """Whether the measured fused MoE kernel at the model's shape for `tokens` takes at least the
    time its active experts' fp8 weights take to stream at `bw` (balanced routing: min(experts,
    tokens x top-k) of them). aiconfigurator's fp8 rows at DeepSeek-V3's shape (hidden 7,168, 256
    experts of 2,048, top 8) are faster than that from 16 tokens on, by up to 1.8x on H100 and 2.0x
    on H200: no memory could serve them, so the steps built on them are reported apart."""
    m = spec.moe
    t = meas8.moe_time(tokens, spec.hidden_size, m["expert_intermediate"], m["experts_per_token"], m["experts"], tp)
    active = min(m["experts"], tokens * m["experts_per_token"])
    return t is not None and t >= active * 3.0 * spec.hidden_size * m["expert_intermediate"] / tp / bw


def composed_mla_step(modules, meas, meas8, spec, tp, prefill, decodes, ctx):
    """A DeepSeek-V3 fp8 step from measured kernels: per layer the MLA module (prefill and decode
    parts) and two all-reduces, per MoE layer the fused experts, the shared expert (fp8 GEMMs) and
    the bf16 router, the dense layers' MLPs (fp8), the bf16 LM head (None: a shape not measured)."""
    H, m = spec.hidden_size, spec.moe
    heads, T = spec.num_attention_heads // tp, sum(prefill) + decodes
    parts = ([_module(modules[0], heads, len(prefill), "isl", prefill[0])] if prefill else []) + \
        ([_module(modules[1], heads, decodes, "step", ctx)] if decodes else [])
    experts = meas8.moe_time(T, H, m["expert_intermediate"], m["experts_per_token"], m["experts"], tp)
    if experts is None or None in parts:
        return None
    shared = meas8.gemm_time(T, 2 * m["expert_intermediate"] // tp, H) + meas8.gemm_time(T, H, m["expert_intermediate"] // tp)
    dense = meas8.gemm_time(T, 2 * 18432 // tp, H) + meas8.gemm_time(T, H, 18432 // tp)  # config.json intermediate_size
    ar = 2 * meas.ar_time(tp, T * H) if tp > 1 else 0.0
    return (spec.num_layers * (sum(parts) + ar) + m["layers"] * (experts + shared + meas.gemm_time(T, m["experts"], H))
            + (spec.num_layers - m["layers"]) * dense + meas.gemm_time(len(prefill) + decodes, spec.vocab_size // tp, H)
            + meas.elementwise_time(spec, tp, T, mla=True))
