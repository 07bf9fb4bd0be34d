/* The infinite cache's compiled operations (infinite.py): every block accessed once is resident. */
#include "../include/policy.h"

#define FIELDS(F) F(i8, seen) F(i64, meta)
#define SLOTS(S) S(SIZE)
KV_STATE(Infinite, FIELDS)
enum { SLOTS(KV_SLOT_ENUM) };

static inline int infinite_resident(Infinite *st, i64 b) { return st->seen[b] != 0; }

static inline void infinite_access(Infinite *st, i64 b, int holds) {
    (void)holds;
    if (st->seen[b] == 0) {
        st->seen[b] = 1;
        st->meta[SIZE] += 1;
    }
}

KV_BLOCK_POLICY(infinite, Infinite, KV_LAYOUT(FIELDS, SLOTS), infinite_resident, infinite_access)
