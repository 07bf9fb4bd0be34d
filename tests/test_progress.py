"""Progress: the library tells a callback how far it has got (kvreplay.progress); the command line
draws it on stderr with rich when stderr is a terminal, and draws nothing in a pipe or with --quiet.
The terminal is a real pseudo-terminal (pty) here."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvreplay
from conftest import DATA
from kvreplay.analysis.mrc import mrc
from kvreplay.analysis.stats import stats
from kvreplay.trace.synth import synth
from kvreplay.trace.writers import write_trace

WALK = DATA / "walk.jsonl"
SRC = str(Path(kvreplay.__file__).resolve().parents[1])


class Calls(list):
    def __call__(self, done, total, what):
        self.append((done, total, what))

    def stages(self) -> list[str]:
        return list(dict.fromkeys(w for _, _, w in self))

    def check(self):
        """Each stage starts at 0 or above, never goes back, never passes its total, and ends at it."""
        for what in self.stages():
            mine = [(d, t) for d, t, w in self if w == what]
            done = [d for d, _ in mine]
            assert done == sorted(done) and all(0 <= d <= t for d, t in mine), (what, mine)
            assert mine[-1][0] == mine[-1][1], (what, mine[-1])
        return self


# ---------------------------------------------------------------- the library's calls

def test_loading_counts_bytes_on_disk(tmp_path):
    calls = Calls()
    kvreplay.load_trace([WALK, WALK], progress=calls)
    size = WALK.stat().st_size
    assert calls.check().stages() == ["bytes read"]
    assert calls[-1] == (2 * size, 2 * size, "bytes read")


def test_the_passes_count_requests():
    trace = kvreplay.load_trace(WALK)
    for run in (lambda p: mrc(trace, [8, 16], progress=p), lambda p: stats(trace, progress=p)):
        calls = Calls()
        run(calls)
        assert calls.check().stages() == ["requests scanned"]
        assert calls[0] == (0, 36, "requests scanned") and calls[-1] == (36, 36, "requests scanned")


def test_a_progress_callback_changes_no_number():
    trace = kvreplay.load_trace(WALK)
    assert stats(trace, progress=Calls()) == stats(trace)
    assert mrc(trace, [4, 8, 16], progress=Calls()).to_dict() == mrc(trace, [4, 8, 16]).to_dict()


def test_a_sweep_counts_its_replays():
    calls = Calls()
    result = kvreplay.sweep(kvreplay.load_trace(WALK), [8, 16], ["s3fifo", "fifo"], progress=calls)
    assert calls.check().stages() == ["replays"] and calls[-1][:2] == (4, 4) == (len(result["results"]),) * 2


def test_simulate_counts_its_runs_and_the_band():
    trace = kvreplay.load_trace(WALK)
    calls = Calls()
    kvreplay.simulate(trace, "vllm", 40, model="Llama-3.1-8B", gpu="H100", time_model="roofline", progress=calls)
    # the run, both ends of the calibrated roofline's band, the sequential replay
    assert calls.check() == [(0, 4, "runs"), (1, 4, "runs"), (2, 4, "runs"), (3, 4, "runs"), (4, 4, "runs")]
    calls = Calls()
    kvreplay.simulate(trace, "vllm", 40, time_model="instant", compare_sequential=False, progress=calls)
    assert calls.check() == [(0, 1, "runs"), (1, 1, "runs")]


def test_plan_counts_configurations():
    calls = Calls()
    kvreplay.plan(kvreplay.load_trace(WALK), model="Llama-3.1-8B", slo=kvreplay.SLO(ttft_p90_s="2s"),
                  gpus=["H100", "H200"], tps=[1], loads=[1, 2], max_instances=2, progress=calls)
    assert calls.check().stages() == ["configurations"]
    assert calls[0] == (0, 4, "configurations") and calls[-1] == (4, 4, "configurations")  # 2 GPUs x 2 loads
    # TP degrees searched when none is given: 1, 2, 4, 8 on each GPU, unfit ones counted too
    calls = Calls()
    kvreplay.plan(kvreplay.load_trace(WALK), model="Llama-3.1-8B", slo=kvreplay.SLO(ttft_p90_s="2s"),
                  gpus=["H100"], max_instances=2, progress=calls)
    assert calls.check()[-1] == (4, 4, "configurations")


def test_diagnose_counts_the_search_then_the_what_ifs():
    from kvreplay.analysis.diagnose import diagnose
    from kvreplay.trace.token_log import read_token_log

    calls = Calls()
    path = DATA / "tokens_span_at_32.jsonl"
    log = read_token_log(path, progress=calls)
    d = diagnose(log, progress=calls)
    assert calls.check().stages() == ["bytes read", "requests searched", "replays"]
    assert (path.stat().st_size, path.stat().st_size, "bytes read") in calls
    assert calls[-1] == (2, 2, "replays") and len(d["spans"]) == 1
    assert (40, 40, "requests searched") in calls


def test_the_served_ranking_and_the_verdicts_checks_count_their_runs():
    from kvreplay.serving.fixcheck import check_fix
    from kvreplay.serving.ranking import served_ranking

    trace = kvreplay.load_trace(WALK)
    calls = Calls()
    ranking = served_ranking(trace, ["lru", "belady", "fifo"], model="Llama-3.1-8B", gpu="H100",
                             time_model="roofline-raw", progress=calls)
    assert calls.check() == [(k, 3, "policies served") for k in range(4)] and len(ranking["rows"]) == 2
    # a run that does not keep up: its estimates (a load, an instance count) are each run once
    options = dict(policy="vllm", capacity=40, model="Llama-3.1-8B", gpu="H100", time_model="roofline-raw",
                   speedup=400.0)
    report = kvreplay.simulate(trace, **options)
    assert not report.summary()["keeps_up"]["keeps_up"]
    calls = Calls()
    checked = check_fix(trace, options, report, progress=calls)
    assert calls.check() == [(k, 2, "estimates checked by running them") for k in range(3)]
    assert set(checked) == {"load", "instances"}


def test_hashing_a_token_log_counts_bytes(tmp_path):
    from kvreplay.trace.hashing import hash_token_log

    calls = Calls()
    log = DATA / "tokens_roundtrip.jsonl"
    hash_token_log(log, tmp_path / "t.jsonl", block_size=4, progress=calls)
    assert calls.check() == [(log.stat().st_size, log.stat().st_size, "bytes read")]


def test_synth_and_writing_count_their_work(tmp_path):
    calls = Calls()
    trace = synth(300, seed=1, progress=calls)
    plain = synth(300, seed=1)
    assert np.array_equal(trace.blocks, plain.blocks) and np.array_equal(trace.timestamp, plain.timestamp)
    write_trace(trace, tmp_path / "t.jsonl", progress=calls)
    assert calls.check().stages() == ["block positions hashed", "requests written"]
    assert calls[-1] == (300, 300, "requests written")


# ---------------------------------------------------------------- the terminal

def on_pty(argv: list[str], delay_s: float | None = None, sync: bool = False) -> tuple[int, str, bytes]:
    """(exit code, what the terminal showed, stdout) of a command whose stderr is a pty. With
    `delay_s`, the bars appear after that long instead of DELAY_S (so a short command shows them);
    with `sync`, at the first progress call."""
    prelude = "" if delay_s is None else f"import kvreplay.cli.progress as p; p.DELAY_S = {delay_s}; "
    if sync:  # the bars are drawn at the first progress call, not by the timer's thread (which a fast
        # command can outrun on a loaded machine, drawing nothing)
        prelude += ("_call = p.Display.__call__; "
                    "p.Display.__call__ = lambda self, *a, **k: (_call(self, *a, **k), self._show()); ")
    code = f"import sys; {prelude}from kvreplay.cli import main; sys.exit(main({argv!r}))"
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=SRC, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        shown += chunk
    out = proc.stdout.read()
    proc.wait()
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace")).replace("\r", "\n")
    return proc.returncode, text, out


@pytest.fixture(scope="module")
def long_sweep(tmp_path_factory) -> list[str]:
    """A sweep of 6 replays of 1,500 requests on the reference engine (about a second)."""
    path = tmp_path_factory.mktemp("progress") / "t.jsonl"
    write_trace(synth(1500, seed=3, block_size=64), path)
    return ["sweep", str(path), "--capacities", "64,512,4096", "--policies", "s3fifo,fifo", "--engine", "reference",
            "--json"]


def test_a_terminal_shows_stages_done_of_total_elapsed_and_time_left(long_sweep):
    code, shown, out = on_pty(long_sweep, delay_s=0.0)
    assert code == 0
    frames = [line.strip() for line in shown.splitlines() if "replays" in line]
    assert frames, shown
    assert any(re.search(r"replays\s.*\s\d/6\s+elapsed \d:\d\d:\d\d left", f) for f in frames), frames
    assert re.search(r"bytes read .* \d+/\d+ MB", shown)
    # the bars are cleared before the output, which stays on stdout, whole
    assert len(json.loads(out)["results"]) == 6


def test_printed_output_after_the_bars(tmp_path):
    # print() holds sys.stdout without a reference of its own: the bars are cleared from inside its
    # write, and sys.stdout is given back only when the command ends (replacing it there crashed)
    argv = ["simulate", str(WALK), "--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw"]
    code, shown, out = on_pty(argv, delay_s=0.0, sync=True)
    assert code == 0 and "runs" in shown, shown
    piped = subprocess.run([sys.executable, "-m", "kvreplay.cli", *argv], capture_output=True,
                           env=dict(os.environ, PYTHONPATH=SRC))
    assert out == piped.stdout and out.startswith(b"trace ")


def test_nothing_in_a_pipe_nor_with_quiet(long_sweep, tmp_path):
    piped = subprocess.run([sys.executable, "-m", "kvreplay.cli", *long_sweep], capture_output=True,
                           env=dict(os.environ, PYTHONPATH=SRC))
    assert piped.returncode == 0 and piped.stderr == b""
    code, shown, out = on_pty([*long_sweep, "--quiet"], delay_s=0.0)
    assert code == 0 and shown.strip() == "" and out == piped.stdout


def test_short_work_shows_nothing():
    # the bars appear after DELAY_S (0.5 s): a quick command leaves the terminal alone
    code, shown, _ = on_pty(["run", str(WALK), "--capacity", "8"])
    assert code == 0 and shown.strip() == ""


def test_an_error_is_printed_after_the_bars_are_cleared(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(WALK.read_text() + '{"timestamp": 1, "input_length": -1, "hash_ids": []}\n')
    code, shown, _ = on_pty(["stats", str(bad)], delay_s=0.0)
    assert code == 2
    assert shown.strip().splitlines()[-1] == f"{bad}:37: input_length: expected a non-negative integer, got -1"


@pytest.fixture(scope="module")
def chats(tmp_path_factory) -> str:
    """300 chats of 2,000-token system prompts with a timestamp at token 20 (synth --token-log)."""
    from kvreplay.trace.token_synth import token_log

    path = tmp_path_factory.mktemp("progress") / "chats.jsonl"
    path.write_bytes(token_log(300, timestamp_at=20, seed=0).to_jsonl())
    return str(path)


@pytest.mark.parametrize("command, stage", [
    (["plan", str(WALK), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--max-instances", "2"], "configurations"),
    (["diagnose", "CHATS"], "replays"),
    (["simulate", str(WALK), "--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw",
      "--capacity", "40", "--speedup", "400"], "estimates checked by running them"),
], ids=["plan", "diagnose", "simulate's checks"])
def test_plan_diagnose_and_checks_on_a_terminal_in_a_pipe_and_quiet(command, stage, chats):
    argv = [chats if word == "CHATS" else word for word in command]
    code, shown, out = on_pty(argv, delay_s=0.0)
    assert code == 0 and re.search(rf"{stage}\s.*\s\d+/\d+\s+elapsed \d:\d\d:\d\d left", shown), shown
    piped = subprocess.run([sys.executable, "-m", "kvreplay.cli", *argv], capture_output=True,
                           env=dict(os.environ, PYTHONPATH=SRC))
    assert piped.returncode == 0 and piped.stderr == b"" and out == piped.stdout
    code, shown, quiet = on_pty([*argv, "--quiet"], delay_s=0.0)
    assert code == 0 and shown.strip() == "" and quiet == out


def test_a_plan_served_again_counts_its_loads():
    from kvreplay.serving.plan_check import serve_plan

    trace = kvreplay.load_trace(WALK)
    plan = kvreplay.plan(trace, model="Llama-3.1-8B", slo=kvreplay.SLO(ttft_p90_s="2s"), tps=[1], loads=[1, 2],
                         max_instances=2)
    calls = Calls()
    served = serve_plan(trace, json.loads(json.dumps(plan, default=str)), progress=calls)
    assert calls.check() == [(k, 2, "plan's loads served again") for k in range(3)] and len(served) == 2
