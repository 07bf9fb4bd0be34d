"""What each request of a trace waits for before it is sent: the links closed-loop arrivals follow
(docs/sessions.md).

A conversation's next turn is typed after the previous answer arrives; an agent's next call
follows its previous call's answer (and the tool it ran), and waits for the subagents whose
results it reads. A format that records this (Claude Code's streams and subagents, Bailian's
parent chat) gives each request its predecessors; a trace without it can have them inferred
(trace/sessions.py).

Stored flat, as the trace's blocks are: request i waits for the requests at positions
``after[offsets[i]:offsets[i+1]]`` of the same trace (none: it starts a session, or a stream
nothing precedes). ``think_ms[i]`` is the recorded time between the end of the latest of them
(its last output token) and request i's send, in milliseconds; NaN where the trace does not
record when its predecessor ended (then the serving simulator estimates it: serving/closed.py).
``rule`` says in words how the links were found, for every output that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True, eq=False)
class Dependencies:
    """Every request's predecessors and think time, flat (see the module docstring)."""

    offsets: np.ndarray
    after: np.ndarray
    think_ms: np.ndarray
    rule: str = ""

    def __post_init__(self):
        for name, dtype in (("offsets", np.int64), ("after", np.int64), ("think_ms", np.float64)):
            a = np.array(getattr(self, name), dtype=dtype)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        n = self.offsets.shape[0] - 1
        m = self.after.shape[0]
        if n < 0 or self.offsets[0] != 0 or self.offsets[-1] != m or np.any(np.diff(self.offsets) < 0):
            raise ConfigError("dependencies: malformed offsets")
        if self.think_ms.shape != (n,):
            raise ConfigError("dependencies: think_ms must have one entry per request")
        if m and (self.after.min() < 0 or self.after.max() >= n):
            raise ConfigError("dependencies: a request waits for a request the trace does not have")
        if m and np.any(self.after == np.repeat(np.arange(n), np.diff(self.offsets))):
            raise ConfigError("dependencies: a request waits for itself")

    @classmethod
    def from_lists(cls, after: list, think_ms, rule: str = "") -> "Dependencies":
        """From one list of predecessor positions per request, and the think times (ms, NaN: unknown)."""
        counts = [len(a) for a in after]
        offsets = np.zeros(len(after) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.array([p for a in after for p in a], dtype=np.int64)
        return cls(offsets, flat, np.asarray(think_ms, dtype=np.float64), rule)

    @classmethod
    def chains(cls, session: np.ndarray, rule: str) -> "Dependencies":
        """Each request waits for the previous request of its session (in trace order); no think
        time recorded."""
        session = np.asarray(session, dtype=np.int64)
        n = session.size
        order = np.argsort(session, kind="stable")
        same = np.r_[False, session[order][1:] == session[order][:-1]]
        prev = np.full(n, -1, dtype=np.int64)
        prev[order[same]] = order[np.flatnonzero(same) - 1]
        has = prev >= 0
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(has, out=offsets[1:])
        return cls(offsets, prev[has], np.full(n, np.nan), rule)

    @property
    def num_requests(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def num_links(self) -> int:
        return int(self.after.shape[0])

    def predecessors(self, i: int) -> np.ndarray:
        return self.after[self.offsets[i]:self.offsets[i + 1]]

    def roots(self) -> np.ndarray:
        """Requests that wait for nothing (bool per request)."""
        return np.diff(self.offsets) == 0

    def take(self, order) -> "Dependencies":
        """The links of the requests at positions `order`, in that order: positions renumbered, a
        link to a request not taken dropped (a request left with none starts at its own time)."""
        from .model import ragged_take

        order = np.asarray(order, dtype=np.int64)
        n = self.num_requests
        new_pos = np.full(n, -1, dtype=np.int64)
        new_pos[order] = np.arange(order.size)
        offsets, index = ragged_take(self.offsets, order)
        after = new_pos[self.after[index]]
        keep = after >= 0
        owner = np.repeat(np.arange(order.size), np.diff(offsets))
        counts = np.bincount(owner[keep], minlength=order.size)
        offsets = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Dependencies(offsets, after[keep], self.think_ms[order], self.rule)

    @staticmethod
    def concat(parts: list["Dependencies | None"], sizes: list[int]) -> "Dependencies | None":
        """The links of traces put one after another (positions shifted; a trace without any: no
        links, no think times)."""
        if all(p is None for p in parts):
            return None
        offsets, after, think, base, shift = [np.zeros(1, dtype=np.int64)], [], [], 0, 0
        rules = []
        for part, n in zip(parts, sizes):
            if part is None:
                part = Dependencies(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.full(n, np.nan))
            elif part.rule and part.rule not in rules:
                rules.append(part.rule)
            offsets.append(part.offsets[1:] + base)
            after.append(part.after + shift)
            think.append(part.think_ms)
            base += part.num_links
            shift += n
        return Dependencies(np.concatenate(offsets), np.concatenate(after), np.concatenate(think), "; ".join(rules))

    def nbytes(self) -> int:
        return self.offsets.nbytes + self.after.nbytes + self.think_ms.nbytes
