"""The compiled core: ``kvreplay._core``, C that ``pip install`` builds with the machine's compiler.

Policies' compiled operations, the replay drivers and the serving simulator's loop are C
(``*.c`` beside the Python module each belongs to; shared headers in ``include/``). Python owns
every array; the C code works on them in place, called through ctypes (which releases the GIL, so
threads run replays side by side). Nothing compiles at run time: the first call is as fast as the
thousandth (docs/performance.md, "The compiled core", measured the alternatives).

- :func:`lib`: the loaded library. In a development tree (the ``.c`` sources beside the package)
  it checks that the build is of these sources, and says how to rebuild when it is not.
- :func:`layout`: a struct's fields (name, dtype) and the slot names of its slot arrays, as the C
  side declares them (``KV_LAYOUT``): Python sizes and reads the arrays by these names.
- :func:`bind`: the (address, length) record of a state namedtuple, in its layout's order, with
  every field checked (present, 1-D, contiguous, of the declared dtype).
- :func:`ptr`: an array's address, for a ctypes call.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections import namedtuple
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import ConfigError

PACKAGE = Path(__file__).resolve().parent
DTYPES = {"i1": np.int8, "i4": np.int32, "i8": np.int64, "f8": np.float64}

_lib = None


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


def lib() -> ctypes.CDLL:
    """The compiled core, loaded once."""
    global _lib
    if _lib is None:
        spec = importlib.util.find_spec("kvreplay._core")
        if spec is None or not spec.origin:
            raise ConfigError("kvreplay's compiled core (kvreplay._core) is not built: install kvreplay with "
                              "pip (pip install . or pip install -e .), which compiles it with the machine's "
                              "C compiler (gcc)")
        loaded = ctypes.CDLL(spec.origin)
        built = _string(loaded, "kv_source_hash")
        current = sources_hash()
        if current is not None and built != current:
            raise ConfigError("kvreplay's compiled core was built from other C sources than these: rebuild it "
                              "with pip install -e . (or pip install .)")
        _lib = loaded
    return _lib


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


def function(name: str, restype, *argtypes):
    """A core function with its ctypes signature (c_void_p for pointers, c_int64 for counts)."""
    fn = getattr(lib(), name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn
