/* How far a one-pass kernel has got (analysis/mrc.c, analysis/stats.c), told back to Python through
 * a ctypes callback (native.progress_callback, kvreplay.progress): requests done of the total, about
 * a hundred times a pass and once at its end. NULL: nobody is told. */
#ifndef KV_PROGRESS_H
#define KV_PROGRESS_H

#include "kv.h"

typedef void (*kv_progress)(i64 done, i64 total);

/* after request `done` (1-based) of `total`: every `total / 100` requests, and the last */
static inline void kv_tell(kv_progress told, i64 done, i64 total) {
    i64 step = total / 100 > 0 ? total / 100 : 1;
    if (told != NULL && (done % step == 0 || done == total)) told(done, total);
}

#endif
