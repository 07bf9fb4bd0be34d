"""Every shell command in a fenced block of README.md and docs/*.md is run by a test, or marked,
with its reason, as not run: a documented command cannot drift from the code.

A block's commands are the `$ `-prompted lines of any block, and every line of a ```sh, ```bash or
```shell block (continuation lines joined, `# comments` dropped). The line right above a block's
opening fence may mark it:

    <!-- not run by the tests: REASON -->        (a GPU, a Ray cluster, minutes of work, ...)
    <!-- run by tests/PATH.py -->                (that test runs these commands on the real traces
                                                  and holds the figures the page prints; this test
                                                  checks the file names every flag of each command)

A ```python block is run as it is written, after `import kvreplay` and `trace =
kvreplay.load_trace("conversation_trace.jsonl")`. Any other block's `kvreplay` commands are run here, in process, in order, in one scratch directory
per block that holds small stand-ins for the files the docs name (a 300-request synthetic trace for
`conversation_trace.jsonl`, the test data's Claude Code sessions, token log, Bailian trace, step
times, a model's config.json): each must exit 0. A command other than `kvreplay` (pip, pytest, a
benchmark script) must be marked. ```console blocks (the documented error sessions) are run by
tests/test_docs_console.py, which checks their output line by line.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import kvreplay
from kvreplay.cli import main
from vllm_bench import bench_result

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell"}
NOT_RUN = re.compile(r"<!-- not run by the tests: (.+?) -->")
COMMAND = re.compile(r"(kvreplay [a-z]|python |pip |ray |[A-Z_]+=\S* |cd |for \w+ in [^:]*; do)")
RUN_BY = re.compile(r"<!-- run by (tests/\S+\.py) -->")


def blocks():
    """(page, line, language, mark, commands) for every fenced block with a command: mark is the
    marker comment right above the fence ('' when none); commands are strings."""
    out = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = re.match(r"```(\w*)\s*$", lines[i])
            if not fence:
                i += 1
                continue
            start, lang = i, fence.group(1)
            mark = lines[start - 1].strip() if start and lines[start - 1].startswith("<!--") else ""
            j = start + 1
            while not lines[j].startswith("```"):
                j += 1
            body = re.sub(r"\\\n\s*", " ", "\n".join(lines[start + 1:j]))
            commands, prompted = [], any(line.startswith("$ ") for line in body.splitlines())
            for line in body.splitlines():
                s = line.strip()
                if s.startswith("$ "):
                    commands.append(s[2:].strip())
                elif not prompted and ((lang in SHELL and s and not s.startswith("#")) or COMMAND.match(s)):
                    commands.append(s)
            if lang == "python":
                out.append((page.name, start + 1, lang, mark, ["\n".join(lines[start + 1:j])]))
            elif commands and lang not in ("json", "console"):
                out.append((page.name, start + 1, lang, mark, commands))
            i = j + 1
    return out


BLOCKS = blocks()


def split(command: str) -> list[list[str]]:
    """The simple commands of one line (`&&` and `;` separate them; a `# comment` ends it)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, "#"
    out, words = [], []
    for word in [*lexer, ";"]:
        if word in (";", "&&"):
            if words:
                out.append(words)
            words = []
        else:
            words.append(word)
    return out


def inputs(where: Path) -> None:
    """Small stand-ins, under the names the docs use, for the files their commands read."""
    assert main(["synth", "-o", str(where / "conversation_trace.jsonl"), "--requests", "300", "--seed", "1",
                 "--quiet"]) == 0
    trace = where / "conversation_trace.jsonl"
    for name in ("trace.jsonl", "a.jsonl", "b.jsonl", "big.jsonl"):
        shutil.copy(trace, where / name)
    assert main(["convert", str(trace), "-o", str(where / "trace.jsonl.gz"), "--quiet"]) == 0
    (where / "claude-code-samples").mkdir()
    for name in ("claude_a.json", "claude_b.json"):
        shutil.copy(DATA / name, where / "claude-code-samples" / name)
    for name in ("qwen_traceA_blksz_16.jsonl", "bailian.jsonl"):
        shutil.copy(DATA / "bailian_chat.jsonl", where / name)
    shutil.copy(DATA / "tokens_roundtrip.jsonl", where / "requests.jsonl")
    shutil.copy(DATA / "steps_24.csv", where / "steps.csv")
    (where / "path" / "to").mkdir(parents=True)
    config = ROOT / "src/kvreplay/catalog/configs/meta-llama--Meta-Llama-3.1-8B.json"
    shutil.copy(config, where / "path/to/config.json")
    (where / "Llama-2-7b-hf").mkdir()
    shutil.copy(ROOT / "src/kvreplay/catalog/configs/meta-llama--Llama-2-7b-hf.json", where / "Llama-2-7b-hf/config.json")
    shutil.copy(DATA / "tokenizer_t200.json", where / "tokenizer.json")
    (where / "prompts.jsonl.gz").write_bytes(gzip.compress((DATA / "text_log.jsonl").read_bytes()))
    shutil.copy(DATA / "bailian_chat.jsonl", where / "trace16.jsonl")
    np.savez(where / "profile.npz", prefill_isl=np.array([128.0, 1024.0, 8192.0]),
             prefill_ttft_ms=np.array([9.0, 30.0, 520.0]), decode_active_kv_tokens=np.array([0.0, 5e4, 4e5]),
             decode_context_length=np.array([128.0, 4096.0]), decode_itl=np.array([[6.0, 6.5], [7.5, 8.0], [18.0, 19.0]]))
    rng = np.random.default_rng(0)  # a vLLM log's iteration lines (--enable-logging-iteration-details)
    (where / "vllm-serve.log").write_text("".join(
        f"INFO 05-01 10:00:00 [core.py:391] Iteration({i}): {c} context requests, {t} context tokens, {g} generation "
        f"requests, {g} generation tokens, iteration elapsed time: {2 + 0.02 * t + 0.5 * g:.2f} ms\n"
        for i, (c, t, g) in enumerate(zip(rng.integers(1, 4, 60), rng.integers(1, 4000, 60), rng.integers(1, 64, 60)))))
    (where / "bench.jsonl").write_text("".join(json.dumps(bench_result(b, ttft, tpot)) + "\n" for b, ttft, tpot in
                                               [(1, 50.0, 10.0), (8, 120.0, 17.0), (32, 400.0, 41.0), (64, 700.0, 70.0)]))


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    where = tmp_path_factory.mktemp("stand_ins")
    inputs(where)
    return where


def test_the_pages_have_commands():
    assert len(BLOCKS) >= 20 and sum(len(b[-1]) for b in BLOCKS) >= 100


UNMARKED = [b for b in BLOCKS if not b[3]]


@pytest.mark.parametrize("page, line, lang, mark, commands", UNMARKED, ids=[f"{b[0]}:{b[1]}" for b in UNMARKED])
def test_an_unmarked_block_runs(page, line, lang, mark, commands, stand_ins, tmp_path, monkeypatch, capsys):
    shutil.copytree(stand_ins, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    if lang == "python":  # run as written, after `import kvreplay` and `trace = load_trace(...)`
        trace = kvreplay.load_trace("conversation_trace.jsonl")
        exec(compile(commands[0], f"{page}:{line}", "exec"), {"kvreplay": kvreplay, "trace": trace})
        return
    for command in commands:
        for words in split(command):
            if words[:1] == ["cat"] and words[2:4] == ["|", "kvreplay"]:  # cat FILE | kvreplay ... -
                monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(Path(words[1]).read_bytes())))
                words = words[3:]
            assert words[0] == "kvreplay", (f"{page}:{line}: `{command}` is not a kvreplay command: run it in a test "
                                            "and mark the block, or mark it not run with its reason")
            try:
                code = main([*words[1:], "--quiet"] if "--quiet" not in words else words[1:])
            except SystemExit as e:
                code = e.code
            err = capsys.readouterr().err
            assert code == 0, f"{page}:{line}: `{' '.join(words)}` exited {code}: {err[-2000:]}"


MARKED = [b for b in BLOCKS if b[3]]


@pytest.mark.parametrize("page, line, lang, mark, commands", MARKED, ids=[f"{b[0]}:{b[1]}" for b in MARKED])
def test_a_marked_block_says_why(page, line, lang, mark, commands):
    reason, runner = NOT_RUN.fullmatch(mark), RUN_BY.fullmatch(mark)
    assert reason or runner, f"{page}:{line}: the mark {mark!r} is neither 'not run by the tests: REASON' nor 'run by tests/...py'"
    if runner and lang == "python":  # the test calls every function the block calls
        test = (ROOT / runner.group(1)).read_text()
        missing = [f for f in re.findall(r"(\w+)\(", commands[0]) if f"{f}(" not in test]
        assert not missing, f"{page}:{line}: {runner.group(1)} does not call {missing}"
    elif runner:
        test = (ROOT / runner.group(1)).read_text()
        for command in commands:
            if " ".join(command.split()) in test:  # the test holds the command whole (and runs it, split)
                continue
            for words in split(command):
                assert words[0] == "kvreplay", f"{page}:{line}: {runner.group(1)} runs kvreplay commands only"
                flags = [w.strip("[]") for w in words[1:] if w.strip("[]").startswith("--")]
                missing = [w for w in flags if f'"{w}"' not in test]
                assert f'"{words[1]}"' in test and not missing, (
                    f"{page}:{line}: {runner.group(1)} does not run `{command}` ({words[1]}, {missing})")
