"""What sweep() and mrc() return: the dicts they always returned, plus tidy tables.

``SweepResult`` and ``CurveResult`` are dicts (every key and row of the Python API stays as it
was: ``result["results"]``, ``curve["points"]``, ``result["window"]`` as text). On top:

- ``rows()``: one flat dict per result, every column of the schema (``COLUMNS``, documented in
  docs/formats.md, "Output tables"): numbers only numeric (``kv_bytes`` an integer and ``kv_gib`` a
  float), each policy parameter in its own column next to the packed ``params`` label, the trace
  and the window on every row, ``bound`` for the limits (infinite, belady) and ``capacity_kind``
  ("needed" for infinite, whose capacity is the number of blocks it had to hold, not a limit).
- ``to_dict()``: the JSON document (``--json``, ``--output x.json``): the rows above (plus each
  result's ``counters``), and ``window`` as the object a run report has:
  ``{"warmup_requests", "measured_requests", "description"}``.
- ``to_pandas()``, ``to_polars()``, ``to_arrow()``: the rows as a DataFrame or an Arrow table
  (optional libraries: ``pip install 'kvreplay[pandas]'``, ``[polars]``, ``[parquet]``).

Hit rates are fractions in 0..1 (token-weighted: hit tokens / prompt tokens of the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import tables
from ..engine.replay import warmup_count
from ..engine.misses import CAUSE_TEXT
from ..engine.report import window_object
from ..policies.registry import POLICIES

GIB = 2**30

# Policies that are limits to compare against, not caches one could deploy.
BOUNDS = ("infinite", "belady")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "int", "float", "bool" or "str" (tables.KINDS)
    unit: str
    help: str


# Every row of a sweep or mrc table, in order; the policies' parameter columns go after PARAMS_AFTER.
COLUMNS = (
    Column("trace", "str", "-", "the trace: its path (or source name), or the name given to it in a sweep of several"),
    Column("policy", "str", "-", "the policy (mrc: always lru)"),
    Column("params", "str", "-", "every parameter as name=value, ';'-separated (empty when the policy has none)"),
    Column("bound", "bool", "-", "true for infinite and belady: limits to compare against, not deployable policies"),
    Column("capacity_kind", "str", "-", "limit: the cache held at most cache_capacity_blocks; needed: the policy "
           "ignores capacity (infinite) and cache_capacity_blocks is what it needed, every unique block of the trace"),
    Column("cache_capacity_blocks", "int", "blocks", "the cache capacity (see capacity_kind)"),
    Column("kv_bytes", "int", "bytes", "cache_capacity_blocks x bytes per block (with --model or --bytes-per-token; "
           "empty otherwise)"),
    Column("kv_gib", "float", "GiB (2^30 bytes)", "kv_bytes / 2^30"),
    Column("total_hit_tokens", "int", "tokens", "prompt tokens served from the cache, in the window"),
    Column("total_prompt_tokens", "int", "tokens", "prompt tokens of the requests in the window"),
    Column("hit_rate", "float", "fraction 0..1", "total_hit_tokens / total_prompt_tokens (token-weighted; 0 when "
           "the window has no prompt tokens)"),
    Column("final_cache_blocks", "int", "blocks", "blocks resident at the end of the trace"),
    Column("admissions", "int", "blocks", "blocks admitted into the cache, warm-up included"),
    Column("evictions", "int", "blocks", "blocks evicted, warm-up included"),
    Column("oversize_requests", "int", "requests", "requests of the window needing more blocks than the cache "
           "(ceil(input_length / block_size) > cache_capacity_blocks; 0 for infinite)"),
    *(Column(f"miss_{cause}_tokens", "int", "tokens", f"prompt tokens of the window that missed: {text} (empty: "
             "not measured by this replay; docs/metrics.md, \"Why the cache missed\")")
      for cause, text in CAUSE_TEXT.items()),
    Column("block_size", "int", "tokens per block", "the block size of the replay"),
    Column("window", "str", "-", "which requests the figures count, in words"),
    Column("warmup_fraction", "float", "fraction 0..1", "the --warmup-fraction F asked for"),
    Column("warmup_requests", "int", "requests", "floor(F x requests): requests that only warm the cache"),
    Column("measured_requests", "int", "requests", "requests counted (the window)"),
)
#: A sweep of a DRAM tier below a fixed GPU pool (sweep --hbm --dram-sizes) adds these, after hit_rate.
TIER_COLUMNS = (
    Column("dram_blocks", "int", "blocks", "the DRAM tier's size below the cache (0: none); the cache is the GPU pool"),
    Column("hbm_hit_tokens", "int", "tokens", "hit tokens found in the GPU pool"),
    Column("dram_hit_tokens", "int", "tokens", "hit tokens found in the DRAM tier (loaded up)"),
    Column("hbm_hit_rate", "float", "fraction 0..1", "hbm_hit_tokens / total_prompt_tokens"),
    Column("dram_hit_rate", "float", "fraction 0..1", "dram_hit_tokens / total_prompt_tokens"),
)
MISS_COLUMNS = tuple(f"miss_{cause}_tokens" for cause in CAUSE_TEXT)
PARAMS_AFTER = "params"
KINDS = {c.name: c.kind for c in COLUMNS}


def params_label(params: dict) -> str:
    """The packed label of a parameter set: ``small_ratio=0.1;max_freq=3;ghost_freq=0``."""
    return ";".join(f"{k}={v}" for k, v in params.items())


def param_column(name: str) -> str:
    """A parameter's column: its own name, or param_<name> when that is a column already."""
    return f"param_{name}" if name in KINDS else name


def _param_kinds(results: list[dict]) -> dict[str, str]:
    """Parameter columns in order of first appearance, with their kind (from the policies' Params)."""
    kinds: dict[str, str] = {}
    for r in results:
        spec = POLICIES.get(r["policy"])
        declared = {p.name: p.kind for p in spec.params} if spec else {}
        for name, value in r["params"].items():
            kind = declared.get(name, type(value))
            kind = "int" if kind is int else "float" if kind is float else "str"
            column = param_column(name)
            kinds[column] = "float" if {kinds.get(column), kind} == {"int", "float"} else kind
    return kinds


class _Tidy(dict):
    """The shared part of SweepResult and CurveResult."""

    _table = "results"

    def _results(self) -> list[dict]:
        return self[self._table]

    def _context(self, r: dict) -> dict:
        """trace, block_size, warmup_fraction and the window of result `r`."""
        raise NotImplementedError

    def _bytes_per_block(self, bytes_per_block):
        if bytes_per_block is not None:
            return int(bytes_per_block)
        budget = self.get("budget") or {}
        return budget.get("bytes_per_block")

    def columns(self) -> dict[str, str]:
        """Column name -> kind ("int", "float", "bool", "str"), in table order."""
        params = _param_kinds(self._results())
        tiered = any("dram_blocks" in r for r in self._results())
        out = {}
        for c in COLUMNS:
            out[c.name] = c.kind
            if c.name == PARAMS_AFTER:
                out.update(params)
            if c.name == "hit_rate" and tiered:
                out.update({t.name: t.kind for t in TIER_COLUMNS})
        return out

    def rows(self, bytes_per_block: int | None = None) -> list[dict]:
        """The tidy table: one flat dict per result, every column of ``columns()``.

        bytes_per_block: KV bytes of one block, for kv_bytes and kv_gib (default: the
        ``"budget"`` the CLI stores with --model/--bytes-per-token; without either they are None).
        """
        per_block = self._bytes_per_block(bytes_per_block)
        names = list(self.columns())
        out = []
        for r in self._results():
            ctx = self._context(r)
            spec = POLICIES.get(r["policy"])
            params = r.get("params") or {}
            counters = r.get("counters", r)
            cap = r["cache_capacity_blocks"]
            row = {
                "trace": ctx["trace"], "policy": r["policy"], "params": params_label(params),
                **{param_column(k): v for k, v in params.items()},
                "bound": r["policy"] in BOUNDS,
                "capacity_kind": "needed" if spec is not None and spec.capacity == "ignored" else "limit",
                "cache_capacity_blocks": cap,
                "kv_bytes": None if per_block is None else cap * per_block,
                "kv_gib": None if per_block is None else cap * per_block / GIB,
                "total_hit_tokens": r["total_hit_tokens"], "total_prompt_tokens": r["total_prompt_tokens"],
                "hit_rate": r["hit_rate"], "final_cache_blocks": r["final_cache_blocks"],
                "admissions": counters.get("admissions"), "evictions": counters.get("evictions"),
                "oversize_requests": r.get("oversize_requests"),
                **{k: r.get(k) for k in MISS_COLUMNS},
                "block_size": ctx["block_size"], "window": ctx["window"]["description"],
                "warmup_fraction": ctx["warmup_fraction"], "warmup_requests": ctx["window"]["warmup_requests"],
                "measured_requests": ctx["window"]["measured_requests"],
                **{t.name: r.get(t.name) for t in TIER_COLUMNS},
            }
            out.append({name: row.get(name) for name in names})
        return out

    def to_pandas(self, bytes_per_block: int | None = None):
        """The rows as a pandas DataFrame (needs pandas: pip install 'kvreplay[pandas]')."""
        return tables.to_pandas(tables.columns_of(self.rows(bytes_per_block), self.columns()), self.columns())

    def to_polars(self, bytes_per_block: int | None = None):
        """The rows as a polars DataFrame (needs polars: pip install 'kvreplay[polars]')."""
        return tables.to_polars(tables.columns_of(self.rows(bytes_per_block), self.columns()), self.columns())

    def to_arrow(self, bytes_per_block: int | None = None, what: str = "to_arrow()"):
        """The rows as a pyarrow Table; the schema metadata b"kvreplay" holds the JSON document
        without its rows (trace, window, budget when there is one). Needs pyarrow:
        pip install 'kvreplay[parquet]'."""
        return tables.to_arrow(tables.columns_of(self.rows(bytes_per_block), self.columns()), self.columns(),
                               metadata=self._header(), what=what)

    def to_parquet_bytes(self, bytes_per_block: int | None = None, what: str = "a Parquet file") -> bytes:
        """The rows as the bytes of a Parquet file (as to_arrow())."""
        return tables.parquet_bytes(tables.columns_of(self.rows(bytes_per_block), self.columns()), self.columns(),
                                    metadata=self._header(), what=what)

    def to_dict(self, bytes_per_block: int | None = None) -> dict:
        """The JSON document: the rows (with each result's counters, when it has any) and the
        window as ``{"warmup_requests", "measured_requests", "description"}``."""
        doc = self._header()
        rows = self.rows(bytes_per_block)
        for row, r in zip(rows, self._results()):
            if "counters" in r:
                row["counters"] = dict(r["counters"])
        doc[self._table] = rows
        return doc

    def _header(self) -> dict:
        raise NotImplementedError


class SweepResult(_Tidy):
    """What ``sweep()`` returns (see its docstring for the keys), with tidy-table methods."""

    _table = "results"

    def _traces(self) -> dict:
        if "traces" in self:
            return {t["trace"]: t for t in self["traces"]}
        return {None: {"trace": self["trace"], "block_size": self["block_size"], "num_requests": self["num_requests"]}}

    def _context(self, r: dict) -> dict:
        info = self._traces()[r.get("trace") if "traces" in self else None]
        warmup = warmup_count(info["num_requests"], self["warmup_fraction"])
        return {"trace": info["trace"], "block_size": info["block_size"], "warmup_fraction": self["warmup_fraction"],
                "window": window_object(warmup, info["num_requests"])}

    def _header(self) -> dict:
        doc = {k: v for k, v in self.items() if k != "results"}
        f = self["warmup_fraction"]
        if "traces" in self:
            doc["traces"] = [dict(t, window=window_object(warmup_count(t["num_requests"], f), t["num_requests"]))
                             for t in self["traces"]]
        else:
            doc["window"] = window_object(warmup_count(self["num_requests"], f), self["num_requests"])
        return doc


class CurveResult(_Tidy):
    """What ``mrc()`` returns (see its docstring for the keys), with tidy-table methods; every
    row has ``policy`` "lru"."""

    _table = "points"

    def _results(self) -> list[dict]:
        return [dict(p, policy="lru", params={}) for p in self["points"]]

    def _context(self, r: dict) -> dict:
        warmup = warmup_count(self["num_requests"], self["warmup_fraction"])
        return {"trace": self["trace"], "block_size": self["block_size"], "warmup_fraction": self["warmup_fraction"],
                "window": window_object(warmup, self["num_requests"])}

    def _header(self) -> dict:
        doc = {k: v for k, v in self.items() if k != "points"}
        doc["window"] = window_object(warmup_count(self["num_requests"], self["warmup_fraction"]), self["num_requests"])
        return doc
