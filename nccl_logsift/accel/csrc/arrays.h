/* How the kernels receive their arguments: numpy arrays through the buffer protocol, checked for type and
 * shape once per call, and plain integers.
 *
 * Each kernel's Python entry point takes its arrays with take(), which asks for a C-contiguous buffer of
 * the given element type (or, for WORDS, the overlapping uint64 view that reads a byte string eight bytes
 * at a time: ByteView.words in io/lines.py) and records it in a Held, whose views release() gives back.
 * The loops then run on raw pointers without the GIL. Element types are checked by size and kind, so an
 * int32 array passed where int64 is expected is an error, not a misread.
 */
#ifndef LOGSIFT_ARRAYS_H
#define LOGSIFT_ARRAYS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER)
#include <intrin.h>
/* The number of trailing zero bits of a non-zero word. */
static inline int ctz64(uint64_t word) {
    unsigned long at;
    _BitScanForward64(&at, word);
    return (int)at;
}
#else
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the kernels read log bytes as little-endian words"
#endif
/* The number of trailing zero bits of a non-zero word. */
static inline int ctz64(uint64_t word) {
    return __builtin_ctzll(word);
}
#endif

#define MAX_ARRAYS 32

/* A loop over fewer elements than this keeps the GIL. Letting it go costs nothing, but taking it back while
 * another thread runs Python waits until that thread lets go: up to the switch interval (5 ms), for a loop of
 * microseconds. A scanning thread ran a handful of such loops a chunk. */
#define GIL_FREE_ELEMENTS 65536

/* The GIL let go for a loop over `elements` (NULL: kept); give the result to gil_back() after the loop. */
static inline PyThreadState *gil_off(int64_t elements) {
    return elements >= GIL_FREE_ELEMENTS ? PyEval_SaveThread() : NULL;
}

static inline void gil_back(PyThreadState *saved) {
    if (saved != NULL)
        PyEval_RestoreThread(saved);
}

typedef enum {
    BOOL,  /* numpy bool_ */
    U8,
    I32,
    U32,
    I64,
    U64,
    WORDS, /* a 1-D uint64 view with a stride of one byte: readable bytes = length + 7 */
} Kind;

typedef struct {
    void *data;
    Py_ssize_t length; /* elements along the first axis */
    Py_ssize_t width;  /* elements along the second axis (1 for a 1-D array) */
} Array;

typedef struct {
    Py_buffer views[MAX_ARRAYS];
    int count;
} Held;

static inline void release(Held *held) {
    for (int i = 0; i < held->count; i++)
        PyBuffer_Release(&held->views[i]);
    held->count = 0;
}

static inline const char *kind_name(Kind kind) {
    switch (kind) {
    case BOOL: return "bool";
    case U8: return "uint8";
    case I32: return "int32";
    case U32: return "uint32";
    case I64: return "int64";
    case U64: return "uint64";
    default: return "uint64 words";
    }
}

static inline bool kind_matches(const Py_buffer *view, Kind kind) {
    const char *format = view->format ? view->format : "B";
    if (*format == '@' || *format == '=' || *format == '<')
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return false;
    char code = format[0];
    switch (kind) {
    case BOOL: return code == '?' && view->itemsize == 1;
    case U8: return code == 'B' && view->itemsize == 1;
    case I32: return (code == 'i' || code == 'l') && view->itemsize == 4;
    case U32: return (code == 'I' || code == 'L') && view->itemsize == 4;
    case I64: return (code == 'l' || code == 'q') && view->itemsize == 8;
    default: return (code == 'L' || code == 'Q') && view->itemsize == 8;
    }
}

/* Take argument `name` as an array of `kind` with `ndim` dimensions (1 or 2), writable when asked. */
static inline bool take(Held *held, PyObject *object, const char *name, Kind kind, int ndim, bool writable, Array *out) {
    if (held->count == MAX_ARRAYS) {
        PyErr_SetString(PyExc_SystemError, "too many array arguments");
        return false;
    }
    Py_buffer *view = &held->views[held->count];
    int flags = (kind == WORDS ? PyBUF_STRIDES : PyBUF_C_CONTIGUOUS) | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %s%s array", name,
                     kind == WORDS ? "" : writable ? "writable, C-contiguous " : "C-contiguous ", kind_name(kind));
        return false;
    }
    held->count++;
    bool shaped = view->ndim == ndim && kind_matches(view, kind);
    if (shaped && kind == WORDS)
        shaped = view->strides[0] == 1;
    if (!shaped) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-D %s array (got %d-D, format %s)", name, ndim,
                     kind_name(kind), view->ndim, view->format ? view->format : "B");
        return false;
    }
    out->data = view->buf;
    out->length = view->shape[0];
    out->width = ndim == 2 ? view->shape[1] : 1;
    return true;
}

/* Take argument `name` as a Python integer (or anything with __index__, such as a numpy integer). */
static inline bool take_int(PyObject *object, const char *name, int64_t *out) {
    PyObject *index = PyNumber_Index(object);
    if (!index) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer", name);
        return false;
    }
    long long value = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred())
        return false;
    *out = value;
    return true;
}

/* As take_int, for a value between 0 and 2**64 - 1. */
static inline bool take_uint(PyObject *object, const char *name, uint64_t *out) {
    PyObject *index = PyNumber_Index(object);
    if (!index) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer", name);
        return false;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return false;
    *out = value;
    return true;
}

static inline bool arity(Py_ssize_t given, Py_ssize_t expected, const char *function) {
    if (given == expected)
        return true;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", function, expected, given);
    return false;
}

/* Arguments of the right types whose sizes do not fit together. */
static inline bool bad_arguments(const char *function, const char *what) {
    PyErr_Format(PyExc_ValueError, "%s(): %s", function, what);
    return false;
}

/* The little-endian word at byte `at` of `bytes` (any alignment). */
static inline uint64_t word_at(const uint8_t *bytes, int64_t at) {
    uint64_t word;
    memcpy(&word, bytes + at, sizeof word);
    return word;
}

#endif
