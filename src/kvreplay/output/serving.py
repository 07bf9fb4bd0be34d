"""Terminal text for ``kvreplay simulate``: the summary of one run and the load-sweep table."""

from __future__ import annotations

import os

from .sessions import arrivals_text, closed_lines
from .table import format_table


def trace_name(trace) -> str:
    """The trace's file or directory name (a directory's path may end in a slash)."""
    return os.path.basename(str(trace.source).rstrip("/")) or str(trace.source)


def seconds_text(x: float) -> str:
    if x != x:
        return "-"
    if x < 1:
        return f"{1000 * x:,.1f} ms"
    return f"{x:,.2f} s"


def _describe_host(host: dict | None) -> str:
    """What the host CPU adds (serving/timing/host.py), for the time line ("" when nothing)."""
    if not host or host.get("host") == "none":
        return ""
    us = lambda x: f"{1e6 * x:.2f} us"  # noqa: E731
    ms = lambda x: f"{1e3 * x:.2f} ms"  # noqa: E731
    sched = "async scheduling" if host["async_scheduling"] else "synchronous scheduling"
    return (f"; host CPU ({host['host']}: vLLM's API server and engine core, {sched}; fitted on measured serving "
            f"runs): each request {ms(host['request_s'])} + {us(host['prompt_token_s'])} a prompt token in the API "
            f"server's queue and {ms(host.get('latency_s', 0.0))} of latency before the engine, each step {ms(host['step_s'])} + {us(host['step_request_s'])} a request of CPU, each token "
            f"{us(host['output_request_s'])} a request in its step to its client"
            + (f", each step vLLM runs without a CUDA graph at least {us(host['launch_layer_s'])} a layer of kernel "
               "launches" if host.get("launch_layer_s") else ""))


def _describe_time(tm: dict) -> str:
    name = tm.get("time_model")
    if name == "roofline":
        from ..serving.timing.roofline import own_fitted_label

        own = own_fitted_label(tm.get("own_fitted") or ())
        if not tm.get("borrowed_calibration"):
            note = ""
        elif tm.get("checked_on_own_kernels"):
            note = (f" (its nearest measured relative's, checked on {tm.get('gpu')}'s own kernels"
                    + (f"; its {own} terms fitted on them" if own else "") + ")")
        else:
            note = f" (no measurements of {tm.get('gpu')}: its nearest measured relative's)"
        where = f"calibrated on {tm.get('calibrated_on')}'s measured kernels{note}"
        bands = tm.get("bands", {})
        band = ", ".join(f"{p} x{lo:.2f}-{hi:.2f}" for p, (lo, hi) in bands.items())
        moe = f"; routed experts as vLLM's fused MoE kernel ({tm['moe_kernel']})" if tm.get("moe_kernel") else ""
        moe += "; MLA layers fitted on vLLM's measured MLA modules" if tm.get("mla") else ""
        if tm.get("pcie_allreduce_tp"):
            moe += (f"; all-reduce over PCIe fitted on {tm.get('gpu')}'s own measured all-reduces at "
                    f"{tm['pcie_allreduce_tp']} GPUs")
        pp = (f"; {tm['pp']} pipeline stages, one batch at a time through them, each step's tokens crossing "
              f"{tm['pp'] - 1} stage-to-stage send(s) of {1e9 * tm['pp_hop_s_per_token']:.0f} ns a token"
              if tm.get("pp", 1) > 1 else "")
        return (f"roofline: {tm.get('model')} on {tm.get('tp')} x {tm.get('gpu')}, weights {tm.get('dtype')}, KV "
                f"{tm.get('kv_dtype')}; {where}{moe}{pp}; measured / predicted step time {band} (5-95%)"
                + _describe_host(tm.get("host")))
    if name == "roofline-raw":
        return (f"roofline-raw: {tm.get('model')} on {tm.get('tp')} x {tm.get('gpu')} (MFU {tm.get('mfu')}, MBU "
                f"{tm.get('mbu')}, {1000 * tm.get('overhead_s', 0):g} ms per step; uncalibrated, no error band)")
    if name == "dynamo-npz":
        return f"measured profile {tm.get('path')} (Dynamo NPZ format, read as Dynamo's mocker does)"
    if name == "polynomial":
        return f"polynomial fit {tm.get('path')}" + (f" ({tm['source']})" if tm.get("source") else "")
    return "instant: every step takes 0 s (TTFT and TPOT are 0; the hit rate is the sequential one's limit)"


def _describe_scheduler(s: dict) -> str:
    if s["style"] == "sglang":
        return (f"sglang-style ({s['schedule_policy']}, chunked prefill {s['chunked_prefill_size']:,} tokens, "
                f"{s['max_num_seqs']:,} running at most, decode room reserved, retraction)")
    if s["style"] == "trtllm":
        chunk = (f"chunked context ({s['context_chunking_policy']})" if s["enable_chunked_context"]
                 else "no chunked context")
        return (f"trtllm-style in-flight batching ({s['capacity_scheduler_policy']}, max_batch_size "
                f"{s['max_batch_size']:,}, max_num_tokens {s['max_num_tokens']:,}, {chunk})")
    chunk = "chunked prefill" if s["chunked_prefill"] else "no chunked prefill"
    return (f"vllm-style v1 ({s['max_num_batched_tokens']:,} tokens and {s['max_num_seqs']:,} requests per step, "
            f"{chunk}, preempt the newest)")


def _stage(src: dict) -> str:
    """With pipeline stages: which stage the budget is (the one with the fewest blocks)."""
    if src.get("pp", 1) == 1:
        return ""
    stage = min(src["stages"], key=lambda s: s["blocks"])
    layers = sum(s["layers"] for s in src["stages"])
    blocks = ", ".join(f"{s['blocks']:,}" for s in src["stages"])
    return (f" x pp={src['pp']}: stage {stage['stage']}'s {stage['layers']} of {layers} layers "
            f"(blocks by stage: {blocks})")


def _expert_rows(src: dict) -> list[tuple]:
    """Under data or expert parallelism, the routed experts' part of the weights (one row)."""
    if not src.get("expert_gpus"):
        return []
    how = "whole experts" if src["expert_parallel"] else "each expert's width"
    return [(f"  of which the routed experts, 1/{src['expert_gpus']} of them ({how} over dp={src['dp']} x "
             f"tp={src['tp']} GPUs)", src["expert_bytes_per_gpu"])]


def pool_budget_lines(src: dict) -> list[str]:
    """The pool's budget on one GPU, a term a line (timing/memory.py; `src` is KVCapacity.to_dict())."""
    gib = lambda v: f"{v / 2**30:9.2f} GiB"  # noqa: E731
    rows = [("total memory, as the device reports it", src["total_memory_bytes"]),
            (f"x gpu_memory_utilization {src['gpu_memory_utilization']:g}", src["usable_bytes"]),
            (f"- weights, {src['model']} at {src.get('weights_dtype', 'bf16')} over tp={src['tp']}" + _stage(src),
             -src["weight_bytes_per_gpu"]),
            *_expert_rows(src),
            (f"- profile peak, the larger of the forward pass ({src['activation_peak_bytes'] / 2**30:.2f} GiB, "
             f"{src['max_num_batched_tokens']:,} tokens) and the sampler ({src['sampler_peak_bytes'] / 2**30:.2f} GiB, "
             f"{min(src['max_num_seqs'], src['max_num_batched_tokens']):,} rows)" + (
                 f", with {src['encoder_output_bytes'] / 2**30:.2f} GiB of encoder outputs held, or the vision "
                 f"encoder on {src['encoder_items']} dummy images ({src['encoder_peak_bytes'] / 2**30:.2f} GiB)"
                 if src.get("encoder_items") else ""),
             -src.get("peak_bytes", max(src["activation_peak_bytes"], src["sampler_peak_bytes"]))),
            (f"- CUDA graphs, {src['cudagraph_graphs']} graphs" if src["cudagraph_graphs"] else
             "- CUDA graphs (enforce_eager: none)", -src["cudagraph_bytes"]),
            ("- non-torch memory", -src["non_torch_bytes"]),
            ("= KV left by the profile", src["profiled_kv_bytes"])]
    if src.get("kv_cache_memory_bytes") is not None:
        rows.append(("KV memory given (--kv-cache-memory; the utilization is ignored)", src["kv_cache_memory_bytes"]))
    width = max(len(label) for label, _ in rows)
    out = [f"             {label:<{width}} {gib(abs(v))}" for label, v in rows]
    per_block = src["kv_bytes_per_token_per_gpu"] * src["block_size"]
    fits = int(src["kv_bytes_available"] // per_block)
    if src.get("num_gpu_blocks_override") is not None:
        out.append(f"             blocks: {src['blocks']:,} (--num-gpu-blocks-override; the KV memory holds {fits:,}), "
                   f"{src['tokens']:,} tokens")
    else:
        out.append(f"             blocks: {src['blocks']:,} of {per_block:,.0f} bytes, {src['tokens']:,} tokens")
    return out


def sglang_budget_lines(src: dict) -> list[str]:
    """The SGLang-style pool's budget, a term a line (`src` is SGLangCapacity.to_dict())."""
    gib = lambda v: f"{v / 2**30:9.2f} GiB"  # noqa: E731
    how = "SGLang's default" if src["mem_fraction_static_default"] else "--mem-fraction-static"
    rows = [("total memory, as the device reports it", src["total_memory_bytes"]),
            ("- CUDA context, NCCL (free before the weights)", src["total_memory_bytes"] - src["pre_load_free_bytes"]),
            (f"- weights, {src['model']} at {src['weights_dtype']} over tp={src['tp']}", src["weight_bytes_per_gpu"]),
            (f"- the rest, 1 - mem_fraction_static {src['mem_fraction_static']:g} ({how}) of the free memory",
             src["reserved_bytes"])]
    if src["vlm_cache_bytes"]:
        rows.append(("- multimodal embedding cache", src["vlm_cache_bytes"]))
    rows.append(("= KV left (what SGLang 0.5.23 leaves)", src["kv_bytes_available"]))
    width = max(len(label) for label, _ in rows)
    out = [f"             {label:<{width}} {gib(abs(v))}" for label, v in rows]
    out.append(f"             max_total_num_tokens {src['max_total_num_tokens']:,}; blocks: {src['blocks']:,} of "
               f"{src['block_size']} tokens ({src['tokens']:,} tokens)")
    return out


def simulate_summary(trace, report, checked: dict | None = None) -> str:
    s = report.summary()
    cfg = report.config()
    span = float(report.arrival_s.max() - report.arrival_s.min()) if report.arrival_s.size else 0.0
    lines = [
        f"trace      {trace_name(trace)}: {report.num_requests:,} requests, {int(report.prompt_tokens.sum()):,} prompt "
        f"tokens, {int(report.output_tokens.sum()):,} output tokens; arrivals over {seconds_text(span)} "
        f"({_load_text(cfg['arrivals'])})",
        f"engine     {_describe_scheduler(cfg['scheduler'])}; cache policy {report.policy}",
    ]
    hybrid = report.kv_semantics if (report.kv_semantics or {}).get("semantics") == "hybrid" else None
    lines += _pool_lines(report, cfg["capacity_source"], hybrid)
    lines.append(f"time       {_describe_time(cfg['time_model'])}")
    if report.instances > 1:
        lines.append(_cluster_line(report, s))
    lines.append(_window_line(report, s))
    band = s.get("latency_band_s")
    lines += _latency_lines(s, band)
    if s.get("closed") is not None:
        lines += closed_lines(report, s)
    lines.append("")
    seq = s["sequential_hit_rate"]
    lines.append(f"hit rate   {100 * s['hit_rate']:.2f}% of prompt tokens under concurrency (at each request's first "
                 "schedule)" + (f"; sequential replay, same policy and pool: {100 * seq:.2f}%" if seq is not None else ""))
    if s.get("misses") is not None:
        lines += served_misses_lines(s)
    if report.tiers is not None:
        lines.append(tiers_text(report.tiers))
    lines += _throughput_lines(s)
    ids = ("full-attention pages" if hybrid.get("engine") == "sglang" else "block ids") if hybrid is not None else "blocks"
    lines += _kv_pool_lines(s, ids)
    if report.instances > 1:
        lines += _instance_lines(report)
    if hybrid is not None:
        lines.append(f"semantics  {hybrid['text']}")
    elif report.kv_semantics is not None:
        lines.append(f"warning    KV semantics: {report.kv_semantics['text']}")
    for text in (band or {}).get("warnings", []):
        lines.append(f"warning    calibration: {text}")
    dp = report.time_model.get("data_parallel")
    lines.append(verdict_text(s["keeps_up"], instances=report.instances, checked=checked,
                              flag="--dp" if dp and dp["data_parallel_size"] > 1 else "--instances"))
    return "\n".join(lines)


def _load_text(arr: dict) -> str:
    """The arrivals, in words: closed loop or sessions, Poisson, or the trace's timestamps (and any rate profile)."""
    if arr["kind"] in ("closed", "open_sessions"):
        load = arrivals_text(arr)
    else:
        load = (f"Poisson at {arr['rate_per_s']:g} requests/s (seed {arr['seed']})" if arr["kind"] == "poisson"
                else "trace timestamps" + (f" / {arr['speedup']:g}" if arr["speedup"] != 1 else ""))
    if arr.get("rate_profile"):
        load += f", reshaped by the rate profile {arr['rate_profile']}"
    return load


def _pool_lines(report, src: dict, hybrid: dict | None) -> list[str]:
    """The pool's line (its blocks, where they come from, a hybrid layout's units) and its budget lines."""
    pool = f"pool       {report.capacity_blocks:,} blocks of {report.block_size} tokens ({report.capacity_blocks * report.block_size:,} tokens)"
    budget = []
    if src.get("kind") == "gpu_memory":
        gpus = f"{src['tp']} x {src['gpu']}" if src.get("pp", 1) == 1 else (
            f"{src['pp']} stages x {src['tp']} x {src['gpu']} (the smallest stage's pool, the GPU's budget below)")
        if src.get("dp", 1) > 1:  # (data parallelism: each rank its own pool)
            gpus += f", in each of the {src['dp']} data-parallel ranks (a pool each)"
        pool += (f": what vLLM 0.33.0 leaves for KV on each of {gpus}, "
                 f"{src['kv_bytes_per_token_per_gpu']:,.0f} KV bytes per token per GPU")
        budget = pool_budget_lines(src)
    elif src.get("kind") == "sglang_memory":
        pool += (f": what SGLang 0.5.23 leaves for KV on each of {src['tp']} x {src['gpu']}, "
                 f"{src['kv_bytes_per_token_per_gpu']:,.0f} KV bytes per token per GPU")
        budget = sglang_budget_lines(src)
    elif src.get("gpu_memory_blocks") is not None:
        fits = src["gpu_memory_blocks"]
        pool += (f", as given; {src['tp']} x {src['gpu']} hold{'s' if src['tp'] == 1 else ''} {fits:,} blocks after "
                 f"{src['model']}'s weights" + (f": this pool is {report.capacity_blocks / max(fits, 1):,.1f}x "
                                                 "the KV room they have (a what-if)" if report.capacity_blocks > fits else ""))
    elif src.get("kind") == "unbounded":
        pool += ": unbounded (every block fits)"
    hybrid = report.kv_semantics if (report.kv_semantics or {}).get("semantics") == "hybrid" else None
    if hybrid is not None and hybrid.get("engine") == "sglang":  # pages of SGLang's full-attention pool
        pool = pool.replace(" blocks of ", " full-attention pages of ", 1).replace(" blocks after ",
                                                                                  " blocks (full semantics) after ")
        pool += (f"; SGLang's pools, {hybrid['bytes_per_page']:,} bytes per page"
                 + (f" with its sliding-window pool of {hybrid['swa_pages']:,} pages" if hybrid["swa_pages"] else ""))
        if hybrid.get("full_semantics_blocks") is not None:
            pool += f": full-attention semantics hold {hybrid['full_semantics_blocks']:,} blocks in the same bytes"
    elif hybrid is not None:  # block ids of vLLM's hybrid layout: a block id holds one group's layers
        pool = pool.replace(" blocks of ", " block ids of ", 1).replace(" blocks after ", " blocks (full semantics) after ")
        pool += f"; vLLM's hybrid layout, {hybrid['bytes_per_block_id']:,} bytes per block id"
        if hybrid.get("full_semantics_blocks") is not None:  # (a pool given in block ids has no bytes to compare)
            pool += f": full-attention semantics hold {hybrid['full_semantics_blocks']:,} blocks in the same bytes"
    return [pool + ("" if report.output_kv else "; generated tokens take no KV (--no-output-kv)"), *budget]


def _cluster_line(report, s: dict) -> str:
    """Several instances: their roles, the router and the load balance."""
    balance = report.load_balance()
    lag = f" reading state {report.router_lag_ms:g} ms old" if report.router_lag_ms else ""
    roles = ""
    if report.prefill_instances is not None:
        d = s["disaggregation"]
        roles = (f" ({d['prefill_instances']} prefill, {d['decode_instances']} decode: {d['handoffs']:,} requests' KV "
                 f"moved, {seconds_text(d['transfer_s'])} of transfer)")
    b = report.balance()
    x = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
    spread = ("" if b["hit_rate_min"] is None else
              f", hit rates {100 * b['hit_rate_min']:.2f}% to {100 * b['hit_rate_max']:.2f}%")
    balance_text = (f"load balance (busiest / mean): requests {x(b['requests_max_over_mean'])}, "
                    f"prefill tokens {x(b['prefill_tokens_max_over_mean'])}, busy time {x(balance)}{spread}")
    dp = report.time_model.get("data_parallel")
    if dp is not None:
        return f"cluster    {_data_parallel_text(dp, report)}; {balance_text}"
    return (f"cluster    {report.instances} identical instances{roles} (each with the pool above), router "
            f"{report.router}{lag}; {balance_text}")


def _data_parallel_text(dp: dict, report) -> str:
    """vLLM's data-parallel ranks (serving/dataparallel.py): how they share the work."""
    ep = ", expert parallel" if dp["enable_expert_parallel"] else ""
    how = (f"in lockstep (an MoE: a step lasts the longest rank's, a rank without work runs a dummy batch: "
           f"{int(report.counters.get('dummy_steps', 0)):,} of them; the experts over every rank's tokens{ep}; "
           f"their exchange at each MoE layer {dp.get('token_exchange', 'not priced')}"
           f"{', an all-gather and a reduce-scatter timed from NCCL' if dp.get('token_exchange') == 'priced' else ''}"
           f"{_sequence_parallel_text(dp.get('sequence_parallel_moe'))})"
           if dp["lockstep"] else "independent (a dense model's replicas)")
    return (f"{dp['data_parallel_size']} data-parallel ranks (--dp, each with the pool above) behind one API server "
            f"that picks each request's rank ({report.router}, on counts {report.router_lag_ms:g} ms old), {how}")


def _sequence_parallel_text(sp: dict | None) -> str:
    """vLLM's sequence-parallel MoE (serving/dataparallel.py sequence_parallel), as priced."""
    if not sp:
        return ""
    return (f", sequence-parallel: each rank's tokens split over its {sp['tp']} TP GPUs, exchanged over the "
            f"{sp['expert_group_gpus']} GPUs of the expert group, the MoE output all-gathered over TP in place of "
            "its TP all-reduce")


def _window_line(report, s: dict) -> str:
    """The judged window: finished, rejected and refused requests, the context limit."""
    line = (f"window     {s['window']['text']}: {s['finished']:,} finished"
            + (f", {s['rejected']:,} rejected (the prompt and its output need more blocks than the pool has"
               + (f"; {report.counters.get('never_admitted', 0):,} of them waited and could never be "
                  "admitted again" if report.counters.get("never_admitted") else "")
               + (f"; {report.counters.get('aborted', 0):,} of them aborted: even alone, their sliding-window "
                  "KV outgrew its pool (SGLang aborts such a decode; such a chunked prefill would wait for "
                  "ever)" if report.counters.get("aborted") else "") + ")"
               if s["rejected"] else "")
            + (f", {s['refused_context']:,} refused at arrival (prompt + outputs over max_model_len "
               f"{s['max_model_len']:,}, from {s['max_model_len_source']}; --max-model-len changes it)"
               if s["refused_context"] else ""))
    if s["max_model_len"] is not None and not s["refused_context"]:
        line += f"; context limit {s['max_model_len']:,} tokens ({s['max_model_len_source']})"
    return line


def _latency_lines(s: dict, band: dict | None) -> list[str]:
    """The latency table (with the calibrated band's ends where there is a band) and its notes."""
    lines = []
    lat = s["latency_s"]
    rows = []
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "end to end"),
                       ("queueing", "queueing")):
        st = lat[key]
        row = {"what": label, "mean": seconds_text(st["mean"]), "p50": seconds_text(st["p50"]),
               "p90": seconds_text(st["p90"]), "p99": seconds_text(st["p99"]), "max": seconds_text(st["max"]),
               "n": st["count"]}
        if band is not None:
            for stat in ("p50", "p90"):
                lo, hi = band[key][stat]
                row[f"{stat}_band"] = f"{seconds_text(lo)} - {seconds_text(hi)}"
        rows.append(row)
    lines.append("")
    cols = [("what", "latency"), ("mean", "mean"), ("p50", "p50")]
    cols += [("p50_band", "p50 band")] if band is not None else []
    cols += [("p90", "p90")] + ([("p90_band", "p90 band")] if band is not None else [])
    lines.append(format_table(rows, cols + [("p99", "p99"), ("max", "max"), ("n", "count")]))
    lines.append("(count: finished requests; for ITL, the gaps between consecutive tokens of a request)")
    if band is not None:
        lines.append("(band: the same run with every step at the low / high end of the calibrated roofline's "
                     "measured/predicted step-time ratios, 5th-95th percentile; see the time line above)")
    if band is not None and band.get("prediction"):
        lines.append(_prediction_line(band["prediction"]))
    return lines


def _prediction_line(pred: dict) -> str:
    """The prediction band's p90s: how far measured vLLM runs scatter around a run like this one."""
    names = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end to end"))
    ranges = ", ".join(f"{label} p90 {seconds_text(pred[k]['p90'][0])} - {seconds_text(pred[k]['p90'][1])}"
                       for k, label in names if k in pred and "p90" in pred[k])
    factors = ", ".join(f"{label} x{pred['factors'][k][0]:.2f}-{pred['factors'][k][1]:.2f}"
                        for k, label in names if k in pred.get("factors", {}))
    return (f"(prediction band, where measured vLLM runs fall around such a run: {ranges}; each end the point "
            f"x the 5th / 95th percentile of measured / simulated over measured serving runs, {factors}; "
            "docs/host.md)")


def _throughput_lines(s: dict) -> list[str]:
    """Throughput over the run, and the goodput meeting the SLOs given."""
    lines = []
    tp = s["throughput"]
    if s["duration_s"] > 0:
        lines.append(f"throughput {tp['requests_per_s']:,.3f} requests/s, {tp['input_tokens_per_s']:,.0f} input and "
                     f"{tp['output_tokens_per_s']:,.0f} output tokens/s (over {seconds_text(s['duration_s'])})")
    else:
        lines.append("throughput none to show: every request finished at 0 s (no service time: --time-model instant, "
                     "or nothing finished)")
    gp = s["goodput"]
    if gp["slo_ttft_s"] is not None or gp["slo_tpot_s"] is not None:
        slos = " and ".join(f"{name} <= {1000 * v:g} ms" for name, v in (("TTFT", gp["slo_ttft_s"]),
                                                                         ("TPOT", gp["slo_tpot_s"])) if v is not None)
        lines.append(f"goodput    {gp['requests_per_s']:,.3f} requests/s meet {slos} "
                     f"({gp['good_requests']:,} of {s['finished']:,})")
    return lines


def _kv_pool_lines(s: dict, ids: str) -> list[str]:
    """The pool's peak use, preemptions, and the evictions against the sequential replay's."""
    lines = []
    lines.append(f"KV pool    peak held by running requests {s['peak_running_kv_blocks']:,} {ids} "
                 f"({100 * s['peak_running_kv_fraction']:.0f}% of the pool); peak {s['peak_running_requests']:,} "
                 f"running, {s['peak_waiting_requests']:,} waiting; {s['preemptions']:,} preemptions of "
                 f"{s['preempted_requests']:,} requests ({s['recomputed_tokens']:,} tokens recomputed)")
    if s.get("extra_evictions") is not None:
        lines.append(f"evictions  {s['evictions']:,} {ids} evicted by the policy; the sequential replay evicts "
                     f"{s['sequential_evictions']:,}: " + (
                         f"running requests forced out {s['extra_evictions']:,} more (the blocks they hold and their "
                         "decode blocks)" if s["fewer_evictions"] == 0 else
                         f"{s['fewer_evictions']:,} fewer under concurrency (requests served together reuse blocks "
                         "one at a time would have evicted and read again)"))
    return lines


def _instance_lines(report) -> list[str]:
    """Several instances: idle ones warned of, and one row per instance."""
    lines = []
    idle = [r["instance"] for r in report.per_instance() if r["requests"] == 0]
    if idle:
        lines.append(f"warning    {len(idle)} of {report.instances} instances received no request"
                     + (" (the session router keys on each request's first block when the trace has no session "
                        "ids, and requests that share a system prompt share that block)"
                        if report.router == "session" else ""))
    rows = [dict(r, ttft50=seconds_text(r["ttft_p50_s"]), ttft90=seconds_text(r["ttft_p90_s"]),
                 busy=seconds_text(r["busy_s"])) for r in report.per_instance()]
    lines.append("")
    role = [("role", "role")] if report.prefill_instances is not None else []
    lines.append(format_table(rows, [("instance", "instance"), *role, ("requests", "requests"),
                                     ("hit_rate", "hit rate %"), ("ttft50", "TTFT p50"), ("ttft90", "TTFT p90"),
                                     ("busy", "busy")]))
    return lines


def verdict_text(v: dict, *, instances: int, checked: dict | None = None, flag: str = "--instances") -> str:
    """The summary's keeps-up line: yes (at the band's pessimistic end where there is a band), only
    at the centre, or no with its worst window; and what would keep up, as estimated and, with
    `checked` (fixcheck.check_fix), as the runs it suggests found."""
    win = f"{seconds_text(v['window_s'])} windows"
    at = " at the band's pessimistic end" if v.get("judged_at", "").startswith("pessimistic") else ""
    if v["keeps_up"]:
        return (f"keeps up   yes{at}: worst p90 queueing {seconds_text(v['worst_queue_p90_s'])} in {win} (allowed "
                f"{seconds_text(v['allowed_queue_s'])}), backlog {seconds_text(v['backlog_s'])}"
                + (f"; at that end {seconds_text(v['high']['worst_queue_p90_s'])}, backlog "
                   f"{seconds_text(v['high']['backlog_s'])}" if v.get("high") else ""))
    if v.get("only_at_centre"):
        h = v["high"]
        text = (f"keeps up   ONLY AT THE BAND'S CENTRE ({win}): at the centre the worst p90 queueing is "
                f"{seconds_text(v['worst_queue_p90_s'])} (allowed {seconds_text(v['allowed_queue_s'])}); at the "
                f"pessimistic end it is {seconds_text(h['worst_queue_p90_s'])} in the window from "
                f"{seconds_text(h['worst_window_start_s'])}, backlog {seconds_text(h['backlog_s'])}")
    else:
        where = ""
        if v["worst_window_start_s"] is not None:
            where = (f"; in the worst window (arrivals from {seconds_text(v['worst_window_start_s'])}) p90 queueing "
                     f"is {seconds_text(v['worst_queue_p90_s'])} against {seconds_text(v['allowed_queue_s'])} allowed")
        text = (f"keeps up   NO ({win}){where}; it finished {seconds_text(v['backlog_s'])} after the last arrival "
                f"(allowed {seconds_text(v['backlog_limit_s'])})")
    fix = v.get("fix")
    if fix and checked is not None:
        text += "\n" + _checked_text(fix, checked, instances, flag)
    elif fix:
        options = []
        if fix["load"] is not None:
            options.append(f"about {fix['load']['value']:.3g} ({fix['load']['flag']} {fix['load']['value']:.3g}, "
                           f"x{fix['load_scale']:.2g} of this load)")
        what = "data-parallel ranks" if flag == "--dp" else "instances"
        options.append(f"about {fix['instances']} {what} ({flag} {fix['instances']}, now {instances})")
        text += ("\n           estimated, not checked, to keep up at " + " or ".join(options) + "; sweep around it: "
                 "--speedups / --instances-list")
    return text


def _share(ratio: float) -> str:
    """A need against a rate: "80% of" up to it, "31.7 times" past it (never "3172% of")."""
    return f"{ratio:.0%} of" if ratio <= 1 else f"{ratio:,.1f} times"


def _checked_text(fix: dict, checked: dict, instances: int, flag: str = "--instances") -> str:
    """The verdict's estimates as the runs they suggest found them."""
    why = (f"the busiest window needs {_share(fix['busiest_window_utilisation'])} the instances' measured rate"
           if fix["basis"] == "work" else "bursts within a window queue for longer than the allowance")
    parts = []
    for key in ("load", "instances"):
        c = checked.get(key)
        if c is None:
            continue
        what = (f"{c['flag']} {c['value']:.3g}" if key == "load" else f"{flag} {c['value']} (now {instances})")
        if c["keeps_up"]:
            parts.append(f"{what}: checked, it keeps up (worst p90 queueing {seconds_text(c['worst_queue_p90_s'])})")
        else:
            parts.append(f"{what}: checked, it does NOT keep up"
                         + (" (only at the band's centre)" if c["only_at_centre"] else
                            f" (worst p90 queueing {seconds_text(c['worst_queue_p90_s'])} in the window from "
                            f"{seconds_text(c['worst_window_start_s'])})")
                         + ": the estimate did not hold; sweep further (--speedups / --instances-list)")
    return f"           estimated from {why}; " + "; ".join(parts)


def load_table(trace, rows: list[dict]) -> str:
    failed = [r for r in rows if r.get("error") is not None]
    rows = [r for r in rows if r.get("error") is None]
    shown = [dict(r, load_text=(f"x{r['load']:g}" if r["load_kind"] == "speedup" else
                                f"{int(r['load']):,} sessions" if r["load_kind"] == "sessions" else f"{r['load']:g}/s"),
                  ttft50=seconds_text(r["ttft_p50_s"]) + (f" [{seconds_text(r['ttft_p50_low_s'])} - "
                                                          f"{seconds_text(r['ttft_p50_high_s'])}]"
                                                          if r.get("ttft_p50_low_s") is not None else ""),
                  ttft90=seconds_text(r["ttft_p90_s"]) + (f" [{seconds_text(r['ttft_p90_low_s'])} - "
                                                          f"{seconds_text(r['ttft_p90_high_s'])}]"
                                                          if r.get("ttft_p90_low_s") is not None else ""),
                  ok=keeps_up_cell(r)) for r in rows]
    warm = any((r.get("warmup_s") or 0) > 0 for r in rows)
    head = (f"{trace_name(trace)}: TTFT and hit rate against load ("
            + ("the judged requests, after each run's warm-up (--warmup)" if warm else
               "every request, from an empty cache")
            + "; hit rate % at first schedule, sequential % for the same policy and pool over the same finished "
              "requests; keeps up at the band's pessimistic end, where there is a band")
    if rows and any(r.get("slo_attainment") is not None for r in rows):
        r0 = next(r for r in rows if r.get("slo_attainment") is not None)
        slos = " and ".join(f"{k} <= {1000 * v:g} ms" for k, v in (("TTFT", r0.get("slo_ttft_s")),
                                                                   ("TPOT", r0.get("slo_tpot_s"))) if v is not None)
        head += f"; goodput: finished requests meeting {slos} per second, SLO met %: their share"
    head += ")"
    cluster = any(r.get("instances", 1) > 1 for r in rows) or len({r.get("router") for r in rows}) > 1
    tiered = any(r.get("tiers", "none") != "none" for r in rows)
    extra = ([("instances", "instances"), ("router", "router")] if cluster else []) + \
        ([("tiers", "tiers"), ("hbm_hit_rate", "HBM hit %")] if tiered else [])
    slo = any(r.get("slo_attainment") is not None for r in rows)
    shown = [dict(r, slo_met=f"{100 * r['slo_attainment']:.1f}") if slo else r for r in shown]
    slo_columns = [("goodput_per_s", "goodput req/s"), ("slo_met", "SLO met %")] if slo else []
    table = format_table(shown, [("load_text", "load"), ("policy", "policy"), ("capacity_blocks", "pool blocks"),
                                 *extra, ("ttft50", "TTFT p50"), ("ttft90", "TTFT p90"), ("hit_rate", "hit rate %"),
                                 ("sequential_hit_rate", "sequential %"), ("requests_per_s", "req/s"),
                                 *slo_columns, ("preemptions", "preemptions"), ("ok", "keeps up")])
    for text in dict.fromkeys(r["kv_semantics_text"] for r in rows if r.get("kv_semantics_text")):
        hybrid = any(r.get("kv_semantics") == "hybrid" and r["kv_semantics_text"] == text for r in rows)
        table += ("\nsemantics  " if hybrid else "\nwarning    KV semantics: ") + text + \
            (" (pool blocks: block ids of this layout)" if hybrid else "")
    for r in failed:
        table += (f"\nfailed     load {r['load']:g}, {r['policy']}, {r['instances']} instance(s), router {r['router']}, "
                  f"tiers {r['tiers']}: {r['error']}")
    for line in capacity_lines(rows):
        table += "\n" + line
    return head + "\n" + table


def capacity_lines(rows: list[dict]) -> list[str]:
    """A sweep over concurrent sessions: per configuration, the most sessions whose TTFT p90 (at the
    band's pessimistic end, where there is a band) stays within --slo-ttft."""
    rows = [r for r in rows if r.get("load_kind") == "sessions"]
    if not rows:
        return []
    slo = rows[0].get("slo_ttft_s")
    if slo is None:
        return ["capacity   give --slo-ttft MS to state each configuration's capacity in concurrent sessions"]
    keys = ("policy", "capacity_blocks", "instances", "router", "tiers")
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for config, rs in groups.items():
        # the worst of the centre and the band's ends: in a closed loop the faster end sends sooner,
        # so its TTFT need not be the lower
        p90 = lambda r: max(x for x in (r["ttft_p90_s"], r.get("ttft_p90_low_s"), r.get("ttft_p90_high_s"))  # noqa: E731
                            if x is not None) if r["ttft_p90_s"] is not None else None
        ok = [r for r in rs if p90(r) is not None and p90(r) <= slo]
        what = ", ".join(f"{k} {v}" for k, v in zip(keys, config) if v not in (None, "-", "none"))
        if not ok:
            out.append(f"capacity   {what}: TTFT p90 above {seconds_text(slo)} at every count tried "
                       f"(from {int(min(r['load'] for r in rs)):,} sessions)")
            continue
        best = max(ok, key=lambda r: r["load"])
        more = [int(r["load"]) for r in rs if r["load"] > best["load"]]
        banded = best.get("ttft_p90_high_s") is not None
        out.append(f"capacity   {what}: up to {int(best['load']):,} concurrent sessions at TTFT p90 <= "
                   f"{seconds_text(slo)}" + (" (at the worst of the band's ends and its centre)" if banded else "")
                   + f": {seconds_text(p90(best))} there" + (f"; above it at {min(more):,}" if more else ""))
    return out


def denominators(r: dict) -> str:
    """"10,507 of 10,507 (0, 0)": finished of judged requests (refused at arrival, rejected)."""
    return (f"{_count(r['finished'])} of {_count(r.get('judged_requests', r['finished']))} ({_count(r.get('refused_context', 0))}, "
            f"{_count(r.get('rejected', 0))})")


def _count(n) -> str:
    return f"{n:,}" if n is not None else "-"


def keeps_up_cell(r: dict) -> str:
    """A sweep row's keeps-up: yes (at the band's pessimistic end, where there is one), centre only, no."""
    if r["stable"]:
        return "yes"
    return "centre only" if r.get("stable_at_centre") else "no"


def tiers_text(tiers: dict) -> str:
    """Hit tokens per tier (HBM first), as run and simulate print them."""
    copies = {"move": "moved up", "keep": "copied up, kept below"}.get(tiers["copies"], tiers["copies"])
    lines = [f"tiers     hit tokens by where they were found (blocks found below HBM are {copies}"
             + (", loads overlapped with compute" if tiers.get("overlap") else "") + ")"]
    for row in tiers["tiers"]:
        given = "" if row["name"] == "hbm" or str(row["size"]).isdigit() else f"{row['size']} = "
        size = "" if row["name"] == "hbm" else f"{given}{row['blocks']:,} blocks, {row['policy']}" + \
            (", shared by every instance" if row.get("shared") else "")
        bw = row.get("bandwidth_bytes_per_s")
        load = f", {row['load_ms_per_block']:.2f} ms/block at {bw / 1e9:g} GB/s" if bw and row.get("load_ms_per_block") else ""
        lines.append(f"  {row['name']:<8} {row['hit_rate']:7.2%} of prompt tokens ({row['hit_tokens']:,}) {size}{load}")
    if tiers.get("load_s"):
        lines.append(f"  loading from the tiers took {seconds_text(tiers['load_s'])} of step time")
    return "\n".join(lines)


def served_misses_lines(s: dict) -> list[str]:
    """The served miss account (over the finished requests), concurrency split in two."""
    from .misses import misses_lines

    m = s["misses"]
    split = m["concurrency"]
    detail = {"concurrency": f"of which {split['still_computing']:,} tokens were still being computed by an earlier "
                             f"request (scheduled before its prefix's prefill ended), {split['evicted_under_load']:,} "
                             "evicted under load"}
    return misses_lines(m["tokens"], m["not_measured"], s["prompt_tokens"], detail=detail)
