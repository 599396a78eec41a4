/* nccl_logsift.accel._kernels: the per-line and per-call loops, in C, run without the GIL.
 *
 * Each source file holds the loops of one Python module and a table of its entry points:
 *   split.c     io/split.py          the lines of a chunk
 *   collscan.c  parse/collscan.py    the COLL fast path and its table of distinct strings
 *   keymap.c    keymap.py            dense slots for 64-bit keys
 *   calls.c     parse/calls.py, resolve/progress.py   call signatures and keys, numbering
 *   digest.c    findings/digest.py   the collective digest
 */
#include "arrays.h"

extern PyMethodDef split_methods[], collscan_methods[], keymap_methods[], calls_methods[], digest_methods[];

static int add_functions(PyObject *module) {
    PyMethodDef *tables[] = {split_methods, collscan_methods, keymap_methods, calls_methods, digest_methods};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (PyModule_AddFunctions(module, tables[i]) < 0)
            return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, add_functions},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nccl_logsift.accel._kernels",
    .m_doc = "The per-line and per-call loops of nccl-logsift, in C, run without the GIL.",
    .m_size = 0,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    return PyModuleDef_Init(&module);
}
