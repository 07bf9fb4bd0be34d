"""The command line's view of kvreplay.progress: a rich bar per stage on stderr.

A command is given one :class:`Display` (``args.progress``), the callback it passes to the
library. It draws only when stderr is a terminal and ``--quiet`` is not given; otherwise the
command gets None and nothing is drawn or computed for it. A stage appears after
``DELAY_S`` (work that ends sooner shows nothing) with its units done of total, the elapsed time
and the time left. The bars are cleared when the command ends or first writes to stdout, so its
output is never drawn over; lines written to stderr meanwhile (notes, warnings) print above them.
"""

from __future__ import annotations

import sys
import threading
import time

DELAY_S = 0.5


class Display:
    """``display(done, total, what)``: one bar per `what`, in the order the stages start."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.lock = threading.RLock()
        self.started = time.monotonic()
        self.bar = None
        self.tasks: dict[str, int] = {}
        self.state: dict[str, tuple[int, int]] = {}
        self.timer = threading.Timer(DELAY_S, self._show)
        self.timer.daemon = True
        self.closed = False

    def __call__(self, done: int, total: int, what: str = "working") -> None:
        with self.lock:
            if self.closed:
                return
            first = not self.state
            self.state[what or "working"] = (int(done), int(total))
            if first:
                self.timer.start()
            if self.bar is not None:
                self._update(what or "working")

    def _show(self) -> None:
        # rich.progress is imported here, when a bar is drawn: it adds 65 ms to every command's start.
        from rich.console import Console
        from rich.errors import LiveError
        from rich.progress import Progress

        with self.lock:
            if self.closed or self.bar is not None:
                return
            bar = Progress(*_columns(), console=Console(file=self.stream), transient=True, redirect_stdout=False)
            try:
                bar.start()
            except LiveError:  # another display (a compile notice's spinner) is on: try again later
                self.timer = threading.Timer(DELAY_S, self._show)
                self.timer.daemon = True
                self.timer.start()
                return
            self.bar = bar
            self.stdout = sys.stdout
            sys.stdout = _ClosingStdout(self, self.stdout)
            for what in self.state:
                self._update(what)

    def _update(self, what: str) -> None:
        done, total = self.state[what]
        if what not in self.tasks:
            self.tasks[what] = self.bar.add_task(what, total=total)
        self.bar.update(self.tasks[what], completed=done, total=total)

    def stop(self) -> None:
        """Stop drawing and clear the bars (before the command prints anything after them)."""
        with self.lock:
            self.closed = True
            self.timer.cancel()
            if self.bar is not None:
                self.bar.stop()
                self.bar = None

    def close(self) -> None:
        """At the command's end: stop drawing, and give sys.stdout back. (Never from inside a write
        to it: print holds sys.stdout without a reference of its own, so replacing it there crashes.)"""
        self.stop()
        if isinstance(sys.stdout, _ClosingStdout):
            sys.stdout = self.stdout


class _ClosingStdout:
    """sys.stdout while bars are drawn: the command's first output clears them, then goes out."""

    def __init__(self, display: Display, real):
        self._display, self._real = display, real

    def write(self, text):
        self._display.stop()
        return self._real.write(text)

    @property
    def buffer(self):
        self._display.stop()
        return self._real.buffer

    def __getattr__(self, name):
        return getattr(self._real, name)


def _columns() -> list:
    """The bar's columns: stage, bar, done/total (MB for bytes), elapsed, time left."""
    from rich.progress import BarColumn, ProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.text import Text

    class Count(ProgressColumn):
        def render(self, task):
            done, total = int(task.completed), int(task.total or 0)
            if task.description.endswith("bytes") or "bytes " in task.description:
                return Text(f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB")
            return Text(f"{done:,}/{total:,}")

    return [TextColumn("{task.description}"), BarColumn(), Count(), TextColumn("elapsed"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn()]


def display_for(quiet: bool) -> Display | None:
    """The command's display, or None when stderr is not a terminal or with --quiet."""
    if quiet or not sys.stderr.isatty():
        return None
    return Display()
