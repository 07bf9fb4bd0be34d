"""A synthetic token log of multi-turn chats whose template may put a timestamp inside the system
prompt (``kvreplay synth --token-log``): the prompt-structure problem kvreplay diagnose finds.

Sessions arrive as a Poisson process (``arrival_rate`` per second) and pick one of
``system_prompts`` system prompts (Zipf popularity, exponent 1.1) of ``system_tokens`` tokens.
Turn t of a session (``turns`` on average, geometric) comes a think time after the previous
(exponential, mean ``think_time`` s) and sends the system prompt, the history (every earlier
message and reply) and a new message (``message_tokens`` on average); its reply
(``reply_tokens`` on average) is its output and joins the history. Lengths are exponential,
at least 1 token.

The template renders the request's arrival time as ``YYYY-MM-DD HH:MM`` (16 tokens: one per
character, from 2024-05-01 00:00): ``timestamp_at=k`` inserts it after the system prompt's k-th
token, ``"end"`` puts it after the new message (the restructured template), None leaves it
out. Token ids: 0-9 the digits, 10 ``-``, 11 ``:``, 12 a space, 13 and up words
(``vocabulary()`` maps them back to text).
"""

from __future__ import annotations

import datetime

import numpy as np

from ..errors import ConfigError
from .token_log import TokenLog

DIGITS, DASH, COLON, SPACE = 0, 10, 11, 12
FIRST_WORD = 13
VOCABULARY = 5000
EPOCH = datetime.datetime(2024, 5, 1)


def vocabulary() -> dict[int, str]:
    """Token id -> its text."""
    words = {i: str(i) for i in range(10)}
    words.update({DASH: "-", COLON: ":", SPACE: " "})
    words.update({i: f" w{i}" for i in range(FIRST_WORD, VOCABULARY)})
    return words


def timestamp_tokens(seconds: float) -> list[int]:
    """``YYYY-MM-DD HH:MM`` of EPOCH + seconds, one token per character."""
    text = (EPOCH + datetime.timedelta(seconds=float(seconds))).strftime("%Y-%m-%d %H:%M")
    code = {"-": DASH, ":": COLON, " ": SPACE}
    return [code[c] if c in code else DIGITS + int(c) for c in text]


def _check(name: str, value, *, integer: bool = False) -> None:
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.integer, np.floating))
    if isinstance(value, bool) or not ok or not value > 0 or value != value or value == float("inf"):
        raise ConfigError(f"{name} must be a positive {'whole number' if integer else 'number'}, got {value!r}")


def token_log(requests: int = 2000, *, timestamp_at=20, system_prompts: int = 4, system_tokens: int = 2000,
              turns: float = 6.0, message_tokens: float = 150.0, reply_tokens: float = 200.0,
              arrival_rate: float = 0.02, think_time: float = 120.0, seed: int = 0) -> TokenLog:
    """`requests` chat requests as a TokenLog (module doc); deterministic for a seed."""
    for name, value in (("requests", requests), ("system_prompts", system_prompts), ("system_tokens", system_tokens)):
        _check(name, value, integer=True)
    for name, value in (("turns", turns), ("message_tokens", message_tokens), ("reply_tokens", reply_tokens),
                        ("arrival_rate", arrival_rate), ("think_time", think_time)):
        _check(name, value)
    if not (timestamp_at is None or timestamp_at == "end" or (isinstance(timestamp_at, (int, np.integer))
                                                              and not isinstance(timestamp_at, bool)
                                                              and 0 <= timestamp_at <= system_tokens)):
        raise ConfigError(f"timestamp_at must be a token position in the system prompt (0..{system_tokens}), "
                          f"'end' or None, got {timestamp_at!r}")
    rng = np.random.default_rng(seed)
    words = lambda n: rng.integers(FIRST_WORD, VOCABULARY, size=max(1, int(n))).tolist()  # noqa: E731
    systems = [words(system_tokens) for _ in range(system_prompts)]
    weights = 1.0 / np.arange(1, system_prompts + 1) ** 1.1
    weights /= weights.sum()
    events = []  # (arrival s, session, prompt tokens, reply tokens)
    start, session = 0.0, 0
    while len(events) < requests:
        start += rng.exponential(1.0 / arrival_rate)
        system = systems[int(rng.choice(system_prompts, p=weights))]
        history: list[int] = []
        t = start
        for _ in range(int(rng.geometric(1.0 / turns))):
            message = words(rng.exponential(message_tokens))
            reply = words(rng.exponential(reply_tokens))
            events.append((t, session, system, history + message, len(reply)))
            history = history + message + reply
            t += rng.exponential(think_time)
        session += 1
    events.sort(key=lambda e: (e[0], e[1]))
    events = events[:requests]
    tokens = []
    for t, _, system, body, _ in events:
        stamp = timestamp_tokens(t) if timestamp_at is not None else []
        if timestamp_at is None or timestamp_at == "end":
            prompt = system + body + stamp
        else:
            prompt = system[:timestamp_at] + stamp + system[timestamp_at:] + body
        tokens.append(np.asarray(prompt, dtype=np.int64))
    n = len(events)
    return TokenLog(source=f"synthetic token log (seed {seed}, timestamp at {timestamp_at})", tokens=tokens,
                    timestamp=np.asarray([1000.0 * e[0] for e in events]),
                    output_length=np.asarray([e[4] for e in events], dtype=np.int64), namespace=[""] * n,
                    lines=np.arange(1, n + 1, dtype=np.int64))
