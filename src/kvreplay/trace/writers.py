"""Trace writers: a :class:`Trace` back to a file that the readers load again.

``write_trace(trace, path, format="mooncake")`` writes one JSON object per line, in
trace order. Two formats:

- ``mooncake``: ``{"timestamp", "input_length", "output_length", "hash_ids"}``, the
  timestamp in ms, as an integer when it is whole (as the released traces spell it) and
  as the shortest float that reads back exactly otherwise.
- ``bailian``: ``{"chat_id", "parent_chat_id", "timestamp", "input_length",
  "output_length", "type", "turn", "hash_ids"}``, the timestamp in seconds. ``chat_id``
  is the request's position in the trace; with a ``session`` column, ``parent_chat_id``
  is the previous request of the same session (-1 for the first) and ``turn`` counts
  from 1 within the session; without one, every request is its own one-turn chat.
  ``type`` is always ``"text"`` (the trace does not keep it).

Round trip: loading what was written gives the same columns, as long as every dense id
0..num_blocks-1 is used by some request (always true of a loaded or sliced trace; ids
are renumbered at load, so an unused id would disappear). Bailian stores seconds, so a
timestamp can come back one ulp away from the original milliseconds.

Writing is atomic: the data goes to a temporary file in the target directory, renamed
over the target at the end; a failure removes the temporary file and leaves any old file
as it was. A name ending in ``.gz`` is gzip-compressed; ``-`` writes standard output.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import msgspec
import numpy as np

from ..errors import ConfigError
from ..progress import tell
from ..files import atomic_output as _atomic_output
from .model import DEFAULT_BLOCK_SIZE, Trace

WRITE_FORMATS = ("mooncake", "bailian")
CHUNK_REQUESTS = 4096  # requests encoded at once: bounds the Python objects alive at a time
MAX_EXACT_INT = 2**53  # beyond this a whole float is still written as a float


class _MooncakeRecord(msgspec.Struct, gc=False, omit_defaults=True):
    timestamp: int | float
    input_length: int
    output_length: int
    hash_ids: list
    block_size: int | None = None  # the trace's, when it declares one (the reader takes the first record's)
    priority_ranges: list | None = None  # retention ranges (trace/retention.py), when the request has any
    n: int | None = None  # the completions it samples (serving/samples.py), when the record gave it


class _BailianRecord(msgspec.Struct, gc=False):
    chat_id: int
    parent_chat_id: int
    timestamp: float
    input_length: int
    output_length: int
    type: str
    turn: int
    hash_ids: list


_encoder = msgspec.json.Encoder()


def same_file(a, b) -> bool:
    """True when paths `a` and `b` name the same existing file ("-" is never a file)."""
    if a is None or b is None or os.fspath(a) == "-" or os.fspath(b) == "-":
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def refuse_overwrite(output, inputs) -> None:
    """Raise ConfigError when `output` is one of `inputs`: an input is never replaced by an output."""
    for path in inputs:
        if same_file(output, path):
            raise ConfigError(f"-o {os.fspath(output)}: that is the input file; write to another name")


@contextmanager
def atomic_output(path):
    """A binary stream for `path`, written atomically (files.py), gzip when the name ends
    in .gz; "-" is standard output (not atomic, of course)."""
    path = os.fspath(path)
    if path == "-":
        out = sys.stdout.buffer
        yield out
        out.flush()
        return
    with _atomic_output(path, compress=path.endswith(".gz")) as out:
        yield out


def _stamps_ms(timestamp: np.ndarray) -> list:
    """Timestamps as Python numbers: whole values as ints (0, not 0.0), others as floats."""
    whole = (timestamp == np.trunc(timestamp)) & (np.abs(timestamp) < MAX_EXACT_INT)
    floats = timestamp.tolist()
    if whole.all():
        return timestamp.astype(np.int64).tolist()
    ints = np.where(whole, timestamp, 0).astype(np.int64).tolist()
    return [i if w else f for i, f, w in zip(ints, floats, whole.tolist())]


def _id_table(trace: Trace, original_ids: bool):
    """What to write for each dense id: None (the dense id itself) or an indexable table."""
    if not original_ids:
        return None
    table = trace.original_ids
    if table is None:
        raise ConfigError(f"{trace.source}: no original block ids to write (load with keep_ids=True; "
                          "traces merged from several files keep none)")
    if len(table) < trace.num_blocks:
        raise ConfigError(f"the trace's original_ids has {len(table)} entries, expected {trace.num_blocks}")
    if isinstance(table, np.ndarray) and table.dtype.kind in "iu":
        return table
    # Anything else (strings, ints beyond int64) as Python objects; the extra item keeps a 1-d array.
    items = table.tolist() if isinstance(table, np.ndarray) else list(table)
    return np.array(items + [None], dtype=object)[:-1]


def _sessions(trace: Trace):
    """(parent, turn) per request from the trace's session column: the previous request of the
    same session (-1 for the first) and the 1-based position within the session."""
    n = len(trace)
    session = getattr(trace, "session", None)
    if session is None:
        return np.full(n, -1, dtype=np.int64), np.ones(n, dtype=np.int64)
    session = np.asarray(session)
    order = np.argsort(session, kind="stable")  # each session's requests together, in trace order
    grouped = session[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = grouped[1:] != grouped[:-1]
    parent_sorted = np.empty(n, dtype=np.int64)
    parent_sorted[0:1] = -1
    parent_sorted[1:] = order[:-1]
    parent_sorted[starts] = -1
    start_pos = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    turn_sorted = np.arange(n) - start_pos + 1
    parent = np.empty(n, dtype=np.int64)
    turn = np.empty(n, dtype=np.int64)
    parent[order] = parent_sorted
    turn[order] = turn_sorted
    return parent, turn


def encode_trace(trace: Trace, format: str = "mooncake", *, original_ids: bool = False):
    """Yield the file's bytes in pieces (one piece per CHUNK_REQUESTS requests), spaced as the
    released traces are (``{"timestamp": 0, "input_length": 6758, ...}``)."""
    if format not in WRITE_FORMATS:
        raise ConfigError(f"cannot write format {format!r} (writable: {', '.join(WRITE_FORMATS)})")
    table = _id_table(trace, original_ids)
    n = len(trace)
    sessions = _sessions(trace) if format == "bailian" else None
    numeric = table is None or table.dtype.kind in "iu"
    for start in range(0, n, CHUNK_REQUESTS):
        stop = min(n, start + CHUNK_REQUESTS)
        records = _records_for(trace, format, table, sessions, start, stop)
        if numeric:
            # No strings but the fixed keys and "text": the spaces can go in by replacement.
            yield _encoder.encode_lines(records).replace(b",", b", ").replace(b":", b": ")
        else:
            yield b"".join(msgspec.json.format(_encoder.encode(r), indent=0) + b"\n" for r in records)


def _records_for(trace, fmt, table, sessions, start, stop):
    lo, hi = int(trace.offsets[start]), int(trace.offsets[stop])
    dense = trace.blocks[lo:hi]
    ids = dense.tolist() if table is None else table[dense].tolist()
    bounds = (trace.offsets[start:stop + 1] - lo).tolist()
    lengths = trace.input_length[start:stop].tolist()
    outs = trace.output_length[start:stop].tolist()
    count = stop - start
    if fmt == "mooncake":
        stamps = _stamps_ms(trace.timestamp[start:stop])
        size = trace.block_size
        ret = trace.retention
        ranges = [None] * count if ret is None else [[list(r) for r in ret.ranges(start + k)] or None
                                                     for k in range(count)]
        samples = [None] * count if trace.samples is None else [v or None for v in trace.samples[start:stop].tolist()]
        return [_MooncakeRecord(stamps[k], lengths[k], outs[k], ids[bounds[k]:bounds[k + 1]], size, ranges[k],
                                samples[k]) for k in range(count)]
    seconds = (trace.timestamp[start:stop] / 1000.0).tolist()
    parents, turns = sessions[0][start:stop].tolist(), sessions[1][start:stop].tolist()
    return [
        _BailianRecord(start + k, parents[k], seconds[k], lengths[k], outs[k], "text", turns[k], ids[bounds[k]:bounds[k + 1]])
        for k in range(count)
    ]


BAILIAN_BLOCK_SIZE = 16  # what the Bailian reader declares


def write_trace(trace: Trace, path, format: str = "mooncake", *, original_ids: bool = False, progress=None) -> None:
    """Write `trace` to `path` in `format` ("mooncake" or "bailian"), one JSON object per line
    in trace order; atomically (temporary file + rename), gzip when the name ends in .gz,
    standard output for "-".

    original_ids: write the file's ids (``trace.original_ids``, from ``keep_ids=True``)
    instead of the dense ids 0..num_blocks-1.

    A Mooncake file records the block size the trace declares in every record (``"block_size"``,
    read from the first one), so a round trip needs no --block-size; an undeclared one is left out
    (a replay then takes 512). A Bailian file is replayed at 16, so only a trace that declares
    16-token blocks can be written as Bailian (ConfigError otherwise; undeclared counts as 512).

    progress: a kvreplay.progress callback, told ``(done, total, "requests written")``.

    Raises ConfigError for an unknown format or missing original ids, OutputError when the
    file cannot be written (nothing is left behind then).
    """
    if format == "bailian" and trace.samples is not None:
        raise ConfigError("this trace gives requests' n (parallel sampling), which Bailian files cannot hold: write "
                          "it as mooncake (its n field keeps it)")
    if format == "bailian" and trace.retention is not None:
        raise ConfigError("this trace has KV retention priorities, which Bailian files cannot hold: write it as "
                          "mooncake (its priority_ranges field keeps them)")
    if format == "bailian" and trace.block_size != BAILIAN_BLOCK_SIZE:
        # The format has no block-size field and its reader assumes 16: anything else would replay
        # wrong. A trace that does not declare its block size is taken at 512, as a replay takes it.
        if trace.block_size is None:
            raise ConfigError(f"Bailian files have {BAILIAN_BLOCK_SIZE}-token blocks; this trace does not say its block "
                              f"size, so it is taken as {DEFAULT_BLOCK_SIZE} tokens: if its blocks are "
                              f"{BAILIAN_BLOCK_SIZE} tokens, say so (--block-size {BAILIAN_BLOCK_SIZE}); otherwise "
                              "write it as mooncake")
        raise ConfigError(f"Bailian files have {BAILIAN_BLOCK_SIZE}-token blocks; this trace's are {trace.block_size} "
                          "tokens: write it as mooncake and replay with --block-size")
    pieces = encode_trace(trace, format, original_ids=original_ids)
    first = next(pieces, b"")  # check the arguments before a file is created
    n = len(trace)
    with atomic_output(path) as out:
        out.write(first)
        tell(progress, min(n, CHUNK_REQUESTS), n, "requests written")
        for k, piece in enumerate(pieces, 2):
            out.write(piece)
            tell(progress, min(n, k * CHUNK_REQUESTS), n, "requests written")


__all__ = ["write_trace", "encode_trace", "atomic_output", "refuse_overwrite", "same_file", "WRITE_FORMATS"]
