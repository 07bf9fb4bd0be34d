"""Quantities with units, parsed exactly and never guessed: sizes ("80GiB"), bandwidths
("64GB/s") and durations ("2s", "50ms").

- **Sizes** are bytes. ``KB, MB, GB, TB, PB`` are powers of 1000 (``80GB`` = 80e9 bytes, as GPU
  datasheets count memory), ``KiB, MiB, GiB, TiB, PiB`` powers of 1024 (``80GiB`` = 80 * 2**30).
  The prefix's case does not matter; the ``B`` must be upper case: a lower-case ``b`` (``80Gb``,
  ``80gb``, ``64Gib``) or ``bit`` is a bit, and a size in bits is refused, never read as bytes.
  A bare number is bytes (the CLI's capacities read a bare number as blocks instead).
- **Bandwidths** are bytes per second: a size unit over ``/s`` (``64GB/s``, ``25GiB/s``).
  ``64Gb/s``, ``64Gbps``, ``64Gbit/s`` are bits and refused, with the figure in bytes offered.
- **Durations** are seconds. Units: ``ns, us (µs), ms, s, m or min, h, d``. A bare number is
  refused (``2000`` could be seconds or milliseconds: "2000 what? write 2000s or 2000ms"), except
  ``0``, which is the same in every unit. The Python API takes numbers in the unit its parameter
  names (``window_s``, ``slo_ttft_ms``) and strings with a unit, parsed here; a string without
  one is refused the same way.
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from fractions import Fraction

from .errors import ConfigError

_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")  # exact decimals, no exponent
_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_BITS = re.compile(r"^([kmgtp]i?)?(b|bits?)(ps|/s)?$", re.IGNORECASE)


def _size_unit(text: str, unit: str) -> int:
    """The bytes in one `unit` ("GiB"); ConfigError naming `text` for bits or an unknown unit."""
    if unit in ("", "B") or (unit[-1:] == "B" and unit[:-1].lower() in _PREFIX):
        return _PREFIX[unit[:-1].lower()] if unit else 1
    if _BITS.match(unit):
        number, prefix = _SIZE.match(text).group(1), unit[0].upper() if unit[0] not in "bB" else ""
        if not prefix:
            raise ConfigError(f"{text.strip()} is in bits; a size is in bytes (B, KB..PB, KiB..PiB)")
        raise ConfigError(f"{text.strip()} is in bits; write {number}{prefix}B or {number}{prefix}iB")
    raise ConfigError(f"not a size: {text!r} (use e.g. 80GiB, 1.5TiB, 500MB; units B, KB..PB, KiB..PiB)")


def parse_size(text) -> int:
    """Bytes in a size such as "80GiB", "1.5TiB", "500 MB" or "4096" (bytes).

    Decimals are exact; a fraction of a byte is rounded down. ConfigError for sizes in bits
    ("80Gb"), unknown units, and sizes below one byte.
    """
    if isinstance(text, bool):
        raise ConfigError(f"not a size: {text!r}")
    if isinstance(text, numbers.Integral):
        value = int(text)
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise ConfigError(f"not a size: {text!r} (use e.g. 80GiB, 1.5TiB, 500MB; units B, KB..PB, KiB..PiB)")
        value = math.floor(Fraction(match.group(1)) * _size_unit(str(text), match.group(2)))
    if value < 1:
        raise ConfigError(f"a size must be at least 1 byte, got {text!r}")
    return value


_BANDWIDTH = re.compile(rf"^\s*{_NUMBER}\s*([a-zA-Z]*)(/s|ps)\s*$")


def parse_bandwidth(text, lo: float = 0.0, hi: float = math.inf, span: str = "a positive finite number") -> float:
    """Bytes per second in "64GB/s", "7 GB/s", "12.5GiB/s"; "inf" for transfers that take no
    time. Bits per second ("64Gb/s", "100Gbps") are refused with the figure in bytes. A figure
    must be positive, finite and from `lo` to `hi` (exactly, before any float overflow), else the
    refusal says it must be `span`."""
    if str(text).strip().lower() in ("inf", "unbounded"):
        return float("inf")
    match = _BANDWIDTH.match(str(text))
    if not match:
        raise ConfigError(f"not a bandwidth: {text!r} (use e.g. 64GB/s, 7GB/s, 25GiB/s, or inf)")
    unit = match.group(2)
    if _BITS.match(unit + match.group(3)) and not unit.endswith("B"):
        prefix = unit[0].upper() + ("i" if unit[1:2].lower() == "i" else "") if unit[0] not in "bB" else ""
        in_bytes = float(Fraction(match.group(1)) / 8)
        raise ConfigError(f"{str(text).strip()} is in bits per second; write {in_bytes:g}{prefix}B/s "
                          "(bytes per second: a bit is an eighth of a byte)")
    if match.group(3) != "/s":
        raise ConfigError(f"not a bandwidth: {text!r} (use e.g. 64GB/s, 7GB/s, 25GiB/s, or inf)")
    try:
        scale = _size_unit(str(text), unit)
    except ConfigError:
        raise ConfigError(f"not a bandwidth: {text!r} (use e.g. 64GB/s, 7GB/s, 25GiB/s, or inf)") from None
    exact, value = Fraction(match.group(1)) * Fraction(scale), float(match.group(1)) * scale
    if not (0 < exact < Fraction(sys.float_info.max) and 0 < value < math.inf and lo <= exact <= hi):
        raise ConfigError(f"a bandwidth must be {span}, got {text!r}")
    return value


_DURATION = re.compile(rf"^\s*{_NUMBER}\s*([a-zA-Zµ]*)\s*$")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
            "h": 3600.0, "d": 86400.0}


def parse_duration(text, what: str = "") -> float:
    """Seconds in a duration with its unit: "2s", "50ms", "1.5h", "5m", "250us", "1d".

    A bare number other than 0 is refused: ``2000 what? write 2000s or 2000ms`` (`what`, e.g.
    the flag, is named first). Negative, infinite and unknown units are refused too."""
    raw = str(text).strip()
    named = f"{what}: " if what else ""
    match = _DURATION.match(raw)
    if not match:
        raise ConfigError(f"{named}expected a duration such as 2s, 50ms or 5m, got {raw!r}")
    number, unit = match.group(1), match.group(2)
    value = float(number)
    if not unit:
        if value == 0:
            return 0.0
        raise ConfigError(f"{named}{raw} what? write {number}s or {number}ms")
    scale = _SECONDS.get(unit) or _SECONDS.get(unit.lower())
    if scale is None:
        raise ConfigError(f"{named}unknown unit {unit!r} in {raw!r} (units: ns, us, ms, s, m, h, d)")
    seconds = value * scale
    if not math.isfinite(seconds):
        raise ConfigError(f"{named}{raw} is not finite")
    return seconds


def seconds_arg(value, name: str) -> float:
    """A Python API duration in seconds: a number (already seconds: the parameter's name says
    `_s`), or a string with a unit ("2s", "50ms"); a string without one is refused."""
    return _duration_arg(value, name, 1.0)


def ms_arg(value, name: str) -> float:
    """As :func:`seconds_arg`, for a parameter in milliseconds (its name says `_ms`)."""
    return _duration_arg(value, name, 1e-3)


def _duration_arg(value, name: str, unit: float) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number or a duration such as '2s', got {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return parse_duration(value, name) / unit
    raise ConfigError(f"{name} must be a number or a duration such as '2s', got {value!r}")


class Seconds(float):
    """The kind of a policy parameter that is a duration (policies.base.Param): a number is
    seconds, a string needs its unit (parse_duration)."""
