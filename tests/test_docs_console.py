"""The documented terminal sessions are the real ones: every ```console block of README.md and docs/
is run (each `$ kvreplay ...` line, in-process) and must print exactly the lines shown under it
on stderr, with nothing on stdout. The figures the README states about units are checked too."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.units import parse_size

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def sessions():
    """(page, command, expected stderr lines) for every `$ kvreplay` line of a ```console block."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(), re.S):
            command, lines = None, []
            for line in block.splitlines() + ["$ "]:
                if line.startswith("$ "):
                    if command:
                        out.append((page.name, command, lines))
                    command, lines = line[2:].strip(), []
                else:
                    lines.append(line)
    return out


SESSIONS = sessions()


def test_there_are_documented_sessions():
    assert len(SESSIONS) >= 3


@pytest.mark.parametrize("page, command, expected", SESSIONS, ids=[c for _, c, _ in SESSIONS])
def test_a_documented_session(page, command, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (the documented errors come before any trace is read)
    words = shlex.split(command)
    assert words[0] == "kvreplay"
    try:
        code = main(words[1:])
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.splitlines() == expected


def test_the_size_units_are_as_stated():
    text = (ROOT / "README.md").read_text()
    assert "`80GB` = 80,000,000,000 bytes" in text and f"`80GiB` = {parse_size('80GiB'):,}" in text
    assert parse_size("80GB") == 80_000_000_000


def documented_commands():
    """(page, words) for every `kvreplay ...` command in a code block of README.md and docs/ other
    than the console sessions above (continuation lines joined; `&&`, `|` and `;` split commands;
    a synopsis's [optional] brackets dropped)."""
    out = []
    for page in PAGES:
        for lang, block in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
            if lang == "console":
                continue
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                if not re.search(r"(^|\$ |[;&|]\s*)kvreplay\s", line.strip()):
                    continue
                lexer = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=";&|")
                lexer.whitespace_split, lexer.commenters = True, "#"
                words = []
                for word in [*lexer, ";"]:
                    if word.strip(";&|"):
                        words.append(word)
                        continue
                    if words[:1] == ["kvreplay"]:
                        out.append((page.name, [w.strip("[]") for w in words[1:] if w.strip("[]") not in ("", "...")]))
                    words = []
    return out


DOCUMENTED = documented_commands()


def test_every_documented_command_line_parses():
    # each command's flags exist and its values carry their units (a doc cannot show a flag that
    # is gone, or a bare duration): the real parser, nothing run (the pages' own tests run them)
    from kvreplay.cli import build_parser

    assert len(DOCUMENTED) >= 80
    failed = []
    for page, words in DOCUMENTED:
        try:
            build_parser(words).parse_args(words)
        except SystemExit as e:
            if e.code:
                failed.append(f"{page}: kvreplay {' '.join(words)}")
    assert failed == []
