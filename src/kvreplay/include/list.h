/* The one intrusive doubly linked list: nodes are indices, node x's neighbours are prev[x] and
 * next[x] (-1 for none), the list's ends live in *head and *tail (a slot of a meta array, one
 * bucket of a per-frequency array, a per-instance queue). Policies' recency orders, ghost and
 * free queues, the tiers' pools and the simulator's waiting queues all use it.
 *
 * KV_LIST(name, Node, End) defines name_unlink / name_append / name_prepend / name_pop_front for
 * index arrays of type Node and ends of type End.
 */
#ifndef KV_LIST_H
#define KV_LIST_H

#include "kv.h"

#define KV_LIST(name, Node, End)                                                               \
    /* Take node x out of its list (x must be in it) and clear its links. */                    \
    static inline void name##_unlink(Node *prev, Node *next, End *head, End *tail, i64 x) {     \
        i64 p = prev[x], n = next[x];                                                            \
        if (p >= 0) next[p] = (Node)n; else *head = (End)n;                                      \
        if (n >= 0) prev[n] = (Node)p; else *tail = (End)p;                                      \
        prev[x] = -1;                                                                            \
        next[x] = -1;                                                                            \
    }                                                                                            \
    /* Put node x (in no list) at the tail. */                                                   \
    static inline void name##_append(Node *prev, Node *next, End *head, End *tail, i64 x) {     \
        i64 t = *tail;                                                                           \
        prev[x] = (Node)t;                                                                       \
        next[x] = -1;                                                                            \
        if (t >= 0) next[t] = (Node)x; else *head = (End)x;                                      \
        *tail = (End)x;                                                                          \
    }                                                                                            \
    /* Put node x (in no list) at the head. */                                                   \
    static inline void name##_prepend(Node *prev, Node *next, End *head, End *tail, i64 x) {    \
        i64 h = *head;                                                                           \
        next[x] = (Node)h;                                                                       \
        prev[x] = -1;                                                                            \
        if (h >= 0) prev[h] = (Node)x; else *tail = (End)x;                                      \
        *head = (End)x;                                                                          \
    }                                                                                            \
    /* Take the head off (the list must not be empty) and return it. */                          \
    static inline i64 name##_pop_front(Node *prev, Node *next, End *head, End *tail) {           \
        i64 x = *head;                                                                           \
        name##_unlink(prev, next, head, tail, x);                                                \
        return x;                                                                                \
    }

/* Lists over i32 nodes with i64 ends (a policy's meta slots) or i32 ends (per-bucket arrays),
 * and over i64 nodes with i64 ends (requests). */
KV_LIST(kv_list, i32, i64)
KV_LIST(kv_list32, i32, i32)
KV_LIST(kv_list64, i64, i64)

#endif
