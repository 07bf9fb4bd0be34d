"""Lower bounds that hold for every deployment of one GPU and TP degree (`kvreplay plan`'s pruning).

Per request, under the time model a plan judges with, no run on any number of instances, behind
any router, with any policy or tiers below the pool, can be faster than:

- TTFT >= what the host CPU adds before the engine sees it (timing/host.py: the arrival delay
  for its prompt) + the prefill of the tokens it cannot hit, alone on an idle instance in full
  chunks (max_num_batched_tokens each, or the whole prompt without chunked prefill) + its first
  token's way out alone (one request's output delay). The best hit it can get is an infinite cache's over the
  requests that arrived before it (warmup.earlier_prefix): FCFS schedulers serve a request after
  every earlier arrival on its instance, so no later arrival's blocks are cached when it starts,
  and a block it recomputes after a preemption it had computed itself. A hit from a tier below
  HBM costs its load time, so the bound (free hits) holds there too. At least one token is computed
  (a full hit recomputes its last), as the simulator does.
- TPOT >= one decode step of the request alone at its prompt's context (prompt + 1): every one of
  its decode steps holds at least that; less what the output delays can take off it: its first
  token may leave in a step with up to `max_seqs` outputs and its last alone, so the gap between
  them is at least (outputs - 1) steps less (max_seqs - 1) output delays of one request.
- end to end >= the arrival delay + the prefill alone + (outputs - 1) decode steps alone + its last
  token's output delay alone.

Steps alone are the fewest and smallest steps the request can take: any other split of its
prefill, or any company in a step, only adds work (the roofline's terms grow with the batch's
tokens and context, and a weight read per step). Two of the calibrated roofline's terms can fall
as work joins a step, and are taken at their least (TimeModel.step_floor): the decode KV read's
split penalty (at `max_seqs` decodes) and the all-reduce (the cheaper algorithm at its size). With the calibrated roofline at a band end, a
step's time is multiplied by its kind's factor; a prefill chunk alone is a prefill step but could
run in a mixed one, a decode in a mixed one, so the bound takes the smaller of the two factors.

The percentiles of the bounds over a window's requests bound the window's percentiles from below
(nearest rank is monotone), over the windows judge() cuts (the same arrivals, warm-up and merging),
since a deployment that passes serves every request. When one such window's bound is above a
limit, no instance count passes, and the plan says so instead of searching. Only for the roofline
(calibrated or raw), whose step time grows with its batch; other time models get no floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timing.models import StepBatch


@dataclass(frozen=True)
class Floors:
    """Per request, seconds: the lower bounds of its TTFT, TPOT (NaN under 2 outputs) and E2E."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray

    def values(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}


def band_factor(tm, kinds: tuple) -> float:
    """The smallest of a band end's step factors over `kinds` ("prefill", "decode", "mixed"): 1 for
    a time model without a band."""
    scale = getattr(tm, "scale", None)  # (a band end's factors per step kind; a profile's scale is no band)
    return min(float(scale[k]) for k in kinds) if isinstance(scale, dict) and scale else 1.0


def request_floors(trace, arrival_s: np.ndarray, tm, centre, *, block_size: int, chunk: int | None,
                   any_order: bool = False, host=None, max_seqs: int = 1) -> Floors:
    """The per-request bounds of serving `trace` at `arrival_s` with the time model `tm` (a band
    end, or the centre), whose unscaled steps are `centre`'s. `chunk`: tokens per prefill step alone
    (None: a prompt in one step). `any_order`: a request may hit any other request's blocks (a
    scheduler that is not first-come first-served), not only earlier arrivals'. `host`: the host
    CPU's terms the runs have (timing/host.HostTerms; None: none); `max_seqs`: the most requests
    in one step (the scheduler's max_num_seqs), which bounds the output delays' spread."""
    from .timing.host import NONE
    from .warmup import earlier_prefix

    prompt = np.asarray(trace.input_length, dtype=np.int64)
    outputs = np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1)
    if any_order:
        k = _shared_prefix(trace)
    else:
        k, _ = earlier_prefix(trace, arrival_s)
    hit = np.minimum(k * block_size, prompt)
    new = np.maximum(prompt - hit, 1)
    hit = prompt - new
    prefill_factor = band_factor(tm, ("prefill", "mixed"))
    decode_factor = band_factor(tm, ("decode", "mixed"))
    host = NONE if host is None else host
    company = max(int(max_seqs), 1)
    prefill = _memo(lambda n, h: prefill_alone(centre, int(n), int(h), chunk, company), new, hit)
    decode = _memo(lambda n, h: float(centre.step_floor(StepBatch(decode_context=(int(n) + 1,)), company)), prompt,
                   np.zeros_like(prompt))
    # (the engine core's CPU a step only adds to a step, synchronously or beside it: left out)
    before = host.arrival_delay(prompt) + prefill * prefill_factor
    out = host.output_seconds(1)
    tpot_one = decode * decode_factor
    spread = host.output_seconds(max(int(max_seqs), 1) - 1)
    tpot = np.where(outputs >= 2, np.maximum(tpot_one - spread / np.maximum(outputs - 1, 1), 0.0), np.nan)
    return Floors(before + out, tpot, before + (outputs - 1) * tpot_one + out)


def prefill_alone(tm, new: int, cached: int, chunk: int | None, decodes: int = 1) -> float:
    """Seconds to prefill `new` tokens after `cached` ones, alone, in steps of `chunk` tokens: each
    step's floor (its time, unless company can make it faster: TimeModel.step_floor), for steps
    of up to `decodes` decoding requests."""
    step = new if chunk is None else chunk
    return float(sum(tm.step_floor(StepBatch(prefill_new=(min(step, new - done),), prefill_cached=(cached + done,)),
                                   decodes) for done in range(0, new, step)))


def _memo(f, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f(a_i, b_i) for every i, computed once per distinct pair."""
    pairs, inverse = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
    return np.array([f(x, y) for x, y in pairs], dtype=np.float64)[inverse.reshape(-1)]


def _shared_prefix(trace) -> np.ndarray:
    """Per request: its longest run of leading blocks that some other request also holds."""
    offsets = np.asarray(trace.offsets, dtype=np.int64)
    blocks = np.asarray(trace.blocks, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(trace)
    k = np.zeros(n, dtype=np.int64)
    if not blocks.size:
        return k
    request = np.repeat(np.arange(n), lengths)
    # how many distinct requests hold each block
    pairs = np.unique(np.stack([blocks, request], axis=1), axis=0)
    holders = np.bincount(pairs[:, 0], minlength=int(blocks.max()) + 1)
    shared = holders[blocks] >= 2
    local = np.arange(blocks.size) - np.repeat(offsets[:-1], lengths)
    nonempty = lengths > 0
    first_unshared = np.where(shared, np.iinfo(np.int64).max, local)
    k[nonempty] = np.minimum(np.minimum.reduceat(first_unshared, offsets[:-1][nonempty]), lengths[nonempty])
    return k
