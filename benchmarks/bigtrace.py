"""A deterministic, in-memory synthetic trace with realistic prefix reuse, built with numpy.

Workload model (Mooncake-style ids: a block id stands for a whole prefix):

* ``num_prompts`` shared system prompts of 1..64 blocks (log-normal, median 4),
  chosen with Zipf popularity (exponent ``zipf_s``) by every session;
* sessions (chats): turn t resends the session's system prompt, then the session's
  whole history so far (the growing shared prefix), then this turn's new blocks:
  1 + a log-normal count (median 8, at most 255) on the first turn (a document or
  long first message), 1 + Poisson(3) afterwards (last answer + new message);
* 35% of sessions are one-shot; the others have 1 + Geometric(0.15) turns (mean
  7.7), at most 64;
* sessions start uniformly over 24 h; turns are separated by log-normal think
  times (median 60 s, sigma 1.2); requests are replayed in timestamp order, so
  thousands of sessions interleave;
* ``input_length`` = blocks * block_size minus a uniform 0..block_size-1 (the
  last block is partial).

Sessions are drawn from one oversized pool and the smallest prefix of them whose
block accesses reach ``target_accesses`` is kept, so the result is a pure
function of (target_accesses, seed).
"""

from __future__ import annotations

import numpy as np

from kvreplay import Trace


def generate(target_accesses: int = 60_000_000, seed: int = 20240601, block_size: int = 512,
             num_prompts: int = 5000, zipf_s: float = 1.1) -> Trace:
    rng = np.random.default_rng(seed)

    # Shared system prompts, Zipf popularity over a random ranking.
    sys_len = np.clip(np.round(rng.lognormal(np.log(4.0), 0.8, num_prompts)), 1, 64).astype(np.int64)
    weights = 1.0 / np.arange(1, num_prompts + 1) ** zipf_s
    cdf = np.cumsum(weights / weights.sum())
    by_rank = rng.permutation(num_prompts)

    # An oversized pool of sessions; keep the smallest prefix that reaches the target.
    pool = max(1000, int(target_accesses / 40 / 8 * 2) + 1000)
    one_shot = rng.random(pool) < 0.35
    turns = np.where(one_shot, 1, np.minimum(1 + rng.geometric(0.15, pool), 64)).astype(np.int64)
    prompt = by_rank[np.minimum(np.searchsorted(cdf, rng.random(pool)), num_prompts - 1)]
    sess_of_req = np.repeat(np.arange(pool), turns)
    first_req = np.zeros(pool + 1, dtype=np.int64)
    np.cumsum(turns, out=first_req[1:])
    turn_idx = np.arange(first_req[-1]) - first_req[sess_of_req]
    new_blocks = 1 + rng.poisson(3.0, first_req[-1])
    new_blocks[turn_idx == 0] = 1 + np.minimum(rng.lognormal(np.log(8.0), 1.0, pool), 255).astype(np.int64)
    # History through this turn: cumulative new blocks within the session.
    cum = np.cumsum(new_blocks)
    hist = cum - (cum[first_req[sess_of_req]] - new_blocks[first_req[sess_of_req]])
    req_len = sys_len[prompt[sess_of_req]] + hist
    per_session = np.add.reduceat(req_len, first_req[:-1])
    keep = int(np.searchsorted(np.cumsum(per_session), target_accesses)) + 1
    if keep > pool:
        raise RuntimeError("session pool too small for the target")
    n = int(first_req[keep])
    sess_of_req, turn_idx, hist, req_len = sess_of_req[:n], turn_idx[:n], hist[:n], req_len[:n]
    turns, prompt = turns[:keep], prompt[:keep]

    # Arrival times: session start + exponential think times between turns.
    start = rng.uniform(0.0, 86_400_000.0, keep)
    gaps = rng.lognormal(np.log(60_000.0), 1.2, n)
    gaps[turn_idx == 0] = 0.0
    cg = np.cumsum(gaps)
    stamp = start[sess_of_req] + cg - cg[first_req[:keep][sess_of_req]]
    order = np.argsort(stamp, kind="stable")

    # Raw ids: prompt p owns [sys_base[p], +sys_len[p]); session s owns [hist_base[s], +its final history).
    sys_base = np.zeros(num_prompts, dtype=np.int64)
    np.cumsum(sys_len[:-1], out=sys_base[1:])
    final_hist = hist[first_req[1:keep + 1] - 1]
    hist_base = np.zeros(keep, dtype=np.int64)
    np.cumsum(final_hist[:-1], out=hist_base[1:])
    hist_base += int(sys_len.sum())

    # Two segments per request, in replay order: the system prompt, then the history.
    s = sess_of_req[order]
    seg_start = np.stack([sys_base[prompt[s]], hist_base[s]], axis=1).ravel()
    seg_len = np.stack([sys_len[prompt[s]], hist[order]], axis=1).ravel()
    total = int(seg_len.sum())
    seg_off = np.zeros(seg_len.size, dtype=np.int64)
    np.cumsum(seg_len[:-1], out=seg_off[1:])
    raw = np.repeat(seg_start - seg_off, seg_len)
    raw += np.arange(total, dtype=np.int64)
    del seg_start, seg_off

    # Dense ids 0..U-1 (unused prompts leave gaps in the raw ids).
    present = np.zeros(int(raw.max()) + 1, dtype=bool)
    present[raw] = True
    remap = (np.cumsum(present) - 1).astype(np.int32)
    blocks = remap[raw]
    del raw
    num_blocks = int(present.sum())

    lengths = req_len[order]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    input_length = lengths * block_size - rng.integers(0, block_size, n)
    output_length = rng.integers(1, 1024, n)
    return Trace(
        offsets=offsets, blocks=blocks, input_length=input_length.astype(np.int64),
        output_length=output_length.astype(np.int64), timestamp=stamp[order], num_blocks=num_blocks,
        block_size=block_size, source=f"synthetic sessions+Zipf prompts (seed {seed}, >= {target_accesses:,} accesses)",
        format="synthetic",
    )


if __name__ == "__main__":
    import time

    t0 = time.perf_counter()
    trace = generate()
    print(f"{time.perf_counter() - t0:.1f} s", trace.summary(), f"{trace.nbytes() / 2**20:.0f} MiB")
