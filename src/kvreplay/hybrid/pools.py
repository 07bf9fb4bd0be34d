"""SGLang 0.5.23's KV pools under its UnifiedRadixCache (unified_radix.py has the rules and the
sources; the tree that caches pages is radix_tree.py's): the full-attention pool and the
sliding-window pool, in pages of P tokens, and the Mamba state slots, as SGLang sizes them
(the token-to-KV pool allocators of mem_cache/allocator/ and the Mamba pool of memory_pool.py),
and how much of each is free."""

from __future__ import annotations

SWA_FULL_TOKENS_RATIO = 0.8  # --swa-full-tokens-ratio (arg_groups/fields/schedule.py:150-162)
PING_PONG_SLOTS = 2  # extra_buffer with the overlap scheduler (memory_pool.py:1393-1400)


class Pools:
    """The three pools' sizes and free counts (pages for KV, slots for states); SWA and Mamba are
    empty in a model without that component."""

    def __init__(self, P: int, full_pages: int, swa_pages: int | None, mamba_slots: int | None, has_swa: bool,
                 has_mamba: bool, mamba_strategy: str):
        self.P = P
        self.full_pages = full_pages
        if swa_pages is None:
            swa_pages = int(full_pages * P * SWA_FULL_TOKENS_RATIO) // P
        self.swa_pages = swa_pages if has_swa else 0
        if mamba_slots is None:
            mamba_slots = full_pages + 4  # more than the tree (<= 1 state per page) and a request can hold
        # a running request holds its slot (+ the ping-pong pair), the state it hit (locked) and, at a
        # checkpoint, one more: with fewer, SGLang's allocation asserts (mamba.py:527-553)
        least = 1 + (PING_PONG_SLOTS if mamba_strategy == "extra_buffer" else 0) + 2
        if has_mamba and mamba_slots < least:
            raise ValueError(f"{mamba_slots} Mamba state slots cannot serve one request ({mamba_strategy}: {least})")
        self.mamba_slots_total = mamba_slots if has_mamba else 0
        self.full_free = full_pages
        self.swa_free = self.swa_pages
        self.mamba_free = self.mamba_slots_total

    def available(self, ct: str) -> int:
        """_component_available_size: tokens for FULL / SWA, slots for MAMBA."""
        return {"full": self.full_free * self.P, "swa": self.swa_free * self.P, "mamba": self.mamba_free}[ct]
