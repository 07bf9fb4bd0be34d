"""Beam search as vLLM 0.33.0's API server runs it: rounds of one-token requests, one per live beam.

vLLM 0.33.0 (wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl) runs beam search in the API
server, not in the engine (``entrypoints/generate/beam_search/online.py:33-257``; a completion or
chat request with ``use_beam_search`` and ``n`` = W, ``openai/completion/protocol.py:341``):

- The beams start as one, the prompt (online.py:82-90). Each round (``for _ in range(max_tokens)``,
  :93) sends every live beam to the engine as an ordinary request whose prompt is the request's
  prompt plus that beam's tokens so far, ``max_tokens=1`` and ``logprobs=2W`` (:65-72, :97-114), and
  waits for all of them (``asyncio.gather``, :116).
- Every returned (token, logprob) of every beam is a candidate with the beam's cumulative logprob
  plus its own (:147-189); an EOS candidate joins the completed hypotheses (:168-180); of the others
  the W best survive, best first (:192-217: argpartition, then argsort). The next round sends them.
  The loop ends after max_tokens rounds, or when no non-EOS candidate is left (:219-221); the answer
  is the W best of the completed and live hypotheses by cum_logprob / generated tokens
  (length_penalty 1.0, utils.py:141-163).
- Logprobs 2W must not exceed the server's --max-logprobs (20 by default, config/model.py:286,
  checked in sampling_params.py:923-934): W is at most 10 (MAX_BEAM_WIDTH).

So a group sends 1 request in round 0 and W in each later round (a hypothesis ending with EOS is
replaced by the next-best candidate: each beam returns 2W candidates of which at most one is EOS
here): 1 + W x (max_tokens - 1) requests, max_tokens the trace's output length. The engine serves
them as ordinary requests: a round-r request's prompt is L + r tokens and its blocks are the
prompt's, then blocks holding its beam's tokens; beams with a common history share those blocks,
and prefix caching serves them from cache (vLLM caches a request's full blocks; the hit stops at
num_tokens - 1, kv_cache_manager.py:296-305).

Which beams survive is decided by seeded synthetic logprobs (kvreplay has no model): a beam's
hypothesis is a hash state, started from the seed, the prompt's block ids and its length, and
advanced by each token (splitmix64). From it a generator draws the 2W candidates: probabilities
the largest 2W of a flat Dirichlet over 2W + 1 (the last stands for the rest of the vocabulary),
tokens 1..2W in that order, and with probability 1 / max_tokens one candidate (at a drawn rank)
is EOS (token 0): a hypothesis then ends, on average, near the trace's output length. Identical
prompts get identical searches (beam search is deterministic given the model), so they share their
beams' blocks as a real server's would. The whole search is fixed before the run; only its timing
depends on the run: a round's requests are sent when the previous round's have all ended (the
closed-loop release mechanism, kernel/release.c), after the API server's per-request service and
fixed latency (timing/host.py request_s + latency_s: the beam's prompt is token ids, so no
tokenising).

SGLang 0.5.23 runs beam search inside its scheduler instead (srt/beam_search/coordinator.py: one
leader request plus W - 1 member rows decoding in lockstep, KV shared on fork), which kvreplay's
SGLang kernel does not model: refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError
from ..trace.model import Trace

from ..trace.mooncake import MAX_BEAM_WIDTH  # 2W logprobs <= vLLM's --max-logprobs default of 20 (config/model.py:286)
EOS = 0  # the synthetic vocabulary's end-of-sequence token
_MASK = (1 << 64) - 1


def check_beam_width(width, what: str = "beam_width (--beam-width)") -> int | None:
    """`width` as a whole number in 1..MAX_BEAM_WIDTH, or None (not given)."""
    if width is None:
        return None
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or not 1 <= width <= MAX_BEAM_WIDTH:
        raise ConfigError(f"{what} must be a whole number of beams in 1..{MAX_BEAM_WIDTH} (vLLM asks the engine for 2 "
                          f"x W logprobs, at most its --max-logprobs default of 20), got {width!r}")
    return int(width)


def widths_per_request(trace: Trace, width: int | None) -> np.ndarray:
    """Per request: its beam width: the trace's ``beam_width`` where a record gives it, else `width`
    (default 1: no beam search)."""
    width = check_beam_width(width)
    out = np.full(len(trace), 1 if width is None else width, dtype=np.int64)
    if trace.beam_width is not None:
        given = trace.beam_width > 0
        out[given] = trace.beam_width[given]
    return out


def _mix(x: int) -> int:
    """splitmix64's finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def root_state(seed: int, prompt_ids, prompt_tokens: int) -> int:
    """A prompt's hypothesis state before any generated token (module doc)."""
    s = _mix(int(seed) & _MASK)
    for v in (prompt_tokens, *prompt_ids):
        s = _mix(s ^ (int(v) & _MASK))
    return s


def advance(state: int, token: int) -> int:
    """The state after one more token."""
    return _mix(state ^ ((int(token) + 1) * 0xD6E8FEB86659FD93 & _MASK))


def synthetic_logprobs(state: int, width: int, max_tokens: int) -> list[tuple[int, float]]:
    """The 2W (token, logprob) candidates a hypothesis in `state` gets, best first (module doc)."""
    rng = np.random.default_rng(state)
    p = np.sort(rng.dirichlet(np.ones(2 * width + 1)))[::-1][:2 * width]
    tokens = list(range(1, 2 * width + 1))
    if rng.random() < 1.0 / max(max_tokens, 1):
        tokens[int(rng.integers(2 * width))] = EOS
    return [(t, float(np.log(v))) for t, v in zip(tokens, p)]


@dataclass
class Hypothesis:
    tokens: tuple  # generated so far
    states: tuple  # the state after 0..len(tokens) tokens
    cum_logprob: float = 0.0
    eos: bool = False


def search(root: int, width: int, max_tokens: int, logprobs=None) -> tuple[list[list[Hypothesis]], list[Hypothesis]]:
    """vLLM's online loop (online.py:93-225) over `logprobs(state, width, max_tokens)` (default the
    synthetic one): (the beams sent in each round, in the order sent; the W best answers)."""
    logprobs = logprobs or synthetic_logprobs
    beams = [Hypothesis(tokens=(), states=(root,))]
    rounds, completed = [], []
    for _ in range(max(max_tokens, 1)):
        rounds.append(beams)
        candidates = []
        for beam in beams:
            for token, lp in logprobs(beam.states[-1], width, max_tokens):
                if token == EOS:
                    completed.append(Hypothesis(beam.tokens, beam.states, beam.cum_logprob + lp, eos=True))
                else:
                    candidates.append((beam.cum_logprob + lp, token, beam))
        scores = np.fromiter((c[0] for c in candidates), dtype=np.float64, count=len(candidates))
        if len(candidates) <= width:  # (online.py:197-204, the same calls)
            top = np.argsort(-scores)
        else:
            top = np.argpartition(-scores, width - 1)[:width]
            top = top[np.argsort(-scores[top])]
        beams = []
        for k in top:
            score, token, beam = candidates[int(k)]
            beams.append(Hypothesis(beam.tokens + (token,), beam.states + (advance(beam.states[-1], token),), score))
        if not beams:
            break
    completed.extend(beams)

    def key(h):  # utils.py:141-163: len(logprobs) counts an EOS token too
        return h.cum_logprob / max(len(h.tokens) + h.eos, 1)

    return rounds, sorted(completed, key=key, reverse=True)[:width]


@dataclass(frozen=True)
class BeamRun:
    """A trace with its beam-search groups expanded into their one-token requests: row c belongs to
    parent ``parent[c]``, is sent in round ``round[c]`` as its ``beam[c]``-th request; ``width[p]``
    is parent p's beam width (1: an ordinary request, one row, round -1)."""

    trace: Trace
    parent: np.ndarray
    round: np.ndarray
    beam: np.ndarray
    width: np.ndarray
    answers: list  # per parent with width > 1: its W best hypotheses

    @property
    def first_row(self) -> np.ndarray:
        return np.searchsorted(self.parent, np.arange(self.width.size))

    def release_links(self, engine_arrival_s: np.ndarray, later_delay_s: float) -> dict:
        """The compiled loop's closed-loop arrays (samples.release_links' shape): ordinary requests
        and each group's round 0 arrive at their engine arrival; a round-r request waits for
        every request of its group's round r - 1 and reaches the engine `later_delay_s` after the
        last of them ends."""
        rows = self.parent.size
        key = self.parent * (1 << 32) + self.round  # (rounds in a group are consecutive rows)
        start = np.r_[0, np.flatnonzero(np.diff(key) != 0) + 1]
        size = np.diff(np.r_[start, rows])
        of_round = np.repeat(np.arange(start.size), size)
        later = self.round > 0
        waits = np.where(later, size[np.maximum(of_round - 1, 0)], 0).astype(np.int64)
        nxt = np.zeros(rows, dtype=np.int64)  # per row: how many rows wait for it (the next round's)
        has_next = np.r_[self.round[start[1:]] > 0, False]  # (round k + 1 of the same group follows round k)
        nxt_count = np.where(has_next, np.r_[size[1:], 0], 0)
        nxt[:] = nxt_count[of_round]
        next_offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(nxt, out=next_offsets[1:])
        ids = [np.arange(start[g + 1], start[g + 1] + size[g + 1]) for g in of_round if has_next[g]]
        next_ids = np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, dtype=np.int64)
        return {"arrival": np.where(later, 0.0, np.asarray(engine_arrival_s, dtype=np.float64)), "waits": waits,
                "next_offsets": next_offsets, "next_ids": next_ids,
                "next_delay_s": np.full(next_ids.size, float(later_delay_s)),
                "next_on_send": np.zeros(next_ids.size, dtype=np.int8), "session": np.zeros(0, dtype=np.int64),
                "lane_queue": np.zeros(0, dtype=np.int64), "lane_delay_s": np.zeros(0, dtype=np.float64),
                "send_delay_s": np.zeros(rows, dtype=np.float64)}


def expand(trace: Trace, width: np.ndarray, block_size: int, seed: int, logprobs=None) -> BeamRun:
    """Each request with width W > 1 replaced by its search's one-token requests, round by round
    (module doc); the others kept as they are. New blocks (a prompt's partial last block once a
    beam's tokens join it, and the blocks of generated tokens) get ids past the trace's, one per
    distinct content: (block index, the hypothesis state at the block's last token)."""
    width = np.asarray(width, dtype=np.int64)
    bs = block_size
    new_ids: dict = {}
    rows_blocks, lengths, outs, parents, rounds, beams, answers = [], [], [], [], [], [], []
    L_all, O_all = np.asarray(trace.input_length), np.asarray(trace.output_length)
    for p in range(len(trace)):
        ids = trace.blocks[trace.offsets[p]:trace.offsets[p + 1]]
        L, W = int(L_all[p]), int(width[p])
        if W <= 1:
            rows_blocks.append(np.asarray(ids, dtype=np.int64))
            lengths.append(L), outs.append(int(O_all[p])), parents.append(p), rounds.append(-1), beams.append(0)
            continue
        max_tokens = max(int(O_all[p]), 1)
        per_round, best = search(root_state(seed, ids, L), W, max_tokens, logprobs)
        answers.append(best)
        for r, live in enumerate(per_round):
            for i, h in enumerate(live):
                n = L + r
                tail = []  # blocks L // bs on: those a beam's tokens may have joined
                for j in range(L // bs, -(-n // bs)):
                    g = min((j + 1) * bs, n) - L  # generated tokens in blocks 0..j
                    if g <= 0:
                        tail.append(int(ids[j]))
                    else:
                        tail.append(new_ids.setdefault((j, h.states[g]), trace.num_blocks + len(new_ids)))
                rows_blocks.append(np.concatenate([np.asarray(ids[:L // bs], dtype=np.int64),
                                                   np.asarray(tail, dtype=np.int64)]))
                lengths.append(n), outs.append(1), parents.append(p), rounds.append(r), beams.append(i)
    parent = np.asarray(parents, dtype=np.int64)
    offsets = np.zeros(parent.size + 1, dtype=np.int64)
    np.cumsum([b.size for b in rows_blocks], out=offsets[1:])
    base = trace.take(parent)
    out = replace(base, offsets=offsets, blocks=np.concatenate(rows_blocks).astype(np.int32) if rows_blocks else
                  np.zeros(0, np.int32), input_length=np.asarray(lengths, dtype=np.int64),
                  output_length=np.asarray(outs, dtype=np.int64), num_blocks=trace.num_blocks + len(new_ids),
                  samples=None, beam_width=None, dependencies=None, retention=None, original_ids=None)
    return BeamRun(trace=out, parent=parent, round=np.asarray(rounds, dtype=np.int64),
                   beam=np.asarray(beams, dtype=np.int64), width=width, answers=answers)


def check_applies(engine_style: str, instances: int, disaggregated: bool, closed_loop: bool, samples: bool,
                  speculative: bool) -> None:
    """Refuse beam search where kvreplay cannot serve it as the engine does."""
    if engine_style == "sglang":
        raise ConfigError("beam search (--beam-width or the trace's beam_width) is modelled as vLLM 0.33.0 serves it: "
                          "SGLang 0.5.23 runs it inside its scheduler (srt/beam_search/coordinator.py: a leader "
                          "request and W - 1 member rows decoding in lockstep, KV shared on fork), which is not "
                          "modelled (--engine-style vllm)")
    if engine_style != "vllm":
        raise ConfigError(f"beam search (--beam-width or the trace's beam_width) is modelled for --engine-style vllm: "
                          f"{engine_style}'s is not")
    if samples:
        raise ConfigError("beam search and n > 1 together: vLLM takes a beam-search request's n as its beam width "
                          "(openai/completion/protocol.py:341); give one of --n / --beam-width (or n / beam_width)")
    if closed_loop:
        raise ConfigError("beam search is served with open-loop arrivals only (--arrivals open)")
    if instances > 1 or disaggregated:
        raise ConfigError("beam search needs one instance: its rounds' requests go to the API server's one engine client")
    if speculative:
        raise ConfigError("beam search with speculative decoding is not modelled: drop --speculative")


def _final_blocks(run: BeamRun, rows: np.ndarray) -> tuple[int, int, int]:
    """The last round's requests of one group: (blocks two or more of them hold, blocks only one
    holds, the sum of their block counts)."""
    t = run.trace
    held = [t.blocks[t.offsets[c]:t.offsets[c + 1]] for c in rows]
    ids, counts = np.unique(np.concatenate(held), return_counts=True)
    return int((counts > 1).sum()), int((counts == 1).sum()), int(sum(h.size for h in held))


def _answer_times(run: BeamRun, report, groups: np.ndarray, last_rows: list) -> np.ndarray:
    """Per group: from the parent's arrival to the end of its last round (NaN unless every request of
    the group finished)."""
    finish = np.asarray(report.finish_s, dtype=np.float64)
    arrival = np.asarray(report.arrival_s, dtype=np.float64)[run.first_row]
    done = np.ones(run.width.size, dtype=bool)
    np.logical_and.at(done, run.parent, np.asarray(report.finished, dtype=bool))
    return np.array([finish[rows].max() - arrival[g] if done[g] else np.nan for g, rows in zip(groups, last_rows)])


def summarize(run: BeamRun, report, block_size: int) -> dict:
    """The beam-search groups' figures (per group and totals): rounds, requests sent, prompt tokens
    sent and served from cache, the last round's KV blocks shared by two or more beams and those only
    one beam holds (against the sum of their blocks, as independent requests would hold them), the
    distinct full blocks the whole search computed (the ones the prefix cache can hold), and the time to the final answer (median over the judged
    groups, with the band's ends)."""
    groups = np.flatnonzero(run.width > 1)
    sent = np.asarray(report.prompt_tokens, dtype=np.int64)
    hits = np.asarray(report.hit_tokens, dtype=np.int64)
    t = run.trace
    per = {k: [] for k in ("parent", "beam_width", "prompt_tokens", "rounds", "requests", "prompt_tokens_sent",
                           "prompt_tokens_hit", "final_shared_blocks", "final_divergent_blocks",
                           "final_independent_blocks", "search_blocks")}
    last_rows = []
    for g in groups:
        rows = np.flatnonzero(run.parent == g)
        last = rows[run.round[rows] == run.round[rows].max()]
        last_rows.append(last)
        shared, divergent, independent = _final_blocks(run, last)
        # (full blocks only: a partial block is each request's own, never cached)
        written = np.unique(np.concatenate([t.blocks[t.offsets[c]:t.offsets[c] + t.input_length[c] // block_size]
                                            for c in rows])).size
        for k, v in (("parent", g), ("beam_width", run.width[g]), ("prompt_tokens", sent[rows[0]]),
                     ("rounds", int(run.round[rows].max()) + 1), ("requests", rows.size),
                     ("prompt_tokens_sent", sent[rows].sum()), ("prompt_tokens_hit", hits[rows].sum()),
                     ("final_shared_blocks", shared), ("final_divergent_blocks", divergent),
                     ("final_independent_blocks", independent), ("search_blocks", written)):
            per[k].append(int(v))
    per = {k: np.asarray(v, dtype=np.int64) for k, v in per.items()}
    per["time_to_answer_s"] = _answer_times(run, report, groups, last_rows)
    per["answers_ended_by_eos"] = np.array([sum(h.eos for h in a) for a in run.answers], dtype=np.int64)
    judged = np.isfinite(per["time_to_answer_s"]) & np.asarray(report.judged, dtype=bool)[run.first_row[groups]]

    def median(a):
        return float(np.median(a[judged])) if judged.any() else None

    band = None
    if report.band is not None and judged.any():
        band = [median(_answer_times(run, report.band["runs"][end], groups, last_rows)) for end in ("low", "high")]
    totals = {k: int(per[k].sum()) for k in ("requests", "prompt_tokens_sent", "prompt_tokens_hit",
                                              "final_shared_blocks", "final_divergent_blocks",
                                              "final_independent_blocks", "search_blocks")}
    return {"groups": int(groups.size), "max_beam_width": int(run.width.max(initial=1)), "block_size": block_size,
            "rule": "vLLM 0.33.0's online beam search: round 0 sends the prompt, each later round one 1-token "
                    "request per live beam (prompt + its tokens); seeded synthetic logprobs choose the beams",
            **totals,
            "hit_fraction": totals["prompt_tokens_hit"] / totals["prompt_tokens_sent"] if totals["prompt_tokens_sent"]
            else 0.0,
            "judged_complete_groups": int(judged.sum()),
            "median_time_to_answer_s": median(per["time_to_answer_s"]),
            "median_time_to_answer_band_s": band,
            "per_group": per}
