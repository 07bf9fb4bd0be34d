"""Data parallelism as vLLM 0.33.0 runs it (``--data-parallel-size N``, ``--enable-expert-parallel``):
N engine cores (ranks), each with its own scheduler and KV pool on its own ``--tp`` GPUs, behind
one API server that picks a rank for each request (docs/clusters.md, "Data parallelism"):

- **The rank a request gets**: the API server's load balancer (routing/vllm_dp.c, the router
  ``vllm-dp``: DPLBAsyncMPClient.get_core_engine_for_request, v1/engine/core_client.py:1751-1812),
  over the ranks' counts the DP coordinator publishes every 100 ms (coordinator.py:152).
- **A dense model**: the ranks are independent replicas (the engine core is the plain
  EngineCoreProc unless the model is an MoE, v1/engine/core.py:1546-1549).
- **An MoE**: the ranks step in lockstep (DPEngineCoreProc, core.py:2281-2296), since every MoE
  layer exchanges tokens between them: while any rank has work every rank runs a forward, an idle
  one a dummy batch (run_busy_loop, core.py:2499-2507), until the ranks agree, at a step whose count
  is 1 or a multiple of dp_sync_interval (16, config/parallel.py:163), that none holds a request
  (core.py:2554-2559): kernel/loop.c schedule_lockstep, kernel/batch.c batch_start_lockstep.
  The routed experts are split over all DP x TP GPUs: without expert parallelism each expert's
  width over them (flatten_tp_across_dp_and_pcp, model_executor/layers/fused_moe/config.py:1106-1114
  and 1207-1226), with it whole experts, ``experts / (DP x TP)`` on each GPU (config.py:1228-1245).
  So a GPU's weights hold ``1 / (DP x TP)`` of the experts (timing/memory.py weight_parts), and its
  experts run over the tokens of every rank, gathered (all2all_backend ``allgather_reducescatter``,
  the default, config/parallel.py:220), :func:`time_model` below.
- **The exchange**: at each MoE layer an all-gather of the ranks' tokens and a reduce-scatter of
  the experts' output over the DP group (the DP x TP group when sequence-parallel), priced from NCCL's measured tables (timing/exchange.py),
  over the gathered tokens (an idle rank's dummy token among them).
- **Sequence-parallel MoE** (expert parallelism with TP > 1, :func:`sequence_parallel`,
  config/parallel.py:767-785): each rank's tokens split over its TP GPUs, exchanged over the DP x TP
  expert group, the MoE output all-gathered over TP in place of its TP all-reduce: priced too
  (timing/exchange.py, its module doc). A group beyond 8 GPUs spans servers: priced as NCCL's ring
  over them from the catalog's network between servers, an assumption the run states, or at the
  8-GPU terms, warned as short, for a GPU without one (:func:`warning`).
- **Not modelled**: the ranks' agreement on their counts before each forward, the dense layers'
  padding on the smaller ranks of a CUDA-graph step, EPLB, DeepEP's kernels.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ..errors import ConfigError
from .timing.exchange import exchange, spans_nodes

#: the steps between the ranks' agreement on whether any holds a request (config/parallel.py:163)
DP_SYNC_INTERVAL = 16
#: how often the DP coordinator publishes the ranks' counts to the API server, ms (coordinator.py:152)
COORDINATOR_INTERVAL_MS = 100.0
#: the API server's rank choice (routing/vllm_dp.c)
DP_ROUTER = "vllm-dp"


@dataclass(frozen=True)
class DataParallel:
    """A resolved data-parallel deployment: `size` ranks of tp GPUs each; `expert_parallel`
    (--enable-expert-parallel); `lockstep`: an MoE, whose ranks step together."""

    size: int
    tp: int
    expert_parallel: bool
    lockstep: bool

    @property
    def expert_gpus(self) -> int:
        """The GPUs an MoE's routed experts are split over (DP x TP)."""
        return self.size * self.tp

    def describe(self) -> dict:
        out = {"data_parallel_size": self.size, "enable_expert_parallel": self.expert_parallel,
               "lockstep": self.lockstep, "router": DP_ROUTER}
        if self.lockstep:  # (the ranks' token exchange at each MoE layer: timing/exchange.py, or not, priced())
            out["token_exchange"] = "priced" if priced(self) else "not priced"
            if sequence_parallel(self):  # (over DP x TP GPUs, the MoE output all-gathered over TP: timing/exchange.py)
                out["sequence_parallel_moe"] = {"tp": self.tp, "expert_group_gpus": self.expert_gpus}
        return out


def check_dp(dp) -> int:
    """A data-parallel degree: a whole number >= 1 (ConfigError naming the flag otherwise)."""
    if isinstance(dp, bool) or not hasattr(dp, "__index__") or int(dp) < 1:
        raise ConfigError(f"dp (--dp, --data-parallel-size) must be a whole number >= 1, got {dp!r}")
    return int(dp)


def check_expert_parallel(value, dp: int, tp: int, model_spec, engine_style: str) -> bool:
    """--enable-expert-parallel, checked: an MoE, on more than one GPU, the vLLM style."""
    if not isinstance(value, bool):
        raise ConfigError(f"enable_expert_parallel must be True or False, got {value!r}")
    if not value:
        return False
    if engine_style != "vllm":
        raise ConfigError(f"enable_expert_parallel (--enable-expert-parallel) is modelled as vLLM 0.33.0 runs it: "
                          f"drop --engine-style {engine_style}")
    if model_spec is None or not model_spec.moe:
        name = "no --model" if model_spec is None else f"{model_spec.name} is not a mixture of experts"
        raise ConfigError(f"enable_expert_parallel (--enable-expert-parallel) splits an MoE's experts over GPUs: {name}")
    if dp * tp == 1:  # (vLLM leaves it off on one GPU: fused_moe/config.py:1198-1201)
        raise ConfigError("enable_expert_parallel (--enable-expert-parallel) splits the experts over the DP x TP GPUs, "
                          "and there is one: add --dp or --tp")
    return True


def resolve(dp, expert_parallel, tp: int, model_spec, engine_style: str) -> DataParallel | None:
    """The data-parallel deployment (None: one rank without expert parallelism)."""
    dp = check_dp(dp)
    ep = check_expert_parallel(expert_parallel, dp, tp, model_spec, engine_style)
    if dp == 1 and not ep:
        return None
    if dp > 1 and engine_style != "vllm":
        raise ConfigError(f"dp (--dp) is modelled as vLLM 0.33.0 runs it: drop --engine-style {engine_style}")
    return DataParallel(dp, tp, ep, lockstep=dp > 1 and bool(model_spec is not None and model_spec.moe))


def check_cluster(dp: DataParallel, instances: int, router: str, router_lag_ms: float, disaggregated: bool,
                  pp: int) -> None:
    """What data parallelism replaces or does not combine with, each named."""
    if dp.size == 1:
        return
    if instances != 1:
        raise ConfigError(f"dp (--dp) runs {dp.size} ranks behind one API server: they are the instances, so drop "
                          f"--instances {instances}")
    if router != "round-robin":
        raise ConfigError(f"dp (--dp): vLLM's API server picks each request's rank (the {DP_ROUTER} router): drop "
                          f"--router {router}")
    if router_lag_ms:
        raise ConfigError(f"dp (--dp): the ranks' counts reach vLLM's API server every {COORDINATOR_INTERVAL_MS:g} ms "
                          "(its DP coordinator): drop --router-lag-ms")
    if disaggregated:
        raise ConfigError("dp (--dp) with prefill/decode disaggregation is not simulated: drop --prefill-instances "
                          "and --decode-instances")
    if pp > 1:
        raise ConfigError("dp (--dp) with pipeline stages (--pp) is not simulated: drop one of them")


def time_model(tm, dp: DataParallel | None):
    """`tm` for one rank of `dp`: an MoE's routed experts over DP x TP GPUs (each expert's width
    split over them, or whole experts under expert parallelism, 1 / (DP x TP) of the routings
    each), run over the gathered tokens the kernel gives it (AGG_EXPERT_TOKENS). Ranks in lockstep
    need the calibrated roofline (its MoE kernel's term, or the experts out of the body's GEMM where
    the GPU has none calibrated: _apart) or the instant model; a dense model's replicas take any."""
    if dp is None:
        return tm
    moe = getattr(tm, "moe", None)
    if not dp.lockstep:
        if dp.expert_parallel and moe:  # (TP x EP on one rank: whole experts over its tp GPUs)
            return _split(tm, dp.tp, True)
        return tm
    if getattr(tm, "name", "") == "instant":
        return tm
    if not hasattr(tm, "dp_experts"):
        raise ConfigError(f"dp (--dp) over an MoE runs its ranks in lockstep, its experts over every rank's tokens: "
                          f"that needs the calibrated roofline (--time-model roofline), not {getattr(tm, 'name', tm)!r}")
    other = _apart(tm, dp.expert_gpus) if not moe else _split(tm, dp.expert_gpus, dp.expert_parallel)
    if priced(dp):  # the ranks' token exchange at each MoE layer (timing/exchange.py)
        other.dp_exchange = exchange(tm.model, dp.size, tm.gpu.name, tm.moe_kernel == "fp8" if moe else tm.fp8,
                                     sp=sp_degree(dp))
    return other


def priced(dp: DataParallel | None) -> bool:
    """Whether the ranks' token exchange is priced: lockstep ranks (timing/exchange.py), the
    sequence-parallel MoE among them (:func:`sequence_parallel`)."""
    return dp is not None and dp.lockstep


def sequence_parallel(dp: DataParallel | None) -> bool:
    """Whether vLLM runs the MoE sequence-parallel (``use_sequence_parallel_moe``, config/parallel.py:
    767-785: the default all2all backend, expert parallelism, TP > 1 and DP > 1): each rank's tokens
    split over its TP GPUs, gathered over the DP x TP expert group, the outputs all-gathered over TP."""
    return dp is not None and dp.lockstep and dp.expert_parallel and dp.tp > 1


def sp_degree(dp: DataParallel) -> int:
    """The TP GPUs a rank's MoE tokens split over: its TP when sequence-parallel, else 1 (the exchange's
    group is then ``dp.size x`` this: timing/exchange.py exchange)."""
    return dp.tp if sequence_parallel(dp) else 1


def _apart(tm, gpus: int):
    """`tm` (the calibrated roofline of an MoE whose GPU has no MoE kernel calibrated: its experts in
    the body's one GEMM) with the routed experts out of the body, one GEMM of their own over the
    gathered tokens split over `gpus` GPUs (roofline.py dp_expert_gemm): expert parallelism or not,
    a GPU reads 1 / gpus of the experts the tokens route to and computes 1 / gpus of their work."""
    spec = tm.model
    wbytes = tm.gemm_bytes[1]
    routed, active = float(spec.stored_expert_params), float(spec.routed_expert_params)  # (every expert; a token's)
    other = copy.copy(tm)
    other.body_params = tm.body_params - active
    other.body_flop_params = tm.body_flop_params - active
    other.body_weight_bytes = tm.body_weight_bytes - routed * wbytes
    other.active_body_weight_bytes = tm.active_body_weight_bytes - active * wbytes
    other.dp_experts = (active, routed * wbytes, active * wbytes, float(gpus))
    return other


def _split(tm, gpus: int, expert_parallel: bool):
    other = copy.copy(tm)
    m = tm.moe
    if expert_parallel:
        other.moe_inter = float(m["expert_intermediate"])
        other.moe_experts = m["experts"] / gpus
        other.moe_ep = gpus
    else:
        other.moe_inter = m["expert_intermediate"] / gpus
    return other


def warning(dp: DataParallel | None, gpu_name: str) -> str | None:
    """What the user must know of a lockstep run's times (None: nothing): an exchange group beyond
    the largest fitted (more than one server's GPUs), priced as NCCL's ring over servers, or at the
    largest fitted group's terms where the catalog holds no network (timing/exchange.py spans_nodes)."""
    if not priced(dp):
        return None
    group = dp.size * sp_degree(dp)
    note = spans_nodes(group, gpu_name)
    if note is None:
        return None
    return (f"data parallelism over an MoE: the token exchange at each MoE layer runs over {group} {gpu_name} GPUs; "
            f"{note} (docs/clusters.md, \"Data parallelism\")")


__all__ = ["COORDINATOR_INTERVAL_MS", "DP_ROUTER", "DP_SYNC_INTERVAL", "DataParallel", "check_cluster", "check_dp",
           "priced", "resolve", "sequence_parallel", "sp_degree", "time_model", "warning"]
