"""Serving simulation: requests in flight, time, clusters (not built yet; this is its home).

Sequential replay (``engine/``) answers "what could a cache of C blocks hold". This package
will answer "what will my servers do" (issues 12 and 13), as a second consumer of the same
policies, never inside ``engine/``:

    Trace --arrivals--> Router --> Instance (scheduler + KV pool + tiers) --steps timed by TimeModel--> SimReport

- ``instance``: one pool of C blocks; running requests hold their blocks through the policies'
  pin/unpin contract (``policies/base.py``), the rest is the prefix cache the policy evicts.
  What a start and a finish do to the cache, in both engines, is ``engine/lifecycle.py``
  (``replay_lifecycle``: events in any order; a start may be refused when the held blocks leave
  no room); the simulator decides when they happen.
- ``scheduler``: vLLM-style and SGLang-style batching, each rule cited to its source file.
- ``timing``: the TimeModel interface (roofline from the model and GPU catalogs, measured
  profiles such as Dynamo's NPZ format, instant).
- ``router`` and ``tiers``: cluster routing presets and DRAM/SSD/remote pools below HBM.

Layering: it imports ``trace``, ``policies``, ``engine`` and ``analysis`` (the model catalog);
``output`` renders its reports; nothing below imports it (tests/test_layering.py).
"""
