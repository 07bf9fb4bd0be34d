"""A simulation's configuration as frozen objects: what is asked (names, as given) and the
Deployment it resolves to (config.resolve, once, at the edge).

- :class:`DeploymentConfig`: the deployment asked for: model, GPU, TP x PP, dtypes, block size,
  the pool (a capacity, or what the GPUs hold) and the tiers below it.
- :class:`Deployment`: what config.resolve makes of it against a trace: the block size, the pool
  in blocks and how it was sized, the tiers, the bytes per block, the model's and the GPU's
  catalog entries (looked up once: everything below takes the specs, never the names again).
- :class:`ArrivalConfig`, :class:`ClusterConfig`, :class:`TimeConfig`, :class:`SpeculativeConfig`:
  the arrivals, the instances and their router, disaggregation and tiers' copies, the time model
  and host terms, speculative decoding.
- :class:`SimConfig`: one simulation: the policy, the engine style and its Scheduler, the groups
  above, the SLOs. ``kvreplay.simulate(trace, policy, capacity, block_size, **keywords)`` builds
  one (:meth:`SimConfig.from_keywords`: each keyword goes to its group; any other is the
  policy's parameter) and serves it (serving/simulate.py ``serve``).

Every keyword's meaning is in simulate()'s documentation (docs/serving.md); the groups hold them
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

#: the keywords config.resolve derives from the engine's scheduler rather than takes from the caller
DERIVED = ("max_num_batched_tokens", "max_num_seqs", "engine_style", "unbounded_ids")


@dataclass(frozen=True)
class DeploymentConfig:
    """The deployment asked for, as given (names and sizes): config.resolve turns it into a
    Deployment. capacity: blocks or a size; None: what `gpu` x `tp` hold after `model`'s weights.
    gpu_memory_utilization: the vLLM style's; None (not given): vLLM 0.33.0's default, 0.92."""

    block_size: int | None = None
    capacity: object = None
    model: object = None
    kv_dtype: str | None = None
    kv_layers: str | None = None
    gpu: object = None
    tp: int = 1
    pp: int = 1
    dp: int = 1  # data-parallel ranks (vLLM's --data-parallel-size), each on `tp` GPUs: serving/dataparallel.py
    enable_expert_parallel: bool = False
    gpu_memory_utilization: float | None = None  # None: vLLM 0.33.0's default (config.resolve)
    tiers: object = None
    global_store: object = None
    weights_dtype: str | None = None
    kv_cache_memory: object = None
    num_gpu_blocks_override: int | None = None
    enforce_eager: bool = False
    language_model_only: bool = False
    mem_fraction_static: float | None = None
    # set from the engine's scheduler (simulate) or given (config.resolve's callers)
    engine_style: str = "vllm"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    unbounded_ids: int | None = None  # a policy without a capacity: a pool of that many blocks


@dataclass(frozen=True)
class Deployment:
    """A resolved deployment. capacity: the GPU pool of one instance, in blocks; block_bytes: one
    block's KV bytes over the whole model (None without a model); capacity_source: how the pool
    was sized (given, in bytes, or what the GPUs hold after the weights). model / gpu: the names
    as given (what reports print); model_spec / gpu_spec: their catalog entries, looked up once."""

    block_size: int
    capacity: int | None
    capacity_source: dict
    tiers: tuple = ()
    model: str | None = None
    kv_dtype: str = "bf16"
    bytes_per_token: int | None = None
    block_bytes: int | None = None
    gpu: str | None = None
    tp: int = 1
    budget: dict | None = field(default=None, compare=False)
    weights_dtype: str = "bf16"
    pp: int = 1  # pipeline stages, each on `tp` GPUs (timing/pipeline.py)
    data_parallel: object = None  # dataparallel.DataParallel (None: one rank, no expert parallelism)
    model_spec: object = field(default=None, compare=False, repr=False)
    gpu_spec: object = field(default=None, compare=False, repr=False)

    def describe(self) -> dict:
        out = {"block_size": self.block_size, "capacity_blocks": self.capacity, "kv_dtype": self.kv_dtype,
               "weights_dtype": self.weights_dtype, "capacity_source": self.capacity_source}
        if self.model is not None:
            out.update(model=self.model, kv_bytes_per_token=self.bytes_per_token, kv_block_bytes=self.block_bytes)
        if self.tiers:
            out["tiers"] = [t.to_dict(self.block_bytes) for t in self.tiers]
        return out


@dataclass(frozen=True)
class ArrivalConfig:
    """When requests arrive: the trace's timestamps / `speedup`, a Poisson `rate` (seeded), reshaped
    by `rate_profile`; an open or closed loop (`arrivals`, `think_time`, `sessions`); the `warmup`
    not judged; `n` completions per request; `beam_width`, beam search's width per request."""

    speedup: float | None = None
    rate: float | None = None
    seed: int = 0
    rate_profile: object = None
    arrivals: str | None = None
    think_time: object = None
    sessions: int | None = None
    warmup: object = None
    n: int | None = None
    beam_width: int | None = None


@dataclass(frozen=True)
class ClusterConfig:
    """The instances: how many, behind which router (its lag and options), prefill/decode
    disaggregation over `kv_link`, and how the tiers below each pool copy blocks."""

    instances: int = 1
    router: str = "round-robin"
    router_lag_ms: object = 0.0
    router_options: dict | None = None
    prefill_instances: int | None = None
    decode_instances: int | None = None
    kv_link: str | None = None
    tier_copies: str = "move"
    tier_overlap: bool = False


@dataclass(frozen=True)
class TimeConfig:
    """The time model (a name, a file or a TimeModel), the host CPU's terms, and whether the
    calibrated roofline's band ends are run too."""

    time_model: object = "instant"
    host: object = None
    band_runs: bool = True


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding: the method, k draft tokens a step, the acceptance rates."""

    speculative: str | None = None
    num_speculative_tokens: int | None = None
    acceptance: object = None


@dataclass(frozen=True)
class SimConfig:
    """One simulation's configuration (docs/serving.md). `params`: the policy's parameters."""

    policy: str | None = None
    engine_style: str = "vllm"
    scheduler: object = None  # a simulate.Scheduler; None: the engine style's defaults
    deployment: DeploymentConfig = DeploymentConfig()
    arrival: ArrivalConfig = ArrivalConfig()
    cluster: ClusterConfig = ClusterConfig()
    time: TimeConfig = TimeConfig()
    speculative: SpeculativeConfig = SpeculativeConfig()
    slo_ttft_ms: object = None
    slo_tpot_ms: object = None
    max_model_len: int | None = None
    kv_semantics: str = "auto"
    output_kv: bool = True
    compare_sequential: bool = True
    check: bool = True
    progress: object = field(default=None, compare=False)
    params: dict = field(default_factory=dict)

    @classmethod
    def from_keywords(cls, policy=None, capacity=None, block_size=None, **keywords) -> "SimConfig":
        """simulate()'s keywords as a SimConfig: each to its group, any other a policy parameter."""
        groups = {}
        for name, kind in GROUPS.items():
            names = {f.name for f in fields(kind)} - set(DERIVED) - {"capacity", "block_size"}
            groups[name] = kind(**{k: keywords.pop(k) for k in list(keywords) if k in names})
        own = {f.name for f in fields(cls)} - set(GROUPS) - {"policy", "params"}
        top = {k: keywords.pop(k) for k in list(keywords) if k in own}
        deployment = replace(groups.pop("deployment"), capacity=capacity, block_size=block_size)
        return cls(policy=policy, deployment=deployment, params=keywords, **groups, **top)


#: SimConfig's groups: the keywords each takes
GROUPS = {"deployment": DeploymentConfig, "arrival": ArrivalConfig, "cluster": ClusterConfig, "time": TimeConfig,
          "speculative": SpeculativeConfig}


__all__ = ["ArrivalConfig", "ClusterConfig", "Deployment", "DeploymentConfig", "SimConfig", "SpeculativeConfig",
           "TimeConfig"]
