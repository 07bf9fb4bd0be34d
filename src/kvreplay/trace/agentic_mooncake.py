"""Agentic Mooncake v2 reader: Mooncake rows plus the requests each waits for (NVIDIA AISimulate's
and Dynamo's agentic replay interchange format, ``schema: "dynamo.agentic_mooncake"``, ``version:
2``; ai-dynamo/aisimulate, crates/core/src/replay/loadgen/trace.rs: AgenticMooncakeHeader,
AgenticMooncakeRow, AgenticDependency; Apache-2.0).

JSONL. The first record is the header::

    {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64, "hash_id_scope": "local",
     "source": {"format": "weka", "digest": "..."}}

then one request per line::

    {"request_id": "r2", "play_id": "p0", "session_id": "main", "model": "m", "input_length": 2048,
     "output_length": 120, "hash_ids": [1, 2, ...], "not_before_ms": 5100.0,
     "dependencies": [{"request_id": "r1", "trigger": "completion", "delay_ms": 3100.0,
                       "relation": "sequence"}]}

- ``block_size`` (tokens per hash id) becomes ``trace.block_size``; ``hash_id_scope`` must be
  ``"local"``: ids mean something only inside their **play** (one agent run), so each play gets its
  own id space, as each Claude Code file does.
- A row needs ``request_id`` (unique in the file), ``play_id``, ``input_length`` (or
  ``input_tokens``), ``hash_ids`` and ``not_before_ms`` (its recorded send time, ms);
  ``output_length`` (or ``output_tokens``) defaults to 0; ``session_id``, ``model``,
  ``recorded_api_time_ms``, priorities and other keys are kept out.
- A dependency names a request of the same play, a ``trigger`` (``completion``: the link fires
  when that request ends; ``dispatch``: when it is sent) and a ``delay_ms`` >= 0 after it;
  ``relation`` (sequence, spawn, join, replay_barrier) is checked and not needed beyond that.
  The links must not loop.

The trace's sessions are the plays (numbered by first appearance); its dependencies are the rows'
(each link with its own delay: trace/dependencies.py); its timestamps are ``not_before_ms``, in
time order. Serving it closed-loop (the default for this format), a request is sent when its
links release it: its not_before_ms is then only its play's start for a request that waits for
nothing (AISimulate also keeps every request's recorded start as a floor: docs/sessions.md).
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..errors import ConfigError, TraceError
from .dependencies import Dependencies
from .jsonl import INT64_MAX, MAX_REPORTED_LINES, Chunk, decode_object, dense_ids, describe, finite, is_int, open_trace
from .model import MAX_BLOCK_SIZE, Reader, Trace

FORMAT = "agentic-mooncake"
SCHEMA = "dynamo.agentic_mooncake"
VERSION = 2
TRIGGERS = ("completion", "dispatch")
RELATIONS = ("sequence", "spawn", "join", "replay_barrier")
RULE = ("Agentic Mooncake: each request waits for its dependencies (a completion link fires on the "
        "request's end, a dispatch link on its send), then the link's delay_ms")


def _header(name: str, line: int, obj: dict) -> int:
    """The block size the header declares (TraceError naming the field otherwise)."""
    if obj.get("schema") != SCHEMA:
        raise TraceError(name, f"expected {SCHEMA!r} (an Agentic Mooncake header first), got {describe(obj.get('schema'))}",
                         line, "schema")
    if obj.get("version") != VERSION or isinstance(obj.get("version"), bool):
        raise TraceError(name, f"only version {VERSION} is read, got {describe(obj.get('version'))}", line, "version")
    size = obj.get("block_size")
    if not is_int(size) or not 1 <= size <= MAX_BLOCK_SIZE:
        raise TraceError(name, f"expected a block size from 1 to {MAX_BLOCK_SIZE:,} tokens, got {describe(size)}",
                         line, "block_size")
    if obj.get("hash_id_scope", "local") != "local":
        raise TraceError(name, f"only \"local\" is supported (ids private to each play), got "
                               f"{describe(obj.get('hash_id_scope'))}", line, "hash_id_scope")
    return int(size)


def _count(name: str, line: int, obj: dict, keys: tuple, required: bool) -> int:
    key = next((k for k in keys if obj.get(k) is not None), None)
    if key is None:
        if required:
            raise TraceError(name, "missing", line, keys[0])
        return 0
    value = obj[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value) or value < 0 or value > INT64_MAX:
        raise TraceError(name, f"expected a non-negative integer, got {describe(obj[key])}", line, key)
    return value


def _text(name: str, line: int, obj: dict, key: str) -> str:
    value = obj.get(key)
    if value is None:
        raise TraceError(name, "missing", line, key)
    if not isinstance(value, str) or not value:
        raise TraceError(name, f"expected a non-empty string, got {describe(value)}", line, key)
    return value


class _Rows:
    """The rows read so far, as columns."""

    def __init__(self, name: str):
        self.name = name
        self.ids: list = []
        self.counts: list[int] = []
        self.lengths: list[int] = []
        self.outs: list[int] = []
        self.stamps: list[float] = []
        self.plays: list[int] = []
        self.lines: list[int] = []
        self.request: dict[str, int] = {}  # request_id -> row
        self.play_of: dict[str, int] = {}  # play_id -> play number
        self.deps: list[list] = []  # per row: (request_id, trigger, delay_ms, line)

    def add(self, line: int, obj: dict) -> None:
        name = self.name
        rid = _text(name, line, obj, "request_id")
        if rid in self.request:
            raise TraceError(name, f"{rid!r} appears again (first on line {self.lines[self.request[rid]]})", line,
                             "request_id")
        play = self.play_of.setdefault(_text(name, line, obj, "play_id"), len(self.play_of))
        length = _count(name, line, obj, ("input_length", "input_tokens"), True)
        out = _count(name, line, obj, ("output_length", "output_tokens"), False)
        ids = obj.get("hash_ids")
        if ids is None:
            raise TraceError(name, "missing", line, "hash_ids")
        if not isinstance(ids, list) or not all(is_int(h) and h >= 0 for h in ids):
            raise TraceError(name, f"expected a list of non-negative integers, got {describe(ids)}", line, "hash_ids")
        stamp = obj.get("not_before_ms")
        if stamp is None:
            raise TraceError(name, "missing", line, "not_before_ms")
        if not (is_int(stamp) or isinstance(stamp, float)) or not finite(stamp) or stamp < 0:
            raise TraceError(name, f"expected a non-negative number of milliseconds, got {describe(stamp)}", line,
                             "not_before_ms")
        deps = obj.get("dependencies") or []
        if not isinstance(deps, list):
            raise TraceError(name, f"expected a list, got {describe(deps)}", line, "dependencies")
        checked = []
        for k, d in enumerate(deps):
            where = f"dependencies[{k}]"
            if not isinstance(d, dict):
                raise TraceError(name, f"expected an object, got {describe(d)}", line, where)
            target = d.get("request_id")
            if not isinstance(target, str) or not target:
                raise TraceError(name, f"expected a request_id, got {describe(target)}", line, f"{where}.request_id")
            if d.get("trigger") not in TRIGGERS:
                raise TraceError(name, f"expected one of {', '.join(TRIGGERS)}, got {describe(d.get('trigger'))}", line,
                                 f"{where}.trigger")
            delay = d.get("delay_ms", 0.0)
            if not (is_int(delay) or isinstance(delay, float)) or not finite(delay) or delay < 0:
                raise TraceError(name, f"expected a non-negative number of milliseconds, got {describe(delay)}", line,
                                 f"{where}.delay_ms")
            if d.get("relation") is not None and d.get("relation") not in RELATIONS:
                raise TraceError(name, f"expected one of {', '.join(RELATIONS)}, got {describe(d.get('relation'))}",
                                 line, f"{where}.relation")
            checked.append((target, d["trigger"] == "dispatch", float(delay), where))
        self.request[rid] = len(self.lines)
        # ids are local to their play: keyed by (play, id)
        self.ids.extend((play << 40) + h if h < (1 << 40) and play < (1 << 22) else (play, h) for h in ids)
        self.counts.append(len(ids))
        self.lengths.append(length)
        self.outs.append(out)
        self.stamps.append(float(stamp))
        self.plays.append(play)
        self.lines.append(line)
        self.deps.append(checked)

    def links(self) -> Dependencies:
        """Each row's dependencies as positions (TraceError at the first that names an unknown
        request, one of another play, or a loop)."""
        after, delay, send = [], [], []
        for row, deps in enumerate(self.deps):
            a, dl, sd = [], [], []
            for target, on_send, ms, where in deps:
                p = self.request.get(target)
                if p is None:
                    raise TraceError(self.name, f"no request {target!r} in the file", self.lines[row],
                                     f"{where}.request_id")
                if self.plays[p] != self.plays[row]:
                    raise TraceError(self.name, f"{target!r} belongs to another play", self.lines[row],
                                     f"{where}.request_id")
                if p == row:
                    raise TraceError(self.name, "a request cannot wait for itself", self.lines[row],
                                     f"{where}.request_id")
                a.append(p)
                dl.append(ms)
                sd.append(on_send)
            after.append(a)
            delay.append(dl)
            send.append(sd)
        self._no_loops(after)
        return Dependencies.from_lists(after, np.full(len(after), np.nan), RULE, delay, send)

    def _no_loops(self, after: list) -> None:
        state = [0] * len(after)  # 0 new, 1 on the path, 2 done
        for start in range(len(after)):
            if state[start]:
                continue
            stack = [(start, 0)]
            state[start] = 1
            while stack:
                node, k = stack[-1]
                if k < len(after[node]):
                    stack[-1] = (node, k + 1)
                    nxt = after[node][k]
                    if state[nxt] == 1:
                        raise TraceError(self.name, "the dependencies loop back to this request", self.lines[nxt],
                                         "dependencies")
                    if state[nxt] == 0:
                        state[nxt] = 1
                        stack.append((nxt, 0))
                else:
                    state[node] = 2
                    stack.pop()


def read_agentic_mooncake(path: str, *, on_invalid: str = "error", keep_ids: bool = False) -> Trace:
    """Read an Agentic Mooncake v2 file (plain, gzip, or "-" for stdin).

    on_invalid: "error" stops at the first bad row (TraceError naming file, line and field); "skip"
    drops bad rows and lists their lines in ``trace.invalid_records`` (a row that names a dropped
    or unknown request then stops the read: its links would be lost). The header always stops."""
    if on_invalid not in ("error", "skip"):
        raise ConfigError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    name = "<stdin>" if path == "-" else str(path)
    rows = _Rows(name)
    invalid: list[int] = []
    block_size = None
    stream = open_trace(str(path))
    try:
        for line, text in enumerate(stream, start=1):
            if not text.strip():
                continue
            try:
                obj = decode_object(name, line, text)
                if block_size is None:
                    block_size = _header(name, line, obj)
                    continue
                rows.add(line, obj)
            except TraceError as e:
                if on_invalid == "error" or block_size is None:
                    raise
                invalid.append(e.line or line)
    except (OSError, EOFError, msgspec.DecodeError) as e:
        raise TraceError(name, f"read failed: {e}") from None
    finally:
        if path != "-":
            stream.close()
    if block_size is None:
        raise TraceError(name, "no header (an Agentic Mooncake file starts with its schema line)")
    n = len(rows.lengths)
    if n == 0:
        raise TraceError(name, f"no valid requests ({len(invalid)} invalid)" if invalid else "no requests (empty trace)")
    links = rows.links()
    blocks, num_blocks, original = dense_ids([Chunk(rows.ids, None, None, None, None)], keep_ids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rows.counts, out=offsets[1:])
    trace = Trace(
        offsets=offsets, blocks=blocks, input_length=np.array(rows.lengths, dtype=np.int64),
        output_length=np.array(rows.outs, dtype=np.int64), timestamp=np.array(rows.stamps, dtype=np.float64),
        num_blocks=num_blocks, block_size=block_size, source=name, format=FORMAT, original_ids=original,
        invalid_records={"count": len(invalid), "first_lines": invalid[:MAX_REPORTED_LINES]} if invalid else None,
        session=np.array(rows.plays, dtype=np.int64), dependencies=links,
    )
    return trace.sorted_by_time()


READER = Reader(
    name=FORMAT, read=read_agentic_mooncake, rank=0,
    sniff=lambda keys: "schema" in keys, sniff_keys=("schema",),
    summary="Agentic Mooncake v2 JSONL (AISimulate, Dynamo): a header, then requests with their dependencies",
)
