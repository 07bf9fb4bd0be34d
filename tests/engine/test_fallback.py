"""Without numba kvreplay runs whole: the replay engines, the policies and the serving simulator are
C (the compiled core); the analysis passes numba compiles (the one-pass LRU curve, trace
statistics) run as plain Python with the same results. And numba is imported only by those."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, sys
if sys.argv[1] == "without":
    sys.modules["numba"] = None  # makes `import numba` raise ImportError
import kvreplay
from kvreplay import jit
t = kvreplay.Trace.from_requests([(["a", "b"], 8), (["a", "b"], 8), (["a"], 4), (["c", "a"], 8)], block_size=4)
r1 = kvreplay.replay(t, "s3fifo", 10, 4)
r2 = kvreplay.replay(t, "lru", 10, 4)
sim = kvreplay.simulate(t, "vllm", 10, 4, compare_sequential=False)
before = "numba" in sys.modules and sys.modules["numba"] is not None
curve = kvreplay.mrc(t, capacities=[1, 2, 3])
print(json.dumps({"have": jit.HAVE_NUMBA, "engine": r1.engine, "s3fifo": r1.hit_tokens.tolist(),
                  "lru": r2.hit_tokens.tolist(), "sim": sim.hit_tokens.tolist(), "numba_before_mrc": before,
                  "mrc": [round(p["hit_rate"], 12) for p in curve["points"]]}))
"""


def run(which: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, which], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_without_numba_everything_runs_the_same():
    without, with_numba = run("without"), run("with")
    assert without["have"] is False and with_numba["have"] is True
    assert without["engine"] == "compiled"  # the C core needs no numba
    # s3fifo at capacity 10 has small_cap 1: b pushes a into the ghost queue, so the resend
    # [a b] misses at a (0 tokens) and a moves to main; then [a] hits 4. lru keeps both: 8, then 4.
    assert without["s3fifo"][:3] == [0, 0, 4] and without["lru"][:3] == [0, 8, 4]
    for key in ("s3fifo", "lru", "sim", "mrc"):
        assert without[key] == with_numba[key], key


def test_replay_and_simulate_never_import_numba():
    assert run("with")["numba_before_mrc"] is False
