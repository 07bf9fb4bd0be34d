"""calibrate-profile: fit the JSON polynomial time profile to your own step-time measurements
(the fit is serving/timing/fit.py; docs/profiles.md, "Your own measurements")."""

from __future__ import annotations

import math
import sys
import textwrap

from ..errors import ConfigError
from . import common


def _parser_calibrate(sub) -> None:
    from ..serving.timing.fit import DEFAULT_TERMS, STEP_FORMATS, TIME_COLUMNS

    cp = sub.add_parser("calibrate-profile", help="fit a polynomial step-time profile (JSON, for simulate --time-model) "
                                                  "to your own step measurements or benchmark_serving results")
    cp.add_argument("input", help="steps (CSV or JSONL: one row per engine step, the step variables and "
                                  f"{' or '.join(TIME_COLUMNS)}), a vLLM log with --enable-logging-iteration-details, "
                                  "or vllm bench serve / benchmark_serving.py result JSON")
    cp.add_argument("--output", "-o", required=True, help="the profile to write (JSON, atomically; never the input)")
    cp.add_argument("--format", choices=("auto", *STEP_FORMATS), default="auto", help="input format (default: sniffed)")
    cp.add_argument("--terms", default=",".join(DEFAULT_TERMS),
                    help="comma-separated terms, each 1 or a product of variables with powers, e.g. "
                         "1,prefill_tokens,prefill_tokens^2,decode_context (default: %(default)s)")
    cp.add_argument("--unit", choices=("s", "ms", "us"), default="ms", help="unit of the coefficients (default ms)")
    cp.add_argument("--relative", action="store_true",
                    help="minimise the squared relative error of each step instead of the absolute one")
    cp.add_argument("--folds", type=common.positive_int, default=5,
                    help="held-out error by k-fold cross-validation (default 5; leave-one-out with fewer rows)")
    cp.add_argument("--seed", type=common.non_negative_int, default=0, help="shuffle of the rows into folds (default 0)")
    cp.add_argument("--source", metavar="TEXT", help="where the measurements come from (engine, GPU, model, date): "
                                                      "written into the profile's source")
    cp.add_argument("--bench-statistic", choices=("mean", "median"), default="mean",
                    help="benchmark results: use the mean (default) or median TTFT and TPOT")
    cp.add_argument("--prefill-concurrency", type=float, default=1.0, metavar="B",
                    help="benchmark results: a result's TTFT counts as one prefill step when its concurrency is at "
                         "most B (default 1: at higher load TTFT includes queueing)")
    cp.add_argument("--json", action="store_true", help="print the fit report as JSON instead of a table")


def _cmd_calibrate(args) -> int:
    from ..files import write_atomic
    from ..serving.timing.fit import fit_profile, read_steps

    common.check_output_dir(args.output, inputs=common.inputs_of(args))
    if args.folds < 2:
        raise ConfigError(f"--folds {args.folds}: the held-out error needs at least 2 folds")
    if not (math.isfinite(args.prefill_concurrency) and args.prefill_concurrency >= 0):
        raise ConfigError(f"--prefill-concurrency {args.prefill_concurrency:g}: must be a number >= 0")
    steps = read_steps(args.input, args.format, bench_statistic=args.bench_statistic,
                       prefill_concurrency=args.prefill_concurrency)
    for dest in ("bench_statistic", "prefill_concurrency"):
        common.refuse_unless(args, dest, steps.format == "vllm-bench",
                             f"applies to benchmark results (vllm bench serve JSON); {args.input} holds {steps.format} "
                             "steps")
    try:
        cal = fit_profile(steps, args.terms, unit=args.unit, relative=args.relative, folds=args.folds, seed=args.seed,
                          source=args.source)
    except ConfigError as e:
        text = str(e)
        raise ConfigError("--" + text if text.startswith("terms:") else text) from None
    write_atomic(args.output, common.encode_json(cal.document()))
    if args.json:
        sys.stdout.buffer.write(common.encode_json(dict(cal.to_dict(), output=args.output)))
        return 0
    print(_render(cal, args.output))
    return 0


def _ratio(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.3f}"


def _render(cal, output: str) -> str:
    from ..output.table import format_table
    from ..serving.timing.fit import term_label

    s = cal.steps
    out = []
    if s.approximate:
        out.extend(textwrap.wrap("APPROXIMATE: " + s.approximate, width=100))
        out.append("")
    out.append(f"input      {s.source} ({s.format}): {len(s):,} steps, time from {s.time_column}")
    out.append(f"fit        non-negative least squares, {cal.weighting} error, {len(cal.terms)} terms (rank {cal.rank})")
    out.append(f"profile    {output} (unit {cal.unit}): kvreplay simulate TRACE --time-model {output}")
    out.append("")
    rows = [{"term": term_label(t), "coef": f"{c:.6g}"} for t, c in zip(cal.terms, cal.coefs)]
    rows += [{"term": term_label(t), "coef": f"not fitted: {why}"} for t, why in cal.dropped]
    out.append(format_table(rows, [("term", "term"), ("coef", f"coefficient ({cal.unit})")]))
    out.append("")
    errs = [("in-sample", cal.in_sample)]
    if cal.held_out is not None:
        errs.append((f"{cal.folds}-fold held-out", cal.held_out))
    out.append(format_table(
        [{"what": name, "rows": e.rows, "mape": f"{e.mape:.2f}%", "median": _ratio(e.ratio_median),
          "range": f"{_ratio(e.ratio_min)}-{_ratio(e.ratio_max)}"} for name, e in errs],
        [("what", "error"), ("rows", "rows"), ("mape", "MAPE"), ("median", "measured/predicted median"),
         ("range", "min-max")]))
    for note in list(s.notes) + list(cal.notes):
        out.append(f"note: {note}")
    return "\n".join(out)


PARSERS = [_parser_calibrate]
COMMANDS = {"calibrate-profile": _cmd_calibrate}
