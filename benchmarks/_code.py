"""Which kvreplay code a benchmark measures.

``--code HEAD`` (the default) measures a clean snapshot of a commit (``git archive``
into benchmarks/.cache/kvreplay-<sha>/), run with the same interpreter and dependencies
(PYTHONPATH puts the snapshot before the editable install). It keeps uncommitted work
out of the figures and gives the snapshot its own build of the compiled core (setup.py
builds it into the snapshot, as pip install would) and its own numba cache (numba compiled
the engines before commit 6e7a47a, and still compiles the analysis kernels).
``--code installed`` measures whatever ``import kvreplay`` finds (the working tree).
"""

from __future__ import annotations

import compileall
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(__file__).resolve().parent / ".cache"
_ENV = "KVREPLAY_BENCH_CODE"


def add_argument(ap) -> None:
    ap.add_argument("--code", default="HEAD", metavar="REF|installed",
                    help="kvreplay to measure: a git ref, snapshotted (default HEAD), or 'installed'")


def snapshot(ref: str) -> tuple[Path, str]:
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                         check=True, capture_output=True, text=True).stdout.strip()
    root = CACHE / f"kvreplay-{sha[:12]}"
    if not (root / "src" / "kvreplay" / "__init__.py").exists():
        def has(path):
            return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{sha}:{path}"],
                                  capture_output=True).returncode == 0

        has_setup = has("setup.py")  # (setup.py reads the package layout from pyproject.toml)
        extra = [f for f in ("setup.py", "pyproject.toml") if has_setup and has(f)]
        data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", sha, "src", *extra],
                              check=True, capture_output=True).stdout
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(root)
        if has_setup:  # the compiled core, built with the machine's C compiler (as pip install does)
            subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=root, check=True,
                           capture_output=True)
    # Byte-compile it, as `pip install` does: without .pyc files (PYTHONDONTWRITEBYTECODE is set
    # on some machines) every run would recompile ~50 modules from source, ~0.04 s of start-up
    # that no installed copy pays.
    compileall.compile_dir(str(root / "src"), quiet=1)
    return root / "src", sha


def activate(code: str) -> str:
    """Re-exec this script with the chosen code on PYTHONPATH (once); return a description of it."""
    if os.environ.get(_ENV):
        return os.environ[_ENV]
    if code == "installed":
        status = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty=+uncommitted-changes"],
                                capture_output=True, text=True).stdout.strip()
        untracked = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all", "src"],
                                   capture_output=True, text=True).stdout.strip()
        desc = f"installed working tree at {status}" + (" (src has uncommitted or untracked files)" if untracked else "")
        os.environ[_ENV] = desc
        return desc
    src, sha = snapshot(code)
    desc = f"commit {sha[:12]} (clean snapshot in {src.parent.relative_to(REPO)})"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
               **{_ENV: desc})
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
    raise AssertionError("unreachable")


def package_version(name: str) -> str:
    """An installed distribution's version, or "not installed" (numba, for one, left kvreplay's
    dependencies with the compiled core's last numba kernels)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def check_imported(expected_desc: str) -> str:
    """Where kvreplay was imported from (to print next to the figures)."""
    import kvreplay

    return str(Path(kvreplay.__file__).resolve().parent)


def replay_kernel(spec, state, trace, block_size, hit_blocks, hit_tokens):
    """The compiled engine's loop alone: C since commit 6e7a47a (driver.replay_state), numba before."""
    from kvreplay.engine import driver

    if hasattr(driver, "replay_state"):
        driver.replay_state(spec, state, trace.offsets, trace.blocks, trace.input_length, block_size, hit_blocks,
                            hit_tokens)
    else:
        driver.replay_compiled(trace.offsets, trace.blocks, trace.input_length, block_size, state, hit_blocks, hit_tokens)
