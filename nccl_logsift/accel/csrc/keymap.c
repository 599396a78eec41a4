/* The compiled passes of keymap.py's KeyMap: slots for a batch of keys, and the move to a bigger table. */
#include "keymap.h"

/* Fill slots[done:] with the slot of each key from keys[done]; a new key gets slot *count, which then
 * grows. Stops before a new key that a full table cannot take; returns how many keys are done. */
static int64_t ids_loop(KeyTable table, const uint64_t *keys, int64_t length, int64_t *count, int64_t *slots,
                        int64_t done) {
    int64_t i = done;
    for (; i < length; i++) {
        int64_t at = keymap_probe(table, keys[i]);
        if (table.slots[at] == EMPTY) {
            if (keymap_full(table, *count))
                break;
            table.keys[at] = keys[i];
            table.slots[at] = (*count)++;
        }
        slots[i] = table.slots[at];
    }
    return i;
}

/* keymap_ids(keys, slots, batch, count, out, done) -> (done, count) */
static PyObject *py_ids(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    KeyTable table;
    Array batch, out;
    int64_t count, done;
    PyObject *result = NULL;
    if (arity(n, 6, "keymap_ids") && take_table(&held, args[0], args[1], "keys", &table)
        && take(&held, args[2], "batch", U64, 1, false, &batch) && take_int(args[3], "count", &count)
        && take(&held, args[4], "out", I64, 1, true, &out) && take_int(args[5], "done", &done)
        && ((out.length >= batch.length && done >= 0) || bad_arguments("keymap_ids", "out is shorter than the batch"))) {
        PyThreadState *saved = gil_off(batch.length);
        done = ids_loop(table, batch.data, batch.length, &count, out.data, done);
        gil_back(saved);
        result = Py_BuildValue("LL", (long long)done, (long long)count);
    }
    release(&held);
    return result;
}

/* keymap_rehash(old_keys, old_slots, keys, slots): every key of the old table into the new one. */
static PyObject *py_rehash(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    KeyTable old, table;
    PyObject *result = NULL;
    if (arity(n, 4, "keymap_rehash") && take_table(&held, args[0], args[1], "old", &old)
        && take_table(&held, args[2], args[3], "new", &table)
        && (table.size >= old.size || bad_arguments("keymap_rehash", "the new table is smaller"))) {
        PyThreadState *saved = gil_off(old.size);
        for (int64_t i = 0; i < old.size; i++)
            if (old.slots[i] != EMPTY)
                keymap_find_or_add(table, old.keys[i], old.slots[i]);
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

/* keymap_fill(keys, slots, distinct): the distinct keys as slots 0, 1, 2, ... */
static PyObject *py_fill(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    KeyTable table;
    Array distinct;
    PyObject *result = NULL;
    if (arity(n, 3, "keymap_fill") && take_table(&held, args[0], args[1], "table", &table)
        && take(&held, args[2], "distinct", U64, 1, false, &distinct)
        && (2 * distinct.length <= table.size || bad_arguments("keymap_fill", "the table has no room for the keys"))) {
        const uint64_t *keys = distinct.data;
        PyThreadState *saved = gil_off(distinct.length);
        for (int64_t g = 0; g < distinct.length; g++)
            keymap_find_or_add(table, keys[g], g);
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

PyMethodDef keymap_methods[] = {
    {"keymap_ids", (PyCFunction)(void (*)(void))py_ids, METH_FASTCALL, "Slots of a batch of keys."},
    {"keymap_rehash", (PyCFunction)(void (*)(void))py_rehash, METH_FASTCALL, "A table's keys into a bigger one."},
    {"keymap_fill", (PyCFunction)(void (*)(void))py_fill, METH_FASTCALL, "Distinct keys as slots 0, 1, 2, ..."},
    {NULL, NULL, 0, NULL},
};
