"""The engines' own command-line parsers, built on CPU from their wheels (a harness, not a test).

``kvreplay plan --emit`` writes launch commands for vLLM 0.33.0, SGLang 0.5.23 and sglang-router
0.3.2. This module builds each one's real argument parser from its wheel (``pip download --no-deps``;
nothing is installed: the wheel's files are extracted into tests/real_engines/.cache) so that
test_emit_flags.py can parse every emitted command with it and refresh tests/data/engine_flags.json,
the list of flags each parser accepts that the default suite checks against.

What is real and what is stubbed
--------------------------------
- vLLM: ``AsyncEngineArgs.add_cli_args`` (vllm/engine/arg_utils.py) on vLLM's
  ``FlexibleArgumentParser``, with the real ``vllm.config`` dataclasses (their defaults, types and
  choices) and ``vllm/__init__.py``. Stubbed vLLM modules, which the parser imports but never
  calls while it is built or parses: ``vllm.env_override`` (patches torch at import),
  ``vllm.distributed``, ``vllm.model_executor`` (but for ``layers.quantization`` and its
  ``utils.quant_utils``, real: ``--quantization``'s choices and types), ``vllm.compilation``,
  ``vllm.lora``, ``vllm.multimodal``, ``vllm.v1.worker``, ``vllm.v1.executor``. Third-party
  packages, stubbed when not installed: cbor2,
  transformers, safetensors, aiohttp, psutil, zmq, openai_harmony, openai, uvloop, fastapi,
  prometheus_client, pybase64. torch is always stubbed (its ``__version__`` the 2.14.0 vLLM pins), even
  when installed, so the flag table does not depend on the machine: with a real torch, the
  ``--lora-dtype`` annotation ``torch.dtype | LoRADType`` turns into choices, with a stub it takes any
  value (kvreplay emits no LoRA flag). ``VLLM_TARGET_DEVICE=cpu`` (vLLM's own variable) picks its CPU
  platform, whose device type ``DeviceConfig``'s default reads while the parser is built. The
  frontend's flags (``vllm serve``'s ``--host``, ``--port``, ...) are not built: they need the
  OpenAI protocol packages; the commands emit none of them (vLLM's defaults: port 8000, every
  interface).
- SGLang: ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py) on an ``argparse`` parser, as
  ``python -m sglang.launch_server`` parses. Stubbed: ``sglang.srt.distributed`` and
  ``sglang.kernels`` (imported by a validation hook, never called while parsing); torch, always
  (2.14.1, as SGLang pins); third-party, when not installed: psutil, pybase64, triton, starlette, zmq, aiohttp.
- sglang-router: ``RouterArgs.add_cli_args`` (sglang_router/router_args.py), with its compiled
  extension from the wheel; nothing stubbed.

A stub is inert: any attribute is a class that is false, empty and accepts anything, so code that
branched on one would take the "absent" branch, and code that computed with one would fail.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # (the stubs beside it; pytest runs with --import-mode=importlib)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_stubs import StubModule  # noqa: E402
from wheel_files import extract_once  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
WHEELS = {"vllm": ("vllm", "0.33.0"), "sglang": ("sglang", "0.5.23"), "sglang-router": ("sglang_router", "0.3.2")}
TORCH = {"vllm": "2.14.0", "sglang": "2.14.1"}  # the torch each wheel's METADATA pins
STUB_MODULES = {
    "vllm": ("vllm.env_override", "vllm.distributed", "vllm.model_executor", "vllm.compilation", "vllm.lora",
             "vllm.multimodal", "vllm.v1.worker", "vllm.v1.executor"),
    "sglang": ("sglang.srt.distributed", "sglang.kernels"),
    "sglang-router": (),
}
REAL_INSIDE = {"vllm": ("vllm.model_executor.layers.quantization.utils.quant_utils",
                        "vllm.model_executor.layers.quantization"), "sglang": (), "sglang-router": ()}
THIRD_PARTY = {
    "vllm": {"torch", "cbor2", "transformers", "safetensors", "aiohttp", "psutil", "zmq", "openai_harmony", "openai",
             "uvloop", "fastapi", "prometheus_client", "pybase64"},
    "sglang": {"torch", "psutil", "pybase64", "triton", "starlette", "zmq", "aiohttp"},
    "sglang-router": set(),
}
STUBBED: dict = {}


def _always(engine: str) -> tuple:
    """Modules stubbed even when installed: torch, so the parsers do not depend on the machine."""
    return ("torch",) if engine in TORCH else ()


class EngineMissing(RuntimeError):
    """A wheel could not be found or downloaded."""


class _StubModule(StubModule):
    """(no real submodules: the parsers' modules are loaded by the finder)"""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The engine's stubbed modules (first on sys.meta_path) or its missing third-party packages
    (last): inert stub packages; its real modules inside stubbed packages from the wheel."""

    def __init__(self, engine: str, root: Path, fallback: bool):
        self.engine, self.root, self.fallback = engine, root, fallback

    def find_spec(self, name, path=None, target=None):
        if self.fallback:
            if name.split(".")[0] not in THIRD_PARTY[self.engine]:
                return None
        else:
            if name in REAL_INSIDE[self.engine]:
                base = self.root / name.replace(".", "/")
                if base.is_dir():
                    return importlib.util.spec_from_file_location(name, base / "__init__.py",
                                                                  submodule_search_locations=[str(base)])
                return importlib.util.spec_from_file_location(name, str(base) + ".py")
            if not any(name == p or name.startswith(p + ".") for p in STUB_MODULES[self.engine] + _always(self.engine)):
                return None
        STUBBED.setdefault(self.engine, set()).add(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        if spec.name == "torch":
            module.__version__ = TORCH[self.engine]
        return module

    def exec_module(self, module):
        module.__path__ = []


def extracted(engine: str, download: bool = False) -> Path:
    """The wheel's files, extracted once under tests/real_engines/.cache (downloaded with
    ``pip download --no-deps`` when `download` and no wheel is there)."""
    package, version = WHEELS[engine]
    root = CACHE / f"{engine}-{version}-files"
    if (root / ".complete").exists():
        return root
    pattern = f"{package}-{version}-*.whl"
    wheels = sorted(CACHE.glob(pattern))
    if not wheels and download:
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"{engine}=={version}", "-d",
                            str(CACHE)], capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise EngineMissing(f"cannot download {engine}=={version}: {e}") from None
        wheels = sorted(CACHE.glob(pattern))
    if not wheels:
        raise EngineMissing(f"no {engine} {version} wheel in {CACHE} (pip download --no-deps {engine}=={version} "
                            f"-d {CACHE})")
    return extract_once(wheels[0], root, lambda n: n.startswith(package + "/") and n.endswith((".py", ".so", ".json")))


@contextlib.contextmanager
def _loaded(engine: str, root: Path):
    """`root` first on sys.path with the engine's stubs installed; everything restored after."""
    package = WHEELS[engine][0]
    always = _always(engine)
    owned = lambda n: (n == package or n.startswith(package + ".") or isinstance(sys.modules.get(n), _StubModule)  # noqa: E731
                       or n.split(".")[0] in always)
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if owned(n)}
    front, back = _Finder(engine, root, False), _Finder(engine, root, True)
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, front)
    sys.meta_path.append(back)
    env = os.environ.get("VLLM_TARGET_DEVICE")
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    try:
        yield
    finally:
        sys.meta_path.remove(front)
        sys.meta_path.remove(back)
        sys.path.remove(str(root))
        for n in [n for n in sys.modules if owned(n)]:
            del sys.modules[n]
        sys.modules.update(saved)
        if env is None:
            os.environ.pop("VLLM_TARGET_DEVICE", None)
        else:
            os.environ["VLLM_TARGET_DEVICE"] = env


def parser(engine: str, download: bool = False) -> argparse.ArgumentParser:
    """The engine's real argument parser (see the module docstring for what is stubbed)."""
    root = extracted(engine, download)
    with _loaded(engine, root):
        if engine == "vllm":
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            p = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm serve"))
        elif engine == "sglang":
            from sglang.srt.server_args import ServerArgs

            p = argparse.ArgumentParser(prog="python -m sglang.launch_server")
            ServerArgs.add_cli_args(p)
        else:
            from sglang_router.router_args import RouterArgs

            p = argparse.ArgumentParser(prog="python -m sglang_router.launch_router")
            RouterArgs.add_cli_args(p)
    return p


def flag_table(p: argparse.ArgumentParser) -> dict:
    """Every option string the parser accepts: {flag: {"value": takes a value, "choices": [...]}}."""
    out = {}
    for action in p._actions:
        takes = action.nargs != 0
        choices = sorted(str(c) for c in action.choices) if action.choices is not None else None
        for flag in action.option_strings:
            out[flag] = {"value": takes, "choices": choices}
    return dict(sorted(out.items()))
