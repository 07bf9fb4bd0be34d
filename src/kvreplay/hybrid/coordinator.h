/* vLLM 0.33.0's hybrid KV cache manager, compiled (hybrid/coordinator.c): its pool and a request's
 * block tables, for the sequential replay (kv_hybrid_replay, in coordinator.c) and the serving
 * simulator (serving/kernel/hybrid.c, which holds a request's blocks with these). hybrid/coordinator.py
 * has the rules with their vLLM sources. */
#ifndef KV_HYBRID_H
#define KV_HYBRID_H

#include "../include/kv.h"
#include "engine.h"

enum { K_FULL = 0, K_SLIDING = 1, K_CHUNKED = 2, K_MAMBA = 3 };
enum { HY_ADMISSIONS, HY_EVICTIONS, HY_DUPLICATES, HY_OVERSIZE, HY_RESIDENT, HY_COUNTERS };
/* return codes: 0 done; HY_NOMEM; HY_BADARG; HY_INTERNAL (the free queue ran dry where the fit
 * check said it could not); r > 0: request r - 1 touches one block twice (a hash id repeated
 * within its hit, which vLLM's chained hashes never do; the reference fails there too) */
#define HY_NOMEM (-1)
#define HY_BADARG (-2)
#define HY_INTERNAL (-3)
#define HY_REPEAT (-4)

typedef struct {
    i32 key;      /* id * G + gid it is cached under, -1: none */
    i32 lp, ln;   /* links in the free queue's cached run; lp -1: not in it */
    i32 hp, hn;   /* links among the holders of its key (the head's hp: the tail) */
} HBlock;

typedef struct {
    int kind;
    i64 window, chunk, need; /* need: blocks a sliding-window hit must end with */
    i64 gid0, copies;
} HSpec;

typedef struct {
    int kind;
    i64 window, chunk, need;
    i32 *table;  /* the block table (0: skipped); mamba: only its states, in order, at pos */
    i64 *pos;    /* mamba: each state's index in the block table */
    i64 ns;      /* mamba: states held */
    i64 len, lo, cached_upto, last; /* len: the block table's length */
    i64 keep[4]; /* this request's block indexes it may hash: [keep[0], keep[1]) and [keep[2], keep[3]) */
} HGroup;

/* One request's state: a group per KV cache group id, each table with room for tcap blocks. */
typedef struct HReq {
    HGroup *g;
    i64 tcap;
    i64 junction; /* the simulator's: the shared-prefix boundary of its last lookup, in tokens */
} HReq;

typedef struct HPool {
    i64 capacity, bs, nb, G, S, chunk_tokens, scap;
    int dense, simple, has_mamba;
    int shift; /* log2(bs) when bs is a power of 2, else -1 */
    i32 *scratch; /* scap: a batch of hashless blocks being freed */
    HBlock *blk;
    i32 *keys; /* per key: its first holder, 0: none */
    i32 *ring; /* the hashless run: ring[(head + k) % capacity], k < ring_count */
    i64 ring_head, ring_count;
    i64 next_unused;
    i64 lru_count; /* the cached run: a circular list through blk with blk[0] its sentinel */
    i64 c[HY_COUNTERS];
    HSpec *spec;
    int *order; /* lookup order: full attention's spec groups first */
    /* the simulator's pool (NULL, 0: the sequential replay's, one request at a time) */
    i32 *ref;     /* per block: the requests holding it (vLLM's ref_cnt); a block is in the free queue at 0 */
    i64 in_flight, max_len; /* the admission cap's max_in_flight_tokens and max_model_len (0: none) */
    i32 *stamp; /* a Mamba model's, per key: the step that last cached it in a Mamba group (NULL: none) */
    i32 step;   /* this step's number (hy_step_starts) */
} HPool;

static inline i64 hy_free_count(const HPool *p) {
    return p->ring_count + (p->capacity - p->next_unused + 1) + p->lru_count;
}

/* A pool of `capacity` blocks over `num_blocks` dense ids for the spec groups given (kind, copies,
 * window, chunk per spec group; retention -1: dense); `refs`: with reference counts (the
 * simulator's, where requests overlap). 0, HY_BADARG or HY_NOMEM (nothing to release then). */
int hy_pool_init(HPool *p, i64 capacity, i64 block_size, i64 num_blocks, i64 num_specs, const i64 *kind,
                 const i64 *copies, const i64 *window, const i64 *chunk, i64 retention, i64 chunk_tokens, int refs);
void hy_release(HPool *p);
/* The pool's counters (HY_COUNTERS of them, the resident blocks last) into out. */
void hy_counters(HPool *p, i64 *out);
/* A request state for pool p's groups (its tables empty): 0 when out of memory. */
int hy_req_init(const HPool *p, HReq *rq);
void hy_req_release(const HPool *p, HReq *rq);
/* Room for `need` blocks in each of rq's tables and in the pool's scratch: 0 when out of memory. */
int hy_grow(HPool *p, HReq *rq, i64 need);
/* The coordinator's hit for a request of `tokens` tokens (blocks; its last token is never a hit),
 * *junction: where full attention matched further (0: none). */
i64 hy_find_hit(const HPool *p, const i32 *ids, i64 nids, i64 tokens, i64 *junction);
/* A request's start: its hit in blocks for `tokens` tokens (a prompt of `prompt` tokens, plus the
 * outputs a preempted request recomputes), its groups emptied and told which blocks they may hash. */
i64 hy_start(HPool *p, HReq *rq, const i32 *ids, i64 nids, i64 tokens, i64 prompt, i64 *junction);
/* remove_skipped_blocks with `computed` tokens done: the blocks that left a window are freed. */
void hy_remove_skipped(HPool *p, HReq *rq, i64 computed);
/* The coordinator's get_num_blocks_to_allocate for `tokens` tokens in slots: `first`, a request
 * starting with `hit` hit blocks (ids: its block ids; `admission`: vLLM's full-sequence gate,
 * which caps sliding-window and chunked-local groups); else a running request. */
i64 hy_needed(const HPool *p, const HReq *rq, const i32 *ids, i64 hit, i64 tokens, int first, int admission);
/* new_step_starts: the Mamba states cached from now on are this step's (the simulator's, refs). */
static inline void hy_step_starts(HPool *p) { p->step++; }
/* A Mamba group's hit state (the last of `hit` hit blocks) was cached in this step: vLLM's
 * MambaManager then refuses the request this step (get_num_blocks_to_allocate's
 * cached_blocks_this_step). */
int hy_hit_cached_this_step(const HPool *p, const i32 *ids, i64 hit);
/* Scheduler._mamba_block_aligned_split (scheduler.py:546-662) at vLLM's defaults (no EAGLE, no
 * prefill-checkpoint blocks, no partial hits): the tokens of a chunk of n from `start` for a
 * request of `prompt` prompt and `num_tokens` tokens (junction: its shared-prefix boundary in
 * tokens; max_prefill: the step's token budget), cut to end where a Mamba state must be cached;
 * 0: no aligned chunk fits (hybrid/coordinator.py mamba_split is the same). */
i64 hy_mamba_split(i64 bs, i64 prompt, i64 num_tokens, i64 max_prefill, i64 junction, i64 start, i64 n);
/* The blocks a request of `tokens` tokens holds at its peak on its own (vLLM's admission gate for
 * the whole sequence: sliding-window and chunked-local groups capped; a Mamba group, in align
 * mode, 2: MambaSpec.max_memory_usage_bytes). */
i64 hy_peak(const HPool *p, i64 tokens);
/* The blocks of one allocate_slots up to `end` tokens (its fit checked): on the first, the hit
 * blocks are touched; then new blocks, group by group; then every full block below `cached`
 * tokens a group may hash is cached. 1, or HY_INTERNAL / HY_REPEAT. */
int hy_take(HPool *p, HReq *rq, const i32 *ids, i64 hit, i64 end, i64 cached, int first);
/* A request's end (kv_cache_manager.free): group by group, each tail first. */
void hy_finish(HPool *p, HReq *rq);

#endif
