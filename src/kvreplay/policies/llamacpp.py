"""llamacpp: llama.cpp server's slots and host-memory prompt cache.

Source: llama.cpp at commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (MIT; the one
llama-cpp-python 0.3.36 vendors), ``tools/server/server-context.cpp`` (``get_available_slot``,
``update_slots``, ``process_single_task``) and ``tools/server/server-task.cpp``
(``server_prompt_cache::alloc``, ``load``, ``update``). Checked request by request against a
llama-server built from that source on a tiny random-weights model, in the opt-in
tests/real_engines/test_llamacpp_server.py.

The server has ``slots`` slots; each holds one sequence's KV. One request at a time:

1. **Slot choice** (server-context.cpp:1528-1639). Among slots holding tokens, the one whose
   common prefix with the prompt is the largest share of the *prompt* (``lcp / n_prompt``,
   float32), if that share is strictly above ``similarity`` (``--slot-prompt-similarity``, 0.1;
   ties: the lowest slot). Else the least recently used slot (ties: the highest). When the pick
   was by LRU, or keeps under half of the slot (``lcp / slot tokens < 0.5``), the slot's tokens are
   first saved to the host cache and the best entry of the cache is loaded into it (below).
2. **Reuse** (3143-3410). ``cache_n`` = the common prefix of the slot's tokens and the prompt,
   at most ``n_prompt - 1`` (the last prompt token is always evaluated); the slot keeps that prefix
   and then holds the prompt and the reply but its last token. ``cache_reuse`` N > 0 also shifts
   chunks of at least N matching tokens that follow, as ``--cache-reuse`` does (it recovers
   tokens deleted from the prompt, not inserted ones).
3. **Idle slots** (2416-2432, ``--cache-idle-slots``, on): after a request starts, every other
   slot is saved to the host cache; with the default ``-np`` (``slots`` 0: 4 slots over one
   unified KV cache) they are then cleared, so only the last slot used keeps its KV.
4. **Host prompt cache** (``--cache-ram``, ``cache_ram`` MiB, default 8192; -1 no limit, 0 off).
   A save skips a prompt some entry already contains, drops the entries that are prefixes of it,
   and evicts the oldest saved entries while the bytes exceed the limit. A load takes, scanning
   oldest first, the entry that beats the slot on both ``lcp / entry tokens`` and ``lcp / n_prompt``
   (strictly; entries under 0.25 of their own tokens skipped), and moves it into the slot. An
   entry's bytes are ``kv_bytes_per_token`` per token (131,072: Llama-3-8B's f16 KV; the server
   adds a few bytes per token and layer). The cache also holds at most max(n_ctx, limit / bytes
   per token) tokens.
5. **Context.** ``capacity`` blocks are the server's context (``-c``): a slot has all of it with
   the default (unified) or ``capacity / slots`` with an explicit ``slots``; a prompt of at least
   that many tokens is rejected (``rejected``).

What a hash-id trace cannot give, and the approximation kvreplay makes:
- *Tokens.* Slots match tokens; a trace names blocks. A slot's tokens here are its prompt's ids,
  so a common prefix is counted in whole blocks and a hit is at most ``floor((L - 1) / B)`` blocks.
  With one id per token (block size 1, as token ids give) it is the server's token count.
- *Replies.* The server's slot holds the reply too, whose tokens a trace does not name: a later
  prompt that repeats the reply reuses it on the server, not here (its length still counts in
  the slot's size, from ``output_length``).
- Slot save and restore to disk (``/slots?action=save|restore``) are operator actions a trace
  does not record: not modelled.

Resident: a block in some slot or in the host cache. Counters: ``slot_hits`` (requests served
from their slot's KV), ``loads`` (slots filled from the host cache), ``saves``, ``cache_evictions``,
``rejected``.
"""

from __future__ import annotations

import struct

from ..errors import ConfigError
from .base import Param, PolicySpec, RequestOnlyPolicy, in_range

#: llama.cpp refuses more sequences than LLAMA_MAX_SEQ ("n_seq_max must be <= 256";
#: src/llama-cparams.h, github.com/ggml-org/llama.cpp, MIT)
MAX_SLOTS = 256
AUTO_SLOTS = 4  # -np auto: 4 slots over one unified KV cache (server.cpp:156-160)
COUNTERS = ("slot_hits", "loads", "saves", "cache_evictions", "rejected")


def f32(x: float) -> float:
    """x rounded to float32, as the server computes its similarities."""
    return struct.unpack("f", struct.pack("f", x))[0]


def lcp(a: list, b: list) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Slot:
    __slots__ = ("id", "ids", "tokens", "last_used")

    def __init__(self, i: int):
        self.id, self.ids, self.tokens, self.last_used = i, [], 0, -1


class LlamaCpp(RequestOnlyPolicy):
    """Reference: the slots and the host cache as lists."""

    def __init__(self, capacity: int, trace=None, slots: int = 0, similarity: float = 0.1, cache_ram: int = 8192,
                 kv_bytes_per_token: int = 131072, cache_reuse: int = 0, idle_slots: int = 1):
        self.unified = slots == 0
        self.slots = [Slot(i) for i in range(AUTO_SLOTS if self.unified else slots)]
        self.capacity, self.similarity, self.cache_reuse = capacity, similarity, cache_reuse
        self.enabled = cache_ram != 0
        self.limit = max(cache_ram, 0) * 2 ** 20  # bytes (0: no limit)
        self.bytes_per_token = kv_bytes_per_token
        self.idle_slots = bool(idle_slots) and self.enabled
        self.cache: list = []  # host entries (ids, tokens), oldest first
        self.offsets = trace.offsets.tolist() if trace is not None else [0]
        self.ids = trace.blocks.tolist() if trace is not None else []
        self.outputs = trace.output_length.tolist() if trace is not None else []
        self.cursor, self.clock = 0, 0
        self.stats = dict.fromkeys(COUNTERS, 0)

    # -- sizes ---------------------------------------------------------------------------------

    def _ctx_tokens(self, block_size: int) -> int:
        return self.capacity * block_size

    def _slot_ctx(self, block_size: int) -> int:
        return self._ctx_tokens(block_size) // (1 if self.unified else len(self.slots))

    @staticmethod
    def _lcp_tokens(ids_a: list, ids_b: list, tokens_b: int, block_size: int) -> int:
        return min(lcp(ids_a, ids_b) * block_size, tokens_b)

    # -- the host cache ------------------------------------------------------------------------

    def _bytes(self) -> int:
        return sum(t for _, t in self.cache) * self.bytes_per_token

    def _after_save(self, slot: Slot) -> tuple[list, int]:
        """prompt_save's alloc of the slot's tokens, touching nothing: (the cache after it, its evictions)."""
        cache = self.cache
        if not slot.tokens or any(lcp(ids, slot.ids) == len(slot.ids) for ids, _ in cache):
            return cache, 0  # empty, or some entry contains it
        size = slot.tokens * self.bytes_per_token
        if self.limit and size > self.limit:
            return cache, 0
        cache = [e for e in cache if lcp(e[0], slot.ids) != len(e[0])]
        evicted = 0
        while self.limit and cache and sum(t for _, t in cache) * self.bytes_per_token + size > self.limit:
            cache = cache[1:]
            evicted += 1
        return cache + [(list(slot.ids), slot.tokens)], evicted

    def _save(self, slot: Slot) -> None:
        cache, evicted = self._after_save(slot)
        if cache is not self.cache:
            self.cache = cache
            self.stats["saves"] += 1
            self.stats["cache_evictions"] += evicted

    def _best_entry(self, cache: list, slot: Slot, ids: list, tokens: int, block_size: int) -> int | None:
        """load's choice in `cache`: the index of the entry to move into the slot, or None."""
        common = self._lcp_tokens(slot.ids, ids, tokens, block_size)
        keep = f32(common / slot.tokens) if slot.tokens else -1.0
        sim = f32(common / tokens) if tokens else 0.0
        best = None
        for k, (e_ids, e_tokens) in enumerate(cache):
            c = self._lcp_tokens(e_ids, ids, tokens, block_size)
            fk, fs = f32(c / e_tokens) if e_tokens else 0.0, f32(c / tokens) if tokens else 0.0
            if fk < 0.25:
                continue
            if keep < fk and sim < fs:
                keep, sim, best = fk, fs, k
        return best

    def _update(self, block_size: int) -> None:
        while self.limit and self.cache and self._bytes() > self.limit:
            self.cache.pop(0)
            self.stats["cache_evictions"] += 1
        ntok = sum(t for _, t in self.cache)
        per = max(1.0, self._bytes() / max(1, ntok))
        most = max(self._ctx_tokens(block_size), int(self.limit / per)) if self.limit else self._ctx_tokens(block_size)
        while self.cache and sum(t for _, t in self.cache) > most:
            self.cache.pop(0)
            self.stats["cache_evictions"] += 1

    # -- slot choice ---------------------------------------------------------------------------

    def _choose(self, ids: list, tokens: int, block_size: int) -> tuple:
        """(slot, whether its tokens go to the host cache first), touching nothing."""
        chosen, best, update = None, 0.0, False
        if self.similarity != 0.0:
            threshold = f32(self.similarity)
            for s in self.slots:
                if not s.tokens:
                    continue
                sim = f32(self._lcp_tokens(s.ids, ids, tokens, block_size) / tokens) if tokens else 0.0
                if sim > best and sim > threshold:
                    chosen, best = s, sim
            if chosen is not None and (best * tokens) / chosen.tokens < 0.5:
                update = True
        if chosen is None:
            for s in self.slots:
                if chosen is None or s.last_used <= chosen.last_used:
                    chosen = s
            update = True
        return chosen, update and self.enabled

    def _outcome(self, ids: list, tokens: int, block_size: int) -> tuple:
        """(slot, whether it goes through the host cache, reused blocks) for the next request,
        touching nothing (the save and load it would do are worked out on a copy)."""
        if tokens >= self._slot_ctx(block_size):
            return None, False, 0
        slot, update = self._choose(ids, tokens, block_size)
        held = slot.ids
        if update:
            cache = self._after_save(slot)[0]
            entry = self._best_entry(cache, slot, ids, tokens, block_size)
            if entry is not None:
                held = cache[entry][0]
        k = lcp(held, ids)
        k += self._shifted(held, ids, k, block_size)
        return slot, update, min(k, max(0, tokens - 1) // block_size)

    def _shifted(self, held: list, ids: list, k: int, block_size: int) -> int:
        """--cache-reuse: blocks of matching chunks (at least cache_reuse tokens) after the prefix."""
        if self.cache_reuse <= 0:
            return 0
        need = -(-self.cache_reuse // block_size)
        hc = hp = k
        extra = 0
        while hc < len(held) and hp < len(ids):
            m = 0
            while hc + m < len(held) and hp + m < len(ids) and held[hc + m] == ids[hp + m]:
                m += 1
            if m >= need:
                extra += m
                hc += m
                hp += m
            else:
                hc += 1
        return extra

    # -- the replay's operations ---------------------------------------------------------------

    def _request(self) -> list:
        i = self.cursor
        return self.ids[self.offsets[i]:self.offsets[i + 1]] if i + 1 < len(self.offsets) else []

    def resident(self, b) -> bool:
        return any(b in s.ids for s in self.slots) or any(b in ids for ids, _ in self.cache)

    def hit_limit(self, num_blocks: int, input_length: int, block_size: int) -> int:
        ids = self._request()
        if len(ids) != num_blocks:
            raise ConfigError("llamacpp replays requests in trace order, one after another")
        return self._outcome(ids, input_length, block_size)[2]

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        slot, update, k = self._outcome(blocks, input_length, block_size)
        self.cursor = request + 1
        if slot is None:
            self.stats["rejected"] += 1
            return
        if update:  # get_available_slot: save the slot, load the best entry, update
            self._save(slot)
            entry = self._best_entry(self.cache, slot, blocks, input_length, block_size)
            if entry is not None:
                slot.ids, slot.tokens = self.cache.pop(entry)
                self.stats["loads"] += 1
            self._update(block_size)
        elif k:
            self.stats["slot_hits"] += 1
        if self.idle_slots:  # process_single_task: every other slot saved (cleared with a unified KV)
            for s in self.slots:
                if s is not slot:
                    self._save(s)
                    self._update(block_size)
                    if self.unified:
                        s.ids, s.tokens = [], 0
        out = self.outputs[request] if request < len(self.outputs) else 0
        slot.tokens = input_length + max(out - 1, 0)
        slot.ids = list(blocks[:-(-input_length // block_size)]) if slot.tokens else []  # (the prompt's blocks)
        self.clock += 1
        slot.last_used = self.clock

    def resident_blocks(self):
        out = set()
        for s in self.slots:
            out.update(s.ids)
        for ids, _ in self.cache:
            out.update(ids)
        return list(out)

    def size(self) -> int:
        return len({b for s in self.slots for b in s.ids})

    def counters(self) -> dict:
        return dict(self.stats)


POLICY = PolicySpec(
    name="llamacpp",
    native=None,
    summary="llama.cpp server: slots chosen by prompt similarity (else LRU), each holding one sequence; the host "
            "prompt cache (--cache-ram) saves and restores slots",
    reference=LlamaCpp,
    make_state=None,
    read_state=None,
    params=(Param("slots", 0, int, "server slots (--parallel); 0: the default, 4 slots over one unified KV cache; "
                  f"at most {MAX_SLOTS}, as llama.cpp", in_range(0, MAX_SLOTS)),
            Param("similarity", 0.1, float, "--slot-prompt-similarity: the share of the prompt a slot's prefix must "
                  "exceed (0: always LRU)", in_range(0, 1)),
            Param("cache_ram", 8192, int, "--cache-ram MiB of host prompt cache (-1: no limit, 0: off)",
                  in_range(lo=-1)),
            Param("kv_bytes_per_token", 131072, int, "KV bytes per token of a saved prompt (Llama-3-8B at f16)",
                  in_range(lo=1)),
            Param("cache_reuse", 0, int, "--cache-reuse N: shift matching chunks of at least N tokens (0: off)",
                  in_range(lo=0)),
            Param("idle_slots", 1, int, "--cache-idle-slots: save idle slots to the host cache at each request",
                  in_range(0, 1))),
    not_served=("llama.cpp server's loop (its slots under concurrency, deferred tasks) is not modelled; "
                "`kvreplay run --policy llamacpp` replays its slots one request at a time"),
)
