"""Policies ranked by their hit rate under serving, beside their offline ranking (`kvreplay report
--gpu`, `kvreplay report --plan`, `kvreplay sweep --gpu`).

Offline, each policy replays the trace one request at a time through one cache of the
deployment's pool (one instance's blocks). Served, the same policy runs in the simulator on the
deployment (its instances, router and tiers, at its load), where running requests hold blocks,
requests run together, and the router splits the prefixes. The two orders can differ; where they
do, the offline one does not tell which policy to run. Both hit rates are token-weighted over the
same requests: the served run's judged ones (after its warm-up) that finished, and the offline
replay counts those too (the warm-up's requests replayed, not counted).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError
from ..progress import tell


@dataclass(frozen=True)
class RankedDeployment:
    """The deployment policies are served on: `instances` of `model` on `gpu` x `tp` (x `pp`) behind
    `router` (with `tiers`), at `load`, judged after `warmup`."""

    model: object
    gpu: object
    tp: int = 1
    instances: int = 1
    router: str = "round-robin"
    tiers: object = None
    load: tuple = ("speedup", 1.0)
    warmup: object = "auto"
    block_size: int | None = None
    time_model: object = "roofline"
    weights_dtype: str = "bf16"
    pp: int = 1
    arrivals: str | None = None
    think_time: object = None
    seed: int = 0


def served_ranking(trace, policies, deployment: RankedDeployment | None = None, *, progress=None, **keywords) -> dict:
    """Each of `policies` (names with parameters, "lru" or "s3fifo:small_ratio=0.2") offline at the
    deployment's pool and served on the deployment: rows with both hit rates and ranks, sorted by
    the served one; `differs` when the two orders differ; policies the simulator does not serve
    (bounds, engines without a modelled scheduler) listed in `not_served` with why. progress: a
    kvreplay.progress callback, told ``(done, total, "policies served")``. load: ("speedup", x),
    ("rate", r) or ("sessions", n) (n concurrent sessions, a closed loop, whose drawn requests are
    not the trace's: their offline hit rate is the run's sequential replay of them, the same policy
    and pool with one request at a time); arrivals / think_time / seed: as simulate()."""
    from ..engine.replay import replay
    from ..policies.registry import parse_policy
    from .simulate import simulate

    d = RankedDeployment(**keywords) if deployment is None else replace(deployment, **keywords)
    load = d.load
    rows, not_served = [], []
    options = dict(model=d.model, gpu=d.gpu, tp=d.tp, pp=d.pp, instances=d.instances, router=d.router, tiers=d.tiers,
                   time_model=d.time_model, weights_dtype=d.weights_dtype, block_size=d.block_size, warmup=d.warmup,
                   band_runs=False, compare_sequential=load[0] == "sessions", kv_semantics="full",
                   arrivals=d.arrivals, think_time=d.think_time, seed=d.seed,
                   **({"speedup": load[1]} if load[0] == "speedup" else
                      {"sessions": int(load[1])} if load[0] == "sessions" else {"rate": load[1]}))
    todo = [p.strip() for p in policies if p and p.strip()]
    tell(progress, 0, len(todo), "policies served")
    for k, text in enumerate(todo):
        spec, params = parse_policy(text)
        if spec.not_served or spec.bound:
            not_served.append({"policy": text, "why": spec.not_served or "a bound, not an engine's cache"})
            tell(progress, k + 1, len(todo), "policies served")
            continue
        try:
            r = simulate(trace, spec.name, None, **options, **params)
        except ConfigError as e:
            not_served.append({"policy": text, "why": str(e)})
            tell(progress, k + 1, len(todo), "policies served")
            continue
        counted = r.counted
        prompt = int(r.prompt_tokens[counted].sum())
        if load[0] == "sessions":  # the drawn sessions: their sequential replay, over the same requests
            offline_rate = r.sequential_hit_rate or 0.0
        else:
            offline = replay(trace, spec.name, r.capacity_blocks, r.block_size, **params)
            offline_rate = int(np.asarray(offline.hit_tokens)[counted].sum()) / prompt if prompt else 0.0
        rows.append({"policy": text, "served_hit_rate": r.hit_rate, "offline_hit_rate": offline_rate,
                     "capacity_blocks": r.capacity_blocks, "requests": int(r.judged.sum()),
                     "finished": int(counted.sum())})
        tell(progress, k + 1, len(todo), "policies served")
    for key, rank in (("served_hit_rate", "served_rank"), ("offline_hit_rate", "offline_rank")):
        for row in rows:  # competition ranking: equal hit rates share a rank
            row[rank] = 1 + sum(1 for other in rows if other[key] > row[key] + 1e-12)
    rows.sort(key=lambda x: x["served_rank"])
    differs = any(r["served_rank"] != r["offline_rank"] for r in rows)
    order = lambda key: " > ".join(r["policy"] for r in sorted(rows, key=lambda x: -x[key]))  # noqa: E731
    return {"rows": rows, "not_served": not_served, "differs": differs,
            "offline_order": order("offline_hit_rate"), "served_order": order("served_hit_rate"),
            "deployment": {"gpu": d.gpu, "tp": d.tp, "instances": d.instances, "router": d.router, "tiers": d.tiers,
                           "load": list(load), "model": d.model},
            "text": ("the ranking under serving differs from the offline one: choose the policy at your real "
                     "concurrency" if differs else "the same order offline and under serving")}
