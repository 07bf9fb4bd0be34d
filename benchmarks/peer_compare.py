#!/usr/bin/env python
"""Whole-process comparison with the peer simulator kvcache-simulator 0.1.3 (KVCache.AI).

1. Installs the peer into a throwaway venv, benchmarks/.cache/peer-venv (git-ignored).
2. Derives the peer's capacities for ``--model deepseek-v3 --block-size 512`` by
   calling its own calculator, and checks them against the 12 expected values.
3. Warms both tools (the peer compiles its C++ core on first use into
   $TMPDIR/kvcache-sim-cpp-uid<uid>-<sha>), then
   times both whole processes, interleaved, --runs times each (median reported):

     kvcache-simulator sweep --trace T --model deepseek-v3 --block-size 512 \\
         --policies fifo,lru --format json --no-progress
     kvreplay sweep T --capacities 29,...,61119 --policies fifo,lru --warmup-fraction 0.5 --json

   (stdout of both goes to /dev/null during timing). Each run records wall time, CPU
   time (user+sys of the process and its waited-for children, so the peer's C++
   core counts) and the other processes' load (benchmarks/_quiet.py); the ratio is
   given by both.
4. Compares hit tokens / prompt tokens at every capacity, fifo and lru, on the
   conversation trace and (--also-check) the synthetic one, and explains the lru
   difference: a Python port of the peer's trie LRU (from its C++ core) run on
   kvreplay's trace, per-request differences, and a flat LRU that refreshes each
   request tail first.
5. Splits each tool's process time into phases (imports, parsing, replay, ...).
--code: which kvreplay (default: a clean snapshot of HEAD; see benchmarks/_code.py).

Usage:  /tmp/venv/bin/python benchmarks/peer_compare.py [--code HEAD] [--runs 9] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

import _code
from _quiet import children_cpu_s, measure, summary, wait_quiet

HERE = Path(__file__).resolve().parent
VENV = HERE / ".cache" / "peer-venv"
PEER = "kvcache-simulator==0.1.3"
TRACE = Path("/work/shared/traces/mooncake/conversation_trace.jsonl")
SECOND_TRACE = Path("/work/shared/traces/mooncake/synthetic_trace.jsonl")
EXPECTED_CAPS = [29, 59, 119, 238, 477, 954, 1909, 3819, 7639, 15279, 30559, 61119]
POLICIES = ("fifo", "lru")
BLOCK_SIZE = 512
WARMUP = 0.5


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def peer_python() -> str:
    return str(VENV / "bin" / "python")


def ensure_peer() -> str:
    exe = VENV / "bin" / "kvcache-simulator"
    if not exe.exists():
        print(f"creating {VENV} and installing {PEER} ...", file=sys.stderr)
        sh([sys.executable, "-m", "venv", "--clear", str(VENV)])
        sh([peer_python(), "-m", "pip", "install", "--quiet", PEER])
    version = sh([peer_python(), "-c", "import importlib.metadata as m; print(m.version('kvcache-simulator'))"]).stdout.strip()
    if version != PEER.split("==")[1]:
        raise SystemExit(f"peer venv has kvcache-simulator {version}, expected {PEER}")
    return str(exe)


PEER_INFO = r"""
import json, sys
from kvcache_sim.calculator import load_models_data, models_by_id, calculate_cache_size
from kvcache_sim.simulator import DEFAULT_BUDGETS_GIB, cache_blocks_for_gib, estimate_tokens_for_trace
from kvcache_sim.trace import parse_trace_file
from kvcache_sim.cpp_backend import _build_path_for_source, _cpp_source_path
trace = parse_trace_file(sys.argv[1], block_size=int(sys.argv[2]))
data = load_models_data()
size = calculate_cache_size(models_by_id(data)["deepseek-v3"], tokens=estimate_tokens_for_trace(trace),
                            block_size=trace.block_size, models_data=data)
bpb = float(size.bytes_per_block or size.bytes_per_token * trace.block_size)
print(json.dumps({"bytes_per_token": size.bytes_per_token, "bytes_per_block": bpb, "precision": size.precision,
                  "budgets": [[g, cache_blocks_for_gib(g, bpb)] for g in DEFAULT_BUDGETS_GIB],
                  "unique_raw_blocks": trace.unique_raw_blocks, "requests": trace.request_count,
                  "binary": str(_build_path_for_source(_cpp_source_path()))}))
"""

_CLOCK = r"""
import json, os, resource, sys, time
def now():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
marks = [("start", now())]
def mark(name):
    marks.append((name, now()))
def done():
    print(json.dumps({name: [t[0] - p[0], t[1] - p[1]] for (_, p), (name, t) in zip(marks, marks[1:])}))
"""

PEER_PHASES = _CLOCK + r"""
from kvcache_sim.calculator import load_models_data
from kvcache_sim.formatting import render_json
from kvcache_sim.simulator import run_sweep
from kvcache_sim.trace import parse_trace_file
import kvcache_sim.simulator as sim
mark("imports")
data = load_models_data()
mark("models.yaml")
trace = parse_trace_file(sys.argv[1], block_size=512)
mark("parse trace (json.loads per line, interning)")
real = sim.run_cpp_sweep
def timed(*a, **k):
    mark("sweep: token totals, calculator (Python)")
    r = real(*a, **k)
    mark("sweep: C++ core (write binary trace, build trie, 24 replays)")
    return r
sim.run_cpp_sweep = timed
result = run_sweep(trace, model_id="deepseek-v3", policies=["fifo", "lru"], models_data=data)
mark("sweep: assemble points")
render_json(result)
mark("render JSON")
done()
"""

KV_PHASES = _CLOCK + r"""
import kvreplay.cli
from kvreplay.analysis.sweep import sweep
from kvreplay.cli.common import encode_json
from kvreplay.trace import load_trace
import kvreplay
mark("imports (numpy, msgspec, kvreplay and its compiled core)")
trace = load_trace(sys.argv[1])
mark("load trace (msgspec)")
caps = [int(c) for c in sys.argv[2].split(",")]
res = sweep(trace, caps, ["fifo", "lru"], warmup_fraction=0.5)
mark("sweep: 24 points + invariant checks")
encode_json(res.to_dict())
mark("encode JSON")
done()
"""


# ---- the peer's semantics, ported from its C++ core (kv-cache-lab-native-sim.cc) ------------------

def peer_inputs(trace):
    """(node_for_event, parent, tokens): trie nodes keyed by (parent node, hash id), and the peer's
    per-block token weights: min(block_size, L - i*block_size), at least 1 (0 < L assumed)."""
    edges: dict = {}
    parent = [0]
    node_for_event = np.empty(trace.num_accesses, dtype=np.int64)
    offs, blocks = trace.offsets.tolist(), trace.blocks.tolist()
    for r in range(len(trace)):
        p = 0
        for i in range(offs[r], offs[r + 1]):
            key = (p, blocks[i])
            node = edges.get(key)
            if node is None:
                node = edges[key] = len(parent)
                parent.append(p)
            node_for_event[i] = node
            p = node
    counts = np.diff(trace.offsets)
    index = np.arange(trace.num_accesses) - np.repeat(trace.offsets[:-1], counts)
    remaining = np.repeat(trace.input_length, counts) - index * BLOCK_SIZE
    tokens = np.where(remaining <= 0, 1, np.clip(remaining, 1, BLOCK_SIZE))
    return node_for_event, parent, tokens


def peer_trie_lru(trace, node_for_event, parent, tokens, capacity: int, warmup: int):
    """simulate_trie_policy(optimal=false): leaf-only LRU over the prefix trie. Returns per-request hit tokens."""
    nodes = node_for_event.tolist()
    tok = tokens.tolist()
    offs = trace.offsets.tolist()
    n_nodes = len(parent)
    present = bytearray(n_nodes)
    child = [0] * n_nodes
    version = [0] * n_nodes
    key = [0] * n_nodes
    mark = [0] * n_nodes
    heap: list = []
    present[0] = 1
    size = clock = 0
    mark_value = 1
    hits = np.zeros(len(trace), dtype=np.int64)

    def push_leaf(x):
        if x and present[x] and child[x] == 0:
            version[x] += 1
            heapq.heappush(heap, (key[x], -x, version[x], x))

    def evict_leaf():
        nonlocal size
        skipped = []
        while heap:
            item = heapq.heappop(heap)
            k, _, v, x = item
            if not present[x] or child[x] or version[x] != v or key[x] != k:
                continue
            if mark[x] == mark_value:
                skipped.append(item)
                continue
            present[x] = 0
            size -= 1
            p = parent[x]
            child[p] -= 1
            if p > 0 and present[p] and child[p] == 0:
                push_leaf(p)
            for it in skipped:
                heapq.heappush(heap, it)
            return True
        for it in skipped:
            heapq.heappush(heap, it)
        return False

    for r in range(len(trace)):
        s, e = offs[r], offs[r + 1]
        alive, h = True, 0
        for i in range(s, e):
            x = nodes[i]
            if present[x]:
                if alive:
                    h += tok[i]
                    clock += 1
                    key[x] = clock
                    push_leaf(x)
            else:
                alive = False
        hits[r] = h
        mark_value += 1
        mark[0] = mark_value
        for i in range(s, e):
            if present[nodes[i]]:
                mark[nodes[i]] = mark_value
        for i in range(s, e):
            x = nodes[i]
            if present[x]:
                continue
            if size >= capacity and not evict_leaf():
                break
            if size < capacity and present[parent[x]]:
                present[x] = 1
                size += 1
                child[parent[x]] += 1
                clock += 1
                key[x] = clock
                push_leaf(x)
            else:
                break
    return hits


def flat_lru(trace, capacity: int, order: str):
    """Flat block LRU (kvreplay's `lru` when order == "head-first"); "tail-first" touches a request's
    blocks last to first, so its head ends up most recent. Returns per-request hit blocks."""
    offs, blocks = trace.offsets.tolist(), trace.blocks.tolist()
    cache: OrderedDict = OrderedDict()
    hits = np.zeros(len(trace), dtype=np.int64)
    for r in range(len(trace)):
        req = blocks[offs[r]:offs[r + 1]]
        k = 0
        for b in req:
            if b not in cache:
                break
            k += 1
        hits[r] = k
        for b in (req if order == "head-first" else reversed(req)):
            if b in cache:
                cache.move_to_end(b)
            else:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[b] = None
    return hits


# ---- timing ----------------------------------------------------------------------------------------

def time_interleaved(cmds: dict, runs: int) -> dict:
    """Whole-process times of each command, interleaved (A B, B A, A B, ...), stdout to /dev/null.
    Per run: wall time, CPU time (user+sys of the process and its waited-for children: the
    peer's C++ core included) and others' load; see _quiet.py for the waiting and retries."""
    recs = {name: [] for name in cmds}
    names = list(cmds)
    wait_quiet(60)
    for i in range(runs):
        for name in (names if i % 2 == 0 else names[::-1]):

            def once(cmd=cmds[name]):
                c0, t0 = children_cpu_s(), time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                return time.perf_counter() - t0, children_cpu_s() - c0

            recs[name] += measure(once, 1, quiet_wait=10)
    return {name: {"records": r, **summary(r)} for name, r in recs.items()}


def table(rows, header) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="timed whole-process runs per tool (median reported; >= 7)")
    ap.add_argument("--phase-runs", type=int, default=5, help="runs of the per-phase breakdown (median)")
    ap.add_argument("--json", help="also write raw results to this file")
    _code.add_argument(ap)
    ap.add_argument("--no-timing", action="store_true", help="skip the timings (hit-rate comparison only)")
    ap.add_argument("--also-check", nargs="*", default=[str(SECOND_TRACE)], metavar="TRACE",
                    help="more Mooncake traces for the hit-rate comparison only (default: the synthetic trace)")
    ap.add_argument("--extra-policies", default="auto",
                    help="comma-separated kvreplay policies to compare with the peer's lru too; "
                         "auto (default): lru-tail if kvreplay has it")
    args = ap.parse_args()
    code = _code.activate(args.code)

    kvreplay_exe = str(Path(sys.executable).with_name("kvreplay"))
    cpu = next((l.split(":", 1)[1].strip() for l in sh(["lscpu"]).stdout.splitlines() if l.startswith("Model name")), "?")
    git = subprocess.run(["git", "-C", str(HERE.parent), "describe", "--always", "--dirty=+uncommitted-changes"],
                         capture_output=True, text=True).stdout.strip()
    env = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "repo_head": git,
           "cpu": cpu, "cores": os.cpu_count(),
           "python": platform.python_version(), "numpy": np.__version__, "numba": _code.package_version("numba")}
    print(f"# kvreplay vs {PEER}, {env['date']}")
    env["code"] = code
    env["kvreplay_imported_from"] = _code.check_imported(code)
    print(f"{cpu}, {env['cores']} cores; Python {env['python']}, numpy {env['numpy']}, numba {env['numba']}")
    print(f"kvreplay measured: {code}; imported from {env['kvreplay_imported_from']}\n")

    peer_exe = ensure_peer()
    info = json.loads(sh([peer_python(), "-c", PEER_INFO, str(TRACE), str(BLOCK_SIZE)]).stdout)
    print("## The peer's capacities\n")
    print(f"deepseek-v3 ({info['precision']}): {info['bytes_per_token']:,.0f} B/token x {BLOCK_SIZE} = "
          f"{info['bytes_per_block']:,.0f} B/block; capacity = floor(GiB * 2^30 / bytes_per_block) for its default budgets:")
    print(", ".join(f"{g:g} GiB -> {c:,}" for g, c in info["budgets"]))

    # Warm-up: the peer's first run compiles its C++ core; both then run warm.
    binary = Path(info["binary"])
    existed = binary.exists()
    peer_cmd = [peer_exe, "sweep", "--trace", str(TRACE), "--model", "deepseek-v3", "--block-size", str(BLOCK_SIZE),
                "--policies", ",".join(POLICIES), "--format", "json", "--no-progress"]
    t0 = time.perf_counter()
    peer_out = json.loads(sh(peer_cmd).stdout)
    first_peer = time.perf_counter() - t0
    caps = [p["cacheBlocks"] for p in peer_out["points"]]
    print(f"\nThe peer reports {len(caps)} points: {caps}")
    print(f"(points stop at the first budget that is not filled during the warm-up half, or that exceeds the "
          f"{peer_out['metadata']['uniqueBlocks']:,} unique blocks)")
    if caps != EXPECTED_CAPS:
        raise SystemExit(f"unexpected peer capacities {caps}")
    kv_cmd = [kvreplay_exe, "sweep", str(TRACE), "--capacities", ",".join(map(str, caps)), "--policies", ",".join(POLICIES),
              "--warmup-fraction", str(WARMUP), "--json"]
    kv_out = json.loads(sh(kv_cmd).stdout)
    for _ in range(2):
        sh(peer_cmd)
        sh(kv_cmd)
    if not binary.exists():
        raise SystemExit(f"the peer's C++ binary {binary} is missing after a run")
    print(f"\nWarm-up: peer C++ core {binary} {'already built' if existed else f'built by the first run ({first_peer:.1f} s incl. compile)'}; "
          f"both commands run 3x untimed before timing.")

    timing, med, ratio, kv_ph, peer_ph = {}, {}, None, {}, {}
    if not args.no_timing:
        timing, med, ratio, kv_ph, peer_ph = run_timings(args, cmds := {"peer": peer_cmd, "kvreplay": kv_cmd}, caps)
    if args.extra_policies == "auto":
        from kvreplay.policies.registry import POLICIES as KNOWN

        extra = [p for p in ("lru-tail",) if p in KNOWN]
    else:
        extra = [p for p in args.extra_policies.split(",") if p]
    report_hit_rates(TRACE, caps, peer_out, kv_out, extra)
    others = {}
    for path in map(Path, args.also_check):
        p_out = json.loads(sh([peer_exe, "sweep", "--trace", str(path), "--model", "deepseek-v3", "--block-size", str(BLOCK_SIZE),
                               "--policies", ",".join(POLICIES), "--format", "json", "--no-progress"]).stdout)
        p_caps = [p["cacheBlocks"] for p in p_out["points"]]
        k_out = json.loads(sh([kvreplay_exe, "sweep", str(path), "--capacities", ",".join(map(str, p_caps)), "--policies",
                               ",".join(POLICIES), "--warmup-fraction", str(WARMUP), "--json"]).stdout)
        report_hit_rates(path, p_caps, p_out, k_out, extra)
        others[str(path)] = {"peer": p_out, "kvreplay": k_out}
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": env, "peer_info": info, "timing": timing, "median_s": med,
                                               "ratio": ratio, "kvreplay_phases": kv_ph, "peer_phases": peer_ph,
                                               "peer": peer_out, "kvreplay": kv_out, "also_checked": others}, indent=1))
    return 0


def run_timings(args, cmds, caps):
    timing = time_interleaved(cmds, args.runs)
    cpu = {k: v["cpu_median"] for k, v in timing.items()}
    wall = {k: v["wall_median"] for k, v in timing.items()}
    print(f"\n## Whole-process time, {args.runs} runs each (interleaved; median)\n")
    for name, cmd in cmds.items():
        print(f"- {name}: `{' '.join(cmd)}`")
    rows = []
    for name in cmds:
        t = timing[name]
        rows.append([name, f"**{t['cpu_median']:.3f}**", f"{t['cpu_min']:.3f}-{t['cpu_max']:.3f}", f"{t['wall_median']:.3f}",
                     f"{t['wall_median_clean']:.3f}" if t["wall_median_clean"] else "-", f"{t['clean_runs']}/{t['runs']}",
                     f"{t['others_median']:.2f}"])
    print()
    print(table(rows, ["tool", "CPU s (user+sys, children incl.)", "min-max", "wall s (all runs)", "wall s (clean runs)",
                       "clean runs", "others' load (cores)"]))
    ratio = {"cpu": cpu["kvreplay"] / cpu["peer"], "wall": wall["kvreplay"] / wall["peer"]}
    if timing["kvreplay"]["wall_median_clean"] and timing["peer"]["wall_median_clean"]:
        ratio["wall_clean"] = timing["kvreplay"]["wall_median_clean"] / timing["peer"]["wall_median_clean"]
    print(f"\n**kvreplay / peer = {ratio['cpu']:.2f}** by CPU time; {ratio['wall']:.2f} by wall time (all runs)"
          + (f", {ratio['wall_clean']:.2f} (clean runs)" if "wall_clean" in ratio else "") + " (target <= 1.0, aim 0.5)")

    # ---- phases ----
    def phases(cmd):
        runs = []

        def once():
            r = json.loads(sh(cmd).stdout)
            runs.append(r)
            return sum(v[0] for v in r.values()), sum(v[1] for v in r.values())

        measure(once, args.phase_runs, quiet_wait=10)
        return {k: [statistics.median(r[k][0] for r in runs), statistics.median(r[k][1] for r in runs)] for k in runs[0]}

    def bare(py):
        def once():
            c0, t0 = children_cpu_s(), time.perf_counter()
            subprocess.run([py, "-c", "pass"], check=True)
            return time.perf_counter() - t0, children_cpu_s() - c0
        s = summary(measure(once, args.phase_runs, quiet_wait=10))
        return [s["wall_median"], s["cpu_median"]]

    kv_ph = {"interpreter start (`python -c pass`)": bare(sys.executable)}
    kv_ph.update(phases([sys.executable, "-c", KV_PHASES, str(TRACE), ",".join(map(str, caps))]))
    peer_ph = {"interpreter start (`python -c pass`)": bare(peer_python())}
    peer_ph.update(phases([peer_python(), "-c", PEER_PHASES, str(TRACE)]))
    print(f"\n## Where the time goes (in-process phases, median of {args.phase_runs} runs)\n")
    rows = [["kvreplay", k, f"{v[1]:.3f}", f"{v[0]:.3f}"] for k, v in kv_ph.items()]
    rows += [["peer", k, f"{v[1]:.3f}", f"{v[0]:.3f}"] for k, v in peer_ph.items()]
    print(table(rows, ["tool", "phase", "CPU s", "wall s"]))
    return timing, {"cpu": cpu, "wall": wall}, ratio, kv_ph, peer_ph


def report_hit_rates(path, caps, peer_out, kv_out, extra_policies=()):
    import kvreplay

    trace = kvreplay.load_trace(path)
    n = len(trace)
    warm = int(np.floor(WARMUP * n))
    counts = np.diff(trace.offsets)
    ceil_blocks = -(-trace.input_length // BLOCK_SIZE)
    node_for_event, parent, tokens = peer_inputs(trace)
    print(f"\n## Hit rates on {path.name}: same definitions?\n")
    print(f"Window: both skip the first floor(0.5 x {n}) = {warm} requests (peer warmupRequests = "
          f"{peer_out['metadata']['warmupRequests']}). Preconditions for identical accounting on this trace:")
    print(f"- trie nodes (parent, hash id) = {len(parent) - 1:,} = unique hash ids {trace.num_blocks:,} "
          f"(peer: uniqueBlocks {peer_out['metadata']['uniqueBlocks']:,}, rawUniqueBlocks {peer_out['metadata']['rawUniqueBlocks']:,})")
    print(f"- requests with len(hash_ids) != ceil(input_length/512): {int((counts != ceil_blocks).sum())}; "
          f"empty hash_ids: {int((counts == 0).sum())}; input_length <= 0: {int((trace.input_length <= 0).sum())}")
    print(f"- sum of the peer's per-block token weights over the window = {int(tokens[trace.offsets[warm]:].sum()):,}; "
          f"kvreplay prompt tokens = {int(trace.input_length[warm:].sum()):,}; peer totalTokens = "
          f"{peer_out['metadata']['totalMeasuredTokens']:,}")

    kv_res = {(r["policy"], r["cache_capacity_blocks"]): r for r in kv_out["results"]}
    rows, mismatches, port_ok = [], 0, True
    ported = {}
    for cap, point in zip(caps, peer_out["points"]):
        for policy in POLICIES:
            p = point["results"][policy]
            k = kv_res[(policy, cap)]
            same = p["hitTokens"] == k["total_hit_tokens"] and p["totalTokens"] == k["total_prompt_tokens"]
            mismatches += not same
            extra = ""
            if policy == "lru":
                hits = peer_trie_lru(trace, node_for_event, parent, tokens, cap, warm)
                ported[cap] = hits
                port = int(hits[warm:].sum())
                port_ok &= port == p["hitTokens"]
                extra = f"{port:,}" + (" =" if port == p["hitTokens"] else " **differs**")
            rows.append([policy, f"{cap:,}", f"{p['hitTokens']:,}", f"{k['total_hit_tokens']:,}", f"{p['totalTokens']:,}",
                         f"{k['total_prompt_tokens']:,}", f"{100 * p['hitRate']:.4f}%", f"{100 * k['hit_rate']:.4f}%",
                         "yes" if same else f"**no** ({k['total_hit_tokens'] - p['hitTokens']:+,})", extra])
    print()
    print(table(rows, ["policy", "capacity", "peer hit tokens", "kvreplay hit tokens", "peer total", "kvreplay total",
                       "peer hit rate", "kvreplay hit rate", "equal", "peer trie-LRU ported here"]))
    print(f"\n{mismatches} of {2 * len(caps)} cells differ; the Python port of the peer's trie LRU "
          f"{'reproduces the peer exactly at every capacity' if port_ok else 'does NOT reproduce the peer'}.")

    # Per-request view of the lru difference, and a flat-LRU variant that refreshes tail first.
    rows = []
    lengths = counts[warm:]
    for cap in caps:
        kv_blocks = kvreplay.replay(trace, "lru", cap, warmup_fraction=WARMUP).hit_blocks[warm:]
        peer_tok = ported[cap][warm:]
        kv_tok = np.minimum(kv_blocks * BLOCK_SIZE, trace.input_length[warm:])
        more, fewer = peer_tok > kv_tok, peer_tok < kv_tok
        tail = flat_lru(trace, cap, "tail-first")[warm:]
        tail_tok = int(np.minimum(tail * BLOCK_SIZE, trace.input_length[warm:]).sum())
        extra_cells = [f"{kvreplay.replay(trace, e, cap, warmup_fraction=WARMUP).total_hit_tokens - int(peer_tok.sum()):+,}"
                       for e in extra_policies]
        rows.append([f"{cap:,}", f"{int(more.sum()):,}", f"{int((peer_tok - kv_tok)[more].sum()):+,}",
                     f"{int(fewer.sum()):,}", f"{int((peer_tok - kv_tok)[fewer].sum()):+,}",
                     f"{int((lengths > cap).sum()):,}", f"{int(peer_tok.sum()) - int(kv_tok.sum()):+,}",
                     f"{tail_tok - int(peer_tok.sum()):+,}"] + extra_cells)
    print(f"\n### lru: per request, measured window ({n - warm} requests)\n")
    print(table(rows, ["capacity", "requests peer > kvreplay", "tokens", "requests peer < kvreplay", "tokens",
                       "requests longer than capacity", "peer - kvreplay (hit tokens)",
                       "flat LRU touching tail first - peer"] + [f"kvreplay {e} - peer" for e in extra_policies]))


def _wall(cmd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
