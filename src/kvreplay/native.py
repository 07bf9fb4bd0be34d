"""The compiled core: ``kvreplay._core``, C that ``pip install`` builds with the machine's compiler
(or that a wheel brings).

Policies' compiled operations, the replay drivers, the one-pass analysis kernels (the LRU curve,
trace statistics, the synthetic generator's loops) and the serving simulator's loop are C
(``*.c`` beside the Python module each belongs to; shared headers in ``include/``). Python owns
every array; the C code works on them in place, called through ctypes (which releases the GIL, so
threads run replays side by side). Nothing compiles at run time: the first call is as fast as the
thousandth (docs/performance.md, "The compiled core").

Without the core (installed where no C compiler was, or ``KVREPLAY_NO_CORE=1``) kvreplay still
runs: replays, sweeps, ``mrc``, ``stats`` and ``synth`` take the plain-Python reference engine,
which gives the same results, slower; the serving simulator is C only and refuses with a
ConfigError (:func:`require`). The first fallback tells the notice listener once (the CLI prints
one line on stderr; without a listener, a RuntimeWarning).

- :func:`available`: whether the core is loaded (loading it on first ask). In a development tree
  (setup.py above the package, the ``.c`` sources beside it) a build of other sources is an error
  that says how to rebuild, never a silent fallback.
- :func:`require`: the core, or a ConfigError naming what needs it.
- :func:`use_core`: asked where a compiled path could fall back to Python: False (and the
  notice, once) when the core is not there.
- :func:`lib`: the loaded library.
- :func:`slots`: a layout's slot indices as module constants (``Absent`` without the core).
- :func:`layout`: a struct's fields (name, dtype) and the slot names of its slot arrays, as the C
  side declares them (``KV_LAYOUT``): Python sizes and reads the arrays by these names.
- :func:`bind`: the (address, length) record of a state namedtuple, in its layout's order, with
  every field checked (present, 1-D, contiguous, of the declared dtype).
- :func:`ptr`: an array's address, for a ctypes call.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import warnings
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import ConfigError

PACKAGE = Path(__file__).resolve().parent
#: a development tree (setup.py above src/kvreplay): its build of the core must be of its C sources
DEVELOPMENT = (PACKAGE.parent.parent / "setup.py").is_file()
DTYPES = {"i1": np.int8, "i4": np.int32, "u4": np.uint32, "i8": np.int64, "f8": np.float64}
POINTER, COUNT = ctypes.c_void_p, ctypes.c_int64  # the two argument types of the core's functions
#: a pass's progress callback, void (*)(i64 done, i64 total) (include/progress.h)
PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)


def callback(told):
    """(the C function, its address as a POINTER argument) for `told(done, total)`, or (None, None)
    (NULL) without one. Keep the first alive while C may call it."""
    if told is None:
        return None, None
    fn = PROGRESS(told)
    return fn, ctypes.cast(fn, ctypes.c_void_p)
#: set to 1: run as if the core were not built (the fallback's tests; a user comparing engines)
DISABLE_VARIABLE = "KVREPLAY_NO_CORE"
HOW_TO_BUILD = "pip install compiles it where a C compiler (gcc or clang) is, and a wheel brings it compiled"
NOTICE = ("the compiled core is not installed (there was no C compiler where kvreplay was built): run, sweep, mrc, "
          "stats, synth and demo run on the plain-Python engine, with the same results, their replays 50-100x "
          "slower (whole commands 3-15x on a 12,000-request trace); simulate and plan need the core")

_lib = None
_missing: str | None = None  # why the core is not loaded ("is not built", ...), once that is known
_notice_listener = None
_noticed = False


class _PolicyTable(ctypes.Structure):
    """The first fields of a C ``KvPolicy`` (include/policy.h): its name and layout."""

    _fields_ = [("name", ctypes.c_char_p), ("layout", ctypes.c_char_p)]


def sources_hash(root: Path = PACKAGE) -> str | None:
    """sha256 over the package's .c and .h files, by path and content (setup.py compiles in the
    same); None when the sources are not there (an installed package)."""
    paths = sorted(p for p in root.rglob("*") if p.suffix in (".c", ".h") and p.is_file())
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def available() -> bool:
    """Whether the compiled core is loaded; loads it on the first ask. A development tree's build of
    other C sources than its own is a ConfigError (rebuild it), not a fallback."""
    global _lib, _missing
    if _lib is not None:
        return True
    if _missing is not None:
        return False
    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        _missing = f"is turned off ({DISABLE_VARIABLE}={os.environ[DISABLE_VARIABLE]})"
        return False
    spec = importlib.util.find_spec("kvreplay._core")
    if spec is None or not spec.origin:
        _missing = f"is not built: {HOW_TO_BUILD}"
        return False
    try:
        loaded = ctypes.CDLL(spec.origin)
    except OSError as e:  # a build for another machine or Python
        _missing = f"does not load ({e}): {HOW_TO_BUILD}"
        return False
    built = _string(loaded, "kv_source_hash")
    current = sources_hash() if DEVELOPMENT else None  # (an installed package is what pip built together)
    if current is not None and built != current:
        raise ConfigError("kvreplay's compiled core was built from other C sources than these: rebuild it "
                          "with python setup.py build_ext --inplace (or pip install .)")
    _lib = loaded
    return True


def require(what: str) -> ctypes.CDLL:
    """The core, for `what` (e.g. "the serving simulator"), which has no Python engine: a
    ConfigError saying so when the core is not there."""
    if not available():
        raise ConfigError(f"{what} needs kvreplay's compiled core (kvreplay._core), which {_missing}")
    return _lib


def lib() -> ctypes.CDLL:
    """The compiled core, loaded once (a ConfigError when it is not there)."""
    if not available():
        raise ConfigError(f"kvreplay's compiled core (kvreplay._core) {_missing}")
    return _lib


def set_notice_listener(listener) -> None:
    """listener(text) is told, once per process, the first time a compiled path falls back to
    Python (the CLI prints it); None: a RuntimeWarning instead."""
    global _notice_listener
    _notice_listener = listener


def use_core() -> bool:
    """Whether to take a compiled path: True when the core is there; otherwise False, after telling
    the notice listener (once per process) that the plain-Python engine runs instead."""
    global _noticed
    if available():
        return True
    if not _noticed:
        _noticed = True
        if _notice_listener is not None:
            _notice_listener(NOTICE)
        else:
            warnings.warn(f"kvreplay: {NOTICE}", RuntimeWarning, stacklevel=3)
    return False


@dataclass(frozen=True)
class Layout:
    """A C struct's fields in order, and the slot names of its slot arrays (e.g. meta)."""

    fields: tuple[tuple[str, type], ...]
    slots: dict

    def slot(self, array: str):
        """The slot indices of `array` as a namedtuple: ``layout.slot("meta").SIZE`` (``.names``: in order)."""
        names = self.slots[array]
        cls = namedtuple(f"{array}_slots", names)
        cls.names = property(lambda s: s._fields)
        return cls(*range(len(names)))


def parse_layout(text: str) -> Layout:
    """" a:i4 b:i8 | meta= X Y" -> Layout((("a", int32), ("b", int64)), {"meta": ("X", "Y")})."""
    head, *sections = text.split("|")
    fields = []
    for item in head.split():
        name, _, dtype = item.partition(":")
        fields.append((name, DTYPES[dtype]))
    slots = {}
    for section in sections:
        name, _, names = section.partition("=")
        slots[name.strip()] = tuple(names.split())
    return Layout(tuple(fields), slots)


@lru_cache(maxsize=None)
def policy(symbol: str) -> tuple[int, Layout]:
    """(address of the C table ``kv_policy_<symbol>``, its state's layout)."""
    table = _PolicyTable.in_dll(lib(), f"kv_policy_{symbol}")
    return ctypes.addressof(table), parse_layout(table.layout.decode())


class Absent:
    """The slots of a layout when the core is not there: every name is None and there are none in
    all. Without the core no compiled state is ever made, so no slot is ever read."""

    names = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def __len__(self) -> int:
        return 0


def slots(symbol: str, array: str, *, of_policy: bool = False):
    """The slot indices of `array` in the core's layout `symbol` (``kv_layout_<symbol>``, or with
    of_policy the state of ``kv_policy_<symbol>``), for a module's constants; Absent() without the
    core, so that the module still imports for the reference engine."""
    if not available():
        return Absent()
    return (policy(symbol)[1] if of_policy else layout(symbol)).slot(array)


@lru_cache(maxsize=None)
def layout(symbol: str) -> Layout:
    """The layout string ``kv_layout_<symbol>`` the core exports."""
    return parse_layout(_string(lib(), f"kv_layout_{symbol}"))


def _string(library, symbol: str) -> str:
    """An exported ``const char name[]`` (an array, not a pointer)."""
    return ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(library, symbol))).decode()


def bind(state, layout: Layout, what: str = "state", inputs=()) -> np.ndarray:
    """The int64 record (address, length per field, in the layout's order) a C function takes for
    `state` (a namedtuple of arrays, or a dict); the arrays must stay alive while C uses them.
    Fields named in `inputs` are only read by C, so they may be read-only (a trace's arrays)."""
    get = state.get if isinstance(state, dict) else (lambda name: getattr(state, name, None))
    record = np.empty(2 * len(layout.fields), dtype=np.int64)
    for k, (name, dtype) in enumerate(layout.fields):
        a = get(name)
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != 1 or not a.flags.c_contiguous:
            got = "missing" if a is None else f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}"
            raise ConfigError(f"{what}: field {name!r} must be a contiguous 1-D {np.dtype(dtype).name} array ({got})")
        if not a.flags.writeable and name not in inputs:
            raise ConfigError(f"{what}: field {name!r} is read-only")
        record[2 * k] = a.ctypes.data
        record[2 * k + 1] = a.shape[0]
    return record


def ptr(a: np.ndarray) -> int:
    """The address of a contiguous array's first element."""
    return a.ctypes.data


@lru_cache(maxsize=None)
def function(name: str, restype, *argtypes):
    """A core function with its ctypes signature (POINTER, c_void_p, for pointers; COUNT, c_int64,
    for counts)."""
    fn = getattr(lib(), name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


#: The allocations the command line gives pages of their own (fix_mmap_threshold): 4 MiB and more.
MMAP_THRESHOLD = 4 << 20


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> None:
    """Allocations of `nbytes` and more get pages of their own, returned when freed (glibc; native.c
    says why: freed arrays under glibc's moving threshold stay resident). A process setting: the
    command line makes it, before it reads a trace; nothing without the core."""
    if available():
        function("kv_fix_mmap_threshold", COUNT, COUNT)(nbytes)


def release_free_memory() -> None:
    """The heap's free pages back to the system (glibc; after a trace is read); nothing without
    the core."""
    if available():
        function("kv_release_free_memory", COUNT)()
