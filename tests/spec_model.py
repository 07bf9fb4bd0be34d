"""An oracle written straight from the spec (shared/seeds/001), kept apart from kvreplay's code.

Deliberately naive: Python lists for queues, linear searches, hash ids used as
they are (no remapping). It shares nothing with src/kvreplay, so a mistake in
the product cannot hide behind the same mistake here.
"""

from __future__ import annotations


class SpecS3FIFO:
    def __init__(self, capacity, small_ratio=0.1, max_freq=3, ghost_freq=0):
        self.small_cap = round(capacity * small_ratio)
        self.main_cap = capacity - self.small_cap
        self.ghost_cap = self.main_cap
        self.max_freq = max_freq
        self.ghost_freq = ghost_freq
        self.S = []  # [hash, freq], index 0 = head
        self.M = []
        self.G = []  # hashes

    def resident(self, h):
        return any(e[0] == h for e in self.S) or any(e[0] == h for e in self.M)

    def access(self, h):
        for q in (self.S, self.M):
            for e in q:
                if e[0] == h:
                    e[1] = min(e[1] + 1, self.max_freq)
                    return
        if h in self.G:
            self.G.remove(h)
            self.admit_to_M(h, self.ghost_freq)
        else:
            self.admit_to_S(h)

    def admit_to_S(self, h):
        while len(self.S) >= self.small_cap:
            victim, vf = self.S.pop(0)
            if vf >= 1:
                self.admit_to_M(victim, vf)
            else:
                self.insert_to_G(victim)
        self.S.append([h, 0])

    def admit_to_M(self, h, freq):
        while len(self.M) >= self.main_cap:
            victim, vf = self.M[0]
            if vf >= 1:
                self.M.pop(0)
                self.M.append([victim, vf - 1])
                continue
            self.M.pop(0)
            self.insert_to_G(victim)
            break
        self.M.append([h, freq])

    def insert_to_G(self, h):
        if h in self.G:
            self.G.remove(h)
        elif len(self.G) >= self.ghost_cap:
            self.G.pop(0)
        self.G.append(h)

    def size(self):
        return len(self.S) + len(self.M)


class SpecLRU:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = []  # index 0 = least recently used

    def resident(self, h):
        return h in self.items

    def access(self, h):
        if h in self.items:
            self.items.remove(h)
        elif len(self.items) >= self.capacity:
            self.items.pop(0)
        self.items.append(h)

    def size(self):
        return len(self.items)


class SpecFIFO:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = []

    def resident(self, h):
        return h in self.items

    def access(self, h):
        if h in self.items:
            return
        if len(self.items) >= self.capacity:
            self.items.pop(0)
        self.items.append(h)

    def size(self):
        return len(self.items)


SPEC_POLICIES = {"s3fifo": SpecS3FIFO, "lru": SpecLRU, "fifo": SpecFIFO}


def oracle_replay(requests, cache, block_size):
    """The spec's loop over any oracle object with resident(h) and access(h) (or access_request(ids)
    for a request-level oracle). requests: list of (hash_ids, input_length).
    Returns (per-request hit_tokens, hit_blocks)."""
    hit_tokens, hit_blocks = [], []
    for hash_ids, length in requests:
        k = 0
        while k < len(hash_ids) and cache.resident(hash_ids[k]):
            k += 1
        hit_blocks.append(k)
        hit_tokens.append(min(k * block_size, length))
        if hasattr(cache, "access_request"):
            cache.access_request(hash_ids)
        else:
            for h in hash_ids:
                cache.access(h)
    return hit_tokens, hit_blocks


def spec_replay(requests, policy, capacity, block_size, **params):
    """requests: list of (hash_ids, input_length). Returns (per-request hit_tokens, hit_blocks, final size)."""
    cache = SPEC_POLICIES[policy](capacity, **params)
    hit_tokens, hit_blocks = oracle_replay(requests, cache, block_size)
    return hit_tokens, hit_blocks, cache.size()
