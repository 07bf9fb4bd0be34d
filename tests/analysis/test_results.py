"""sweep() and mrc() results as tidy tables (analysis/results.py), Report.to_pandas(), and the
schema in docs/formats.md (issue 11 item 5)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

import kvreplay
from kvreplay.analysis.results import COLUMNS, CurveResult, SweepResult

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats.md"

# Block size 4; requests [a b] (L=7), [a b] (L=7), [c] (L=4), [a b] (L=8): 3 unique blocks (tests/analysis/test_mrc.py).
# LRU hit tokens at capacities 1, 2, 3, 10: 0, 7, 15, 15; admissions 7, 5, 3, 3.
# Blocks needed, ceil(L / 4): 2, 2, 1, 2: at capacity 1 three requests are oversize, at 2 none.
REQUESTS = [(["a", "b"], 7), (["a", "b"], 7), (["c"], 4), (["a", "b"], 8)]


@pytest.fixture(scope="module")
def trace():
    return kvreplay.Trace.from_requests(REQUESTS)


def test_mrc_rows(trace):
    curve = kvreplay.mrc(trace, [1, 2, 3, 10], 4)
    assert isinstance(curve, CurveResult) and isinstance(curve, dict)
    rows = curve.rows(bytes_per_block=1000)
    assert [(r["policy"], r["params"], r["bound"], r["capacity_kind"]) for r in rows] == [("lru", "", False, "limit")] * 4
    assert [r["cache_capacity_blocks"] for r in rows] == [1, 2, 3, 10]
    assert [r["kv_bytes"] for r in rows] == [1000, 2000, 3000, 10_000]
    assert [r["kv_gib"] for r in rows] == [c * 1000 / 2**30 for c in (1, 2, 3, 10)]
    assert [r["total_hit_tokens"] for r in rows] == [0, 7, 15, 15]
    assert [r["hit_rate"] for r in rows] == [0, 7 / 26, 15 / 26, 15 / 26]
    assert [r["admissions"] for r in rows] == [7, 5, 3, 3]
    assert [r["evictions"] for r in rows] == [6, 3, 0, 0]
    assert [r["oversize_requests"] for r in rows] == [3, 0, 0, 0]
    assert {(r["trace"], r["block_size"], r["window"], r["warmup_fraction"], r["warmup_requests"], r["measured_requests"])
            for r in rows} == {("<memory>", 4, "whole trace (4 requests)", 0.0, 0, 4)}
    # without a byte budget the byte columns are there, empty
    assert {(r["kv_bytes"], r["kv_gib"]) for r in curve.rows()} == {(None, None)}
    # the Python dict keeps its shape: window as text, points as they were
    assert curve["window"] == "whole trace (4 requests)" and curve["points"][1]["total_hit_tokens"] == 7


def test_sweep_rows_parameters_bounds_and_json(trace):
    result = kvreplay.sweep(trace, [2, 3], ["lru", "clock:bits=2", "infinite", "belady"], 4, warmup_fraction=0.25)
    assert isinstance(result, SweepResult)
    columns = list(result.columns())
    assert columns[:5] == ["trace", "policy", "params", "bits", "admit_bypass"]  # parameters in order of appearance
    assert result.columns()["bits"] == "int"
    rows = result.rows()
    assert [(r["policy"], r["params"], r["bits"], r["admit_bypass"], r["bound"], r["capacity_kind"],
             r["cache_capacity_blocks"]) for r in rows] == [
        ("lru", "", None, None, False, "limit", 2), ("lru", "", None, None, False, "limit", 3),
        ("clock", "bits=2", 2, None, False, "limit", 2), ("clock", "bits=2", 2, None, False, "limit", 3),
        # infinite runs once; its capacity is what it needed, the trace's 3 unique blocks
        ("infinite", "", None, None, True, "needed", 3),
        ("belady", "admit_bypass=0", None, 0, True, "limit", 2), ("belady", "admit_bypass=0", None, 0, True, "limit", 3),
    ]
    # floor(0.25 x 4) = 1 warm-up request; the window's prompt tokens are 7 + 4 + 8 = 19
    assert {(r["warmup_requests"], r["measured_requests"], r["total_prompt_tokens"]) for r in rows} == {(1, 3, 19)}
    doc = result.to_dict()
    assert doc["window"] == {"warmup_requests": 1, "measured_requests": 3,
                             "description": "after warm-up: requests 2-4 of 4 (first 1 only warm the cache)"}
    assert [r["counters"] for r in doc["results"]] == [r["counters"] for r in result["results"]]
    json.dumps(doc)  # JSON-ready
    # the Python rows keep their shape (params a dict, window text)
    assert result["results"][2]["params"] == {"bits": 2} and result["window"].startswith("after warm-up")


def test_window_object_is_the_run_reports(trace):
    report = kvreplay.replay(trace, "lru", 2, 4, warmup_fraction=0.5)
    for result in (kvreplay.sweep(trace, [2], ["lru"], 4, warmup_fraction=0.5),
                   kvreplay.mrc(trace, [2], 4, warmup_fraction=0.5)):
        assert result.to_dict()["window"] == report.summary()["window"]


def test_several_traces_each_row_names_its_trace(trace):
    short = kvreplay.Trace.from_requests(REQUESTS[:2])
    result = kvreplay.sweep({"long": trace, "short": short}, [3], ["lru"], 4, warmup_fraction=0.5)
    rows = result.rows()
    assert [(r["trace"], r["warmup_requests"], r["measured_requests"], r["total_hit_tokens"]) for r in rows] == [
        ("long", 2, 2, 8), ("short", 1, 1, 7)]
    assert [t["window"]["measured_requests"] for t in result.to_dict()["traces"]] == [2, 1]


def test_to_pandas(trace):
    pd = pytest.importorskip("pandas")
    df = kvreplay.sweep(trace, [2, 3], ["s3fifo:small_ratio=0.5", "lru"], 4).to_pandas(bytes_per_block=2**29)
    assert list(df.columns) == list(kvreplay.sweep(trace, [20], ["s3fifo", "lru"], 4).columns())
    assert df["kv_bytes"].tolist() == [2**30, 3 * 2**29, 2**30, 3 * 2**29] and str(df["kv_bytes"].dtype) == "int64"
    assert df["kv_gib"].tolist() == [1.0, 1.5, 1.0, 1.5]
    assert df["bound"].dtype == bool and not df["bound"].any()
    assert df["small_ratio"].tolist()[:2] == [0.5, 0.5] and df["small_ratio"].isna().tolist() == [False, False, True, True]
    assert str(df["max_freq"].dtype) == "Int64"  # nullable: lru has no max_freq
    assert df.loc[df.policy == "lru", "total_hit_tokens"].tolist() == [7, 15]
    curve = kvreplay.mrc(trace, [1, 2], 4).to_pandas()
    assert curve["policy"].tolist() == ["lru", "lru"] and curve["kv_bytes"].isna().all()
    assert isinstance(curve, pd.DataFrame)


def test_to_polars(trace):
    pl = pytest.importorskip("polars")
    df = kvreplay.mrc(trace, [1, 2, 3], 4).to_polars(bytes_per_block=10)
    assert df["total_hit_tokens"].to_list() == [0, 7, 15]
    assert df["kv_bytes"].to_list() == [10, 20, 30] and df.schema["kv_bytes"] == pl.Int64
    assert df.schema["bound"] == pl.Boolean and df.schema["hit_rate"] == pl.Float64
    per_request = kvreplay.replay(trace, "lru", 3, 4).to_polars()
    assert per_request["hit_tokens"].to_list() == [0, 7, 0, 8]


def test_report_to_pandas():
    pytest.importorskip("pandas")
    # r3 has no prompt tokens: its per-request hit rate is NaN (undefined), not 0
    trace = kvreplay.Trace.from_requests([(["a", "b"], 7), (["a", "b"], 7), ([], 0), (["a", "b"], 8)])
    report = kvreplay.replay(trace, "lru", 3, 4, warmup_fraction=0.25)
    df = report.to_pandas()
    assert list(df.columns) == ["request", "prompt_tokens", "hit_tokens", "hit_blocks", "hit_rate", "measured",
                                "miss_first_use_tokens", "miss_evicted_tokens", "miss_behind_hole_tokens",
                                "miss_partial_block_tokens"]
    # every request's hit and missed tokens add up to its prompt (tests/engine/test_misses.py has the causes)
    assert (df["hit_tokens"] + df.filter(like="miss_").sum(axis=1)).tolist() == df["prompt_tokens"].tolist()
    assert df["request"].tolist() == [0, 1, 2, 3]
    assert df["hit_tokens"].tolist() == [0, 7, 0, 8] and df["hit_blocks"].tolist() == [0, 2, 0, 2]
    assert df["measured"].tolist() == [False, True, True, True]
    rates = df["hit_rate"].tolist()
    assert rates[0] == 0.0 and rates[1] == 1.0 and math.isnan(rates[2]) and rates[3] == 1.0
    assert df.loc[df.measured, "hit_tokens"].sum() == report.total_hit_tokens


@pytest.mark.parametrize("module, extra, call", [
    ("pandas", "pandas", lambda r, c, rep: r.to_pandas()),
    ("pandas", "pandas", lambda r, c, rep: rep.to_pandas()),
    ("polars", "polars", lambda r, c, rep: c.to_polars()),
    ("polars", "polars", lambda r, c, rep: rep.to_polars()),
    ("pyarrow", "parquet", lambda r, c, rep: r.to_arrow()),
])
def test_a_missing_library_names_the_extra(trace, monkeypatch, module, extra, call):
    result, curve, report = kvreplay.sweep(trace, [2], ["lru"], 4), kvreplay.mrc(trace, [2], 4), kvreplay.replay(trace, "lru", 2, 4)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(kvreplay.MissingDependencyError, match=re.escape(f"pip install 'kvreplay[{extra}]'")):
        call(result, curve, report)


def test_docs_list_every_column_with_its_unit():
    text = DOCS.read_text()
    section = text[text.index("## Output tables"):]
    documented = dict(re.findall(r"^\| `(\w+)` \| (\w+) \|", section, flags=re.M))
    assert {c.name: c.kind for c in COLUMNS}.items() <= documented.items()
    assert kvreplay.Report.REQUEST_COLUMNS.items() <= documented.items()
