/* The SGLang scheduler style (docs/serving.md, "SGLang" cites sglang/srt/managers/scheduler.py and
 * schedule_policy.py's PrefillAdder): a prefill batch when one can be formed (decodes pause), else
 * a decode batch. The prefill batch continues the prompt being chunked, then adds waiting
 * requests (longest cached prefix first when few wait, else first come first served) while the
 * pool's room, after reserving the running requests' outputs at the new-token ratio, the chunk
 * size and the prefill token budget allow. A decode batch retracts requests (fewest generated
 * tokens first, the longest prompt on ties) while a decoding request finds no block. */
#include "sim.h"

/* Stable insertion sort of order[:count] by key[order[q]], largest first. */
static void sort_by_key_desc(i64 *order, i64 count, const i64 *key) {
    for (i64 a = 1; a < count; a++) {
        i64 v = order[a], b = a - 1;
        while (b >= 0 && key[order[b]] < key[v]) {
            order[b + 1] = order[b];
            b--;
        }
        order[b + 1] = v;
    }
}

/* longest cached prefix first (stable), matched before sorting */
static void longest_prefix_first(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    i64 count = 0;
    for (i64 i = q->qhead; i >= 0; i = s->qnext[i]) {
        s->order[count++] = i;
        s->lpm_key[i] = req_cached_prefix(s, j, i, s->target[i]);
    }
    sort_by_key_desc(s->order, count, s->lpm_key);
    q->qhead = q->qtail = -1;
    q->qlen = 0;
    for (i64 k = 0; k < count; k++) queue_push_back(s, q, s->order[k]);
}

static inline i64 reserved(Sim *s, i64 i) {
    i64 left = s->outputs[i] - s->generated[i], clip = s->io->cfg[CLIP_MAX_NEW];
    return left < clip ? left : clip;
}

/* The prefill batch (PrefillAdder); returns the requests in it. */
static i64 prefill_batch(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    const i64 *cfg = s->io->cfg;
    i64 bs = s->bs, npre = 0;
    KvHolds *h = (KvHolds *)q->state;
    f64 rem_total = (f64)((s->capacity - h->hold[HELD]) * bs);
    for (i64 r = 0; r < q->nrun; r++)
        if (q->running[r] != q->chunk_req) rem_total -= (f64)reserved(s, q->running[r]) * q->ratio;
    int chunking = cfg[CHUNKED] != 0;
    i64 rem_chunk = chunking ? cfg[CHUNK_SIZE] : (i64)1 << 62;
    i64 rem_input = cfg[MAX_PREFILL];
    if (q->chunk_req >= 0) {
        i64 i = q->chunk_req, m = s->target[i] - s->computed[i];
        if (m > rem_chunk) {
            m = rem_chunk >= bs ? rem_chunk - rem_chunk % bs : rem_chunk;
        } else {
            q->chunk_req = -1;
            rem_total -= (f64)reserved(s, i);
        }
        s->new_tokens[i] = m;
        npre++;
        rem_chunk -= m;
        rem_input -= m;
        rem_total -= (f64)sim_ceil_page(m, bs);
    }
    if (q->chunk_req >= 0 || q->qlen == 0) return npre;
    if (cfg[LPM] != 0 && q->qlen <= cfg[LPM_FCFS_ABOVE]) longest_prefix_first(s, j);
    while (q->qlen > 0 && q->nrun < cfg[MAX_SEQS] && rem_total > 0 && rem_chunk > 0 && rem_input > 0) {
        i64 i = q->qhead;
        i64 hit = kv_min(req_cached_prefix(s, j, i, s->target[i]) * bs, s->target[i]);
        i64 extend = hit < s->target[i] ? s->target[i] - hit : 1;
        i64 reserve = reserved(s, i);
        if ((f64)(extend + reserve + bs) >= rem_total) break;
        if (!chunking && npre > 0 && sim_ceil_page(extend, bs) >= rem_input) break;
        if (!req_schedule(s, j, i)) break;
        queue_pop_front(s, q);
        extend = s->target[i] - s->computed[i];
        q->running[q->nrun++] = i;
        npre++;
        if (extend > rem_chunk) {
            i64 m = rem_chunk >= bs ? rem_chunk - rem_chunk % bs : rem_chunk;
            s->new_tokens[i] = m;
            q->chunk_req = i;
            rem_total -= (f64)(sim_ceil_page(m, bs) + bs);
            rem_chunk -= m;
            break;
        }
        s->new_tokens[i] = extend;
        rem_total -= (f64)(sim_ceil_page(extend, bs) + bs + reserve);
        rem_chunk -= sim_ceil_page(extend, bs);
        rem_input -= sim_ceil_page(extend, bs);
    }
    return npre;
}

/* Retract one decoding request of instance j for a request that found no block: the fewest
 * generated tokens first, the longest prompt on ties, never the last one; it waits at the back
 * of the queue. Returns it, or -1 when none may go. *r: the caller's place in the running list. */
static i64 retract(Sim *s, i64 j, i64 *r) {
    Inst *q = &s->inst[j];
    i64 v = -1;
    for (i64 k = 0; k < q->nrun; k++) {
        i64 u = q->running[k];
        if (!s->decoding[u]) continue;
        if (v < 0 || s->generated[u] < s->generated[v]
            || (s->generated[u] == s->generated[v] && s->io->L[u] > s->io->L[v]))
            v = u;
    }
    if (v < 0 || q->nrun <= 1) return -1;
    req_take_back(s, j, v);
    queue_push_back(s, q, v);
    i64 w = 0;
    for (i64 k = 0; k < q->nrun; k++) {
        if (q->running[k] != v) q->running[w++] = q->running[k];
        else if (k < *r) *r -= 1;
    }
    q->nrun = w;
    return v;
}

/* The decode batch: every decoding request feeds one token; then the new-token ratio moves. */
static void decode_batch(Sim *s, i64 j) {
    Inst *q = &s->inst[j];
    int retracted = 0;
    for (i64 r = 0; r < q->nrun;) {
        i64 i = q->running[r];
        if (!s->decoding[i]) {
            r++;
            continue;
        }
        int ok = 1;
        while (!req_grow(s, j, i, s->computed[i] + 1)) {
            if (s->failed) return;
            i64 v = retract(s, j, &r);
            if (v < 0) {
                ok = 0;
                break;
            }
            retracted = 1;
            if (v == i) {
                ok = 0;
                break;
            }
        }
        if (!ok) {
            if (s->io->status[i] == RUNNING) r++;  /* no room even alone: it waits (cannot happen for admitted requests) */
            continue;
        }
        s->new_tokens[i] = 1;
        r++;
    }
    const f64 *fcfg = s->io->fcfg;
    if (retracted) {
        i64 out_sum = 0, max_sum = 0;
        for (i64 k = 0; k < q->nrun; k++) {
            out_sum += s->generated[q->running[k]];
            max_sum += s->outputs[q->running[k]];
        }
        q->ratio = kv_fmin(((f64)out_sum + 20.0 * (f64)q->nrun) / ((f64)max_sum + 1.0), 1.0);
    } else {
        q->ratio = kv_fmax(q->ratio - fcfg[RATIO_DECAY], fcfg[RATIO_MIN]);
    }
}

void sglang_schedule(Sim *s, i64 j) {
    if (prefill_batch(s, j) == 0) decode_batch(s, j);
}
