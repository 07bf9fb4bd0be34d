"""Agentic Mooncake v2 reader (trace/agentic_mooncake.py): columns, links and their delays by
hand, per-play ids, errors naming line and field, and a closed-loop run of its links."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvreplay
from kvreplay.errors import TraceError
from kvreplay.trace import load_trace

from conftest import write
from sim_cases import ONE_SECOND

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4, "hash_id_scope": "local",
          "source": {"format": "test", "digest": "x"}}


def row(rid, play, ids, start_ms, deps=(), length=None, out=1):
    return {"request_id": rid, "play_id": play, "session_id": "s", "model": "m",
            "input_length": length if length is not None else 4 * len(ids), "output_length": out, "hash_ids": ids,
            "not_before_ms": start_ms,
            "dependencies": [{"request_id": d, "trigger": t, "delay_ms": ms, "relation": "sequence"}
                             for d, t, ms in deps]}


def agentic(tmp_path, rows, header=HEADER):
    return write(tmp_path, "a.jsonl", "\n".join(json.dumps(r) for r in [header, *rows]) + "\n")


def test_columns_links_and_plays(tmp_path):
    """Two plays reuse hash id 1: private to each. In play p: root at 0; 'sub' fires 500 ms after
    the root is sent (dispatch); 'next' 2 s after the root ends and 0 after 'sub' ends (a join)."""
    path = agentic(tmp_path, [
        row("root", "p", [1, 2], 0.0),
        row("sub", "p", [9], 500.0, [("root", "dispatch", 500.0)]),
        row("next", "p", [1, 2, 3], 4000.0, [("root", "completion", 2000.0), ("sub", "completion", 0.0)]),
        row("other", "q", [1], 100.0),
    ])
    t = load_trace(path)
    assert t.format == "agentic-mooncake" and t.block_size == 4
    assert t.timestamp.tolist() == [0.0, 100.0, 500.0, 4000.0]  # time order: root, other, sub, next
    assert t.session.tolist() == [0, 1, 0, 0]
    first = lambda i: int(t.request_blocks(i)[0])  # noqa: E731
    assert first(0) != first(1)  # id 1 of play p and of play q are different blocks
    d = t.dependencies
    assert [d.predecessors(i).tolist() for i in range(4)] == [[], [], [0], [0, 2]]
    assert d.delay_ms.tolist() == [500.0, 2000.0, 0.0] and d.on_send.tolist() == [True, False, False]


def test_served_closed_by_hand(tmp_path):
    """One-second steps. root (2 outputs) sent at 0: first token 1, ends 2. sub fires on root's send
    + 0.5 s: sent 0.5, waits for the running step, computed in the step 1-2 (alone beside root's
    decode: mixed step), ends 2. next: max(root end 2 + 2, sub end 2 + 0) = 4."""
    path = agentic(tmp_path, [
        row("root", "p", [1, 2], 0.0, out=2),
        row("sub", "p", [9], 500.0, [("root", "dispatch", 500.0)]),
        row("next", "p", [1, 2, 3], 9000.0, [("root", "completion", 2000.0), ("sub", "completion", 0.0)]),
    ])
    r = kvreplay.simulate(load_trace(path), policy="lru", capacity=100, time_model=ONE_SECOND)
    assert r.arrivals["kind"] == "closed"  # the format's default
    assert r.arrival_s.tolist() == [0.0, 0.5, 4.0]
    assert r.finish_s.tolist() == [2.0, 2.0, 5.0]


@pytest.mark.parametrize("rows, line, field, msg", [
    ([row("a", "p", [1], 0.0), row("a", "p", [2], 1.0)], 3, "request_id", "appears again"),
    ([row("a", "p", [1], 0.0, [("zz", "completion", 0.0)])], 2, "dependencies[0].request_id", "no request"),
    ([row("a", "p", [1], 0.0), row("b", "q", [1], 0.0, [("a", "completion", 0.0)])], 3,
     "dependencies[0].request_id", "another play"),
    ([row("a", "p", [1], 0.0, [("a", "completion", 0.0)])], 2, "dependencies[0].request_id", "itself"),
    ([row("a", "p", [1], 0.0, [("b", "completion", 0.0)]), row("b", "p", [1], 0.0, [("a", "completion", 0.0)])],
     None, "dependencies", "loop"),
    ([row("a", "p", [1], 0.0, [("b", "finish", 0.0)])], 2, "dependencies[0].trigger", "completion, dispatch"),
    ([row("a", "p", [1], 0.0, [("b", "completion", -1.0)])], 2, "dependencies[0].delay_ms", "non-negative"),
    ([{**row("a", "p", [1], 0.0), "not_before_ms": "soon"}], 2, "not_before_ms", "milliseconds"),
    ([{k: v for k, v in row("a", "p", [1], 0.0).items() if k != "hash_ids"}], 2, "hash_ids", "missing"),
])
def test_errors_name_line_and_field(tmp_path, rows, line, field, msg):
    with pytest.raises(TraceError, match=msg) as e:
        load_trace(agentic(tmp_path, rows), format="agentic-mooncake")
    assert e.value.field == field
    if line is not None:
        assert e.value.line == line


def test_header_is_checked(tmp_path):
    for bad, field in (({**HEADER, "schema": "other"}, "schema"), ({**HEADER, "version": 1}, "version"),
                       ({**HEADER, "block_size": 0}, "block_size"), ({**HEADER, "hash_id_scope": "global"},
                                                                      "hash_id_scope")):
        with pytest.raises(TraceError) as e:
            load_trace(agentic(tmp_path, [row("a", "p", [1], 0.0)], header=bad), format="agentic-mooncake")
        assert e.value.field == field and e.value.line == 1


def test_skip_drops_bad_rows(tmp_path):
    path = agentic(tmp_path, [row("a", "p", [1], 0.0), {**row("b", "p", [2], 1.0), "input_length": -1}])
    t = load_trace(path, on_invalid="skip")
    assert len(t) == 1 and t.invalid_records == {"count": 1, "first_lines": [3]}
