"""Without numba, the compiled engine falls back to the reference engine with one warning."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys, warnings
sys.modules["numba"] = None  # makes `import numba` raise ImportError
import kvreplay
from kvreplay.engine import driver
assert not driver.HAVE_NUMBA
t = kvreplay.Trace.from_requests([(["a", "b"], 8), (["a", "b"], 8), (["a"], 4)])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    r1 = kvreplay.replay(t, "s3fifo", 10, 4)
    r2 = kvreplay.replay(t, "lru", 10, 4)
print(r1.engine, r1.hit_tokens.tolist(), r2.hit_tokens.tolist(), len(caught), str(caught[0].message))
"""


def test_missing_numba_falls_back_to_reference():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    engine, rest = out.stdout.split(" ", 1)
    assert engine == "reference"
    # s3fifo at capacity 10 has small_cap 1: b pushes a into the ghost queue, so the resend
    # [a b] misses at a (0 tokens) and a moves to main; then [a] hits 4. lru keeps both: 8, then 4.
    assert rest.startswith("[0, 0, 4] [0, 8, 4] 1 numba is not installed")
