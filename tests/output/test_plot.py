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


# --- readability (issue 11 item 7) ---------------------------------------------------------

POLICIES_14 = ["s3fifo", "lru", "fifo", "lru-tail", "sieve", "clock", "arc", "2q", "lfu", "ttl", "vllm", "radix",
               "belady", "spare"]


def many_series(names=POLICIES_14, caps=(16, 160, 1600)):
    rows = [{"policy": name, "params": {}, "cache_capacity_blocks": c, "hit_rate": 0.01 * (i + 1) + 0.001 * c / 16}
            for i, name in enumerate(names) for c in caps]
    return rows + [{"policy": "infinite", "params": {}, "cache_capacity_blocks": caps[-1], "hit_rate": 0.9}]


def lab(hex_colour: str):
    """CIELAB (D65) of an sRGB colour: the distance a reader sees between two colours."""
    from matplotlib.colors import to_rgb

    rgb = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(hex_colour)]
    x = (0.4124 * rgb[0] + 0.3576 * rgb[1] + 0.1805 * rgb[2]) / 0.95047
    y = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    z = (0.0193 * rgb[0] + 0.1192 * rgb[1] + 0.9505 * rgb[2]) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_fourteen_series_have_distinct_colours_and_markers():
    from matplotlib.colors import to_hex

    ax = plot.curves_figure(many_series(), zoom=False).axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("infinite")]
    assert [line.get_label() for line in lines] == POLICIES_14
    colours = [to_hex(line.get_color()) for line in lines]
    markers = [line.get_marker() for line in lines]
    assert len(set(colours)) == 14  # pairwise distinct (s3fifo and vllm were both blue)
    assert len(set(markers)) == 13  # 13 marker shapes; the 14th repeats the first with another colour
    assert len({(c, m) for c, m in zip(colours, markers)}) == 14
    assert lines[12].get_linestyle() == "--"  # belady, a bound, dashed
    # The ceiling is grey and dotted: no series takes its colour.
    ceiling = next(line for line in ax.get_lines() if line.get_label().startswith("infinite"))
    assert to_hex(ceiling.get_color()) not in colours and ceiling.get_linestyle() == ":"


def test_palette_colours_are_far_apart():
    import itertools
    import math

    assert len(set(plot.PALETTE)) == len(plot.PALETTE) == 20
    gaps = {(a, b): math.dist(lab(a), lab(b)) for a, b in itertools.combinations(plot.PALETTE, 2)}
    first14 = {k: v for k, v in gaps.items() if k[0] in plot.PALETTE[:14] and k[1] in plot.PALETTE[:14]}
    # A CIELAB distance above ~10 is plainly visible; the nearest pair of the first 14 (tab10's
    # purple and pink) is 27.7 apart, of all 20 (tab20b's indigo and plum) 23.2.
    assert min(first14.values()) > 27
    assert min(gaps.values()) > 20
    # (colour, marker, line style) stays unique well past 20 series.
    styles = [tuple(sorted((k, str(v)) for k, v in plot.series_style(i).items())) for i in range(60)]
    assert len(set(styles)) == 60


def test_legend_sits_outside_the_data():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plot.curves_figure(many_series())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend inside an axes
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert box.x0 >= ax.get_window_extent(renderer).x1  # entirely to the right of every panel
    assert len(legend.get_texts()) == 15  # 14 series and the ceiling


def tick_labels(ax) -> list[str]:
    locs = [v for v in ax.xaxis.get_majorticklocs()]
    return list(ax.xaxis.get_major_formatter().format_ticks(locs))


def test_gib_axis_reads_16_32_64():
    # 64 MiB per block: 256, 512 and 1024 blocks are 16, 32 and 64 GiB.
    rows = [{"policy": "lru", "params": {}, "cache_capacity_blocks": c, "hit_rate": 0.04} for c in (256, 512, 1024)]
    ax = plot.curves_figure(rows, bytes_per_block=2 ** 26, zoom=False).axes[0]
    assert tick_labels(ax) == ["16", "32", "64"]


def test_capacity_ticks_are_plain_numbers():
    assert plot.capacity_ticks(16, 182_790, gib=False) == [100, 1_000, 10_000, 100_000]
    assert plot.capacity_ticks(1, 4, gib=False) == [1, 2]
    assert plot.capacity_ticks(8, 128, gib=True) == [8, 16, 32, 64, 128]
    # 2^-6 .. 2^5 GiB is 12 powers of two: every second one, so at most 9 ticks.
    assert plot.capacity_ticks(2 ** -6, 32, gib=True) == [2 ** -6, 2 ** -4, 0.25, 1, 4, 16]
    assert plot.capacity_ticks(20, 30, gib=True) == [20, 30]  # no power of two inside: the ends
    ax = plot.curves_figure(many_series(caps=(16, 1600, 160_000)), zoom=False).axes[0]
    labels = tick_labels(ax)
    assert labels == ["100", "1,000", "10,000", "100,000"]
    assert not any("$" in t or "^" in t or "10^" in t for t in labels)  # no 10^2 or mathtext


def low_band_rows():
    # Four policies between 3 and 6% at four capacities, under a ceiling of 37% (issue 11's case).
    rates = {"lru": (3.0, 3.5, 4.0, 5.0), "fifo": (3.2, 3.6, 4.2, 5.5), "s3fifo": (4.5, 4.6, 4.7, 6.0),
             "vllm": (3.4, 3.8, 4.1, 5.2)}
    rows = [{"policy": p, "params": {}, "cache_capacity_blocks": c, "hit_rate": v / 100}
            for p, vs in rates.items() for c, v in zip((100, 200, 400, 800), vs)]
    return rows + [{"policy": "infinite", "params": {}, "cache_capacity_blocks": 800, "hit_rate": 0.37}]


def test_low_band_gets_a_zoom_panel():
    fig = plot.curves_figure(low_band_rows())
    assert len(fig.axes) == 2
    main, zoomed = fig.axes
    assert main.get_ylim()[1] >= 37
    lo, hi = zoomed.get_ylim()
    # The points span 3.0-6.0%: padded by max(8% of the span, 0.25) = 0.25 on each side.
    assert (lo, hi) == pytest.approx((2.75, 6.25))
    assert len([line for line in zoomed.get_lines() if not line.get_label().startswith("infinite")]) == 4
    # Each series looks the same in both panels.
    for a, b in zip(main.get_lines(), zoomed.get_lines()):
        assert (a.get_color(), a.get_marker()) == (b.get_color(), b.get_marker())


def test_zoom_choices():
    assert len(plot.curves_figure(low_band_rows(), zoom=False).axes) == 1
    fig = plot.curves_figure(low_band_rows(), zoom=(2, 8))
    assert fig.axes[1].get_ylim() == pytest.approx((2, 8))
    # Curves that use the whole height need no zoom.
    assert len(plot.curves_figure(ROWS).axes) == 1
    with pytest.raises(ConfigError, match="zoom"):
        plot.curves_figure(ROWS, zoom=(8, 2))
    with pytest.raises(ConfigError, match="zoom"):
        plot.curves_figure(ROWS, zoom="yes")


def test_zoom_band_rule():
    # Every series below a quarter of the top (40 / 4 = 10) at 10 and 100; at 1000 lru is not.
    # Band 2.0-5.0%, padded by max(8% of 3.0, 0.25) = 0.25; the bottom stays off 0 as 2.0 >= 0.3 x 5.0.
    series = {"lru": [(10, 2.0), (100, 4.0), (1000, 30.0)], "fifo": [(10, 3.0), (100, 5.0), (1000, 9.0)]}
    assert plot.zoom_band(series, 40.0) == pytest.approx((10, 100, 1.75, 5.25))
    # A band that reaches near 0 starts at 0 (1.0 < 0.3 x 5.0); the pad is 8% of the 4.0 span, 0.32.
    assert plot.zoom_band({"lru": [(10, 1.0), (100, 5.0)]}, 40.0) == pytest.approx((10, 100, 0.0, 5.32))
    # One low capacity only: no band. A bound (belady) above the band does not stop it.
    assert plot.zoom_band({"lru": [(10, 2.0), (100, 30.0)]}, 40.0) is None
    series["belady"] = [(10, 20.0), (100, 25.0), (1000, 35.0)]
    assert plot.zoom_band(series, 40.0, bounds={"belady"}) == pytest.approx((10, 100, 1.75, 5.25))
    assert plot.zoom_band({"lru": [(10, 0.0), (100, 0.0)]}, 40.0) is None  # only zeros: nothing to see


def test_single_trace_rows_are_not_labelled_with_its_path():
    rows = [dict(r, trace="/home/someone/data/conv.jsonl") for r in ROWS[:2]]
    assert [line.get_label() for line in plot.curves_figure(rows).axes[0].get_lines()] == ["lru"]
    assert plot.curve_labels([{"policy": "s3fifo", "params": "small_ratio=0.1;max_freq=3"}]) == [
        "s3fifo (small_ratio=0.1, max_freq=3)"]


def test_histogram_small_multiples():
    from matplotlib.colors import to_hex

    rates = {"lru": [0.0, 0.0, 1.0], "fifo": [0.0, 0.5, 0.5, 1.0], "s3fifo": [0.26]}
    fig = plot.request_histogram_figure(rates, styles={"lru": 1, "fifo": 2, "s3fifo": 0})
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["lru: median 0.0%", "fifo: median 50.0%", "s3fifo: median 26.0%"]
    # Same axes everywhere, each panel in its policy's colour.
    assert len({ax.get_ylim() for ax in panels}) == 1 and all(ax.get_xlim() == (0, 100) for ax in panels)
    assert [to_hex(ax.patches[0].get_facecolor()) for ax in panels] == [plot.PALETTE[1], plot.PALETTE[2], plot.PALETTE[0]]
    heights = [ax.patches[0].get_xy()[:, 1].max() for ax in panels]
    assert heights == [2.0, 2.0, 1.0]  # lru: two requests at 0%; fifo: two at 50% (the 50-55 bin); s3fifo: one
    # Four policies: a 2 x 3 grid with two panels hidden.
    fig = plot.request_histogram_figure({k: [0.5] for k in "abcd"})
    assert sum(ax.get_visible() for ax in fig.axes) == 4 and len(fig.axes) == 6


def test_over_time_keeps_each_policys_style():
    from matplotlib.colors import to_hex

    windows = [{"last_request": 10, "hit_rate": 0.5}, {"last_request": 20, "hit_rate": 0.25}]
    ax = plot.over_time_figure({"lru": windows, "s3fifo": windows}, styles={"lru": 1, "s3fifo": 0}).axes[0]
    assert [to_hex(line.get_color()) for line in ax.get_lines()] == [plot.PALETTE[1], plot.PALETTE[0]]
    assert ax.get_legend() is None and len(ax.figure.legends) == 1
