"""How work that takes seconds says how far it has got, without printing: one callback.

Library functions that can run past a second or two take ``progress=None``, a callable
``progress(done, total, what)``:

- ``done`` and ``total`` are whole numbers of units of work, ``0 <= done <= total``;
- ``what`` names the units, plural, and so the stage: ``"replays"``, ``"runs"``,
  ``"configurations"``, ``"requests"``, ``"bytes read"``. A function with several stages
  (a report replays, then simulates) calls it with each stage's own ``what`` in turn;
- it is called from the calling thread: once with ``done=0`` when the total is known, then as
  units finish, the last time with ``done == total``. It never changes a result.

Library code never prints; the command line renders the calls (``kvreplay.cli.progress``: a
rich bar on stderr when it is a terminal, nothing with ``--quiet`` or in a pipe).
"""

from __future__ import annotations

from typing import Iterator, Optional, Protocol


class Progress(Protocol):
    def __call__(self, done: int, total: int, what: str = "", /) -> None: ...


def tell(progress: Optional[Progress], done: int, total: int, what: str) -> None:
    """Call `progress` if there is one."""
    if progress is not None:
        progress(int(done), int(total), what)


def labelled(progress: Optional[Progress], what: str):
    """`progress` reporting every call as `what`, whatever the caller names its units (a stage of
    a larger job), and callable with two arguments ``(done, total)`` too (for code that counts
    without naming its units, such as analysis.executors); None for None."""
    if progress is None:
        return None
    return lambda done, total, *unused: progress(int(done), int(total), what)


def spans(total: int, progress: Optional[Progress], what: str, pieces: int = 100) -> Iterator[tuple[int, int]]:
    """[start, end) ranges that cover 0..total in about `pieces` steps, reporting each as done
    (a one-pass kernel run a slice at a time so that its progress can be told)."""
    step = max(1, -(-total // pieces))
    tell(progress, 0, total, what)
    for start in range(0, total, step):
        end = min(total, start + step)
        yield start, end
        tell(progress, end, total, what)
