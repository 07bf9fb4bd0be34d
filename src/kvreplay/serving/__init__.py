"""Serving simulation: requests in flight, time, several instances (docs/serving.md).

Sequential replay (``engine/``) answers "what could a cache of C blocks hold". This package
answers "what will my servers do", as a second consumer of the same policies, never inside
``engine/``:

    Trace --arrivals--> Router --> Instance (scheduler + KV pool) --steps timed by TimeModel--> SimReport

- ``simulate``: the public entry (``kvreplay.simulate``, ``load_sweep``): arrivals (timestamps /
  speedup, or Poisson), the scheduler's settings, sweeps over loads, instances and routers.
- ``config``: one ``resolve()`` turns block size, model, KV dtype, GPU pool and tiers into sizes.
- ``run``: one run: the compiled loop's inputs (each instance's compact ids and policy state),
  read back in trace order.
- ``kernel``: the compiled loop (C): the event loop, the vLLM and SGLang scheduler styles, step
  batching, a request's blocks (the only caller of pin/unpin), metrics; ``sim.h`` maps its files.
- ``routing``: routers, fixed by the trace (round-robin, random, session) or state-aware (one C
  file each: least-loaded, kv-aware, sglang, llm-d, mooncake); tiers below HBM and a global
  store come from ``engine/tiers``.
- ``timing``: time models (roofline from the model and GPU catalogs, Dynamo's NPZ profile, a
  polynomial, instant), the pool after the weights, the GPU catalog.
- ``report``: SimReport (latencies, throughput, goodput, hit rate under concurrency).

docs/serving.md, "The code", has the package map.

Layering: it imports ``trace``, ``policies``, ``engine`` and ``analysis`` (the model catalog);
``output`` renders its reports; nothing below imports it (tests/test_layering.py).
"""
