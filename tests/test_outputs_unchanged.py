"""A refactor changes no result: the fixed commands of tests/outputs_unchanged.py (README and docs
examples on small inputs, and the Python API) print and write, byte for byte, what they did on main
before the renovation (tests/data/outputs_unchanged.json)."""

from __future__ import annotations

import json

import pytest

import outputs_unchanged as guard

STORED = json.loads(guard.DIGESTS.read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("unchanged")
    guard.prepare(d)
    return d


def test_every_command_has_stored_digests():
    assert set(STORED) == set(guard.COMMANDS)


@pytest.mark.parametrize("command", guard.COMMANDS)
def test_output_unchanged(command, workdir):
    found = guard.run(command, workdir)
    assert found == STORED[command]


def test_the_guard_sees_a_change(workdir):
    # the digests are of the real output: a different capacity gives a different output
    changed = guard.run("kvreplay run s.jsonl --policy s3fifo --capacity 401", workdir)
    assert changed["stdout"] != STORED["kvreplay run s.jsonl --policy s3fifo --capacity 400"]["stdout"]
    assert changed["code"] == "0"
