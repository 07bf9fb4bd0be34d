"""SimReport: what one simulated instance did, per request and in summary.

Definitions (docs/serving.md, "Outputs"), all over the requests that finished, in seconds:

- queueing delay = scheduled - arrival (its first schedule);
- TTFT = first token - arrival; E2E = finish - arrival;
- TPOT = (finish - first token) / (output tokens - 1), per request with at least 2 output tokens;
- percentiles are nearest-rank on the sorted values at index ``round((n - 1) x p / 100)`` (halves
  away from zero), as Dynamo's replay report computes them: every figure is one request's value;
- throughput = finished requests (or their tokens) / the last finish time (arrivals start at 0);
- goodput = finished requests meeting every given SLO / the last finish time;
- hit rate = hit tokens at each request's first schedule / prompt tokens, token-weighted, over the
  finished requests.

Every figure of the summary counts the judged requests only: those arriving after the run's
warm-up (serving/warmup.py; none by default in the Python API, so the whole trace), which were
served in the same run but only warmed the cache and the queues. The summary's window says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import closed_stats
from .kernel import ITL, ITL_HEAD, ITL_MIN_S, ITL_RATIO, SERIES, STATUS
from .stats import PERCENTILES, latency_stats, nearest_rank  # noqa: F401 (re-exported)
from .samples import to_json as samples_json  # (also a beam search's summary: the same shape)
from .timing.host import prediction_factors, widen_band
from .warmup import JudgedSpan

FINISHED, REJECTED, REFUSED = STATUS.FINISHED, STATUS.REJECTED, STATUS.REFUSED
ITL_SUM, ITL_MAX, ITL_COUNT = ITL.ITL_SUM, ITL.ITL_MAX, ITL.ITL_COUNT
S_TIME, S_RUNNING, S_WAITING, S_HELD, S_HIT, S_PROMPT = (SERIES.S_TIME, SERIES.S_RUNNING, SERIES.S_WAITING,
                                                         SERIES.S_HELD, SERIES.S_HIT, SERIES.S_PROMPT)

LATENCIES = ("ttft", "tpot", "e2e", "queueing")


@dataclass
class SimReport(JudgedSpan):
    """One instance's simulation of a trace (see the module docstring for every definition)."""

    policy: str
    params: dict
    capacity_blocks: int
    block_size: int
    scheduler: dict
    time_model: dict
    arrivals: dict
    output_kv: bool
    trace_source: str
    arrival_s: np.ndarray
    scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    hit_tokens: np.ndarray
    output_tokens: np.ndarray
    preemptions: np.ndarray
    status: np.ndarray
    counters: dict
    policy_counters: dict
    series: np.ndarray
    end_s: float
    itl_histogram: np.ndarray | None = None  # the kernel's ITL array (sum, max, count, log histogram: sim.h)
    sequential_hit_rate: float | None = None
    sequential_evictions: int | None = None  # the policy's evictions in the sequential replay
    capacity_source: dict = field(default_factory=dict)
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    instances: int = 1
    router: str | None = None
    instance: np.ndarray | None = None  # per request: the instance that served it (several instances)
    instance_busy_s: list = field(default_factory=list)  # per instance: the time its steps took
    router_lag_ms: float = 0.0  # the age of the instance state a state-aware router reads
    tiers: dict | None = None  # tiers below HBM: hit tokens per tier (simulate.tier_summary)
    prefill_instances: int | None = None  # disaggregated: instances 0..P-1 prefill, the rest decode
    decode_instance: np.ndarray | None = None  # disaggregated: per request, its decode instance (-1: none)
    #: the calibrated roofline's error band: "low" and "high", each the latencies() of the same run
    #: with every step at that end of its kind's measured/predicted band; "bands" those ratios
    band: dict | None = None
    max_model_len: int | None = None  # requests whose prompt + outputs exceed it were refused at arrival
    max_model_len_source: str | None = None
    #: a hybrid model's (sliding-window, chunked-local or Mamba layers) KV semantics: vLLM's hybrid
    #: manager ("hybrid": its groups, block ids) or every layer as full attention ("full", and why);
    #: None for a model with one kind of layer, or none (serving/semantics.py)
    kv_semantics: dict | None = None
    #: the warm-up (serving/warmup.py Warmup.to_dict()): requests arriving in its first `seconds`
    #: are served but not judged; None: no warm-up, every request is judged
    warmup: dict | None = None
    #: closed-loop arrivals (closed_stats.per_request): each request's session, think time, lane and
    #: what it waited for; None for the open loop
    closed: dict | None = None
    #: a closed loop of N concurrent sessions: its steady state's end (closed_stats.steady_until);
    #: requests arriving from then on are served but not judged
    judged_until_s: float | None = None

    @property
    def warmup_s(self) -> float:
        return float((self.warmup or {}).get("seconds", 0.0))

    #: the served miss account (serving/misses.py): {"account": MissAccount over the finished
    #: judged requests (`counted`), "concurrency": its split}; None without a sequential replay with an account
    misses: dict | None = None
    #: speculative decoding (serving/speculative.py summary): the method, the acceptance model and
    #: the accepted tokens per step measured in the run; None without
    speculative: dict | None = None
    #: parallel sampling (serving/samples.py summarize): the groups' shared and divergent KV and TTFT;
    #: None when every request samples one completion
    samples: dict | None = None
    #: beam search (serving/beam.py summarize): the groups' rounds, requests, hits, KV and time to the answer
    beam: dict | None = None

    def misses_summary(self) -> dict | None:
        """The served miss account's totals over the finished judged requests (`counted`), what is not measured, and
        the concurrency cause's split."""
        if self.misses is None:
            return None
        account = self.misses["account"]
        totals = account.tokens[self.counted].sum(axis=0)
        from ..engine.misses import CAUSES

        return {"tokens": {c: int(totals[k]) for k, c in enumerate(CAUSES)},
                "not_measured": dict(account.not_measured), "concurrency": dict(self.misses["concurrency"])}

    def per_instance(self) -> list[dict]:
        """Per instance: requests, hit rate, TTFT p50/p90 and busy time (several instances)."""
        which = np.zeros(self.num_requests, dtype=np.int64) if self.instance is None else self.instance
        out = []
        for k in range(self.instances):
            mine = (which == k) & self.counted
            prompt = int(self.prompt_tokens[mine].sum())
            ttft = np.sort(self.ttft_s[mine])
            role = None if self.prefill_instances is None else ("prefill" if k < self.prefill_instances else "decode")
            if role == "decode":
                mine = (self.decode_instance == k) & self.counted
            out.append({"instance": k, "role": role,
                        "requests": int(mine.sum() if role == "decode" else ((which == k) & self.judged).sum()),
                        "finished": int(mine.sum()),
                        "hit_rate": int(self.hit_tokens[mine].sum()) / prompt if prompt else 0.0,
                        "ttft_p50_s": nearest_rank(ttft, 50), "ttft_p90_s": nearest_rank(ttft, 90),
                        "busy_s": self.instance_busy_s[k] if k < len(self.instance_busy_s) else None})
        return out

    def balance(self) -> dict | None:
        """How evenly the instances share the work (several instances): max / mean of requests,
        prefill tokens computed (prompt tokens not hit) and busy time, and the spread of their
        hit rates (token-weighted, finished requests)."""
        if self.instances < 2:
            return None
        rows = self.per_instance()
        which = np.zeros(self.num_requests, dtype=np.int64) if self.instance is None else self.instance
        ok = self.counted
        prefill = [int((self.prompt_tokens - self.hit_tokens)[ok & (which == k)].sum()) for k in range(self.instances)]

        def ratio(values):
            mean = sum(values) / len(values) if values else 0
            return max(values) / mean if mean > 0 else None

        rates = [r["hit_rate"] for r in rows if r["finished"]]
        return {"requests_max_over_mean": ratio([r["requests"] for r in rows]),
                "prefill_tokens_max_over_mean": ratio(prefill),
                "busy_max_over_mean": self.load_balance(),
                "hit_rate_min": min(rates) if rates else None, "hit_rate_max": max(rates) if rates else None}

    def load_balance(self) -> float | None:
        """max / mean busy time over the instances (1.0: perfectly even)."""
        busy = [b for b in self.instance_busy_s if b is not None]
        mean = sum(busy) / len(busy) if busy else 0.0
        return max(busy) / mean if mean > 0 else None

    # ---- per request ----
    @property
    def finished(self) -> np.ndarray:
        return self.status == FINISHED

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def queueing_s(self) -> np.ndarray:
        return self.scheduled_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Per request; NaN for requests with fewer than 2 output tokens (or unfinished)."""
        out = np.maximum(self.output_tokens, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = (self.finish_s - self.first_token_s) / (out - 1)
        return np.where(out >= 2, t, np.nan)

    # ---- summary ----
    @property
    def num_requests(self) -> int:
        return int(self.status.size)

    @property
    def num_finished(self) -> int:
        return int(self.finished.sum())

    @property
    def num_rejected(self) -> int:
        return int((self.status == REJECTED).sum())

    @property
    def num_refused(self) -> int:
        """Requests refused at arrival for exceeding max_model_len (they never reach an instance)."""
        return int((self.status == REFUSED).sum())

    @property
    def num_judged(self) -> int:
        return int(self.judged.sum())

    @property
    def hit_rate(self) -> float:
        """Hit tokens at first schedule / prompt tokens, over finished judged requests (token-weighted)."""
        ok = self.counted
        prompt = int(self.prompt_tokens[ok].sum())
        return int(self.hit_tokens[ok].sum()) / prompt if prompt else 0.0

    @property
    def duration_s(self) -> float:
        """From the judged span's start to its last finish (the whole run: from the first arrival, 0 s)."""
        ok = self.counted
        return max(float(self.finish_s[ok].max()) - self.judged_start_s, 0.0) if ok.any() else 0.0

    def good(self) -> np.ndarray:
        """Finished judged requests meeting every SLO given (all of them when none is)."""
        ok = self.counted.copy()
        if self.slo_ttft_s is not None:
            ok &= self.ttft_s <= self.slo_ttft_s
        if self.slo_tpot_s is not None:
            tpot = self.tpot_s
            ok &= np.isnan(tpot) | (tpot <= self.slo_tpot_s)
        return ok

    def itl_stats(self) -> dict:
        """Every gap between two consecutive tokens of a request (all requests): mean and max exact,
        percentiles from the log histogram, at most 0.1% above the true value (the bin's upper edge
        at the nearest rank)."""
        h = self.itl_histogram
        if h is None or h[ITL_COUNT] == 0:
            return {"count": 0, "mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES},
                    "max": float("nan")}
        count = int(h[ITL_COUNT])
        cum = np.cumsum(h[ITL_HEAD:])
        out = {"count": count, "mean": float(h[ITL_SUM] / count)}
        for p in PERCENTILES:
            rank = int(math.floor((count - 1) * p / 100.0 + 0.5))  # 0-based, as nearest_rank
            k = int(np.searchsorted(cum, rank + 1))
            out[f"p{p}"] = min(ITL_MIN_S * ITL_RATIO ** k, float(h[ITL_MAX])) if k else 0.0
        out["max"] = float(h[ITL_MAX])
        return out

    def latencies(self) -> dict:
        ok = self.counted
        tpot = self.tpot_s[ok]
        return {
            "ttft": latency_stats(self.ttft_s[ok]),
            "tpot": latency_stats(tpot[~np.isnan(tpot)]),
            "itl": self.itl_stats(),
            "e2e": latency_stats(self.e2e_s[ok]),
            "queueing": latency_stats(self.queueing_s[ok]),
        }

    def latency_band(self) -> dict | None:
        """Per latency and statistic, [low, high]: the same run with every step at the low and the
        high end of the time model's calibration band (None without a calibrated time model)."""
        if self.band is None:
            return None
        lo, hi = self.band["low"], self.band["high"]
        out = {key: {stat: [lo[key][stat], hi[key][stat]] for stat in lo[key] if stat != "count"} for key in lo}
        out["calibrated_on"] = self.time_model.get("calibrated_on")
        out["ratio_bands"] = self.band["bands"]
        if "host" in self.band:
            out["host_band"] = self.band["host"]
        out["warnings"] = list(self.band.get("warnings", []))
        out["text"] = ("each latency's range when every step takes the low / high end of the calibrated roofline's "
                       "measured/predicted step-time band (5th-95th percentile, per prefill, decode and mixed step) and "
                       "the host CPU's terms the low / high end of theirs (their spread across the measured deployments)")
        factors = prediction_factors(self.band["host"]["low"]["host"]) if "host" in self.band else {}
        if factors:  # how far measured runs scatter around the model: the prediction band
            centre = self.latencies()
            out["prediction"] = {key: {stat: list(widen_band(centre[key][stat], *out[key][stat], factors[key]))
                                       for stat in out[key] if None not in (centre[key][stat], *out[key][stat])}
                                 for key in factors}
            out["prediction"]["factors"] = {k: list(v) for k, v in factors.items()}
            out["prediction"]["text"] = ("TTFT, TPOT, ITL and end to end with each end of the band widened to the point "
                                         "estimate x the 5th / 95th percentile of measured / simulated over measured vLLM "
                                         "runs (benchmarks/calibrate_host.py)")
        return out

    def summary(self) -> dict:
        from .verdict import banded

        ok = self.counted
        judged = self.judged
        dur = self.duration_s
        per_s = (lambda x: x / dur) if dur > 0 else (lambda x: None)  # no duration: no rate (JSON null)
        out_tokens = int(np.maximum(self.output_tokens[ok], 1).sum())
        in_tokens = int(self.prompt_tokens[ok].sum())
        good = self.good()
        diff = (None if self.sequential_evictions is None or self.policy_counters.get("evictions") is None
                else self.policy_counters["evictions"] - self.sequential_evictions)
        held_peak = self.counters.get("peak_held_blocks", 0)
        return {
            "window": self.window(),
            "requests": int(judged.sum()), "finished": int(ok.sum()),
            "rejected": int(((self.status == REJECTED) & judged).sum()),
            "aborted": int(self.counters.get("aborted", 0)),
            "whole_run": {"requests": self.num_requests, "finished": self.num_finished, "rejected": self.num_rejected,
                          "refused_context": self.num_refused},
            "refused_context": int(((self.status == REFUSED) & judged).sum()), "max_model_len": self.max_model_len,
            "max_model_len_source": self.max_model_len_source,
            "kv_semantics": self.kv_semantics,
            "duration_s": dur,
            "hit_rate": self.hit_rate, "sequential_hit_rate": self.sequential_hit_rate,
            "hit_tokens": int(self.hit_tokens[ok].sum()), "prompt_tokens": in_tokens, "output_tokens": out_tokens,
            "latency_s": self.latencies(),
            "latency_band_s": self.latency_band(),
            "keeps_up": banded(self),
            "throughput": {"requests_per_s": per_s(self.num_finished), "input_tokens_per_s": per_s(in_tokens),
                           "output_tokens_per_s": per_s(out_tokens)},
            "goodput": {"requests_per_s": per_s(int(good.sum())), "good_requests": int(good.sum()),
                        "slo_ttft_s": self.slo_ttft_s, "slo_tpot_s": self.slo_tpot_s},
            "preemptions": int(self.counters.get("preemptions", 0)),
            "preempted_requests": int((self.preemptions > 0).sum()),
            "recomputed_tokens": int(self.counters.get("recomputed_tokens", 0)),
            "peak_running_requests": int(self.counters.get("peak_running", 0)),
            "peak_waiting_requests": int(self.counters.get("peak_waiting", 0)),
            "peak_running_kv_blocks": int(held_peak),
            "peak_running_kv_fraction": held_peak / self.capacity_blocks if self.capacity_blocks else 0.0,
            "steps": int(self.counters.get("steps", 0)),
            "speculative": self.speculative,
            "instances": self.instances, "router": self.router,
            "load_balance_max_over_mean_busy": self.load_balance(),
            "balance": self.balance(),
            "tiers": None if self.tiers is None else {k: v for k, v in self.tiers.items() if k != "tokens_per_tier"},
            "disaggregation": None if self.prefill_instances is None else {
                "prefill_instances": self.prefill_instances,
                "decode_instances": self.instances - self.prefill_instances,
                "handoffs": int(self.counters.get("handoffs", 0)),
                "transfer_s": self.counters.get("transfer_us", 0) / 1e6},
            "evictions": self.policy_counters.get("evictions"),
            "sequential_evictions": self.sequential_evictions,
            # what running requests forced out beyond what one request at a time does: the blocks
            # they hold shrink the cache, and their decode blocks push cached prefixes out
            # (never negative: when concurrency evicts fewer, fewer_evictions says by how many)
            "extra_evictions": None if diff is None else max(diff, 0),
            "fewer_evictions": None if diff is None else max(-diff, 0),
            "closed": None if self.closed is None else closed_stats.summary(self),
            "misses": self.misses_summary(),
            **({} if self.samples is None else {"samples": samples_json(self.samples, per_group=False)}),
            **({} if self.beam is None else {"beam": samples_json(self.beam, per_group=False)}),
        }

    def window(self) -> dict:
        """What the summary counts: the whole run, or the requests after the warm-up (and before a
        closed loop's steady state ends)."""
        n, judged = self.num_requests, self.num_judged
        if self.judged_until_s is not None:
            before = int((self.arrival_s < self.judged_start_s).sum())
            return {"kind": "steady_state", "requests": judged, "warmup_requests": before,
                    "drain_requests": n - judged - before, "warmup": self.warmup,
                    "judged_start_s": self.judged_start_s, "judged_until_s": self.judged_until_s,
                    "text": f"the steady state: the {judged:,} requests arriving from {_seconds(self.judged_start_s)} "
                            f"to {_seconds(self.judged_until_s)} (the first {before:,} of {n:,} are served but not "
                            f"judged: warm-up {(self.warmup or {}).get('text', 'none')}; the last "
                            f"{n - judged - before:,} arrive after every drawn session has started and the first "
                            "lane has gone idle); hit rates, token totals and latencies over the finished ones"}
        if self.warmup_s <= 0:
            return {"kind": "whole_trace", "requests": n, "warmup": self.warmup,
                    "text": f"whole trace ({n:,} requests, from an empty cache; hit rates, token totals and latencies "
                            "over the finished ones)"}
        warm = n - judged
        return {"kind": "after_warmup", "requests": judged, "warmup_requests": warm, "warmup": self.warmup,
                "judged_start_s": self.judged_start_s,
                "text": f"after the warm-up: the {judged:,} requests arriving from {_seconds(self.judged_start_s)} (the "
                        f"first {warm:,} of {n:,} are served but not judged: warm-up {self.warmup['text']}); hit rates, "
                        "token totals and latencies over the finished ones"}

    def request_columns(self) -> dict:
        """Per request, in trace order (seconds; NaN where it never happened)."""
        return {
            "arrival_s": self.arrival_s, "scheduled_s": self.scheduled_s, "first_token_s": self.first_token_s,
            "finish_s": self.finish_s, "prompt_tokens": self.prompt_tokens, "hit_tokens": self.hit_tokens,
            "output_tokens": self.output_tokens, "preemptions": self.preemptions,
            "status": np.where(self.finished, "finished", np.where(self.status == REJECTED, "rejected", np.where(
                self.status == REFUSED, "refused", "unfinished"))),
            "instance": np.zeros(self.num_requests, dtype=np.int64) if self.instance is None else self.instance,
            "judged": self.judged,
            **({} if self.tiers is None else {f"hit_tokens_{k}": v for k, v in self.tiers["tokens_per_tier"].items()}),
            **({} if self.decode_instance is None else {"decode_instance": self.decode_instance}),
            **({} if self.closed is None else {"session": self.closed["session"],
                                               "turn": closed_stats.turn_numbers(self),
                                               "think_s": self.closed["think_s"]}),
            **self._miss_columns(),
        }

    def _miss_columns(self) -> dict:
        """miss_<cause>_tokens per measured cause (0 for a request that did not finish)."""
        if self.misses is None:
            return {}
        from ..engine.misses import CAUSES

        account = self.misses["account"]
        return {f"miss_{c}_tokens": np.ascontiguousarray(account.tokens[:, CAUSES.index(c)]) for c in account.measured()}

    def series_columns(self) -> dict:
        """Sampled engine state over simulated time: cumulative hit rate, running, waiting, held KV."""
        s = self.series
        prompt = s[:, S_PROMPT]
        with np.errstate(invalid="ignore", divide="ignore"):
            hit = np.where(prompt > 0, s[:, S_HIT] / prompt, np.nan)
        return {"time_s": s[:, S_TIME], "running": s[:, S_RUNNING].astype(np.int64),
                "waiting": s[:, S_WAITING].astype(np.int64), "running_kv_blocks": s[:, S_HELD].astype(np.int64),
                "cumulative_hit_rate": hit}

    def config(self) -> dict:
        return {"policy": self.policy, "params": self.params, "capacity_blocks": self.capacity_blocks,
                "block_size": self.block_size, "scheduler": self.scheduler, "time_model": self.time_model,
                "arrivals": self.arrivals, "output_kv": self.output_kv, "trace": self.trace_source,
                "instances": self.instances, "router": self.router, "router_lag_ms": self.router_lag_ms,
                "capacity_source": self.capacity_source, "warmup": self.warmup}

    def to_dict(self, per_request: bool = True) -> dict:
        doc = {"config": self.config(), "summary": self.summary(), "counters": self.counters,
               "policy_counters": self.policy_counters}
        if self.instances > 1:
            doc["per_instance"] = self.per_instance()
        if self.samples is not None:
            doc["samples"] = samples_json(self.samples, per_group=per_request)
        if self.beam is not None:
            doc["beam"] = samples_json(self.beam, per_group=per_request)
        if per_request:
            cols = self.request_columns()
            doc["per_request"] = {k: [None if isinstance(x, float) and math.isnan(x) else x for x in v.tolist()]
                                  for k, v in cols.items()}
        return doc

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.request_columns())

    def to_polars(self):
        import polars as pl

        return pl.DataFrame(self.request_columns())

    def check_invariants(self) -> None:
        """arrival <= scheduled <= first token <= finish for finished requests; counts add up."""
        from ..errors import InvariantError

        ok = self.finished
        a, s, f, e = self.arrival_s[ok], self.scheduled_s[ok], self.first_token_s[ok], self.finish_s[ok]
        eps = 1e-9
        for name, lo, hi in (("scheduled < arrival", a, s), ("first token < scheduled", s, f),
                             ("finish < first token", f, e)):
            bad = np.flatnonzero(hi < lo - eps * np.maximum(1.0, np.abs(lo)))
            if bad.size:
                raise InvariantError(f"request {int(np.flatnonzero(ok)[bad[0]])}: {name}")
        if np.any(self.hit_tokens > self.prompt_tokens):
            raise InvariantError("a request hit more tokens than its prompt")
        if self.counters.get("peak_held_blocks", 0) > self.capacity_blocks:
            raise InvariantError("running requests held more blocks than the pool has")
        settled = self.num_finished + self.num_rejected + self.num_refused
        if settled != self.num_requests:
            raise InvariantError(f"{self.num_requests - settled} requests neither finished nor were rejected")
        if self.closed is not None:
            closed_stats.check(self)


def _seconds(x: float) -> str:
    return f"{x:,.0f} s" if x >= 10 else f"{x:.3g} s"
