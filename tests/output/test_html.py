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
    assert data["focus_capacity"] == 2  # the middle of the curve
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
    assert page.count("<svg") == 3  # curve, over time, per-request spread
    assert "<script" not in page
    # No external resource of any kind: nothing fetched by src/href/url(), no network at all.
    assert not re.search(r'(src|href)\s*=\s*"(?!#)', page)
    assert not re.search(r"url\((?!#)", page)
    assert "after warm-up: requests 2-4 of 4" in page
    assert "infinite-cache" in page


def looks_rendered(png_path) -> tuple[float, int]:
    """(share of pixels that are not near-white, number of saturated colour pixels) of a screenshot."""
    from matplotlib.image import imread

    img = imread(png_path)[..., :3]
    ink = float((img.min(axis=2) < 0.9).mean())
    colour = int(((img.max(axis=2) - img.min(axis=2)) > 0.3).sum())
    return ink, colour


def screenshot(html_path, png_path) -> str:
    """Open the page in headless Chromium; return what its console logged."""
    if CHROMIUM is None:
        if REQUIRE_BROWSER:
            pytest.fail("chromium is required here (KVREPLAY_REQUIRE_OPTIONAL=1) but not installed")
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,2400",
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


def test_report_renders_in_chromium(tmp_path):
    from kvreplay.trace.synth import chat_workload

    trace = chat_workload(num_conversations=60)
    out = tmp_path / "report.html"
    out.write_text(kvreplay.report_html(trace, policies=["s3fifo", "lru"], engine="reference"))
    console = screenshot(out, tmp_path / "report.png")
    assert console == ""
    ink, colour = looks_rendered(tmp_path / "report.png")
    assert ink > 0.02  # text, tables and charts
    assert colour > 500  # the coloured policy lines of the charts


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
