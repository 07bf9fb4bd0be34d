"""`kvreplay report`: one self-contained HTML page (inline CSS and SVG, no scripts, no network).

`collect` runs the replays and returns plain data (JSON-ready); `render` turns that data
into the page. The page explains itself for a reader who never used the tool: what a hit
is, the window every figure covers, and how each number is computed.
"""

from __future__ import annotations

import datetime
import html

import numpy as np

from ..analysis import metrics
from ..analysis.stats import stats as trace_stats
from ..analysis.sweep import sweep
from ..engine.replay import replay
from ..errors import ConfigError
from ..policies.registry import parse_policy
from . import plot

TIME_WINDOWS = 50  # points on the hit-rate-over-time chart


def collect(trace, *, policies=("s3fifo", "lru", "fifo"), capacities="auto", focus_capacity: int | None = None,
            block_size: int | None = None, warmup_fraction: float = 0.0, bounds: bool = False,
            active_params: int | None = None, bytes_per_block: int | None = None, budget_note: str = "",
            price_hit: float = metrics.DEFAULT_PRICE_HIT, price_miss: float = metrics.DEFAULT_PRICE_MISS,
            progress=None, engine: str = "compiled") -> dict:
    """Everything the report shows, as plain data.

    The curve comes from `sweep` over `capacities` (plus the infinite-cache ceiling, and
    belady with `bounds`); the per-request views replay each policy once more at
    `focus_capacity` (default: the middle capacity of the curve).
    """
    policies = [p for p in policies if p]
    names = [parse_policy(p)[0].name for p in policies]
    swept = policies + [p for p in (["infinite"] + (["belady"] if bounds else [])) if p not in names]
    extra = {"progress": progress} if progress else {}
    curve = sweep(trace, capacities, swept, block_size, warmup_fraction=warmup_fraction, engine=engine, **extra)
    caps = sorted({r["cache_capacity_blocks"] for r in curve["results"] if r["policy"] != "infinite"})
    if focus_capacity is None:
        if not caps:
            raise ConfigError("the report needs at least one capacity")
        focus_capacity = caps[len(caps) // 2]
    per_window = max(1, len(trace) // TIME_WINDOWS)
    focus = []
    for p in policies:
        spec, params = parse_policy(p)
        r = replay(trace, spec.name, focus_capacity, block_size, engine=engine, warmup_fraction=warmup_fraction, **params)
        focus.append({
            "label": p,
            "summary": r.summary(),
            "metrics": metrics.summarize(r, active_params=active_params, price_hit=price_hit, price_miss=price_miss),
            "over_time": metrics.over_time(r, requests=per_window),
            "request_hit_rates": metrics.request_hit_rates(r).tolist(),
        })
    ceiling = next((r for r in curve["results"] if r["policy"] == "infinite"), None)
    span_ms = float(trace.timestamp.max() - trace.timestamp.min()) if len(trace) else 0.0
    return {
        "trace": {**trace.summary(), "time_span_s": span_ms / 1000.0},
        "stats": trace_stats(trace, block_size),
        "block_size": curve["block_size"],
        "window": curve["window"],
        "warmup_fraction": warmup_fraction,
        "curve": curve["results"],
        "capacities": caps,
        "ceiling": ceiling,
        "focus_capacity": int(focus_capacity),
        "focus": focus,
        "requests_per_time_window": per_window,
        "bytes_per_block": bytes_per_block,
        "budget_note": budget_note,
        "active_params": active_params,
        "price_source": metrics.PRICE_SOURCE,
        "policy_summaries": [(spec.name, spec.summary) for spec in
                             dict.fromkeys(parse_policy(p)[0] for p in swept)],
    }


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555;margin-top:0}.note{color:#444;font-size:.92em}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}th,td{padding:.3em .7em;border-bottom:1px solid #e3e3e3}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
.figure svg{max-width:100%;height:auto}.kpi{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.kpi div{background:#f4f7fb;border:1px solid #dbe4f0;border-radius:6px;padding:.6em 1em;min-width:10em}
.kpi b{display:block;font-size:1.4em}
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


def _table(headers: list[str], rows: list[list], numeric: list[bool] | None = None) -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if num else f"<td>{c}</td>" for c, num in zip(row, numeric)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _curve_table(data: dict) -> str:
    labels = []
    cells: dict = {}
    for r in data["curve"]:
        if r["policy"] == "infinite":
            continue
        label = plot._label(r)
        if label not in labels:
            labels.append(label)
        cells[(label, r["cache_capacity_blocks"])] = r["hit_rate"]
    bpb = data["bytes_per_block"]
    headers = ["capacity (blocks)"] + (["KV memory (GiB)"] if bpb else []) + labels
    rows = []
    for c in data["capacities"]:
        row = [_n(c)] + ([f"{c * bpb / plot.GIB:,.2f}"] if bpb else [])
        row += [_pct(cells[(l, c)]) if (l, c) in cells else "" for l in labels]
        rows.append(row)
    return _table(headers, rows, [True] * len(headers))


def render(data: dict, *, title: str = "kvreplay report") -> str:
    """The HTML page for `collect`'s data."""
    from .. import __version__

    t = data["trace"]
    esc = html.escape
    ceiling = data["ceiling"]["hit_rate"] if data["ceiling"] else None
    focus = data["focus"]
    best = max(focus, key=lambda f: f["metrics"]["hit_rate"]) if focus else None
    bpb = data["bytes_per_block"]
    focus_cap = data["focus_capacity"]
    focus_mem = f" ({focus_cap * bpb / plot.GIB:,.2f} GiB{', ' + esc(data['budget_note']) if data['budget_note'] else ''})" if bpb else ""
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>",
             f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>{CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1>",
             f"<p class=\"sub\">Trace <code>{esc(str(t['source']))}</code> ({esc(str(t['format']))}), block size {data['block_size']} tokens. "
             f"Window: {esc(data['window'])}. Generated by kvreplay {esc(__version__)} on "
             f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.</p>",
             "<h2>What this measures</h2>",
             "<p>An LLM server keeps the attention keys and values (the <em>KV cache</em>) of earlier prompts in blocks of "
             f"{data['block_size']} tokens. A new request can reuse the <em>longest run of leading blocks</em> it shares with "
             "what is still cached; those prompt tokens need no prefill compute. The <b>hit rate</b> is the share of all prompt "
             "tokens served that way (token-weighted: long prompts count more). When the cache is full, an <em>eviction "
             "policy</em> decides which block goes; the policies below differ only in that choice. A request's hit is "
             "min(k &times; block size, prompt length) for its k leading cached blocks.</p>"]
    kpis = [("requests", _n(t["num_requests"])), ("prompt tokens", _n(t["total_prompt_tokens"])),
            ("unique blocks", _n(t["num_unique_blocks"]))]
    if ceiling is not None:
        kpis.append(("infinite-cache ceiling", _pct(ceiling)))
    if best:
        kpis.append((f"best at {focus_cap:,} blocks", f"{_pct(best['metrics']['hit_rate'])} ({esc(best['label'])})"))
    parts.append("<div class=\"kpi\">" + "".join(f"<div>{esc(k)}<b>{v}</b></div>" for k, v in kpis) + "</div>")

    parts.append("<h2>The trace</h2>")
    rows = [["requests", _n(t["num_requests"])], ["prompt tokens", _n(t["total_prompt_tokens"])],
            ["block accesses", _n(t["num_block_accesses"])], ["unique blocks", _n(t["num_unique_blocks"])],
            ["time span", f"{t['time_span_s']:,.1f} s"]]
    st = data["stats"]
    rows.append(["request rate", f"{st['request_rate_per_s']:,.3f} per second"])
    for key, label in (("input_length", "prompt length (tokens)"), ("output_length", "output length (tokens)")):
        d = st[key]
        rows.append([label, f"mean {d['mean']:,.0f}, p50 {d['p50']:,}, p90 {d['p90']:,}, p99 {d['p99']:,}, max {d['max']:,}"])
    if st.get("sessions"):
        rows.append(["sessions", f"{st['sessions']['num_sessions']:,} (mean {st['sessions']['mean_turns']:.1f} requests each)"])
    if ceiling is not None:
        rows.append(["infinite-cache hit rate (nothing ever evicted)", _pct(ceiling)])
    parts.append(_table(["", "value"], rows, [False, True]))

    parts.append("<h2>Hit rate vs cache size</h2>")
    parts.append("<p class=\"note\">Each line replays the whole trace once per capacity; the dotted line is the ceiling "
                 "no cache can pass (every block ever seen kept). Log scale on the x axis.</p>")
    note = data["budget_note"] if bpb else ""
    fig = plot.curves_figure(data["curve"], bytes_per_block=bpb, capacity_note=note)
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")
    parts.append(_curve_table(data))

    parts.append(f"<h2>At {focus_cap:,} blocks{focus_mem}</h2>")
    money_note = data["focus"][0]["metrics"]["money"] if focus else None
    headers = ["policy", "hit rate", "ideal prefill speedup", "request p50", "request p90", "request p99", "input cost saved"]
    if data["active_params"]:
        headers.append("prefill PFLOPs saved")
    rows = []
    for f in focus:
        m = f["metrics"]
        pct = m["request_hit_rate_percentiles"]
        speed = m["ideal_prefill_speedup"]
        row = [esc(f["label"]), _pct(m["hit_rate"]), "&infin;" if speed is None else f"{speed:.2f}&times;",
               _pct(pct["p50"]), _pct(pct["p90"]), _pct(pct["p99"]), f"{m['money']['saved']:,.2f}"]
        if data["active_params"]:
            row.append(f"{m['prefill_flops_saved'] / 1e15:,.1f}")
        rows.append(row)
    parts.append(_table(headers, rows, [False] + [True] * (len(headers) - 1)))
    if money_note:
        parts.append(f"<p class=\"note\">Ideal prefill speedup = 1/(1 &minus; hit rate), if prefill time were proportional "
                     "to the tokens computed. Request percentiles: the hit rate of single requests, each request counted once. "
                     f"Input cost saved: prompt tokens at {money_note['price_miss_per_million']} per million without a cache, "
                     f"hits at {money_note['price_hit_per_million']} per million with it (default prices: "
                     f"{esc(data['price_source'])})."
                     + (" Prefill FLOPs saved &asymp; 2 &times; active parameters "
                        f"({data['active_params']:,}) &times; hit tokens." if data["active_params"] else "") + "</p>")

    parts.append("<h2>Hit rate over time</h2>")
    parts.append(f"<p class=\"note\">Token-weighted hit rate per window of {data['requests_per_time_window']:,} consecutive "
                 f"requests at {focus_cap:,} blocks. A cache starts empty, so the first windows are lower (warm-up).</p>")
    fig = plot.over_time_figure({f["label"]: f["over_time"] for f in focus})
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")

    parts.append("<h2>How hits spread over requests</h2>")
    parts.append("<p class=\"note\">How many requests reuse none, some or all of their prompt, at "
                 f"{focus_cap:,} blocks. The headline hit rate weighs tokens; this view weighs requests.</p>")
    fig = plot.request_histogram_figure({f["label"]: np.asarray(f["request_hit_rates"]) for f in focus})
    parts.append(f"<div class=\"figure\">{_svg(fig)}</div>")

    parts.append("<h2>Definitions</h2><ul class=\"note\">"
                 f"<li><b>Window</b>: {esc(data['window'])}. Every figure on this page counts only these requests.</li>"
                 "<li><b>Hit tokens</b> of a request: min(k &times; block size, prompt tokens), k = its longest run of "
                 "leading blocks resident before the request touches the cache.</li>"
                 "<li><b>Capacity</b>: blocks the cache holds; GiB figures use the KV bytes per token of the model named.</li>"
                 + "".join(f"<li><b>{esc(name)}</b>: {esc(summary)}</li>" for name, summary in data.get("policy_summaries", []))
                 + "<li>Every policy's exact behaviour is written down in kvreplay's docs/policies.md.</li></ul>")
    parts.append("</body></html>\n")
    return "".join(parts)


def report_html(trace, **kwargs) -> str:
    """collect + render; keyword arguments as for `collect`, plus `title`."""
    title = kwargs.pop("title", None) or f"kvreplay report: {trace.source}"
    return render(collect(trace, **kwargs), title=title)


