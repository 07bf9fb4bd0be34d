"""argparse as kvreplay's commands use it: an argument error leads with its message and the flag
it concerns, then one usage line (not the whole usage block), and exits 2; flags are never
abbreviated (``--warmup`` must not quietly mean ``--warmup-fraction``, nor change meaning when a
flag is added)."""

from __future__ import annotations

import argparse
import re
import sys

EXIT_BAD_INPUT = 2

_ARGUMENT = re.compile(r"^argument ([^:/ ]+)(?:/[^: ]+)*: ")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors read ``kvreplay sweep: --capacities: <what is wrong>``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        message = _ARGUMENT.sub(lambda m: f"{m.group(1)}: ", message)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n{self.one_line_usage()}\n")

    def one_line_usage(self) -> str:
        """``usage: kvreplay run TRACE [TRACE ...] [options]  (kvreplay run --help: every option)``."""
        if self._subcommands() is not None:
            return f"usage: {self.prog} COMMAND [options]  ({self.prog} --help: the commands)"
        words = [self.prog]
        for action in self._actions:
            if action.option_strings:
                if action.required:
                    words.append(f"{action.option_strings[0]} {action.metavar or action.dest.upper()}")
                continue
            name = action.metavar or action.dest.upper()
            words.append(f"{name} [{name} ...]" if action.nargs in ("+", "*") else name)
        return f"usage: {' '.join(words)} [options]  ({self.prog} --help: every option)"

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown argument is named by the command it was given to, and
        ``namespace.given`` holds the dests of the options given on the command line (a flag
        given its default value is still given: it must apply)."""
        args = sys.argv[1:] if args is None else [str(a) for a in args]
        namespace, extras = self.parse_known_args(args, namespace)
        owner = self._owner(namespace)
        if extras:
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        namespace.given = frozenset(
            action.dest for action in owner._actions for option in action.option_strings
            if any(a == option or (option.startswith("--") and a.startswith(option + "=")) for a in args))
        return namespace

    def _subcommands(self):
        return next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)

    def _owner(self, namespace) -> "Parser":
        sub = self._subcommands()
        chosen = sub.choices.get(getattr(namespace, sub.dest, None)) if sub is not None else None
        return chosen._owner(namespace) if isinstance(chosen, Parser) else self


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by name (for --quiet on each, and for the tests' walk over flags)."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(sub.choices) if sub is not None else {}
