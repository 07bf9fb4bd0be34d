/* TensorRT-LLM's in-flight batching scheduler style (docs/engines.md, "TensorRT-LLM"): the
 * capacity scheduler (GUARANTEED_NO_EVICT, MAX_UTILIZATION) and the micro-batch scheduler (max
 * batch size, max num tokens, chunked context), compiled. serving/inflight.py is the reference
 * and cites TensorRT-LLM's source for each rule (CS: capacityScheduler.cpp, SBM:
 * scheduledBlocksManager.cpp, KVM: kvCacheManager.cpp, MBS: microBatchScheduler.cpp, LR:
 * llmRequest.h); the functions below follow it, name for name.
 *
 * kv_trtllm_capacity and kv_trtllm_micro_batch decide a step over plain arrays (Python's tests
 * call them too); trtllm_schedule builds those arrays from an instance's requests in arrival
 * order (running ones and the waiting queue, merged by request index), then applies the
 * decision: paused requests give their blocks back and wait to recompute, new ones start (their
 * whole prompt's blocks held, as addSequence does), every scheduled one gets its tokens. */
#include "sim.h"

enum { TRT_CONTEXT_NEW, TRT_CONTEXT_STARTED, TRT_GENERATION };
enum { TRT_NO_EVICT, TRT_MAX_UTILIZATION };
enum { TRT_CHUNK_NONE, TRT_CHUNK_FCFS, TRT_CHUNK_EQUAL };
/* the decision's settings (inflight.py CFG_SLOTS names them in this order) */
#define TRT_CFG_SLOTS(S) S(T_POLICY) S(T_MAX_BATCH) S(T_MAX_TOKENS) S(T_CHUNKING) S(T_BLOCK_SIZE) S(T_MAX_CONTEXT) S(T_FREE)
enum { TRT_CFG_SLOTS(KV_SLOT_ENUM) TRT_NUM_CFG };
KV_EXPORT const char kv_layout_trtllm_cfg[] = TRT_CFG_SLOTS(KV_SLOT_SPEC);

typedef struct {
    const i64 *kind, *prompt, *position, *final, *allocated, *releasable, *new_block;
} TrtReqs;

/* ---- the set of blocks contributed this step (beneficialToSkip): open addressing over scratch ---- */

typedef struct {
    i64 *slot;
    i64 mask;
} TrtSet;

static TrtSet trt_set(i64 *scratch, i64 n) {
    i64 size = 16;
    while (size < 2 * n + 2) size <<= 1;
    for (i64 k = 0; k < size; k++) scratch[k] = -1;
    return (TrtSet){scratch, size - 1};
}

/* 1 when b was in the set; else it is added */
static int trt_set_seen(TrtSet *set, i64 b) {
    uint64_t h = (uint64_t)b * 0x9E3779B97F4A7C15ull;
    for (i64 k = (i64)(h >> 17) & set->mask;; k = (k + 1) & set->mask) {
        if (set->slot[k] == b) return 1;
        if (set->slot[k] < 0) {
            set->slot[k] = b;
            return 0;
        }
    }
}

static int trt_skip(const TrtReqs *r, i64 i, TrtSet *set) {
    if (r->kind[i] != TRT_CONTEXT_NEW || r->new_block[i] < 0) return 0;
    return trt_set_seen(set, r->new_block[i]);
}

static void trt_already_contributed(const TrtReqs *r, i64 n, TrtSet *set) {
    for (i64 i = 0; i < n; i++)
        if (r->kind[i] == TRT_CONTEXT_STARTED && r->new_block[i] >= 0) trt_set_seen(set, r->new_block[i]);
}

/* ---- blocks ---- */

static inline i64 trt_remaining_blocks(const TrtReqs *r, i64 i, i64 bs) {
    return kv_ceil_div(r->final[i], bs) - r->allocated[i];
}

static inline i64 trt_one_step_blocks(const TrtReqs *r, i64 i, i64 bs) {
    if (r->kind[i] == TRT_CONTEXT_NEW) return kv_ceil_div(kv_min(r->prompt[i], r->final[i]), bs);
    if (r->kind[i] == TRT_GENERATION) {
        i64 pos = r->position[i], add = kv_min(1, r->final[i] - pos);
        return kv_ceil_div(pos + add, bs) - kv_ceil_div(pos, bs);
    }
    return 0;
}

/* ---- the capacity scheduler ---- */

static i64 trt_no_evict(const i64 *cfg, const TrtReqs *r, i64 n, i64 *scheduled, i64 *pending, TrtSet *set) {
    i64 bs = cfg[T_BLOCK_SIZE], limit = cfg[T_MAX_BATCH], available = cfg[T_FREE], ns = 0, np = 0;
    for (i64 i = 0; i < n; i++) {
        if (ns >= limit) break;
        if (r->kind[i] == TRT_GENERATION) {
            scheduled[ns++] = i;
            available -= trt_remaining_blocks(r, i, bs);
        } else {
            pending[np++] = i;
        }
    }
    for (i64 q = 0; q < np; q++) {
        i64 i = pending[q];
        if (trt_skip(r, i, set)) continue;
        if (ns >= limit) break;
        i64 need = trt_remaining_blocks(r, i, bs);
        if (need > available) break;
        scheduled[ns++] = i;
        available -= need;
    }
    return ns;
}

static i64 trt_max_utilization(const i64 *cfg, const TrtReqs *r, i64 n, i64 *scheduled, i64 *paused, i64 *npaused,
                               TrtSet *set) {
    i64 bs = cfg[T_BLOCK_SIZE], free = cfg[T_FREE], used = 0, ns = 0, i = 0, end = n;
    *npaused = 0;
    while (i < end) {
        if (trt_skip(r, i, set)) {
            i++;
            continue;
        }
        if (ns < cfg[T_MAX_BATCH]) {
            i64 need = trt_one_step_blocks(r, i, bs);
            if (used + need <= free) {
                used += need;
                scheduled[ns++] = i;
                i++;
                continue;
            }
        }
        i64 last = -1;
        for (i64 k = end - 1; k >= i; k--)
            if (r->kind[k] != TRT_CONTEXT_NEW) {
                last = k;
                break;
            }
        if (last < 0) break;
        paused[(*npaused)++] = last;
        free += r->releasable[last];
        end = last;
    }
    return ns;
}

/* The capacity scheduler over n requests: the scheduled ones' indices (returned: how many) and
 * the paused ones'. scratch: 5n + 32 i64 */
KV_EXPORT i64 kv_trtllm_capacity(const i64 *cfg, i64 n, const i64 *kind, const i64 *prompt, const i64 *position,
                                 const i64 *final, const i64 *allocated, const i64 *releasable, const i64 *new_block,
                                 i64 *scheduled, i64 *paused, i64 *npaused, i64 *scratch) {
    TrtReqs r = {kind, prompt, position, final, allocated, releasable, new_block};
    TrtSet set = trt_set(scratch + n, n);
    trt_already_contributed(&r, n, &set);
    if (cfg[T_POLICY] == TRT_NO_EVICT) {
        *npaused = 0;
        return trt_no_evict(cfg, &r, n, scheduled, scratch, &set);
    }
    return trt_max_utilization(cfg, &r, n, scheduled, paused, npaused, &set);
}

/* ---- the micro-batch scheduler ---- */

/* setCtxRequestsChunkSize over the m candidates cand[] (their sizes in size[], from 0) */
static void trt_cut(const i64 *cfg, i64 m, const i64 *cand, i64 *size, const i64 *prompt, const i64 *position,
                    i64 capacity /* < 0: none */) {
    i64 unit = cfg[T_BLOCK_SIZE], max_ctx = cfg[T_MAX_CONTEXT];
    for (i64 q = 0; q < m; q++) size[q] = 0;
    if (cfg[T_CHUNKING] == TRT_CHUNK_EQUAL) {
        i64 total = 0, grew = 1;
        while ((capacity < 0 || total < capacity) && grew) {
            grew = 0;
            for (i64 q = 0; q < m; q++) {
                i64 i = cand[q], past = size[q];
                i64 next = kv_min(past + unit, prompt[i] - position[i]);
                if ((capacity >= 0 && total + next - past > capacity) || (max_ctx > 0 && next > max_ctx)) continue;
                size[q] = next;
                total += next - past;
                grew += next - past;
            }
        }
        return;
    }
    for (i64 q = 0; q < m; q++) { /* first come, first served */
        i64 i = cand[q], left = prompt[i] - position[i], s = left;
        if (capacity >= 0) s = kv_min(s, capacity);
        if (max_ctx > 0) s = kv_min(s, max_ctx);
        if (s != left) s = s / unit * unit;
        size[q] = s;
        if (capacity >= 0) capacity -= s;
    }
}

/* The micro-batch scheduler over the capacity scheduler's ns requests: tokens[i] for each
 * request it batches (the caller zeroes tokens). scratch: 2 ns */
KV_EXPORT void kv_trtllm_micro_batch(const i64 *cfg, i64 ns, const i64 *scheduled, const i64 *kind, const i64 *prompt,
                                     const i64 *position, i64 *tokens, i64 *scratch) {
    i64 budget = cfg[T_MAX_TOKENS], max_ctx = cfg[T_MAX_CONTEXT], chunking = cfg[T_CHUNKING];
    i64 *cand = scratch, *size = scratch + ns;
    i64 used = 0, chunked = 0, count = 0, m = 0;
    int all_fit = 1;
    for (i64 q = 0; q < ns; q++) {
        i64 i = scheduled[q];
        if (kind[i] != TRT_GENERATION) {
            i64 left = prompt[i] - position[i];
            if (chunking == TRT_CHUNK_NONE) {
                if (budget > 0 && used + left > budget) break;
                tokens[i] = left;
                used += left;
            } else {
                i64 want = left;
                if (max_ctx > 0 && max_ctx < want) {
                    want = max_ctx;
                    all_fit = 0;
                }
                cand[m] = i;
                size[m++] = left;
                chunked += want;
            }
        } else {
            if (budget > 0 && used + 1 > budget) break;
            tokens[i] = 1;
            used += 1;
        }
        if (++count >= cfg[T_MAX_BATCH]) break;
    }
    if (budget > 0 && chunked > budget - used) all_fit = 0;
    if (m > 0 && !all_fit) trt_cut(cfg, m, cand, size, prompt, position, budget > 0 ? budget - used : -1);
    for (i64 q = 0; q < m; q++)
        if (size[q] > 0) tokens[cand[q]] = size[q];
}

/* ---- the simulator's step ---- */

/* LR setPrepopulatedPromptLen: a first chunk after `hit` reused tokens ends on a block boundary */
static inline i64 trt_prepopulated_chunk(i64 chunk, i64 hit, i64 prompt, i64 bs) {
    if (hit <= 0) return chunk;
    if (hit + chunk < prompt) chunk = (hit + chunk) / bs * bs - hit;
    return kv_min(chunk, prompt - hit);
}

/* the first block of waiting (or mid-context) request i's full prompt blocks the cache lacks
 * (BlockManager::findNewContextBlock), -1: all are cached, or the policy stores nothing */
static i64 trt_new_block(Sim *s, i64 j, i64 i) {
    if (s->policy->store_request == NULL) return -1;
    void *st = s->inst[j].state;
    const i32 *ids = policy_ids(s, j);
    i64 start = s->io->offsets[i], full = kv_min(s->target[i] / s->bs, s->io->P[i]);
    /* (hit_limit of target + 1 tokens: every full block, the last one too) */
    i64 limit = s->policy->hit_limit(st, full, s->target[i] + 1, s->bs), k = 0;
    while (k < limit && s->policy->resident(st, ids[start + k])) k++;
    return k < full ? (i64)s->io->blocks[start + k] : -1;
}

/* a paused request waits in the queue at its place in arrival order */
static void trt_wait_in_order(Sim *s, Inst *q, i64 i) {
    i64 at = q->qhead;
    while (at >= 0 && at < i) at = s->qnext[at];
    if (at < 0) {
        queue_push_back(s, q, i);
        return;
    }
    i64 before = s->qprev[at];
    s->qprev[i] = before;
    s->qnext[i] = at;
    s->qprev[at] = i;
    if (before < 0) q->qhead = i;
    else s->qnext[before] = i;
    q->qlen += 1;
}

static void trt_run_in_order(Inst *q, i64 i) {
    i64 r = q->nrun++;
    while (r > 0 && q->running[r - 1] > i) {
        q->running[r] = q->running[r - 1];
        r--;
    }
    q->running[r] = i;
}

static void trt_remove_running(Inst *q, i64 i) {
    i64 w = 0;
    for (i64 r = 0; r < q->nrun; r++)
        if (q->running[r] != i) q->running[w++] = q->running[r];
    q->nrun = w;
}

/* the active requests in arrival order: the running ones, and the waiting ones before the last
 * running one or among the first max batch size after it (no later one can be scheduled) */
static i64 trt_active(Sim *s, i64 j, i64 *idx) {
    Inst *q = &s->inst[j];
    i64 last = q->nrun > 0 ? q->running[q->nrun - 1] : -1, n = 0, r = 0, w = q->qhead, after = 0;
    i64 limit = s->io->cfg[MAX_SEQS];
    while (r < q->nrun || w >= 0) {
        int take_run = w < 0 || (r < q->nrun && q->running[r] < w);
        if (take_run) {
            idx[n++] = q->running[r++];
            continue;
        }
        if (w > last && after >= limit) break;
        if (w > last) after++;
        idx[n++] = w;
        w = s->qnext[w];
    }
    return n;
}

static int trt_started(Sim *s, i64 i) { return s->io->status[i] == RUNNING; }

/* the blocks pausing running request i frees: those no other request holds (its decode blocks
 * are its own) */
static i64 trt_own(Sim *s, i64 j, i64 i) {
    const KvPolicy *p = s->policy;
    i64 start = s->io->offsets[i];
    i64 prompt = p->own_blocks == NULL ? s->base_n[i]
                                       : p->own_blocks(s->inst[j].state, start, start + s->base_len[i], s->io->handles,
                                                       start + i, s->base_n[i]);
    return prompt + s->dec_pinned[i];
}

void trtllm_schedule(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const i64 *cfg = s->io->cfg;
    i64 *idx = s->trt, n = trt_active(s, j, idx);
    i64 *kind = idx + s->n, *prompt = kind + s->n, *position = prompt + s->n, *final = position + s->n;
    i64 *alloc = final + s->n, *newb = alloc + s->n, *sched = newb + s->n, *paused = sched + s->n;
    i64 *tokens = paused + s->n, *own = tokens + s->n, *scratch = own + s->n;
    for (i64 a = 0; a < n; a++) {
        i64 i = idx[a];
        int run = trt_started(s, i);
        kind[a] = !run ? TRT_CONTEXT_NEW : s->decoding[i] ? TRT_GENERATION : TRT_CONTEXT_STARTED;
        prompt[a] = run ? s->base_input[i] : s->target[i];
        position[a] = run ? s->computed[i] : 0;
        final[a] = s->output_kv ? s->io->L[i] + s->outputs[i] : s->io->L[i];
        alloc[a] = run ? s->base_n[i] + s->dec_pinned[i] : 0;
        own[a] = run ? trt_own(s, j, i) : 0;
        newb[a] = kind[a] == TRT_GENERATION ? -1 : trt_new_block(s, j, i);
        tokens[a] = 0;
    }
    i64 tcfg[TRT_NUM_CFG];
    tcfg[T_POLICY] = cfg[TRT_POLICY];
    tcfg[T_MAX_BATCH] = cfg[MAX_SEQS];
    tcfg[T_MAX_TOKENS] = cfg[MAX_BATCHED];
    tcfg[T_CHUNKING] = cfg[CHUNKED];
    tcfg[T_BLOCK_SIZE] = s->bs;
    tcfg[T_MAX_CONTEXT] = 0;
    tcfg[T_FREE] = s->capacity - req_held(s, j);
    i64 npaused = 0;
    i64 ns = kv_trtllm_capacity(tcfg, n, kind, prompt, position, final, alloc, own, newb, sched, paused, &npaused,
                                scratch);
    kv_trtllm_micro_batch(tcfg, ns, sched, kind, prompt, position, tokens, scratch);
    /* paused: blocks back, the request waits to recompute its prompt and what it generated */
    for (i64 p = 0; p < npaused; p++) {
        i64 i = idx[paused[p]];
        trt_remove_running(q, i);
        req_take_back(s, j, i);
        trt_wait_in_order(s, q, i);
    }
    for (i64 k = 0; k < ns; k++) {
        i64 a = sched[k], i = idx[a], m = tokens[a];
        if (m <= 0) continue;
        if (kind[a] == TRT_CONTEXT_NEW) {
            if (!req_schedule(s, j, i, -1, s->target[i])) continue; /* (its blocks did not fit after all: it waits) */
            q->qlen -= 1;                              /* out of the queue, into the running list */
            i64 before = s->qprev[i], after = s->qnext[i];
            if (before < 0) q->qhead = after;
            else s->qnext[before] = after;
            if (after < 0) q->qtail = before;
            else s->qprev[after] = before;
            s->qnext[i] = s->qprev[i] = -1;
            trt_run_in_order(q, i);
            m = trt_prepopulated_chunk(m, s->computed[i], s->target[i], s->bs);
        } else if (kind[a] == TRT_GENERATION) {
            if (!req_grow(s, j, i, s->computed[i] + 1)) continue; /* (no block for its token: it waits) */
        }
        s->new_tokens[i] = m;
    }
}
