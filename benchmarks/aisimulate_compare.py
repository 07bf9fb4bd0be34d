#!/usr/bin/env python
"""kvreplay's closed loop against NVIDIA AISimulate's agentic replay (aisimulate
0.13.0.dev202609240000000055), on the Claude Code samples, with the same fixed step time.

Needs AISimulate and kvreplay in one interpreter (the install is in
tests/real_engines/aisimulate_agentic.py's docstring, which also says how each side is set up):

    PYTHONPATH=src benchmarks/.cache/aisim-venv/bin/python benchmarks/aisimulate_compare.py \
        [--traces ../shared/traces/claude-code-samples] [--steps 10,99.991,100] [--lanes 1,2,3] [--repeat 3]

Part 1, every play from 0 (AISimulate's ``trace_timestamps`` load without lanes; kvreplay's
``--arrivals closed`` with ``--session-arrivals zero``), per step time S: how many of the requests
each side sends at a different time, the largest difference, TTFT p50 and p90 per turn bucket and
overall, each play's session time (first send to last answer), and how far each side's sends are
from its own rule (kvreplay: the latest link firing plus the request's one think time; AISimulate:
each link with its own recorded gap, and never before the recorded send: aisimulate_agentic.py),
both computed from that side's own per-request times.

Part 2, N lanes (AISimulate's ``agentic_lanes``; kvreplay's ``--sessions N``): what each runs and
its aggregate figures, the design differences stated beside them.

Each run's wall and CPU time (median of --repeat, in-process).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "real_engines"))

import aisimulate_agentic as aa  # noqa: E402

TURNS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, None))


def p(values, q) -> float:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, q, method="inverted_cdf")) if v.size else float("nan")


def turns(session, send) -> np.ndarray:
    order = np.lexsort((np.arange(len(send)), send, session))
    turn = np.empty(len(send), dtype=np.int64)
    rank = {}
    for i in order:
        rank[session[i]] = rank.get(session[i], 0) + 1
        turn[i] = rank[session[i]]
    return turn


def session_times(session, send, end) -> dict:
    out = {}
    for s in np.unique(session):
        m = session == s
        out[s] = float(np.max(end[m]) - np.min(send[m]))
    return out


def timed(fn, repeat):
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return out, statistics.median(walls), statistics.median(cpus)


def part1(folder, rec, steps, repeat, tmp):
    print("## every play from 0 (no lanes)\n")
    for step in steps:
        prof = aa.flat_profile(tmp / f"flat_{step}.npz", step)
        (trace, ours), kw, kc = timed(lambda: aa.run_kvreplay(folder, prof), repeat)
        theirs, aw, ac = timed(lambda: aa.run_aisim(folder, step), repeat)
        rows = aa.aisim_rows(theirs, trace)
        lk = aa.links(ours)
        rs, re = aa.recorded_arrays(trace, rec)
        krule = aa.kvreplay_rule(ours.arrival_s, ours.finish_s, lk)
        linked = ~np.isnan(krule)
        arule = aa.aisim_rule(rows["send"], rows["end"], lk, rs, re)
        dsend = np.abs(rows["send"] - ours.arrival_s)
        floor = aa.aisim_rule(rows["send"], rows["end"], [[] for _ in lk], rs, re)  # the recorded sends alone
        per_link = np.array([max((rows["send"] if s else rows["end"])[q] + d for q, s, d in ls) if ls else np.nan
                             for ls in lk])
        binds = linked & (floor > per_link + 1e-9)
        print(f"### step {step:g} ms (prefill {step:g} ms + decode {step:g} ms a mixed step)\n")
        print(f"- requests: kvreplay {ours.num_requests}, AISimulate {theirs['completed_requests']} completed; "
              f"sent at different times (> 1 us): {int((dsend > 1e-6).sum())}, the largest {dsend.max():.6g} s")
        print(f"- first-token times differ (> 1 us): {int((np.abs(rows['first'] - ours.first_token_s) > 1e-6).sum())}; "
              f"prefix hits differ: {int((rows['hit'] != ours.hit_tokens).sum())}")
        print(f"- each side against its own rule, from its own times: kvreplay {np.abs(krule - ours.arrival_s)[linked].max():.3g} s, "
              f"AISimulate {np.abs(arule - rows['send']).max():.3g} s; AISimulate's recorded-send floor binds on "
              f"{int(binds.sum())} of {int(linked.sum())} linked requests")
        sess = ours.closed["session"]
        tk = turns(sess, ours.arrival_s)
        ta = turns(sess, rows["send"])
        ttk = ours.first_token_s - ours.arrival_s
        tta = rows["first"] - rows["send"]
        print("\n| turns | requests | kvreplay TTFT p50 / p90 | AISimulate TTFT p50 / p90 |\n|---|---|---|---|")
        for lo, hi in TURNS:
            mk = (tk >= lo) & (tk <= (hi or 10**9))
            ma = (ta >= lo) & (ta <= (hi or 10**9))
            label = f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}")
            print(f"| {label} | {int(mk.sum())} | {p(ttk[mk], 50) * 1e3:.1f} / {p(ttk[mk], 90) * 1e3:.1f} ms | "
                  f"{p(tta[ma], 50) * 1e3:.1f} / {p(tta[ma], 90) * 1e3:.1f} ms |")
        print(f"| all | {ours.num_requests} | {p(ttk, 50) * 1e3:.1f} / {p(ttk, 90) * 1e3:.1f} ms | "
              f"{p(tta, 50) * 1e3:.1f} / {p(tta, 90) * 1e3:.1f} ms |")
        sk = session_times(sess, ours.arrival_s, ours.finish_s)
        sa = session_times(sess, rows["send"], rows["end"])
        plays = {s: rows["play"][sess == s][0] for s in sk}
        print("\nsession time (first send to last answer): " + "; ".join(
            f"{plays[s]} kvreplay {sk[s]:,.1f} s, AISimulate {sa[s]:,.1f} s" for s in sorted(sk)))
        print(f"\nwall / CPU (median of {repeat}): kvreplay {kw * 1e3:.1f} / {kc * 1e3:.1f} ms, "
              f"AISimulate {aw * 1e3:.1f} / {ac * 1e3:.1f} ms (its own wall_time_ms {theirs['wall_time_ms']:.1f})\n")


def aggregate(session, send, first, end) -> dict:
    spans = session_times(session, send, end)
    run = float(np.nanmax(end))
    return {"requests": len(send), "sessions": len(spans), "ttft_p50": p(first - send, 50),
            "ttft_p90": p(first - send, 90), "session_p50": p(list(spans.values()), 50), "end": run,
            "open": sum(spans.values()) / run}


def part2(folder, lanes_list, step, repeat, tmp):
    print(f"## N lanes (step {step:g} ms)\n")
    prof = aa.flat_profile(tmp / "flat_lanes.npz", step)
    print("| N | side | requests | sessions run | TTFT p50 / p90 | session time p50 | run ends | sessions open on average | wall / CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in lanes_list:
        (trace, ours), kw, kc = timed(lambda: aa.run_kvreplay(folder, prof, sessions=n), repeat)
        theirs, aw, ac = timed(lambda: aa.run_aisim(folder, step, lanes=n), repeat)
        k = aggregate(ours.closed["session"], ours.arrival_s, ours.first_token_s, ours.finish_s)
        rows = theirs["per_request"]
        a = aggregate(np.array([r["play_id"] for r in rows]), np.array([r["arrival_time_ms"] for r in rows]) / 1e3,
                      np.array([r["first_token_ms"] for r in rows]) / 1e3, np.array([r["last_token_ms"] for r in rows]) / 1e3)
        for name, x, w, c in (("kvreplay --sessions", k, kw, kc), ("AISimulate agentic_lanes", a, aw, ac)):
            print(f"| {n} | {name} | {x['requests']} | {x['sessions']} | {x['ttft_p50'] * 1e3:.1f} / "
                  f"{x['ttft_p90'] * 1e3:.1f} ms | {x['session_p50']:,.1f} s | {x['end']:,.1f} s | {x['open']:.2f} | "
                  f"{w * 1e3:.1f} / {c * 1e3:.1f} ms |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces" / "claude-code-samples"))
    ap.add_argument("--steps", default="10,99.991,100")
    ap.add_argument("--lanes", default="1,2,3")
    ap.add_argument("--lanes-step", type=float, default=99.991)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import aisimulate

    print(f"aisimulate {aisimulate.__version__}; kvreplay from {__import__('kvreplay').__file__}\n")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        folder = tmp / "claude-code"
        files = aa.normalised_copy(Path(args.traces), folder)
        rec = aa.recorded(files)
        part1(folder, rec, [float(s) for s in args.steps.split(",")], args.repeat, tmp)
        part2(folder, [int(n) for n in args.lanes.split(",")], args.lanes_step, args.repeat, tmp)


if __name__ == "__main__":
    main()
