"""Synthetic workloads for what-if studies: `synth()` (knobs), `synth_like()` (fitted to a trace).

Blocks are identified the way engines identify them: a block's id is a function
of its own content and the id of the block before it, so requests that share
their first k blocks of content share their first k block ids.

The model (docs/synth.md has the details): sessions arrive as a Poisson process. Each
is a chat, a RAG session or an agent loop. Its token stream is a system prompt (one of
``prefixes``, Zipf-popular; none for sessions fitted as such), then for RAG a document
(one of ``docs``, Zipf-popular), then the session's own content. Request t of a session
sends the first L_t tokens of the stream: L_1 = prompt + document + first message, and
L_t = L_{t-1} + previous reply + new message (chat/RAG: a user message; agent: a tool
output), after a think time. Block j of a request covers tokens [j*B, min((j+1)*B, L));
its content is named by the segment that owns its last token and its end position, so
requests share a block exactly when they share every token up to its end. Ids are
chained 64-bit hashes (splitmix64), renumbered densely in order of first appearance.
Everything is vectorised over sessions, requests and block positions.
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass, field, replace

from .. import native
from ..errors import ConfigError
from ..progress import tell
from ..units import ms_arg, seconds_arg
from .model import Trace, resolve_block_size


def chat_workload(
    num_conversations: int = 300,
    num_system_prompts: int = 8,
    turns: tuple[int, int] = (1, 8),
    block_size: int = 512,
    seed: int = 0,
) -> Trace:
    """Multi-turn chats over a few shared system prompts.

    System prompts are picked with Zipf-like popularity (a few are very common);
    each conversation resends its whole history every turn and appends a new user
    message; conversations interleave in time. Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    ids: dict[tuple[int, int], int] = {}

    def chain(content: list[int]) -> list[int]:
        out, prev = [], -1
        for c in content:
            prev = ids.setdefault((prev, c), len(ids))
            out.append(prev)
        return out

    next_content = iter(range(10**12))
    system = [[next(next_content) for _ in range(int(rng.integers(2, 9)))] for _ in range(num_system_prompts)]
    popularity = 1.0 / np.arange(1, num_system_prompts + 1) ** 1.1
    popularity /= popularity.sum()
    events = []  # (time_ms, hash ids, input tokens, output tokens)
    for _ in range(num_conversations):
        t = float(rng.uniform(0, 600_000))
        history = list(system[int(rng.choice(num_system_prompts, p=popularity))])
        for _ in range(int(rng.integers(turns[0], turns[1] + 1))):
            history += [next(next_content) for _ in range(int(rng.integers(1, 4)))]
            tokens = len(history) * block_size - int(rng.integers(0, block_size))
            events.append((t, chain(history), tokens, int(rng.integers(50, 600))))
            history.append(next(next_content))  # the reply becomes part of the next prompt
            t += float(rng.exponential(30_000))
    events.sort(key=lambda e: e[0])
    offsets = np.zeros(len(events) + 1, dtype=np.int64)
    np.cumsum([len(e[1]) for e in events], out=offsets[1:])
    return Trace(
        offsets=offsets,
        blocks=np.fromiter((b for e in events for b in e[1]), dtype=np.int32, count=int(offsets[-1])),
        input_length=np.array([e[2] for e in events], dtype=np.int64),
        output_length=np.array([e[3] for e in events], dtype=np.int64),
        timestamp=np.array([e[0] for e in events], dtype=np.float64),
        num_blocks=len(ids),
        block_size=block_size,
        source=f"synthetic chat workload (seed {seed})",
        format="synthetic",
    )


# ---------------------------------------------------------------------------------------------
# The generator

KINDS = ("chat", "rag", "agent")
DEFAULT_MIX = {"chat": 0.6, "rag": 0.2, "agent": 0.2}
MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Dist:
    """A distribution of non-negative integers (tokens, milliseconds, turns).

    kind: "lognormal" (a: median, b: sigma), "geometric" (a: mean >= 1, values 1, 2, ...),
    "exponential" (a: mean), "constant" (a) or "empirical" (values: resampled uniformly).
    Samples are rounded and clipped to [lo, hi].
    """

    kind: str
    a: float = 0.0
    b: float = 0.0
    lo: int = 0
    hi: int = 2**40
    values: np.ndarray | None = field(default=None, repr=False)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.kind == "lognormal":
            x = self.a * np.exp(self.b * rng.standard_normal(size))
        elif self.kind == "geometric":
            x = rng.geometric(min(1.0, 1.0 / self.a), size).astype(np.float64) if size else np.zeros(0)
        elif self.kind == "exponential":
            x = rng.exponential(self.a, size) if self.a > 0 else np.zeros(size)
        elif self.kind == "constant":
            x = np.full(size, float(self.a))
        elif self.kind == "empirical":
            x = self.values[rng.integers(0, self.values.size, size)].astype(np.float64)
        else:  # pragma: no cover - constructed only here
            raise ValueError(self.kind)
        return np.clip(np.rint(x), self.lo, self.hi).astype(np.int64)

    def mean(self) -> float:
        return float({"lognormal": self.a * np.exp(self.b ** 2 / 2), "geometric": self.a, "exponential": self.a,
                      "constant": self.a}.get(self.kind, np.mean(self.values) if self.values is not None else 0.0))


@dataclass(frozen=True)
class Kind:
    """How one kind of session behaves. first: the first message (tokens); message: what each
    later turn appends besides the previous reply; reply_in_history: whether the reply is
    appended too (a fitted model folds it into `message`); output: reply tokens; turns:
    requests per session; think: ms between a reply and the next request."""

    first: Dist
    message: Dist
    output: Dist
    turns: Dist
    think: Dist
    reply_in_history: bool = True
    uses_doc: bool = False


@dataclass(frozen=True)
class Model:
    """Everything the generator draws from. Token lengths are in tokens, times in ms."""

    kinds: dict  # name -> Kind
    mix: dict  # name -> probability
    session_rate_per_ms: float
    prompt_tokens: np.ndarray  # per system prompt
    prompt_probs: np.ndarray  # their popularity (sums to 1 - no_prompt)
    doc_tokens: np.ndarray
    doc_probs: np.ndarray
    no_prompt: float = 0.0  # probability that a session starts with no shared prompt
    burst: float = 1.0  # mean sessions that start together (geometric sizes; 1: one at a time)
    max_context: int | None = None  # a session ends before a request's prompt + reply would pass it


def zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return p / p.sum()


def parse_mix(mix) -> dict:
    """"chat=0.6,rag=0.2,agent=0.2" (or a dict) -> normalised {kind: probability}."""
    if isinstance(mix, str):
        out = {}
        for part in mix.split(","):
            if not part.strip():
                continue
            name, eq, value = part.partition("=")
            name = name.strip().lower()
            if not eq:
                raise ConfigError(f"mix: expected kind=weight, got {part.strip()!r} (kinds: {', '.join(KINDS)})")
            try:
                out[name] = float(value)
            except ValueError:
                raise ConfigError(f"mix: {name}: expected a number, got {value.strip()!r}") from None
        mix = out
    mix = dict(mix)
    for name, w in mix.items():
        if name not in KINDS:
            raise ConfigError(f"mix: unknown session kind {name!r} (kinds: {', '.join(KINDS)})")
        if not np.isfinite(w) or w < 0:
            raise ConfigError(f"mix: {name}: weight must be a non-negative number, got {w}")
    total = sum(mix.values())
    if total <= 0:
        raise ConfigError("mix: at least one weight must be positive")
    return {k: mix.get(k, 0.0) / total for k in KINDS if mix.get(k, 0.0) > 0}


def _positive(name: str, value, integer: bool = False, allow_zero: bool = False):
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and np.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok or value < 0 or (value == 0 and not allow_zero):
        what = "a whole number" if integer else "a number"
        raise ConfigError(f"{name} must be {what} {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Knobs:
    """The knobs of `synth`'s model (see its docstring): `model()` checks them and draws the model."""

    arrival_rate: float = 1.0
    prefix_scale: float = 1.0
    prefixes: int = 8
    docs: int = 200
    turns: float = 4.0
    agent_steps: float = 10.0
    mix: object = "chat=0.6,rag=0.2,agent=0.2"
    think_time: float = 30.0
    zipf: float = 1.1
    seed: int = 0
    agent_tool_tokens: float = 800.0
    agent_reply_tokens: float = 150.0
    burst: float = 1.0
    max_context: int | None = None

    def checked(self) -> "Knobs":
        """The knobs as numbers of their kind, or ConfigError naming the first one out of range."""
        arrival_rate = _positive("arrival_rate", self.arrival_rate)
        agent_tool_tokens = _positive("agent_tool_tokens", self.agent_tool_tokens)
        agent_reply_tokens = _positive("agent_reply_tokens", self.agent_reply_tokens)
        burst = _positive("burst", self.burst)
        if burst < 1:
            raise ConfigError(f"burst is a mean number of sessions starting together, at least 1, got {burst}")
        max_context = None if self.max_context is None else _positive("max_context", self.max_context, integer=True)
        prefix_scale = _positive("prefix_scale", self.prefix_scale)
        prefixes = _positive("prefixes", self.prefixes, integer=True)
        docs = _positive("docs", self.docs, integer=True, allow_zero=True)
        turns = _positive("turns", self.turns)
        agent_steps = _positive("agent_steps", self.agent_steps)
        think_time = _positive("think_time", self.think_time, allow_zero=True)
        zipf = _positive("zipf", self.zipf, allow_zero=True)
        if turns < 1 or agent_steps < 1:
            raise ConfigError(f"turns and agent_steps are means of at least one request, got {turns}, {agent_steps}")
        mix = parse_mix(self.mix)
        if "rag" in mix and docs == 0:
            raise ConfigError("mix has rag sessions but docs is 0")
        return replace(self, arrival_rate=arrival_rate, prefix_scale=prefix_scale, prefixes=prefixes, docs=docs,
                       turns=turns, agent_steps=agent_steps, mix=mix, think_time=think_time, zipf=zipf,
                       agent_tool_tokens=agent_tool_tokens, agent_reply_tokens=agent_reply_tokens, burst=burst,
                       max_context=max_context)

    def model(self) -> Model:
        """The knob model. Prompt and document lengths are drawn here, from their own stream of
        `seed`, so changing --requests or --mix keeps them."""
        k = self.checked()
        rng = np.random.default_rng([k.seed, 1])
        prompt_base = Dist("lognormal", 1200, 0.6, 64, 16_000).sample(rng, k.prefixes)
        doc_base = Dist("lognormal", 3000, 0.7, 128, 64_000).sample(rng, k.docs)
        kinds = k.kinds()
        return Model(
            kinds={name: kinds[name] for name in k.mix}, mix=k.mix, session_rate_per_ms=k.arrival_rate / 1000.0,
            prompt_tokens=np.maximum(1, np.rint(prompt_base * k.prefix_scale)).astype(np.int64),
            prompt_probs=zipf_probs(k.prefixes, k.zipf),
            doc_tokens=np.maximum(1, np.rint(doc_base * k.prefix_scale)).astype(np.int64),
            doc_probs=zipf_probs(k.docs, k.zipf) if k.docs else np.zeros(0), burst=k.burst, max_context=k.max_context,
        )

    def kinds(self) -> dict:
        """Each session kind's distributions (prompt, messages, replies, turns, think time)."""
        think_ms = self.think_time * 1000.0
        return {
            "chat": Kind(first=Dist("lognormal", 400, 1.0, 1, 16_000), message=Dist("lognormal", 200, 1.0, 1, 8_000),
                         output=Dist("lognormal", 300, 0.8, 1, 4_000),
                         turns=Dist("geometric", self.turns, lo=1, hi=10_000), think=Dist("exponential", think_ms)),
            "rag": Kind(first=Dist("lognormal", 100, 0.8, 1, 4_000), message=Dist("lognormal", 100, 0.8, 1, 4_000),
                        output=Dist("lognormal", 300, 0.8, 1, 4_000),
                        turns=Dist("geometric", self.turns, lo=1, hi=10_000), think=Dist("exponential", think_ms),
                        uses_doc=True),
            "agent": Kind(first=Dist("lognormal", 500, 1.0, 1, 16_000),
                          message=Dist("lognormal", self.agent_tool_tokens, 1.0, 1, 32_000),
                          output=Dist("lognormal", self.agent_reply_tokens, 0.8, 1, 4_000),
                          turns=Dist("geometric", self.agent_steps, lo=1, hi=10_000),
                          think=Dist("exponential", think_ms / 10.0)),
        }


def model_from_knobs(**knobs) -> Model:
    """The knob model of `synth` (see its docstring and Knobs): model_from_knobs(prefixes=1, seed=4)."""
    return Knobs(**knobs).model()


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wraps modulo 2**64)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _segment_cumsum(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sums that restart at each segment (segments are consecutive, starting at `starts`)."""
    total = np.cumsum(values)
    before = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0)
    return total - np.repeat(before, counts)


def _sessions(model: Model, rng: np.random.Generator, num_sessions: int) -> dict:
    names = list(model.mix)
    kind = rng.choice(len(names), num_sessions, p=np.array([model.mix[k] for k in names]))
    if model.burst > 1:
        # bursts arrive as a Poisson process, each of a geometric number of sessions (mean `burst`)
        sizes = rng.geometric(1.0 / model.burst, num_sessions)
        start = np.repeat(np.cumsum(rng.exponential(model.burst / model.session_rate_per_ms, num_sessions)),
                          sizes)[:num_sessions]
    else:
        start = np.cumsum(rng.exponential(1.0 / model.session_rate_per_ms, num_sessions))
    prompt = np.full(num_sessions, -1, dtype=np.int64)
    if model.prompt_tokens.size:
        has = rng.random(num_sessions) >= model.no_prompt
        probs = model.prompt_probs / model.prompt_probs.sum()
        prompt[has] = rng.choice(model.prompt_tokens.size, int(has.sum()), p=probs)
    doc = np.full(num_sessions, -1, dtype=np.int64)
    turns = np.zeros(num_sessions, dtype=np.int64)
    first = np.zeros(num_sessions, dtype=np.int64)
    for k, name in enumerate(names):
        spec = model.kinds[name]
        sel = np.flatnonzero(kind == k)
        turns[sel] = spec.turns.sample(rng, sel.size)
        first[sel] = spec.first.sample(rng, sel.size)
        if spec.uses_doc and model.doc_tokens.size:
            doc[sel] = rng.choice(model.doc_tokens.size, sel.size, p=model.doc_probs)
    turns = np.maximum(turns, 1)
    prompt_len = np.where(prompt >= 0, model.prompt_tokens[np.maximum(prompt, 0)] if model.prompt_tokens.size else 0, 0)
    doc_len = np.where(doc >= 0, model.doc_tokens[np.maximum(doc, 0)] if model.doc_tokens.size else 0, 0)
    return {"kind": kind, "start": start, "prompt": prompt, "doc": doc, "turns": turns, "first": first,
            "prompt_len": prompt_len.astype(np.int64), "doc_len": doc_len.astype(np.int64), "names": names}


def _requests(model: Model, rng: np.random.Generator, s: dict) -> dict:
    turns = s["turns"]
    n = int(turns.sum())
    sess = np.repeat(np.arange(turns.size), turns)
    starts = np.zeros(turns.size, dtype=np.int64)
    np.cumsum(turns[:-1], out=starts[1:])
    turn = np.arange(n) - starts[sess]
    kind = s["kind"][sess]
    message = np.zeros(n, dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    think = np.zeros(n, dtype=np.int64)
    reply_in = np.zeros(n, dtype=bool)
    for k, name in enumerate(s["names"]):
        spec = model.kinds[name]
        sel = np.flatnonzero(kind == k)
        message[sel] = spec.message.sample(rng, sel.size)
        output[sel] = spec.output.sample(rng, sel.size)
        think[sel] = spec.think.sample(rng, sel.size)
        reply_in[sel] = spec.reply_in_history
    later = turn > 0
    previous_output = np.where(later, output[np.maximum(np.arange(n) - 1, 0)], 0)
    added = np.where(later, message + np.where(reply_in, previous_output, 0), s["first"][sess])
    length = s["prompt_len"][sess] + s["doc_len"][sess] + _segment_cumsum(added, starts, turns)
    # A request leaves after its reply; the think time counts from the request's arrival.
    time = s["start"][sess] + _segment_cumsum(np.where(later, think, 0).astype(np.float64), starts, turns)
    return {"session": sess, "turn": turn, "length": np.maximum(length, 1), "output": output, "time": np.floor(time)}


def _within_context(r: dict, turns: np.ndarray, max_context: int) -> dict:
    """The requests before the first of their session whose prompt + reply would pass
    `max_context` tokens (the session ends there, as an agent whose context is full starts over)."""
    starts = np.zeros(turns.size, dtype=np.int64)
    np.cumsum(turns[:-1], out=starts[1:])
    over = (r["length"] + r["output"] > max_context).astype(np.int64)
    keep = _segment_cumsum(over, starts, turns) == 0
    return {k: v[keep] for k, v in r.items()}


def _block_ids(length, prompt_len, doc_prompt, doc_len, doc, session, block_size: int, progress=None):
    """(offsets, dense blocks, num_blocks) for requests with these lengths and stream owners."""
    nb = -(-length // block_size)
    offsets = np.zeros(length.size + 1, dtype=np.int64)
    np.cumsum(nb, out=offsets[1:])
    total = int(offsets[-1])
    req = np.repeat(np.arange(length.size), nb)
    pos = np.arange(total, dtype=np.int64) - offsets[req]
    end = np.minimum((pos + 1) * block_size, length[req])
    sys_end = prompt_len[req]
    doc_end = sys_end + doc_len[req]
    u = np.uint64
    # The segment owning a block's last token names its content (with the block's end position).
    owner = _mix64(u(3 << 60) | session[req].astype(u))
    in_doc = end <= doc_end
    owner[in_doc] = _mix64(_mix64(u(2 << 60) | (doc_prompt[req][in_doc] + 1).astype(u)) ^ doc[req][in_doc].astype(u))
    in_sys = end <= sys_end
    owner[in_sys] = _mix64(u(1 << 60) | doc_prompt[req][in_sys].astype(u))
    content = _mix64(owner ^ _mix64(end.astype(u)))
    del owner, in_doc, in_sys, sys_end, doc_end, pos, req
    # Chain: h_j = mix(h_{j-1} rotated ^ content_j), one block position at a time over every
    # request that long (requests ordered by block count, longest first, so each step is a prefix).
    order = np.argsort(-nb, kind="stable")
    first = offsets[:-1][order]
    alive = np.searchsorted(-nb[order], -np.arange(1, int(nb.max(initial=0)) + 1), side="right")
    chain = np.empty(total, dtype=u)
    every = max(1, alive.size // 100)
    for j, count in enumerate(alive):
        if j % every == 0:
            tell(progress, j, alive.size, "block positions hashed")
        idx = first[:count] + j
        prev = chain[idx - 1] if j else np.full(count, u(0x243F6A8885A308D3))
        chain[idx] = _mix64(((prev << u(17)) | (prev >> u(47))) ^ content[idx])
    tell(progress, alive.size, alive.size, "block positions hashed")
    del content
    uniq, first_at, inverse = np.unique(chain, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int32)
    rank[np.argsort(first_at, kind="stable")] = np.arange(uniq.size, dtype=np.int32)
    return offsets, rank[inverse.reshape(-1)], int(uniq.size)


def generate(model: Model, num_requests: int, *, block_size: int = 512, seed: int = 0, source: str = "synthetic",
             system_priority: int | None = None, system_priority_ms: float | None = None, progress=None) -> Trace:
    """`num_requests` requests from `model`: the first ones in time of a stream of sessions.
    system_priority: each request's system-prompt tokens get this KV retention priority (0-100,
    for a duration of system_priority_ms when given; trace/retention.py); None: no priorities.
    progress: a kvreplay.progress callback, told ``(done, total, "block positions hashed")``."""
    num_requests = _positive("requests", num_requests, integer=True)
    block_size = _positive("block_size", block_size, integer=True)
    mean_turns = sum(p * model.kinds[k].turns.mean() for k, p in model.mix.items())
    sessions = int(num_requests / max(mean_turns, 1.0) * 1.25) + 16
    while True:
        rng = np.random.default_rng([seed, 0])
        s = _sessions(model, rng, sessions)
        r = _requests(model, rng, s)
        if model.max_context is not None:
            r = _within_context(r, s["turns"], model.max_context)
        # Every request before the last session's start is complete; keep the first N of those.
        complete = np.count_nonzero(r["time"] <= s["start"][-1])
        if complete >= num_requests:
            break
        sessions *= 2
    order = np.lexsort((r["turn"], r["session"], r["time"]))[:num_requests]
    sess = r["session"][order]
    length = r["length"][order]
    offsets, blocks, num_blocks = _block_ids(
        length, s["prompt_len"][sess], s["prompt"][sess], s["doc_len"][sess], s["doc"][sess], sess.astype(np.int64),
        block_size, progress)
    # Sessions numbered 0..S-1 in order of their first request.
    uniq, first_at, inverse = np.unique(sess, return_index=True, return_inverse=True)
    sess_rank = np.empty(uniq.size, dtype=np.int64)
    sess_rank[np.argsort(first_at, kind="stable")] = np.arange(uniq.size)
    time = r["time"][order]
    retention = None
    if system_priority is not None or system_priority_ms is not None:
        from .retention import Retention

        from .retention import check_range

        if system_priority is None:
            raise ConfigError("system_priority_ms (--system-priority-ms) needs system_priority (--system-priority), "
                              "the priority it lasts for")
        wrong = check_range(0, None, system_priority, system_priority_ms)
        if wrong is not None:
            flag = "system_priority (--system-priority)" if wrong.startswith("a priority") else \
                "system_priority_ms (--system-priority-ms)"
            raise ConfigError(f"{flag}: {wrong}")
        prompt = np.minimum(s["prompt_len"][sess], length).tolist()
        retention = Retention.from_lists([[(0, int(p), system_priority, system_priority_ms)] if p > 0 else []
                                          for p in prompt])
    return Trace(
        offsets=offsets, blocks=blocks, input_length=length, output_length=r["output"][order],
        timestamp=time - time[0], num_blocks=num_blocks, block_size=block_size, source=source,
        format="synthetic", session=sess_rank[inverse.reshape(-1)], retention=retention,
    )


def synth(requests: int = 10_000, *, arrival_rate: float = 1.0, prefix_scale: float = 1.0, prefixes: int = 8,
          docs: int = 200, turns: float = 4.0, agent_steps: float = 10.0, mix="chat=0.6,rag=0.2,agent=0.2",
          think_time: float = 30.0, zipf: float = 1.1, block_size: int = 512, seed: int = 0,
          system_priority: int | None = None, system_priority_ms: float | None = None,
          agent_tool_tokens: float = 800.0, agent_reply_tokens: float = 150.0, burst: float = 1.0,
          max_context: int | None = None, progress=None) -> Trace:
    """A synthetic multi-turn workload (deterministic for a seed; see the module docstring).

    requests: requests in the trace (the first ones in time).
    arrival_rate: sessions per second (Poisson).
    prefix_scale: multiplies the token length of every system prompt and RAG document.
    prefixes: distinct system prompts (Zipf popularity, exponent `zipf`); lengths lognormal,
        median 1200 tokens. docs: distinct RAG documents (Zipf), median 3000 tokens.
    turns: mean requests per chat or RAG session (geometric); agent_steps: the same for agent loops.
    mix: session kinds and weights, "chat=0.6,rag=0.2,agent=0.2" or a dict.
    think_time: mean seconds between turns of a chat/RAG session (exponential; or a string with its
        unit, "30s"); agents: a tenth.
    agent_tool_tokens / agent_reply_tokens: the medians (lognormal) of an agent step's tool output
        and of its reply.
    burst: sessions start in bursts of this many on average (geometric sizes, bursts a Poisson
        process at arrival_rate / burst), as when a user or an orchestrator starts agents together.
    max_context: a session ends before the request whose prompt + reply would pass this many
        tokens (a coding agent whose context is full starts afresh); None: no limit.
    block_size: tokens per block of the hash ids.
    system_priority / system_priority_ms: a priority class for system prompts: every request's
        system-prompt tokens get this KV retention priority (0-100), for that many ms when given
        (TensorRT-LLM's token-range retention; trace/retention.py). None: no priorities.
    progress: a kvreplay.progress callback (see generate).
    """
    knobs = Knobs(arrival_rate=arrival_rate, prefix_scale=prefix_scale, prefixes=prefixes, docs=docs, turns=turns,
                  agent_steps=agent_steps, mix=mix, think_time=seconds_arg(think_time, "think_time"), zipf=zipf,
                  seed=seed, agent_tool_tokens=agent_tool_tokens, agent_reply_tokens=agent_reply_tokens, burst=burst,
                  max_context=max_context)
    if system_priority_ms is not None:
        system_priority_ms = ms_arg(system_priority_ms, "system_priority_ms")
    return synth_from(knobs, requests, block_size=block_size, system_priority=system_priority,
                      system_priority_ms=system_priority_ms, progress=progress)


def synth_from(knobs: Knobs, requests: int, *, block_size: int = 512, system_priority: int | None = None,
               system_priority_ms: float | None = None, progress=None) -> Trace:
    """synth() with its model's knobs packed: `requests` requests of the model, its seed's trace."""
    model = knobs.model()
    mix = ",".join(f"{k}={v:g}" for k, v in model.mix.items())
    return generate(model, requests, block_size=block_size, seed=knobs.seed, system_priority=system_priority,
                    system_priority_ms=system_priority_ms, progress=progress,
                    source=f"synthetic (seed {knobs.seed}, {requests} requests, mix {mix})")


# ---------------------------------------------------------------------------------------------
# Fitting a model to a trace (--like)

def _parents_reference(offsets, blocks, num_blocks, hit_blocks, parent) -> None:
    """Per request: k = the infinite cache's hit blocks, parent = the latest earlier request that
    accessed its k-th block (-1 when k = 0). Plain Python; compiled: synth.c."""
    offsets, blocks = offsets.tolist(), blocks.tolist()
    last = [-1] * num_blocks
    for i in range(len(offsets) - 1):
        start, end = offsets[i], offsets[i + 1]
        k = 0
        while start + k < end and last[blocks[start + k]] >= 0:
            k += 1
        hit_blocks[i] = k
        parent[i] = last[blocks[start + k - 1]] if k > 0 else -1
        for j in range(start, end):
            last[blocks[j]] = i


def _parents_compiled(offsets, blocks, num_blocks, hit_blocks, parent) -> None:
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    blocks = np.ascontiguousarray(blocks, dtype=np.int32)
    last = np.full(num_blocks, -1, dtype=np.int64)
    p, i = native.POINTER, native.COUNT
    native.function("kv_synth_parents", None, p, i, p, p, p, p)(
        native.ptr(offsets), offsets.shape[0] - 1, native.ptr(blocks), native.ptr(hit_blocks), native.ptr(parent),
        native.ptr(last))


def _parents(offsets, blocks, num_blocks, hit_blocks, parent) -> None:
    (_parents_compiled if native.use_core() else _parents_reference)(offsets, blocks, num_blocks, hit_blocks, parent)


def sessions_of(trace: Trace, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, hit_blocks, session) per request, reconstructed from the block ids.

    Request i continues request p (its parent) when p is the latest earlier request holding
    i's k-th block, k >= 2, i holds every full block of p (k >= L_p // B) and is longer
    (L_i > L_p): "the next turn resends the history". Otherwise i starts a session. With a
    session column, the parent is instead the previous request of the same session.
    """
    n = len(trace)
    hit_blocks = np.zeros(n, np.int64)
    parent = np.zeros(n, np.int64)
    _parents(trace.offsets, trace.blocks, int(trace.num_blocks), hit_blocks, parent)
    given = getattr(trace, "session", None)
    if given is not None:
        order = np.lexsort((np.arange(n), given))
        same = np.zeros(n, dtype=bool)
        same[1:] = given[order][1:] == given[order][:-1]
        parent = np.full(n, -1, dtype=np.int64)
        parent[order[1:][same[1:]]] = order[:-1][same[1:]]
        return parent, hit_blocks, np.asarray(given, dtype=np.int64)
    length = trace.input_length
    p = np.maximum(parent, 0)
    turn = (parent >= 0) & (hit_blocks >= 2) & (hit_blocks >= length[p] // block_size) & (length > length[p])
    parent = np.where(turn, parent, -1)
    session = np.arange(n, dtype=np.int64)
    for i in np.flatnonzero(turn):  # parents come first, so one forward sweep labels every chain
        session[i] = session[parent[i]]
    return parent, hit_blocks, session


def fit(trace: Trace, block_size: int | None = None) -> Model:
    """A one-kind model whose distributions are the trace's own (resampled):

    sessions (reconstructed by `sessions_of`) arrive as a Poisson process at the trace's session
    rate; a session starts with a shared prompt of k*B tokens (k = the blocks its first request
    shares with an earlier request; one prompt per distinct shared prefix, with its observed
    frequency) or none; then its first message (the first request's remaining tokens); its
    number of requests, the tokens each later request adds (L_i - L_parent, history included),
    the time between a request and the next (ms) and the reply lengths are drawn from the
    trace's own values.
    """
    if len(trace) == 0:
        raise ConfigError("cannot fit a model to an empty trace")
    bs = resolve_block_size(block_size, trace)
    parent, hit_blocks, session = sessions_of(trace, bs)
    length = trace.input_length
    starts = np.flatnonzero(parent < 0)
    k = hit_blocks[starts]
    shared = k > 0
    keys = trace.blocks[trace.offsets[starts[shared]] + k[shared] - 1]
    groups, first_at, counts = np.unique(keys, return_index=True, return_counts=True)
    prompt_of_start = np.zeros(starts.size, dtype=np.int64)
    prompt_of_start[shared] = k[shared] * bs
    # The request that first held a group's prefix shared nothing with earlier ones (k = 0) but
    # is that prompt's first use: when it starts a session, it belongs to the group.
    origin = np.searchsorted(trace.offsets, trace.first_seen[groups], side="right") - 1
    position = np.searchsorted(starts, origin)
    is_start = (position < starts.size) & (starts[np.minimum(position, starts.size - 1)] == origin)
    position = position[is_start]
    owned = np.zeros(starts.size, dtype=bool)
    owned[position] = ~shared[position]
    counts = counts + np.bincount(np.flatnonzero(is_start), weights=owned[position], minlength=groups.size).astype(np.int64)
    prompt_of_start[position[owned[position]]] = (k[shared][first_at] * bs)[is_start][owned[position]]
    prompt_tokens = k[shared][first_at] * bs
    prompt_probs = counts / starts.size
    no_prompt = float(np.count_nonzero(~shared & ~owned) / starts.size)
    first = np.maximum(length[starts] - prompt_of_start, 1)
    turns_of = np.unique(session, return_counts=True)[1]
    later = np.flatnonzero(parent >= 0)
    added = np.maximum(length[later] - length[parent[later]], 1)
    gaps = np.maximum(trace.timestamp[later] - trace.timestamp[parent[later]], 0.0)
    duration = float(trace.timestamp.max() - trace.timestamp.min())
    rate = starts.size / duration if duration > 0 else 1.0 / 1000.0  # sessions per ms (1/s without timestamps)

    def empirical(values, lo=0):
        values = np.asarray(values)
        return Dist("empirical", lo=lo, values=values if values.size else np.zeros(1, np.int64))

    chat = Kind(first=empirical(first, 1), message=empirical(added, 1), output=empirical(trace.output_length),
                turns=empirical(turns_of, 1), think=empirical(gaps), reply_in_history=False)
    return Model(kinds={"chat": chat}, mix={"chat": 1.0}, session_rate_per_ms=rate,
                 prompt_tokens=prompt_tokens.astype(np.int64), prompt_probs=prompt_probs,
                 doc_tokens=np.zeros(0, np.int64), doc_probs=np.zeros(0), no_prompt=no_prompt)


def synth_like(trace: Trace, *, scale_requests: float = 1.0, speedup: float = 1.0, block_size: int | None = None,
               seed: int = 0, progress=None) -> Trace:
    """A synthetic trace with `trace`'s statistics (see `fit`): scale_requests times as many
    requests, arriving speedup times faster (session rate x K, think times / K). progress: as
    generate's."""
    scale_requests = _positive("scale_requests", scale_requests)
    speedup = _positive("speedup", speedup)
    bs = resolve_block_size(block_size, trace)
    model = fit(trace, bs)
    if speedup != 1.0:
        chat = model.kinds["chat"]
        think = replace(chat.think, values=chat.think.values / speedup)
        model = replace(model, kinds={"chat": replace(chat, think=think)},
                        session_rate_per_ms=model.session_rate_per_ms * speedup)
    n = max(1, int(round(len(trace) * scale_requests)))
    return generate(model, n, block_size=bs, seed=seed, progress=progress,
                    source=f"synthetic like {trace.source} (seed {seed}, x{scale_requests:g} requests, x{speedup:g} speed)")


COMPARE_ROWS = [
    ("requests", lambda s: f"{s['num_requests']:,}"),
    ("prompt tokens", lambda s: f"{s['total_prompt_tokens']:,}"),
    ("mean input length", lambda s: f"{s['input_length']['mean']:,.0f}"),
    ("p50 input length", lambda s: f"{s['input_length']['p50']:,}"),
    ("p90 input length", lambda s: f"{s['input_length']['p90']:,}"),
    ("mean output length", lambda s: f"{s['output_length']['mean']:,.0f}"),
    ("unique blocks", lambda s: f"{s['num_unique_blocks']:,}"),
    ("infinite-cache hit rate", lambda s: f"{100 * s['infinite_cache_hit_rate']:.2f}%"),
    ("arrival rate (requests/s)", lambda s: "-" if s["request_rate_per_s"] is None else f"{s['request_rate_per_s']:.3f}"),
    ("sessions", lambda s: "-" if not s.get("sessions") else f"{s['sessions']['num_sessions']:,}"),
]


def compare_table(original: dict, synthetic: dict, original_sessions: int | None = None) -> str:
    """Side by side: the stats (kvreplay.stats dicts) of a trace and of its synthetic double."""
    rows = []
    for name, cell in COMPARE_ROWS:
        left = cell(original)
        if name == "sessions" and original_sessions is not None and left == "-":
            left = f"{original_sessions:,} (reconstructed)"
        rows.append((name, left, cell(synthetic)))
    widths = [max(len(r[i]) for r in rows + [("", "original", "synthetic")]) for i in range(3)]
    lines = [f"{'':{widths[0]}}  {'original':>{widths[1]}}  {'synthetic':>{widths[2]}}"]
    lines += [f"{a:{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}" for a, b, c in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# --like by prefix copying: any prefix tree, not only one level of shared prompts

PARENT_SEARCH = 1024  # requests looked at, backwards from the drawn distance, for a long-enough parent


def _copy_prefixes_reference(num_blocks_of, shared, distance, offsets, blocks) -> int:
    """Fill `blocks`: request j copies the first min(shared[j], len(parent)) blocks of its parent
    (the request `distance[j]` before it, or the nearest one before that holding `shared[j]`
    blocks, within PARENT_SEARCH), then takes fresh ids. Returns the number of ids used. Plain
    Python; compiled: synth.c."""
    num_blocks_of, shared, distance, offsets = (a.tolist() for a in (num_blocks_of, shared, distance, offsets))
    out = blocks.tolist()
    next_id = 0
    for j in range(len(offsets) - 1):
        start = offsets[j]
        take = 0
        if shared[j] > 0 and j - distance[j] >= 0:
            best, best_len = -1, -1
            q = j - distance[j]
            stop = max(q - PARENT_SEARCH, -1)
            while q > stop:
                if num_blocks_of[q] >= shared[j]:
                    best, best_len = q, num_blocks_of[q]
                    break
                if num_blocks_of[q] > best_len:
                    best, best_len = q, num_blocks_of[q]
                q -= 1
            if best >= 0:
                take = min(shared[j], best_len, offsets[j + 1] - start)  # (shared[j] never exceeds its own length)
                out[start:start + take] = out[offsets[best]:offsets[best] + take]
        out[start + take:offsets[j + 1]] = range(next_id, next_id + offsets[j + 1] - start - take)
        next_id += offsets[j + 1] - start - take
    blocks[:] = out
    return next_id


def _copy_prefixes_compiled(num_blocks_of, shared, distance, offsets, blocks) -> int:
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (num_blocks_of, shared, distance, offsets)]
    p, i = native.POINTER, native.COUNT
    return native.function("kv_synth_copy_prefixes", i, p, p, p, p, i, p, i)(
        *(native.ptr(a) for a in arrays), arrays[3].shape[0] - 1, native.ptr(blocks), PARENT_SEARCH)


def _copy_prefixes(num_blocks_of, shared, distance, offsets, blocks) -> int:
    copy = _copy_prefixes_compiled if native.use_core() else _copy_prefixes_reference
    return copy(num_blocks_of, shared, distance, offsets, blocks)


def synth_like_prefixes(trace: Trace, *, scale_requests: float = 1.0, speedup: float = 1.0,
                        block_size: int | None = None, seed: int = 0, progress=None) -> Trace:
    """A synthetic trace with `trace`'s prefix structure, by resampling requests.

    For every request i of the trace: k_i = the blocks it shares with earlier requests (its
    infinite-cache hit blocks), d_i = how many requests back the latest holder of those blocks is,
    its block count, prompt and output length, and the time since the previous request. Synthetic
    request j draws one such record (uniformly, with replacement), copies the first k blocks of the
    request d before it (or of the nearest earlier one holding k blocks), and fills the rest with new
    blocks; arrivals keep the drawn gaps (divided by `speedup`). Shared prefixes nest to any depth,
    as in the trace, and a request's hits under an infinite cache are the drawn request's whenever
    a long enough parent is found. progress: a kvreplay.progress callback, told
    ``(done, 2, "passes")``: the pass over the trace, then the one over the new requests.
    """
    scale_requests = _positive("scale_requests", scale_requests)
    speedup = _positive("speedup", speedup)
    if len(trace) == 0:
        raise ConfigError("cannot fit a model to an empty trace")
    bs = resolve_block_size(block_size, trace)
    n0 = len(trace)
    hit_blocks = np.zeros(n0, np.int64)
    parent = np.zeros(n0, np.int64)
    tell(progress, 0, 2, "passes")
    _parents(trace.offsets, trace.blocks, int(trace.num_blocks), hit_blocks, parent)
    tell(progress, 1, 2, "passes")
    distance = np.where(hit_blocks > 0, np.arange(n0) - parent, 0)
    counts = np.diff(trace.offsets)
    order = np.argsort(trace.timestamp, kind="stable")
    gaps = np.zeros(n0)
    gaps[order[1:]] = np.diff(trace.timestamp[order])

    n = max(1, int(round(n0 * scale_requests)))
    rng = np.random.default_rng([seed, 1])
    pick = rng.integers(0, n0, n)
    num_blocks_of = counts[pick]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(num_blocks_of, out=offsets[1:])
    blocks = np.empty(int(offsets[-1]), dtype=np.int64)
    used = _copy_prefixes(num_blocks_of, hit_blocks[pick], distance[pick], offsets, blocks)
    tell(progress, 2, 2, "passes")
    time = np.cumsum(gaps[pick] / speedup)
    return Trace(
        offsets=offsets, blocks=blocks.astype(np.int32), input_length=trace.input_length[pick],
        output_length=trace.output_length[pick], timestamp=time - time[0], num_blocks=int(used), block_size=bs,
        source=f"synthetic like {trace.source} (prefix copy, seed {seed}, x{scale_requests:g} requests, x{speedup:g} speed)",
        format="synthetic",
    )
