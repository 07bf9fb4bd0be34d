"""Fit the polynomial step-time profile (profiles.PolynomialProfile) to your own measurements:
``kvreplay calibrate-profile`` (docs/profiles.md, "Your own measurements: kvreplay
calibrate-profile").

Inputs (``read_steps``), one row per engine step:

- ``csv`` / ``jsonl``: columns named after POLY_VARIABLES (or the ALIASES below: the field names
  of vLLM's per-iteration details) plus the measured time in one of TIME_COLUMNS;
- ``vllm-log``: a vLLM server log with ``--enable-logging-iteration-details``, whose lines read
  ``Iteration(N): A context requests, B context tokens, C generation requests, D generation
  tokens, iteration elapsed time: T ms`` (vllm/v1/engine/core.py ``log_iteration_details``; the
  fields are ``IterationDetails`` of vllm/v1/utils.py);
- ``vllm-bench``: ``vllm bench serve`` / ``benchmarks/benchmark_serving.py`` result JSON
  (``--save-result``; one object, a list of them, or one per line with ``--append-result``),
  turned into approximate steps by ``bench_steps`` (the approximation is written there and
  carried into the result: ``Steps.approximate``).

The fit (``fit_profile``): least squares of the step time on the chosen terms, with every
coefficient >= 0 (Lawson-Hanson active-set NNLS over ``numpy.linalg.lstsq``: ``nnls``), on
columns scaled to a maximum of 1; its error on the rows in-sample and on k held-out folds.

Library code: errors are StepsError (``FILE:LINE: field: message``) or ConfigError naming the
argument; nothing is printed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from ...errors import ConfigError, TraceError
from .profiles import MAX_EXPONENT, POLY_FORMAT, POLY_UNITS, POLY_VARIABLES, PolynomialProfile


class StepsError(TraceError):
    """A file of step measurements (or one of its rows) cannot be used: ``FILE:LINE: field: message``."""


#: The measured time of a step: column name -> seconds per unit.
TIME_COLUMNS = {"step_ms": 1e-3, "step_s": 1.0, "step_us": 1e-6, "elapsed_ms": 1e-3}

#: Other names of the variables: vLLM's IterationDetails / SchedulerIterationDetails fields
#: (vllm/v1/utils.py ``compute_iteration_details``: a request is a context request while it has
#: output no token, so every chunk of a chunked prefill counts; the tokens are those scheduled).
ALIASES = {"num_ctx_tokens": "prefill_tokens", "num_ctx_requests": "prefill_requests",
           "num_generation_requests": "decode_batch"}

#: Columns known and deliberately not used (with the reason, reported in Steps.notes).
IGNORED = {"num_generation_tokens": "decode tokens; equal to decode_batch without speculative decoding",
           "iteration_index": "a step number", "is_dummy": "a flag (dummy rows are refused)",
           "num_encoder_inputs": "encoder inputs (not a variable)",
           "num_encoder_output_tokens": "encoder tokens (not a variable)"}

#: Counts: whole numbers >= 0 in measured rows.
COUNT_VARIABLES = ("prefill_tokens", "prefill_requests", "prefill_context", "decode_batch", "decode_context")

#: The default terms: a per-step constant; the prefill's GEMMs (prefill_tokens); its attention,
#: n x (c + n / 2) pairs for n new tokens after c cached ones (exact for one prefilling request:
#: prefill_tokens^2 and prefill_tokens*prefill_context); a per-decode-request cost (decode_batch:
#: sampling, the LM head, launch per sequence); the decode's KV reads (decode_context).
DEFAULT_TERMS = ("1", "prefill_tokens", "prefill_tokens^2", "prefill_tokens*prefill_context",
                 "decode_batch", "decode_context")

STEP_FORMATS = ("csv", "jsonl", "vllm-log", "vllm-bench")

ITERATION_LINE = re.compile(
    r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
    r"(\d+) generation tokens, iteration elapsed time: ([0-9.eE+-]+) ms( \(dummy\))?")

#: Keys that make a JSON object a benchmark_serving result.
BENCH_KEYS = ("mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms", "median_ttft_ms", "mean_itl_ms", "median_itl_ms")

BENCH_APPROXIMATION = (
    "steps derived from benchmark_serving results, not measured steps. Per result, with "
    "n = completed, isl = total_input_tokens / n, osl = total_output_tokens / n and concurrency B = "
    "max_concurrency (without one, Little's law: request_throughput x mean_e2el_ms / 1000), at most n: "
    "a decode step of B requests at context isl + osl/2 each takes TPOT ({stat}_tpot_ms, else "
    "{stat}_itl_ms); where B <= {prefill_b:g}, a prefill of isl new tokens (1 request, nothing cached) "
    "takes TTFT ({stat}_ttft_ms). TPOT at load includes the prefills interleaved with the decodes and "
    "TTFT includes the client's and server's overheads, so the coefficients price what the benchmark "
    "saw, not separate kernels.")


# ----------------------------------------------------------------------------------------------
# Terms

Term = tuple  # ((variable, exponent), ...) in POLY_VARIABLES order; () is the constant


def parse_terms(spec) -> tuple:
    """Terms from ``"1,prefill_tokens,prefill_tokens^2,decode_context"`` (or a sequence of such
    strings): each a product of ``variable`` or ``variable^k`` (``**k`` too) joined by ``*``;
    ``1`` is the constant. Variables: POLY_VARIABLES. Raises ConfigError naming ``terms``."""
    parts = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [str(p).strip() for p in spec]
    parts = [p for p in parts if p]
    if not parts:
        raise ConfigError(f"terms: none given (e.g. {','.join(DEFAULT_TERMS)})")
    order = list(POLY_VARIABLES)
    terms = []
    for text in parts:
        powers: dict = {}
        if text != "1":
            for factor in text.replace("**", "^").split("*"):
                factor = factor.strip()
                name, _, exp = factor.partition("^")
                name = ALIASES.get(name.strip(), name.strip())
                if name not in POLY_VARIABLES:
                    raise ConfigError(f"terms: {text!r}: unknown variable {name!r} (known: {', '.join(POLY_VARIABLES)}; "
                                      "1 is the constant)")
                try:
                    k = int(exp) if _ else 1  # (a '^' with nothing after it is refused)
                except ValueError:
                    k = -1
                if not 1 <= k <= MAX_EXPONENT:
                    shown = exp if len(exp) < 30 else "a huge number"
                    raise ConfigError(f"terms: {text!r}: the exponent of {name} must be a whole number from 1 to "
                                      f"{MAX_EXPONENT}, got {shown!r}")
                powers[name] = powers.get(name, 0) + k
                if powers[name] > MAX_EXPONENT:
                    raise ConfigError(f"terms: {text!r}: {name}'s power {powers[name]} is more than {MAX_EXPONENT} (a "
                                      "step time's polynomial past it overflows floats)")
        term = tuple(sorted(powers.items(), key=lambda p: order.index(p[0])))
        if term in terms:
            raise ConfigError(f"terms: {text!r} is given twice")
        terms.append(term)
    return tuple(terms)


def _as_terms(terms) -> tuple:
    """parse_terms's input, or terms already parsed (tuples of (variable, exponent))."""
    if terms is None:
        return parse_terms(DEFAULT_TERMS)
    if isinstance(terms, str) or all(isinstance(t, str) for t in terms):
        return parse_terms(terms)
    return parse_terms([term_label(tuple(t)) for t in terms])


def term_label(term: Term) -> str:
    """The --terms spelling of a term: ``1``, ``prefill_tokens^2``, ``prefill_tokens*prefill_context``."""
    if not term:
        return "1"
    return "*".join(var if exp == 1 else f"{var}^{exp}" for var, exp in term)


# ----------------------------------------------------------------------------------------------
# Steps

@dataclass(frozen=True)
class Steps:
    """Measured (or, from benchmark results, derived) steps: one entry per row.

    ``variables``: the POLY_VARIABLES the input gives, float64 arrays; ``seconds``: the step
    times; ``lines``: each row's line in the file; ``approximate``: None for measured steps, else
    how they were derived; ``notes``: what was ignored or assumed."""

    source: str
    format: str
    variables: dict
    seconds: np.ndarray
    lines: np.ndarray
    time_column: str
    approximate: str | None = None
    notes: tuple = ()

    def __len__(self) -> int:
        return int(self.seconds.size)


def read_steps(path, format: str = "auto", *, bench_statistic: str = "mean", prefill_concurrency: float = 1.0) -> Steps:
    """The steps in `path` (see the module docstring for the formats; ``auto`` sniffs). Raises
    StepsError naming the file, line and field of anything it cannot use."""
    path = os.fspath(path)
    if format not in ("auto", *STEP_FORMATS):
        raise ConfigError(f"format: unknown {format!r} (known: auto, {', '.join(STEP_FORMATS)})")
    if bench_statistic not in ("mean", "median"):
        raise ConfigError(f"bench_statistic: must be mean or median, got {bench_statistic!r}")
    if not (isinstance(prefill_concurrency, (int, float)) and prefill_concurrency >= 0):
        raise ConfigError(f"prefill_concurrency: must be a number >= 0, got {prefill_concurrency!r}")
    text = _read_text(path)
    if format == "auto":
        format = sniff(path, text)
    if format == "csv":
        return _from_rows(path, "csv", _csv_rows(path, text))
    if format == "jsonl":
        return _from_rows(path, "jsonl", _jsonl_rows(path, text))
    if format == "vllm-log":
        return _vllm_log(path, text)
    return bench_steps(path, _bench_results(path, text), statistic=bench_statistic,
                       prefill_concurrency=prefill_concurrency)


def _read_text(path: str) -> str:
    from ...files import open_input

    with open_input(path, StepsError, "a file of step measurements") as f:
        try:
            data = f.read()
        except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt gzip stream
            raise StepsError(path, f"truncated or corrupt gzip data ({e})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise StepsError(path, f"not UTF-8 text (byte {e.start})", line) from None


def _is_bench(obj) -> bool:
    return isinstance(obj, dict) and any(k in obj for k in BENCH_KEYS)


def sniff(path: str, text: str) -> str:
    """The format of `text`: benchmark JSON by its keys, JSONL by its first record, a vLLM log by
    its iteration lines, else CSV."""
    stripped = text.lstrip()
    if not stripped:
        raise StepsError(path, "empty: no steps")
    if stripped[0] in "{[":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        if doc is not None:
            if _is_bench(doc) or (isinstance(doc, list) and doc and _is_bench(doc[0])):
                return "vllm-bench"
            raise StepsError(path, "a JSON document that is not a benchmark_serving result (it has none of "
                                   f"{', '.join(BENCH_KEYS)}); steps go one JSON object per line (JSONL), "
                                   "or give --format")
        first = stripped.splitlines()[0]
        try:
            return "vllm-bench" if _is_bench(json.loads(first)) else "jsonl"
        except json.JSONDecodeError:
            return "jsonl"  # the JSONL reader names the bad line
    if ITERATION_LINE.search(text):
        return "vllm-log"
    return "csv"


def _canonical(name: str) -> str:
    name = name.strip().lower()
    return ALIASES.get(name, name)


def _csv_rows(path: str, text: str):
    """(line, names) of the header, then (line, {column: text}) per row."""
    reader = csv.reader(io.StringIO(text))
    header = None
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            _check_header(path, header, reader.line_num)
            yield reader.line_num, header
            continue
        if len(row) != len(header):
            raise StepsError(path, f"{len(row)} fields, the header has {len(header)}", reader.line_num)
        yield reader.line_num, dict(zip(header, row))
    if header is None:
        raise StepsError(path, "empty: no header and no steps")


def _check_header(path, names, line) -> None:
    seen = {}
    for n in names:
        c = _canonical(n)
        if not c:
            raise StepsError(path, "a column without a name", line)
        if c in seen:
            same = f" ({seen[c]} is another name of it)" if seen[c] != n else ""
            raise StepsError(path, f"given twice{same}", line, n)
        seen[c] = n


def _json_objects(path: str, text: str, what: str):
    """(line, object) for each non-blank line of JSON Lines `text`; each must be an object (`what`)."""
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise StepsError(path, f"not JSON: {e.msg} at column {e.colno}", i) from None
        if not isinstance(rec, dict):
            raise StepsError(path, f"must be {what}, got {type(rec).__name__}", i)
        yield i, rec


def _jsonl_rows(path: str, text: str):
    """(line, keys) of the first record, then (line, record) per record."""
    keys = None
    for i, rec in _json_objects(path, text, "a JSON object (one step per line)"):
        if keys is None:
            keys = list(rec)
            _check_header(path, keys, i)
            yield i, keys
        yield i, rec


def _number(path, line, column, value, *, count: bool) -> float:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise StepsError(path, "empty", line, column)
        try:
            value = float(text)
        except ValueError:
            raise StepsError(path, f"must be a number, got {text!r}", line, column) from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StepsError(path, f"must be a number, got {value!r}", line, column)
    value = float(value)
    if not math.isfinite(value):
        raise StepsError(path, f"must be finite, got {value!r}", line, column)
    if count and (value < 0 or value != int(value)):
        raise StepsError(path, f"must be a whole number >= 0, got {value:g}", line, column)
    return value


def _from_rows(path: str, fmt: str, rows) -> Steps:
    """Steps from (line, names) then (line, {name: value}) rows: the names decide the columns."""
    rows = iter(rows)
    first = next(rows, None)
    if first is None:
        raise StepsError(path, "empty: no steps")
    columns, time_name, notes = _columns(path, first[0], first[1], fmt)  # variable -> its name in the file
    values = {v: [] for v in columns}
    lines, times = [], []
    for line, rec in rows:
        row = {}
        for var, name in columns.items():
            if name not in rec:
                raise StepsError(path, "missing (the first row has it)", line, name)
            row[var] = _number(path, line, name, rec[name], count=var in COUNT_VARIABLES)
        if time_name not in rec:
            raise StepsError(path, "missing (the first row has it)", line, time_name)
        t = _number(path, line, time_name, rec[time_name], count=False)
        if t <= 0:
            raise StepsError(path, f"must be > 0, got {t:g}: a step takes time", line, time_name)
        _check_row(path, line, row, columns)
        for var in columns:
            values[var].append(row[var])
        lines.append(line)
        times.append(t * TIME_COLUMNS[_canonical(time_name)])
    if not lines:
        raise StepsError(path, "no steps: a header and no rows")
    variables = {v: np.asarray(values[v], dtype=np.float64) for v in columns}
    if "decode_mean_context" not in variables and {"decode_context", "decode_batch"} <= set(variables):
        b = variables["decode_batch"]
        variables["decode_mean_context"] = np.divide(variables["decode_context"], b, out=np.zeros_like(b), where=b > 0)
    return Steps(path, fmt, variables, np.asarray(times, dtype=np.float64), np.asarray(lines, dtype=np.int64),
                 _canonical(time_name), None, tuple(notes))


def _columns(path, line, names, fmt):
    columns, times, ignored, unknown = {}, [], [], []
    for name in names:
        c = _canonical(name)
        if c in POLY_VARIABLES:
            columns[c] = name
        elif c in TIME_COLUMNS:
            times.append(name)
        elif c in IGNORED:
            ignored.append(f"{name} ({IGNORED[c]})")
        else:
            unknown.append(name)
    where = "header" if fmt == "csv" else "first record"
    if not times:
        raise StepsError(path, f"no step time: name it {' or '.join(TIME_COLUMNS)} (the {where} has "
                               f"{', '.join(names) or 'nothing'})", line)
    if len(times) > 1:
        raise StepsError(path, f"{' and '.join(times)} both give the step time: keep one", line)
    if not columns:
        raise StepsError(path, f"no step variables: name the columns {', '.join(POLY_VARIABLES)} "
                               f"(or {', '.join(ALIASES)}); the {where} has {', '.join(names)}", line)
    notes = []
    if ignored:
        notes.append("ignored: " + "; ".join(ignored))
    if unknown:
        notes.append(f"ignored (not variables): {', '.join(unknown)}")
    return columns, times[0], notes


def _check_row(path, line, row, columns) -> None:
    """A row must describe a step the simulator can have: some work, counts that agree."""
    g = row.get
    work = [v for v in ("prefill_tokens", "prefill_requests", "decode_batch", "decode_context") if v in row]
    if work and all(row[v] == 0 for v in work):
        raise StepsError(path, f"no work in this step ({', '.join(work)} all 0): kvreplay charges an empty step 0 s, "
                               "so it cannot be fitted; drop the row", line, columns[work[0]])
    if "decode_batch" in row and "decode_context" in row:
        if row["decode_context"] < row["decode_batch"]:
            raise StepsError(path, f"{g('decode_context'):g} is less than decode_batch {g('decode_batch'):g}: "
                                   "each decoding request has at least one token of context", line, columns["decode_context"])
    if "prefill_tokens" in row and "prefill_requests" in row:
        if row["prefill_tokens"] < row["prefill_requests"]:
            raise StepsError(path, f"{g('prefill_tokens'):g} is less than prefill_requests {g('prefill_requests'):g}: "
                                   "each prefilling request computes at least one token", line, columns["prefill_tokens"])
        if row["prefill_requests"] == 0 and row["prefill_tokens"] > 0:
            raise StepsError(path, f"0 while prefill_tokens is {g('prefill_tokens'):g}", line, columns["prefill_requests"])
    if g("prefill_context", 0) > 0:
        for v in ("prefill_tokens", "prefill_requests"):
            if row.get(v) == 0:
                raise StepsError(path, f"{g('prefill_context'):g} while {v} is 0: cached context belongs to a "
                                       "prefilling request", line, columns["prefill_context"])
    if "decode_mean_context" in row and "decode_context" in row and "decode_batch" in row:
        b = row["decode_batch"]
        want = row["decode_context"] / b if b else 0.0
        if abs(row["decode_mean_context"] - want) > 1e-6 * max(1.0, want):
            raise StepsError(path, f"{row['decode_mean_context']:g}, but decode_context / decode_batch is {want:g}",
                             line, columns["decode_mean_context"])


def _vllm_log(path: str, text: str) -> Steps:
    lines, times, pr, pt, db = [], [], [], [], []
    dummies = spec = 0
    for i, raw in enumerate(text.splitlines(), 1):
        m = ITERATION_LINE.search(raw)
        if not m:
            continue
        if m.group(7):
            dummies += 1
            continue
        _, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, ms, _ = m.groups()
        ctx_reqs, ctx_tokens, gen_reqs, gen_tokens = int(ctx_reqs), int(ctx_tokens), int(gen_reqs), int(gen_tokens)
        try:
            t = float(ms)
        except ValueError:
            raise StepsError(path, f"not a number of milliseconds: {ms!r}", i, "iteration elapsed time") from None
        if not (math.isfinite(t) and t > 0):
            raise StepsError(path, f"must be > 0 ms, got {ms}", i, "iteration elapsed time")
        row = {"prefill_requests": float(ctx_reqs), "prefill_tokens": float(ctx_tokens), "decode_batch": float(gen_reqs)}
        _check_row(path, i, row, {"prefill_requests": "context requests", "prefill_tokens": "context tokens",
                                  "decode_batch": "generation requests"})
        spec += gen_tokens > gen_reqs
        lines.append(i)
        times.append(t * 1e-3)
        pr.append(ctx_reqs)
        pt.append(ctx_tokens)
        db.append(gen_reqs)
    if not lines:
        raise StepsError(path, "no vLLM iteration lines (\"Iteration(N): A context requests, B context tokens, ...\"): "
                               "start vllm serve with --enable-logging-iteration-details, or give --format")
    notes = ["vLLM's log gives no context lengths: the terms in prefill_context, decode_context and "
             "decode_mean_context cannot be fitted from it",
             "vLLM times the wait for the step's output (vllm/v1/engine/core.py: the timer wraps future.result()): "
             "scheduling and output processing of the step fall outside it"]
    if dummies:
        notes.append(f"{dummies} dummy iterations (data-parallel padding) skipped")
    if spec:
        notes.append(f"{spec} steps output more generation tokens than generation requests (speculative decoding): "
                     "decode_batch counts requests")
    variables = {"prefill_tokens": np.asarray(pt, dtype=np.float64), "prefill_requests": np.asarray(pr, dtype=np.float64),
                 "decode_batch": np.asarray(db, dtype=np.float64)}
    return Steps(path, "vllm-log", variables, np.asarray(times, dtype=np.float64), np.asarray(lines, dtype=np.int64),
                 "iteration elapsed time (ms)", None, tuple(notes))


def _bench_results(path: str, text: str) -> list:
    """(line, result) for each benchmark result in the file: one JSON object, a list of them, or
    one per line (--append-result)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        return [(1, doc)]
    if isinstance(doc, list):
        out = []
        for i, r in enumerate(doc):
            if not isinstance(r, dict):
                raise StepsError(path, f"element {i} must be a JSON object (a benchmark result), got {type(r).__name__}", 1)
            out.append((1, r))
        if not out:
            raise StepsError(path, "an empty list: no benchmark results")
        return out
    if doc is not None:
        raise StepsError(path, f"must be a benchmark result (a JSON object), got {type(doc).__name__}", 1)
    out = list(_json_objects(path, text, "a benchmark result (a JSON object)"))
    if not out:
        raise StepsError(path, "empty: no benchmark results")
    return out


def _bench_number(path, line, rec, key, *, required=True, positive=True):
    if key not in rec or rec[key] is None:
        if required:
            raise StepsError(path, "missing (a benchmark_serving result has it; run with --save-result)", line, key)
        return None
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise StepsError(path, f"must be a finite number, got {v!r}", line, key)
    if positive and v <= 0:
        raise StepsError(path, f"must be > 0, got {v!r}", line, key)
    return float(v)


def bench_steps(path, results, *, statistic: str = "mean", prefill_concurrency: float = 1.0) -> Steps:
    """Approximate steps from benchmark_serving results ``[(line, result dict), ...]``: the rule is
    BENCH_APPROXIMATION (also in Steps.approximate). Field names as vLLM writes them
    (vllm/benchmarks/serve.py and benchmarks/benchmark_serving.py: ``completed``,
    ``total_input_tokens``, ``total_output_tokens``, ``max_concurrency``, ``request_throughput``,
    ``mean_/median_ttft_ms``, ``_tpot_ms``, ``_itl_ms``, ``_e2el_ms``)."""
    path = os.fspath(path)
    cols = {v: [] for v in ("prefill_tokens", "prefill_requests", "prefill_context", "decode_batch",
                            "decode_context", "decode_mean_context")}
    lines, times, notes = [], [], []
    little = []
    for line, rec in results:
        n = _bench_number(path, line, rec, "completed")
        isl = _bench_number(path, line, rec, "total_input_tokens") / n
        osl = _bench_number(path, line, rec, "total_output_tokens") / n
        b = rec.get("max_concurrency")
        if b is not None:
            b = _bench_number(path, line, rec, "max_concurrency")
        else:
            rate = _bench_number(path, line, rec, "request_throughput", required=False)
            e2el = _bench_number(path, line, rec, f"{statistic}_e2el_ms", required=False) or \
                _bench_number(path, line, rec, "mean_e2el_ms", required=False)
            if rate is None or e2el is None:
                raise StepsError(path, "null, and without request_throughput and mean_e2el_ms the concurrency cannot be "
                                       "estimated: rerun with --max-concurrency", line, "max_concurrency")
            b = rate * e2el / 1000.0
            little.append(line)
        b = min(b, n)
        tpot_key = f"{statistic}_tpot_ms" if rec.get(f"{statistic}_tpot_ms") is not None else f"{statistic}_itl_ms"
        if rec.get(tpot_key) is None:
            raise StepsError(path, f"missing, and so is {statistic}_itl_ms (run with --percentile-metrics ttft,tpot,itl)",
                             line, f"{statistic}_tpot_ms")
        tpot = _bench_number(path, line, rec, tpot_key)
        ctx = isl + osl / 2
        _bench_row(cols, prefill_tokens=0, prefill_requests=0, prefill_context=0, decode_batch=b,
                   decode_context=b * ctx, decode_mean_context=ctx)
        lines.append(line)
        times.append(tpot * 1e-3)
        if b <= prefill_concurrency:
            ttft = _bench_number(path, line, rec, f"{statistic}_ttft_ms")
            _bench_row(cols, prefill_tokens=isl, prefill_requests=1, prefill_context=0, decode_batch=0,
                       decode_context=0, decode_mean_context=0)
            lines.append(line)
            times.append(ttft * 1e-3)
    if little:
        notes.append(f"max_concurrency null on line(s) {', '.join(map(str, little[:10]))}: concurrency estimated by "
                     "Little's law (request_throughput x e2el)")
    if not any(cols["prefill_tokens"]):
        notes.append(f"no result at concurrency <= {prefill_concurrency:g}: no prefill steps, so no prefill term can be "
                     "fitted (run the benchmark with --max-concurrency 1 too)")
    approx = BENCH_APPROXIMATION.format(stat=statistic, prefill_b=prefill_concurrency)
    variables = {v: np.asarray(x, dtype=np.float64) for v, x in cols.items()}
    return Steps(path, "vllm-bench", variables, np.asarray(times, dtype=np.float64), np.asarray(lines, dtype=np.int64),
                 f"{statistic}_tpot_ms / {statistic}_ttft_ms", approx, tuple(notes))


def _bench_row(cols, **values) -> None:
    for k, v in values.items():
        cols[k].append(float(v))


# ----------------------------------------------------------------------------------------------
# Non-negative least squares

def nnls(a: np.ndarray, b: np.ndarray, *, max_iter: int | None = None) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0: Lawson and Hanson's active-set method ("Solving Least
    Squares Problems", 1974, ch. 23), each subproblem solved by ``numpy.linalg.lstsq``. Columns
    should be of comparable scale (fit_profile scales them to a maximum of 1)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(np.float64).eps * max(m, n) * max(np.abs(a).sum(axis=0).max(initial=0.0), 1.0)
    max_iter = 3 * n + 10 if max_iter is None else max_iter
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        free = ~passive & (w > tol)
        if not free.any():
            break
        j = int(np.argmax(np.where(free, w, -np.inf)))
        passive[j] = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (s[passive] > tol).all():
                break
            bad = passive & (s <= tol)
            step = x[bad] - s[bad]
            alpha = np.min(np.divide(x[bad], step, out=np.zeros_like(step), where=step > 0))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                s = np.zeros(n)
                break
        x = s
        w = a.T @ (b - a @ x)
    return np.maximum(x, 0.0)


# ----------------------------------------------------------------------------------------------
# The fit

@dataclass(frozen=True)
class FitError:
    """How the fit does on rows: MAPE (percent) and measured/predicted ratios."""

    rows: int
    mape: float
    ratio_median: float
    ratio_min: float
    ratio_max: float

    @staticmethod
    def of(measured: np.ndarray, predicted: np.ndarray) -> "FitError":
        ratio = np.divide(measured, predicted, out=np.full_like(measured, np.inf), where=predicted > 0)
        return FitError(int(measured.size), float(np.mean(np.abs(predicted - measured) / measured) * 100),
                        float(np.median(ratio)), float(ratio.min()), float(ratio.max()))

    def to_dict(self) -> dict:
        return {"rows": self.rows, "mape_percent": self.mape, "ratio_median": self.ratio_median,
                "ratio_min": self.ratio_min, "ratio_max": self.ratio_max}


@dataclass(frozen=True)
class Calibration:
    """A fitted profile: ``terms`` with ``coefs`` in ``unit`` (``document()`` is the JSON
    PolynomialProfile reads), its error in-sample and on held-out folds."""

    steps: Steps
    terms: tuple
    coefs: tuple
    unit: str
    weighting: str
    in_sample: FitError
    held_out: FitError | None
    folds: int
    rank: int
    dropped: tuple = ()
    notes: tuple = ()
    source_text: str | None = None
    predicted: np.ndarray = field(default=None, repr=False, compare=False)

    def source(self) -> str:
        s = self.steps
        text = (f"kvreplay calibrate-profile {os.path.basename(s.source)}: {len(s)} steps ({s.format}), "
                f"non-negative least squares ({self.weighting} error); in-sample MAPE {self.in_sample.mape:.2f}%")
        if self.held_out is not None:
            text += f", {self.folds}-fold held-out MAPE {self.held_out.mape:.2f}%"
        if s.approximate:
            text += ". APPROXIMATE: " + s.approximate
        return f"{self.source_text}. {text}" if self.source_text else text

    def document(self) -> dict:
        """The profile as PolynomialProfile reads it (format kvreplay-step-polynomial)."""
        terms = []
        for term, coef in zip(self.terms, self.coefs):
            t = {"coef": float(coef)}
            t.update({var: exp for var, exp in term})
            terms.append(t)
        return {"format": POLY_FORMAT, "version": 1, "unit": self.unit, "source": self.source(), "terms": terms, "min": 0}

    def profile(self) -> PolynomialProfile:
        return PolynomialProfile(document=self.document())

    def to_dict(self) -> dict:
        s = self.steps
        return {"input": s.source, "format": s.format, "steps": len(s), "time_column": s.time_column,
                "approximate": s.approximate, "unit": self.unit, "weighting": self.weighting,
                "terms": [{"term": term_label(t), "coef": float(c)} for t, c in zip(self.terms, self.coefs)],
                "dropped_terms": [{"term": term_label(t), "why": why} for t, why in self.dropped],
                "rank": self.rank, "in_sample": self.in_sample.to_dict(),
                "held_out": None if self.held_out is None else dict(self.held_out.to_dict(), folds=self.folds),
                "notes": list(s.notes) + list(self.notes)}


def design(variables: dict, terms) -> np.ndarray:
    """The rows x terms matrix: each term's product of variable powers on every row."""
    n = next(iter(variables.values())).size
    cols = []
    for term in terms:
        col = np.ones(n)
        for var, exp in term:
            col = col * variables[var] ** exp
        cols.append(col)
    return np.column_stack(cols) if cols else np.zeros((n, 0))


def _solve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    return nnls(x / scale, y) / scale


def fit_profile(steps: Steps, terms=None, *, unit: str = "ms", relative: bool = False, folds: int = 5,
                seed: int = 0, source: str | None = None) -> Calibration:
    """Fit `terms` (parse_terms's text or tuples; default DEFAULT_TERMS) to `steps` by
    non-negative least squares, in `unit` (s, ms, us). `relative`: minimise the squared relative
    error (each row divided by its measured time) instead of the absolute one. The held-out error
    is `folds`-fold cross-validation (rows shuffled with `seed`; leave-one-out when there are
    fewer rows than folds). Terms whose variable the input lacks, or that are 0 on every row, are
    left out (``dropped``, with the reason): nothing measured them."""
    if unit not in POLY_UNITS:
        raise ConfigError(f"unit: must be one of {', '.join(POLY_UNITS)}, got {unit!r}")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ConfigError(f"folds: must be a whole number >= 2, got {folds!r}")
    terms = _as_terms(terms)
    n = len(steps)
    if n < 2:
        hint = (" (each benchmark result gives one decode step, plus a prefill step at low concurrency: give "
                "several results, e.g. --max-concurrency 1, 4, 16 with --append-result)") if steps.format == "vllm-bench" else ""
        raise StepsError(steps.source, f"{n} step{'s' if n != 1 else ''}: a fit needs at least 2{hint}")
    variables = dict(steps.variables)
    kept, dropped = [], []
    for term in terms:
        missing = [var for var, _ in term if var not in variables]
        if missing:
            dropped.append((term, f"the input has no {', '.join(missing)}"))
            continue
        kept.append(term)
    x_all = design(variables, kept)
    keep = [j for j in range(len(kept)) if np.any(x_all[:, j] != 0)]
    for j in range(len(kept)):
        if j not in keep:
            dropped.append((kept[j], "0 on every row"))
    kept = [kept[j] for j in keep]
    x_all = x_all[:, keep]
    if not kept:
        raise ConfigError(f"terms: none of {', '.join(term_label(t) for t in terms)} can be fitted to {steps.source}: "
                          + "; ".join(f"{term_label(t)}: {why}" for t, why in dropped))
    y = steps.seconds / POLY_UNITS[unit]
    w = 1.0 / y if relative else np.ones_like(y)
    try:
        coefs = _solve(x_all * w[:, None], y * w)
        predicted = x_all @ coefs
        scale = np.abs(x_all).max(axis=0)
        rank = int(np.linalg.matrix_rank(x_all / scale))
    except np.linalg.LinAlgError as e:
        raise ConfigError(f"{steps.source}: the fit of terms (--terms) {', '.join(term_label(t) for t in kept)} found "
                          f"no solution ({e}): their values on these rows are too large or too alike; use lower "
                          "powers or fewer terms") from None
    notes = []
    if rank < len(kept):
        notes.append(f"the rows determine only {rank} of the {len(kept)} terms' coefficients (some terms move together "
                     "on these rows): their split is one of many that fit equally well; vary the batches to separate them")
    if n < len(kept) + 1:
        notes.append(f"{n} rows for {len(kept)} terms: the fit can pass through every row; the held-out error is "
                     "the one to read")
    k = min(folds, n)
    order = np.random.default_rng(seed).permutation(n)
    held = np.empty(n)
    for f in range(k):
        test = order[f::k]
        train = np.setdiff1d(order, test)
        c = _solve(x_all[train] * w[train, None], y[train] * w[train])
        held[test] = x_all[test] @ c
    return Calibration(steps, tuple(kept), tuple(float(c) for c in coefs), unit, "relative" if relative else "absolute",
                       FitError.of(y, predicted), FitError.of(y, held), k, rank, tuple(dropped), tuple(notes),
                       source, predicted)
