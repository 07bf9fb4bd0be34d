"""Values checked where they are resolved, for the CLI and the Python API alike: each check names
the argument the way the user gave it ("max_instances (--max-instances)") and says what it must
be, raising ConfigError (exit 2 on the command line). No check converts a string into a number:
a capacity given as "10" is refused, not read."""

from __future__ import annotations

import difflib
import math
import numbers

from .errors import ConfigError


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(value, name: str, *, lo: float = 0.0, hi: float = math.inf, lo_open: bool = True,
           unit: str = "") -> float:
    """`value` as a float: a finite number above `lo` (or at it when not `lo_open`) and at most
    `hi`, else ConfigError naming `name`."""
    if not _real(value) or not math.isfinite(float(value)):
        raise ConfigError(f"{name} must be a finite number{unit and ' of ' + unit}, got {value!r}")
    v = float(value)
    if v < lo or (lo_open and v == lo) or v > hi:
        low = f"above {lo:g}" if lo_open else f"at least {lo:g}"
        high = "" if hi == math.inf else f" and at most {hi:g}"
        raise ConfigError(f"{name} must be {low}{high}{' ' + unit if unit else ''}, got {value!r}")
    return v


def whole(value, name: str, lo: int = 1, hi: int | None = None) -> int:
    """`value` as an int from `lo` to `hi`: an integer (or an integral float), not a bool or a
    string, else ConfigError naming `name`."""
    ok = _real(value) and (isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer()))
    if not ok or int(value) < lo or (hi is not None and int(value) > hi):
        span = f"from {lo:,} to {hi:,}" if hi is not None else f">= {lo:,}"
        raise ConfigError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


def items(values, name: str, *, single=(str,)) -> list:
    """A non-empty list from `values` (a list, tuple or other iterable; one value of a `single`
    type is a list of one), else ConfigError naming `name`."""
    if values is None:
        raise ConfigError(f"{name} is empty: give at least one value")
    if isinstance(values, single) or _real(values):
        values = [values]
    try:
        out = list(values)
    except TypeError:
        raise ConfigError(f"{name} must be a list, got {values!r}") from None
    if not out:
        raise ConfigError(f"{name} is empty: give at least one value")
    return out


def one_of(value, known, name: str, what: str = "name") -> str:
    """The entry of `known` equal to `value` ignoring case, else ConfigError naming `name`, with
    the closest known entries ("did you mean") and all of them."""
    known = list(known)
    if isinstance(value, str):
        index = {k.lower(): k for k in known}
        hit = index.get(value.strip().lower())
        if hit is not None:
            return hit
        close = difflib.get_close_matches(value.strip().lower(), list(index), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(index[c] for c in close)}?" if close else ""
    else:
        hint = ""
    raise ConfigError(f"{name}: unknown {what} {value!r}{hint} (known: {', '.join(known)})")
