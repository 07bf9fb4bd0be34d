"""Serving simulation: requests in flight, time, several instances (docs/serving.md).

Sequential replay (``engine/``) answers "what could a cache of C blocks hold". This package
answers "what will my servers do", as a second consumer of the same policies, never inside
``engine/``:

    Trace --arrivals--> Router --> Instance (scheduler + KV pool) --steps timed by TimeModel--> SimReport

- ``simulate``: the public entry (``kvreplay.simulate``): arrivals (timestamps / speedup, or
  Poisson), the pool's size (given, or what the GPU holds after the weights), routers that do
  not read the instances' state (round-robin, random, session), the load sweep.
- ``instance``: the compiled loop of one instance: vLLM v1 and SGLang schedulers over one pool of
  C blocks; running requests hold their blocks through the policies' pin/unpin contract
  (``policies/base.py``, the same ``pin_request`` / ``unpin_request`` as ``engine/lifecycle.py``),
  the rest is the prefix cache the policy evicts.
- ``timing``: time models (roofline from the model and GPU catalogs, Dynamo's NPZ profile, a
  polynomial, instant) and their compiled form; ``gpus``: the GPU catalog.
- ``report``: SimReport (latencies, throughput, goodput, hit rate under concurrency).

Not built yet (issue 13): routers that read the instances' state, memory tiers below HBM, a
global KV store.

Layering: it imports ``trace``, ``policies``, ``engine`` and ``analysis`` (the model catalog);
``output`` renders its reports; nothing below imports it (tests/test_layering.py).
"""
