"""kvreplay's ``vllm-dp`` router (serving/routing/vllm_dp.c) against vLLM 0.33.0's own rank choice
under data parallelism, ``DPLBAsyncMPClient.get_core_engine_for_request``
(vllm/v1/engine/core_client.py), pick by pick.

Opt-in (marker ``engines``; the vLLM 0.33.0 wheel found or downloaded as
tests/real_engines/vllm_scheduler.py says, else skipped):

    KVREPLAY_ENGINES=1 python -m pytest tests/real_engines/test_vllm_dp_balancer.py

No vLLM install: the method's source is read from the wheel's core_client.py and run as it is
on a stand-in client (its load-balancing state: the DP coordinator's last published counts
``lb_engines`` [waiting, running, KV usage] per rank, the requests in flight per rank, the scan's
start) and a stand-in request (no pooling parameters, no data_parallel_rank, not resumable). Its
module-level names it calls are the real ones where they matter (``sys``) and the late-interaction
pooling rule's answer for a request without pooling parameters (None).

Compared: from random coordinator snapshots, requests in flight and KV usages, a run of picks
without a new snapshot in between (each pick raises the chosen rank's waiting count and its
requests in flight, and moves the scan's start on, as vLLM does) must choose the same ranks as
kvreplay's rule fed the view the simulator keeps (the requests in flight, the snapshot's waiting
and running, the requests routed since it, the KV held) through ``routing.rule``.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kvreplay.serving import routing
from kvreplay.serving.kernel import slots
from kvreplay.serving.timing import InstantTimeModel, packed

if str(Path(__file__).resolve().parent) not in sys.path:  # (its siblings; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_scheduler import VLLMMissing, extracted_root  # noqa: E402

pytestmark = pytest.mark.engines

VIEW = slots("view")
CAPACITY = 1000.0  # blocks a rank


def vllm_pick_function():
    """vLLM 0.33.0's get_core_engine_for_request, compiled from the wheel's source as it is."""
    try:
        root = extracted_root(download=True)
    except VLLMMissing as e:
        pytest.skip(str(e))
    source = (root / "vllm" / "v1" / "engine" / "core_client.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == "DPLBAsyncMPClient":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "get_core_engine_for_request":
                    text = textwrap.dedent(ast.get_source_segment(source, item))
                    namespace = {"sys": sys, "EngineIdentity": int, "EngineCoreRequest": object,
                                 "get_late_interaction_engine_index": lambda pooling_params, n: None}
                    exec(compile(text, "core_client.py", "exec"), namespace)  # noqa: S102 - the engine's own code
                    return namespace["get_core_engine_for_request"]
    raise AssertionError("DPLBAsyncMPClient.get_core_engine_for_request not found in the wheel")


def kvreplay_pick(inflight, snapshot, added, start, held):
    n = len(inflight)
    view = np.zeros((n, len(VIEW)))
    for q in range(n):
        view[q, VIEW.V_REQUESTS] = inflight[q]
        view[q, VIEW.V_WAITING], view[q, VIEW.V_RUNNING] = snapshot[q][0], snapshot[q][1]
        view[q, VIEW.V_HELD] = held[q]
    depth = [(q - start) % n for q in range(n)]
    return routing.rule("vllm-dp", view, [0] * n, routing.Prompt(4, 64, 16), depth=depth, fetch=added,
                        time_model=packed(InstantTimeModel()), capacity=CAPACITY)


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_the_same_ranks_as_vllms_load_balancer(ranks):
    pick = vllm_pick_function()
    rng = np.random.default_rng(ranks)
    for case in range(300):
        held = rng.integers(0, int(CAPACITY) + 1, ranks).astype(float)
        snapshot = [[int(rng.integers(0, 6)), int(rng.integers(0, 40)), float(held[q] / CAPACITY)] for q in range(ranks)]
        inflight = [int(rng.integers(0, 50)) for _ in range(ranks)]
        start = int(rng.integers(0, ranks))
        client = SimpleNamespace(streaming_reqs=set(), reqs_in_flight={}, lb_engines=[list(s) for s in snapshot],
                                 eng_start_index=start, engine_inflight=Counter(dict(enumerate(inflight))),
                                 core_engines=list(range(ranks)), client_count=1)
        added = [0.0] * ranks
        for k in range(12):
            request = SimpleNamespace(resumable=False, request_id=f"{case}-{k}", data_parallel_rank=None,
                                      pooling_params=None)
            ours = kvreplay_pick(inflight, snapshot, added, start, held)
            theirs = pick(client, request)
            assert ours == theirs, (case, k)
            added[ours] += 1.0  # (the kernel: routed, and joined its queue)
            inflight[ours] += 1
            start = (start + 1) % ranks
