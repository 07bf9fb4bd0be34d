"""What the JSONL trace readers share: opening (gzip, stdin), the chunk loop, the one-pass id
parser, the record checks that name file, line and field, and the dense remapping of ids.

Each reader module (mooncake.py, bailian.py, ...) supplies its record type, its fast and slow
chunk parsers and its sniffer; this module is the loop they run in.
"""

from __future__ import annotations

import gzip
import math
import sys
import zlib
from collections.abc import Iterator
from functools import lru_cache

import msgspec
import numpy as np

from ..errors import ConfigError, TraceError

CHUNK_BYTES = 32 << 20
MAX_REPORTED_LINES = 20


def count_byte(data, byte: int, end: int | None = None) -> int:
    """How many times `byte` occurs in data[:end] (numpy compares whole vectors at a time:
    about twice as fast as bytes.count)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8, count=-1 if end is None else end) == byte))


def open_trace(path: str):
    """A binary stream over the file (gzip recognised by its magic bytes), or stdin for "-"."""
    if path == "-":
        stdin = sys.stdin.buffer
        if hasattr(stdin, "peek") and stdin.peek(2)[:2] == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=stdin)
        return stdin
    from ..files import open_input

    return open_input(path, TraceError, "a trace file")


def _chunks(path: str, stream) -> Iterator[tuple[int, bytes]]:
    """Yield (first_line_number, data) for chunks of about CHUNK_BYTES that end at a line end."""
    line_no = 1
    rest = b""
    while True:
        try:
            data = stream.read(CHUNK_BYTES)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise TraceError(path, f"truncated or corrupt gzip data ({e})") from None
        except OSError as e:
            raise TraceError(path, f"read failed: {e}") from None
        if not data:
            if rest:
                yield line_no, rest
            return
        data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1:]
        yield line_no, data[:cut]
        line_no += count_byte(data, 10, cut) + 1


def parse_int_lists(buf: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> int:
    """Parse ';'-separated JSON lists of plain integers ("[1, 2];[];[3]") into ids (int64) and
    per-list counts (int64). Returns the number of ids, or -1 for anything else (the caller falls
    back to the validating path): a string, a float, a nested list, a number of more than 18
    digits. Compiled: jsonl.c; without the core always -1 (the validating path reads every line)."""
    from .. import native

    if not native.use_core():
        return -1
    buf = np.ascontiguousarray(buf, dtype=np.uint8)
    return int(_c_parse()(buf.ctypes.data, buf.shape[0], ids.ctypes.data, counts.ctypes.data, counts.shape[0]))


@lru_cache(maxsize=None)
def _c_parse():
    import ctypes

    from .. import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_parse_int_lists", ctypes.c_int64, p, i, p, p, i)


def describe(value) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


INT64_MAX = 2**63 - 1


def is_int(x) -> bool:
    return type(x) is int


def finite(x) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer too large for a float
        return False


def nesting(e: Exception) -> str:
    """A decode error's text; a RecursionError says what it means in a trace."""
    return "nested too deeply" if isinstance(e, RecursionError) else str(e)


def decode_object(path: str, line: int, text: bytes) -> dict:
    """One line's JSON object, or a TraceError naming the line (shared by the line readers)."""
    try:
        obj = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as e:
        raise TraceError(path, f"invalid JSON ({nesting(e)})", line) from None
    if not isinstance(obj, dict):
        raise TraceError(path, f"expected a JSON object, got {describe(obj)}", line)
    return obj


def non_negative_int(path: str, line: int, obj: dict, key: str) -> int:
    """obj[key] as an int >= 0 (a whole float like 100.0 is accepted), at most 2**63-1."""
    value = obj[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value) or value < 0:
        raise TraceError(path, f"expected a non-negative integer, got {describe(obj[key])}", line, key)
    if value > INT64_MAX:
        raise TraceError(path, f"{value} is too large (the limit is 2**63-1)", line, key)
    return value


def hash_id_list(path: str, line: int, obj: dict) -> list:
    """obj["hash_ids"], checked to be a list of integers or strings."""
    ids = obj["hash_ids"]
    if not isinstance(ids, list):
        raise TraceError(path, f"expected a list of integers or strings, got {describe(ids)}", line, "hash_ids")
    for j, h in enumerate(ids):
        if not (is_int(h) or isinstance(h, str)):
            raise TraceError(path, f"item {j} is {describe(h)}, expected an integer or a string", line, "hash_ids")
    return ids


class Chunk:
    """Parsed columns of one chunk (numpy arrays); ids are an int64 array (fast path) or a list (slow path)."""

    __slots__ = ("ids", "counts", "lengths", "stamps", "outs")

    def __init__(self, ids, counts, lengths, stamps, outs):
        self.ids, self.counts, self.lengths, self.stamps, self.outs = ids, counts, lengths, stamps, outs


def checked_lines(path: str, first_line: int, data: bytes, on_invalid: str, invalid: list[int], check):
    """The slow path's loop: yields (line number, ``check(path, line, text)``) for each non-blank
    line of a chunk. A bad line raises its TraceError, or with on_invalid="skip" is recorded in
    `invalid` and left out."""
    for k, text in enumerate(data.split(b"\n")):
        if not text.strip():
            continue
        try:
            record = check(path, first_line + k, text)
        except TraceError:
            if on_invalid == "error":
                raise
            invalid.append(first_line + k)
            continue
        yield first_line + k, record


def _int_arrays(chunks: list[Chunk]) -> list[np.ndarray] | None:
    """Every chunk's ids as an integer array, or None when some id is a string or beyond int64."""
    arrays = []
    for c in chunks:
        if isinstance(c.ids, np.ndarray):
            arrays.append(c.ids)
        elif all(is_int(h) for h in c.ids):
            try:
                arrays.append(np.array(c.ids, dtype=np.int64))
            except OverflowError:
                return None  # e.g. unsigned 64-bit hashes: map them through a dict
        else:
            return None
    return arrays


def dense_ids(chunks: list[Chunk], keep_ids: bool):
    """Remap every chunk's ids to dense int32 ids 0..U-1; return (blocks, num_blocks, original_ids).

    Memory stays near the final int32 array: chunks are mapped one at a time into it.
    """
    arrays = _int_arrays(chunks)
    if arrays is not None:
        total = sum(a.size for a in arrays)
        if total == 0:
            return np.zeros(0, np.int32), 0, (np.zeros(0, np.int64) if keep_ids else None)
        lo = min(int(a.min()) for a in arrays if a.size)
        hi = max(int(a.max()) for a in arrays if a.size)
        if lo >= 0 and hi < 4 * total + (1 << 20):
            # Small non-negative ids (the usual case): a lookup table beats sorting.
            present = np.zeros(hi + 1, dtype=bool)
            for a in arrays:
                present[a] = True
            remap = np.cumsum(present, dtype=np.int64)
            num = int(remap[-1])
            remap = (remap - 1).astype(np.int32)
            blocks = np.empty(total, dtype=np.int32)
            pos = 0
            for c, a in zip(chunks, arrays):
                blocks[pos:pos + a.size] = remap[a]
                pos += a.size
                c.ids = None
            original = np.flatnonzero(present) if keep_ids else None
            return blocks, num, original
        raw = np.concatenate([a.astype(np.int64, copy=False) for a in arrays])
        original, inverse = np.unique(raw, return_inverse=True)
        return inverse.astype(np.int32).reshape(-1), int(original.size), (original if keep_ids else None)
    table: dict = {}
    out = []
    for c in chunks:
        ids = c.ids.tolist() if isinstance(c.ids, np.ndarray) else c.ids
        out.extend(table.setdefault(h, len(table)) for h in ids)
    return np.array(out, dtype=np.int32), len(table), (list(table) if keep_ids else None)


def read_chunks(path, on_invalid: str, fast_chunk, slow_chunk, progress=None) -> tuple[str, list, list[int]]:
    """The line readers' loop: (name, parsed chunks, invalid line numbers). Each chunk of whole
    lines goes through ``fast_chunk(first_line, data)``, or, when that returns None (anything
    unusual), through ``slow_chunk(name, first_line, data, on_invalid, invalid)``, which checks
    every line and names the bad one. ``progress(bytes)``, if given, is told after each chunk how
    far into the file (its bytes on disk, compressed or not) the reading is."""
    if on_invalid not in ("error", "skip"):
        raise ConfigError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    name = "<stdin>" if path == "-" else str(path)
    stream = open_trace(str(path))
    chunks: list = []
    invalid: list[int] = []
    raw = getattr(stream, "fileobj", stream)  # a gzip stream's file: its position counts bytes on disk
    try:
        for first_line, data in _chunks(name, stream):
            chunk = fast_chunk(first_line, data)
            if chunk is None:
                chunk = slow_chunk(name, first_line, data, on_invalid, invalid)
            chunks.append(chunk)
            if progress is not None and path != "-":
                progress(raw.tell())
    finally:
        if path != "-":
            stream.close()
    return name, chunks, invalid


def empty_trace_error(name: str, invalid: list[int]) -> TraceError:
    return TraceError(name, f"no valid records ({len(invalid)} invalid)" if invalid else "no requests (empty trace)")
