"""The background seed's three live tests of DeepSeek's API cache, as synthetic scenarios through
`kvreplay`'s deepseek policy (a model of DeepSeek's documented rules: policies/deepseek.py).

The seed (003) reports, from live API calls: 98.23% of the prompt hit on an exact extension,
99.79% on a stable long prefix, 0% when the first line changes. It does not give the prompts'
sizes, so each scenario here uses sizes of its own, stated, and prints the model's figure beside
the seed's with the formula that links them: a request hits the longest whole 64-token unit it
matches, so an extension of E tokens after an N-token prompt hits floor(N / 64) x 64 / (N + E).

    python benchmarks/deepseek_scenarios.py

Block size 64 (one id per storage unit: what `kvreplay hash --block-size 64` makes of a token
log); requests 60 s apart, beyond the construction delay.
"""

from __future__ import annotations

import kvreplay

UNIT = 64
SEED = {"exact extension": 0.9823, "stable long prefix": 0.9979, "first line changes": 0.0}


def ids(start: int, tokens: int) -> list[int]:
    """Chained ids of a fresh token run (one per started 64-token block)."""
    return list(range(start, start + -(-tokens // UNIT)))


def scenarios() -> dict:
    """name -> (requests, the measured request's index, the sizes in words)."""
    out = {}
    # an agent's turn: a 3,520-token prompt (55 units) resent with 64 more tokens appended (ids of
    # the earlier prompt's blocks, then new ones)
    n, e = 3520, 64
    first = ids(0, n)
    out["exact extension"] = ([(first, n, 0), (first + ids(10_000, e), n + e, 60_000)], 1,
                              f"a {n:,}-token prompt, then the same prompt with {e} tokens appended")
    # a 30,000-token document and system prompt, then 5 questions of 60 tokens after it
    p, q = 30_000, 60
    prefix = ids(0, p)[:-1]  # its whole 64-token blocks (30,000 = 468 x 64 + 48: the 48 go with the question)
    reqs = [(prefix + ids(20_000 + 100 * k, p % UNIT + q), p + q, 60_000 * k) for k in range(6)]
    out["stable long prefix"] = (reqs, 5, f"a {p:,}-token prefix, then questions of {q} tokens after it (the 6th "
                                          "measured)")
    # the same 2,000-token prompt with its first line changed: every chained id differs
    m = 2000
    out["first line changes"] = ([(ids(0, m), m, 0), (ids(50_000, m), m, 60_000)], 1,
                                 f"a {m:,}-token prompt, then the same prompt with its first line changed")
    return out


def run() -> list[dict]:
    rows = []
    for name, (reqs, measured, words) in scenarios().items():
        trace = kvreplay.Trace.from_requests(reqs)
        r = kvreplay.replay(trace, "deepseek", None, UNIT)
        hit, prompt = int(r.hit_tokens[measured]), int(r.prompt_tokens[measured])
        rows.append({"scenario": name, "sizes": words, "hit_tokens": hit, "prompt_tokens": prompt,
                     "model": hit / prompt, "seed": SEED[name]})
    return rows


def main() -> None:
    print("| scenario | sizes | hit / prompt tokens | kvreplay deepseek | seed (live API) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for row in run():
        print(f"| {row['scenario']} | {row['sizes']} | {row['hit_tokens']:,} / {row['prompt_tokens']:,} | "
              f"{100 * row['model']:.2f}% | {100 * row['seed']:.2f}% |")


if __name__ == "__main__":
    main()
