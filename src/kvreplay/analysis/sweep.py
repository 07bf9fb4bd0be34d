"""The grid traces x policies x parameters x capacities, run by one of the executors."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


from ..engine.replay import as_trace, check_capacity, resolve_engine, warmup_count
from ..errors import ConfigError
from ..progress import labelled
from ..trace.model import resolve_block_size
from ..engine.report import window_text
from ..policies.registry import get_policy, parse_policy
from .capacities import auto_capacities
from .executors import SWEEP_FIELDS, Task, run
from .results import SweepResult, params_label

__all__ = ["sweep", "auto_capacities", "points_to_rows", "SWEEP_FIELDS", "SweepResult"]


def _policy_list(policies) -> list[tuple]:
    """(spec, resolved params) for every policy entry; an entry (name, [params, params]) gives several."""
    if isinstance(policies, str):
        policies = [p for p in policies.split(",") if p.strip()]  # "lru" or "lru,fifo", not its characters
    if not isinstance(policies, (list, tuple)):
        raise ConfigError(f"policies must be a list of policy names (or 'lru,fifo'), got {policies!r}")
    out = []
    for p in policies:
        if isinstance(p, str):
            out.append(parse_policy(p))
            continue
        name, params = p
        spec = get_policy(name)
        for one in ([params] if isinstance(params, Mapping) else params):
            out.append((spec, spec.resolve(dict(one))))
    if not out:
        raise ConfigError("no policies to sweep")
    return out


def _trace_list(trace) -> tuple[list[str], list, bool]:
    """(names, traces, several): a Trace or a path is one trace; a list or a dict name -> trace may hold several."""
    if isinstance(trace, Mapping):
        names, items = [str(k) for k in trace], list(trace.values())
    elif isinstance(trace, (list, tuple)):
        items = list(trace)
        names = None
    else:
        items, names = [trace], None
    if not items:
        raise ConfigError("no traces to sweep")
    traces = [as_trace(t) for t in items]
    if names is None:
        names = [t.source if not isinstance(raw, (str, os.PathLike)) else os.fspath(raw) for raw, t in zip(items, traces)]
        repeated = {n for n in names if names.count(n) > 1}  # two in-memory traces, one file twice
        seen: dict = {}
        for i, n in enumerate(names):
            if n in repeated:
                seen[n] = seen.get(n, 0) + 1
                names[i] = f"{n}#{seen[n]}"
    return names, traces, len(traces) > 1


def sweep(
    trace,
    capacities="auto",
    policies=("s3fifo", "lru", "fifo"),
    block_size: int | None = None,
    *,
    warmup_fraction: float = 0.0,
    jobs: int = 1,
    engine: str | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    progress=None,
    hbm: int | None = None,
    kv_groups=None,
) -> SweepResult:
    """Replay every (trace, policy, parameters, capacity) combination.

    trace: a Trace or a path; or several, as a list or a dict name -> trace (or path).
    capacities: a list of block counts, or "auto" (log-spaced up to each trace's number of unique blocks).
    policies: names ("s3fifo"), "name:key=value:key=value" strings, (name, params) pairs, or
        (name, [params, params, ...]) for several parameter sets of one policy.
    block_size: tokens per block; default: each trace's declared size, else 512.
    warmup_fraction: the first floor(F * N) requests of each trace warm the cache and are not counted.
    jobs: replays running at once (1: one after another in this process).
    engine: "compiled", "reference" or None (the compiled one where the core is built), as replay's.
    executor: "local" (a pool of `jobs` processes, default), "threads" (`jobs` threads; the compiled
        kernels release the GIL) or "ray" (tasks on a Ray cluster; see docs/scaling.md).
    ray_address: for executor="ray": None starts a local Ray instance (with `jobs` CPUs when
        jobs > 1), "auto" joins the cluster this machine belongs to, "ray://host:10001" a remote one.
    progress: a kvreplay.progress callback, told ``(done, total, "replays")`` from the calling
        thread: once with done=0 before anything runs, then each time results arrive; `total` is
        the number of result rows.
    hbm: sweep a DRAM tier instead: the cache is `hbm` blocks (the GPU pool) and each capacity is
        the size of an LRU tier below it (engine/tiers.py, copies moved; 0: none); each row adds
        dram_blocks, hbm_hit_rate and dram_hit_rate (each a share of the prompt tokens). (For an
        LRU cache the total is also `kvreplay mrc` at hbm + size: an LRU cache over an exclusive
        LRU tier is one LRU of their combined size.)
    kv_groups: a hybrid model's KV cache groups (catalog.kv_groups.layout(...).groups): every
        policy must be "vllm" (vLLM's hybrid manager) or every one "radix" (SGLang's, with
        sglang_layout's groups), as replay's kv_groups.

    One trace returns ``{"trace", "block_size", "warmup_fraction", "window", "num_requests", "results"}``;
    each result has the fields of SWEEP_FIELDS plus ``counters``, ordered by policy (as given), then
    capacity. Several traces return ``{"trace": [names], "traces": [{"trace", "source", "block_size",
    "num_requests", "window"}], "block_size" (None if the traces differ), "warmup_fraction", "results"}``,
    ordered by trace first, and every result starts with its ``trace`` name. The results, their
    order and their numbers are the same whichever executor and number of jobs ran them.

    The result is a dict (a SweepResult) that also gives the tidy table: ``rows()``, ``to_dict()``
    (the JSON document of ``kvreplay sweep --json``), ``to_pandas()``, ``to_polars()``, ``to_arrow()``
    (analysis/results.py; columns and units in docs/formats.md, "Output tables").
    """
    grid = SweepGrid(trace, capacities, policies, block_size, warmup_fraction=warmup_fraction, engine=engine, hbm=hbm,
                     kv_groups=kv_groups)
    return sweep_grid(grid, Execution(executor=executor, jobs=jobs, ray_address=ray_address, progress=progress))


@dataclass(frozen=True, eq=False)
class SweepGrid:
    """What sweep() replays: its traces, capacities and policies, and how each replay is set up (see sweep)."""

    trace: object
    capacities: object = "auto"
    policies: object = ("s3fifo", "lru", "fifo")
    block_size: int | None = None
    warmup_fraction: float = 0.0
    engine: str | None = None
    hbm: int | None = None
    kv_groups: object = None


@dataclass(frozen=True, eq=False)
class Execution:
    """Where and how sweep()'s replays run, and who hears of them (see sweep)."""

    executor: str = "local"
    jobs: int = 1
    ray_address: str | None = None
    progress: object = None


def sweep_grid(grid: SweepGrid, execution: Execution) -> SweepResult:
    """sweep() with its arguments packed: what to replay, and how to run it."""
    names, traces, several = _trace_list(grid.trace)
    capacities, hbm = _capacity_list(grid.capacities, grid.hbm)
    if grid.block_size is not None:
        resolve_block_size(grid.block_size)  # a whole number of tokens from 1 (ConfigError naming it otherwise)
    policy_list = _policy_list(grid.policies)
    engine = resolve_engine(grid.engine)  # once, here: workers get the engine that runs
    if grid.kv_groups is not None:
        engines = {spec.name for spec, _ in policy_list}
        if engines not in ({"vllm"}, {"radix"}) or hbm is not None:
            raise ConfigError("kv_groups (hybrid semantics) are one engine's hybrid cache: sweep policy vllm "
                              "(vLLM's hybrid manager) or radix (SGLang's UnifiedRadixCache), one of them, without hbm; "
                              f"got {', '.join(sorted(engines))}")
    plan = _Plan(policy_list, hbm, () if grid.kv_groups is None else (("kv_groups", tuple(grid.kv_groups)),),
                 lru_curve=engine == "compiled" and hbm is None)  # LRU's whole curve: one pass (analysis/mrc.py)
    per_trace = []
    for t, tr in enumerate(traces):
        caps = auto_capacities(tr.num_blocks) if isinstance(capacities, str) else capacities
        size = resolve_block_size(grid.block_size, tr)
        warmup = warmup_count(len(tr), grid.warmup_fraction)
        per_trace.append({"trace": names[t], "source": tr.source, "block_size": size, "num_requests": len(tr),
                          "window": window_text(warmup, len(tr))})
        plan.add_trace(caps, dict(trace=t, block_size=size, engine=engine, warmup_fraction=float(grid.warmup_fraction)))
    outputs = run(plan.tasks, traces, executor=execution.executor, jobs=execution.jobs,
                  ray_address=execution.ray_address, progress=labelled(execution.progress, "replays"))
    results = plan.gather(outputs, names, several)
    warmup_fraction = float(grid.warmup_fraction)
    if not several:
        info = per_trace[0]
        return SweepResult(trace=traces[0].source, block_size=info["block_size"], warmup_fraction=warmup_fraction,
                           window=info["window"], num_requests=info["num_requests"], results=results)
    sizes = {info["block_size"] for info in per_trace}
    return SweepResult(trace=names, traces=per_trace, block_size=sizes.pop() if len(sizes) == 1 else None,
                       warmup_fraction=warmup_fraction, results=results)


def _capacity_list(capacities, hbm) -> tuple:
    """(capacities, hbm) checked: "auto" or block counts from 1; with hbm, DRAM tier sizes from 0."""
    if (isinstance(capacities, str) and capacities != "auto") or not isinstance(capacities, (str, list, tuple, range)) \
            and not hasattr(capacities, "tolist"):
        raise ConfigError(f"capacities must be a list of block counts or 'auto', got {capacities!r}")
    if hbm is not None:
        hbm = check_capacity(hbm)
        if isinstance(capacities, str):
            raise ConfigError("with hbm, the capacities are DRAM tier sizes: give them (block counts, 0 for none)")
        tiers = []
        for c in capacities:
            if isinstance(c, bool) or int(c) != c or c < 0:
                raise ConfigError(f"a DRAM tier size must be a whole number of blocks >= 0, got {c!r}")
            tiers.append(int(c))
        capacities = tiers
        if not capacities:
            raise ConfigError("no capacities to sweep")
    elif not isinstance(capacities, str):
        capacities = [check_capacity(c) for c in capacities]
        if not capacities:
            raise ConfigError("no capacities to sweep")
    return capacities, hbm


class _Plan:
    """A sweep's tasks, and where each one's rows go in the grid of results."""

    def __init__(self, policy_list: list, hbm: int | None, hybrid: tuple, lru_curve: bool):
        self.policy_list, self.hbm, self.hybrid, self.lru_curve = policy_list, hbm, hybrid, lru_curve
        self.tasks: list[Task] = []
        self.slots: list[list] = []  # per task: [grid position], or [(capacities, [(capacity, position)])] for a curve
        self.rows = 0

    def add_trace(self, caps, common: dict):
        """One trace's tasks: a replay per (policy, parameters, capacity), or one LRU curve for every lru entry."""
        hbm = self.hbm
        curve_rows = []
        for spec, params in self.policy_list:
            # A policy that ignores capacity (the infinite ceiling) needs one run, not one per capacity.
            for c in (caps[-1:] if spec.capacity == "ignored" else caps):
                spec.sizes(c if hbm is None else hbm, **params)  # fail fast on impossible sizes, before any replay runs
                if self.lru_curve and spec.name == "lru":
                    curve_rows.append((c, self.rows))
                elif hbm is not None:
                    tiers = (("tiers", f"dram={c}" if c > 0 else None),)
                    self.tasks.append(Task("replay", policy=spec.name, params=tuple(params.items()), capacity=hbm,
                                           options=tiers, **common))
                    self.slots.append([self.rows])
                else:
                    self.tasks.append(Task("replay", policy=spec.name, params=tuple(params.items()), capacity=c,
                                           options=self.hybrid, **common))
                    self.slots.append([self.rows])
                self.rows += 1
        if curve_rows:
            # One pass serves every lru entry of this trace (lru listed twice shares it too).
            caps_needed = tuple(sorted({c for c, _ in curve_rows}))
            self.tasks.append(Task("lru-curve", capacities=caps_needed, **common))
            self.slots.append([(caps_needed, curve_rows)])

    def gather(self, outputs, names: list[str], several: bool) -> list:
        """The tasks' rows in grid order."""
        results: list = [None] * self.rows
        for task, slot, rows in zip(self.tasks, self.slots, outputs):
            if task.kind == "lru-curve":
                caps_needed, curve_rows = slot[0]
                by_capacity = dict(zip(caps_needed, rows))
                for c, position in curve_rows:
                    results[position] = _with_trace(dict(by_capacity[c]), names[task.trace], several)
            else:
                results[slot[0]] = _with_trace(rows[0], names[task.trace], several)
        return results


def _with_trace(row: dict, name: str, several: bool) -> dict:
    if not several:
        return row
    return {"trace": name, **row}


def points_to_rows(results: list[dict]) -> list[dict]:
    """Rows for the terminal table: params packed into one printable label (machine outputs use
    SweepResult.rows(), the tidy table)."""
    rows = []
    for r in results:
        row = dict(r)
        row["params"] = params_label(r["params"])
        row.pop("counters", None)
        prompt = r.get("total_prompt_tokens") or 0
        for cause in ("first_use", "evicted", "behind_hole"):  # the miss account's main causes, as shares
            tokens = r.get(f"miss_{cause}_tokens")
            row[f"{cause}_share"] = tokens / prompt if tokens is not None and prompt else "-"
        rows.append(row)
    return rows
