"""What the host CPU adds to a vLLM server's latency (serving/timing/host.py): the fit of its terms on
measured serving runs, and their error on the runs the fit never saw, by source, GPU and model.

    python benchmarks/calibrate_host.py            # fit, write src/kvreplay/data/host_calibration.json
    python benchmarks/calibrate_host.py --check    # the error tables, from the shipped terms
    python benchmarks/calibrate_host.py --check --host-cpu none   # the same runs, the GPU's steps alone
    python benchmarks/calibrate_host.py --check --bands   # and the share of runs each band covers (3x the time)
    python benchmarks/calibrate_host.py --band-only       # the shipped terms' band again, from the fit's linearisation
    python benchmarks/calibrate_host.py --check --write-prediction   # and ship the prediction band's factors
    python benchmarks/calibrate_host.py --fit-launch      # the kernel launches of a step without a CUDA graph
    python benchmarks/calibrate_host.py --check --only 2026-04-06 --runs runs.csv   # and each run's figures
    python benchmarks/calibrate_host.py --check --only 2026-04-06 --tpot-terms   # and TPOT by the step's terms

**The runs.** NVIDIA aiconfigurator's silicon vLLM serving runs (``systems/silicon_sample.csv`` in
aiconfigurator-core 0.12.0, the same file, byte for byte, in the aisimulate wheels 0.13.0.dev55 and
dev85: calibrate_e2e.py reads it and simulates each run as its benchmark client ran it). Each run is
simulated with the shipped calibrated roofline and the host terms, synchronously or
with async scheduling as its vLLM version scheduled (calibrate_e2e.scheduled_async: from 0.14).

**The fit** (FIT): least absolute relative error of TTFT and TPOT over the fit runs, linear in the
terms around the current ones (each run simulated at them and at a probe of each term whose effect
is not exact; the fixed latency adds to TTFT alone, while the API server's service queues requests
sent together), twice. Each
(GPU, model, weights) group of the fit also gets two factors on its simulated GPU steps (prefill
and mixed steps, decode steps), fitted with the terms and never shipped: what a group's kernels
get wrong in proportion to its GPU work is not put on the host, whose terms do not scale with it
(the fit runs span TP 1-8, so the two separate). The terms are >= 0.

**The band** (band): 200 refits on the fit's runs resampled with replacement within each source,
at the last linearisation; its ends are the refits whose mean effect on the fit's latencies is at
the 5th and 95th percentile, no term of either on the other side of the fit's (the linearisation is kept in benchmarks/.cache/host_fit.pkl;
``--band-only`` recomputes the band from it).

**The prediction band** (prediction, --write-prediction): the 5th and 95th percentile of measured /
simulated TTFT, TPOT and E2E over the runs that follow their protocol (PREDICTION_LEFT_OUT), by which
a run's band widens (host.widen_band); checked leave-one-group-out (interval_table, band_table).

**The launch term** (--fit-launch): the host's kernel launches per layer of a step vLLM runs
without a CUDA graph (models.eager_step), on a grid, the terms and each group's GPU factors refitted
at each value (fit_launch); then the fit again with it in place.

**TPOT by the step's terms** (--check --tpot-terms): each run's TPOT written as the shipped time
model's terms at its load (tpot_terms: a decode step of its B requests at their mean context ISL +
OSL / 2, split into its decode attention and the rest, and the prefills that stall a request's
decode: in the closed loop each of the other B - 1 clients sends one prompt a cycle, (B - 1) x a
lone ISL prefill / (OSL - 1)); each source's measured TPOT is fitted on them, a factor each and a
constant, by least absolute relative error over its runs of one model on the fit's GPU only
(fit_tpot_terms; a source and model with fewer than TPOT_TERMS_MIN_RUNS there is left out), and
that fit's error is set beside the simulation's on the same model's other GPUs: where a factor is far from 1 on runs
the fit never saw as well, that term, not the scheduler, is what misses.

**The check** (--check, and after a fit): every run simulated with the shipped terms, TTFT, TPOT and
end-to-end latency (TTFT + TPOT x (OSL - 1), as the benchmarks define it), measured against
simulated, by source and GPU and by model family; the fit runs are marked.
"""

from __future__ import annotations

import argparse
import copy
import json
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(HERE))
import calibrate_e2e as e2e  # noqa: E402
from calibrate_stats import print_table, ratio_stats  # noqa: E402
from kvreplay.serving.timing.host import TERMS, HostTerms, calibrated, calibration, launch_layer_s  # noqa: E402
from kvreplay.serving.timing.host import band_end as host_band  # noqa: E402

OUT = REPO / "src" / "kvreplay" / "data" / "host_calibration.json"
CACHE = HERE / ".cache"
#: the fit: H100's runs, and what of each it fits: those that follow their benchmark's protocol
#: (calibrate_e2e.py), one synchronous vLLM (0.11: dense Llama-3.1-70B FP8) and one asynchronous
#: (0.18: gpt-oss-120b's MXFP4 MoE), TTFT and TPOT; vLLM 0.12's Qwen3-32B runs (synchronous, bf16,
#: TP 2-8, 8-128 clients), TPOT only: their TTFT follows a client whose burst share is not
#: recorded (calibrate_e2e.py), their TPOT is the steady state's
FIT_GPU = "H100"
FIT_SOURCES = {"2026-04-06": ("ttft", "tpot"), "gpt-oss-120b (MoE), vLLM 0.18.0": ("ttft", "tpot"),
               "gap-analysis (vLLM 0.12)": ("tpot",)}
#: the terms whose effect is simulated at a probe (the fixed latency's is exact: every request's TTFT
#: that much more; the API server's service is not since it queues them, engine_arrivals)
PROBE = {"request_s": 2e-3, "prompt_token_s": 5e-7, "step_s": 2e-3, "step_request_s": 4e-5, "output_request_s": 4e-5}
#: the band: refits on the fit's runs resampled with replacement within each source, and the
#: percentiles of each term over them (band)
BOOTSTRAP, BAND_PERCENTILES, SEED = 200, (5.0, 95.0), 20261207
BAND_RULE = (f"the refits at the {BAND_PERCENTILES[0]:g}th and {BAND_PERCENTILES[1]:g}th percentile of their mean effect "
             f"on the fit's latencies, of {BOOTSTRAP} refits on the fit's runs resampled within each source; no term of "
             "an end on the other side of the fitted one")
GPU_PROBE = 0.1  # a group's GPU factor's probe
#: the host's kernel launches per layer of a step run without a CUDA graph, as shipped (the fit of the
#: other terms and the check take it; --fit-launch fits it, --check --no-launch leaves it out)
LAUNCH = launch_layer_s()
#: --fit-launch's grid (seconds per layer)
LAUNCH_GRID = (0.0, 50e-6, 100e-6, 150e-6, 200e-6, 300e-6, 400e-6, 600e-6)
#: the least mean |relative error| a launch term must take off the refit without it to be shipped
#: (a tenth of a percentage point: less is within what the linearisation's slopes move by themselves)
LAUNCH_EVIDENCE = 1e-3
#: the prediction band: the sources whose measured figures do not follow their benchmark's protocol
#: (their client is not recorded, or their arithmetic does not hold: the tables above), left out of the
#: residual quantiles that widen it: {source (prefix): figures left out}
PREDICTION_LEFT_OUT = {"gap-analysis": ("ttft", "e2e"), "dynamo": ("ttft", "tpot", "e2e"),
                       "gpt-oss-120b (MoE), vLLM 0.11": ("ttft", "tpot", "e2e"),
                       "gpt-oss-120b (MoE), vLLM 0.15": ("ttft", "tpot", "e2e")}
PREDICTION_PERCENTILES = (5.0, 95.0)
FAMILIES = {"Llama-3.1-70B": "Llama 3.1 (dense)", "Llama-3.1-8B": "Llama 3.1 (dense)", "Qwen3-32B": "Qwen3 (dense)",
            "MiniMax-M2.5": "MiniMax-M2.5 (MoE)", "gpt-oss-120b": "gpt-oss (MoE)"}


def in_fit(run) -> bool:
    return run["gpu"] == FIT_GPU and run["source"] in FIT_SOURCES


def role(run) -> str:
    """What the fit saw of a run: "fit (TTFT, TPOT)", "fit (TPOT)", or "held back"."""
    if not in_fit(run):
        return "held back"
    return "fit (" + ", ".join(m.upper() for m in FIT_SOURCES[run["source"]]) + ")"


def group_of(run) -> tuple:
    return run["gpu"], run["model"], run["weights"]


def time_model(run, scale=None):
    """The shipped calibrated roofline of `run`, its GPU steps x `scale` (prefill, decode), or at
    an end of its band (`scale` "low" or "high")."""
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    tm = CalibratedRooflineTimeModel(run["model"], run["gpu"], run["tp"], dtype=run["weights"], kv_dtype=run["kv"])
    if scale in ("low", "high"):
        return tm.at_band(scale)
    if scale is not None:
        tm = copy.copy(tm)
        tm.scale = {"prefill": scale[0], "mixed": scale[0], "decode": scale[1]}
    return tm


def simulate_one(job):
    """(run, terms, scale) -> (TTFT, TPOT) of the run's benchmark, or None when kvreplay refuses it.
    `terms` "low" or "high": the shipped band's end (with `scale` the same end of the GPU's band);
    a dict of TERMS, and launch_layer_s when not the shipped one (LAUNCH)."""
    run, terms, scale = job
    if terms in ("low", "high"):
        host = host_band(calibrated(sync=not run["async"]), terms)
    else:
        host = HostTerms(**{"launch_layer_s": LAUNCH, **terms}, async_scheduling=run["async"])
    try:
        return e2e.benchmark(run, time_model(run, scale), host)
    except Exception:  # a configuration kvreplay refuses (memory): said in the tables, not counted
        return None


def simulate_all(jobs, workers: int):
    if workers <= 1:
        return [simulate_one(j) for j in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(simulate_one, jobs, chunksize=1))


def linear_rows(runs, terms, scales, workers):
    """Each run's TTFT and TPOT at `terms` and `scales` and their slopes in every term and in its
    group's two GPU factors: (base, slopes) with slopes[run] = {variable: (dTTFT, dTPOT)}."""
    jobs = [(r, terms, scales[group_of(r)]) for r in runs]
    for k, d in PROBE.items():
        jobs += [(r, {**terms, k: terms[k] + d}, scales[group_of(r)]) for r in runs]
    for axis in (0, 1):
        for r in runs:
            s = list(scales[group_of(r)])
            s[axis] += GPU_PROBE
            jobs.append((r, terms, tuple(s)))
    out = simulate_all(jobs, workers)
    n = len(runs)
    base = out[:n]
    slopes = []
    for i, r in enumerate(runs):
        if base[i] is None:
            slopes.append(None)
            continue
        row = {"latency_s": (1.0, 0.0)}
        for j, (k, d) in enumerate(PROBE.items()):
            probe = out[(j + 1) * n + i]
            row[k] = tuple((p - b) / d for p, b in zip(probe, base[i]))
        for axis, name in ((0, "gpu_prefill"), (1, "gpu_decode")):
            probe = out[(len(PROBE) + 1 + axis) * n + i]
            row[name] = tuple((p - b) / GPU_PROBE for p, b in zip(probe, base[i]))
        slopes.append(row)
    return base, slopes


def lad_fit(runs, terms, scales, base, slopes):
    """The terms (>= 0) and each group's GPU factors minimising the sum of |measured - simulated| /
    measured of TTFT and TPOT, linearised at `terms`, `scales` (a linear program)."""
    try:
        from scipy.optimize import linprog
    except ImportError:  # (a benchmark's need, not kvreplay's: --check runs without it)
        raise SystemExit("the fit solves a linear program with scipy: pip install scipy") from None

    groups = sorted({group_of(r) for r in runs})
    names = list(TERMS) + [(g, axis) for g in groups for axis in (0, 1)]
    A, y = [], []
    for r, b, sl in zip(runs, base, slopes):
        if b is None:
            continue
        g = group_of(r)
        for m, key in ((0, "ttft_s"), (1, "tpot_s")):
            if key[:4] not in FIT_SOURCES[r["source"]]:
                continue
            measured = r[key]
            row = np.zeros(len(names))
            for j, t in enumerate(TERMS):
                row[j] = sl[t][m] / measured
            row[names.index((g, 0))] = sl["gpu_prefill"][m] / measured
            row[names.index((g, 1))] = sl["gpu_decode"][m] / measured
            # simulated(x) = b + sum(slope x (x - x0)): the error (measured - simulated(x)) / measured
            x0 = np.array([terms[t] for t in TERMS] + [scales[g][a] for g, a in names[len(TERMS):]])
            A.append(row)
            y.append(1.0 - (b[m] - row @ x0 * measured) / measured)
    A, y = np.array(A), np.array(y)
    m, k = A.shape
    # min sum(u + v) s.t. A x - y = u - v, u, v >= 0; terms >= 0, GPU factors in [0.3, 3]
    c = np.concatenate([np.zeros(k), np.ones(2 * m)])
    eq = np.hstack([A, -np.eye(m), np.eye(m)])
    bounds = [(0, None)] * len(TERMS) + [(0.3, 3.0)] * (k - len(TERMS)) + [(0, None)] * (2 * m)
    res = linprog(c, A_eq=eq, b_eq=y, bounds=bounds, method="highs")
    if not res.success:
        raise SystemExit(f"the fit's linear program failed: {res.message}")
    x = res.x[:k]
    fitted = {t: float(x[j]) for j, t in enumerate(TERMS)}
    new_scales = dict(scales)
    for g in groups:
        new_scales[g] = (float(x[names.index((g, 0))]), float(x[names.index((g, 1))]))
    lad_fit.mean_error = float(res.fun) / m  # (the linearised mean |relative error| at the optimum: fit_launch)
    return fitted, new_scales


def band(mine, terms, scales, base, slopes) -> dict:
    """{"low": terms, "high": terms}: two refits of the terms (at the last linearisation, `terms`
    and `scales`) on the fit's runs resampled with replacement within each source, BOOTSTRAP of
    them, so each source keeps its number of runs and weighs by them: the refits whose effect on
    the fit's runs (the mean over their fitted TTFT and TPOT of the linearised change from the fit
    on all of them, relative to the measured) is at the BAND_PERCENTILES, each term taken no
    further in than the fit's (the low end's terms <= the fit's <= the high end's). Each end is one
    set of terms the evidence supports, not each term at its own extreme: the terms trade against
    each other (an output delay per request against the engine's CPU per request), and taking each
    at its own 95th percentile would combine refits no sample supports. (Before 2026-12-07 (2): each
    term's least and greatest over the fit and every source's own fit, whose terms trade against
    their groups' GPU factors too: a term at 0 in one source's fit, a band twice the fit's.)"""
    rng = np.random.default_rng(SEED)
    ok = [i for i in range(len(mine)) if base[i] is not None]
    centre, _ = lad_fit([mine[i] for i in ok], terms, scales, [base[i] for i in ok], [slopes[i] for i in ok])
    rows = [(i, m, key) for i in ok for m, key in ((0, "ttft_s"), (1, "tpot_s"))
            if key[:4] in FIT_SOURCES[mine[i]["source"]]]

    def effect(refit):
        return float(np.mean([sum(slopes[i][t][m] * (refit[t] - centre[t]) for t in TERMS) / mine[i][key]
                              for i, m, key in rows]))

    by_source = {}
    for i in ok:
        by_source.setdefault(mine[i]["source"], []).append(i)
    refits = []
    for _ in range(BOOTSTRAP):
        idx = np.concatenate([rng.choice(v, size=len(v), replace=True) for v in by_source.values()])
        own, _ = lad_fit([mine[i] for i in idx], terms, scales, [base[i] for i in idx], [slopes[i] for i in idx])
        refits.append(own)
    effects = np.array([effect(r) for r in refits])
    order = np.argsort(effects, kind="stable")
    ends = {}
    for end, q in zip(("low", "high"), BAND_PERCENTILES):
        k = order[int(round(q / 100 * (len(order) - 1)))]
        # no term of an end on the other side of the fit's: a term's effect is not the same at
        # every prompt length and load (a refit with no queued delay and more latency is slower
        # on the fit's runs, faster on 60k-token prompts), and each end stays an end everywhere
        side = min if end == "low" else max
        ends[end] = {t: side(refits[k][t], centre[t]) for t in TERMS}
        print(f"band {end}: the refit at the {q:g}th percentile of {len(order)}, its mean effect on the fit's "
              f"latencies {100 * effects[k]:+.2f}% (all: {100 * effects.min():+.2f}% to {100 * effects.max():+.2f}%)")
    return ends


def fit(runs, workers: int, rounds: int = 2):
    mine = [r for r in runs if in_fit(r)]
    terms = {t: 0.0 for t in TERMS}
    scales = {group_of(r): (1.0, 1.0) for r in mine}
    for k in range(rounds):
        t0 = time.time()
        base, slopes = linear_rows(mine, terms, scales, workers)
        at, at_scales = terms, scales
        terms, scales = lad_fit(mine, terms, scales, base, slopes)
        print(f"round {k + 1} ({time.time() - t0:.0f} s): " + ", ".join(f"{t} {v * 1e3:.4g} ms" for t, v in terms.items())
              + "; GPU factors (prefill, decode): " + ", ".join(f"{g[0]} {g[1]} {g[2]} {s[0]:.2f} {s[1]:.2f}"
                                                                for g, s in scales.items()), flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "host_fit.pkl", "wb") as f:  # (to look at the band without the simulations)
        pickle.dump({"runs": mine, "at": at, "at_scales": at_scales, "base": base, "slopes": slopes,
                     "terms": terms, "scales": scales}, f)
    t0 = time.time()
    spread = band(mine, at, at_scales, base, slopes)
    print(f"band: {BOOTSTRAP} refits in {time.time() - t0:.0f} s")
    print("band: " + ", ".join(f"{t} {spread['low'][t] * 1e3:.4g}-{spread['high'][t] * 1e3:.4g} ms" for t in TERMS))
    return terms, scales, len(mine), spread


def predicted(row, figure: str) -> bool:
    """Whether the prediction band's residual quantiles take `row`'s `figure` (PREDICTION_LEFT_OUT)."""
    return not any(row["source"].startswith(k) and figure in v for k, v in PREDICTION_LEFT_OUT.items())


def prediction_quantiles(rows, figure: str, leave_out=None):
    """The PREDICTION_PERCENTILES of measured / simulated `figure` over `rows` that follow their
    protocol (predicted), but those of source-and-GPU group `leave_out`: (low, high), low <= 1 <= high."""
    ratios = [r[figure] for r in rows if predicted(r, figure) and (r["source"], r["gpu"]) != leave_out]
    if not ratios:  # (no other group: the point estimate alone)
        return 1.0, 1.0
    lo, hi = np.percentile(ratios, PREDICTION_PERCENTILES)
    return min(float(lo), 1.0), max(float(hi), 1.0)


def prediction(rows) -> dict:
    """The shipped prediction band's factors: {figure: [low, high]} and how they were derived."""
    out = {m: list(prediction_quantiles(rows, m)) for m in ("ttft", "tpot", "e2e")}
    used = sorted({(r["source"], r["gpu"]) for r in rows if predicted(r, "ttft") or predicted(r, "tpot")})
    out["rule"] = (f"the {PREDICTION_PERCENTILES[0]:g}th and {PREDICTION_PERCENTILES[1]:g}th percentile of measured / "
                   f"simulated (the shipped terms) over {sum(predicted(r, 'ttft') for r in rows)} measured runs' TTFT "
                   f"({len(used)} source and GPU groups, every run that follows its benchmark's protocol); a band end is "
                   "the farther of the parameter band's end and the point estimate x this factor")
    return out


def band_rows(rows, out, n):
    """Each row's parameter band (the runs at both ends) and prediction band (widened by the residual
    quantiles of the other source-and-GPU groups: leave-one-group-out), per figure: covered, width."""
    quantiles = {}
    for i, r in enumerate(rows):
        lo_run, hi_run = out[n + r["i"]], out[2 * n + r["i"]]
        if lo_run is None or hi_run is None:
            continue
        group = (r["source"], r["gpu"])
        if group not in quantiles:
            quantiles[group] = {m: prediction_quantiles(rows, m, group) for m in ("ttft", "tpot", "e2e")}
        ends = {"ttft": (lo_run[0], hi_run[0]), "tpot": (lo_run[1], hi_run[1]),
                "e2e": tuple(e[0] + e[1] * (r["osl"] - 1) for e in (lo_run, hi_run))}
        for m, (a, b) in ends.items():
            lo, hi = min(a, b), max(a, b)
            centre, measured = r[f"sim_{m}"], r[f"measured_{m}"]
            q = quantiles[group][m]
            plo, phi = min(lo, centre * q[0]), max(hi, centre * q[1])
            r[f"band_{m}"] = (lo <= measured <= hi, (hi - lo) / centre, plo <= measured <= phi, (phi - plo) / centre)


#: --tpot-terms: the parts of a run's TPOT (tpot_terms), each given a factor by fit_tpot_terms
TPOT_PARTS = ("decode_rest", "decode_attention", "prefill_share")
#: the least runs on the fit's GPU a source's --tpot-terms fit takes (three per unknown: fewer pin nothing down)
TPOT_TERMS_MIN_RUNS = 3 * (len(TPOT_PARTS) + 1)


def tpot_terms(run) -> dict:
    """The parts of `run`'s TPOT by the shipped time model, seconds (module docstring, "TPOT by the
    step's terms"): the decode step of its B requests at their mean context, its attention and the
    rest (their sum the step's time), and (B - 1) lone ISL-token prefills over OSL - 1 tokens."""
    from kvreplay.serving.timing.models import StepBatch

    tm = time_model(run)
    b = run["concurrency"]
    decode = StepBatch(decode_context=(run["isl"] + run["osl"] // 2,) * b)
    terms = tm.terms(decode)
    step = tm.step_time(decode)
    attention = step * terms["attn_decode"] / sum(terms.values())
    prefill = tm.step_time(StepBatch(prefill_new=(run["isl"],), prefill_cached=(0,)))
    return {"decode_rest": step - attention, "decode_attention": attention,
            "prefill_share": (b - 1) * prefill / max(run["osl"] - 1, 1)}


def fit_tpot_terms(rows) -> dict:
    """The measured TPOT of `rows` (each with "tpot_s" and its tpot_terms under "parts") as
    sum(factor x part) + constant, by least absolute relative error (a linear program):
    {part: factor, "constant_s": seconds, "mean_error": the fit's mean |relative error|}."""
    try:
        from scipy.optimize import linprog
    except ImportError:  # (a benchmark's need, not kvreplay's)
        raise SystemExit("--tpot-terms solves a linear program with scipy: pip install scipy") from None
    measured = np.array([r["tpot_s"] for r in rows])
    A = np.array([[r["parts"][p] for p in TPOT_PARTS] + [1.0] for r in rows]) / measured[:, None]
    m, k = A.shape
    # min sum(u + v) s.t. A x - 1 = u - v, u, v >= 0 (the factors and the constant free)
    res = linprog(np.concatenate([np.zeros(k), np.ones(2 * m)]), A_eq=np.hstack([A, -np.eye(m), np.eye(m)]),
                  b_eq=np.ones(m), bounds=[(None, None)] * k + [(0, None)] * (2 * m), method="highs")
    if not res.success:
        raise SystemExit(f"--tpot-terms: the linear program failed: {res.message}")
    x = res.x[:k]
    return {**{p: float(v) for p, v in zip(TPOT_PARTS, x)}, "constant_s": float(x[-1]), "mean_error": float(res.fun) / m}


def tpot_terms_table(rows) -> dict:
    """--tpot-terms: the parts of every checked row's TPOT; for each source and model with runs on
    the fit's GPU, their fit on those runs (one model and vLLM, the factors its kernels and host
    get), and by GPU that fit's TPOT error beside the simulation's; returns {"source (model)":
    {"fit": ..., GPU: ...}} (the model left out of the name when the source names it)."""
    for r in rows:
        r["parts"] = tpot_terms(r)
    by_source = {}  # (source, model): a source's runs of one model (gap-analysis holds two)
    for r in rows:
        by_source.setdefault((r["source"], r["model"]), {}).setdefault(r["gpu"], []).append(r)
    out, lines = {}, []
    for (source, model), gpus in sorted(by_source.items()):
        source = f"{source} ({model})" if model not in source else source
        if len(gpus.get(FIT_GPU, ())) < TPOT_TERMS_MIN_RUNS:
            continue
        fit = fit_tpot_terms(gpus[FIT_GPU])
        out[source] = {"fit": fit}
        for gpu, v in sorted(gpus.items()):
            fitted = [sum(fit[p] * r["parts"][p] for p in TPOT_PARTS) + fit["constant_s"] for r in v]
            t = out[source][gpu] = {
                "runs": len(v), "fit": float(np.mean([abs(f / r["tpot_s"] - 1) for f, r in zip(fitted, v)])),
                "simulated": float(np.mean([abs(r["sim_tpot"] / r["tpot_s"] - 1) for r in v])),
                "attention": float(np.median([r["parts"]["decode_attention"] / r["sim_tpot"] for r in v]))}
            lines.append([source, gpu, str(len(v)), " ".join(f"{fit[p]:.2f}" for p in TPOT_PARTS)
                          + f" {round(fit['constant_s'] * 1e3, 2) + 0.0:+.2f} ms", f"{100 * t['fit']:.1f}%", f"{100 * t['simulated']:.1f}%",
                          f"{100 * t['attention']:.0f}%"])
    if not out:
        raise SystemExit(f"--tpot-terms: no checked source has {TPOT_TERMS_MIN_RUNS} runs on {FIT_GPU}, the fit's GPU "
                         "(see --only)")
    print_table(f"TPOT as the time model's terms: each source and model's factors ({', '.join(TPOT_PARTS)}, constant) fitted on its "
                f"{FIT_GPU} runs (least absolute relative error), that fit's TPOT error by GPU beside the simulation's",
                (("source", False), ("GPU", False), ("runs", True), (f"factors (fitted on {FIT_GPU})", False),
                 ("TPOT error, the terms' fit", True), ("TPOT error, simulated", True),
                 ("decode attention / simulated TPOT, median", True)), lines)
    return out


RUN_COLUMNS = ("id", "source", "gpu", "model", "weights", "tp", "concurrency", "isl", "osl", "role",
               "measured_ttft", "sim_ttft", "ttft", "measured_tpot", "sim_tpot", "tpot", "measured_e2e", "sim_e2e", "e2e")


def write_runs(rows, path: Path) -> None:
    """Each checked run's measured and simulated figures (seconds) and measured / simulated, one CSV
    row a run (--runs), written whole or not at all."""
    import csv
    import io
    import os
    import tempfile

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RUN_COLUMNS)
    for r in rows:
        r = {**r, "role": role(r)}
        w.writerow([f"{r[c]:.6g}" if isinstance(r[c], float) else r[c] for c in RUN_COLUMNS])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def check(runs, terms, workers: int, bands: bool = False) -> dict:
    """Every run at `terms` (GPU factors 1): the error tables, and {group: stats}. With `bands`,
    also each run at both ends of its band: the share of runs whose measured TTFT, TPOT and E2E the
    parameter band covers, and the prediction band (band_rows), and their median widths."""
    jobs = [(r, terms, None) for r in runs]
    if bands:
        jobs += [(r, end, end) for end in ("low", "high") for r in runs]
    out = simulate_all(jobs, workers)
    n = len(runs)
    rows = []
    for i, (r, o) in enumerate(zip(runs, out[:n])):
        if o is None:
            continue
        ttft, tpot = o
        e2e_measured = r["ttft_s"] + r["tpot_s"] * (r["osl"] - 1)
        e2e_simulated = ttft + tpot * (r["osl"] - 1)
        rows.append({**r, "i": i, "ttft": r["ttft_s"] / ttft, "tpot": r["tpot_s"] / tpot, "e2e": e2e_measured / e2e_simulated,
                     "sim_ttft": ttft, "sim_tpot": tpot, "sim_e2e": e2e_simulated, "measured_ttft": r["ttft_s"],
                     "measured_tpot": r["tpot_s"], "measured_e2e": e2e_measured})
    refused = len(runs) - len(rows)
    tables = {}
    for title, key in (("by source and GPU", lambda r: (r["source"], r["gpu"], role(r))),
                       ("by model family and GPU", lambda r: (FAMILIES.get(r["model"], r["model"]), r["gpu"], role(r)))):
        groups = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
        stats = {k: {m: ratio_stats([r[m] for r in v]) for m in ("ttft", "tpot", "e2e")} for k, v in sorted(groups.items())}

        def cells(k, s):
            t = s["ttft"]
            return [k[0], str(t["cases"]), k[1], k[2], f"{100 * t['mape']:.1f}%",
                    f"{t['median_ratio']:.2f} [{t['band'][0]:.2f}-{t['band'][1]:.2f}]", f"{100 * s['tpot']['mape']:.1f}%",
                    f"{100 * s['e2e']['mape']:.1f}%"]

        print_table(f"host terms on the measured runs, {title} (runs kvreplay refused: {refused})",
                    (("group", False), ("runs", True), ("GPU", False), ("", False), ("TTFT error", True),
                     ("TTFT measured / simulated, median [5-95%]", False), ("TPOT error", True), ("E2E error", True)),
                    (cells(k, s) for k, s in stats.items()))
        tables[title] = {" / ".join(k): {m: v["mape"] for m, v in s.items()} for k, s in stats.items()}
    tables["prediction"] = prediction(rows)
    print("prediction band factors (measured / simulated, "
          f"{PREDICTION_PERCENTILES[0]:g}th-{PREDICTION_PERCENTILES[1]:g}th percentile): "
          + ", ".join(f"{m.upper()} {tables['prediction'][m][0]:.2f}-{tables['prediction'][m][1]:.2f}"
                      for m in ("ttft", "tpot", "e2e")))
    tables["interval"] = interval_table(rows)
    if bands:
        band_rows(rows, out, n)
        tables["band"] = band_table(rows)
    tables["rows"] = rows
    held = [r for r in rows if not in_fit(r)]
    tables["held back"] = {m: ratio_stats([r[m] for r in held])["mape"] for m in ("ttft", "tpot", "e2e")} if held else {}
    return tables


def interval_table(rows) -> dict:
    """The prediction interval alone (the point estimate x the 5th / 95th percentile of measured /
    simulated over the other source-and-GPU groups; the shipped band is never narrower): by source
    and GPU, each figure's share of runs it covers and its width relative to the point estimate."""
    groups = {}
    for r in rows:
        groups.setdefault((r["source"], r["gpu"]), []).append(r)
    out = {}
    for g, v in sorted(groups.items()):
        out[g] = {}
        for m in ("ttft", "tpot", "e2e"):
            q = prediction_quantiles(rows, m, g)
            out[g][m] = [float(np.mean([q[0] <= r[m] <= q[1] for r in v])), q[1] - q[0]]
    protocol = {m: [r for r in rows if predicted(r, m)] for m in ("ttft", "tpot", "e2e")}
    everything = {m: [float(np.mean([x[m][0] for g, x in out.items() for _ in groups[g] if predicted(groups[g][0], m)]))]
                  for m in ("ttft", "tpot", "e2e")}
    print_table("the prediction interval (leave-one-group-out: each source and GPU covered by the other groups' 5th-95th "
                "percentile of measured / simulated): share of runs covered (width / point estimate)",
                (("source", False), ("GPU", False), ("runs", True), ("TTFT", False), ("TPOT", False), ("E2E", False)),
                [[g[0], g[1], str(len(v))] + [f"{100 * out[g][m][0]:.0f}% (x{out[g][m][1]:.2f})" for m in ("ttft", "tpot", "e2e")]
                 for g, v in sorted(groups.items())]
                + [["all that follow their protocol", "", str(len(protocol["ttft"]))]
                   + [f"{100 * everything[m][0]:.0f}%" for m in ("ttft", "tpot", "e2e")]])
    return {" / ".join(g): v for g, v in out.items()}


def band_table(rows) -> dict:
    """The coverage table: by source and GPU, each figure's share covered and median width relative
    to the point estimate, parameter band -> prediction band."""
    covered = {}
    for r in rows:
        if "band_ttft" in r:
            covered.setdefault((r["source"], r["gpu"]), []).append(r)
    everything = [r for v in covered.values() for r in v]

    def cell(v, m):
        b = [r[f"band_{m}"] for r in v]
        return (f"{100 * np.mean([x[0] for x in b]):.0f}% -> {100 * np.mean([x[2] for x in b]):.0f}% "
                f"(x{np.median([x[1] for x in b]):.2f} -> x{np.median([x[3] for x in b]):.2f})")

    print_table("the band (each run at both ends of its GPU steps' measured / predicted band and of the host terms' "
                "band), then the prediction band (the farther of those ends and the point estimate x the 5th / 95th "
                "percentile of measured / simulated over the other source-and-GPU groups): share of runs covered, "
                "parameter -> prediction, (median width / point estimate)",
                (("source", False), ("GPU", False), ("runs", True), ("TTFT covered (width)", False),
                 ("TPOT covered (width)", False), ("E2E covered (width)", False)),
                [[k[0], k[1], str(len(v))] + [cell(v, m) for m in ("ttft", "tpot", "e2e")] for k, v in sorted(covered.items())]
                + [["all that follow their protocol", "", str(sum(predicted(r, "ttft") for r in everything))]
                   + [cell([r for r in everything if predicted(r, m)], m) for m in ("ttft", "tpot", "e2e")]])
    covered[("all that follow their protocol", "")] = [r for r in everything if predicted(r, "ttft")]
    return {" / ".join(k): {m: [float(np.mean([r[f"band_{m}"][j] for r in v])) for j in (0, 2)]
                            + [float(np.median([r[f"band_{m}"][j] for r in v])) for j in (1, 3)]
                            for m in ("ttft", "tpot", "e2e")} for k, v in covered.items()}


def kept_fit() -> dict | None:
    """What the last fit kept (benchmarks/.cache/host_fit.pkl: its runs, linearisation and terms), or None."""
    try:
        with open(CACHE / "host_fit.pkl", "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


def fit_of(kept: dict, terms: dict) -> bool:
    """Whether `kept` is the fit that gave `terms`."""
    return all(abs(kept["terms"][t] - terms[t]) <= 1e-15 for t in TERMS)


def kept_linearisation(mine, workers: int):
    """The linearisation the shipped terms were fitted at (benchmarks/.cache/host_fit.pkl, which the
    fit keeps): (at, at_scales, slopes); when it is missing or not the shipped terms' fit, one is
    computed at the shipped terms (GPU factors 1): 8 simulations a run."""
    shipped = {k: float(calibration()["terms"][k]) for k in TERMS}
    kept = kept_fit()
    if kept is not None and [r["id"] for r in kept["runs"]] == [r["id"] for r in mine] and fit_of(kept, shipped):
        return kept["at"], kept["at_scales"], kept["slopes"]
    scales = {group_of(r): (1.0, 1.0) for r in mine}
    _, slopes = linear_rows(mine, shipped, scales, workers)
    return shipped, scales, slopes


def launch_verdict(grid, scores) -> tuple[float, bool]:
    """(the grid's least, whether it is a fit): not at the grid's end (grid[0] is 0, no launches),
    and LAUNCH_EVIDENCE better than no launches; else the runs do not pin the launches down."""
    best = int(np.argmin(scores))
    return float(grid[best]), bool(best < len(grid) - 1 and scores[0] - scores[best] > LAUNCH_EVIDENCE)


def fit_launch(runs, workers: int) -> dict:
    """The host's kernel launches per layer of an eager step (models.eager_step), fitted with the
    other terms: at each value of LAUNCH_GRID, the fit's runs (every one of FIT, TTFT and TPOT as the
    fit takes them) are simulated at the linearisation the shipped terms were fitted at with the
    launches in place, and the terms and each group's two GPU factors refitted on them (lad_fit, the
    slopes kept: the launches change which steps bind, not how a term moves a latency); the value
    whose refit leaves the least mean |relative error| is the fit, if it takes LAUNCH_EVIDENCE off the
refit without launches (else 0 is shipped: the runs do not pin the launches down). The GPU factors are what makes
    this a fit of the launches: without them (the other terms fixed, as before 2026-12-07 (5)) the
    launches stood in for gpt-oss-120b's slow MXFP4 prefill and the least was the grid's end. A
    least at the grid's largest value is still not a fit: then 0 is shipped, the grid recorded. The
    terms are then refitted with the launches in place (python benchmarks/calibrate_host.py)."""
    mine = [r for r in runs if in_fit(r)]
    at, at_scales, slopes = kept_linearisation(mine, workers)
    grid = list(LAUNCH_GRID)
    jobs = [(r, {**at, "launch_layer_s": v}, at_scales[group_of(r)]) for v in grid for r in mine]
    out = simulate_all(jobs, workers)
    scores, refits = [], []
    for j, v in enumerate(grid):
        base = out[j * len(mine):(j + 1) * len(mine)]
        ok = [i for i, b in enumerate(base) if b is not None and slopes[i] is not None]
        terms, scales = lad_fit([mine[i] for i in ok], at, at_scales, [base[i] for i in ok], [slopes[i] for i in ok])
        scores.append(lad_fit.mean_error)
        refits.append((terms, scales))
        print(f"launch {v * 1e6:.1f} us a layer: the refit's mean |error| {100 * scores[-1]:.3f}%; "
              + ", ".join(f"{t} {x * 1e3:.4g} ms" for t, x in terms.items()) + "; GPU factors "
              + ", ".join(f"{g[1]} {s[0]:.2f} {s[1]:.2f}" for g, s in scales.items()), flush=True)
    best, pinned = launch_verdict(grid, scores)
    return {"layer_s": float(best) if pinned else 0.0, "least_on_grid_s": float(best), "pinned": pinned,
            "grid": {f"{v * 1e6:.2f} us": s for v, s in zip(grid, scores)},
            "method": "least mean absolute relative error of the fit's TTFT and TPOT, the terms and each group's two GPU "
                      "factors refitted at each value of the grid (linearised at the shipped terms' fit); applied to steps "
                      "of more tokens than vLLM's largest CUDA graph (the capture sizes of the run's max_num_seqs; every "
                      "step under --enforce-eager)"}


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only the error tables, from the shipped terms")
    ap.add_argument("--jobs", type=int, default=2, help="processes simulating runs (default 2)")
    ap.add_argument("--only", default=None,
                    help="check only the runs whose source contains this text (or any of these, comma-separated)")
    ap.add_argument("--bands", action="store_true", help="also the share of runs each band covers (3x the time)")
    ap.add_argument("--band-only", action="store_true",
                    help="recompute the shipped terms' band from the last fit's linearisation (benchmarks/.cache/host_fit.pkl)")
    ap.add_argument("--no-launch", action="store_true",
                    help="with --check: the shipped terms without the kernel-launch term of eager steps (before it)")
    ap.add_argument("--fit-launch", action="store_true",
                    help="fit only the kernel launches per layer of an eager step (the other terms as shipped), write it")
    ap.add_argument("--write-prediction", action="store_true",
                    help="with --check: write the prediction band's residual quantiles into the shipped calibration")
    ap.add_argument("--runs", type=Path, default=None, metavar="CSV",
                    help="with --check: also write each run's measured and simulated TTFT, TPOT and E2E (seconds) to CSV")
    ap.add_argument("--tpot-terms", action="store_true",
                    help=f"with --check: each run's TPOT as the time model's terms (decode attention, the rest of the "
                         f"decode step, the prefills' share), fitted on each source's {FIT_GPU} runs; that fit's error "
                         "by GPU beside the simulation's")
    ap.add_argument("--host-cpu", choices=("vllm", "none"), default="vllm",
                    help="with --check: the shipped terms as each run's vLLM scheduled (default), or none: no host "
                         "term and synchronous scheduling, the steps alone (kvreplay before the host terms)")
    return ap


def refuse(ap: argparse.ArgumentParser, args) -> None:
    """Each combination of options that cannot run, refused before any run is simulated."""
    if args.host_cpu == "none" and (not args.check or args.bands):
        ap.error("--host-cpu none needs --check and no --bands (it checks the steps alone)")
    if args.runs is not None and not args.check:
        ap.error("--runs needs --check (it writes the checked runs)")
    if args.tpot_terms and not args.check:
        ap.error("--tpot-terms needs --check (it splits the checked runs' TPOT)")
    if args.runs is not None and not args.runs.parent.is_dir():
        ap.error(f"--runs: {args.runs.parent} is not a directory")
    checking = (args.check, args.bands, args.only, args.no_launch, args.runs, args.tpot_terms, args.write_prediction,
                args.host_cpu != "vllm")
    if args.band_only and (args.fit_launch or any(checking)):
        ap.error("--band-only recomputes the band alone: no other option")
    if args.fit_launch and any(checking):
        ap.error("--fit-launch fits the launch term over every run and writes it: no --check or its options")
    if args.write_prediction and (not args.check or args.only or args.no_launch or args.host_cpu == "none"):
        ap.error("--write-prediction takes every run at the shipped terms (--check; no --only, --no-launch, --host-cpu none)")


def main(argv=None) -> int:
    ap = arguments()
    args = ap.parse_args(argv)
    refuse(ap, args)
    if args.band_only:
        return band_only()
    from calibrate import Tables, wheel

    t = Tables(wheel())
    runs, left = e2e.silicon_runs(t.silicon())
    print(f"runs: {len(runs)} silicon (left out: {left})")
    if args.host_cpu == "none":
        terms = {**dict.fromkeys(TERMS, 0.0), "launch_layer_s": 0.0}
        runs = [{**r, "async": False} for r in runs]
    elif args.fit_launch:
        return write_launch(runs, args.jobs)
    elif args.check:
        shipped = calibration()["terms"]
        terms = {k: float(shipped[k]) for k in TERMS}
        if args.no_launch:
            terms["launch_layer_s"] = 0.0
    else:
        terms = write_fit(runs, args.jobs)
    if args.only:
        runs = [r for r in runs if any(text in r["source"] for text in args.only.split(","))]
    tables = check(runs, terms, args.jobs, args.bands)
    if args.tpot_terms:
        tables["tpot_terms"] = tpot_terms_table(tables["rows"])
    if args.runs is not None:
        write_runs(tables["rows"], args.runs)
        print(f"wrote {len(tables['rows'])} runs to {args.runs}")
    if args.write_prediction:
        data = json.loads(OUT.read_text())
        data["prediction"] = tables["prediction"]
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote the prediction band into {OUT.relative_to(REPO)}")
    return 0


def write_launch(runs, jobs: int) -> int:
    """`--fit-launch`: the kernel launches per layer of an eager step fitted (fit_launch) and written."""
    data = json.loads(OUT.read_text())
    data["launch"] = fit_launch(runs, jobs)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    launch = data["launch"]
    verdict = "" if launch["pinned"] else (
        f": not pinned down (at the grid's end, or within {100 * LAUNCH_EVIDENCE:g} points of none), 0 shipped")
    print(f"launch: {launch['layer_s'] * 1e6:.2f} us a layer (least on the grid "
          f"{launch['least_on_grid_s'] * 1e6:.2f} us{verdict}); wrote {OUT.relative_to(REPO)}")
    return 0


def write_fit(runs, jobs: int) -> dict:
    """The host terms fitted on `runs` (fit) and written with their band, keeping the launch term's fit and
    the prediction band (their own options); returns the terms."""
    terms, scales, n, spread = fit(runs, jobs)
    data = {
        "_comment": "Written by benchmarks/calibrate_host.py: what the host CPU adds to a vLLM server's latency "
                    "(serving/timing/host.py), fitted on measured serving runs; seconds.",
        "terms": terms,
        "band": spread,
        "fit": {"runs": n, "gpu": FIT_GPU, "sources": {k: list(v) for k, v in FIT_SOURCES.items()},
                "gpu_factors": {" ".join(g): list(s) for g, s in scales.items()},
                "method": "least absolute relative error of TTFT and TPOT, linearised twice; each group's GPU "
                          "steps x two fitted factors (not shipped)",
                "band": BAND_RULE},
        "sources": [{"name": "NVIDIA aiconfigurator silicon serving runs (systems/silicon_sample.csv)",
                     "package": f"aiconfigurator-core=={e2e_wheel_version()} (PyPI)", "license": "Apache-2.0"}],
    }
    kept = json.loads(OUT.read_text())
    data.update({k: kept[k] for k in ("launch", "prediction") if k in kept})
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    calibration.cache_clear()
    print(f"wrote {OUT.relative_to(REPO)}")
    return terms


def band_only() -> int:
    """The band of the shipped terms again, from the linearisation their fit kept (no simulation)."""
    kept = kept_fit()
    if kept is None:
        raise SystemExit(f"--band-only: no {CACHE / 'host_fit.pkl'} (run the fit first)")
    data = json.loads(OUT.read_text())
    if not fit_of(kept, data["terms"]):
        raise SystemExit("--band-only: the kept linearisation is not the shipped terms' fit (run the fit again)")
    data["band"] = band(kept["runs"], kept["at"], kept["at_scales"], kept["base"], kept["slopes"])
    data["fit"]["band"] = BAND_RULE
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print("band: " + ", ".join(f"{t} {data['band']['low'][t] * 1e3:.4g}-{data['band']['high'][t] * 1e3:.4g} ms"
                               for t in TERMS) + f"; wrote {OUT.relative_to(REPO)}")
    return 0


def e2e_wheel_version() -> str:
    from calibrate import WHEEL_VERSION

    return WHEEL_VERSION


if __name__ == "__main__":
    sys.exit(main())
