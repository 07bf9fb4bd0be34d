"""The build: every C source goes in the sdist, the core is optional where no C compiler is (the
package installs and runs on the plain-Python engine), and required where asked
(KVREPLAY_REQUIRE_CORE=1, as the wheels and CI build it). Offline: setup.py build_ext in a copy of
the tree, with CC=/bin/false standing for a machine without a compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tree_copy(tmp_path: Path) -> Path:
    """The package sources, setup.py and pyproject.toml, without any build of the core."""
    root = tmp_path / "kvreplay"
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, root / name)
    return root


def build(root: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("KVREPLAY_REQUIRE_CORE", "KVREPLAY_NO_CORE")}
    return subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root, capture_output=True,
                          text=True, timeout=600, env={**environ, **env})


def test_without_a_compiler_the_build_succeeds_and_kvreplay_runs(tmp_path):
    root = tree_copy(tmp_path)
    done = build(root, CC="/bin/false")
    assert done.returncode == 0, done.stderr
    assert "building extension \"kvreplay._core\" failed" in done.stderr
    assert not list((root / "src" / "kvreplay").glob("_core*"))
    env = {k: v for k, v in os.environ.items() if k != "KVREPLAY_NO_CORE"}
    demo = subprocess.run([sys.executable, "-m", "kvreplay.cli", "demo"], capture_output=True, text=True,
                          timeout=600, env={**env, "PYTHONPATH": str(root / "src")})
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr.startswith("kvreplay: note: the compiled core is not installed") and demo.stderr.count("\n") == 1
    assert "62 replays" in demo.stdout


def test_a_required_core_fails_the_build_without_a_compiler(tmp_path):
    done = build(tree_copy(tmp_path), CC="/bin/false", KVREPLAY_REQUIRE_CORE="1")
    assert done.returncode != 0


def test_every_c_source_is_in_the_sdist_manifest():
    # MANIFEST.in takes every .c and .h under src/kvreplay (the sdist builds the core anywhere)
    text = (ROOT / "MANIFEST.in").read_text()
    assert "recursive-include src/kvreplay *.c *.h" in text
    sources = list((ROOT / "src" / "kvreplay").rglob("*.c")) + list((ROOT / "src" / "kvreplay").rglob("*.h"))
    assert len(sources) > 40


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
def test_the_c_sources_are_c11_without_pedantic_warnings():
    include = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True).stdout.strip()
    for path in sorted((ROOT / "src" / "kvreplay").rglob("*.c")):
        done = subprocess.run(["gcc", "-std=c11", "-pedantic", "-Wall", "-Wextra", "-Wno-unused-parameter",
                               "-Wno-unused-function", f"-I{include}", "-fsyntax-only", str(path)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stderr == "", f"{path}: {done.stderr}"


def test_a_development_trees_core_must_be_built_from_its_sources(tmp_path):
    # a copy of the tree with this tree's build of the core: an edited .c makes the command stop,
    # saying how to rebuild; without setup.py above it (an installed package) the core just loads
    if not list((ROOT / "src" / "kvreplay").glob("_core*")):
        pytest.skip("the core is not built in this tree")
    root = tmp_path / "kvreplay"
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.py", root / "setup.py")
    with open(root / "src" / "kvreplay" / "analysis" / "mrc.c", "a") as f:
        f.write("/* an edit */\n")
    env = {k: v for k, v in os.environ.items() if k != "KVREPLAY_NO_CORE"}
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_length": 8, "hash_ids": [1, 2]}\n{"input_length": 8, "hash_ids": [1, 2]}\n')

    def mrc():
        return subprocess.run([sys.executable, "-m", "kvreplay.cli", "mrc", str(trace), "--capacities", "2",
                               "--block-size", "4"], capture_output=True, text=True, timeout=300,
                              env={**env, "PYTHONPATH": str(root / "src")})

    stale = mrc()
    assert stale.returncode == 2 and "built from other C sources than these" in stale.stderr, stale.stderr
    (root / "setup.py").unlink()
    installed = mrc()
    assert installed.returncode == 0 and installed.stderr == "", installed.stderr


def test_no_merge_leftovers_are_tracked():
    """A merge's .orig/.rej files (one was once committed under src/) are never part of the tree."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    leftovers = [p for p in tracked.stdout.splitlines() if p.endswith((".orig", ".rej", ".BACKUP", ".BASE"))]
    assert leftovers == []
