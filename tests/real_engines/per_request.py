"""Request-by-request agreement of a real engine's run with kvreplay's (the vLLM and SGLang
scheduler checks share it): per field, the share of requests that agree to 1e-6, and every
disagreement in the order it shows; the report of it; and the Mooncake trace slices they serve."""

from __future__ import annotations

import json

import numpy as np


def compare(engine, ours, fields) -> tuple[float, dict, list]:
    """(share of requests agreeing on every field, share per field, sorted (when, request, field,
    engine's value, kvreplay's)): `engine.column(name)` and `getattr(ours, name)` per field."""
    n = len(engine.requests)
    agree = np.ones(n, dtype=bool)
    share, diffs = {}, []
    for name in fields:
        theirs = np.array([np.nan if x is None else x for x in engine.column(name)], dtype=np.float64)
        mine = np.asarray(getattr(ours, name), dtype=np.float64)
        same = (np.isnan(theirs) & np.isnan(mine)) | (np.abs(theirs - mine) <= 1e-6)
        share[name] = float(same.mean())
        agree &= same
        for i in np.flatnonzero(~same):
            # when it shows: the earlier of the two times, or (hits, preemptions) the first schedule
            times = [theirs[i], mine[i]] if name.endswith("_s") else [
                np.nan if engine.requests[i].scheduled_s is None else engine.requests[i].scheduled_s,
                float(ours.scheduled_s[i])]
            when = np.inf if np.all(np.isnan(times)) else float(np.nanmin(times))
            diffs.append((when, int(i), name, theirs[i], mine[i]))
    diffs.sort()
    return float(agree.mean()), share, diffs


def report(result: dict, engine: str, k: int = 8) -> str:
    """compare's outcome in a few lines: the shares, then the first k disagreements (`engine`: the
    real engine's name)."""
    lines = [f"{result['agreement']:.1%} of {result['n']} requests agree on all five fields; per field: "
             + ", ".join(f"{name} {v:.1%}" for name, v in result["fields"].items())]
    for when, i, name, theirs, mine in result["diffs"][:k]:
        lines.append(f"  request {i} {name}: {engine} {theirs:g}, kvreplay {mine:g} (from t={when:.2f} s)")
    return "\n".join(lines)


def slice_rows(path, start: int, n: int) -> list:
    """Requests start..start+n-1 of a Mooncake JSONL trace, their timestamps shifted to start at 0:
    (hash_ids, L, timestamp_ms, O)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f):
            if k < start:
                continue
            r = json.loads(line)
            rows.append((r["hash_ids"], r["input_length"], float(r["timestamp"]), r["output_length"]))
            if len(rows) >= n:
                break
    t0 = rows[0][2]
    return [(ids, L, t - t0, O) for ids, L, t, O in rows]
