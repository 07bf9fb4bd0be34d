"""Held-out check: LLMServingSim's per-request vLLM runs against kvreplay's simulation of them.

    python benchmarks/llmservingsim.py                 # the tables (docs/fidelity.md)
    python benchmarks/llmservingsim.py --extract GIT   # rebuild the extract from a clone of
                                                       # casys-kaist/LLMServingSim (its git directory)

**The runs** (benchmarks/data/llmservingsim_requests.csv, RUNS below; casys-kaist/LLMServingSim, MIT
license, the commit each run names): LLMServingSim's vLLM benchmark runner (``bench/core/runner.py``)
replays 300 ShareGPT requests at 10 requests/s (its ``workloads/sharegpt-*-300-sps10.jsonl``) through
vLLM 0.19.0 on one RTX PRO 6000 Blackwell (Server Edition, the card its later runs' meta.json name)
or one RTX 4090: Llama-3.1-8B, Qwen3-32B at TP 2, Qwen3-30B-A3B at data parallel 2 with expert
parallelism. This source is held out: nothing in kvreplay is fitted on it.

**What the clocks measure.** The runner drives vLLM in process (``AsyncLLM.from_engine_args``, no HTTP
server): at each request's arrival offset it calls ``engine.generate(TokensPrompt(prompt_token_ids=...),
SamplingParams(min_tokens=n, max_tokens=n, ignore_eos=True, temperature=0))``, so no tokenisation,
exactly the recorded output length, greedy sampling; it consumes the stream and records the last
``RequestOutput.metrics`` (vLLM's ``RequestStateStats``). ``arrival_time`` is the frontend's wall clock
(``time.time()`` when the request was added); ``queued_ts`` (the engine core's scheduler received it),
``scheduled_ts`` (first scheduled), ``first_token_ts`` and ``last_token_ts`` (the engine core's output
timestamp of the steps that produced the first and the last token) are the engine core's
``time.monotonic()``. The two clocks have different origins, so the figures here are the engine's
own: TTFT = first_token - queued, E2E = last_token - queued, ITL (TPOT) = (last_token -
first_token) / (output tokens - 1). They hold the engine core's queue, scheduling and steps, not the
frontend's path (in process, token ids: a few ms, ``frontend_ms`` below) nor the output's way back.

**The simulation** runs each request at its engine arrival (queued_ts), with its prompt and output
length, its prompt's blocks shared with earlier prompts exactly as the token ids share full 16-token
blocks (the extract's ``prefix_of`` / ``prefix_blocks``; vLLM's prefix caching is on), vLLM's scheduler
at the run's max_num_seqs and max_num_batched_tokens (2048; chunked prefill), the run's KV pool (the
RTX 4090's num_gpu_blocks as its 256-seq run's meta.json records it, 2,588, for both RTX 4090 runs:
the 128-seq run records none; the RTX PRO 6000 runs' kvreplay's budget at vLLM 0.19's default
utilization 0.9), the calibrated roofline on the run's GPU and TP (bf16), and the shipped host terms
(serving/timing/host.py, async scheduling as vLLM 0.19 defaults) without their API-server terms
(request_s, prompt_token_s, latency_s, output_request_s: outside what these clocks measure).
The data-parallel run is simulated as vLLM runs it (``dp=2, enable_expert_parallel=True``: two ranks
in lockstep behind vLLM's rank choice, each GPU holding half the experts, which run over both ranks'
tokens; serving/dataparallel.py, docs/clusters.md "Data parallelism"; before 2026-12-07 it was two
independent replicas behind the least-loaded router). The band is the simulation's own (report ``latency_band_s``: the parameter band, each end with the
host terms at that end, and the prediction band), less each end's API-server delay.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from calibrate_stats import print_table, ratio_stats, run_arguments, selected_runs

import kvreplay
from kvreplay.serving.simulate import Scheduler
from kvreplay.serving.timing.host import band_end, calibrated, prediction_factors, widen_band

DATA = Path(__file__).parent / "data" / "llmservingsim_requests.csv"
REPO = "https://github.com/casys-kaist/LLMServingSim"
BLOCK = 16
#: the host terms outside the engine core's clocks (module docstring)
API_TERMS = ("request_s", "prompt_token_s", "latency_s", "output_request_s")
#: run -> where it is (commit, directory under bench/), its workload, and how vLLM ran it
RUNS = {
    "rtxpro6000-llama31-8b": dict(
        commit="5daddb21a545658d5150b535712d0494584b5278", path="examples/RTXPRO6000/Llama-3.1-8B/vllm",
        workload="sharegpt-llama-3.1-8b-300-sps10.jsonl", gpu="RTX-PRO-6000", model="Llama-3.1-8B", tp=1,
        max_num_seqs=128, blocks=None),
    "rtxpro6000-qwen3-32b-tp2": dict(
        commit="5daddb21a545658d5150b535712d0494584b5278", path="examples/RTXPRO6000/Qwen3-32B/vllm",
        workload="sharegpt-qwen3-32b-300-sps10.jsonl", gpu="RTX-PRO-6000", model="Qwen3-32B", tp=2,
        max_num_seqs=128, blocks=None),
    "rtxpro6000-qwen3-30b-a3b-dp2ep": dict(
        commit="5daddb21a545658d5150b535712d0494584b5278", path="examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm",
        workload="sharegpt-qwen3-30b-a3b-300-sps10.jsonl", gpu="RTX-PRO-6000", model="Qwen3-30B-A3B", tp=1,
        max_num_seqs=128, blocks=None, dp=2, expert_parallel=True),
    "rtx4090-llama31-8b-seqs128": dict(
        commit="5bae11f9799dd59de86daa6412a3b465b80418c3", path="results/rtx4090-llama8b-tp1",
        workload="sharegpt-llama-3.1-8b-300-sps10.jsonl", gpu="RTX-4090", model="Llama-3.1-8B", tp=1,
        max_num_seqs=128, blocks=2588),
    "rtx4090-llama31-8b-seqs256": dict(
        commit="da26736bebe5e8b505f7aec809454c24c08260f7", path="results/llama-3.1-8b-rtx4090",
        workload="sharegpt-llama-3.1-8b-300-sps10.jsonl", gpu="RTX-4090", model="Llama-3.1-8B", tp=1,
        max_num_seqs=256, blocks=2588),
}
COLUMNS = ("run", "request", "input_toks", "output_toks", "prefix_of", "prefix_blocks", "arrival_s", "queued_s",
           "scheduled_s", "first_token_s", "last_token_s")
STAMPS = ("queued_s", "scheduled_s", "first_token_s", "last_token_s")


def _git(gitdir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", gitdir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def shared_prefixes(prompts: list[list[int]]) -> list[tuple[int, int]]:
    """(prefix_of, prefix_blocks) per prompt: the earlier prompt with which it shares the most leading
    full blocks of BLOCK tokens, and how many (-1, 0: none). Blocks are chained, as vLLM's prefix
    cache hashes them, so that one prompt's first blocks are exactly the ones it can hit."""
    ids_of, owner, out = {}, {}, []  # (parent block's id, the block's tokens) -> id; id -> first prompt
    for i, ids in enumerate(prompts):
        chain, parent = [], -1
        for b in range(len(ids) // BLOCK):
            parent = ids_of.setdefault((parent, tuple(ids[b * BLOCK:(b + 1) * BLOCK])), len(ids_of))
            chain.append(parent)
        n = 0
        while n < len(chain) and chain[n] in owner:
            n += 1
        out.append((owner[chain[n - 1]] if n else -1, n))
        for key in chain:
            owner.setdefault(key, i)
    return out


def extract(gitdir: str) -> None:
    """The extract from a clone's git directory: the fields used here, the engine's stamps relative to
    the run's first queued_ts and the wall-clock arrivals to its first arrival_time, microseconds."""
    rows = []
    for run, cfg in RUNS.items():
        records = [json.loads(line) for line in _git(gitdir, cfg["commit"], f"bench/{cfg['path']}/requests.jsonl").splitlines()]
        workload = [json.loads(line) for line in _git(gitdir, cfg["commit"], f"workloads/{cfg['workload']}").splitlines()]
        prefixes = shared_prefixes([w["input_tok_ids"] for w in workload])
        a0 = min(r["arrival_time"] for r in records)
        q0 = min(r["queued_ts"] for r in records)
        for i, (r, w, (of, n)) in enumerate(zip(records, workload, prefixes)):
            assert r["request_id"] == f"bench-{i}" and r["input_toks"] == len(w["input_tok_ids"]), (run, i)
            rows.append([run, i, r["input_toks"], r["output_toks"], of, n, f"{r['arrival_time'] - a0:.6f}"]
                        + [f"{r[k[:-2] + '_ts'] - q0:.6f}" for k in STAMPS])
    with open(DATA, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"wrote {DATA} ({len(rows)} requests)")


def load_runs(path: Path = DATA) -> dict:
    """run -> {column: array}, in each run's request order."""
    by = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            by.setdefault(row["run"], []).append(row)
    out = {}
    for run, rows in by.items():
        out[run] = {k: np.array([float(r[k]) if k.endswith("_s") else int(r[k]) for r in rows]) for k in COLUMNS[1:]}
    return out


def measured(r: dict) -> dict:
    """The engine's per-request figures (module docstring), seconds."""
    return {"ttft": r["first_token_s"] - r["queued_s"], "e2e": r["last_token_s"] - r["queued_s"],
            "itl": (r["last_token_s"] - r["first_token_s"]) / np.maximum(r["output_toks"] - 1, 1),
            "queue": r["scheduled_s"] - r["queued_s"]}


def trace_of(r: dict):
    """The run as a trace: each request at its engine arrival, its blocks shared as its tokens are."""
    ids, requests = [], []
    for i in range(len(r["input_toks"])):
        total = -(-int(r["input_toks"][i]) // BLOCK)
        n = int(r["prefix_blocks"][i])
        own = [(i, b) for b in range(n, total)]
        ids.append((ids[int(r["prefix_of"][i])][:n] if n else []) + own)
        requests.append((ids[i], int(r["input_toks"][i]), float(r["queued_s"][i]) * 1e3, int(r["output_toks"][i])))
    return kvreplay.Trace.from_requests(requests, block_size=BLOCK)


def engine_host():
    """The shipped host terms without the API server's (module docstring)."""
    return calibrated().with_terms(**dict.fromkeys(API_TERMS, 0.0))


def simulate_run(run: str, r: dict):
    cfg = RUNS[run]
    pool = {"num_gpu_blocks_override": cfg["blocks"]} if cfg["blocks"] else {"gpu_memory_utilization": 0.9}
    cluster = {"dp": cfg["dp"], "enable_expert_parallel": cfg["expert_parallel"]} if cfg.get("dp") else {}
    return kvreplay.simulate(trace_of(r), "vllm", None, BLOCK, time_model="roofline", model=cfg["model"],
                             gpu=cfg["gpu"], tp=cfg["tp"], weights_dtype="bf16", kv_dtype="bf16",
                             scheduler=Scheduler(style="vllm", max_num_seqs=cfg["max_num_seqs"],
                                                 max_num_batched_tokens=2048),
                             host=engine_host(), compare_sequential=False, check=False, **pool, **cluster)


def simulated(rep) -> dict:
    return {"ttft": rep.first_token_s - rep.arrival_s, "e2e": rep.finish_s - rep.arrival_s,
            "itl": (rep.finish_s - rep.first_token_s) / np.maximum(rep.output_tokens - 1, 1),
            "queue": rep.scheduled_s - rep.arrival_s}


def bands(rep, r: dict) -> dict:
    """figure -> (parameter band, prediction band) of its mean, each end less the mean API-server
    delay of the host terms at that end (the band's runs take them; the point estimate does not)."""
    band = rep.summary()["latency_band_s"]
    prompts, arrivals = r["input_toks"], r["queued_s"]
    delay = {end: float(np.mean(band_end(engine_host(), end).engine_arrivals(arrivals, prompts) - arrivals))
             for end in ("low", "high")}
    factors = prediction_factors("vllm")
    out = {}
    for key, name in (("ttft", "ttft"), ("itl", "tpot"), ("e2e", "e2e")):
        lo, hi = band[name]["mean"]
        if key != "itl":
            lo, hi = lo - delay["low"], hi - delay["high"]
        centre = float(np.mean(simulated(rep)[key][rep.finished]))
        out[key] = ((lo, hi), widen_band(centre, lo, hi, factors[key]))
    return out


def compare(meas: dict, sim: dict, ok) -> dict:
    out = {}
    for key in ("ttft", "itl", "e2e"):
        m, s = meas[key][ok], sim[key][ok]
        out[key] = {**ratio_stats(m / s), "measured_mean": float(m.mean()), "simulated_mean": float(s.mean()),
                    "mean_error": float(s.mean() / m.mean() - 1)}
    return out


def check_run(run: str, r: dict) -> dict:
    rep = simulate_run(run, r)
    meas, sim = measured(r), simulated(rep)
    ok = rep.finished
    return {"run": run, "requests": int(ok.sum()), "of": len(ok), "figures": compare(meas, sim, ok),
            "bands": bands(rep, r), "pool_blocks": int(rep.capacity_blocks), "meas": meas, "sim": sim, "ok": ok,
            "frontend_ms": 1e3 * float(np.median((r["queued_s"] - r["arrival_s"]) - np.min(r["queued_s"] - r["arrival_s"]))),
            "prompt_at_once": float(np.mean(r["input_toks"][ok & (meas["queue"] < AT_ONCE_S)]))}


def covers(band, value) -> str:
    return "yes" if band[0] <= value <= band[1] else ("no, above" if value > band[1] else "no, below")


def run_table(results) -> None:
    columns = [("run", False), ("requests", True), ("pool (blocks)", True)]
    for key in ("TTFT", "ITL", "E2E"):
        columns += [(f"{key} MAPE", True), (f"{key} mean meas / sim, error", False),
                    (f"{key} meas/sim median [5-95%]", False), (f"{key} mean in band (param / pred)", False)]
    rows = []
    for c in results:
        cells = [c["run"], f"{c['requests']} of {c['of']}", f"{c['pool_blocks']:,}"]
        for key in ("ttft", "itl", "e2e"):
            v, (param, pred) = c["figures"][key], c["bands"][key]
            unit = 1e3
            cells += [f"{100 * v['mape']:.1f}%",
                      f"{unit * v['measured_mean']:.1f} / {unit * v['simulated_mean']:.1f} ms, {100 * v['mean_error']:+.1f}%",
                      f"{v['median_ratio']:.2f} [{v['band'][0]:.2f}-{v['band'][1]:.2f}]",
                      f"{covers(param, v['measured_mean'])} / {covers(pred, v['measured_mean'])}"]
        rows.append(cells)
    print_table("LLMServingSim's vLLM 0.19 runs (engine clocks) against kvreplay (simulated mean = the point estimate)",
                columns, rows)


def band_table(results) -> None:
    columns = [("run", False)] + [(f"{k} mean: measured, parameter band, prediction band (ms)", False)
                                  for k in ("TTFT", "ITL", "E2E")]
    rows = []
    for c in results:
        cells = [c["run"]]
        for key in ("ttft", "itl", "e2e"):
            (p0, p1), (q0, q1) = c["bands"][key]
            cells.append(f"{1e3 * c['figures'][key]['measured_mean']:.1f}, [{1e3 * p0:.1f}-{1e3 * p1:.1f}], "
                         f"[{1e3 * q0:.1f}-{1e3 * q1:.1f}]")
        rows.append(cells)
    print_table("the simulated means' bands (each end less its API-server delay)", columns, rows)


def family_table(results) -> None:
    groups = {}
    for c in results:
        cfg = RUNS[c["run"]]
        groups.setdefault(f"{cfg['gpu']} {cfg['model']}", []).append(c)
    columns = [("GPU, model", False), ("runs", True), ("requests", True)] + [
        (f"{k} MAPE / mean error", False) for k in ("TTFT", "ITL", "E2E")]
    rows = []
    for name, cs in groups.items():
        cells = [name, str(len(cs)), str(sum(c["requests"] for c in cs))]
        for key in ("ttft", "itl", "e2e"):
            m = np.concatenate([c["meas"][key][c["ok"]] for c in cs])
            s = np.concatenate([c["sim"][key][c["ok"]] for c in cs])
            cells.append(f"{100 * np.mean(np.abs(s / m - 1)):.1f}% / {100 * (s.mean() / m.mean() - 1):+.1f}%")
        rows.append(cells)
    print_table("by GPU and model", columns, rows)


#: input-length bins of the TTFT diagnosis, tokens
BINS = (0, 256, 512, 1024, 2048, 1 << 30)
#: a request vLLM scheduled at once: its first schedule within this of its queueing (the engine's
#: clocks), a light-load request inside a loaded run
AT_ONCE_S = 0.005


def _mean_cells(m, s, sel) -> list[str]:
    if not sel.any():
        return ["0", "-", "-"]
    mm, sm = m[sel].mean(), s[sel].mean()
    return [str(int(sel.sum())), f"{1e3 * mm:.1f} / {1e3 * sm:.1f}", f"{100 * (sm / mm - 1):+.1f}%"]


def ttft_bins(results, r_all) -> None:
    """TTFT by prompt length, of every request and of those vLLM scheduled at once (AT_ONCE_S). The
    engine's own split of TTFT (scheduled - queued, then the rest) is not compared: under async
    scheduling vLLM stamps scheduled_ts when it schedules a step, while the one before still runs."""
    columns = [("run", False), ("prompt tokens", False), ("requests", True), ("TTFT meas / sim ms", False),
               ("mean error", True), ("scheduled at once", True), ("their TTFT meas / sim ms", False),
               ("their mean error", True)]
    rows = []
    for c in results:
        L, m, s = r_all[c["run"]]["input_toks"], c["meas"]["ttft"], c["sim"]["ttft"]
        at_once = c["ok"] & (c["meas"]["queue"] < AT_ONCE_S)
        for lo, hi in zip(BINS, BINS[1:]):
            sel = c["ok"] & (L >= lo) & (L < hi)
            if sel.any():
                label = f"{lo}-{hi - 1}" if hi < BINS[-1] else f">= {lo}"
                rows.append([c["run"], label] + _mean_cells(m, s, sel) + _mean_cells(m, s, sel & at_once))
    print_table("TTFT by prompt length (engine clocks), and of the requests vLLM scheduled at once", columns, rows)


def at_once_table(results) -> None:
    columns = [("run", False), ("requests scheduled at once", True), ("mean prompt", True),
               ("TTFT meas / sim mean ms, error", False), ("TTFT MAPE", True), ("meas/sim median [5-95%]", False),
               ("the run's first request meas / sim ms", False)]
    rows = []
    for c in results:
        sel = c["ok"] & (c["meas"]["queue"] < AT_ONCE_S)
        m, s = c["meas"]["ttft"][sel], c["sim"]["ttft"][sel]
        v = ratio_stats(m / s)
        rows.append([c["run"], str(int(sel.sum())), f"{c['prompt_at_once']:.0f}",
                     f"{1e3 * m.mean():.1f} / {1e3 * s.mean():.1f}, {100 * (s.mean() / m.mean() - 1):+.1f}%",
                     f"{100 * v['mape']:.1f}%", f"{v['median_ratio']:.2f} [{v['band'][0]:.2f}-{v['band'][1]:.2f}]",
                     f"{1e3 * c['meas']['ttft'][0]:.1f} / {1e3 * c['sim']['ttft'][0]:.1f}"])
    print_table(f"the requests vLLM scheduled at once (within {1e3 * AT_ONCE_S:.0f} ms of queueing): light load "
                "inside the loaded runs", columns, rows)


def main(argv=None) -> int:
    args = run_arguments(argv, __doc__, "rebuild the extract from LLMServingSim's git directory")
    if args.extract:
        extract(args.extract)
        return 0
    runs = load_runs()
    names = selected_runs(args.runs, list(runs))
    if names is None:
        return 2
    results = [check_run(n, runs[n]) for n in names]
    run_table(results)
    band_table(results)
    family_table(results)
    at_once_table(results)
    ttft_bins(results, runs)
    print("\nfrontend (queued - arrival, less its least), median ms: "
          + ", ".join(f"{c['run']} {c['frontend_ms']:.1f}" for c in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
