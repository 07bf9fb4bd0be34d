"""A plan's chosen deployment as the engines' own launch commands (`kvreplay plan --emit`).

Per load, the cheapest deployment becomes one instance group: its `instances` identical engine
servers, each on `tp` GPUs, and the router in front of them.

- ``vllm``: ``vllm serve`` (vLLM 0.33.0) with the model, ``--tensor-parallel-size``,
  ``--max-num-batched-tokens``, ``--max-num-seqs``, ``--gpu-memory-utilization``,
  ``--max-model-len``, ``--enable-prefix-caching``, chunked prefill, the weights' and KV's dtypes,
  and a DRAM tier as vLLM's native KV offloading (``--kv-offloading-size``: GiB summed over the
  TP ranks, vllm/config/cache.py ``CacheConfig.kv_offloading_size``).
- ``sglang``: ``python -m sglang.launch_server`` (SGLang 0.5.23) with ``--model-path``,
  ``--tp-size``, ``--chunked-prefill-size``, ``--max-running-requests``, ``--mem-fraction-static``,
  ``--context-length``, the radix cache's eviction and schedule policies, and a DRAM tier as its
  hierarchical cache (``--enable-hierarchical-cache --hicache-size``: GB per TP rank, as
  sglang/srt/mem_cache/pool_host/base.py sizes each rank's host pool).
- the router: ``python -m sglang_router.launch_router`` (sglang-router 0.3.2) over the group's
  worker URLs, with the policy nearest the plan's router (round-robin, random and SGLang's
  cache-aware are its own; others are said to be approximations).
- ``k8s``: per group, a Deployment of `instances` replicas (the engine command, ``nvidia.com/gpu:
  tp``), a headless Service for the router to find them, and the router's Deployment and Service.

What no flag expresses is written as a comment beside the command (a policy the engine does not
have, an SSD tier vLLM cannot take by flag), never dropped in silence. Every flag is one the
engine's own argument parser accepts (tests/serving/test_emit.py against tests/data/
engine_flags.json, which tests/real_engines/test_emit_flags.py refreshes from the parsers).
"""

from __future__ import annotations

import math
import re
import shlex

from ..errors import ConfigError
from .plan_check import unrecorded_utilization
from .timing.memory import vllm_utilization

KINDS = ("vllm", "sglang", "k8s")
VLLM_PORT, SGLANG_PORT, ROUTER_PORT = 8000, 30000, 8080
#: the plan's routers as sglang-router 0.3.2's policies, and how exactly
ROUTER_POLICY = {
    "round-robin": ("round_robin", None),
    "random": ("random", None),
    "sglang": ("cache_aware", None),
    "least-loaded": ("power_of_two", "kvreplay's least-loaded picks the instance with the fewest requests in flight; "
                                     "power_of_two picks the less loaded of two random ones"),
    "session": ("manual", "requests must carry their session id as the routing key, so that each session stays on "
                          "one worker"),
    "kv-aware": ("cache_aware", "kvreplay's kv-aware is NVIDIA Dynamo's KV router (python -m dynamo.frontend "
                                "--router-mode kv); sglang-router's cache_aware is the nearest it has"),
    "dynamo": ("cache_aware", "kvreplay's dynamo is NVIDIA Dynamo's KV router (python -m dynamo.frontend "
                              "--router-mode kv); sglang-router's cache_aware is the nearest it has"),
    "llm-d": ("cache_aware", "kvreplay's llm-d is llm-d's inference scheduler (its prefix, KV and queue scorers); "
                             "sglang-router's cache_aware is the nearest"),
    "mooncake": ("cache_aware", "kvreplay's mooncake is Mooncake's Conductor (least estimated TTFT); "
                                "sglang-router's cache_aware is the nearest"),
}
#: the plan's policies as SGLang's --radix-eviction-policy
SGLANG_EVICTION = {"radix": "lru", "lru": "lru", "lfu": "lfu"}


def groups(plan: dict) -> list[dict]:
    """One instance group per load whose plan chose a deployment: its engine settings."""
    opts = plan.get("run_options") or {}
    out = []
    for block in plan["loads"]:
        best = block["best"]
        if best is None:
            continue
        name = _name(plan["model"], best, block)
        out.append({"name": name, "load_kind": block["load_kind"], "load": block["load"], "best": best,
                    "model": plan["model"], "opts": opts,
                    "kv_semantics": (plan.get("kv_semantics") or {}).get("semantics")})
    if not out:
        raise ConfigError("--emit: no load has a deployment that meets the SLOs, so there is nothing to deploy")
    return out


def _name(model: str, best: dict, block: dict) -> str:
    load = f"x{block['load']:g}" if block["load_kind"] == "speedup" else f"{block['load']:g}rps"
    pp = f"-pp{best['pp']}" if best.get("pp", 1) > 1 else ""
    raw = f"{model}-{best['gpu']}-tp{best['tp']}{pp}-{load}".lower()
    return re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")[:63]


def repository(model: str) -> str:
    """The model's Hugging Face repository (from the catalog's config.json address)."""
    from ..analysis.models import get_model

    source = get_model(model).source
    m = re.match(r"https://huggingface\.co/([^/]+/[^/]+)/", source)
    if not m:
        raise ConfigError(f"--emit: {model}'s catalog entry does not name its Hugging Face repository ({source})")
    return m.group(1)


def _tiers(best: dict) -> dict:
    from .plan import tier_gib

    return tier_gib(None if best["tiers"] == "none" else best["tiers"])


def _scheduler(opts: dict) -> dict:
    from .simulate import Scheduler

    return Scheduler(style=opts.get("engine_style", "vllm")).to_dict()


def _max_model_len(g: dict) -> int | None:
    from .simulate import _max_model_len

    return _max_model_len(g["opts"].get("max_model_len"), g["model"])[0]


def vllm_args(g: dict) -> tuple[list[str], list[str]]:
    """`vllm serve`'s arguments for one instance of group `g`, and the comments beside them."""
    best, opts, notes = g["best"], g["opts"], []
    s = _scheduler(opts)
    args = ["--model", repository(g["model"]), "--tensor-parallel-size", str(best["tp"])]
    if best.get("pp", 1) > 1:
        args += ["--pipeline-parallel-size", str(best["pp"])]
        notes.append(f"each instance is {best['pp']} pipeline stages of {best['tp']} GPUs ({best['pp'] * best['tp']} "
                     f"GPUs): over 8 GPUs it spans hosts, run as vLLM's multi-node serving")
    args += ["--max-num-batched-tokens", str(s["max_num_batched_tokens"]), "--max-num-seqs", str(s["max_num_seqs"]),
            "--gpu-memory-utilization", f"{vllm_utilization(opts.get('gpu_memory_utilization')):g}",
            "--enable-prefix-caching", "--enable-chunked-prefill" if s["chunked_prefill"] else "--no-enable-chunked-prefill"]
    limit = _max_model_len(g)
    if limit is not None:
        args += ["--max-model-len", str(limit)]
    args += _vllm_dtypes(opts, notes)
    unrecorded = unrecorded_utilization({"run_options": opts})
    if unrecorded:
        notes.append(unrecorded)
    tiers = _tiers(best)
    if tiers.get("dram"):
        args += ["--kv-offloading-size", f"{tiers['dram']:g}", "--kv-offloading-backend", "native"]
    if tiers.get("ssd"):
        notes.append(f"an SSD tier ({tiers['ssd']:g} GiB) has no vLLM flag: LMCache's local_disk backend takes it in "
                     "its configuration file (LMCACHE_CONFIG_FILE), with --kv-offloading-backend lmcache")
    if best["policy"] not in ("vllm",):
        notes.append(f"the plan's policy {best['policy']} is not vLLM's: vLLM's prefix cache evicts by its own rule "
                     "(kvreplay's policy vllm); no flag changes it")
    semantics = g.get("kv_semantics")
    if semantics == "full":
        args.append("--disable-hybrid-kv-cache-manager")
    return args, notes


def _vllm_dtypes(opts: dict, notes: list) -> list[str]:
    weights = opts.get("weights_dtype", "bf16")
    out = ["--dtype", "float16" if weights == "fp16" else "bfloat16"]
    if weights == "fp8":
        out += ["--quantization", "fp8"]
    elif weights == "int4":
        notes.append("int4 weights: serve an int4 checkpoint (AWQ or GPTQ); vLLM reads its quantization from it")
    if opts.get("kv_dtype") == "fp8":
        out += ["--kv-cache-dtype", "fp8"]
    return out


def _mem_fraction_static(g: dict, s: dict) -> float:
    """The mem_fraction_static the plan's SGLang-style pool was sized with: SGLang 0.5.23's default
    for the model, GPU, TP and chunked prefill size (timing/sglang_memory.py), as simulate sizes it."""
    from .timing.sglang_memory import sglang_capacity

    best, opts = g["best"], g["opts"]
    pool = sglang_capacity(g["model"], best["gpu"], best["tp"], max_num_batched_tokens=s.get("chunked_prefill_size"),
                           dtype=opts.get("weights_dtype", "bf16"), kv_dtype=opts.get("kv_dtype") or "bf16")
    return pool.mem_fraction_static


def sglang_args(g: dict) -> tuple[list[str], list[str]]:
    """`python -m sglang.launch_server`'s arguments for one instance of group `g`, and comments."""
    best, opts, notes = g["best"], g["opts"], []
    s = _scheduler(opts)
    chunk = s.get("chunked_prefill_size", 8192) if s["chunked_prefill"] else -1
    args = ["--model-path", repository(g["model"]), "--tp-size", str(best["tp"]),
            "--chunked-prefill-size", str(chunk), "--max-running-requests", str(s["max_num_seqs"]),
            "--mem-fraction-static", f"{_mem_fraction_static(g, s):g}",
            "--schedule-policy", s.get("schedule_policy", "fcfs")]
    limit = _max_model_len(g)
    if limit is not None:
        args += ["--context-length", str(limit)]
    weights = opts.get("weights_dtype", "bf16")
    args += ["--dtype", "float16" if weights == "fp16" else "bfloat16"]
    if weights == "fp8":
        args += ["--quantization", "fp8"]
    elif weights == "int4":
        notes.append("int4 weights: serve an int4 checkpoint (AWQ or GPTQ); SGLang reads its quantization from it")
    if opts.get("kv_dtype") == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    eviction = SGLANG_EVICTION.get(best["policy"])
    if eviction is None:
        notes.append(f"the plan's policy {best['policy']} is not one of SGLang's radix evictions; its LRU is used")
        eviction = "lru"
    args += ["--radix-eviction-policy", eviction]
    tiers = _tiers(best)
    if tiers.get("dram"):
        per_rank = math.floor(tiers["dram"] * 2 ** 30 / 1e9 / best["tp"])
        args += ["--enable-hierarchical-cache", "--hicache-size", str(per_rank)]
        notes.append(f"the DRAM tier's {tiers['dram']:g} GiB per instance is --hicache-size {per_rank} GB on each "
                     f"of its {best['tp']} TP ranks")
    if tiers.get("ssd"):
        args += ["--hicache-storage-backend", "file"]
        notes.append(f"the SSD tier ({tiers['ssd']:g} GiB) is HiCache's file storage backend; no flag caps its size")
    return args, notes


def router_args(g: dict, urls: list[str], backend: str) -> tuple[list[str], list[str]]:
    """sglang-router's arguments in front of `urls`, and comments."""
    policy, note = ROUTER_POLICY.get(g["best"]["router"], ("round_robin", "an unknown router: round_robin"))
    args = ["--worker-urls", *urls, "--policy", policy, "--backend", backend, "--host", "0.0.0.0",
            "--port", str(ROUTER_PORT)]
    return args, [note] if note else []


def shell(plan: dict, engine: str) -> str:
    """The launch commands of every instance group, as a shell script (one server per instance,
    each on its own host, then the router)."""
    if engine not in ("vllm", "sglang"):
        raise ConfigError(f"--emit {engine}: one of {', '.join(KINDS)}")
    _check_style(plan, engine)
    lines = ["#!/bin/sh", f"# kvreplay plan: {plan['slo']}; the cheapest deployment per load, as {engine} launch "
                          "commands (one line per instance: run each on its own host with its GPUs)"]
    for g in groups(plan):
        best = g["best"]
        args, notes = vllm_args(g) if engine == "vllm" else sglang_args(g)
        port = VLLM_PORT if engine == "vllm" else SGLANG_PORT
        stages = f"{best['pp']} stages x " if best.get("pp", 1) > 1 else ""
        lines += ["", f"# {g['name']}: {best['instances']} x {stages}{best['tp']} x {best['gpu']} for load {g['load']:g} "
                      f"({g['load_kind']}), {best['cost_per_hour']:,.2f} USD/h"]
        lines += [f"# note: {n}" for n in notes]
        head = ["vllm", "serve"] if engine == "vllm" else ["python", "-m", "sglang.launch_server"]
        # (vLLM serves on its default port, 8000, on every interface: vllm/entrypoints/common/cli_args.py
        # FrontendArgs.host None, port 8000; launchers/launcher.py binds (host or "", port))
        port_flag = [] if engine == "vllm" else ["--host", "0.0.0.0", "--port", str(port)]
        for k in range(best["instances"]):
            lines.append(f"# instance {k + 1} of {best['instances']} (host {g['name']}-{k})")
            lines.append(shlex.join(head + args + port_flag))
        urls = [f"http://{g['name']}-{k}:{port}" for k in range(best["instances"])]
        rargs, rnotes = router_args(g, urls, "openai" if engine == "vllm" else "sglang")
        lines += [f"# router: {n}" for n in rnotes]
        lines.append(shlex.join(["python", "-m", "sglang_router.launch_router", *rargs]))
    return "\n".join(lines) + "\n"


def _check_style(plan: dict, engine: str) -> None:
    style = (plan.get("run_options") or {}).get("engine_style", "vllm")
    if style != engine:
        raise ConfigError(f"--emit {engine}: this plan simulated the {style} scheduler; plan with --engine-style "
                          f"{engine} to deploy {engine}")


def k8s(plan: dict) -> str:
    """A Kubernetes manifest per instance group: the engine's Deployment (its replicas, GPUs and
    command) and a headless Service, the router's Deployment and Service."""
    engine = (plan.get("run_options") or {}).get("engine_style", "vllm")
    docs = []
    for g in groups(plan):
        best = g["best"]
        if best.get("pp", 1) > 1:
            raise ConfigError(f"--emit k8s: {g['name']} runs {best['pp']} pipeline stages of {best['tp']} GPUs, one "
                              "instance over several hosts, which one Deployment's pod cannot hold: use --emit vllm")
        args, notes = vllm_args(g) if engine == "vllm" else sglang_args(g)
        port = VLLM_PORT if engine == "vllm" else SGLANG_PORT
        command = (["vllm", "serve"] + args if engine == "vllm" else
                   ["python3", "-m", "sglang.launch_server"] + args + ["--host", "0.0.0.0", "--port", str(port)])
        image = "vllm/vllm-openai:v0.33.0" if engine == "vllm" else "lmsysorg/sglang:v0.5.23"
        name = g["name"]
        rargs, rnotes = router_args(g, [], "openai" if engine == "vllm" else "sglang")
        rargs = [a for a in rargs if a != "--worker-urls"] + ["--service-discovery", "--selector", f"app={name}",
                                                               "--service-discovery-port", str(port)]
        docs.append("\n".join(
            [f"# {name}: {best['instances']} x {best['tp']} x {best['gpu']} for load {g['load']:g} ({g['load_kind']}), "
             f"{best['cost_per_hour']:,.2f} USD/h",
             f"# schedule the engine's pods on {best['gpu']} nodes (a nodeSelector on your cluster's GPU label); the "
             "router lists the pods by label (--service-discovery): give its pod a service account allowed to list "
             "pods; its image is one with sglang-router 0.3.2 installed"] + [f"# note: {n}" for n in notes + rnotes]
            + _deployment(name, image, command, best["instances"], best["tp"], port, best["gpu"])
            + ["---"] + _service(name, port, headless=True)
            + ["---"] + _deployment(f"{name}-router", "lmsysorg/sglang-router:v0.3.2",
                                    ["python3", "-m", "sglang_router.launch_router", *rargs], 1, 0, ROUTER_PORT, None)
            + ["---"] + _service(f"{name}-router", ROUTER_PORT, headless=False)))
    return "\n---\n".join(docs) + "\n"


def _deployment(name: str, image: str, command: list, replicas: int, gpus: int, port: int, gpu: str | None) -> list:
    out = ["apiVersion: apps/v1", "kind: Deployment", "metadata:", f"  name: {name}", "spec:",
           f"  replicas: {replicas}", "  selector:", "    matchLabels:", f"      app: {name}", "  template:",
           "    metadata:", "      labels:", f"        app: {name}", "    spec:"]
    out += ["      containers:", f"        - name: {name.split('-router')[0][:40] if gpu else 'router'}",
            f"          image: {image}", "          command:"]
    out += [f"            - {_quote(c)}" for c in command]
    out += ["          ports:", f"            - containerPort: {port}"]
    if gpus:
        out += ["          resources:", "            limits:", f"              nvidia.com/gpu: {gpus}"]
    return out


def _service(name: str, port: int, headless: bool) -> list:
    return (["apiVersion: v1", "kind: Service", "metadata:", f"  name: {name}", "spec:"]
            + (["  clusterIP: None"] if headless else [])
            + ["  selector:", f"    app: {name}", "  ports:", f"    - port: {port}", f"      targetPort: {port}"])


def _quote(text: str) -> str:
    """A YAML scalar: quoted when it is not a plain word."""
    return text if re.fullmatch(r"[A-Za-z0-9_./:-]+", text) and not text[0].isdigit() else \
        '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def emit(plan: dict, kind: str) -> str:
    """`plan`'s chosen deployments as `kind`: "vllm", "sglang" (shell) or "k8s" (YAML)."""
    if kind not in KINDS:
        raise ConfigError(f"--emit must be one of {', '.join(KINDS)}, got {kind!r}")
    return k8s(plan) if kind == "k8s" else shell(plan, kind)
