"""Token logs to Mooncake traces: chained block hashes, as serving engines compute them.

Input: JSONL, one request per line, in arrival order::

    {"token_ids": [1, 2, 3, ...], "timestamp": 1200, "output_length": 80, "namespace": "tenant-a"}
    {"prompt_token_ids": [1, 2, 3, ...], "timestamp": 1250}       # vLLM's request-log field name
    {"text": "You are a helpful ...", "timestamp": 1350}          # with a tokenizer

Block ``i`` of a request covers tokens ``[i*B, (i+1)*B)``; only full blocks get a hash (a
trailing partial block is never shared by an engine either), so a request of L tokens has
``L // B`` hashes. The recipe, with ``salt`` the UTF-8 bytes of the request's namespace::

    root   = sha256(b"kvreplay-root" + salt)
    h[0]   = sha256(root   + tokens[0:B]   as little-endian int64 + salt)
    h[i]   = sha256(h[i-1] + tokens[iB:(i+1)B] as little-endian int64 + salt)

so two requests share their first k hashes exactly when they share their first k*B tokens
and their namespace. Like vLLM's (parent hash, block tokens, extra keys) chain, with a fixed
encoding so the digests do not depend on the Python version.

Output: a Mooncake JSONL trace ``{"timestamp", "input_length", "output_length",
"hash_ids"}`` where the digests are numbered 0, 1, 2, ... in order of first appearance
(``keep_hashes`` adds ``block_hashes``, the hex digests). It is written as the input is
read, to a temporary file beside the output that is renamed at the end (removed on any
error): memory stays constant apart from the digest -> id table.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import zlib
from typing import Annotated, Callable, Union

import msgspec
import numpy as np

from ..errors import ConfigError, TraceError
from ..files import atomic_output
from .model import DEFAULT_BLOCK_SIZE
from .jsonl import INT64_MAX, describe, nesting, open_trace

ROOT_PREFIX = b"kvreplay-root"
TOKENIZERS_HINT = "pip install 'kvreplay[tokenizers]'"

_TokenId = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]


class _Record(msgspec.Struct, gc=False):
    """The typed fast path: a record that decodes into this is valid as it stands."""

    token_ids: Union[list[_TokenId], None] = None
    prompt_token_ids: Union[list[_TokenId], None] = None
    text: Union[str, None] = None
    prompt: Union[str, None] = None
    timestamp: Union[int, float, None] = None
    output_length: Union[Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)], None] = None
    namespace: Union[str, None] = None
    salt: Union[str, None] = None


class _Out(msgspec.Struct, gc=False):
    timestamp: Union[int, float]
    input_length: int
    output_length: int
    hash_ids: list[int]
    block_size: int  # so that a replay of the file needs no --block-size


class _OutHex(_Out, gc=False):
    block_hashes: list[str]


_decoder = msgspec.json.Decoder(_Record)
_encoder = msgspec.json.Encoder()


def root_hash(salt: bytes = b"") -> bytes:
    """The parent of a request's first block: sha256(b"kvreplay-root" + salt)."""
    return hashlib.sha256(ROOT_PREFIX + salt).digest()


def _token_bytes(tokens) -> bytes:
    return np.asarray(tokens, dtype="<i8").tobytes()


def chain_hashes(tokens, block_size: int, salt: bytes = b"") -> list[bytes]:
    """The sha256 digest of every full block of `tokens` (len(tokens) // block_size of them).

    Block i's digest is sha256(digest of block i-1 + its tokens as little-endian int64 +
    salt); block 0's parent is root_hash(salt). The trailing partial block gets none.
    """
    if block_size < 1:
        raise ConfigError(f"block_size must be >= 1, got {block_size}")
    return _chain(_token_bytes(tokens), len(tokens) // block_size, 8 * block_size, salt, root_hash(salt))


def _chain(data: bytes, num_blocks: int, step: int, salt: bytes, parent: bytes) -> list[bytes]:
    sha256 = hashlib.sha256
    out = []
    for start in range(0, num_blocks * step, step):
        parent = sha256(parent + data[start:start + step] + salt).digest()
        out.append(parent)
    return out


# --- validation (the slow path: only for records the typed decoder refuses) ---------------

def _check_tokens(path: str, line: int, field: str, value) -> list:
    if not isinstance(value, list):
        raise TraceError(path, f"expected a list of token ids (integers), got {describe(value)}", line, field)
    for j, t in enumerate(value):
        if type(t) is not int:
            raise TraceError(path, f"item {j} is {describe(t)}, expected a token id (an integer)", line, field)
        if not 0 <= t <= INT64_MAX:
            raise TraceError(path, f"item {j} is {t}, expected a token id in 0..2**63-1", line, field)
    return value


def _check_record(path: str, line: int, text: bytes) -> _Record:
    """Decode one line the generic way and name the first problem; return it as a _Record."""
    try:
        obj = msgspec.json.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise TraceError(path, f"invalid JSON ({nesting(e)})", line) from None
    if not isinstance(obj, dict):
        raise TraceError(path, f"expected a JSON object, got {describe(obj)}", line)
    if obj.get("token_ids") is not None and obj.get("prompt_token_ids") is not None:
        raise TraceError(path, "give token_ids or prompt_token_ids, not both", line, "prompt_token_ids")
    field = "token_ids" if obj.get("token_ids") is not None else "prompt_token_ids"
    tokens = obj.get(field)
    if tokens is not None:
        _check_tokens(path, line, field, tokens)
    for key in ("text", "prompt", "namespace", "salt"):
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            raise TraceError(path, f"expected a string, got {describe(value)}", line, key)
    stamp = obj.get("timestamp")
    if stamp is not None and (type(stamp) not in (int, float) or not finite(stamp)):
        raise TraceError(path, f"expected a number (milliseconds), got {describe(stamp)}", line, "timestamp")
    out = obj.get("output_length")
    if out is not None:
        if not (type(out) is int or (type(out) is float and out.is_integer())) or out < 0:
            raise TraceError(path, f"expected a non-negative integer, got {describe(out)}", line, "output_length")
        if out > INT64_MAX:
            raise TraceError(path, f"{describe(out)} is too large (the limit is 2**63-1)", line, "output_length")
        out = int(out)
    return _Record(token_ids=tokens, text=obj.get("text"), prompt=obj.get("prompt"), timestamp=stamp,
                   output_length=out, namespace=obj.get("namespace"), salt=obj.get("salt"))


def finite(x) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


# --- tokenizers ---------------------------------------------------------------------------

def load_tokenizer(path) -> Callable[[str], list]:
    """A function text -> token ids from a local Hugging Face ``tokenizer.json`` (no network).

    Needs the optional ``tokenizers`` package (``pip install 'kvreplay[tokenizers]'``).
    Special tokens are added as the file's post-processor says (e.g. a BOS token), as an
    engine does for a plain completion prompt.
    """
    path = os.fspath(path)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(f"--tokenizer needs the optional 'tokenizers' package: {TOKENIZERS_HINT}") from None
    if not os.path.isfile(path):
        raise TraceError(path, "no such tokenizer file" if not os.path.exists(path) else "is not a file, expected a tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        raise TraceError(path, f"cannot load tokenizer: {e}") from None
    return _encoder_of(tokenizer)


def _encoder_of(tokenizer) -> Callable[[str], list]:
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "get_vocab_size"):  # a tokenizers.Tokenizer
        return lambda text: tokenizer.encode(text).ids
    if callable(tokenizer):
        return tokenizer
    raise ConfigError("tokenizer must be a path to tokenizer.json, a tokenizers.Tokenizer or a function text -> token ids")


# --- the streaming conversion -------------------------------------------------------------

def _lines(path: str, stream):
    """(line number, bytes) for every line; gzip damage becomes a TraceError."""
    try:
        yield from enumerate(stream, 1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(path, f"truncated or corrupt gzip data ({e})") from None
    except OSError as e:
        raise TraceError(path, f"read failed: {e}") from None


def hash_token_log(source, out_path, *, block_size: int = DEFAULT_BLOCK_SIZE, tokenizer=None, salt: str = "",
                   keep_hashes: bool = False, progress=None) -> dict:
    """Convert a token log (JSONL) into a Mooncake trace at `out_path`; return a summary.

    source: a JSONL file (plain or gzip, recognised by content), or "-" for standard input.
        Fields per line: ``token_ids`` or ``prompt_token_ids`` (vLLM's name; a list of
        non-negative integers), or ``text`` / ``prompt`` (a string, needs `tokenizer`);
        optional ``timestamp`` (milliseconds,
        default 0), ``output_length`` (default 0), ``namespace`` or ``salt`` (a string:
        requests in different namespaces never share a block). Blank lines are skipped,
        other fields ignored; token ids win over ``text`` when a line has both (a line with both
        token_ids and prompt_token_ids is refused).
    block_size: tokens per block; only full blocks get a hash id.
    tokenizer: None, a path to a ``tokenizer.json``, a ``tokenizers.Tokenizer``, or a
        function text -> list of token ids.
    salt: the namespace of records that name none.
    keep_hashes: also write each block's hex sha256 digest in a ``block_hashes`` field.
    progress: a kvreplay.progress callback, told ``(bytes, file size, "bytes read")`` as the log is
        read (not for standard input).

    Returns ``{"source", "output", "block_size", "requests", "tokens", "blocks",
    "unique_blocks", "tokenized"}`` (tokens: prompt tokens; blocks: hash ids written, i.e. full
    blocks; tokenized: records whose tokens came from `tokenizer`).
    Raises TraceError naming the file, line and field of the first bad record; nothing is
    left at `out_path` then (an existing file there is untouched).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ConfigError(f"block_size must be a whole number >= 1, got {block_size!r}")
    if not isinstance(salt, str):
        raise ConfigError(f"salt must be a string, got {salt!r}")
    block_size = int(block_size)
    encode = None
    if tokenizer is not None:
        encode = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else _encoder_of(tokenizer)
    source = os.fspath(source)
    out_path = os.fspath(out_path)
    if out_path == "-":
        raise ConfigError("the output must be a file name, not '-' (the trace is renamed into place when complete)")
    name = "<stdin>" if source == "-" else source
    stream = open_trace(source)
    told = None
    if progress is not None and source != "-":
        raw, size = getattr(stream, "fileobj", stream), os.path.getsize(source)  # bytes on disk, gzip or not
        told = lambda: progress(raw.tell(), size, "bytes read")  # noqa: E731
    try:
        return _convert(name, stream, out_path, block_size, encode, salt, keep_hashes, told)
    finally:
        if source != "-":
            stream.close()


def _convert(name: str, stream, out_path: str, block_size: int, encode, default_salt: str, keep_hashes: bool,
             told=None) -> dict:
    with atomic_output(out_path) as out:
        summary = _stream(name, stream, out, block_size, encode, default_salt, keep_hashes, told)
    summary.update(source=name, output=out_path)
    return summary


def token_records(name: str, stream, encode, default_salt: str = ""):
    """Every record of a token log, checked: (line number, token ids, timestamp ms, output
    length, namespace). `encode`: text -> token ids for records with text or prompt (None: such
    a record is an error naming the line)."""
    decode = _decoder.decode
    for line_no, line in _lines(name, stream):
        if not line or line.isspace():
            continue
        try:
            rec = decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            rec = _check_record(name, line_no, line)
        tokens = rec.token_ids
        if rec.prompt_token_ids is not None:
            if tokens is not None:
                raise TraceError(name, "give token_ids or prompt_token_ids, not both", line_no, "prompt_token_ids")
            tokens = rec.prompt_token_ids
        if tokens is None:
            text = rec.text if rec.text is not None else rec.prompt
            if text is None:
                raise TraceError(name, "missing (and no prompt_token_ids, text or prompt to tokenize)", line_no,
                                 "token_ids")
            if encode is None:
                raise TraceError(name, f"missing; this record has {'text' if rec.text is not None else 'prompt'}: "
                                 "give a tokenizer (--tokenizer tokenizer.json) to tokenize it", line_no, "token_ids")
            try:
                tokens = encode(text)
            except Exception as e:  # whatever the tokenizer raises, say where
                raise TraceError(name, f"tokenizer failed: {e}", line_no, "text" if rec.text is not None else "prompt") from None
            tokens = _check_tokens(name, line_no, "token_ids", tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens))
        if rec.namespace is not None and rec.salt is not None:
            raise TraceError(name, "give namespace or salt, not both", line_no, "salt")
        namespace = rec.namespace if rec.namespace is not None else rec.salt if rec.salt is not None else default_salt
        stamp = rec.timestamp if rec.timestamp is not None else 0
        output_length = rec.output_length if rec.output_length is not None else 0
        yield line_no, tokens, stamp, output_length, namespace


def _stream(name: str, stream, out, block_size: int, encode, default_salt: str, keep_hashes: bool,
            told=None) -> dict:
    step = 8 * block_size
    table: dict[bytes, int] = {}  # digest -> id, in order of first appearance
    roots: dict[str, tuple[bytes, bytes]] = {}  # namespace -> (salt bytes, root)
    write = out.write
    enc = _encoder.encode
    requests = tokens_total = blocks_total = 0
    tokenized = [0]  # records whose tokens came from the tokenizer

    def counted(text):
        tokenized[0] += 1
        return encode(text)

    for _, tokens, stamp, output_length, namespace in token_records(name, stream, encode and counted, default_salt):
        salted = roots.get(namespace)
        if salted is None:
            salt = namespace.encode("utf-8", "surrogatepass")  # JSON may carry a lone surrogate
            salted = roots[namespace] = (salt, root_hash(salt))
        salt, parent = salted
        length = len(tokens)
        digests = _chain(_token_bytes(tokens), length // block_size, step, salt, parent)
        ids = [table.setdefault(d, len(table)) for d in digests]
        record = (_OutHex(stamp, length, output_length, ids, block_size, [d.hex() for d in digests]) if keep_hashes
                  else _Out(stamp, length, output_length, ids, block_size))
        write(enc(record))
        write(b"\n")
        requests += 1
        if told is not None and requests % 4096 == 0:
            told()
        tokens_total += length
        blocks_total += len(ids)
    if requests == 0:
        raise TraceError(name, "no requests (empty token log)")
    if told is not None:
        told()
    return {"block_size": block_size, "requests": requests, "tokens": tokens_total, "blocks": blocks_total,
            "unique_blocks": len(table), "tokenized": tokenized[0]}
