"""Terminal text of the policies ranked under serving beside their offline ranking (`kvreplay
sweep --gpu`; serving/ranking.py)."""

from __future__ import annotations

from .table import format_table


def ranking_text(rk: dict) -> str:
    d = rk["deployment"]
    head = (f"served     each policy on {d['instances']} x {d['tp']} x {d['gpu']} ({d['model']}), router {d['router']}"
            + (f", tiers {d['tiers']}" if d.get("tiers") else "") + f", {d['load'][0]} {d['load'][1]:g}, in the "
            "simulator; offline: one request at a time through one cache of one instance's pool; both over the served "
            "run's finished judged requests")
    rows = [{"policy": r["policy"], "off": f"{100 * r['offline_hit_rate']:.2f}", "off_rank": r["offline_rank"],
             "srv": f"{100 * r['served_hit_rate']:.2f}", "srv_rank": r["served_rank"],
             "pool": f"{r['capacity_blocks']:,}", "req": f"{r['finished']:,} of {r['requests']:,}",
             "flag": "" if r["offline_rank"] == r["served_rank"] else "rank moves"} for r in rk["rows"]]
    table = format_table(rows, [("policy", "policy"), ("pool", "pool blocks"), ("off", "offline hit %"),
                                ("off_rank", "offline rank"), ("srv", "served hit %"), ("srv_rank", "served rank"),
                                ("req", "finished of judged"), ("flag", "")])
    verdict = (f"ranking    DIFFERS: offline {rk['offline_order']}; served {rk['served_order']}: choose the policy at "
               "your real concurrency" if rk["differs"] else f"ranking    the same offline and served: {rk['served_order']}")
    lines = [head, table, verdict]
    lines += [f"not served {n['policy']}: {n['why']}" for n in rk["not_served"]]
    return "\n".join(lines)
