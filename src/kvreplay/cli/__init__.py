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
from . import calibrate, info, plan, replay, serving, traces
from .parser import EXIT_BAD_INPUT, Parser, subcommands
from .progress import display_for

FAMILIES = (replay, serving, plan, calibrate, traces, info)
COMMANDS = {name: handler for family in FAMILIES for name, handler in family.COMMANDS.items()}


def build_parser() -> argparse.ArgumentParser:
    from ..version import __version__

    parser = Parser(prog="kvreplay", description="Replay LLM request traces through a KV prefix cache.")
    parser.add_argument("--version", action="version", version=f"kvreplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        for add in family.PARSERS:
            add(sub)
    for command in subcommands(parser).values():
        command.add_argument("--quiet", "-q", action="store_true",
                             help="no progress bars or notes on stderr (warnings and errors still print); progress "
                                  "is drawn only when stderr is a terminal")
    return parser


EXIT_BUG = 3


class _CompileNotice:
    """Shown while a kernel compiles (kvreplay.jit calls it only when that takes a noticeable
    time): a rich spinner when stderr is a terminal, one line otherwise. Worker processes of a
    sweep inherit it: there it prints the line only when stderr is not a terminal (the main
    process's progress bar owns the terminal)."""

    def __init__(self):
        self.pid = os.getpid()

    def __call__(self, what: str):
        from contextlib import contextmanager

        text = f"compiling {what} (first run only; cached afterwards)…"
        tty = sys.stderr.isatty()

        @contextmanager
        def shown():
            if not tty:
                print(f"kvreplay: {text}", file=sys.stderr, flush=True)
                yield
            elif os.getpid() != self.pid:
                yield
            else:
                from rich.console import Console
                from rich.errors import LiveError

                try:
                    with Console(stderr=True).status(text):
                        yield
                except LiveError:  # a progress bar is already live: say it in a line above it
                    print(f"kvreplay: {text}", file=sys.stderr, flush=True)
                    yield

        return shown()


def main(argv=None) -> int:
    """Entry point of the `kvreplay` command. Exit codes: 0 ok, 2 bad input or options, 3 internal error."""
    from ..jit import set_compile_listener

    warnings.formatwarning = lambda message, category, *a, **k: f"kvreplay: warning: {message}\n"
    args = build_parser().parse_args(argv)
    set_compile_listener(None if args.quiet else _CompileNotice())
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
        return COMMANDS[args.command](args)
    finally:
        if args.progress is not None:
            args.progress.close()


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that `finally` blocks and temp-file cleanup run."""


def _terminated(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
