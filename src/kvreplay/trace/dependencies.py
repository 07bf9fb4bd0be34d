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
A format whose links carry their own delays (Agentic Mooncake) gives ``delay_ms`` per link (NaN:
the request's think time) and ``on_send`` per link (the link fires when its predecessor is sent,
not when it ends: a subagent started beside a running request). ``rule`` says in words how the
links were found, for every output that uses them.
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
    delay_ms: np.ndarray | None = None  # per link (NaN: the request's think_ms); None: every link's is
    on_send: np.ndarray | None = None  # per link: fires on its predecessor's send; None: every link on its end

    def __post_init__(self):
        for name, dtype in (("offsets", np.int64), ("after", np.int64), ("think_ms", np.float64),
                            ("delay_ms", np.float64), ("on_send", bool)):
            if getattr(self, name) is None:
                continue
            a = np.array(getattr(self, name), dtype=dtype)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        n = self.offsets.shape[0] - 1
        m = self.after.shape[0]
        for name in ("delay_ms", "on_send"):
            if getattr(self, name) is not None and getattr(self, name).shape != (m,):
                raise ConfigError(f"dependencies: {name} must have one entry per link")
        if n < 0 or self.offsets[0] != 0 or self.offsets[-1] != m or np.any(np.diff(self.offsets) < 0):
            raise ConfigError("dependencies: malformed offsets")
        if self.think_ms.shape != (n,):
            raise ConfigError("dependencies: think_ms must have one entry per request")
        if m and (self.after.min() < 0 or self.after.max() >= n):
            raise ConfigError("dependencies: a request waits for a request the trace does not have")
        if m and np.any(self.after == np.repeat(np.arange(n), np.diff(self.offsets))):
            raise ConfigError("dependencies: a request waits for itself")

    @classmethod
    def from_lists(cls, after: list, think_ms, rule: str = "", delay_ms: list | None = None,
                   on_send: list | None = None) -> "Dependencies":
        """From one list of predecessor positions per request, and the think times (ms, NaN:
        unknown); delay_ms / on_send: one list per request, a value per link, when the links
        carry them."""
        counts = [len(a) for a in after]
        offsets = np.zeros(len(after) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.array([p for a in after for p in a], dtype=np.int64)
        per_link = lambda lists, dtype: None if lists is None else np.array(  # noqa: E731
            [v for values in lists for v in values], dtype=dtype)
        return cls(offsets, flat, np.asarray(think_ms, dtype=np.float64), rule, per_link(delay_ms, np.float64),
                   per_link(on_send, bool))

    def link_delay_ms(self) -> np.ndarray:
        """Per link: its delay (its own, else its request's think time; NaN: neither recorded)."""
        owner = np.repeat(np.arange(self.num_requests), np.diff(self.offsets))
        own = self.think_ms[owner]
        return own if self.delay_ms is None else np.where(np.isnan(self.delay_ms), own, self.delay_ms)

    def link_on_send(self) -> np.ndarray:
        return np.zeros(self.num_links, dtype=bool) if self.on_send is None else self.on_send

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
        link = lambda a: None if a is None else a[index][keep]  # noqa: E731
        return Dependencies(offsets, after[keep], self.think_ms[order], self.rule, link(self.delay_ms),
                            link(self.on_send))

    @staticmethod
    def concat(parts: list["Dependencies | None"], sizes: list[int]) -> "Dependencies | None":
        """The links of traces put one after another (positions shifted; a trace without any: no
        links, no think times)."""
        if all(p is None for p in parts):
            return None
        offsets, after, think, delay, on_send, base, shift = [np.zeros(1, dtype=np.int64)], [], [], [], [], 0, 0
        rules = []
        per_link = any(p is not None and (p.delay_ms is not None or p.on_send is not None) for p in parts)
        for part, n in zip(parts, sizes):
            if part is None:
                part = Dependencies(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.full(n, np.nan))
            elif part.rule and part.rule not in rules:
                rules.append(part.rule)
            offsets.append(part.offsets[1:] + base)
            after.append(part.after + shift)
            think.append(part.think_ms)
            delay.append(np.full(part.num_links, np.nan) if part.delay_ms is None else part.delay_ms)
            on_send.append(part.link_on_send())
            base += part.num_links
            shift += n
        return Dependencies(np.concatenate(offsets), np.concatenate(after), np.concatenate(think), "; ".join(rules),
                            np.concatenate(delay) if per_link else None, np.concatenate(on_send) if per_link else None)

    def nbytes(self) -> int:
        return sum(0 if a is None else a.nbytes for a in (self.offsets, self.after, self.think_ms, self.delay_ms,
                                                          self.on_send))
