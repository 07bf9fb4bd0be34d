#!/usr/bin/env python
"""Evidence for two kernel changes that docs/performance.md suggests (nothing in src/ is changed).

Builds variants of the s3fifo and fifo kernels from the measured kvreplay's own source
(text substitutions into a copy under benchmarks/.cache/variants/), registers each copy
for its own state type, replays the generated 60M-access trace with every variant, checks
that all variants give identical per-request hits, and prints accesses per CPU-second
(median of --runs):

* "% n": the ring buffers wrap with ``% n`` (n = ring length, a runtime value: an integer
  division per queue operation); the variant wraps with a compare and subtract;
* "packed" (s3fifo): ``where`` (int8) and ``freq`` (int8) live in two arrays, so a hit
  touches two cache lines per block; the variant keeps both in one uint16 per block.

Usage:  /tmp/venv/bin/python benchmarks/kernel_variants.py [--code HEAD] [--runs 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import _code
from _quiet import measure, summary

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _absolute(src: str) -> str:
    return src.replace("from .base import", "from kvreplay.policies.base import").replace("from ..", "from kvreplay.")


def _rename(src: str, state: str, new: str) -> str:
    out = src.replace(f'namedtuple("{state}"', f'namedtuple("{new}"')
    assert out != src, "state namedtuple not found"
    return out


def no_modulo(src: str) -> str:
    """(h + 1) % n and (h + s) % n -> compare-and-subtract wraps."""
    out = re.sub(r"\((\w+\[\w+\]|\w+) \+ 1\) % n", r"_next(\1, n)", src)
    out = re.sub(r"\[\((m\[\w+\]) \+ (m\[\w+\])\) % n\]", r"[_wrap(\1 + \2, n)]", out)
    assert "% n" not in out, "a modulo was left"
    helpers = ("@njit_or_plain\ndef _next(i, n):\n    return i + 1 if i + 1 < n else 0\n\n\n"
               "@njit_or_plain\ndef _wrap(i, n):\n    return i - n if i >= n else i\n\n\n")
    first = out.index("@njit_or_plain")
    return out[:first] + helpers + out[first:]


def packed(src: str) -> str:
    """s3fifo: where (low byte) and freq (high byte) in one uint16 array ``wf``."""
    out = src.replace('["where", "freq",', '["wf",')
    out = out.replace("        where=np.zeros(num_blocks, dtype=np.int8),\n        freq=np.zeros(num_blocks, dtype=np.int8),\n",
                      "        wf=np.zeros(num_blocks, dtype=np.uint16),\n")
    out = re.sub(r"\(state\.where == (\w+)\) \| \(state\.where == (\w+)\)", r"((state.wf & 0xFF) == \1) | ((state.wf & 0xFF) == \2)", out)
    out = re.sub(r"st\.where\[(\w+)\] = (\w+)", r"st.wf[\1] = (st.wf[\1] & 0xFF00) | \2", out)
    out = re.sub(r"st\.freq\[(\w+)\] = (\w+)", r"st.wf[\1] = (st.wf[\1] & 0xFF) | (\2 << 8)", out)
    out = out.replace("st.freq[victim] -= 1", "st.wf[victim] -= 256").replace("st.freq[b] += 1", "st.wf[b] += 256")
    out = re.sub(r"st\.where\[(\w+)\]", r"(st.wf[\1] & 0xFF)", out)
    out = re.sub(r"st\.freq\[(\w+)\]", r"(st.wf[\1] >> 8)", out)
    assert "st.where" not in out and "st.freq" not in out and "state.where" not in out, "packing left a field"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _code.add_argument(ap)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    code = _code.activate(args.code)
    out_dir = HERE / ".cache" / "variants" / re.sub(r"\W+", "-", code)[:60]
    out_dir.mkdir(parents=True, exist_ok=True)
    # The variants' state types live in throwaway modules: keep their compiled code out of
    # the measured kvreplay's numba cache.
    os.environ["NUMBA_CACHE_DIR"] = str(out_dir / "numba-cache")

    import kvreplay
    from kvreplay.engine import driver
    from kvreplay.policies.registry import get_policy
    from bigtrace import generate
    from throughput import BIG_SEED, BIG_TARGET, capacities, table

    pkg = Path(kvreplay.__file__).parent / "policies"
    variants = {}
    for policy, state in (("s3fifo", "S3FIFOState"), ("fifo", "FIFOState")):
        src = _absolute((pkg / f"{policy}.py").read_text())
        texts = {"copy (unchanged)": src, "no % n": no_modulo(src)}
        if policy == "s3fifo":
            texts["no % n + packed where/freq"] = packed(no_modulo(src))
        variants[policy] = {"registered": get_policy(policy).make_state}
        for i, (label, text) in enumerate(texts.items()):
            path = out_dir / f"{policy}_v{i}.py"
            path.write_text(_rename(text, state, f"{state}V{i}"))
            variants[policy][label] = _load(path, f"kvreplay_variant_{policy}_{i}").make_state

    trace = generate(BIG_TARGET, BIG_SEED)
    print(f"# Kernel variants, kvreplay {code}\n")
    print(f"{trace.num_accesses:,} block accesses (generated trace, seed {BIG_SEED}); accesses per CPU-second, "
          f"median of {args.runs} runs; every variant's per-request hits equal the registered kernel's\n")
    rows = []
    for policy, makers in variants.items():
        for label, cap in capacities(trace.num_blocks):
            base, ref = None, None
            for name, make in makers.items():
                hb = np.zeros(len(trace), np.int64)
                ht = np.zeros(len(trace), np.int64)

                def run(make=make, hb=hb, ht=ht):
                    state = make(cap, trace)
                    t0, c0 = time.perf_counter(), time.thread_time()
                    driver.replay_compiled(trace.offsets, trace.blocks, trace.input_length, 512, state, hb, ht)
                    return time.perf_counter() - t0, time.thread_time() - c0

                run()
                if ref is None:
                    ref = hb.copy()
                if not np.array_equal(ref, hb):
                    raise SystemExit(f"{policy} variant {name!r} changes the hits")
                s = summary(measure(run, args.runs))
                rate = trace.num_accesses / s["cpu_median"] / 1e6
                base = base or rate
                rows.append([policy, f"{label} {cap:,}", name, f"**{rate:.1f}**", f"{rate / base - 1:+.0%}",
                             f"{s['clean_runs']}/{s['runs']}"])
                print(f"  {policy} {cap} {name}: {rate:.1f} M/s", file=sys.stderr)
    print(table(rows, ["policy", "capacity", "kernel", "M accesses / CPU-s", "vs registered", "clean runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
