/* kvreplay._core as a Python module: it only carries the compiled core (loaded by native.py
 * through ctypes) and the hash of the C sources it was built from, so that a stale build in a
 * development tree is caught instead of run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "include/kv.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#ifndef KV_SOURCE_HASH
#define KV_SOURCE_HASH "unknown"
#endif

KV_EXPORT const char kv_source_hash[] = KV_SOURCE_HASH;

/* Process memory, glibc only (0 elsewhere). glibc serves an allocation under its mmap threshold
 * from its heap, and raises the threshold (to 32 MiB at most) each time it frees a larger mmapped
 * one: a loaded trace's parsed chunks and a replay's per-request arrays then stay resident after
 * they are freed, where no later array (mmapped, larger) reuses them. kv_fix_mmap_threshold gives
 * allocations of `bytes` and more pages of their own, returned on free (the threshold no longer
 * moves); kv_release_free_memory returns the heap's free pages (1 when it released some). */
KV_EXPORT i64 kv_fix_mmap_threshold(i64 bytes) {
#ifdef __GLIBC__
    return mallopt(M_MMAP_THRESHOLD, (int)bytes);
#else
    (void)bytes;
    return 0;
#endif
}

KV_EXPORT i64 kv_release_free_memory(void) {
#ifdef __GLIBC__
    return malloc_trim(0);
#else
    return 0;
#endif
}

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_core",
    .m_doc = "kvreplay's compiled core (C): policies, replay drivers and the serving simulator's loop. "
             "Python calls it through ctypes (kvreplay/native.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__core(void) {
    PyObject *m = PyModule_Create(&core_module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_HASH", KV_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
