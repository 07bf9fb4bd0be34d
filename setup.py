"""Builds kvreplay's compiled core, the C extension kvreplay._core, from every .c file under
src/kvreplay with any C11 compiler (gcc, clang; pyproject.toml has the rest of the metadata). The
hash of the C sources is compiled in, so kvreplay/native.py can tell a stale build in a
development tree (docs/performance.md, "The compiled core and start-up").

The extension is optional: where it cannot be compiled (no C compiler), pip still installs
kvreplay, which then runs on its plain-Python engine and says so once (native.py).
KVREPLAY_REQUIRE_CORE=1 makes a failed compile fail the build (the wheels do: a wheel always
carries the core)."""

import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
PACKAGE = Path("src") / "kvreplay"


def c_sources():
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.c"))


def c_headers():
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.h"))


def source_hash():
    """sha256 over every .c and .h file of the package, by path and content (native.py computes the same)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.suffix in (".c", ".h") and path.is_file():
            digest.update(path.relative_to(ROOT / PACKAGE).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


# KVREPLAY_DEBUG_BUILD=1: bounds and undefined-behaviour checks (slow; for developing the core)
DEBUG = os.environ.get("KVREPLAY_DEBUG_BUILD") == "1"
flags = ["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-function"]
flags += ["-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"] if DEBUG else ["-O3"]

REQUIRED = os.environ.get("KVREPLAY_REQUIRE_CORE") == "1"

setup(ext_modules=[Extension(
    "kvreplay._core", sources=c_sources(), depends=c_headers(), define_macros=[("KV_SOURCE_HASH", f'"{source_hash()}"')],
    extra_compile_args=flags, extra_link_args=["-fsanitize=address,undefined"] if DEBUG else [],
    optional=not REQUIRED,
)])
