"""End to end: aiconfigurator's silicon vLLM serving runs against kvreplay's simulation of them,
and the fit of the serving stack's non-kernel terms (`python benchmarks/calibrate.py --e2e`).

**The runs.** aiconfigurator's ``systems/silicon_sample.csv`` (in the wheel calibrate.py reads):
vLLM, aggregated serving, dense models of kvreplay's catalog, fixed ISL and OSL, concurrency B.
Two groups, by their ``silicon_data_source``:

- ``2026-04-06``: Llama-3.1-70B FP8 on H100, H200 and B200 at TP 1-8, ISL 1024/8192, OSL
  1024/8192, B 4-64 (its nvfp4 runs on B200 are left out: kvreplay has no fp4 weights);
- ``gap-analysis``: Qwen3-32B bf16 (H100) and Llama-3.1-8B FP8 (H200) under vLLM 0.12, and three
  Qwen3-32B FP8 runs served through Dynamo 0.8;
- MoE (MOE_MODELS, held back from every fit, grouped by vLLM version): MiniMax-M2.5 FP8 on H200
  (vLLM 0.16, 0.18) and B200 (0.17, 0.19) with the experts split by TP (its runs with expert or
  attention data parallelism are left out), each measurement once.

**The client.** aiconfigurator's evaluation pipeline benchmarks a concurrency B with 10 B
requests (``src/aiconfigurator/eval/benchmarks/genai_perf_runner.py``: ``--request-count v*10``;
``bench_serving_runner.py``: ``num_prompts = v * 10``) and reports the mean TTFT and ITL over all
of them. A closed loop of B clients starts with all B sending at once: the first B requests are
a burst that queues behind its own prefills (aiconfigurator's queueing design calls it the
transient window, ``docs/design/queueing_model.md``), and the other 9 B run in the steady state.
kvreplay simulates both and weights them as the benchmark does:

    TTFT = (B x W + (N - B) x S) / N,  N = 10 B

W: the burst, B requests at t = 0 under max_num_seqs = B, each from its arrival. S: the steady
state of B clients in a closed loop, each sending its next request when its last one finishes,
their first sends spread evenly over one request's latency (a real server's arrivals are not
synchronised: the fixed point of the simulated loop keeps whatever phase it starts with), averaged
over the requests after the first B. TPOT likewise (W's and S's mean over requests of (finish -
first token) / (OSL - 1)).

**The non-kernel term** (the calibrated roofline's ``allreduce_skew_s``, docs/timing.md
"roofline") is fitted on H100's ``2026-04-06`` runs only, and checked on H200's and B200's, which
the fit never saw: least absolute relative error of TTFT and TPOT, linear in the term (each run
simulated at zero and at a probe value; the final table simulates the fitted value). Each run is
simulated with what the host CPU adds as its vLLM ran (serving/timing/host.py, fitted by
calibrate_host.py: synchronous scheduling before vLLM 0.14, async from it, ``scheduled_async``).
"""

from __future__ import annotations

import numpy as np
from calibrate_stats import print_table as markdown_table
from calibrate_stats import ratio_stats

SILICON_MODELS = {"Qwen/Qwen3-32B": "Qwen3-32B", "meta-llama/Llama-3.1-70B": "Llama-3.1-70B",
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B", "MiniMaxAI/MiniMax-M2.5": "MiniMax-M2.5",
                  "openai/gpt-oss-120b": "gpt-oss-120b"}
#: MoE models: their runs are a group of their own, by vLLM version
MOE_MODELS = {"MiniMax-M2.5", "gpt-oss-120b"}
#: the csv labels gpt-oss-120b's weights nvfp4 on every GPU (H100 and H200 have no fp4 tensor cores):
#: its checkpoint's MXFP4 experts, kvreplay's int4 weights of an mxfp4 checkpoint, KV bf16
MXFP4_MODELS = {"gpt-oss-120b"}
#: vLLM schedules asynchronously by default from 0.14 (0.13.0's config/scheduler.py:133
#: ``async_scheduling: bool = False``; 0.14's config/vllm.py enables it unless incompatible)
ASYNC_FROM = (0, 14)
SILICON_GPUS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
FIT_GPU = "H100"
FIT_SOURCE = "2026-04-06"
PER_CLIENT = 10  # aiconfigurator's request count per concurrency
WEIGHTS = {"": "bf16", "fp8": "fp8"}  # gemm_quant_mode -> kvreplay's --weights-dtype (nvfp4: none)
PROBE = {"allreduce_skew_s": 5e-6}


def source_of(raw: str) -> str:
    if "2026-04-06" in raw:
        return "2026-04-06"
    return "gap-analysis (vLLM 0.12)" if "aic-auto-gap-analysis" in raw and "dynamo" not in raw else "dynamo 0.8"


#: the pool's budget the runs are simulated at: vLLM's default up to 0.19 (config/cache.py:41 of
#: 0.19.0; 0.92 from 0.20.0), the versions the runs record (0.11-0.19), given since kvreplay's own
#: default is vLLM 0.33.0's 0.92
RUNS_UTILIZATION = 0.9


def scheduled_async(version: str | None) -> bool:
    """Whether a run's vLLM scheduled asynchronously by default: its version (``backend_version``,
    or a nightly: after 0.19); none recorded (the 2025 runs, vLLM 0.11-0.12): no."""
    if not version:
        return False
    if version.startswith("nightly"):
        return True
    parts = tuple(int(p) for p in version.split(".")[:2])
    return parts >= ASYNC_FROM


def _left(r) -> str | None:
    """Why kvreplay cannot simulate run `r` as it ran (None: it can): its weights, or an MoE's
    experts or attention not split by TP alone (a dense run's MoE columns do not apply)."""
    if SILICON_MODELS[r["model_path"]] in MXFP4_MODELS:
        pass
    elif r["gemm_quant_mode"] not in WEIGHTS:
        return f"{r['gemm_quant_mode']} weights"
    if SILICON_MODELS[r["model_path"]] in MOE_MODELS and (
            (r["attention_dp_size"] or "1") != "1" or (r["moe_ep_size"] or "1") != "1"
            or (r["moe_tp_size"] or r["tp_size"]) != r["tp_size"]):
        return "MoE expert or attention data parallelism"
    return None


def silicon_runs(rows):
    """The runs kvreplay can simulate, and a count of those left out by reason. A measurement the
    csv holds more than once (an MoE run copied into later collections) counts once; MoE runs are
    grouped by model and vLLM version."""
    out, left, seen = [], {}, set()
    for r in rows:
        if (r["backend"] != "vllm" or r["mode"] != "agg" or r["system"] not in SILICON_GPUS
                or r["model_path"] not in SILICON_MODELS or (r["pp_size"] or "1") != "1"):
            continue
        why = _left(r)
        if why:
            left[why] = left.get(why, 0) + 1
            continue
        model = SILICON_MODELS[r["model_path"]]
        key = (r["system"], model, r["tp_size"], r["batch_size"], r["isl"], r["osl"], r["silicon_ttft_ms"], r["silicon_tpot_ms"])
        if key in seen:
            continue
        seen.add(key)
        version = r["backend_version"] or None
        source = (f"{model} (MoE), vLLM {version or '0.11 (2025)'}" if model in MOE_MODELS
                  else source_of(r["silicon_data_source"]))
        weights = "int4" if model in MXFP4_MODELS else WEIGHTS[r["gemm_quant_mode"]]
        out.append({"id": r["id"], "gpu": SILICON_GPUS[r["system"]], "model": model, "weights": weights,
                    "kv": "bf16" if model in MXFP4_MODELS else weights, "tp": int(r["tp_size"]),
                    "async": scheduled_async(version),
                    "concurrency": int(r["batch_size"]), "isl": int(r["isl"]), "osl": int(r["osl"]),
                    "ttft_s": float(r["silicon_ttft_ms"]) / 1e3, "tpot_s": float(r["silicon_tpot_ms"]) / 1e3,
                    "source": source})
    return out, left


def host_of(run):
    """The host terms a run's vLLM had: the shipped ones, with async scheduling or without."""
    return "vllm" if run["async"] else "vllm-sync"


def serve(run, time_model, arrivals_s, host=None):
    """The run's requests arriving at `arrivals_s`, simulated; `host`: HostTerms (default the
    shipped ones as the run's vLLM scheduled, host_of)."""
    import kvreplay
    from kvreplay.serving.simulate import Scheduler

    blocks = -(-run["isl"] // 16)
    requests = [(list(range(i * blocks, (i + 1) * blocks)), run["isl"], float(t) * 1e3, run["osl"])
                for i, t in enumerate(arrivals_s)]
    trace = kvreplay.Trace.from_requests(requests, block_size=16)
    return kvreplay.simulate(trace, "vllm", None, 16, time_model=time_model, model=run["model"], gpu=run["gpu"],
                             tp=run["tp"], weights_dtype=run["weights"], kv_dtype=run["kv"],
                             gpu_memory_utilization=RUNS_UTILIZATION,
                             scheduler=Scheduler(style="vllm", max_num_seqs=run["concurrency"]),
                             compare_sequential=False, check=False, band_runs=False,
                             host=host_of(run) if host is None else host)


def _means(r, mask):
    ttft = r.first_token_s - r.arrival_s
    tpot = (r.finish_s - r.first_token_s) / np.maximum(r.output_tokens - 1, 1)
    ok = r.finished & mask
    return float(np.mean(ttft[ok])), float(np.mean(tpot[ok]))


def burst(run, tm, host=None):
    """W: B requests at t = 0, the simulated report."""
    return serve(run, tm, np.zeros(run["concurrency"]), host)


def steady(run, tm, period: float, waves: int = 4, host=None):
    """S: B closed-loop clients whose first sends are spread over one request's latency (`period`)."""
    B = run["concurrency"]
    n = waves * B
    arrivals = np.concatenate([np.arange(B) * period / B + w * period for w in range(waves)])
    for _ in range(2 * waves + 2):  # the loop's fixed point: each request sent when its client's last one ended
        r = serve(run, tm, arrivals, host)
        sends = arrivals.copy()
        sends[B:] = r.finish_s[:-B]
        if np.allclose(sends, arrivals):
            break
        arrivals = np.sort(sends)
    return _means(r, np.arange(n) >= B)


def benchmark(run, tm, host=None):
    """The benchmark's means over its N = 10 B requests: B in the burst, the rest steady."""
    w = burst(run, tm, host)
    wt, wp = _means(w, np.ones(run["concurrency"], bool))
    st, sp = steady(run, tm, float(np.mean(w.finish_s)), host=host)
    share = 1.0 / PER_CLIENT
    return share * wt + (1 - share) * st, share * wp + (1 - share) * sp


def simulate_runs(runs, make_model, make_host=None):
    """Each run's benchmark simulated: `make_model(run)` its time model, `make_host(run)` its host
    terms (default: the shipped ones as its vLLM scheduled)."""
    rows = []
    for run in runs:
        try:
            ttft, tpot = benchmark(run, make_model(run), None if make_host is None else make_host(run))
        except Exception as e:  # a configuration kvreplay refuses (memory): said, not counted
            rows.append({**run, "error": str(e)})
            continue
        rows.append({**run, "sim_ttft_s": ttft, "sim_tpot_s": tpot})
    return rows


def fit_terms(runs, make_model):
    """The serving terms (PROBE's) by least absolute relative error of TTFT and TPOT over `runs`,
    from simulations at zero and at each term's probe value (both latencies are linear in them
    but for scheduling)."""
    base = simulate_runs(runs, lambda r: make_model(r, {}))
    probes = {k: simulate_runs(runs, lambda r, k=k: make_model(r, {k: v})) for k, v in PROBE.items()}
    A, y = [], []
    for i, b in enumerate(base):
        if "error" in b:
            continue
        for key in ("ttft", "tpot"):
            measured = b[f"{key}_s"]
            slopes = [(probes[k][i][f"sim_{key}_s"] - b[f"sim_{key}_s"]) / PROBE[k] for k in PROBE]
            A.append([s / measured for s in slopes])
            y.append(1.0 - b[f"sim_{key}_s"] / measured)
    A, y = np.array(A), np.array(y)
    w = np.ones_like(y)
    for _ in range(50):  # least absolute relative error (reweighted least squares): runs whose
        # queue the KV pool sets (TTFT tens of seconds) do not pull the terms
        x, *_ = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)
        w = 1.0 / np.sqrt(np.maximum(np.abs(A @ x - y), 0.01))
    return {k: max(float(v), 0.0) for k, v in zip(PROBE, x)}


def summary(rows):
    ok = [r for r in rows if "error" not in r]
    out = {"runs": len(ok), "refused": len(rows) - len(ok)}
    if not ok:
        return out
    for key in ("ttft", "tpot"):
        ratios = np.array([r[f"{key}_s"] / r[f"sim_{key}_s"] for r in ok])
        out[key] = ratio_stats(ratios)
    return out


def groups(rows):
    """(GPU, source) -> rows, and each source over all GPUs."""
    out = {}
    for r in rows:
        out.setdefault((r["gpu"], r["source"]), []).append(r)
    return dict(sorted(out.items()))


def print_table(title, by_group):
    columns = (("GPU", False), ("runs", True), ("source", False), ("TTFT error (MAPE)", True),
               ("TTFT measured / simulated, median [5-95%]", False), ("TPOT error", True),
               ("TPOT measured / simulated, median [5-95%]", False))

    def cells(gpu, source, s):
        runs = f"{s['runs']} (+{s['refused']} refused)" if s["refused"] else str(s["runs"])
        return [gpu, runs, source] + [cell for v in (s["ttft"], s["tpot"]) for cell in
                                      (f"{100 * v['mape']:.1f}%", f"{v['median_ratio']:.2f} [{v['band'][0]:.2f}-{v['band'][1]:.2f}]")]

    markdown_table(title, columns, (cells(gpu, source, s) for (gpu, source), s in by_group.items() if "ttft" in s))
