"""The policy registry lists names and parameters from its index, which matches the modules, and
imports a policy's module only when that policy is asked for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kvreplay.policies import registry


def test_the_index_is_what_the_modules_declare():
    # python -m kvreplay.policies.registry rewrites index.py; run it after adding or changing a policy
    assert [tuple(row) for row in registry.discovered()] == [tuple(row) for row in registry.index.POLICIES]


def test_the_index_and_the_specs_agree():
    for name, info in registry.INFO.items():
        spec = registry.POLICIES[name]
        assert (spec.name, spec.summary, spec.capacity) == (info.name, info.summary, info.capacity)
        assert [(p.name, p.default, p.kind, p.help) for p in spec.params] == [tuple(p) for p in info.params]
    assert list(registry.POLICIES) == list(registry.ORDER)  # every policy has its place in the listing


def imported_after(code: str) -> list[str]:
    probe = code + "; import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvreplay.policies.'))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_names_and_parameters_import_no_policy_module():
    listed = imported_after("from kvreplay.policies.registry import POLICIES, INFO; list(POLICIES); "
                            "[p.name for i in INFO.values() for p in i.params]")
    assert listed == ["kvreplay.policies.index", "kvreplay.policies.registry"]
    asked = imported_after("import kvreplay; kvreplay.replay(kvreplay.Trace.from_requests([(['a'], 4)]), 'sieve', 4, 4)")
    assert "kvreplay.policies.sieve" in asked and "kvreplay.policies.s3fifo" not in asked


def test_the_command_that_writes_the_index_writes_this_one(tmp_path):
    src = Path(registry.__file__).resolve().parents[2]
    shutil.copytree(src, tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    written = tmp_path / "src" / "kvreplay" / "policies" / "index.py"
    written.write_text("POLICIES = ()\n")  # (a stale index must not matter to the command that rewrites it)
    done = subprocess.run([sys.executable, "-m", "kvreplay.policies.registry"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")})
    assert done.returncode == 0, done.stderr
    assert written.read_text() == Path(registry.index.__file__).read_text()
