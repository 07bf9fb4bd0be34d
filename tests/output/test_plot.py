"""Figures: the right lines with the right values, written atomically."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import pytest

from kvreplay.errors import ConfigError, OutputError
from kvreplay.output import plot

ROWS = [
    {"policy": "lru", "params": {}, "cache_capacity_blocks": 100, "hit_rate": 0.10},
    {"policy": "lru", "params": {}, "cache_capacity_blocks": 10, "hit_rate": 0.02},
    {"policy": "fifo", "params": {}, "cache_capacity_blocks": 10, "hit_rate": 0.01},
    {"policy": "fifo", "params": {}, "cache_capacity_blocks": 100, "hit_rate": 0.08},
    {"policy": "belady", "params": {"admit_bypass": False}, "cache_capacity_blocks": 10, "hit_rate": 0.05},
    {"policy": "infinite", "params": {}, "cache_capacity_blocks": 100, "hit_rate": 0.30},
]


def test_curves_have_one_line_per_policy_sorted_by_capacity():
    fig = plot.curves_figure(ROWS)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"lru", "fifo", "belady (admit_bypass=False)", "infinite cache (30.0%)"}
    assert list(lines["lru"].get_xdata()) == [10, 100]
    assert list(lines["lru"].get_ydata()) == pytest.approx([2.0, 10.0])
    assert list(lines["fifo"].get_ydata()) == pytest.approx([1.0, 8.0])
    assert lines["belady (admit_bypass=False)"].get_linestyle() == "--"
    assert list(lines["infinite cache (30.0%)"].get_ydata()) == pytest.approx([30.0, 30.0])  # horizontal
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "cache capacity (blocks)"


def test_curves_in_gib():
    # 128 KiB per token x 512 tokens = 64 MiB per block: 100 blocks = 6.25 GiB.
    fig = plot.curves_figure(ROWS[:2], bytes_per_block=131072 * 512, capacity_note="llama-3.1-8b bf16")
    ax = fig.axes[0]
    assert list(ax.get_lines()[0].get_xdata()) == pytest.approx([0.625, 6.25])
    assert ax.get_xlabel() == "KV cache (GiB), llama-3.1-8b bf16"


def test_several_traces_are_labelled():
    rows = [dict(r, trace="a") for r in ROWS[:2]] + [dict(r, trace="b") for r in ROWS[:2]]
    labels = [line.get_label() for line in plot.curves_figure(rows).axes[0].get_lines()]
    assert labels == ["a: lru", "b: lru"]


def test_save_png_and_svg(tmp_path):
    fig = plot.curves_figure(ROWS)
    png, svg = tmp_path / "c.png", tmp_path / "c.svg"
    plot.save_figure(fig, str(png))
    plot.save_figure(fig, str(svg))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg")
    assert sorted(os.listdir(tmp_path)) == ["c.png", "c.svg"]  # no temporary files left


def test_bad_names_fail_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="must end in"):
        plot.check_plot_path(str(tmp_path / "curve.jpg"))
    with pytest.raises(ConfigError):
        plot.save_figure(plot.curves_figure(ROWS), str(tmp_path / "curve.txt"))
    with pytest.raises(OutputError):
        plot.save_figure(plot.curves_figure(ROWS), str(tmp_path / "missing-dir" / "c.png"))
    assert os.listdir(tmp_path) == []


def test_over_time_and_histogram():
    windows = [{"last_request": 10, "hit_rate": 0.5}, {"last_request": 20, "hit_rate": 0.25}]
    ax = plot.over_time_figure({"lru": windows}).axes[0]
    assert list(ax.get_lines()[0].get_xdata()) == [10, 20]
    assert list(ax.get_lines()[0].get_ydata()) == [50.0, 25.0]
    ax = plot.request_histogram_figure({"lru": [0.0, 0.0, 1.0]}).axes[0]
    # 21 edges -> 20 bins of 5 points; two requests at 0% land in the first, one at 100% in the last.
    counts = [patch for patch in ax.patches]
    assert len(counts) == 1
    heights = ax.patches[0].get_xy()[:, 1]
    assert heights.max() == 2.0
