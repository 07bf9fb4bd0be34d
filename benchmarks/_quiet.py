"""Timing on a shared 2-core machine: wall time, CPU time and how busy everyone else was.

Other processes (test suites of other sessions) often keep both cores busy, and a
single-threaded replay then gets a fraction of a core: its wall time triples while its
CPU time moves by only a few percent. So every timed run records

* ``wall``: elapsed seconds;
* ``cpu``: CPU seconds of the work itself (``time.thread_time()`` for in-process work,
  user+sys of the waited-for children for subprocesses);
* ``others``: cores used by *other* processes meanwhile (system-wide busy time from
  /proc/stat, steal included, minus our own CPU time, divided by wall time).

Before each run we wait (up to ``quiet_wait`` seconds) for the machine to go idle, and a
run during which others used more than ``LIMIT`` cores is retried a few times. The
scripts report the CPU-time median as the headline (on an idle machine it equals the wall
time of a single-threaded run) together with the wall-time median and the number of runs
that were clean.
"""

from __future__ import annotations

import os
import resource
import statistics
import time

_TICK = os.sysconf("SC_CLK_TCK")
LIMIT = 0.15  # cores used by others above which a run counts as contended
# For trying the scripts out quickly: BENCH_IGNORE_CONTENTION=1 skips waiting and retries.
IGNORE = os.environ.get("BENCH_IGNORE_CONTENTION") == "1"


def _busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / _TICK


def _own_cpu_s() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def children_cpu_s() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime + c.ru_stime


def wait_quiet(max_wait: float = 30.0, threshold: float = 0.05, interval: float = 0.5) -> bool:
    """Wait until the machine's busy CPU over `interval` is below `threshold` cores; False if it never was."""
    if IGNORE:
        return True
    deadline = time.monotonic() + max_wait
    while True:
        b0 = _busy_s()
        time.sleep(interval)
        if (_busy_s() - b0) / interval < threshold:
            return True
        if time.monotonic() > deadline:
            return False


class Probe:
    """with Probe() as p: ...  then p.others = cores used by other processes, on average."""

    def __enter__(self):
        self._b, self._o, self._t = _busy_s(), _own_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_s = max(time.perf_counter() - self._t, 1e-9)
        self.others_s = (_busy_s() - self._b) - (_own_cpu_s() - self._o)
        # /proc/stat ticks are 10 ms: allow 2 ticks of slack on short sections.
        self.others = 0.0 if IGNORE else max(0.0, self.others_s - 2 / _TICK) / self.wall_s
        return False


def measure(fn, runs: int, quiet_wait: float = 30.0, attempts: int = 2, retry_wait: float = 5.0) -> list[dict]:
    """`runs` records {wall, cpu, others, clean} of fn() (which returns (wall_s, cpu_s)).

    Waits (at most `quiet_wait` s) for an idle machine before the first run; a run during
    which others used more than LIMIT cores is retried up to `attempts` times in all, after
    waiting up to `retry_wait` s for quiet; the last attempt is kept either way. Runs
    shorter than 50 ms cannot be judged one by one (/proc/stat counts 10 ms ticks): they
    are judged together, from others' busy time summed over all of them."""
    wait_quiet(quiet_wait)
    records = []
    for _ in range(runs):
        for attempt in range(attempts):
            with Probe() as p:
                wall, cpu = fn()
            rec = {"wall": wall, "cpu": cpu, "others": p.others, "others_s": p.others_s, "probe_wall": p.wall_s}
            rec["clean"] = p.others <= LIMIT
            if rec["clean"] or p.wall_s < 0.05:
                break
            wait_quiet(retry_wait)
        records.append(rec)
    short = [r for r in records if r["probe_wall"] < 0.05]
    if short and not IGNORE:
        load = max(0.0, sum(r["others_s"] for r in short)) / sum(r["probe_wall"] for r in short)
        for r in short:
            r["clean"] = load <= LIMIT
            r["others"] = load
    return records


def summary(records: list[dict]) -> dict:
    clean = [r for r in records if r["clean"]]
    return {
        "runs": len(records),
        "clean_runs": len(clean),
        "cpu_median": statistics.median(r["cpu"] for r in records),
        "wall_median": statistics.median(r["wall"] for r in records),
        "wall_median_clean": statistics.median(r["wall"] for r in clean) if clean else None,
        "cpu_min": min(r["cpu"] for r in records),
        "cpu_max": max(r["cpu"] for r in records),
        "others_median": statistics.median(r["others"] for r in records),
    }
