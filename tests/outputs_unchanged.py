"""The fixed set of commands whose outputs a refactor must leave byte for byte unchanged.

Each command is a README or docs/ example run on small inputs (a seeded synthetic trace and
tests/data traces), in-process, in a fresh directory. What it prints (stdout and stderr) and every
file it writes are hashed (sha256); ``tests/data/outputs_unchanged.json`` holds the digests made
on main before the renovation of issue 47.

Regenerate (only when a change of results is intended, and say so in the commit):
    PYTHONPATH=src python tests/outputs_unchanged.py --write
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
DIGESTS = DATA / "outputs_unchanged.json"

#: made once per directory, before the commands: the seeded synthetic trace the commands read
SETUP = ("kvreplay synth -o s.jsonl --requests 300 --mix chat=0.5,rag=0.3,agent=0.2 --seed 1 --quiet",
         "kvreplay synth --token-log -o chats.jsonl --quiet")

COMMANDS = (
    # hit rate and policy (README "Replay a trace")
    "kvreplay run s.jsonl --policy s3fifo --capacity 400",
    "kvreplay run s.jsonl --policy lru --capacity 400 --json --summary-only",
    "kvreplay run s.jsonl --capacity 400 --output report.json",
    "kvreplay run s.jsonl --capacity 80GiB --model Llama-3.1-8B --kv-dtype fp8",
    "kvreplay run s.jsonl --capacity 400 --over-time 30s --price-hit 0.07 --price-miss 0.27",
    "kvreplay run s.jsonl --policy deepseek",
    "kvreplay run s.jsonl --policy trtllm --capacity 400",
    "kvreplay run s.jsonl --policy llamacpp --capacity 400",
    "kvreplay run s.jsonl --policy radix --capacity 400",
    "kvreplay run s.jsonl --policy vllm --capacity 400",
    "kvreplay run s.jsonl --policy lru --capacity 200 --tiers dram=600,ssd=2000:fifo",
    "kvreplay run s.jsonl --model gpt-oss-120b --capacity 4GiB",
    "kvreplay run s.jsonl --model Qwen3-Next-80B-A3B --capacity 4GiB --policy radix",
    "kvreplay run tests_data/bailian_chat.jsonl --policy s3fifo --capacity 64",
    "kvreplay run tests_data/prefix_multiblock.jsonl --policy lru --capacity 4 --block-size 4 --json",
    # capacity curves
    "kvreplay sweep s.jsonl --capacities 100,400,1000 --policies s3fifo,lru,fifo",
    "kvreplay sweep s.jsonl --capacities auto --policies s3fifo:small_ratio=0.25,lru --output curve.csv",
    "kvreplay sweep s.jsonl --capacities 1GiB,4GiB --model Llama-3.1-8B --bounds -o curve.json",
    "kvreplay sweep s.jsonl --capacities 100,400 --policies vllm,radix,lru --bounds",
    "kvreplay sweep s.jsonl --policies lru,s3fifo --hbm 200 --dram-sizes 0,400,2000",
    "kvreplay mrc s.jsonl --capacities auto --output lru.csv",
    "kvreplay stats s.jsonl",
    "kvreplay policies",
    "kvreplay models",
    "kvreplay gpus",
    "kvreplay diagnose chats.jsonl",
    # serving at load
    "kvreplay simulate s.jsonl --model Llama-3.1-8B --gpu H100 --policy vllm",
    "kvreplay simulate s.jsonl --model Llama-3.1-8B --gpu H100 --policy vllm --json",
    "kvreplay simulate s.jsonl --model Llama-3.1-70B --gpu H200 --tp 8 --weights-dtype fp8",
    "kvreplay simulate s.jsonl --model Llama-3.1-8B --gpu H100 --speedups 0.25,1",
    "kvreplay simulate s.jsonl --engine-style sglang --schedule lpm --model Llama-3.1-70B --gpu H200 --tp 4",
    "kvreplay simulate s.jsonl --engine-style trtllm --capacity 300 --model llama-3.1-8b --gpu h100",
    "kvreplay simulate s.jsonl --model Llama-3.1-8B --gpu H100 --policy lru --capacity 300",
    "kvreplay simulate s.jsonl --model Llama-3.1-70B --gpu H100 --tp 8 --instances 4 --router kv-aware",
    "kvreplay simulate s.jsonl --model gpt-oss-120b --gpu H100 --tp 2 --weights-dtype int4",
    "kvreplay simulate s.jsonl --model gpt-oss-120b --gpu H100 --tp 2 --weights-dtype int4 --engine-style sglang",
    "kvreplay simulate s.jsonl --model Qwen3-Next-80B-A3B --gpu H100 --tp 2 --weights-dtype fp8",
    "kvreplay simulate s.jsonl --model DeepSeek-V3 --gpu H200 --tp 8 --weights-dtype fp8",
    "kvreplay simulate s.jsonl --model Llama-3.1-8B --gpu H100 --policy lru --capacity 300 --tiers dram=2000",
    # the cheapest deployment
    "kvreplay plan s.jsonl --model Llama-3.1-8B --slo-ttft-p90 2s --gpus H100,H200 --loads 1,2",
    "kvreplay plan s.jsonl --model Llama-3.1-8B --slo-ttft-p90 2s --gpus H100 --emit vllm",
    "kvreplay plan s.jsonl --model Llama-3.1-8B --slo-ttft-p90 2s --gpus H100 --routers kv-aware -o plan.json",
    # reports
    "kvreplay report s.jsonl --policies s3fifo,lru,fifo --model Llama-3.1-8B -o report.html",
    # the Python API (the docstring of kvreplay/__init__.py), `trace` the synthetic trace
    "api: kvreplay.replay(trace, policy='s3fifo', capacity=400).to_dict()",
    "api: kvreplay.simulate(trace, 'vllm', model='Llama-3.1-8B', gpu='H100', time_model='roofline').to_dict()",
    "api: kvreplay.simulate(trace, 'radix', model='Llama-3.1-8B', gpu='H100', engine_style='sglang').to_dict()",
    "api: kvreplay.simulate(trace, 'lru', capacity=300, model='Llama-3.1-8B', gpu='H100', instances=2, router='kv-aware').to_dict()",
    "api: kvreplay.plan(trace, model='Llama-3.1-8B', slo=kvreplay.SLO(ttft_p90_s=2.0), gpus=['H100'])",
)


def _digest(data: bytes, cwd: Path | None = None) -> str:
    """sha256 of `data`, with what differs from run to run written alike: the run's directory and
    the minute an HTML report states it was generated."""
    data = re.sub(rb"on \d{4}-\d\d-\d\d \d\d:\d\d UTC", b"on <now>", data)
    if cwd is not None:
        for form in {str(cwd), str(cwd.resolve())}:
            data = data.replace(form.encode(), b"<dir>")
    return hashlib.sha256(data).hexdigest()


def api(expression: str, cwd: Path) -> dict[str, str]:
    """Evaluate one expression of the Python API; the digest of its result as sorted JSON."""
    import kvreplay

    old = Path.cwd()
    os.chdir(cwd)  # (the report names its trace by the path it was read from)
    try:
        trace = kvreplay.load_trace("s.jsonl")
        value = eval(expression, {"kvreplay": kvreplay, "trace": trace})  # noqa: S307 - our own fixed list
    finally:
        os.chdir(old)
    return {"result": _digest(json.dumps(value, sort_keys=True, default=repr).encode())}


def run(command: str, cwd: Path, keep: bool = False) -> dict[str, str]:
    """Run one command in-process in `cwd`; the digests of its stdout, stderr, exit code and every
    file it wrote."""
    from kvreplay.cli import main

    if command.startswith("api: "):
        return api(command[5:], cwd)
    before = {p for p in cwd.rglob("*")}
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(shlex.split(command)[1:])
            except SystemExit as e:
                code = e.code
    finally:
        os.chdir(old)
    out.flush()
    err.flush()
    result = {"code": str(code), "stdout": _digest(out.buffer.getvalue(), cwd),
              "stderr": _digest(err.buffer.getvalue(), cwd)}
    for p in sorted(set(cwd.rglob("*")) - before):
        if p.is_file():
            result[f"file:{p.relative_to(cwd)}"] = _digest(p.read_bytes(), cwd)
            if not keep:
                p.unlink()
    return result


def prepare(cwd: Path) -> None:
    shutil.copytree(DATA, cwd / "tests_data")
    for command in SETUP:
        run(command, cwd, keep=True)  # the traces the commands read
    for name in ("s.jsonl", "chats.jsonl"):
        assert (cwd / name).exists(), name


def measure(cwd: Path) -> dict[str, dict[str, str]]:
    prepare(cwd)
    return {command: run(command, cwd) for command in COMMANDS}


def main(argv: list[str]) -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        found = measure(Path(d))
    if "--write" in argv:
        DIGESTS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"wrote {DIGESTS} ({len(found)} commands)")
        return 0
    stored = json.loads(DIGESTS.read_text())
    changed = [c for c in COMMANDS if stored.get(c) != found[c]]
    for c in changed:
        keys = sorted(k for k in set(stored.get(c, {})) | set(found[c]) if stored.get(c, {}).get(k) != found[c].get(k))
        print("changed:", c, "(" + ", ".join(keys) + ")")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
