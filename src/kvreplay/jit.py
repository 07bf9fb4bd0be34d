"""numba in one place: the analysis kernels it compiles, their disk cache, and the notice shown
while one compiles.

The replay engines, the policies and the serving simulator are C (native.py): nothing of theirs
compiles at run time. numba compiles the few analysis passes that remain Python loops (the
one-pass LRU curve, trace statistics, the synthetic workload generator), and only when one is
first used: importing kvreplay does not import numba.

- :func:`kernel`: a standalone compiled function, ``njit(cache=True, nogil=True)`` made on its
  first call (or the plain Python function without numba: same results, slower).
- :func:`helper`: a function a kernel calls (numba pastes it into the caller). It needs numba when
  its module is imported, so only modules imported on first use define helpers.
- :func:`key_cache_on_sources`: numba keys a cached kernel on its own file; a kernel that calls
  code from other files is keyed on those too, so an edit never runs a stale kernel.
- :func:`ensure_compiled` and :func:`set_compile_listener`: compile (or load from the disk
  cache) before the first call, and tell the listener when that takes long enough for a person
  to notice. Library code never prints: the CLI installs the listener.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import threading
from contextlib import contextmanager

def _have_numba() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # (a None in sys.modules: numba blocked)
        return False


HAVE_NUMBA = _have_numba()

# Loading a kernel from numba's disk cache takes well under this; a compile takes longer.
# None: never tell (the test suite's in-process runs, whose numba cache may be cold or warm).
NOTICE_AFTER_S = 0.4
_listener = None


class Kernel:
    """A kernel compiled with numba on first use (see :func:`kernel`)."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self._dispatcher = None
        self._sources = None

    def dispatcher(self):
        """The numba dispatcher (made now if it was not), or the plain function without numba."""
        if self._dispatcher is None:
            if not HAVE_NUMBA:
                self._dispatcher = self.py_func
            else:
                from numba import njit

                self._dispatcher = njit(cache=True, nogil=True)(self.py_func)
                if self._sources is not None:
                    _key_on(self._dispatcher, self._sources)
        return self._dispatcher

    def __call__(self, *args):
        return self.dispatcher()(*args)


def kernel(fn) -> Kernel:
    """A standalone compiled kernel: ``njit(cache=True, nogil=True)``, made on its first call where
    numba is installed; the plain function otherwise (same results, slower)."""
    return Kernel(fn)


def helper(fn=None, *, inline: bool = True):
    """A function called from compiled code (``@helper`` or ``@helper(inline=False)``).

    inline=True: numba pastes the body into each caller. inline=False: compiled once as its own
    function with ``_nrt=False`` (helpers never allocate). Without numba: the plain function.
    """
    if fn is None:
        return lambda f: helper(f, inline=inline)
    if not HAVE_NUMBA:
        return fn
    from numba import njit

    if inline:
        return njit(nogil=True, _nrt=False, inline="always")(fn)
    return njit(nogil=True, _nrt=False)(fn)


def key_cache_on_sources(kernel, paths) -> None:
    """Make `kernel`'s on-disk cache depend on the source of every file in `paths` (numba keys a
    cached function on its own file only). Relies on numba internals; where they differ, caching
    is unchanged."""
    paths = list(paths)
    if isinstance(kernel, Kernel):
        kernel._sources = paths
        if kernel._dispatcher is not None and kernel._dispatcher is not kernel.py_func:
            _key_on(kernel._dispatcher, paths)
        return
    if HAVE_NUMBA:
        _key_on(kernel, paths)


def _key_on(dispatcher, paths) -> None:
    try:
        cache_file = dispatcher._cache._cache_file
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
    exited when it ends (what: e.g. "the one-pass LRU curve kernel"); None: nobody is told."""
    global _listener
    _listener = listener


@contextmanager
def _notice(what: str):
    """Tell the listener about `what` once numba has really been compiling for NOTICE_AFTER_S.

    The clock starts at numba's own "numba:compile" event, which a load from the disk cache never
    fires: however slow a busy machine makes a cache load, it is not announced as a compile."""
    listener = _listener
    if listener is None or NOTICE_AFTER_S is None:
        yield
        return
    from numba.core import event

    shown = []
    lock = threading.Lock()
    timers = []

    def show():
        with lock:
            if shown is not None:
                cm = listener(what)
                cm.__enter__()
                shown.append(cm)

    class _OnCompile(event.Listener):
        def on_start(self, _event):
            with lock:
                if timers or shown is None:
                    return
                timer = threading.Timer(NOTICE_AFTER_S, show)
                timer.daemon = True
                timers.append(timer)
            timer.start()

        def on_end(self, _event):
            pass

    try:
        with event.install_listener("numba:compile", _OnCompile()):
            yield
    finally:
        with lock:
            for timer in timers:
                timer.cancel()
            for cm in shown:
                cm.__exit__(None, None, None)
            shown = None  # a timer that fires late shows nothing


def int_dict():
    """An empty int64 -> int64 dictionary a kernel can fill and keep between calls: numba's typed
    Dict, or a plain dict without numba."""
    if not HAVE_NUMBA:
        return {}
    from numba import typed, types

    return typed.Dict.empty(key_type=types.int64, value_type=types.int64)


def ensure_compiled(kernel, args, what: str) -> None:
    """Compile `kernel` for these arguments' types (or load it from the disk cache) now, telling
    the compile listener if that takes a while. Calling the kernel afterwards does no typing work."""
    if not HAVE_NUMBA:
        return
    dispatcher = kernel.dispatcher() if isinstance(kernel, Kernel) else kernel
    if not hasattr(dispatcher, "overloads"):
        return
    import numba

    sig = tuple(numba.typeof(a) for a in args)
    if sig in dispatcher.overloads:
        return
    with _notice(what):
        dispatcher.compile(sig)
