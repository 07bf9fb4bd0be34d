"""benchmarks/calibrate_moe.py's served_routing, the factors roofline.SERVED_ROUTING ships: each knot of
2^0 .. 2^14 tokens the median, over every shape and token count within half an octave of it, of the
same kernel's time under served (power-law) routing over its time under balanced routing. Hand-made
tables, hand-worked medians."""

from __future__ import annotations


import pandas as pd
import pytest

from conftest import benchmark_module


@pytest.fixture(scope="module")
def moe():
    return benchmark_module("calibrate_moe")


def table(rows):
    """A MoE table's rows: (hidden, tokens, latency ms); the other shape columns fixed."""
    return pd.DataFrame([{"hidden_size": h, "inter_size": 1536, "topk": 8, "num_experts": 256, "moe_tp_size": 4,
                          "num_tokens": n, "latency": ms} for h, n, ms in rows])


def test_each_knot_is_the_median_ratio_within_half_an_octave(moe):
    from kvreplay.serving.timing.roofline import MOE_ROUTING_KNOTS

    # two shapes (hidden 2048 and 3072) at 1, 2, 3, 1,024, 1,536 and 16,384 tokens: 2 tokens (log2 1) are
    # the knot at 2^1's, 3 (log2 1.58, within half an octave of 2) the knot at 2^2's, 1,536 (log2 10.58) 2^11's
    balanced = table([(2048, 1, 1.0), (3072, 1, 1.0), (2048, 2, 1.0), (2048, 3, 2.0), (3072, 3, 2.0),
                      (2048, 1024, 4.0), (3072, 1024, 4.0), (2048, 1536, 5.0), (2048, 16384, 10.0)])
    served = table([(2048, 1, 0.9), (3072, 1, 0.95), (2048, 2, 1.0), (2048, 3, 1.6), (3072, 3, 1.8),
                    (2048, 1024, 5.6), (3072, 1024, 4.8), (2048, 1536, 6.0), (2048, 16384, 10.5),
                    (4096, 1024, 9.0)])  # a shape timed only under served routing: no ratio
    f = moe.served_routing(balanced, served)
    assert len(f) == MOE_ROUTING_KNOTS
    assert f[0] == pytest.approx(0.925)  # 1 token: median of 0.9 and 0.95
    assert f[1] == 1.0  # 2 tokens
    assert f[2] == pytest.approx(0.85)  # 3 tokens: median of 0.8 and 0.9
    assert f[10] == pytest.approx(1.3)  # 1,024 tokens: median of 1.4 and 1.2
    assert f[11] == pytest.approx(1.2)  # 1,536 tokens
    assert f[14] == pytest.approx(1.05)  # 16,384 tokens
    # a knot no row is near: nan, which the shipped table must not hold
    assert all(x != x for x in (f[3], f[12], f[13]))


def test_the_shipped_factors_are_finite_and_one_per_knot():
    from kvreplay.serving.timing.roofline import MOE_ROUTING_KNOTS, MOE_WEIGHT_BYTES, SERVED_ROUTING

    assert set(SERVED_ROUTING) == set(MOE_WEIGHT_BYTES)
    for knots in SERVED_ROUTING.values():
        assert len(knots) == MOE_ROUTING_KNOTS and all(0.5 < x < 2.0 for x in knots)


def test_the_floor_takes_the_least_factor_at_as_many_tokens_or_more():
    # a step's floor bounds every step with more work: under served routing the factor falls with the
    # tokens at small counts, so the floor's factor is the least at this count or any larger one
    from kvreplay.serving.timing.roofline import SERVED_ROUTING, served_routing, served_routing_floor

    for kernel in SERVED_ROUTING:
        for tokens in (1, 3, 5, 16, 100, 1000, 20000):
            ahead = [served_routing(kernel, t) for t in range(tokens, 40000, 7)]
            assert served_routing_floor(kernel, tokens) == pytest.approx(min(ahead), abs=0.02)
            assert served_routing_floor(kernel, tokens) <= min(ahead) + 1e-12
    assert served_routing_floor("no such kernel", 5) == 1.0
