"""The commands and figures docs/sessions.md documents, run on the Claude Code samples (skipped
without ../shared): a closed run's per-turn and Little's-law lines, 16 concurrent sessions closed
and open, the sweep over concurrent sessions with its capacity line, and `plan --sessions` with
the session router and with round-robin."""

from __future__ import annotations

import re

import pytest

from conftest import CLAUDE_CODE, shared_path
from doc_excerpts import assert_shows, example
from test_cli import fails, kv

MODEL = ("--model", "Llama-3.1-8B")


def run(*args) -> str:
    r = kv(*args)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


@pytest.fixture(scope="module")
def samples():
    return shared_path(CLAUDE_CODE)


def test_a_closed_run_reports_turns_sessions_and_littles_law(samples):
    out = run("simulate", samples, "--arrivals", "closed", *MODEL, "--gpu", "H100")
    assert "think      35 recorded in the trace" in out
    assert "(35 of 38 requests wait)" in out
    assert ("sessions   none of the 3 sessions started in the judged span (each started during the warm-up), so no "
            "session time is judged: --warmup 0 judges them all, --sessions N runs more") in out
    assert "turns      0.627 per minute" in out
    assert re.search(r"3-5 +4 +0\.436 s +3\.85 s\n6-10 +5 +0\.152 s +0\.532 s\n11-20 +10 +0\.131 s +0\.306 s\n"
                     r"21\+ +12 +0\.234 s +0\.661 s", out)
    assert ("Little     X (R + Z) = 0.01046/s x (6.853 s + 133.3 s) = 1.465; measured open cycles 1.447; they differ "
            "by 1.2%, within the sampling error of a span this long (71%: the cycles its ends cut)") in out


def test_the_sample_sessions_judged_whole(samples):
    out = run("simulate", samples, "--arrivals", "closed", *MODEL, "--gpu", "H100", "--warmup", "0")
    assert ("sessions   3 judged sessions complete (started in the judged span, of 3 run): session time p50 1,280 s "
            "[1,270 s - 1,315 s], p90 3,066 s [3,066 s - 3,066 s], mean 1,479 s; 12.7 turns per session") in out
    assert "turns      0.716 per minute; think time 97.5% of the sessions' time" in out


def test_sixteen_sessions_closed_and_open(samples):
    closed = run("simulate", samples, "--sessions", "16", *MODEL, "--gpu", "H100")
    assert re.search(r"TTFT +12\.09 s +2\.60 s +2\.83 s - 3\.35 s +45\.61 s +43\.66 s - 60\.32 s", closed)
    assert "hit rate   46.62% of prompt tokens under concurrency" in closed
    assert "turns      7.47 per minute (0.467 per session); think time 90.7% of the sessions' time" in closed
    assert ("draws      16 concurrent sessions: 48 draws of the trace's 3 sessions (seeded permutations, seed 0; 45 "
            "copies with fresh ids for the blocks only their session holds)") in closed
    assert ("sessions   29 judged sessions complete (started in the judged span, of 48 run): session time p50 1,485 s "
            "[1,438 s - 1,551 s], p90 3,070 s [3,077 s - 3,070 s]") in closed
    assert ("measured open cycles 17.4 = 16 sessions open on average (of 16) + 1.4 subagents beside their agent; "
            "they differ by 10%, within the sampling error of a span this long (46%") in closed
    opened = run("simulate", samples, "--sessions", "16", "--arrivals", "open", *MODEL, "--gpu", "H100")
    assert re.search(r"TTFT +79\.15 s +2\.37 s +1\.77 s - 3\.26 s +297\.87 s +274\.52 s - 426\.99 s", opened)
    assert "hit rate   65.20% of prompt tokens under concurrency" in opened
    assert "turns      8.74 per minute" in opened
    assert ("open loop  263 of 420 judged requests that follow another were sent before it released them (169 before "
            "the answer they follow had even ended): a client that waits for its answers could not have sent them") in opened
    assert "Little " not in opened  # (an open loop has no cycles to count)


def test_ttft_against_concurrent_sessions(samples):
    out = run("simulate", samples, "--sessions-list", "4,8,16", *MODEL, "--gpu", "H100", "--slo-ttft", "2s")
    words, excerpt = example("kvreplay simulate claude-code-samples/ --sessions-list")
    assert words == ["simulate", "claude-code-samples/", "--sessions-list", "4,8,16", *MODEL, "--gpu", "H100",
                     "--slo-ttft", "2s"]
    assert_shows(excerpt, out)  # the README's example
    assert re.search(r"4 sessions +vllm +7,230 .* 661\.0 ms \[661\.5 ms - 638\.6 ms\] +88\.98", out)
    assert re.search(r"8 sessions +vllm +7,230 .* 2\.80 s \[2\.72 s - 3\.28 s\] +84\.55", out)
    assert re.search(r"16 sessions +vllm +7,230 .* 45\.61 s \[43\.66 s - 60\.32 s\] +46\.62", out)
    assert ("capacity   policy vllm, capacity_blocks 7230, instances 1: up to 4 concurrent sessions at TTFT p90 <= "
            "2.00 s (at the worst of the band's ends and its centre): 661.5 ms there; above it at 8") in out


def test_plan_for_concurrent_agents(samples, tmp_path):
    out = run("plan", samples, "--sessions", "8,16,32", *MODEL, "--slo-ttft-p90", "2s", "--tp", "2", "--routers",
              "session", "--max-instances", "16", "-o", tmp_path / "plan.json")
    eight, sixteen, thirty_two = out.split("\n\n")[1:4]
    assert eight.startswith("8 concurrent sessions: 1 configuration tried: 1 meets the SLOs")
    assert re.search(r"best  chosen   1 x 2 x H100 +1 / 1 / 1 +none +session +vllm +6\.00 .*"
                     r"TTFT p90 1\.54 s / 2\.00 s, 1,013-1,313 s, 61 req", eight)
    assert ("judged at the worst of the band's ends and its centre (a closed loop: here the centre of the band)"
            in eight)
    assert ("no configuration meets the SLOs; closest: H100 x2, tiers none, router session, policy vllm: at 16 "
            "instances (--max-instances) it still misses: TTFT p90 2.09 s against 2 s in the window 110-410 s "
            "(52 requests)") in sixteen
    assert ("no configuration meets the SLOs; closest: H100 x2, tiers none, router session, policy vllm: at 16 "
            "instances (--max-instances) it still misses: TTFT p90 2.32 s against 2 s in the window 113-413 s "
            "(93 requests)") in thirty_two
    assert ("capacity   1 x 2 x H100 (H100 x2, tiers none, router session, policy vllm): up to 8 concurrent sessions "
            "(of 8, 16, 32) at TTFT p90 <= 2 s; its worst window there: TTFT p90 1.54 s against 2 s; misses at 16") in out
    # the report serves each chosen deployment again, judged as the plan judged it (the band's runs
    # with their own arrivals, warm-up and steady span, at the worst of the three), and states the capacity
    from html import unescape

    run("report", samples, "--plan", tmp_path / "plan.json", "-o", tmp_path / "r.html")
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "r.html").read_text())))
    assert ("8 concurrent sessions 1 × 2 × H100, session, vllm, tiers none 406.3 ms [350.8 ms - 440.9 ms] 88.35% 226 "
            "of 226 (0, 0) yes meets at the worst of the band's ends and its centre (a closed loop: here the centre "
            "of the band): TTFT p90 1.54 s / 2.00 s, 1,013-1,313 s, 61 req") in text
    assert "differs from the plan's run" not in text
    assert "Capacity in concurrent sessions. 1 x 2 x H100" in text


def test_round_robin_scatters_the_agents_turns(samples):
    out = run("plan", samples, "--sessions", "16", *MODEL, "--slo-ttft-p90", "2s", "--tp", "2", "--max-instances", "16")
    assert "no configuration meets the SLOs" in out
    assert re.search(r"1  misses   16 x 2 x H100 +- +none +round-robin +vllm +96\.00 +[0-9.]+ +26\.64 .*"
                     r"TTFT p90 3\.37 s / 2\.00 s, 1,625-2,525 s", out)


def test_the_flags_refuse_what_they_cannot_mean(samples):
    plan = ("plan", samples, *MODEL, "--slo-ttft-p90", "2s", "--tp", "2")
    assert fails(*plan, "--sessions", "8", "--loads", "2") == ("kvreplay: --sessions is the load (concurrent sessions, "
                                                               "a closed loop): drop --loads / --rates")
    assert "every count of concurrent sessions must be a whole number >= 1, got '0'" in kv(*plan, "--sessions",
                                                                                          "0").stderr.decode()
    assert "--think-time" in fails(*plan, "--sessions", "8", "--think-time", "exp:5")
    sim = ("simulate", samples, *MODEL, "--gpu", "H100")
    assert fails(*sim, "--sessions", "8", "--sessions-list", "8,16") == (
        "kvreplay: give --sessions N (one run) or --sessions-list N,M,... (a sweep), not both")
    assert "drop --speedup / --rate" in fails(*sim, "--sessions", "8", "--speedup", "2")
