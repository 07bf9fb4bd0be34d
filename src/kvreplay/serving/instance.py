"""One engine instance in simulated time: a scheduler, one KV pool, continuous batching in steps.

The compiled loop of the serving simulator (simulate.py builds its inputs and reads its outputs).
docs/serving.md, "The simulator" and "Schedulers", states every rule with its source.

The pool is the policy's cache of ``capacity`` blocks (policies/base.py's hold contract):

- A request's prompt is admitted with ``pin_request`` over its prompt blocks (the prefix hit is
  the longest resident prefix at that moment, as in the sequential replay), and held until it
  finishes.
- Generated tokens fill decode blocks. Each new one is pinned as it is needed, under an id no
  prompt in the trace has (``decode ids``, after the request's prompt blocks in ``blocks``): the
  trace cannot say which later prompt repeats this output, so a decode block takes room, is
  cached after the request finishes (as vLLM caches full generated blocks) and is never hit.
- What running requests hold cannot be evicted; the rest is the prefix cache the policy manages.
- A request is preempted (vLLM) or retracted (SGLang) when a running request needs a block and
  none can be freed: its blocks are released and it is recomputed later (its prompt plus the
  tokens it had generated, with a fresh prefix lookup).

Requests: ``target`` is the number of tokens to compute before the request's next token comes
out: its prompt ``L`` at first, ``L + g`` after a preemption with ``g`` tokens generated (vLLM
recomputes prompt and output). ``computed`` counts tokens in KV (hits included). A prefill step
computes ``min(target - computed, budget)``; when ``computed == target`` the step outputs a
token. A decode step feeds one token and outputs the next. A request ends when it has output
``max(O, 1)`` tokens (a request returns at least one).

Blocks: with ``computed + new`` tokens in KV after a step, a request needs
``P + max(0, ceil((computed + new) / bs) - ceil(L / bs))`` block positions: its ``P`` prompt
blocks, then decode positions. Position ``P + j`` is the request's j-th decode id.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import policies
from ..jit import HAVE_NUMBA, helper, key_cache_on_sources
from ..policies.base import HELD, REFUSALS, pin_request, unpin_request
from . import timing
from .timing import (AGG_ACTIVE_KV, AGG_DECODE_CTX, AGG_DECODE_REQS, AGG_KEYS_FULL,
                     AGG_KEYS_SW, AGG_PREFILL_CACHED, AGG_PREFILL_NEW, AGG_PREFILL_REQS, AGG_TOUCHED_FULL,
                     AGG_TOUCHED_SW, NUM_AGG, step_seconds)
from . import router as _router
from ..engine import tiers as _tiers
from ..engine.tiers import drain, fetch_seconds, prefix_limit, tier_admitted, tier_credit, tier_prefix
from .router import (NUM_VIEW, R_LAG_S, R_SEED, ROUTER_DYNAMO, ROUTER_FIXED, ROUTER_LEAST_LOADED, ROUTER_MOONCAKE,
                     ROUTER_SGLANG, V_BLOCKS, V_HELD, V_PREFILL_TOKENS, V_QUEUE_S, V_REQUESTS, V_RUNNING, V_WAITING)

# cfg (int64) slots (the scheduler style is no slot: each style has its kernel, run_vllm / run_sglang)
(C_MAX_BATCHED, C_MAX_SEQS, C_CHUNKED, C_CAPACITY, C_BLOCK_SIZE, C_PRECHECK, C_ONE_AT_A_TIME, C_OUTPUT_KV,
 C_LPM, C_CHUNK_SIZE, C_LPM_FCFS_ABOVE, C_MAX_PREFILL, C_WINDOW, C_ROUTER, C_PROMPT_IDS, C_TIER_OVERLAP,
 C_PREFILL) = range(17)
NUM_CFG = 17
STYLE_VLLM, STYLE_SGLANG = 0, 1
# fcfg (float64) slots: SGLang's new-token ratio
F_RATIO_INIT, F_RATIO_MIN, F_RATIO_DECAY, F_CLIP_MAX_NEW = range(4)
NUM_FCFG = 4
# counters
(K_STEPS, K_PREEMPTIONS, K_DECODE_BLOCKS, K_PEAK_HELD, K_PEAK_RUNNING, K_PEAK_WAITING, K_REJECTED, K_PREFILL_STEPS,
 K_STALLS, K_RECOMPUTED_TOKENS, K_PREFILL_TOKENS, K_DECODE_TOKENS, K_REFUSED_ADMISSIONS, K_PIN_CALLS, K_POSITIONS,
 K_OUT_OF_ROOM, K_MAX_PIN_CALLS, K_MAX_POSITIONS, K_HIT_SUM, K_PROMPT_SUM, K_BUSY_US, K_NEVER_ADMITTED,
 K_STUCK, K_LOAD_US, K_HANDOFFS, K_TRANSFER_US) = range(26)
NUM_COUNTERS = 26
COUNTER_NAMES = ("steps", "preemptions", "decode_blocks", "peak_held_blocks", "peak_running", "peak_waiting",
                 "rejected", "prefill_steps", "stalls", "recomputed_tokens", "prefill_tokens", "decode_tokens",
                 "refused_admissions", "pin_calls", "positions_pinned", "state_out_of_room", "max_pin_calls",
                 "max_positions", "first_hit_tokens", "first_prompt_tokens", "busy_us", "never_admitted", "stuck",
                 "load_us", "handoffs", "transfer_us")
# request status
WAITING_ARRIVAL, WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3, 4
# inter-token latency: sum, max, count, then a histogram: bin 0 holds gaps <= ITL_MIN_S, bin k >= 1
# gaps in (ITL_MIN_S x ITL_RATIO^(k-1), ITL_MIN_S x ITL_RATIO^k] (0.1% apart, as Dynamo's DDSketch)
ITL_SUM, ITL_MAX, ITL_COUNT = range(3)
ITL_HEAD = 3
ITL_MIN_S = 1e-6
ITL_RATIO = 1.001
ITL_BINS = 23100  # up to ITL_MIN_S x 1.001^23099, about 1e4 s; longer gaps count in the last bin
# time series columns
S_TIME, S_RUNNING, S_WAITING, S_HELD, S_HIT, S_PROMPT = range(6)
NUM_SERIES = 6


def extra_blocks(tokens, prompt_tokens, block_size):
    """Decode positions a request needs with `tokens` in KV (beyond its prompt's blocks)."""
    e = (tokens + block_size - 1) // block_size - (prompt_tokens + block_size - 1) // block_size
    return e if e > 0 else 0


if HAVE_NUMBA:
    from numba import njit

    extra_blocks = helper(extra_blocks, inline=False)

    @helper
    def _room(counters, positions):
        """Count one more pin_request of `positions` blocks, or False (and stop the run) when the
        policy state was sized for fewer: radix and belady allocate per call and per position
        (simulate.py sizes them, and runs again with more room when this says no)."""
        if counters[K_OUT_OF_ROOM] != 0:
            return False
        if (counters[K_MAX_PIN_CALLS] >= 0 and counters[K_PIN_CALLS] + 1 > counters[K_MAX_PIN_CALLS]) or \
                (counters[K_MAX_POSITIONS] >= 0 and counters[K_POSITIONS] + positions > counters[K_MAX_POSITIONS]):
            counters[K_OUT_OF_ROOM] = 1
            return False
        counters[K_PIN_CALLS] += 1
        counters[K_POSITIONS] += positions
        return True

    @helper(inline=False)
    def _release(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, block_size,
                 tiers, j):
        """Finish or preempt request i: its decode singles tail first, then its admitted range."""
        start = offsets[i]
        hb = start + i
        for q in range(base_len[i] + dec_pinned[i] - 1, base_len[i] - 1, -1):
            unpin_request(state, i, blocks, start + q, start + q + 1, block_size, block_size, handles, hb + q, 1)
        unpin_request(state, i, blocks, start, start + base_len[i], base_input[i], block_size, handles, hb, base_n[i])
        drain(state, tiers, j)  # (a ttl policy may expire blocks as they are released)
        dec_pinned[i] = 0
        base_n[i] = 0
        base_len[i] = 0

    @helper(inline=False)
    def _grow(state, i, blocks, offsets, P, L, handles, base_len, dec_pinned, want, block_size, capacity, counters,
              tiers, j):
        """Pin decode singles until request i covers `want` positions; False when the pool is full."""
        start = offsets[i]
        while base_len[i] + dec_pinned[i] < want:
            if state.hold[HELD] >= capacity:
                return False
            q = base_len[i] + dec_pinned[i]
            if not _room(counters, 1):
                return False
            refusals = state.hold[REFUSALS]
            pin_request(state, i, blocks, start + q, start + q + 1, 0, block_size, block_size, handles, start + i + q)
            drain(state, tiers, j)
            if state.hold[REFUSALS] != refusals:
                return False
            dec_pinned[i] += 1
            counters[K_DECODE_BLOCKS] += 1
        return True

    @helper(inline=False)
    def _admit(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, target,
               block_size, capacity, precheck, output_kv, hit_out, counters, tiers, j, tier_row, tier_scratch,
               first, load_s):
        """Schedule request i for `target` tokens: scan its prefix (HBM, then the tiers below),
        pin its prompt range (all or nothing). Returns hit tokens, or -1 when it does not fit now
        (nothing held, nothing counted)."""
        start = offsets[i]
        ext = extra_blocks(target, L[i], block_size) if output_kv else 0
        n_pos = P[i] + ext
        if precheck:
            unheld = 0
            for q in range(n_pos):
                if state.pins[blocks[start + q]] == 0:
                    unheld += 1
            if state.hold[HELD] + unheld > capacity:
                return -1
        # the hit limit first: a radix state's scan leaves its cursor where pin_request continues
        limit = prefix_limit(state, n_pos, target, block_size)
        k = driver_prefix(state, blocks, start, start + n_pos, target, block_size)
        k2 = tier_prefix(state, tiers, j, blocks, start, k, limit, tier_scratch)
        if not _room(counters, n_pos):
            return -1
        refusals = state.hold[REFUSALS]
        n = pin_request(state, i, blocks, start, start + n_pos, k, target, block_size, handles, start + i)
        if state.hold[REFUSALS] != refusals:
            if n > 0:
                unpin_request(state, i, blocks, start, start + n_pos, target, block_size, handles, start + i, n)
            drain(state, tiers, j)
            return -1
        load_s[i] += tier_admitted(tiers, j, blocks, start, k, n_pos, tier_scratch, tier_row, first)
        drain(state, tiers, j)
        k = k2
        base_len[i] = n_pos
        base_input[i] = target
        base_n[i] = n
        dec_pinned[i] = 0
        hit_out[0] = k
        hit = k * block_size
        return hit if hit < target else target

    @helper(inline=False)
    def _started(i, hit, hit_blocks_i, now, L, target, computed, status, preempts, sched_s, hit_tokens, hit_blocks,
                 counters, kv_in, decoding):
        """Request i was admitted with `hit` tokens cached: its first schedule is recorded (a
        recomputation after a preemption is counted apart), and it runs. A request whose KV came
        from a prefill instance (kv_in) starts decoding: everything but its next token is in KV."""
        if kv_in[i]:
            kv_in[i] = False
            status[i] = RUNNING
            computed[i] = target[i] - 1
            decoding[i] = True
            return
        if preempts[i] == 0:
            sched_s[i] = now
            hit_tokens[i] = hit
            hit_blocks[i] = hit_blocks_i
            counters[K_HIT_SUM] += hit
            counters[K_PROMPT_SUM] += L[i]
        else:
            counters[K_RECOMPUTED_TOKENS] += target[i] - hit
        status[i] = RUNNING
        # the last prompt token is always computed (it gives the first token's logits), even
        # when a block-level policy hit the whole prompt
        computed[i] = hit if hit < target[i] else target[i] - 1

    @helper(inline=False)
    def _schedule(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, bs, capacity,
                  precheck, output_kv, hit_out, now, target, computed, status, preempts, sched_s, hit_tokens,
                  hit_blocks, counters, tiers, j, tier_hits, load_s, kv_in, decoding):
        """Admit the waiting request i (_admit) and start it (_started); False when it does not fit.
        Its hits per tier are kept at its first schedule (tier_hits[i]; row n is scratch)."""
        hit = _admit(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, target[i],
                     bs, capacity, precheck, output_kv, hit_out, counters, tiers, j, tier_hits[i],
                     tier_hits[tier_hits.shape[0] - 1], preempts[i] == 0, load_s)
        if hit < 0:
            counters[K_REFUSED_ADMISSIONS] += 1
            return False
        _started(i, hit, hit_out[0], now, L, target, computed, status, preempts, sched_s, hit_tokens, hit_blocks,
                 counters, kv_in, decoding)
        return True

    @helper(inline=False)
    def _taken_back(v, state, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, bs,
                    computed, decoding, target, generated, status, preempts, new_tokens, counters, tiers, j):
        """Preempt (vLLM) or retract (SGLang) request v: its blocks are released and it waits to
        recompute its prompt and the tokens it generated. Returns the tokens it had this step."""
        given = new_tokens[v]
        new_tokens[v] = 0
        _release(state, v, blocks, offsets, P, L, handles, base_len, base_input, base_n, dec_pinned, bs, tiers, j)
        computed[v] = 0
        decoding[v] = False
        target[v] = L[v] + generated[v]
        status[v] = WAITING
        preempts[v] += 1
        counters[K_PREEMPTIONS] += 1
        return given

    from ..engine.driver import prefix_compiled

    _router_pick = _router.pick_instance
    _prefill_estimate = _router.prefill_estimate

    @helper(inline=False)
    def driver_prefix(state, blocks, start, end, input_length, block_size):
        """The sequential replay's prefix scan (engine/driver.py), compiled once here."""
        return prefix_compiled(state, blocks, start, end, input_length, block_size)

    def _make_kernel(style):
        """The loop for one scheduler style: `style` is a compile-time constant, so numba drops the
        other scheduler's code from the kernel (less to compile)."""

        @njit(cache=True, nogil=True)
        def run_cluster(offsets, blocks, P, L, O, arrival, states, handles, tm, cfg, fcfg, rcfg, assigned, inst_of,
                        sched_s, first_s, finish_s, hit_tokens, hit_blocks, preempts, computed_total, status,
                        counters, series, series_meta, itl, tiers, tier_hits, xfer_s, decode_of):  # pragma: no cover - compiled
            n = L.shape[0]
            N = len(states)
            last_token = np.zeros(n, dtype=np.float64)
            itl_bins = itl.shape[0] - ITL_HEAD
            capacity = cfg[C_CAPACITY]
            bs = cfg[C_BLOCK_SIZE]
            precheck = cfg[C_PRECHECK] != 0
            output_kv = cfg[C_OUTPUT_KV] != 0
            window = cfg[C_WINDOW]
            max_seqs = cfg[C_MAX_SEQS]
            one_at_a_time = cfg[C_ONE_AT_A_TIME] != 0
            router = cfg[C_ROUTER]
            # per-request scratch
            computed = np.zeros(n, dtype=np.int64)
            target = np.zeros(n, dtype=np.int64)
            generated = np.zeros(n, dtype=np.int64)
            base_len = np.zeros(n, dtype=np.int64)
            base_input = np.zeros(n, dtype=np.int64)
            base_n = np.zeros(n, dtype=np.int64)
            dec_pinned = np.zeros(n, dtype=np.int64)
            new_tokens = np.zeros(n, dtype=np.int64)  # scheduled this step
            decoding = np.zeros(n, dtype=np.bool_)  # its prompt is computed: each step feeds one token
            outputs = np.maximum(O, 1)
            load_s = np.zeros(n, dtype=np.float64)  # KV to load from the tiers before its prefill
            # prefill/decode disaggregation: instances 0..n_prefill-1 prefill, the others decode; a
            # request whose first token came out moves to a decode instance after its KV transfer
            disagg = cfg[C_PREFILL] > 0
            n_prefill = cfg[C_PREFILL] if disagg else N
            kv_in = np.zeros(n, dtype=np.bool_)  # its KV arrived from a prefill instance
            hq_t = np.zeros(n + 1, dtype=np.float64)  # transfers in flight: a heap by arrival time
            hq_i = np.zeros(n + 1, dtype=np.int64)
            hn = 0
            overlap_load = cfg[C_TIER_OVERLAP] != 0
            # waiting queues: one linked list per instance (arrivals at the back, vLLM's preempted
            # requests at the front); a request waits on at most one instance
            qnext = np.full(n, -1, dtype=np.int64)
            qprev = np.full(n, -1, dtype=np.int64)
            qhead = np.full(N, -1, dtype=np.int64)
            qtail = np.full(N, -1, dtype=np.int64)
            qlen = np.zeros(N, dtype=np.int64)
            # running requests per instance, in admission order
            rcap = (n if n < max_seqs else max_seqs) + 1
            running_all = np.zeros((N, rcap), dtype=np.int64)
            nrun_all = np.zeros(N, dtype=np.int64)
            # an instance's next event: the end of its step in flight (busy) or the time it
            # schedules next (not busy); inf: idle until a request is routed to it
            end_t = np.full(N, np.inf)
            busy = np.zeros(N, dtype=np.bool_)
            ratio_all = np.full(N, fcfg[F_RATIO_INIT])
            chunk_all = np.full(N, -1, dtype=np.int64)  # SGLang: the request whose prompt is being chunked
            # what the router knows (router.py's rules; lagged by rcfg[R_LAG_S] when set)
            view = np.zeros((N, NUM_VIEW), dtype=np.float64)
            seen = np.zeros((N, NUM_VIEW), dtype=np.float64)
            lag = rcfg[R_LAG_S]
            snap_k = 0.0
            next_snap = 0.0 if lag > 0 else np.inf
            overlap = np.zeros(N, dtype=np.int64)
            depth = np.zeros(N, dtype=np.int64)
            fetch = np.zeros(N, dtype=np.float64)  # mooncake: the load time of the prefix from the tiers
            n_tiers = tiers[6][0]
            route_counts = np.zeros(tier_hits.shape[1], dtype=np.int64)
            routed_overlap = np.zeros(n, dtype=np.int64)
            routed_est = np.zeros(n, dtype=np.float64)
            # kv-aware: holds on each prompt block by the requests in flight per instance;
            # sglang: the blocks of the prompts routed to each instance (its approximate tree)
            tracked = router == ROUTER_DYNAMO or router == ROUTER_SGLANG
            track = np.zeros((N if tracked else 1, cfg[C_PROMPT_IDS] if tracked else 1), dtype=np.int32)
            if router != ROUTER_FIXED:
                np.random.seed(np.int64(rcfg[R_SEED]))
            agg = np.zeros(NUM_AGG, dtype=np.float64)
            hit_out = np.zeros(1, dtype=np.int64)
            lpm_key = np.zeros(n, dtype=np.int64)
            order = np.zeros(n + 1, dtype=np.int64)
            clip = np.int64(fcfg[F_CLIP_MAX_NEW])
            next_arrival = 0
            last_now = 0.0
            done = 0
            steps_all = 0
            stride = 1
            nseries = 0
            series_cap = series.shape[0]
            while done < n:
                # the earliest instance event, and the next arrival
                j = -1
                te = np.inf
                for q in range(N):
                    if end_t[q] < te:
                        te = end_t[q]
                        j = q
                ta_trace = arrival[next_arrival] if next_arrival < n else np.inf
                th = hq_t[0] if hn > 0 else np.inf
                if one_at_a_time:
                    # instant time: a request runs to its end (through its decode instance) before
                    # the next one arrives
                    if j >= 0 or hn > 0:
                        ta_trace = np.inf
                    if j >= 0:
                        th = np.inf
                ta = ta_trace if ta_trace <= th else th
                if next_snap <= ta and next_snap <= te and next_snap < np.inf:
                    # what instances report (running, waiting, blocks held) reaches the router
                    # every `lag` seconds: the state at k x lag (no snapshot while nothing changes)
                    seen[:, V_RUNNING:] = view[:, V_RUNNING:]  # what instances report
                    nxt = ta if ta < te else te
                    if nxt == np.inf:
                        next_snap = np.inf
                    else:
                        k_last = np.floor(nxt / lag)
                        snap_k = snap_k + 1.0 if k_last <= snap_k else k_last
                        next_snap = snap_k * lag
                    continue
                if j >= 0 and busy[j] and te <= ta:
                    # ---- the end of instance j's step: tokens computed, tokens out, finishes ----
                    busy[j] = False
                    now = te
                    last_now = now
                    state = states[j]
                    cj = counters[j]
                    running = running_all[j]
                    nrun = nrun_all[j]
                    for r in range(nrun):
                        i = running[r]
                        m = new_tokens[i]
                        if m <= 0:
                            continue
                        new_tokens[i] = 0
                        computed[i] += m
                        computed_total[i] += m
                        if computed[i] >= target[i]:
                            generated[i] += 1
                            if generated[i] == 1:
                                first_s[i] = now
                                view[j, V_PREFILL_TOKENS] -= L[i] - routed_overlap[i]
                                view[j, V_QUEUE_S] -= routed_est[i]
                            else:
                                # the gap since its previous token, into a log histogram (ITL_RATIO apart)
                                gap = now - last_token[i]
                                itl[ITL_SUM] += gap
                                itl[ITL_COUNT] += 1
                                if gap > itl[ITL_MAX]:
                                    itl[ITL_MAX] = gap
                                k = 0
                                if gap > ITL_MIN_S:
                                    k = int(np.log(gap / ITL_MIN_S) / np.log(ITL_RATIO)) + 1
                                    if k >= itl_bins:
                                        k = itl_bins - 1
                                itl[ITL_HEAD + k] += 1
                            last_token[i] = now
                            if generated[i] < outputs[i] and not (disagg and j < n_prefill):
                                target[i] = computed[i] + 1
                                decoding[i] = True
                                continue
                            # the request leaves instance j: finished, or (a prefill instance) its
                            # prompt done, its blocks staying cached here while its KV goes to a
                            # decode instance, arriving after the transfer (heap push)
                            _release(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n,
                                     dec_pinned, bs, tiers, j)
                            if generated[i] >= outputs[i]:
                                status[i] = FINISHED
                                finish_s[i] = now
                                done += 1
                            else:
                                status[i] = WAITING_ARRIVAL
                                target[i] = computed[i] + 1
                                cj[K_HANDOFFS] += 1
                                cj[K_TRANSFER_US] += np.int64(xfer_s[i] * 1e6 + 0.5)
                                hn = _heap_push(hq_t, hq_i, hn, now + xfer_s[i], i)
                            view[j, V_REQUESTS] -= 1
                            if router == ROUTER_DYNAMO and j < n_prefill:
                                for k in range(_full_blocks(L[i], P[i], bs)):
                                    b = blocks[offsets[i] + k]
                                    track[j, b] -= 1
                                    if track[j, b] == 0:
                                        view[j, V_BLOCKS] -= 1
                    # compact the running list (finished requests leave, order kept)
                    w = 0
                    for r in range(nrun):
                        i = running[r]
                        if status[i] == RUNNING:
                            running[w] = i
                            w += 1
                    nrun_all[j] = w
                    view[j, V_HELD] = state.hold[HELD]
                    # time series of the whole cluster, thinned by doubling the stride when full
                    steps_all += 1
                    if steps_all % stride == 0:
                        if nseries == series_cap:
                            for s in range(series_cap // 2):
                                for col in range(NUM_SERIES):
                                    series[s, col] = series[2 * s + 1, col]
                            nseries = series_cap // 2
                            stride *= 2
                        series[nseries, S_TIME] = now
                        tot_run = 0
                        tot_wait = 0
                        tot_held = 0
                        tot_hit = 0
                        tot_prompt = 0
                        for q in range(N):
                            tot_run += nrun_all[q]
                            tot_wait += qlen[q]
                            tot_held += states[q].hold[HELD]
                            tot_hit += counters[q, K_HIT_SUM]
                            tot_prompt += counters[q, K_PROMPT_SUM]
                        series[nseries, S_RUNNING] = tot_run
                        series[nseries, S_WAITING] = tot_wait
                        series[nseries, S_HELD] = tot_held
                        series[nseries, S_HIT] = tot_hit
                        series[nseries, S_PROMPT] = tot_prompt
                        nseries += 1
                    continue
                if ta < np.inf and ta <= te and ta != ta_trace:
                    # ---- a request's KV arrives from its prefill instance: the least loaded
                    # decode instance (fewest requests in flight) takes it ----
                    i = hq_i[0]
                    hn = _heap_pop(hq_t, hq_i, hn)
                    now = ta
                    last_now = now
                    j = n_prefill
                    for q in range(n_prefill + 1, N):
                        if view[q, V_REQUESTS] < view[j, V_REQUESTS]:
                            j = q
                    decode_of[i] = j
                    need = P[i] + (extra_blocks(L[i] + outputs[i] - 1, L[i], bs) if output_kv else 0)
                    if need > capacity:
                        status[i] = REJECTED
                        counters[j, K_REJECTED] += 1
                        done += 1
                        continue
                    status[i] = WAITING
                    kv_in[i] = True
                    _q_push_back(j, i, qhead, qtail, qlen, qnext, qprev)
                    view[j, V_REQUESTS] += 1
                    if not busy[j] and end_t[j] == np.inf:
                        end_t[j] = now
                    continue
                if ta < np.inf and ta <= te:
                    # ---- an arrival: the router picks an instance ----
                    i = next_arrival
                    next_arrival += 1
                    now = ta
                    last_now = now
                    if router == ROUTER_FIXED:
                        j = assigned[i]
                    else:
                        src = view
                        if lag > 0:
                            # the router's own counts are current; what instances report is the snapshot's
                            seen[:, :V_RUNNING] = view[:, :V_RUNNING]
                            src = seen
                        start = offsets[i]
                        full = _full_blocks(L[i], P[i], bs)
                        for q in range(n_prefill):
                            if router == ROUTER_SGLANG:
                                # the router's tree of the prompts it routed to q
                                k = 0
                                while k < P[i] and track[q, blocks[start + k]] != 0:
                                    k += 1
                                overlap[q] = k
                            elif router != ROUTER_LEAST_LOADED:
                                overlap[q] = driver_prefix(states[q], blocks, start, start + P[i], L[i], bs)
                                if router == ROUTER_MOONCAKE and n_tiers > 0:
                                    # Conductor's view: the prefix in the instance's own tiers and in
                                    # the global store too, at the time it takes to load
                                    overlap[q] = tier_prefix(states[q], tiers, q, blocks, start, overlap[q],
                                                             prefix_limit(states[q], P[i], L[i], bs), route_counts,
                                                             False)
                                    fetch[q] = fetch_seconds(tiers, route_counts)
                                elif router == ROUTER_DYNAMO and n_tiers > 0:
                                    # Dynamo's per-tier credit for the blocks past the GPU prefix
                                    tier_prefix(states[q], tiers, q, blocks, start, overlap[q],
                                                prefix_limit(states[q], P[i], L[i], bs), route_counts, False)
                                    fetch[q] = tier_credit(tiers, route_counts)
                            if router == ROUTER_DYNAMO:
                                k = 0
                                while k < full and track[q, blocks[start + k]] != 0:
                                    k += 1
                                depth[q] = k
                        j = _router_pick(router, rcfg, src[:n_prefill], overlap[:n_prefill], depth[:n_prefill],
                                         fetch[:n_prefill], P[i], L[i], bs, tm, agg)
                    inst_of[i] = j
                    cj = counters[j]
                    need = P[i] + (extra_blocks(L[i] + outputs[i] - 1, L[i], bs) if output_kv else 0)
                    never = need > capacity
                    if style == STYLE_SGLANG:
                        # SGLang's admission needs prompt + reserved outputs + a page below the pool
                        left = outputs[i] if outputs[i] < clip else clip
                        never = never or L[i] + left + bs >= capacity * bs
                    if never:
                        status[i] = REJECTED
                        cj[K_REJECTED] += 1
                        done += 1
                        continue
                    status[i] = WAITING
                    target[i] = L[i]
                    _q_push_back(j, i, qhead, qtail, qlen, qnext, qprev)
                    ov = overlap[j] * bs if router != ROUTER_FIXED else 0
                    routed_overlap[i] = ov if ov < L[i] else L[i]
                    view[j, V_REQUESTS] += 1
                    view[j, V_PREFILL_TOKENS] += L[i] - routed_overlap[i]
                    if router == ROUTER_DYNAMO:
                        # unique prompt blocks in flight (full blocks, as Dynamo hashes them)
                        for k in range(_full_blocks(L[i], P[i], bs)):
                            b = blocks[offsets[i] + k]
                            if track[j, b] == 0:
                                view[j, V_BLOCKS] += 1
                            track[j, b] += 1
                    elif router == ROUTER_SGLANG:
                        for k in range(P[i]):
                            track[j, blocks[offsets[i] + k]] = 1
                    elif router == ROUTER_MOONCAKE:
                        routed_est[i] = _prefill_estimate(tm, agg, L[i], routed_overlap[i]) + fetch[j]
                        view[j, V_QUEUE_S] += routed_est[i]
                    if not busy[j] and end_t[j] == np.inf:
                        end_t[j] = now  # an idle instance wakes
                    continue
                if j < 0:
                    break  # nothing will happen any more
                # ---- instance j schedules its next step at time te ----
                now = te
                last_now = now
                state = states[j]
                cj = counters[j]
                running = running_all[j]
                nrun = nrun_all[j]
                ratio = ratio_all[j]
                chunk_req = chunk_all[j]
                if nrun == 0 and qlen[j] == 0:
                    ratio_all[j] = fcfg[F_RATIO_INIT]  # SGLang resets its estimate when idle
                    end_t[j] = np.inf
                    continue
                if counters[j, K_OUT_OF_ROOM] != 0:
                    return now
                if qlen[j] > cj[K_PEAK_WAITING]:
                    cj[K_PEAK_WAITING] = qlen[j]
                budget = cfg[C_MAX_BATCHED]
                nbatch = 0
                preempted = False
                if style == STYLE_VLLM:
                    # 2a. running requests first, in admission order
                    r = 0
                    while r < nrun:
                        i = running[r]
                        if budget <= 0:
                            break
                        if computed[i] < target[i]:
                            want_new = target[i] - computed[i]
                            if want_new > budget:
                                want_new = budget
                        else:
                            want_new = 1
                        want = P[i] + (extra_blocks(computed[i] + want_new, L[i], bs) if output_kv else 0)
                        ok = True
                        while not _grow(state, i, blocks, offsets, P, L, handles, base_len, dec_pinned, want, bs,
                                        capacity, cj, tiers, j):
                            # preempt the most recently admitted request (it may be i itself)
                            victim = running[nrun - 1]
                            nrun -= 1
                            budget += _taken_back(victim, state, blocks, offsets, P, L, handles, base_len, base_input,
                                                  base_n, dec_pinned, bs, computed, decoding, target, generated,
                                                  status, preempts, new_tokens, cj, tiers, j)
                            _q_push_front(j, victim, qhead, qtail, qlen, qnext, qprev)
                            preempted = True
                            if victim == i:
                                ok = False
                                break
                        if not ok:
                            break
                        new_tokens[i] = want_new
                        budget -= want_new
                        r += 1
                    # 2b. waiting requests, FCFS, only in a step without preemption
                    if not preempted:
                        while qlen[j] > 0 and budget > 0 and nrun < max_seqs:
                            i = qhead[j]
                            if not _schedule(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n,
                                             dec_pinned, bs, capacity, precheck, output_kv, hit_out, now, target,
                                             computed, status, preempts, sched_s, hit_tokens, hit_blocks, cj, tiers, j,
                                             tier_hits, load_s, kv_in, decoding):
                                break
                            _q_pop_front(j, qhead, qtail, qlen, qnext, qprev)
                            want_new = target[i] - computed[i]
                            if cfg[C_CHUNKED] == 0 and want_new > budget and nrun > 0:
                                # without chunked prefill a prompt waits for a step with room for all of it
                                _release(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n,
                                         dec_pinned, bs, tiers, j)
                                _q_push_front(j, i, qhead, qtail, qlen, qnext, qprev)
                                status[i] = WAITING
                                break
                            if want_new > budget:
                                want_new = budget
                            running[nrun] = i
                            nrun += 1
                            new_tokens[i] = want_new
                            budget -= want_new
                else:
                    # SGLang: a prefill batch when one can be formed (decodes pause), else a decode batch
                    npre = 0
                    rem_total = (capacity - state.hold[HELD]) * bs
                    for r in range(nrun):
                        i = running[r]
                        if i != chunk_req:
                            left = outputs[i] - generated[i]
                            rem_total -= (left if left < clip else clip) * ratio
                    chunking = cfg[C_CHUNKED] != 0
                    rem_chunk = cfg[C_CHUNK_SIZE] if chunking else np.int64(1) << 62
                    rem_input = cfg[C_MAX_PREFILL]
                    if chunk_req >= 0:
                        i = chunk_req
                        m = target[i] - computed[i]
                        if m > rem_chunk:
                            m = rem_chunk - rem_chunk % bs if rem_chunk >= bs else rem_chunk
                        else:
                            chunk_req = -1
                            left = outputs[i] - generated[i]
                            rem_total -= left if left < clip else clip
                        new_tokens[i] = m
                        npre += 1
                        rem_chunk -= m
                        rem_input -= m
                        rem_total -= _ceil_page(m, bs)
                    if chunk_req < 0 and qlen[j] > 0:
                        if cfg[C_LPM] != 0 and qlen[j] <= cfg[C_LPM_FCFS_ABOVE]:
                            # longest cached prefix first (stable), matched before sorting
                            count = 0
                            i = qhead[j]
                            while i >= 0:
                                order[count] = i
                                count += 1
                                lpm_key[i] = driver_prefix(state, blocks, offsets[i], offsets[i] + P[i], target[i], bs)
                                i = qnext[i]
                            _sort_by_key_desc(order, count, lpm_key)
                            qhead[j] = -1
                            qtail[j] = -1
                            qlen[j] = 0
                            for q in range(count):
                                _q_push_back(j, order[q], qhead, qtail, qlen, qnext, qprev)
                        while qlen[j] > 0 and nrun < max_seqs and rem_total > 0 and rem_chunk > 0 and rem_input > 0:
                            i = qhead[j]
                            k = driver_prefix(state, blocks, offsets[i], offsets[i] + P[i], target[i], bs)
                            hit = k * bs if k * bs < target[i] else target[i]
                            extend = target[i] - hit if hit < target[i] else 1
                            left = outputs[i] - generated[i]
                            reserve = left if left < clip else clip
                            if extend + reserve + bs >= rem_total:
                                break
                            if not chunking and npre > 0 and _ceil_page(extend, bs) >= rem_input:
                                break
                            if not _schedule(state, i, blocks, offsets, P, L, handles, base_len, base_input, base_n,
                                             dec_pinned, bs, capacity, precheck, output_kv, hit_out, now, target,
                                             computed, status, preempts, sched_s, hit_tokens, hit_blocks, cj, tiers, j,
                                             tier_hits, load_s, kv_in, decoding):
                                break
                            _q_pop_front(j, qhead, qtail, qlen, qnext, qprev)
                            extend = target[i] - computed[i]
                            running[nrun] = i
                            nrun += 1
                            npre += 1
                            if extend > rem_chunk:
                                m = rem_chunk - rem_chunk % bs if rem_chunk >= bs else rem_chunk
                                new_tokens[i] = m
                                chunk_req = i
                                rem_total -= _ceil_page(m, bs) + bs
                                rem_chunk -= m
                                break
                            new_tokens[i] = extend
                            rem_total -= _ceil_page(extend, bs) + bs + reserve
                            rem_chunk -= _ceil_page(extend, bs)
                            rem_input -= _ceil_page(extend, bs)
                    if npre == 0:
                        # decode batch: every decoding request feeds one token; retract when blocks run out
                        retracted = False
                        r = 0
                        while r < nrun:
                            i = running[r]
                            if not decoding[i]:
                                r += 1
                                continue
                            want = P[i] + (extra_blocks(computed[i] + 1, L[i], bs) if output_kv else 0)
                            ok = True
                            while not _grow(state, i, blocks, offsets, P, L, handles, base_len, dec_pinned, want, bs,
                                            capacity, cj, tiers, j):
                                # fewest generated tokens first, the longest prompt on ties; keep one
                                v = -1
                                for q in range(nrun):
                                    u = running[q]
                                    if not decoding[u]:
                                        continue
                                    if v < 0 or generated[u] < generated[v] or (generated[u] == generated[v] and L[u] > L[v]):
                                        v = u
                                if v < 0 or nrun <= 1:
                                    ok = False
                                    break
                                _taken_back(v, state, blocks, offsets, P, L, handles, base_len, base_input, base_n,
                                            dec_pinned, bs, computed, decoding, target, generated, status, preempts,
                                            new_tokens, cj, tiers, j)
                                _q_push_back(j, v, qhead, qtail, qlen, qnext, qprev)
                                retracted = True
                                # drop v from the running list, keeping the order
                                w = 0
                                for q in range(nrun):
                                    if running[q] != v:
                                        running[w] = running[q]
                                        w += 1
                                    elif q < r:
                                        r -= 1
                                nrun = w
                                if v == i:
                                    ok = False
                                    break
                            if not ok:
                                if status[i] == RUNNING:
                                    r += 1  # no room even alone: it waits (cannot happen for admitted requests)
                                continue
                            new_tokens[i] = 1
                            r += 1
                        if retracted:
                            out_sum = 0
                            max_sum = 0
                            for q in range(nrun):
                                u = running[q]
                                out_sum += generated[u]
                                max_sum += outputs[u]
                            ratio = (out_sum + 20.0 * nrun) / (max_sum + 1.0)
                            if ratio > 1.0:
                                ratio = 1.0
                        else:
                            ratio -= fcfg[F_RATIO_DECAY]
                            if ratio < fcfg[F_RATIO_MIN]:
                                ratio = fcfg[F_RATIO_MIN]
                nrun_all[j] = nrun
                ratio_all[j] = ratio
                chunk_all[j] = chunk_req
                view[j, V_WAITING] = qlen[j]
                view[j, V_RUNNING] = nrun
                view[j, V_HELD] = state.hold[HELD]
                # 3. the step's batch and its duration
                agg[:] = 0.0
                load = 0.0
                for r in range(nrun):
                    i = running[r]
                    m = new_tokens[i]
                    if m <= 0:
                        continue
                    nbatch += 1
                    load += load_s[i]
                    load_s[i] = 0.0
                    c = computed[i]
                    if not decoding[i]:
                        agg[AGG_PREFILL_REQS] += 1
                        agg[AGG_PREFILL_NEW] += m
                        agg[AGG_PREFILL_CACHED] += c
                        agg[AGG_KEYS_FULL] += m * c + m * (m + 1) // 2
                        agg[AGG_TOUCHED_FULL] += c + m
                        if window > 0:
                            agg[AGG_KEYS_SW] += _sum_min_c(c + 1, c + m, window)
                            tw = window + m - 1
                            agg[AGG_TOUCHED_SW] += c + m if c + m < tw else tw
                    else:
                        x = c + 1
                        agg[AGG_DECODE_REQS] += 1
                        agg[AGG_DECODE_CTX] += x
                        agg[AGG_KEYS_FULL] += x
                        agg[AGG_TOUCHED_FULL] += x
                        if window > 0:
                            xw = x if x < window else window
                            agg[AGG_KEYS_SW] += xw
                            agg[AGG_TOUCHED_SW] += xw
                if nbatch == 0:
                    cj[K_STALLS] += 1
                    if next_arrival < n or hn > 0:
                        end_t[j] = np.inf  # waits for a request routed to it
                        continue
                    # nothing runs, nothing will arrive, and the waiting requests do not fit an
                    # empty instance (the arrival rule catches all but SGLang's retracted requests
                    # whose outputs outgrow its 4096-token clip): they are rejected and counted
                    while qlen[j] > 0:
                        i = _q_pop_front(j, qhead, qtail, qlen, qnext, qprev)
                        status[i] = REJECTED
                        cj[K_REJECTED] += 1
                        cj[K_NEVER_ADMITTED] += 1
                        done += 1
                        view[j, V_REQUESTS] -= 1
                    end_t[j] = np.inf
                    if nrun == 0:
                        continue
                    cj[K_STUCK] = nrun  # running requests that can no longer be scheduled: a bug
                    return now
                # the decoding requests' tokens (Dynamo's decode input)
                agg[AGG_ACTIVE_KV] = agg[AGG_DECODE_CTX]
                dt = step_seconds(tm, agg)
                if load > 0.0:
                    # KV loaded from the tiers: before the step's compute, or beside it layer by layer
                    cj[K_LOAD_US] += np.int64(load * 1e6 + 0.5)
                    dt = (dt if dt > load else load) if overlap_load else dt + load
                end_t[j] = now + dt
                busy[j] = True
                cj[K_BUSY_US] += np.int64(dt * 1e6 + 0.5)
                cj[K_STEPS] += 1
                if agg[AGG_PREFILL_REQS] > 0:
                    cj[K_PREFILL_STEPS] += 1
                cj[K_PREFILL_TOKENS] += np.int64(agg[AGG_PREFILL_NEW])
                cj[K_DECODE_TOKENS] += np.int64(agg[AGG_DECODE_REQS])
                if state.hold[HELD] > cj[K_PEAK_HELD]:
                    cj[K_PEAK_HELD] = state.hold[HELD]
                if nrun > cj[K_PEAK_RUNNING]:
                    cj[K_PEAK_RUNNING] = nrun
            series_meta[0] = nseries
            series_meta[1] = stride
            return last_now

        return run_cluster


    @helper(inline=False)
    def _q_push_back(j, i, qhead, qtail, qlen, qnext, qprev):
        qprev[i] = qtail[j]
        qnext[i] = -1
        if qtail[j] >= 0:
            qnext[qtail[j]] = i
        else:
            qhead[j] = i
        qtail[j] = i
        qlen[j] += 1

    @helper(inline=False)
    def _q_push_front(j, i, qhead, qtail, qlen, qnext, qprev):
        qnext[i] = qhead[j]
        qprev[i] = -1
        if qhead[j] >= 0:
            qprev[qhead[j]] = i
        else:
            qtail[j] = i
        qhead[j] = i
        qlen[j] += 1

    @helper(inline=False)
    def _q_pop_front(j, qhead, qtail, qlen, qnext, qprev):
        i = qhead[j]
        qhead[j] = qnext[i]
        if qhead[j] >= 0:
            qprev[qhead[j]] = -1
        else:
            qtail[j] = -1
        qnext[i] = -1
        qlen[j] -= 1
        return i


    @helper(inline=False)
    def _heap_push(ht, hi, hn, t, i):
        """Push (t, i) on the binary heap ht/hi of hn entries (earliest t first, then the lowest i)."""
        k = hn
        ht[k] = t
        hi[k] = i
        while k > 0:
            parent = (k - 1) // 2
            if ht[parent] < ht[k] or (ht[parent] == ht[k] and hi[parent] < hi[k]):
                break
            ht[parent], ht[k] = ht[k], ht[parent]
            hi[parent], hi[k] = hi[k], hi[parent]
            k = parent
        return hn + 1

    @helper(inline=False)
    def _heap_pop(ht, hi, hn):
        """Drop the heap's top (read it first); returns the new size."""
        hn -= 1
        ht[0] = ht[hn]
        hi[0] = hi[hn]
        k = 0
        while True:
            a = 2 * k + 1
            if a >= hn:
                break
            b = a + 1
            c = a
            if b < hn and (ht[b] < ht[a] or (ht[b] == ht[a] and hi[b] < hi[a])):
                c = b
            if ht[k] < ht[c] or (ht[k] == ht[c] and hi[k] < hi[c]):
                break
            ht[c], ht[k] = ht[k], ht[c]
            hi[c], hi[k] = hi[k], hi[c]
            k = c
        return hn

    @helper(inline=False)
    def _full_blocks(prompt_tokens, prompt_blocks, bs):
        """The prompt's full blocks, as Dynamo hashes them (at most its block ids)."""
        full = prompt_tokens // bs
        return full if full < prompt_blocks else prompt_blocks

    @helper(inline=False)
    def _ceil_page(tokens, bs):
        return (tokens + bs - 1) // bs * bs

    @helper(inline=False)
    def _sort_by_key_desc(order, count, key):
        """Stable insertion sort of order[:count] by key[order[q]], largest first."""
        for a in range(1, count):
            v = order[a]
            b = a - 1
            while b >= 0 and key[order[b]] < key[v]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = v

    @helper(inline=False)
    def _sum_min_c(a, b, w):
        """sum(min(k, w) for k in a..b), a <= b (timing._sum_min)."""
        if b <= w:
            return (a + b) * (b - a + 1) // 2
        if a > w:
            return w * (b - a + 1)
        return (a + w) * (w - a + 1) // 2 + w * (b - w)

    run_vllm = _make_kernel(STYLE_VLLM)
    run_sglang = _make_kernel(STYLE_SGLANG)
    for _kernel in (run_vllm, run_sglang):
        key_cache_on_sources(_kernel, [__file__, timing.__file__, _router.__file__, _tiers.__file__,
                                       str(Path(__file__).parents[1] / "engine" / "driver.py"),
                                       *sorted(str(p) for p in Path(policies.__file__).parent.glob("*.py"))])

