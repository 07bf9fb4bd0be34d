"""The text summary's lines for beam search (serving/beam.py summarize)."""

from __future__ import annotations

from .serving import seconds_text


def lines(s: dict) -> list[str]:
    """The text summary's lines."""
    out = [f"beam       the trace's {s['groups']:,} beam-search requests (width up to {s['max_beam_width']}): "
           f"{s['requests']:,} one-token requests in rounds, vLLM's online beam search (seeded synthetic logprobs)",
           f"           prompt tokens sent {s['prompt_tokens_sent']:,}, served from cache {s['prompt_tokens_hit']:,} "
           f"({s['hit_fraction']:.1%}); blocks of {s['block_size']} tokens",
           f"           last round's beams: {s['final_shared_blocks']:,} blocks shared by two or more + "
           f"{s['final_divergent_blocks']:,} held by one, against {s['final_independent_blocks']:,} as independent "
           f"requests; the searches filled {s['search_blocks']:,} distinct full blocks"]
    if s["median_time_to_answer_s"] is not None:
        text = seconds_text(s["median_time_to_answer_s"])
        band = s["median_time_to_answer_band_s"]
        if band is not None and None not in band:
            text += f" (band {seconds_text(band[0])} - {seconds_text(band[1])})"
        out.append(f"           time to the final answer (median over the {s['judged_complete_groups']:,} groups "
                   f"judged, from the request's arrival to its last round's end): {text}")
    return out
