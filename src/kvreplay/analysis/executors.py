"""Where a sweep's replays run: in this process, a process pool, threads, or a Ray cluster.

A sweep is a list of independent tasks over a few traces. A task is small (a policy name, its
parameters, a capacity); a trace is large (its arrays). Every executor therefore ships each
trace to a worker at most once and sends only the small task per replay:

- ``local`` (the default): a process pool of ``jobs`` workers (``jobs=1``: no pool, this
  process). On Linux the pool forks, so workers inherit the traces' arrays copy-on-write and
  nothing is pickled; where only spawn exists the traces go to each worker once, through the
  pool's initializer.
- ``threads``: ``jobs`` threads in this process sharing the traces (the compiled kernels release
  the GIL; the reference engine does not, so threads only help the compiled one).
- ``ray``: ``ray.put`` stores each trace once in the object store and every task gets its
  ObjectRef; numpy arrays are read zero-copy from shared memory on each node.

Every executor returns the results in task order, so the numbers and their order do not depend
on where the replays ran. ``progress(done, total)`` is always called from the calling thread.
"""

from __future__ import annotations

import multiprocessing
import numbers
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from ..errors import ConfigError

EXECUTORS = ("local", "threads", "ray")
RAY_MISSING = "the ray executor needs Ray: pip install 'kvreplay[ray]'"


@dataclass(frozen=True)
class Task:
    """One unit of work over trace number `trace`.

    kind "replay": replay `policy` with `params` at `capacity`; yields one result row.
    kind "lru-curve": the exact LRU curve at every capacity in `capacities` (one pass, mrc);
    yields one row per capacity.
    kind "call": `function(trace, dict(options))`, a module-level function (so it pickles by
    name to workers), yields its one row: the serving simulator's sweeps send
    serving.simulate.sweep_row this way (executors sit below serving and never import it).
    """

    kind: str
    trace: int
    policy: str = ""
    params: tuple = ()  # (name, value) pairs, in the policy's order
    capacity: int = 0
    capacities: tuple = ()
    block_size: int = 512
    engine: str | None = None
    warmup_fraction: float = 0.0
    options: tuple = ()
    function: object = None

    @property
    def rows(self) -> int:
        return len(self.capacities) if self.kind == "lru-curve" else 1


SWEEP_FIELDS = ("policy", "params", "cache_capacity_blocks", "total_prompt_tokens", "total_hit_tokens", "hit_rate",
                "final_cache_blocks", "oversize_requests")


def run_task(trace, task: Task) -> list[dict]:
    """The result rows of one task (the same function runs in every executor)."""
    if task.kind == "call":
        return [task.function(trace, dict(task.options))]
    if task.kind == "lru-curve":
        from .mrc import mrc

        from .misses import COLUMNS

        curve = mrc(trace, list(task.capacities), task.block_size, warmup_fraction=task.warmup_fraction)
        rows = []
        for point in curve["points"]:
            row = {k: point[k] for k in SWEEP_FIELDS if k in point}
            row.update(policy="lru", params={}, counters={"admissions": point["admissions"], "evictions": point["evictions"]})
            rows.append({**{k: row[k] for k in (*SWEEP_FIELDS, "counters")}, **{k: point[k] for k in COLUMNS}})
        return rows
    from ..engine.replay import replay

    from .misses import row_columns

    r = replay(trace, task.policy, task.capacity, task.block_size, engine=task.engine,
               warmup_fraction=task.warmup_fraction, stranded_samples=0, **dict(task.options), **dict(task.params))
    row = {k: getattr(r, k) for k in SWEEP_FIELDS}
    row.update(row_columns(r))
    if "tiers" in dict(task.options):  # a DRAM tier below the cache (sweep's hbm=): its size and each tier's share
        rows = r.tiers["tiers"] if r.tiers is not None else [{"hit_rate": r.hit_rate}]
        row.update(dram_blocks=rows[1]["blocks"] if len(rows) > 1 else 0, hbm_hit_rate=rows[0]["hit_rate"],
                   dram_hit_rate=rows[1]["hit_rate"] if len(rows) > 1 else 0.0,
                   hbm_hit_tokens=int(rows[0].get("hit_tokens", r.total_hit_tokens)),
                   dram_hit_tokens=int(rows[1]["hit_tokens"]) if len(rows) > 1 else 0)
    row["params"] = dict(r.params)
    row["counters"] = dict(r.counters)
    return [row]


def lean(trace):
    """The trace as shipped to workers: without the file's original ids (unused by replays) and
    with its derived index computed once here rather than once per replay."""
    if trace.original_ids is not None:
        trace = replace(trace, original_ids=None)
    trace.predecessors  # noqa: B018 - fills the cached index that every replay reads
    return trace


def run(tasks: list[Task], traces: list, *, executor: str = "local", jobs: int = 1,
        ray_address: str | None = None, progress=None) -> list[list[dict]]:
    """Run `tasks` over `traces` and return each task's rows, in task order."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral) or jobs < 1:
        raise ConfigError(f"jobs must be a whole number >= 1, got {jobs!r}")
    jobs = int(jobs)
    if ray_address is not None and executor != "ray":
        raise ConfigError(f"a Ray address only applies to the ray executor, not {executor!r}")
    tracker = _Progress(tasks, progress)
    if executor == "ray":
        return _run_ray(tasks, traces, jobs, ray_address, tracker)
    if jobs == 1 or len(tasks) == 1:
        out = []
        for i, task in enumerate(tasks):
            out.append(run_task(traces[task.trace], task))
            tracker.finished(i)
        return out
    if executor == "threads":
        pool = ThreadPoolExecutor(max_workers=jobs)
        submit = lambda task: pool.submit(run_task, traces[task.trace], task)  # noqa: E731
    else:
        shipped = [lean(t) for t in traces]
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=_context(),
                                   initializer=_init_worker, initargs=(shipped,))
        submit = lambda task: pool.submit(_worker_task, task)  # noqa: E731
    with pool:
        try:
            futures = {submit(task): i for i, task in enumerate(tasks)}
            out = [None] * len(tasks)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    i = futures[future]
                    out[i] = future.result()
                    tracker.finished(i)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return out


class _Progress:
    def __init__(self, tasks, callback):
        self.rows = [t.rows for t in tasks]
        self.total = sum(self.rows)
        self.done = 0
        self.callback = callback
        if callback is not None:
            callback(0, self.total)

    def finished(self, i: int) -> None:
        self.done += self.rows[i]
        if self.callback is not None:
            self.callback(self.done, self.total)


# ---------------------------------------------------------------- process pool

_WORKER_TRACES: list = []


def _context():
    # fork: workers inherit the parent's traces (no pickling) and its loaded kernels.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") and "fork" in methods else None)


def _init_worker(traces) -> None:
    # Under fork this list is the parent's own (inherited); under spawn it was pickled once for this worker.
    global _WORKER_TRACES
    _WORKER_TRACES = traces


def _worker_task(task: Task) -> list[dict]:
    return run_task(_WORKER_TRACES[task.trace], task)


# ---------------------------------------------------------------- ray

def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def _ray_task(trace, task: Task) -> list[dict]:
    return run_task(trace, task)


def _run_ray(tasks, traces, jobs, address, tracker) -> list[list[dict]]:
    import logging

    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # Library code does not print: Ray's own notices (e.g. that token authentication is on)
        # stay quiet, its errors still arrive as exceptions.
        options = dict(address=address, logging_level=logging.ERROR, log_to_driver=False)
        if address is None:
            # A local instance of our own ("local": even when a cluster runs here), with `jobs`
            # CPUs (1: every core) and no dashboard.
            options.update(address="local", num_cpus=jobs if jobs > 1 else None, include_dashboard=False)
        try:
            ray.init(**options)
        except ConnectionError as e:
            raise ConfigError(f"cannot connect to a Ray cluster at {address!r}: {e}") from None
        except ValueError as e:  # e.g. a ray:// address without Ray Client (grpcio)
            raise ConfigError(f"Ray address {address!r}: {e}") from None
    try:
        remote = ray.remote(num_cpus=1)(_ray_task)
        refs = [ray.put(lean(t)) for t in traces]  # once per trace; tasks get the reference
        futures = {remote.remote(refs[task.trace], task): i for i, task in enumerate(tasks)}
        out = [None] * len(tasks)
        pending = list(futures)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    i = futures[ref]
                    out[i] = ray.get(ref)
                    tracker.finished(i)
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        return out
    finally:
        if started_here:
            ray.shutdown()
