"""deepseek: DeepSeek's API disk cache as its docs describe it (policies/deepseek.py).

Hand-worked cases, both engines (the `engine` fixture). Requests are (ids, input_length,
timestamp ms); block size 64 (one storage unit per block) unless said otherwise; delay 0 where
the construction delay is not the point, so a unit is ready for the next request.
"""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.errors import ConfigError


def run(requests, engine, block_size=64, **params):
    trace = kvreplay.Trace.from_requests(requests)
    return kvreplay.replay(trace, "deepseek", None, block_size, engine=engine, **params)


def test_docs_example_2_a_common_prefix_is_persisted_for_the_next(engine):
    # A = blocks 1, 2 (128 tokens). A+B persists A+B; A+C matches no whole unit (0), and the
    # common prefix A is persisted; A+D then hits A: 128 tokens.
    r = run([([1, 2, 3, 4], 256, 0), ([1, 2, 5, 6], 256, 1000), ([1, 2, 7, 8], 256, 2000)], engine, delay=0)
    assert r.hit_tokens.tolist() == [0, 0, 128]
    c = r.counters
    assert (c["input_units"], c["common_prefix_units"], c["unit_hits"]) == (3, 1, 1)


def test_docs_example_1_an_extension_hits_the_whole_earlier_prompt(engine):
    # A+B (200 tokens: its unit is the first 192, three blocks), then A+B+C hits those 192
    r = run([([1, 2, 3, 4], 200, 0), ([1, 2, 3, 9, 10], 300, 1000)], engine, delay=0)
    assert r.hit_tokens.tolist() == [0, 192]
    assert r.summary()["usage"] == {"prompt_cache_hit_tokens": 192, "prompt_cache_miss_tokens": 308}


def test_nothing_under_64_tokens_is_cached(engine):
    # 63 tokens: no unit; the resend misses. At block size 16, 100 tokens make a 64-token unit
    # (blocks 0-3): the resend hits 64, not 96.
    assert run([([1], 63, 0), ([1], 63, 1000)], engine, delay=0).hit_tokens.tolist() == [0, 0]
    r = run([([1, 2, 3, 4, 5, 6, 7], 100, 0), ([1, 2, 3, 4, 5, 6, 7], 100, 1000)], engine, block_size=16, delay=0)
    assert r.hit_tokens.tolist() == [0, 64]


def test_a_unit_is_ready_only_after_the_delay(engine):
    # delay 5 s: 1 s later the unit is being built (a construction miss), 6 s later it hits
    reqs = [([1, 2], 128, 0), ([1, 2], 128, 1000), ([1, 2], 128, 6000)]
    r = run(reqs, engine, delay=5)
    assert r.hit_tokens.tolist() == [0, 0, 128]
    assert r.counters["construction_misses"] == 1


def test_an_unused_unit_is_gone_after_the_ttl_and_a_hit_keeps_it(engine):
    # ttl 10 s. Hit at 9 s refreshes the unit: still there at 18 s; then unused until 29 s: gone.
    reqs = [([1, 2], 128, 0), ([1, 2], 128, 9000), ([1, 2], 128, 18000), ([1, 2], 128, 29000)]
    r = run(reqs, engine, delay=0, ttl=10)
    assert r.hit_tokens.tolist() == [0, 128, 128, 0]
    assert r.counters["input_units"] == 2  # persisted at 0 s and again at 29 s


def test_fixed_interval_units_make_a_long_prefix_hit_before_its_end(engine):
    # interval 256 tokens (4 blocks). A 10-block prompt persists units at 4 and 8 blocks (and
    # its end, 10). A prompt that diverges after block 6 hits the unit at 4 blocks (256 tokens);
    # its common prefix (6 blocks) is persisted, so a third one diverging there too hits 384.
    first = list(range(1, 11))
    second = first[:6] + [20, 21, 22]
    third = first[:6] + [30, 31]
    r = run([(first, 640, 0), (second, 576, 1000), (third, 512, 2000)], engine, delay=0, interval=256)
    assert r.hit_tokens.tolist() == [0, 256, 384]
    c = r.counters
    assert (c["interval_units"], c["common_prefix_units"]) == (2 + 1, 1)  # third's unit at 4 blocks exists


def test_units_at_block_granularity_above_64(engine):
    # block size 512: the unit of a 1,100-token prompt is its first 1,088 tokens, known by its
    # 2 whole blocks: the resend hits 1,024 (the partial block's 64 tokens are lost)
    r = run([([1, 2, 3], 1100, 0), ([1, 2, 3], 1100, 1000)], engine, block_size=512, delay=0)
    assert r.hit_tokens.tolist() == [0, 1024]
    from kvreplay.output.summary import run_summary

    assert "rounded down to the block" in run_summary(kvreplay.Trace.from_requests([([1], 10, 0)]), r)


def test_the_spec_rules_for_units(engine):
    # a prefix from block 0 only: [y b c] after [a b c] misses; set intersection is impossible:
    # [a x c] after [a b c] hits nothing (no unit ends at a) although a and c were seen
    assert run([([1, 2, 3], 192, 0), ([9, 2, 3], 192, 1000)], engine, delay=0).hit_tokens.tolist() == [0, 0]
    assert run([([1, 2, 3], 192, 0), ([1, 7, 3], 192, 1000)], engine, delay=0).hit_tokens.tolist() == [0, 0]


def test_a_block_size_that_does_not_fit_64_token_units_is_refused(engine):
    with pytest.raises(ConfigError, match="block size 100"):
        run([([1], 100, 0)], engine, block_size=100)


def test_simulate_refuses_it():
    from kvreplay.serving.simulate import simulate

    with pytest.raises(ConfigError, match="deepseek.*scheduler"):
        simulate(kvreplay.Trace.from_requests([([1], 64, 0)]), "deepseek", 10, 64)


@pytest.mark.parametrize("bad", [{"interval": 100}, {"delay": -1}, {"ttl": 0}])
def test_parameters_are_checked(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        run([([1], 64, 0)], "compiled", **bad)


def test_the_seeds_live_tests_as_scenarios():
    # benchmarks/deepseek_scenarios.py: hand-worked, 64-token blocks, 60 s apart
    # exact extension: 3,520 tokens (55 whole units) + 64 appended: 3,520 / 3,584 = 98.21%
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "deepseek_scenarios.py"
    spec = importlib.util.spec_from_file_location("deepseek_scenarios", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = {row["scenario"]: (row["hit_tokens"], row["prompt_tokens"]) for row in module.run()}
    assert rows["exact extension"] == (3520, 3584)
    # stable long prefix: 30,000 = 468 whole units + 48 tokens; the common prefix (468 units) is
    # persisted at the 2nd request and hit by the 6th: 29,952 of 30,060 = 99.64%
    assert rows["stable long prefix"] == (29952, 30060)
    assert rows["first line changes"] == (0, 2000)
