"""Held-out kernel sources of benchmarks/calibrate.py: measured kernels the fit never saw, from
another collection of NVIDIA's kernel database (since 2026-12-07).

**The split.** The calibration is fitted on aiconfigurator-core 0.12.0's vLLM 0.24 tables of the
H100 (calibrate.py FIT_GPU; each other measured GPU on its own, B200 but its attention and
all-reduce). Everything here is held out from that fit:

- **aisimulate** (``pip download --no-deps aisimulate==AISIMULATE_VERSION``, Apache-2.0; NVIDIA's
  successor package to aiconfigurator, with the same table schema under ``aisimulate_core/``): its
  re-measured vLLM 0.24.0 tables (GEMMs of every GPU, H200's and B200's attention), its vLLM 0.25.0
  GEMM, attention, MoE, MLA and GDN tables, and its vLLM 0.31.0 GEMMs and all-reduce (H100, H200;
  B200's newest GEMMs are 0.27.1's), which times the framework's own
  ``tensor_model_parallel_all_reduce`` (whichever kernel vLLM dispatches to at each size). Each
  SOURCES entry takes, per op, the newest table at most its version; an op without one there
  keeps the fit's table (said in the table's "held out" column). A GPU's steps are composed from
  them exactly as calibrate.py composes its own (composed_step and the MoE and MLA ones, the
  elementwise kernels from the GPU's measured elementwise kernel) and predicted with the shipped
  coefficients, serving terms off.
- **Other frameworks' all-reduce** (allreduce_check): vLLM's custom kernel as aiconfigurator timed
  it under vLLM 0.14.0 and 0.19.0, vLLM 0.31.0's (aisimulate), SGLang 0.5.14's custom all-reduce
  and TensorRT-LLM 1.3.0rc20's, one call at a time against roofline.allreduce_time.

    python benchmarks/calibrate.py --check    # prints these after the fit source's tables
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
from calibrate_stats import RATIO_COLUMNS, print_table, ratio_cells, ratio_stats

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "aisimulate"
AISIMULATE_VERSION = "0.13.0.dev202610270000000085"
ROOT = "aisimulate_core/systems/data/"
#: label -> the newest vLLM version each op's table may have ("*": every op not named)
SOURCES = {"vLLM 0.24.0, re-measured": {"*": "0.24.0"},
           "vLLM 0.25.0": {"*": "0.25.0"},
           "vLLM 0.31.0": {"*": "0.31.0", "moe": "0.25.0"}}  # (0.31.0's MoE table times GLM-5.3's shape only)
#: the GPUs checked, as calibrate.GPUS and RELATIVE_CHECKS name them (since 2026-12-07 also the GB200,
#: GB300 and B300, whose vLLM 0.25.0 and 0.31.0 tables aisimulate has; their rows are summarised
#: apart, so that the H100/H200/B200 figures stay comparable with those quoted before)
SOURCE_GPUS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "GB200": "gb200", "GB300": "gb300",
               "B300": "b300_sxm"}
FIRST_GPUS = ("H100", "H200", "B200")
#: the ops a step is composed from (attention: context and generation; comm: the all-reduce)
STEP_OPS = ("gemm", "attention", "comm", "quantize", "moe", "mla", "linear_attention")


def wheel() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"aisimulate-{AISIMULATE_VERSION}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE),
                        f"aisimulate=={AISIMULATE_VERSION}"], check=True)
        found = sorted(CACHE.glob(f"aisimulate-{AISIMULATE_VERSION}-*.whl"))
    return found[0]


def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def held_out_tables(whl: Path, caps: dict, fit_tables):
    """aisimulate's vLLM tables as calibrate.Tables sees aiconfigurator's: per op the newest version at
    most ``caps[op]`` (``caps["*"]`` by default), NCCL's newest. Returns (the tables, for each GPU
    directory the ops whose table differs from the fit's, `fit_tables`)."""
    from calibrate import Tables

    class HeldOut(Tables):
        def __init__(self):
            self.zip = zipfile.ZipFile(whl)
            self.used = {}
            best = {}
            for n in self.zip.namelist():
                if not n.startswith(ROOT) or n.endswith("/"):
                    continue
                parts = n[len(ROOT):].split("/")
                if len(parts) < 5 or parts[2] not in ("vllm", "nccl"):
                    continue
                gpu, op, framework, version = parts[:4]
                if framework == "vllm" and _version(version) > _version(caps.get(op, caps["*"])):
                    continue
                key = (gpu, op, framework, parts[-1])
                if key not in best or _version(version) > _version(best[key][0]):
                    best[key] = (version, n)
            self.map = {f"aiconfigurator_core/systems/data/{g}/{op}/{fw}/{v}/{table}": n
                        for (g, op, fw, table), (v, n) in best.items()}
            self.names = list(self.map)

        def bytes_of(self, name: str) -> bytes:
            return self.zip.read(self.map[name])

    t = HeldOut()
    differs = {}
    for name, member in t.map.items():
        gpu, op, framework = name.split("/")[3:6]
        if op in STEP_OPS and name.endswith(".parquet") and (
                name not in fit_tables.names or t.zip.getinfo(member).CRC != fit_tables.zip.getinfo(name).CRC):
            differs.setdefault(gpu, set()).add(op if framework == "vllm" else framework)
    return t, differs  # (ops by name; "nccl": its table, for messages above 8 MiB)


def _coefficients(shipped: dict, name: str) -> tuple[dict, str]:
    """The coefficients GPU `name` ships (a RELATIVE_CHECKS GPU: its relative's with its own terms)
    and the GPU whose coefficients they mostly are."""
    if name in shipped["gpus"]:
        return shipped["gpus"][name]["coefficients"], name
    rel = shipped["relative_bands"][name]
    return {**shipped["gpus"][rel["relative"]]["coefficients"], **rel["coefficients"]}, rel["relative"]


def source_steps(t, gpu_name: str, gpu_dir: str, coefficients: dict, bw: float) -> list[dict]:
    """Every composed step of the GPU's tables in `t` (dense bf16 and fp8, MoE, DeepSeek-V3's MLA)
    against the calibrated roofline at `coefficients`, each row with its family."""
    import calibrate as cal

    tabs = cal.kernels(t, gpu_dir)
    meas = cal.Measured(tabs)
    meas8 = cal.Measured(tabs, "gemm_fp8") if "gemm_fp8" in tabs else None
    rows = []
    for family, mm, head, dtype in (("dense bf16", meas, None, "bf16"), ("dense fp8", meas8, meas, "fp8")):
        if mm is not None:
            rows += [{**r, "family": family} for r in cal.step_table(mm, gpu_name, coefficients, bw, dtype, head=head)]
    for kernel, (mm, head) in {k: v for k, v in (("bf16", (meas, None)), ("fp8", (meas8, meas))) if v[0] is not None
                               and v[0].moe}.items():
        rows += [{**r, "family": f"MoE {kernel}"}
                 for r in cal.step_table(mm, gpu_name, coefficients, bw, kernel, head=head, moe="experts")]
    mla = cal.mla_step_rows(tabs, meas, meas8, gpu_name, coefficients, bw)
    rows += [{**r, "family": "MLA fp8 (served)"} for r in mla if r["served"]]
    return rows


def shipped_band(shipped: dict, gpu: str, family: str, phase: str) -> tuple[float, float]:
    """The 5-95% band the calibration ships for a step of `family` on `gpu` (a RELATIVE_CHECKS GPU:
    its own entry), as a simulation's band takes it: dense bf16 or fp8, the MoE or MLA steps'."""
    entry = shipped["gpus"].get(gpu) or shipped["relative_bands"][gpu]
    if family.startswith("MoE"):
        band = entry.get("bands_moe_steps", {}).get(family.split()[1], {}).get(phase)
    elif family.startswith("MLA"):
        band = entry.get("bands_mla_steps", {}).get("fp8", {}).get(phase)
    else:
        band = entry.get("bands_fp8" if family.endswith("fp8") else "bands", {}).get(phase)
    return tuple(band or entry["bands"][phase])


def _phase_cells(rows) -> list[str]:
    out = []
    for phase in ("prefill", "decode", "mixed"):
        r = [x["measured_s"] / x["predicted_s"] for x in rows if x["phase"] == phase]
        out.append(f"{100 * ratio_stats(r)['mape']:.1f}% ({np.median(r):.2f})" if r else "-")
    return out


def held_out_sources(fit_tables, shipped: dict, probes: dict) -> dict:
    """Every SOURCES entry's composed steps on each SOURCE_GPUS GPU against the shipped coefficients,
    printed by source, GPU and family, then by phase and TP and by decode batch over all of them;
    and the GDN layers one at a time. Returns the statistics (calibrate.py --json)."""
    import calibrate as cal

    whl = wheel()
    report, everything, lines = {}, [], []
    for label, caps in SOURCES.items():
        t, differs = held_out_tables(whl, caps, fit_tables)
        for name, gpu_dir in SOURCE_GPUS.items():
            held = sorted(differs.get(gpu_dir, ()))
            if set(held) <= {"nccl"}:  # (NCCL alone: only messages above 8 MiB)
                continue
            coefficients, relative = _coefficients(shipped, name)
            bw = cal.stream(probes, name, relative)
            rows = source_steps(t, name, gpu_dir, coefficients, bw)
            for family in dict.fromkeys(r["family"] for r in rows):
                mine = [r for r in rows if r["family"] == family]
                lines.append([label, name, family, ", ".join(held), *_phase_cells(mine)])
                report[f"{label} {name} {family}"] = {p: ratio_stats([r["measured_s"] / r["predicted_s"] for r in mine
                                                                      if r["phase"] == p])
                                                      for p in ("prefill", "decode", "mixed")
                                                      if any(r["phase"] == p for r in mine)}
            for r in rows:  # within the band the calibration ships for it?
                lo, hi = shipped_band(shipped, name, r["family"], r["phase"])
                r["covered"] = lo <= r["measured_s"] / r["predicted_s"] <= hi
            everything += [{**r, "source": label, "gpu": name} for r in rows]
            g = gdn_layers(cal.kernels(t, gpu_dir).get("gdn"), cal.streamed(_gpu(name), bw), coefficients)
            if g and "linear_attention" in held:
                lines.append([label, name, "GDN layers (one at a time)", "linear_attention",
                              *(f"{100 * g[p]['mape']:.1f}% ({g[p]['median_ratio']:.2f})" if p in g else "-"
                                for p in ("prefill", "decode")), "-"])
                report[f"{label} {name} GDN layers"] = g
    print_table(f"held-out kernel sources (aisimulate {AISIMULATE_VERSION}): composed steps against the shipped "
                "coefficients, serving terms off; error (MAPE) and median measured / predicted",
                (("source", False), ("GPU", False), ("family", False), ("held out (the rest: the fit's tables)", False),
                 ("prefill", False), ("decode", False), ("mixed", False)), lines)
    first = [r for r in everything if r["gpu"] in FIRST_GPUS]
    _print_breakdowns(first)
    report["all"] = _overall(first)
    added = [r for r in everything if r["gpu"] not in FIRST_GPUS]
    if added:
        report["all_added"] = {name: _overall([r for r in added if r["gpu"] == name])
                               for name in dict.fromkeys(r["gpu"] for r in added)}
        print_table("held-out kernel sources, the GPUs added on 2026-12-07: every step by phase (error, median "
                    "measured / predicted, within the band the GPU ships)",
                    (("GPU", False), ("phase", False), ("steps", True), ("error (MAPE)", True),
                     ("median", True), ("within the shipped 5-95% band", True)),
                    [[name, p, str(s["cases"]), f"{100 * s['mape']:.1f}%", f"{s['median_ratio']:.2f}",
                      f"{100 * s['within_band']:.0f}%"]
                     for name, by_phase in report["all_added"].items() for p, s in by_phase.items()])
    return report


def _overall(rows) -> dict:
    """Per phase: the error statistics of `rows` and the share within the shipped band."""
    return {p: {**ratio_stats([r["measured_s"] / r["predicted_s"] for r in rows if r["phase"] == p]),
                "within_band": float(np.mean([r["covered"] for r in rows if r["phase"] == p]))}
            for p in ("prefill", "decode", "mixed") if any(r["phase"] == p for r in rows)}


def gdn_layers(table, gpu, coefficients: dict) -> dict:
    """Every GDN layer of a table against the shipped term (calibrate_gdn.gdn_model), by phase
    ({}: no table)."""
    from calibrate_gdn import gdn_args, gdn_model

    if table is None:
        return {}
    ratio = table.latency.to_numpy(float) / 1e3 / gdn_model(coefficients, gpu, *gdn_args(table))
    prefill = (table.phase == "context").to_numpy()
    return {p: ratio_stats(ratio[m]) for p, m in (("prefill", prefill), ("decode", ~prefill)) if m.any()}


def _gpu(name):
    from kvreplay.catalog.gpus import get_gpu

    return get_gpu(name)


def _print_breakdowns(rows):
    """Every held-out step by phase and TP, and decode by batch."""
    cells = []
    for phase in ("prefill", "decode", "mixed"):
        for tp in sorted({r["tp"] for r in rows}):
            mine = [x for x in rows if x["phase"] == phase and x["tp"] == tp]
            if mine:
                covered = 100.0 * np.mean([x["covered"] for x in mine])
                cells.append([phase, str(tp), *ratio_cells(ratio_stats([x["measured_s"] / x["predicted_s"] for x in mine])),
                              f"{covered:.0f}%"])
    print_table("held-out kernel sources: every step by phase and TP",
                (("phase", False), ("TP", True), *RATIO_COLUMNS, ("within the shipped 5-95% band", True)), cells)
    cells = []
    for lo, hi in ((1, 1), (2, 4), (8, 16), (32, 64), (128, 256)):
        r = [x["measured_s"] / x["predicted_s"] for x in rows if x["phase"] == "decode" and lo <= x["decodes"] <= hi]
        if r:
            cells.append([f"{lo}-{hi}" if lo < hi else str(lo), *ratio_cells(ratio_stats(r))])
    print_table("held-out kernel sources: decode steps by batch (requests)", (("batch", False), *RATIO_COLUMNS), cells)


#: the all-reduce tables of other versions and frameworks: label -> (wheel: "aic" or "ais", path under data/)
ALLREDUCE_SOURCES = {"vLLM 0.14.0 (aiconfigurator)": ("aic", "comm/vllm/0.14.0"),
                     "vLLM 0.19.0 (aiconfigurator)": ("aic", "comm/vllm/0.19.0"),
                     "vLLM 0.24.0 (the fit's; aiconfigurator)": ("aic", "comm/vllm/0.24.0"),
                     "vLLM 0.31.0 (aisimulate)": ("ais", "comm/vllm/0.31.0"),
                     "SGLang 0.5.14 (aiconfigurator)": ("aic", "comm/sglang/0.5.14"),
                     "TensorRT-LLM 1.3.0rc20 (aiconfigurator)": ("aic", "comm/trtllm/1.3.0rc20")}


def allreduce_check(fit_tables, shipped: dict) -> dict:
    """Each ALLREDUCE_SOURCES table's CUDA-graph all-reduces (bf16, 2-8 GPUs) against
    roofline.allreduce_time at the GPU's shipped coefficients, by source, GPU and TP: error and median
    measured / predicted, small (< 64 KiB) messages, larger ones below vLLM's 8 MiB custom-kernel
    limit, and NCCL's from it."""
    import io

    import pyarrow.parquet as pq
    from kvreplay.serving.timing.roofline import SHAPE_COEFFICIENTS, allreduce_time

    ais = zipfile.ZipFile(wheel())
    lines, out = [], {}
    for label, (where, path) in ALLREDUCE_SOURCES.items():
        for name in ("H100", "H200"):
            member = (f"aisimulate_core/systems/data/{SOURCE_GPUS[name]}/{path}/custom_allreduce_perf.parquet" if where == "ais"
                      else f"aiconfigurator_core/systems/data/{SOURCE_GPUS[name]}/{path}/custom_allreduce_perf.parquet")
            z = ais if where == "ais" else fit_tables.zip
            if member not in z.namelist():
                continue
            a = pq.read_table(io.BytesIO(z.read(member))).to_pandas()
            graph = a.kernel_source.str.contains("graph", case=False)
            a = a[(graph if graph.any() else True) & a.num_gpus.isin([2, 4, 8])]
            c = {**SHAPE_COEFFICIENTS, **shipped["gpus"][name]["coefficients"]}  # (an older calibration: terms off)
            for tp in (2, 4, 8):
                part = a[a.num_gpus == tp]
                nbytes = part.message_size.to_numpy(float) * 2.0
                ratio = part.latency.to_numpy(float) / 1e3 / allreduce_time(tp, nbytes, c["allreduce_latency_s"], c)
                small, nccl = nbytes < 64 * 1024, nbytes >= 8 * 2 ** 20
                parts = [ratio_stats(ratio[m]) for m in (small, ~small & ~nccl, nccl)]
                out[f"{label} {name} TP{tp}"] = dict(zip(("small", "large", "nccl"), parts))
                lines.append([label, name, str(tp)] + [f"{100 * p['mape']:.1f}% ({p['median_ratio']:.2f})" for p in parts])
    print_table("all-reduce kernels of other versions and frameworks against the shipped all-reduce "
                "(error, median measured / predicted)",
                (("source", False), ("GPU", False), ("TP", True), ("< 64 KiB", False), ("64 KiB - 8 MiB", False),
                 ("8 MiB - 1 GiB (NCCL)", False)), lines)
    return out
