"""`kvreplay report`: one self-contained HTML page (inline CSS and SVG, no scripts, no network).

`analysis.overview.collect` runs the replays and returns plain data (JSON-ready); `render`
turns that data into the page (``kvreplay.report_html`` does both). The page explains itself for a reader who never used the tool: what a hit
is, the window every figure covers, and how each number is computed.
"""

from __future__ import annotations

import datetime
import html

import numpy as np

from ..version import __version__
from ..analysis.overview import BOUNDS
from . import plot

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555;margin-top:0}.note{color:#444;font-size:.92em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}th,td{padding:.3em .7em;border-bottom:1px solid #e3e3e3}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
.figure svg{max-width:100%;height:auto}.kpi{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.kpi div{background:#f4f7fb;border:1px solid #dbe4f0;border-radius:6px;padding:.6em 1em;min-width:10em}
.kpi b{display:block;font-size:1.4em}.wide{overflow-x:auto}.kpi small{display:block;color:#555;font-size:.8em}
"""


def _svg(fig) -> str:
    text = plot.figure_bytes(fig, "svg").decode()
    return text[text.index("<svg"):]


def _n(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}"
    return f"{value:,}" if isinstance(value, int) else html.escape(str(value))


def _pct(value: float) -> str:
    return f"{100 * value:.2f}%"


def _table(headers: list[str], rows: list[list], numeric: list[bool] | None = None, raw_headers: bool = False) -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{h if raw_headers else html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if num else f"<td>{c}</td>" for c, num in zip(row, numeric)) + "</tr>"
        for row in rows)
    return f"<div class=\"wide\"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _curve_table(data: dict) -> str:
    """The curve's numbers: capacities down and series across, or the other way round when
    there are more series than capacities (the table stays narrower than the page)."""
    labels = []
    cells: dict = {}
    rows_in = [r for r in data["curve"] if r["policy"] != "infinite"]
    for r, label in zip(rows_in, plot.curve_labels(rows_in)):
        if label not in labels:
            labels.append(label)
        cells[(label, r["cache_capacity_blocks"])] = r["hit_rate"]
    bpb = data["bytes_per_block"]
    caps = data["capacities"]

    def cap_text(c):
        mark = " &#9664;" if c == data["focus_capacity"] else ""
        return _n(c) + (f" ({c * bpb / plot.GIB:,.2f} GiB)" if bpb else "") + mark

    def cell(label, c):
        return _pct(cells[(label, c)]) if (label, c) in cells else ""

    if len(labels) > len(caps):
        headers = ["policy / capacity (blocks" + (", KV GiB" if bpb else "") + ")"] + [cap_text(c) for c in caps]
        rows = [[html.escape(label)] + [cell(label, c) for c in caps] for label in labels]
        return _table(headers, rows, [False] + [True] * len(caps), raw_headers=True)
    headers = ["capacity (blocks)"] + (["KV memory (GiB)"] if bpb else []) + labels
    rows = []
    for c in caps:
        mark = " &#9664;" if c == data["focus_capacity"] else ""
        row = [_n(c) + mark] + ([f"{c * bpb / plot.GIB:,.2f}"] if bpb else [])
        row += [cell(label, c) for label in labels]
        rows.append(row)
    return _table(headers, rows, [True] * len(headers))


def _spread(d: dict) -> str:
    return f"mean {d['mean']:,.0f}, p50 {d['p50']:,}, p90 {d['p90']:,}, p99 {d['p99']:,}, max {d['max']:,}"


def _trace_rows(d: dict, ceiling: float | None) -> list[str]:
    """The trace table's cells for one column (the measured window or the whole trace)."""
    span = d["time_span_s"]
    rate = d["request_rate_per_s"]
    sessions = d.get("sessions")
    return [
        _n(d["num_requests"]), _n(d["total_prompt_tokens"]), _n(d["num_block_accesses"]), _n(d["num_unique_blocks"]),
        "" if span is None else f"{span:,.1f} s", "&ndash;" if rate is None else f"{rate:,.3f} per second",
        _spread(d["input_length"]), _spread(d["output_length"]),
        f"{sessions['num_sessions']:,} (mean {sessions['mean_turns']:.1f} requests each)" if sessions else "&ndash;",
        "" if ceiling is None else _pct(ceiling),
    ]


TRACE_ROWS = ["requests", "prompt tokens", "block accesses", "unique blocks (touched)", "time span", "request rate",
              "prompt length (tokens)", "output length (tokens)", "sessions", "infinite-cache hit rate (nothing ever evicted)"]


def _serving_section(sv: dict, name: str) -> list[str]:
    """`kvreplay report --gpu`: the simulated deployment (instances, router, tiers) at several loads
    (serving/simulate.py)."""
    esc = html.escape
    src = sv["capacity_source"]
    tm = sv["time_model"]
    n = sv.get("instances", 1)
    who = ("One engine instance serves" if n == 1 else
           f"{n} identical engine instances behind the <code>{esc(sv.get('router', 'round-robin'))}</code> router serve")
    below = f", with tiers <code>{esc(sv['tiers'])}</code> below each pool" if sv.get("tiers") else ""
    closed = bool(sv["rows"]) and sv["rows"][0].get("load_kind") == "sessions"
    think = (f", think times drawn from <code>{esc(str(sv['think_time']))}</code>" if sv.get("think_time") is not None
             else ", think times from the trace")
    load = ("N concurrent sessions drawn from the trace's, for each N (a closed loop: a session's next request is "
            f"sent when its previous answer ends, plus its think time{think}; docs/sessions.md)" if closed else
            "its arrivals sped up or slowed down by each load factor" + (
                f" (a closed loop: a request is sent when what it waits for has ended, plus its think time{think}; "
                "its sessions' first requests at their recorded times, divided by the load factor; docs/sessions.md)"
                if sv.get("arrivals") == "closed" else " (an open loop: each request at its timestamp)"))
    out = [f"<h2>Serving on {n} &times; {src['tp']} &times; {esc(src['gpu'])} ({esc(src['model'])})</h2>"
           if n > 1 else f"<h2>Serving on {src['tp']} &times; {esc(src['gpu'])} ({esc(src['model'])})</h2>",
           f"<p class=\"note\">{who} the whole trace{below} in simulated time, {load}: a vLLM-style scheduler ({sv['scheduler']['max_num_batched_tokens']:,} "
           f"tokens and {sv['scheduler']['max_num_seqs']:,} requests per step, chunked prefill), policy "
           f"<code>{esc(sv['policy'])}</code>, a pool of {src['blocks']:,} blocks of {sv['block_size']} tokens (what "
           f"{src['gpu_memory_utilization']:g} of the GPU memory holds after {src['weight_bytes_per_gpu'] / 1e9:.1f} GB "
           f"of weights per GPU) shared by running requests and the prefix cache; steps timed by the "
           + (f"calibrated roofline (fitted on {esc(str(tm.get('calibrated_on')))}'s measured kernels; TTFT p50 shown "
              "with its band: the run at both ends of the measured/predicted step-time ratios)"
              if tm.get("time_model") == "roofline" else
              f"{esc(str(tm.get('time_model')))} model (MFU {tm.get('mfu', '-')}, MBU {tm.get('mbu', '-')})")
           + f", weights {esc(str(src.get('weights_dtype', 'bf16')))}. "
           + _judged_note(sv["rows"][0] if sv["rows"] else {})
           + " Hit rate: at each request's first schedule, token-weighted, over the finished judged requests; "
           "<em>sequential</em> is the same policy and pool with one request at a time over the same requests. "
           "<em>Keeps up</em> is judged at the pessimistic end of the time model's band (<em>centre only</em>: only at "
           "its centre). docs/serving.md has every rule.</p>"]
    from .serving import seconds_text

    def p50(r):
        text = seconds_text(r["ttft_p50_s"])
        if r.get("ttft_p50_low_s") is not None:
            text += f" [{seconds_text(r['ttft_p50_low_s'])} - {seconds_text(r['ttft_p50_high_s'])}]"
        return text

    from .serving import denominators, keeps_up_cell

    rows = [[f"{int(r['load']):,} sessions" if closed else f"&times;{r['load']:g}", p50(r),
             seconds_text(r["ttft_p90_s"]) + _p90_band(r), _pct(r["hit_rate"]),
             _pct(r["sequential_hit_rate"]), denominators(r), f"{r['requests_per_s']:,.3f}", _n(r["preemptions"]),
             keeps_up_cell(r) if r["stable"] else f"<b>{keeps_up_cell(r)}</b>"] for r in sv["rows"]]
    out.append(_table(["load", "TTFT p50", "TTFT p90", "hit rate", "sequential", "finished of judged (refused, "
                       "rejected)", "requests/s", "preemptions", "keeps up"], rows, [False] + [True] * 8,
                      raw_headers=False))
    deployment = f"{src['model']} on {n} x {src['tp']} x {src['gpu']}" + (f", router {sv.get('router')}" if n > 1 else "") \
        + (f", tiers {sv['tiers']}" if sv.get("tiers") else "")
    fig = plot.load_figure(sv["rows"], title=f"{name}; {deployment}")
    out.append(f"<div class=\"figure\">{_svg(fig)}</div>")
    if closed:
        out.extend(_sessions_part(sv))
    if any(r.get("miss_first_use_tokens") is not None for r in sv["rows"]):
        from .misses_plot import load_account_figure

        out.append("<p class=\"note\">Why the served requests missed, per load: the sequential replay's causes, plus "
                   "<em>concurrency</em> for what one request at a time would have hit (evicted under load by running "
                   "requests' KV, or still being computed by an earlier request when this one was scheduled).</p>")
        out.append(f"<div class=\"figure\">{_svg(load_account_figure(sv['rows']))}</div>")
    if not all(r["stable"] for r in sv["rows"]):
        out.append("<p class=\"note\">Where it does not keep up, the queue grows for as long as the trace lasts, so "
                   "TTFT measures the backlog, not the engine: size for the loads it keeps up with.</p>")
    return out


def _p90_band(r: dict) -> str:
    """A closed loop's TTFT p90 band (what its capacity is judged on); nothing for the open loop."""
    from .serving import seconds_text

    if r.get("load_kind") != "sessions" or r.get("ttft_p90_low_s") is None:
        return ""
    return f" [{seconds_text(r['ttft_p90_low_s'])} - {seconds_text(r['ttft_p90_high_s'])}]"


def _sessions_part(sv: dict) -> list[str]:
    """A serving section at concurrent sessions: the sessions' figures, TTFT per turn, Little's law
    and the capacity line (serving/closed_stats.py computes every figure; all text escaped)."""
    from .serving import capacity_lines, seconds_text

    esc = html.escape
    rows = sv["rows"]
    out = ["<h3>Sessions</h3>",
           "<p class=\"note\">Session time: from a session's first send to its last answer, over the sessions that "
           "started in the judged span and finished. Think share: the sessions' think time over their time. Little's "
           "law: throughput &times; (response time + think time) against the time-average number of open cycles "
           "measured in the run, within the sampling error of the span's cut ends.</p>"]
    table = []
    for r in rows:
        n = r.get("sessions_judged") or {}
        table.append([f"{int(r['load']):,}", esc(f"{n.get('complete', 0):,} of {n.get('of', 0):,}"),
                      seconds_text(r["session_time_p50_s"]) if r.get("session_time_p50_s") is not None else "-",
                      seconds_text(r["session_time_p90_s"]) if r.get("session_time_p90_s") is not None else "-",
                      f"{r['turns_per_minute']:,.3g}" if r.get("turns_per_minute") is not None else "-",
                      _pct(r["think_share"]) if r.get("think_share") is not None else "-",
                      esc(r.get("littles_law") or "-")])
    out.append(_table(["sessions", "judged sessions complete (of run)", "session time p50", "session time p90",
                       "turns per minute", "think share", "Little's law"], table, [True] * 6 + [False]))
    buckets = [b["turns"] for b in (rows[0].get("ttft_by_turn") or [])]
    if buckets:
        per_turn = []
        for k, label in enumerate(buckets):
            cells = []
            for r in rows:
                b = r["ttft_by_turn"][k]
                cells.append(f"{seconds_text(b['ttft_p50_s'])} / {seconds_text(b['ttft_p90_s'])} ({b['requests']:,})"
                             if b["requests"] else "-")
            per_turn.append([esc(label), *cells])
        out.append("<p class=\"note\">TTFT p50 / p90 by turn (a request's rank in its session by arrival), over "
                   "the judged requests, with their count:</p>")
        out.append(_table(["turn", *[f"{int(r['load']):,} sessions" for r in rows]], per_turn,
                          [False] + [True] * len(rows)))
    draws = [r["draws"] for r in rows if r.get("draws")]
    if draws:
        out.append("<p class=\"note\">Draws: " + "; ".join(esc(d) for d in draws) + ".</p>")
    lines = [line.removeprefix("capacity").strip() for line in capacity_lines(rows)]
    if sv.get("slo_ttft_s") is not None and lines:
        out.append("<p><b>Capacity</b>: " + "<br>".join(esc(line) for line in lines) + ".</p>")
    else:
        out.append("<p class=\"note\">Give --slo-ttft to state the deployment's capacity in concurrent sessions.</p>")
    return out


def _judged_note(r: dict) -> str:
    """Which requests a serving table judges: after its warm-up, or all from an empty cache."""
    text = r.get("window_text")
    return f"Judged: {html.escape(text)}." if text else ""


def _ranking_section(rk: dict) -> list[str]:
    """Policies ranked by their hit rate served on the deployment, beside the offline ranking."""
    esc = html.escape
    d = rk["deployment"]
    where = (f"{d['instances']} &times; {d['tp']} &times; {esc(d['gpu'])}, router <code>{esc(d['router'])}</code>"
             + (f", tiers <code>{esc(d['tiers'])}</code>" if d.get("tiers") else "")
             + f", load {esc(d['load'][0])} {d['load'][1]:g}")
    out = ["<h2>Policies under serving</h2>",
           f"<p class=\"note\">Each policy served on the deployment ({where}) in the simulator, beside its offline "
           "replay through one cache of one instance's pool, both over the same requests (the served run's finished "
           "judged requests). The offline order is what the curves above show; the served one is what the deployment "
           "gets at its concurrency.</p>"]
    rows = [[esc(r["policy"]), _pct(r["offline_hit_rate"]), str(r["offline_rank"]), _pct(r["served_hit_rate"]),
             str(r["served_rank"]), "" if r["offline_rank"] == r["served_rank"] else "<b>rank moves</b>"]
            for r in rk["rows"]]
    out.append(_table(["policy", "offline hit rate", "offline rank", "served hit rate", "served rank", ""], rows,
                      [False, True, True, True, True, False], raw_headers=False))
    verdict = (f"<b>The ranking differs.</b> Offline: {esc(rk['offline_order'])}; served: {esc(rk['served_order'])}. "
               "Choose the policy at your real concurrency." if rk["differs"] else
               f"The same order offline and served: {esc(rk['served_order'])}.")
    out.append(f"<p class=\"note\" data-note=\"ranking\">{verdict}"
               + "".join(f" {esc(n['policy'])} is not served: {esc(n['why'])}." for n in rk["not_served"]) + "</p>")
    return out


def _misses_section(data: dict, styles: dict) -> list[str]:
    """Why the cache missed: the account over the curve (stacked bars), the operating point's
    account, stranded blocks over time and headroom per policy, and the advice."""
    from ..engine.misses import CAUSES, CAUSE_TEXT
    from .misses import LABEL
    from .misses_plot import account_figure, stranded_figure

    m = data.get("misses") or {}
    if not m.get("policies"):
        return []
    esc = html.escape
    cap = data["focus_capacity"]
    out = ["<h2>Why the cache missed</h2>",
           "<p class=\"note\">Every prompt token either hit or missed for one reason: a block seen for the first time "
           "(<em>first use</em>: no cache helps), one seen before but evicted (<em>evicted</em>), one still cached "
           "behind an earlier miss of the same prompt (<em>behind a hole</em>: a prefix cannot skip a block), or the "
           "prompt's last block that the engine never serves (<em>partial block</em>); namespaces, layer groups and "
           "concurrency are counted where they apply. Each bar is one replay of the curve above, split by cause "
           "(token-weighted shares of the window's prompt tokens; they add up to 100%).</p>"]
    rows = [r for r in data["curve"] if r["policy"] not in BOUNDS and r.get("miss_first_use_tokens") is not None]
    if rows:
        out.append(f"<div class=\"figure\">{_svg(account_figure(rows))}</div>")
    measured = [c for c in CAUSES if any(c not in p["account"]["not_measured"] for p in m["policies"])]
    headers = ["policy", "hit"] + [LABEL[c] for c in measured] + ["stranded (mean, end)"]
    table = []
    for p in m["policies"]:
        tokens, prompt = p["account"]["tokens"], p["prompt_tokens"]
        mean = "&ndash;" if p["stranded_mean"] is None else f"{p['stranded_mean']:.1f}%"
        table.append([esc(p["label"]), _pct(p["hit_tokens"] / prompt if prompt else 0.0)]
                     + ["&ndash;" if c in p["account"]["not_measured"] else _pct(tokens[c] / prompt if prompt else 0.0)
                        for c in measured] + [f"{mean}, {p['stranded_end']:,} blocks"])
    out.append(f"<p class=\"note\">At {cap:,} blocks, each policy's prompt tokens by cause:</p>")
    out.append(_table(headers, table, [False] + [True] * (len(headers) - 1)))
    out.append("<ul class=\"note\">" + "".join(f"<li><b>{esc(LABEL[c])}</b>: {esc(CAUSE_TEXT[c])}</li>" for c in measured)
               + "</ul>")
    series = {p["label"]: p["account"]["stranded_over_time"] for p in m["policies"]
              if p["account"].get("stranded_over_time")}
    if series:
        out.append("<h3>Stranded blocks</h3><p class=\"note\">Cached blocks that no request can reach because an "
                   "earlier block of their chain is gone: memory that holds nothing usable until that block returns. "
                   "An order that evicts a prompt's tail first (vllm, lru-tail) keeps chains whole; lru, fifo and "
                   f"s3fifo do not. Counted {len(next(iter(series.values()))['request'])} times over the trace at "
                   f"{cap:,} blocks.</p>")
        out.append(f"<div class=\"figure\">{_svg(stranded_figure(series, cap, styles=styles))}</div>")
    lines = []
    for p in m["policies"]:
        if p["headroom"] is not None:
            from ..analysis.headroom import headroom_sentence

            lv = p["headroom"]["levels"]
            lines.append(f"<li><b>{esc(p['label'])}</b>: {esc(headroom_sentence(p['headroom']))} (belady at this "
                         f"capacity: {_pct(lv['belady']['hit_rate'])})</li>")
    if lines:
        out.append("<h3>Headroom</h3><p class=\"note\">From the infinite-cache ceiling (what the workload allows) down "
                   "to belady at this capacity (the offline optimum: the rest is capacity) and to the policy (the rest "
                   "is its eviction order).</p><ul>" + "".join(lines) + "</ul>")
    if m.get("advice"):
        out.append("<h3>What would help</h3><ul data-advice=\"1\">"
                   + "".join(f"<li>{esc(a)}</li>" for a in m["advice"]) + "</ul>")
    return out


def render(data: dict, *, title: str | None = None, zoom="auto") -> str:
    """The HTML page for `collect`'s data. `title` defaults to "kvreplay report: FILE NAME";
    `zoom` is passed to `plot.curves_figure` (a second panel on the band where the policies sit)."""
    t = data["trace"]
    title = title or f"kvreplay report: {t['name']}"
    styles = {f["label"]: f["series"] for f in data["focus"]}
    parts = _head(data, title)
    parts.append(_kpis(data))
    parts.extend(_trace_section(data))
    parts.extend(_curve_section(data, zoom))
    parts.extend(_focus_section(data))
    parts.extend(_misses_section(data, styles))
    parts.extend(_spread_sections(data, styles))
    if data.get("serving"):
        parts.extend(_serving_section(data["serving"], t["name"]))
    if data.get("plan"):
        from .plan_html import plan_section

        parts.extend(plan_section(data["plan"], _svg, _table, served=data.get("plan_served"),
                                  not_served=data.get("plan_served_note")))
    if data.get("ranking"):
        parts.extend(_ranking_section(data["ranking"]))

    parts.extend(_definitions(data))
    parts.append("</body></html>\n")
    return "".join(parts)


def _head(data: dict, title: str) -> list[str]:
    """The page's head, title, what it measures, and its notes (KV semantics, warm-up)."""
    t = data["trace"]
    esc = html.escape
    window = data["window"]
    warm = window["warmup_requests"] > 0
    whole = data["whole_trace"]
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>",
             f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>{CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1>",
             f"<p class=\"sub\">Trace <code>{esc(t['name'])}</code> ({esc(str(t['format']))}), block size {data['block_size']} tokens. "
             f"Window: {esc(window['description'])}. Generated by kvreplay {esc(__version__)} on "
             f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.</p>",
             "<h2>What this measures</h2>",
             "<p>An LLM server keeps the attention keys and values (the <em>KV cache</em>) of earlier prompts in blocks of "
             f"{data['block_size']} tokens. A new request can reuse the <em>longest run of leading blocks</em> it shares with "
             "what is still cached; those prompt tokens need no prefill compute. The <b>hit rate</b> is the share of all prompt "
             "tokens served that way (token-weighted: long prompts count more). When the cache is full, an <em>eviction "
             "policy</em> decides which block goes; the policies below differ only in that choice. A request's hit is "
             "min(k &times; block size, prompt length) for its k leading cached blocks.</p>"]
    if data.get("kv_semantics_note"):
        parts.append(f"<p class=\"note\" data-note=\"kv-semantics\"><b>KV semantics.</b> "
                     f"{esc(data['kv_semantics_note'])}</p>")
    if warm:
        parts.append(f"<p class=\"note\"><b>Warm-up.</b> The first {window['warmup_requests']:,} requests "
                     f"({100 * window['warmup_fraction']:g}% of {whole['num_requests']:,}) only fill the cache: every figure "
                     f"below counts requests {window['first_request']:,}-{window['last_request']:,} only, except the column "
                     "marked <em>whole trace</em> in the trace table.</p>")
    return parts


def _kpis(data: dict) -> str:
    """The headline figures: the window, the ceiling, the best policy served and offline, unserved requests."""
    esc = html.escape
    window = data["window"]
    warm = window["warmup_requests"] > 0
    m, whole = data["measured"], data["whole_trace"]
    ceiling = data["ceiling"]["hit_rate"] if data["ceiling"] else None
    focus = data["focus"]
    practical = [f for f in focus if parse_name(f["label"]) not in BOUNDS] or focus
    best = max(practical, key=lambda f: f["metrics"]["hit_rate"]) if practical else None
    bpb = data["bytes_per_block"]
    focus_cap = data["focus_capacity"]
    kpis = [("requests" + (" measured" if warm else ""), _n(m["num_requests"]),
             f"of {whole['num_requests']:,}; the first {window['warmup_requests']:,} warm the cache" if warm else ""),
            ("prompt tokens" + (" measured" if warm else ""), _n(m["total_prompt_tokens"]), ""),
            ("unique blocks" + (" touched" if warm else ""), _n(m["num_unique_blocks"]), "")]
    if ceiling is not None:
        kpis.append(("infinite-cache ceiling", _pct(ceiling), "nothing ever evicted"))
    ranked = data.get("ranking")
    if ranked and ranked["rows"]:
        top = ranked["rows"][0]
        kpis.append(("best policy served", f"{_pct(top['served_hit_rate'])} ({esc(top['policy'])})",
                     "on the deployment, at its concurrency" + ("; offline the order differs" if ranked["differs"]
                                                                 else "")))
    if best:
        kpis.append((f"at {focus_cap:,} blocks" + (f" ({focus_cap * bpb / plot.GIB:,.1f} GiB)" if bpb else "")
                     + (", offline" if ranked else ""),
                     f"{_pct(best['metrics']['hit_rate'])} ({esc(best['label'])})",
                     {"given": "the capacity asked for", "gpu-pool": "the serving section's GPU pool (one instance)",
                      "half-ceiling": "where a policy first reaches half the ceiling",
                      "largest": "the largest capacity swept", "middle": "the middle of the curve"}.get(data["focus_rule"], "")))
    unserved = _unserved_note(data)
    if unserved:
        kpis.append(("served", unserved[0], unserved[1]))
    return ("<div class=\"kpi\">" + "".join(
        f"<div data-kpi=\"{esc(k)}\">{esc(k)}<b>{v}</b>" + (f"<small>{esc(note)}</small>" if note else "") + "</div>"
        for k, v, note in kpis) + "</div>")



def _trace_section(data: dict) -> list[str]:
    """The trace's description: the measured window, and the whole trace beside it after a warm-up."""
    window = data["window"]
    warm = window["warmup_requests"] > 0
    m, whole = data["measured"], data["whole_trace"]
    ceiling = data["ceiling"]["hit_rate"] if data["ceiling"] else None
    parts = []
    parts.append("<h2>The trace</h2>")
    rows_m = _trace_rows(m, ceiling)
    if warm:
        rows_w = _trace_rows(whole, whole["infinite_cache_hit_rate"])
        rows = [[label, a, b] for label, a, b in zip(TRACE_ROWS, rows_m, rows_w)]
        parts.append(_table(["", f"measured window (requests {window['first_request']:,}-{window['last_request']:,})",
                             "whole trace (for reference)"], rows, [False, True, True]))
        parts.append("<p class=\"note\">The measured window's infinite-cache hit rate counts its requests with the cache "
                     "warmed by the warm-up requests (as every replay on this page does); the whole trace's starts from "
                     "an empty cache.</p>")
    else:
        parts.append(_table(["", "value"], [[label, a] for label, a in zip(TRACE_ROWS, rows_m)], [False, True]))

    return parts


def _curve_section(data: dict, zoom) -> list[str]:
    """The hit rate against the cache size, as a chart and a table."""
    warm = data["window"]["warmup_requests"] > 0
    bpb = data["bytes_per_block"]
    parts = []
    parts.append("<h2>Hit rate vs cache size</h2>")
    parts.append("<p class=\"note\">Each line replays the trace once per capacity"
                 + (", counting the measured window's requests" if warm else "")
                 + "; the dotted line is the ceiling no cache can pass (every block ever seen kept). Log scale on the "
                 "x axis. When the policies crowd the bottom of the chart, a second panel zooms on their band (shaded "
                 "on the first). Each policy keeps its colour and marker on every chart of this page.</p>")
    note = data["budget_note"] if bpb else ""
    fig = plot.curves_figure(data["curve"], bytes_per_block=bpb, capacity_note=note, zoom=zoom)
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")
    parts.append(_curve_table(data))

    return parts


def _focus_section(data: dict) -> list[str]:
    """Each policy at the operating point: hit rate, speedup, per-request percentiles, money saved."""
    esc = html.escape
    focus = data["focus"]
    bpb = data["bytes_per_block"]
    focus_cap = data["focus_capacity"]
    focus_mem = f" ({focus_cap * bpb / plot.GIB:,.2f} GiB{', ' + esc(data['budget_note']) if data['budget_note'] else ''})" if bpb else ""
    parts = []
    parts.append(f"<h2>At {focus_cap:,} blocks{focus_mem}</h2>")
    parts.append(f"<p class=\"note\">Why this capacity: {esc(data['focus_reason'])}."
                 + ("" if data["focus_rule"] == "given" else
                    " Pass <code>--capacity</code> (blocks, or a size such as 32GiB with <code>--model</code>) for "
                    "another.") + " It is marked &#9664; in the table above.</p>")
    money_note = focus[0]["metrics"]["money"] if focus else None
    headers = ["policy", "hit rate", "ideal prefill speedup", "request p50", "request p90", "request p99",
               "input cost saved (USD)"]
    if data["active_params"]:
        headers.append("prefill PFLOPs saved")
    rows = []
    for f in focus:
        fm = f["metrics"]
        pct = fm["request_hit_rate_percentiles"]
        speed = fm["ideal_prefill_speedup"]
        row = [esc(f["label"]), _pct(fm["hit_rate"]), "&infin;" if speed is None else f"{speed:.2f}&times;",
               _pct(pct["p50"]), _pct(pct["p90"]), _pct(pct["p99"]), f"{fm['money']['saved']:,.2f}"]
        if data["active_params"]:
            row.append(f"{fm['prefill_flops_saved'] / 1e15:,.1f}")
        rows.append(row)
    parts.append(_table(headers, rows, [False] + [True] * (len(headers) - 1)))
    if money_note:
        parts.append(f"<p class=\"note\">Ideal prefill speedup = 1/(1 &minus; hit rate), if prefill time were proportional "
                     "to the tokens computed. Request percentiles: the hit rate of single requests, each request counted once. "
                     f"Input cost saved: the measured window's prompt tokens at {money_note['price_miss_per_million']} USD per "
                     f"million without a cache, hits at {money_note['price_hit_per_million']} USD per million with it "
                     f"(default prices: {esc(data['price_source'])})."
                     + (" Prefill FLOPs saved &asymp; 2 &times; active parameters "
                        f"({data['active_params']:,}) &times; hit tokens." if data["active_params"] else "") + "</p>")

    return parts


def _spread_sections(data: dict, styles: dict) -> list[str]:
    """The hit rate over time and its spread over requests, at the operating point."""
    warm = data["window"]["warmup_requests"] > 0
    focus = data["focus"]
    focus_cap = data["focus_capacity"]
    parts = []
    per = data["requests_per_time_window"]
    last = data.get("last_time_window_requests", per)
    parts.append("<h2>Hit rate over time</h2>")
    parts.append(f"<p class=\"note\">Token-weighted hit rate per window of {per:,} consecutive measured requests at "
                 f"{focus_cap:,} blocks"
                 + (f" (the last window holds {last:,}: the {last - per:,} left over join it rather than make a point of "
                    "their own)" if last != per else "")
                 + ". " + ("The cache is already warm when the window starts." if warm else
                           "A cache starts empty, so the first windows are lower (warm-up).") + "</p>")
    fig = plot.over_time_figure({f["label"]: f["over_time"] for f in focus}, styles=styles)
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")

    parts.append("<h2>How hits spread over requests</h2>")
    parts.append("<p class=\"note\">How many measured requests reuse none, some or all of their prompt, at "
                 f"{focus_cap:,} blocks, one panel per policy on the same axes. The headline hit rate weighs tokens; this "
                 "view weighs requests.</p>")
    fig = plot.request_histogram_figure({f["label"]: np.asarray(f["request_hit_rates"]) for f in focus}, styles=styles)
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")

    return parts


def _definitions(data: dict) -> list[str]:
    """The page's definitions: window, hit tokens, capacity, each policy."""
    esc = html.escape
    window = data["window"]
    warm = window["warmup_requests"] > 0
    parts = []
    parts.append("<h2>Definitions</h2><ul class=\"note\">"
                 f"<li><b>Window</b>: {esc(window['description'])}. Every replay figure on this page counts only these "
                 "requests" + (" (the trace table also shows the whole trace, in its own column)" if warm else "")
                 + "; the serving sections count their runs' judged requests, after each run's warm-up, as their "
                 "notes say.</li>"
                 "<li><b>Hit tokens</b> of a request: min(k &times; block size, prompt tokens), k = its longest run of "
                 "leading blocks resident before the request touches the cache.</li>"
                 "<li><b>Capacity</b>: blocks the cache holds; GiB figures use the KV bytes per token of the model named.</li>"
                 + "".join(f"<li><b>{esc(name)}</b>: {esc(summary)}</li>" for name, summary in data.get("policy_summaries", []))
                 + "<li>Every policy's exact behaviour is written down in kvreplay's docs/policies.md.</li></ul>")
    return parts


def _unserved_note(data: dict) -> tuple[str, str] | None:
    """The serving section's requests the replays count but the served figures do not: refused at
    arrival (past max_model_len) and rejected (they never fit a pool), with the denominators."""
    rows = [r["summary"] for r in data.get("plan_served") or [] if r.get("summary")]
    rows = [{"requests": s["whole_run"]["requests"], "finished": s["whole_run"]["finished"],
             "refused": s["whole_run"]["refused_context"], "rejected": s["whole_run"]["rejected"],
             "limit": s["max_model_len"]} for s in rows]
    rows += [{"requests": r["whole_run"]["requests"], "finished": r["whole_run"]["finished"],
              "refused": r["whole_run"]["refused_context"], "rejected": r["whole_run"]["rejected"], "limit": None}
             for r in (data.get("serving") or {}).get("rows", []) if r.get("whole_run")]
    worst = max(rows, key=lambda r: r["refused"] + r["rejected"], default=None)
    if worst is None or worst["refused"] + worst["rejected"] == 0:
        return None
    total = data["whole_trace"]["num_requests"]
    return (f"{_n(total - worst['refused'] - worst['rejected'])} of {_n(total)}",
            f"requests the serving section can serve: {_n(worst['refused'])} refused at arrival (prompt + outputs past "
            f"max_model_len), {_n(worst['rejected'])} rejected; the replays above count all {_n(total)}, the serving "
            "figures only those it served")


def parse_name(label: str) -> str:
    """The policy name of a label such as "s3fifo:small_ratio=0.2"."""
    return label.split(":", 1)[0].strip()
