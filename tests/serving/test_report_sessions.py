"""`kvreplay report --gpu --sessions N,M,...`: the serving section as a closed loop of concurrent
sessions, with per-turn TTFT, session times, Little's law and the capacity line (docs/sessions.md),
escaped (the page shows text read from files), written atomically, and its flags refused where
they cannot apply."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import CLAUDE_CODE, shared_path
from test_cli import kv

DATA = Path(__file__).resolve().parents[1] / "data"
CLAUDE = [str(DATA / "claude_a.json"), str(DATA / "claude_b.json")]
SERVED = ("--model", "Llama-3.1-8B", "--gpu", "H100")


def text_of(page: str) -> str:
    """The page's text: tags dropped, entities resolved, spaces collapsed."""
    body = re.sub(r"<svg.*?</svg>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def test_the_documented_report(tmp_path):
    samples = shared_path(CLAUDE_CODE)
    out = tmp_path / "report.html"
    r = kv("report", samples, *SERVED, "--sessions", "2,4,8", "--slo-ttft", "2s", "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    page = text_of(out.read_text())
    # the same runs as `simulate --sessions-list` (docs/sessions.md's table at 4 and 8)
    assert "4 sessions 164.4 ms [174.7 ms - 187.9 ms] 661.0 ms [661.5 ms - 638.6 ms] 88.98%" in page
    assert "8 sessions 205.0 ms [174.7 ms - 228.2 ms] 2.80 s [2.72 s - 3.28 s] 84.55%" in page
    assert ("up to 4 concurrent sessions at TTFT p90 <= 2.00 s (at the worst of the band's ends and its centre): "
            "661.5 ms there; above it at 8") in page
    assert "2 2 of 6 3,065.73 s 3,065.73 s 1.27 98.35%" in page
    assert "2 sessions 186.7 ms [174.7 ms - 208.5 ms] 661.0 ms [615.7 ms - 734.2 ms] 89.60%" in page
    assert "8 14 of 24 1,295.37 s 3,066.83 s 4.34 97.18%" in page  # sessions complete, session time p50 / p90, ...
    assert ("X (R + Z) = 0.073/s x (9.232 s + 76.13 s) = 6.232; measured open cycles 8.353 = 8 sessions open on "
            "average (of 8) + 0.353 subagents beside their agent") in page
    # per turn: p50 / p90 (count), one column per count of sessions
    assert ("3-5 436.5 ms / 3.85 s (6) 296.7 ms / 3.85 s (14) 296.7 ms / 3.85 s (27)") in page
    assert "8 concurrent sessions: 24 draws of the trace's 3 sessions" in page


def test_a_small_closed_report_and_its_escaping(tmp_path):
    folder = tmp_path / "<i>x&"  # a directory name that is markup: the page must show it as text
    folder.mkdir()
    for path in CLAUDE:
        shutil.copy(path, folder / Path(path).name)
    out = tmp_path / "r.html"
    r = kv("report", str(folder), *SERVED, "--time-model", "roofline-raw", "--sessions", "1,2", "--think-time",
           "const:30s", "--capacities", "8,16", "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    raw = out.read_text()
    assert "<i>x&" not in raw and "&lt;i&gt;x&amp;" in raw
    page = text_of(raw)
    assert "1 sessions" in page and "2 sessions" in page
    assert "think times drawn from const:30s" in page
    assert "Give --slo-ttft to state the deployment's capacity in concurrent sessions." in page
    assert "Little's law" in page and "TTFT p50 / p90 by turn" in page
    assert "1 concurrent sessions: 3 draws of the trace's 2 sessions" in page


@pytest.mark.parametrize("args, names", [
    (("--sessions", "2"), "--sessions"),  # without --gpu
    ((*SERVED, "--speedups", "1", "--slo-ttft", "2s"), "--slo-ttft"),
    ((*SERVED, "--sessions", "2", "--speedups", "1"), "--speedups"),
    ((*SERVED, "--sessions", "2", "--arrivals", "open"), "--arrivals"),
])
def test_refused_and_nothing_written(tmp_path, args, names):
    out = tmp_path / "r.html"
    r = kv("report", *CLAUDE, *args, "-o", str(out))
    assert r.returncode == 2 and names in r.stderr.decode()
    assert not out.exists()


def test_the_policies_are_ranked_at_the_largest_count():
    """A report --sessions ranks its policies served at its largest count: the drawn sessions' own
    requests, against their sequential replay (not the trace's requests, which they are not)."""
    from kvreplay import load_trace, simulate
    from kvreplay.serving.ranking import served_ranking

    trace = load_trace(CLAUDE)
    ranked = served_ranking(trace, ["lru", "vllm"], model="Llama-3.1-8B", gpu="H100", time_model="roofline-raw",
                            load=("sessions", 2))
    assert ranked["deployment"]["load"] == ["sessions", 2]
    lru = next(row for row in ranked["rows"] if row["policy"] == "lru")
    r = simulate(trace, "lru", None, model="Llama-3.1-8B", gpu="H100", time_model="roofline-raw", sessions=2,
                 band_runs=False, kv_semantics="full", warmup="auto")
    assert lru["served_hit_rate"] == r.hit_rate and lru["offline_hit_rate"] == r.sequential_hit_rate
    assert lru["requests"] == int(r.judged.sum()) and r.num_requests > len(trace)  # the drawn copies
    assert json.dumps(ranked)  # JSON-ready
