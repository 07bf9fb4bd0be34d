"""What the rest of kvreplay asks about a policy is declared on its PolicySpec, in its own module:
served or not, a bound, request-level, sized per call, residency bits, its hybrid layout and replay,
its notes and report fields. A new policy touches its own file(s) and one registry line; a toy policy
registered here changes what run, the JSON report, simulate and the ranking say, with no other file."""

from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.output.summary import run_summary
from kvreplay.policies import registry
from kvreplay.policies.registry import POLICIES, PolicyInfo
from kvreplay.serving.ranking import served_ranking
from kvreplay.serving.styles import STYLE_POLICY
from kvreplay.trace import Trace


def names(trait) -> set[str]:
    return {name for name in POLICIES if getattr(POLICIES[name], trait)}


def test_the_traits_are_those_the_tables_held():
    # (the tables serving/simulate.py, serving/run.py, output/summary.py and the name checks held
    # before the traits moved to the policies; tests/test_outputs_unchanged.py checks the results)
    assert names("request_level") == {"vllm", "radix", "trtllm"}
    assert names("sized_per_call") == {"radix", "belady"}
    assert names("residency_bits") == {"vllm", "lru", "s3fifo", "fifo", "sieve", "arc", "2q", "lfu", "clock",
                                       "lru-tail", "belady", "infinite"}
    assert names("not_served") == {"deepseek", "llamacpp"}
    assert names("bound") == {"infinite", "belady"}
    assert names("below_capacity") == {"s3fifo", "2q", "arc", "ttl", "radix", "vllm"}
    assert names("replay_groups") == {"vllm", "radix"}
    assert names("group_miss_account") == {"vllm"}
    assert {name: POLICIES[name].style_only for name in POLICIES if POLICIES[name].style_only} == {"trtllm": "trtllm"}
    assert {name for name in POLICIES if POLICIES[name].layout == "sglang"} == {"radix"}
    assert STYLE_POLICY == {"vllm": "vllm", "sglang": "radix", "trtllm": "trtllm"}


@pytest.fixture
def toy(monkeypatch):
    """A policy 'toy' (LRU's engine) in its own module, registered by one line of the index."""
    spec = replace(POLICIES["lru"], name="toy", not_served="toy's engine is not modelled",
                   notes=lambda report: [f"toy       {report.total_hit_tokens} hit tokens, said by the toy"],
                   report_fields=lambda report: {"toy": {"hits": report.total_hit_tokens}})
    module = types.ModuleType("kvreplay.policies.toy")
    module.POLICY = spec
    monkeypatch.setitem(sys.modules, "kvreplay.policies.toy", module)
    monkeypatch.setitem(registry.INFO, "toy", PolicyInfo("toy", "toy", "a toy", "required", ()))  # the one line
    return spec


def trace():
    # two requests sharing their first block: the second hits 4 tokens (hand-worked)
    return Trace.from_requests([([1, 2], 8, 0, 1), ([1, 3], 8, 1, 1)], block_size=4)


def test_a_new_policy_says_its_notes_and_fields(toy):
    t = trace()
    report = kvreplay.replay(t, "toy", 4, 4)
    assert report.total_hit_tokens == 4
    assert report.to_dict()["toy"] == {"hits": 4}
    assert "toy       4 hit tokens, said by the toy" in run_summary(t, report).splitlines()


def test_a_new_policy_is_refused_by_the_simulator_with_its_reason(toy):
    with pytest.raises(ConfigError, match="toy's engine is not modelled"):
        kvreplay.simulate(trace(), "toy", 4, time_model="instant")
    ranked = served_ranking(trace(), ["toy"], model=None, gpu=None, time_model="instant", block_size=4)
    assert ranked["not_served"] == [{"policy": "toy", "why": "toy's engine is not modelled"}]
