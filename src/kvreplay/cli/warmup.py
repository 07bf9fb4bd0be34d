"""--warmup and --cold-start: the warm-up of the serving runs of simulate, plan and report
(serving/warmup.py): their first arrivals are served but not judged."""

from __future__ import annotations

import argparse

from ..errors import ConfigError


def warmup_value(text: str) -> str:
    """--warmup's value, checked as it is parsed: auto, a fraction in [0, 1) or a duration with its
    unit (a bare 600 is refused: "600 what?")."""
    from ..serving.warmup import NAMED, parse

    try:
        parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(NAMED)) from None
    return text


def add_warmup_options(p, what: str) -> None:
    """--warmup and --cold-start (simulate, plan, report, sweep)."""
    p.add_argument("--warmup", type=warmup_value, default=None, metavar="auto|F|DURATION",
                   help=f"the first part of {what}'s arrivals is served but not judged, so a warm server is judged: "
                        "auto (default: as far back as 90%% of the trace's prefix reuse looks), a fraction of the "
                        "arrival span (0.2) or a duration (10m); 0 judges from an empty cache")
    p.add_argument("--cold-start", action="store_true", help="judge every request from an empty cache (--warmup 0)")


def warmup_of(args):
    """The warm-up --warmup / --cold-start ask for ("auto" by default); --warmup-fraction refused."""
    if "warmup_fraction" in getattr(args, "given", ()):
        raise ConfigError("--warmup-fraction is replay's (a share of the requests); serving judges a warm server with "
                          f"--warmup (auto, a fraction of the arrival span such as {args.warmup_fraction or 0.2:g}, or a "
                          "duration such as 10m)")
    if args.cold_start and args.warmup is not None:
        raise ConfigError("give --warmup or --cold-start, not both (--cold-start is --warmup 0)")
    if args.cold_start:
        return 0
    from ..serving.warmup import spec_text

    value = "auto" if args.warmup is None else args.warmup
    spec_text(value)  # checked now: ConfigError names --warmup
    return value


def serving_warmup(args):
    """report and sweep: their serving runs' warm-up (auto by default); --warmup-fraction stays the
    replays' (a share of the requests)."""
    if args.cold_start and args.warmup is not None:
        raise ConfigError("give --warmup or --cold-start, not both (--cold-start is --warmup 0)")
    if args.cold_start:
        return 0
    from ..serving.warmup import spec_text

    value = "auto" if args.warmup is None else args.warmup
    spec_text(value)
    return value
