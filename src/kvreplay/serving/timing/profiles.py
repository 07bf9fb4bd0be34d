"""Measured time profiles: NVIDIA Dynamo's NPZ profile and a fitted polynomial (docs/profiles.md,
"Measured profile")."""

from __future__ import annotations

import bisect
import json
import math
import os
import zipfile

import numpy as np

from ...errors import ConfigError
from .models import StepBatch, TimeModel

class ProfileError(ConfigError):
    """A measured time profile cannot be used. Names the file and, when there is one, the field:
    ``PATH: FIELD: message`` (like TraceError)."""

    def __init__(self, path, msg: str, field: str | None = None):
        self.path = str(path)
        self.field = field
        self.msg = msg
        super().__init__(f"{self.path}: {field}: {msg}" if field else f"{self.path}: {msg}")


# Dynamo's NPZ profile

#: Where the NPZ rules below were read (docs/profiles.md cites them too).
DYNAMO_SOURCES = {
    "perf_model": "ai-dynamo/dynamo lib/mocker/src/common/perf_model.rs @ f80944a4c0c32d6e8ba9ab7a58a399eae18a053a",
    "scheduler": "ai-dynamo/dynamo lib/mocker/src/scheduler/vllm/core.rs @ 04cc7029664ffeaa071d15a2b0f1d6566f045f4d "
                 "(execute_pass_internal, emit_ready_tokens, predict_prefill_duration; same rules @ ac0be1b9)",
    "interp1d": "jonasBoss/ndarray-interp src/interp1d/strategies/linear.rs @ 0718b0c7e9ced4e929fe52559bbade89ce6cb76b",
    "interp2d": "jonasBoss/ndarray-interp src/interp2d/strategies/bilinear.rs @ 8a898d6421e1c50d86addcf59241d9306edd3188",
}

NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


def _segment(xs: list, x: float) -> int:
    """Index i of the segment [xs[i], xs[i+1]] used at x: the one holding x (left end at or below
    it), the first below the range, the last above it (never the last index)."""
    i = bisect.bisect_right(xs, x) - 1
    return min(max(i, 0), len(xs) - 2)


def _lerp(x1: float, y1: float, x2: float, y2: float, x: float) -> float:
    """The line through (x1, y1), (x2, y2) at x, as ndarray-interp's Linear::calc_frac writes it."""
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


class DynamoNpzProfile(TimeModel):
    """NVIDIA Dynamo's measured profile (``.npz``), read and applied as Dynamo's mocker does.

    Arrays (float64, as Dynamo's reader ``ndarray_npy`` loads them into ``Array<f64>``):
    ``prefill_isl`` (n) -> ``prefill_ttft_ms`` (n); ``decode_active_kv_tokens`` (r) x
    ``decode_context_length`` (c) -> ``decode_itl`` (r, c), milliseconds. Each axis needs at least
    2 points and must rise strictly (ndarray-interp's builders refuse anything else).

    Interpolation (``PerfModel::from_npz``: ``Linear::new().extrapolate(true)`` and
    ``Bilinear::new().extrapolate(true)`` of ndarray-interp):

    - prefill: ``y = (y2 - y1) / (x2 - x1) * (x - x1) + y1`` on the segment holding x; below the
      first point the first segment's line, above the last the last segment's line.
    - decode: the same segment choice on each axis (x = active KV tokens, rows; y = context length,
      columns), then ``z1 = lerp_x(z11, z21)``, ``z2 = lerp_x(z12, z22)``, ``z = lerp_y(z1, z2)``:
      bilinear inside the grid, the edge cell's bilinear surface continued outside it.

    Charging a step (``predict_prefill_time`` / ``predict_decode_time`` of perf_model.rs, called
    from the vLLM scheduler's ``execute_pass_internal``; see DYNAMO_SOURCES):

    - prefill, once per step for the whole batch: ``k`` = prefilling requests, ``isl = floor(sum(
      cached + new) / k)``, ``prefix = floor(sum(cached) / k)`` (integer means), ``tokens = k x
      max(isl - prefix, 0)``; ``prefill_ms = max(interp(tokens), 0)``, 0 when k or tokens is 0.
    - decode, once per step: ``b`` = decoding requests, ``context = floor(sum(decode_context) /
      b)``, ``decode_ms = max(interp(active_kv_tokens, context), min_decode_ms)`` (Dynamo's floor
      is 1 ms: "token-emitting decode steps should not collapse onto the same timestamp"), 0 when
      b is 0.
    - the step: ``(prefill_ms + decode_ms) / 1000`` seconds: Dynamo runs the decode part after the
      prefill part (``decode_start_ms = now_ms + prefill``; tokens are stamped at
      ``decode_start_ms + decode``), so the two are summed, not overlapped.

    What the simulator feeds, as Dynamo 1.6.1 (its ``aisimulate-core`` 0.13.0 scheduler) does: the
    decode group is the requests decoding in the step (a request whose prompt completes in the step
    adds nothing to it), and ``active_kv_tokens`` is the sum of their sequence lengths (None here).
    Checked per request against Dynamo by tests/real_engines/test_dynamo_replay.py. An interpolation error in Dynamo
    yields 0 ms (``unwrap_or(0.0)``); with extrapolation on there is none for finite inputs.
    """

    name = "dynamo-npz"

    def __init__(self, path, *, min_decode_ms: float = 1.0):
        self.path = str(path)
        self.min_decode_ms = float(min_decode_ms)
        arrays = _read_npz(self.path)
        self.prefill_isl = arrays["prefill_isl"].tolist()
        self.prefill_ttft_ms = arrays["prefill_ttft_ms"].tolist()
        self.decode_active_kv_tokens = arrays["decode_active_kv_tokens"].tolist()
        self.decode_context_length = arrays["decode_context_length"].tolist()
        self.decode_itl = arrays["decode_itl"].tolist()

    def interp_prefill(self, x: float) -> float:
        """prefill_ttft_ms at x prefill tokens (linear, extrapolated)."""
        xs, ys = self.prefill_isl, self.prefill_ttft_ms
        i = _segment(xs, x)
        return _lerp(xs[i], ys[i], xs[i + 1], ys[i + 1], x)

    def interp_decode(self, x: float, y: float) -> float:
        """decode_itl at (x active KV tokens, y context length) (bilinear, extrapolated)."""
        xs, ys, z = self.decode_active_kv_tokens, self.decode_context_length, self.decode_itl
        i, j = _segment(xs, x), _segment(ys, y)
        x1, x2, y1, y2 = xs[i], xs[i + 1], ys[j], ys[j + 1]
        z1 = _lerp(x1, z[i][j], x2, z[i + 1][j], x)
        z2 = _lerp(x1, z[i][j + 1], x2, z[i + 1][j + 1], x)
        return _lerp(y1, z1, y2, z2, y)

    def prefill_ms(self, batch_size: int, isl: int, prefix: int) -> float:
        """Dynamo's ``predict_prefill_time(batch_size, isl, prefix)`` in ms."""
        new = max(int(isl) - int(prefix), 0)
        if batch_size <= 0 or new == 0:
            return 0.0
        return max(self.interp_prefill(float(batch_size * new)), 0.0)

    def decode_ms(self, batch_size: int, active_kv_tokens: int, context_length: int) -> float:
        """Dynamo's ``predict_decode_time(batch_size, active_kv_tokens, context_length, _)`` in ms."""
        if batch_size <= 0:
            return 0.0
        return max(self.interp_decode(float(active_kv_tokens), float(context_length)), self.min_decode_ms)

    def step_parts_ms(self, batch: StepBatch) -> tuple[float, float]:
        """(prefill_ms, decode_ms) of the step, as Dynamo's vLLM scheduler charges them."""
        k = len(batch.prefill_new)
        prefill = 0.0
        if k:
            total_prefix = int(sum(batch.prefill_cached))
            total_isl = total_prefix + int(sum(batch.prefill_new))
            prefill = self.prefill_ms(k, total_isl // k, total_prefix // k)
        b = len(batch.decode_context)
        decode = 0.0
        if b:
            total_ctx = int(sum(batch.decode_context))
            active = total_ctx if batch.active_kv_tokens is None else int(batch.active_kv_tokens)
            decode = self.decode_ms(b, active, total_ctx // b)
        return prefill, decode

    def step_time(self, batch: StepBatch) -> float:
        prefill, decode = self.step_parts_ms(batch)
        return (prefill + decode) / 1000.0

    def describe(self) -> dict:
        return {"time_model": self.name, "path": self.path, "prefill_points": len(self.prefill_isl),
                "decode_grid": [len(self.decode_active_kv_tokens), len(self.decode_context_length)],
                "min_decode_ms": self.min_decode_ms, "follows": DYNAMO_SOURCES}


MAX_PROFILE_VALUES = 10_000_000  # an array's values, at most (a real profile has thousands)


def _check_member_size(path: str, npz, key: str) -> None:
    """Refuse a member whose header declares more values than a profile can have, before
    NumPy allocates them."""
    name = key if key in npz.zip.namelist() else f"{key}.npy"
    try:
        with npz.zip.open(name) as f:
            version = np.lib.format.read_magic(f)
            shape = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                     else np.lib.format.read_array_header_2_0(f))[0]
    except (ValueError, OSError, KeyError, zipfile.BadZipFile, EOFError):
        raise ProfileError(path, "is not a NumPy array (.npy member)", key) from None
    values = math.prod(int(d) for d in shape)
    if values > MAX_PROFILE_VALUES:
        raise ProfileError(path, f"declares shape {tuple(shape)}: {values:,} values, more than a profile can have "
                                 f"({MAX_PROFILE_VALUES:,})", key)


def _read_npz(path: str) -> dict:
    if not os.path.exists(path):
        raise ProfileError(path, "no such file")
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ProfileError(path, f"not a NumPy .npz archive ({e})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ProfileError(path, "holds a single array (.npy), not an .npz archive of named arrays "
                                 f"({', '.join(NPZ_KEYS)})")
    out = {}
    with npz:
        for key in NPZ_KEYS:
            if key not in npz.files:
                raise ProfileError(path, f"missing (Dynamo's profile has {', '.join(NPZ_KEYS)}; "
                                         f"this file has {', '.join(npz.files) or 'no arrays'})", key)
            _check_member_size(path, npz, key)
            try:
                arr = npz[key]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError, MemoryError) as e:
                raise ProfileError(path, f"unreadable ({e})", key) from None
            if not isinstance(arr, np.ndarray):
                raise ProfileError(path, "is not a NumPy array (.npy member)", key)
            if arr.dtype != np.float64:
                raise ProfileError(path, f"dtype {arr.dtype}: Dynamo reads every array as float64 "
                                         "(ndarray_npy Array<f64>) and refuses other dtypes; save with "
                                         ".astype(numpy.float64)", key)
            want = 2 if key == "decode_itl" else 1
            if arr.ndim != want:
                raise ProfileError(path, f"must be {want}-D, got shape {arr.shape}", key)
            if not np.all(np.isfinite(arr)):
                raise ProfileError(path, "holds NaN or infinite values", key)
            out[key] = arr
    for key in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        axis = out[key]
        if axis.size < 2:
            raise ProfileError(path, f"needs at least 2 points to interpolate, has {axis.size}", key)
        if np.any(np.diff(axis) <= 0):
            bad = int(np.flatnonzero(np.diff(axis) <= 0)[0])
            raise ProfileError(path, f"must rise strictly (ndarray-interp's requirement), but entry {bad + 1} "
                                     f"({axis[bad + 1]:g}) follows {axis[bad]:g}", key)
    if out["prefill_ttft_ms"].shape != out["prefill_isl"].shape:
        raise ProfileError(path, f"has {out['prefill_ttft_ms'].size} values but prefill_isl has "
                                 f"{out['prefill_isl'].size}", "prefill_ttft_ms")
    want = (out["decode_active_kv_tokens"].size, out["decode_context_length"].size)
    if out["decode_itl"].shape != want:
        raise ProfileError(path, f"shape {out['decode_itl'].shape}, expected {want} (rows: "
                                 "decode_active_kv_tokens, columns: decode_context_length)", "decode_itl")
    return out


# --------------------------------------------------------------------------------------------
# Polynomial coefficients file

#: Variables a polynomial term may use: the step's aggregates.
POLY_VARIABLES = {
    "prefill_tokens": "prompt tokens computed this step (sum of prefill_new)",
    "prefill_requests": "prefilling requests this step",
    "prefill_context": "tokens already in KV for the prefilling requests (sum of prefill_cached)",
    "decode_batch": "decoding requests this step",
    "decode_context": "sum of the decoding requests' context lengths",
    "decode_mean_context": "decode_context / decode_batch (0 without decodes)",
}
POLY_FORMAT = "kvreplay-step-polynomial"
POLY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_EXPONENT = 8  # a step-time polynomial past degree 8 in tokens overflows floats


class PolynomialProfile(TimeModel):
    """A step time fitted as a polynomial in the step's aggregates (a ``.json`` file).

    Schema (docs/profiles.md has an example)::

        {"format": "kvreplay-step-polynomial", "version": 1, "unit": "ms",
         "terms": [{"coef": 4.2},
                   {"coef": 0.021, "prefill_tokens": 1},
                   {"coef": 3.1e-7, "prefill_tokens": 2},
                   {"coef": 0.0009, "decode_context": 1}],
         "min": 0}

    ``step = max(sum(coef x prod(var ** exponent)), min)`` in ``unit`` (s, ms or us); the variables
    are POLY_VARIABLES, exponents whole numbers >= 0 (a term without variables is a constant). An
    empty step takes 0 (a constant term is not charged when nothing runs). Optional: ``"source"``
    (free text: where the fit came from), ``"min"`` (default 0).
    """

    name = "polynomial"

    def __init__(self, path=None, *, document: dict | None = None):
        self.path = str(path) if path is not None else "<polynomial>"
        if document is None:
            document = _read_json(self.path)
        self.terms, self.scale, self.min_value, self.source = _parse_poly(self.path, document)
        self.unit = document.get("unit", "s")

    @staticmethod
    def variables(batch: StepBatch) -> dict:
        b = len(batch.decode_context)
        dctx = int(sum(batch.decode_context))
        return {"prefill_tokens": int(sum(batch.prefill_new)), "prefill_requests": len(batch.prefill_new),
                "prefill_context": int(sum(batch.prefill_cached)), "decode_batch": b, "decode_context": dctx,
                "decode_mean_context": dctx / b if b else 0.0}

    def step_time(self, batch: StepBatch) -> float:
        if batch.is_empty:
            return 0.0
        v = self.variables(batch)
        total = 0.0
        for coef, powers in self.terms:
            term = coef
            for var, exp in powers:
                term *= float(v[var]) ** exp
            total += term
        return max(total, self.min_value) * self.scale

    def describe(self) -> dict:
        return {"time_model": self.name, "path": self.path, "unit": self.unit, "terms": len(self.terms),
                "source": self.source}


def _read_json(path: str) -> dict:
    from ...files import read_text

    text = read_text(path, ProfileError, "a polynomial profile (JSON)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(path, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ProfileError(path, "nested too deep to be a profile (a kvreplay-step-polynomial is two levels deep)") from None
    if not isinstance(doc, dict):
        raise ProfileError(path, f"must be a JSON object with \"format\": \"{POLY_FORMAT}\", got {type(doc).__name__}")
    return doc


def _number(path, field, value) -> float:
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value))
    except OverflowError:  # an integer past the float range
        finite = False
    if not finite:
        big = isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30
        shown = f"an integer of {len(str(abs(value)))} digits" if big else repr(value)
        raise ProfileError(path, f"must be a finite number, got {shown}", field)
    return float(value)


def _parse_poly(path: str, doc: dict):
    fmt = doc.get("format")
    if fmt != POLY_FORMAT:
        raise ProfileError(path, f"must be {POLY_FORMAT!r}, got {fmt!r}", "format")
    version = doc.get("version", 1)
    if version != 1:
        raise ProfileError(path, f"unsupported version {version!r} (this kvreplay reads version 1)", "version")
    unit = doc.get("unit", "s")
    if unit not in POLY_UNITS:
        raise ProfileError(path, f"must be one of {', '.join(POLY_UNITS)}, got {unit!r}", "unit")
    known = {"format", "version", "unit", "terms", "min", "source"}
    extra = sorted(set(doc) - known)
    if extra:
        raise ProfileError(path, f"unknown key (known: {', '.join(sorted(known))})", extra[0])
    raw_terms = doc.get("terms")
    if not isinstance(raw_terms, list) or not raw_terms:
        raise ProfileError(path, "must be a non-empty list of {\"coef\": number, VARIABLE: exponent, ...}", "terms")
    terms = []
    for i, t in enumerate(raw_terms):
        where = f"terms[{i}]"
        if not isinstance(t, dict):
            raise ProfileError(path, f"must be an object, got {t!r}", where)
        if "coef" not in t:
            raise ProfileError(path, "missing", f"{where}.coef")
        coef = _number(path, f"{where}.coef", t["coef"])
        powers = []
        for var, exp in t.items():
            if var == "coef":
                continue
            if var not in POLY_VARIABLES:
                raise ProfileError(path, f"unknown variable (known: {', '.join(POLY_VARIABLES)})", f"{where}.{var}")
            if isinstance(exp, bool) or not isinstance(exp, int) or not 0 <= exp <= MAX_EXPONENT:
                shown = repr(exp) if not isinstance(exp, int) or abs(exp) < 10 ** 30 else "a huge integer"
                raise ProfileError(path, f"exponent must be a whole number from 0 to {MAX_EXPONENT}, got {shown}",
                                   f"{where}.{var}")
            if exp:
                powers.append((var, exp))
        terms.append((coef, tuple(powers)))
    min_value = _number(path, "min", doc.get("min", 0))
    source = doc.get("source")
    if source is not None and not isinstance(source, str):
        raise ProfileError(path, f"must be text, got {source!r}", "source")
    return tuple(terms), POLY_UNITS[unit], min_value, source
