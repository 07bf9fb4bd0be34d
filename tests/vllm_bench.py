"""A `vllm bench serve --save-result` record (its fields, vllm/benchmarks/serve.py) for the tests that
read one: 100 prompts of 1,000 tokens in and 200 out, at concurrency `b` (None: unlimited), with the
given mean TTFT and TPOT (ms); `extra` overrides fields."""

from __future__ import annotations


def bench_result(b, ttft, tpot, **extra) -> dict:
    n = 100
    return dict({"date": "20250501-100000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
                 "num_prompts": n, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": b, "duration": 60.0,
                 "completed": n, "failed": 0, "total_input_tokens": 1000 * n, "total_output_tokens": 200 * n,
                 "request_throughput": 1.6, "output_throughput": 333.3, "total_token_throughput": 2000.0,
                 "mean_ttft_ms": ttft, "median_ttft_ms": ttft, "std_ttft_ms": 1.0, "p99_ttft_ms": 2 * ttft,
                 "mean_tpot_ms": tpot, "median_tpot_ms": tpot, "std_tpot_ms": 0.1, "p99_tpot_ms": 1.2 * tpot,
                 "mean_itl_ms": tpot, "median_itl_ms": tpot, "std_itl_ms": 0.5, "p99_itl_ms": 2 * tpot,
                 "mean_e2el_ms": ttft + 199 * tpot}, **extra)
