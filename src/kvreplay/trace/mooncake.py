"""Mooncake FAST'25 JSONL reader: one JSON object per line.

Fields: ``input_length`` (tokens, required), ``hash_ids`` (block ids, required:
integers or strings), ``timestamp`` (ms, optional), ``output_length``
(optional), ``block_size`` (optional: the first record's declares the trace's block
size; kvreplay's hash, synth and convert write it in every record), ``priority`` and
``priority_ranges`` (optional KV retention priorities, trace/retention.py: ``priority`` P is one
range over the whole prompt; ``priority_ranges`` is ``[[start, end or null, P, duration_ms or
null], ...]``), ``n`` (optional: the completions the request samples from its prompt, 1..1024,
serving/samples.py), ``beam_width`` (optional: the request's beam-search width, 1..10, served as
vLLM's online beam search, serving/beam.py; 1 is ordinary decoding). Unknown fields are ignored; blank lines are skipped. Requests keep file order.

Two paths produce the same result. The fast path decodes a chunk of lines as
one JSON array with msgspec, keeps ``hash_ids`` as raw bytes and parses all of
them in one compiled pass; it applies only when every id in the chunk is a
plain integer. Anything else (string ids, a bad record) goes through the
line-by-line path, which checks every field and names the line of each error.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..errors import TraceError
from .jsonl import (
    MAX_REPORTED_LINES, Chunk, checked_lines, count_byte, decode_object, dense_ids, describe, empty_trace_error, finite,
    hash_id_list, is_int, non_negative_int, parse_int_lists, read_chunks,
)
from .model import MAX_BLOCK_SIZE, Reader, Trace, frozen
from .retention import Retention, check_range

MAX_SAMPLES = 1024  # the bound on n (serving/samples.py)
MAX_BEAM_WIDTH = 10  # the bound on beam_width (serving/beam.py: vLLM's --max-logprobs default of 20 over 2)

class _FastRecord(msgspec.Struct, gc=False):
    input_length: int
    hash_ids: msgspec.Raw
    timestamp: float = 0.0
    output_length: float = 0.0
    priority: msgspec.Raw | None = None  # (a record with priorities takes the slow path)
    priority_ranges: msgspec.Raw | None = None
    n: int | None = None  # (a value out of 1..MAX_SAMPLES takes the slow path, which names it)
    beam_width: msgspec.Raw | None = None  # (any takes the slow path, which checks it)


class _Chunk(Chunk):
    """A chunk's columns plus each record's retention ranges and ``n`` (None: no record in it has
    any; 0 in `samples`: this record has none)."""

    __slots__ = ("ranges", "samples", "beams")

    def __init__(self, ids, counts, lengths, stamps, outs, ranges=None, samples=None, beams=None):
        super().__init__(ids, counts, lengths, stamps, outs)
        self.ranges = ranges
        self.samples = samples
        self.beams = beams


_fast_decoder = msgspec.json.Decoder(_FastRecord)


def _ranges(path: str, line: int, obj: dict) -> list:
    """A record's retention ranges: ``priority`` (one range over the prompt), ``priority_ranges``."""
    if obj.get("priority") is not None and obj.get("priority_ranges") is not None:
        raise TraceError(path, "give priority or priority_ranges, not both", line, "priority")
    if obj.get("priority") is not None:
        out = [(0, None, obj["priority"], None)]
        field = "priority"
    else:
        raw = obj.get("priority_ranges") or []
        field = "priority_ranges"
        if not isinstance(raw, list) or not all(isinstance(r, list) and len(r) == 4 for r in raw):
            raise TraceError(path, "expected a list of [start, end or null, priority, duration_ms or null]", line, field)
        out = [tuple(r) for r in raw]
    for r in out:
        problem = check_range(*r)
        if problem:
            raise TraceError(path, problem, line, field)
    return out


def _check_record(path: str, line: int, text: bytes):
    """Decode and validate one line; return (hash_ids, input_length, timestamp, output_length, ranges, n,
    beam_width) (n, beam_width 0: not given)."""
    obj = decode_object(path, line, text)
    if "input_length" not in obj and "hash_ids" not in obj:
        tokens = next((k for k in ("token_ids", "prompt_token_ids") if k in obj), None)
        if tokens is not None:  # a token log: its blocks need hashing first
            raise TraceError(path, f"missing; this record has {tokens}: a token log, not a trace of block hashes "
                             f"(turn it into one with `kvreplay hash {path} -o trace.jsonl`)", line, "hash_ids")
        error = TraceError(path, "missing", line, "input_length")
        error.unrecognised = True  # not a Mooncake record at all (trace/ops.py says which formats were tried)
        raise error
    for key in ("input_length", "hash_ids"):
        if key not in obj:
            raise TraceError(path, "missing", line, key)
    length = non_negative_int(path, line, obj, "input_length")
    ids = hash_id_list(path, line, obj)
    stamp = obj.get("timestamp")
    if stamp is None:
        stamp = 0.0
    elif not (is_int(stamp) or isinstance(stamp, float)) or not finite(stamp):
        raise TraceError(path, f"expected a number, got {describe(stamp)}", line, "timestamp")
    out = 0 if obj.get("output_length") is None else non_negative_int(path, line, obj, "output_length")
    samples = obj.get("n")
    if samples is None:
        samples = 0
    elif not is_int(samples) or not 1 <= samples <= MAX_SAMPLES:
        raise TraceError(path, f"expected a whole number of completions in 1..{MAX_SAMPLES}, got {describe(samples)}",
                         line, "n")
    beam = obj.get("beam_width")
    if beam is None:
        beam = 0
    elif not is_int(beam) or not 1 <= beam <= MAX_BEAM_WIDTH:
        raise TraceError(path, f"expected a whole number of beams in 1..{MAX_BEAM_WIDTH} (vLLM asks the engine for "
                         f"2 x W logprobs, at most its --max-logprobs default of 20), got {describe(beam)}",
                         line, "beam_width")
    if beam > 1 and samples > 1:
        raise TraceError(path, "give n or beam_width, not both: vLLM takes a beam-search request's n as its beam "
                         "width", line, "beam_width")
    return ids, length, float(stamp), out, _ranges(path, line, obj), int(samples), int(beam)


def _fast_chunk(data: bytes) -> Chunk | None:
    """Parse a chunk whose records are all valid with integer ids; None when the slow path is needed.

    msgspec decodes the chunk's lines in one call (skipping empty ones); the chunk takes this
    path only if that gives one record per non-empty line (a line of only spaces, two records on
    a line or one record over two lines send it to the slow path, which names the line). All
    hash_ids lists, kept raw by msgspec, are joined and parsed in one compiled pass.
    """
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    lines = int(np.count_nonzero(np.diff(ends, prepend=-1, append=len(data)) > 1))  # non-empty lines
    if lines == 0:
        return Chunk(np.zeros(0, np.int64), np.zeros(0, np.int64), *(np.zeros(0, t) for t in (np.int64, np.float64, np.int64)))
    try:
        recs = _fast_decoder.decode_lines(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    n = len(recs)
    if n != lines or any(r.priority is not None or r.priority_ranges is not None for r in recs):
        return None
    if any(r.beam_width is not None for r in recs):
        return None
    samples = None
    if any(r.n is not None for r in recs):
        samples = np.fromiter((0 if r.n is None else r.n for r in recs), dtype=np.int64, count=n)
        if any(r.n is not None and not 1 <= r.n <= MAX_SAMPLES for r in recs):
            return None
    joined = b";".join([r.hash_ids for r in recs])  # "[1, 2];[];[3]"
    ids = np.empty(count_byte(joined, 44) + n, dtype=np.int64)  # at most one id per comma, plus one per list
    counts = np.empty(n, dtype=np.int64)
    found = parse_int_lists(np.frombuffer(joined, dtype=np.uint8), ids, counts)
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
    return _Chunk(ids, counts.astype(np.int64), lengths, stamps, outs.astype(np.int64), None, samples)


def _slow_chunk(path: str, first_line: int, data: bytes, on_invalid: str, invalid: list[int]) -> Chunk:
    ids: list = []
    counts, lengths, stamps, outs, ranges, samples, beams = [], [], [], [], [], [], []
    for _, (rec_ids, length, stamp, out, rec_ranges, rec_n, rec_beam) in checked_lines(path, first_line, data,
                                                                                       on_invalid, invalid,
                                                                                       _check_record):
        ids.extend(rec_ids)
        counts.append(len(rec_ids))
        lengths.append(length)
        stamps.append(stamp)
        outs.append(out)
        ranges.append(rec_ranges)
        samples.append(rec_n)
        beams.append(rec_beam)
    return _Chunk(ids, np.array(counts, dtype=np.int64), np.array(lengths, dtype=np.int64),
                  np.array(stamps, dtype=np.float64), np.array(outs, dtype=np.int64),
                  ranges if any(ranges) else None, np.array(samples, dtype=np.int64) if any(samples) else None,
                  np.array(beams, dtype=np.int64) if any(beams) else None)


def _retention(chunks: list) -> Retention | None:
    """The trace's retention ranges (None when no record has any)."""
    if all(getattr(c, "ranges", None) is None for c in chunks):
        return None
    per_request = []
    for c in chunks:
        ranges = getattr(c, "ranges", None)
        per_request += ranges if ranges is not None else [[] for _ in range(c.lengths.shape[0])]
    return Retention.from_lists(per_request)


def _samples(chunks: list, field: str = "samples") -> np.ndarray | None:
    """The trace's ``n`` column (field "beams": its ``beam_width``; None when no record gives one)."""
    if all(getattr(c, field, None) is None for c in chunks):
        return None
    return frozen(np.concatenate([getattr(c, field) if getattr(c, field, None) is not None
                                  else np.zeros(c.lengths.shape[0], dtype=np.int64) for c in chunks]))


def _declared_block_size(name: str, declared: dict) -> int | None:
    """The first record's optional ``block_size`` (kvreplay's writers put it in every record)."""
    try:
        first = msgspec.json.decode(declared.get("record", b""))
    except (msgspec.DecodeError, RecursionError):
        return None  # the record itself was reported or skipped by the reader
    if not isinstance(first, dict) or first.get("block_size") is None:
        return None
    size = first["block_size"]
    if not is_int(size) or not 1 <= size <= MAX_BLOCK_SIZE:
        raise TraceError(name, f"expected a whole number of tokens in 1..{MAX_BLOCK_SIZE:,}, got {describe(size)}",
                         declared["line"], "block_size")
    return int(size)


def read_mooncake(path: str, *, on_invalid: str = "error", keep_ids: bool = False, progress=None) -> Trace:
    """Read a Mooncake JSONL trace (plain, gzip, or "-" for stdin).

    on_invalid: "error" stops at the first bad record with a TraceError naming
    the file, line and field; "skip" drops bad records and lists them in
    ``trace.invalid_records``. progress: told the bytes read so far (jsonl.read_chunks).
    """
    declared = {}

    def fast(first_line, data):
        if "record" not in declared and data.strip():
            lead = data[:len(data) - len(data.lstrip())]
            declared["line"] = first_line + lead.count(b"\n")
            declared["record"] = data.lstrip().split(b"\n", 1)[0]
        return _fast_chunk(data)

    name, chunks, invalid = read_chunks(path, on_invalid, fast, _slow_chunk, progress)
    n = sum(c.lengths.shape[0] for c in chunks)
    if n == 0:
        raise empty_trace_error(name, invalid)
    blocks, num_blocks, original = dense_ids(chunks, keep_ids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.concatenate([c.counts for c in chunks]), out=offsets[1:])
    return Trace(
        offsets=frozen(offsets),
        blocks=frozen(blocks),
        input_length=frozen(np.concatenate([c.lengths for c in chunks]).astype(np.int64, copy=False)),
        output_length=frozen(np.concatenate([c.outs for c in chunks]).astype(np.int64, copy=False)),
        timestamp=frozen(np.concatenate([c.stamps for c in chunks]).astype(np.float64, copy=False)),
        num_blocks=num_blocks,
        block_size=_declared_block_size(name, declared),
        source=name,
        format="mooncake",
        original_ids=original,
        invalid_records={"count": len(invalid), "first_lines": invalid[:MAX_REPORTED_LINES]} if invalid else None,
        retention=_retention(chunks),
        samples=_samples(chunks),
        beam_width=_samples(chunks, "beams"),
    )


READER = Reader(
    name="mooncake", read=read_mooncake, rank=99, options=("progress",),  # the catch-all: asked last
    sniff=lambda keys: True,
    summary="Mooncake FAST'25 JSONL: input_length, hash_ids, timestamp (ms), output_length",
)
