"""How long a whole kvreplay process takes, start to exit: `--version`, `import kvreplay`, and a
small `run`, `sweep` and `simulate` on Mooncake's synthetic trace (3,993 requests), where start-up
is most of the work.

Each figure is the median over --runs fresh processes (one untimed run of each first) of the wall
time and the CPU time (user + sys of that process, from wait4), with the load other processes put
on the machine meanwhile (benchmarks/_quiet.py; a run is retried once when others were busy). The
processes run exactly what the ``kvreplay`` console script runs (``from kvreplay.cli import main``)
with the chosen code first on PYTHONPATH, so no shell wrapper or PATH lookup is timed.

    python benchmarks/startup.py [--code HEAD|REF|installed] [--runs 11] [--only version,run] [--trace T] [--json out.json]

The commands (T = shared/traces/mooncake/synthetic_trace.jsonl; P = the H100 / Llama-3.1-8B-shaped
Dynamo profile of benchmarks/dynamo_compare.py, written to a temporary directory):

    kvreplay --version
    python -c "import kvreplay"
    kvreplay run T --policy s3fifo --capacity 4096 --summary-only --json
    kvreplay sweep T --capacities 29,59,...,61119 --policies fifo,lru --warmup-fraction 0.5 --json
    kvreplay simulate T --time-model P --capacity 20000 --block-size 512

It also prints the cumulative import time of kvreplay (``python -X importtime -c "import
kvreplay"``, median of the runs) and what `import kvreplay` brought in.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _code  # noqa: E402
from _quiet import measure, summary  # noqa: E402

TRACE = HERE.parent.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
CAPACITIES = "29,59,119,238,477,954,1909,3819,7639,15279,30559,61119"  # the peer's sweep (peer_compare.py)
CLI = "import sys; from kvreplay.cli import main; sys.exit(main())"


def commands(trace: str, profile: str) -> dict[str, list[str]]:
    return {
        "version": ["-c", CLI, "--version"],
        "import": ["-c", "import kvreplay"],
        "run": ["-c", CLI, "run", trace, "--policy", "s3fifo", "--capacity", "4096", "--summary-only", "--json"],
        "sweep": ["-c", CLI, "sweep", trace, "--capacities", CAPACITIES, "--policies", "fifo,lru",
                  "--warmup-fraction", "0.5", "--json"],
        "simulate": ["-c", CLI, "simulate", trace, "--time-model", profile, "--capacity", "20000", "--block-size", "512"],
    }


def one_process(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one process; its output is read and dropped; a failure stops the script."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[2:]) or argv} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def import_time_ms() -> tuple[float, list[tuple[str, float]]]:
    """kvreplay's cumulative import time (ms) from -X importtime, and the slowest top-level imports under it."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import kvreplay"], capture_output=True,
                         text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            rows.append(((len(m.group(3)) - 1) // 2, m.group(4), int(m.group(2)) / 1000))  # depth 0: top level
    start = max(i for i, (depth, name, _) in enumerate(rows) if name == "kvreplay" and depth == 0)
    total = rows[start][2]
    # its direct imports: the depth-1 rows printed before it (a module's row follows its imports')
    children, i = [], start - 1
    while i >= 0 and rows[i][0] > 0:
        if rows[i][0] == 1:
            children.append((rows[i][1], rows[i][2]))
        i -= 1
    return total, sorted(children, key=lambda c: -c[1])[:6]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--only", default="version,import,run,sweep,simulate")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--trace", type=Path, default=TRACE, help="the trace (default: ../shared's synthetic_trace.jsonl)")
    _code.add_argument(ap)
    args = ap.parse_args()
    code = _code.activate(args.code)
    if not args.trace.exists():
        sys.exit(f"{args.trace} is not there (../shared; or give --trace)")
    sys.path.insert(0, str(HERE))
    from dynamo_compare import make_profile

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}")
    print(f"kvreplay measured: {code}; imported from {_code.check_imported(code)}\n")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(str(args.trace), make_profile(tmp))
        print("| process | wall s (median) | CPU s (median) | CPU min-max | clean runs | others' cores |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in args.only.split(","):
            argv = cmds[name]
            one_process(argv)  # untimed: file caches warm
            recs = measure(lambda: one_process(argv), args.runs, quiet_wait=10.0, retry_wait=2.0)
            s = summary(recs)
            figures[name] = s
            print(f"| {name} | {s['wall_median']:.3f} | {s['cpu_median']:.3f} | {s['cpu_min']:.3f}-{s['cpu_max']:.3f} "
                  f"| {s['clean_runs']}/{s['runs']} | {s['others_median']:.2f} |", flush=True)
    totals, children = [], None
    for _ in range(max(3, args.runs // 2)):
        total, children = import_time_ms()
        totals.append(total)
    figures["importtime_ms"] = statistics.median(totals)
    print(f"\npython -X importtime -c 'import kvreplay': kvreplay cumulative {statistics.median(totals):.1f} ms "
          f"(median of {len(totals)}); largest direct imports: "
          + ", ".join(f"{name} {ms:.1f} ms" for name, ms in children))
    if args.json:
        Path(args.json).write_text(json.dumps({"code": code, "figures": figures}, indent=1) + "\n")


if __name__ == "__main__":
    main()
