"""The HTML report: right numbers, self-contained, and it renders in a real browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import kvreplay
from conftest import MOONCAKE, shared_path
from kvreplay.cli import main
from kvreplay.analysis.overview import collect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# .ci/run installs Debian's chromium and sets this, so the browser test runs in CI instead of skipping.
REQUIRE_BROWSER = os.environ.get("KVREPLAY_REQUIRE_OPTIONAL") == "1"


def small_trace():
    # block_size 4: r2 and r4 repeat r1's two blocks; r3 shares only its first block.
    return kvreplay.Trace.from_requests([
        (["a", "b"], 8, 0.0), (["a", "b"], 8, 1000.0), (["a", "c"], 6, 2000.0), (["a", "b"], 7, 3000.0),
    ])


def test_collect_holds_the_replays_numbers():
    trace = small_trace()
    data = collect(trace, policies=["lru", "fifo"], capacities=[1, 2, 4], block_size=4)
    # Infinite cache: r2 8 + r3 4 + r4 7 = 19 of 29 prompt tokens.
    assert data["ceiling"]["total_hit_tokens"] == 19
    assert data["capacities"] == [1, 2, 4]
    assert data["focus_capacity"] == 2  # lru reaches half the ceiling there (test_default_operating_point...)
    lru_at_2 = kvreplay.replay(trace, "lru", 2, 4)
    focus = {f["label"]: f for f in data["focus"]}
    assert focus["lru"]["summary"]["total_hit_tokens"] == lru_at_2.total_hit_tokens
    assert sum(w["hit_tokens"] for w in focus["lru"]["over_time"]) == lru_at_2.total_hit_tokens
    assert len(focus["lru"]["request_hit_rates"]) == 4
    curve = {(r["policy"], r["cache_capacity_blocks"]): r["total_hit_tokens"] for r in data["curve"]}
    for c in (1, 2, 4):
        assert curve[("fifo", c)] == kvreplay.replay(trace, "fifo", c, 4).total_hit_tokens


def test_page_is_self_contained_and_states_its_window():
    page = kvreplay.report_html(small_trace(), policies=["lru"], capacities=[1, 2, 4], block_size=4, warmup_fraction=0.25)
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 5  # curve, the miss account's bars, stranded blocks, over time, per-request spread
    assert "<script" not in page
    # No external resource of any kind: nothing fetched by src/href/url(), no network at all.
    assert not re.search(r'(src|href)\s*=\s*"(?!#)', page)
    assert not re.search(r"url\((?!#)", page)
    assert "after warm-up: requests 2-4 of 4" in page
    assert "infinite-cache" in page
    assert "kvreplay report: &lt;memory&gt;</title>" in page


def test_page_says_why_the_cache_missed():
    # lru at 1 block (the focus: given), block size 4: r1 a, b first uses (8); r2 [a b]: a evicted (4), b
    # behind it (4: b is the one block cached); r3 [a c]: a evicted... each bar adds up to 100%
    trace = small_trace()
    data = collect(trace, policies=["lru", "fifo"], capacities=[1, 2, 4], block_size=4, focus_capacity=1)
    lru = kvreplay.replay(trace, "lru", 1, 4)
    rows = {p["label"]: p for p in data["misses"]["policies"]}
    assert rows["lru"]["account"]["tokens"] == lru.misses.totals()
    assert rows["lru"]["hit_tokens"] + sum(lru.misses.totals().values()) == 29
    assert rows["lru"]["headroom"]["levels"]["ceiling"]["hit_tokens"] == 19
    assert len(rows["lru"]["account"]["stranded_over_time"]["request"]) == 4
    page = kvreplay.report_html(trace, policies=["lru", "fifo"], capacities=[1, 2, 4], block_size=4, focus_capacity=1)
    assert "<h2>Why the cache missed</h2>" in page and "<h3>Stranded blocks</h3>" in page
    # one stacked bar per policy and capacity, a segment per cause (gid account-POLICY-CAUSE)
    for i in (0, 1):
        for part in ("hit", "first_use", "evicted"):
            assert page.count(f'id="account-{i}-{part}') == 3, (i, part)
    assert 'id="stranded-series-0' in page and 'id="stranded-series-1' in page
    advice = re.findall(r'<ul data-advice="1">(.*?)</ul>', page)
    assert advice and 1 <= advice[0].count("<li>") <= 3


def test_page_states_a_hybrid_models_semantics():
    # gpt-oss-120b's sliding-window layers: the page's replays serve every layer as full attention,
    # and it says so, naming the commands that replay its groups; a dense model's page says nothing
    def note(model):
        page = kvreplay.report_html(small_trace(), policies=["lru"], capacities=[1, 2], block_size=4, model=model)
        found = re.findall(r'data-note="kv-semantics"><b>KV semantics.</b> ([^<]+)</p>', page)
        return found[0] if found else None

    text = note("gpt-oss-120b")
    assert text.startswith("gpt-oss-120b has full, sliding_window layer groups, but every replay here (and "
                           "simulation, in a report) serves every layer as full attention")
    assert "kvreplay simulate --model gpt-oss-120b` serves them with it" in text
    assert "kvreplay run --model gpt-oss-120b" in text
    assert note("Llama-4-Scout").startswith("Llama-4-Scout-17B-16E-Instruct has chunked_local, full layer groups. "
                                            "vLLM 0.33.0 serves its chunked-local layers as full attention")
    assert note("Llama-3.1-8B") is None and note(None) is None


def looks_rendered(png_path) -> tuple[float, int]:
    """(share of pixels that are not near-white, number of saturated colour pixels) of a screenshot."""
    from matplotlib.image import imread

    img = imread(png_path)[..., :3]
    ink = float((img.min(axis=2) < 0.9).mean())
    colour = int(((img.max(axis=2) - img.min(axis=2)) > 0.3).sum())
    return ink, colour


def screenshot(html_path, png_path, height: int = 2400) -> str:
    """Open the page in headless Chromium; return what its console logged."""
    if CHROMIUM is None:
        if REQUIRE_BROWSER:
            pytest.fail("chromium is required here (KVREPLAY_REQUIRE_OPTIONAL=1) but not installed")
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size=1200,{height}",
         f"--screenshot={png_path}", "--enable-logging=stderr", "--v=0", f"file://{html_path}"],
        capture_output=True, text=True, timeout=120,
    )
    assert os.path.exists(png_path), done.stderr[-2000:]
    return "\n".join(line for line in done.stderr.splitlines() if ":CONSOLE" in line)


def test_a_broken_page_is_caught(tmp_path):
    # The checks below must be able to fail: a page that logs an error and draws nothing.
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('boom'); missingFunction();</script></body></html>")
    console = screenshot(page, tmp_path / "broken.png")
    assert "boom" in console and "missingFunction" in console
    ink, colour = looks_rendered(tmp_path / "broken.png")
    assert ink < 0.001 and colour == 0


def colour_pixels(png_path, hex_colour: str, tolerance: float = 0.08) -> int:
    """Pixels of a screenshot within `tolerance` (RGB, 0..1 per channel) of a colour."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    img = imread(png_path)[..., :3]
    return int((np.abs(img - np.asarray(to_rgb(hex_colour))).max(axis=2) < tolerance).sum())


def test_report_renders_in_chromium(tmp_path):
    from kvreplay.output.plot import PALETTE
    from kvreplay.trace.synth import chat_workload

    trace = chat_workload(num_conversations=60)
    out = tmp_path / "report.html"
    policies = ["s3fifo", "lru", "fifo", "sieve", "arc", "vllm"]
    page = kvreplay.report_html(trace, policies=policies, engine="reference")
    out.write_text(page)
    console = screenshot(out, tmp_path / "report.png", height=6000)
    assert console == ""
    ink, colour = looks_rendered(tmp_path / "report.png")
    assert ink > 0.02  # text, tables and charts
    assert colour > 500  # the coloured policy lines of the charts
    # Each policy's own colour is on screen (drawn lines, markers and histogram edges), and the
    # page's SVG gives the six series six different colours.
    assert series_colours(page, "curve-series") == dict(enumerate(PALETTE[:6]))
    for hex_colour in PALETTE[:6]:
        assert colour_pixels(tmp_path / "report.png", hex_colour) > 50, hex_colour
    assert colour_pixels(tmp_path / "report.png", PALETTE[6]) < 5  # a seventh colour no series uses
    # the miss account's stacked bars: first uses in grey, partial blocks (vllm) in purple
    from kvreplay.output.misses_plot import COLORS

    for cause in ("first_use", "partial_block"):
        assert colour_pixels(tmp_path / "report.png", COLORS[cause][0]) > 50, cause


def test_cli_report_on_a_real_trace(tmp_path, capsys):
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    out = tmp_path / "conv.html"
    code = main(["report", str(path), "--policies", "s3fifo,lru", "--capacities", "1000,4096,16384", "--capacity", "4096",
                 "-o", str(out)])
    assert code == 0
    page = out.read_text()
    # Golden totals at 4096 blocks (shared/golden): s3fifo 15,168,640 and lru 12,923,638 of 144,793,823.
    assert f"{100 * 15_168_640 / 144_793_823:.2f}%" in page
    assert f"{100 * 12_923_638 / 144_793_823:.2f}%" in page
    assert "37.36%" in page  # infinite-cache ceiling, 54,098,411 tokens
    assert "whole trace (12031 requests)" in page
    assert "wrote" in capsys.readouterr().err


def test_cli_report_with_warm_up_on_a_real_trace(tmp_path, capsys):
    # Issue 11's case: --warmup-fraction 0.5 used to put whole-trace requests and prompt tokens
    # next to a post-warm-up ceiling, under the trace's absolute path.
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    out = tmp_path / "conv.html"
    assert main(["report", str(path), "--policies", "s3fifo,lru", "--capacities", "1000,4096,16384",
                 "--warmup-fraction", "0.5", "-o", str(out)]) == 0
    page = out.read_text()
    trace = kvreplay.load_trace(str(path))
    measured = int(trace.input_length[6015:].sum())  # floor(0.5 x 12,031) = 6,015 warm-up requests
    kpi = tiles(page)
    assert kpi["requests measured"] == "6,016"
    assert kpi["prompt tokens measured"] == f"{measured:,}" == "67,915,607"
    assert "<title>kvreplay report: conversation_trace.jsonl</title>" in page
    assert str(path.parent) not in page
    capsys.readouterr()


def test_cli_report_failure_leaves_no_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1}\n')
    out = tmp_path / "r.html"
    assert main(["report", str(bad), "-o", str(out)]) == 2
    assert f"{bad}:2:" in capsys.readouterr().err
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl"]


def test_request_rates_in_page_match_metrics():
    trace = small_trace()
    data = collect(trace, policies=["lru"], capacities=[4], block_size=4)
    rates = np.asarray(data["focus"][0]["request_hit_rates"])
    # lru at 4 blocks: r1 0, r2 8/8, r3 4/6, r4 7/7.
    assert rates.tolist() == pytest.approx([0.0, 1.0, 4 / 6, 1.0])


# --- one window, named file, explained operating point, no short last window (issue 11 item 6) ---

def window_trace():
    # block_size 4. With --warmup-fraction 0.5 the first two requests (x, y) only warm the cache;
    # the measured window is r3 [a, b] (8 tokens) and r4 [a, b] (7 tokens).
    return kvreplay.Trace.from_requests([
        (["x", "y"], 8, 0.0), (["x", "y"], 8, 1000.0), (["a", "b"], 8, 2000.0), (["a", "b"], 7, 3000.0),
    ])


def tiles(page: str) -> dict:
    return dict(re.findall(r'<div data-kpi="([^"]+)">[^<]*<b>([^<]+)</b>', page))


def test_tiles_count_only_the_measured_window():
    data = collect(window_trace(), policies=["lru"], capacities=[1, 4], block_size=4, warmup_fraction=0.5)
    assert data["window"]["warmup_requests"] == 2 and data["window"]["measured_requests"] == 2
    m, whole = data["measured"], data["whole_trace"]
    assert (m["num_requests"], m["total_prompt_tokens"], m["num_block_accesses"], m["num_unique_blocks"]) == (2, 15, 4, 2)
    assert (whole["num_requests"], whole["total_prompt_tokens"], whole["num_block_accesses"], whole["num_unique_blocks"]) == (4, 31, 8, 4)
    assert m["time_span_s"] == 1.0 and whole["time_span_s"] == 3.0
    # Ceiling over the window: r3 misses, r4 hits min(2 x 4, 7) = 7 of 15. Whole trace: r2 8 + r4 7 = 15 of 31.
    assert data["ceiling"]["total_hit_tokens"] == 7 and data["ceiling"]["total_prompt_tokens"] == 15
    assert whole["infinite_cache_hit_rate"] == pytest.approx(15 / 31)

    page = kvreplay.report_html(window_trace(), policies=["lru"], capacities=[1, 4], block_size=4, warmup_fraction=0.5)
    kpi = tiles(page)
    assert kpi["requests measured"] == "2"  # not the whole trace's 4
    assert kpi["prompt tokens measured"] == "15"  # not 31
    assert kpi["unique blocks touched"] == "2"
    assert kpi["infinite-cache ceiling"] == f"{100 * 7 / 15:.2f}%"
    # The trace table labels its two columns; the whole trace is there for reference only.
    assert "measured window (requests 3-4)" in page and "whole trace (for reference)" in page
    assert "<td>requests</td><td class=\"n\">2</td><td class=\"n\">4</td>" in page
    assert "<td>prompt tokens</td><td class=\"n\">15</td><td class=\"n\">31</td>" in page


def test_without_warm_up_the_tiles_are_the_whole_trace():
    page = kvreplay.report_html(window_trace(), policies=["lru"], capacities=[1, 4], block_size=4)
    kpi = tiles(page)
    assert kpi["requests"] == "4" and kpi["prompt tokens"] == "31" and kpi["unique blocks"] == "4"
    assert "whole trace (for reference)" not in page


def test_page_names_the_file_not_the_machines_path(tmp_path):
    deep = tmp_path / "home" / "someone" / "private"
    deep.mkdir(parents=True)
    trace = deep / "conv.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}\n'
                     '{"timestamp": 1000, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}\n')
    out = tmp_path / "r.html"
    assert main(["report", str(trace), "--block-size", "4", "--policies", "lru", "--capacities", "1,2", "-o", str(out)]) == 0
    page = out.read_text()
    assert "<title>kvreplay report: conv.jsonl</title>" in page and "<h1>kvreplay report: conv.jsonl</h1>" in page
    assert "<code>conv.jsonl</code>" in page
    assert str(deep) not in page and "someone" not in page
    assert main(["report", str(trace), "--block-size", "4", "--policies", "lru", "--capacities", "1,2",
                 "--title", "Q3 capacity review", "-o", str(out)]) == 0
    assert "<title>Q3 capacity review</title>" in out.read_text()


def test_default_operating_point_is_where_a_policy_reaches_half_the_ceiling():
    # Ceiling 19/29 = 65.5%, half 32.8%. At 1 block nothing hits (each request's second block
    # evicts its first). At 2 blocks lru hits r2 8 + r3 4 + r4 4 = 16/29 = 55.2% >= 32.8%: the
    # operating point is 2 blocks, not the middle of the curve (4).
    data = collect(small_trace(), policies=["lru", "fifo"], capacities=[1, 2, 4, 8, 16], block_size=4)
    assert data["focus_capacity"] == 2 and data["focus_rule"] == "half-ceiling"
    lru = next(f for f in data["focus"] if f["label"] == "lru")
    assert lru["summary"]["total_hit_tokens"] == 16
    assert "half the infinite-cache hit rate (32.76% of 65.52%)" in data["focus_reason"]
    page = kvreplay.report_html(small_trace(), policies=["lru", "fifo"], capacities=[1, 2, 4, 8, 16], block_size=4)
    assert "<h2>At 2 blocks</h2>" in page
    assert "Why this capacity: the smallest capacity on the curve where the best policy reaches half" in page
    assert tiles(page)["at 2 blocks"] == f"{100 * 16 / 29:.2f}% (lru)"
    assert "where a policy first reaches half the ceiling" in page
    assert '<td class="n">2 &#9664;</td>' in page  # marked in the curve's table


def test_operating_point_rules():
    from kvreplay.analysis.overview import choose_focus

    rows = [{"policy": p, "cache_capacity_blocks": c, "hit_rate": h} for p, c, h in (
        ("lru", 10, 0.05), ("lru", 100, 0.15), ("lru", 1000, 0.25), ("fifo", 10, 0.04), ("fifo", 100, 0.21),
        ("fifo", 1000, 0.22), ("belady", 10, 0.30), ("belady", 100, 0.35), ("belady", 1000, 0.39))]
    # Half of 0.40 is 0.20: fifo reaches it at 100 (belady, a bound, at 10 does not count).
    assert choose_focus(rows, ["lru", "fifo", "belady"], 0.40, [10, 100, 1000])[:2] == (100, "half-ceiling")
    # No policy reaches half of 0.60: the largest capacity, said so.
    cap, rule, reason = choose_focus(rows, ["lru", "fifo"], 0.60, [10, 100, 1000])
    assert (cap, rule) == (1000, "largest") and "no policy reaches half" in reason
    # No reuse at all: the middle of the curve, said so.
    assert choose_focus(rows, ["lru"], 0.0, [10, 100, 1000])[:2] == (100, "middle")


def test_given_capacity_is_named_as_given():
    page = kvreplay.report_html(small_trace(), policies=["lru"], capacities=[1, 2, 4], focus_capacity=4, block_size=4)
    assert "<h2>At 4 blocks</h2>" in page and "Why this capacity: the capacity asked for (--capacity)." in page
    assert tiles(page)["at 4 blocks"].endswith("(lru)")


def test_leftover_requests_join_the_last_time_window():
    # 262 requests, the first 131 warm-up: 131 measured, 131 // 50 = 2 < 10, so windows of 10
    # requests: 13 of 10 and 1 left over, which joins the 13th (11 requests) instead of making a
    # point of its own from one request.
    requests = [([f"s{i % 7}", f"t{i}"], 8, 1000.0 * i) for i in range(262)]
    data = collect(kvreplay.Trace.from_requests(requests), policies=["lru"], capacities=[4], block_size=4,
                   warmup_fraction=0.5)
    windows = data["focus"][0]["over_time"]
    assert data["requests_per_time_window"] == 10
    assert [w["requests"] for w in windows] == [10] * 12 + [11]
    assert windows[0]["first_request"] == 132 and windows[-1]["last_request"] == 262
    assert windows[-1]["first_request"] == 252
    lru = kvreplay.replay(kvreplay.Trace.from_requests(requests), "lru", 4, 4, warmup_fraction=0.5)
    assert sum(w["hit_tokens"] for w in windows) == lru.total_hit_tokens
    assert windows[-1]["hit_rate"] == pytest.approx(windows[-1]["hit_tokens"] / windows[-1]["prompt_tokens"])
    assert data["last_time_window_requests"] == 11


def test_merge_short_tail_by_hand():
    from kvreplay.analysis.overview import merge_short_tail

    windows = [{"first_request": 1, "last_request": 4, "requests": 4, "prompt_tokens": 40, "hit_tokens": 10, "hit_rate": 0.25},
               {"first_request": 5, "last_request": 5, "requests": 1, "prompt_tokens": 10, "hit_tokens": 10, "hit_rate": 1.0}]
    assert merge_short_tail(windows, 4) == [{"first_request": 1, "last_request": 5, "requests": 5, "prompt_tokens": 50,
                                             "hit_tokens": 20, "hit_rate": 0.4}]
    assert merge_short_tail(windows[:1], 4) == windows[:1]
    full = [dict(windows[0]), dict(windows[0], first_request=5, last_request=8)]
    assert merge_short_tail(full, 4) == full


# --- charts a colleague can read (issue 11 item 7) ----------------------------------------

def series_colours(page: str, prefix: str) -> dict[int, str]:
    """Series index -> the colour of its first drawn path, from the page's inline SVG."""
    out = {}
    for index, style in re.findall(rf'<g id="{prefix}-(\d+)">\s*<path [^>]*?style="([^"]+)"', page):
        colour = re.search(r"(?:stroke|fill): (#[0-9a-f]{6})", style).group(1)
        out.setdefault(int(index), colour)
    return out


ALL_BUT_INFINITE = ["s3fifo", "lru", "fifo", "lru-tail", "sieve", "clock", "arc", "2q", "lfu", "ttl", "vllm", "radix", "belady"]


def test_every_series_has_its_own_colour_on_every_chart():
    from kvreplay.output.plot import PALETTE
    from kvreplay.trace.synth import chat_workload

    trace = chat_workload(num_conversations=20)
    page = kvreplay.report_html(trace, policies=ALL_BUT_INFINITE, capacities=[8, 32, 128], engine="reference")
    curve = series_colours(page, "curve-series")
    assert sorted(curve) == list(range(13))
    assert len(set(curve.values())) == 13  # pairwise distinct (s3fifo and vllm used to be both blue)
    assert curve[0] != curve[10]  # s3fifo, vllm
    assert [curve[i] for i in range(13)] == list(PALETTE[:13])
    # The same policy has the same colour on the curve, over time and in its histogram panel.
    assert series_colours(page, "time-series") == curve
    assert series_colours(page, "hist-series") == curve
    # Many series: the curve's table turns round (policies down), so it stays within the page.
    assert "<th>policy / capacity (blocks)</th>" in page


def test_report_zoom_panel_follows_the_zoom_argument():
    # zoom=(lo, hi) forces the second panel; zoom=False has none; the small trace's curve fills
    # the chart's height, so "auto" adds none either.
    kwargs = dict(policies=["lru"], capacities=[1, 2, 4], block_size=4)
    page = kvreplay.report_html(small_trace(), zoom=(0, 50), **kwargs)
    assert "curve-zoom-series-0" in page and "zoom: hit rates 0.0-50.0%" in page
    assert "curve-zoom-series" not in kvreplay.report_html(small_trace(), zoom=False, **kwargs)
    assert "curve-zoom-series" not in kvreplay.report_html(small_trace(), **kwargs)
