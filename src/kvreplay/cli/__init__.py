"""Command line: parse arguments, call the public API, render. No replay logic lives here.

One module per command family (replay, traces, info), each command's parser next to its handler;
this module assembles the parser and the one dispatch table. Adding a command touches one module.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings

from ..errors import InvariantError, KvreplayError
from .parser import EXIT_BAD_INPUT, Parser, subcommands
from .progress import display_for

#: Every command and the module of its family (its parser and handler), known without importing
#: them: a command imports its own family only (tests/test_cli_startup.py checks this table).
FAMILY = {
    "run": "replay", "sweep": "replay", "mrc": "replay", "report": "replay", "demo": "replay",
    "simulate": "serving", "plan": "plan", "calibrate-profile": "calibrate",
    "hash": "traces", "convert": "traces", "slice": "traces", "merge": "traces", "stats": "traces", "synth": "traces",
    "diagnose": "diagnose", "policies": "info", "models": "info", "gpus": "info",
}
FAMILIES = ("replay", "serving", "plan", "calibrate", "traces", "diagnose", "info")  # the order of --help
#: commands that run the serving simulator, which has no Python engine: without the compiled core
#: they stop before parsing, saying why (exit 2)
NEEDS_CORE = {"simulate": "kvreplay simulate (the serving simulator, which is C only)",
              "plan": "kvreplay plan (it runs the serving simulator, which is C only)"}


def family(name: str):
    import importlib

    return importlib.import_module(f"{__name__}.{name}")


def command_of(argv: list[str]) -> str | None:
    """The command named on the line: the first argument that is not an option (the top level
    takes no option with a value), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: with a known command, its family's commands only (their options may
    list registries); with --version alone, none; otherwise (help, a mistake) every command."""
    from ..version import __version__

    parser = Parser(prog="kvreplay", description="Replay LLM request traces through a KV prefix cache.")
    parser.add_argument("--version", action="version", version=f"kvreplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = None if argv is None else command_of(argv)
    if command in FAMILY:
        names = [FAMILY[command]]
    elif argv is not None and command is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        names = []
    else:
        names = FAMILIES
    for name in names:
        for add in family(name).PARSERS:
            add(sub)
    for command in subcommands(parser).values():
        command.add_argument("--quiet", "-q", action="store_true",
                             help="no progress bars or notes on stderr (warnings and errors still print); progress "
                                  "is drawn only when stderr is a terminal")
    return parser


EXIT_BUG = 3


def main(argv=None) -> int:
    """Entry point of the `kvreplay` command. Exit codes: 0 ok, 2 bad input or options, 3 internal error."""
    warnings.formatwarning = lambda message, category, *a, **k: f"kvreplay: warning: {message}\n"
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_of(argv)
    try:
        if command in FAMILY:  # (--version and --help import nothing more)
            from .. import native

            native.set_notice_listener(lambda text: print(f"kvreplay: note: {text}", file=sys.stderr, flush=True))
            if command in NEEDS_CORE:
                native.require(NEEDS_CORE[command])
        args = build_parser(argv).parse_args(argv)
    except KvreplayError as e:
        print(f"kvreplay: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)  # unwind: temporary output files are removed
    try:
        return _dispatch(args)
    except KvreplayError as e:
        print(f"kvreplay: {e}" if not hasattr(e, "path") else str(e), file=sys.stderr)
        return EXIT_BAD_INPUT
    except InvariantError as e:
        print(f"kvreplay: internal error, please report: {e}", file=sys.stderr)
        return EXIT_BUG
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args) -> int:
    """Run the command with its progress display (None: nothing drawn), cleared before any error
    message or the command's last output."""
    args.progress = display_for(args.quiet)
    try:
        return family(FAMILY[args.command]).COMMANDS[args.command](args)
    finally:
        if args.progress is not None:
            args.progress.close()


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that `finally` blocks and temp-file cleanup run."""


def _terminated(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
