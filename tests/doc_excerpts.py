"""The README's worked examples: each is a ```sh block with one command, followed by a plain block
that shows an excerpt of what it prints (`...` stands for columns or text left out). The tests that
run a command hold its output to the excerpt with `assert_shows`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def examples() -> list[tuple[str, list[str]]]:
    """(command, excerpt lines) for every README ```sh block of one command followed by a plain block."""
    found = re.findall(r"```sh\n([^\n]+)\n```\n\n```\n(.*?)```", README.read_text(), re.S)
    return [(command, excerpt.splitlines()) for command, excerpt in found]


def example(start: str) -> tuple[list[str], list[str]]:
    """The README example whose command starts with `start`: its words after `kvreplay`, and its excerpt."""
    hits = [(c, e) for c, e in examples() if c.startswith(start)]
    assert len(hits) == 1, f"README.md has {len(hits)} examples starting {start!r}"
    words = shlex.split(hits[0][0])
    assert words[0] == "kvreplay"
    return words[1:], hits[0][1]


def pattern(line: str) -> re.Pattern:
    """An excerpt line as a pattern: `...` is anything, a run of spaces is any run of spaces."""
    parts = [re.sub(r"(\\ )+", r"\\s+", re.escape(part.strip())) for part in line.split("...")]
    return re.compile(r".*?".join(parts))


def assert_shows(excerpt: list[str], output: str) -> None:
    """Every excerpt line matches a line of the output, in order."""
    lines = output.splitlines()
    at = 0
    for shown in excerpt:
        p = pattern(shown)
        while at < len(lines) and not p.search(lines[at]):
            at += 1
        assert at < len(lines), f"the output does not show, in order: {shown!r}\n{output}"
        at += 1
