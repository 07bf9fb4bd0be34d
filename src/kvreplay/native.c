/* kvreplay._core as a Python module: it only carries the compiled core (loaded by native.py
 * through ctypes) and the hash of the C sources it was built from, so that a stale build in a
 * development tree is caught instead of run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "include/kv.h"

#ifndef KV_SOURCE_HASH
#define KV_SOURCE_HASH "unknown"
#endif

KV_EXPORT const char kv_source_hash[] = KV_SOURCE_HASH;

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
