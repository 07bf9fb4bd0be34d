"""The simulator's cost against the size of a big agentic trace: is CPU time per output token flat?

The workload is docs/synth.md's coding agents (64-token blocks, long agent loops resending their
whole history over a big system prompt, sessions in bursts, ending when the context is full):

    kvreplay synth -o agents.jsonl --requests 48000 --mix agent=1 --agent-steps 80 --agent-tool-tokens 1000 \\
        --agent-reply-tokens 320 --prefixes 4 --prefix-scale 15 --arrival-rate 0.1 --burst 4 \\
        --max-context 131072 --block-size 64 --seed 1

generated once by this tree's kvreplay and kept in benchmarks/.cache/ (the code measured need not
have these knobs). Each row simulates the trace's first N requests (N <= 48,000): vLLM style, roofline
Llama-3.1-8B on one H100 per instance (its pool is what the GPU holds after the weights),
kv-aware router, band_runs=False unless --bands, compare_sequential=False, at the trace's own
arrival times (1 instance is overloaded, 16 lightly loaded). Every row runs in its own process
(a warm-up run on the first 300 requests, then --runs timed runs): median CPU s (the process's
user + sys) and wall s, CPU us per output token, and the first 16 hex digits of the sha256 of
the whole report JSON (per-request fields included), so two codes' rows can be checked equal.

    python benchmarks/scaling.py [--code HEAD|REF|installed] [--sizes 3000,6000,12000,24000,48000]
                                 [--instances 1,16] [--runs 3] [--bands] [--json out.json]
    python benchmarks/scaling.py --check REF [--check-requests 2000]

--check REF runs every policy (vllm, lru, s3fifo, ttl, radix) x router (kv-aware, sglang, llm-d,
mooncake, round-robin) on 4 instances with 4,096-block pools (evictions throughout) under REF's
code and this tree's, and says whether each whole report JSON is the same byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _code  # noqa: E402

KNOBS = dict(mix="agent=1", agent_steps=80, agent_tool_tokens=1000, agent_reply_tokens=320, prefixes=4,
             prefix_scale=15, arrival_rate=0.1, burst=4, max_context=131072, block_size=64, seed=1)
OPTIONS = dict(policy="vllm", time_model="roofline", model="Llama-3.1-8B", gpu="H100", router="kv-aware",
               compare_sequential=False)
TRACE_REQUESTS = 48_000
FIELDS = ("offsets", "blocks", "input_length", "output_length", "timestamp", "session")


def trace_file() -> Path:
    """The workload (TRACE_REQUESTS requests) as arrays, generated once by this tree's synth. Rows
    take its first N requests: synth(N) itself would differ (its sessions are drawn for N)."""
    requests = TRACE_REQUESTS
    key = hashlib.sha256(json.dumps([requests, KNOBS], sort_keys=True).encode()).hexdigest()[:12]
    path = _code.CACHE / f"scaling-{key}.npz"
    if not path.exists():
        import numpy as np

        from kvreplay.trace.synth import synth

        t = synth(requests, **KNOBS)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, num_blocks=t.num_blocks, **{f: getattr(t, f) for f in FIELDS})
        os.replace(tmp, path)
    return path


def load(path: Path, requests: int):
    import numpy as np

    import kvreplay

    z = np.load(path)
    t = kvreplay.Trace(**{f: z[f] for f in FIELDS}, num_blocks=int(z["num_blocks"]), block_size=KNOBS["block_size"])
    return t.take(range(min(requests, len(t))))


def worker(args) -> None:
    """One row, in this process: print its figures as one JSON line."""
    import kvreplay
    from kvreplay.cli.common import encode_json
    from kvreplay.serving.simulate import simulate

    trace = load(Path(args.trace), args.requests)
    kw = dict(OPTIONS, instances=args.instance_count, band_runs=args.bands)
    simulate(trace.take(range(300)), **kw)  # warm-up: the core loaded, the time model's tables built
    cpu, wall = [], []
    for _ in range(args.runs):
        w, c = time.perf_counter(), time.process_time()
        report = simulate(trace, **kw)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    digest = hashlib.sha256(encode_json(report.to_dict(per_request=True))).hexdigest()[:16]
    print(json.dumps({"requests": len(trace), "instances": args.instance_count, "cpu": cpu, "wall": wall,
                      "output_tokens": int(trace.output_length.sum()), "prompt_tokens": int(trace.input_length.sum()),
                      "hit_rate": report.hit_rate, "sha256": digest, "kvreplay": str(Path(kvreplay.__file__).parent)}))


CHECK_POLICIES = ("vllm", "lru", "s3fifo", "ttl", "radix")
CHECK_ROUTERS = ("kv-aware", "sglang", "llm-d", "mooncake", "round-robin")


def digests_worker(args) -> None:
    """The sha256 of the whole report JSON of every --check configuration, one JSON line."""
    from kvreplay.cli.common import encode_json
    from kvreplay.serving.simulate import simulate

    trace = load(Path(args.trace), args.requests)
    out = {}
    for policy in CHECK_POLICIES:
        for router in CHECK_ROUTERS:
            kw = dict(OPTIONS, policy=policy, router=router, instances=4, capacity=4096, band_runs=False,
                      engine_style="sglang" if policy == "radix" else "vllm")
            report = simulate(trace, **kw)
            out[f"{policy} {router}"] = hashlib.sha256(encode_json(report.to_dict(per_request=True))).hexdigest()[:16]
    print(json.dumps(out))


def check(ref: str, trace: Path, requests: int) -> None:
    """Every --check configuration's report under `ref` and under this tree, byte for byte."""
    runs = []
    for src in (_code.snapshot(ref)[0], None):
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(src)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        argv = [sys.executable, __file__, "--worker-digests", "--trace", str(trace), "--requests", str(requests)]
        runs.append(json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
                               .strip().splitlines()[-1]))
    print(f"4 instances, capacity 4,096 blocks each, the first {requests:,} requests: {ref} against the working tree\n")
    print("| policy | router | sha256 | identical |\n| --- | --- | --- | --- |")
    for key, digest in runs[1].items():
        print(f"| {key.split()[0]} | {key.split()[1]} | {digest} | {'yes' if runs[0][key] == digest else 'NO: ' + runs[0][key]} |")


def row(src: Path | None, trace: Path, requests: int, instances: int, runs: int, bands: bool) -> dict:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    argv = [sys.executable, __file__, "--worker", "--trace", str(trace), "--requests", str(requests),
            "--instance-count", str(instances), "--runs", str(runs)] + (["--bands"] if bands else [])
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _code.add_argument(ap)
    ap.add_argument("--sizes", default="3000,6000,12000,24000,48000")
    ap.add_argument("--instances", default="1,16")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bands", action="store_true", help="simulate with its band runs (the CLI's default)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--check", metavar="REF", help="instead: every policy x router's whole report under REF and "
                    "this tree, byte for byte (4 instances, small pools, the first --check-requests requests)")
    ap.add_argument("--check-requests", type=int, default=2000)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-digests", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--instance-count", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.worker_digests:
        return digests_worker(args)
    if args.check:
        return check(args.check, trace_file(), args.check_requests)
    sizes = [int(x) for x in args.sizes.split(",")]
    src, desc = (None, "the working tree") if args.code == "installed" else _code.snapshot(args.code)
    if max(sizes) > TRACE_REQUESTS:
        ap.error(f"--sizes: at most {TRACE_REQUESTS} requests (the workload's size)")
    trace = trace_file()
    print(f"kvreplay: {desc}; {args.runs} runs a row, bands {'on' if args.bands else 'off'}\n")
    print("| instances | requests | output tokens | prompt tokens | CPU s | wall s | CPU us / output token | hit rate | sha256 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rows = []
    for instances in (int(x) for x in args.instances.split(",")):
        for n in sizes:
            r = row(src, trace, n, instances, args.runs, args.bands)
            cpu, wall = statistics.median(r["cpu"]), statistics.median(r["wall"])
            r["per_token_us"] = 1e6 * cpu / r["output_tokens"]
            rows.append(r)
            print(f"| {instances} | {r['requests']:,} | {r['output_tokens'] / 1e6:.2f}M | {r['prompt_tokens'] / 1e9:.2f}B | "
                  f"{cpu:.2f} | {wall:.2f} | {r['per_token_us']:.2f} | {100 * r['hit_rate']:.2f}% | {r['sha256']} |",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"code": desc, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
