"""Every flag of every command does something: no flag is accepted and ignored.

The walk reads the flags from the argparse parsers themselves (kvreplay.cli.build_parser), so a flag
added to a command is walked too, and the walk fails until the flag has a case below:

- ``Changes``: the command with the flag gives other output (stdout, stderr, exit code or a file
  it writes) than without it, every other argument the same;
- ``Refused``: the flag cannot apply in that command (or without a companion flag), and the
  command stops with exit 2 and a message naming it;
- ``Same``: its effect cannot show on inputs this small, or it is by design the same output (a
  process pool gives the results one process gives); the reason is stated and the output is
  asserted identical.

Every invocation runs in-process on a tiny trace (tests/data/walk.jsonl: 36 requests).
"""

from __future__ import annotations

import difflib
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvreplay.cli import build_parser, main
from kvreplay.cli.parser import subcommands

DATA = Path(__file__).resolve().parent / "data"
WALK = str(DATA / "walk.jsonl")  # 36 requests, 16-token blocks (declared), one out of time order
BAD = str(DATA / "walk_bad_line5.jsonl")  # the same with a negative input_length on line 5
BAILIAN = str(DATA / "bailian_chat.jsonl")
CLAUDE = [str(DATA / "claude_a.json"), str(DATA / "claude_b.json")]  # two sessions; a has a subagent
TOKENS = str(DATA / "token_ids_as_hash_ids.jsonl")  # token ids where block hashes belong
TOKEN_LOG = str(DATA / "tokens_roundtrip.jsonl")
STEPS = str(DATA / "steps_24.csv")
SPAN_LOG = str(DATA / "tokens_span_at_32.jsonl")  # 40 prompts, a 4-token span at token 32; 4 in namespace tenant-x
TOKENIZER = str(DATA / "tokenizer_t200.json")  # word-level: "t0".."t199" are token ids 0..199

SIM = ["--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw"]

# Each command's plain invocation: TRACE is the trace (a case may swap it), OUT/ the output directory.
BASE = {
    "run": ["run", "TRACE", "--policy", "lru", "--capacity", "12"],
    "sweep": ["sweep", "TRACE", "--capacities", "8,16", "--policies", "lru,fifo"],
    "mrc": ["mrc", "TRACE", "--capacities", "8,16"],
    "report": ["report", "TRACE", "--capacities", "8,16", "--policies", "lru,fifo", "-o", "OUT/r.html"],
    "demo": ["demo"],
    "simulate": ["simulate", "TRACE", *SIM, "--capacity", "40"],
    "plan": ["plan", "TRACE", "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--max-instances", "2"],
    "calibrate-profile": ["calibrate-profile", STEPS, "-o", "OUT/profile.json"],
    "hash": ["hash", TOKEN_LOG, "-o", "OUT/h.jsonl", "--block-size", "4"],
    "convert": ["convert", "TRACE", "-o", "OUT/c.jsonl"],
    "slice": ["slice", "TRACE", "-o", "OUT/s.jsonl", "--requests", "0:20"],
    "merge": ["merge", "TRACE", "TRACE", "-o", "OUT/m.jsonl"],
    "stats": ["stats", "TRACE"],
    "synth": ["synth", "-o", "OUT/y.jsonl", "--requests", "40"],
    "diagnose": ["diagnose", SPAN_LOG],
    "policies": ["policies"],
    "models": ["models"],
    "gpus": ["gpus"],
}


@dataclass(frozen=True)
class Case:
    args: tuple  # the flag and its value
    context: tuple = ()  # arguments both runs get
    trace: tuple = (WALK,)  # what TRACE stands for
    base: tuple | None = None  # another plain invocation


@dataclass(frozen=True)
class Changes(Case):
    pass


@dataclass(frozen=True)
class Refused(Case):
    names: str = ""  # the text the message must contain (default: the flag)


@dataclass(frozen=True)
class Same(Case):
    reason: str = ""


def changes(*args, context=(), trace=(WALK,), base=None):
    return Changes(tuple(args), tuple(context), tuple(trace), base)


def refused(*args, context=(), trace=(WALK,), base=None, names=""):
    return Refused(tuple(args), tuple(context), tuple(trace), base, names)


def same(*args, reason, context=(), trace=(WALK,), base=None):
    return Same(tuple(args), tuple(context), tuple(trace), base, reason)


POOL_SAME = "a process pool or threads give the rows one process gives, in the same order (analysis/executors.py)"
QUIET = ("progress is drawn only on a terminal (tests/test_progress.py shows it, and its absence with --quiet); "
         "here stderr is not one")

# Cases by flag, for every command that has the flag; CASES below overrides per command.
DEFAULT = {
    "--quiet": same("--quiet", reason=QUIET),  # (commands that print notes on stderr: CASES)
    "--format": changes("--format", "mooncake", trace=(BAILIAN,)),
    "--session-arrivals": changes("--session-arrivals", "zero", trace=CLAUDE),
    "--session-spacing": changes("--session-spacing", "1s", trace=CLAUDE),
    # exponential gaps of mean 30 s: seed 0 starts session b at 20.4 s, after all of a; seed 3 at 3.3 s
    "--seed": changes("--seed", "3", context=("--session-arrivals", "poisson", "--session-spacing", "30s"),
                      trace=CLAUDE),
    "--subagent-sessions": refused("--subagent-sessions", trace=CLAUDE),
    # a block size given is replayed even where the trace's hash ids misfit it, with a warning (docs/formats.md)
    "--block-size": changes("--block-size", "8"),
    # closed loop (on the two Claude Code sessions, closed by default) and its parameters
    "--arrivals": changes("--arrivals", "open", trace=CLAUDE),
    "--think-time": changes("--think-time", "const:30s", trace=CLAUDE),
    "--sessions": changes("--sessions", "1", trace=CLAUDE),
    "--on-invalid": changes("--on-invalid", "skip", trace=(BAD,)),
    "--sort-by-time": changes("--sort-by-time"),
    "--engine": same("--engine", "reference",
                     reason="the reference and compiled engines agree on every request (tests/engine)"),
    "--warmup-fraction": changes("--warmup-fraction", "0.5"),
    "--no-token-id-check": changes("--no-token-id-check", context=("--block-size", "1"), trace=(TOKENS,)),
    "--model": changes("--model", "Llama-3.1-8B"),
    "--kv-dtype": changes("--kv-dtype", "fp8", context=("--model", "Llama-3.1-8B")),
    "--kv-layers": changes("--kv-layers", "full", context=("--model", "gemma-2-9b")),
    "--bytes-per-token": changes("--bytes-per-token", "1000"),
    "--kv-semantics": refused("--kv-semantics", "full", context=("--model", "gpt-oss-20b")),
    "--output": changes("-o", "OUT/out.json"),
    "--json": changes("--json"),
    "--plot": changes("--plot", "OUT/p.svg"),
    "--zoom": changes("--zoom", "off", context=("--plot", "OUT/p.svg")),
    "--jobs": same("--jobs", "2", reason=POOL_SAME),
    "--executor": same("--executor", "threads", context=("--jobs", "2"), reason=POOL_SAME),
    "--ray-address": refused("--ray-address", "auto"),
    "--price-hit": changes("--price-hit", "0.01"),
    "--price-miss": changes("--price-miss", "1"),
    "--capacities": changes("--capacities", "4,32"),
    "--policies": changes("--policies", "s3fifo"),
    "--bounds": changes("--bounds"),
    "--tiers": changes("--tiers", "dram=20"),
    "--tier-copies": changes("--tier-copies", "keep", context=("--tiers", "hbm=4,dram=40"),
                             base=("run", "TRACE", "--policy", "lru")),
    "--summary-only": changes("--summary-only", context=("--json",)),
    "--to": changes("--to", "bailian"),
}

# Policy parameters (run, simulate): each with its policy, at a capacity where it matters.
PARAMS = {
    "--small-ratio": ("s3fifo", "0.5"), "--max-freq": ("s3fifo", "1"), "--ghost-freq": ("s3fifo", "1"),
    "--bits": ("clock", "3"), "--kin": ("2q", "0.5"), "--kout": ("2q", "2"), "--ttl": ("ttl", "1s"),
    "--last-token-recompute": ("vllm", "0"), "--host-blocks": ("trtllm", "20"), "--leaf-only": ("trtllm", "1"),
    "--offload-min-priority": ("trtllm", "50"), "--slots": ("llamacpp", "1"), "--similarity": ("llamacpp", "0.9"),
    "--cache-ram": ("llamacpp", "0"), "--kv-bytes-per-token": ("llamacpp", "100000000"),
    "--cache-reuse": ("llamacpp", "16"), "--idle-slots": ("llamacpp", "0"), "--interval": ("deepseek", "64"),
    "--delay": ("deepseek", "20s"), "--admit-bypass": ("belady", "1"),
}
# a policy's parameter that only shows beside another
PARAM_CONTEXT = {"--offload-min-priority": ("--host-blocks", "20"), "--kv-bytes-per-token": ("--cache-ram", "1")}
NOT_SERVED = ("trtllm", "llamacpp", "deepseek", "belady")  # simulate refuses these policies

CASES: dict[tuple[str, str], Case] = {}
for flag, (policy, value) in PARAMS.items():
    CASES["run", flag] = changes(flag, value, context=("--policy", policy, *PARAM_CONTEXT.get(flag, ())))
    CASES["simulate", flag] = (refused(flag, value) if policy in NOT_SERVED else
                               changes(flag, value, context=("--policy", policy)))
CASES["run", "--ttl"] = changes("--ttl", "1s", context=("--policy", "ttl"))
CASES["run", "--delay"] = changes("--delay", "20s", context=("--policy", "deepseek", "--interval", "64"))

CASES["simulate", "--last-token-recompute"] = refused("--last-token-recompute", "0", context=("--policy", "vllm"))
# timing changes the order of two sessions' requests; small caches make the order show in the hits
TIMING = {"run": ("--json",), "sweep": ("--capacities", "2,3"), "mrc": ("--capacities", "2,3"), "report": (
    "--capacities", "2,3"), "simulate": (), "plan": ("--json",), "stats": ()}
for command, shown in TIMING.items():
    CASES[command, "--session-arrivals"] = changes("--session-arrivals", "zero", context=shown, trace=CLAUDE)
    CASES[command, "--session-spacing"] = changes("--session-spacing", "1s", context=shown, trace=CLAUDE)
    CASES[command, "--seed"] = changes("--seed", "3", trace=CLAUDE, context=(
        "--session-arrivals", "poisson", "--session-spacing", "30s", *shown))
NOTES = {"report": "wrote", "hash": "->", "convert": "->", "slice": "kept", "merge": "merged"}
for command, note in NOTES.items():
    CASES[command, "--quiet"] = changes("--quiet")  # the note on stderr ("wrote ...") is left out

CASES.update({
    # run
    ("run", "--policy"): changes("--policy", "fifo"),
    ("run", "--capacity"): changes("--capacity", "6"),
    ("run", "--over-time"): changes("--over-time", "10req"),
    ("run", "--summary-only"): changes("--summary-only", context=("--json",)),
    ("run", "--gpu"): changes("--gpu", "H100", context=("--model", "Llama-3.1-8B")),  # the headroom in GPU-seconds
    ("run", "--tp"): changes("--tp", "2", context=("--model", "Llama-3.1-8B", "--gpu", "H100")),
    ("run", "--kv-semantics"): changes("--kv-semantics", "full", context=("--model", "gpt-oss-20b"),
                                       base=("run", "TRACE", "--capacity", "12")),
    # sweep
    ("sweep", "--hbm"): changes("--hbm", "8", "--dram-sizes", "0,16", base=("sweep", "TRACE", "--policies", "lru,fifo")),
    ("sweep", "--dram-sizes"): refused("--dram-sizes", "0,16"),
    ("sweep", "--each"): changes("--each", trace=(WALK, str(DATA / "walk_copy.jsonl"))),
    ("sweep", "--kv-semantics"): changes("--kv-semantics", "full", context=("--model", "gpt-oss-20b", "--policies",
                                                                             "vllm", "--capacities", "1GiB,2GiB")),
    # sweep --gpu: the policies ranked served on a deployment too
    ("sweep", "--gpu"): changes("--gpu", "H100", context=("--model", "Llama-3.1-8B")),
    **{("sweep", flag): changes(*args, context=("--model", "Llama-3.1-8B", "--gpu", "H100", *more))
       for flag, args, more in (("--tp", ("--tp", "2"), ()), ("--instances", ("--instances", "2"), ()),
                                ("--router", ("--router", "random"), ("--instances", "2")),
                                ("--warmup", ("--warmup", "0.5"), ()), ("--cold-start", ("--cold-start",), ()))},
    # mrc
    ("mrc", "--engine"): refused("--engine", "reference"),
    # report
    ("report", "--capacity"): changes("--capacity", "8"),
    ("report", "--title"): changes("--title", "Walk"),
    ("report", "--output"): changes("-o", "OUT/other.html"),
    ("report", "--zoom"): changes("--zoom", "off"),
    ("report", "--gpu"): changes("--gpu", "H100", context=("--model", "Llama-3.1-8B")),
    ("report", "--tp"): changes("--tp", "2", context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--speedups", "1")),
    ("report", "--time-model"): changes("--time-model", "roofline-raw",
                                        context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--speedups", "1")),
    ("report", "--weights-dtype"): changes("--weights-dtype", "fp8", context=("--model", "Llama-3.1-8B", "--gpu",
                                                                               "H100", "--speedups", "1")),
    ("report", "--speedups"): changes("--speedups", "2", context=("--model", "Llama-3.1-8B", "--gpu", "H100")),
    ("report", "--instances"): changes("--instances", "2", context=("--model", "Llama-3.1-8B", "--gpu", "H100",
                                                                     "--speedups", "1")),
    ("report", "--router"): changes("--router", "random", context=("--model", "Llama-3.1-8B", "--gpu", "H100",
                                                                    "--speedups", "1", "--instances", "2")),
    ("report", "--tiers"): changes("--tiers", "dram=20@1GB/s", context=("--model", "Llama-3.1-8B", "--gpu", "H100",
                                                                         "--speedups", "1")),
    ("report", "--warmup"): changes("--warmup", "0.5", context=("--model", "Llama-3.1-8B", "--gpu", "H100",
                                                                "--speedups", "1")),
    ("report", "--cold-start"): changes("--cold-start", context=("--model", "Llama-3.1-8B", "--gpu", "H100",
                                                                 "--speedups", "1")),
    ("report", "--pp"): changes("--pp", "2", context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--speedups", "1")),
    ("report", "--plan"): refused("--plan", str(DATA / "steps_24.csv"), names="steps_24.csv: not JSON"),
    # the serving section's closed loop (the two Claude Code sessions, closed by default)
    ("report", "--sessions"): changes("--sessions", "1,2", trace=CLAUDE,
                                      context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw")),
    ("report", "--arrivals"): changes("--arrivals", "open", trace=CLAUDE,
                                      context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw",
                                               "--speedups", "1")),
    ("report", "--think-time"): changes("--think-time", "const:30s", trace=CLAUDE,
                                        context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model",
                                                 "roofline-raw", "--speedups", "1")),
    ("report", "--slo-ttft"): changes("--slo-ttft", "2s", trace=CLAUDE,
                                      context=("--model", "Llama-3.1-8B", "--gpu", "H100", "--time-model", "roofline-raw",
                                               "--sessions", "1,2")),
    # simulate
    ("simulate", "--policy"): changes("--policy", "lru"),
    ("simulate", "--capacity"): changes("--capacity", "12"),
    ("simulate", "--model"): changes("--model", "Llama-3.1-70B"),
    ("simulate", "--bytes-per-token"): changes("--bytes-per-token", "1000", base=(
        "simulate", "TRACE", "--time-model", "instant", "--capacity", "1MB")),
    ("simulate", "--kv-dtype"): changes("--kv-dtype", "fp8"),
    ("simulate", "--kv-layers"): changes("--kv-layers", "full", context=("--model", "gemma-2-9b")),
    ("simulate", "--kv-semantics"): changes("--kv-semantics", "full", context=("--model", "gpt-oss-20b")),
    ("simulate", "--weights-dtype"): changes("--weights-dtype", "fp8"),
    ("simulate", "--gpu"): changes("--gpu", "H200"),
    ("simulate", "--tp"): changes("--tp", "2"),
    ("simulate", "--gpu-memory-utilization"): changes("--gpu-memory-utilization", "0.5", base=(
        "simulate", "TRACE", *SIM)),
    ("simulate", "--kv-cache-memory"): changes("--kv-cache-memory", "1GiB", base=("simulate", "TRACE", *SIM)),
    ("simulate", "--num-gpu-blocks-override"): changes("--num-gpu-blocks-override", "12",
                                                       base=("simulate", "TRACE", *SIM)),
    ("simulate", "--enforce-eager"): changes("--enforce-eager", base=("simulate", "TRACE", *SIM)),
    ("simulate", "--language-model-only"): changes("--language-model-only", context=("--model", "gemma-3-27b-it"),
                                                   base=("simulate", "TRACE", *SIM)),
    ("simulate", "--mem-fraction-static"): changes("--mem-fraction-static", "0.5", context=("--engine-style", "sglang"),
                                                   base=("simulate", "TRACE", *SIM)),
    ("simulate", "--engine-style"): changes("--engine-style", "sglang"),
    ("simulate", "--capacity-scheduler-policy"): changes("--capacity-scheduler-policy", "max_utilization", context=(
        "--engine-style", "trtllm", "--policy", "trtllm", "--capacity", "12", "--speedup", "50")),
    ("simulate", "--context-chunking"): changes("--context-chunking", "equal_progress", context=(
        "--engine-style", "trtllm", "--policy", "trtllm", "--capacity", "12", "--speedup", "50",
        "--max-num-batched-tokens", "32")),
    ("simulate", "--schedule"): changes("--schedule", "lpm", context=("--engine-style", "sglang", "--capacity", "12")),
    ("simulate", "--max-num-batched-tokens"): changes("--max-num-batched-tokens", "32", context=("--speedup", "50")),
    ("simulate", "--max-num-seqs"): changes("--max-num-seqs", "1"),
    ("simulate", "--n"): changes("--n", "2"),  # every request served as 2 children (serving/samples.py)
    ("simulate", "--beam-width"): changes("--beam-width", "2"),  # rounds of 1-token requests (serving/beam.py)
    ("simulate", "--no-chunked-prefill"): changes("--no-chunked-prefill", context=("--max-num-batched-tokens", "256")),
    ("simulate", "--chunked-prefill-size"): changes("--chunked-prefill-size", "32", context=("--engine-style", "sglang")),
    ("simulate", "--max-prefill-tokens"): changes("--max-prefill-tokens", "64", context=("--engine-style", "sglang",
                                                                                         "--speedup", "50")),
    ("simulate", "--time-model"): changes("--time-model", "instant"),
    ("simulate", "--mfu"): changes("--mfu", "0.05"),
    ("simulate", "--mbu"): changes("--mbu", "0.05"),
    ("simulate", "--step-overhead-ms"): changes("--step-overhead-ms", "20"),
    ("simulate", "--speedup"): changes("--speedup", "8"),
    ("simulate", "--rate"): changes("--rate", "20"),
    ("simulate", "--speedups"): changes("--speedups", "1,4"),
    ("simulate", "--rates"): changes("--rates", "1,20"),
    ("simulate", "--policies"): changes("--policies", "vllm,lru", context=("--speedups", "1")),
    ("simulate", "--capacities"): changes("--capacities", "12,40", context=("--speedups", "1")),
    ("simulate", "--instances-list"): changes("--instances-list", "1,2"),
    ("simulate", "--routers"): changes("--routers", "round-robin,random", context=("--instances-list", "2")),
    ("simulate", "--tier-list"): changes("--tier-list", "none;dram=20@1GB/s", context=("--capacity", "12")),
    ("simulate", "--jobs"): same("--jobs", "2", context=("--speedups", "1,2"), reason=POOL_SAME),
    ("simulate", "--executor"): same("--executor", "threads", context=("--speedups", "1,2", "--jobs", "2"),
                                     reason=POOL_SAME),
    ("simulate", "--slo-ttft"): changes("--slo-ttft", "20ms", context=("--json",)),
    ("simulate", "--slo-tpot"): changes("--slo-tpot", "3ms", context=("--json",)),
    ("simulate", "--instances"): changes("--instances", "2"),
    ("simulate", "--router"): changes("--router", "random", context=("--instances", "2")),
    ("simulate", "--prefill-instances"): refused("--prefill-instances", "1"),
    ("simulate", "--decode-instances"): changes("--decode-instances", "1", "--prefill-instances", "1"),
    ("simulate", "--rate-profile"): changes("--rate-profile", "diurnal"),
    ("simulate", "--max-model-len"): changes("--max-model-len", "200"),
    ("simulate", "--kv-link"): changes("--kv-link", "1GB/s", context=("--prefill-instances", "1",
                                                                       "--decode-instances", "1")),
    ("simulate", "--router-lag-ms"): changes("--router-lag-ms", "2000", context=("--instances", "2", "--router",
                                                                                  "least-loaded", "--speedup", "8")),
    ("simulate", "--router-option"): changes("--router-option", "prefill_load_scale=4",
                                             context=("--instances", "2", "--router", "kv-aware", "--speedup", "8")),
    ("simulate", "--tiers"): changes("--tiers", "dram=20@1GB/s", context=("--capacity", "12")),
    ("simulate", "--global-store"): changes("--global-store", "20@1GB/s", context=("--capacity", "12")),
    ("simulate", "--tier-copies"): changes("--tier-copies", "keep", context=("--tiers", "hbm=8,dram=40@1GB/s"),
                                           base=("simulate", "TRACE", *SIM)),
    ("simulate", "--tier-overlap"): changes("--tier-overlap", context=("--tiers", "hbm=8,dram=40@1GB/s"),
                                            base=("simulate", "TRACE", *SIM)),
    ("simulate", "--no-output-kv"): changes("--no-output-kv", context=("--capacity", "12")),
    ("simulate", "--session-arrivals"): changes("--session-arrivals", "zero", trace=CLAUDE),
    # open loop: closed, a subagent's requests wait for their agent's whatever the sessions' numbering
    ("simulate", "--subagent-sessions"): changes("--subagent-sessions", context=("--instances", "2", "--router",
                                                                                  "session", "--arrivals", "open"),
                                                 trace=CLAUDE[:1]),
    ("simulate", "--sessions-list"): changes("--sessions-list", "1,2", trace=CLAUDE),
    ("simulate", "--host-cpu"): changes("--host-cpu", "vllm"),  # (none is roofline-raw's default)
    ("simulate", "--pp"): changes("--pp", "2", base=("simulate", "TRACE", "--model", "Llama-3.1-8B", "--gpu", "H100",
                                                     "--capacity", "40")),  # (the calibrated roofline)
    # two ranks behind vLLM's API server (a dense model: replicas), and an MoE's experts whole on each GPU
    ("simulate", "--dp"): changes("--dp", "2", base=("simulate", "TRACE", "--model", "Llama-3.1-8B", "--gpu", "H100",
                                                     "--capacity", "40")),
    ("simulate", "--enable-expert-parallel"): changes("--enable-expert-parallel", base=(
        "simulate", "TRACE", "--model", "Qwen3-30B-A3B", "--gpu", "H100", "--dp", "2")),
    ("simulate", "--speculative"): changes("--speculative", "ngram", context=("--num-speculative-tokens", "3"),
                                           base=("simulate", "TRACE", *SIM, "--capacity", "40")),
    ("simulate", "--num-speculative-tokens"): changes("--num-speculative-tokens", "3", context=("--speculative",
                                                                                                  "ngram")),
    ("simulate", "--acceptance"): changes("--acceptance", "0.1", context=("--speculative", "ngram",
                                                                          "--num-speculative-tokens", "2")),
    ("simulate", "--seed"): changes("--seed", "3", context=("--rate", "5")),
    ("simulate", "--engine"): refused("--engine", "reference"),
    ("simulate", "--warmup-fraction"): refused("--warmup-fraction", "0.5"),
    ("simulate", "--warmup"): changes("--warmup", "0.5"),
    ("simulate", "--cold-start"): changes("--cold-start"),
    ("simulate", "--summary-only"): changes("--summary-only", context=("--json",)),
    # plan
    ("plan", "--engine"): refused("--engine", "reference"),
    ("plan", "--warmup-fraction"): refused("--warmup-fraction", "0.5"),
    ("plan", "--model"): changes("--model", "Llama-3.1-70B"),
    ("plan", "--slo-ttft-p90"): changes("--slo-ttft-p90", "50ms"),
    ("plan", "--slo-tpot-p90"): changes("--slo-tpot-p90", "5ms"),
    ("plan", "--slo-e2e-p99"): changes("--slo-e2e-p99", "1s"),
    ("plan", "--window"): changes("--window", "10s", context=("--json",)),
    ("plan", "--warmup"): changes("--warmup", "0.5"),
    ("plan", "--cold-start"): changes("--cold-start"),
    ("plan", "--min-window-requests"): changes("--min-window-requests", "5"),
    ("plan", "--emit"): changes("--emit", "vllm"),
    ("plan", "--engine-style"): changes("--engine-style", "sglang", context=("--json",)),
    ("plan", "--pp"): changes("--pp", "2"),
    ("plan", "--gpus"): changes("--gpus", "H200"),
    ("plan", "--tp"): changes("--tp", "2"),
    ("plan", "--tiers"): changes("--tiers", "none;dram=64GiB@64GB/s"),
    ("plan", "--routers"): changes("--routers", "random", context=("--json",)),
    ("plan", "--policies"): changes("--policies", "lru", context=("--json",)),
    ("plan", "--loads"): changes("--loads", "2"),
    ("plan", "--rate-profile"): changes("--rate-profile", "diurnal", context=("--json",)),
    ("plan", "--rates"): changes("--rates", "5"),
    ("plan", "--price"): changes("--price", "H100=10"),
    ("plan", "--pricing"): changes("--pricing", "reserved"),
    ("plan", "--judge"): changes("--judge", "centre", context=("--json",)),
    ("plan", "--kv-semantics"): changes("--kv-semantics", "full", context=("--model", "gpt-oss-20b")),
    # at x100 one instance misses 40 ms (42.6 ms at the band's pessimistic end, two 40.2 ms): the
    # search stops at --max-instances (2 in BASE)
    ("plan", "--max-instances"): changes("--max-instances", "1", context=("--slo-ttft-p90", "40ms", "--loads", "100",
                                                                          "--tp", "1")),
    ("plan", "--sort-by-time"): same("--sort-by-time", reason="the simulator serves requests in arrival-time order "
                                                              "whatever their order in the file"),
    ("plan", "--time-model"): changes("--time-model", "roofline-raw"),
    ("plan", "--weights-dtype"): changes("--weights-dtype", "fp8"),
    ("plan", "--max-model-len"): changes("--max-model-len", "200"),
    ("plan", "--cache"): changes("--cache", "OUT/cache"),
    ("plan", "--seed"): changes("--seed", "3", context=("--rates", "5", "--json")),
    ("plan", "--jobs"): changes("--jobs", "2", context=("--gpus", "H100,H200")),  # searched at once: none pruned
    ("plan", "--executor"): same("--executor", "threads", context=("--jobs", "2", "--gpus", "H100,H200"),
                                 reason=POOL_SAME),
    # calibrate-profile
    ("calibrate-profile", "--output"): changes("-o", "OUT/other.json"),
    ("calibrate-profile", "--format"): changes("--format", "jsonl"),
    ("calibrate-profile", "--terms"): changes("--terms", "1,prefill_tokens,decode_context"),
    ("calibrate-profile", "--unit"): changes("--unit", "s"),
    ("calibrate-profile", "--relative"): changes("--relative"),
    ("calibrate-profile", "--folds"): changes("--folds", "3"),
    ("calibrate-profile", "--seed"): changes("--seed", "3"),
    ("calibrate-profile", "--source"): changes("--source", "H100, vLLM 0.33.0"),
    ("calibrate-profile", "--bench-statistic"): refused("--bench-statistic", "median"),
    ("calibrate-profile", "--prefill-concurrency"): refused("--prefill-concurrency", "4"),
    # hash
    ("hash", "--output"): changes("-o", "OUT/other.jsonl"),
    ("hash", "--block-size"): changes("--block-size", "2"),
    # a log of text records, tokenized (without a tokenizer hash stops at its first record)
    ("hash", "--tokenizer"): changes("--tokenizer", TOKENIZER, trace=(str(DATA / "text_log.jsonl"),),
                                     base=("hash", "TRACE", "-o", "OUT/h.jsonl", "--block-size", "4")),
    ("hash", "--salt"): changes("--salt", "tenant-x", context=("--keep-hashes",)),
    ("hash", "--keep-hashes"): changes("--keep-hashes"),
    # convert, slice
    **{(c, "--output"): changes("-o", "OUT/other.jsonl") for c in ("convert", "slice", "merge")},
    **{(c, "--from"): changes("--from", "mooncake", trace=(BAILIAN,)) for c in ("convert", "slice")},
    **{(c, "--keep-ids"): changes("--keep-ids") for c in ("convert", "slice")},
    **{(c, "--block-size"): changes("--block-size", "16", trace=(str(DATA / "prefix_lru_vs_fifo.jsonl"),))
       for c in ("convert", "slice", "merge")},
    ("slice", "--to"): changes("--to", "bailian"),
    ("slice", "--requests"): changes("--requests", "5:10"),
    ("slice", "--time"): changes("--time", "0s:10s"),
    ("slice", "--sessions"): changes("--sessions", "1", trace=(BAILIAN,), base=("slice", "TRACE", "-o",
                                                                                 "OUT/s.jsonl")),
    # merge
    ("merge", "--format"): changes("--format", "mooncake", trace=(BAILIAN,)),
    ("merge", "--shared-ids"): changes("--shared-ids"),
    ("merge", "--offsets"): changes("--offsets", "0s,10s"),
    ("merge", "--session-arrivals"): changes("--session-arrivals", "zero", trace=CLAUDE,
                                             base=("merge", "TRACE", "TRACE", "-o", "OUT/m.jsonl")),
    ("merge", "--session-spacing"): changes("--session-spacing", "1s", trace=CLAUDE),
    ("merge", "--seed"): changes("--seed", "3", context=("--session-arrivals", "poisson"), trace=CLAUDE),
    # stats
    ("stats", "--subagent-sessions"): changes("--subagent-sessions", trace=CLAUDE[:1]),
    ("stats", "--engine"): refused("--engine", "reference"),
    ("stats", "--warmup-fraction"): refused("--warmup-fraction", "0.5"),
    # synth
    ("synth", "--output"): changes("-o", "OUT/other.jsonl"),
    ("synth", "--like"): changes("--like", WALK),
    ("synth", "--like-model"): changes("--like-model", "prefixes", context=("--like", WALK)),
    ("synth", "--scale-requests"): changes("--scale-requests", "2", context=("--like", WALK),
                                           base=("synth", "-o", "OUT/y.jsonl")),
    ("synth", "--speedup"): changes("--speedup", "2", context=("--like", WALK)),
    ("synth", "--requests"): changes("--requests", "30"),
    ("synth", "--arrival-rate"): changes("--arrival-rate", "5"),
    ("synth", "--prefix-scale"): changes("--prefix-scale", "2"),
    ("synth", "--prefixes"): changes("--prefixes", "2"),
    ("synth", "--docs"): changes("--docs", "3"),
    ("synth", "--turns"): changes("--turns", "2"),
    ("synth", "--agent-steps"): changes("--agent-steps", "3"),
    ("synth", "--mix"): changes("--mix", "chat=1"),
    ("synth", "--think-time"): changes("--think-time", "3s"),
    ("synth", "--zipf"): changes("--zipf", "2"),
    ("synth", "--agent-tool-tokens"): changes("--agent-tool-tokens", "200"),
    ("synth", "--agent-reply-tokens"): changes("--agent-reply-tokens", "50"),
    ("synth", "--burst"): changes("--burst", "4"),
    ("synth", "--max-context"): changes("--max-context", "3000"),
    ("synth", "--system-priority"): changes("--system-priority", "50"),
    ("synth", "--system-priority-ms"): changes("--system-priority-ms", "100", context=("--system-priority", "50")),
    ("synth", "--block-size"): changes("--block-size", "64"),
    ("synth", "--token-log"): changes("--token-log"),
    ("synth", "--timestamp-at"): changes("--timestamp-at", "end", context=("--token-log",)),
    ("synth", "--seed"): changes("--seed", "3"),
    # diagnose (a token log; every flag but --json is refused on a hashed trace: tests/analysis/test_diagnose.py)
    ("diagnose", "--tokenizer"): changes("--tokenizer", TOKENIZER),  # the examples decoded
    ("diagnose", "--salt"): changes("--salt", "tenant-x"),  # the unnamed records join tenant-x's namespace
    ("diagnose", "--block-size"): changes("--block-size", "8"),
    ("diagnose", "--policy"): changes("--policy", "lru", context=("--capacity", "4")),
    ("diagnose", "--capacity"): changes("--capacity", "4"),
    ("diagnose", "--horizon"): changes("--horizon", "16"),  # the span at token 32 is past it
    ("diagnose", "--max-width"): changes("--max-width", "2"),  # the span is 4 tokens wide
    ("diagnose", "--min-requests"): changes("--min-requests", "39"),  # it breaks 38
    ("diagnose", "--rewrite"): changes("--rewrite", "OUT/fixed.jsonl"),
    # the catalogs
    **{(c, "--json"): changes("--json") for c in ("models", "gpus")},
})


# Flags refused where they have no part, besides their walk case above (each also changes the
# output where it has one): given, even at its default value, they stop the command.
SERVED = ("--model", "Llama-3.1-8B", "--gpu", "H100")
NO_PART = {
    "run --tp without --gpu": ("run", refused("--tp", "1", context=("--model", "Llama-3.1-8B"))),
    "run --gpu without --model": ("run", refused("--gpu", "H100")),
    "sweep --router with one instance": ("sweep", refused("--router", "round-robin", context=SERVED)),
    "sweep --warmup without --gpu": ("sweep", refused("--warmup", "auto")),
    "report --router with one instance": ("report", refused("--router", "random", context=(*SERVED, "--speedups",
                                                                                           "1"))),
    "report --cold-start without --gpu": ("report", refused("--cold-start")),
    "report --sessions without --gpu": ("report", refused("--sessions", "2", trace=CLAUDE, names="--sessions")),
    "report --slo-ttft without --sessions": ("report", refused("--slo-ttft", "2s", context=(*SERVED, "--speedups", "1"),
                                                               names="--slo-ttft")),
    "report --sessions with --speedups": ("report", refused("--sessions", "2", trace=CLAUDE,
                                                            context=(*SERVED, "--speedups", "1"), names="--speedups")),
    "report --sessions with --arrivals open": ("report", refused("--sessions", "2", trace=CLAUDE,
                                                                 context=(*SERVED, "--arrivals", "open"),
                                                                 names="--arrivals")),
    "plan --judge without a band": ("plan", refused("--judge", "pessimistic", context=("--time-model",
                                                                                       "roofline-raw"))),
    "plan --price for a GPU not searched": ("plan", refused("--price", "H200=10", names="H200")),
    "plan --price dram without a tier": ("plan", refused("--price", "dram=0.5", names="dram")),
    "plan --emit vllm planned for sglang": ("plan", refused("--emit", "vllm", context=("--engine-style", "sglang"))),
    "plan --emit with --json": ("plan", refused("--emit", "k8s", context=("--json",))),
    "simulate --cold-start with --warmup": ("simulate", refused("--cold-start", context=("--warmup", "0.5"))),
    "simulate --think-time in an open loop": ("simulate", refused("--think-time", "const:5s", names="--arrivals closed")),
    "simulate --acceptance without --speculative": ("simulate", refused("--acceptance", "0.9", names="--speculative")),
    "simulate --num-speculative-tokens without --speculative": ("simulate", refused("--num-speculative-tokens", "2",
                                                                                    names="--speculative")),
    "simulate --dp with the SGLang style": ("simulate", refused("--dp", "2", context=("--engine-style", "sglang"))),
    "simulate --dp with --instances": ("simulate", refused("--dp", "2", context=("--instances", "2"),
                                                           names="--instances")),
    "simulate --enable-expert-parallel on a dense model": ("simulate", refused("--enable-expert-parallel",
                                                                              context=("--dp", "2"))),
    "simulate --pp without the calibrated roofline": ("simulate", refused("--pp", "2", names="--time-model roofline")),
    "plan --warmup-fraction at its default": ("plan", refused("--warmup-fraction", "0")),
    "simulate --warmup-fraction at its default": ("simulate", refused("--warmup-fraction", "0")),
    "synth --timestamp-at without --token-log": ("synth", refused("--timestamp-at", "end")),
    "synth --block-size with --token-log": ("synth", refused("--block-size", "16", context=("--token-log",))),
    "diagnose --policy on a hashed trace": ("diagnose", refused("--policy", "lru", trace=(WALK,),
                                                                base=("diagnose", "TRACE"))),
}


@pytest.mark.parametrize("name", sorted(NO_PART))
def test_refused_where_it_has_no_part(name, tmp_path, capsys):
    command, case = NO_PART[name]
    out = tmp_path / "out"
    out.mkdir()
    code, _, err, files = outcome(capsys, argv(case, command, out, True), out)
    assert code == 2 and (case.names or case.args[0]) in err, err
    assert files == {}


def test_a_tokenizer_no_record_needed_is_said(tmp_path, capsys):
    # whether a token log needs its tokenizer shows only as it is read: a warning (with --quiet too)
    out = tmp_path / "h.jsonl"
    assert main(["hash", TOKEN_LOG, "-o", str(out), "--block-size", "4", "--tokenizer", TOKENIZER, "--quiet"]) == 0
    assert capsys.readouterr().err == (f"kvreplay: warning: --tokenizer was not used: every record of {TOKEN_LOG} "
                                       "gives its token ids (token_ids or prompt_token_ids), none text or prompt\n")
    text = str(DATA / "text_log.jsonl")
    assert main(["hash", text, "-o", str(out), "--block-size", "4", "--tokenizer", TOKENIZER]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"3 of 3 requests tokenized with {TOKENIZER}"


def flags(parser) -> list[str]:
    """A command's optional flags, each by its first (long) name."""
    return [a.option_strings[0] for a in parser._actions if a.option_strings and a.option_strings[0] != "-h"]


COMMANDS = subcommands(build_parser())
WALKED = [(command, flag) for command, parser in COMMANDS.items() for flag in flags(parser)]


def case_of(command: str, flag: str) -> Case | None:
    return CASES.get((command, flag), DEFAULT.get(flag))


def test_every_flag_has_a_case():
    missing = [f"{command} {flag}" for command, flag in WALKED if case_of(command, flag) is None]
    assert missing == [], "flags without a case in tests/test_flag_walk.py"
    stale = [f"{command} {flag}" for command, flag in CASES if (command, flag) not in WALKED]
    assert stale == []


def argv(case: Case, command: str, out: Path, with_flag: bool) -> list[str]:
    base = list(case.base or BASE[command])
    at = base.index("TRACE") if "TRACE" in base else None
    if at is not None:
        base[at:at + 1] = list(case.trace)
        if base.count("TRACE"):  # merge: the same trace twice
            k = base.index("TRACE")
            base[k:k + 1] = list(case.trace)
    words = base + list(case.context) + (list(case.args) if with_flag else [])
    return [w.replace("OUT/", f"{out}/") for w in words]


RUNS: dict[tuple, tuple] = {}  # outcomes by command line (with OUT/ for the output directory)


def neutral_file(data: bytes, out: Path) -> bytes:
    """A written file with the output directory and the report's minute stamp ("Generated ... on
    2026-12-08 01:40 UTC") made neutral: two runs either side of a minute are the same output."""
    return re.sub(rb"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", b"on <now>", data.replace(str(out).encode(), b"OUT"))


def outcome(capsys, words: list[str], out: Path) -> tuple:
    """(exit code, stdout, stderr, every file written) of one in-process run, paths made neutral;
    a command line already run in this process is not run again (the plain runs are shared)."""
    key = tuple(w.replace(f"{out}/", "OUT/") for w in words)
    if key in RUNS:
        return RUNS[key]
    for path in sorted(out.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # every run says every warning (not only the first in the process)
        try:
            code = main(words)
        except SystemExit as e:
            code = e.code
    captured = capsys.readouterr()
    files = {str(p.relative_to(out)): (neutral_file(p.read_bytes(), out) if p.is_file() else b"<dir>")
             for p in sorted(out.rglob("*"))}
    neutral = lambda text: re.sub(r"in \d+\.\d\d s\.", "in T s.", text.replace(str(out), "OUT"))  # noqa: E731
    RUNS[key] = code, neutral(captured.out), neutral(captured.err), files
    return RUNS[key]


def differences(a: tuple, b: tuple) -> str:
    """Where two outcomes differ, as unified diffs of the first lines that do (a readable failure)."""
    out = []
    named = lambda o: {"exit code": str(o[0]), "stdout": o[1], "stderr": o[2],  # noqa: E731
                       **{f"file {k}": v.decode(errors="replace") for k, v in o[3].items()}}
    left, right = named(a), named(b)
    for key in sorted(set(left) | set(right)):
        if left.get(key) != right.get(key):
            diff = difflib.unified_diff((left.get(key) or "").splitlines(), (right.get(key) or "").splitlines(),
                                        "with the flag", "without", lineterm="", n=1)
            out.append(f"{key}:\n" + "\n".join(list(diff)[:40]))
    return "\n".join(out)


@pytest.mark.parametrize("command, flag", WALKED, ids=[f"{c} {f}" for c, f in WALKED])
def test_flag(command, flag, tmp_path, capsys):
    case = case_of(command, flag)
    assert case is not None, f"{command} {flag}: no case"
    out = tmp_path / "out"
    out.mkdir()
    with_flag = outcome(capsys, argv(case, command, out, True), out)
    if isinstance(case, Refused):
        assert with_flag[0] == 2, with_flag[2]
        assert (case.names or flag) in with_flag[2], with_flag[2]
        return
    without = outcome(capsys, argv(case, command, out, False), out)
    if isinstance(case, Same):
        assert case.reason and without[0] == 0, without[2]
        assert with_flag == without, differences(with_flag, without)
    else:  # (a flag may be what makes the command run: --on-invalid skip past a bad record)
        assert 0 in (with_flag[0], without[0]), f"both runs fail: {with_flag[2]} / {without[2]}"
        assert with_flag != without, f"{command} {' '.join(case.args)} changes nothing"
