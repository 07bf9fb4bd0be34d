"""Nothing compiles at run time: with numba made unimportable, every command that once compiled
(stats, mrc, synth --like, sweep's LRU curve) runs, and its output is the same as with numba there."""

from __future__ import annotations

import subprocess
import sys

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
