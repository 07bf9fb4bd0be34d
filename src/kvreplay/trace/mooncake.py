"""Mooncake FAST'25 JSONL reader: one JSON object per line.

Fields: ``input_length`` (tokens, required), ``hash_ids`` (block ids, required:
integers or strings), ``timestamp`` (ms, optional), ``output_length``
(optional). Unknown fields are ignored; blank lines are skipped. Requests keep
file order.

Two paths produce the same result. The fast path decodes a chunk of lines as
one JSON array with msgspec, keeps ``hash_ids`` as raw bytes and parses all of
them in one compiled pass; it applies only when every id in the chunk is a
plain integer. Anything else (string ids, a bad record) goes through the
line-by-line path, which checks every field and names the line of each error.
"""

from __future__ import annotations

import gzip
import math
import sys
import zlib
from collections.abc import Iterator

import msgspec
import numpy as np

from ..jit import kernel
from ..errors import ConfigError, TraceError
from .model import Trace, frozen

CHUNK_BYTES = 32 << 20
MAX_REPORTED_LINES = 20


class _FastRecord(msgspec.Struct, gc=False):
    input_length: int
    hash_ids: msgspec.Raw
    timestamp: float = 0.0
    output_length: float = 0.0


_fast_decoder = msgspec.json.Decoder(_FastRecord)


def _count_byte(data, byte: int, end: int | None = None) -> int:
    """How many times `byte` occurs in data[:end] (numpy compares whole vectors at a time:
    about twice as fast as bytes.count)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8, count=-1 if end is None else end) == byte))


def _open(path: str):
    """A binary stream over the file (gzip recognised by its magic bytes), or stdin for "-"."""
    if path == "-":
        stdin = sys.stdin.buffer
        if hasattr(stdin, "peek") and stdin.peek(2)[:2] == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=stdin)
        return stdin
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, expected a trace file") from None
    except OSError as e:
        raise TraceError(path, f"cannot open: {e.strerror}") from None
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)
    return raw


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
        line_no += _count_byte(data, 10, cut) + 1


def _parse_int_lists_py(buf, ids, counts):
    """Parse ';'-separated JSON lists of plain integers ("[1, 2];[];[3]") into ids and per-list
    counts. Returns the number of ids, or -1 for anything else (the caller falls back to the
    validating path): a string, a float, a nested list, a number of more than 18 digits."""
    n = buf.shape[0]
    i = 0
    found = 0
    for k in range(counts.shape[0]):
        if k > 0:
            if i >= n or buf[i] != 59:  # ';'
                return -1
            i += 1
        if i >= n or buf[i] != 91:  # '['
            return -1
        i += 1
        count = 0
        while True:
            while i < n and (buf[i] == 32 or buf[i] == 9 or buf[i] == 10 or buf[i] == 13):
                i += 1
            if i < n and buf[i] == 93 and count == 0:  # ']' of an empty list
                i += 1
                break
            sign = 1
            if i < n and buf[i] == 45:  # '-'
                sign = -1
                i += 1
            digits = 0
            value = 0
            while i < n and 48 <= buf[i] <= 57:
                value = value * 10 + (buf[i] - 48)
                digits += 1
                i += 1
            if digits == 0 or digits > 18:
                return -1
            ids[found] = sign * value
            found += 1
            count += 1
            while i < n and (buf[i] == 32 or buf[i] == 9 or buf[i] == 10 or buf[i] == 13):
                i += 1
            if i < n and buf[i] == 44:  # ','
                i += 1
                continue
            if i < n and buf[i] == 93:  # ']'
                i += 1
                break
            return -1
        counts[k] = count
    return found if i == n else -1


_parse_int_lists = kernel(_parse_int_lists_py)


def _describe(value) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


INT64_MAX = 2**63 - 1


def _is_int(x) -> bool:
    return type(x) is int


def _finite(x) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer too large for a float
        return False


def decode_object(path: str, line: int, text: bytes) -> dict:
    """One line's JSON object, or a TraceError naming the line (shared by the line readers)."""
    try:
        obj = msgspec.json.decode(text)
    except msgspec.DecodeError as e:
        raise TraceError(path, f"invalid JSON ({e})", line) from None
    if not isinstance(obj, dict):
        raise TraceError(path, f"expected a JSON object, got {_describe(obj)}", line)
    return obj


def non_negative_int(path: str, line: int, obj: dict, key: str) -> int:
    """obj[key] as an int >= 0 (a whole float like 100.0 is accepted), at most 2**63-1."""
    value = obj[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not _is_int(value) or value < 0:
        raise TraceError(path, f"expected a non-negative integer, got {_describe(obj[key])}", line, key)
    if value > INT64_MAX:
        raise TraceError(path, f"{value} is too large (the limit is 2**63-1)", line, key)
    return value


def hash_id_list(path: str, line: int, obj: dict) -> list:
    """obj["hash_ids"], checked to be a list of integers or strings."""
    ids = obj["hash_ids"]
    if not isinstance(ids, list):
        raise TraceError(path, f"expected a list of integers or strings, got {_describe(ids)}", line, "hash_ids")
    for j, h in enumerate(ids):
        if not (_is_int(h) or isinstance(h, str)):
            raise TraceError(path, f"item {j} is {_describe(h)}, expected an integer or a string", line, "hash_ids")
    return ids


def _check_record(path: str, line: int, text: bytes):
    """Decode and validate one line; return (hash_ids, input_length, timestamp, output_length)."""
    obj = decode_object(path, line, text)
    for key in ("input_length", "hash_ids"):
        if key not in obj:
            raise TraceError(path, "missing", line, key)
    length = non_negative_int(path, line, obj, "input_length")
    ids = hash_id_list(path, line, obj)
    stamp = obj.get("timestamp")
    if stamp is None:
        stamp = 0.0
    elif not (_is_int(stamp) or isinstance(stamp, float)) or not _finite(stamp):
        raise TraceError(path, f"expected a number, got {_describe(stamp)}", line, "timestamp")
    out = 0 if obj.get("output_length") is None else non_negative_int(path, line, obj, "output_length")
    return ids, length, float(stamp), out


class _Chunk:
    """Parsed columns of one chunk (numpy arrays); ids are an int64 array (fast path) or a list (slow path)."""

    __slots__ = ("ids", "counts", "lengths", "stamps", "outs")

    def __init__(self, ids, counts, lengths, stamps, outs):
        self.ids, self.counts, self.lengths, self.stamps, self.outs = ids, counts, lengths, stamps, outs


def _fast_chunk(data: bytes) -> _Chunk | None:
    """Parse a chunk whose records are all valid with integer ids; None when the slow path is needed.

    msgspec decodes the chunk's lines in one call (skipping empty ones); the chunk takes this
    path only if that gives one record per non-empty line (a line of only spaces, two records on
    a line or one record over two lines send it to the slow path, which names the line). All
    hash_ids lists, kept raw by msgspec, are joined and parsed in one compiled pass.
    """
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    lines = int(np.count_nonzero(np.diff(ends, prepend=-1, append=len(data)) > 1))  # non-empty lines
    if lines == 0:
        return _Chunk(np.zeros(0, np.int64), np.zeros(0, np.int64), *(np.zeros(0, t) for t in (np.int64, np.float64, np.int64)))
    try:
        recs = _fast_decoder.decode_lines(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    n = len(recs)
    if n != lines:
        return None
    joined = b";".join([r.hash_ids for r in recs])  # "[1, 2];[];[3]"
    ids = np.empty(_count_byte(joined, 44) + n, dtype=np.int64)  # at most one id per comma, plus one per list
    counts = np.empty(n, dtype=np.int64)
    found = _parse_int_lists(np.frombuffer(joined, dtype=np.uint8), ids, counts)
    if found < 0:
        return None  # string ids, floats, nested lists, huge numbers...
    ids = ids[:found]
    if found and -(2**31) <= ids.min() and ids.max() < 2**31:
        ids = ids.astype(np.int32)  # halves what the chunks hold until the ids are remapped
    try:
        lengths = np.fromiter((r.input_length for r in recs), dtype=np.int64, count=n)
    except OverflowError:
        return None
    stamps = np.fromiter((r.timestamp for r in recs), dtype=np.float64, count=n)
    outs = np.fromiter((r.output_length for r in recs), dtype=np.float64, count=n)
    # output_length decodes as a float (so 100.0 is accepted): from 2**53 on a float cannot hold
    # every integer, so such files take the exact slow path.
    if (lengths < 0).any() or (outs < 0).any() or (outs >= 2.0**53).any() or (outs != np.floor(outs)).any() \
            or not np.isfinite(stamps).all():
        return None
    return _Chunk(ids, counts.astype(np.int64), lengths, stamps, outs.astype(np.int64))


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


def _slow_chunk(path: str, first_line: int, data: bytes, on_invalid: str, invalid: list[int]) -> _Chunk:
    ids: list = []
    counts, lengths, stamps, outs = [], [], [], []
    for _, (rec_ids, length, stamp, out) in checked_lines(path, first_line, data, on_invalid, invalid, _check_record):
        ids.extend(rec_ids)
        counts.append(len(rec_ids))
        lengths.append(length)
        stamps.append(stamp)
        outs.append(out)
    return _Chunk(ids, np.array(counts, dtype=np.int64), np.array(lengths, dtype=np.int64),
                  np.array(stamps, dtype=np.float64), np.array(outs, dtype=np.int64))


def _int_arrays(chunks: list[_Chunk]) -> list[np.ndarray] | None:
    """Every chunk's ids as an integer array, or None when some id is a string or beyond int64."""
    arrays = []
    for c in chunks:
        if isinstance(c.ids, np.ndarray):
            arrays.append(c.ids)
        elif all(_is_int(h) for h in c.ids):
            try:
                arrays.append(np.array(c.ids, dtype=np.int64))
            except OverflowError:
                return None  # e.g. unsigned 64-bit hashes: map them through a dict
        else:
            return None
    return arrays


def _dense_ids(chunks: list[_Chunk], keep_ids: bool):
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


def read_chunks(path, on_invalid: str, fast_chunk, slow_chunk) -> tuple[str, list, list[int]]:
    """The line readers' loop: (name, parsed chunks, invalid line numbers). Each chunk of whole
    lines goes through ``fast_chunk(first_line, data)``, or, when that returns None (anything
    unusual), through ``slow_chunk(name, first_line, data, on_invalid, invalid)``, which checks
    every line and names the bad one."""
    if on_invalid not in ("error", "skip"):
        raise ConfigError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    name = "<stdin>" if path == "-" else str(path)
    stream = _open(str(path))
    chunks: list = []
    invalid: list[int] = []
    try:
        for first_line, data in _chunks(name, stream):
            chunk = fast_chunk(first_line, data)
            if chunk is None:
                chunk = slow_chunk(name, first_line, data, on_invalid, invalid)
            chunks.append(chunk)
    finally:
        if path != "-":
            stream.close()
    return name, chunks, invalid


def empty_trace_error(name: str, invalid: list[int]) -> TraceError:
    return TraceError(name, f"no valid records ({len(invalid)} invalid)" if invalid else "no requests (empty trace)")


def read_mooncake(path: str, *, on_invalid: str = "error", keep_ids: bool = False) -> Trace:
    """Read a Mooncake JSONL trace (plain, gzip, or "-" for stdin).

    on_invalid: "error" stops at the first bad record with a TraceError naming
    the file, line and field; "skip" drops bad records and lists them in
    ``trace.invalid_records``.
    """
    name, chunks, invalid = read_chunks(path, on_invalid, lambda first_line, data: _fast_chunk(data), _slow_chunk)
    n = sum(c.lengths.shape[0] for c in chunks)
    if n == 0:
        raise empty_trace_error(name, invalid)
    blocks, num_blocks, original = _dense_ids(chunks, keep_ids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.concatenate([c.counts for c in chunks]), out=offsets[1:])
    return Trace(
        offsets=frozen(offsets),
        blocks=frozen(blocks),
        input_length=frozen(np.concatenate([c.lengths for c in chunks]).astype(np.int64, copy=False)),
        output_length=frozen(np.concatenate([c.outs for c in chunks]).astype(np.int64, copy=False)),
        timestamp=frozen(np.concatenate([c.stamps for c in chunks]).astype(np.float64, copy=False)),
        num_blocks=num_blocks,
        source=name,
        format="mooncake",
        original_ids=original,
        invalid_records={"count": len(invalid), "first_lines": invalid[:MAX_REPORTED_LINES]} if invalid else None,
    )
