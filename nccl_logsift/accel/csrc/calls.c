/* The per-call loops of parse/calls.py and resolve/progress.py: each call's signature and (host, pid, comm)
 * key, and the numbering of calls into communicator instances with their ordinals.
 *
 * Numbering (progress.py's CollectiveNumbering) walks the batch's calls in line order. A call belongs to
 * the latest instance of its (host, pid, comm) whose init started before it. Each group of calls (one
 * (host, pid, comm)) remembers the instance of its last call and the span of lines [FROM, UNTIL) where
 * that instance is the latest start, so that the starts are searched only when a call leaves the span
 * (a new init of the same address) or the starts changed (EPOCH). The loop allocates nothing: the caller
 * has made room in the instance table for what the batch can add.
 */
#include "keymap.h"

/* calls_signatures(op, count, datatype, redop, root, out): a hash of each call's (op, count, datatype,
 * redop, root); equal calls, equal hashes. op is int32 (Names ids), the others int64. */
static PyObject *py_signatures(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array op, count, datatype, redop, root, out;
    PyObject *result = NULL;
    if (arity(n, 6, "calls_signatures") && take(&held, args[0], "op", I32, 1, false, &op)
        && take(&held, args[1], "count", I64, 1, false, &count) && take(&held, args[2], "datatype", I64, 1, false, &datatype)
        && take(&held, args[3], "redop", I64, 1, false, &redop) && take(&held, args[4], "root", I64, 1, false, &root)
        && take(&held, args[5], "out", I64, 1, true, &out)
        && ((count.length == op.length && datatype.length == op.length && redop.length == op.length
             && root.length == op.length && out.length == op.length)
            || bad_arguments("calls_signatures", "the columns must be as long"))) {
        const int32_t *o = op.data;
        const int64_t *c = count.data, *d = datatype.data, *r = redop.data, *t = root.data;
        int64_t *signature = out.data;
        PyThreadState *saved = gil_off(op.length);
        for (int64_t i = 0; i < op.length; i++) {
            uint64_t h = mix((uint64_t)(int64_t)o[i], (uint64_t)c[i]);
            h = mix(h, (uint64_t)d[i]);
            h = mix(h, (uint64_t)r[i]);
            signature[i] = (int64_t)mix(h, (uint64_t)t[i]);
        }
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

/* calls_instance_keys(process, comm, out): the (host, pid, comm) key of each call or instance start. */
static PyObject *py_instance_keys(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array process, comm, out;
    PyObject *result = NULL;
    if (arity(n, 3, "calls_instance_keys") && take(&held, args[0], "process", U64, 1, false, &process)
        && take(&held, args[1], "comm", U64, 1, false, &comm) && take(&held, args[2], "out", U64, 1, true, &out)
        && ((comm.length == process.length && out.length == process.length)
            || bad_arguments("calls_instance_keys", "the columns must be as long"))) {
        const uint64_t *p = process.data, *c = comm.data;
        uint64_t *key = out.data;
        PyThreadState *saved = gil_off(process.length);
        for (int64_t i = 0; i < process.length; i++)
            key[i] = mix(p[i], c[i]);
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

/* calls_ascending(seq) -> whether the int64 values never decrease. */
static PyObject *py_ascending(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array seq;
    PyObject *result = NULL;
    if (arity(n, 1, "calls_ascending") && take(&held, args[0], "seq", I64, 1, false, &seq)) {
        const int64_t *s = seq.data;
        int64_t i = 1;
        PyThreadState *saved = gil_off(seq.length);
        while (i < seq.length && s[i] >= s[i - 1])
            i++;
        gil_back(saved);
        result = PyBool_FromLong(i >= seq.length);
    }
    release(&held);
    return result;
}

/* ------------------------------------------------------------------------------------------ numbering */

/* What numbering remembers per group (a row of `group`): the version of the starts its instance was found
 * in (0 for never), the start's index, the span [FROM, UNTIL) of lines where it is the latest start, the
 * instance's slot and its key. */
enum { EPOCH, START, FROM, UNTIL, SLOT, INSTANCE, GROUP_FIELDS };
#define ORPHAN 0x6A09E667F3BCC909ull /* mixed into the (host, pid, comm) key of calls without an init */

typedef struct { /* the instance starts, grouped by (host, pid, comm) and sorted by start within a group */
    KeyTable groups;            /* (host, pid, comm) key → its group's index in lo and hi */
    const int64_t *lo, *hi;     /* per group: the range of its starts */
    const int64_t *seq;         /* per start: the line it is on */
    const uint64_t *instance;   /* per start: its instance's key */
    const int32_t *generation;  /* per start, and one more entry (the last) for a call of no start */
    const int64_t *rank;
    const int32_t *uid;
    int64_t count;              /* starts */
} Starts;

typedef struct { /* the NUMBERED columns (calls.py) */
    uint64_t *instance;
    int64_t *slot, *ordinal;
    int32_t *generation;
    int64_t *rank;
    int32_t *uid;
} Numbered;

/* Number the calls in line order (`order`); returns how many instances are counted, or -1 when the table
 * of instances (or next_ordinal, `room` long) has no room for a new one. */
static int64_t number_loop(const uint64_t *keys, const int64_t *group_of, const int64_t *seq, const int64_t *order,
                           int64_t calls, int64_t epoch, Starts starts, KeyTable counts, int64_t instances,
                           int64_t *next_ordinal, int64_t room, int64_t *group, Numbered out) {
    for (int64_t k = 0; k < calls; k++) {
        int64_t i = order[k];
        int64_t *g = group + group_of[i] * GROUP_FIELDS;
        if (g[EPOCH] != epoch || !(g[FROM] <= seq[i] && seq[i] < g[UNTIL])) {
            /* The latest start at or before the call (usually the only one), and until when it stays so. */
            int64_t at = -1, since = INT64_MIN, until = INT64_MAX;
            int64_t found = keymap_find(starts.groups, keys[i]);
            if (found >= 0) {
                int64_t j = starts.hi[found] - 1;
                while (j >= starts.lo[found] && starts.seq[j] > seq[i])
                    until = starts.seq[j--];
                if (j >= starts.lo[found]) {
                    at = j;
                    since = starts.seq[j];
                }
            }
            uint64_t this = at >= 0 ? starts.instance[at] : keys[i] ^ ORPHAN;
            int64_t place = keymap_probe(counts, this);
            if (counts.slots[place] == EMPTY) {
                if (keymap_full(counts, instances) || instances >= room)
                    return -1;
                counts.keys[place] = this;
                counts.slots[place] = instances;
                next_ordinal[instances++] = 0;
            }
            int64_t slot = counts.slots[place];
            g[EPOCH] = epoch;
            g[START] = at;
            g[FROM] = since;
            g[UNTIL] = until;
            g[SLOT] = slot;
            g[INSTANCE] = (int64_t)this;
        }
        int64_t at = g[START] >= 0 ? g[START] : starts.count; /* none: the entry after the starts */
        int64_t slot = g[SLOT];
        out.instance[i] = (uint64_t)g[INSTANCE];
        out.slot[i] = slot;
        out.ordinal[i] = next_ordinal[slot]++;
        out.generation[i] = starts.generation[at];
        out.rank[i] = starts.rank[at];
        out.uid[i] = starts.uid[at];
    }
    return instances;
}

/* calls_number(keys, group_of, seq, order, epoch, start_keys, start_slots, lo, hi, start_seq, start_instance,
 *              start_generation, start_rank, start_uid, count_keys, count_slots, instances, next_ordinal,
 *              group, instance, slot, ordinal, generation, rank, uid) -> instances counted */
static PyObject *py_number(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array keys, group_of, seq, order, lo, hi, start_seq, start_instance, start_generation, start_rank, start_uid;
    Array next_ordinal, group, instance, slot, ordinal, generation, rank, uid;
    KeyTable start_groups, counts;
    int64_t epoch, instances;
    PyObject *result = NULL;
    if (!arity(n, 25, "calls_number") || !take(&held, args[0], "keys", U64, 1, false, &keys)
        || !take(&held, args[1], "group_of", I64, 1, false, &group_of) || !take(&held, args[2], "seq", I64, 1, false, &seq)
        || !take(&held, args[3], "order", I64, 1, false, &order) || !take_int(args[4], "epoch", &epoch)
        || !take_table(&held, args[5], args[6], "start_keys", &start_groups)
        || !take(&held, args[7], "lo", I64, 1, false, &lo) || !take(&held, args[8], "hi", I64, 1, false, &hi)
        || !take(&held, args[9], "start_seq", I64, 1, false, &start_seq)
        || !take(&held, args[10], "start_instance", U64, 1, false, &start_instance)
        || !take(&held, args[11], "start_generation", I32, 1, false, &start_generation)
        || !take(&held, args[12], "start_rank", I64, 1, false, &start_rank)
        || !take(&held, args[13], "start_uid", I32, 1, false, &start_uid)
        || !take_table(&held, args[14], args[15], "count_keys", &counts) || !take_int(args[16], "instances", &instances)
        || !take(&held, args[17], "next_ordinal", I64, 1, true, &next_ordinal)
        || !take(&held, args[18], "group", I64, 2, true, &group)
        || !take(&held, args[19], "instance", U64, 1, true, &instance) || !take(&held, args[20], "slot", I64, 1, true, &slot)
        || !take(&held, args[21], "ordinal", I64, 1, true, &ordinal)
        || !take(&held, args[22], "generation", I32, 1, true, &generation)
        || !take(&held, args[23], "rank", I64, 1, true, &rank) || !take(&held, args[24], "uid", I32, 1, true, &uid))
        goto end;
    int64_t calls = keys.length, starts_count = start_seq.length;
    bool fits = group_of.length == calls && seq.length == calls && order.length == calls && instance.length == calls
                && slot.length == calls && ordinal.length == calls && generation.length == calls
                && rank.length == calls && uid.length == calls && hi.length == lo.length
                && start_instance.length == starts_count && start_generation.length == starts_count + 1
                && start_rank.length == starts_count + 1 && start_uid.length == starts_count + 1
                && group.width == GROUP_FIELDS;
    if (!fits) {
        bad_arguments("calls_number", "the columns of the calls, of the starts or of the groups differ in length");
        goto end;
    }
    Starts starts = {start_groups, lo.data, hi.data, start_seq.data, start_instance.data, start_generation.data,
                     start_rank.data, start_uid.data, starts_count};
    Numbered out = {instance.data, slot.data, ordinal.data, generation.data, rank.data, uid.data};
    Py_BEGIN_ALLOW_THREADS
    instances = number_loop(keys.data, group_of.data, seq.data, order.data, calls, epoch, starts, counts, instances,
                            next_ordinal.data, next_ordinal.length, group.data, out);
    Py_END_ALLOW_THREADS
    if (instances < 0) /* the caller reserves an instance per start and one per group without a start */
        bad_arguments("calls_number", "the instance table has no room for the batch");
    else
        result = PyLong_FromLongLong(instances);
end:
    release(&held);
    return result;
}

PyMethodDef calls_methods[] = {
    {"calls_signatures", (PyCFunction)(void (*)(void))py_signatures, METH_FASTCALL, "Each call's signature hash."},
    {"calls_instance_keys", (PyCFunction)(void (*)(void))py_instance_keys, METH_FASTCALL, "Each call's (host, pid, comm) key."},
    {"calls_ascending", (PyCFunction)(void (*)(void))py_ascending, METH_FASTCALL, "Whether a column never decreases."},
    {"calls_number", (PyCFunction)(void (*)(void))py_number, METH_FASTCALL, "Number calls into instances."},
    {NULL, NULL, 0, NULL},
};
