"""`--plot` on sweep and mrc: the file appears atomically, bad names fail before any replay."""

from __future__ import annotations

import argparse
import os

import pytest

from kvreplay.cli import main

LINES = [
    '{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 2, "input_length": 6, "output_length": 1, "hash_ids": [1, 3]}',
]


def write_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    return path


def test_sweep_and_mrc_plots(tmp_path, capsys):
    trace = write_trace(tmp_path)
    assert main(["sweep", str(trace), "--block-size", "4", "--capacities", "1,2,4", "--policies", "lru,fifo",
                 "--plot", str(tmp_path / "sweep.png")]) == 0
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["mrc", str(trace), "--block-size", "4", "--capacities", "1,2,4", "--plot", str(tmp_path / "mrc.svg")]) == 0
    svg = (tmp_path / "mrc.svg").read_text()
    assert "<svg" in svg
    assert sorted(os.listdir(tmp_path)) == ["mrc.svg", "sweep.png", "t.jsonl"]
    capsys.readouterr()


def test_bad_plot_name_fails_before_replaying(tmp_path, capsys):
    trace = write_trace(tmp_path)
    assert main(["sweep", str(trace), "--plot", str(tmp_path / "x.gif")]) == 2
    assert "--plot" in capsys.readouterr().err
    assert main(["mrc", str(trace), "--plot", str(tmp_path / "nodir" / "x.png")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["t.jsonl"]


def test_sweep_each_keeps_traces_apart(tmp_path, capsys):
    # Two files with the same ids: swept --each, the second file's repeat of [1, 2] hits in its own
    # trace only: t.jsonl (lru, 4 blocks of 4): r2 8 + r3 4 = 12 hits; u.jsonl: [1, 2] then [1, 2] = 8.
    first = write_trace(tmp_path)
    second = tmp_path / "u.jsonl"
    second.write_text("\n".join(LINES[:2]) + "\n")
    assert main(["sweep", "--each", str(first), str(second), "--block-size", "4", "--capacities", "4", "--policies", "lru",
                 "--json", "--plot", str(tmp_path / "each.svg")]) == 0
    captured = capsys.readouterr()
    import json

    doc = json.loads(captured.out)
    assert [(r["trace"], r["policy"], r["total_hit_tokens"]) for r in doc["results"]] == [
        ("t.jsonl", "lru", 12), ("t.jsonl", "infinite", 12), ("u.jsonl", "lru", 8), ("u.jsonl", "infinite", 8)]
    assert captured.err == ""  # no progress bar when stderr is not a terminal
    assert (tmp_path / "each.svg").exists()


def test_missing_output_directory_fails_before_reading_the_trace(tmp_path, capsys):
    # The trace is broken too: the output's error comes first, so nothing ran.
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input_length": "x"}\n')
    for args in (["report", str(broken), "-o", str(tmp_path / "no" / "r.html")],
                 ["run", str(broken), "-o", str(tmp_path / "no" / "r.json")],
                 ["sweep", str(broken), "-o", str(tmp_path / "no" / "s.csv")],
                 ["mrc", str(broken), "--plot", str(tmp_path / "no" / "m.png")]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "cannot write: No such file or directory" in err and "broken.jsonl:1" not in err


def test_zoom_option_reaches_the_figure(tmp_path, monkeypatch):
    # --zoom auto|off|LO,HI is parsed and handed to the curve figure (sweep and mrc --plot).
    from kvreplay.cli import common
    from kvreplay.output import plot

    assert common.zoom("auto") == "auto" and common.zoom("off") is False and common.zoom("2,8.5") == (2.0, 8.5)
    for bad in ("8,2", "x", "-1,3", "2,101"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.zoom(bad)
    seen = []
    real = plot.curves_figure
    monkeypatch.setattr(plot, "curves_figure", lambda *a, **k: seen.append(k["zoom"]) or real(*a, **k))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {i}, "input_length": 40, "output_length": 1, "hash_ids": [{i % 3}, {i}]}}\n' for i in range(12)))
    for option, expected in (("off", False), ("2,8", (2.0, 8.0)), ("auto", "auto")):
        assert main(["mrc", str(trace), "--capacities", "2,4", "--block-size", "32", "--plot", str(tmp_path / "c.png"),
                     "--zoom", option]) == 0
        assert seen[-1] == expected
