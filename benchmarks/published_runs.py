"""Held-out check: vLLM serving benchmarks published in public docs, against kvreplay's simulation
of each run as its benchmark ran it.

    python benchmarks/published_runs.py                  # the tables (docs/fidelity.md, docs/host.md)
    python benchmarks/published_runs.py --extract GIT    # rebuild the csv from a clone of
                                                         # gpustack/gpustack (its git directory)

**The runs** (benchmarks/data/published_runs.csv; its .md gives the sources): ``vllm bench serve``
result blocks that GPUStack's performance lab publishes (``docs/performance-lab/<model>/<gpu>.md``,
Apache-2.0), the "Other Benchmark Cases" of each page: each configuration served by vLLM, the
baseline (no flags but the ones its serving command gives) and, where the page's best was vLLM's,
the optimized one (its flags: ``--async-scheduling``, ``-tp``, ``--max-num-batched-tokens``, an FP8
checkpoint), on H100 SXM, A100 SXM 80GB or H200 SXM, at the version the page names (0.10.2 or
0.11.0), four random-dataset cases each: 32,000 input tokens and 100 output (100 prompts), 4,000 /
200 (500 prompts), 2,000 / 100 (500), 128 / 4 (1,000), the page's command (``--backend openai-chat
--endpoint /v1/chat/completions --dataset-name random --seed 42``; request rate inf, no max
concurrency, no ``--ignore-eos``). Each row keeps the quoted figures (requests, duration, total input
and generated tokens, mean / median / p99 TTFT, mean TPOT, mean ITL) and the configuration. Nothing
in kvreplay is fitted on them. FP8 checkpoints on the A100 are not simulated (``not_simulated``).

**What the benchmark did.** At request rate inf, ``vllm bench serve`` sends every request at once
(no max concurrency: no semaphore), so each run is the whole batch arriving at t = 0 and the mean
TTFT is mostly queueing: the runs check the pool (how many requests run at once), the prefill
throughput and the decode of a full batch, not the light-load latency. The random dataset at range
ratio 0 asks every request for the same lengths; the prompt re-tokenised drifts by a few tokens
(the quoted totals: 1,999,249 input tokens for 500 prompts of 4,000) and, without ``--ignore-eos``,
a request may stop early (gpt-oss's 4,000 / 200 case generates 134 tokens a request on average).
The per-request lengths are not published, only the totals: each run is simulated with the totals
spread evenly (every request within one token of the mean input and output length). The chat
endpoint's template tokens (a few for Qwen, a system message for gpt-oss's harmony format) are not
in the quoted input totals and are not added.

**The simulation**: each request sent as the benchmark sent it (``schedule_s``: all at once at rate
inf, else vLLM's gamma schedule; under ``--max-concurrency`` its clients' semaphore, ``simulate_run``;
the committed runs all at once), the calibrated roofline on the run's GPU and TP, the weights as the
checkpoint ships them (gpt-oss's MXFP4 experts as kvreplay's int4, KV bf16; DeepSeek-R1's and the FP8
checkpoints' fp8), the host terms as the run's vLLM scheduled (``--async-scheduling``, else
synchronous before 0.14: ``calibrate_e2e.scheduled_async``), the serving command's limits, else
vLLM's API-server defaults of the version for the GPU (``engine/arg_utils.py``
``_set_default_max_num_seqs_and_batched_tokens_args``: max_num_seqs 1024 and
max_num_batched_tokens 8192 on a GPU of >= 70 GiB other than the A100, 256 and 2048 on the A100),
the pool as the version budgeted it at its default utilization (0.9,
``calibrate_e2e.RUNS_UTILIZATION``; ``pool_bytes``: kv_pool.py's version terms, or vLLM's start-up
minimum where those leave less than one max_model_len request), the serving command's
max_model_len, else the checkpoint's. TTFT and TPOT / ITL are compared as the
benchmark computes them (TPOT per request, excluding the first token; ITL over every gap, so
token-weighted), and E2E as the mean TTFT + the mean TPOT x (mean output - 1), derived alike for
the measurement and the simulation (vLLM prints no E2E unless asked), beside the benchmark's
duration (the last request's end).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from calibrate_e2e import RUNS_UTILIZATION, host_of, scheduled_async
from calibrate_stats import print_table, run_arguments, selected_runs
from kv_pool import constants, predict, terms

import kvreplay
from kvreplay.serving.simulate import Scheduler
from kvreplay.serving.timing.models import get_model, kv_bytes_per_token_per_gpu

DATA = Path(__file__).parent / "data" / "published_runs.csv"
BLOCK = 16
REPO = "https://github.com/gpustack/gpustack"
#: GPUStack performance-lab pages: page -> the GPU it ran on
PAGES = {"qwen3-14b/h100": "H100", "qwen3-32b/h100": "H100", "qwen3-32b/a100": "A100-80GB", "gpt-oss-20b/h100": "H100",
         "gpt-oss-20b/a100": "A100-80GB", "gpt-oss-120b/h100": "H100", "gpt-oss-120b/a100": "A100-80GB",
         "qwen3-235b-a22b/h100": "H100", "qwen3-235b-a22b/a100": "A100-80GB", "deepseek-r1/h200": "H200"}
#: the checkpoints the pages serve with vLLM: kvreplay's catalog model, the weights as kvreplay
#: simulates them (gpt-oss's MXFP4 experts: int4; fp8 checkpoints: fp8) and the checkpoint's context
#: (config.json max_position_embeddings: vLLM's max_model_len unless the command sets it;
#: Qwen3-235B-A22B-Instruct-2507's is 262,144 where the catalog's Qwen3-235B-A22B has 40,960;
#: DeepSeek-R1-0528's 163,840 as the catalog's R1). KV: bf16, vLLM's default.
CHECKPOINTS = {
    "Qwen/Qwen3-14B": ("Qwen3-14B", "bf16", 40960),
    "Qwen/Qwen3-32B": ("Qwen3-32B", "bf16", 40960),
    "openai/gpt-oss-20b": ("gpt-oss-20b", "int4", 131072),
    "openai/gpt-oss-120b": ("gpt-oss-120b", "int4", 131072),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ("Qwen3-235B-A22B", "bf16", 262144),
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": ("Qwen3-235B-A22B", "fp8", 262144),
    "deepseek-ai/DeepSeek-R1-0528": ("DeepSeek-R1", "fp8", 163840),
}
#: models the catalog lacks: their config.json (data/published_configs/, the Hugging Face file's
#: values; kvreplay reads any config.json as --model does)
CONFIG_MODELS = {"Qwen3-14B": DATA.parent / "published_configs" / "Qwen--Qwen3-14B.json"}
#: the pages' random cases: label -> (input, output) tokens asked (their "Benchmark Dataset" list) and
#: the prompts sent (each case's "Successful requests" where none failed)
CASES = {"32K": (32000, 100, 100), "4K": (4000, 200, 500), "2K": (2000, 100, 500), "128": (128, 4, 1000)}
#: the case whose 1,000 requests at once the API server bounds (docs/fidelity.md): grouped apart too
API_BOUND_INPUT = 128
#: vLLM's API-server defaults by GPU (module docstring): max_num_seqs, max_num_batched_tokens
API_DEFAULTS = {"A100-80GB": (256, 2048)}
LARGE_GPU_DEFAULTS = (1024, 8192)
COLUMNS = ("run", "source_url", "commit", "page_date", "config", "gpu", "tp", "model", "checkpoint", "weights",
           "kv_dtype", "vllm_version", "serve_command", "max_model_len", "async_scheduling", "max_num_batched_tokens",
           "max_num_seqs", "dataset", "input_len", "output_len", "range_ratio",
           "num_prompts", "request_rate", "burstiness", "max_concurrency", "ignore_eos", "seed", "successful_requests",
           "duration_s", "total_input_tokens", "total_generated_tokens", "mean_ttft_ms", "median_ttft_ms",
           "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms")
FIGURES = {"Successful requests": "successful_requests", "Benchmark duration (s)": "duration_s",
           "Total input tokens": "total_input_tokens", "Total generated tokens": "total_generated_tokens",
           "Mean TTFT (ms)": "mean_ttft_ms", "Median TTFT (ms)": "median_ttft_ms", "P99 TTFT (ms)": "p99_ttft_ms",
           "Mean TPOT (ms)": "mean_tpot_ms", "Mean ITL (ms)": "mean_itl_ms"}
INTS = {"tp", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "input_len", "output_len", "num_prompts",
        "seed", "successful_requests",
        "total_input_tokens", "total_generated_tokens"}
FLOATS = {"range_ratio", "burstiness", "duration_s", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
          "mean_itl_ms"}


# ---- the extract (from a clone of gpustack/gpustack) ----

def _git(gitdir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True).stdout


def _section(text: str, start: str, stop: str) -> str:
    i = text.index(start)
    j = text.find(stop, i)
    return text[i:j if j >= 0 else len(text)]


def _cases(block: str) -> dict:
    """A results block's random cases: label -> {field: quoted value}."""
    cases = {}
    for label, figures in re.findall(r"# random (\w+) input\n(.*?)={40,}\n", block, flags=re.S):
        cases[label] = {}
        for line in figures.splitlines():
            key, _, value = line.strip().partition(":")
            if key in FIGURES:
                cases[label][FIGURES[key]] = value.strip()
    return cases


def parse_page(text: str) -> dict:
    """One performance-lab page: its vLLM version and, of its "Other Benchmark Cases", each
    configuration served by vLLM (baseline, optimized): its serving command and its random cases'
    quoted figures (label -> {field: value})."""
    version = re.search(r"- vLLM: v([0-9.]+)", text).group(1)
    other = _section(text, "### Other Benchmark Cases", "\n## ")
    configs = {}
    for name, title in (("baseline", "Baseline"), ("optimized", "Optimized")):
        if f"{title} serving script" not in other:
            continue
        script = _section(other, f"{title} serving script", f"{title} benchmark results")
        serve = re.search(r"(vllm serve [^\n]+)", script)
        if serve:  # (an optimized configuration on SGLang or TensorRT-LLM: not vLLM's)
            results = _section(other, f"{title} benchmark results", "??? info")
            configs[name] = {"serve": serve.group(1).strip(), "cases": _cases(results)}
    return {"version": version, "configs": configs}


#: the ``vllm serve`` flags the pages use and how they are read; any other flag refuses the extract
SERVE_FLAGS = {"-tp": "tp", "--tensor-parallel-size": "tp", "--max-model-len": "max_model_len",
               "--max-num-batched-tokens": "max_num_batched_tokens", "--max-num-seqs": "max_num_seqs"}


def serve_flags(command: str) -> dict:
    """A ``vllm serve CHECKPOINT FLAGS`` command: its checkpoint, tp (1 unless given), and each of
    max_model_len, max_num_batched_tokens, max_num_seqs and async_scheduling given (else None).
    A flag this does not read raises ValueError: no flag is dropped unread."""
    words = command.split()
    out = {"checkpoint": words[2], "tp": 1, "max_model_len": None, "max_num_batched_tokens": None,
           "max_num_seqs": None, "async_scheduling": None}
    i = 3
    while i < len(words):
        flag, _, value = words[i].partition("=")
        if flag == "--async-scheduling":
            out["async_scheduling"] = True
        elif flag in SERVE_FLAGS:
            if not value:
                i += 1
                value = words[i]
            out[SERVE_FLAGS[flag]] = int(value)
        else:
            raise ValueError(f"{command!r}: flag {flag} is not read")
        i += 1
    return out


def extract(gitdir: str) -> None:
    rows = []
    for page, gpu in PAGES.items():
        path = f"docs/performance-lab/{page}.md"
        commit, date = _git(gitdir, "log", "-1", "--format=%H %cs", "HEAD", "--", path).split()
        parsed = parse_page(_git(gitdir, "show", f"{commit}:{path}"))
        for config, c in parsed["configs"].items():
            flags = serve_flags(c["serve"])
            model, weights, context = CHECKPOINTS[flags["checkpoint"]]
            prefix = page.replace("/", "-") + ("" if config == "baseline" else "-opt")
            for label, (isl, osl, prompts) in CASES.items():
                f = c["cases"][label]
                rows.append({"run": f"{prefix}-{label.lower()}", "source_url": f"{REPO}/blob/{commit}/{path}",
                             "commit": commit, "page_date": date, "config": config, "gpu": gpu, "tp": flags["tp"],
                             "model": model, "checkpoint": flags["checkpoint"], "weights": weights, "kv_dtype": "bf16",
                             "vllm_version": parsed["version"], "serve_command": c["serve"],
                             "max_model_len": flags["max_model_len"] or context,
                             "async_scheduling": "on" if flags["async_scheduling"] else "default",
                             "max_num_batched_tokens": flags["max_num_batched_tokens"] or "",
                             "max_num_seqs": flags["max_num_seqs"] or "", "dataset": "random", "input_len": isl,
                             "output_len": osl, "range_ratio": 0.0, "num_prompts": prompts, "request_rate": "inf",
                             "burstiness": 1.0,
                             "max_concurrency": "", "ignore_eos": "no", "seed": 42, **f})
    with open(DATA, "w", newline="") as out:
        w = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {DATA} ({len(rows)} runs)")


# ---- the check ----

def load_runs(path: Path = DATA) -> list[dict]:
    """The committed runs, typed (an empty cell: None)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append({k: (None if v == "" else int(v) if k in INTS else float(v) if k in FLOATS else v)
                    for k, v in r.items()})
    return out


def spread_evenly(total: int, n: int) -> np.ndarray:
    """n whole lengths within one of each other that sum to `total` (the first total % n longer)."""
    base, extra = divmod(int(total), int(n))
    return np.full(n, base) + (np.arange(n) < extra)


def lengths(run: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each successful request's input and output tokens (module docstring: the quoted totals, spread
    evenly; the totals and the means count the successful requests only)."""
    n = run["successful_requests"]
    return spread_evenly(run["total_input_tokens"], n), spread_evenly(run["total_generated_tokens"], n)


def schedule_s(run: dict) -> np.ndarray:
    """When the benchmark means to send each request, before any max concurrency: at request rate
    inf all at once; else vLLM 0.33.0's schedule (benchmarks/serve.py:478-527): gamma intervals of
    shape burstiness and mean 1 / rate (burstiness 1: Poisson; inf: evenly spaced) drawn from numpy's
    legacy generator seeded as the benchmark seeds it (``np.random.seed(args.seed)``, serve.py:2061;
    the same draws if nothing drew from it first), summed, then scaled so the last is sent at
    requests / rate. (Earlier releases sent the first at once and did not rescale.)"""
    n = run["successful_requests"]
    if run["request_rate"] == "inf":
        return np.zeros(n)
    rate, shape = float(run["request_rate"]), float(run["burstiness"])
    if np.isinf(shape):
        delays = np.full(n, 1.0 / rate)
    else:
        delays = np.random.RandomState(run["seed"]).gamma(shape, 1.0 / (rate * shape), n)
    sends = np.cumsum(delays)
    return sends * (n / rate) / sends[-1]


def semaphore_sends(schedule: np.ndarray, finish_s: np.ndarray, clients: int) -> np.ndarray:
    """When each request is sent under ``--max-concurrency clients``: at its scheduled time, or, if
    all clients are busy then, when one frees (vLLM's benchmark holds an asyncio semaphore: the
    k-th request past the first `clients` takes the slot of the k-th request to finish)."""
    sends = schedule.astype(float).copy()
    done = np.sort(finish_s)
    for i in range(clients, len(sends)):
        sends[i] = max(schedule[i], done[i - clients])
    return sends


def model_of(run: dict) -> str:
    """What kvreplay takes as the run's model: its catalog name, or its config.json (CONFIG_MODELS)."""
    return str(CONFIG_MODELS.get(run["model"], run["model"]))


def limits(run: dict) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens: the serving command's, else vLLM's API-server
    defaults on the run's GPU (module docstring)."""
    seqs, tokens = API_DEFAULTS.get(run["gpu"], LARGE_GPU_DEFAULTS)
    return run["max_num_seqs"] or seqs, run["max_num_batched_tokens"] or tokens


def scheduled_async_run(run: dict) -> bool:
    """Whether the run's vLLM scheduled asynchronously: --async-scheduling, else its version's default."""
    return run["async_scheduling"] == "on" or scheduled_async(run["vllm_version"])


def not_simulated(run: dict) -> str | None:
    """Why a run is not simulated (None: it is): fp8 weights on an A100, which has no FP8 tensor
    cores: vLLM runs them weight-only (Marlin, 8-bit weights into bf16 GEMMs), and kvreplay has no
    8-bit weight-only dtype (its fp8 is fp8 GEMMs, refused on the A100)."""
    if run["weights"] == "fp8" and run["gpu"].startswith("A100"):
        return "fp8 weights on A100 (vLLM: weight-only Marlin; kvreplay: none)"
    return None


def trace_of(run: dict, t: np.ndarray):
    """The run as a trace, each request sent at `t` (seconds): every prompt its own random tokens
    (no shared blocks)."""
    inputs, outputs = lengths(run)
    requests, first = [], 0
    for i in range(run["successful_requests"]):
        blocks = -(-int(inputs[i]) // BLOCK)
        requests.append((list(range(first, first + blocks)), int(inputs[i]), float(t[i]) * 1e3, int(outputs[i])))
        first += blocks
    return kvreplay.Trace.from_requests(requests, block_size=BLOCK)


def pool_bytes(run: dict) -> tuple[float, bool]:
    """The KV memory a GPU of the run gets, bytes, and whether it is vLLM's start-up minimum: the
    budget as the run's vLLM version computed it (kv_pool.py's terms: the sampler's sort up to 0.16,
    the CUDA graphs outside the budget before 0.21, NCCL inside it up to 0.10), at the utilization
    and limits it ran with; where that cannot hold one request of max_model_len tokens, vLLM would
    have refused to start (its "To serve at least one request with the models's max seq len" check),
    so the run had more than the command says: the minimum it needs (max_model_len tokens' KV,
    startup_bytes_per_token)."""
    seqs, tokens = limits(run)
    point = {"skip_reason": "", "catalog_model": model_of(run), "gpu": run["gpu"], "measured_total_gib": "",
             "tp": run["tp"], "weights_dtype": run["weights"], "kv_dtype": run["kv_dtype"],
             "max_num_batched_tokens": tokens, "max_num_seqs": seqs, "enforce_eager": "False",
             "vllm_version": run["vllm_version"], "sampler": "", "measured_kv_gib": "0", "measured_tokens": "",
             "gpu_memory_utilization": RUNS_UTILIZATION, "notes": ""}
    budget = predict(terms(point), constants())
    need = run["max_model_len"] * startup_bytes_per_token(run)
    return (budget, False) if budget >= need else (need, True)


def startup_bytes_per_token(run: dict) -> float:
    """KV bytes a GPU needs per token of one max_model_len request for vLLM to start, as the
    simulated pool must hold it: every layer's. For a hybrid model (gpt-oss's sliding windows) that
    is more than vLLM's check asks (its full-attention layers and a window: serving/fit.py's lower
    bound), but kvreplay's hybrid pool at that lower bound (gpt-oss-120b on one H100 at 32,768
    tokens: 2,048 blocks) finishes none of the 32K case's requests (the sliding-window layers also
    hold the blocks of the chunk being prefilled, which vLLM's check counts and that bound does not),
    so the minimum a run is given is every layer's: an upper bound of vLLM's for these models."""
    return kv_bytes_per_token_per_gpu(get_model(model_of(run)), run["tp"], run["kv_dtype"])


def simulate_run(run: dict):
    """The run as its benchmark sent it: its schedule (schedule_s); under a max concurrency, the
    clients' loop (semaphore_sends) to its fixed point, each round simulated at the sends the last
    one's finishes give, until the sends stop moving: each round settles at least the next
    `clients` requests, and one more round finds nothing moved: requests / clients + 4 rounds at
    most (more raises). The run at the sends found is simulated with its band (`band`)."""
    schedule = sends = schedule_s(run)
    clients = run["max_concurrency"]
    if clients:
        rep = serve_at(run, sends)
        for _ in range(-(-len(sends) // clients) + 4):
            nxt = semaphore_sends(schedule, rep.finish_s, clients)
            if np.allclose(nxt, sends, rtol=0, atol=1e-9):
                break
            sends = nxt
            rep = serve_at(run, sends)
        else:
            raise RuntimeError(f"{run['run']}: the clients' loop did not settle")
    return serve_at(run, sends, band=True)


def serve_at(run: dict, sends: np.ndarray, band: bool = False):
    """The run's requests sent at `sends`, simulated (with `band`: also at both ends of the
    calibrated roofline's and the host terms' bands, the report's latency_band_s)."""
    seqs, tokens = limits(run)
    kv, _ = pool_bytes(run)
    return kvreplay.simulate(trace_of(run, sends), "vllm", None, BLOCK, time_model="roofline", model=model_of(run),
                             gpu=run["gpu"], tp=run["tp"], weights_dtype=run["weights"], kv_dtype=run["kv_dtype"],
                             kv_cache_memory=int(kv), max_model_len=run["max_model_len"],
                             scheduler=Scheduler(style="vllm", max_num_seqs=seqs, max_num_batched_tokens=tokens),
                             host=host_of({"async": scheduled_async_run(run)}),
                             compare_sequential=False, check=False, band_runs=band)


def simulated(rep) -> dict:
    """The benchmark's figures of a simulated run (module docstring), ms and s."""
    ok = rep.finished
    out = rep.output_tokens[ok]
    ttft = rep.first_token_s[ok] - rep.arrival_s[ok]
    decode = rep.finish_s[ok] - rep.first_token_s[ok]
    many = out > 1
    tpot = decode[many] / (out[many] - 1)
    return {"requests": int(ok.sum()), "of": len(ok), "ttft_ms": 1e3 * float(ttft.mean()),
            "tpot_ms": 1e3 * float(tpot.mean()), "itl_ms": 1e3 * float(decode[many].sum() / (out[many] - 1).sum()),
            "e2e_ms": 1e3 * float(ttft.mean() + tpot.mean() * (out.mean() - 1)),
            "duration_s": float(rep.finish_s[ok].max() - rep.arrival_s.min()), "pool_blocks": int(rep.capacity_blocks)}


def measured(run: dict) -> dict:
    out = run["total_generated_tokens"] / run["successful_requests"]
    return {"ttft_ms": run["mean_ttft_ms"], "tpot_ms": run["mean_tpot_ms"], "itl_ms": run["mean_itl_ms"],
            "e2e_ms": run["mean_ttft_ms"] + run["mean_tpot_ms"] * (out - 1), "duration_s": run["duration_s"]}


KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "duration_s")


def covers(rep, meas: dict) -> dict:
    """TTFT and TPOT: whether the measured mean lies in the simulated mean's parameter band (the run at
    both ends of the GPU steps' and the host terms' bands) and in its prediction band (widened by the
    measured scatter of calibrate_host.py's runs): the report's latency_band_s, as a user sees it."""
    band = rep.summary()["latency_band_s"]
    out = {}
    for key in ("ttft", "tpot"):
        value = meas[f"{key}_ms"] / 1e3
        out[key] = tuple(lo <= value <= hi for lo, hi in (band[key]["mean"], band["prediction"][key]["mean"]))
    return out


def check_run(run: dict) -> dict:
    rep = simulate_run(run)
    sim, meas = simulated(rep), measured(run)
    return {"run": run, "sim": sim, "meas": meas, "error": {k: sim[k] / meas[k] - 1 for k in KEYS},
            "pool_floor": pool_bytes(run)[1], "covers": covers(rep, meas)}


def source_of(run: dict) -> str:
    return f"GPUStack performance lab, vLLM {run['vllm_version']}, {run['config']}"


def family_of(model: str) -> str:
    return {"Qwen3-14B": "Qwen3 dense", "Qwen3-32B": "Qwen3 dense", "gpt-oss-20b": "gpt-oss (MoE, MXFP4)", "gpt-oss-120b": "gpt-oss (MoE, MXFP4)",
            "Qwen3-235B-A22B": "Qwen3 MoE", "DeepSeek-R1": "DeepSeek (MLA MoE, fp8)"}.get(model, model)


def run_table(results) -> None:
    columns = [("run", False), ("GPU x TP", False), ("in / out tokens", False), ("requests", True),
               ("pool (blocks)", True)] + [(f"{k} meas / sim, error", False) for k in ("TTFT ms", "TPOT ms", "ITL ms")] + [
               ("E2E error", True), ("duration meas / sim s", False), ("TTFT, TPOT in band (param / pred)", False)]
    rows = []
    for c in results:
        r, s, m, e = c["run"], c["sim"], c["meas"], c["error"]
        inputs, outputs = lengths(r)
        rows.append([r["run"], f"{r['gpu']} x {r['tp']}", f"{inputs.mean():.0f} / {outputs.mean():.1f}",
                     f"{s['requests']} of {s['of']}", f"{s['pool_blocks']:,}" + (" (min)" if c["pool_floor"] else "")]
                    + [f"{m[k]:.1f} / {s[k]:.1f}, {100 * e[k]:+.1f}%" for k in ("ttft_ms", "tpot_ms", "itl_ms")]
                    + [f"{100 * e['e2e_ms']:+.1f}%", f"{m['duration_s']:.1f} / {s['duration_s']:.1f}",
                       ", ".join("/".join("yes" if x else "no" for x in c["covers"][k]) for k in ("ttft", "tpot"))])
    print_table("Published vLLM runs (GPUStack performance lab) against kvreplay: means, error = simulated / measured - 1",
                columns, rows)


def group_rows(results, key) -> list[list[str]]:
    groups = {}
    for c in results:
        groups.setdefault(key(c["run"]), []).append(c)
    rows = []
    for name, cs in groups.items():
        cells = [name, str(len(cs))]
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            e = np.array([c["error"][k] for c in cs])
            cells.append(f"{100 * np.mean(np.abs(e)):.1f}% / {100 * np.median(e):+.1f}%")
        rows.append(cells)
    return rows


def band_line(results) -> None:
    n = len(results)
    counts = {f"{k} {end}": sum(c["covers"][k][i] for c in results) for k in ("ttft", "tpot")
              for i, end in enumerate(("parameter", "prediction"))}
    print(f"\nthe measured mean in the simulated band, of {n} runs: " + ", ".join(
        f"{name.replace('ttft', 'TTFT').replace('tpot', 'TPOT')} band {v}" for name, v in counts.items()))


def group_table(results) -> None:
    columns = [("group", False), ("runs", True)] + [(f"{k} mean abs error / median error", False)
                                                    for k in ("TTFT", "TPOT", "ITL", "E2E")]
    larger = [c for c in results if c["run"]["input_len"] > API_BOUND_INPUT]
    rows = (group_rows(results, lambda r: "all") + group_rows(larger, lambda r: "all but the 128 / 4 case")
            + group_rows(results, source_of) + group_rows(results, lambda r: r["gpu"])
            + group_rows(results, lambda r: family_of(r["model"]))
            + group_rows(results, lambda r: f"{r['model']} {r['weights']}, {r['gpu']} x {r['tp']}"
                         + (", async" if scheduled_async_run(r) else ""))
            + group_rows(results, lambda r: f"{r['input_len']} / {r['output_len']} tokens"))
    print_table("by source, GPU, model family, page (model and GPU) and case (each run's mean against the simulated "
                "mean)", columns, rows)


def host_table(results) -> None:
    """docs/host.md's error-table rows: by GPU, each run's mean error (simulated over measured) as
    an absolute mean, and the TTFT ratio measured / simulated, median [5-95%] over the runs."""
    columns = [("source", False), ("GPU", False), ("runs", True), ("role", False), ("TTFT", True),
               ("TTFT measured / simulated, median [5-95%]", False), ("TPOT (ITL)", True), ("E2E", True)]
    groups = {}
    for c in results:
        groups.setdefault(c["run"]["gpu"], []).append(c)
    rows = []
    for gpu, cs in groups.items():
        r = np.array([c["meas"]["ttft_ms"] / c["sim"]["ttft_ms"] for c in cs])
        mean_abs = {k: 100 * np.mean([abs(c["error"][k]) for c in cs]) for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
        versions = "/".join(sorted({c["run"]["vllm_version"] for c in cs}))
        rows.append([f"GPUStack performance lab (published; random, all at once), vLLM {versions}", gpu, str(len(cs)),
                     "held back", f"{mean_abs['ttft_ms']:.1f}%",
                     f"{np.median(r):.2f} [{np.percentile(r, 5):.2f}-{np.percentile(r, 95):.2f}]",
                     f"{mean_abs['tpot_ms']:.1f}%", f"{mean_abs['e2e_ms']:.1f}%"])
    print_table("docs/host.md's rows (mean absolute error of the runs' means)", columns, rows)


def main(argv=None) -> int:
    args = run_arguments(argv, __doc__, "rebuild the csv from gpustack/gpustack's git directory")
    if args.extract:
        extract(args.extract)
        return 0
    runs = load_runs()
    names = selected_runs(args.runs, [r["run"] for r in runs])
    if names is None:
        return 2
    runs = [r for r in runs if r["run"] in names]
    results = [check_run(r) for r in runs if not not_simulated(r)]
    run_table(results)
    band_line(results)
    group_table(results)
    host_table(results)
    left = [(r["run"], not_simulated(r)) for r in runs if not_simulated(r)]
    if left:
        print(f"\nnot simulated ({len(left)}): " + "; ".join(f"{name}: {why}" for name, why in left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
