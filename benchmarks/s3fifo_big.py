"""s3fifo `replay()` speed on the 60M-access generated trace, median of 5 per capacity.

    python benchmarks/s3fifo_big.py            # the installed kvreplay
    PYTHONPATH=benchmarks/.cache/kvreplay-<sha>/src python benchmarks/s3fifo_big.py   # a snapshot

Prints M block accesses per CPU-second of `kvreplay.replay(trace, "s3fifo", C, 512, check=False)`
(state set-up included) at 1%, 10% and 50% of the unique blocks (benchmarks/RESULTS.md, the s3fifo ghost ring).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvreplay  # noqa: E402
from bigtrace import generate  # noqa: E402

CAPACITIES = (86_077, 860_772, 4_303_858)


def main() -> None:
    trace = generate(60_000_000, 20240601)
    print(f"kvreplay from {Path(kvreplay.__file__).parent}; {trace.num_accesses:,} accesses, {trace.num_blocks:,} blocks")
    for capacity in CAPACITIES:
        kvreplay.replay(trace, "s3fifo", capacity, 512, check=False)  # warm: load or compile the kernel
        times = []
        for _ in range(5):
            start = time.process_time()
            kvreplay.replay(trace, "s3fifo", capacity, 512, check=False)
            times.append(time.process_time() - start)
        print(f"capacity {capacity:>9,}: {trace.num_accesses / statistics.median(times) / 1e6:6.1f} M/s", flush=True)


if __name__ == "__main__":
    main()
