"""What requests wait for (trace/dependencies.py): each format's rule by hand and on the real
samples, the inferred sessions of a trace without them, and the columns through take and merge."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvreplay import Trace
from kvreplay.trace import load_trace
from kvreplay.trace.claude_code import agent_links
from kvreplay.trace.dependencies import Dependencies
from kvreplay.trace.ops import merge
from kvreplay.trace.sessions import COMMON_MIN_REQUESTS, infer_links, session_of

from conftest import CLAUDE_CODE, DATA, MOONCAKE, shared_path, write


def preds(d: Dependencies) -> list[list[int]]:
    return [d.predecessors(i).tolist() for i in range(d.num_requests)]


def test_claude_code_subagent_rule_by_hand(tmp_path):
    """Main: m0 (t 0, api 2), m1 (t 5, api 1), m2 (t 20, tool_result), m3 (t 30, text). A subagent
    starts at 6 (after m1, its spawner: the last main request sent by 6): s0 (t 6, api 1),
    s1 (t 8, api 3: ends 11). m2 is the first tool_result request after 11: it waits for m1 and
    s1; think = 20 - max(6, 11) = 9 s. m3 waits for m2 only (api 4: think 30 - 24 = 6)."""
    doc = {"block_size": 64, "requests": [
        {"t": 0, "in": 64, "hash_ids": [1], "api_time": 2.0, "input_types": ["text"]},
        {"t": 5, "in": 128, "hash_ids": [1, 2], "api_time": 1.0, "input_types": ["tool_result"]},
        {"t": 6, "type": "subagent", "requests": [
            {"t": 0, "in": 64, "hash_ids": [7], "api_time": 1.0, "input_types": ["text"]},
            {"t": 2, "in": 128, "hash_ids": [7, 8], "api_time": 3.0, "input_types": ["tool_result"]}]},
        {"t": 20, "in": 192, "hash_ids": [1, 2, 3], "api_time": 4.0, "input_types": ["tool_result"]},
        {"t": 30, "in": 256, "hash_ids": [1, 2, 3, 4], "input_types": ["text"], "think_time": 6.0}]}
    path = write(tmp_path, "a.json", json.dumps(doc))
    t = load_trace(path)
    # time order: m0 (0), m1 (5), s0 (6), s1 (8), m2 (20), m3 (30)
    assert (t.timestamp / 1000).tolist() == [0, 5, 6, 8, 20, 30]
    d = t.dependencies
    assert preds(d) == [[], [0], [1], [2], [1, 3], [4]]
    assert np.isnan(d.think_ms[0])
    assert d.think_ms[1:].tolist() == [3000.0, 0.0, 1000.0, 9000.0, 6000.0]


def test_a_subagent_nobody_reads_is_waited_for_by_none():
    """The parent's next request after the subagent's end is a user text, not a tool_result: it
    does not read the subagent, so it waits only for its own stream's previous request."""
    stream = np.array([0, 1, 0])
    d = agent_links(stream, np.array([-1, 0]), np.array([0.0, 1.0]), np.array([0.0, 1.0, 9.0]),
                    np.array([0.5, 2.0, 1.0]), np.full(3, np.nan), np.array([False, False, False]))
    assert preds(d) == [[], [0], [0]]
    assert d.think_ms[1:].tolist() == [500.0, 8500.0]


def test_without_api_time_the_recorded_think_time_is_used():
    d = agent_links(np.array([0, 0, 0]), np.array([-1]), np.array([0.0]), np.array([0.0, 10.0, 20.0]),
                    np.full(3, np.nan), np.array([np.nan, 4.0, np.nan]), np.zeros(3, dtype=bool))
    assert preds(d) == [[], [0], [1]]
    assert d.think_ms[1] == 4000.0 and np.isnan(d.think_ms[2])


def test_real_sample_0291():
    """trace_0291: two subagents spawned after the request at 1,085 s (it ended at 1,100.64 s);
    the first ends at 1,148.013 + 20 + 24.84 = 1,192.853 s and the request at 1,209 s (a
    tool_result) reads it: think 16.147 s; the second ends at 1,180.553 + 54 + 21.6 = 1,256.153 s
    and the request at 1,269 s reads it, 10.94 s after the later end of its two predecessors
    (its own previous request: 1,209 + 49.06 = 1,258.06 s)."""
    t = load_trace(shared_path(CLAUDE_CODE / "trace_0291.json"))
    d = t.dependencies
    at = {round(float(x) / 1000, 3): i for i, x in enumerate(t.timestamp)}
    i1209, i1269, i1085 = at[1209.0], at[1269.0], at[1085.0]
    assert sorted(t.timestamp[d.predecessors(i1209)] / 1000) == [1085.0, 1168.013]
    assert d.think_ms[i1209] == pytest.approx(16147.0, abs=0.01)
    assert sorted(t.timestamp[d.predecessors(i1269)] / 1000) == [1209.0, 1234.553]
    assert d.think_ms[i1269] == pytest.approx(10940.0, abs=0.01)
    assert d.predecessors(at[1148.013]).tolist() == [i1085] and d.predecessors(at[1180.553]).tolist() == [i1085]
    assert int(d.roots().sum()) == 1 and d.num_links == len(t) - 1 + 2


def test_bailian_requests_wait_for_their_parent():
    t = load_trace(DATA / "bailian_chat.jsonl")
    chats = [json.loads(line) for line in open(DATA / "bailian_chat.jsonl") if line.strip()]
    row = {c["chat_id"]: k for k, c in enumerate(chats)}
    want = [[row[c["parent_chat_id"]]] if c["parent_chat_id"] in row else [] for c in chats]
    assert preds(t.dependencies) == want
    assert np.isnan(t.dependencies.think_ms).all()


def test_take_and_merge_keep_the_links():
    d = Dependencies.from_lists([[], [0], [1], [0, 2]], [np.nan, 1.0, 2.0, 3.0])
    t = Trace.from_requests([([1], 4), ([1, 2], 8), ([1, 2, 3], 12), ([1, 2, 3, 4], 16)], block_size=4)
    from dataclasses import replace

    t = replace(t, dependencies=d)
    sub = t.take(np.array([3, 0, 2]))  # request 1 dropped: 2 no longer waits for it
    assert preds(sub.dependencies) == [[1, 2], [], []]
    assert sub.dependencies.think_ms.tolist()[0] == 3.0
    both = merge([t, t])
    assert both.dependencies.num_links == 2 * d.num_links
    assert sorted(len(both.dependencies.predecessors(i)) for i in range(8)) == [0, 0, 1, 1, 1, 1, 2, 2]


def test_inferred_sessions_by_hand():
    """Block size 4. c0: [0 common, 1, 2, partial 3]; its next turn c1 holds c0's full blocks
    [0, 1, 2] then more; c2 holds only the common block 0 then its own: a new session. Block 0 is
    held by COMMON_MIN_REQUESTS requests (fillers sent later), so it links nothing."""
    reqs = [([0, 1, 2, 3], 14, 0, 1), ([0, 1, 2, 5, 6], 19, 1000, 1), ([0, 7, 8], 12, 2000, 1)]
    reqs += [([0, 100 + k], 8, 5000 + k, 1) for k in range(COMMON_MIN_REQUESTS)]
    t = Trace.from_requests(reqs, block_size=4)
    links, stats = infer_links(t)
    p = preds(links)
    assert p[:3] == [[], [0], []]
    assert all(x == [] for x in p[3:])  # fillers extend nothing (their full prefix [0] is common)
    assert stats["attached"] == 1 and stats["common_blocks"] == 1
    assert stats["mean_share_of_blocks"] == pytest.approx(3 / 5)
    assert session_of(links)[:3].tolist() == [0, 0, 1]


def test_inference_needs_a_strictly_earlier_request():
    """Two requests at the same millisecond cannot follow each other; the longest prefix wins over
    a later shorter one."""
    t = Trace.from_requests([([1, 2], 8, 0, 1), ([1, 2, 3], 12, 0, 1), ([1, 2, 3, 4], 16, 5, 1),
                             ([1, 2], 8, 3, 1)], block_size=4)
    p = preds(infer_links(t)[0])
    assert p[1] == [] and p[2] == [1] and p[3] == [0]


def test_inferred_on_the_conversation_trace():
    t = load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    links, stats = infer_links(t)
    # every request starts with block 0 (the common block); 3,975 extend an earlier one
    assert stats["common_blocks"] == 1 and stats["attached"] == 3975
    assert stats["mean_share_of_blocks"] == pytest.approx(0.771, abs=0.001)
    owner = np.repeat(np.arange(len(t)), np.diff(links.offsets))
    assert np.all(t.timestamp[links.after] < t.timestamp[owner])
    for i, j in zip(owner[:200].tolist(), links.after[:200].tolist()):
        full = min(len(t.request_blocks(j)), int(t.input_length[j]) // 512)
        assert np.array_equal(t.request_blocks(i)[:full], t.request_blocks(j)[:full])
