/* LRU's compiled table (the rules and the reference engine: lru.py; the state and access: lru.h). */
#include "lru.h"

KV_BLOCK_POLICY(lru, LRU, KV_LAYOUT(FIELDS, SLOTS), lru_resident, lru_access)
