"""LRU-tail: block LRU whose request refreshes its blocks tail first.

State, residency and per-block operations are ``lru``'s: one recency list (head
= least recently used, tail = most recent); an access of a resident block moves
it to the most recent end; an access of a missing block evicts the head when the
list holds ``capacity`` blocks, then appends the block.

The one difference is the access phase of a request (a request-level hook):
after the prefix scan, the request's blocks are accessed in REVERSE order, last
block first. The request's first block therefore ends up most recent and its
last block least recent among them, so the tail of a prompt is evicted before
its head. A prefix cache can only serve a block whose predecessors are resident,
so evicting tails first keeps what stays resident usable as a prefix
(``stranded_blocks`` drops). vLLM v1 gets the same ordering by freeing a
finished request's blocks tail first into its LRU free queue.

Consequences, by LRU's stack property (the resident set is always the
``capacity`` most recently accessed distinct blocks):
- from the same state, a request of at most ``capacity`` blocks leaves the same
  resident set as ``lru`` would; only the recency order among its own blocks is
  reversed (later requests then see different evictions, hence different hits);
- a request longer than ``capacity`` keeps its FIRST ``capacity`` blocks (``lru``
  keeps its last ones);
- within a request, a missing tail block is admitted before the request's own
  resident prefix blocks are refreshed, so when those sit at the least recent
  end it may evict one of them, which the same request then re-admits. Hits are
  unaffected (the prefix scan came first) and so is the resident set afterwards,
  but ``admissions`` and ``evictions`` count these round trips.

Holds (pin): as ``lru``: a held block at the least recent end is in use, moves to the most
recent end and the next one is considered; a miss when every resident block is held is refused.
A running request (``pin_request``) is accessed in the same order as ``access_request``, last
block first, each block held as soon as it is accessed (the default would access first to last
and change the recency order), so requests run one at a time give the sequential replay as
long as none has more distinct blocks than ``capacity``. A refusal stops the request at the
refused block: it holds the blocks after it (its tail, admitted), while the blocks before it,
its prefix hits included, are neither accessed nor held; once the caller releases the tail it
stays resident, stranded until its prefix returns (``lru`` would hold a usable leading prefix
instead). Handles are the held blocks, tail first; releasing them (the default
``unpin_request``) changes no recency.

Parameters: none. Counters: ``admissions``, ``evictions`` (as ``lru``).
Source: kvreplay's ``lru`` with the request order of vLLM v1
(``KVCacheManager.free`` in ``vllm/v1/core/kv_cache_manager.py``: "we free the
blocks in reverse order so that the tail blocks are evicted first"). Only the
order is taken: vLLM's pinning of running requests belongs to the ``vllm`` policy.
"""

from __future__ import annotations

from collections import namedtuple

from . import lru
from .base import PolicySpec, meta_slots


class LRUTail(lru.LRU):
    """Reference LRU-tail: lru.LRU with the request's blocks accessed last to first."""

    def access_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> None:
        for b in reversed(blocks):
            self.access(b)

    def pin_request(self, request: int, blocks: list, hits: int, input_length: int, block_size: int) -> list:
        """Access and hold the blocks last to first; stop at the first refused one."""
        held = []
        for b in reversed(blocks):
            refusals = self.refusals
            self.access(b)
            if self.refusals != refusals:
                break
            self.pin(b)  # lru admits every block it does not refuse
            held.append(b)
        return held


# ---- compiled engine: lru's list and operations on a state type of its own -------------------------

# The fields of lru.LRUState (lru_tail.c works on lru.h's state), under a name of its own so that
# a state says which policy it belongs to.
LRUTailState = namedtuple("LRUTailState", lru.LRUState._fields)
META = meta_slots("lru_tail")  # the meta array's slots, by the names lru_tail.c gives them
HEAD, TAIL, SIZE, CAPACITY, ADMISSIONS, EVICTIONS = META.HEAD, META.TAIL, META.SIZE, META.CAPACITY, META.ADMISSIONS, META.EVICTIONS  # meta slots (lru's; lru_tail.c names them)


def make_state(capacity: int, trace) -> LRUTailState:
    return LRUTailState(*lru.make_state(capacity, trace))


POLICY = PolicySpec(
    name="lru-tail",
    native="lru_tail",
    summary="LRU with each request's blocks refreshed tail first (its first block ends most recent)",
    reference=LRUTail,
    make_state=make_state,
    read_state=lru.read_state,
    resident_mask=lambda state: state.cached != 0,
    residency_bits=True,
)
