/* kvreplay's compiled core: the basic types and how a state is laid out.
 *
 * Python owns every array (numpy); C code works in place on them. A state is a struct of
 * (pointer, length) pairs in the order its layout string lists them; Python builds that struct
 * (an int64 array: address, length, address, length, ...) by field name and dtype from the layout
 * (kvreplay/native.py), so a field added, removed or retyped on one side is caught at once.
 *
 * Slot arrays (a policy's meta counters, a config record) name their slots the same way: an
 * X-macro gives the C enum and the names Python reads, from one list.
 */
#ifndef KV_H
#define KV_H

#include <stdint.h>
#include <stddef.h>

typedef int8_t i8;
typedef int32_t i32;
typedef uint32_t u32;
typedef int64_t i64;
typedef double f64;

#define KV_EXPORT __attribute__((visibility("default")))
#define KV_LIKELY(x) __builtin_expect(!!(x), 1)
#define KV_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define KV_DTYPE_i8 "i1"
#define KV_DTYPE_i32 "i4"
#define KV_DTYPE_u32 "u4"
#define KV_DTYPE_i64 "i8"
#define KV_DTYPE_f64 "f8"

/* A field of a state: its array's first element and its length. */
#define KV_FIELD(type, name) type *name; i64 name##_n;
/* The same field in a layout string: " name:dtype". */
#define KV_FIELD_SPEC(type, name) " " #name ":" KV_DTYPE_##type
/* Slots of a slot array: an enum constant each, and " name" in a layout string. */
#define KV_SLOT_ENUM(name) name,
#define KV_SLOT_SPEC(name) " " #name

static inline i64 kv_min(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 kv_max(i64 a, i64 b) { return a > b ? a : b; }
static inline f64 kv_fmin(f64 a, f64 b) { return a < b ? a : b; }
static inline f64 kv_fmax(f64 a, f64 b) { return a > b ? a : b; }
/* ceil(a / b) for a >= 0, b > 0 */
static inline i64 kv_ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }
/* i % n for ring indices 0 <= i < 2n: a compare instead of a division. */
static inline i64 kv_wrap(i64 i, i64 n) { return i - n * (i >= n); }

#endif
