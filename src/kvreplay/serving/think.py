"""Think times: how long a closed-loop client waits after an answer before its next request
(docs/sessions.md, "Think time").

``--think-time`` takes ``trace`` (the default: each format's recorded or estimated think time,
serving/closed.py) or a distribution, every duration with its unit, drawn per request (seeded):

- ``const:2s``: always 2 s;
- ``exp:5s``: exponential with mean 5 s;
- ``lognormal:5s,1.0``: log-normal with median 5 s and sigma 1.0 (the standard deviation of the
  logarithm);
- ``uniform:1s,9s``: uniform between 1 s and 9 s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

TRACE = "trace"
KINDS = ("const", "exp", "lognormal", "uniform")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s|m|min|h)\s*$")
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_USAGE = "trace, const:2s, exp:5s, lognormal:5s,1.0 or uniform:1s,9s (durations with their unit)"


def _duration(text: str, spec: str) -> float:
    found = _DURATION.match(text)
    if not found:
        raise ConfigError(f"think_time (--think-time) {spec!r}: {text.strip()!r} is not a duration with its unit "
                          f"(2s, 500ms, 1m); expected {_USAGE}")
    seconds = float(found.group(1)) * _SCALE[found.group(2)]
    if not math.isfinite(seconds):
        raise ConfigError(f"think_time (--think-time) {spec!r}: not a finite duration")
    return seconds


@dataclass(frozen=True)
class ThinkTime:
    """A think-time distribution (kind, its parameters in seconds; sigma for lognormal)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def draw(self, n: int, seed: int) -> np.ndarray:
        """n think times in seconds, seeded."""
        rng = np.random.default_rng([seed, 7919])  # (its own stream: not the arrivals' or the routers')
        if self.kind == "const":
            return np.full(n, self.a)
        if self.kind == "exp":
            return rng.exponential(self.a, size=n)
        if self.kind == "lognormal":
            return self.a * np.exp(self.b * rng.standard_normal(n))
        return rng.uniform(self.a, self.b, size=n)

    def mean(self) -> float:
        if self.kind == "lognormal":
            return self.a * math.exp(self.b ** 2 / 2)
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def text(self) -> str:
        if self.kind == "const":
            return f"always {self.a:g} s"
        if self.kind == "exp":
            return f"exponential, mean {self.a:g} s"
        if self.kind == "lognormal":
            return f"log-normal, median {self.a:g} s, sigma {self.b:g} (mean {self.mean():.3g} s)"
        return f"uniform from {self.a:g} s to {self.b:g} s"


def parse(spec) -> ThinkTime | None:
    """None for ``trace`` (or None); else the distribution ``spec`` names (module docstring)."""
    if spec is None:
        return None
    if isinstance(spec, ThinkTime):
        return spec
    text = str(spec).strip()
    if text.lower() == TRACE:
        return None
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS or not rest.strip():
        raise ConfigError(f"think_time (--think-time) must be {_USAGE}, got {spec!r}")
    parts = [p for p in rest.split(",")]
    want = {"const": 1, "exp": 1, "lognormal": 2, "uniform": 2}[kind]
    if len(parts) != want:
        raise ConfigError(f"think_time (--think-time) {spec!r}: {kind} takes {want} value{'s' if want > 1 else ''} "
                          f"({_USAGE})")
    a = _duration(parts[0], text)
    if kind == "lognormal":
        try:
            sigma = float(parts[1])
        except ValueError:
            raise ConfigError(f"think_time (--think-time) {spec!r}: sigma must be a number, got {parts[1]!r}") from None
        if not (math.isfinite(sigma) and sigma >= 0) or not a > 0:
            raise ConfigError(f"think_time (--think-time) {spec!r}: the median must be > 0 and sigma a number >= 0")
        return ThinkTime(kind, a, sigma)
    if kind == "uniform":
        b = _duration(parts[1], text)
        if b < a:
            raise ConfigError(f"think_time (--think-time) {spec!r}: the upper end is below the lower one")
        return ThinkTime(kind, a, b)
    return ThinkTime(kind, a)
