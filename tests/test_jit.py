"""jit.py: the compile notice (told only while a kernel really compiles) and the CLI's line."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest

from conftest import MOONCAKE, shared_path
from kvreplay import jit

pytestmark = pytest.mark.skipif(not jit.HAVE_NUMBA, reason="needs numba")


def test_listener_told_once_while_a_kernel_compiles(monkeypatch):
    from numba import njit

    @njit  # a new dispatcher, never compiled
    def double(x):
        return x * 2

    told = []

    @contextmanager
    def listener(what):
        told.append(("start", what))
        yield
        told.append(("stop", what))

    monkeypatch.setattr(jit, "NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(jit, "_listener", listener)
    args = (np.arange(3),)
    jit.ensure_compiled(double, args, "the doubling kernel")
    assert told == [("start", "the doubling kernel"), ("stop", "the doubling kernel")]
    assert double(*args).tolist() == [0, 2, 4]
    jit.ensure_compiled(double, args, "the doubling kernel")  # compiled: nobody is told again
    assert len(told) == 2


def test_no_notice_when_quick(monkeypatch):
    from numba import njit

    @njit
    def triple(x):
        return x * 3

    told = []
    monkeypatch.setattr(jit, "NOTICE_AFTER_S", 3600.0)
    monkeypatch.setattr(jit, "_listener", lambda what: told.append(what))
    jit.ensure_compiled(triple, (np.arange(2),), "the tripling kernel")
    assert told == []


def test_a_slow_cache_load_is_not_called_a_compile(monkeypatch):
    # CI once printed "compiling" on a warm run: loading from the disk cache took longer than
    # NOTICE_AFTER_S on a busy machine. Only numba's own compile event starts the clock.
    import time

    class SlowCacheLoad:  # like a dispatcher whose compile() finds the signature in its cache
        overloads = {}

        def compile(self, sig):
            time.sleep(0.3)

    told = []
    monkeypatch.setattr(jit, "NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(jit, "_listener", lambda what: told.append(what))
    jit.ensure_compiled(SlowCacheLoad(), (np.arange(2),), "a cached kernel")
    time.sleep(0.05)
    assert told == []


def test_cli_says_it_compiles_on_a_cold_cache_only(tmp_path):
    # the one-pass LRU curve is a numba kernel (the replays are C: they never compile)
    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    cmd = [sys.executable, "-m", "kvreplay.cli", "mrc", str(trace), "--capacities", "auto"]
    cold = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    warm = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    line = "kvreplay: compiling the one-pass LRU curve kernel (first run only; cached afterwards)…"
    assert line in cold.stderr.splitlines()
    assert "compiling" not in warm.stderr
    assert cold.stdout == warm.stdout
    replay = [sys.executable, "-m", "kvreplay.cli", "run", str(trace), "--policy", "lru", "--capacity", "4096"]
    run = subprocess.run(replay, env=dict(env, NUMBA_CACHE_DIR=str(tmp_path / "empty")), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and "compiling" not in run.stderr  # nothing to compile
