"""Claude Code session-trace reader: one JSON document per file, one agent session per file.

Shape (as in the released samples)::

    {"id": "trace_0291", "block_size": 64, "hash_id_scope": "local", "models": [...],
     "requests": [
        {"t": 0.0, "type": "n", "in": 17869, "out": 426, "hash_ids": [1, 2, ...], ...},
        {"t": 1148.013, "type": "subagent", "agent_id": "agent_001", ...,
         "requests": [{"t": 0.0, "type": "n", "in": 11353, "out": 196, "hash_ids": [1584, ...]}, ...]},
        ...]}

- ``block_size`` (tokens per hash id) is required and becomes ``trace.block_size``.
- ``hash_id_scope`` must be ``"local"`` when present: ids mean something only inside this
  file, so readers of several files give each file its own id space.
- A request has ``t`` (seconds since the start of its stream), ``in`` (prompt tokens),
  ``hash_ids`` (one id per full block of the prompt; ids are integers or strings) and
  optionally ``out`` (output tokens) and ``type`` (a string; ``"n"``, ``"s"``, ...).
- A subagent entry (``"type": "subagent"``, or any entry with its own ``requests``) starts
  at ``t`` on its parent's clock; its nested requests are timed from the subagent's start
  and share the file's id space (subagents may nest).
- Other keys (``model``, ``totals``, ``api_time``, ...) are ignored.

Requests are ordered by absolute time (stable: ties keep document order), so overlapping
subagents interleave. Timestamps are in ms from the session start. Session: 0 for every
request, or with ``subagent_sessions=True`` 0 for the main stream and 1, 2, ... for each
subagent in document order.

Errors name the file, the line (of the offending value; the samples are single-line files)
and the JSON path of the field, e.g. ``trace.json:1: requests[3].in: expected a
non-negative integer, got -5``.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import msgspec
import numpy as np

from ..errors import ConfigError, TraceError
from .dependencies import Dependencies
from .model import MAX_BLOCK_SIZE, Reader, Trace
from .jsonl import INT64_MAX, MAX_REPORTED_LINES, Chunk, dense_ids, describe, finite, is_int, nesting, open_trace

FORMAT = "claude-code"


def _read_all(path: str, name: str) -> bytes:
    import gzip
    import zlib

    stream = open_trace(path)
    try:
        return stream.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(name, f"truncated or corrupt gzip data ({e})") from None
    except OSError as e:
        raise TraceError(name, f"read failed: {e}") from None
    finally:
        if path != "-":
            stream.close()


def _value_position(text: str, steps: list) -> int | None:
    """Index in `text` where the value at the JSON path `steps` (keys and list indices) starts."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")

    def skip(i: int) -> int:
        return ws.match(text, i).end()

    try:
        i = skip(0)
        for step in steps:
            if isinstance(step, str):
                if text[i] != "{":
                    return None
                i = skip(i + 1)
                while True:
                    key, i = decoder.raw_decode(text, i)
                    i = skip(i)
                    if text[i] != ":":
                        return None
                    i = skip(i + 1)
                    if key == step:
                        break
                    _, i = decoder.raw_decode(text, i)
                    i = skip(i)
                    if text[i] != ",":
                        return None
                    i = skip(i + 1)
            else:
                if text[i] != "[":
                    return None
                i = skip(i + 1)
                for _ in range(step):
                    _, i = decoder.raw_decode(text, i)
                    i = skip(i)
                    if text[i] != ",":
                        return None
                    i = skip(i + 1)
        return i
    except (ValueError, IndexError):
        return None


class _Reader:
    """Walks one decoded document, collecting columns; knows how to place an error."""

    def __init__(self, name: str, data: bytes, on_invalid: str):
        self.name, self.data, self.on_invalid = name, data, on_invalid
        self.ids: list = []
        self.counts: list[int] = []
        self.lengths: list[int] = []
        self.stamps: list[float] = []
        self.outs: list[int] = []
        self.streams: list[int] = []
        self.num_streams = 1
        self.stream_parent: list[int] = [-1]  # the stream a subagent was started from
        self.stream_start: list[float] = [0.0]  # its start, seconds on the file's clock
        self.api: list[float] = []  # recorded api_time (s), NaN: none
        self.think: list[float] = []  # recorded think_time (s), NaN: none
        self.tool_result: list[bool] = []  # its input_types name a tool_result
        self.invalid: list[int] = []
        self._text: str | None = None

    def line(self, steps: list) -> int:
        if self._text is None:
            self._text = self.data.decode("utf-8", errors="replace")
        for depth in range(len(steps), -1, -1):  # a missing key: the line of the object that lacks it
            pos = _value_position(self._text, steps[:depth])
            if pos is not None:
                return self._text.count("\n", 0, pos) + 1
        return 1

    def fail(self, steps: list, msg: str) -> TraceError:
        field = "".join(f"[{s}]" if isinstance(s, int) else (f".{s}" if k else s) for k, s in enumerate(steps))
        return TraceError(self.name, msg, self.line(steps), field or None)

    def walk(self, entries: list, steps: list, start_s: float, stream: int) -> None:
        for k, entry in enumerate(entries):
            here = [*steps, k]
            try:
                if isinstance(entry, dict) and (entry.get("type") == "subagent" or "requests" in entry):
                    t = self._time(entry, here)
                    if "requests" not in entry:
                        raise self.fail([*here, "requests"], "missing (a subagent entry needs its own requests)")
                    if not isinstance(entry["requests"], list):
                        raise self.fail([*here, "requests"], f"expected a list, got {describe(entry['requests'])}")
                    sub = self.num_streams
                    self.num_streams += 1
                    self.stream_parent.append(stream)
                    self.stream_start.append(start_s + t)
                    self.walk(entry["requests"], [*here, "requests"], start_s + t, sub)
                else:
                    self._request(entry, here, start_s, stream)
            except TraceError as e:
                if self.on_invalid == "error":
                    raise
                self.invalid.append(e.line)

    def _time(self, entry: dict, here: list) -> float:
        if "t" not in entry:
            raise self.fail([*here, "t"], "missing")
        t = entry["t"]
        if not (is_int(t) or isinstance(t, float)) or not finite(t) or not finite(t * 1000.0):
            raise self.fail([*here, "t"], f"expected a number of seconds, got {describe(t)}")
        return float(t)

    def _seconds(self, entry: dict, here: list, key: str) -> float:
        """An optional non-negative number of seconds (NaN when absent)."""
        value = entry.get(key)
        if value is None:
            return float("nan")
        if not (is_int(value) or isinstance(value, float)) or not finite(value) or value < 0:
            raise self.fail([*here, key], f"expected a non-negative number of seconds, got {describe(value)}")
        return float(value)

    def _count(self, entry: dict, here: list, key: str, required: bool) -> int:
        if entry.get(key) is None:
            if required:
                raise self.fail([*here, key], "missing")
            return 0
        value = entry[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not is_int(value) or value < 0:
            raise self.fail([*here, key], f"expected a non-negative integer, got {describe(entry[key])}")
        if value > INT64_MAX:
            raise self.fail([*here, key], f"{value} is too large (the limit is 2**63-1)")
        return value

    def _request(self, entry, here: list, start_s: float, stream: int) -> None:
        if not isinstance(entry, dict):
            raise self.fail(here, f"expected a JSON object, got {describe(entry)}")
        t = self._time(entry, here)
        length = self._count(entry, here, "in", True)
        if "hash_ids" not in entry:
            raise self.fail([*here, "hash_ids"], "missing")
        ids = entry["hash_ids"]
        if not isinstance(ids, list):
            raise self.fail([*here, "hash_ids"], f"expected a list of integers or strings, got {describe(ids)}")
        for j, h in enumerate(ids):
            if not (is_int(h) or isinstance(h, str)):
                raise self.fail([*here, "hash_ids"], f"item {j} is {describe(h)}, expected an integer or a string")
        out = self._count(entry, here, "out", False)
        kind = entry.get("type")
        if kind is not None and not isinstance(kind, str):
            raise self.fail([*here, "type"], f"expected a string, got {describe(kind)}")
        stamp = (start_s + t) * 1000.0
        if not finite(stamp):
            raise self.fail([*here, "t"], "the request's absolute time is too large")
        api, think = self._seconds(entry, here, "api_time"), self._seconds(entry, here, "think_time")
        types = entry.get("input_types")
        if types is not None and (not isinstance(types, list) or not all(isinstance(x, str) for x in types)):
            raise self.fail([*here, "input_types"], f"expected a list of strings, got {describe(types)}")
        self.api.append(api)
        self.think.append(think)
        self.tool_result.append(types is not None and "tool_result" in types)
        self.ids.extend(ids)
        self.counts.append(len(ids))
        self.lengths.append(length)
        self.stamps.append(stamp)
        self.outs.append(out)
        self.streams.append(stream)


def read_claude_code(path: str, *, on_invalid: str = "error", keep_ids: bool = False,
                     subagent_sessions: bool = False) -> Trace | list[Trace]:
    """Read one Claude Code session file (plain, gzip, or "-" for stdin), or a corpus of them one
    per line (JSONL, as Weka's Claude Code traces and NVIDIA AISimulate's ``weka`` format hold
    them: ai-dynamo/aisimulate crates/core/src/replay/loadgen/weka.rs, Apache-2.0): then a list,
    one Trace per line, each a session of its own as a file would be (load_trace merges them).

    on_invalid: "error" stops at the first bad request (TraceError with file, line and JSON
        path); "skip" drops bad requests (a bad subagent entry drops its whole stream) and
        lists their lines in ``trace.invalid_records``. Problems with the document itself
        (invalid JSON, block_size, hash_id_scope, the top-level requests) always stop.
    subagent_sessions: give every subagent stream its own session number (default: one
        session for the whole file).
    """
    if on_invalid not in ("error", "skip"):
        raise ConfigError(f"on_invalid must be 'error' or 'skip', not {on_invalid!r}")
    name = "<stdin>" if path == "-" else str(path)
    data = _read_all(str(path), name)
    if not data.strip():
        raise TraceError(name, "no requests (empty trace)")
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        if "trailing characters" in str(e) and data.lstrip()[:1] == b"{":
            return _read_lines(name, data, on_invalid, keep_ids, subagent_sessions)
        found = re.search(r"byte (\d+)", str(e))
        line = data.count(b"\n", 0, int(found.group(1))) + 1 if found else data.rstrip().count(b"\n") + 1
        raise TraceError(name, f"invalid JSON ({nesting(e)})", line) from None
    return _read_document(name, data, doc, on_invalid, keep_ids, subagent_sessions)


def sessions_in(path: str) -> int:
    """How many sessions a Claude Code file holds: one per line that opens a document at its first
    column (a JSONL corpus), one for a single document however it is laid out."""
    stream = open_trace(path)
    try:
        return max(1, sum(1 for line in stream if line[:1] == b"{"))
    finally:
        stream.close()


def _read_lines(name: str, data: bytes, on_invalid: str, keep_ids: bool, subagent_sessions: bool) -> list[Trace]:
    """A JSONL corpus: each non-blank line one session document; errors name the file's line."""
    out = []
    for number, text in enumerate(data.split(b"\n"), start=1):
        if not text.strip():
            continue
        try:
            doc = msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError) as e:
            raise TraceError(name, f"invalid JSON ({nesting(e)}; one Claude Code session per line)", number) from None
        try:
            trace = _read_document(name, text, doc, on_invalid, keep_ids, subagent_sessions)
        except TraceError as e:
            e.line = number  # (a one-line document: its line in the file)
            raise
        if trace.invalid_records:  # (the skipped requests' lines: this line)
            trace = replace(trace, invalid_records={**trace.invalid_records, "first_lines": [number]})
        out.append(trace)
    return out


def _read_document(name: str, data: bytes, doc, on_invalid: str, keep_ids: bool, subagent_sessions: bool) -> Trace:
    """One decoded session document (`data`: its text, for the lines errors name)."""
    reader = _Reader(name, data, on_invalid)
    if not isinstance(doc, dict):
        raise TraceError(name, f"expected one JSON object (a Claude Code session), got {describe(doc)}", 1)
    if "block_size" not in doc:
        raise reader.fail(["block_size"], "missing")
    block_size = doc["block_size"]
    if not is_int(block_size) or block_size < 1:
        raise reader.fail(["block_size"], f"expected a positive integer, got {describe(block_size)}")
    if block_size > MAX_BLOCK_SIZE:
        raise reader.fail(["block_size"], f"{block_size:,} is beyond any engine's block (at most {MAX_BLOCK_SIZE:,} tokens)")
    scope = doc.get("hash_id_scope", "local")
    if scope != "local":
        raise reader.fail(["hash_id_scope"], f"only \"local\" is supported (ids private to the file), got {describe(scope)}")
    if "requests" not in doc:
        raise reader.fail(["requests"], "missing")
    if not isinstance(doc["requests"], list):
        raise reader.fail(["requests"], f"expected a list, got {describe(doc['requests'])}")
    try:
        reader.walk(doc["requests"], ["requests"], 0.0, 0)
    except RecursionError:
        raise TraceError(name, "subagents nested too deeply to read") from None
    n = len(reader.lengths)
    invalid = sorted(reader.invalid)
    if n == 0:
        what = f"no valid requests ({len(invalid)} invalid)" if invalid else "no requests (empty trace)"
        raise TraceError(name, what)
    blocks, num_blocks, original = dense_ids([Chunk(reader.ids, None, None, None, None)], keep_ids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(reader.counts, out=offsets[1:])
    streams = np.array(reader.streams, dtype=np.int64)
    links = agent_links(streams, np.array(reader.stream_parent), np.array(reader.stream_start),
                        np.array(reader.stamps) / 1000.0, np.array(reader.api), np.array(reader.think),
                        np.array(reader.tool_result, dtype=bool))
    trace = Trace(
        offsets=offsets, blocks=blocks,
        input_length=np.array(reader.lengths, dtype=np.int64), output_length=np.array(reader.outs, dtype=np.int64),
        timestamp=np.array(reader.stamps, dtype=np.float64), num_blocks=num_blocks, block_size=int(block_size),
        source=name, format=FORMAT, original_ids=original,
        invalid_records={"count": len(invalid), "first_lines": invalid[:MAX_REPORTED_LINES]} if invalid else None,
        session=streams if subagent_sessions else np.zeros(n, dtype=np.int64), dependencies=links,
    )
    return trace.sorted_by_time()


#: how agent_links finds what a request waits for (every output that uses the links says it)
LINK_RULE = ("Claude Code: each request follows its stream's previous answer; a subagent starts after its "
             "parent's last request sent before it (from that request's send when it started before its end); "
             "the parent's first tool_result request after a subagent's last answer waits for it; think time = "
             "send time minus the latest predecessor's end (t + api_time), else think_time")


def agent_links(stream: np.ndarray, parent: np.ndarray, start_s: np.ndarray, t_s: np.ndarray, api_s: np.ndarray,
                think_s: np.ndarray, tool_result: np.ndarray) -> Dependencies:
    """What each request of a Claude Code session waits for (requests in reading order; per
    stream, its parent stream (-1: the main one) and its start on the file's clock, seconds):

    - a request follows the previous request of its stream (the agent's loop: call, answer, tool
      or user, next call);
    - a subagent's first request follows the parent's request that spawned it: the parent's last
      request sent at or before the subagent's start (after its end; when the subagent started
      before that end, the link fires on the parent request's send, at the recorded gap between
      the two starts);
    - the parent's first request sent after the subagent's last answer (its latest end, t +
      api_time) whose input_types name a tool_result consumed it, and waits for that answer. A
      subagent whose results no later request reads is waited for by none (it ran beside).

    Think time (ms): the request's send time minus the latest end (t + api_time) of what it waits
    for, at least 0; where an end is not recorded (no api_time), its recorded think_time when it
    follows only its stream's previous request; else NaN (estimated at serving time)."""
    n = t_s.size
    end = t_s + api_s
    finish = np.where(np.isnan(end), t_s, end)
    after: list[list[int]] = [[] for _ in range(n)]
    delay: list[list[float]] = [[] for _ in range(n)]  # per link: NaN (the request's think) or ms
    send: list[list[bool]] = [[] for _ in range(n)]
    members: dict[int, list[int]] = {}
    for r in np.lexsort((np.arange(n), t_s)).tolist():  # each stream's requests by time
        members.setdefault(int(stream[r]), []).append(r)
    def link(i: int, p: int, on_send: bool = False, ms: float = float("nan")) -> None:
        after[i].append(p)
        delay[i].append(ms)
        send[i].append(on_send)

    for reqs in members.values():
        for a, b in zip(reqs, reqs[1:]):
            link(b, a)
    for u, reqs in members.items():
        p = int(parent[u])
        if p < 0 or p not in members:
            continue
        spawners = [r for r in members[p] if t_s[r] <= start_s[u]]
        if spawners:
            r = spawners[-1]
            if end[r] > start_s[u]:  # started beside the running request: from its send
                link(reqs[0], r, True, (t_s[reqs[0]] - t_s[r]) * 1000.0)
            else:
                link(reqs[0], r)
        last = max(reqs, key=lambda r: (finish[r], r))
        consumer = next((r for r in members[p] if t_s[r] >= finish[last] and tool_result[r]), None)
        if consumer is not None and last not in after[consumer]:
            link(consumer, last)
    think = np.full(n, np.nan)
    for i in range(n):
        on_end = [p for p, on_send in zip(after[i], send[i]) if not on_send]
        if not on_end:
            continue
        ends = end[on_end]
        if not np.isnan(ends).any():
            think[i] = max(0.0, t_s[i] - ends.max()) * 1000.0
        elif len(on_end) == 1 and stream[on_end[0]] == stream[i] and not np.isnan(think_s[i]):
            think[i] = think_s[i] * 1000.0
    overlap = any(any(x) for x in send)
    return Dependencies.from_lists(after, think, LINK_RULE, delay if overlap else None, send if overlap else None)


READER = Reader(
    name=FORMAT, read=read_claude_code, rank=0, options=("subagent_sessions",),
    sniff=lambda keys: "requests" in keys, sniff_keys=("requests", "block_size"),
    summary="Claude Code session JSON (kv-cache-tester corpus): one session per file, declared block size",
)
