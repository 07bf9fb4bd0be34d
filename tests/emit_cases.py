"""Plans whose deployments `kvreplay plan --emit` writes, covering every flag it can emit (shared
by tests/serving/test_emit.py and tests/real_engines/test_emit_flags.py), and the argument lists
of the commands it wrote."""

from __future__ import annotations

import shlex

HEADS = {("vllm", "serve"): "vllm", ("python", "-m", "sglang.launch_server"): "sglang",
         ("python3", "-m", "sglang.launch_server"): "sglang",
         ("python", "-m", "sglang_router.launch_router"): "sglang-router",
         ("python3", "-m", "sglang_router.launch_router"): "sglang-router"}


def plan_of(best: dict, *, model="Llama-3.1-8B", load=1.0, **run_options) -> dict:
    best = {"instances": 2, "tp": 1, "gpu": "H100", "router": "round-robin", "policy": "vllm", "tiers": "none",
            "cost_per_hour": 6.0, **best}
    return {"slo": "TTFT p90 <= 2 s", "model": model, "run_options": {"time_model": "roofline", **run_options},
            "kv_semantics": None, "loads": [{"load_kind": "speedup", "load": load, "best": best}]}


CASES = {
    "vllm plain": ("vllm", plan_of({})),
    "vllm dram fp8 tp2 kv-aware": ("vllm", plan_of({"tp": 2, "tiers": "dram=256GiB@64GB/s", "router": "kv-aware"},
                                                   weights_dtype="fp8", kv_dtype="fp8", max_model_len=32768)),
    "vllm ssd lru int4 session": ("vllm", plan_of({"tiers": "dram=64GiB@64GB/s,ssd=2TiB@7GB/s", "policy": "lru",
                                                   "router": "session"}, weights_dtype="int4")),
    "vllm 70B tp4 least-loaded": ("vllm", plan_of({"tp": 4, "router": "least-loaded", "instances": 3},
                                                  model="Llama-3.1-70B", gpu_memory_utilization=0.85)),
    "sglang plain": ("sglang", plan_of({"policy": "radix"}, engine_style="sglang")),
    "sglang dram fp8 tp2 sglang-router": ("sglang", plan_of({"tp": 2, "tiers": "dram=256GiB@64GB/s",
                                                            "router": "sglang", "policy": "radix"},
                                                           engine_style="sglang", weights_dtype="fp8",
                                                           kv_dtype="fp8")),
    "sglang ssd fp16 random": ("sglang", plan_of({"tiers": "dram=32GiB@64GB/s,ssd=1TiB@7GB/s", "router": "random",
                                                  "policy": "s3fifo"}, engine_style="sglang", weights_dtype="fp16")),
    "k8s vllm dram": ("k8s", plan_of({"tp": 2, "tiers": "dram=128GiB@64GB/s", "instances": 3})),
    "k8s sglang": ("k8s", plan_of({"policy": "radix", "router": "sglang"}, engine_style="sglang")),
}


def commands(text: str, kind: str) -> list[tuple[str, list[str]]]:
    """(parser, arguments) of every command in `--emit` output: the shell lines, or the k8s
    containers' command lists."""
    out = []
    if kind == "k8s":
        for doc in text.split("\n---\n"):
            lines = doc.splitlines()
            if "          command:" not in lines:
                continue
            start = lines.index("          command:") + 1
            argv = []
            for line in lines[start:]:
                if not line.startswith("            - "):
                    break
                item = line[len("            - "):]
                argv.append(item[1:-1].replace('\\"', '"') if item.startswith('"') else item)
            out.append(_split(argv))
        return out
    for line in text.splitlines():
        if line and not line.startswith("#"):
            out.append(_split(shlex.split(line)))
    return out


def _split(argv: list[str]) -> tuple[str, list[str]]:
    for head, name in HEADS.items():
        if tuple(argv[:len(head)]) == head:
            return name, argv[len(head):]
    raise AssertionError(f"an emitted command of no known engine: {argv[:4]}")
