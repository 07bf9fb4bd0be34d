"""The block size is checked against the trace, never guessed silently (issue 11, item 1).

A request fits a block size when its number of hash ids is ceil(L / bs) (every block hashed, the
partial tail too: Mooncake, Bailian) or floor(L / bs) (full blocks only: the Claude Code corpus).
Most requests misfitting an inferred block size (the trace's declared one, or the default) means
the wrong block size: the CLI stops with exit 2 and names the one they fit. A --block-size the user
gives is replayed as the spec defines it (hits capped at min(k x block_size, L)), with a warning
counting the misfits. A few misfits are replayed, counted and named in the report.
"""

from __future__ import annotations

import json

import pytest

import kvreplay
from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.trace.model import block_size_mismatches, check_block_size, likely_block_size


def mooncake_lines(requests) -> str:
    return "".join(json.dumps({"timestamp": i, "input_length": length, "hash_ids": ids}) + "\n"
                   for i, (ids, length) in enumerate(requests))


# Hashed at 16 tokens (as `kvreplay hash --block-size 16` writes them): 1000 tokens = 63 blocks.
AT_16 = [(list(range(63)), 1000), (list(range(63)) + [99, 98], 1030), (list(range(10)), 160)]


def test_hand_counts():
    trace = kvreplay.Trace.from_requests(AT_16)
    assert block_size_mismatches(trace, 16) is None
    assert block_size_mismatches(trace, 512) == {"count": 3, "first_requests": [0, 1, 2]}
    assert likely_block_size(trace) == 16
    # floor: full blocks only (1000 tokens at 16 -> 62 ids) fits too; 61 does not
    floor = kvreplay.Trace.from_requests([(list(range(62)), 1000), (list(range(61)), 1000)])
    assert block_size_mismatches(floor, 16) == {"count": 1, "first_requests": [1]}


def test_most_misfit_is_refused_with_the_size_they_fit():
    trace = kvreplay.Trace.from_requests(AT_16, source="t16.jsonl")
    with pytest.raises(ConfigError, match="t16.jsonl: the hash ids fit 16-token blocks, not 512: pass --block-size 16"):
        check_block_size(trace, 512)
    assert check_block_size(trace, 16) is None


@pytest.mark.parametrize("command", [["run"], ["sweep", "--capacities", "8"], ["mrc", "--capacities", "8"], ["stats"]])
def test_cli_stops_before_printing_a_wrong_number(tmp_path, capsys, command):
    path = tmp_path / "t16.jsonl"
    path.write_text(mooncake_lines(AT_16))
    assert main([command[0], str(path), *command[1:]]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"kvreplay: {path}: the hash ids fit 16-token blocks, not 512: pass --block-size 16 "
                                   "(3 of 3 requests have a number of hash ids that does not fit their input_length "
                                   "at 512-token blocks)")
    assert main([command[0], str(path), *command[1:], "--block-size", "16"]) == 0


@pytest.mark.parametrize("command", [["run"], ["sweep", "--capacities", "8"], ["mrc", "--capacities", "8"], ["stats"]])
def test_the_users_own_block_size_is_replayed_with_a_warning(tmp_path, capsys, command):
    path = tmp_path / "t16.jsonl"
    path.write_text(mooncake_lines(AT_16))
    with pytest.warns(UserWarning) as warned:
        assert main([command[0], str(path), *command[1:], "--block-size", "512"]) == 0
    assert [str(w.message) for w in warned] == [
        f"{path}: 3 of 3 requests have a number of hash ids that does not fit their input_length at 512-token blocks "
        "(they fit 16-token blocks); replayed at --block-size 512 as given, each request's hit capped at "
        "min(hit blocks x 512, input_length)"]
    assert capsys.readouterr().out


def test_a_few_misfits_are_replayed_counted_and_named(tmp_path, capsys):
    good = [([i, i + 1], 20) for i in range(9)]  # 2 blocks of 16 for 20 tokens: fits
    requests = good[:4] + [([50, 51, 52, 53, 54], 20)] + good[4:]  # request 4: 5 ids for 20 tokens
    path = tmp_path / "few.jsonl"
    path.write_text(mooncake_lines(requests))
    assert main(["run", str(path), "--block-size", "16", "--policy", "lru", "--capacity", "64", "--json", "--summary-only"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["block_size_mismatches"] == {"count": 1, "first_requests": [4]}
    assert main(["run", str(path), "--block-size", "16", "--policy", "lru", "--capacity", "64"]) == 0
    assert ("misfit    1 of 10 requests have a number of hash ids that does not fit their input_length at 16-token "
            "blocks (first requests, 0-based: 4); their hits are capped at input_length") in capsys.readouterr().out


def test_the_library_replays_and_records_misfits():
    # kvreplay.replay follows the spec (hits capped at min(k * block_size, L)) whatever the fit,
    # and says how many requests misfit; only the CLI refuses a block size most requests misfit.
    report = kvreplay.replay(kvreplay.Trace.from_requests(AT_16), "lru", 100, 512)
    assert report.block_size_mismatches == {"count": 3, "first_requests": [0, 1, 2]}
    assert report.summary()["block_size_mismatches"]["count"] == 3
    assert kvreplay.replay(kvreplay.Trace.from_requests(AT_16), "lru", 100, 16).block_size_mismatches is None


def test_hashed_at_16_then_replayed_without_the_flag(tmp_path, capsys):
    # The case: `kvreplay hash --block-size 16`, then `kvreplay run` without --block-size
    # printed a 99.75% hit rate and a 395x speedup. Now the file says its block size, so the
    # replay is right without the flag; a copy without it (as the released traces are) stops and
    # says what to pass.
    log = tmp_path / "tokens.jsonl"
    prefix = list(range(100))
    log.write_text("".join(json.dumps({"token_ids": prefix + [1000 + i] * (5 + i)}) + "\n" for i in range(6)))
    trace = tmp_path / "t.jsonl"
    assert main(["hash", str(log), "-o", str(trace), "--block-size", "16"]) == 0
    capsys.readouterr()
    assert main(["run", str(trace), "--policy", "lru", "--capacity", "100"]) == 0
    assert "cache     100 blocks x 16 tokens" in capsys.readouterr().out
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "block_size"}) + "\n"
                            for line in trace.read_text().splitlines()))
    assert main(["run", str(bare), "--policy", "lru", "--capacity", "100"]) == 2
    assert "the hash ids fit 16-token blocks, not 512: pass --block-size 16" in capsys.readouterr().err
    assert main(["run", str(bare), "--policy", "lru", "--capacity", "100", "--block-size", "16"]) == 0