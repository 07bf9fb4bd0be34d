"""Rate profiles (serving/profile.py): arrivals reshaped so their rate follows a multiplier."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay.errors import KvreplayError
from kvreplay.serving.profile import diurnal, load_profile, reshape
from kvreplay.serving.simulate import simulate

from sim_cases import trace_of


def test_a_linear_ramp_by_hand():
    # m(f) = 2f has mean 1 and integral M(f) = f^2: an arrival at t moves to S sqrt(t / S)
    points = np.array([[0.0, 0.0], [1.0, 2.0]])
    out = reshape(np.array([0.0, 25.0, 64.0, 100.0]), points)
    assert out == pytest.approx([0.0, 50.0, 80.0, 100.0], abs=1e-3)


def test_diurnal_shape():
    p = diurnal()
    assert p[0, 0] == 0 and p[-1, 0] == 1 and len(p) == 25
    assert p[14, 1] == pytest.approx(1.5) and p[2, 1] == pytest.approx(0.5)  # peak 14:00, trough 02:00: 3:1
    # uniform arrivals over a day: the busiest hour gets about 1.5x an even share, the quietest 0.5x
    t = np.linspace(0, 86400, 240_001)
    hour = np.floor(reshape(t, p) / 3600).clip(0, 23)
    counts = np.bincount(hour.astype(int), minlength=24) / (len(t) / 24)
    assert counts[14] == pytest.approx(1.5, abs=0.02) and counts[2] == pytest.approx(0.5, abs=0.02)


def test_files_and_bad_profiles(tmp_path):
    good = tmp_path / "p.csv"
    good.write_text("fraction,multiplier\n0,1\n0.5,3\n1,1\n")
    points, name = load_profile(str(good))
    assert points.tolist() == [[0, 1], [0.5, 3], [1, 1]] and name == str(good)
    bad = tmp_path / "b.csv"
    bad.write_text("fraction,multiplier\n0,1\n0.5\n1,1\n")
    with pytest.raises(KvreplayError, match="b.csv:3"):
        load_profile(str(bad))
    for pts, message in (([[0, 1]], "at least 2 points"), ([[0, 1], [0.9, 1]], "from 0 to 1"),
                         ([[0, -1], [1, 1]], ">= 0"), ([[0, 0], [1, 0]], "not all 0")):
        with pytest.raises(KvreplayError, match=message):
            load_profile(pts)


def test_simulate_reshapes_its_arrivals():
    t = trace_of(*[([f"r{k}"], 4, 25_000 * k, 1) for k in range(5)])  # 0, 25, 50, 75, 100 s
    r = simulate(t, "lru", 10, block_size=4, rate_profile=[[0.0, 0.0], [1.0, 2.0]], compare_sequential=False)
    assert r.arrival_s == pytest.approx([0.0, 50.0, 70.71, 86.60, 100.0], abs=0.01)
    assert r.arrivals["rate_profile"] == "given points"
