"""kvreplay's closed loop against NVIDIA AISimulate's agentic replay (aisimulate
0.13.0.dev202609240000000055), on the Claude Code samples with the same fixed step time.

Opt-in, and only where AISimulate is installed (the install: aisimulate_agentic.py):

    KVREPLAY_ENGINES=1 PYTHONPATH=src benchmarks/.cache/aisim-venv/bin/python -m pytest \
        tests/real_engines/test_aisimulate_agentic.py

- At a step of 99.991 ms (slower than every recorded answer, so AISimulate's recorded-send floor
  never binds, and never landing a send on a step's end): all 38 requests are sent, get their
  first token and end at the same times on both sides (1 us), with the same prefix hits.
- At 10 ms (faster than the recorded answers) and 100 ms (sends on step ends): each side's sends
  follow its own rule exactly, computed from its own times; the rules differ in two ways (AISimulate
  never sends before the recorded send, and times each link from its own predecessor's recorded
  end), and at 100 ms the first tokens differ by exactly one step where a send lands on a step's end.
- Lanes: both start a lane's next session the moment its session's last answer ends; AISimulate
  runs each play once (lanes beyond the plays stay idle), kvreplay draws sessions again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CLAUDE_CODE, shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import aisimulate_agentic as aa  # noqa: E402

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def runtime():
    return pytest.importorskip("aisimulate._runtime", reason="aisimulate is not installed (aisimulate_agentic.py)")


@pytest.fixture(scope="module")
def samples(tmp_path_factory, runtime):
    src = shared_path(CLAUDE_CODE)
    folder = tmp_path_factory.mktemp("aisim") / "claude-code"
    files = aa.normalised_copy(src, folder)
    return folder, aa.recorded(files), tmp_path_factory.mktemp("profiles")


def both(samples, step):
    folder, rec, tmp = samples
    trace, ours = aa.run_kvreplay(folder, aa.flat_profile(tmp / f"flat_{step}.npz", step))
    rows = aa.aisim_rows(aa.run_aisim(folder, step), trace)
    return trace, ours, rows, rec


def test_same_sends_first_tokens_and_ends_at_a_step_without_ties(samples):
    trace, ours, rows, rec = both(samples, 99.991)
    assert ours.num_requests == 38 and not np.isnan(rows["send"]).any()
    np.testing.assert_allclose(rows["send"], ours.arrival_s, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["first"], ours.first_token_s, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["end"], ours.finish_s, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(rows["hit"], ours.hit_tokens)
    rs, _ = aa.recorded_arrays(trace, rec)
    linked = np.array([bool(ls) for ls in aa.links(ours)])
    assert linked.sum() == 35 and (ours.arrival_s[linked] > rs[linked]).all()  # the floor never binds


@pytest.mark.parametrize("step", [10.0, 100.0])
def test_each_side_follows_its_own_rule(samples, step):
    trace, ours, rows, rec = both(samples, step)
    lk = aa.links(ours)
    rs, re = aa.recorded_arrays(trace, rec)
    mine = aa.kvreplay_rule(ours.arrival_s, ours.finish_s, lk)
    linked = ~np.isnan(mine)
    np.testing.assert_allclose(mine[linked], ours.arrival_s[linked], rtol=0, atol=1e-9)
    np.testing.assert_allclose(aa.aisim_rule(rows["send"], rows["end"], lk, rs, re), rows["send"], rtol=0, atol=1e-9)
    # and not the other's: kvreplay's rule on AISimulate's own times misses its sends
    theirs_by_mine = aa.kvreplay_rule(rows["send"], rows["end"], lk)
    if step == 10.0:
        floor = linked & (rs > theirs_by_mine + 1e-9)  # answers faster than recorded: the recorded send binds
        assert floor.sum() == 29
        assert (ours.arrival_s[floor] < rows["send"][floor] - 1e-6).all()
        # the parent's request after two subagents: one think time after the latest end (kvreplay)
        # against each link's own recorded gap (AISimulate)
        # (outer request 19 of trace_0291 waits for request 18, recorded end 1,258.06 s, and for subagent
        # agent_002's last answer, recorded end 1,256.153 s; it was sent at 1,269 s)
        join = [i for i, ls in enumerate(lk) if len(ls) == 2]
        late = rows["send"][join] - theirs_by_mine[join]
        assert len(join) == 2 and late[0] == pytest.approx(0, abs=1e-9)
        assert late[1] == pytest.approx((1269 - 1256.153) - (1269 - 1258.06), abs=1e-6)
    else:  # 100 ms: the same sends where no send lands on a step's end; where one does, one step apart
        d = np.abs(rows["first"] - ours.first_token_s)
        assert ((d < 1e-6) | (np.abs(d - 0.1) < 1e-6)).all() and (d > 1e-6).sum() >= 1


def test_lanes_start_the_next_session_when_one_ends(samples, runtime):
    folder, rec, tmp = samples
    prof = aa.flat_profile(tmp / "lanes.npz", 99.991)
    theirs = aa.run_aisim(folder, 99.991, lanes=1)
    by_play = {}
    for r in theirs["per_request"]:
        by_play.setdefault(r["play_id"], []).append(r)
    spans = sorted((min(r["arrival_time_ms"] for r in rs), max(r["last_token_ms"] for r in rs)) for rs in by_play.values())
    assert len(spans) == 3 and spans[0][0] == 0.0
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start == pytest.approx(end, abs=1e-6)  # one play after another, in file order
    trace, ours = aa.run_kvreplay(folder, prof, sessions=1)
    session = ours.closed["session"]
    first = [ours.arrival_s[session == s].min() for s in np.unique(session)]
    last = [ours.finish_s[session == s].max() for s in np.unique(session)]
    order = np.argsort(first)
    assert first[order[0]] > 0  # kvreplay's lanes start within the mean think time, not at 0
    for a, b in zip(order, order[1:]):
        assert first[b] == pytest.approx(last[a], abs=1e-9)
    # more lanes than plays: AISimulate runs each play once (the extra lanes stay idle), kvreplay
    # draws the sessions again until every lane has three
    three, four = aa.run_aisim(folder, 99.991, lanes=3), aa.run_aisim(folder, 99.991, lanes=4)
    assert four["total_trajectories"] == three["total_trajectories"] == 3
    assert four["duration_ms"] == three["duration_ms"]
    assert aa.run_kvreplay(folder, prof, sessions=4)[1].num_requests == 4 * 3 * 38 // 3
