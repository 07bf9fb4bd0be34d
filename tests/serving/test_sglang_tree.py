"""The SGLang style's radix tree as SGLang 0.5.23's scheduler drives it (serving/kernel/sglang.c,
requests.c, policies/radix.c): hand-worked runs. Every step takes 1 s (sim_cases.ONE_SECOND);
pages of 4 tokens."""

from __future__ import annotations

from kvreplay.serving.simulate import Scheduler, simulate

from sim_cases import ONE_SECOND, trace_of


def test_finished_output_pages_join_the_path_and_go_first():
    # A: [1, 2, 3], 10 tokens, 7 outputs, at 0 s: prefill 0-1 s, 6 decode steps, finished at 7 s with
    #   10 + 7 - 1 = 16 tokens in KV: 4 pages, one decode page beyond its prompt's 3. SGLang's tree
    #   takes all 4 (release_kv_cache(checkpoint=True)): its prompt's full pages [1, 2], then one
    #   leaf below them of 2 pages, the prompt's partial page (2 prompt tokens + 2 outputs: no other
    #   request has it) and the decode page. Tree: 4 pages, 2 nodes.
    # B: [5, 6, 7, 8], 16 tokens, at 10 s: 4 pages + 1 page of slack against 8 - 4 free: 1 page to
    #   evict. The least recent leaf is A's output leaf (its prompt node is not a leaf): both its
    #   pages go (whole leaves), and [1, 2] stays.
    # C: [1, 2, 9], 10 tokens, at 20 s, hits [1, 2]: 8 tokens.
    t = trace_of(([1, 2, 3], 10, 0, 7), ([5, 6, 7, 8], 16, 10000, 1), ([1, 2, 9], 10, 20000, 1))
    r = simulate(t, "radix", 8, engine_style="sglang", time_model=ONE_SECOND)
    assert r.finish_s.tolist() == [7.0, 11.0, 21.0]
    assert r.hit_tokens.tolist() == [0, 0, 8]
    assert r.counters["decode_blocks"] == 1
    # pages that entered the tree: A's 2 + 2, B's 4 (C's are hit or its partial page)
    assert r.policy_counters["admissions"] == 8
    assert (r.policy_counters["evictions"], r.policy_counters["evicted_nodes"]) == (2, 1)



def test_a_chunked_prompt_holds_its_chunks_as_they_come_and_its_last_chunk_goes_first():
    # chunks of 8 tokens (2 pages), a pool of 9 pages.
    # A: [1..6], 24 tokens, 1 output, at 0 s: 3 chunks. It holds 2 pages at its admission, 2 more at
    #   each later chunk (SGLang's alloc_for_extend), each chunk's pages entering the tree after its
    #   step (checkpoint_kv_cache), a node each: at the step ends it holds 2, then 4 pages (the
    #   prompt held whole would be 6 from the first step); it finishes at 3 s, its tree path
    #   [1, 2] -> [3, 4] -> [5, 6].
    # B: [7, 8, 10, 11], 16 tokens, at 10 s: 2 chunks; at its second 2 + a page of slack against
    #   9 - 6 - 2 = 1 free: 2 pages to evict, the least recent leaf, A's last chunk [5, 6], whole
    #   (the prompt as one node would go whole: 6 pages).
    # C: [1, 2, 3, 4, 9], 20 tokens, at 20 s: hits A's first two chunks, 16 tokens; its own page
    #   (1 + slack against 9 - 8 free) evicts B's last chunk [10, 11].
    t = trace_of(([1, 2, 3, 4, 5, 6], 24, 0, 1), ([7, 8, 10, 11], 16, 10000, 1), ([1, 2, 3, 4, 9], 20, 20000, 1))
    r = simulate(t, "radix", 9, engine_style="sglang", time_model=ONE_SECOND,
                 scheduler=Scheduler(style="sglang", chunked_prefill_size=8))
    series = r.series_columns()
    assert series["time_s"].tolist() == [1.0, 2.0, 3.0, 11.0, 12.0, 21.0]
    assert series["running_kv_blocks"].tolist()[:2] == [2, 4]
    assert r.hit_tokens.tolist() == [0, 0, 16]
    assert r.finish_s.tolist() == [3.0, 12.0, 21.0]
    # pages into the tree: A's 6, B's 4, C's fifth; out of it: [5, 6] and [10, 11]
    assert r.policy_counters["admissions"] == 11
    assert (r.policy_counters["evictions"], r.policy_counters["evicted_nodes"]) == (4, 2)


def test_a_retracted_request_caches_no_output_page():
    # Pages of 16 tokens, a pool of 36. A: [1], 16 tokens, 300 outputs, at 0 s; B: [2], the same, at
    # 10 ms (tests/real_engines/test_sglang_scheduler.py's retraction-tie, which SGLang agrees with).
    # Both decode until the pool runs out: B is retracted (release_kv_cache(checkpoint=False)): its
    # prompt page stays in the tree, its decode pages are freed, none cached. A finishes at 301 s
    # with 16 + 300 - 1 = 315 tokens in KV: 19 pages in the tree, [1] and an 18-page output leaf.
    # B recomputes its prompt and 273 outputs (289 tokens, 19 pages: [2] hit, 18 of its own + a
    # page of slack against 36 - 19 - 1 = 16 free): A's output leaf goes, whole.
    t = trace_of(([1], 16, 0, 300), ([2], 16, 10, 300), block_size=16)
    r = simulate(t, "radix", 36, block_size=16, engine_style="sglang", time_model=ONE_SECOND,
                 scheduler=Scheduler(style="sglang", chunked_prefill_size=64, max_prefill_tokens=128),
                 compare_sequential=False)
    assert r.preemptions.tolist() == [0, 1]
    assert r.counters["recomputed_tokens"] == 273
    assert r.finish_s.tolist() == [301.0, 332.0]
    # pages into the tree: A's 19, B's 19 (its prompt page at its first prefill, 18 when recomputed
    # and finished); its retracted decode pages never
    assert r.policy_counters["admissions"] == 38
    assert (r.policy_counters["evictions"], r.policy_counters["evicted_nodes"]) == (18, 1)
