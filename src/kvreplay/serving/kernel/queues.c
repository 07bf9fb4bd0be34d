/* The kernel's queues, below the loop and the schedulers that use them (sim.h declares them):
 * each instance's waiting queue, and the heap of transfers in flight. */
#include "../../include/list.h"
#include "sim.h"

/* ---- waiting queues: one list over the requests per instance (a request waits on at most one) ---- */

void queue_push_back(Sim *s, Inst *q, i64 i) {
    kv_list64_append(s->qprev, s->qnext, &q->qhead, &q->qtail, i);
    q->qlen += 1;
}

void queue_push_front(Sim *s, Inst *q, i64 i) {
    kv_list64_prepend(s->qprev, s->qnext, &q->qhead, &q->qtail, i);
    q->qlen += 1;
}

i64 queue_pop_front(Sim *s, Inst *q) {
    q->qlen -= 1;
    return kv_list64_pop_front(s->qprev, s->qnext, &q->qhead, &q->qtail);
}

/* ---- transfers in flight: a binary heap, the earliest arrival first, then the lowest request ---- */

static inline int heap_before(const Sim *s, i64 a, i64 b) {
    return s->heap_t[a] < s->heap_t[b] || (s->heap_t[a] == s->heap_t[b] && s->heap_i[a] < s->heap_i[b]);
}

static inline void heap_swap(Sim *s, i64 a, i64 b) {
    f64 t = s->heap_t[a];
    s->heap_t[a] = s->heap_t[b];
    s->heap_t[b] = t;
    i64 i = s->heap_i[a];
    s->heap_i[a] = s->heap_i[b];
    s->heap_i[b] = i;
}

void heap_push(Sim *s, f64 t, i64 i) {
    i64 k = s->heap_n++;
    s->heap_t[k] = t;
    s->heap_i[k] = i;
    while (k > 0) {
        i64 parent = (k - 1) / 2;
        if (heap_before(s, parent, k)) break;
        heap_swap(s, parent, k);
        k = parent;
    }
}

void heap_pop(Sim *s) {
    s->heap_n -= 1;
    s->heap_t[0] = s->heap_t[s->heap_n];
    s->heap_i[0] = s->heap_i[s->heap_n];
    for (i64 k = 0;;) {
        i64 a = 2 * k + 1, b = a + 1, c = a;
        if (a >= s->heap_n) break;
        if (b < s->heap_n && heap_before(s, b, a)) c = b;
        if (heap_before(s, k, c)) break;
        heap_swap(s, c, k);
        k = c;
    }
}
