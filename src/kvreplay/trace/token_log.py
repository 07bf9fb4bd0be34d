"""A token log in memory (for kvreplay diagnose, which reads and rewrites prompts): its records,
and the Trace its chained hashes give, exactly as ``kvreplay hash`` would write it, with each
block's content id without its namespace (the namespace cause of the miss account).

trace/hashing.py has the format (token_ids, or text with a tokenizer; timestamp, output_length,
namespace or salt) and the hash recipe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, TraceError
from .hashing import _chain, _encoder, _encoder_of, _token_bytes, load_tokenizer, root_hash, token_records
from .jsonl import open_trace
from .model import Trace


@dataclass(frozen=True)
class TokenLog:
    """Requests as token ids, in file order: ``tokens`` (one int64 array each), ``timestamp``
    (ms), ``output_length``, ``namespace`` (strings, "" for none), and ``lines`` (each record's
    line in the file)."""

    source: str
    tokens: list
    timestamp: np.ndarray
    output_length: np.ndarray
    namespace: list
    lines: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def has_namespaces(self) -> bool:
        return len(set(self.namespace)) > 1

    def with_tokens(self, tokens: list) -> "TokenLog":
        """The same requests with other prompts (a rewrite)."""
        return TokenLog(self.source, tokens, self.timestamp, self.output_length, self.namespace, self.lines)

    def to_jsonl(self) -> bytes:
        """The log as JSONL token_ids records (the form kvreplay hash reads)."""
        out = []
        for tokens, stamp, output, namespace in zip(self.tokens, self.timestamp.tolist(), self.output_length.tolist(),
                                                    self.namespace):
            record = {"token_ids": np.asarray(tokens).tolist(), "timestamp": stamp, "output_length": output}
            if namespace:
                record["namespace"] = namespace
            out.append(_encoder.encode(record))
        return b"\n".join(out) + b"\n"


def encoder(tokenizer):
    """text -> token ids from a tokenizer (a tokenizer.json path, a tokenizers.Tokenizer or a
    function), or None."""
    if tokenizer is None:
        return None
    return load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else _encoder_of(tokenizer)


def read_token_log(source, *, tokenizer=None, salt: str = "", progress=None) -> TokenLog:
    """Every record of a token log (JSONL, plain or gzip), checked as kvreplay hash checks them.
    progress: a kvreplay.progress callback, told ``(bytes, file size, "bytes read")``."""
    source = os.fspath(source)
    stream = open_trace(source)
    raw = getattr(stream, "fileobj", stream)  # bytes on disk, gzip or not
    size = os.path.getsize(source) if progress is not None else 0
    tokens, stamps, outputs, spaces, lines = [], [], [], [], []
    try:
        for line, ids, stamp, output, namespace in token_records(source, stream, encoder(tokenizer), salt):
            tokens.append(np.asarray(ids, dtype=np.int64))
            stamps.append(stamp)
            outputs.append(output)
            spaces.append(namespace)
            lines.append(line)
            if progress is not None and len(lines) % 4096 == 0:
                progress(raw.tell(), size, "bytes read")
        if progress is not None:
            progress(size, size, "bytes read")
    finally:
        stream.close()
    if not tokens:
        raise TraceError(source, "no requests (empty token log)")
    return TokenLog(source, tokens, np.asarray(stamps, dtype=np.float64), np.asarray(outputs, dtype=np.int64), spaces,
                    np.asarray(lines, dtype=np.int64))


def hashed(log: TokenLog, block_size: int, source: str | None = None) -> tuple[Trace, np.ndarray]:
    """(the Trace of the log's chained hashes at `block_size`, each block id's content id): the
    trace kvreplay hash writes (full blocks only, ids in order of first appearance), and per block
    the id of the same chain hashed without the namespace, so blocks of one content under two
    namespaces share a content id."""
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ConfigError(f"block_size must be a whole number >= 1, got {block_size!r}")
    step = 8 * block_size
    table: dict[bytes, int] = {}
    contents: dict[bytes, int] = {}
    content_of: list[int] = []
    roots: dict[str, tuple[bytes, bytes]] = {}
    plain_root = root_hash(b"")
    offsets, blocks = [0], []
    for tokens, namespace in zip(log.tokens, log.namespace):
        salted = roots.get(namespace)
        if salted is None:
            salt_bytes = namespace.encode("utf-8", "surrogatepass")
            salted = roots[namespace] = (salt_bytes, root_hash(salt_bytes))
        data = _token_bytes(tokens)
        n = len(tokens) // block_size
        digests = _chain(data, n, step, salted[0], salted[1])
        plain = digests if not namespace else _chain(data, n, step, b"", plain_root)
        for d, p in zip(digests, plain):
            b = table.get(d)
            if b is None:
                b = table[d] = len(table)
                content_of.append(contents.setdefault(p, len(contents)))
            blocks.append(b)
        offsets.append(len(blocks))
    trace = Trace(offsets=np.asarray(offsets, dtype=np.int64), blocks=np.asarray(blocks, dtype=np.int32),
                  input_length=np.asarray([len(t) for t in log.tokens], dtype=np.int64),
                  output_length=log.output_length, timestamp=log.timestamp, num_blocks=len(table),
                  block_size=block_size, source=source or log.source, format="token-log")
    return trace, np.asarray(content_of, dtype=np.int64)
