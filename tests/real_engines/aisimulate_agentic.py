"""kvreplay's closed loop beside NVIDIA AISimulate's agentic replay, on Claude Code files.

Shared by tests/real_engines/test_aisimulate_agentic.py and benchmarks/aisimulate_compare.py. AISimulate
(the ``aisimulate`` wheel, AISIM_VERSION, from PyPI; Apache-2.0) reads Claude Code files as its
``"weka"`` trace format (the same schema: ``requests`` with ``t``, ``in``, ``out``, ``hash_ids``,
``api_time``, nested ``subagent`` records) and replays them as an agentic graph in its native
``aisimulate._runtime.run_replay_json``. Install (a venv of its own; its other declared
dependencies, jax, flax, google-vizier, optax, chex, tfp-nightly, plotly, bokeh, ..., serve its
optimisers and plots, and the replay path imports none of them)::

    pip download --no-deps aisimulate==0.13.0.dev202609240000000055 -d benchmarks/.cache/
    python -m venv --system-site-packages benchmarks/.cache/aisim-venv
    benchmarks/.cache/aisim-venv/bin/pip install --no-deps benchmarks/.cache/aisimulate-*.whl

(numpy, pandas, pyyaml, pydantic, scipy, pyarrow come from the system site packages.)

Both sides serve the files on one vLLM-style instance with the same fixed step time: AISimulate's
``timing_model {"type": "fixed", "prefill_ms": S, "decode_ms": S}`` charges S for a step that
prefills anything plus S for one that decodes anything (a mixed step 2 S); kvreplay gets the same
from a flat Dynamo profile (``.npz``: prefill_ttft_ms = S and decode_itl = S everywhere; a step is
prefill_ms + decode_ms, serving/timing/profiles.py). 64-token blocks, a pool far larger than the
workload (no eviction), 8,192 batched tokens and 256 sequences a step, prefix caching and chunked
prefill on both; no host-CPU terms on either.

What the files need for AISimulate: their ``models`` must list every model their requests use
(it refuses trace_0291.json of the samples, which declares Opus and whose subagents run Haiku), so
``normalised_copy`` writes a copy with the list completed, nothing else changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

AISIM_VERSION = "0.13.0.dev202609240000000055"
BLOCK = 64
CAPACITY = 100_000  # blocks of 64 tokens: 6.4 M tokens, far more than the samples' 2.3 M prompt tokens
BUDGET = 8192  # max_num_batched_tokens, both sides (kvreplay's vLLM default)
MAX_SEQS = 256


def normalised_copy(src: Path, dst: Path) -> list[Path]:
    """Each Claude Code file of `src` written to `dst` with its ``models`` listing every model its
    requests (and its subagents') use; nothing else changes."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for path in sorted(Path(src).glob("*.json")):
        doc = json.loads(path.read_text())
        models = list(doc.get("models", []))
        stack = list(doc["requests"])
        while stack:
            r = stack.pop()
            if r.get("type") == "subagent":
                stack.extend(r["requests"])
            elif r.get("model") and r["model"] not in models:
                models.append(r["model"])
        doc["models"] = models
        target = dst / path.name
        target.write_text(json.dumps(doc))
        out.append(target)
    return out


def recorded(files: list[Path]) -> dict:
    """(prompt tokens, output tokens) -> (play, recorded send s, recorded end s) of every request,
    times from its play's start (a subagent's requests are timed from its own start, AISimulate's
    "relative" nested basis and kvreplay's reading alike)."""
    out = {}
    for path in files:
        doc = json.loads(Path(path).read_text())

        def walk(requests, base):
            for r in requests:
                if r.get("type") == "subagent":
                    walk(r["requests"], base + float(r["t"]))
                    continue
                key = (int(r["in"]), int(r["out"]))
                if key in out:
                    raise ValueError(f"{path.name}: two requests of {key} tokens: the match needs unique sizes")
                send = base + float(r["t"])
                out[key] = (path.stem, send, send + float(r.get("api_time") or 0.0))

        walk(doc["requests"], 0.0)
    return out


def flat_profile(path: Path, step_ms: float) -> str:
    """A Dynamo profile whose every prefill and decode costs `step_ms` (kvreplay's side of
    AISimulate's fixed timing)."""
    grid = np.array([0.0, 1e7])
    np.savez(path, prefill_isl=grid, prefill_ttft_ms=np.full(2, float(step_ms)), decode_active_kv_tokens=grid,
             decode_context_length=grid, decode_itl=np.full((2, 2), float(step_ms)))
    return str(path)


def run_kvreplay(folder: Path, profile: str, sessions: int | None = None, seed: int = 0):
    """kvreplay's closed loop over the files of `folder`, every session starting at 0 (as
    AISimulate starts every play), or `sessions` lanes."""
    import kvreplay
    from kvreplay.serving.simulate import simulate

    trace = kvreplay.load_trace(str(folder), session_arrivals="zero")
    return trace, simulate(trace, policy="vllm", capacity=CAPACITY, block_size=BLOCK, engine_style="vllm",
                           time_model=profile, compare_sequential=False, arrivals="closed", sessions=sessions,
                           seed=seed)


def aisim_payload(folder: Path, step_ms: float, lanes: int | None = None) -> dict:
    """AISimulate's native replay input (its wire schema, what its runner.py materialises)."""
    rank = {"backend": "vllm", "num_gpu_blocks": CAPACITY, "block_size": BLOCK, "max_num_batched_tokens": BUDGET,
            "max_num_seqs": MAX_SEQS, "enable_prefix_caching": True, "enable_chunked_prefill": True,
            "timing_model": {"type": "fixed", "prefill_ms": float(step_ms), "decode_ms": float(step_ms)}}
    traffic = {"source_type": "trace", "load_type": "trace_timestamps", "trace_format": "weka",
               "trace_path": str(folder), "execution_model": "target"}
    if lanes:
        traffic["agentic_lanes"] = int(lanes)
    return {"spec": {"version": 1,
                     "topology": {"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": 0.0}},
                     "engine": {"tensor_parallel_size": 1, "num_gpu_blocks_is_explicit": True, "rank": rank},
                     "record_per_request": True, "requests": []},
            "traffic": traffic}


def run_aisim(folder: Path, step_ms: float, lanes: int | None = None) -> dict:
    from aisimulate import _runtime

    return json.loads(_runtime.run_replay_json(json.dumps(aisim_payload(folder, step_ms, lanes))))


def aisim_rows(report: dict, trace) -> dict:
    """AISimulate's per-request records as arrays in kvreplay's trace order (seconds), matched by
    (prompt, output) tokens (unique in the samples: recorded() checks)."""
    key = {(int(trace.input_length[i]), int(trace.output_length[i])): i for i in range(trace.num_requests)}
    n = trace.num_requests
    rows = {k: np.full(n, np.nan) for k in ("send", "first", "end", "hit")}
    rows["play"] = np.empty(n, dtype=object)
    for r in report["per_request"]:
        i = key[(int(r["input_length"]), int(r["output_length"]))]
        rows["send"][i] = r["arrival_time_ms"] / 1e3
        rows["first"][i] = r["first_token_ms"] / 1e3
        rows["end"][i] = r["last_token_ms"] / 1e3
        rows["hit"][i] = r["reused_input_tokens"]
        rows["play"][i] = r["play_id"].rsplit(":", 1)[-1]
    return rows


def links(report) -> list[list[tuple[int, bool, float]]]:
    """Per request (trace order): kvreplay's links (predecessor, fires on its send, delay s)."""
    c = report.closed
    off = c["after_offsets"]
    return [[(int(c["after"][k]), bool(c["on_send"][k]), float(c["delay_s"][k])) for k in range(off[i], off[i + 1])]
            for i in range(report.num_requests)]


def kvreplay_rule(send: np.ndarray, end: np.ndarray, lk) -> np.ndarray:
    """kvreplay's send time of each linked request from the others' times: the latest of its links'
    firings (the predecessor's end, or its send for a spawn link) plus the link's delay, which is the
    request's one think time (its recorded send minus its latest predecessor's recorded end); NaN
    for a request that waits for nothing."""
    out = np.full(len(send), np.nan)
    for i, ls in enumerate(lk):
        if ls:
            out[i] = max((send if on_send else end)[p] + d for p, on_send, d in ls)
    return out


def aisim_rule(send: np.ndarray, end: np.ndarray, lk, rec_send: np.ndarray, rec_end: np.ndarray) -> np.ndarray:
    """AISimulate's send time of each request from the others' times: each link with its own
    recorded gap (the request's recorded send minus that predecessor's recorded end, or minus its
    recorded send for a spawn link), and never before the request's recorded send from its play's
    start (``not_before_ms``)."""
    out = rec_send.copy()
    for i, ls in enumerate(lk):
        for p, on_send, _ in ls:
            fired = send[p] + rec_send[i] - rec_send[p] if on_send else end[p] + rec_send[i] - rec_end[p]
            out[i] = max(out[i], fired)
    return out


def recorded_arrays(trace, rec: dict) -> tuple[np.ndarray, np.ndarray]:
    """recorded() as arrays in the trace's order: (send s, end s)."""
    pairs = [rec[(int(trace.input_length[i]), int(trace.output_length[i]))] for i in range(trace.num_requests)]
    return np.array([p[1] for p in pairs]), np.array([p[2] for p in pairs])
