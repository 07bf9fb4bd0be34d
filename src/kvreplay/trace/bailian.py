"""Alibaba Bailian (Qwen) usage-trace reader: JSONL, one request per line, 16-token blocks.

Fields: ``chat_id`` (a non-negative integer, unique in the file), ``parent_chat_id`` (the
chat this one continues, -1 for a root), ``timestamp`` (seconds; stored in ms),
``input_length`` (tokens), ``hash_ids`` (one id per 16-token block) are required;
``output_length`` (tokens), ``type`` (a string: text, image, search, file, ...) and
``turn`` (an integer) are optional. Unknown fields are ignored; blank lines are skipped;
requests keep file order.

Sessions: a request's session is the root of its chain of ``parent_chat_id`` links. A
parent that is not in the file (or was skipped as invalid) makes the request the root of
its own session. Sessions are numbered 0..S-1 in order of their first request in the file.
Each request waits for its parent's (the trace's dependencies: closed-loop arrivals).

Like the Mooncake reader, a chunk of lines is first decoded in one msgspec call and checked
with array operations; a chunk with any doubtful record is re-read line by line, which
names the line and field of the first error.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..errors import TraceError
from .dependencies import Dependencies
from .model import Reader, Trace, frozen
from .jsonl import (
    INT64_MAX, MAX_REPORTED_LINES, Chunk, count_byte, dense_ids, describe, finite, is_int, parse_int_lists,
    checked_lines, decode_object, empty_trace_error, hash_id_list, non_negative_int, read_chunks,
)

BLOCK_SIZE = 16


class _FastRecord(msgspec.Struct, gc=False):
    chat_id: int
    parent_chat_id: int
    timestamp: float
    input_length: int
    hash_ids: msgspec.Raw
    output_length: float = 0.0
    type: str = ""
    turn: int = 0


_fast_decoder = msgspec.json.Decoder(_FastRecord)


class _BailianChunk(Chunk):
    """A chunk's columns plus the chat links and the line number of every record."""

    __slots__ = ("chats", "parents", "lines")

    def __init__(self, ids, counts, lengths, stamps, outs, chats, parents, lines):
        super().__init__(ids, counts, lengths, stamps, outs)
        self.chats, self.parents, self.lines = chats, parents, lines


def _check_record(path: str, line: int, text: bytes):
    """Decode and validate one line; return (hash_ids, input_length, timestamp_ms, output_length, chat, parent)."""
    obj = decode_object(path, line, text)
    for key in ("chat_id", "parent_chat_id", "timestamp", "input_length", "hash_ids"):
        if key not in obj:
            raise TraceError(path, "missing", line, key)
    chat = non_negative_int(path, line, obj, "chat_id")
    parent = obj["parent_chat_id"]
    if isinstance(parent, float) and parent.is_integer():
        parent = int(parent)
    if not is_int(parent) or parent < -1 or parent > INT64_MAX:
        raise TraceError(path, f"expected -1 or a chat_id (a non-negative integer), got {describe(obj['parent_chat_id'])}",
                         line, "parent_chat_id")
    stamp = obj["timestamp"]
    if not (is_int(stamp) or isinstance(stamp, float)) or not finite(stamp) or not finite(stamp * 1000.0):
        raise TraceError(path, f"expected a number of seconds, got {describe(stamp)}", line, "timestamp")
    length = non_negative_int(path, line, obj, "input_length")
    ids = hash_id_list(path, line, obj)
    out = 0 if obj.get("output_length") is None else non_negative_int(path, line, obj, "output_length")
    kind = obj.get("type")
    if kind is not None and not isinstance(kind, str):
        raise TraceError(path, f"expected a string, got {describe(kind)}", line, "type")
    turn = obj.get("turn")
    if turn is not None and not is_int(turn):
        raise TraceError(path, f"expected an integer, got {describe(turn)}", line, "turn")
    return ids, length, float(stamp) * 1000.0, out, chat, parent


def _fast_chunk(first_line: int, data: bytes) -> _BailianChunk | None:
    """The chunk's columns when every record is valid with integer ids; None sends it to the slow path."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    keep = np.flatnonzero(np.diff(ends, prepend=-1, append=len(data)) > 1)  # non-empty lines
    line_numbers = first_line + keep
    n = int(keep.size)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return _BailianChunk(empty, empty, empty, np.zeros(0), empty, empty, empty, empty)
    try:
        recs = _fast_decoder.decode_lines(data)  # skips empty lines
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if len(recs) != n:
        return None  # two records on a line or one over two lines: the slow path says where
    joined = b";".join([r.hash_ids for r in recs])
    ids = np.empty(count_byte(joined, 44) + n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    found = parse_int_lists(np.frombuffer(joined, dtype=np.uint8), ids, counts)
    if found < 0:
        return None
    try:
        lengths = np.fromiter((r.input_length for r in recs), dtype=np.int64, count=n)
        chats = np.fromiter((r.chat_id for r in recs), dtype=np.int64, count=n)
        parents = np.fromiter((r.parent_chat_id for r in recs), dtype=np.int64, count=n)
    except OverflowError:
        return None
    stamps = np.fromiter((r.timestamp for r in recs), dtype=np.float64, count=n) * 1000.0
    outs = np.fromiter((r.output_length for r in recs), dtype=np.float64, count=n)
    if (lengths < 0).any() or (chats < 0).any() or (parents < -1).any() or (outs < 0).any() \
            or (outs >= 2.0**53).any() or (outs != np.floor(outs)).any() or not np.isfinite(stamps).all():
        return None
    return _BailianChunk(ids[:found], counts, lengths, stamps, outs.astype(np.int64), chats, parents, line_numbers)


def _slow_chunk(path: str, first_line: int, data: bytes, on_invalid: str, invalid: list[int]) -> _BailianChunk:
    cols: list[list] = [[], [], [], [], [], [], []]  # counts, lengths, stamps, outs, chats, parents, lines
    ids: list = []
    for line, (rec_ids, *values) in checked_lines(path, first_line, data, on_invalid, invalid, _check_record):
        ids.extend(rec_ids)
        for col, value in zip(cols, (len(rec_ids), *values, line)):
            col.append(value)
    counts, lengths, stamps, outs, chats, parents, lines = cols
    i64 = np.int64
    return _BailianChunk(ids, np.array(counts, i64), np.array(lengths, i64), np.array(stamps, np.float64),
                         np.array(outs, i64), np.array(chats, i64), np.array(parents, i64), np.array(lines, i64))


def _parent_rows(chats: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each request's parent chat as a row index (-1: a root, or a parent not in the file)."""
    n = chats.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(chats, kind="stable")
    where = np.searchsorted(chats, parents, sorter=order)
    where = np.minimum(where, n - 1)
    parent_row = order[where]
    return np.where((parents >= 0) & (chats[parent_row] == parents), parent_row, -1)


def _roots(chats: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(root, ok): each request's chain root (a row index), and False where the chain never ends (a loop)."""
    n = chats.shape[0]
    parent_row = _parent_rows(chats, parents)
    root = np.where(parent_row >= 0, parent_row, np.arange(n))
    for _ in range(64):  # pointer jumping: chains of up to 2**64 links
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    ok = (root[root] == root) & (parent_row[root] < 0)
    return root, ok


def read_bailian(path: str, *, on_invalid: str = "error", keep_ids: bool = False, progress=None) -> Trace:
    """Read an Alibaba Bailian JSONL trace (plain, gzip, or "-" for stdin) with 16-token blocks.

    on_invalid: "error" stops at the first bad record (TraceError naming file, line and field);
    "skip" drops bad records (also a repeated chat_id, and chains of parents that loop) and
    lists their lines in ``trace.invalid_records``. progress: told the bytes read so far.
    """
    name, chunks, invalid = read_chunks(path, on_invalid, _fast_chunk, _slow_chunk, progress)
    cat = {key: np.concatenate([getattr(c, key) for c in chunks]) if chunks else np.zeros(0, np.int64)
           for key in ("counts", "lengths", "stamps", "outs", "chats", "parents", "lines")}
    bad = _link_problems(name, cat, on_invalid)
    if bad is not None:
        invalid.extend(cat["lines"][~bad].tolist())
        cat = _without(chunks, cat, bad)
    n = cat["lengths"].shape[0]
    if n == 0:
        raise empty_trace_error(name, invalid)
    root, _ = _roots(cat["chats"], cat["parents"])
    _, first, inverse = np.unique(root, return_index=True, return_inverse=True)
    session = np.argsort(np.argsort(first, kind="stable"), kind="stable")[inverse.reshape(-1)]
    blocks, num_blocks, original = dense_ids(chunks, keep_ids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cat["counts"], out=offsets[1:])
    invalid.sort()
    return Trace(
        offsets=frozen(offsets), blocks=frozen(blocks),
        input_length=frozen(cat["lengths"].astype(np.int64, copy=False)),
        output_length=frozen(cat["outs"].astype(np.int64, copy=False)),
        timestamp=frozen(cat["stamps"].astype(np.float64, copy=False)),
        num_blocks=num_blocks, block_size=BLOCK_SIZE, source=name, format="bailian", original_ids=original,
        invalid_records={"count": len(invalid), "first_lines": invalid[:MAX_REPORTED_LINES]} if invalid else None,
        session=frozen(session.astype(np.int64)), dependencies=_links(cat["chats"], cat["parents"]),
    )


#: how _links finds what a request waits for
LINK_RULE = ("Bailian: each request waits for its parent_chat_id's request; think time = the gap after the "
             "parent's send minus the parent's service time estimated on the simulated deployment alone")


def _links(chats: np.ndarray, parents: np.ndarray) -> Dependencies:
    """Request i waits for its parent chat's request (when the file has it); no think time is
    recorded (the file has send times, not when answers ended)."""
    parent_row = _parent_rows(chats, parents)
    has = parent_row >= 0
    offsets = np.zeros(parent_row.size + 1, dtype=np.int64)
    np.cumsum(has, out=offsets[1:])
    return Dependencies(offsets, parent_row[has], np.full(parent_row.size, np.nan), LINK_RULE)


def _link_problems(name: str, cat: dict, on_invalid: str) -> np.ndarray | None:
    """None when chat ids are unique and every chain of parents ends; else the mask of rows to keep
    (on_invalid="skip"), or a TraceError at the first bad line (on_invalid="error")."""
    chats, parents, lines = cat["chats"], cat["parents"], cat["lines"]
    n = chats.shape[0]
    if n == 0:
        return None
    keep = np.ones(n, dtype=bool)
    order = np.argsort(chats, kind="stable")
    repeated = np.zeros(n, dtype=bool)
    repeated[order[1:]] = chats[order[1:]] == chats[order[:-1]]
    if repeated.any():
        i = int(np.flatnonzero(repeated)[0])
        if on_invalid == "error":
            first = int(lines[np.flatnonzero(chats == chats[i])[0]])
            raise TraceError(name, f"{chats[i]} appears again (first on line {first})", int(lines[i]), "chat_id")
        keep &= ~repeated
    rows = np.flatnonzero(keep)
    _, ok = _roots(chats[rows], parents[rows])
    if not ok.all():
        i = int(rows[np.flatnonzero(~ok)[0]])
        if on_invalid == "error":
            raise TraceError(name, f"the chain of parents from chat_id {chats[i]} never reaches a root (it loops)",
                             int(lines[i]), "parent_chat_id")
        keep[rows[~ok]] = False
    return None if keep.all() else keep


def _without(chunks: list[_BailianChunk], cat: dict, keep: np.ndarray) -> dict:
    """Drop the rows not in `keep` from the concatenated columns and from the chunks' ids."""
    pos = 0
    for c in chunks:
        m = c.counts.shape[0]
        rows = keep[pos:pos + m]
        block_keep = np.repeat(rows, c.counts)
        if isinstance(c.ids, np.ndarray):
            c.ids = c.ids[block_keep]
        else:
            c.ids = [h for h, k in zip(c.ids, block_keep) if k]
        c.counts = c.counts[rows]
        pos += m
    return {key: value[keep] for key, value in cat.items()}


READER = Reader(
    name="bailian", read=read_bailian, rank=1, options=("progress",),
    # A Mooncake line with an extra chat_id stays Mooncake (other fields are ignored there).
    sniff=lambda keys: "parent_chat_id" in keys or {"chat_id", "turn"} <= keys, sniff_keys=("chat_id", "parent_chat_id", "turn"),
    summary="Alibaba Bailian/Qwen JSONL: 16-token blocks, sessions from parent_chat_id",
)
