"""A closed-loop run's summary lines (`kvreplay simulate --arrivals closed`, `--sessions N`): how the
requests were linked and their think times found, sessions and turns, Little's law
(serving/closed_stats.py computes every figure)."""

from __future__ import annotations

from .table import format_table


def _s(x) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:,.0f} s" if abs(x) >= 100 else f"{x:.3g} s"


def arrivals_text(arr: dict) -> str:
    """The load line's words for closed-loop arrivals."""
    if arr["kind"] == "open_sessions":
        return (f"open loop, {arr['sessions']:,} sessions' recorded send times, whatever the answers"
                + (f" ({arr['starts']})" if arr.get("starts") else ""))
    what = (f"closed loop, {arr['sessions']:,} concurrent sessions" if arr.get("sessions")
            else "closed loop, the trace's sessions")
    return what + (f" ({arr['starts']})" if arr.get("starts") else "")


def closed_lines(report, s: dict) -> list[str]:
    """The lines after the latency table."""
    arr = report.arrivals
    c = s["closed"]
    lines = ["", f"links      {arr['links']}", f"think      {arr['think']}"]
    if arr.get("draws"):
        lines.append(f"draws      {arr['draws']}")
    n = c["sessions"]
    st = c["session_time_s"]
    band = c.get("band") or {}
    lo, hi = (band.get("low") or {}).get("session_time_s"), (band.get("high") or {}).get("session_time_s")
    ranged = lambda key: (f" [{_s(lo[key])} - {_s(hi[key])}]" if lo and hi else "")  # noqa: E731
    if n["complete"]:
        lines.append(f"sessions   {n['complete']:,} judged sessions complete (started in the judged span"
                     + (f"; {n['unfinished']:,} with a request that never finished" if n["unfinished"] else "")
                     + f", of {n['of']:,} run): session time p50 {_s(st['p50'])}{ranged('p50')}, p90 {_s(st['p90'])}"
                     f"{ranged('p90')}, mean {_s(st['mean'])}; {c['turns_per_session']['mean']:.3g} turns per session")
    else:
        lines.append(f"sessions   none of the {n['of']:,} sessions started in the judged span (each started during the "
                     "warm-up), so no session time is judged: --warmup 0 judges them all, --sessions N runs more")
    rate = c["turns_per_minute"]
    if rate is not None:
        per = c["turns_per_minute_per_session"]
        lines.append(f"turns      {rate:,.3g} per minute" + (f" ({per:.3g} per session)" if per is not None else "")
                     + (f"; think time {100 * c['think_share']:.1f}% of the sessions' time" if c["think_share"] is not None
                        else ""))
    rows = [dict(r, p50=_s(r["ttft_p50_s"]), p90=_s(r["ttft_p90_s"])) for r in c["ttft_by_turn"] if r["requests"]]
    if rows:
        lines.append(format_table(rows, [("turns", "turn"), ("requests", "requests"), ("p50", "TTFT p50"),
                                         ("p90", "TTFT p90")]))
        lines.append("(turn: a request's rank in its session by arrival; the judged requests)")
    law = c["littles_law"]
    if c.get("sent_early") is not None:
        lines.append(f"open loop  {c['sent_early']['text']}")
    elif law is not None:
        lines.append(f"Little     {law['text']}")
    return lines
