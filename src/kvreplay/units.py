"""Sizes with units ("80GiB", "1.5TiB"), parsed exactly: used by byte budgets (analysis/models.py)
and memory tiers (engine/tiers.py)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from .errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_size(text) -> int:
    """Bytes in a size such as "80GiB", "1.5TiB", "500 MB" or "4096" (bytes).

    Units, case-insensitive: B; KB, MB, GB, TB (powers of 1000); KiB, MiB, GiB, TiB (powers of
    1024). Decimals are exact; a fraction of a byte is rounded down. ConfigError for anything
    else, and for sizes below one byte.
    """
    if isinstance(text, bool):
        raise ConfigError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise ConfigError(f"not a size: {text!r} (use e.g. 80GiB, 1.5TiB, 500MB; units B, KB..TB, KiB..TiB)")
        value = math.floor(Fraction(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise ConfigError(f"a size must be at least 1 byte, got {text!r}")
    return int(value)
