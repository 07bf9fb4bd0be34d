"""No output ever clobbers an input (cli/common.inputs_of), multi-output commands write all or none
(output/atomic.py), a command that did nothing writes nothing and exits 2, and SIGTERM mid-plan
exits 143 promptly with no partial output and no worker left (analysis/executors.py)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.errors import OutputError
from kvreplay.output.atomic import write_all

ROOT = Path(__file__).resolve().parents[1]
LINES = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
PROFILE = json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]})
PLAN = ("--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4", "--price", "H100=2/h", "--tp", "1")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """One of every kind of input: a trace (also named .json and .csv, so that every command's
    output name is accepted), a time-model profile, a rate profile, a plan, a model config, step
    measurements and a token log."""
    d = tmp_path_factory.mktemp("inputs")
    out = {"trace": write(d, "eight.jsonl", LINES), "trace_json": write(d, "eight.json", LINES),
           "trace_csv": write(d, "eight.csv", LINES), "profile": write(d, "one.json", PROFILE),
           "shape": write(d, "shape.csv", "fraction,multiplier\n0,1\n1,2\n"),
           "config": write(d, "config.json", (ROOT / "src/kvreplay/catalog/configs/Qwen--Qwen2.5-1.5B.json").read_text()),
           "steps": write(d, "steps.json", "prefill_tokens,decode_batch,ms\n1,0,1\n"),
           "log": write(d, "log.jsonl", jsonl({"token_ids": list(range(8)), "timestamp": 0}))}
    plan = d / "plan.json"
    assert main(["plan", str(out["trace"]), *PLAN, "--time-model", str(out["profile"]), "-o", str(plan)]) == 0
    out["plan"] = plan
    out["dir"] = d
    return out


def _cases():
    """{case: (argv, the input it would replace, what the message says reads it)}"""
    t, tj, tc, p, s, pl, c = "{trace}", "{trace_json}", "{trace_csv}", "{profile}", "{shape}", "{plan}", "{config}"
    return {
        "plan -o the trace": (["plan", tj, *PLAN, "--time-model", p, "-o", tj], tj, ""),
        "plan -o the time model": (["plan", t, *PLAN, "--time-model", p, "-o", p], p, " of --time-model"),
        "plan -o the rate profile": (["plan", t, *PLAN, "--time-model", p, "--rate-profile", s, "-o", s], s,
                                     " of --rate-profile"),
        "plan -o the model's config": (["plan", t, "--model", c, "--slo-ttft-p90", "2s", "--block-size", "4",
                                        "--price", "H100=2/h", "--time-model", p, "-o", c], c, " of --model"),
        "report -o the plan": (["report", t, "--block-size", "4", "--plan", pl, "-o", pl], pl, " of --plan"),
        "report -o the plan's time model": (["report", t, "--block-size", "4", "--plan", pl, "-o", p], p,
                                            " of --plan {plan}"),
        "report -o the trace": (["report", t, "-o", t], t, ""),
        "simulate -o the time model": (["simulate", t, "--policy", "lru", "--capacity", "10", "--time-model", p,
                                        "-o", p], p, " of --time-model"),
        "simulate -o the rate profile": (["simulate", t, "--policy", "lru", "--capacity", "10", "--time-model", p,
                                          "--rate-profile", s, "-o", s], s, " of --rate-profile"),
        "simulate -o the trace": (["simulate", tc, "--policy", "lru", "--capacity", "10", "-o", tc], tc, ""),
        "sweep -o the trace": (["sweep", tc, "--policies", "lru", "--capacities", "2", "-o", tc], tc, ""),
        "mrc -o the trace": (["mrc", tj, "--capacities", "2", "-o", tj], tj, ""),
        "run -o the trace": (["run", tj, "--capacity", "2", "-o", tj], tj, ""),
        "run -o a file of the trace directory": (["run", "{dir}", "--capacity", "2", "-o", tj], tj, ""),
        "calibrate-profile -o its steps": (["calibrate-profile", "{steps}", "-o", "{steps}"], "{steps}", ""),
        "hash -o its token log": (["hash", "{log}", "-o", "{log}"], "{log}", ""),
        "convert -o its input": (["convert", t, "-o", t], t, ""),
        "slice -o its input": (["slice", t, "--requests", "0:2", "-o", t], t, ""),
        "merge -o an input": (["merge", tj, t, "-o", t], t, ""),
        "synth --like -o the trace": (["synth", "--like", t, "-o", t], t, " of --like"),
        "diagnose --rewrite its input": (["diagnose", t, "--policy", "lru", "--capacity", "2", "--rewrite", t], t,
                                         ""),
    }


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_never_replaces_an_input(files, capsys, case, tmp_path):
    argv, victim, named = CASES[case]
    fill = {k: str(v) for k, v in files.items()}
    path = Path(victim.format(**fill))
    before = path.read_bytes()
    code = main([a.format(**fill) for a in argv])
    err = capsys.readouterr().err
    flag = "--rewrite" if "--rewrite" in argv else "-o"
    assert code == 2, err
    assert err == f"kvreplay: {flag} {path}: that is the input file{named.format(**fill)}; write to another name\n"
    assert path.read_bytes() == before


def test_a_failing_second_output_leaves_no_first(files, tmp_path, capsys):
    # --plot to a full disk (/dev/full, through a link with the plot's name): exit 2, and the JSON
    # written first is not left behind; an existing -o file keeps its bytes
    full = tmp_path / "plot.png"
    full.symlink_to("/dev/full")
    out = tmp_path / "plan.json"
    argv = ["plan", str(files["trace"]), *PLAN, "--time-model", str(files["profile"]), "-o", str(out), "--plot",
            str(full)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "no output was written" in err and "Traceback" not in err
    assert not out.exists() and os.listdir(tmp_path) == ["plot.png"]
    out.write_text("an earlier plan")
    assert main(argv) == 2
    assert out.read_text() == "an earlier plan" and sorted(os.listdir(tmp_path)) == ["plan.json", "plot.png"]


def test_a_failed_rename_puts_back_what_was_renamed(tmp_path, monkeypatch):
    # the second rename fails: the first file, already renamed into place, is put back as it was
    first, second, fresh = tmp_path / "a.json", tmp_path / "b.csv", tmp_path / "c.txt"
    first.write_text("old a")
    second.write_text("old b")
    real = os.replace
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if str(dst) == str(second) and not str(src).endswith(".old"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OutputError) as e:
        write_all({str(fresh): b"new c", str(first): b"new a", str(second): b"new b"})
    assert str(e.value) == f"{second}: cannot write: No space left on device; no output was written"
    assert first.read_text() == "old a" and second.read_text() == "old b" and not fresh.exists()
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.csv"]  # no temporary or backup file left
    monkeypatch.setattr(os, "replace", real)
    write_all({str(first): b"new a", str(second): b"new b"})
    assert first.read_text() == "new a" and second.read_text() == "new b"
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.csv"]


def test_a_plan_that_tried_nothing_writes_nothing_and_exits_2(files, tmp_path, capsys):
    out = tmp_path / "plan.json"
    out.write_text("keep")
    code = main(["plan", str(files["trace"]), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4",
                 "--time-model", str(files["profile"]), "--gpus", "B200", "--tp", "1", "-o", str(out), "--plot",
                 str(tmp_path / "p.png")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("kvreplay: every configuration was skipped: no price for B200 in the catalog (it "
                                 "has A100-80GB, H100, H200, A100-40GB, L4, GB200, B300, MI325X): give --price B200=USD/h")
    assert out.read_text() == "keep" and sorted(os.listdir(tmp_path)) == ["plan.json"]


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*") if Path(f"/proc/{p}/task").exists() else ():
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                kids = []
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("jobs, executor", [("1", "local"), ("2", "local"), ("2", "threads")])
def test_sigterm_mid_plan_exits_143_promptly_leaving_nothing(tmp_path, jobs, executor):
    trace = tmp_path / "s.jsonl"
    assert main(["synth", "--requests", "3000", "-o", str(trace)]) == 0
    out, plot, cache = tmp_path / "plan.json", tmp_path / "plan.png", tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = subprocess.Popen([sys.executable, "-m", "kvreplay.cli", "plan", str(trace), "--model", "Llama-3.1-8B",
                            "--slo-ttft-p90", "0.2s", "--gpus", "H100,H200", "--tp", "1,2", "--loads", "8,16", "--jobs",
                            jobs, "--executor", executor, "--cache", str(cache), "-o", str(out), "--plot", str(plot)],
                           stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 240  # a loaded machine imports slowly
        want = 2 if executor == "local" and jobs == "2" else 0
        while not (cache.exists() and any(cache.iterdir()) and len(_children(cmd.pid)) >= want):
            assert cmd.poll() is None and time.time() < deadline, "the plan never started searching"
            time.sleep(0.2)
        workers = _children(cmd.pid)
        assert len(workers) >= want
        sent = time.time()
        cmd.send_signal(signal.SIGTERM)
        code = cmd.wait(60)
        took = time.time() - sent
    finally:
        cmd.kill()
    err = cmd.stderr.read()
    assert code == 143 and took < 3, (code, took, err[-2000:])  # (0.4-0.6 s measured; 6 s before)
    assert b"Traceback" not in err
    assert not out.exists() and not plot.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".kvreplay-")]
    assert not [p for p in os.listdir(cache) if not p.endswith(".npz")]  # no temporary entry left
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)]  # no orphaned worker
