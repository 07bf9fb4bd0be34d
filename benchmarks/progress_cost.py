"""What telling progress costs the one-pass kernels: stats() and mrc() with and without a callback.

    python benchmarks/progress_cost.py [--accesses 20000000] [--runs 5]

On bigtrace.generate(ACCESSES) (in memory); prints the median CPU seconds of each pass without a
progress callback and with one (which the C kernels call every 1% of the requests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bigtrace import generate  # noqa: E402

from kvreplay.analysis.mrc import mrc  # noqa: E402
from kvreplay.analysis.stats import stats  # noqa: E402


def median_cpu(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accesses", type=int, default=20_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trace = generate(args.accesses)
    calls = []
    told = lambda done, total, what: calls.append(done)  # noqa: E731
    print(f"trace: {len(trace):,} requests, {trace.num_accesses:,} accesses; CPU s, median of {args.runs}")
    for name, run in (("stats", lambda **kw: stats(trace, **kw)), ("mrc", lambda **kw: mrc(trace, **kw))):
        run()  # (first touch of the arrays)
        plain = median_cpu(run, args.runs)
        calls.clear()
        told_ = median_cpu(lambda: run(progress=told), args.runs)
        print(f"{name:6s} without a callback {plain:6.2f}   with one {told_:6.2f}   "
              f"({len(calls) // args.runs} calls a pass)")


if __name__ == "__main__":
    main()
