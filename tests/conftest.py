"""Shared fixtures: paths to the read-only shared traces (tests using them skip when absent)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MOONCAKE = SHARED / "traces" / "mooncake"
CLAUDE_CODE = SHARED / "traces" / "claude-code-samples"
GOLDEN = SHARED / "golden" / "mooncake_totals.json"
DATA = Path(__file__).resolve().parent / "data"
BENCHMARKS = ROOT / "benchmarks"

ENGINES = ["reference", "compiled"]

# Test modules import the spec oracle (tests/spec_model.py) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def shared_path(path: Path) -> Path:
    """The path, or a clean skip when ../shared (or that file) is not there."""
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is optional)")
    return path


def benchmark_module(name: str):
    """benchmarks/NAME.py imported as a module, benchmarks/ on the path while it loads (for the
    siblings it imports: calibrate_stats, calibrate_e2e, kv_pool ...)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def write(tmp_path: Path, name: str, content) -> Path:
    """A test file from text or bytes."""
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


def jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def golden_cases() -> list[dict]:
    if not GOLDEN.exists():
        return []
    return json.loads(GOLDEN.read_text())["cases"]


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param
