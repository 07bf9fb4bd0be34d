"""Every flag `kvreplay plan --emit` writes, parsed by the engine's own argument parser (opt-in).

vLLM 0.33.0's, SGLang 0.5.23's and sglang-router 0.3.2's parsers are built from their wheels on CPU
(engine_parsers.py says what is stubbed). Every command of every case in tests/emit_cases.py must
parse, and its values must come back as given. The flags each parser accepts are the checked-in
tests/data/engine_flags.json, which the default suite checks emitted commands against;
KVREPLAY_REFRESH_ENGINE_FLAGS=1 rewrites it from the parsers.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from emit_cases import CASES, commands

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import engine_parsers  # noqa: E402

pytestmark = pytest.mark.engines

TABLE = Path(__file__).resolve().parents[1] / "data" / "engine_flags.json"
VERSIONS = {"vllm": "vllm 0.33.0", "sglang": "sglang 0.5.23", "sglang-router": "sglang-router 0.3.2"}


@pytest.fixture(scope="module")
def parsers():
    try:
        return {k: engine_parsers.parser(k, download=True) for k in VERSIONS}
    except engine_parsers.EngineMissing as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_emitted_command_parses(parsers, case):
    from kvreplay.serving.emit import emit

    kind, plan = CASES[case]
    for engine, argv in commands(emit(plan, kind), kind):
        ns = parsers[engine].parse_args(argv)
        if engine == "vllm":
            assert ns.model == argv[argv.index("--model") + 1]
            assert ns.tensor_parallel_size == int(argv[argv.index("--tensor-parallel-size") + 1])
            assert ns.enable_prefix_caching is True
            if "--kv-offloading-size" in argv:
                assert ns.kv_offloading_size == float(argv[argv.index("--kv-offloading-size") + 1])
                assert ns.kv_offloading_backend == "native"
        elif engine == "sglang":
            assert ns.tp_size == int(argv[argv.index("--tp-size") + 1])
            if "--hicache-size" in argv:
                assert ns.enable_hierarchical_cache and ns.hicache_size == int(argv[argv.index("--hicache-size") + 1])
        else:
            assert ns.policy == argv[argv.index("--policy") + 1]


def test_the_checked_in_flag_table_is_the_parsers(parsers):
    table = {VERSIONS[k]: engine_parsers.flag_table(p) for k, p in parsers.items()}
    if os.environ.get("KVREPLAY_REFRESH_ENGINE_FLAGS") == "1":
        TABLE.write_text(json.dumps({"_source": "tests/real_engines/test_emit_flags.py: each parser's option "
                                                "strings, whether each takes a value, and its choices",
                                     **table}, indent=1, sort_keys=True) + "\n")
    checked_in = json.loads(TABLE.read_text())
    for name, flags in table.items():
        assert checked_in[name] == flags, f"{name}: refresh with KVREPLAY_REFRESH_ENGINE_FLAGS=1"
