#!/usr/bin/env python
"""Speed of the serving simulator (``kvreplay simulate``): start-up, the conversation trace, 1M requests.

Every figure is wall time (``time.perf_counter``) and CPU time (``time.process_time`` in process,
user+sys of the child for subprocesses), the median over --repeat runs, with the load other
processes put on the machine meanwhile (benchmarks/_quiet.py: the machine is shared).

1. Start-up: the whole command

       kvreplay simulate conversation_trace.jsonl --model Llama-3.1-8B --gpu H100 --policy P

   in a fresh process, cold (NUMBA_CACHE_DIR a fresh empty directory: everything compiles) and
   warm (the same directory again: the kernels load from the cache), for each of --cli-policies
   (default vllm,lru). It includes loading the JSONL, the sequential replay the command compares
   with, and printing the summary. Also the child's peak RSS (VmHWM, written at exit by a few
   lines around kvreplay.cli.main).
2. The conversation trace (12,031 requests), in process, the trace loaded and the kernel
   compiled (the first call per policy, reported as "first call", compiles or loads the cache):

       simulate(trace, P, C, engine_style=S, time_model="roofline", model="Llama-3.1-8B", gpu="H100",
                speedup=X, compare_sequential=False)

   for P/S in vllm/vllm, radix/sglang, lru/vllm, s3fifo/vllm; C in 20000, 2000 blocks; X in 0.25
   (arrivals stretched 4x: the instance keeps up) and 1.0 (the trace's own rate: it does not).
   Reported with the run's steps (report.counters["steps"]) and steps per CPU-second. Then the
   configuration benchmarks/dynamo_compare.py runs against Dynamo 1.6.1: policy vllm with the
   Dynamo NPZ profile (dynamo_compare.make_profile) as time_model, C 2000/20000, X 0.25/1.0.
3. Scale: the conversation trace repeated back to back until it has --scale-requests requests
   (default 1,000,000; copy k has its own block ids, num_blocks * k + id, and its timestamps
   shifted by k times the trace's span plus one mean inter-arrival gap, so the request rate
   stays the trace's; --speedup raises it). benchmarks/bigtrace.py cannot be used: it generates
   sessions from its own model and cannot scale a given trace. Simulated with vllm and lru at
   C 20000 and 200000, roofline Llama-3.1-8B on 1 H100 (tp 1), at X 0.25 (it keeps up) and 1.0
   (it does not), each configuration in a fresh child process that builds the trace, warms the
   kernel on its first 1,000 requests, then times --scale-repeat runs; that child's peak RSS
   (VmHWM) and its RSS before the timed runs (trace built, kernel loaded).

Prints one markdown table per part; --json FILE (or -) writes every record.
--quick: a fast subset (one cold/warm start of vllm, vllm and radix at C 20000, and one 100,000-
request scale run per load).

Usage:  python benchmarks/simulate.py [--repeat 3] [--scale-repeat 1] [--quick] [--json out.json|-]
        [--parts cli,conversation,dynamo,scale] [--scale-policies vllm,lru] [--scale-capacities 20000,200000]
        [--scale-speedups 0.25,1.0] [--code HEAD|REF|installed]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _code  # noqa: E402
from _quiet import Probe, measure, summary, wait_quiet  # noqa: E402

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
MODEL, GPU = "Llama-3.1-8B", "H100"
POLICIES = [("vllm", "vllm"), ("radix", "sglang"), ("lru", "vllm"), ("s3fifo", "vllm")]
CAPACITIES = [20000, 2000]
SPEEDUPS = [0.25, 1.0]
SCALE_POLICIES = ["vllm", "lru"]
SCALE_CAPACITIES = [20000, 200000]
WARM_REQUESTS = 1000


# ---- 1. the command line, cold and warm ---------------------------------------------------------

# The command, with its peak RSS (VmHWM) written to stderr at exit. Not the child's ru_maxrss: Python
# starts children with vfork+exec and Linux folds the parent's high-water mark into the child's.
_HWM = ("import atexit, os, sys\n"
        "def _hwm():\n"
        "    with open('/proc/self/status') as f:\n"
        "        kb = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
        "    os.write(2, ('\\nVmHWM_KB ' + kb + '\\n').encode())\n"
        "atexit.register(_hwm)\n"
        "from kvreplay.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")


def run_child(cmd: list[str], env: dict) -> dict:
    """One child process: wall, CPU (its user+sys, from wait4), peak RSS (VmHWM), others' load."""
    with tempfile.TemporaryFile() as err, Probe() as p:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode()
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({child.returncode}):\n{text}")
    hwm = [int(line.split()[1]) for line in text.splitlines() if line.startswith("VmHWM_KB ")]
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_mib": hwm[-1] / 1024 if hwm else float("nan"),
            "others": p.others}


def cli_start(trace: str, policies: list[str], repeat: int) -> list[dict]:
    exe = [sys.executable, "-c", _HWM]
    rows = []
    for policy in policies:
        cmd = [*exe, "simulate", trace, "--model", MODEL, "--gpu", GPU, "--policy", policy]
        cold, warm = [], []
        for _ in range(repeat):
            cache = tempfile.mkdtemp(prefix="kvreplay-simcold-")
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            try:
                wait_quiet(20)
                cold.append(run_child(cmd, env))
                wait_quiet(10)
                warm.append(run_child(cmd, env))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        row = {"policy": policy, "command": " ".join(["kvreplay", *cmd[3:]]), "cold": cold, "warm": warm}
        for kind in ("cold", "warm"):
            runs = row[kind]
            row[f"{kind}_wall"] = statistics.median(r["wall"] for r in runs)
            row[f"{kind}_cpu"] = statistics.median(r["cpu"] for r in runs)
            row[f"{kind}_maxrss_mib"] = max(r["maxrss_mib"] for r in runs)
            row[f"{kind}_others"] = statistics.median(r["others"] for r in runs)
        rows.append(row)
        print(f"  {policy:8} cold {row['cold_wall']:6.2f} s wall {row['cold_cpu']:6.2f} s CPU | warm "
              f"{row['warm_wall']:5.2f} s wall {row['warm_cpu']:5.2f} s CPU | peak RSS {row['cold_maxrss_mib']:.0f} MiB",
              flush=True)
    return rows


# ---- 2. simulate() on the conversation trace ----------------------------------------------------

def timed_simulate(trace, out: dict, **kw):
    from kvreplay.serving.simulate import simulate

    def fn():
        w0, c0 = time.perf_counter(), time.process_time()
        report = simulate(trace, compare_sequential=False, **kw)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        out["report"] = report
        return wall, cpu
    return fn


def describe(report) -> dict:
    from kvreplay.serving.simulate import backlog_s, is_unstable

    return {"steps": int(report.counters["steps"]), "prefill_steps": int(report.counters["prefill_steps"]),
            "preemptions": int(report.counters["preemptions"]), "peak_running": int(report.counters["peak_running"]),
            "peak_waiting": int(report.counters["peak_waiting"]), "hit_rate": report.hit_rate,
            "finished": int(report.num_finished), "simulated_s": report.end_s, "backlog_s": backlog_s(report),
            "keeps_up": not is_unstable(report)}


def conversation(trace, configs: list[dict], repeat: int, label: str) -> list[dict]:
    """configs: simulate() keyword sets; the first call of each (policy, style, time model) is the warm-up."""
    rows, warmed = [], set()
    for kw in configs:
        out: dict = {}
        key = (kw["policy"], kw["engine_style"], str(kw["time_model"]))
        first = None
        if key not in warmed:
            first = timed_simulate(trace, out, **kw)()
            warmed.add(key)
        recs = measure(timed_simulate(trace, out, **kw), repeat, quiet_wait=10)
        s = summary(recs)
        row = {"part": label, "policy": kw["policy"], "engine_style": kw["engine_style"],
               "capacity": kw["capacity"], "speedup": kw["speedup"],
               "time_model": "roofline" if kw["time_model"] == "roofline" else "dynamo npz",
               "wall": s["wall_median"], "cpu": s["cpu_median"], "clean_runs": s["clean_runs"], "runs": s["runs"],
               "others": s["others_median"], "first_call_wall": None if first is None else first[0],
               "first_call_cpu": None if first is None else first[1], **describe(out["report"])}
        row["steps_per_cpu_s"] = row["steps"] / row["cpu"] if row["cpu"] > 0 else None
        rows.append(row)
        print(f"  {row['policy']:6} {row['engine_style']:6} C {row['capacity']:>6} x{row['speedup']:<4} "
              f"{row['time_model']:10} {row['wall']:.3f} s wall {row['cpu']:.3f} s CPU, {row['steps']:,} steps "
              f"({row['steps_per_cpu_s'] / 1e6:.2f} M/s), keeps up {row['keeps_up']}"
              + (f"; first call {first[0]:.2f} s" if first else ""), flush=True)
    return rows


# ---- 3. a long trace: the conversation trace repeated -------------------------------------------

def repeated(trace, n_target: int):
    """The trace repeated back to back until it has n_target requests (fresh ids per copy, the
    request rate kept: copy k is shifted by k * (span + span / (n - 1)))."""
    import numpy as np

    from kvreplay import Trace

    n = len(trace)
    order = np.argsort(trace.timestamp, kind="stable")
    if np.any(order != np.arange(n)):
        trace = trace.take(order)
    copies = -(-n_target // n)
    ts = trace.timestamp - trace.timestamp.min()
    span = float(ts.max())
    period = span + span / max(n - 1, 1)
    acc = trace.num_accesses
    k = np.arange(copies)
    offsets = np.concatenate([(trace.offsets[:-1][None, :] + acc * k[:, None]).ravel(), [acc * copies]])
    if trace.num_blocks * copies > np.iinfo(np.int32).max:
        raise SystemExit("too many block ids for int32")
    blocks = (trace.blocks[None, :].astype(np.int64) + trace.num_blocks * k[:, None]).ravel().astype(np.int32)
    stamp = (ts[None, :] + period * k[:, None]).ravel()
    tile = lambda a: np.tile(np.asarray(a), copies)[:n_target]  # noqa: E731
    offsets = offsets[:n_target + 1]
    blocks = blocks[:offsets[-1]]
    return Trace(offsets=offsets, blocks=blocks, input_length=tile(trace.input_length),
                 output_length=tile(trace.output_length), timestamp=stamp[:n_target],
                 num_blocks=int(blocks.max()) + 1, block_size=trace.block_size,
                 source=f"{trace.source} x{copies} back to back, first {n_target:,} requests", format="synthetic")


def _status_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def scale_worker(spec: dict) -> None:
    """In a child: build the long trace, warm up, time spec['repeat'] runs; one JSON line on stdout."""
    from kvreplay import load_trace

    t0 = time.perf_counter()
    base = load_trace(spec["trace"])
    big = repeated(base, spec["requests"])
    build = time.perf_counter() - t0
    kw = dict(policy=spec["policy"], capacity=spec["capacity"], engine_style="vllm", time_model="roofline",
              model=MODEL, gpu=GPU, tp=1, speedup=spec["speedup"])
    from kvreplay.serving.simulate import simulate

    w0 = time.perf_counter()
    simulate(big.take(__import__("numpy").arange(WARM_REQUESTS)), compare_sequential=False, **kw)
    warm = time.perf_counter() - w0
    rss_before = _status_mib()
    out: dict = {}
    recs = measure(timed_simulate(big, out, **kw), spec["repeat"], quiet_wait=20, attempts=1)
    s = summary(recs)
    span_s = float(big.timestamp.max() - big.timestamp.min()) / 1000.0 / spec["speedup"]
    row = {"part": "scale", "requests": len(big), "block_accesses": int(big.num_accesses),
           "unique_blocks": int(big.num_blocks), "trace_mib": big.nbytes() / 2**20, **spec,
           "arrival_span_s": span_s, "requests_per_s": len(big) / span_s,
           "prompt_tokens_per_s": int(big.input_length.sum()) / span_s, "build_s": build, "warmup_s": warm,
           "wall": s["wall_median"], "cpu": s["cpu_median"], "wall_runs": [r["wall"] for r in recs],
           "cpu_runs": [r["cpu"] for r in recs], "others": s["others_median"], "clean_runs": s["clean_runs"],
           "rss_before_mib": rss_before, "peak_rss_mib": _status_mib("VmHWM"),
           "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           **describe(out["report"])}
    row["steps_per_cpu_s"] = row["steps"] / row["cpu"] if row["cpu"] > 0 else None
    print(json.dumps(row), flush=True)


def scale(trace: str, requests: int, policies, capacities, speedups, repeat: int) -> list[dict]:
    rows = []
    for speedup in speedups:
        for policy in policies:
            for capacity in capacities:
                spec = {"trace": trace, "requests": requests, "policy": policy, "capacity": capacity,
                        "speedup": speedup, "repeat": repeat}
                done = subprocess.run([sys.executable, __file__, "--scale-worker", json.dumps(spec)],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"scale worker {spec} failed ({done.returncode}):\n{done.stderr}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"  {policy:5} C {capacity:>6} x{speedup:<4} {row['wall']:6.2f} s wall {row['cpu']:6.2f} s CPU, "
                      f"{row['steps']:,} steps ({row['steps_per_cpu_s'] / 1e6:.2f} M/s), keeps up {row['keeps_up']}, "
                      f"peak RSS {row['peak_rss_mib']:.0f} MiB (before runs {row['rss_before_mib']:.0f}); "
                      f"trace built in {row['build_s']:.1f} s", flush=True)
    return rows


# ---- tables -------------------------------------------------------------------------------------

def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(result: dict) -> str:
    out = []
    if result.get("cli"):
        out.append("### Start-up: the whole `kvreplay simulate` command (conversation trace, "
                   f"--model {MODEL} --gpu {GPU}; medians over {result['repeat']} runs)\n")
        out.append(table(["policy", "cold wall s", "cold CPU s", "warm wall s", "warm CPU s", "peak RSS MiB",
                          "others (cores)"],
                         [[r["policy"], f"{r['cold_wall']:.2f}", f"{r['cold_cpu']:.2f}", f"{r['warm_wall']:.2f}",
                           f"{r['warm_cpu']:.2f}", f"{r['cold_maxrss_mib']:.0f}",
                           f"{max(r['cold_others'], r['warm_others']):.2f}"] for r in result["cli"]]))
    conv = result.get("conversation", []) + result.get("dynamo", [])
    if conv:
        out.append(f"\n### simulate() on the conversation trace ({result['conversation_requests']:,} requests; "
                   f"trace loaded in {result['load_s']:.2f} s, kernel compiled; medians over {result['repeat']} runs)\n")
        out.append(table(["policy", "style", "C", "speedup", "time model", "wall s", "CPU s", "steps", "M steps/CPU-s",
                          "hit rate", "keeps up", "clean", "first call s"],
                         [[r["policy"], r["engine_style"], r["capacity"], r["speedup"], r["time_model"],
                           f"{r['wall']:.3f}", f"{r['cpu']:.3f}", f"{r['steps']:,}", f"{r['steps_per_cpu_s'] / 1e6:.2f}",
                           f"{r['hit_rate']:.4f}", "yes" if r["keeps_up"] else "no", f"{r['clean_runs']}/{r['runs']}",
                           "" if r["first_call_wall"] is None else f"{r['first_call_wall']:.2f}"] for r in conv]))
    if result.get("scale"):
        sc = result["scale"]
        out.append(f"\n### {sc[0]['requests']:,} requests ({sc[0]['block_accesses']:,} block accesses; roofline "
                   f"{MODEL} on 1 {GPU}; medians over {sc[0]['repeat']} runs, each configuration in a fresh process)\n")
        out.append(table(["policy", "C", "speedup", "req/s", "prompt tok/s", "wall s", "CPU s", "steps",
                          "M steps/CPU-s", "hit rate", "keeps up", "peak waiting", "peak RSS MiB", "RSS before MiB",
                          "others"],
                         [[r["policy"], r["capacity"], r["speedup"], f"{r['requests_per_s']:.2f}",
                           f"{r['prompt_tokens_per_s']:,.0f}", f"{r['wall']:.2f}", f"{r['cpu']:.2f}", f"{r['steps']:,}",
                           f"{r['steps_per_cpu_s'] / 1e6:.2f}", f"{r['hit_rate']:.4f}", "yes" if r["keeps_up"] else "no",
                           f"{r['peak_waiting']:,}", f"{r['peak_rss_mib']:.0f}", f"{r['rss_before_mib']:.0f}",
                           f"{r['others']:.2f}"] for r in sc]))
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--scale-worker":
        scale_worker(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (medians)")
    ap.add_argument("--scale-repeat", type=int, default=None, help="runs per 1M-request figure (default --repeat)")
    ap.add_argument("--scale-requests", type=int, default=1_000_000)
    ap.add_argument("--cli-policies", default="vllm,lru")
    ap.add_argument("--scale-policies", default=",".join(SCALE_POLICIES))
    ap.add_argument("--scale-capacities", default=",".join(map(str, SCALE_CAPACITIES)))
    ap.add_argument("--scale-speedups", default=",".join(map(str, SPEEDUPS)))
    ap.add_argument("--parts", default="cli,conversation,dynamo,scale")
    ap.add_argument("--quick", action="store_true", help="a fast subset")
    ap.add_argument("--json", default=None, help="write every record as JSON to FILE (- : stdout)")
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)  # re-execs with the snapshot on PYTHONPATH (children inherit it)
    parts = set(args.parts.split(","))
    import numpy

    import kvreplay

    print(f"kvreplay: {code} ({Path(kvreplay.__file__).parent}); numba {_code.package_version('numba')}, numpy {numpy.__version__}, "
          f"Python {platform.python_version()}", flush=True)
    result = {"code": code, "trace": args.trace, "repeat": args.repeat, "python": platform.python_version(),
              "numba": _code.package_version("numba"), "numpy": numpy.__version__, "machine": platform.machine(),
              "cpus": os.cpu_count()}
    cli_policies = args.cli_policies.split(",")
    policies, capacities, speedups = POLICIES, CAPACITIES, SPEEDUPS
    scale_policies, scale_requests = args.scale_policies.split(","), args.scale_requests
    scale_capacities = [int(c) for c in args.scale_capacities.split(",")]
    scale_speedups = [float(x) for x in args.scale_speedups.split(",")]
    repeat = args.repeat
    if args.quick:
        cli_policies, policies, capacities = cli_policies[:1], POLICIES[:2], CAPACITIES[:1]
        scale_policies, scale_capacities = scale_policies[:1], scale_capacities[:1]
        scale_requests = min(scale_requests, 100_000)
        repeat = min(repeat, 1)
        result["repeat"] = repeat
    scale_repeat = args.scale_repeat or repeat

    if "cli" in parts:
        print("1. kvreplay simulate, cold (empty numba cache) and warm:", flush=True)
        result["cli"] = cli_start(args.trace, cli_policies, repeat)
    if parts & {"conversation", "dynamo"}:
        from kvreplay import load_trace

        t0 = time.perf_counter()
        trace = load_trace(args.trace)
        result["load_s"] = time.perf_counter() - t0
        result["conversation_requests"] = len(trace)
        roof = dict(time_model="roofline", model=MODEL, gpu=GPU)
        if "conversation" in parts:
            print(f"2. simulate() on {Path(args.trace).name} ({len(trace):,} requests), roofline {MODEL} on {GPU}:",
                  flush=True)
            configs = [dict(policy=p, engine_style=s, capacity=c, speedup=x, **roof)
                       for p, s in policies for c in capacities for x in speedups]
            result["conversation"] = conversation(trace, configs, repeat, "conversation")
        if "dynamo" in parts:
            from dynamo_compare import make_profile

            with tempfile.TemporaryDirectory() as tmp:
                npz = make_profile(tmp)
                print("2b. the Dynamo comparison's configuration (vllm, Dynamo NPZ profile):", flush=True)
                configs = [dict(policy="vllm", engine_style="vllm", capacity=c, speedup=x, time_model=npz)
                           for c in sorted(capacities) for x in speedups]
                result["dynamo"] = conversation(trace, configs, repeat, "dynamo")
        del trace
    if "scale" in parts:
        print(f"3. {scale_requests:,} requests (the conversation trace repeated), roofline {MODEL} on 1 {GPU}:",
              flush=True)
        result["scale"] = scale(args.trace, scale_requests, scale_policies, scale_capacities, scale_speedups, scale_repeat)
    for part in ("conversation", "dynamo"):
        for r in result.get(part, []):
            r.pop("report", None)
    print()
    print(markdown(result))
    if args.json:
        text = json.dumps(result, indent=1) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
