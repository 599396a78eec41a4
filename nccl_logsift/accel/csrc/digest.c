/* The loops of findings/digest.py's CollectiveDigest: a batch of calls folded into the per-instance
 * statistics and the open positions, the cut that forgets the lowest open positions, and which rows of
 * the window are still kept.
 *
 * The state is _State's numpy arrays, passed whole at every call and updated in place. What a loop makes
 * per call goes into arrays the caller allocates (room for every call of the batch, or for every
 * communicator), and the entry point returns how much of them is filled. The per-communicator scratch
 * arrays are allocated before a loop changes anything, so one that fails for want of memory leaves the
 * state as it was.
 */
#include <stdlib.h>

#include "keymap.h"

/* As digest.py's _POSITION_BITS: an open position's key packs (communicator slot, position) into 64
 * bits, so only the first 2**20 communicators have positions. */
#define POSITION_BITS 44
#define MAX_COMMS ((int64_t)1 << (64 - POSITION_BITS))

/* The columns of _State.aggregate, per open position (digest.py's _COMM to _OP_MAX). */
enum { COMM, CALLS, NRANKS, P2P, SIG_MIN, SIG_MAX, OP_MIN, OP_MAX, AGGREGATES };

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* The key of an open position: what _State.fold asks the open table for. */
static inline uint64_t open_key(int64_t comm, int64_t position) {
    return ((uint64_t)comm << POSITION_BITS) | (uint64_t)position;
}

/* Each instance's last calls (_State.ring and .pushed): ring[s * width + k] holds the serials of instance
 * s's last `width` calls, the next one going to place pushed[s] & (width - 1). */
typedef struct {
    int64_t *ring;
    int64_t *pushed;
    int64_t width; /* a power of two: the place is a mask, not a division */
    Py_ssize_t length;
} Rings;

/* The ring's oldest entry for instance `s`: the earliest of its last `width` calls, once it has had more. */
static inline int64_t oldest(Rings r, int64_t s) {
    return r.ring[s * r.width + (r.pushed[s] & (r.width - 1))];
}

/* Whether call `row` of instance `s` is among the log's `recent` last calls (of `total`) or the
 * instance's last `width`. */
static inline bool still_kept(Rings r, int64_t s, int64_t row, int64_t total, int64_t recent) {
    return row >= total - recent || r.pushed[s] <= r.width || row >= oldest(r, s);
}

/* _State's opCount statistics per instance slot. */
typedef struct {
    int64_t *comm_of; /* the instance's communicator slot, or -1 when it is on none */
    int64_t *calls;
    int64_t *last_opcount;
    int64_t *min_opcount;
    bool *has_opcount; /* whether the instance has had a call with an opCount yet */
    bool *steady;
} Stats;

/* _State's arrays per communicator slot. */
typedef struct {
    bool *diverged;
    uint64_t *hash;
} Comms;

/* The columns of a batch that digest_fold_calls reads. */
typedef struct {
    const int64_t *slot;
    const uint64_t *comm;
    const bool *in_comm;
    const int64_t *opcount;
    const bool *has_opcount;
    const int64_t *ordinal;
    int64_t n;
} Calls;

/* Instances, opCount statistics and each instance's last rows; then the position of every call (-1 when
 * it is on no communicator): its opCount where opCount counts the communicator's calls, else its ordinal.
 * `room`: how many communicators the per-communicator arrays hold. Fills new_members (the first row of
 * each new instance) and where; returns how many instances are new, or -1 when out of memory. */
static int64_t fold_calls_loop(Calls b, int64_t total, int64_t *instances, int64_t *communicators, int64_t room,
                               KeyTable table, Stats st, Rings r, Comms comms, int64_t *new_members, int64_t *where) {
    bool *usable = malloc(room > 0 ? room : 1);
    int64_t *most = malloc((room > 0 ? room : 1) * sizeof *most);
    if (!usable || !most) {
        free(usable);
        free(most);
        return -1;
    }
    int64_t n = b.n, added = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = b.slot[i];
        if (s == *instances) { /* numbering numbers instances in the order of their first call */
            ++*instances;
            new_members[added++] = i;
            int64_t c = -1;
            if (b.in_comm[i]) {
                c = keymap_find_or_add(table, b.comm[i], *communicators);
                if (c == *communicators) {
                    comms.diverged[c] = false;
                    comms.hash[c] = b.comm[i];
                    ++*communicators;
                }
            }
            st.comm_of[s] = c;
            st.calls[s] = 0;
            st.steady[s] = true;
            st.has_opcount[s] = false;
            r.pushed[s] = 0;
        }
        r.ring[s * r.width + (r.pushed[s] & (r.width - 1))] = total - n + i;
        r.pushed[s]++;
        if (st.comm_of[s] >= 0) {
            st.calls[s]++;
            if (b.has_opcount[i]) {
                if (st.has_opcount[s]) {
                    if (b.opcount[i] <= st.last_opcount[s])
                        st.steady[s] = false;
                    st.min_opcount[s] = min64(st.min_opcount[s], b.opcount[i]);
                } else {
                    st.min_opcount[s] = b.opcount[i];
                    st.has_opcount[s] = true;
                }
                st.last_opcount[s] = b.opcount[i];
            }
        }
    }
    /* Which communicators count positions by opCount (findings.progress.positioned, on the stats so far). */
    memset(usable, true, *communicators);
    memset(most, 0, *communicators * sizeof *most);
    for (int64_t s = 0; s < *instances; s++) {
        int64_t c = st.comm_of[s];
        if (c >= 0) {
            if (!st.steady[s] || (st.has_opcount[s] && st.min_opcount[s] > 1))
                usable[c] = false;
            most[c] = max64(most[c], st.calls[s]);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t c = st.comm_of[b.slot[i]];
        if (c < 0 || c >= MAX_COMMS)
            where[i] = -1;
        else
            where[i] = usable[c] && most[c] > 1 && b.has_opcount[i] ? b.opcount[i] : b.ordinal[i];
    }
    free(usable);
    free(most);
    return added;
}

/* _State.open's table and what it holds per open position. */
typedef struct {
    KeyTable table;
    int64_t *position;
    int64_t *aggregate; /* [p * AGGREGATES + column] */
    Py_ssize_t length;  /* of position and aggregate */
} Open;

/* Empty the open table, for the positions to be keyed again once they moved down (key_open). */
static void clear_open(Open open) {
    for (int64_t at = 0; at < open.table.size; at++)
        open.table.slots[at] = EMPTY;
}

/* Move open position `p` to slot `kept` (at most p: nothing still to be read is overwritten). */
static inline void move_open(Open open, int64_t p, int64_t kept) {
    int64_t *to = open.aggregate + kept * AGGREGATES;
    const int64_t *from = open.aggregate + p * AGGREGATES;
    open.position[kept] = open.position[p];
    for (int k = 0; k < AGGREGATES; k++)
        to[k] = from[k];
}

/* key_open sorts the keys into at most 2**BUCKET_BITS buckets of consecutive home places. */
#define BUCKET_BITS 11

/* How far a home place of a table of `size` places is shifted to give its bucket (key_open). */
static inline int bucket_shift(int64_t size) {
    int bits = 0;
    while (((int64_t)1 << bits) < size)
        bits++;
    return bits > BUCKET_BITS ? bits - BUCKET_BITS : 0;
}

/* Key the open positions 0 to kept - 1 (moved down already) in the emptied table, bucket by bucket of their
 * home places, each bucket's in slot order (`counts`: room for 2**BUCKET_BITS + 1; `records`: for 2 * kept).
 * A bucket's keys land in a few kB of the table: keyed in slot order, every position wrote a random place
 * of a table of tens of MB (a directory of four 250 MB per-rank files keyed 500,000 again at every batch,
 * most of the fold's time). */
static void key_open(Open open, int64_t kept, int shift, int64_t *counts, uint64_t *records) {
    uint64_t mask = (uint64_t)open.table.size - 1;
    int64_t buckets = open.table.size >> shift;
    for (int64_t b = 0; b <= buckets; b++)
        counts[b] = 0;
    for (int64_t k = 0; k < kept; k++)
        counts[(keymap_home(open_key(open.aggregate[k * AGGREGATES + COMM], open.position[k]), mask) >> shift) + 1]++;
    for (int64_t b = 0; b < buckets; b++)
        counts[b + 1] += counts[b];
    for (int64_t k = 0; k < kept; k++) {
        uint64_t key = open_key(open.aggregate[k * AGGREGATES + COMM], open.position[k]);
        int64_t at = counts[keymap_home(key, mask) >> shift]++;
        records[2 * at] = key;
        records[2 * at + 1] = (uint64_t)k;
    }
    for (int64_t i = 0; i < kept; i++)
        keymap_find_or_add(open.table, records[2 * i], (int64_t)records[2 * i + 1]);
}

/* The columns of a batch that digest_fold_positions reads. */
typedef struct {
    const int64_t *slot;
    const int64_t *at; /* the call's open position's slot, or -1 */
    const int64_t *where;
    const int64_t *nranks;
    const int64_t *sig;
    const int64_t *op;
    const bool *p2p;
    int64_t n;
} Placed;

/* Whether open position `a` stays open after a batch: not divergent (`split`) and awaiting members. */
static inline bool stays_open(const int64_t *a, bool split) {
    return !split && a[CALLS] < a[NRANKS];
}

/* Whether open position `a` is divergent (findings.progress.first_divergences: signatures differ, or both
 * sides of a point-to-point pair are the same op). */
static inline bool is_split(const int64_t *a) {
    return a[P2P] ? a[CALLS] == 2 && a[OP_MIN] == a[OP_MAX] : a[SIG_MIN] != a[SIG_MAX];
}

/* The value of rank k (0-based, ascending) among values[0..n), which it reorders. */
static int64_t select_rank(int64_t *values, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        /* Median of three as the pivot: a rank's positions come nearly in order. */
        int64_t mid = lo + (hi - lo) / 2, x = values[lo], y = values[mid], z = values[hi];
        int64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (values[i] < pivot)
                i++;
            while (values[j] > pivot)
                j--;
            if (i <= j) {
                int64_t t = values[i];
                values[i++] = values[j];
                values[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return values[k];
    }
    return values[k];
}

/* Fold every call into its open position (slots from `opened` on are new), find the divergent positions,
 * close the positions every member has called, and say which calls are kept. Of the positions still open,
 * at most `limit` stay: the highest, and of equal positions at the cut the later opened (per-rank files
 * open one rank's whole run at once). Fills window and keep (per call) and diverged ([comm hash, position]
 * of each newly divergent communicator), sets *still_open; returns how many communicators diverged, or -1
 * when out of memory. */
static int64_t fold_positions_loop(Placed b, int64_t opened, int64_t positions, int64_t communicators, int64_t total,
                                   int64_t recent, int64_t limit, Open open, const int64_t *comm_of, Rings r,
                                   Comms comms, bool *window, bool *keep, uint64_t *diverged, int64_t *still_open) {
    int64_t *first = malloc((communicators > 0 ? communicators : 1) * sizeof *first);
    if (!first)
        return -1;
    int64_t n = b.n, *position = open.position;
    for (int64_t i = 0; i < n; i++) {
        int64_t p = b.at[i];
        if (p < 0)
            continue;
        int64_t *a = open.aggregate + p * AGGREGATES;
        if (p == opened) { /* new positions come in order of first sight */
            opened++;
            position[p] = b.where[i];
            a[COMM] = comm_of[b.slot[i]];
            a[CALLS] = 0;
            a[NRANKS] = 0;
            a[P2P] = 1;
            a[SIG_MIN] = a[SIG_MAX] = b.sig[i];
            a[OP_MIN] = a[OP_MAX] = b.op[i];
        }
        a[CALLS]++;
        a[NRANKS] = max64(a[NRANKS], b.nranks[i]);
        if (!b.p2p[i])
            a[P2P] = 0;
        a[SIG_MIN] = min64(a[SIG_MIN], b.sig[i]);
        a[SIG_MAX] = max64(a[SIG_MAX], b.sig[i]);
        a[OP_MIN] = min64(a[OP_MIN], b.op[i]);
        a[OP_MAX] = max64(a[OP_MAX], b.op[i]);
    }
    /* The divergent positions, and how many stay open. */
    for (int64_t c = 0; c < communicators; c++)
        first[c] = -1;
    int64_t stay = 0;
    for (int64_t p = 0; p < positions; p++) {
        const int64_t *a = open.aggregate + p * AGGREGATES;
        int64_t c = a[COMM];
        bool split = is_split(a);
        if (split && !comms.diverged[c] && (first[c] < 0 || position[p] < first[c]))
            first[c] = position[p];
        stay += stays_open(a, split);
    }
    /* Past the limit, the lowest go: those below `cut`, and the first `skip` of those at it. */
    int64_t cut = INT64_MIN, skip = 0;
    if (stay > limit) {
        int64_t *values = malloc((stay > 0 ? stay : 1) * sizeof *values), m = 0, above = 0, at_cut = 0;
        if (!values) {
            free(first);
            return -1;
        }
        for (int64_t p = 0; p < positions; p++) {
            const int64_t *a = open.aggregate + p * AGGREGATES;
            if (stays_open(a, is_split(a)))
                values[m++] = position[p];
        }
        cut = select_rank(values, stay, stay - limit);
        for (int64_t k = 0; k < stay; k++) {
            above += values[k] > cut;
            at_cut += values[k] == cut;
        }
        skip = at_cut - (limit - above);
        free(values);
    }
    /* The positions that stay move down to slots 0, 1, 2, ... (never onto one still to be read) and the table
     * is rebuilt for them; when every position stays, slots and table are as they were. */
    int64_t kept = positions;
    if (stay < positions || stay > limit) {
        /* key_open's scratch, taken before the table is emptied (only a fold that rebuilds it needs it). */
        int64_t *counts = malloc((((int64_t)1 << BUCKET_BITS) + 1) * sizeof *counts);
        uint64_t *records = malloc(2 * (stay > 0 ? stay : 1) * sizeof *records);
        if (!counts || !records) {
            free(counts);
            free(records);
            free(first);
            return -1;
        }
        clear_open(open);
        kept = 0;
        for (int64_t p = 0; p < positions; p++) {
            const int64_t *a = open.aggregate + p * AGGREGATES;
            if (!stays_open(a, is_split(a)) || position[p] < cut)
                continue;
            if (position[p] == cut && skip > 0) {
                skip--;
                continue;
            }
            move_open(open, p, kept++);
        }
        key_open(open, kept, bucket_shift(open.table.size), counts, records);
        free(counts);
        free(records);
    }
    int64_t found = 0;
    for (int64_t c = 0; c < communicators; c++) {
        if (first[c] >= 0) {
            comms.diverged[c] = true;
            diverged[2 * found] = comms.hash[c];
            diverged[2 * found + 1] = (uint64_t)first[c];
            found++;
        }
    }
    /* What is kept: this batch's rows at a new divergence (and the position before it), and the rows still
     * among the most recent or their instance's last. */
    for (int64_t i = 0; i < n; i++) {
        int64_t s = b.slot[i], c = comm_of[s];
        keep[i] = c >= 0 && first[c] >= 0 && (b.where[i] == first[c] || b.where[i] == first[c] - 1);
        window[i] = still_kept(r, s, total - n + i, total, recent);
    }
    free(first);
    *still_open = kept;
    return found;
}

static void alive_loop(const int64_t *slot, const int64_t *row, int64_t n, int64_t total, int64_t recent, Rings r,
                       bool *alive) {
    for (int64_t i = 0; i < n; i++)
        alive[i] = still_kept(r, slot[i], row[i], total, recent);
}

static bool take_rings(Held *held, PyObject *ring_object, PyObject *pushed_object, Rings *out) {
    Array ring, pushed;
    if (!take(held, ring_object, "ring", I64, 2, true, &ring) || !take(held, pushed_object, "pushed", I64, 1, true, &pushed))
        return false;
    if (ring.length != pushed.length || ring.width < 1 || (ring.width & (ring.width - 1)))
        return bad_arguments("digest", "the ring must have a row per instance and a power-of-two width");
    *out = (Rings){ring.data, pushed.data, ring.width, ring.length};
    return true;
}

static bool take_open(Held *held, PyObject *const *args, Open *out) {
    Array position, aggregate;
    if (!take_table(held, args[0], args[1], "open", &out->table)
        || !take(held, args[2], "position", I64, 1, true, &position)
        || !take(held, args[3], "aggregate", I64, 2, true, &aggregate))
        return false;
    if (aggregate.length != position.length || aggregate.width != AGGREGATES)
        return bad_arguments("digest", "aggregate must have a row of 8 per position");
    out->position = position.data;
    out->aggregate = aggregate.data;
    out->length = position.length;
    return true;
}

/* digest_fold_calls(slot, comm, in_comm, opcount, has_opcount, ordinal, total, instances, communicators,
 *                   comm_keys, comm_slots, comm_of, calls, last_opcount, min_opcount, opcount_seen, steady,
 *                   ring, pushed, diverged, comm_hash, new_members, where)
 *     -> (new instances, instances, communicators)
 * The caller has made room in the per-instance arrays for every slot of the batch, and in the communicator
 * table and the per-communicator arrays for every communicator the batch can add. */
static PyObject *py_fold_calls(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array slot, comm, in_comm, opcount, has_opcount, ordinal, comm_of, calls, last, min, seen, steady, diverged, hash,
        new_members, where;
    int64_t total, instances, communicators;
    KeyTable table;
    Rings r;
    PyObject *result = NULL;
    if (arity(n, 23, "digest_fold_calls") && take(&held, args[0], "slot", I64, 1, false, &slot)
        && take(&held, args[1], "comm", U64, 1, false, &comm) && take(&held, args[2], "in_comm", BOOL, 1, false, &in_comm)
        && take(&held, args[3], "opcount", I64, 1, false, &opcount)
        && take(&held, args[4], "has_opcount", BOOL, 1, false, &has_opcount)
        && take(&held, args[5], "ordinal", I64, 1, false, &ordinal) && take_int(args[6], "total", &total)
        && take_int(args[7], "instances", &instances) && take_int(args[8], "communicators", &communicators)
        && take_table(&held, args[9], args[10], "comm_keys", &table)
        && take(&held, args[11], "comm_of", I64, 1, true, &comm_of) && take(&held, args[12], "calls", I64, 1, true, &calls)
        && take(&held, args[13], "last_opcount", I64, 1, true, &last)
        && take(&held, args[14], "min_opcount", I64, 1, true, &min)
        && take(&held, args[15], "opcount_seen", BOOL, 1, true, &seen)
        && take(&held, args[16], "steady", BOOL, 1, true, &steady) && take_rings(&held, args[17], args[18], &r)
        && take(&held, args[19], "diverged", BOOL, 1, true, &diverged) && take(&held, args[20], "comm_hash", U64, 1, true, &hash)
        && take(&held, args[21], "new_members", I64, 1, true, &new_members)
        && take(&held, args[22], "where", I64, 1, true, &where)) {
        Py_ssize_t m = slot.length, length = comm_of.length;
        if (comm.length != m || in_comm.length != m || opcount.length != m || has_opcount.length != m
            || ordinal.length != m || new_members.length != m || where.length != m)
            bad_arguments("digest_fold_calls", "the batch's columns and outputs must have the same length");
        else if (calls.length != length || last.length != length || min.length != length || seen.length != length
                 || steady.length != length || r.length != length || instances < 0 || instances > length)
            bad_arguments("digest_fold_calls", "the per-instance arrays must have the same length, and room for the instances");
        else if (diverged.length != hash.length || communicators < 0 || communicators > diverged.length)
            bad_arguments("digest_fold_calls", "the per-communicator arrays must have the same length, and room for the communicators");
        else {
            Calls batch = {slot.data, comm.data, in_comm.data, opcount.data, has_opcount.data, ordinal.data, m};
            Stats st = {comm_of.data, calls.data, last.data, min.data, seen.data, steady.data};
            Comms comms = {diverged.data, hash.data};
            int64_t added;
            Py_BEGIN_ALLOW_THREADS
            added = fold_calls_loop(batch, total, &instances, &communicators, diverged.length, table, st, r, comms,
                                    new_members.data, where.data);
            Py_END_ALLOW_THREADS
            if (added < 0)
                PyErr_NoMemory();
            else
                result = Py_BuildValue("LLL", (long long)added, (long long)instances, (long long)communicators);
        }
    }
    release(&held);
    return result;
}

/* digest_fold_positions(slot, at, where, opened, positions, nranks, sig, op, p2p, communicators, total, recent,
 *                       limit, open_keys, open_slots, position, aggregate, comm_of, ring, pushed, diverged_comm,
 *                       comm_hash, window, keep, diverged)
 *     -> (newly divergent communicators, positions still open)
 * `diverged` has a row of two for every communicator; at most `limit` (at least 1) positions stay open. */
static PyObject *py_fold_positions(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array slot, at, where, nranks, sig, op, p2p, comm_of, diverged_comm, hash, window, keep, diverged;
    int64_t opened, positions, communicators, total, recent, limit;
    Open open;
    Rings r;
    PyObject *result = NULL;
    if (arity(n, 25, "digest_fold_positions") && take(&held, args[0], "slot", I64, 1, false, &slot)
        && take(&held, args[1], "at", I64, 1, false, &at) && take(&held, args[2], "where", I64, 1, false, &where)
        && take_int(args[3], "opened", &opened) && take_int(args[4], "positions", &positions)
        && take(&held, args[5], "nranks", I64, 1, false, &nranks) && take(&held, args[6], "sig", I64, 1, false, &sig)
        && take(&held, args[7], "op", I64, 1, false, &op) && take(&held, args[8], "p2p", BOOL, 1, false, &p2p)
        && take_int(args[9], "communicators", &communicators) && take_int(args[10], "total", &total)
        && take_int(args[11], "recent", &recent) && take_int(args[12], "limit", &limit)
        && take_open(&held, args + 13, &open) && take(&held, args[17], "comm_of", I64, 1, false, &comm_of)
        && take_rings(&held, args[18], args[19], &r)
        && take(&held, args[20], "diverged_comm", BOOL, 1, true, &diverged_comm)
        && take(&held, args[21], "comm_hash", U64, 1, false, &hash)
        && take(&held, args[22], "window", BOOL, 1, true, &window) && take(&held, args[23], "keep", BOOL, 1, true, &keep)
        && take(&held, args[24], "diverged", U64, 2, true, &diverged)) {
        Py_ssize_t m = slot.length;
        if (at.length != m || where.length != m || nranks.length != m || sig.length != m || op.length != m
            || p2p.length != m || window.length != m || keep.length != m)
            bad_arguments("digest_fold_positions", "the batch's columns and outputs must have the same length");
        else if (opened < 0 || positions < opened || positions > open.length || 2 * positions > open.table.size)
            bad_arguments("digest_fold_positions", "the open table must hold the positions");
        else if (limit < 1)
            bad_arguments("digest_fold_positions", "at least one position must be allowed to stay open");
        else if (comm_of.length != r.length)
            bad_arguments("digest_fold_positions", "the per-instance arrays must have the same length");
        else if (diverged_comm.length != hash.length || communicators < 0 || communicators > diverged_comm.length
                 || diverged.width != 2 || diverged.length < communicators)
            bad_arguments("digest_fold_positions", "the per-communicator arrays must have room for the communicators");
        else {
            Placed batch = {slot.data, at.data, where.data, nranks.data, sig.data, op.data, p2p.data, m};
            Comms comms = {diverged_comm.data, hash.data};
            int64_t found, still_open = 0;
            Py_BEGIN_ALLOW_THREADS
            found = fold_positions_loop(batch, opened, positions, communicators, total, recent, limit, open,
                                        comm_of.data, r, comms, window.data, keep.data, diverged.data, &still_open);
            Py_END_ALLOW_THREADS
            if (found < 0)
                PyErr_NoMemory();
            else
                result = Py_BuildValue("LL", (long long)found, (long long)still_open);
        }
    }
    release(&held);
    return result;
}

/* digest_alive(slot, row, total, recent, ring, pushed, alive) */
static PyObject *py_alive(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array slot, row, alive;
    int64_t total, recent;
    Rings r;
    PyObject *result = NULL;
    if (arity(n, 7, "digest_alive") && take(&held, args[0], "slot", I64, 1, false, &slot)
        && take(&held, args[1], "row", I64, 1, false, &row) && take_int(args[2], "total", &total)
        && take_int(args[3], "recent", &recent) && take_rings(&held, args[4], args[5], &r)
        && take(&held, args[6], "alive", BOOL, 1, true, &alive)
        && ((row.length == slot.length && alive.length == slot.length)
            || bad_arguments("digest_alive", "slot, row and alive must have the same length"))) {
        PyThreadState *saved = gil_off(slot.length);
        alive_loop(slot.data, row.data, slot.length, total, recent, r, alive.data);
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

PyMethodDef digest_methods[] = {
    {"digest_fold_calls", (PyCFunction)(void (*)(void))py_fold_calls, METH_FASTCALL,
     "Instances, opCount statistics and the position of each call of a batch."},
    {"digest_fold_positions", (PyCFunction)(void (*)(void))py_fold_positions, METH_FASTCALL,
     "A batch's calls into the open positions; divergences and the rows kept."},
    {"digest_alive", (PyCFunction)(void (*)(void))py_alive, METH_FASTCALL, "Which rows of the window are still kept."},
    {NULL, NULL, 0, NULL},
};
