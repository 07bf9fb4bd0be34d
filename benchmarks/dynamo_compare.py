#!/usr/bin/env python
"""kvreplay's serving simulator against NVIDIA Dynamo's offline replay (ai-dynamo 1.6.1), in one process.

For each trace x capacity C (blocks of 512 tokens) x arrival speedup X, both simulators serve the
trace on one vLLM-style instance (or --workers W of them) with the same NPZ timing profile:

    kvreplay:  simulate(trace, policy="vllm", capacity=C, block_size=512, engine_style="vllm",
                        time_model=NPZ, speedup=X, output_kv=True, compare_sequential=False,
                        instances=W, router=R)
    Dynamo:    run_trace_replay(TRACE, trace_block_size=512, num_workers=W, router_mode=MODE,
                        arrival_speedup_ratio=X,
                        extra_engine_args={"engine": {"block_size": 512, "num_gpu_blocks": C,
                            "timing_model": {"type": "external", "provider": "dynamo_profile",
                                             "config": {"path": NPZ}}}})

with W = --workers (default 1) and MODE = --router: round_robin (the default; kvreplay's
R = "round-robin") or kv_router (Dynamo's KV router; kvreplay's R = "kv-aware", the same cost).
C is per worker. Dynamo's kv_router breaks cost ties at random and unseeded, so its figures vary a
little from run to run (those shown are from the last timed run; the per-request comparison uses
the capture run); kvreplay seeds its ties (seed 0).

and the script prints, per configuration: prefix reuse (kvreplay ``hit_rate``; Dynamo
``first_admission_prefix_cache_reused_ratio``), TTFT mean/p50/p90/p99, TPOT p50, completed
requests, the differences (reuse in points, latencies in %; "!" marks a reuse difference above
1 point or a TTFT one above 3 %), and each simulator's wall and CPU time (medians over --repeat
runs; kvreplay's kernel already compiled by a warm-up call, whose time is reported as "cold"; for
Dynamo also its own ``wall_time_ms``). A per-request comparison follows (Dynamo's
``capture_per_request`` records matched to trace rows by arrival time, prompt and output length):
how many requests got the same first-admission hit, and how far their first-token times are apart.

The NPZ profile is written by ``make_profile`` into a temporary directory (the arrays of
/tmp/research/dynamo/make_npz.py: prefill_ttft_ms = 5 + 0.06 isl; decode_itl = 6 + 3e-5 kv + 2e-5 ctx),
or given with --profile FILE.

Usage (needs ai-dynamo 1.6.1 and kvreplay in one environment):

    /tmp/dynvenv/bin/python benchmarks/dynamo_compare.py [--trace T ...] [--capacities 2000,20000]
        [--speedups 0.25,1.0] [--repeat 3] [--workers 1] [--router round_robin|kv_router]
        [--profile FILE.npz] [--json OUT.json|-] [--per-request DIR]

Speedup 0.25 stretches the conversation trace's arrivals 4x (a load one instance keeps up with
under this profile); 1.0 is the trace's own rate, which it does not keep up with (queues grow).
Timing follows benchmarks/_quiet.py (waits for a quiet machine, records other processes' load).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quiet import measure, summary  # noqa: E402

os.environ.setdefault("DYN_LOG", "warn")  # Dynamo's Rust side logs every run at INFO otherwise

MOONCAKE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake"
TRACES = [MOONCAKE / "conversation_trace.jsonl", MOONCAKE / "synthetic_trace.jsonl"]
BLOCK_SIZE = 512
REUSE_FLAG_POINTS = 1.0
# --router (Dynamo's router_mode) -> kvreplay's router
ROUTERS = {"round_robin": "round-robin", "kv_router": "kv-aware"}
TTFT_FLAG_PCT = 3.0


# ---- the timing profile ---------------------------------------------------------------------------

def profile_arrays() -> dict:
    """An H100 / Llama-3.1-8B-shaped Dynamo ``dynamo_profile`` NPZ (float64), as make_npz.py writes it."""
    prefill_isl = np.array([128, 512, 1024, 2048, 4096, 8192, 16384, 32768], dtype=np.float64)
    kv = np.array([0, 10000, 50000, 100000, 200000, 400000, 800000], dtype=np.float64)
    ctx = np.array([128, 1024, 4096, 16384, 65536], dtype=np.float64)
    return {
        "prefill_isl": prefill_isl,
        "prefill_ttft_ms": 5.0 + 0.06 * prefill_isl,
        "decode_active_kv_tokens": kv,
        "decode_context_length": ctx,
        "decode_itl": (6.0 + 0.00003 * kv[:, None] + 0.00002 * ctx[None, :]).astype(np.float64),
    }


def make_profile(directory) -> str:
    """Write the profile to DIRECTORY/h100_llama8b.npz and return its path."""
    path = os.path.join(str(directory), "h100_llama8b.npz")
    np.savez(path, **profile_arrays())
    return path


# ---- the two simulators ---------------------------------------------------------------------------

def dynamo_available() -> tuple[bool, str]:
    try:
        from dynamo.replay import run_trace_replay  # noqa: F401
    except Exception as e:  # ImportError, or the native module failing to load
        return False, f"{type(e).__name__}: {e}"
    try:
        from importlib.metadata import version
        return True, version("ai-dynamo")
    except Exception:
        return True, "unknown"


def dynamo_kwargs(capacity: int, speedup: float, profile: str, capture: bool = False, workers: int = 1,
                  router: str = "round_robin") -> dict:
    return dict(
        extra_engine_args={"engine": {"block_size": BLOCK_SIZE, "num_gpu_blocks": int(capacity),
                                      "timing_model": {"type": "external", "provider": "dynamo_profile",
                                                       "config": {"path": profile}}}},
        trace_block_size=BLOCK_SIZE, num_workers=int(workers), router_mode=router,
        arrival_speedup_ratio=float(speedup), capture_per_request=capture,
    )


def run_dynamo(trace_path, capacity, speedup, profile, capture=False, workers=1, router="round_robin"):
    from dynamo.replay import run_trace_replay

    return run_trace_replay(str(trace_path), **dynamo_kwargs(capacity, speedup, profile, capture, workers, router))


def run_kvreplay(trace, capacity, speedup, profile, workers=1, router="round_robin"):
    """`router` in Dynamo's spelling (ROUTERS maps it to kvreplay's)."""
    from kvreplay.serving.simulate import simulate

    return simulate(trace, policy="vllm", capacity=capacity, block_size=BLOCK_SIZE, engine_style="vllm",
                    time_model=profile, speedup=speedup, output_kv=True, compare_sequential=False,
                    instances=int(workers), router=ROUTERS[router])


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


# ---- figures ------------------------------------------------------------------------------------

def kvreplay_figures(r) -> dict:
    lat = r.latencies()
    t = lat["ttft"]
    return {"reuse": r.hit_rate, "ttft_mean_ms": 1e3 * t["mean"], "ttft_p50_ms": 1e3 * t["p50"],
            "ttft_p90_ms": 1e3 * t["p90"], "ttft_p99_ms": 1e3 * t["p99"],
            "tpot_p50_ms": 1e3 * lat["tpot"]["p50"], "completed": r.num_finished, "rejected": r.num_rejected,
            "preemptions": int(r.counters.get("preemptions", 0))}


def dynamo_figures(s: dict) -> dict:
    return {"reuse": s["first_admission_prefix_cache_reused_ratio"], "reuse_any_admission": s["prefix_cache_reused_ratio"],
            "ttft_mean_ms": s["mean_ttft_ms"], "ttft_p50_ms": s["median_ttft_ms"], "ttft_p90_ms": s["p90_ttft_ms"],
            "ttft_p99_ms": s["p99_ttft_ms"], "tpot_p50_ms": s["median_tpot_ms"],
            "completed": s["completed_requests"], "requests": s["num_requests"]}


def pct(a, b) -> float:
    """(a - b) / b in percent: kvreplay relative to Dynamo."""
    return float("nan") if not b else 100.0 * (a - b) / b


def differences(k: dict, d: dict) -> dict:
    out = {"reuse_points": 100.0 * (k["reuse"] - d["reuse"])}
    for key in ("ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms"):
        out[key.replace("_ms", "_pct")] = pct(k[key], d[key])
    out["completed"] = k["completed"] - d["completed"]
    out["flagged"] = bool(abs(out["reuse_points"]) > REUSE_FLAG_POINTS
                          or any(abs(out[x]) > TTFT_FLAG_PCT for x in ("ttft_mean_pct", "ttft_p50_pct", "ttft_p90_pct",
                                                                        "ttft_p99_pct")))
    return out


# ---- per request --------------------------------------------------------------------------------

def match_requests(report, records) -> np.ndarray:
    """For each Dynamo record, the trace index of its request (-1 when none): keyed by arrival time
    (ms, to 1 us), prompt and output length. Requests with one key (identical rows: the conversation
    trace has one such pair) are paired in the order each simulator admitted them."""
    keys = {}
    arr_ms = np.round(report.arrival_s * 1e3, 3)
    for i, (a, L, O) in enumerate(zip(arr_ms.tolist(), report.prompt_tokens.tolist(),
                                      np.asarray(report.output_tokens).tolist())):
        keys.setdefault((a, L, O), []).append(i)
    groups = {}
    for j, rec in enumerate(records):
        key = (round(rec["arrival_time_ms"], 3), rec["input_length"], max(rec["requested_output_length"], 1))
        groups.setdefault(key, []).append(j)
    idx = np.full(len(records), -1, dtype=np.int64)
    for key, js in groups.items():
        ks = keys.get(key, [])
        if len(js) > 1:
            inf = float("inf")
            js = sorted(js, key=lambda j: (records[j]["first_admit_ms"] if records[j]["first_admit_ms"] is not None
                                           else inf, j))
            ks = sorted(ks, key=lambda i: (inf if math.isnan(report.scheduled_s[i]) else report.scheduled_s[i], i))
        for j, i in zip(js, ks):
            idx[j] = i
    return idx


def per_request(report, records) -> dict:
    """Matched requests' first-admission hits and first-token times, kvreplay vs Dynamo."""
    idx = match_requests(report, records)
    ok = (idx >= 0) & np.array([r["terminal_status"] == "completed" for r in records])
    ok &= np.array([report.finished[i] if i >= 0 else False for i in idx])
    recs = [r for r, m in zip(records, ok) if m]
    ti = idx[ok]
    d_hit = np.array([r["admission_history"][0]["reused_input_tokens"] for r in recs], dtype=np.int64)
    k_hit = report.hit_tokens[ti]
    d_ft = np.array([r["first_token_ms"] for r in recs]) / 1e3
    k_ft = report.first_token_s[ti]
    d_adm = np.array([r["first_admit_ms"] for r in recs]) / 1e3
    k_adm = report.scheduled_s[ti]
    d_ttft = np.array([r["ttft_ms"] for r in recs]) / 1e3
    k_ttft = report.ttft_s[ti]
    dft = k_ft - d_ft
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(k_ttft - d_ttft) / d_ttft
    hit_diff = np.flatnonzero(k_hit != d_hit)
    first_hit_diff = int(ti[hit_diff[np.argmin(ti[hit_diff])]]) if hit_diff.size else None
    first_ft_diff = None
    off = np.flatnonzero(np.abs(dft) > 1e-6)
    if off.size:
        first_ft_diff = int(ti[off[np.argmin(d_adm[off])]])  # the earliest admitted one that differs
    return {
        "matched": int(ok.sum()), "records": len(records),
        "same_hit": int((k_hit == d_hit).sum()), "hit_token_diff_sum": int((k_hit - d_hit).sum()),
        "hit_more": int((k_hit > d_hit).sum()), "hit_less": int((k_hit < d_hit).sum()),
        "first_token_exact_1us": int((np.abs(dft) <= 1e-6).sum()),
        "first_token_within_1ms": int((np.abs(dft) <= 1e-3).sum()),
        "first_token_abs_diff_s": {"median": float(np.median(np.abs(dft))) if dft.size else float("nan"),
                                    "p99": float(np.quantile(np.abs(dft), 0.99)) if dft.size else float("nan"),
                                    "max": float(np.abs(dft).max()) if dft.size else float("nan")},
        "first_token_mean_diff_s": float(dft.mean()) if dft.size else float("nan"),
        "admit_exact_1us": int((np.abs(k_adm - d_adm) <= 1e-6).sum()),
        "ttft_rel_diff_over_3pct": int((rel > 0.03).sum()),
        "first_request_with_other_hit": first_hit_diff,
        "first_admitted_request_with_other_first_token": first_ft_diff,
        "_arrays": {"trace_index": ti, "k_hit": k_hit, "d_hit": d_hit, "k_first_token_s": k_ft,
                    "d_first_token_s": d_ft, "k_admit_s": k_adm, "d_admit_s": d_adm},
    }


# ---- the run ------------------------------------------------------------------------------------

def run_config(trace_path, trace, capacity, speedup, profile, repeat, have_dynamo, per_request_dir, quiet_wait,
               workers=1, router="round_robin"):
    row = {"trace": Path(trace_path).name, "capacity": capacity, "speedup": speedup, "workers": workers,
           "router": router}
    # kvreplay: the first call in the process is "cold" (numba compiles or loads its cache), the rest warm
    cold = {}
    if not getattr(run_config, "_warmed", False):
        rep, w, c = timed(lambda: run_kvreplay(trace, capacity, speedup, profile, workers, router))
        cold = {"wall_s": w, "cpu_s": c}
        run_config._warmed = True
    else:
        rep = run_kvreplay(trace, capacity, speedup, profile, workers, router)

    def k_once():
        _, w, c = timed(lambda: run_kvreplay(trace, capacity, speedup, profile, workers, router))
        return w, c

    krec = measure(k_once, repeat, quiet_wait=quiet_wait)
    row["kvreplay"] = kvreplay_figures(rep)
    row["kvreplay_time"] = {**summary(krec), "cold_first_call": cold or None}
    if not have_dynamo:
        return row
    # Dynamo: one run with per-request capture (also its warm-up), then `repeat` timed runs without
    drep, dw, dc = timed(lambda: run_dynamo(trace_path, capacity, speedup, profile, capture=True,
                                            workers=workers, router=router))
    walls_native = []

    def d_once():
        r, w, c = timed(lambda: run_dynamo(trace_path, capacity, speedup, profile, workers=workers,
                                           router=router))
        walls_native.append(r.summary["wall_time_ms"] / 1e3)
        d_once.last = r
        return w, c

    drec = measure(d_once, repeat, quiet_wait=quiet_wait)
    row["dynamo"] = dynamo_figures(d_once.last.summary)
    row["dynamo_time"] = {**summary(drec), "native_wall_time_median_s": statistics.median(walls_native),
                          "first_call_with_capture": {"wall_s": dw, "cpu_s": dc}}
    row["diff"] = differences(row["kvreplay"], row["dynamo"])
    row["speed_ratio_cpu"] = row["dynamo_time"]["cpu_median"] / row["kvreplay_time"]["cpu_median"]
    row["speed_ratio_wall"] = row["dynamo_time"]["wall_median"] / row["kvreplay_time"]["wall_median"]
    pr = per_request(rep, drep.per_request or [])
    arrays = pr.pop("_arrays")
    row["per_request"] = pr
    if per_request_dir:
        os.makedirs(per_request_dir, exist_ok=True)
        name = f"{Path(trace_path).stem}_C{capacity}_x{speedup:g}.npz"
        if workers != 1 or router != "round_robin":
            name = f"{Path(trace_path).stem}_W{workers}_{router}_C{capacity}_x{speedup:g}.npz"
        np.savez(os.path.join(per_request_dir, name), **arrays)
    return row


def fmt(x, nd=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def print_tables(rows, have_dynamo):
    print("\n### Results (TTFT, TPOT in ms; reuse = first-admission hit tokens / prompt tokens)\n")
    if have_dynamo:
        print("| trace | C | speedup | reuse kvr | reuse dyn | Δ pts | TTFT mean kvr | dyn | Δ% | p50 kvr | dyn | Δ% "
              "| p90 kvr | dyn | Δ% | p99 kvr | dyn | Δ% | TPOT p50 kvr | dyn | Δ% | completed kvr/dyn | flag |")
        print("|" + "---|" * 23)
        for r in rows:
            k, d, x = r["kvreplay"], r["dynamo"], r["diff"]
            print(f"| {r['trace']} | {r['capacity']} | {r['speedup']:g} | {k['reuse']:.4f} | {d['reuse']:.4f} | "
                  f"{x['reuse_points']:+.2f} | "
                  + " | ".join(f"{fmt(k[m])} | {fmt(d[m])} | {x[m.replace('_ms', '_pct')]:+.2f}"
                               for m in ("ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms"))
                  + f" | {k['completed']}/{d['completed']} | {'!' if x['flagged'] else ''} |")
        print("\n### Time (s; medians over --repeat runs; kvreplay warm, its first call in the process = cold)\n")
        print("| trace | C | speedup | kvr wall | kvr CPU | kvr cold wall | dyn wall | dyn CPU | dyn wall_time_ms/1e3 "
              "| ratio dyn/kvr (CPU) | ratio (wall) | clean runs kvr/dyn |")
        print("|" + "---|" * 12)
        for r in rows:
            kt, dt = r["kvreplay_time"], r["dynamo_time"]
            cold = kt["cold_first_call"]
            print(f"| {r['trace']} | {r['capacity']} | {r['speedup']:g} | {kt['wall_median']:.3f} | {kt['cpu_median']:.3f} | "
                  f"{cold['wall_s']:.3f} | " if cold else
                  f"| {r['trace']} | {r['capacity']} | {r['speedup']:g} | {kt['wall_median']:.3f} | {kt['cpu_median']:.3f} | - | ",
                  end="")
            print(f"{dt['wall_median']:.3f} | {dt['cpu_median']:.3f} | {dt['native_wall_time_median_s']:.3f} | "
                  f"{r['speed_ratio_cpu']:.1f}x | {r['speed_ratio_wall']:.1f}x | {kt['clean_runs']}/{kt['runs']}, "
                  f"{dt['clean_runs']}/{dt['runs']} |")
        print("\n### Per request (Dynamo records matched to trace rows; first admission)\n")
        print("| trace | C | speedup | matched | same hit | hit more/less | Σ hit Δ tokens | first token = (1 µs) "
              "| within 1 ms | |Δ first token| median / p99 / max s | TTFT off > 3% | first differing hit (trace idx) |")
        print("|" + "---|" * 12)
        for r in rows:
            p = r["per_request"]
            a = p["first_token_abs_diff_s"]
            print(f"| {r['trace']} | {r['capacity']} | {r['speedup']:g} | {p['matched']}/{p['records']} | {p['same_hit']} | "
                  f"{p['hit_more']}/{p['hit_less']} | {p['hit_token_diff_sum']:+d} | {p['first_token_exact_1us']} | "
                  f"{p['first_token_within_1ms']} | {a['median']:.4g} / {a['p99']:.4g} / {a['max']:.4g} | "
                  f"{p['ttft_rel_diff_over_3pct']} | {p['first_request_with_other_hit']} |")
    else:
        print("| trace | C | speedup | reuse | TTFT mean | p50 | p90 | p99 | TPOT p50 | completed | wall s | CPU s |")
        print("|" + "---|" * 12)
        for r in rows:
            k, kt = r["kvreplay"], r["kvreplay_time"]
            print(f"| {r['trace']} | {r['capacity']} | {r['speedup']:g} | {k['reuse']:.4f} | {fmt(k['ttft_mean_ms'])} | "
                  f"{fmt(k['ttft_p50_ms'])} | {fmt(k['ttft_p90_ms'])} | {fmt(k['ttft_p99_ms'])} | {fmt(k['tpot_p50_ms'])} | "
                  f"{k['completed']} | {kt['wall_median']:.3f} | {kt['cpu_median']:.3f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", action="append", default=None, help="Mooncake JSONL (repeatable; default: "
                    "../shared/traces/mooncake/{conversation,synthetic}_trace.jsonl)")
    ap.add_argument("--capacities", default="2000,20000", help="blocks of 512 tokens, comma-separated")
    ap.add_argument("--speedups", default="0.25,1.0", help="arrival speedups (timestamps / X), comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per simulator and configuration (medians)")
    ap.add_argument("--workers", type=int, default=1, help="workers (kvreplay instances), each with C blocks")
    ap.add_argument("--router", choices=sorted(ROUTERS), default="round_robin",
                    help="Dynamo's router_mode; kvreplay's router round-robin / kv-aware")
    ap.add_argument("--profile", default=None, help="Dynamo NPZ profile (default: make_profile() into a temp dir)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write every figure as JSON (- : stdout)")
    ap.add_argument("--per-request", default=None, metavar="DIR", help="save matched per-request arrays (.npz) here")
    ap.add_argument("--quiet-wait", type=float, default=10.0, help="seconds to wait for an idle machine before timing")
    a = ap.parse_args(argv)

    import kvreplay

    traces = [Path(t) for t in (a.trace or TRACES)]
    missing = [str(t) for t in traces if not t.exists()]
    if missing:
        print(f"trace(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    capacities = [int(x) for x in a.capacities.split(",") if x.strip()]
    if a.workers < 1:
        print(f"--workers must be >= 1, got {a.workers}", file=sys.stderr)
        return 2
    speedups = [float(x) for x in a.speedups.split(",") if x.strip()]
    have_dynamo, dyn_info = dynamo_available()
    if not have_dynamo:
        print(f"NOTE: dynamo is not importable ({dyn_info}): only kvreplay runs, nothing is compared. "
              "Install ai-dynamo==1.6.1 and ai-dynamo-runtime==1.6.1 into this environment "
              "(see /tmp/research/dynamo/REPORT.md).", file=sys.stderr)
    tmp = tempfile.TemporaryDirectory(prefix="dynamo_compare_")
    profile = a.profile or make_profile(tmp.name)
    print(f"kvreplay {getattr(kvreplay, '__version__', '?')}, ai-dynamo {dyn_info if have_dynamo else 'missing'}, "
          f"python {platform.python_version()}, profile {profile}, workers {a.workers}, router {a.router}",
          file=sys.stderr)
    rows, loads = [], {}
    for tp in traces:
        trace, lw, lc = timed(lambda: kvreplay.load_trace(str(tp)))
        loads[tp.name] = {"wall_s": lw, "cpu_s": lc, "requests": len(trace)}
        for c in capacities:
            for x in speedups:
                print(f"{tp.name} C={c} x{x:g} ...", file=sys.stderr, flush=True)
                rows.append(run_config(tp, trace, c, x, profile, a.repeat, have_dynamo, a.per_request, a.quiet_wait,
                                       a.workers, a.router))
    if a.workers != 1 or a.router != "round_robin":
        print(f"\n{a.workers} workers of C blocks each, Dynamo router_mode={a.router} "
              f"(kvreplay instances={a.workers}, router={ROUTERS[a.router]!r})")
    print_tables(rows, have_dynamo)
    print("\nkvreplay trace loading (not in the simulate times; Dynamo's times include its own parsing): "
          + ", ".join(f"{k} {v['wall_s']:.2f} s" for k, v in loads.items()))
    if a.json:
        doc = {"kvreplay_version": getattr(kvreplay, "__version__", None), "dynamo": dyn_info if have_dynamo else None,
               "profile": profile, "profile_arrays": {k: v.tolist() for k, v in profile_arrays().items()}
               if not a.profile else None, "block_size": BLOCK_SIZE, "repeat": a.repeat, "workers": a.workers,
               "router": a.router, "kvreplay_router": ROUTERS[a.router], "trace_load": loads,
               "rows": rows, "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
        text = json.dumps(doc, indent=1, default=float)
        if a.json == "-":
            print(text)
        else:
            Path(a.json).write_text(text)
    tmp.cleanup()
    return 0 if have_dynamo else 1


if __name__ == "__main__":
    sys.exit(main())
