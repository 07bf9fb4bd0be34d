"""The in-memory trace: columnar, immutable, no per-request Python objects.

Request i reads blocks ``blocks[offsets[i]:offsets[i+1]]``. Block ids are dense
(0..num_blocks-1), remapped at load time from whatever ids the file used, so
policies can keep per-block state in flat arrays.
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass, field, replace
from typing import Callable
from functools import cached_property

import numpy as np

from ..errors import ConfigError

# The block size of Mooncake's released traces: used when neither the caller nor the trace says.
DEFAULT_BLOCK_SIZE = 512


MAX_BLOCK_SIZE = 2**31 - 1  # hit_blocks * block_size stays exact in 64 bits


def resolve_block_size(block_size, trace=None) -> int:
    """The block size in use: `block_size` if given, else the one `trace` declares, else 512.
    Raises ConfigError unless the result is a whole number >= 1."""
    size = block_size if block_size is not None else getattr(trace, "block_size", None)
    if size is None:
        return DEFAULT_BLOCK_SIZE
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ConfigError(f"block_size must be a whole number of tokens >= 1, got {size!r}")
    if size > MAX_BLOCK_SIZE:
        raise ConfigError(f"block_size {size:,} is beyond any engine's block (at most 2**31 - 1 = {MAX_BLOCK_SIZE:,} tokens)")
    return int(size)


def exact_sum(a: np.ndarray) -> int:
    """The exact sum of an integer array: numpy's int64 when it cannot wrap, Python ints otherwise."""
    if a.size == 0:
        return 0
    if max(abs(int(a.max())), abs(int(a.min()))) < (2**63 - 1) // a.size:
        return int(a.sum(dtype=np.int64))
    return sum(a.tolist())


def _frozen(a, dtype) -> np.ndarray:
    """A read-only array of `dtype`. An array that is already read-only with that dtype is
    kept as is (readers hand over fresh arrays that way); anything else is copied, so a
    caller's later writes never change the trace."""
    if isinstance(a, np.ndarray) and a.dtype == dtype and not a.flags.writeable and a.flags.c_contiguous:
        return a
    a = np.array(a, dtype=dtype, copy=True, order="C")
    a.flags.writeable = False
    return a


def frozen(a: np.ndarray) -> np.ndarray:
    """Mark a fresh array read-only so Trace takes it without a copy (for readers)."""
    a.flags.writeable = False
    return a


def ragged_take(offsets: np.ndarray, order) -> tuple[np.ndarray, np.ndarray]:
    """Rows `order` of a ragged column whose row i is ``[offsets[i], offsets[i+1])``: (the new
    offsets, the flat index of their entries), gathered in one vectorised step."""
    order = np.asarray(order, dtype=np.int64)
    lengths = np.diff(offsets)[order]
    out = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out, np.repeat(offsets[:-1][order] - out[:-1], lengths) + np.arange(out[-1])


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace in columnar form.

    Attributes:
        offsets: int64[n+1], request i's blocks are ``blocks[offsets[i]:offsets[i+1]]``.
        blocks: int32[offsets[-1]], dense block ids in request order.
        input_length: int64[n], prompt tokens per request.
        output_length: int64[n], output tokens per request (0 when the file has none).
        timestamp: float64[n], arrival time in milliseconds (0 when the file has none).
        num_blocks: number of distinct block ids (ids are 0..num_blocks-1).
        block_size: the block size the file declares, or None (the caller chooses).
        source: where the trace came from (a path, "-" or a description).
        format: the reader that produced it ("mooncake", "synthetic", ...).
        original_ids: the file's id for each dense id, when kept (``keep_ids=True``).
        invalid_records: for ``on_invalid="skip"``: ``{"count": N, "first_lines": [...]}``.
        session: int64[n] or None: the session (conversation, agent run, input file) each
            request belongs to, numbered 0..S-1 by the readers; None when the source has none.
        retention: per-request KV retention priorities (trace/retention.py: TensorRT-LLM's
            token-range priorities), or None when the source gives none.
        dependencies: what each request waits for before it is sent, and its think time
            (trace/dependencies.py: a session's previous turn, an agent's subagents), or None
            when the source records none.
        samples: int64[n] or None: the completions each request asks for (the record's ``n``,
            serving/samples.py), 0 where the record gives none; None when no record gives one.
        beam_width: int64[n] or None: each request's beam-search width (the record's
            ``beam_width``, serving/beam.py), 0 where the record gives none; None when no record gives one.
    """

    offsets: np.ndarray
    blocks: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    timestamp: np.ndarray
    num_blocks: int
    block_size: int | None = None
    source: str = "<memory>"
    format: str = "memory"
    original_ids: np.ndarray | list | None = None
    invalid_records: dict | None = field(default=None)
    session: np.ndarray | None = None
    retention: object | None = None  # trace.retention.Retention
    dependencies: object | None = None  # trace.dependencies.Dependencies
    samples: np.ndarray | None = None
    beam_width: np.ndarray | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "offsets", _frozen(self.offsets, np.int64))
        set_(self, "blocks", _frozen(self.blocks, np.int32))
        set_(self, "input_length", _frozen(self.input_length, np.int64))
        set_(self, "output_length", _frozen(self.output_length, np.int64))
        set_(self, "timestamp", _frozen(self.timestamp, np.float64))
        n = self.input_length.shape[0]
        if self.offsets.shape != (n + 1,) or self.offsets[0] != 0 or self.offsets[-1] != self.blocks.shape[0]:
            raise ConfigError("offsets must have n+1 entries, start at 0 and end at len(blocks)")
        if np.any(np.diff(self.offsets) < 0):
            raise ConfigError("offsets must be non-decreasing")
        if self.output_length.shape != (n,) or self.timestamp.shape != (n,):
            raise ConfigError("every per-request column must have one entry per request")
        if self.blocks.size and (self.blocks.min() < 0 or self.blocks.max() >= self.num_blocks):
            raise ConfigError("block ids must lie in 0..num_blocks-1")
        if n and (self.input_length.min() < 0 or self.output_length.min() < 0):
            raise ConfigError("input_length and output_length must be non-negative")
        if not np.isfinite(self.timestamp).all():
            raise ConfigError("timestamps must be finite")
        if self.session is not None:
            raw = np.asarray(self.session)
            if raw.size and raw.dtype.kind not in "iu":
                raise ConfigError("session ids must be integers")
            set_(self, "session", _frozen(self.session, np.int64))
            if self.session.shape != (n,):
                raise ConfigError("every per-request column must have one entry per request")
            if n and self.session.min() < 0:
                raise ConfigError("session ids must be non-negative")
        if self.samples is not None:
            raw = np.asarray(self.samples)
            if raw.size and raw.dtype.kind not in "iu":
                raise ConfigError("samples (n) must be whole numbers")
            set_(self, "samples", _frozen(self.samples, np.int64))
            if self.samples.shape != (n,):
                raise ConfigError("every per-request column must have one entry per request")
            if n and self.samples.min() < 0:
                raise ConfigError("samples (n) must be non-negative (0: not given)")
        if self.beam_width is not None:
            if np.asarray(self.beam_width).size and np.asarray(self.beam_width).dtype.kind not in "iu":
                raise ConfigError("beam_width must be whole numbers")
            set_(self, "beam_width", _frozen(self.beam_width, np.int64))
            if self.beam_width.shape != (n,):
                raise ConfigError("every per-request column must have one entry per request")
            if n and self.beam_width.min() < 0:
                raise ConfigError("beam_width must be non-negative (0: not given)")
        if self.retention is not None and self.retention.num_requests != n:
            raise ConfigError("retention ranges must be given for every request (an empty list for none)")
        if self.dependencies is not None and self.dependencies.num_requests != n:
            raise ConfigError("dependencies must be given for every request (none for a request that waits for nothing)")

    @classmethod
    def from_requests(cls, requests, *, block_size: int | None = None, source: str = "<memory>") -> "Trace":
        """Build a trace from an iterable of ``(hash_ids, input_length)`` or
        ``(hash_ids, input_length, timestamp_ms, output_length)`` tuples.

        Hash ids may be any hashable values; they are remapped to dense ids in
        order of first appearance. Meant for tests and small hand-made traces.
        """
        ids: dict = {}
        offsets, blocks, lengths, stamps, outs = [0], [], [], [], []
        for i, req in enumerate(requests):
            if not isinstance(req, (tuple, list)) or not 2 <= len(req) <= 4 or isinstance(req[0], (str, bytes)):
                raise ConfigError(f"request {i}: expected (hash_ids, input_length[, timestamp_ms, output_length]), got {req!r}")
            hash_ids, length = req[0], req[1]
            try:
                hash_ids = list(hash_ids)
            except TypeError:
                raise ConfigError(f"request {i}: hash_ids must be a list of ids, got {hash_ids!r}") from None
            if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
                raise ConfigError(f"request {i}: input_length must be a whole number of tokens, got {length!r}")
            stamps.append(req[2] if len(req) > 2 else 0.0)
            outs.append(req[3] if len(req) > 3 else 0)
            blocks.extend(ids.setdefault(h, len(ids)) for h in hash_ids)
            offsets.append(len(blocks))
            lengths.append(length)
        return cls(
            offsets=np.array(offsets), blocks=np.array(blocks, dtype=np.int32),
            input_length=np.array(lengths, dtype=np.int64), output_length=np.array(outs, dtype=np.int64),
            timestamp=np.array(stamps, dtype=np.float64), num_blocks=len(ids),
            block_size=block_size, source=source, format="memory", original_ids=list(ids),
        )

    def __len__(self) -> int:
        return self.input_length.shape[0]

    @property
    def num_requests(self) -> int:
        return self.input_length.shape[0]

    @property
    def num_accesses(self) -> int:
        """Total block accesses (sum of every request's hash_ids length)."""
        return int(self.blocks.shape[0])

    @property
    def total_prompt_tokens(self) -> int:
        return exact_sum(self.input_length)

    def request_blocks(self, i: int) -> np.ndarray:
        """Dense block ids of request i, in order."""
        return self.blocks[self.offsets[i]:self.offsets[i + 1]]

    @cached_property
    def _misfits(self) -> dict:
        """block_size_mismatches per block size, computed once (every replay of a sweep reports it)."""
        return {}

    @cached_property
    def _first_access(self) -> tuple[np.ndarray, np.ndarray]:
        from .index import first_access

        return first_access(self.offsets, self.blocks, self.num_blocks)

    @property
    def first_seen(self) -> np.ndarray:
        """int64[num_blocks]: the flat position (index into `blocks`) of each block's first access
        (-1 for an id no request uses)."""
        return self._first_access[0]

    @property
    def predecessors(self) -> np.ndarray:
        """int32[num_blocks]: the block before each block in the request where it first appears
        (-1 for a request's first block). With chained hashes this is the block's chain parent."""
        return self._first_access[1]

    @property
    def num_sessions(self) -> int | None:
        """Distinct session ids, or None when the trace has no session column."""
        return None if self.session is None else int(np.unique(self.session).size)

    def nbytes(self) -> int:
        """Bytes held by the flat arrays."""
        arrays = (self.offsets, self.blocks, self.input_length, self.output_length, self.timestamp)
        return sum(a.nbytes for a in arrays) + (0 if self.session is None else self.session.nbytes) + \
            (0 if self.retention is None else self.retention.nbytes()) + \
            (0 if self.dependencies is None else self.dependencies.nbytes())

    def sorted_by_time(self) -> "Trace":
        """The same requests reordered stably by timestamp (ties keep file order)."""
        order = np.argsort(self.timestamp, kind="stable")
        if np.array_equal(order, np.arange(len(order))):
            return self
        return self.take(order)

    def take(self, order: np.ndarray) -> "Trace":
        """A trace of the requests at positions `order` (in that order); ids are not renumbered."""
        order = np.asarray(order, dtype=np.int64)
        offsets, index = ragged_take(self.offsets, order)
        return replace(
            self, offsets=offsets, blocks=self.blocks[index], input_length=self.input_length[order],
            output_length=self.output_length[order], timestamp=self.timestamp[order],
            session=None if self.session is None else self.session[order],
            retention=None if self.retention is None else self.retention.take(order),
            dependencies=None if self.dependencies is None else self.dependencies.take(order),
            samples=None if self.samples is None else self.samples[order],
            beam_width=None if self.beam_width is None else self.beam_width[order],
        )

    def summary(self) -> dict:
        """Counts that describe the trace (requests, tokens, blocks; sessions when known)."""
        out = {
            "source": self.source,
            "format": self.format,
            "num_requests": self.num_requests,
            "total_prompt_tokens": self.total_prompt_tokens,
            "num_block_accesses": self.num_accesses,
            "num_unique_blocks": int(self.num_blocks),
            "declared_block_size": self.block_size,
        }
        if self.session is not None:
            out["num_sessions"] = self.num_sessions
        if self.retention is not None:
            with_ranges = np.diff(self.retention.offsets) > 0
            out["requests_with_priorities"] = int(with_ranges.sum())
        if self.dependencies is not None:
            out["requests_waiting"] = int((~self.dependencies.roots()).sum())
        return out


MAX_REPORTED_REQUESTS = 20


def block_size_mismatches(trace, block_size: int) -> dict | None:
    """Requests whose number of hash ids does not fit their input_length at `block_size`, or None
    when every request fits: ``{"count", "first_requests"}`` (0-based positions, at most 20).

    A request fits when it has ceil(L / block_size) ids (every block hashed, the partial last one
    too, as Mooncake and Bailian traces) or floor(L / block_size) (full blocks only, as the Claude
    Code corpus). A trace at the wrong block size misfits almost everywhere: see
    :func:`likely_block_size`.
    """
    memo = trace._misfits
    if block_size not in memo:
        counts = np.diff(trace.offsets)
        length = np.asarray(trace.input_length)
        bad = np.flatnonzero((counts != -(-length // block_size)) & (counts != length // block_size))
        memo[block_size] = {"count": int(bad.size), "first_requests": bad[:MAX_REPORTED_REQUESTS].tolist()} if bad.size else None
    found = memo[block_size]
    return None if found is None else {"count": found["count"], "first_requests": list(found["first_requests"])}


def likely_block_size(trace) -> int | None:
    """The power-of-two block size (1 to 4096 tokens) that most requests fit, if at least 90% do."""
    n = len(trace)
    if n == 0:
        return None
    best, best_fit = None, 0
    for size in (2 ** k for k in range(13)):
        miss = block_size_mismatches(trace, size)
        fit = n - (miss["count"] if miss else 0)
        if fit > best_fit:
            best, best_fit = size, fit
    return best if best_fit >= 0.9 * n else None


def check_block_size(trace, block_size: int, given: bool = False) -> dict | None:
    """block_size_mismatches, after refusing (ConfigError) an inferred block size (the trace's
    declared one, or the default) that most requests misfit: the numbers would be silently wrong
    (a 16-token trace replayed at 512 shows a 99.75% hit rate instead of 73%). A block size the
    user `given` is theirs: the spec's min(k x block_size, L) defines such a trace, so it is
    replayed, with a warning that counts the requests that misfit it."""
    miss = block_size_mismatches(trace, block_size)
    if miss is None or 2 * miss["count"] <= len(trace):
        return miss
    guess = likely_block_size(trace)
    what = f"{miss['count']:,} of {len(trace):,} requests have a number of hash ids that does not fit their " \
           f"input_length at {block_size}-token blocks"
    if given:
        hint = f" (they fit {guess}-token blocks)" if guess is not None and guess != block_size else ""
        warnings.warn(f"{trace.source}: {what}{hint}; replayed at --block-size {block_size} as given, each request's "
                      f"hit capped at min(hit blocks x {block_size}, input_length)", stacklevel=2)
        return miss
    if guess is not None and guess != block_size:
        raise ConfigError(f"{trace.source}: the hash ids fit {guess}-token blocks, not {block_size}: pass "
                          f"--block-size {guess} ({what})")
    raise ConfigError(f"{trace.source}: {what} (expected ceil or floor of input_length / {block_size}): check --block-size")


#: The token-id rule's thresholds (check_not_token_ids).
TOKEN_CHECK_MIN_IDS = 16  # requests with fewer ids say nothing (a short prompt may repeat nothing)
TOKEN_CHECK_IDS_PER_TOKEN = 0.5  # at least one id per 2 tokens: blocks of at most 2 tokens


def token_like_requests(trace) -> tuple[int, int]:
    """(requests that look like token ids, requests judged): a request is judged when it has at
    least TOKEN_CHECK_MIN_IDS ids, and looks like token ids when it carries at least one id per
    2 tokens of its input_length *and* repeats an id. A block hash chained over every token before
    it never repeats within one prompt; a prompt's token ids always do (a 16-token stretch of text
    has repeated words, spaces, punctuation)."""
    counts = np.diff(trace.offsets)
    dense = (counts >= TOKEN_CHECK_MIN_IDS) & (counts >= TOKEN_CHECK_IDS_PER_TOKEN * np.asarray(trace.input_length))
    judged = int(np.count_nonzero(counts >= TOKEN_CHECK_MIN_IDS))
    rows = np.flatnonzero(dense)
    if rows.size == 0:
        return 0, judged
    # Repeats within a request: sort each candidate's ids and look for two equal neighbours.
    lengths = counts[rows]
    offsets, index = ragged_take(trace.offsets, rows)
    owner = np.repeat(np.arange(rows.size, dtype=np.int64), lengths)
    keys = owner * (int(trace.num_blocks) + 1) + trace.blocks[index]
    keys.sort()
    same = keys[1:] == keys[:-1]
    repeating = np.unique(keys[1:][same] // (int(trace.num_blocks) + 1)).size
    return int(repeating), judged


def check_not_token_ids(trace) -> None:
    """Refuse (ConfigError) a trace whose hash ids look like a prompt's token ids: more than half
    of the judged requests (token_like_requests) look like token ids. Replayed as block ids,
    token ids give wrong hits at any block size (a shared word counts as a shared prefix block);
    `kvreplay hash` turns a token log into chained block hash ids."""
    looking, judged = token_like_requests(trace)
    if judged == 0 or 2 * looking <= judged:
        return
    raise ConfigError(
        f"{trace.source}: the hash_ids look like token ids, not block hashes: {looking:,} of {judged:,} requests "
        f"with {TOKEN_CHECK_MIN_IDS}+ ids carry about one id per prompt token and repeat ids within the prompt, "
        "which a chained block hash never does. Token ids replayed as blocks give wrong hits at any block size: "
        "turn the token log into block hash ids with `kvreplay hash LOG.jsonl -o trace.jsonl --block-size 16` "
        "(it reads token_ids or prompt_token_ids per line); if these really are block hashes, pass "
        "--no-token-id-check")


@dataclass(frozen=True)
class Reader:
    """A trace format.

    read(path, *, on_invalid, keep_ids, **options) -> Trace, or a list of Traces for a file that
        holds several sessions (a Claude Code JSONL corpus), each merged as a file would be.
    sniff(keys) -> bool: does a file whose first record has these top-level keys (among
        `sniff_keys`) look like this format? Readers are asked in `rank` order (lowest first);
        the first that says yes reads the file.
    options: the load_trace options this reader takes beyond on_invalid and keep_ids.
    """

    name: str
    read: Callable
    sniff: Callable[[set], bool]
    sniff_keys: tuple[str, ...] = ()
    rank: int = 0
    options: tuple[str, ...] = ()
    summary: str = ""
