"""docs/engines.md, "Speculative decoding": its two commands run, and print the figures its table quotes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import MOONCAKE, shared_path

from kvreplay.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "engines.md"


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("### Speculative decoding (`--speculative`)")
    return text[start:text.index("\n### ", start + 10)]


def _commands(section: str) -> list[list[str]]:
    return [shlex.split(line.strip())[1:] for line in section.splitlines() if line.strip().startswith("kvreplay simulate")]


def _rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("| DeepSeek-V3, MTP") or line.startswith("| Llama-3.1-70B, EAGLE"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _ms(x) -> str:
    return f"{1000 * x:.1f}"


def test_the_documented_runs_print_the_documented_figures(tmp_path, capsys):
    src = shared_path(MOONCAKE / "conversation_trace.jsonl")
    with open(src, encoding="utf-8") as f:
        head = [next(f) for _ in range(500)]
    trace = tmp_path / "conv500.jsonl"
    trace.write_text("".join(head), encoding="utf-8")
    section = _section()
    commands, rows = _commands(section), _rows(section)
    assert len(commands) == len(rows) == 2
    pools = []
    for argv, row in zip(commands, rows):
        argv = [str(trace) if a == "conv500.jsonl" else a for a in argv]
        assert main([*argv, "--json", "--summary-only"]) == 0
        sp = json.loads(capsys.readouterr().out)["summary"]["speculative"]
        m, t = sp["measured"], sp["tpot"]
        assert row[1] == f"{sp['expected_tokens_per_step']:.3f} ({m['tokens_per_step']:.3f})"
        assert row[2] == ", ".join(f"{100 * x:.1f}%" for x in m["accepted_at_position"])
        w, wo = t["with"], t["without"]
        assert row[3] == f"{_ms(w['p50_s'])} ms [{_ms(w['p50_band_s'][0])}-{_ms(w['p50_band_s'][1])}]"
        assert row[4] == (f"{_ms(wo['p50_s'])} ms [{_ms(wo['p50_band_s'][0])}-{_ms(wo['p50_band_s'][1])}] "
                          f"({100 * t['p50_change']:+.1f}%)")
        pools.append((sp["pool"]["blocks"], sp["pool"]["blocks_without_drafter"]))
    assert (f"DeepSeek-V3's pool above: {pools[0][0]:,} blocks\nwith the MTP module, {pools[0][1]:,} without; "
            f"Llama-3.1-70B's: {pools[1][0]:,} with the EAGLE head, {pools[1][1]:,} without.") in section


def test_the_acceptance_table_is_the_code_s():
    from kvreplay.serving.speculative import resolve

    section = _section()
    for method, model, cells in (("mtp", "DeepSeek-V3", "0.875 [0.85-0.90], then 0.495"),
                                 ("eagle", None, "0.622, 0.572, 0.570, 0.586, 0.504"),
                                 ("ngram", None, "0.81, 0.914, 0.946, 0.971, 0.971")):
        assert cells in section
        numbers = [float(x) for x in re.findall(r"\d\.\d+", re.sub(r"\[.*?\]", "", cells))]
        got = resolve(method, len(numbers), model=model).acceptance
        assert [round(a, 3) for a in got] == pytest.approx(numbers, abs=1e-9)
