"""What the host CPU adds to a request's latency, outside the GPU's steps: a vLLM server as its
client measures it (docs/host.md; the terms are fitted on measured serving
runs by benchmarks/calibrate_host.py and shipped in kvreplay/data/host_calibration.json).

Each term follows vLLM 0.33.0's code (file:line in that wheel's ``vllm/`` tree):

- **at arrival**, ``request_s + prompt_token_s x L`` (L prompt tokens): the API server parses the
  request and renders it
  (``entrypoints/openai/completion/serving.py:131`` ``_create_completion``), tokenises the
  prompt in its thread pool (``renderers/base.py:156``, ``:770``), the client sends
  the token ids to the engine core as msgpack (``v1/engine/core_client.py:1290``), whose input
  thread decodes them and hashes the prompt's blocks for the prefix cache
  (``v1/engine/core.py:1126-1140``, ``v1/core/kv_cache_utils.py:953``) before the busy loop sees the
  request between two steps (``core.py:1647``). The API server does this one request at a time,
  in arrival order (:meth:`HostTerms.engine_arrivals`): a request waits for those before it.
- **a fixed latency**, ``latency_s``, outside any queue: what every request pays that no other
  request waits for (a token's fixed way out, below, and the network between client and server).
  simulate() delays each request's arrival at the engine by the API server's queue and service and
  by this latency, before routing.
- **per step**, ``step_s + step_request_s x R`` (R requests in the step): the engine core's CPU,
  ``Scheduler.schedule`` and ``update_from_output`` (``v1/core/sched/scheduler.py:699``, ``:2259``,
  loops over the running requests at ``:795`` and ``:2313``) and the model runner's
  ``_prepare_inputs`` (``v1/worker/gpu_model_runner.py:1924``). In vLLM's synchronous loop
  (``EngineCore.step``, ``core.py:667``) it follows the GPU's work; under async scheduling
  (``step_with_batch_queue``, ``core.py:708``, two batches in flight, ``config/vllm.py:588``) the
  next step is scheduled and prepared while this one runs, so a step takes the longer of the two.
- **per token**, ``output_request_s x N`` (N requests that output a token that step): the engine
  core's output thread sends the step's outputs (``core.py:2042``); the API server's output handler
  (``v1/engine/async_llm.py:876``) runs the output processor over them one after another
  (``v1/engine/output_processor.py:728``, each request's incremental detokenizer at ``:825``) and
  each request's stream sends its chunk. Every token reaches its client that long after its step
  ends: TTFT and the end-to-end latency hold it, an inter-token gap only its change. Its fixed part
  is in ``latency_s``: a fixed delay of every token adds to TTFT and the end-to-end latency exactly
  as a fixed delay at arrival that queues behind nothing does, and measured means cannot tell them
  apart (one that queues, ``request_s``, they can: requests sent together wait for each other).
- **async scheduling** (``async_scheduling``; vLLM's default since 0.14, ``config/vllm.py:1685-1719``;
  0.13.0's ``config/scheduler.py:133`` had it off): the step that starts when one ends was
  scheduled when that one started, so a request that arrives during a step waits for the end of
  the next one (serving/kernel/loop.c ``hide_late``).
  The scheduler does not schedule a step past max_tokens (``scheduler.py:801-811``), so no step
  is wasted at a request's end.

- **kernel launches of a step without a CUDA graph**, ``launch_layer_s`` x the model's layers: vLLM
  captures CUDA graphs for steps of up to min(2 x max_num_seqs, 512; 1,024 on data-centre
  Blackwell) tokens (``config/vllm.py:2447-2471``, :func:`graph_ceiling`) and runs a larger step, or
  every step under ``--enforce-eager``, without one (``v1/cudagraph_dispatcher.py:272-279``), its
  kernels launched one by one from the host while the GPU runs the ones before: such a step takes
  the longer of the GPU's work and the launches (models.eager_step; serving/timing/step.c
  ``calibrated()``; :func:`with_cuda_graphs` sets it on the calibrated roofline).

The kernel (serving/kernel/batch.c ``host_step`` and ``host_output``, loop.c) applies the per-step and
per-token terms and the async visibility; :meth:`HostTerms.step_seconds` and
:meth:`HostTerms.output_seconds` here are the same formulas (tests/serving/test_host.py holds them
together). The calibrated terms have a band (:func:`band_end`): each term's 5th-95th percentile
over refits on the fit's runs resampled within each source (how far the evidence pins it down),
which a run's band carries beside its GPU steps'; beside it, a run reports a prediction band
(:func:`widen_band`, report.latency_band's ``prediction``): each end at least the point estimate x
the 5th / 95th percentile of measured / simulated over the measured runs, how far deployments
scatter around the model.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib import resources

import numpy as np

from ...catalog.gpus import datacenter_blackwell
from ...errors import ConfigError
from .memory import capture_sizes

#: the terms, seconds (each >= 0)
TERMS = ("request_s", "prompt_token_s", "latency_s", "step_s", "step_request_s", "output_request_s")
#: the choices of simulate(host=...) and --host-cpu
CHOICES = ("vllm", "vllm-sync", "none")


@dataclass(frozen=True)
class HostTerms:
    """What the host CPU adds (module docstring); all zero and synchronous: nothing."""

    request_s: float = 0.0
    prompt_token_s: float = 0.0
    latency_s: float = 0.0
    step_s: float = 0.0
    step_request_s: float = 0.0
    output_request_s: float = 0.0
    async_scheduling: bool = False
    name: str = "none"
    #: the host's kernel launches per layer of a step vLLM runs without a CUDA graph (with_cuda_graphs)
    launch_layer_s: float = 0.0

    def __post_init__(self):
        for k in TERMS + ("launch_layer_s",):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"host term {k} must be a finite number of seconds >= 0, got {v!r}")
        if not isinstance(self.async_scheduling, bool):
            raise ConfigError(f"async_scheduling must be True or False, got {self.async_scheduling!r}")

    @property
    def is_zero(self) -> bool:
        return not self.async_scheduling and all(getattr(self, k) == 0 for k in TERMS + ("launch_layer_s",))

    def service(self, prompt_tokens) -> np.ndarray:
        """Seconds the API server spends on each request (its service time in engine_arrivals' queue)."""
        return self.request_s + self.prompt_token_s * np.asarray(prompt_tokens, dtype=np.float64)

    def arrival_delay(self, prompt_tokens) -> np.ndarray:
        """Seconds from each request's arrival to the engine core when it waits for no other request:
        its service and the fixed latency (the least delay it can have, floors.py's)."""
        return self.service(prompt_tokens) + self.latency_s

    def engine_arrivals(self, arrival_s, prompt_tokens) -> np.ndarray:
        """When each request reaches the engine core: the API server serves requests one at a time
        in arrival order (vLLM 0.33.0's API server is one process whose event loop tokenises each
        request in turn, AsyncLLM.add_request, v1/engine/async_llm.py), so a request waits for
        those that arrived before it: a FIFO single server, D_i = max(a_i, D_(i-1)) + s_i, which is
        C_i + max over j <= i of (a_j - C_(j-1)) with C the running sum of service times. Served
        independently, requests arriving together would reach the engine shortest prompt first.
        Each then takes the fixed latency ``latency_s`` more, which queues behind nothing."""
        arrival = np.asarray(arrival_s, dtype=np.float64)
        service = self.service(prompt_tokens)
        if arrival.size == 0 or not (service > 0).any():
            return arrival + service + self.latency_s
        order = np.argsort(arrival, kind="stable")
        a, d = arrival[order], service[order]
        done = np.cumsum(d)
        out = np.empty_like(arrival)
        out[order] = done + np.maximum.accumulate(a - (done - d))
        return out + self.latency_s

    def step_seconds(self, gpu_s: float, requests: int) -> float:
        """A step of `requests` requests whose GPU work takes `gpu_s`, with the engine core's CPU."""
        cpu = self.step_s + self.step_request_s * requests
        if not cpu > 0:
            return gpu_s
        return max(gpu_s, cpu) if self.async_scheduling else gpu_s + cpu

    def output_seconds(self, outputs: int) -> float:
        """From a step's end to its tokens' clients, when `outputs` requests output one."""
        return self.output_request_s * outputs

    def kernel_settings(self) -> dict:
        """The kernel's cfg and fcfg slots (sim.h) for these terms."""
        return {"cfg": {"ASYNC_SCHEDULING": int(self.async_scheduling)},
                "fcfg": {"HOST_STEP_S": self.step_s, "HOST_STEP_REQUEST_S": self.step_request_s,
                         "HOST_OUTPUT_REQUEST_S": self.output_request_s}}

    def with_terms(self, **terms) -> HostTerms:
        return HostTerms(**{**asdict(self), **terms})

    def describe(self) -> dict:
        out = {"host": self.name, "async_scheduling": self.async_scheduling}
        out.update({k: getattr(self, k) for k in TERMS})
        if self.launch_layer_s:
            out["launch_layer_s"] = self.launch_layer_s
        return out


NONE = HostTerms()


@lru_cache(maxsize=None)
def calibration() -> dict:
    """kvreplay/data/host_calibration.json (benchmarks/calibrate_host.py writes it)."""
    text = resources.files("kvreplay.data").joinpath("host_calibration.json").read_text()
    return json.loads(text)


def calibrated(sync: bool = False) -> HostTerms:
    """The fitted terms: vLLM 0.33.0's defaults (async scheduling), or its synchronous loop."""
    terms = calibration()["terms"]
    return HostTerms(**{k: float(terms[k]) for k in TERMS}, async_scheduling=not sync,
                     name="vllm-sync" if sync else "vllm", launch_layer_s=launch_layer_s())


def band_end(terms: HostTerms, end: str) -> HostTerms:
    """`terms` at the low or high end of the calibration's band (each term's 5th-95th percentile
    over refits on the fit's measured runs resampled within each source, and the fitted value;
    benchmarks/calibrate_host.py) when they are the calibrated ones; other terms (given, or none)
    have no band."""
    if end not in ("low", "high"):
        raise ConfigError(f"end must be low or high, got {end!r}")
    if terms.name not in ("vllm", "vllm-sync"):
        return terms
    ends = calibration().get("band", {}).get(end)
    if not ends:
        return terms
    return terms.with_terms(**{k: float(ends[k]) for k in TERMS})


#: the figures the prediction band widens, and the calibration's figure each takes (an inter-token
#: gap's: TPOT's, its mean)
PREDICTED = {"ttft": "ttft", "tpot": "tpot", "itl": "tpot", "e2e": "e2e"}


def prediction_factors(name: str) -> dict:
    """{figure: (low, high)}: how far measured runs scatter around the calibrated terms' point
    estimate, the 5th and 95th percentile of measured / simulated over the measured runs
    (benchmarks/calibrate_host.py --check --write-prediction), by which a run's band widens
    (widen_band); {} for host terms (by name) that are not the calibrated ones, or without them."""
    if name not in ("vllm", "vllm-sync"):
        return {}
    shipped = calibration().get("prediction", {})
    return {k: (float(shipped[m][0]), float(shipped[m][1])) for k, m in PREDICTED.items() if m in shipped}


def widen_band(centre: float, low: float, high: float, factors) -> tuple[float, float]:
    """A figure's prediction band: the farther of its parameter band's end (the run at that end of
    the GPU steps' and the host terms' bands) and the point estimate x the measured scatter's factor."""
    if not factors:
        return low, high
    return min(low, centre * factors[0]), max(high, centre * factors[1])


def launch_layer_s() -> float:
    """The host's kernel launches per layer of a step vLLM runs without a CUDA graph, seconds (the
    calibration's ``launch``; benchmarks/calibrate_host.py --fit-launch fits it; 0 when absent)."""
    return float(calibration().get("launch", {}).get("layer_s", 0.0))


def graph_ceiling(max_num_seqs: int, gpu="", decode_query_len: int = 1, enforce_eager: bool = False,
                  max_num_batched_tokens: int | None = None) -> int:
    """The most tokens a step vLLM 0.33.0 runs in a CUDA graph has (0 under --enforce-eager): its
    default capture sizes reach min(2 x max_num_seqs x decode_query_len, 512; 1,024 on data-centre
    Blackwell) on the grid 1, 2, 4, 8-248 by 8, 256- by 16, max_num_batched_tokens added when it is
    within that, the largest the ceiling (``config/vllm.py:2447-2471`` ``_set_cudagraph_sizes``,
    ``:2552``, ``:2597``, ``:2630``; none with ``enforce_eager``, ``:2449``); a larger step runs
    eager (``v1/cudagraph_dispatcher.py:272-279``)."""
    if enforce_eager:
        return 0
    seqs = max_num_seqs * max(int(decode_query_len), 1)
    top = min(2 * seqs, 1024 if datacenter_blackwell(gpu or "") else 512)
    if max_num_batched_tokens is not None and max_num_batched_tokens <= top:
        return int(max_num_batched_tokens)
    return max(capture_sizes(seqs, gpu or ""))


def with_cuda_graphs(time_model, terms: HostTerms, max_num_seqs: int, gpu="", decode_query_len: int = 1,
                     enforce_eager: bool = False, max_num_batched_tokens: int | None = None):
    """`time_model` with `terms`' kernel launches on the steps vLLM runs eager (models.eager_step)
    when it is the calibrated roofline, on whose steps the launch cost was fitted; else
    `time_model` itself (a measured profile holds what it measured)."""
    launch = terms.launch_layer_s
    if not hasattr(time_model, "eager_above") or not launch > 0:
        return time_model
    other = copy.copy(time_model)
    other.launch_layer_s = launch
    other.eager_above = float(graph_ceiling(max_num_seqs, gpu, decode_query_len, enforce_eager, max_num_batched_tokens))
    return other


def resolve(host, time_model) -> HostTerms:
    """simulate()'s `host`: None (the calibrated terms with the calibrated roofline, none with
    any other time model: a measured profile holds what it measured), a name of CHOICES, or
    HostTerms."""
    from .models import InstantTimeModel
    from .roofline import CalibratedRooflineTimeModel

    if host is None:
        return calibrated() if isinstance(time_model, CalibratedRooflineTimeModel) else NONE
    if isinstance(host, str):
        if host not in CHOICES:
            raise ConfigError(f"unknown host {host!r} (known: {', '.join(CHOICES)})")
        terms = NONE if host == "none" else calibrated(sync=host == "vllm-sync")
    elif isinstance(host, HostTerms):
        terms = host
    else:
        raise ConfigError(f"host must be one of {', '.join(CHOICES)} or HostTerms, got {host!r}")
    if isinstance(time_model, InstantTimeModel) and any(getattr(terms, f.name) for f in fields(HostTerms)
                                                        if f.name in TERMS):
        raise ConfigError("the instant time model takes no time: host CPU terms (--host-cpu) need a time model "
                          "that does (roofline, a profile)")
    return terms
