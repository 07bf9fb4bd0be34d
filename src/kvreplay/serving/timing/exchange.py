"""The token exchange of vLLM's data parallelism over an MoE (serving/dataparallel.py): at every
MoE layer the DP ranks gather their tokens to every rank's experts and scatter the experts' sums
back, as vLLM 0.33.0 runs it by default (docs/clusters.md, "Data parallelism"):

- **The backend**: ``all2all_backend`` defaults to ``allgather_reducescatter`` (config/parallel.py:220;
  the removed ``naive`` and ``pplx`` fall back to it, :537-543); with DP > 1 vLLM uses it whether or
  not the experts are expert-parallel (``use_all2all``, config/parallel.py:787-793; without
  --enable-expert-parallel the MoE kernel's prepare/finalize is the same all-gather / reduce-scatter,
  fused_moe/all2all_utils.py:217-230, and with it :420).
- **Dispatch** (prepare/naive_dp_ep.py:173-235, AgRsAll2AllManager.dispatch,
  device_communicators/all2all.py:116-149): one grouped all-gather over the DP group of each rank's
  MoE input (``hidden`` values at the activation dtype: bf16, or fp8 with a 4-byte scale per 128
  values under an fp8 MoE kernel), its top-k weights (fp32) and top-k ids (int32): ``hidden x
  act_bytes + 8 x top-k`` bytes a token. The ranks' counts are the step's
  (``dp_metadata.get_chunk_sizes_across_dp_rank``, all2all.py:76-85): equal when the ranks pad to a
  CUDA graph's count (dp_utils.py:175-185), an ``ncclAllGather``; unequal, one ``ncclBroadcast`` per
  rank in one NCCL group (cuda_communicator.py:884-944, pynccl.py all_gatherv), priced as the
  all-gather of the same gathered bytes. (A monolithic MoE kernel's prepare gathers the router's
  logits instead of the top-k, naive_dp_ep.py:319-331: ``experts x 2`` bytes a token; not priced
  apart.)
- **Combine** (AgRsAll2AllManager.combine, all2all.py:151-161): a reduce-scatter of the experts'
  bf16 output over the gathered tokens, ``hidden x 2`` bytes a token (``ncclReduceScatter``, or one
  ``ncclReduce`` per rank when the counts differ, cuda_communicator.py:533-600).
- **Who takes part**: every rank, an idle one with its dummy batch's token (its forward runs the
  same MoE layers, core.py:2499-2507); the gathered count is batch.c batch_start_lockstep's.
- **The group**: the DP group (all2all.py:64-74), ``dp`` GPUs; with tensor parallelism and no expert
  parallelism each of a rank's TP GPUs gathers over its own DP group the rank's whole (replicated)
  tokens, so a GPU's messages are the same as at TP 1.
- **Sequence-parallel** (``sp`` > 1): with --enable-expert-parallel, TP > 1 and DP > 1 vLLM runs the
  MoE sequence-parallel (``use_sequence_parallel_moe``, config/parallel.py:767-785). At each MoE
  layer (qwen3_moe.py:219-240, likewise gpt_oss.py:407-419, deepseek_v2.py:411-434) each TP GPU
  takes its ``1 / TP`` chunk of the rank's (replicated) tokens, the rank's count padded to a
  multiple of TP (models/utils.py:1140-1158 sequence_parallel_chunk_impl); the dispatch and combine
  above run over the EP group (all2all.py:64-66, ``_get_comm_group``), all DP x TP GPUs, each GPU's
  count its chunk (forward_context.py:60-77 _compute_sp_num_tokens: ``ceil(n / TP)`` repeated TP
  times a rank), so the gathered tokens are every rank's padded count (kernel/batch.c
  batch_start_lockstep, :func:`sp_padded`), the bytes a token as above; then the chunks' output
  (bf16, ``hidden x 2`` bytes a token) is all-gathered over the rank's TP GPUs
  (``tensor_model_parallel_all_gather``, qwen3_moe.py:234-238: ``ncclAllGather``,
  cuda_communicator.py:460-490), priced as the all-gather above over ``TP`` GPUs of the padded
  tokens. The MoE's own TP all-reduce is skipped in this mode (fused_moe/runner/moe_runner.py:
  508-515, and the shared experts' at :445-450), so the roofline's one all-reduce a MoE layer
  (roofline.py terms, step.c calibrated: two a layer at TP > 1) is dropped
  (:attr:`Exchange.replaced_allreduces`). **Assumption**: DeepSeek-V2's decoder layer (deepseek_v2.py:
  1360-1410) also reduce-scatters its attention output instead of all-reducing it and all-gathers the
  next layer's input; that is priced as the pattern above (attention's all-reduce kept), up to a
  TP reduce-scatter a MoE layer long.
- **Groups beyond one server**: the terms are fitted on 2, 4 and 8 GPUs of one NVLink server (no
  table of aiconfigurator's holds more); a larger group (DP 2 x TP 8 sequence-parallel: 16 GPUs)
  spans ``ceil(n / node_gpus)`` servers where the catalog gives the GPU's network between servers
  (``scale_out_gbps``, ``node_gpus``: aiconfigurator's system specs, one NIC a GPU). **Assumption**:
  it runs as NCCL's ring over the servers (:func:`across_servers`; NVIDIA/nccl src/graph/tuning.cc
  ncclTopoTuneModel): of its ``n - 1`` steps ``servers - 1`` cross the network at
  SERVER_HOP_LATENCY each, the rest within a server at the slope of the fitted latencies, on top of
  the 8-GPU latency's 7; its channels run through every NIC, so the bus is the lesser of the
  8-GPU bus and ``node_gpus x scale_out_gbps`` (NVLink-bound on every GPU the catalog gives a
  network: 8 NICs of 25-100 GB/s). A GPU without a network in the catalog runs the 8-GPU terms,
  which reads it short. Either way the run says so (dataparallel.warning, :func:`spans_nodes`;
  :attr:`Exchange.assumption`, in :meth:`Exchange.describe`).
- **vLLM 0.19** (LLMServingSim's runs) has the same default and the same group; its bf16 MoE gathers
  the router's logits instead of the top-k (fused_moe/runner/default_moe_runner.py:575-595:
  ``dispatch_router_logits``, ``experts x 2`` bytes a token instead of ``8 x top-k``).

Each collective of ``nbytes`` (the whole gathered buffer) over a group of ``n`` GPUs takes
``latency + (n - 1) / n x nbytes / bus``, the terms fitted per group size on aiconfigurator's NCCL
tables of the H100 (EXCHANGE; benchmarks/fit_dp_exchange.py), log2-interpolated between the sizes
fitted and clamped outside them. A GPU with an NCCL table of its own (OWN_EXCHANGE: the RTX PRO 6000
Server Edition's) runs its own terms, fitted the same way. **Assumption**: any other GPU runs the
H100's latency and its bus bandwidth scaled by its own link over the H100's (the catalog's
``link_gbps``), as a relative's all-reduce is scaled (roofline.py _resolve_coefficients): on the
RTX PRO 6000 that scaling is 1% off NCCL's own table over 2 GPUs but 1.6-1.8x fast over 4 and 8
(PCIe's all-gather slows as the group grows), which is why its own table is used.
fit_dp_exchange.py --check reports the H100's terms against the H200's table, held out. Not priced: vLLM's agreement on the ranks' counts
before each forward (a small all-reduce, dp_utils.py coordinate_batch_across_dp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...catalog.gpus import get_gpu

#: the all-gather's and reduce-scatter's (latency s, bus bytes/s) per group size, fitted on the
#: H100's NCCL tables (benchmarks/fit_dp_exchange.py, which prints these)
EXCHANGE = {
    "measured_on": "H100",
    "source": "NVIDIA aiconfigurator's kernel database (github.com/ai-dynamo/aiconfigurator, Apache-2.0), PyPI wheel "
              "aiconfigurator-core==0.12.0: systems/data/h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet (nccl-tests' "
              "all_gather_perf and reduce_scatter_perf, half, 2, 4 and 8 H100 SXM, 512 B to 512 MiB)",
    "terms": {
        "all_gather": {2: (6.024e-06, 2.092e+11), 4: (8.159e-06, 2.632e+11), 8: (1.178e-05, 2.889e+11)},
        "reduce_scatter": {2: (6.012e-06, 2.024e+11), 4: (7.853e-06, 2.656e+11), 8: (1.101e-05, 2.997e+11)},
    },
}
#: GPUs with an NCCL table of their own, whose terms replace the H100's scaled ones: the RTX PRO 6000
#: Server Edition's PCIe 5 (no NVLink), where NCCL's all-gather runs at 30 GB/s on 2 GPUs but 22 on 4
#: and 8 (the link-scaled H100 terms: 30, 37 and 41), fitted as EXCHANGE is (benchmarks/fit_dp_exchange.py)
OWN_EXCHANGE = {
    "RTX-PRO-6000": {
        "source": "aiconfigurator-core==0.12.0: systems/data/rtx_pro_6000_server/comm/nccl/2.29.2/nccl_perf.parquet "
                  "(nccl-tests' all_gather_perf and reduce_scatter_perf, half, 2, 4 and 8 RTX PRO 6000 Server Edition)",
        "terms": {
            "all_gather": {2: (6.34e-06, 2.952e+10), 4: (9.863e-06, 2.261e+10), 8: (1.614e-05, 2.148e+10)},
            "reduce_scatter": {2: (5.962e-06, 2.858e+10), 4: (9.948e-06, 2.249e+10), 8: (1.653e-05, 2.176e+10)},
        },
    },
}
#: one ring step between servers, s: aiconfigurator's ``p2p_latency`` (every system spec of aiconfigurator-core==0.12.0,
#: "10us some nonofficial correction based on observations"); NCCL's own tuning model puts a ring step over the
#: network at 2.7 (LL) to 9.6 us (Simple) (NVIDIA/nccl src/graph/tuning.cc, ``hwLat``, NET / Ring)
SERVER_HOP_LATENCY = 10e-6
#: bytes a token of the dispatch's top-k weights (fp32) and ids (int32), per expert a token routes to
TOPK_BYTES = 8.0
#: an fp8 MoE kernel's inputs: one byte a value and a 4-byte scale per 128 values
FP8_GROUP = 128


def exchange_terms(op: str, group: int, gpu_name: str) -> tuple[float, float]:
    """(latency s, bus bytes/s) of `op` ("all_gather" or "reduce_scatter") over `group` GPUs of
    `gpu_name`: its own table's (OWN_EXCHANGE) or EXCHANGE's with the bus scaled by the GPU's link
    over the measured GPU's (module doc), log2-interpolated between the sizes fitted (clamped outside);
    a group over more than one server of a GPU with a network in the catalog: :func:`across_servers`."""
    import numpy as np

    spec = get_gpu(gpu_name)
    own = OWN_EXCHANGE.get(spec.name)
    table = (own or EXCHANGE)["terms"][op]
    sizes = sorted(table)
    x, xs = np.log2(max(group, 1)), np.log2(sizes)
    latency = float(np.interp(x, xs, [table[s][0] for s in sizes]))
    bus = float(np.interp(x, xs, [table[s][1] for s in sizes]))
    if not own:
        bus *= spec.link_bytes_per_s / get_gpu(EXCHANGE["measured_on"]).link_bytes_per_s
    if servers(group, gpu_name) > 1:
        return across_servers(table, group, spec, latency, bus)
    return latency, bus


def servers(group: int, gpu_name: str) -> int:
    """The servers a group of `group` GPUs spans: ``ceil(group / node_gpus)`` where the catalog
    gives the GPU's network (``scale_out_gbps``), else 1 (a group beyond the largest fitted is then
    clamped to it: :func:`spans_nodes`)."""
    spec = get_gpu(gpu_name)
    if not spec.scale_out_gbps or not spec.node_gpus:
        return 1
    return max(1, math.ceil(group / spec.node_gpus))


def across_servers(table: dict, group: int, spec, latency: float, bus: float) -> tuple[float, float]:
    """(latency s, bus bytes/s) of a ring over `group` GPUs on ``ceil(group / node_gpus)`` servers,
    from `latency` and `bus`, the in-server terms at the largest size in `table` (module doc): of
    NCCL's ``group - 1`` ring steps ``servers - 1`` cross the network (SERVER_HOP_LATENCY each), the
    rest run within a server at the slope of the fitted latencies; its channels run through every
    NIC of a server, so the bus is the lesser of the in-server bus and ``node_gpus x scale_out_gbps``."""
    sizes = sorted(table)
    step = (table[sizes[-1]][0] - table[sizes[0]][0]) / (sizes[-1] - sizes[0])
    hops = math.ceil(group / spec.node_gpus) - 1
    latency += (group - 1 - hops - (sizes[-1] - 1)) * step + hops * SERVER_HOP_LATENCY
    return latency, min(bus, spec.node_gpus * spec.scale_out_gbps * 1e9)


def collective_time(terms: tuple[float, float], group: int, nbytes: float) -> float:
    """One all-gather or reduce-scatter of `nbytes` (the whole gathered buffer) over `group` GPUs."""
    latency, bus = terms
    return latency + (group - 1) / group * nbytes / bus


def sp_padded(tokens: float, sp: int) -> float:
    """A rank's `tokens` as its `sp` TP GPUs split them, the last chunk padded: ``sp x ceil(tokens / sp)``
    (models/utils.py:1140-1158 sequence_parallel_chunk_impl; forward_context.py:60-77
    _compute_sp_num_tokens); `tokens` itself when `sp` is 1."""
    return float(sp * math.ceil(tokens / sp)) if sp > 1 else float(tokens)


@dataclass(frozen=True)
class Exchange:
    """An MoE's per-step token exchange over `group` GPUs: `layers` MoE layers, each an all-gather
    of `dispatch_bytes` a gathered token and a reduce-scatter of `combine_bytes` (module doc);
    `gather` / `scatter` the collectives' (latency s, bus bytes/s). `sp` > 1: the MoE runs
    sequence-parallel over a rank's `sp` TP GPUs (module doc): `group` is DP x TP, and each MoE
    layer's output is all-gathered over TP (`tp_gather` its terms) in place of its TP all-reduce.
    `assumption`: what a group beyond the largest fitted is priced under (:func:`spans_nodes`), None
    within it."""

    layers: int
    group: int
    dispatch_bytes: float
    combine_bytes: float
    gather: tuple[float, float]
    scatter: tuple[float, float]
    terms_from: str = "H100"
    sp: int = 1
    tp_gather: tuple[float, float] = (0.0, 1.0)
    assumption: str | None = None

    def seconds(self, gathered: float) -> float:
        """The step's exchange over `gathered` tokens (every GPU's chunk, padded as the step runs them)."""
        return self.layers * (collective_time(self.gather, self.group, gathered * self.dispatch_bytes)
                              + collective_time(self.scatter, self.group, gathered * self.combine_bytes))

    def output_gather_seconds(self, tokens: float) -> float:
        """Sequence-parallel: the step's all-gathers of the MoE output over the rank's `sp` TP GPUs,
        its `tokens` padded to sp chunks (0 otherwise)."""
        if self.sp <= 1:
            return 0.0
        return self.layers * collective_time(self.tp_gather, self.sp, sp_padded(tokens, self.sp) * self.combine_bytes)

    @property
    def replaced_allreduces(self) -> int:
        """The TP all-reduces a step no longer runs: one a MoE layer when sequence-parallel."""
        return self.layers if self.sp > 1 else 0

    def packed(self) -> dict:
        """Its slots in the C time model (timing/step.h C_XCH_*)."""
        return {"C_XCH_LAYERS": float(self.layers), "C_XCH_GROUP": float(self.group),
                "C_XCH_DISPATCH_BYTES": self.dispatch_bytes, "C_XCH_COMBINE_BYTES": self.combine_bytes,
                "C_XCH_AG_LATENCY": self.gather[0], "C_XCH_AG_BUS": self.gather[1],
                "C_XCH_RS_LATENCY": self.scatter[0], "C_XCH_RS_BUS": self.scatter[1],
                "C_XCH_SP": float(self.sp if self.sp > 1 else 0), "C_XCH_TPG_LATENCY": self.tp_gather[0],
                "C_XCH_TPG_BUS": self.tp_gather[1]}

    def describe(self) -> dict:
        out = {"backend": "allgather_reducescatter", "group": self.group, "moe_layers": self.layers,
               "dispatch_bytes_per_token": self.dispatch_bytes, "combine_bytes_per_token": self.combine_bytes,
               "all_gather": {"latency_s": self.gather[0], "bus_bytes_per_s": self.gather[1]},
               "reduce_scatter": {"latency_s": self.scatter[0], "bus_bytes_per_s": self.scatter[1]},
               "terms_from": self.terms_from}
        if self.sp > 1:
            out["sequence_parallel"] = {"tp": self.sp, "output_all_gather": {"latency_s": self.tp_gather[0],
                                                                             "bus_bytes_per_s": self.tp_gather[1]},
                                        "replaces_tp_all_reduces_per_step": self.replaced_allreduces}
        if self.assumption:
            out["assumption"] = self.assumption
        return out


def spans_nodes(group: int, gpu_name: str) -> str | None:
    """The assumption a group beyond the largest fitted runs under (module doc), None within it."""
    most = max(EXCHANGE["terms"]["all_gather"])
    if group <= most:
        return None
    spec, count = get_gpu(gpu_name), servers(group, gpu_name)
    if count <= 1:
        return (f"a group of {group} GPUs is beyond the {most} GPUs NCCL's measured tables hold: its all-gather and "
                f"reduce-scatter are priced at the {most}-GPU group's terms, without the ring's further steps, and the "
                f"catalog holds no network between {spec.name} servers (a rack of one NVLink domain, or servers of "
                f"{most}): read them as short")
    return (f"a group of {group} GPUs spans {count} servers of {spec.node_gpus} and no NCCL table is measured beyond "
            f"{most} GPUs: its all-gather and reduce-scatter are priced as NCCL's ring over the servers, the "
            f"{most}-GPU terms' latency grown by the ring's further steps within a server and {count - 1} network "
            f"step(s) of {SERVER_HOP_LATENCY * 1e6:g} us, the bus bandwidth the lesser of the {most}-GPU bus and "
            f"{spec.node_gpus} NICs of {spec.scale_out_gbps:g} GB/s a server (catalog scale_out_gbps, one a GPU): "
            "an assumption, not a measurement")


def exchange(spec, group: int, gpu_name: str, fp8_kernel: bool, sp: int = 1) -> Exchange:
    """The exchange of MoE `spec` between `group` DP ranks on `gpu_name` GPUs; `fp8_kernel`: its
    MoE kernel quantises its inputs to fp8 before the dispatch (prepare/naive_dp_ep.py:192-194);
    `sp` > 1: sequence-parallel over each rank's `sp` TP GPUs, the group DP x TP (module doc)."""
    m, hidden = spec.moe, float(spec.hidden_size)
    act = hidden * (1.0 + 4.0 / FP8_GROUP) if fp8_kernel else hidden * 2.0
    sp = max(int(sp), 1)
    gpus, name = int(group) * sp, get_gpu(gpu_name).name
    terms_from = name if name in OWN_EXCHANGE else EXCHANGE["measured_on"]
    tp_gather = exchange_terms("all_gather", sp, gpu_name) if sp > 1 else (0.0, 1.0)
    return Exchange(int(m["layers"]), gpus, act + TOPK_BYTES * m["experts_per_token"], hidden * 2.0,
                    exchange_terms("all_gather", gpus, gpu_name), exchange_terms("reduce_scatter", gpus, gpu_name),
                    terms_from, sp, tp_gather, spans_nodes(gpus, gpu_name))


__all__ = ["EXCHANGE", "OWN_EXCHANGE", "SERVER_HOP_LATENCY", "Exchange", "across_servers", "collective_time",
           "exchange", "exchange_terms", "servers", "sp_padded", "spans_nodes"]
