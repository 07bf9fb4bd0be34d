"""The README's worked examples print what the README shows, on the Mooncake conversation trace
(skipped without ../shared). `plan` and `simulate --sessions-list` are checked by the tests of
their pages (tests/serving/test_plan_docs.py, test_sessions_docs.py), which run the same commands."""

from __future__ import annotations

import pytest

from conftest import MOONCAKE, shared_path
from doc_excerpts import assert_shows, example, examples
from test_cli import kv


def test_the_readme_has_its_worked_examples():
    assert len(examples()) == 6


@pytest.mark.parametrize("start", [
    "kvreplay sweep conversation_trace.jsonl --capacities 4096 ",
    "kvreplay sweep conversation_trace.jsonl --capacities 64GiB,",
    "kvreplay run conversation_trace.jsonl --policy s3fifo --capacity 4096",
    "kvreplay simulate conversation_trace.jsonl --model Llama-3.1-8B --gpu H100 --speedups 0.25,0.5,1",
])
def test_a_worked_example(start):
    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    words, excerpt = example(start)
    r = kv(*words, cwd=trace.parent)
    assert r.returncode == 0, r.stderr.decode()
    assert_shows(excerpt, r.stdout.decode())
