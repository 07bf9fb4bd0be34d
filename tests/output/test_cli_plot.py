"""`--plot` on sweep and mrc: the file appears atomically, bad names fail before any replay."""

from __future__ import annotations

import os

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
