"""The GPU catalog: dense peak TFLOP/s, memory bandwidth and memory of common inference accelerators.

Read from package data (``kvreplay/data/gpus.json``) once, on first use. Every figure is per GPU,
dense (without 2:4 structured sparsity: NVIDIA datasheets print the sparse figure, so the catalog
holds half of it), and each entry's ``source`` names the vendor datasheet it comes from
(docs/gpus.md has the table).

``memory_gb`` is the datasheet's capacity in decimal GB (10^9 bytes), kept for display.
``total_memory_bytes`` is what the device reports to PyTorch
(``torch.cuda.get_device_properties().total_memory``, the ``total_memory`` vLLM multiplies by
``gpu_memory_utilization``): an H100 80GB reports 79.22 GiB (85.06e9 bytes), not 80e9.
``total_memory_source`` quotes the public log each figure is read from. The KV pool
(memory.py) starts from it; ``kv_capacity`` takes ``total_memory_bytes=`` for a measured figure.

``link_gbps`` is the GPU's scale-up interconnect (NVLink; AMD Infinity Fabric/xGMI; PCIe on a part
without either), in GB/s PER DIRECTION per GPU: datasheets print both directions added, so the
catalog holds half of their figure. ``link_topology`` says how the GPUs of one server share it:
``switch`` (NVSwitch: any pair exchanges ``link_gbps`` each way), ``mesh`` (one link to each peer:
a pair gets ``link_gbps / peers``; MI300X) or ``pcie``. ``link_source`` quotes the datasheet. An
NVL72 rack (GB200, GB300) is one NVLink Switch domain of 72 GPUs: ``switch`` too.

``scale_out_gbps`` is the network between servers of ``node_gpus`` GPUs each (InfiniBand or RoCE
NICs), in GB/s per direction per GPU, the system's one NIC a GPU at its line rate (a 400 Gb/s NDR
ConnectX-7: 50); ``scale_out_source`` quotes the system spec it comes from. None where no source
gives one (and on an NVL72 rack, whose 72 GPUs share NVLink). Only an MoE's token exchange over
more than one server reads it (serving/timing/exchange.py).

``fp4_tflops`` (dense FP4 / MXFP4; None where the part has none) is listed for reference only: the
roofline runs no FP4 GEMMs (``COMPUTE_DTYPES``). ``compute_capability`` is CUDA's major.minor (AMD:
the gfx target); ``datacenter_blackwell`` reads it where vLLM picks defaults by architecture.

Weights dtypes (``--weights-dtype``): ``compute_dtype`` maps each to the precision its GEMMs run at
(int4 is weight-only, w4a16: bf16 GEMMs), and ``check_weights_dtype`` refuses one the GPU cannot
run (fp8 without FP8 tensor cores).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ConfigError
from .lookup import did_you_mean, index_by_name

#: Compute dtypes the roofline knows, and the catalog field holding each one's peak.
COMPUTE_DTYPES = {"bf16": "bf16_tflops", "fp16": "bf16_tflops", "fp8": "fp8_tflops"}

#: Weights dtypes (``--weights-dtype``) and the dtype their GEMMs are computed at: bf16/fp16 as
#: themselves, fp8 weights with fp8 GEMMs (W8A8), int4 weight-only (W4A16: 4-bit weights,
#: dequantized in the kernel, GEMMs at bf16). Their bytes per weight: models.WEIGHT_DTYPE_BYTES.
WEIGHTS_COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int4": "bf16"}


def _weights_key(weights_dtype) -> str:
    key = str(weights_dtype).strip().lower()
    if key not in WEIGHTS_COMPUTE_DTYPE:
        raise ConfigError(f"unknown weights dtype {weights_dtype!r} for --weights-dtype "
                          f"(known: {', '.join(WEIGHTS_COMPUTE_DTYPE)})")
    return key


def compute_dtype(weights_dtype) -> str:
    """The dtype the GEMMs run at with `weights_dtype` weights: bf16->bf16, fp16->fp16, fp8->fp8,
    int4->bf16 (weight-only quantization). Unknown names raise ConfigError."""
    return WEIGHTS_COMPUTE_DTYPE[_weights_key(weights_dtype)]


@dataclass(frozen=True)
class GPUSpec:
    """One catalog entry. ``fp8_tflops`` is None on parts without FP8 tensor cores (A100), and
    ``fp4_tflops`` on parts without FP4 ones (listed, not used by the roofline)."""

    name: str
    vendor: str
    form_factor: str
    bf16_tflops: float
    fp8_tflops: float | None
    bandwidth_gbps: float
    memory_gb: float
    total_memory_bytes: int
    total_memory_source: str
    link_gbps: float
    link_kind: str
    link_topology: str
    source: str
    link_source: str
    corroborated_by: str | None = None
    link_corroborated_by: str | None = None
    aliases: tuple[str, ...] = ()
    notes: str | None = None
    compute_capability: str = ""
    fp4_tflops: float | None = None
    node_gpus: int | None = None
    scale_out_gbps: float | None = None
    scale_out_source: str | None = None

    @property
    def memory_bytes(self) -> int:
        """The memory the device reports to PyTorch, in bytes (``total_memory_bytes``; the
        datasheet's ``memory_gb`` is decimal GB and a little less than the driver shows)."""
        return int(self.total_memory_bytes)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def link_bytes_per_s(self) -> float:
        """Scale-up interconnect bandwidth of one GPU, one direction, in bytes/s (``link_gbps`` x 10^9)."""
        return self.link_gbps * 1e9

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s of one GPU at `dtype` (bf16/fp16 or fp8)."""
        key = str(dtype).strip().lower()
        if key not in COMPUTE_DTYPES:
            raise ConfigError(f"unknown compute dtype {dtype!r} (known: {', '.join(COMPUTE_DTYPES)})")
        tflops = getattr(self, COMPUTE_DTYPES[key])
        if tflops is None:
            raise ConfigError(f"{self.name} has no {key} tensor cores (its catalog entry lists none); use bf16")
        return float(tflops) * 1e12

    def weights_peak_flops(self, weights_dtype: str = "bf16") -> float:
        """Dense peak FLOP/s of one GPU's GEMMs with `weights_dtype` weights: the peak at
        ``compute_dtype(weights_dtype)``, after ``check_weights_dtype`` (the roofline's compute peak)."""
        check_weights_dtype(weights_dtype, self)
        return self.peak_flops(compute_dtype(weights_dtype))

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def datacenter_blackwell(gpu) -> bool:
    """Whether `gpu` (a GPUSpec or catalog name; "" or an unknown name: False) has compute capability
    10.x (B200, GB200, B300, GB300), the family vLLM 0.33.0 tests with
    ``current_platform.is_device_capability_family(100)`` for its CUDA graph capture ceiling
    (vllm/config/vllm.py:2463-2465)."""
    if not isinstance(gpu, GPUSpec):
        gpu = _by_name().get(str(gpu).strip().lower())
    return gpu is not None and gpu.compute_capability.split(".")[0] == "10"


def check_weights_dtype(weights_dtype, gpu) -> str:
    """`weights_dtype` normalized (bf16, fp16, fp8, int4), or a ConfigError naming --weights-dtype
    and the GPU when `gpu` cannot run it: fp8 weights run fp8 GEMMs, which need FP8 tensor cores
    (the A100 has none)."""
    key = _weights_key(weights_dtype)
    g = get_gpu(gpu)
    needed = compute_dtype(key)
    if getattr(g, COMPUTE_DTYPES[needed]) is None:
        raise ConfigError(f"--weights-dtype {key} runs {needed} GEMMs, and {g.name} has no {needed} tensor cores "
                          f"(its catalog entry lists none): use --weights-dtype bf16 or int4 on the {g.name}")
    return key


@lru_cache(maxsize=1)
def gpu_catalog() -> tuple[GPUSpec, ...]:
    """Every GPU of the catalog, in file order."""
    from importlib.resources import files

    raw = json.loads(files("kvreplay.data").joinpath("gpus.json").read_text(encoding="utf-8"))
    out = []
    for entry in raw["gpus"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases") or ())
        out.append(GPUSpec(**entry))
    return tuple(out)


@lru_cache(maxsize=1)
def _by_name() -> dict[str, GPUSpec]:
    return index_by_name(gpu_catalog())


def get_gpu(name) -> GPUSpec:
    """The catalog entry for `name` or one of its aliases (case-insensitive); a GPUSpec is returned
    as is. Unknown names raise ConfigError naming the closest known ones."""
    if isinstance(name, GPUSpec):
        return name
    key = str(name).strip().lower()
    index = _by_name()
    if key in index:
        return index[key]
    hint = did_you_mean(key, index, n=6, cutoff=0.4)
    known = ", ".join(g.name for g in gpu_catalog())
    raise ConfigError(f"unknown GPU {name!r}{hint} (known: {known})")


#: PCIe GPUs' all-reduce, fitted per TP degree on measured kernels: a GPU without NVLink exchanges
#: over PCIe, and the bus bandwidth a group sustains falls with its size (traffic between PCIe
#: switches crosses the host), so one set of coefficients cannot serve every degree. Each degree's
#: three terms of roofline.allreduce_time (latency; the one-stage kernel's link and the two-stage /
#: ring kernel's bus bandwidth, bytes/s) were fitted by benchmarks/fit_pcie_allreduce.py on
#: aiconfigurator's tables (PCIE_ALLREDUCE_SOURCE), and ``band`` is measured / predicted over the
#: degree's messages, 5th-95th percentile; ``steps`` the same per phase over the dense models' bf16
#: steps composed from the GPU's own measured kernels (its GEMMs, attention and all-reduce) under
#: the roofline with this fit (fit_pcie_allreduce.py --steps), which widens the run's band. A GPU
#: listed here runs them instead of its calibration's (or its relative's scaled to its link). A degree between two measured ones takes the next
#: larger one's (its bandwidth is no higher); beyond the largest (8: one PCIe server), the largest's.
PCIE_ALLREDUCE = {
    "L40S": {
        2: {"allreduce_latency_s": 5.29485e-06, "allreduce_link_bytes_per_s": 1.90816e+10,
            "allreduce_bus_bytes_per_s": 1.99898e+10, "band": (0.9499, 1.0587),
            "steps": {"prefill": (0.8711, 1.2844), "decode": (0.8059, 0.9987), "mixed": (0.8706, 1.3199)}},
        4: {"allreduce_latency_s": 1.31407e-05, "allreduce_link_bytes_per_s": 8.26613e+09,
            "allreduce_bus_bytes_per_s": 5.12127e+09, "band": (0.9198, 1.3139),
            "steps": {"prefill": (0.9532, 1.2838), "decode": (0.7585, 1.1522), "mixed": (0.9926, 1.2962)}},
        8: {"allreduce_latency_s": 2.48086e-05, "allreduce_link_bytes_per_s": 1.09831e+10,
            "allreduce_bus_bytes_per_s": 1.85126e+09, "band": (0.7003, 1.2795),
            "steps": {"prefill": (0.5963, 1.2818), "decode": (0.595, 0.9929), "mixed": (0.6814, 1.2558)}},
    },
}
PCIE_ALLREDUCE_SOURCE = {
    "L40S": "NVIDIA aiconfigurator's kernel database (github.com/ai-dynamo/aiconfigurator, Apache-2.0), PyPI wheel "
            "aiconfigurator-core==0.12.0: systems/data/l40s/comm/vllm/0.22.0/custom_allreduce_perf.parquet (vLLM's "
            "custom all-reduce, bf16, CUDA graphs, up to 8 MiB) and systems/data/l40s/comm/nccl/2.27.3/nccl_perf.parquet "
            "(NCCL all_reduce above 8 MiB); 22 messages per degree",
}


def pcie_allreduce(gpu, tp: int) -> tuple[int, dict] | None:
    """(the measured degree used, its fitted all-reduce terms) for `gpu` (a GPUSpec or name) at TP
    `tp`; None when the GPU has no such fit or `tp` is 1 (no all-reduce)."""
    table = PCIE_ALLREDUCE.get(get_gpu(gpu).name)
    if table is None or tp <= 1:
        return None
    degrees = sorted(table)
    degree = next((d for d in degrees if d >= tp), degrees[-1])
    return degree, table[degree]
