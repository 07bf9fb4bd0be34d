"""Outputs never destroy inputs or leave debris (issue 11 item 9, the held-out corpus's data-loss cases)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import jsonl, write
from kvreplay.cli import main

TRACE = jsonl(
    {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]},
    {"timestamp": 1, "input_length": 1000, "output_length": 1, "hash_ids": [1, 3]},
)


@pytest.mark.parametrize("argv", [
    ["sweep", "{t}", "--policies", "lru", "--capacities", "2", "-o", "{t}"],
    ["mrc", "{t}", "--capacities", "2", "-o", "{t}"],
    ["sweep", "{t}", "--policies", "lru", "--capacities", "2", "--plot", "{t}"],
    ["report", "{t}", "-o", "{t}"],
    ["run", "{t}", "--capacity", "2", "-o", "{t}"],
    ["hash", "{t}", "-o", "{t}"],
])
def test_an_output_never_replaces_the_input(tmp_path, capsys, argv):
    # The trace is named so that every command's extension check passes: the refusal is about
    # the file being the input.
    ext = {"sweep": ".csv", "mrc": ".json", "report": ".html", "run": ".json", "hash": ".jsonl"}[argv[0]]
    if "--plot" in argv:
        ext = ".png"
    path = write(tmp_path, "trace" + ext, TRACE)
    before = path.read_bytes()
    assert main([a.replace("{t}", str(path)) for a in argv]) == 2
    assert "that is the input file" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_a_symlinked_output_is_written_through(tmp_path):
    trace = write(tmp_path, "t.jsonl", TRACE)
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    assert main(["sweep", str(trace), "--policies", "lru", "--capacities", "2", "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("policy,") or "hit_rate" in target.read_text()


def test_a_named_pipe_output_stays_a_pipe(tmp_path):
    trace = write(tmp_path, "t.jsonl", TRACE)
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code = main(["run", str(trace), "--policy", "lru", "--capacity", "2", "-o", str(fifo)])
    if code != 0:
        with open(fifo, "wb"):
            pass  # let the reader go
    assert code == 0
    reader.join(10)
    assert fifo.is_fifo()
    assert b'"hit_rate"' in got[0]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".kvreplay-")]


def test_sigterm_leaves_no_temporary_file(tmp_path):
    # hash reads its token log from a pipe that stays open; SIGTERM arrives while the output's
    # temporary file exists: the command exits 143 and removes it.
    producer = ("import json, sys, time\n"
                "print(json.dumps({'token_ids': list(range(600)), 'timestamp': 0}), flush=True)\n"
                "time.sleep(60)\n")
    feed = subprocess.Popen([sys.executable, "-c", producer], stdout=subprocess.PIPE)
    cmd = subprocess.Popen([sys.executable, "-m", "kvreplay.cli", "hash", "-", "-o", str(tmp_path / "out.jsonl")],
                           stdin=feed.stdout, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.time() + 240  # a loaded machine imports numba slowly
        while not [p for p in os.listdir(tmp_path) if p.startswith(".kvreplay-")]:
            assert time.time() < deadline, "hash never opened its output"
            time.sleep(0.1)
        cmd.send_signal(signal.SIGTERM)
        assert cmd.wait(30) == 143
    finally:
        feed.kill()
        cmd.kill()
    assert os.listdir(tmp_path) == []
    assert b"Traceback" not in cmd.stderr.read()


@pytest.mark.parametrize("argv", [
    ["run", "{t}", "--capacity", "2", "--seed", "-1"],
    ["synth", "-o", "{d}/s.jsonl", "--seed", "-1"],
])
def test_a_negative_seed_is_refused(tmp_path, capsys, argv):
    trace = write(tmp_path, "t.jsonl", TRACE)
    with pytest.raises(SystemExit) as e:
        main([a.replace("{t}", str(trace)).replace("{d}", str(tmp_path)) for a in argv])
    assert e.value.code == 2
    assert "must be >= 0, got -1" in capsys.readouterr().err


# ---- totals that cannot wrap, sizes that cannot overflow ------------------------------------------

def test_totals_are_exact_beyond_int64():
    # Two prompts of 2**63 - 1 tokens: int64 sums wrapped to -2 (a hit rate of -256 as a fraction).
    import kvreplay

    trace = kvreplay.Trace.from_requests([([1], 2**63 - 1), ([1], 2**63 - 1)])
    report = kvreplay.replay(trace, "lru", 4, 2**31 - 1)
    assert trace.total_prompt_tokens == report.total_prompt_tokens == 2 * (2**63 - 1)
    assert report.total_hit_tokens == 2**31 - 1  # the second request hits one block of 2**31 - 1 tokens
    assert report.hit_rate == (2**31 - 1) / (2 * (2**63 - 1))
    assert kvreplay.stats(trace, block_size=2**31 - 1)["total_prompt_tokens"] == 2 * (2**63 - 1)


@pytest.mark.parametrize("kwargs, message", [
    ({"block_size": 2**31}, "block_size 2,147,483,648 is beyond any engine's block"),
    ({"capacity": 2**62 + 1}, "is beyond any cache"),
])
def test_huge_sizes_are_refused_by_the_api(kwargs, message):
    import kvreplay
    from kvreplay.errors import ConfigError

    trace = kvreplay.Trace.from_requests([([1], 4)])
    args = {"capacity": 4, "block_size": 4, **kwargs}
    with pytest.raises(ConfigError, match=message):
        kvreplay.replay(trace, "lru", args["capacity"], args["block_size"])


@pytest.mark.parametrize("option, value, message", [
    ("--capacity", str(10**20), "must be at most 2**62"),
    ("--block-size", str(10**20), "must be at most 2**62"),
    ("--seed", str(2**40), "must be below 2**32"),
])
def test_huge_options_are_refused_by_the_cli(tmp_path, capsys, option, value, message):
    trace = write(tmp_path, "t.jsonl", TRACE)
    with pytest.raises(SystemExit) as e:
        main(["run", str(trace), "--policy", "lru", option, value] + ([] if option == "--capacity" else ["--capacity", "2"]))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
