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
from conftest import CLAUDE_CODE, DATA, MOONCAKE
from kvreplay.trace.model import (block_size_mismatches, check_block_size, check_not_token_ids, likely_block_size,
                                  token_like_requests)


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

# ---------------------------------------------------------------- token ids are not hash ids
# A token log replayed as hash ids would have been told "pass --block-size 1", which replays each
# token as a block: a shared word then counts as a shared prefix block. Chained block hashes never
# repeat within a prompt; a prompt's token ids do (trace/model.py, check_not_token_ids).

TOKEN_IDS = DATA / "token_ids_as_hash_ids.jsonl"  # 8 prompts of 40-70 token ids, 30 shared


def test_token_like_requests_by_hand():
    # request 0: 16 ids for 16 tokens, 3 repeated -> token-like; 1: 16 distinct ids -> not (a chained
    # hash at block size 1 is fine); 2: 16 ids with a repeat for 512 tokens -> one id per 32 tokens, not
    # token-like; 3: 15 ids -> not judged.
    repeat = [5, 6, 5] + list(range(10, 23))
    trace = kvreplay.Trace.from_requests([(repeat, 16), (list(range(30, 46)), 16), (repeat, 512),
                                          (list(range(15)), 15)])
    assert token_like_requests(trace) == (1, 3)
    check_not_token_ids(trace)  # 1 of 3 judged: not most


def test_a_token_log_replayed_as_hash_ids_is_refused_with_the_way_out(capsys):
    assert main(["run", str(TOKEN_IDS), "--block-size", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvreplay: {TOKEN_IDS}: the hash_ids look like token ids, not block hashes: 8 of 8 "
                          "requests with 16+ ids carry about one id per prompt token and repeat ids within the prompt")
    assert "kvreplay hash" in err and "--no-token-id-check" in err and "pass --block-size 1" not in err
    assert main(["run", str(TOKEN_IDS)]) == 2  # at the default block size too, before the block-size advice
    assert "look like token ids" in capsys.readouterr().err
    assert main(["run", str(TOKEN_IDS), "--block-size", "1", "--no-token-id-check"]) == 0


def test_hash_turns_the_token_log_into_a_trace_that_passes(tmp_path, capsys):
    # the same prompts through `kvreplay hash` (their token ids as prompt_token_ids, vLLM's name):
    # 16-token blocks of chained hashes, and at block size 1 one id per token, never repeated
    log = tmp_path / "vllm.jsonl"
    log.write_text("".join(json.dumps({"prompt_token_ids": json.loads(line)["hash_ids"]}) + "\n"
                           for line in TOKEN_IDS.read_text().splitlines()))
    for block_size in ("16", "1"):
        out = tmp_path / f"t{block_size}.jsonl"
        assert main(["hash", str(log), "-o", str(out), "--block-size", block_size]) == 0
        assert main(["stats", str(out)]) == 0
    assert token_like_requests(kvreplay.load_trace(tmp_path / "t1.jsonl")) == (0, 8)


def test_a_vllm_request_log_is_pointed_to_hash(tmp_path, capsys):
    log = tmp_path / "vllm.jsonl"
    log.write_text(json.dumps({"prompt_token_ids": [1, 2, 3], "timestamp": 0}) + "\n")
    assert main(["run", str(log)]) == 2
    assert (f"{log}:1: hash_ids: missing; this record has prompt_token_ids: a token log, not a trace of block "
            f"hashes (turn it into one with `kvreplay hash {log} -o trace.jsonl`)") in capsys.readouterr().err


def test_no_fixture_and_no_shared_trace_looks_like_token_ids():
    paths = [p for p in sorted(DATA.iterdir()) if p.suffix in (".json", ".jsonl") and p != TOKEN_IDS]
    paths += [p for p in (MOONCAKE / "conversation_trace.jsonl", MOONCAKE / "synthetic_trace.jsonl", CLAUDE_CODE)
              if p.exists()]
    judged = 0
    for path in paths:
        try:
            trace = kvreplay.load_trace(path)
        except kvreplay.KvreplayError:
            continue  # the bad-input fixtures and the token logs (no hash_ids at all)
        looking, n = token_like_requests(trace)
        assert looking == 0, path
        judged += n
    assert judged > 0
