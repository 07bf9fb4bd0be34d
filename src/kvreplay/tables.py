"""Tidy tables: typed columns, turned into pandas, polars, Arrow or Parquet on demand.

A table is a dict column name -> sequence of values (a list or a numpy array), with one kind per
column: "int", "float", "bool" or "str"; None is a missing value. pandas, polars and pyarrow are
optional: each is imported only when asked for, and a missing one raises
MissingDependencyError naming the pip extra that installs it. The column lists (names, kinds,
units) of the sweep, mrc and per-request tables are in docs/formats.md (Output tables).
"""

from __future__ import annotations

import importlib
import json

from .errors import MissingDependencyError

KINDS = ("int", "float", "bool", "str")
EXTRAS = {"pandas": "pandas", "polars": "polars", "pyarrow": "parquet"}


def require(module: str, what: str):
    """Import `module` (pandas, polars or pyarrow) for `what`, or raise MissingDependencyError."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{what} needs {module}, which is not installed: pip install 'kvreplay[{EXTRAS[module]}]'"
        ) from None


def columns_of(rows: list[dict], kinds: dict[str, str]) -> dict[str, list]:
    """Row dicts to columns, in the order of `kinds` (a key a row lacks is None)."""
    return {name: [r.get(name) for r in rows] for name in kinds}


def to_pandas(data: dict, kinds: dict[str, str], what: str = "to_pandas()"):
    """A pandas DataFrame; ints stay int64 (nullable Int64 when a value is missing), missing
    floats are NaN, strings take pandas' default string type."""
    import numpy as np

    pd = require("pandas", what)
    frame = {}
    for name, kind in kinds.items():
        values = data[name]
        if isinstance(values, np.ndarray):
            frame[name] = pd.Series(values, copy=False)
            continue
        missing = any(v is None for v in values)
        dtype = {"int": "Int64" if missing else "int64", "float": "float64",
                 "bool": "boolean" if missing else "bool", "str": None}[kind]
        if kind == "float":
            values = [np.nan if v is None else v for v in values]
        frame[name] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(frame)


def to_polars(data: dict, kinds: dict[str, str], what: str = "to_polars()"):
    """A polars DataFrame with an explicit schema (a missing value is null)."""
    pl = require("polars", what)
    types = {"int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean, "str": pl.String}
    return pl.DataFrame({name: data[name] for name in kinds}, schema={name: types[kind] for name, kind in kinds.items()})


def to_arrow(data: dict, kinds: dict[str, str], metadata: dict | None = None, what: str = "to_arrow()"):
    """A pyarrow Table with an explicit schema; `metadata` (JSON-ready) is stored under the
    schema metadata key b"kvreplay"."""
    pa = require("pyarrow", what)
    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    fields = [pa.field(name, types[kind]) for name, kind in kinds.items()]
    meta = None if metadata is None else {b"kvreplay": json.dumps(metadata, separators=(",", ":")).encode()}
    schema = pa.schema(fields, metadata=meta)
    arrays = [pa.array(data[name], type=types[kind]) for name, kind in kinds.items()]
    return pa.Table.from_arrays(arrays, schema=schema)


def parquet_bytes(data: dict, kinds: dict[str, str], metadata: dict | None = None,
                  what: str = "a Parquet file") -> bytes:
    """The table as the bytes of a Parquet file (write them with kvreplay.files.write_atomic)."""
    pa = require("pyarrow", what)
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(to_arrow(data, kinds, metadata, what=what), sink)
    return sink.getvalue().to_pybytes()
