"""The GPUs teams buy now (kvreplay/data/gpus.json): every figure of the entries added on 2026-12-07
checked against the numbers its sources print, the memory each device reports against its datasheet,
a pool on a new GPU worked by hand, the calibration each borrows or fits, `kvreplay gpus`, and
docs/gpus.md's catalog table against the catalog."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.serving.timing import gpu_catalog, kv_capacity
from kvreplay.catalog.gpus import datacenter_blackwell, get_gpu
from kvreplay.serving.timing.host import graph_ceiling
from kvreplay.serving.timing.memory import capture_sizes, weight_parts
from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel, calibration_data, calibration_for

from test_cli import ok

DOC = Path(__file__).resolve().parents[2] / "docs" / "gpus.md"
GiB = 1 << 30

# name -> (what the quoted source prints: (figure, GPUs it covers, sparse?) for BF16, FP8, FP4, and
# the memory bandwidth in GB/s and capacity in GB over those GPUs). Dense per GPU = figure / GPUs,
# halved when the source prints it with 2:4 sparsity. Each printed string must be in `source`.
SOURCES = {
    # GB200 NVL72 page, one GB200 superchip (2 GPUs): 10 / 20 / 40 PFLOPS with sparsity, 372 GB, 16 TB/s
    "GB200": (("FP16/BF16 Tensor Core 10 PFLOPS", 10_000, 2, True), ("FP8/FP6 Tensor Core 20 PFLOPS", 20_000, 2, True),
              ("FP4 Tensor Core 40 PFLOPS", 40_000, 2, True), ("16 TB/s", 16_000, 2), ("372 GB", 372, 2)),
    # GB300 NVL72 page, the rack (72 GPUs): 360 / 720 PFLOPS with sparsity, FP4 1,080 dense, 576 TB/s
    "GB300": (("FP16/BF16 Tensor Core 360 PFLOPS", 360_000, 72, True), ("FP8/FP6 Tensor Core 720 PFLOPS", 720_000, 72, True),
              ("1,080 PFLOPS dense", 1_080_000, 72, False), ("576 TB/s", 576_000, 72), ("288 GB HBM3e", 288, 1)),
    # HGX page, HGX B300 (8 GPUs): 36 / 72 PFLOPS with sparsity, FP4 105 dense; 8 TB/s and 288 GB per GPU
    "B300": (("FP16/BF16 Tensor Core 36 PFLOPS", 36_000, 8, True), ("FP8/FP6 Tensor Core 72 PFLOPS", 72_000, 8, True),
             ("105 PFLOPS dense", 105_000, 8, False), ("8 TB/s per GPU", 8_000, 1), ("288 GB HBM3e", 288, 1)),
    # no NVIDIA datasheet page: the spec pages' dense figures (FP8 = the INT8 rate, as on every Hopper)
    "H20": (("148 TFLOPS FP16", 148, 1, False), ("296 INT8", 296, 1, False), None, ("4,000 GB/s", 4_000, 1), ("96 GB", 96, 1)),
    # L4 datasheet: '* Shown with sparsity. Specifications are one-half lower without sparsity'
    "L4": (("BFLOAT16 Tensor Core 242 TFLOPS*", 242, 1, True), ("FP8 Tensor Core 485 TFLOPS*", 485, 1, True), None,
           ("300GB/s", 300, 1), ("24GB", 24, 1)),
    "MI325X": (("peak BFLOAT16 1307.4 TFLOPs", 1307.4, 1, False), ("peak FP8 2614.9 TFLOPs", 2614.9, 1, False), None,
               ("6 TB/s", 6_000, 1), ("256 GB HBM3E", 256, 1)),
    "A100-40GB": (("624 TFLOPS with sparsity", 624, 1, True), None, None, ("1,555GB/s", 1_555, 1), ("40GB HBM2", 40, 1)),
    # spec page's dense FP32-accumulate figures (what vLLM's bf16/fp8 GEMMs accumulate in)
    "RTX-4090": (("BF16: 165.15 TFLOPS", 165.15, 1, False), ("FP8: 330.30 TFLOPS", 330.3, 1, False), None,
                 ("1008 GB/s", 1_008, 1), ("24 GB", 24, 1)),
}


def test_the_rtx_3090_runs_fp32_accumulate_at_half_its_printed_fp16_rate():
    # its spec page prints 142 dense FP16 TFLOPS (FP16 accumulate); GeForce Ampere accumulates in
    # FP32 at half that, 71; no FP8 tensor cores, so fp8 weights are refused; PCIe, no NVLink counted
    g = get_gpu("rtx 3090")
    assert "FP16 TFLOPS (Sparsity) 142 (285)" in g.source and g.bf16_tflops == 142 / 2 and g.fp8_tflops is None
    assert "Bandwidth (GB/s) 936" in g.source and (g.bandwidth_gbps, g.memory_gb) == (936, 24)
    assert (g.link_gbps, g.link_topology, g.compute_capability) == (32, "pcie", "8.6")
    with pytest.raises(ConfigError, match="RTX-3090 has no fp8 tensor cores"):
        CalibratedRooflineTimeModel("Llama-3.1-8B", "RTX-3090", 1, dtype="fp8")


def test_the_rtx_pro_6000_is_what_its_sources_print():
    # spec page: 503.8 dense BF16 and "1.01 PFLOPS" dense FP8 at FP32 accumulate (held as 2 x 503.8),
    # "2.02 PFLOPS" FP4 (2 x 1,007.6); the Server Edition's 1,597 GB/s; PCIe Gen5 x16: 128 GB/s both
    # ways, 64 each; memory: the exact bytes LLMServingSim's vLLM runs recorded (94.97 GiB)
    g = get_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert g.name == "RTX-PRO-6000" and get_gpu("rtxpro6000") is g
    assert "503.8 TFLOPS Tensor" in g.source and g.bf16_tflops == 503.8
    assert "1.01 PFLOPS Tensor (FP32 Accumulate)" in g.source and g.fp8_tflops == pytest.approx(2 * 503.8)
    assert "2.02 PFLOPS Tensor" in g.source and g.fp4_tflops == pytest.approx(4 * 503.8)
    assert "'1597 GB/s'" in g.source and (g.bandwidth_gbps, g.memory_gb) == (1597, 96)
    assert "'device_total_memory_bytes': 101976440832" in g.total_memory_source
    assert g.total_memory_bytes == 101_976_440_832 and f"{g.total_memory_bytes / GiB:.2f}" == "94.97"
    assert 0.95 * 96e9 <= g.total_memory_bytes <= 96 * GiB
    assert (g.link_gbps, g.link_topology, g.compute_capability) == (64, "pcie", "12.0")
    assert "417.34 TFLOPS" in g.corroborated_by  # a measured BF16 GEMM: 83% of the dense peak
    assert '"mem_bw": 1597' in g.corroborated_by  # the Server Edition's bandwidth in LLMServingSim's own config
    # sm_120 is not data-centre Blackwell: vLLM's CUDA graph ceiling stays 512 (the runs' meta.json
    # print max_cudagraph_capture_size 256 at max_num_seqs 128, min(2 x 128, 512))
    assert not datacenter_blackwell(g) and graph_ceiling(128, g.name) == 256 and graph_ceiling(512, g.name) == 512


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_new_entry_is_what_its_source_prints(name):
    g = get_gpu(name)
    bf16, fp8, fp4, bw, mem = SOURCES[name]

    def dense(row):
        if row is None:
            return None
        text, figure, gpus, sparse = row
        assert text in g.source, (name, text)
        return figure / gpus / (2 if sparse else 1)

    assert g.bf16_tflops == pytest.approx(dense(bf16)) and g.fp8_tflops == pytest.approx(dense(fp8))
    assert g.fp4_tflops == (None if fp4 is None else pytest.approx(dense(fp4)))
    for (text, figure, gpus), value in ((bw, g.bandwidth_gbps), (mem, g.memory_gb)):
        assert text in g.source and value == pytest.approx(figure / gpus), (name, text)
    assert g.corroborated_by and "http" in g.corroborated_by + g.source


def test_the_mi355x_peaks_are_its_clock_times_its_units():
    # 256 CUs at 2.4 GHz: 4,096 BF16, 8,192 FP8 (AMD's ISSCC figure per CU per clock) and 16,384 MXFP4
    # FLOPs per CU per clock; AMD rounds them to 2.5, 5 and 10 PFLOPs
    g = get_gpu("MI355X")
    for value, per_clock, printed in ((g.bf16_tflops, 4096, "2.5 PFLOPs"), (g.fp8_tflops, 8192, "5 PFLOPs"),
                                      (g.fp4_tflops, 16384, "10 PFLOPs")):
        assert value == round(256 * 2.4e9 * per_clock / 1e12, 1) and printed in g.source
    assert (g.bandwidth_gbps, g.memory_gb) == (8000, 288) and "288 GB HBM3E; 8 TB/s" in g.source


# name -> (the interconnect the source prints, both directions added, per GPU; per direction)
LINKS = {"GB200": ("1.8 TB/s", 900, "switch"), "GB300": ("1.8 TB/s", 900, "switch"), "B300": ("1.8 TB/s", 900, "switch"),
         "H20": ("900 GB/s", 450, "switch"), "L4": ("64GB/s", 32, "pcie"), "A100-40GB": ("600GB/s", 300, "switch"),
         "MI325X": ("128 GB/s", 7 * 128 / 2, "mesh"), "MI355X": ("153.6 GB/s", 7 * 153.6 / 2, "mesh")}


@pytest.mark.parametrize("name", sorted(LINKS))
def test_links_are_half_what_the_sources_print(name):
    printed, each_way, topology = LINKS[name]
    g = get_gpu(name)
    assert printed in g.link_source and g.link_gbps == pytest.approx(each_way) and g.link_topology == topology
    assert g.link_corroborated_by


def test_the_nvl72_parts_say_their_rack():
    for name in ("GB200", "GB300"):
        g = get_gpu(name)
        assert "NVL72: 72 GPUs on one NVLink Switch domain" in g.link_kind and g.link_topology == "switch"


# name -> (what its public log prints, the unit, nvidia-smi's MiB where known)
REPORTED = {"GB200": ("184.31 GiB", 189_471), "GB300": ("276.50 GiB", 284_208), "B300": ("267.69 GiB", 275_040),
            "L4": ("22.03 GiB", None), "MI325X": ("255.98 GiB", None), "MI355X": ("287.98 GiB", None),
            "A100-40GB": ("39.49 GiB", 40_960), "H20": ("97871MiB", 97_871), "RTX-3090": ("23.58 GiB", None)}


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_memory_as_the_device_reports_it(name):
    printed, smi = REPORTED[name]
    g = get_gpu(name)
    assert printed in g.total_memory_source
    value, unit = float(printed[:-3]), printed[-3:]
    assert g.total_memory_bytes == round(value * (GiB if unit == "GiB" else 1 << 20))
    if smi is not None:  # nvidia-smi shows a little more than PyTorch's total (H20: nvidia-smi's own)
        assert smi * (1 << 20) - 1.1 * GiB <= g.total_memory_bytes <= smi * (1 << 20)
        assert f"{smi:,} MiB" in g.total_memory_source
    # the datasheet's "GB" lies between decimal GB (less a few %) and GiB: vendors round the GiB up
    assert 0.95 * g.memory_gb * 1e9 <= g.total_memory_bytes <= g.memory_gb * GiB
    assert g.memory_bytes == g.total_memory_bytes


def test_the_rtx_4090_holds_the_bytes_a_named_card_reported():
    # LLMServingSim's vLLM 0.19.0 run on an 'NVIDIA GeForce RTX 4090' recorded torch's total_memory to the byte:
    # 25,250,627,584 B = 23.52 GiB, the total vLLM's own start-up lines print on 24 GB Ada cards; PyTorch's
    # out-of-memory messages of older drivers said 23.65 GiB (133 MiB more: 0.12 GiB of a 0.9 budget)
    g = get_gpu("RTX-4090")
    assert "'device_total_memory_bytes': 25250627584" in g.total_memory_source
    assert "NVIDIA GeForce RTX 4090" in g.total_memory_source and "/23.52 GiB)" in g.total_memory_source
    assert g.total_memory_bytes == 25_250_627_584 and f"{g.total_memory_bytes / GiB:.2f}" == "23.52"
    assert round(23.65 * GiB) - g.total_memory_bytes == 143_366_554  # 136.7 MiB less than the old OOM figure


def test_every_capacity_cites_where_it_was_read():
    # a URL, or a public file by its code-search id where the indexed file has no address
    for g in gpu_catalog():
        assert "https://" in g.total_memory_source or "code search id" in g.total_memory_source, g.name


def test_every_catalog_entry_reports_its_memory_in_bytes_within_its_datasheet():
    for g in gpu_catalog():
        assert 0.95 * g.memory_gb * 1e9 <= g.total_memory_bytes <= g.memory_gb * GiB, g.name


def test_a_pool_on_a_gb200_by_hand():
    # Llama-3.1-8B, TP 1, vLLM 0.33.0's defaults on one GB200 (the H100's case in test_config.py):
    # ceil(197,901,355,581 x 0.92) = 182,069,247,135 budget - weights 16,094,076,928 - the profile's
    # peak 838,860,800 (8,192 x (2 x 4,096 + 3 x 14,336) x 2) - 86 CUDA graphs of 7 MiB 631,242,752
    # (max_num_seqs 256: capture sizes up to min(512, 1024) = 512 on compute capability 10.x as
    # elsewhere) - non-torch 42,949,672 (0.04 GiB) = 164,462,116,983 B: 2,450 blocks of 64 MiB (512 tokens)
    assert math.ceil(197_901_355_581 * 0.92) == 182_069_247_135
    assert 182_069_247_135 - 16_094_076_928 - 838_860_800 - 631_242_752 - 42_949_672 == 164_462_116_983
    assert 164_462_116_983 // (64 << 20) == 2450
    cap = kv_capacity("Llama-3.1-8B", "GB200", 1, 512)
    assert (cap.total_memory_bytes, cap.usable_bytes, cap.weight_bytes_per_gpu) == (197_901_355_581, 182_069_247_135,
                                                                                    16_094_076_928)
    assert (cap.cudagraph_graphs, cap.kv_bytes_available, cap.blocks) == (86, 164_462_116_983, 2450)
    # the same on an L4: 23,654,532,383 x 0.92 leaves 4,155,039,641 B, 61 blocks
    assert kv_capacity("Llama-3.1-8B", "L4", 1, 512).blocks == (math.ceil(23_654_532_383 * 0.92) - 16_094_076_928
                                                               - 838_860_800 - 631_242_752 - 42_949_672) // (64 << 20) == 61


def test_compute_capability_10_picks_vllms_blackwell_defaults():
    # vLLM 0.33.0 raises the CUDA graph capture ceiling to 1,024 on the 10.x family (B200, GB200,
    # B300, GB300), where its MXFP4 MoE runs FlashInfer's TRT-LLM kernel (128 x 256, not Hopper's 64 x 256)
    for name in ("B200", "GB200", "B300", "GB300"):
        assert datacenter_blackwell(name) and capture_sizes(512, name)[-1] == 1024
    for name in ("H100", "H20", "L4", "L40S", "MI355X", "A100-40GB", "", "TPU"):
        assert not datacenter_blackwell(name)
        assert name == "" or name == "TPU" or capture_sizes(512, name)[-1] == 512
    from kvreplay.analysis.models import get_model

    # gpt-oss-120b's experts (2,880 x 2,880): FlashInfer's TRT-LLM MoE on the 10.x family pads them to
    # 2,944 x 3,072, Hopper's Triton MoE to 2,880 x 3,072 (memory.mxfp4_alignment)
    spec = get_model("gpt-oss-120b")
    gb200, h100 = (weight_parts(spec, "int4", 1, g)["experts"] for g in ("GB200", "H100"))
    assert gb200 == weight_parts(spec, "int4", 1, "B200")["experts"]
    assert gb200 / h100 == 2944 / 2880


# name -> (whose coefficients, checked on its own measured kernels?)
CALIBRATION = {"GB200": ("H200", True), "GB300": ("H200", True), "B300": ("H200", True), "H20": ("H100", False),
               "A100-40GB": ("A100-80GB", False), "L4": ("A100-80GB", False), "MI325X": ("H200", False),
               "MI355X": ("H200", False), "RTX-4090": ("A100-80GB", False), "RTX-3090": ("A100-80GB", False),
               "RTX-PRO-6000": ("A100-80GB", False)}


@pytest.mark.parametrize("name", sorted(CALIBRATION))
def test_each_new_gpu_borrows_or_checks_a_calibration_with_its_band(name):
    relative, checked = CALIBRATION[name]
    cal = calibration_for(name)
    data = calibration_data()
    assert cal.borrowed and cal.measured_on == relative and cal.checked == checked
    if checked:  # its own GEMM, MoE, GDN, MLA and elementwise fits, and the bands of its own composed steps
        entry = data["relative_bands"][name]
        assert cal.own_fitted == ("gemm", "moe", "gdn", "mla", "elementwise")
        assert cal.bands == {p: tuple(v) for p, v in entry["bands"].items()}
        assert name in data["stream_bandwidth"]  # its streaming bandwidth measured on its own tables
        assert set(entry["step_error"]) == {"prefill", "decode", "mixed"}
    else:  # nothing measured: the spread of the cross-GPU checks
        assert cal.bands == {p: tuple(v) for p, v in data["transfer_bands"].items()} and cal.own_fitted == ()
    model = CalibratedRooflineTimeModel("Llama-3.1-8B", name, 1)
    lo, hi = model.calibration.band("decode")
    assert lo < 1 < hi


def test_a_borrowed_all_reduce_runs_at_the_gpus_own_link():
    # H20 borrows H100's all-reduce at its own NVLink (the same 450 GB/s: unchanged); the L4 A100's at
    # PCIe's 32 GB/s (32 / 300 of it); the MI355X H200's at 537.6 / 450
    for name, relative in (("H20", "H100"), ("L4", "A100-80GB"), ("MI355X", "H200")):
        c, rel = CalibratedRooflineTimeModel("Llama-3.1-8B", name, 2).c, calibration_data()["gpus"][relative]["coefficients"]
        ratio = get_gpu(name).link_gbps / get_gpu(relative).link_gbps
        assert c["allreduce_bus_bytes_per_s"] == pytest.approx(rel["allreduce_bus_bytes_per_s"] * ratio)


def test_new_names_as_users_type_them():
    for typed, name in (("gb200", "GB200"), ("GB200-NVL72", "GB200"), ("b200-nvl72", "GB200"), ("gb300-nvl72", "GB300"),
                        ("HGX-B300", "B300"), ("h20-96gb", "H20"), ("l4", "L4"), ("mi325x", "MI325X"),
                        ("Instinct-MI355X", "MI355X"), ("a100-sxm4-40gb", "A100-40GB")):
        assert get_gpu(typed).name == name
    with pytest.raises(ConfigError, match=r"unknown GPU 'GB2000'.*did you mean GB200"):
        get_gpu("GB2000")
    with pytest.raises(ConfigError, match=r"unknown GPU 'MI350'.*did you mean.*MI355X"):
        get_gpu("MI350")


def test_fp4_is_listed_not_used():
    # the Blackwell and CDNA 4 parts list their dense FP4; no weights dtype computes at it
    assert {g.name: g.fp4_tflops for g in gpu_catalog() if g.fp4_tflops} == {
        "B200": 9000, "GB200": 10000, "GB300": 15000, "B300": 13125, "MI355X": 10066.3, "RTX-PRO-6000": 2015.2}
    with pytest.raises(ConfigError, match="unknown compute dtype 'fp4'"):
        get_gpu("GB200").peak_flops("fp4")


def test_kvreplay_gpus_lists_the_new_rows():
    out = ok("gpus")
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip() and not line.startswith(("-", " "))}
    gb200 = rows["GB200"]
    for cell in ("2,500", "5,000", "8,000", "186", "900", "switch", "H200's (GEMM/MoE/GDN/MLA/elementwise: its own), checked on its own kernels"):
        assert cell in gb200, cell
    # FP4, the memory the device reports (GiB) and the page the figures come from
    for cell in ("13,125", "267.69", "www.nvidia.com/en-us/data-center/hgx/"):
        assert cell in rows["B300"], cell
    assert "willitrunai.com/es/gpus/h20-96gb" in rows["H20"] and "95.58" in rows["H20"]
    assert "148" in rows["H20"] and "H100's (nothing measured)" in rows["H20"]
    assert "121" in rows["L4"] and "pcie" in rows["L4"] and "A100-80GB's (nothing measured)" in rows["L4"]
    assert "2,516.6" in rows["MI355X"] and "mesh" in rows["MI355X"] and "H200's (nothing measured)" in rows["MI355X"]
    for name, cells in (("RTX-4090", ("165.15", "330.3", "1,008", "23.52", "pcie")), ("RTX-3090", ("71", "936", "23.58"))):
        assert all(cell in rows[name] for cell in cells) and "A100-80GB's (nothing measured)" in rows[name], name
    doc = {g["name"]: g for g in json.loads(ok("gpus", "--json"))["gpus"]}
    assert len(doc) == len(gpu_catalog()) == 17
    b300 = doc["B300"]
    assert (b300["fp4_tflops"], b300["total_memory_bytes"], b300["compute_capability"]) == (13125, 287_429_948_867, "10.3")
    assert b300["roofline_calibration"]["stream_bandwidth_source"] == "measured on this GPU"
    assert "267.69 GiB" in b300["total_memory_source"] and b300["source"].startswith("NVIDIA HGX")


def test_simulate_on_a_gb200_states_its_calibration_and_band(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 2048, "output_length": 16,
                                         "hash_ids": [1, 2, 3, 4]}) + "\n" for i in range(4)))
    out = ok("simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "gb200", "--cold-start")
    time = next(line for line in out.splitlines() if line.startswith("time"))
    assert "on 1 x GB200" in time and "calibrated on H200's measured kernels" in time
    assert "checked on GB200's own kernels" in time and "(5-95%)" in time
    assert "p50 band" in out


def _doc_rows() -> list[list[str]]:
    lines = DOC.read_text().splitlines()
    start = lines.index("| name | form | BF16 | FP8 | FP4 | HBM bandwidth | memory (datasheet) | memory (as the device "
                        "reports it) | interconnect, each way | calibration | source |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _calibration_cell(g) -> str:
    cal = calibration_for(g.name)
    if not cal.borrowed:
        return "its own kernels"
    return f"{cal.measured_on}'s, " + ("checked on its own kernels" if cal.checked else "nothing measured")


def test_the_documented_gpu_table_is_the_catalog():
    def num(v):
        return "-" if v is None else f"{v:,}"

    rows = _doc_rows()
    assert [r[0] for r in rows] == [g.name for g in gpu_catalog()]
    for row, g in zip(rows, gpu_catalog()):
        assert row[1:10] == [g.form_factor, num(g.bf16_tflops), num(g.fp8_tflops), num(g.fp4_tflops),
                             f"{g.bandwidth_gbps:,} GB/s", f"{g.memory_gb:,} GB", f"{g.total_memory_bytes / GiB:.2f} GiB",
                             f"{g.link_gbps:,} GB/s, {g.link_topology}", _calibration_cell(g)], g.name
        host = g.source.split("https://")[1].split("/")[0]
        assert host in row[10], (g.name, host)
    assert f"\n{len(gpu_catalog())} GPUs, in `kvreplay gpus` order." in DOC.read_text()


def test_plan_meets_prices_and_gpus_typed_in_any_case(tmp_path):
    # eight 4-token requests at t=0 and a 1 s step (a profile): one prefill step, TTFT 1 s on any GPU.
    # --gpus and --price name the same GPUs differently; each row names the catalog's GPU. The L4
    # cannot start Llama-3.1-8B: 4,155,039,641 B of KV (test_a_pool_on_a_gb200_by_hand) over
    # 131,072 B per token (32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B) = 31,700 tokens < 131,072
    trace = tmp_path / "eight.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]}) + "\n"
                             for k in range(8)))
    profile = tmp_path / "one.json"
    profile.write_text(json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]}))
    assert 4_155_039_641 // (32 * 8 * 128 * 2 * 2) == 31_700
    out = ok("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4", "--time-model", profile,
             "--gpus", "gb200-nvl72,Mi355x,l4", "--tp", "1", "--price", "GB200=6/h", "--price", "instinct-mi355x=3/h",
             "--price", "L4-24GB=0.7/h")
    assert "best  chosen   1 x 1 x MI355X" in out and "pruned   1 x 1 x GB200" in out
    assert "unfit    - x 1 x L4" in out and "holds 31,700 tokens" in out and "no price" not in out


def test_a_gpu_without_measurements_streams_at_its_datasheet_times_its_relatives_share():
    # H20: 4,000 GB/s x H100's measured 2,951 / 3,350 (88.1%) = 3,523; MI325X: 6,000 x H200's 84.4% =
    # 5,064; the L4 and A100-40GB at their datasheet figure (A100's tables have no streaming probe)
    from kvreplay.serving.timing.roofline import calibration_summary

    data = calibration_data()["stream_bandwidth"]
    for name, relative, expected in (("H20", "H100", 3523), ("MI325X", "H200", 5064), ("MI355X", "H200", 6752),
                                     ("L4", None, 300), ("A100-40GB", None, 1555)):
        g = get_gpu(name)
        share = 1.0 if relative is None else data[relative]["fraction_of_peak"]
        got = calibration_summary(g)["stream_bandwidth_gbps"]
        assert got == pytest.approx(g.bandwidth_gbps * share) and round(got) == expected, name


def test_a_pcie_gpu_without_its_own_all_reduce_fit_is_warned_of_it(tmp_path):
    # the L40S's measured all-reduce: 18-20 GB/s bus over 2 GPUs, 4-5 over 4 and 2 over 8 (docs/gpus.md)
    from kvreplay.engine.replay import as_trace
    from kvreplay.serving.simulate import calibration_warnings

    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}) + "\n")
    trace = as_trace(str(path))

    def warned(gpu, tp):
        return [w for w in calibration_warnings(CalibratedRooflineTimeModel("Llama-3.1-8B", gpu, tp), trace)
                if "has no GPU link" in w]

    (w,) = warned("L4", 4)
    assert "TP 4 runs at PCIe's 32 GB/s" in w and "22.6x" in w
    # a pair: what LLMServingSim's held-out RTX PRO 6000 run at TP 2 measured (docs/fidelity.md)
    (w,) = warned("RTX-PRO-6000", 2)
    assert "TP 2 runs at PCIe's 64 GB/s" in w and "decoded 18% and prefilled about 2x slower" in w
    assert warned("L4", 2) and not warned("L4", 1) and not warned("H100", 8)
    # the L40S runs its own all-reduce fit at every degree instead (test_the_l40s_runs_its_pcie_all_reduce_fit)
    assert not warned("L40S", 8) and not warned("L40S", 4)


def test_the_l40s_runs_its_pcie_all_reduce_fit():
    # catalog/gpus.py PCIE_ALLREDUCE (benchmarks/fit_pcie_allreduce.py on aiconfigurator's L40S tables):
    # a bus bandwidth of 19.99 GB/s over 2 GPUs, 5.12 over 4 and 1.85 over 8, where the A100's
    # calibration scaled to PCIe's 32 GB/s gives 20.6 at every degree
    from kvreplay.catalog.gpus import PCIE_ALLREDUCE, pcie_allreduce
    from kvreplay.serving.timing.roofline import allreduce_time

    assert pcie_allreduce("L40S", 1) is None and pcie_allreduce("H100", 4) is None and pcie_allreduce("L4", 4) is None
    assert [pcie_allreduce("L40S", tp)[0] for tp in (2, 3, 4, 6, 8, 16)] == [2, 4, 4, 8, 8, 8]
    for tp, bus in ((2, 19.9898e9), (4, 5.12127e9), (8, 1.85126e9)):
        tm = CalibratedRooflineTimeModel("Llama-3.1-8B", "L40S", tp)
        assert tm.c["allreduce_bus_bytes_per_s"] == bus and tm.describe()["pcie_allreduce_tp"] == tp
        assert tm.allreduce_latency_s == pytest.approx(PCIE_ALLREDUCE["L40S"][tp]["allreduce_latency_s"]
                                                       + tm.c["allreduce_skew_s"] * math.log2(tp))
    # a 4 MiB bf16 all-reduce over 4 L40S (vLLM's custom kernel, two stages above 512 KiB):
    # latency + kernel latency + 2 x 3/4 x 4 MiB / 5.12127 GB/s = 818.9 us + 2 x 13.14 us
    c = CalibratedRooflineTimeModel("Llama-3.1-8B", "L40S", 4).c
    assert allreduce_time(4, 4 * 2 ** 20, c["allreduce_latency_s"], c) == pytest.approx(
        2 * 13.1407e-6 + 1.5 * 4 * 2 ** 20 / 5.12127e9)
    # the band is widened to the L40S's own steps composed at that degree (TP 8 prefill from 0.5963)
    assert CalibratedRooflineTimeModel("Llama-3.1-8B", "L40S", 8).band("prefill")[0] == 0.5963
    # the L4 (no measured all-reduce) keeps the A100's scaled to its link
    l4 = CalibratedRooflineTimeModel("Llama-3.1-8B", "L4", 4)
    a100 = CalibratedRooflineTimeModel("Llama-3.1-8B", "A100-80GB", 4)
    assert l4.c["allreduce_bus_bytes_per_s"] == pytest.approx(a100.c["allreduce_bus_bytes_per_s"] * 32 / 300)


def test_the_networks_between_servers_quote_their_system_spec():
    # scale_out_gbps (GB/s per direction per GPU) and node_gpus are aiconfigurator's inter_node_bw (bytes/s)
    # and num_gpus_per_node, quoted; a part without them has neither (the NVL72 racks among them)
    given = {g.name: g for g in gpu_catalog() if g.scale_out_gbps}
    assert set(given) == {"A100-40GB", "A100-80GB", "L4", "L40S", "H100", "H200", "B200", "B300", "RTX-PRO-6000"}
    for g in given.values():
        assert f"inter_node_bw: {int(g.scale_out_gbps * 1e9)}" in g.scale_out_source, g.name
        assert f"num_gpus_per_node: {g.node_gpus}" in g.scale_out_source, g.name
        assert "aiconfigurator-core==0.12.0" in g.scale_out_source, g.name
    assert get_gpu("H100").scale_out_gbps == 50 and get_gpu("B200").scale_out_gbps == 100
    for g in gpu_catalog():
        if g.name not in given:
            assert g.node_gpus is None and g.scale_out_source is None, g.name
