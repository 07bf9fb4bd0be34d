"""The KV pool kvreplay predicts against the pool vLLM measured, on public start-up logs.

    python benchmarks/kv_pool.py          # the error tables (docs/memory.md)
    python benchmarks/kv_pool.py --fit    # the comparison: a non-torch constant fitted on the points
                                          # marked "fit" (the median of what they leave) in place of
                                          # vLLM's term, timing/memory.py's NON_TORCH_BYTES

Each point of benchmarks/data/vllm_kv_pool_points.csv is a public vLLM log (URL and quoted
lines in the file) with its configuration and the settings the source leaves unstated (assumed
at vLLM's defaults, column settings_assumed). The measured KV memory is the log's "Available KV
cache memory" (or "the rest of the memory reserved for KV Cache"), else its token count x the
model's KV bytes per token per GPU. The prediction is timing/memory.py's budget (vLLM 0.33.0's
terms) at the point's GPU, TP, weights dtype, utilization, max_num_batched_tokens, max_num_seqs
and enforce_eager. A log that names no GPU but prints the device's total ("Free memory on device
(free/total GiB)") is sized from that total (column measured_total_gib). The version differences
the budget has had:

- V0 engines (before 0.8, or marked V0) profiled differently: NCCL's buffers and the CUDA context
  were non-torch memory inside the budget (PR 10511's Llama-3-8B: 1.79 GiB at TP 1, 3.58 GiB at
  TP 2), the profile ran max_num_seqs whole sequences, and the sampler sorted. They are listed
  apart and are not in the V1 error summary.
- NCCL inside the budget (V0, and V1 up to 0.10): vLLM took its start-up snapshot before
  ``init_worker_distributed_environment`` (vLLM 0.10.2's gpu_worker.py:175 and 192), so NCCL's
  buffers and custom all-reduce's were non-torch memory inside the budget; PR 25359 (merged
  2025-09-22, in 0.11.0) moved the snapshot after them, where 0.33.0 takes it (gpu_worker.py:500-544).
  On TP > 1 over NVLink: NCCL_BYTES a rank; over PCIe (no custom all-reduce beyond 2 GPUs,
  fewer NCCL channels): none (the one PCIe log, 8 x L40S in 0.10.2, printed 0.21 GiB of non-torch
  memory in all). Nor where the log says custom all-reduce is disabled because the ranks have no
  P2P path or span nodes (custom_all_reduce.py:85 and 147 of the 0.10.1.1 logs; the point's notes
  say "custom all-reduce disabled"): NCCL then runs over shared memory or the network with the
  buffers of PCIe (dennislee22's A100 logs at TP 2: 0.65 GiB of non-KV memory in all).
- V1 before 0.21: the CUDA graphs were captured after the pool was sized (not in the budget).
- V1 0.19-0.20: the CUDA graph memory profile (``profile_cudagraph_memory``: a minimal KV cache,
  the first two graphs of each mode captured and freed) runs inside the ``memory_profiling``
  window (gpu_worker.py:366-381 of 0.19.0; 0.24.0 still does, 434-453; 0.28.0 profiles after the
  window closes, 515-532, as 0.33.0 does), and its estimate is not taken from the budget
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 0 before 0.21). Their pools still come
  out 0.3-0.6 GiB smaller than the terms leave, on an A100 40GB, an A100 80GB and an RTX 4090
  alike, with graphs captured: WINDOW_VERSIONS points that capture graphs (their version stated,
  not approximate or assumed) lose a constant fitted
  on the V1 fit points of those versions (``fit_window``: their median residue; it is not derived
  from the code, which frees what it captures before the window closes). No point of 0.21-0.26
  (estimate applied, profile still inside the window) is public with its configuration.
- KV connectors: LMCache's vLLM connector (``LMCacheConnectorV1``, in the Qwen3-235B point) takes
  one GPU staging buffer, ``VLLMPagedMemGPUConnectorV2``'s ``[2, layers, chunk_size, kv_heads / tp x
  head_dim]`` in the KV dtype (lmcache/v1/gpu_connector.py; chunk 256): 94 x 2 x 256 x 128 x 2 B =
  12 MB a rank for Qwen3-235B at TP 4, and host (pinned CPU) memory for its cache. It is not modelled,
  and it is not what that point misses (+0.69 GiB): the budget there also holds NCCL's buffers at TP 4
  (0.9.2's snapshot preceded them), taken at the size PR 10511 measured at TP 2 (NCCL_BYTES).
- The default gpu_memory_utilization is 0.92 from 0.20.0 (config/cache.py:66 of 0.20.0; 0.9 up to
  0.19.0, config/cache.py:41): a point whose log leaves the flag at its default takes its version's
  (column gpu_memory_utilization, with settings_assumed saying so).
- V1 up to 0.8 (not modelled): the budget took the device's whole non-torch use (total less free,
  less what PyTorch holds: the CUDA context and anything else on the GPU, gpu_worker.py:195-210 of
  0.8.5); 0.9.2 measures from the start-up snapshot (gpu_worker.py:206-224). The CUDA context's
  size is not in vLLM's code, and the one 0.8 point leaves its configuration unstated.
- V1 up to 0.16 sorted in its dummy sampler run (PyTorch-native top-k/top-p: ``logits.sort``,
  topk_topp_sampler.py:145 of 0.10.2, 171 of 0.11.1, 262 of 0.16.0): SORT_BYTES_PER_LOGIT a
  logit instead of 0.33.0's 14. Up to 0.11.0 FlashInfer sampled when installed, but it was only
  an extra of the wheel (0.10.2's METADATA ``flashinfer-python==0.3.0; extra == "flashinfer"``,
  0.11.0's ``flashinfer-python==0.3.1; extra == "flashinfer"``), so a pip install sorted
  (topk_topp_sampler.py:41-76 of 0.10.2); from 0.11.1 FlashInfer's sampler is opt-in
  (``if envs.VLLM_USE_FLASHINFER_SAMPLER:``, default None, topk_topp_sampler.py:34 of 0.11.1 and
  35 of 0.16.0), so every install sorted, vLLM's image too; 0.17.0 filters in place in Triton for
  8 rows or more (``apply_top_k_top_p_triton``, topk_topp_sampler.py:251 of 0.17.0), as 0.33.0
  does. A point whose log says FlashInfer sampled (column sampler "flashinfer") keeps 14; column
  sampler "sort" marks a log that states the fallback or prints a peak of the sort's size.
- Data parallelism (column dp, empty: 1): an MoE's routed experts split over its DP x TP GPUs
  (``flatten_tp_across_dp_and_pcp``, fused_moe/config.py:1106-1114 and 1198-1245 of 0.33.0), so a
  GPU loads ``1 / (DP x TP)`` of them (memory.weight_parts' ``expert_gpus``, as ``kv_capacity(...,
  dp=)`` budgets it); the measured pool is one rank's.

Points whose model or GPU the catalogs lack are listed as skipped with the reason. The error is
(predicted - measured) / measured KV memory, reported for pools of at least 5 GiB (a relative
error of a near-empty pool says nothing; those show their error in GiB).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from kvreplay.analysis.models import get_model
from kvreplay.errors import KvreplayError
from kvreplay.serving.timing import memory
from kvreplay.catalog.gpus import get_gpu
from kvreplay.serving.timing.models import kv_bytes_per_token_per_gpu

POINTS = Path(__file__).parent / "data" / "vllm_kv_pool_points.csv"
GiB = 1 << 30
#: NCCL's buffers on a TP rank, inside a V0 engine's budget only: PR 10511's TP 2 minus TP 1
#: non-torch memory (3.58 - 1.79 GiB)
NCCL_BYTES = int(1.79 * GiB)
SMALL_POOL = 5 * GiB
#: The dummy sampler run's bytes a logit on vLLM 0.10.2's PyTorch-native top-k/top-p path (taken when
#: FlashInfer is absent or disabled, vllm/v1/sample/ops/topk_topp_sampler.py:41-76): the bf16 logits
#: (2) and their fp32 copy (4, sampler.py:87) beside ``logits.sort`` (topk_topp_sampler.py:145), whose
#: fp32 values (4) and int64 indices (8) are its outputs and whose radix sort holds an int64 index
#: input (8) and a second key/value buffer (4 + 8) while it runs (PyTorch's segmented sort: inferred,
#: not read). 38 B; the logs that print the peak give 38.6 (256 and 1,024 rows of 151,936 logits).
#: A point's column ``sampler`` says "sort" where its log states that fallback.
SORT_BYTES_PER_LOGIT = 38
#: The last vLLM release whose start-up snapshot preceded NCCL's buffers (PR 25359 moved it in
#: 0.11.0; module docstring)
LAST_PRE_011 = (0, 10)
#: The last vLLM release whose dummy sampler run sorted the logits by default (0.17.0 filters in
#: Triton; module docstring)
LAST_SORTING = (0, 16)
#: The vLLM releases whose CUDA graph memory profile ran inside the memory-profiling window without
#: its estimate being applied (0.21 applies it by default; module docstring)
WINDOW_VERSIONS = ((0, 19), (0, 20))


def sorts_logits(p: dict) -> bool:
    """Whether the point's dummy sampler run took the sort path (module docstring)."""
    if p["sampler"] in ("sort", "flashinfer"):
        return p["sampler"] == "sort"
    return engine(p) == "V1" and version_tuple(p["vllm_version"]) <= LAST_SORTING


def p2p_ranks(p: dict, gpu) -> bool:
    """Whether the point's TP ranks reach each other over NVLink (custom all-reduce on): not on a
    PCIe GPU, nor where the log says custom all-reduce was disabled (no P2P, or ranks on several
    nodes; module docstring)."""
    return gpu is not None and gpu.link_topology != "pcie" and "custom all-reduce disabled" not in p["notes"]


def nccl_in_budget(p: dict, gpu) -> bool:
    """Whether NCCL's buffers (NCCL_BYTES a rank) sit inside the point's budget (module docstring)."""
    early = engine(p) == "V0" or version_tuple(p["vllm_version"]) <= LAST_PRE_011
    return int(p["tp"]) > 1 and early and p2p_ranks(p, gpu)


def version_tuple(text: str) -> tuple:
    m = re.search(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (99, 0)  # unstated: a recent V1


def stated(p: dict) -> bool:
    """Whether the point's log states its vLLM version (not approximate, inferred or assumed)."""
    return not re.search(r"~|unstated|inferred|assumed|or later", p["vllm_version"])


def engine(p: dict) -> str:
    """V0 or V1, as the point's version says (V0 before 0.8 unless it says V1)."""
    text = p["vllm_version"]
    if "V0" in text:
        return "V0"
    if "V1" in text:
        return "V1"
    return "V0" if version_tuple(text) < (0, 8) else "V1"


def load_points() -> list[dict]:
    with open(POINTS, newline="") as f:
        return list(csv.DictReader(f))


def terms(p: dict) -> dict | None:
    """The budget's terms at a point's configuration (None when it cannot be computed)."""
    if p["skip_reason"]:
        return None
    try:
        spec = get_model(p["catalog_model"])
        gpu = get_gpu(p["gpu"]) if p["gpu"] or not p["measured_total_gib"] else None
    except KvreplayError:
        return None
    total = gpu.memory_bytes if gpu is not None else round(float(p["measured_total_gib"]) * GiB)
    gpu_name = gpu.name if gpu is not None else ""
    tp, dtype = int(p["tp"]), p["weights_dtype"]
    dp = int(p.get("dp") or 1)  # (data parallelism: the experts over dp x tp GPUs, module doc)
    tokens, seqs = int(p["max_num_batched_tokens"]), int(p["max_num_seqs"])
    eager = p["enforce_eager"] == "True"
    version = version_tuple(p["vllm_version"])
    per_logit = SORT_BYTES_PER_LOGIT if sorts_logits(p) else None
    forward, sampler = memory.activation_bytes(spec, tp, tokens, seqs, dtype, per_logit)
    graphs = memory.cudagraph_graphs(seqs, gpu_name, eager) if version >= (0, 21) else 0
    per_token = kv_bytes_per_token_per_gpu(spec, tp, p["kv_dtype"] or "bf16")
    measured = (float(p["measured_kv_gib"]) * GiB if p["measured_kv_gib"]
                else int(p["measured_tokens"]) * per_token)
    nccl = 1.0 if nccl_in_budget(p, gpu) else 0.0
    window = 1.0 if engine(p) == "V1" and version in WINDOW_VERSIONS and stated(p) and not eager else 0.0
    return {"requested": np.ceil(total * float(p["gpu_memory_utilization"])), "nccl": nccl, "window": window,
            "weights": sum(memory.weight_parts(spec, dtype, tp, gpu_name, expert_gpus=dp * tp).values()),
            "peak": max(forward, sampler), "forward": forward, "sampler": sampler, "graphs": graphs,
            "measured": measured, "engine": engine(p)}


def predict(t: dict, c: dict) -> float:
    return (t["requested"] - t["weights"] - t["peak"] - c["graph"] * t["graphs"] - c["non_torch"]
            - c["nccl"] * t["nccl"] - c["window"] * t["window"])


def constants(window: float = 0.0) -> dict:
    return {"graph": memory.CUDAGRAPH_BYTES_PER_GRAPH, "non_torch": memory.NON_TORCH_BYTES, "nccl": NCCL_BYTES,
            "window": window}


def fit_window(rows: list[tuple[dict, dict]]) -> tuple[float, int]:
    """The 0.19-0.20 window's residue (bytes) and the number of points it is fitted on: the median of
    what the V1 fit points of WINDOW_VERSIONS that capture graphs leave once every other term is
    taken (module docstring), 0 without such a point."""
    c = constants()
    rest = [predict(t, c) - t["measured"] for p, t in rows
            if t["window"] and p["split"] == "fit" and abs(t["measured"]) >= SMALL_POOL]
    return (float(np.median(rest)), len(rest)) if rest else (0.0, 0)


def fit(rows: list[tuple[dict, dict]], window: float = 0.0) -> dict:
    """A fitted non-torch constant (bytes) over the V1 fit points, the comparison for vLLM's term
    (timing/memory.py's NON_TORCH_BYTES): the median of what each leaves once the other terms are
    taken (>= 0; the median, since two fit points leave their configuration unstated and pull 3-4
    GiB either way)."""
    rest = [t["requested"] - t["weights"] - t["peak"] - memory.CUDAGRAPH_BYTES_PER_GRAPH * t["graphs"]
            - NCCL_BYTES * t["nccl"] - window * t["window"] - t["measured"] for _, t in rows]
    return {**constants(window), "non_torch": max(float(np.median(rest)), 0.0)}


def gpu_label(p: dict) -> str:
    """The point's GPU, or the total its log printed when it names none."""
    return p["gpu"] or f"unnamed ({p['measured_total_gib']} GiB)"


def family(p: dict) -> str:
    return re.split(r"[-.]", p["catalog_model"])[0].rstrip("0123456789") or p["catalog_model"]


def error_rows(rows, c: dict) -> list:
    out = []
    for p, t in rows:
        pred = predict(t, c)
        out.append((p, t, pred, (pred - t["measured"]) / abs(t["measured"]), abs(t["measured"]) < SMALL_POOL))
    return out


def print_points(errs) -> None:
    print("| point | GPU | TP | model (catalog) | vLLM | engine | split | measured KV GiB | predicted KV GiB "
          "| error GiB | error |")
    print("|---|---|---:|---|---|---|---|---:|---:|---:|---:|")
    for p, t, pred, err, small in errs:
        print(f"| {p['id']} | {gpu_label(p)} | {p['tp']} | {p['catalog_model']} | {p['vllm_version']} | {t['engine']} | "
              f"{p['split']} | {t['measured'] / GiB:.2f} | {pred / GiB:.2f} | {(pred - t['measured']) / GiB:+.2f} | "
              + ("(pool < 5 GiB)" if small else f"{100 * err:+.1f}%") + " |")


def version_label(p: dict) -> str:
    v = version_tuple(p["vllm_version"])
    return "unstated" if v[0] == 99 else ".".join(map(str, v))


def print_groups(errs) -> None:
    """By GPU, model family and vLLM version: the computed points (any engine, any pool), the V1
    points with a pool of at least 5 GiB (fit / test), how many of those test points are within 5 %,
    and the median and largest absolute error of the V1 points."""
    v1 = [(p, e) for p, t, _, e, small in errs if t["engine"] == "V1" and not small]
    for label, key in (("GPU", gpu_label), ("model family", family), ("vLLM version", version_label)):
        computed: dict = {}
        for p, *_ in errs:
            computed[key(p)] = computed.get(key(p), 0) + 1
        groups: dict = {}
        for p, e in v1:
            groups.setdefault(key(p), []).append((p["split"], abs(e)))
        print(f"| {label} | computed points | V1 points (fit / test) | test within 5% | median abs error | "
              "max abs error |")
        print("|---|---:|---:|---:|---:|---:|")
        for k in sorted(computed, key=lambda k: (tuple(int(x) for x in k.split(".")) if label == "vLLM version"
                                                  and k != "unstated" else (99,), k)):
            v = [e for _, e in groups.get(k, [])]
            test = [e for s, e in groups.get(k, []) if s == "test"]
            n_fit = len(v) - len(test)
            stats = f"{100 * statistics.median(v):.1f}% | {100 * max(v):.1f}%" if v else "- | -"
            within = f"{sum(x <= 0.05 for x in test)} of {len(test)}" if test else "-"
            print(f"| {k} | {computed[k]} | {len(v)} ({n_fit} / {len(test)}) | {within} | {stats} |")
        print()
    for split in ("fit", "test"):
        v = [abs(e) for p, e in v1 if p["split"] == split]
        if v:
            print(f"V1 {split} points: {len(v)}, median abs error {100 * statistics.median(v):.1f}%, "
                  f"max {100 * max(v):.1f}%, within 5%: {sum(x <= 0.05 for x in v)} of {len(v)}")
    v0 = [abs(e) for p, t, _, e, small in errs if t["engine"] == "V0" and not small]
    if v0:
        print(f"V0 points (apart, not modelled): {len(v0)}, median abs error {100 * statistics.median(v0):.1f}%")


def print_term_checks(points, non_torch: float) -> None:
    """Each term vLLM printed against the term the budget computes."""
    print("\n| point | term | measured GiB | predicted GiB |")
    print("|---|---|---:|---:|")
    for p in points:
        try:
            spec, gpu = get_model(p["catalog_model"]), get_gpu(p["gpu"] or "H100")
        except KvreplayError:
            continue
        tp, dtype = int(p["tp"] or 1), p["weights_dtype"] or "bf16"
        if p["measured_weights_gib"]:
            pred = sum(memory.weight_parts(spec, dtype, tp, gpu.name).values())
            print(f"| {p['id']} | weights | {float(p['measured_weights_gib']):.2f} | {pred / GiB:.2f} |")
        if p["measured_activation_gib"] and p["max_num_batched_tokens"]:
            fwd, smp = memory.activation_bytes(spec, tp, int(p["max_num_batched_tokens"]), int(p["max_num_seqs"]), dtype,
                                               SORT_BYTES_PER_LOGIT if sorts_logits(p) else None)
            print(f"| {p['id']} | profile peak (forward {fwd / GiB:.2f}, sampler {smp / GiB:.2f}) | "
                  f"{float(p['measured_activation_gib']):.2f} | {max(fwd, smp) / GiB:.2f} |")
        if p["measured_non_torch_gib"]:
            nccl = NCCL_BYTES if nccl_in_budget(p, gpu if p["gpu"] else None) else 0
            print(f"| {p['id']} | non-torch{' (with NCCL)' if nccl else ''} | {float(p['measured_non_torch_gib']):.2f} | "
                  f"{(non_torch + nccl) / GiB:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true",
                    help="fit the non-torch constant on the 'fit' points and use it instead of vLLM's term (the comparison)")
    args = ap.parse_args(argv)
    points = load_points()
    rows = [(p, t) for p in points if (t := terms(p)) is not None]
    window, n_window = fit_window(rows)
    c = constants(window)
    if args.fit:
        c = fit([(p, t) for p, t in rows if p["split"] == "fit" and t["engine"] == "V1"
                 and abs(t["measured"]) >= SMALL_POOL], window)
        print(f"fitted: NON_TORCH_BYTES={c['non_torch'] / GiB:.3f} GiB\n")
    print(f"{len(points)} points, {len(rows)} computed, {len(points) - len(rows)} skipped\n")
    print(f"vLLM 0.19-0.20 window residue (fitted on {n_window} fit point{'s' * (n_window != 1)}, taken from "
          f"{sum(t['window'] > 0 for _, t in rows)} points): {window / GiB:.2f} GiB\n")
    errs = error_rows(rows, c)
    print_points(errs)
    print("\nBy GPU, model family and vLLM version: the computed points, and the V1 points whose measured pool is at "
          "least 5 GiB (relative error):\n")
    print_groups(errs)
    print_term_checks(points, c["non_torch"])
    skipped = [p for p in points if p["skip_reason"] or all(p is not q for q, _ in rows)]
    if skipped:
        print("\nskipped:")
        for p in skipped:
            print(f"  {p['id']} ({p['hf_id']}, {p['gpu'] or 'GPU unstated'}): "
                  f"{p['skip_reason'] or 'the model or GPU is not in the catalogs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
