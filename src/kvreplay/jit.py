"""numba in one place: kernel decorators, the disk-cache key and the notice shown while a kernel compiles.

Everything compiled in kvreplay goes through here, so there is one answer to "what is compiled,
how, and when is the user told":

- :func:`kernel`: a standalone compiled function (a reader's parse pass, the replay driver, an
  analysis pass): ``njit(cache=True, nogil=True)``, or the plain Python function without numba.
- :func:`helper`: a function that compiled code calls (a policy's queue operation, a list
  splice). By default numba pastes its body into each caller (IR-level inlining: no call, the
  fastest code); ``inline=False`` compiles it as its own function and lets LLVM decide. IR
  inlining copies the callee's IR once per call site, and its whole scope once per basic
  block, so it grows quadratically with nesting: nested S3FIFO helpers took 80 s to compile.
  The rule (docs/performance.md, "Cold start"): paste what runs on every access; make loops on
  rarer paths (evicting, compacting, splicing a list) functions of their own.
- :func:`key_cache_on_sources`: numba keys a cached kernel on its own file; a kernel that
  calls code from other files is keyed on those too, so an edit never runs a stale kernel.
- :func:`ensure_compiled` and :func:`set_compile_listener`: compile (or load from the disk
  cache) before the first call, and tell the listener when that takes long enough for a person
  to notice. Library code never prints: the CLI installs the listener.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager

try:
    import numba
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    HAVE_NUMBA = False

# Loading a kernel from numba's disk cache takes well under this; a compile takes longer.
# None: never tell (the test suite's in-process runs, whose numba cache may be cold or warm).
NOTICE_AFTER_S = 0.4
_listener = None


def kernel(fn):
    """A standalone compiled kernel: ``njit(cache=True, nogil=True)`` where numba is installed,
    the plain function otherwise (same results, slower)."""
    return njit(cache=True, nogil=True)(fn) if HAVE_NUMBA else fn


def helper(fn=None, *, inline: bool = True):
    """A function called from compiled code (``@helper`` or ``@helper(inline=False)``).

    inline=True: numba pastes the body into each caller (a real call would pass every array
    of a state tuple, seven words each). inline=False: compiled once as its own function with
    ``_nrt=False`` (helpers never allocate, and reference counting each array argument would
    cost more than the operation); LLVM inlines it where its cost model says so.
    """
    if fn is None:
        return lambda f: helper(f, inline=inline)
    if not HAVE_NUMBA:
        return fn
    if inline:
        return njit(nogil=True, _nrt=False, inline="always")(fn)
    return njit(nogil=True, _nrt=False)(fn)


def key_cache_on_sources(kernel, paths) -> None:
    """Make `kernel`'s on-disk cache depend on the source of every file in `paths`.

    numba keys a cached function on its own file only, but the replay driver calls each
    policy's operations from other modules: without this, editing a policy would keep running
    the stale cached kernel. Relies on numba internals; where they differ, caching is unchanged.
    """
    if not HAVE_NUMBA:
        return
    try:
        cache_file = kernel._cache._cache_file
        stamp = cache_file._source_stamp
    except AttributeError:  # pragma: no cover - other numba versions
        return
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            digest.update(f.read())
    cache_file._source_stamp = (stamp, digest.hexdigest())


def set_compile_listener(listener) -> None:
    """listener(what) -> a context manager entered when a compile has taken NOTICE_AFTER_S and
    exited when it ends (what: e.g. "the s3fifo kernel"); None: nobody is told."""
    global _listener
    _listener = listener


@contextmanager
def _notice(what: str):
    listener = _listener
    if listener is None or NOTICE_AFTER_S is None:
        yield
        return
    shown = []
    lock = threading.Lock()

    def show():
        with lock:
            if shown is not None:
                cm = listener(what)
                cm.__enter__()
                shown.append(cm)

    timer = threading.Timer(NOTICE_AFTER_S, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            for cm in shown:
                cm.__exit__(None, None, None)
            shown = None  # a timer that fires late shows nothing


def ensure_compiled(kernel, args, what: str) -> None:
    """Compile `kernel` for these arguments' types (or load it from the disk cache) now, telling
    the compile listener if that takes a while. Calling the kernel afterwards does no typing work."""
    if not HAVE_NUMBA or not hasattr(kernel, "overloads"):
        return
    sig = tuple(numba.typeof(a) for a in args)
    if sig in kernel.overloads:
        return
    with _notice(what):
        kernel.compile(sig)
