"""simulate's speculative decoding lines: the acceptance model, what the run measured, TPOT with and without."""

from __future__ import annotations


def _ms(v) -> str:
    return "-" if v is None else f"{1000 * v:.1f} ms"


def _band(b) -> str:
    return "" if not b or b[0] is None else f" [{1000 * b[0]:.1f}-{1000 * b[1]:.1f}]"


def speculative_lines(report) -> list[str]:
    sp = report.speculative
    if not sp:
        return []
    m = sp["measured"]
    name = sp["method"] + (f":{sp['draft_model']}" if sp.get("draft_model") else "")
    rates = ", ".join(f"{a:.3f}" for a in sp["acceptance"])
    band = sp.get("expected_tokens_band")
    expected = f"{sp['expected_tokens_per_step']:.3f}" + (f" [{band['low']:.3f}-{band['high']:.3f}]" if band else "")
    lines = [f"speculative {name}, k={sp['num_speculative_tokens']}: conditional acceptance per position {rates} "
             f"({sp['source']}); expected {expected} tokens per verification step"]
    if m["verification_steps"]:
        at = ", ".join(f"{100 * x:.1f}%" for x in m["accepted_at_position"])
        lines.append(f"            measured {m['tokens_per_step']:.3f} tokens per verification step over "
                     f"{m['verification_steps']:,} of them (whole run; {m['accepted_tokens']:,} of "
                     f"{m['drafted_tokens']:,} draft tokens accepted; accepted through position p: {at})")
    lines.append(f"            drafter: {sp['draft_cost']}; {m['draft_s']:.3f} s of drafting; "
                 f"{sp['lookahead_slots']} lookahead KV slot(s) per decoding request")
    pool = sp.get("pool")
    if pool:
        lines.append(f"            pool: {pool['blocks']:,} blocks with the drafter loaded ({pool['drafter']}: "
                     f"{pool['drafter_weight_bytes_per_gpu'] / 2**30:.2f} GiB of weights, "
                     f"{pool['drafter_kv_bytes_per_token_per_gpu']:,.0f} KV bytes per token), "
                     f"{pool['blocks_without_drafter']:,} without")
    t = sp.get("tpot")
    if t:
        change = "" if t["p50_change"] is None else f" ({100 * t['p50_change']:+.1f}%)"
        lines.append(f"            TPOT p50 {_ms(t['with']['p50_s'])}{_band(t['with'].get('p50_band_s'))} with "
                     f"speculation, {_ms(t['without']['p50_s'])}{_band(t['without'].get('p50_band_s'))} without"
                     f"{change}; each run's finished judged requests"
                     + (", [band] at the calibrated roofline's ends" if t["with"].get("p50_band_s") else ""))
    return lines
