"""The whole command, as a user waits for it: `kvreplay simulate` against a process running NVIDIA
Dynamo's offline replay on the same inputs (docs/fidelity.md, "Speed, the whole command").

Each run is a new process timed by /usr/bin/time (wall, user+sys CPU, peak RSS of that process
alone); the two alternate, one untimed run of each first, medians of --runs. Both read the same
Mooncake JSONL and the NPZ profile dynamo_compare.py writes, with 512-token blocks and a pool of C
blocks, one worker. Run it where both are installed (dynamo_compare.py says how); `.pyc` files
should be warm (an installed kvreplay has them; `python -m compileall src` for an editable one).

    python benchmarks/dynamo_processes.py [--runs 5] [--capacities 20000,2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent.parent / "shared" / "traces" / "mooncake"

DYNAMO = """
import sys
sys.path.insert(0, {here!r})
from dynamo_compare import dynamo_kwargs
from dynamo.replay import run_trace_replay
s = run_trace_replay(sys.argv[1], **dynamo_kwargs(int(sys.argv[2]), 1.0, sys.argv[3])).summary
print(s["first_admission_prefix_cache_reused_ratio"], s["median_ttft_ms"])
"""


def timed(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one process."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        done = subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%e %U %S %M", *cmd], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        wall, user, sys_s, rss_kib = map(float, Path(out.name).read_text().split()[-4:])
    return wall, user + sys_s, rss_kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--capacities", default="20000,2000")
    ap.add_argument("--traces", default="conversation,synthetic")
    args = ap.parse_args()
    if not shutil.which("/usr/bin/time"):
        sys.exit("needs /usr/bin/time (Debian: apt-get install time)")
    sys.path.insert(0, str(HERE))
    from dynamo_compare import make_profile

    kvreplay = shutil.which("kvreplay") or sys.exit("kvreplay is not on the PATH")
    env = dict(os.environ, DYN_LOG="warn")
    print("| trace | C | kvreplay wall / CPU s | Dynamo wall / CPU s | ratio (wall) | peak RSS kvreplay / Dynamo |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        npz = make_profile(tmp)
        script = Path(tmp) / "dynamo_replay.py"
        script.write_text(DYNAMO.format(here=str(HERE)))
        for name in args.traces.split(","):
            trace = str(TRACES / f"{name}_trace.jsonl")
            for capacity in (int(c) for c in args.capacities.split(",")):
                ours = [kvreplay, "simulate", trace, "--time-model", npz, "--capacity", str(capacity),
                        "--block-size", "512"]
                theirs = [sys.executable, str(script), trace, str(capacity), npz]
                runs = {"k": [], "d": []}
                for i in range(args.runs + 1):
                    k, d = timed(ours, env), timed(theirs, env)
                    if i:  # the first of each is untimed
                        runs["k"].append(k)
                        runs["d"].append(d)
                med = {w: [statistics.median(r[q] for r in runs[w]) for q in range(2)] for w in runs}
                rss = {w: max(r[2] for r in runs[w]) for w in runs}
                print(f"| {name} | {capacity:,} | {med['k'][0]:.2f} / {med['k'][1]:.2f} | {med['d'][0]:.2f} / "
                      f"{med['d'][1]:.2f} | {med['k'][0] / med['d'][0]:.2f} | {rss['k']:.0f} / {rss['d']:.0f} MB |",
                      flush=True)


if __name__ == "__main__":
    main()
