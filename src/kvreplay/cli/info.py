"""Catalog commands: policies, models."""

from __future__ import annotations

import sys

from . import common


def _parser_policies(sub) -> None:
    sub.add_parser("policies", help="list the policies and their parameters")


def _cmd_policies(args) -> int:
    from ..policies.registry import INFO, default_text

    for spec in INFO.values():
        print(f"{spec.name:9s} {spec.summary}" + ("" if spec.capacity == "required" else f" [capacity {spec.capacity}]"))
        for p in spec.params:
            print(f"{'':9s}   --{p.name.replace('_', '-')} {default_text(p)}: {p.help}")
    return 0


def _parser_models(sub) -> None:
    md = sub.add_parser("models", help="list the KV-size catalog: KV bytes per token of open models")
    md.add_argument("--json", action="store_true", help="print the catalog as JSON")
    md.add_argument("--model", action="append", metavar="MODEL",
                    help="show only this model (repeatable): a catalog name, or a path to a Hugging Face config.json "
                         "or a model directory holding one, read as the catalog reads its own")


def _cmd_models(args) -> int:
    from ..analysis.models import catalog, describe, format_params, get_model

    entries = [describe(get_model(m)) for m in args.model] if args.model else [describe(m) for m in catalog()]
    if args.json:
        sys.stdout.buffer.write(common.encode_json({"models": entries}))
        return 0
    from ..output.table import format_table

    rows = [{
        "name": e["name"], "attention": e["attention"], "num_layers": e["num_layers"], "num_kv_heads": e["num_kv_heads"],
        "head_dim": e["head_dim"],
        "groups": _groups_text(e["kv_groups"]),
        "bf16": e["kv_bytes_per_token"]["all"]["bf16"], "fp8": e["kv_bytes_per_token"]["all"]["fp8"],
        "full": e["kv_bytes_per_token"]["full"]["bf16"] if e["kv_groups"] and e["full_attention_layers"] else "-",
        "params": f"{format_params(e['active_params'])} / {format_params(e['total_params'])}",
        "experts": f"{e['moe']['experts']} x top {e['moe']['experts_per_token']}" if e["moe"] else "-",
        "weights": e["checkpoint_weights"] or "bf16", "source": e["source"],
    } for e in entries]
    print(format_table(rows, [
        ("name", "model"), ("attention", "kind"), ("num_layers", "layers"), ("num_kv_heads", "kv heads"),
        ("head_dim", "head dim"), ("groups", "KV groups (layers)"), ("bf16", "KV B/token bf16"),
        ("fp8", "KV B/token fp8"), ("full", "bf16 full-attn only"), ("params", "active / total params"),
        ("experts", "routed experts"), ("weights", "checkpoint weights"), ("source", "source"),
    ]))
    print("\nKV bytes per token: MHA/GQA = 2 (K, V) x layers x kv heads x head dim x dtype bytes; "
          "MLA = layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes\n(one latent per token and layer, shown as 1 kv head "
          "of that width); Mamba / linear-attention layers keep a state per request, no KV per token.\nHybrid models "
          "(sw: sliding window, chunk: chunked local, mamba): kvreplay run --model replays vLLM's hybrid manager over\n"
          "these groups and sizes the pool as vLLM lays them out; --kv-semantics full counts every KV layer per token,\n"
          "and --kv-layers full counts only full-attention layers (bytes per token under full semantics).\n"
          "Checkpoint weights: how the released checkpoint stores them (fp8-block: fp8, a scale per 128 x 128 block;\n"
          "mxfp4: 4-bit MoE experts); kvreplay simulate --weights-dtype fp8 or int4 is the nearest (docs/timing.md).\n"
          "Routed experts: an MoE's experts per layer and how many each token uses (config.json); the calibrated\n"
          "roofline times them as vLLM's fused MoE kernel (docs/timing.md, \"roofline\").\n"
          "Use: kvreplay run TRACE --capacity 80GiB --model NAME [--kv-dtype fp8]. Details: docs/budgets.md, "
          "docs/policies.md")
    return 0


def _groups_text(groups) -> str:
    """"18 sw128 + 18 full": each KV cache group's layers and kind (- for one full-attention group)."""
    if not groups:
        return "-"
    names = {"full": lambda g: "full", "sliding_window": lambda g: f"sw{g['window']}",
             "chunked_local": lambda g: f"chunk{g['chunk']}", "mamba": lambda g: "mamba"}
    return " + ".join(f"{g['layers']} {names[g['kind']](g)}" for g in groups)


def _parser_gpus(sub) -> None:
    gp = sub.add_parser("gpus", help="list the GPU catalog the serving simulator uses (peak FLOP/s, bandwidth, memory)")
    gp.add_argument("--json", action="store_true", help="print the catalog as JSON")


def _cmd_gpus(args) -> int:
    from dataclasses import asdict

    from ..serving.timing import gpu_catalog
    from ..serving.timing.roofline import calibration_summary

    entries = [{**asdict(g), "roofline_calibration": calibration_summary(g)} for g in gpu_catalog()]
    if args.json:
        sys.stdout.buffer.write(common.encode_json({"gpus": entries}))
        return 0
    from ..output.table import format_table

    def num(v):
        return "-" if v is None else f"{v:,}"

    rows = [{"name": e["name"], "aliases": ", ".join(e["aliases"]) or "-", "bf16": num(e["bf16_tflops"]),
             "fp8": num(e["fp8_tflops"]), "fp4": num(e["fp4_tflops"]), "bw": num(e["bandwidth_gbps"]),
             "mem": num(e["memory_gb"]), "reported": f"{e['total_memory_bytes'] / 2 ** 30:,.2f}",
             "link": num(e["link_gbps"]), "kind": e["link_kind"], "topology": e["link_topology"],
             **_calibration_cells(e["roofline_calibration"]), "source": _source_cell(e["source"])}
            for e in entries]
    print(format_table(rows, [("name", "gpu"), ("aliases", "also"), ("bf16", "dense BF16 TFLOP/s"),
                              ("fp8", "dense FP8 TFLOP/s"), ("fp4", "dense FP4 TFLOP/s"), ("bw", "HBM GB/s"),
                              ("stream", "streamed GB/s"), ("mem", "memory GB"), ("reported", "reported GiB"),
                              ("link", "link GB/s each way"), ("kind", "interconnect"),
                              ("topology", "topology"), ("calibration", "roofline calibration"),
                              ("moe", "MoE kernels"), ("mla", "MLA term"), ("source", "source")]))
    print("\nDense figures (datasheets print 2:4-sparse ones, halved here; FP4 is listed, the roofline runs no FP4 "
          "GEMMs). Memory GB: the datasheet's; reported GiB: what the device reports to PyTorch, which vLLM's "
          "pool starts from (each from a public log, quoted in --json). Streamed: the bandwidth the calibrated "
          "roofline's memory terms run at (* measured on the GPU; otherwise its datasheet figure times the share "
          "measured on the GPU whose coefficients it uses). Link: the GPU-to-GPU interconnect per "
          "GPU in one direction (datasheets print both directions added); switch: any pair at that figure, mesh: one "
          "link to each peer (a pair gets its share), pcie: no GPU link. MoE kernels: the weights whose fused MoE "
          "kernel the calibration times an MoE's routed experts with (-: as the other GEMMs). MLA term: fitted on "
          "vLLM's measured MLA modules (DeepSeek-V3/R1, Kimi-K2; -: their attention timed as the others'). Each "
          "entry's sources "
          "are in --json and docs/gpus.md.\n"
          "Use: kvreplay simulate TRACE --gpu H100 --model Llama-3.1-8B [--tp N] [--weights-dtype fp8]")
    return 0


def _source_cell(source: str) -> str:
    """The page a catalog entry's figures come from (its `source`'s first URL, without the scheme), or
    the source's own words when it has no URL."""
    for word in source.split():
        if word.startswith("https://"):
            return word[len("https://"):].rstrip(",;)")
    return source.split(",")[0]


def _calibration_cells(cal: dict | None) -> dict:
    """The `gpus` table's streamed-bandwidth and calibration cells of one GPU."""
    from ..serving.timing.roofline import own_fitted_label

    if cal is None:
        return {"stream": "-", "calibration": "none (roofline-raw or a profile)", "moe": "-", "mla": "-"}
    measured = cal["stream_bandwidth_source"] == "measured on this GPU"
    stream = f"{cal['stream_bandwidth_gbps']:,.0f}" + ("*" if measured else "")
    if cal["own_kernels_fitted"]:
        text = "fitted on its own kernels"
    elif cal["checked_on_own_kernels"]:
        own = own_fitted_label(cal["own_fitted"])
        text = f"{cal['coefficients_from']}'s" + (f" ({own}: its own)" if own else "") + ", checked on its own kernels"
    else:
        text = f"{cal['coefficients_from']}'s (nothing measured)"
    return {"stream": stream, "calibration": text, "moe": ", ".join(cal["moe_kernels"]) or "-",
            "mla": "fitted" if cal["mla_term"] else "-"}


PARSERS = [_parser_policies, _parser_models, _parser_gpus]
COMMANDS = {"policies": _cmd_policies, "models": _cmd_models, "gpus": _cmd_gpus}
