"""The token exchange of vLLM's data parallelism over an MoE: NCCL's all-gather and reduce-scatter,
fitted per group size on aiconfigurator's measured H100 tables (the fit's GPU), and on the RTX PRO
6000 Server Edition's own (PCIe 5, where the H100's terms scaled to its link are 1.6-1.8x fast over
4 and 8 GPUs).

Source: NVIDIA aiconfigurator's kernel database (Apache-2.0), in the PyPI wheel
``aiconfigurator-core==0.12.0`` (github.com/ai-dynamo/aiconfigurator), the same wheel
benchmarks/calibrate.py reads: ``systems/data/h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet``,
nccl-tests' ``all_gather_perf`` and ``reduce_scatter_perf`` (half) on 2, 4 and 8 H100 SXM over
NVSwitch, 21 messages each from 512 B to 512 MiB. aiconfigurator's collector
(collector/collect_nccl.py) records ``message_size`` as nccl-tests' size over the element's bytes:
the whole gathered buffer (an all-gather's output, a reduce-scatter's input), and ``latency`` as
the out-of-place time, ms.

Each (operation, group size) gets ``latency + (n - 1) / n x bytes / bus``, the ring's form (the
bus bandwidth nccl-tests prints as busbw), fitted minimising the squared relative error over every
message: serving/timing/exchange.py EXCHANGE (and OWN_EXCHANGE) ship the figures this prints. Any
other GPU runs the H100's with the bus bandwidth scaled to its own link (the catalog's ``link_gbps``), as a
relative's all-reduce is (roofline.py _resolve_coefficients).

    python benchmarks/fit_dp_exchange.py            # fit on the H100's and RTX PRO 6000's tables, print them
    python benchmarks/fit_dp_exchange.py --check    # the shipped figures against those tables, and,
                                                    # held out (checked, never fitted), the H200's;
                                                    # the catalog's networks between servers against
                                                    # the wheel's system specs (NETWORKS)

No table of the wheel holds more than 8 GPUs (2 and 4 on GB200 / GB300), so a group over more than
one server is priced from the catalog's network (``scale_out_gbps``, ``node_gpus``: the system
specs' ``inter_node_bw`` and ``num_gpus_per_node``) as NCCL's ring over the servers
(exchange.py across_servers): an assumption, with nothing measured to fit or check it on.
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
from calibrate import wheel  # noqa: E402

FIT = ("H100", "h100_sxm", "2.29.2")
#: GPUs fitted on their own table (exchange.py OWN_EXCHANGE): the RTX PRO 6000 Server Edition (PCIe 5)
OWN = (("RTX-PRO-6000", "rtx_pro_6000_server", "2.29.2"),)
#: checked, never fitted: the H200 (held back)
CHECK = (("H200", "h200_sxm", "2.29.2"),)
OPS = ("all_gather", "reduce_scatter")
#: catalog GPU -> the wheel's system spec its network between servers is read from (gpus.json scale_out_source)
NETWORKS = {"A100-40GB": "a100_sxm", "A100-80GB": "a100_sxm", "L4": "l4", "L40S": "l40s", "H100": "h100_sxm",
            "H200": "h200_sxm", "B200": "b200_sxm", "B300": "b300_sxm", "RTX-PRO-6000": "rtx_pro_6000_server"}


def table(gpu_dir: str, version: str):
    """(op, group, bytes, seconds) arrays of the half rows of one GPU's NCCL table."""
    import pyarrow.parquet as pq

    name = f"aiconfigurator_core/systems/data/{gpu_dir}/comm/nccl/{version}/nccl_perf.parquet"
    df = pq.read_table(io.BytesIO(zipfile.ZipFile(wheel()).read(name))).to_pandas()
    df = df[(df.nccl_dtype == "half") & df.op_name.isin(OPS)]
    return (df.op_name.to_numpy(str), df.num_gpus.to_numpy(int), df.message_size.to_numpy(float) * 2.0,
            df.latency.to_numpy(float) / 1e3)


def fit(group: int, nbytes, seconds) -> tuple[float, float]:
    """(latency s, bus bytes/s) minimising sum(((latency + x / bus) / seconds - 1)^2), x the ring's bytes."""
    x = (group - 1) / group * nbytes
    a = np.stack([1.0 / seconds, x / seconds], axis=1)
    (latency, inverse), *_ = np.linalg.lstsq(a, np.ones_like(seconds), rcond=None)
    return float(latency), float(1.0 / inverse)


def report(label: str, gpu: str, rows, terms) -> None:
    from kvreplay.serving.timing.exchange import collective_time

    op, n, nbytes, seconds = rows
    for o in OPS:
        for g in sorted(set(n.tolist())):
            keep = (op == o) & (n == g)
            predicted = np.array([collective_time(terms(o, g), g, b) for b in nbytes[keep]])
            ratio = seconds[keep] / predicted
            big = nbytes[keep] >= 2 ** 20
            print(f"{label} {gpu} {o} over {g}: {keep.sum()} messages, mean |error| {np.mean(np.abs(1 / ratio - 1)):.1%} "
                  f"(from 1 MiB: {np.mean(np.abs(1 / ratio[big] - 1)):.1%}), median measured / predicted "
                  f"{np.median(ratio):.3f}, 5-95% {np.percentile(ratio, 5):.3f}-{np.percentile(ratio, 95):.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="the shipped figures against the tables (module doc)")
    args = ap.parse_args(argv)
    from kvreplay.serving.timing.exchange import EXCHANGE, OWN_EXCHANGE, exchange_terms

    fitted = (FIT, *OWN)
    if args.check:
        for gpu, gpu_dir, version in fitted:
            report("fit", gpu, table(gpu_dir, version), lambda o, g, gpu=gpu: exchange_terms(o, g, gpu))
        for gpu, gpu_dir, version in CHECK:
            report("held out", gpu, table(gpu_dir, version), lambda o, g, gpu=gpu: exchange_terms(o, g, gpu))
        return check_networks()
    for gpu, gpu_dir, version in fitted:
        shipped = (EXCHANGE if gpu == FIT[0] else OWN_EXCHANGE[gpu])["terms"]
        print(f"fitted on {gpu} ({gpu_dir}, NCCL {version}); shipped now: {shipped}")
        for o, terms in fit_terms(table(gpu_dir, version)).items():
            print(f'    "{o}": {{')
            for g, (latency, bus) in terms.items():
                print(f"        {g}: ({latency:.4g}, {bus:.4g}),")
            print("    },")
    return 0


def check_networks() -> int:
    """The catalog's network between servers against the wheel's system specs (NETWORKS): 1 on a mismatch."""
    import re

    from kvreplay.catalog.gpus import get_gpu

    bad = 0
    for gpu, system in NETWORKS.items():
        text = zipfile.ZipFile(wheel()).read(f"aiconfigurator_core/systems/{system}.yaml").decode()
        spec = {k: float(re.search(rf"^\s*{k}:\s*([0-9.e+]+)", text, re.M).group(1))
                for k in ("inter_node_bw", "num_gpus_per_node")}
        g = get_gpu(gpu)
        ok = (g.scale_out_gbps * 1e9, g.node_gpus) == (spec["inter_node_bw"], spec["num_gpus_per_node"])
        bad += not ok
        print(f"network {gpu} ({system}.yaml): inter_node_bw {spec['inter_node_bw']:.4g} B/s x "
              f"{spec['num_gpus_per_node']:g} a server; catalog {g.scale_out_gbps:g} GB/s x {g.node_gpus}: "
              f"{'same' if ok else 'DIFFERENT'}")
    return 1 if bad else 0


def fit_terms(rows) -> dict:
    """op -> group size -> (latency s, bus bytes/s), each fitted on its messages (fit)."""
    op, n, nbytes, seconds = rows
    return {o: {g: fit(g, nbytes[(op == o) & (n == g)], seconds[(op == o) & (n == g)])
                for g in sorted(set(n.tolist()))} for o in OPS}


if __name__ == "__main__":
    raise SystemExit(main())
