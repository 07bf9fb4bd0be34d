"""The GPU catalog moved to kvreplay.catalog.gpus; this name stays for benchmarks/calibrate*.py
(edited on another branch) until they import it from there. Nothing in src/ imports it."""

from ...catalog.gpus import GPUSpec, get_gpu, gpu_catalog  # noqa: F401
