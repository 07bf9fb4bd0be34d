"""The text summary's lines for parallel sampling (serving/samples.py summarize)."""

from __future__ import annotations

from .serving import seconds_text


def samples_lines(s: dict) -> list[str]:
    """Groups, their shared and divergent KV and the sharing saved; their TTFT (with the band)."""
    lines = [f"samples    the trace's {s['groups']:,} requests with n > 1 ({s['children']:,} children, n up to {s['max_n']}); "
             f"KV at each child's last token, blocks of {s['block_size']} tokens:",
             f"           shared prompt {s['shared_blocks']:,} (counted once) + divergent {s['divergent_blocks']:,} "
             f"= {s['group_blocks']:,}, against {s['independent_blocks']:,} for independent requests: "
             f"{s['saved_blocks']:,} saved ({s['saved_fraction']:.1%})",
             f"           later children hit {s['later_children_hit_tokens']:,} of the "
             f"{s['later_children_shared_tokens']:,} shared prompt tokens"]
    if s.get("prefill_only_requests"):
        lines.append(f"           SGLang: each group first ran a prefill-only request ({s['prefill_only_requests']:,}, "
                     f"counted among the run's requests) and sent its samples when it ended; every sample "
                     f"counts as a later child")
    if s["median_ttft_first_child_s"] is None:
        return lines
    band = s["median_ttft_band"]

    def text(value, key):
        out = seconds_text(value)
        if band is not None and None not in band[key]:
            out += f" (band {seconds_text(band[key][0])} - {seconds_text(band[key][1])})"
        return out

    lines.append(f"           TTFT per group (median over the {s['judged_complete_groups']:,} groups judged, every child "
                 f"finished; from the parent's arrival): first child {text(s['median_ttft_first_child_s'], 'first_child_s')}, last child "
                 f"{text(s['median_ttft_last_child_s'], 'last_child_s')}")
    return lines
