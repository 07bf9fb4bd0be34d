"""What `kvreplay.plan()` returns: the plan's JSON document, with one tidy row per configuration
tried at each load (its verdict and why) as pandas, polars, Arrow or Parquet (`plan -o FILE.csv`
writes the same rows as CSV).

Columns (docs/plan.md): the load, the configuration, the verdict ("meets", "misses", "pruned" or
"skipped") and why, `chosen` for each load's best, the instances and cost, and the run's figures
(empty for pruned and skipped rows, which were not run to the end).
"""

from __future__ import annotations

import hashlib

import numpy as np

from .. import tables

ROW_KINDS = {
    "load_kind": "str", "load": "float", "config": "str", "gpu": "str", "tp": "int", "pp": "int", "tiers": "str", "router": "str",
    "policy": "str", "verdict": "str", "why": "str", "chosen": "bool", "instances": "int",
    "instances_at_low": "int", "instances_at_centre": "int", "instances_at_high": "int", "gpus": "int", "cost_per_hour": "float", "usd_per_million_input": "float",
    "usd_per_million_output": "float", "cache_saved_per_hour": "float", "hit_rate": "float", "ttft_p90_s": "float",
    "tpot_p90_s": "float", "worst_window_ttft_p90_s": "float", "worst_window_tpot_p90_s": "float",
    "worst_window_e2e_p99_s": "float", "binding_objective": "str", "binding_value_s": "float",
    "binding_limit_s": "float", "binding_window_start_s": "float", "binding_window_end_s": "float",
    "binding_requests": "int", "window_s": "float", "judged_requests": "int", "pruned_by": "str",
    "goodput_per_s": "float",
    "attainment": "float", "unserved_requests": "int", "judged_at": "str",
}
_WORST = {"TTFT p90": "worst_window_ttft_p90_s", "TPOT p90": "worst_window_tpot_p90_s",
          "E2E p99": "worst_window_e2e_p99_s"}


def _missing_nan(v):
    """NaN (a percentile with no value, e.g. TPOT of one-token outputs) is a missing value."""
    return None if isinstance(v, float) and v != v else v


class PlanResult(dict):
    """The plan (a dict: slo, loads, runs, ...; see plan()) with tidy-table methods."""

    def rows(self) -> list[dict]:
        out = []
        for block in self["loads"]:
            best = block["best"]
            for r in block["tried"]:
                row = {"load_kind": block["load_kind"], "load": block["load"], **r, "chosen": bool(r.get("chosen"))}
                b = r.get("binding") or {}
                row.update(binding_objective=b.get("objective"), binding_value_s=b.get("value_s"),
                           binding_limit_s=b.get("limit_s"), binding_window_start_s=b.get("window_start_s"),
                           binding_window_end_s=b.get("window_end_s"), binding_requests=b.get("requests"))
                for name, value in (r.get("worst_window_s") or {}).items():
                    row[_WORST[name]] = value
                out.append({k: _missing_nan(row.get(k)) for k in ROW_KINDS})
        return out

    def _columns(self) -> dict:
        return tables.columns_of(self.rows(), ROW_KINDS)

    def _header(self) -> dict:
        return {k: v for k, v in self.items() if k != "loads"}

    def to_pandas(self):
        """One row per configuration tried at each load (needs pandas: pip install 'kvreplay[pandas]')."""
        return tables.to_pandas(self._columns(), ROW_KINDS)

    def to_polars(self):
        """The rows as a polars DataFrame (needs polars: pip install 'kvreplay[polars]')."""
        return tables.to_polars(self._columns(), ROW_KINDS)

    def to_arrow(self, what: str = "to_arrow()"):
        """The rows as a pyarrow Table; schema metadata b"kvreplay" holds the plan without its loads."""
        return tables.to_arrow(self._columns(), ROW_KINDS, metadata=self._header(), what=what)

    def to_parquet_bytes(self, what: str = "a Parquet file") -> bytes:
        return tables.parquet_bytes(self._columns(), ROW_KINDS, metadata=self._header(), what=what)


def trace_digest(trace) -> str:
    """sha256 of the trace's arrays (blocks, lengths, times), the first 32 hex digits: what names
    the plan's cached runs, and what `kvreplay report --plan` checks a plan against."""
    h = hashlib.sha256()
    for a in (trace.offsets, trace.blocks, trace.input_length, trace.output_length, trace.timestamp):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:32]


def load_plan(path: str, trace=None) -> PlanResult:
    """A plan written by `kvreplay plan -o FILE.json`, checked against the plan's schema (a plan is
    untrusted input: plan_schema.py) and, with `trace`, to have been made from this trace (its
    digest), so a report never shows another trace's plan. TraceError(path, what, field) otherwise."""
    from ..errors import TraceError
    from ..files import read_text
    from .plan_schema import check_bytes

    def error(p, message):
        return TraceError(p, message)

    doc = check_bytes(path, read_text(path, error, "a plan (kvreplay plan -o FILE.json)").encode())
    if trace is not None:
        mine = trace_digest(trace)
        if doc["trace_digest"] != mine:
            raise TraceError(path, f"made from another trace, or with another --block-size or format (its trace "
                                   f"digest is {doc['trace_digest']}, this trace's is {mine})", field="trace_digest")
    return PlanResult(doc)
