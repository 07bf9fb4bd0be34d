"""serving/deployment.py: the frozen configuration simulate() builds from its keywords and serves,
resolved once (the model and the GPU looked up once), with the same results as the keywords."""

from __future__ import annotations

import numpy as np
import pytest

import kvreplay
import kvreplay.catalog.models as catalog_models
from kvreplay.errors import ConfigError
from kvreplay.serving.config import resolve
from kvreplay.serving.deployment import ArrivalConfig, ClusterConfig, DeploymentConfig, SimConfig, TimeConfig
from kvreplay.serving.run import KernelRun, run_once
from kvreplay.serving.simulate import Scheduler, SweepGrid, load_sweep, serve
from kvreplay.trace.model import Trace


def _trace(n: int = 40, seed: int = 3) -> Trace:
    """Requests of 1-6 blocks (block size 4) over 12 ids, 0.5 s apart, 1-5 outputs each."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    blocks = rng.integers(0, 12, size=int(offsets[-1])).astype(np.int32)
    return Trace(offsets=offsets, blocks=blocks, input_length=(lengths * 4).astype(np.int64),
                 output_length=rng.integers(1, 6, size=n).astype(np.int64),
                 timestamp=np.arange(n, dtype=np.float64) * 500.0, num_blocks=12, block_size=4)


def test_keywords_go_to_their_groups_and_the_rest_are_the_policys():
    c = SimConfig.from_keywords("s3fifo", 30, 4, model="Llama-3.1-8B", gpu="H100", tp=2, rate=3.0, seed=7,
                                instances=2, router="kv-aware", time_model="roofline", host="none",
                                engine_style="vllm", slo_ttft_ms=500, small_ratio=0.2)
    assert c.deployment == DeploymentConfig(capacity=30, block_size=4, model="Llama-3.1-8B", gpu="H100", tp=2)
    assert c.arrival == ArrivalConfig(rate=3.0, seed=7)
    assert c.cluster == ClusterConfig(instances=2, router="kv-aware")
    assert c.time == TimeConfig(time_model="roofline", host="none")
    assert (c.policy, c.engine_style, c.slo_ttft_ms, c.params) == ("s3fifo", "vllm", 500, {"small_ratio": 0.2})
    with pytest.raises(Exception):  # frozen
        c.arrival.seed = 1


def test_serving_a_config_is_simulate_with_its_keywords():
    t = _trace()
    kw = dict(time_model="instant", instances=2, router="kv-aware", speedup=2.0, slo_ttft_ms=800)
    a = kvreplay.simulate(t, "lru", 10, 4, **kw).summary()
    b = serve(t, SimConfig(policy="lru", deployment=DeploymentConfig(capacity=10, block_size=4),
                           arrival=ArrivalConfig(speedup=2.0), cluster=ClusterConfig(instances=2, router="kv-aware"),
                           time=TimeConfig(time_model="instant"), slo_ttft_ms=800)).summary()
    assert a == b
    assert a["requests"] == 40 and a["hit_tokens"] > 0


def test_an_unknown_keyword_is_still_refused_naming_it():
    with pytest.raises(ConfigError, match="speeddup"):
        kvreplay.simulate(_trace(), "lru", 10, 4, time_model="instant", speeddup=2.0)


def test_the_model_and_gpu_are_looked_up_once_per_simulation(monkeypatch):
    """One kvreplay.simulate with a model on a GPU (the calibrated roofline, its band's runs, the
    sequential replay): the model catalog is searched by name once (config.resolve); every layer
    below takes its ModelSpec (six searches before the configuration was resolved once)."""
    searches = []
    real = catalog_models._by_name
    monkeypatch.setattr(catalog_models, "_by_name", lambda: searches.append(1) or real())
    d = resolve(_trace(), block_size=16, model="Llama-3.1-8B", gpu="H100")
    assert len(searches) == 1 and d.model_spec.name == "Llama-3.1-8B" and d.gpu_spec.name == "H100"
    assert d.model == "Llama-3.1-8B" and d.gpu == "H100"  # (the names as given, for what reports print)
    searches.clear()
    r = kvreplay.simulate(_trace(), "vllm", model="llama-3.1-8b", gpu="H100", time_model="roofline")
    assert len(searches) == 1
    assert r.capacity_source["model"] == "Llama-3.1-8B"  # (vLLM's budget names the catalog entry)


def test_run_once_takes_a_kernel_run_or_its_keywords():
    t = _trace()
    arrival = np.asarray(t.timestamp) / 1000.0
    from kvreplay.serving.timing.models import InstantTimeModel

    kw = dict(policy="lru", capacity=10, block_size=4, time_model=InstantTimeModel(), scheduler=Scheduler(),
              arrival_s=arrival)
    a, b = run_once(t, **kw), run_once(t, KernelRun(**kw))
    c = run_once(t, KernelRun(**dict(kw, capacity=5)), capacity=10)  # (keywords replace the run's fields)
    for other in (b, c):
        assert np.array_equal(a.hit_tokens, other.hit_tokens) and np.array_equal(a.finish_s, other.finish_s)
    assert int(a.hit_tokens.sum()) > 0


def test_a_sweep_grid_is_its_keywords():
    t = _trace()
    opts = dict(block_size=4, time_model="instant")
    by_keywords = load_sweep(t, speedups=[1, 2], policies=["lru", "fifo"], capacities=[8], **opts)
    by_grid = load_sweep(t, SweepGrid(speedups=[1, 2], policies=["lru", "fifo"], capacities=[8]), **opts)
    assert by_keywords == by_grid and len(by_grid) == 4
    assert [(r["policy"], r["load"]) for r in by_grid] == [("lru", 1.0), ("lru", 2.0), ("fifo", 1.0), ("fifo", 2.0)]
