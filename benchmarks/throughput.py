#!/usr/bin/env python
"""Replay throughput (block accesses per second) and peak memory of kvreplay.

What is measured
----------------
* Compiled engine, one thread: ``kvreplay.engine.driver.replay_compiled`` on a
  fresh policy state (``get_policy(p).make_state(capacity, trace)``), trace already
  in memory, numba cache warm (one untimed call per cell first). The ``kernel``
  columns time that call alone; ``replay()`` times ``kvreplay.replay(trace, p,
  capacity, check=False)`` (state allocation, per-request result arrays, end-of-run
  statistics and the Report included).
* Headline: block accesses per CPU-second of the replaying thread
  (``time.thread_time``), median of --runs runs (--small-runs on the Mooncake
  traces). On an idle machine this equals accesses per wall-second; the wall-time
  median, the number of clean runs and the other processes' load are printed too
  (benchmarks/_quiet.py: the machine is shared, see there).
* Traces: the two shared Mooncake traces and a generated trace of 60M block
  accesses (benchmarks/bigtrace.py: sessions resending a growing prefix, Zipf
  popular system prompts; deterministic seed), built in memory as a kvreplay.Trace.
* Capacities: small / medium / large = 1% / 10% / 50% of the trace's unique blocks.
* Reference engine (plain Python) on the conversation trace, for contrast.
* Peak memory (VmHWM) of fresh child processes that load the big trace and replay
  it once, against the trace's flat-array bytes (``trace.nbytes()``): from .npy
  files (np.load, no mmap) with ``kvreplay.replay`` (check off and on), and the
  ``kvreplay run`` command line on the same trace written as Mooncake JSONL (skip
  with --no-jsonl).
* --code: which kvreplay (default: a clean snapshot of HEAD; see benchmarks/_code.py).

Usage:  /tmp/venv/bin/python benchmarks/throughput.py [--code HEAD] [--runs 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import _code
from _quiet import measure, summary, wait_quiet

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
SHARED = Path("/work/shared/traces/mooncake")
POLICIES = ("s3fifo", "lru", "fifo")
CAP_FRACTIONS = (("small", 0.01), ("medium", 0.10), ("large", 0.50))
BIG_TARGET = 60_000_000
BIG_SEED = 20240601


def machine() -> dict:
    model = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:
        pass
    git = subprocess.run(["git", "-C", str(HERE.parent), "describe", "--always", "--dirty=+uncommitted-changes"],
                         capture_output=True, text=True).stdout.strip()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "repo_head": git,
        "cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "numba": _code.package_version("numba"), "platform": platform.platform(),
    }


def capacities(num_blocks: int) -> list[tuple[str, int]]:
    return [(label, max(16, int(round(num_blocks * f)))) for label, f in CAP_FRACTIONS]


def bench_compiled(trace, policy: str, capacity: int, runs: int) -> dict:
    import kvreplay
    from kvreplay.engine import driver
    from kvreplay.policies.registry import get_policy

    spec = get_policy(policy)
    params = spec.resolve({})
    block_size = trace.block_size or 512
    n = len(trace)
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)

    # make_state took (capacity, num_blocks) before commit 64c7520 and (capacity, trace) since.
    second = list(inspect.signature(spec.make_state).parameters)[1]
    sized_by = trace if second == "trace" else trace.num_blocks

    def kernel():
        state = spec.make_state(capacity, sized_by, **params)
        t0, c0 = time.perf_counter(), time.thread_time()
        _code.replay_kernel(spec, state, trace, block_size, hit_blocks, hit_tokens)
        return time.perf_counter() - t0, time.thread_time() - c0

    def api():
        t0, c0 = time.perf_counter(), time.thread_time()
        kvreplay.replay(trace, policy, capacity, check=False)
        return time.perf_counter() - t0, time.thread_time() - c0

    kernel()  # untimed: loads (or compiles) the specialisation for this state type
    k = measure(kernel, runs)
    api()
    a = measure(api, runs)
    hit_rate = int(hit_tokens.sum()) / max(1, trace.total_prompt_tokens)
    acc = trace.num_accesses
    ks, as_ = summary(k), summary(a)
    return {
        "policy": policy, "capacity": capacity, "hit_rate": hit_rate, "kernel_runs": k, "api_runs": a,
        "kernel": ks, "api": as_,
        "kernel_maps_cpu": acc / ks["cpu_median"] / 1e6,
        "kernel_maps_cpu_min": acc / ks["cpu_max"] / 1e6, "kernel_maps_cpu_max": acc / ks["cpu_min"] / 1e6,
        "kernel_maps_wall": acc / ks["wall_median"] / 1e6,
        "kernel_maps_wall_clean": acc / ks["wall_median_clean"] / 1e6 if ks["wall_median_clean"] else None,
        "api_maps_cpu": acc / as_["cpu_median"] / 1e6,
    }


def bench_reference(trace, policy: str, capacity: int, runs: int) -> dict:
    from kvreplay.engine import driver
    from kvreplay.policies.registry import get_policy

    spec = get_policy(policy)
    params = spec.resolve({})
    n = len(trace)
    hb, ht = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)

    second = list(inspect.signature(spec.reference).parameters)[1]
    sized_by = trace if second == "trace" else trace.num_blocks

    def once():
        cache = spec.reference(capacity, sized_by, **params)
        t0, c0 = time.perf_counter(), time.thread_time()
        driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, trace.block_size or 512, cache, hb, ht)
        return time.perf_counter() - t0, time.thread_time() - c0

    rec = measure(once, runs)
    s = summary(rec)
    return {"policy": policy, "capacity": capacity, "runs": rec, "summary": s,
            "maps_cpu": trace.num_accesses / s["cpu_median"] / 1e6,
            "maps_wall": trace.num_accesses / s["wall_median"] / 1e6,
            "hit_rate": int(ht.sum()) / max(1, trace.total_prompt_tokens)}


# ---- peak memory, in fresh processes ---------------------------------------------------------------

ARRAYS = ("offsets", "blocks", "input_length", "output_length", "timestamp")


def save_npy(trace, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ARRAYS:
        np.save(directory / f"{name}.npy", getattr(trace, name))
    (directory / "meta.json").write_text(json.dumps({"num_blocks": trace.num_blocks, "block_size": trace.block_size}))


def write_jsonl(trace, path: Path) -> None:
    """The trace as Mooncake JSONL (integer hash_ids = the dense ids)."""
    tmp = path.with_suffix(".tmp")
    offsets, blocks = trace.offsets.tolist(), trace.blocks
    with open(tmp, "w") as f:
        for i in range(len(trace)):
            ids = ", ".join(map(str, blocks[offsets[i]:offsets[i + 1]].tolist()))
            f.write(f'{{"timestamp": {int(trace.timestamp[i])}, "input_length": {int(trace.input_length[i])}, '
                    f'"output_length": {int(trace.output_length[i])}, "hash_ids": [{ids}]}}\n')
    tmp.replace(path)


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _hwm_kib() -> int:
    """Peak RSS of this process image (VmHWM). Not ru_maxrss: after a vfork+exec from a big
    parent, Linux folds the parent's high-water mark into the child's ru_maxrss."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_child(directory: str, policy: str, capacity: int, check: bool) -> None:
    """Runs in a fresh process: import, load the .npy trace, replay once; print RSS figures as JSON."""
    import kvreplay

    after_import = _rss_kib()
    # Load this policy's compiled specialisation on a one-request trace first, so that
    # numba/LLVM's own memory is in the baseline and not charged to the big trace.
    kvreplay.replay(kvreplay.Trace.from_requests([([1, 2, 3], 1500)]), policy, 16)
    after_warm = _rss_kib()
    warm_peak = _hwm_kib()
    reset = _reset_hwm()
    d = Path(directory)
    meta = json.loads((d / "meta.json").read_text())
    arrays = {name: np.load(d / f"{name}.npy") for name in ARRAYS}
    trace = kvreplay.Trace(**arrays, num_blocks=meta["num_blocks"], block_size=meta["block_size"])
    del arrays
    after_load = _rss_kib()
    t0 = time.perf_counter()
    report = kvreplay.replay(trace, policy, capacity, check=check)
    seconds = time.perf_counter() - t0
    print(json.dumps({
        "policy": policy, "capacity": capacity, "check": check, "hit_rate": report.hit_rate,
        "rss_after_import_kib": after_import, "rss_after_warmup_kib": after_warm, "rss_after_load_kib": after_load,
        "peak_rss_kib": max(warm_peak, _hwm_kib()), "peak_after_warmup_kib": _hwm_kib() if reset else None,
        "warmup_peak_kib": warm_peak,
        "trace_nbytes": trace.nbytes(), "replay_s": seconds,
    }))


def measure_rss(directory: Path, policy: str, capacity: int, check: bool) -> dict:
    cmd = [sys.executable, __file__, "--rss-child", str(directory), policy, str(capacity)] + (["--check"] if check else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cli_child(jsonl: str, policy: str, capacity: int) -> None:
    """Runs in a fresh process: the `kvreplay run` command line, in-process, then its peak RSS."""
    from kvreplay.cli import main as kvreplay_main

    argv = ["run", jsonl, "--policy", policy, "--capacity", str(capacity), "--block-size", "512"]
    stdout = sys.stdout
    sys.stdout = open(os.devnull, "w")
    t0 = time.perf_counter()
    code = kvreplay_main(argv)
    wall = time.perf_counter() - t0
    sys.stdout = stdout
    print(json.dumps({"argv": argv, "exit": code, "peak_rss_kib": _hwm_kib(), "wall_s": wall}))


def measure_cli_rss(jsonl: Path, policy: str, capacity: int, nbytes: int) -> dict:
    wait_quiet()
    cmd = [sys.executable, __file__, "--cli-child", str(jsonl), policy, str(capacity)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r.update(trace_nbytes=nbytes, command="kvreplay " + " ".join(r["argv"]))
    return r


# ---- output ----------------------------------------------------------------------------------------

def table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="timed runs per cell on the big trace (median reported)")
    ap.add_argument("--small-runs", type=int, default=21, help="timed runs per cell on the Mooncake traces")
    ap.add_argument("--ref-runs", type=int, default=5, help="timed runs per policy of the reference engine")
    ap.add_argument("--target", type=int, default=BIG_TARGET, help="block accesses of the generated trace")
    ap.add_argument("--no-jsonl", action="store_true", help="skip the JSONL + kvreplay-run memory measurement")
    ap.add_argument("--json", help="also write every raw timing to this file")
    ap.add_argument("--only", choices=("all", "throughput", "memory"), default="all", help="run only one part")
    _code.add_argument(ap)
    ap.add_argument("--rss-child", nargs=3, metavar=("DIR", "POLICY", "CAPACITY"), help=argparse.SUPPRESS)
    ap.add_argument("--cli-child", nargs=3, metavar=("JSONL", "POLICY", "CAPACITY"), help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    code = _code.activate(args.code)
    if args.rss_child:
        rss_child(args.rss_child[0], args.rss_child[1], int(args.rss_child[2]), args.check)
        return 0
    if args.cli_child:
        cli_child(args.cli_child[0], args.cli_child[1], int(args.cli_child[2]))
        return 0

    import kvreplay
    from bigtrace import generate

    env = machine()
    env["code"] = code
    env["kvreplay_imported_from"] = _code.check_imported(code)
    print(f"# kvreplay throughput, {env['date']}")
    print(f"{env['cpu']}, {env['cores']} cores; Python {env['python']}, numpy {env['numpy']}, numba {env['numba']}")
    print(f"kvreplay measured: {code}; imported from {env['kvreplay_imported_from']}\n")
    results: dict = {"machine": env, "compiled": [], "reference": [], "memory": []}

    traces = []
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        traces.append((name, kvreplay.load_trace(SHARED / name), args.small_runs))
    t0 = time.perf_counter()
    big = generate(args.target, BIG_SEED)
    gen_s = time.perf_counter() - t0
    traces.append((f"generated ({args.target // 1_000_000}M, seed {BIG_SEED})", big, args.runs))

    rows_t = []
    for name, tr, _ in traces:
        rows_t.append([name, f"{len(tr):,}", f"{tr.num_accesses:,}", f"{tr.num_blocks:,}", f"{tr.nbytes() / 2**20:.1f}"])
    print(table(rows_t, ["trace", "requests", "block accesses", "unique blocks", "flat arrays MiB"]))
    print(f"\n(generated trace built in {gen_s:.1f} s)\n")

    rows = []
    for name, tr, runs in traces if args.only in ("all", "throughput") else []:
        for label, cap in capacities(tr.num_blocks):
            for policy in POLICIES:
                r = bench_compiled(tr, policy, cap, runs)
                r.update(trace=name, size=label)
                results["compiled"].append(r)
                ks = r["kernel"]
                rows.append([name, policy, f"{label} {cap:,}", f"{100 * r['hit_rate']:.2f}%",
                             f"**{r['kernel_maps_cpu']:.1f}**", f"{r['kernel_maps_cpu_min']:.1f}-{r['kernel_maps_cpu_max']:.1f}",
                             f"{r['kernel_maps_wall']:.1f}", f"{r['api_maps_cpu']:.1f}", f"{ks['clean_runs']}/{ks['runs']}",
                             f"{ks['others_median']:.2f}"])
                print(f"  {name} {policy} {cap}: {r['kernel_maps_cpu']:.1f} M/s (cpu), {r['kernel_maps_wall']:.1f} (wall)", file=sys.stderr)
    if args.only in ("all", "throughput"):
        print("## Compiled engine: block accesses per second (millions), one thread\n")
        print(table(rows, ["trace", "policy", "capacity (blocks)", "hit rate (whole trace)", "kernel, per CPU-second (median)",
                           "min-max", "kernel, per wall-second (median)", "replay() per CPU-second", "clean runs",
                           "others' load (cores, median)"]))
        reference_table(args, traces, results)
    if args.only in ("all", "memory"):
        memory_tables(args, big, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def reference_table(args, traces, results) -> None:
    conv = traces[0][1]
    cap = capacities(conv.num_blocks)[1][1]
    rows = []
    for policy in POLICIES:
        r = bench_reference(conv, policy, cap, args.ref_runs)
        c = next(x for x in results["compiled"] if x["trace"] == traces[0][0] and x["policy"] == policy and x["capacity"] == cap)
        if abs(r["hit_rate"] - c["hit_rate"]) > 1e-12:
            raise SystemExit(f"reference and compiled disagree for {policy}: {r['hit_rate']} vs {c['hit_rate']}")
        results["reference"].append(r)
        rows.append([policy, f"{cap:,}", f"{r['maps_cpu']:.2f}", f"{c['kernel_maps_cpu']:.1f}",
                     f"{c['kernel_maps_cpu'] / r['maps_cpu']:.0f}x", f"{r['summary']['clean_runs']}/{r['summary']['runs']}"])
    print(f"\n## Reference engine (plain Python) vs compiled, conversation trace, per CPU-second\n")
    print(table(rows, ["policy", "capacity", "reference M/s (median)", "compiled M/s (median)", "speed-up", "clean runs"]))



def memory_tables(args, big, results) -> None:
    """Peak memory: fresh processes, big trace, large capacity."""
    npy_dir = CACHE / "bigtrace-npy"
    save_npy(big, npy_dir)
    nbytes = big.nbytes()
    large = capacities(big.num_blocks)[2][1]
    rows = []
    mem_cli = None
    if not args.no_jsonl:
        jsonl = CACHE / f"bigtrace-{args.target}-{BIG_SEED}.jsonl"
        if not jsonl.exists():
            t0 = time.perf_counter()
            write_jsonl(big, jsonl)
            print(f"\n(wrote {jsonl.name}, {jsonl.stat().st_size / 2**20:.0f} MiB, in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        mem_cli = measure_cli_rss(jsonl, "s3fifo", large, nbytes)
        mem_cli["jsonl_bytes"] = jsonl.stat().st_size
        results["memory"].append(mem_cli)
    for policy in POLICIES:
        for check in (False, True):
            m = measure_rss(npy_dir, policy, large, check)
            results["memory"].append(m)
            peak = m["peak_rss_kib"] * 1024
            base = m["rss_after_warmup_kib"] * 1024
            rows.append([f"load .npy + replay({policy}, {large:,}, check={check})", f"{peak / 2**20:.0f}",
                         f"{base / 2**20:.0f}", f"{(peak - base) / 2**20:.0f}", f"{nbytes / 2**20:.0f}",
                         f"{peak / nbytes:.2f}x", f"{(peak - base) / nbytes:.2f}x"])
    if mem_cli:
        peak = mem_cli["peak_rss_kib"] * 1024
        base = next(m for m in results["memory"] if m.get("policy") == "s3fifo" and "rss_after_warmup_kib" in m)["rss_after_warmup_kib"] * 1024
        rows.append([f"`kvreplay run` on the JSONL ({mem_cli['jsonl_bytes'] / 2**20:.0f} MiB), s3fifo {large:,}",
                     f"{peak / 2**20:.0f}", f"({base / 2**20:.0f})", f"{(peak - base) / 2**20:.0f}", f"{nbytes / 2**20:.0f}",
                     f"{peak / nbytes:.2f}x", f"{(peak - base) / nbytes:.2f}x"])
    print("\n## Peak memory, generated trace (one fresh process per row)\n")
    print(table(rows, ["process", "peak RSS MiB", "baseline MiB (imports + numba loaded)", "peak - baseline MiB",
                       "trace.nbytes() MiB", "peak / nbytes", "(peak - baseline) / nbytes"]))
    print("\nBaseline: RSS after importing kvreplay and replaying a one-request trace (numba/LLVM loaded); "
          "the `kvreplay run` row borrows the s3fifo baseline.")
    if mem_cli:
        print(f"\n`{mem_cli['command']}`: {mem_cli['wall_s']:.1f} s (load + replay + checks, in-process)")


if __name__ == "__main__":
    sys.exit(main())
