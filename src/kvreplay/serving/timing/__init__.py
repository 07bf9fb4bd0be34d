"""Time models: how long one engine step (one forward pass of a continuous batch) takes.

The simulator describes each step as a ``StepBatch`` and asks a ``TimeModel`` for its duration in
seconds (docs/timing.md, "Time models", has the formulas, defaults and sources):

- ``InstantTimeModel`` ("instant"): every step takes 0 s.
- ``CalibratedRooflineTimeModel`` ("roofline", the default with --model and --gpu): a step as the
  sum of its kernels' times, each at the efficiency fitted on measured GPU kernels
  (roofline.py; the coefficients and their sources: kvreplay/data/roofline_calibration.json).
- ``RooflineTimeModel`` ("roofline-raw"): the uncalibrated formula, ``max(FLOPs / (peak x MFU),
  bytes / (bandwidth x MBU)) + overhead``, for comparison.
- ``DynamoNpzProfile`` (``FILE.npz``): NVIDIA Dynamo's measured profile, read and interpolated the
  way Dynamo's mocker does.
- ``PolynomialProfile`` (``FILE.json``): a fitted polynomial in the step's aggregates.

models.py: the batch, the base class, instant and roofline; profiles.py: the measured ones;
capacity.py: the KV pool a GPU holds after the weights; gpus.py: the GPU catalog; packed.py: the
form the compiled loop (step.c) reads.
"""

from __future__ import annotations

from ...errors import ConfigError
from .capacity import KVCapacity, kv_capacity, kv_capacity_blocks
from ...catalog.gpus import GPUSpec, get_gpu, gpu_catalog
from .models import (DEFAULT_MBU, DEFAULT_MFU, DEFAULT_OVERHEAD_S, WEIGHT_DTYPE_BYTES, InstantTimeModel,
                     RooflineTimeModel, StepBatch, TimeModel, kv_bytes_per_token_per_gpu)
from .packed import AGG, KIND_INSTANT, NUM_AGG, aggregates, packed, roofline_window, step_seconds
from .profiles import DYNAMO_SOURCES, POLY_FORMAT, POLY_VARIABLES, DynamoNpzProfile, PolynomialProfile, ProfileError
from .roofline import CalibratedRooflineTimeModel, calibration_for

TIME_MODEL_NAMES = ("instant", "roofline", "roofline-raw")
RAW_OPTIONS = ("mfu", "mbu", "overhead_s")


def load_time_model(spec, *, model=None, gpu=None, tp: int = 1, **roofline_options) -> TimeModel:
    """The TimeModel `spec` names: ``"instant"``, ``"roofline"`` (needs `model` and `gpu`; `tp`
    and the RooflineTimeModel keywords apply), a ``.npz`` path (DynamoNpzProfile) or a ``.json``
    path (PolynomialProfile). A TimeModel is returned as is."""
    if isinstance(spec, TimeModel):
        return spec
    text = str(spec).strip()
    key = text.lower()
    if key == "instant":
        return InstantTimeModel()
    if key in ("roofline", "roofline-raw"):
        missing = [n for n, v in (("model", model), ("gpu", gpu)) if v is None]
        if missing:
            raise ConfigError(f"the {key} time model needs {' and '.join(missing)} (e.g. --model Llama-3.1-8B "
                              "--gpu H100)")
        from ...analysis.models import get_model

        spec_model = get_model(model)
        if key == "roofline-raw" and spec_model.mamba_layers:
            raise ConfigError(f"the roofline-raw time model has no Mamba or linear-attention layers, and "
                              f"{spec_model.name} has {spec_model.mamba_layers}: its step times would be wrong. "
                              "Use the default roofline (its Mamba state term: docs/timing.md), or a measured "
                              "profile (--time-model FILE.json, kvreplay calibrate-profile)")
        if key == "roofline-raw":
            return RooflineTimeModel(model, gpu, tp, **roofline_options)
        raw = sorted(k for k in RAW_OPTIONS if roofline_options.get(k) is not None)
        if raw:
            raise ConfigError(f"{', '.join(raw)} set the uncalibrated roofline: use --time-model roofline-raw with them")
        options = {k: v for k, v in roofline_options.items() if k not in RAW_OPTIONS}
        return CalibratedRooflineTimeModel(model, gpu, tp, **options)
    if key.endswith(".npz"):
        return DynamoNpzProfile(text)
    if key.endswith(".json"):
        return PolynomialProfile(text)
    raise ConfigError(f"unknown time model {spec!r}: use instant, roofline, roofline-raw, a Dynamo profile FILE.npz "
                      "or a polynomial FILE.json")


__all__ = ["AGG", "DEFAULT_MBU", "DEFAULT_MFU", "DEFAULT_OVERHEAD_S", "DYNAMO_SOURCES", "GPUSpec", "KIND_INSTANT",
           "KVCapacity", "NUM_AGG", "POLY_FORMAT", "POLY_VARIABLES", "TIME_MODEL_NAMES", "WEIGHT_DTYPE_BYTES",
           "DynamoNpzProfile", "InstantTimeModel", "PolynomialProfile", "ProfileError", "RooflineTimeModel",
           "StepBatch", "TimeModel", "CalibratedRooflineTimeModel", "calibration_for", "aggregates", "get_gpu", "gpu_catalog", "kv_bytes_per_token_per_gpu",
           "kv_capacity", "kv_capacity_blocks", "load_time_model", "packed", "roofline_window", "step_seconds"]
