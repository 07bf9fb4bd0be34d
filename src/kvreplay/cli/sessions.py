"""--arrivals, --think-time, --sessions and --sessions-list: closed-loop arrivals for simulate, plan
and report (serving/closed.py, serving/lanes.py; docs/sessions.md)."""

from __future__ import annotations

import argparse

from ..errors import ConfigError


def session_counts(text: str) -> list[int]:
    """N,M,...: whole numbers of concurrent sessions >= 1."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(f"every count of concurrent sessions must be a whole number >= 1, "
                                             f"got {part!r}")
        out.append(int(part))
    if not out:
        raise argparse.ArgumentTypeError("give at least one count of concurrent sessions, e.g. 8,16,32")
    return out


def add_closed_options(p, sessions: str) -> None:
    """The closed-loop flags; `sessions`: "one" (simulate: --sessions N and --sessions-list N,M,...),
    "list" (plan: --sessions N,M,...) or "report" (report: --sessions N,M,..., its serving section)."""
    p.add_argument("--arrivals", choices=("open", "closed"), default=None,
                   help="open: each request at its timestamp; closed: a session's next request is sent when its "
                        "previous answer ends, plus its think time, and an agent waits for the subagents it reads "
                        "(default: closed for Claude Code and Agentic Mooncake traces, open for the others)")
    p.add_argument("--think-time", default=None, metavar="trace|DIST",
                   help="closed loop: the think time before each request: trace (default: recorded, else estimated "
                        "from the recorded gaps) or a distribution with units, drawn per request (seeded by --seed): "
                        "const:2s, exp:5s, lognormal:5s,1.0 (median, sigma), uniform:1s,9s")
    if sessions == "one":
        p.add_argument("--sessions", type=int, default=None, metavar="N",
                       help="load as concurrency: N concurrent sessions drawn from the trace's (seeded by --seed), each "
                            "starting the next when it ends (a closed loop)")
        p.add_argument("--sessions-list", type=session_counts, default=None, metavar="N,M,...",
                       help="sweep: TTFT against these numbers of concurrent sessions, per configuration (table and "
                            "--plot)")
    elif sessions == "report":
        p.add_argument("--sessions", type=session_counts, default=None, metavar="N,M,...",
                       help="with --gpu: serve these numbers of concurrent sessions (a closed loop) instead of "
                            "--speedups: per-turn TTFT, session times, Little's law, and with --slo-ttft the capacity")
    else:
        p.add_argument("--sessions", type=session_counts, default=None, metavar="N,M,...",
                       help="plan for these numbers of concurrent sessions (a closed loop) instead of --loads: the "
                            "cheapest deployment per count, and each deployment's capacity in sessions")


def closed_of(args) -> dict:
    """simulate()'s closed-loop keywords (sessions excluded: the callers give them per run)."""
    think = getattr(args, "think_time", None)
    if think is not None:
        from ..serving.think import parse

        parse(think)  # checked now: the error names --think-time
    return {"arrivals": getattr(args, "arrivals", None), "think_time": think}


def check_single(args) -> None:
    """simulate: --sessions with neither a load nor --sessions-list."""
    if args.sessions is not None and args.sessions_list is not None:
        raise ConfigError("give --sessions N (one run) or --sessions-list N,M,... (a sweep), not both")
    if args.sessions is not None and (args.speedup is not None or args.rate is not None):
        raise ConfigError("--sessions is the load of a closed loop: drop --speedup / --rate")
    if args.sessions_list is not None and (args.speedups is not None or args.rates is not None):
        raise ConfigError("give one load axis: --speedups, --rates or --sessions-list")
