"""Calibrate the roofline on measured GPU kernels, and check it on what the fit did not see.

Source: NVIDIA aiconfigurator's kernel database (Apache-2.0), shipped in the PyPI wheel
`aiconfigurator-core==0.12.0` (github.com/ai-dynamo/aiconfigurator): vLLM 0.24.0 (H100, H200) and
0.14.0 (A100) GEMM, FlashAttention (context and generation) and custom all-reduce kernels, timed
on each GPU (``systems/data/<gpu>/<op>/vllm/<version>/*.parquet``), and its silicon end-to-end
serving runs (``systems/silicon_sample.csv``). The script downloads the wheel (pip download) into
benchmarks/.cache/ and reads the tables with pyarrow.

1. **Fit** (H100 only): each kernel family's coefficients (roofline.py COEFFICIENTS) by least
   relative error over its table: GEMMs (bf16 torch linear), context and generation attention
   (bf16 KV, no window, head_dim 128), all-reduce (vLLM's custom kernel in CUDA-graph mode up to
   8 MiB, NCCL above, as vLLM picks).
2. **Held back**: steps of dense models (Llama-3.1-8B/70B, Qwen3-8B/32B, Qwen2.5-72B,
   Mistral-7B) at TP 1-8, composed kernel by kernel from each GPU's own measured tables (the
   layers' GEMMs at their real shapes, attention, two all-reduces per layer, the LM head on the
   logits rows), on H200 and A100, which the fit never saw, predicted with H100's coefficients and
   the target GPU's catalog peaks: the error a GPU without measurements gets from its nearest
   measured relative. H100's own steps are reported too (in-sample GPU, every step shape unseen).
3. **Per-GPU fits** for the package data: each measured GPU fitted on its own kernels; its band is
   the 5th-95th percentile of measured/predicted over its composed steps, per phase.
4. **End to end** (`--e2e`): aiconfigurator's silicon vLLM runs of catalog dense models on H100/H200
   (aggregated serving, concurrency B, ISL/OSL fixed): kvreplay simulates 3B requests of ISL
   tokens and OSL outputs arriving at once with max_num_seqs = B, so B run at a time as under B
   closed-loop clients; TTFT is first token minus schedule (the closed loop has no queue), TPOT
   the mean over requests of (finish - first token) / (OSL - 1), over the requests after the
   first B. Not fitted (no coefficient comes from these runs): an out-of-sample check.

    python benchmarks/calibrate.py            # fit, write src/kvreplay/data/roofline_calibration.json
    python benchmarks/calibrate.py --check    # the held-back error tables, from the shipped data
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = HERE / ".cache" / "aiconfigurator"
WHEEL_VERSION = "0.12.0"
OUT = REPO / "src" / "kvreplay" / "data" / "roofline_calibration.json"
CUSTOM_AR_MAX = 8 * 2 ** 20  # bytes
GPUS = {"H100": "h100_sxm", "H200": "h200_sxm", "A100-80GB": "a100_sxm"}
FIT_GPU = "H100"
DENSE = [("Llama-3.1-8B", (1, 2)), ("Qwen3-8B", (1,)), ("Mistral-7B-Instruct-v0.3", (1,)), ("Qwen3-32B", (1, 2, 4)),
         ("Llama-3.1-70B", (2, 4, 8)), ("Qwen2.5-72B", (4, 8))]

sys.path.insert(0, str(REPO / "src"))


# ---------------------------------------------------------------------------------------------
# the data


def wheel() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"aiconfigurator_core-{WHEEL_VERSION}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE),
                        f"aiconfigurator-core=={WHEEL_VERSION}"], check=True)
        found = sorted(CACHE.glob(f"aiconfigurator_core-{WHEEL_VERSION}-*.whl"))
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Tables:
    """The wheel's tables, read on demand (pandas DataFrames through pyarrow)."""

    def __init__(self, whl: Path):
        self.zip = zipfile.ZipFile(whl)
        self.names = self.zip.namelist()
        self.used = {}

    def path(self, gpu_dir: str, op: str, table: str) -> str:
        prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/{op}/vllm/"
        cands = [n for n in self.names if n.startswith(prefix) and n.endswith("/" + table)]
        if not cands:
            raise SystemExit(f"no {table} for {gpu_dir} in the wheel")

        def version(n):
            return tuple(int(x) for x in n[len(prefix):].split("/")[0].split(".") if x.isdigit())

        return max(cands, key=version)

    def read_nccl(self, gpu_dir: str):
        import io

        import pyarrow.parquet as pq

        prefix = f"aiconfigurator_core/systems/data/{gpu_dir}/comm/nccl/"
        cands = [n for n in self.names if n.startswith(prefix) and n.endswith("/nccl_perf.parquet")]
        name = max(cands, key=lambda n: tuple(int(x) for x in n[len(prefix):].split("/")[0].split(".") if x.isdigit()))
        self.used[name] = True
        return pq.read_table(io.BytesIO(self.zip.read(name))).to_pandas()

    def read(self, gpu_dir: str, op: str, table: str):
        import io

        import pyarrow.parquet as pq

        name = self.path(gpu_dir, op, table)
        self.used[name] = True
        return pq.read_table(io.BytesIO(self.zip.read(name))).to_pandas()

    def silicon(self):
        import csv
        import io

        name = "aiconfigurator_core/systems/silicon_sample.csv"
        self.used[name] = True
        return list(csv.DictReader(io.StringIO(self.zip.read(name).decode())))


def kernels(t: Tables, gpu_dir: str) -> dict:
    g_all = t.read(gpu_dir, "gemm", "gemm_perf.parquet")
    g = g_all[(g_all.gemm_dtype == "bfloat16")]
    # fp8 per-tensor (W8A8 with the input quantised per call: vLLM's Fp8LinearMethod, as FP8
    # checkpoints such as nvidia/Llama-3.1-8B-Instruct-FP8 run); A100's tables have none
    g8 = g_all[(g_all.gemm_dtype == "fp8")]
    ctx = t.read(gpu_dir, "attention", "context_attention_perf.parquet")
    gen = t.read(gpu_dir, "attention", "generation_attention_perf.parquet")
    def sel(a):
        keep = (a.kv_cache_dtype == "bfloat16") & (a.head_dim == 128)
        if "window_size" in a:  # (A100's vLLM 0.14 tables have no sliding-window rows)
            keep &= a.window_size == 0
        return a[keep]
    ctx, gen = sel(ctx), sel(gen)
    kern = sorted(ctx.kernel_source.unique())
    fa = "vllm_flash_attn_fa3" if "vllm_flash_attn_fa3" in kern else kern[0]
    ctx, gen = ctx[ctx.kernel_source == fa], gen[gen.kernel_source == fa]
    # vLLM all-reduces up to 8 MiB with its custom kernel and above with NCCL
    # (vllm/distributed/device_communicators/custom_all_reduce.py, max_size 8 MiB)
    ar = t.read(gpu_dir, "comm", "custom_allreduce_perf.parquet")
    ar = ar[(ar.op_name == "all_reduce") & ar.kernel_source.str.contains("graph") & (ar.message_size * 2 <= CUSTOM_AR_MAX)]
    nccl = t.read_nccl(gpu_dir)
    nccl = nccl[(nccl.op_name == "all_reduce") & (nccl.nccl_dtype == "half") & (nccl.message_size * 2 > CUSTOM_AR_MAX)]
    import pandas as pd

    ar = pd.concat([ar[["num_gpus", "message_size", "latency"]], nccl[["num_gpus", "message_size", "latency"]]])
    ar = ar.groupby(["num_gpus", "message_size"], as_index=False).latency.min()
    out = {"gemm": g, "ctx": ctx, "gen": gen, "ar": ar}
    if len(g8):
        out["gemm_fp8"] = g8
    return out


# ---------------------------------------------------------------------------------------------
# each kernel family's roofline (what the fit adjusts), in seconds; latencies in the tables are ms


def gemm_model(c, gpu, m, n, k):
    from kvreplay.serving.timing.roofline import soft_max

    """A bf16 GEMM: compute (k0 more of K per tile: roofline.py's tile term) or its bytes."""
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    return (soft_max(2.0 * m * n * (k + c["gemm_k0"]) / (peak * c["e_gemm"]), 2.0 * (m * k + k * n + m * n) / (bw * c["e_weights"]),
                     c["gemm_overlap_p"]) + c["gemm_floor_s"])


def gemm_fp8_model(c, gpu, m, n, k):
    """An fp8 GEMM with its input's quantisation (a bf16 read, an fp8 write of m x k elements), its
    compute on the rows its tiles cover (roofline.fp8_gemm_rows) and k0 more of K per tile."""
    from kvreplay.serving.timing.roofline import fp8_gemm_rows, soft_max

    peak, bw = gpu.peak_flops("fp8"), gpu.bandwidth_bytes_per_s
    rows = fp8_gemm_rows(m, c["fp8_partial_rows"])
    return (soft_max(2.0 * rows * n * (k + c["gemm_k0_fp8"]) / (peak * c["e_gemm_fp8"]), (m * k + k * n + 2.0 * m * n) / (bw * c["e_weights_fp8"]),
                     c["gemm_overlap_p_fp8"])
            + c["gemm_floor_fp8_s"] + 3.0 * m * k / (bw * c["e_quant_fp8"]))


def ctx_model(c, gpu, b, s, h, kv, d):
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    f = 4.0 * b * h * d * s * (s + 1) / 2
    by = 2.0 * b * s * d * (2 * h + 2 * kv)
    return np.maximum(f / (peak * c["e_attn_prefill"]), by / (bw * c["e_kv_prefill"])) + c["attn_floor_prefill_s"]


def gen_model(c, gpu, b, ctx, h, kv, d):
    peak, bw = gpu.peak_flops("bf16"), gpu.bandwidth_bytes_per_s
    f = 4.0 * b * h * d * ctx
    by = 2.0 * b * ctx * kv * d * 2
    return (np.maximum(f / (peak * c["e_attn_decode"]), by / (bw * c["e_kv_decode"])) + c["attn_floor_decode_s"]
            + b * c["attn_per_request_decode_s"])


def ar_model(c, n, elements):
    return c["allreduce_latency_s"] + 2.0 * (n - 1) / n * elements * 2.0 / c["allreduce_bus_bytes_per_s"]


def nelder_mead(loss, x0, steps, iters=600):
    """Minimise loss over log-parameters (numpy only)."""
    n = len(x0)
    pts = [np.array(x0, dtype=float)] + [np.array(x0, dtype=float) + np.eye(n)[i] * steps[i] for i in range(n)]
    vals = [loss(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = loss(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - pts[-1])
            fe = loss(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid)
            fc = loss(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [loss(p) for p in pts]
    best = int(np.argmin(vals))
    return pts[best], vals[best]


def fit_family(names, start, predict, measured):
    """Fit coefficients `names` (positive; log-space) minimising the mean relative error."""
    x0 = np.log([start[k] for k in names])

    def loss(x):
        c = {**start, **dict(zip(names, np.exp(x)))}
        pred = predict(c)
        return float(np.mean(np.abs(pred - measured) / measured))

    x, err = nelder_mead(loss, x0, [0.3] * len(names))
    return dict(zip(names, np.exp(x))), err


START = {"e_gemm": 0.7, "e_weights": 0.8, "gemm_floor_s": 5e-6, "gemm_k0": 100.0, "gemm_overlap_p": 4.0, "e_attn_prefill": 0.5, "e_kv_prefill": 0.5,
         "attn_floor_prefill_s": 2e-5, "e_attn_decode": 0.3, "e_kv_decode": 0.6, "attn_floor_decode_s": 1e-5,
         "attn_per_request_decode_s": 2e-8,
         "allreduce_latency_s": 1e-5, "allreduce_bus_bytes_per_s": 3e11, "per_layer_s": 0.0, "per_step_s": 0.0}
START_FP8 = {"e_gemm_fp8": 0.6, "e_weights_fp8": 0.8, "gemm_floor_fp8_s": 5e-6, "gemm_k0_fp8": 300.0, "fp8_partial_rows": 50.0, "gemm_overlap_p_fp8": 4.0,
             "e_quant_fp8": 0.3}


def fit_gpu(tables: dict, gpu) -> tuple[dict, dict]:
    c = dict(START)
    errs = {}
    g = tables["gemm"]
    g = g[(g.n >= 256) & (g.k >= 256)]
    m, n, k, y = (g[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
    fitted, errs["gemm"] = fit_family(["e_gemm", "e_weights", "gemm_floor_s", "gemm_k0", "gemm_overlap_p"], c,
                                      lambda cc: gemm_model(cc, gpu, m, n, k), y / 1e3)
    c.update(fitted)
    if "gemm_fp8" in tables:
        g = tables["gemm_fp8"]
        g = g[(g.n >= 256) & (g.k >= 256)]
        m, n, k, y = (g[x].to_numpy(float) for x in ("m", "n", "k", "latency"))
        c.update(START_FP8)
        fitted, errs["gemm_fp8"] = fit_family(list(START_FP8), c, lambda cc: gemm_fp8_model(cc, gpu, m, n, k), y / 1e3)
        c.update(fitted)
    x = tables["ctx"]
    args = [x[a].to_numpy(float) for a in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")]
    fitted, errs["attn_prefill"] = fit_family(["e_attn_prefill", "e_kv_prefill", "attn_floor_prefill_s"], c,
                                              lambda cc: ctx_model(cc, gpu, *args), x.latency.to_numpy(float) / 1e3)
    c.update(fitted)
    x = tables["gen"]
    args = [x.batch_size.to_numpy(float), x.step.to_numpy(float) + 1, x.num_heads.to_numpy(float),
            x.num_key_value_heads.to_numpy(float), x.head_dim.to_numpy(float)]
    fitted, errs["attn_decode"] = fit_family(["e_attn_decode", "e_kv_decode", "attn_floor_decode_s",
                                              "attn_per_request_decode_s"], c,
                                             lambda cc: gen_model(cc, gpu, *args), x.latency.to_numpy(float) / 1e3)
    c.update(fitted)
    x = tables["ar"]
    # the bus bandwidth from NCCL's large messages, then the latency from the small ones
    for part, names in ((x[x.message_size * 2 > CUSTOM_AR_MAX], ["allreduce_bus_bytes_per_s"]),
                        (x[x.message_size * 2 <= 2 ** 16], ["allreduce_latency_s"])):
        nn, size = part.num_gpus.to_numpy(float), part.message_size.to_numpy(float)
        fitted, _ = fit_family(names, c, lambda cc: ar_model(cc, nn, size), part.latency.to_numpy(float) / 1e3)
        c.update(fitted)
    nn, size = x.num_gpus.to_numpy(float), x.message_size.to_numpy(float)
    errs["allreduce"] = float(np.mean(np.abs(ar_model(c, nn, size) - x.latency.to_numpy(float) / 1e3)
                                      / (x.latency.to_numpy(float) / 1e3)))
    return c, errs


# ---------------------------------------------------------------------------------------------
# measured steps, composed kernel by kernel from a GPU's own tables


class Measured:
    """A GPU's measured kernels, looked up at any shape (gemm: "gemm" bf16 or "gemm_fp8")."""

    def __init__(self, tables, gemm="gemm"):
        g = tables[gemm]
        self.gemm = {}
        for (n, k), part in g.groupby(["n", "k"]):
            part = part.sort_values("m")
            self.gemm[(int(n), int(k))] = (part.m.to_numpy(float), part.latency.to_numpy(float) / 1e3)
        self.ns = sorted({n for n, _ in self.gemm})
        self.ks = sorted({k for _, k in self.gemm})
        self.ctx = tables["ctx"]
        self.gen = tables["gen"].assign(ctxlen=tables["gen"].step + 1)  # the table's step: tokens before this one
        ar = tables["ar"]
        self.ar = {int(n): (p.sort_values("message_size").message_size.to_numpy(float),
                            p.sort_values("message_size").latency.to_numpy(float) / 1e3) for n, p in ar.groupby("num_gpus")}

    def _gemm_at(self, m, n, k):
        xs, ys = self.gemm[(n, k)]
        return float(np.interp(m, xs, ys)) if m <= xs[-1] else float(ys[-1] * m / xs[-1])

    def gemm_time(self, m, n, k):
        def bracket(v, grid):
            if v <= grid[0]:
                return grid[0], grid[0]
            if v >= grid[-1]:
                return grid[-1], grid[-1]
            i = int(np.searchsorted(grid, v))
            return (v, v) if grid[i] == v else (grid[i - 1], grid[i])

        n0, n1 = bracket(n, self.ns)
        k0, k1 = bracket(k, self.ks)

        def at(nn, kk):
            return self._gemm_at(m, nn, kk)

        def lin(v, a, b, fa, fb):
            return fa if a == b else fa + (fb - fa) * (v - a) / (b - a)

        t = lin(k, k0, k1, lin(n, n0, n1, at(n0, k0), at(n1, k0)), lin(n, n0, n1, at(n0, k1), at(n1, k1)))
        # beyond the grid: proportional
        if n > self.ns[-1]:
            t *= n / self.ns[-1]
        if k > self.ks[-1]:
            t *= k / self.ks[-1]
        return t

    def _attn(self, table, key_col, b, x, h, kv):
        part = table[(table.num_heads == h) & (table.num_key_value_heads == kv)]
        if part.empty:
            return None
        bs = sorted(part.batch_size.unique())
        out = []
        b_lo = max([v for v in bs if v <= b], default=bs[0])
        b_hi = min([v for v in bs if v >= b], default=bs[-1])
        for bb in sorted({b_lo, b_hi}):
            q = part[part.batch_size == bb].sort_values(key_col)
            xs, ys = q[key_col].to_numpy(float), q.latency.to_numpy(float) / 1e3
            if len(xs) < 2:
                return None
            out.append((bb, float(np.interp(np.log(x), np.log(xs), ys)) if x <= xs[-1] else float(ys[-1] * x / xs[-1])))
        if len(out) == 1:
            return out[0][1] * (b / out[0][0] if b > out[0][0] else 1.0)
        (b0, t0), (b1, t1) = out
        return t0 + (t1 - t0) * (np.log(b) - np.log(b0)) / (np.log(b1) - np.log(b0))

    def ctx_time(self, b, s, h, kv):
        return self._attn(self.ctx, "isl", b, s, h, kv)

    def gen_time(self, b, ctx, h, kv):
        return self._attn(self.gen, "ctxlen", b, ctx, h, kv)

    def ar_time(self, n, elements):
        xs, ys = self.ar[n]
        return float(np.interp(np.log(elements), np.log(xs), ys)) if elements <= xs[-1] else float(ys[-1] * elements / xs[-1])


def composed_step(meas: Measured, spec, tp, prefill: list[int], decodes: int, ctx: int, head: Measured | None = None):
    """A step's time from measured kernels: None where a table lacks the shape (the LM head's
    GEMM from `head`'s tables, default `meas`)."""
    H, I, V, d = spec.hidden_size, spec.intermediate_size, spec.vocab_size, spec.head_dim
    h, kv = spec.num_attention_heads // tp, max(1, spec.num_kv_heads // tp)
    T = sum(prefill) + decodes
    rows = len(prefill) + decodes
    layer = (meas.gemm_time(T, (h + 2 * kv) * d, H) + meas.gemm_time(T, H, h * d)
             + meas.gemm_time(T, 2 * I // tp, H) + meas.gemm_time(T, H, I // tp))
    attn = 0.0
    if prefill:
        s = prefill[0]  # the prefills of a step share one length here
        t = meas.ctx_time(len(prefill), s, h, kv)
        if t is None:
            return None
        attn += t
    if decodes:
        t = meas.gen_time(decodes, ctx, h, kv)
        if t is None:
            return None
        attn += t
    ar = 2 * meas.ar_time(tp, T * H) if tp > 1 else 0.0
    lm_head = (head or meas).gemm_time(rows, V // tp, H)
    return spec.num_layers * (layer + attn + ar) + lm_head


def step_shapes():
    for s in (128, 256, 512, 1024, 2048, 4096, 8192):
        for b in (1, 2, 4):
            if b * s <= 16384:
                yield "prefill", [s] * b, 0, 0
    for b in (1, 4, 16, 32, 64, 128, 256):
        for ctx in (512, 2048, 8192):
            yield "decode", [], b, ctx
    for n in (256, 1024, 2048):
        for b in (8, 32, 128):
            for ctx in (1024, 4096):
                yield "mixed", [n], b, ctx


def step_table(meas: Measured, gpu_name: str, coefficients: dict, dtype: str = "bf16", head: Measured | None = None):
    """Composed steps of the DENSE models against the calibrated roofline's predictions. fp8: `meas`
    holds the fp8 GEMMs, `head` the bf16 ones the LM head runs (fp8 checkpoints keep it bf16)."""
    from kvreplay.analysis.models import get_model
    from kvreplay.serving.timing.models import StepBatch
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    rows = []
    for name, tps in DENSE:
        spec = get_model(name)
        for tp in tps:
            model = CalibratedRooflineTimeModel(name, gpu_name, tp, dtype=dtype, coefficients=coefficients)
            for phase, prefill, b, ctx in step_shapes():
                measured = composed_step(meas, spec, tp, prefill, b, ctx, head=head)
                if measured is None:
                    continue
                batch = StepBatch(prefill_new=tuple(prefill), prefill_cached=(0,) * len(prefill),
                                  decode_context=(ctx,) * b)
                rows.append({"model": name, "tp": tp, "phase": phase, "measured_s": measured,
                             "predicted_s": model.step_time(batch), "prefill": prefill, "decodes": b, "ctx": ctx})
    return rows


def raw_table(rows, gpu_name, dtype="bf16"):
    """The same steps under the raw roofline (MFU 0.5, MBU 0.6)."""
    from kvreplay.serving.timing.models import RooflineTimeModel, StepBatch

    out = []
    cache = {}
    for r in rows:
        key = (r["model"], r["tp"])
        if key not in cache:
            cache[key] = RooflineTimeModel(r["model"], gpu_name, r["tp"], dtype=dtype)
        batch = StepBatch(prefill_new=tuple(r["prefill"]), prefill_cached=(0,) * len(r["prefill"]),
                          decode_context=(r["ctx"],) * r["decodes"])
        out.append({**r, "predicted_s": cache[key].step_time(batch)})
    return out


def summary(rows):
    out = {}
    for phase in ("prefill", "decode", "mixed"):
        ratios = np.array([r["measured_s"] / r["predicted_s"] for r in rows if r["phase"] == phase])
        if len(ratios) == 0:
            continue
        errs = np.abs(1 / ratios - 1)
        out[phase] = {"cases": int(len(ratios)), "mape": float(np.mean(errs)), "median_ratio": float(np.median(ratios)),
                      "min_ratio": float(ratios.min()), "max_ratio": float(ratios.max()),
                      "band": [float(np.percentile(ratios, 5)), float(np.percentile(ratios, 95))]}
    return out


def print_summary(title, s):
    print(f"\n{title}\n")
    print("| phase | cases | error (MAPE) | measured / predicted, median [range] | 5-95% band |")
    print("| --- | ---: | ---: | --- | --- |")
    for phase, v in s.items():
        print(f"| {phase} | {v['cases']} | {100 * v['mape']:.1f}% | {v['median_ratio']:.2f} [{v['min_ratio']:.2f}-"
              f"{v['max_ratio']:.2f}] | {v['band'][0]:.2f}-{v['band'][1]:.2f} |")


# ---------------------------------------------------------------------------------------------
# end to end: aiconfigurator's silicon vLLM serving runs, simulated

SILICON_MODELS = {"Qwen/Qwen3-32B": "Qwen3-32B", "meta-llama/Llama-3.1-70B": "Llama-3.1-70B",
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B"}
SILICON_GPUS = {"h100_sxm": "H100", "h200_sxm": "H200"}


def silicon_runs(t: Tables):
    out = []
    for r in t.silicon():
        if (r["backend"] != "vllm" or r["mode"] != "agg" or r["system"] not in SILICON_GPUS
                or r["model_path"] not in SILICON_MODELS or (r["pp_size"] or "1") != "1"):
            continue
        out.append({"id": r["id"], "gpu": SILICON_GPUS[r["system"]], "model": SILICON_MODELS[r["model_path"]],
                    "weights": "fp8" if r["gemm_quant_mode"] == "fp8" else "bf16", "tp": int(r["tp_size"]),
                    "concurrency": int(r["batch_size"]), "isl": int(r["isl"]), "osl": int(r["osl"]),
                    "ttft_s": float(r["silicon_ttft_ms"]) / 1e3, "tpot_s": float(r["silicon_tpot_ms"]) / 1e3,
                    "source": r["silicon_data_source"]})
    return out


def _serve(run, time_model, n, arrivals_s):
    import kvreplay
    from kvreplay.serving.simulate import Scheduler

    blocks = -(-run["isl"] // 16)
    requests = [(list(range(i * blocks, (i + 1) * blocks)), run["isl"], float(t) * 1e3, run["osl"])
                for i, t in enumerate(arrivals_s)]
    trace = kvreplay.Trace.from_requests(requests, block_size=16)
    return kvreplay.simulate(trace, "vllm", None, 16, time_model=time_model, model=run["model"], gpu=run["gpu"],
                             tp=run["tp"], weights_dtype=run["weights"], kv_dtype=run["weights"],
                             scheduler=Scheduler(style="vllm", max_num_seqs=run["concurrency"]),
                             compare_sequential=False, check=False)


def simulate_run(run, make_model, client="burst"):
    """The run in kvreplay (see the module docstring, 4): (TTFT s, TPOT s), means over the
    requests after the first B. An fp8 run stores its KV at fp8 too (aiconfigurator's "precision").

    client: how B benchmark clients are approximated (docs/performance.md section 13 compares them):
    "burst": 3B requests at t=0, max_num_seqs B, TTFT from schedule (the server's queue left out);
    "closed": B clients in a closed loop (request i+B is sent when request i finishes), all
    starting at t=0, TTFT from send; "staggered": the same loop with the clients' first sends
    spread evenly over one request's latency (the desynchronised steady state)."""
    B = run["concurrency"]
    n = (3 if client == "burst" else 4) * B
    tm = make_model(run)
    arrivals = np.zeros(n)
    if client == "burst":
        r = _serve(run, tm, n, arrivals)
        start = r.scheduled_s
    else:
        if client == "staggered":  # one request's latency from a synchronised first wave
            first = _serve(run, tm, B, arrivals[:B])
            period = float(np.mean(first.finish_s))
            arrivals = np.concatenate([np.arange(B) * period / B + w * period for w in range(n // B)])
        for _ in range(2 * n // B + 2):  # the loop's fixed point: each wave's sends from the last one's finishes
            r = _serve(run, tm, n, arrivals)
            sends = arrivals.copy()
            sends[B:] = r.finish_s[:-B]
            if np.allclose(sends, arrivals):
                break
            arrivals = sends
        start = r.arrival_s
    ok = r.finished & (np.arange(n) >= B)
    ttft = float(np.mean((r.first_token_s - start)[ok]))
    tpot = float(np.mean(((r.finish_s - r.first_token_s) / np.maximum(r.output_tokens - 1, 1))[ok]))
    return ttft, tpot


def e2e_errors(runs, make_model, client="burst"):
    rows = []
    for run in runs:
        try:
            ttft, tpot = simulate_run(run, make_model, client)
        except Exception as e:  # (a configuration kvreplay refuses: said, not counted)
            rows.append({**run, "error": str(e)})
            continue
        rows.append({**run, "sim_ttft_s": ttft, "sim_tpot_s": tpot})
    return rows


def e2e_summary(rows):
    ok = [r for r in rows if "error" not in r]
    out = {"runs": len(ok), "refused": len(rows) - len(ok)}
    for key in ("ttft", "tpot"):
        ratios = np.array([r[f"{key}_s"] / r[f"sim_{key}_s"] for r in ok])
        out[key] = {"mape": float(np.mean(np.abs(1 / ratios - 1))), "median_ratio": float(np.median(ratios)),
                    "min_ratio": float(ratios.min()), "max_ratio": float(ratios.max()),
                    "band": [float(np.percentile(ratios, 5)), float(np.percentile(ratios, 95))]}
    return out


def print_e2e(title, s):
    print(f"\n{title} ({s['runs']} runs" + (f", {s['refused']} refused" if s["refused"] else "") + ")\n")
    print("| latency | error (MAPE) | measured / simulated, median [range] | 5-95% band |")
    print("| --- | ---: | --- | --- |")
    for key in ("ttft", "tpot"):
        v = s[key]
        print(f"| {key.upper()} | {100 * v['mape']:.1f}% | {v['median_ratio']:.2f} [{v['min_ratio']:.2f}-"
              f"{v['max_ratio']:.2f}] | {v['band'][0]:.2f}-{v['band'][1]:.2f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print the held-back tables from the shipped coefficients")
    ap.add_argument("--json", default=None, help="also write every table as JSON here")
    ap.add_argument("--e2e", action="store_true", help="also simulate aiconfigurator's silicon vLLM serving runs")
    ap.add_argument("--client", choices=("burst", "closed", "staggered"), default="burst",
                    help="with --e2e: how the runs' B benchmark clients are approximated (simulate_run)")
    args = ap.parse_args()
    from kvreplay.serving.timing.gpus import get_gpu

    whl = wheel()
    t = Tables(whl)
    tabs = {name: kernels(t, d) for name, d in GPUS.items()}
    meas = {name: Measured(tabs[name]) for name in GPUS}
    meas8 = {name: Measured(tabs[name], "gemm_fp8") for name in GPUS if "gemm_fp8" in tabs[name]}
    report = {}
    if args.check:
        shipped = json.loads(OUT.read_text())
        fit = shipped["gpus"][FIT_GPU]["coefficients"]
    else:
        fit, errs = fit_gpu(tabs[FIT_GPU], get_gpu(FIT_GPU))
        print(f"kernel fit on {FIT_GPU}: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in errs.items()))
    for name in GPUS:
        rows = step_table(meas[name], name, fit)
        held = "in-sample GPU, unseen step shapes" if name == FIT_GPU else "held back: never fitted"
        s = summary(rows)
        print_summary(f"{name} steps ({held}), predicted with {FIT_GPU}'s coefficients", s)
        raw = summary(raw_table(rows, name))
        print_summary(f"{name} steps, roofline-raw (MFU 0.5, MBU 0.6)", raw)
        report[name] = {"calibrated": s, "raw": raw}
        if name in meas8:  # fp8 weights: the same steps with the measured fp8 GEMMs
            rows = step_table(meas8[name], name, fit, "fp8", head=meas[name])
            s8, raw8 = summary(rows), summary(raw_table(rows, name, "fp8"))
            print_summary(f"{name} fp8 steps ({held}), predicted with {FIT_GPU}'s coefficients", s8)
            print_summary(f"{name} fp8 steps, roofline-raw (MFU 0.5, MBU 0.6)", raw8)
            report[name].update({"calibrated_fp8": s8, "raw_fp8": raw8})
    if args.e2e:
        from kvreplay.serving.timing.models import RooflineTimeModel
        from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

        coefficients = (json.loads(OUT.read_text())["gpus"] if args.check else None)
        runs = silicon_runs(t)
        for label, make in (
                ("roofline-raw", lambda r: RooflineTimeModel(r["model"], r["gpu"], r["tp"], dtype=r["weights"], kv_dtype=r["weights"])),
                ("roofline (calibrated)", lambda r: CalibratedRooflineTimeModel(
                    r["model"], r["gpu"], r["tp"], dtype=r["weights"],
                    coefficients=None if coefficients is None else coefficients[r["gpu"]]["coefficients"]))):
            for gpu in ("H100", "H200"):
                rows = e2e_errors([r for r in runs if r["gpu"] == gpu], make, args.client)
                s = e2e_summary(rows)
                print_e2e(f"end to end, {gpu}: aiconfigurator silicon vLLM runs against kvreplay, {label}, "
                          f"{args.client} clients", s)
                report.setdefault("e2e", {}).setdefault(label, {})[gpu] = s
    if not args.check:
        gpus = {}
        for name in GPUS:
            own, errs = (fit, None) if name == FIT_GPU else fit_gpu(tabs[name], get_gpu(name))
            rows = step_table(meas[name], name, own)
            gpus[name] = {"coefficients": {k: float(v) for k, v in own.items()},
                          "bands": {p: v["band"] for p, v in summary(rows).items()},
                          "step_error": {p: v["mape"] for p, v in summary(rows).items()}}
            if name in meas8:
                s8 = summary(step_table(meas8[name], name, own, "fp8", head=meas[name]))
                gpus[name]["bands_fp8"] = {p: v["band"] for p, v in s8.items()}
                gpus[name]["step_error_fp8"] = {p: v["mape"] for p, v in s8.items()}
        # Decode steps in real serving also pay what no kernel table holds (sampling, scheduling,
        # norms and activations): where silicon runs exist, the decode band takes in their TPOT's
        # measured/simulated spread (5-95%) too.
        from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

        runs = silicon_runs(t)
        for name in ("H100", "H200"):
            mine = [r for r in runs if r["gpu"] == name]
            coef = gpus[name]["coefficients"]
            e2e = e2e_summary(e2e_errors(mine, lambda r: CalibratedRooflineTimeModel(
                r["model"], r["gpu"], r["tp"], dtype=r["weights"], kv_dtype=r["weights"], coefficients=coef)))
            for key in ("bands", "bands_fp8"):
                if key in gpus[name]:
                    lo, hi = gpus[name][key]["decode"]
                    gpus[name][key]["decode"] = [min(lo, e2e["tpot"]["band"][0]), max(hi, e2e["tpot"]["band"][1])]
            gpus[name]["e2e_tpot_band"] = e2e["tpot"]["band"]
        transfer = {}
        for name in GPUS:
            if name != FIT_GPU:
                for p, v in report[name]["calibrated"].items():
                    lo, hi = transfer.get(p, (np.inf, -np.inf))
                    transfer[p] = (min(lo, v["band"][0]), max(hi, v["band"][1]))
        for name in ("H100", "H200"):  # and the silicon TPOT spread
            lo, hi = transfer["decode"]
            transfer["decode"] = (min(lo, gpus[name]["e2e_tpot_band"][0]), max(hi, gpus[name]["e2e_tpot_band"][1]))
        data = {
            "_comment": "Written by benchmarks/calibrate.py: the calibrated roofline's coefficients per measured GPU "
                        "(serving/timing/roofline.py). Bands: 5th-95th percentile of measured / predicted step time over steps "
                        "composed from the GPU's measured kernels; the decode band also spans the silicon runs' TPOT "
                        "measured / simulated (e2e_tpot_band); transfer_bands: a GPU without measurements.",
            "sources": [{"name": "NVIDIA aiconfigurator kernel database", "repository": "https://github.com/ai-dynamo/aiconfigurator",
                         "package": f"aiconfigurator-core=={WHEEL_VERSION} (PyPI wheel {whl.name})",
                         "sha256": sha256(whl), "license": "Apache-2.0",
                         "attribution": "Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. Licensed under the Apache "
                                        "License, Version 2.0; kvreplay ships coefficients fitted to these measurements, "
                                        "not the measurements.",
                         "files": sorted(t.used)}],
            "fitted_range": {"models": [n for n, _ in DENSE], "tp": [1, 2, 4, 8], "max_context": 8192,
                             "max_prefill_tokens": 16384, "max_decode_batch": 256},
            "gpus": gpus,
            "transfer_bands": {p: [float(lo), float(hi)] for p, (lo, hi) in transfer.items()},
            "relatives": {"B200": "H200", "MI300X": "H200", "L40S": "A100-80GB"},
            "held_back": report,
        }
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        print(f"\nwrote {OUT.relative_to(REPO)}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
