"""sweep and mrc machine outputs are tidy tables (issue 11 item 5): CSV, JSON and Parquet carry the
same columns (docs/formats.md, "Output tables"), numbers only numeric, every row self-describing."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from kvreplay.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
# prefix_lru_vs_fifo.jsonl at block size 4, one block per request (hand-worked at the top of tests/test_cli.py):
#   r1 [1] len 3 | r2 [2] len 4 | r3 [1] len 5 | r4 [3] len 6 | r5 [1] len 2      prompt tokens 20, 3 unique blocks
# At 6 blocks nothing is evicted: lru, belady and infinite hit r3 and r5 (4 + 2 = 6 tokens) and admit the 3 blocks.
# s3fifo at 6 (small_cap 1): 1 is only a ghost at r3, so only r5 hits (2 tokens); 3 admissions, 2 evictions to the ghost.
# The miss account (columns miss_*): first uses r1 (3 tokens), r2 (4), r4 (4) = 11; each request has one 4-token
# hash id, so r3 and r4's tokens past it (1 + 2) are partial blocks = 3; s3fifo's r3 (4 tokens) is evicted. The
# namespace, layer-group and concurrency columns are empty (not measured by a sequential replay of a hashed trace).
LVF = DATA / "prefix_lru_vs_fifo.jsonl"
# Llama-3.1-8B, bf16: 131,072 B/token; x 4 tokens = 524,288 B per block; 6 blocks = 3,145,728 B = 0.0029296875 GiB.
HEADER = ("trace,policy,params,small_ratio,max_freq,ghost_freq,admit_bypass,bound,capacity_kind,cache_capacity_blocks,"
          "kv_bytes,kv_gib,total_hit_tokens,total_prompt_tokens,hit_rate,final_cache_blocks,admissions,evictions,"
          "oversize_requests,miss_first_use_tokens,miss_evicted_tokens,miss_behind_hole_tokens,miss_partial_block_tokens,miss_namespace_tokens,miss_layer_groups_tokens,miss_concurrency_tokens,block_size,window,warmup_fraction,warmup_requests,"
          "measured_requests")
WINDOW = "whole trace (5 requests),0.0,0,5"
ROWS = [
    f"{LVF},s3fifo,small_ratio=0.1;max_freq=3;ghost_freq=0,0.1,3,0,,false,limit,6,3145728,0.0029296875,2,20,0.1,2,3,2,0,11,4,0,3,,,,4,{WINDOW}",
    f"{LVF},lru,,,,,,false,limit,6,3145728,0.0029296875,6,20,0.3,3,3,0,0,11,0,0,3,,,,4,{WINDOW}",
    # infinite ignores capacity: its row gives the blocks it needed (the 3 unique blocks), marked "needed"
    f"{LVF},infinite,,,,,,true,needed,3,1572864,0.00146484375,6,20,0.3,3,3,0,0,11,0,0,3,,,,4,{WINDOW}",
    f"{LVF},belady,admit_bypass=0,,,,0,true,limit,6,3145728,0.0029296875,6,20,0.3,3,3,0,0,11,0,0,3,,,,4,{WINDOW}",
]
SWEEP = ["sweep", str(LVF), "--block-size", "4", "--capacities", "6", "--policies", "s3fifo,lru", "--bounds",
         "--model", "Llama-3.1-8B", "--engine", "reference"]


def test_sweep_csv_rows_exactly(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main([*SWEEP, "-o", str(out)]) == 0
    assert out.read_text().splitlines() == [HEADER, *ROWS]
    # the terminal table stays for people: the KV size in binary units there
    assert "3 MiB" in capsys.readouterr().out


def test_sweep_json_rows_are_the_csv_rows(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main([*SWEEP, "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    from_csv = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(doc["results"]) == len(from_csv) == 4
    for row, text in zip(doc["results"], from_csv):
        assert list(row) == list(text) + ["counters"]
        assert all(("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)) == text[k]
                   for k, v in row.items() if k != "counters")
    assert [r["kv_bytes"] for r in doc["results"]] == [3_145_728, 3_145_728, 1_572_864, 3_145_728]
    assert all(r["kv_bytes"] == r["cache_capacity_blocks"] * doc["budget"]["bytes_per_block"] for r in doc["results"])
    assert doc["budget"]["bytes_per_block"] == 524_288
    assert doc["results"][0]["counters"] == {"admissions": 3, "promotions": 0, "ghost_hits": 1, "requeues": 0, "evictions": 2}
    assert doc["window"] == {"warmup_requests": 0, "measured_requests": 5, "description": "whole trace (5 requests)"}


def test_window_is_one_object_shape_in_run_sweep_and_mrc(capsys):
    shapes = []
    for args in (["run", str(LVF), "--policy", "lru", "--capacity", "2"], ["sweep", str(LVF), "--policies", "lru",
                 "--capacities", "2"], ["mrc", str(LVF), "--capacities", "2"]):
        assert main([*args, "--block-size", "4", "--warmup-fraction", "0.5", "--json"]) == 0
        shapes.append(json.loads(capsys.readouterr().out)["window"])
    assert shapes == [{"warmup_requests": 2, "measured_requests": 3,
                       "description": "after warm-up: requests 3-5 of 5 (first 2 only warm the cache)"}] * 3


def test_mrc_rows_say_lru_and_count_oversize_requests(tmp_path, capsys):
    # At 1 block, r3 (5 tokens) and r4 (6 tokens) need ceil(L / 4) = 2 blocks: 2 oversize requests; at 2, none.
    out = tmp_path / "m.csv"
    assert main(["mrc", str(LVF), "--block-size", "4", "--capacities", "1,2", "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [(r["trace"], r["policy"], r["params"], r["bound"], r["cache_capacity_blocks"], r["oversize_requests"])
            for r in rows] == [(str(LVF), "lru", "", "false", "1", "2"), (str(LVF), "lru", "", "false", "2", "0")]
    # LRU at 1: each request evicts the block before it, nothing hits; at 2: r3 hits 4, r5 hits 2
    assert [int(r["total_hit_tokens"]) for r in rows] == [0, 6]


def test_sweep_each_rows_name_their_trace(tmp_path, capsys):
    second = tmp_path / "short.jsonl"
    second.write_text("".join(LVF.read_text().splitlines(keepends=True)[:4]))
    out = tmp_path / "each.csv"
    assert main(["sweep", "--each", str(LVF), str(second), "--block-size", "4", "--capacities", "6", "--policies", "lru",
                 "--warmup-fraction", "0.5", "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    # floor(0.5 x 5) = 2 and floor(0.5 x 4) = 2 warm-up requests
    assert [(r["trace"], r["warmup_requests"], r["measured_requests"], r["total_prompt_tokens"]) for r in rows] == [
        ("prefix_lru_vs_fifo.jsonl", "2", "3", "13"), ("short.jsonl", "2", "2", "11")]
    capsys.readouterr()
    assert main(["sweep", "--each", str(LVF), str(second), "--block-size", "4", "--capacities", "6", "--policies", "lru",
                 "--warmup-fraction", "0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["window"]["measured_requests"] for t in doc["traces"]] == [3, 2]


def test_parquet_round_trip(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    out_csv, out_pq = tmp_path / "s.csv", tmp_path / "s.parquet"
    assert main([*SWEEP, "-o", str(out_csv)]) == 0
    assert main([*SWEEP, "-o", str(out_pq)]) == 0
    table = pq.read_table(out_pq)
    assert ",".join(table.column_names) == HEADER
    types = {f.name: str(f.type) for f in table.schema}
    assert types["kv_bytes"] == "int64" and types["kv_gib"] == "double" and types["hit_rate"] == "double"
    assert types["bound"] == "bool" and types["small_ratio"] == "double" and types["max_freq"] == "int64"
    rows = table.to_pylist()
    assert [(r["policy"], r["cache_capacity_blocks"], r["kv_bytes"], r["total_hit_tokens"], r["bound"]) for r in rows] == [
        ("s3fifo", 6, 3_145_728, 2, False), ("lru", 6, 3_145_728, 6, False), ("infinite", 3, 1_572_864, 6, True),
        ("belady", 6, 3_145_728, 6, True)]
    assert rows[1]["small_ratio"] is None and rows[0]["small_ratio"] == 0.1
    meta = json.loads(table.schema.metadata[b"kvreplay"])
    assert meta["window"]["measured_requests"] == 5 and meta["budget"]["model"] == "Llama-3.1-8B"
    pd = pytest.importorskip("pandas")
    from_csv = pd.read_csv(out_csv, keep_default_na=True)
    from_pq = pd.read_parquet(out_pq)
    assert from_pq["kv_bytes"].tolist() == from_csv["kv_bytes"].tolist() == [3_145_728, 3_145_728, 1_572_864, 3_145_728]
    assert from_csv["bound"].dtype == bool and from_csv["hit_rate"].tolist() == pytest.approx([0.1, 0.3, 0.3, 0.3])


def test_parquet_without_pyarrow_fails_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    out = tmp_path / "s.parquet"
    # the trace does not exist: the output is checked first, so the message is about pyarrow
    assert main(["sweep", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"kvreplay: --output {out} needs pyarrow, which is not installed: pip install 'kvreplay[parquet]'\n")
    assert main(["mrc", str(LVF), "--block-size", "4", "-o", str(out)]) == 2
    assert "pip install 'kvreplay[parquet]'" in capsys.readouterr().err
    assert not out.exists()


def test_other_output_names_are_refused(tmp_path, capsys):
    assert main(["mrc", str(LVF), "--block-size", "4", "-o", str(tmp_path / "m.xlsx")]) == 2
    assert "must end in .csv, .json or .parquet" in capsys.readouterr().err
