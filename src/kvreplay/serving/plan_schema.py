"""What a plan document (`kvreplay plan -o FILE.json`) may hold, as msgspec types: `kvreplay report
--plan` and `report_html(plan=...)` check the whole document against them before anything renders,
since a plan is a file people pass around. Every field a report reads has a type and a range (costs
finite and non-negative, counts whole, fractions in [0, 1], names bounded text, verdicts and
objectives from their lists); fields the report does not read may be anything. A document nested
deeper than a plan ever is, is refused before it is decoded.

check_bytes / check_document return the plan as the schema reads it (every field it knows, with
its default where the file has none; fields it does not know dropped), so that nothing a page
shows is read unchecked; they raise TraceError(FILE, what is wrong, field=path.to.field).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal, Optional, Union

import msgspec
import numpy as np
from msgspec import UNSET, Meta, Struct, UnsetType

from ..errors import TraceError

#: a plan nests 7 levels (loads[i].tried[j].binding...); a document deeper than this is refused
MAX_DEPTH = 12

Count = Annotated[int, Meta(ge=0, le=2 ** 53)]
Positive = Annotated[int, Meta(ge=1, le=2 ** 31)]
Money = Annotated[float, Meta(ge=0, le=1e15)]  # USD: finite, never negative
Seconds = Annotated[float, Meta(ge=0, le=1e12)]
Signed = Annotated[float, Meta(ge=-1e15, le=1e15)]
Fraction = Annotated[float, Meta(ge=0, le=1)]
Ratio = Annotated[float, Meta(ge=0, le=1e15)]
Text = Annotated[str, Meta(max_length=4096)]
Objective = Literal["TTFT p90", "TPOT p90", "E2E p99"]
Verdict = Literal["meets", "misses", "unreachable", "pruned", "unfit", "skipped"]


class Binding(Struct):
    objective: Objective
    value_s: Seconds
    limit_s: Seconds
    window_start_s: Signed
    window_end_s: Signed
    requests: Count
    windows_merged: Positive = 1
    ratio: Optional[Ratio] = None
    hit: Optional[Text] = None  # (a floor's: which prefixes it assumed hit)
    judged_at: Optional[Text] = None


class Band(Struct):
    low: Optional[Positive]
    centre: Optional[Positive]
    high: Optional[Positive]


class Warmup(Struct):
    text: Text
    seconds: Optional[Seconds] = None
    spec: Optional[Text] = None


class Configuration(Struct):
    """What names a configuration in a plan: its label, GPU, TP degree and tiers (pp, with its
    default, follows each kind's required fields)."""

    config: Text
    gpu: Text
    tp: Positive
    tiers: Text


class Row(Configuration):
    """One configuration tried at a load (plan_rows.py)."""

    router: Text
    policy: Text
    verdict: Verdict
    why: Text
    pp: Positive = 1
    policy_asked: Optional[Text] = None
    chosen: bool = False
    meets: Optional[bool] = None
    judged_at: Optional[Text] = None
    instances: Optional[Positive] = None
    gpus: Optional[Positive] = None
    missed_at: Optional[Positive] = None
    instances_band: Optional[Band] = None
    instances_at_low: Optional[Positive] = None
    instances_at_centre: Optional[Positive] = None
    instances_at_high: Optional[Positive] = None
    cost_per_hour: Optional[Money] = None
    instance_cost_per_hour: Optional[Money] = None
    usd_per_million_input: Optional[Money] = None
    usd_per_million_output: Optional[Money] = None
    cache_saved_per_hour: Optional[Money] = None
    prefill_seconds_per_token: Optional[Seconds] = None
    price_sources: dict[Text, Text] = {}
    hit_rate: Optional[Fraction] = None
    goodput_per_s: Optional[Ratio] = None
    attainment: Optional[Fraction] = None
    binding: Optional[Binding] = None
    window_s: Optional[Seconds] = None
    window_grouping: Optional[dict[Text, Text]] = None
    worst_window_s: Optional[dict[Objective, Optional[Seconds]]] = None
    judged_requests: Optional[Count] = None
    judged_start_s: Optional[Signed] = None
    warmup: Optional[Warmup] = None
    unserved_requests: Optional[Count] = None
    refused_context: Optional[Count] = None
    rejected: Optional[Count] = None
    ttft_p90_s: Optional[Seconds] = None
    tpot_p90_s: Optional[Seconds] = None
    floor_in_binding_s: Optional[Seconds] = None
    duration_s: Optional[Seconds] = None
    hit_tokens: Optional[Count] = None
    load_kind: Optional[Literal["speedup", "rate", "sessions"]] = None
    load: Optional[Annotated[float, Meta(gt=0, le=1e12)]] = None
    floor: Optional[Binding] = None
    pruned_by: Optional[Text] = None

    def __post_init__(self):
        searched = self.verdict in ("meets", "misses")
        needed = ("instances", "gpus", "cost_per_hour", "hit_rate", "meets", "judged_at", "unserved_requests")
        missing = [k for k in needed if searched and getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.verdict} row needs {', '.join(missing)}")
        if self.chosen and self.verdict != "meets":
            raise ValueError(f"a chosen row must meet the SLOs, not be {self.verdict}")


class Versus(Struct):
    instances: Positive
    cost_per_hour: Money
    gpus_saved: Annotated[int, Meta(ge=-(2 ** 31), le=2 ** 31)]
    saves_per_hour: Optional[Signed]
    ttft_p90_s: Optional[Seconds]
    ttft_p90_with_tiers_s: Optional[Seconds]
    same_instances: bool = False


class TierRow(Struct):
    config: Text
    tiers: Text
    instances: Positive
    meets: bool
    cost_per_hour: Money
    ttft_p90_s: Optional[Seconds] = None
    versus_none: Optional[Versus] = None

    def __post_init__(self):
        if self.meets and self.versus_none is not None and self.versus_none.saves_per_hour is None:
            raise ValueError("a passing tier row needs versus_none.saves_per_hour")


class Probe(Configuration):
    """One instance count tried for a configuration."""

    instances: Positive
    cost_per_hour: Money
    meets: bool
    pp: Positive = 1
    ttft_p90_s: Optional[Seconds] = None
    worst_window_ttft_p90_s: Optional[Seconds] = None


class Counts(Struct):
    meets: Count
    misses: Count
    unreachable: Count
    pruned: Count
    unfit: Count
    skipped: Count


class Skipped(Struct):
    config: Text
    reason: Text


class LoadBlock(Struct):
    load_kind: Literal["speedup", "rate", "sessions"]
    load: Annotated[float, Meta(gt=0, le=1e12)]
    best: Optional[Row]
    counts: Counts
    tried: list[Row]
    probes: list[Probe]
    tier_economics: list[TierRow] = []
    runners_up: list[Row] = []
    skipped: list[Skipped] = []
    closest: Optional[Row] = None
    pruned: Count = 0
    evaluated: Count = 0

    def __post_init__(self):
        if self.best is not None and not self.best.meets:
            raise ValueError("its best does not meet the SLOs")


class SloLimits(Struct, forbid_unknown_fields=True):
    ttft_p90_s: Optional[Annotated[float, Meta(gt=0, le=1e9)]] = None
    tpot_p90_s: Optional[Annotated[float, Meta(gt=0, le=1e9)]] = None
    e2e_p99_s: Optional[Annotated[float, Meta(gt=0, le=1e9)]] = None


class NotReproducible(Struct, forbid_unknown_fields=True):
    not_reproducible: Text


Named = Union[Text, NotReproducible]


class RunOptions(Struct, forbid_unknown_fields=True):
    """The options a report serves the chosen deployment with (plan.RUN_OPTIONS): simulate()'s
    keywords, so nothing else may appear; one not given stays absent (simulate's default)."""

    time_model: Union[Named, UnsetType] = UNSET
    weights_dtype: Union[Text, UnsetType] = UNSET
    kv_dtype: Union[Text, UnsetType] = UNSET
    block_size: Union[Positive, UnsetType] = UNSET
    max_model_len: Union[Positive, UnsetType] = UNSET
    rate_profile: Union[Named, UnsetType] = UNSET
    kv_semantics: Union[Text, UnsetType] = UNSET
    gpu_memory_utilization: Union[Annotated[float, Meta(gt=0, le=1)], UnsetType] = UNSET
    engine_style: Union[Text, UnsetType] = UNSET
    seed: Union[Count, UnsetType] = UNSET
    other: Union[dict[Text, Text], UnsetType] = UNSET


class Violation(Struct):
    config: Text
    load: Annotated[float, Meta(gt=0, le=1e12)]
    load_kind: Literal["speedup", "rate", "sessions"]
    passes_at: Positive
    fails_at: Positive
    band_end: Optional[Text] = None


class KvSemantics(Struct):
    semantics: Text
    text: Text
    hybrid_block_ids_ratio: Optional[Ratio] = None


class Served(Struct):
    sessions: Positive
    meets: bool
    objective: Optional[Text]
    value_s: Optional[Seconds]
    limit_s: Optional[Seconds]


class Capacity(Struct):
    """A chosen deployment's capacity in concurrent sessions (plan --sessions: plan.capacities)."""
    config: Text
    instances: Count
    gpus: Count
    cost_per_hour: Annotated[float, Meta(ge=0, le=1e12)]
    up_to_sessions: Optional[Count]
    served: list[Served]
    text: Text


class Plan(Struct):
    slo: Text
    slo_limits: SloLimits
    judged_at: Literal["pessimistic", "centre"]
    pricing: Text
    loads: Annotated[list[LoadBlock], Meta(min_length=1, max_length=10_000)]
    trace_digest: Annotated[str, Meta(pattern="^[0-9a-f]{32}$")]
    runs: Count
    cache_hits: Count
    disk_hits: Count
    monotonicity_violations: list[Violation]
    model: Union[Text, UnsetType] = UNSET  # (absent: a plan of an older kvreplay, which a report cannot serve)
    warmup_spec: Text = "auto"
    min_window_requests: Positive = 50
    tp_searched: Text = ""
    window_s: Optional[Annotated[float, Meta(gt=0, le=1e12)]] = None
    run_options: RunOptions = msgspec.field(default_factory=RunOptions)
    cache_dir: Optional[Text] = None
    parallel: bool = False
    kv_semantics: Optional[KvSemantics] = None
    calibration_warnings: list[Text] = []
    capacity: list[Capacity] = []  # (plan --sessions)
    arrivals: Optional[Text] = None


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def depth(data: bytes) -> int:
    """How deep the JSON in `data` nests (brackets inside strings not counted)."""
    bare = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    step = (np.isin(bare, (ord("["), ord("{"))).astype(np.int64) - np.isin(bare, (ord("]"), ord("}"))))
    return int(np.cumsum(step).max()) if step.size else 0


def _field(message: str) -> tuple[str, str | None]:
    """msgspec's "what - at `$.loads[0].best.tp`" as ("what", "loads[0].best.tp"); a document that
    is not a plan at all is said so."""
    what, sep, where = message.rpartition(" - at `")
    if where.startswith("key` in `"):  # a mapping's key: "... - at `key` in `$.path`"
        where, what = where.removeprefix("key` in `"), what + " (as a key)"
    field = where.rstrip("`").removeprefix("$.").removeprefix("$") or None if sep else None
    if not sep:
        what = message
    if field is None:
        return f"not a plan written by `kvreplay plan -o FILE.json` ({what})", None
    return what, field


def check_bytes(path: str, data: bytes) -> dict:
    """The plan in `data` (read from `path`) as a dict, once the whole document is checked; a
    TraceError naming `path` and the field otherwise."""
    deep = depth(data)
    if deep > MAX_DEPTH:
        raise TraceError(path, f"nested {deep:,} levels deep; a plan nests at most {MAX_DEPTH}")
    try:
        return _named_files(msgspec.to_builtins(msgspec.json.decode(data, type=Plan)), path)
    except msgspec.ValidationError as e:
        what, field = _field(str(e))
        raise TraceError(path, what, field=field) from None
    except msgspec.DecodeError as e:
        raise TraceError(path, f"not JSON ({e})") from None


def _named_files(doc: dict, where: str) -> dict:
    """A report reads the files a plan's run options name: each must be a regular file (a plan that
    names a device or a pipe would hang the report), or a name that is not a file at all."""
    for key in ("time_model", "rate_profile"):
        name = doc["run_options"].get(key)
        if isinstance(name, str) and os.path.exists(name) and not os.path.isfile(name):
            raise TraceError(where, f"{name} is not a regular file", field=f"run_options.{key}")
    return doc


def check_document(doc, what: str = "plan") -> dict:
    """A plan given as a Python dict (report_html(plan=...)), checked and read as check_bytes
    reads a file."""
    try:
        return _named_files(msgspec.to_builtins(msgspec.json.decode(msgspec.json.encode(doc), type=Plan)), what)
    except (TypeError, msgspec.EncodeError) as e:
        raise TraceError(what, f"not a plan: {e}") from None
    except msgspec.ValidationError as e:
        message, field = _field(str(e))
        raise TraceError(what, message, field=field) from None
    except RecursionError:
        raise TraceError(what, f"nested deeper than a plan ever is (at most {MAX_DEPTH} levels)") from None
