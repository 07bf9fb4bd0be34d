"""Nothing compiles at run time: with numba made unimportable, every command that once compiled
(stats, mrc, synth --like, sweep's LRU curve) runs, and its output is the same as with numba there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write

BLOCK = "from kvreplay.cli import main; import sys; sys.modules['numba'] = None; sys.modules['llvmlite'] = None; "
TRACE = "".join(f'{{"timestamp": {i}, "input_length": {100 + 37 * i}, "output_length": 5, "hash_ids": {ids}}}\n'
                for i, ids in enumerate([[1, 2, 3], [1, 2, 4], [1, 5], [1, 2, 3, 6], [7], [1, 2, 4, 8]]))


def command(block: bool, *args) -> bytes:
    code = (BLOCK if block else "from kvreplay.cli import main; import sys; ") + "sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b"", done.stderr.decode()  # nothing to say: nothing compiles
    return done.stdout


@pytest.mark.parametrize("args", [
    ("stats", "{trace}", "--block-size", "64", "--json"),
    ("mrc", "{trace}", "--capacities", "1,2,3,8", "--block-size", "64", "--json"),
    ("sweep", "{trace}", "--capacities", "2,4,10", "--policies", "lru,fifo", "--block-size", "64", "--json"),
    ("synth", "-o", "{out}", "--like", "{trace}", "--like-model", "prefixes", "--scale-requests", "3"),
])
def test_no_command_needs_numba(tmp_path, args):
    trace = write(tmp_path, "t.jsonl", TRACE)
    outputs = []
    for block in (True, False):
        out = tmp_path / f"synth-{block}.jsonl"
        stdout = command(block, *(a.format(trace=trace, out=out) for a in args))
        outputs.append(stdout.replace(str(out).encode(), b"OUT") + (out.read_bytes() if out.exists() else b""))
    assert outputs[0] == outputs[1] and outputs[0]


# --- without the compiled core (a machine with no C compiler): the reference engine, same outputs

NOTICE = b"kvreplay: note: the compiled core is not installed"


def kvreplay(env_core: bool, *args, expect: int = 0) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop("KVREPLAY_NO_CORE", None)
    if not env_core:
        env["KVREPLAY_NO_CORE"] = "1"
    done = subprocess.run([sys.executable, "-m", "kvreplay.cli", *map(str, args)], capture_output=True, env=env,
                          timeout=300)
    assert done.returncode == expect, done.stderr.decode()
    return done


def synthetic(tmp_path):
    """A synthetic chat workload (kvreplay synth, which needs no core) of 600 requests, 64-token blocks."""
    path = tmp_path / "chat.jsonl"
    kvreplay(True, "synth", "-o", path, "--requests", "600", "--block-size", "64", "--seed", "5")
    return path


@pytest.mark.parametrize("args", [
    ("demo",),
    ("run", "{trace}", "--policy", "s3fifo", "--capacity", "300", "--json", "--summary-only"),
    ("run", "{trace}", "--policy", "vllm", "--capacity", "300", "--json"),
    ("sweep", "{trace}", "--capacities", "50,300,2000", "--policies", "s3fifo,lru,arc,radix", "--bounds", "--json"),
    ("sweep", "{trace}", "--capacities", "100,400", "--policies", "lru,fifo", "--jobs", "2", "--json"),
    ("stats", "{trace}", "--json"),
    ("mrc", "{trace}", "--capacities", "auto", "--json"),
    ("synth", "-o", "{out}", "--like", "{trace}", "--like-model", "prefixes", "--scale-requests", "2"),
    ("synth", "-o", "{out}", "--like", "{trace}"),
])
def test_without_the_core_the_outputs_are_the_same(tmp_path, args):
    trace = synthetic(tmp_path)
    outputs = []
    for core in (True, False):
        out = tmp_path / f"out-{core}.jsonl"
        done = kvreplay(core, *(a.format(trace=trace, out=out) for a in args))
        text = done.stdout.replace(str(out).encode(), b"OUT").replace(b'"engine": "reference"', b'"engine": "compiled"')
        if args[0] == "demo":  # its last line times the replays
            text = b"\n".join(line for line in text.splitlines() if not line.endswith(b" s."))
        outputs.append(text + (out.read_bytes() if out.exists() else b""))
        if core:
            assert done.stderr == b""
        else:  # the notice, once, on one line
            assert done.stderr.startswith(NOTICE) and done.stderr.count(b"\n") == 1, done.stderr.decode()
    assert outputs[0] == outputs[1] and len(outputs[0]) > 100


@pytest.mark.parametrize("args, needs", [
    (("simulate", "{trace}", "--capacity", "300", "--time-model", "instant"), b"kvreplay simulate (the serving simulator"),
    (("plan", "{trace}", "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s"), b"kvreplay plan"),
    (("run", "{trace}", "--capacity", "300", "--engine", "compiled"), b"the compiled engine"),
])
def test_without_the_core_the_simulator_refuses(tmp_path, args, needs):
    trace = synthetic(tmp_path)
    done = kvreplay(False, *(a.format(trace=trace) for a in args), expect=2)
    last = done.stderr.decode().splitlines()[-1]
    assert last.startswith("kvreplay: " + needs.decode()) and "KVREPLAY_NO_CORE=1" in last, done.stderr.decode()
    assert b"Traceback" not in done.stderr


def test_the_library_falls_back_with_one_warning(tmp_path):
    code = ("import warnings, kvreplay; warnings.simplefilter('always'); "
            "t = kvreplay.Trace.from_requests([(['a', 'b'], 8), (['a', 'c'], 8)], block_size=4); "
            "print(kvreplay.replay(t, 'lru', 4).engine, kvreplay.replay(t, 'lru', 4).total_hit_tokens, "
            "kvreplay.mrc(t, [4])['points'][0]['total_hit_tokens'], kvreplay.stats(t)['infinite_cache_hit_tokens'])")
    import os

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                          env=dict(os.environ, KVREPLAY_NO_CORE="1"))
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == [b"reference", b"4", b"4", b"4"]
    assert done.stderr.count(b"RuntimeWarning: kvreplay: the compiled core is not installed") == 1


@pytest.mark.parametrize("args", [
    ("report", "{trace}", "--policies", "s3fifo,lru", "-o", "{tmp}/r.html"),
    ("convert", "{trace}", "-o", "{tmp}/c.jsonl"),
    ("slice", "{trace}", "-o", "{tmp}/s.jsonl", "--requests", "0:100"),
    ("merge", "{trace}", "{trace}", "-o", "{tmp}/m.jsonl"),
    ("hash", "{tokens}", "-o", "{tmp}/h.jsonl", "--block-size", "4"),
    ("policies",), ("models",), ("gpus",),
])
def test_without_the_core_the_other_commands_run(tmp_path, args):
    from conftest import DATA

    trace = synthetic(tmp_path)
    argv = [a.format(trace=trace, tmp=tmp_path, tokens=DATA / "tokens_roundtrip.jsonl") for a in args]
    done = kvreplay(False, *argv)
    assert b"Traceback" not in done.stderr
    if "-o" in argv:  # (these say what they wrote on stderr)
        assert Path(argv[argv.index("-o") + 1]).stat().st_size > 100
    else:
        assert len(done.stdout) > 100
