"""docs/formats.md's `kvreplay hash` example, run: its input gives the output and the summary line
the page prints, byte for byte."""

from __future__ import annotations

from pathlib import Path

from kvreplay.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def _blocks(text: str) -> list[str]:
    """The page's fenced blocks, in order."""
    out, block = [], None
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if block is None:
                block = []
            else:
                out.append("".join(block))
                block = None
        elif block is not None:
            block.append(line)
    return out


def test_the_documented_hash_example_prints_what_the_page_says(tmp_path, capsys, monkeypatch):
    section = PAGE.read_text().split("## Token logs (`kvreplay hash`)")[1].split("\n## ")[0]
    blocks = _blocks(section)
    command = "kvreplay hash requests.jsonl -o trace.jsonl --block-size 4"
    assert f"`{command}`" in section
    summary = next(b for b in blocks if "-> trace.jsonl" in b)
    given = next(b for b in blocks if b.startswith('{"token_ids"'))
    becomes = next(b for b in blocks if b.startswith('{"timestamp"'))
    monkeypatch.chdir(tmp_path)
    Path("requests.jsonl").write_text(given)
    assert main(command.split()[1:]) == 0
    assert Path("trace.jsonl").read_text() == becomes
    assert capsys.readouterr().err == summary
