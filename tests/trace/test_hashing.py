"""`kvreplay hash`: chained block hashes, token logs to Mooncake traces, its errors and its CLI."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kvreplay
from conftest import jsonl, write
from kvreplay.errors import ConfigError, OutputError, TraceError
from kvreplay.trace.hashing import chain_hashes, hash_token_log, root_hash

DATA = Path(__file__).resolve().parents[1] / "data"

# tokens_roundtrip.jsonl, block size 4 (A..D: blocks of the default namespace, A', B': of tenant-b):
#   line 1: 1..10              10 tokens  A B   + 2 left over    -> ids [0, 1]
#   line 2: 1..8 20..23 30     13 tokens  A B C + 1              -> ids [0, 1, 2]
#   line 3: blank (skipped)
#   line 4: 1..4 9 9 9 9        8 tokens  A D                    -> ids [0, 3]
#   line 5: 1..8, tenant-b      8 tokens  A' B' (same tokens as A B, other namespace) -> ids [4, 5]
#   line 6: 1 2 3               3 tokens  no full block          -> ids []
#   line 7: 1..8 20..23 40 41  14 tokens  A B C + 2              -> ids [0, 1, 2]
ROUNDTRIP = DATA / "tokens_roundtrip.jsonl"
ROUNDTRIP_OUT = (
    '{"timestamp":0,"input_length":10,"output_length":7,"hash_ids":[0,1],"block_size":4}\n'
    '{"timestamp":1500,"input_length":13,"output_length":0,"hash_ids":[0,1,2],"block_size":4}\n'
    '{"timestamp":2000.5,"input_length":8,"output_length":0,"hash_ids":[0,3],"block_size":4}\n'
    '{"timestamp":3000,"input_length":8,"output_length":0,"hash_ids":[4,5],"block_size":4}\n'
    '{"timestamp":0,"input_length":3,"output_length":0,"hash_ids":[],"block_size":4}\n'
    '{"timestamp":5000,"input_length":14,"output_length":2,"hash_ids":[0,1,2],"block_size":4}\n'
)
ROUNDTRIP_SUMMARY = {"block_size": 4, "requests": 6, "tokens": 56, "blocks": 12, "unique_blocks": 6, "tokenized": 0}
BAD3 = DATA / "tokens_bad_line3.jsonl"  # line 3: token_ids item 1 is -1


def sha(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def le64(*tokens: int) -> bytes:
    return struct.pack(f"<{len(tokens)}q", *tokens)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".kvreplay-"))


# --- chain_hashes ----------------------------------------------------------------------------

def test_chain_hashes_follow_the_documented_recipe():
    root = sha(b"kvreplay-root")
    assert root_hash() == root
    b0 = sha(root, le64(1, 2))
    b1 = sha(b0, le64(3, 4))
    assert chain_hashes([1, 2, 3, 4, 5], 2) == [b0, b1]  # token 5 is a partial block: no hash
    salted_root = sha(b"kvreplay-root", b"t")
    s0 = sha(salted_root, le64(1, 2), b"t")
    assert chain_hashes([1, 2, 3], 2, salt=b"t") == [s0]
    # A token id above 2**32 keeps all 8 little-endian bytes.
    assert chain_hashes([2**40 + 7], 1) == [sha(root, b"\x07\x00\x00\x00\x00\x01\x00\x00")]


def test_chain_hashes_pinned_digests():
    # Fixed values, so a change of encoding (byte order, width, salt placement) cannot pass
    # unnoticed; docs/formats.md quotes the first one.
    assert chain_hashes([0, 1, 2, 3], 4)[0].hex() == "eea7dd9d6a98cc8d4ec90a5ec14a634d31518dee0f09ef909a5ab0e8576d37d9"
    assert chain_hashes([1, 2, 3, 4, 5, 6], 3, salt=b"ns")[1].hex() == \
        "61f7a35b3a5c56326d13494a625f71703c45fccc76c99bd5c7c1cd7efafbfb1a"


def test_shared_prefix_shares_exactly_its_blocks():
    common = list(range(100, 108))  # two blocks of 4
    a = chain_hashes(common + [1, 1, 1, 1, 2, 2, 2, 2], 4)
    b = chain_hashes(common + [1, 1, 1, 9, 2, 2, 2, 2], 4)  # differs in block 2 only...
    assert len(a) == len(b) == 4
    assert a[:2] == b[:2]
    assert a[2] != b[2]
    assert a[3] != b[3]  # ...yet block 3, same tokens, differs: it hashes everything before it
    assert len(set(a) | set(b)) == 6


def test_partial_block_gets_no_hash():
    assert chain_hashes(list(range(7)), 4) == chain_hashes(list(range(4)), 4)
    assert len(chain_hashes(list(range(7)), 4)) == 1
    assert chain_hashes([1, 2, 3], 4) == []
    assert chain_hashes([], 4) == []
    assert len(chain_hashes(list(range(1024)), 512)) == 2
    assert len(chain_hashes(list(range(1023)), 512)) == 1


def test_namespaces_are_disjoint():
    tokens = list(range(64))
    plain, a, b = (chain_hashes(tokens, 16, salt=s) for s in (b"", b"tenant-a", b"tenant-b"))
    assert not set(plain) & set(a) and not set(a) & set(b) and not set(plain) & set(b)
    assert chain_hashes(tokens, 16, salt=b"tenant-a") == a


def test_chain_hashes_rejects_bad_block_size():
    with pytest.raises(ConfigError, match="block_size must be >= 1, got 0"):
        chain_hashes([1], 0)


# --- hash_token_log --------------------------------------------------------------------------

def test_roundtrip_output_and_summary(tmp_path):
    out = tmp_path / "trace.jsonl"
    summary = hash_token_log(ROUNDTRIP, out, block_size=4)
    assert out.read_text() == ROUNDTRIP_OUT
    assert summary == {**ROUNDTRIP_SUMMARY, "source": str(ROUNDTRIP), "output": str(out)}
    assert leftovers(tmp_path) == []


def test_roundtrip_replay_gives_hand_computed_hits(tmp_path):
    out = tmp_path / "trace.jsonl"
    hash_token_log(ROUNDTRIP, out, block_size=4)
    trace = kvreplay.load_trace(out)
    assert trace.input_length.tolist() == [10, 13, 8, 8, 3, 14]
    assert trace.timestamp.tolist() == [0, 1500, 2000.5, 3000, 0, 5000]
    assert trace.output_length.tolist() == [7, 0, 0, 0, 0, 2]
    # Infinite cache: r2 finds A B (not C): min(2*4, 13) = 8; r3 finds A (not D): 4;
    # r4 (tenant-b) nothing; r5 has no block; r6 finds A B C: min(12, 14) = 12.
    inf = kvreplay.replay(trace, "infinite", None, 4)
    assert inf.hit_tokens.tolist() == [0, 8, 4, 0, 0, 12]
    assert (inf.total_hit_tokens, inf.total_prompt_tokens) == (24, 56)
    # LRU, 3 blocks (LRU -> MRU): r1 -> 0 1; r2 hits 0 1 (8) -> 0 1 2; r3 hits 0 (4) -> 1 2 0,
    # 3 evicts 1 -> 2 0 3; r4: 4 evicts 2, 5 evicts 0 -> 3 4 5; r6: block 0 is gone -> 0 hits.
    lru = kvreplay.replay(trace, "lru", 3, 4, engine="reference")
    assert lru.hit_tokens.tolist() == [0, 8, 4, 0, 0, 0]


def test_vllm_prompt_token_ids_hash_as_token_ids(tmp_path):
    # vLLM's request log names a prompt's tokens prompt_token_ids: the same tokens give the same trace.
    records = [json.loads(line) for line in ROUNDTRIP.read_text().splitlines() if line.strip()]
    renamed = [{("prompt_token_ids" if k == "token_ids" else k): v for k, v in r.items()} for r in records]
    log = write(tmp_path, "vllm.jsonl", jsonl(*renamed))
    out = tmp_path / "trace.jsonl"
    assert hash_token_log(log, out, block_size=4)["requests"] == 6
    assert out.read_text() == ROUNDTRIP_OUT
    mixed = write(tmp_path, "mixed.jsonl", jsonl(records[0], renamed[1]))  # either name, line by line
    hash_token_log(mixed, out, block_size=4)
    assert out.read_text() == ROUNDTRIP_OUT.splitlines(keepends=True)[0] + ROUNDTRIP_OUT.splitlines(keepends=True)[1]


def test_output_is_deterministic(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    hash_token_log(ROUNDTRIP, a, block_size=4, keep_hashes=True)
    hash_token_log(ROUNDTRIP, b, block_size=4, keep_hashes=True)
    assert a.read_bytes() == b.read_bytes()


def test_keep_hashes_writes_the_digests(tmp_path):
    out = tmp_path / "t.jsonl"
    hash_token_log(ROUNDTRIP, out, block_size=4, keep_hashes=True)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[1]["block_hashes"] == [h.hex() for h in chain_hashes([1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23, 30], 4)]
    assert recs[3]["block_hashes"] == [h.hex() for h in chain_hashes(list(range(1, 9)), 4, salt=b"tenant-b")]
    assert recs[4]["block_hashes"] == []
    assert list(recs[0]) == ["timestamp", "input_length", "output_length", "hash_ids", "block_size", "block_hashes"]


def test_namespace_salt_field_and_default_salt(tmp_path):
    tokens = [1, 2, 3, 4]
    log = write(tmp_path, "log.jsonl", jsonl(
        {"token_ids": tokens}, {"token_ids": tokens, "namespace": "x"}, {"token_ids": tokens, "salt": "x"},
        {"token_ids": tokens, "namespace": ""},
    ))
    out = tmp_path / "t.jsonl"
    hash_token_log(log, out, block_size=2)
    # salt and namespace are the same thing; an empty namespace is the default one.
    assert [json.loads(x)["hash_ids"] for x in out.read_text().splitlines()] == [[0, 1], [2, 3], [2, 3], [0, 1]]
    hash_token_log(log, out, block_size=2, salt="x", keep_hashes=True)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    # --salt x: records without a namespace join namespace x; the explicit "" stays unsalted.
    assert [r["hash_ids"] for r in recs] == [[0, 1], [0, 1], [0, 1], [2, 3]]
    assert recs[0]["block_hashes"] == [h.hex() for h in chain_hashes(tokens, 2, salt=b"x")]


def test_gzip_input(tmp_path):
    gz = write(tmp_path, "log.bin", gzip.compress(ROUNDTRIP.read_bytes()))  # recognised by content
    out = tmp_path / "t.jsonl"
    hash_token_log(gz, out, block_size=4)
    assert out.read_text() == ROUNDTRIP_OUT


def test_block_size_one_and_large(tmp_path):
    log = write(tmp_path, "log.jsonl", jsonl({"token_ids": [5, 5, 5]}, {"token_ids": [5, 5, 6]}))
    out = tmp_path / "t.jsonl"
    assert hash_token_log(log, out, block_size=1)["unique_blocks"] == 4  # 5 | 5,5 | 5,5,5 | 5,5,6
    assert [json.loads(x)["hash_ids"] for x in out.read_text().splitlines()] == [[0, 1, 2], [0, 1, 3]]
    s = hash_token_log(log, out, block_size=512)
    assert (s["blocks"], s["unique_blocks"]) == (0, 0)
    assert [json.loads(x)["hash_ids"] for x in out.read_text().splitlines()] == [[], []]


def test_integral_float_output_length_is_accepted(tmp_path):
    log = write(tmp_path, "log.jsonl", jsonl({"token_ids": [1], "output_length": 7.0}))
    out = tmp_path / "t.jsonl"
    hash_token_log(log, out, block_size=1)
    assert json.loads(out.read_text())["output_length"] == 7


BAD_RECORDS = [
    ('{"token_ids": [1, 2', "invalid JSON (", None),
    ("[1, 2, 3]", "expected a JSON object, got [1,2,3]", None),
    ('{"token_ids": "1 2 3"}', 'expected a list of token ids (integers), got "1 2 3"', "token_ids"),
    ('{"token_ids": [1, 2.5]}', "item 1 is 2.5, expected a token id (an integer)", "token_ids"),
    ('{"token_ids": [true]}', "item 0 is true, expected a token id (an integer)", "token_ids"),
    ('{"token_ids": [1, [2]]}', "item 1 is [2], expected a token id (an integer)", "token_ids"),
    ('{"token_ids": [4, -3]}', "item 1 is -3, expected a token id in 0..2**63-1", "token_ids"),
    ('{"token_ids": [9223372036854775808]}', "item 0 is 9223372036854775808, expected a token id in 0..2**63-1", "token_ids"),
    ('{"token_ids": [123456789012345678901234567890]}',
     "item 0 is 123456789012345678901234567890, expected a token id in 0..2**63-1", "token_ids"),
    ('{"timestamp": 5}', "missing (and no prompt_token_ids, text or prompt to tokenize)", "token_ids"),
    ('{"prompt_token_ids": [1, -2]}', "item 1 is -2, expected a token id in 0..2**63-1", "prompt_token_ids"),
    ('{"token_ids": [1], "prompt_token_ids": [1]}', "give token_ids or prompt_token_ids, not both", "prompt_token_ids"),
    ('{"text": "hello"}', "missing; this record has text: give a tokenizer (--tokenizer tokenizer.json) to tokenize it", "token_ids"),
    ('{"token_ids": [1], "timestamp": "noon"}', 'expected a number (milliseconds), got "noon"', "timestamp"),
    ('{"token_ids": [1], "output_length": -1}', "expected a non-negative integer, got -1", "output_length"),
    ('{"token_ids": [1], "output_length": 2.5}', "expected a non-negative integer, got 2.5", "output_length"),
    ('{"token_ids": [1], "namespace": 5}', "expected a string, got 5", "namespace"),
    ('{"token_ids": [1], "namespace": "a", "salt": "b"}', "give namespace or salt, not both", "salt"),
]


@pytest.mark.parametrize("line, message, field", BAD_RECORDS, ids=[m[:30] for _, m, _ in BAD_RECORDS])
def test_bad_record_names_file_line_field_and_leaves_nothing(tmp_path, line, message, field):
    log = write(tmp_path, "log.jsonl", '{"token_ids": [1, 2]}\n\n' + line + "\n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(TraceError) as e:
        hash_token_log(log, out, block_size=2)
    assert (e.value.path, e.value.line, e.value.field) == (str(log), 3, field)
    where = f"{log}:3: {field}: " if field else f"{log}:3: "
    if message.endswith("("):
        assert str(e.value).startswith(where + message)
    else:
        assert str(e.value) == where + message
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_failure_keeps_an_existing_output(tmp_path):
    out = write(tmp_path, "out.jsonl", "old\n")
    with pytest.raises(TraceError, match=r"tokens_bad_line3.jsonl:3: token_ids: item 1 is -1"):
        hash_token_log(BAD3, out, block_size=2)
    assert out.read_text() == "old\n"
    assert leftovers(tmp_path) == []


def test_empty_and_missing_inputs(tmp_path):
    empty = write(tmp_path, "empty.jsonl", "\n  \n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(TraceError) as e:
        hash_token_log(empty, out)
    assert str(e.value) == f"{empty}: no requests (empty token log)"
    with pytest.raises(TraceError) as e:
        hash_token_log(tmp_path / "nope.jsonl", out)
    assert str(e.value) == f"{tmp_path / 'nope.jsonl'}: no such file"
    assert not out.exists() and leftovers(tmp_path) == []


def test_output_errors(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        hash_token_log(ROUNDTRIP, tmp_path, block_size=4)
    with pytest.raises(OutputError, match="cannot write"):
        hash_token_log(ROUNDTRIP, tmp_path / "no-such-dir" / "t.jsonl", block_size=4)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_bad_block_size(tmp_path, bad):
    with pytest.raises(ConfigError, match="block_size must be a whole number >= 1"):
        hash_token_log(ROUNDTRIP, tmp_path / "t.jsonl", block_size=bad)


def test_function_tokenizer(tmp_path):
    log = write(tmp_path, "log.jsonl", jsonl({"text": "abcd"}, {"prompt": "abcx"}, {"token_ids": [97, 98], "text": "zz"}))
    out = tmp_path / "t.jsonl"
    hash_token_log(log, out, block_size=2, tokenizer=lambda s: [ord(c) for c in s])
    # "ab" "cd" | "ab" "cx" | token_ids win over text: [97, 98] = "ab"
    assert [json.loads(x)["hash_ids"] for x in out.read_text().splitlines()] == [[0, 1], [0, 2], [0]]
    with pytest.raises(TraceError, match=r"log.jsonl:1: token_ids: item 0 is -1, expected a token id in 0..2\*\*63-1"):
        hash_token_log(log, out, block_size=2, tokenizer=lambda s: [-1])


def test_tokenizer_failure_names_the_line(tmp_path):
    log = write(tmp_path, "log.jsonl", jsonl({"token_ids": [1]}, {"prompt": "boom"}))

    def broken(text):
        raise ValueError("cannot encode")

    with pytest.raises(TraceError) as e:
        hash_token_log(log, tmp_path / "t.jsonl", block_size=1, tokenizer=broken)
    assert str(e.value) == f"{log}:2: prompt: tokenizer failed: cannot encode"
    assert not (tmp_path / "t.jsonl").exists()


def test_lone_surrogates_never_crash(tmp_path):
    # msgspec refuses a lone surrogate in JSON; one can still come from --salt (argv's surrogateescape).
    log = write(tmp_path, "log.jsonl", '{"token_ids": [1], "namespace": "\\ud800"}\n')
    with pytest.raises(TraceError, match=r"log.jsonl:1: invalid JSON \("):
        hash_token_log(log, tmp_path / "t.jsonl", block_size=1)
    out = tmp_path / "t.jsonl"
    hash_token_log(ROUNDTRIP, out, block_size=4, salt="\udcff", keep_hashes=True)
    first = json.loads(out.read_text().splitlines()[0])
    assert first["block_hashes"][0] == chain_hashes(list(range(1, 5)), 4, salt=b"\xed\xb3\xbf")[0].hex()


def test_output_dash_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="the output must be a file name, not '-'"):
        hash_token_log(ROUNDTRIP, "-", block_size=4)


def test_missing_tokenizers_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    with pytest.raises(ConfigError) as e:
        hash_token_log(ROUNDTRIP, tmp_path / "t.jsonl", tokenizer=tmp_path / "tokenizer.json")
    assert str(e.value) == "--tokenizer needs the optional 'tokenizers' package: pip install 'kvreplay[tokenizers]'"
    assert not (tmp_path / "t.jsonl").exists()


# --- with a real (tiny) tokenizer.json --------------------------------------------------------

VOCAB = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, "on": 4, "mat": 5, "a": 6}


@pytest.fixture
def tokenizer_json(tmp_path) -> Path:
    if os.environ.get("KVREPLAY_REQUIRE_OPTIONAL") == "1":  # .ci/run: the test extra brings tokenizers
        import tokenizers
    else:
        tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_text_through_tokenizer_json(tmp_path, tokenizer_json):
    log = write(tmp_path, "log.jsonl", jsonl(
        {"text": "the cat sat on the mat", "timestamp": 1},   # 1 2 | 3 4 | 1 5
        {"prompt": "the cat sat on a dog", "timestamp": 2},   # 1 2 | 3 4 | 6 0 (dog is unknown)
        {"token_ids": [1, 2, 3, 4, 1, 5, 6]},                # the first request's tokens + 1
    ))
    out = tmp_path / "t.jsonl"
    summary = hash_token_log(log, out, block_size=2, tokenizer=tokenizer_json)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["input_length"], r["hash_ids"]) for r in recs] == [(6, [0, 1, 2]), (6, [0, 1, 3]), (7, [0, 1, 2])]
    assert (summary["tokens"], summary["blocks"], summary["unique_blocks"]) == (19, 9, 4)


def test_bad_tokenizer_file(tmp_path, tokenizer_json):
    bad = write(tmp_path, "bad.json", "{not json")
    with pytest.raises(TraceError, match=r"bad.json: cannot load tokenizer: "):
        hash_token_log(ROUNDTRIP, tmp_path / "t.jsonl", tokenizer=bad)
    with pytest.raises(TraceError) as e:
        hash_token_log(ROUNDTRIP, tmp_path / "t.jsonl", tokenizer=tmp_path / "none.json")
    assert str(e.value) == f"{tmp_path / 'none.json'}: no such tokenizer file"


# --- the command line -------------------------------------------------------------------------

def kv(*args, input: bytes | None = None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvreplay.cli", *map(str, args)],
                          input=input, capture_output=True, timeout=300, env=env)


def test_cli_hash_file(tmp_path):
    out = tmp_path / "t.jsonl"
    r = kv("hash", ROUNDTRIP, "-o", out, "--block-size", "4")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""
    assert r.stderr.decode() == f"{ROUNDTRIP}: 6 requests, 56 tokens, 12 blocks of 4 (6 unique) -> {out}\n"
    assert out.read_text() == ROUNDTRIP_OUT


def test_cli_hash_stdin_gzip_and_hash_seed_independent(tmp_path):
    outs = []
    for seed, data in (("1", ROUNDTRIP.read_bytes()), ("2", gzip.compress(ROUNDTRIP.read_bytes()))):
        out = tmp_path / f"t{seed}.jsonl"
        r = kv("hash", "-", "-o", out, "--block-size", "4", input=data, env=dict(os.environ, PYTHONHASHSEED=seed))
        assert r.returncode == 0, r.stderr.decode()
        assert r.stderr.decode().startswith("<stdin>: 6 requests, 56 tokens")
        outs.append(out.read_text())
    assert outs == [ROUNDTRIP_OUT, ROUNDTRIP_OUT]


def test_cli_bad_record_exit_2_no_output(tmp_path):
    out = tmp_path / "t.jsonl"
    r = kv("hash", BAD3, "-o", out, "--block-size", "2")
    assert r.returncode == 2
    assert r.stderr.decode() == f"{BAD3}:3: token_ids: item 1 is -1, expected a token id in 0..2**63-1\n"
    assert not out.exists() and leftovers(tmp_path) == []
    r = kv("hash", "-", "-o", out, input=b'{"token_ids": [1]}\n{"token_ids": [1.5]}\n')
    assert (r.returncode, r.stderr.decode()) == (2, "<stdin>:2: token_ids: item 0 is 1.5, expected a token id (an integer)\n")
    assert not out.exists()


def test_cli_missing_tokenizers_package(tmp_path):
    code = ("import sys; sys.modules['tokenizers'] = None; from kvreplay.cli import main; "
            f"sys.exit(main(['hash', {str(ROUNDTRIP)!r}, '-o', {str(tmp_path / 't.jsonl')!r}, '--tokenizer', 'tok.json']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.decode() == "kvreplay: --tokenizer needs the optional 'tokenizers' package: pip install 'kvreplay[tokenizers]'\n"
    assert not (tmp_path / "t.jsonl").exists()


def test_cli_tokenizer(tmp_path, tokenizer_json):
    log = write(tmp_path, "log.jsonl", jsonl({"text": "the cat sat"}, {"text": "the cat on"}))
    out = tmp_path / "t.jsonl"
    r = kv("hash", log, "-o", out, "--block-size", "2", "--tokenizer", tokenizer_json, "--salt", "s")
    assert r.returncode == 0, r.stderr.decode()
    assert [json.loads(x)["hash_ids"] for x in out.read_text().splitlines()] == [[0], [0]]


def test_cli_bad_block_size(tmp_path):
    r = kv("hash", ROUNDTRIP, "-o", tmp_path / "t.jsonl", "--block-size", "0")
    assert r.returncode == 2 and b"must be >= 1, got 0" in r.stderr
