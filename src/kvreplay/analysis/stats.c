/* The one pass of `kvreplay stats` (analysis/stats.py has the definitions and the plain-Python
 * reference, _pass_reference, line for line): per request, the infinite cache's hit blocks and
 * tokens and the prefix a trie of earlier requests shares with it; over all accesses, the
 * histogram of reuse distances (index 0: first uses; b + 1: log2 bucket b).
 *
 * The trie maps (node, block) -> child node, keyed node * key_stride + block (Python checks that
 * this fits an int64), in an open-addressing table that doubles when half full. It is the one
 * allocation here: its size follows the trie (one entry per distinct prefix), not the trace.
 * Scratch, zeroed by Python: tree (num_accesses + 1 entries), last (num_blocks entries: the
 * 1-based access time of each block's latest use, 0 = never).
 *
 * told (NULL: none) hears how many requests are done (include/progress.h).
 *
 * Returns the number of first uses, or -1 when the trie's table cannot be allocated. */
#include <stdlib.h>

#include "../include/fenwick.h"
#include "../include/progress.h"

typedef struct {
    i64 *keys; /* -1: empty */
    i64 *nodes;
    i64 cap; /* a power of two */
    i64 count;
} Trie;

static inline uint64_t trie_hash(i64 key) { /* splitmix64's finaliser */
    uint64_t z = (uint64_t)key + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int trie_alloc(Trie *t, i64 cap) {
    t->keys = malloc((size_t)cap * sizeof(i64));
    t->nodes = malloc((size_t)cap * sizeof(i64));
    if (t->keys == NULL || t->nodes == NULL) {
        free(t->keys);
        free(t->nodes);
        return -1;
    }
    for (i64 k = 0; k < cap; k++) t->keys[k] = -1;
    t->cap = cap;
    t->count = 0;
    return 0;
}

/* the slot of `key`: where it is, or the empty slot where it goes */
static inline i64 trie_slot(const Trie *t, i64 key) {
    i64 mask = t->cap - 1, s = (i64)(trie_hash(key) & (uint64_t)mask);
    while (t->keys[s] != -1 && t->keys[s] != key) s = (s + 1) & mask;
    return s;
}

static int trie_insert(Trie *t, i64 key, i64 node) {
    if (2 * (t->count + 1) > t->cap) {
        Trie bigger;
        if (trie_alloc(&bigger, 2 * t->cap) < 0) return -1;
        for (i64 k = 0; k < t->cap; k++) {
            if (t->keys[k] != -1) {
                i64 s = trie_slot(&bigger, t->keys[k]);
                bigger.keys[s] = t->keys[k];
                bigger.nodes[s] = t->nodes[k];
            }
        }
        bigger.count = t->count;
        free(t->keys);
        free(t->nodes);
        *t = bigger;
    }
    i64 s = trie_slot(t, key);
    t->keys[s] = key;
    t->nodes[s] = node;
    t->count += 1;
    return 0;
}

KV_EXPORT i64 kv_stats_pass(const i64 *offsets, i64 n, const i32 *blocks, const i64 *input_length, i64 block_size,
                            i64 *hit_tokens, i64 *hit_blocks, i64 *shared_blocks, i64 *reuse_hist, i64 key_stride,
                            i32 *tree, i64 *last, kv_progress told) {
    i64 accesses = offsets[n], marked = 0, t = 0, next_node = 1; /* node 0 is the root */
    Trie trie;
    if (trie_alloc(&trie, 1024) < 0) return -1;
    for (i64 i = 0; i < n; i++) {
        i64 start = offsets[i], end = offsets[i + 1], k = 0;
        while (start + k < end && last[blocks[start + k]] > 0) k++;
        hit_blocks[i] = k;
        hit_tokens[i] = kv_min(k * block_size, input_length[i]);
        /* the trie: follow the request's blocks while earlier requests had them, then add the rest */
        i64 node = 0, s = 0;
        int matching = 1;
        for (i64 j = start; j < end; j++) {
            i64 key = node * key_stride + blocks[j];
            if (matching) {
                i64 slot = trie_slot(&trie, key);
                if (trie.keys[slot] == key) {
                    node = trie.nodes[slot];
                    s++;
                    continue;
                }
                matching = 0;
            }
            if (trie_insert(&trie, key, next_node) < 0) {
                free(trie.keys);
                free(trie.nodes);
                return -1;
            }
            node = next_node++;
        }
        shared_blocks[i] = s;
        /* reuse distances: the distinct blocks used since this block's previous use */
        for (i64 j = start; j < end; j++) {
            i32 b = blocks[j];
            t += 1;
            i64 p = last[b];
            if (p == 0) {
                reuse_hist[0] += 1;
                marked += 1;
            } else {
                i64 d = marked - kv_fenwick_sum(tree, p), bucket = 0;
                while (d > 0) {
                    bucket += 1;
                    d >>= 1;
                }
                reuse_hist[bucket + 1] += 1;
                kv_fenwick_add(tree, accesses, p, -1);
            }
            kv_fenwick_add(tree, accesses, t, 1);
            last[b] = t;
        }
        kv_tell(told, i + 1, n);
    }
    free(trie.keys);
    free(trie.nodes);
    return reuse_hist[0];
}
