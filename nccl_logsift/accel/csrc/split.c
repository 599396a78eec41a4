/* The lines of a chunk (io/split.py): where each starts and ends, and whether the chunk is ASCII.
 *
 * One pass reads the chunk as 64-bit words, four per step (SWAR: "SIMD within a register"). A word has a
 * newline where t = word ^ 0x0A0A... has a zero byte: (t - 0x0101...) & ~t & 0x8080... is non-zero exactly
 * when it has one (the borrow may flag bytes above a true zero too, so this says only whether). The steps
 * that have one (about one in six at ~200 bytes a line) find each newline with
 * ~(((t & 0x7F7F...) + 0x7F7F...) | t | 0x7F7F...), which sets the high bit of exactly the zero bytes. The
 * words are OR-ed together on the way: a chunk none of whose bytes has its high bit set is ASCII, hence
 * valid UTF-8, and its check can be skipped. The pass also says whether some byte is NUL (the caller then
 * counts the NULs inside lines; a pass of its own over the chunk cost ~1% of a COLL log's CPU). On x86-64
 * the same steps use SSE2 (SSE2_STEPS below). The last len % 32 bytes are read one at a time, so nothing
 * past the data is read.
 *
 * The newline positions go into an array the caller grows (split_newlines stops at a block whose every
 * byte could be a newline without room for it), and become line bounds in a second, short loop
 * (split_bounds): a line's text is what lies between two "\n", less what a terminal, an editor or a crash
 * leaves at its ends that no grammar can want: trailing blanks (" ", "\t", "\r": CRLF, and CR CR LF from a
 * tty's onlcr), U+FFFD at its end (a torn multi-byte character, repaired before the split) and runs of NUL
 * at either end (the padding a crashed node leaves in a file); split_bounds returns how many NUL bytes it
 * left out. The grammars' patterns end in "$", so one stray blank would cost the whole line.
 */
#include "arrays.h"

#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull
#define LOW7 0x7F7F7F7F7F7F7F7Full
#define NEWLINES 0x0A0A0A0A0A0A0A0Aull
#define STEP 32           /* bytes read per step of the main loop: four words */

/* On x86-64, a step is two 16-byte SSE2 compares (part of every x86-64 CPU): a mask of the newlines
 * and their positions, at about half the instructions of the four SWAR words. */
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define SSE2_STEPS 1
#else
#define SSE2_STEPS 0
#endif
#define BLOCK (1 << 14)   /* bytes scanned between checks that the newline positions have room */

/* Append the position of every zero byte of `flipped` (the word at `at` XOR-ed with newlines). */
static inline int64_t add_newlines(int64_t *newlines, int64_t count, uint64_t flipped, int64_t at) {
    uint64_t zeros = ~(((flipped & LOW7) + LOW7) | flipped | LOW7);
    while (zeros) {
        newlines[count++] = at + (ctz64(zeros) >> 3);
        zeros &= zeros - 1;
    }
    return count;
}

/* Scan data[at:] for newlines into newlines[*count:] (room for `room` in all), OR-ing every byte into
 * *high and setting *nul when one is NUL; returns where it stopped: the data's size, or the start of a
 * block there was no room for. */
static int64_t newlines_loop(const uint8_t *data, int64_t size, int64_t at, int64_t *newlines, int64_t room,
                             int64_t *count, uint64_t *high, bool *nul) {
    int64_t whole = size - size % STEP, n = *count;
    uint64_t seen = *high;
    bool zero = *nul;
    while (at < whole && n + BLOCK <= room) {
        int64_t stop = at + BLOCK < whole ? at + BLOCK : whole;
#if SSE2_STEPS
        const __m128i newline = _mm_set1_epi8('\n');
        __m128i ored = _mm_setzero_si128(), least = _mm_set1_epi8((char)0xFF);
        for (; at < stop; at += STEP) {
            __m128i low = _mm_loadu_si128((const __m128i *)(data + at));
            __m128i high16 = _mm_loadu_si128((const __m128i *)(data + at + 16));
            ored = _mm_or_si128(ored, _mm_or_si128(low, high16));
            least = _mm_min_epu8(least, _mm_min_epu8(low, high16));
            uint64_t hits = (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(low, newline))
                            | (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(high16, newline)) << 16;
            for (; hits; hits &= hits - 1)
                newlines[n++] = at + ctz64(hits);
        }
        /* The OR of the four words of every step, as the SWAR loop keeps it. */
        seen |= (uint64_t)_mm_cvtsi128_si64(ored) | (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(ored, ored));
        /* A NUL where the least byte of some lane is 0. */
        zero |= _mm_movemask_epi8(_mm_cmpeq_epi8(least, _mm_setzero_si128())) != 0;
#else
        for (; at < stop; at += STEP) {
            uint64_t w0 = word_at(data, at), w1 = word_at(data, at + 8), w2 = word_at(data, at + 16),
                     w3 = word_at(data, at + 24);
            seen |= w0 | w1 | w2 | w3;
            /* (w - 0x01...) & ~w & 0x80... is non-zero exactly when w has a zero byte. */
            zero |= (((w0 - ONES) & ~w0) | ((w1 - ONES) & ~w1) | ((w2 - ONES) & ~w2) | ((w3 - ONES) & ~w3)) & HIGH;
            uint64_t t0 = w0 ^ NEWLINES, t1 = w1 ^ NEWLINES, t2 = w2 ^ NEWLINES, t3 = w3 ^ NEWLINES;
            if ((((t0 - ONES) & ~t0) | ((t1 - ONES) & ~t1) | ((t2 - ONES) & ~t2) | ((t3 - ONES) & ~t3)) & HIGH) {
                n = add_newlines(newlines, n, t0, at);
                n = add_newlines(newlines, n, t1, at + 8);
                n = add_newlines(newlines, n, t2, at + 16);
                n = add_newlines(newlines, n, t3, at + 24);
            }
        }
#endif
    }
    if (at >= whole && n + STEP <= room) {
        for (; at < size; at++) {
            seen |= data[at];
            zero |= data[at] == 0;
            if (data[at] == '\n')
                newlines[n++] = at;
        }
    }
    *count = n;
    *high = seen;
    *nul = zero;
    return at;
}

/* split_newlines(data, newlines, at, count, high, nul) -> (at, count, high, nul) */
static PyObject *py_newlines(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, newlines;
    int64_t at, count, nul;
    uint64_t high;
    PyObject *result = NULL;
    if (arity(n, 6, "split_newlines") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "newlines", I64, 1, true, &newlines) && take_int(args[2], "at", &at)
        && take_int(args[3], "count", &count) && take_uint(args[4], "high", &high) && take_int(args[5], "nul", &nul)
        && ((at >= 0 && at % STEP == 0 && count >= 0 && count <= newlines.length)
            || bad_arguments("split_newlines", "at must be a multiple of 32 and count within newlines"))) {
        bool zero = nul != 0;
        Py_BEGIN_ALLOW_THREADS
        at = newlines_loop(data.data, data.length, at, newlines.data, newlines.length, &count, &high, &zero);
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("LLKN", (long long)at, (long long)count, (unsigned long long)high, PyBool_FromLong(zero));
    }
    release(&held);
    return result;
}

/* Line starts and ends from the positions of the newlines; `lines` is count, or count + 1 when the data
 * does not end with a newline. Returns the NUL bytes left out at the lines' ends. */
static int64_t bounds_loop(const uint8_t *data, int64_t size, const int64_t *newlines, int64_t count,
                           int64_t *starts, int64_t *ends) {
    int64_t after_last = count > 0 ? newlines[count - 1] + 1 : 0, lines = count + (after_last < size);
    int64_t start = 0, nul = 0;
    for (int64_t line = 0; line < lines; line++) {
        int64_t end = line < count ? newlines[line] : size, from = start, to = end;
        while (from < to && data[from] == 0)
            from++;
        nul += from - start;
        for (;;) {
            uint8_t last = to > from ? data[to - 1] : 0xFF;
            if (last == ' ' || last == '\t' || last == '\r' || last == 0) {
                nul += last == 0;
                to--;
            } else if (last == 0xBD && to - from >= 3 && data[to - 2] == 0xBF && data[to - 3] == 0xEF) {
                to -= 3;
            } else {
                break;
            }
        }
        starts[line] = from;
        ends[line] = to;
        start = end + 1;
    }
    return nul;
}

/* split_bounds(data, newlines, count, starts, ends) -> NUL bytes left out */
static PyObject *py_bounds(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, newlines, starts, ends;
    int64_t count;
    PyObject *result = NULL;
    if (arity(n, 5, "split_bounds") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "newlines", I64, 1, false, &newlines) && take_int(args[2], "count", &count)
        && take(&held, args[3], "starts", I64, 1, true, &starts) && take(&held, args[4], "ends", I64, 1, true, &ends)) {
        int64_t last = count > 0 && count <= newlines.length ? ((int64_t *)newlines.data)[count - 1] + 1 : 0;
        int64_t lines = count + (last < data.length ? 1 : 0);
        if (count < 0 || count > newlines.length || starts.length != lines || ends.length != lines) {
            bad_arguments("split_bounds", "starts and ends must have a place for each line");
        } else {
            int64_t nul;
            Py_BEGIN_ALLOW_THREADS
            nul = bounds_loop(data.data, data.length, newlines.data, count, starts.data, ends.data);
            Py_END_ALLOW_THREADS
            result = PyLong_FromLongLong(nul);
        }
    }
    release(&held);
    return result;
}

/* The bytes searched for a newline with the GIL held, before the rest is searched without it (arrays.h). */
#define NEAR_BYTES 4096

/* split_last_newline(data, start, stop) -> where the last "\n" of data[start:stop] is, or -1 */
static PyObject *py_last_newline(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data;
    int64_t start, stop;
    PyObject *result = NULL;
    if (arity(n, 3, "split_last_newline") && take(&held, args[0], "data", U8, 1, false, &data)
        && take_int(args[1], "start", &start) && take_int(args[2], "stop", &stop)
        && ((0 <= start && stop <= data.length) || bad_arguments("split_last_newline", "the range is outside the data"))) {
        const uint8_t *bytes = data.data;
        int64_t at = stop - 1, near = stop - NEAR_BYTES > start ? stop - NEAR_BYTES : start;
        while (at >= near && bytes[at] != '\n') /* a line's length from the end, mostly: the GIL kept */
            at--;
        if (at < near && at >= start) {
            Py_BEGIN_ALLOW_THREADS
            while (at >= start && bytes[at] != '\n')
                at--;
            Py_END_ALLOW_THREADS
        }
        result = PyLong_FromLongLong(at >= start ? at : -1);
    }
    release(&held);
    return result;
}

/* split_next_newline(data, start) -> where the first "\n" at or after start is, or -1 */
static PyObject *py_next_newline(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data;
    int64_t start;
    PyObject *result = NULL;
    if (arity(n, 2, "split_next_newline") && take(&held, args[0], "data", U8, 1, false, &data)
        && take_int(args[1], "start", &start) && (start >= 0 || bad_arguments("split_next_newline", "start is negative"))) {
        const uint8_t *found = NULL, *bytes = data.data;
        if (start < data.length) { /* a line's length from start, mostly: the GIL kept */
            int64_t near = data.length - start < NEAR_BYTES ? data.length - start : NEAR_BYTES;
            found = memchr(bytes + start, '\n', (size_t)near);
            if (found == NULL && start + near < data.length) {
                Py_BEGIN_ALLOW_THREADS
                found = memchr(bytes + start + near, '\n', (size_t)(data.length - start - near));
                Py_END_ALLOW_THREADS
            }
        }
        result = PyLong_FromLongLong(found ? found - (const uint8_t *)data.data : -1);
    }
    release(&held);
    return result;
}

/* The key of a line's text: equal texts have equal keys, and distinct ones collide with a chance of about
 * 2^-64 per pair. Each 8-byte little-endian word (the last one padded with zeros) is multiplied into the
 * state and rotated; the length and a final avalanche (MurmurHash3's 64-bit finaliser, whose constants
 * are public) make texts that differ in their trailing zero bytes or only in length differ.
 * parse/repeats.py keeps the keys of texts whose repeats it skips. */
static inline uint64_t text_key(const uint8_t *bytes, int64_t length) {
    const uint64_t odd = 0x9E3779B97F4A7C15ull;
    uint64_t state = 0x243F6A8885A308D3ull;
    int64_t at = 0;
    for (; at + 8 <= length; at += 8) {
        uint64_t word;
        memcpy(&word, bytes + at, 8);
        state = ((state ^ (word * odd)) << 27 | (state ^ (word * odd)) >> 37) * 0xC2B2AE3D27D4EB4Full;
    }
    if (at < length) {
        uint64_t word = 0;
        memcpy(&word, bytes + at, (size_t)(length - at));
        state = ((state ^ (word * odd)) << 27 | (state ^ (word * odd)) >> 37) * 0xC2B2AE3D27D4EB4Full;
    }
    state ^= (uint64_t)length;
    state ^= state >> 33;
    state *= 0xFF51AFD7ED558CCDull;
    state ^= state >> 33;
    state *= 0xC4CEB9FE1A85EC53ull;
    state ^= state >> 33;
    return state;
}

/* Whether `starts` and `ends` pair up and each line that `index` names is a range of `data`. */
static bool ranges_named(Array data, Array starts, Array ends, Array index) {
    const int64_t *start = starts.data, *end = ends.data, *at = index.data;
    bool ok = starts.length == ends.length;
    for (int64_t k = 0; ok && k < index.length; k++) {
        int64_t i = at[k];
        ok = 0 <= i && i < starts.length && 0 <= start[i] && start[i] <= end[i] && end[i] <= data.length;
    }
    return ok;
}

/* split_keys(data, starts, ends, index, keys): keys[k] = the key of data[starts[i]:ends[i]], i = index[k] */
static PyObject *py_keys(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, starts, ends, index, keys;
    PyObject *result = NULL;
    if (arity(n, 5, "split_keys") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "starts", I64, 1, false, &starts) && take(&held, args[2], "ends", I64, 1, false, &ends)
        && take(&held, args[3], "index", I64, 1, false, &index) && take(&held, args[4], "keys", U64, 1, true, &keys)) {
        const int64_t *start = starts.data, *end = ends.data, *at = index.data;
        const uint8_t *bytes = data.data;
        uint64_t *out = keys.data;
        if (keys.length != index.length || !ranges_named(data, starts, ends, index)) {
            bad_arguments("split_keys", "index, starts and ends must name ranges of the data, one key each");
        } else {
            PyThreadState *saved = gil_off(index.length);
            for (int64_t k = 0; k < index.length; k++)
                out[k] = text_key(bytes + start[at[k]], end[at[k]] - start[at[k]]);
            gil_back(saved);
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    release(&held);
    return result;
}

/* split_views(data, starts, lengths, views): the Arrow string view of each range data[start:start+length]
 * (io/lines.py ByteView.strings), one row of four uint32 per range: its length, then its bytes when they fit
 * in 12 (zero-padded), else their first four, buffer 0 and the offset `start`. Nothing past a range is read. */
static PyObject *py_views(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, starts, lengths, views;
    PyObject *result = NULL;
    if (arity(n, 4, "split_views") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "starts", I64, 1, false, &starts)
        && take(&held, args[2], "lengths", I64, 1, false, &lengths)
        && take(&held, args[3], "views", U32, 2, true, &views)) {
        const int64_t *start = starts.data, *length = lengths.data;
        bool ok = starts.length == lengths.length && views.length == starts.length && views.width == 4
                  && data.length <= INT32_MAX;
        for (int64_t k = 0; ok && k < starts.length; k++)
            ok = 0 <= start[k] && 0 <= length[k] && length[k] <= data.length - start[k];
        if (!ok) {
            bad_arguments("split_views", "starts and lengths must name ranges of the data, one row of 4 views each");
        } else {
            const uint8_t *bytes = data.data;
            uint32_t *out = views.data;
            PyThreadState *saved = gil_off(starts.length);
            for (int64_t k = 0; k < starts.length; k++, out += 4) {
                uint32_t size = (uint32_t)length[k];
                const uint8_t *at = bytes + start[k];
                out[0] = size;
                if (size <= 12) {
                    uint8_t inline_bytes[12] = {0};
                    memcpy(inline_bytes, at, size);
                    memcpy(out + 1, inline_bytes, 12);
                } else {
                    memcpy(out + 1, at, 4);
                    out[2] = 0;
                    out[3] = (uint32_t)start[k];
                }
            }
            gil_back(saved);
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    release(&held);
    return result;
}

/* How common a byte is in what lines say, from 0 (uppercase letters, punctuation) to 3 (the space): a needle
 * is looked for by its least common byte, not its first. Four of the blocking literals start with a space,
 * which a training print has a dozen of, each a memcmp (~350 ns a leftover line on mixed32). */
static inline int commonness(uint8_t byte) {
    if (byte == ' ')
        return 3;
    if (byte >= 'a' && byte <= 'z')
        return strchr("etaoinsrhl", byte) != NULL ? 2 : 1;
    return byte >= '0' && byte <= '9' ? 1 : 0;
}

/* Where in `needle` (`length` bytes, at least one) its least common byte is (the first such). */
static int64_t pivot_of(const uint8_t *needle, int64_t length) {
    int64_t pivot = 0;
    for (int64_t i = 1; i < length; i++)
        if (commonness(needle[i]) < commonness(needle[pivot]))
            pivot = i;
    return pivot;
}

/* Whether `needle` (`length` bytes, at least one; `pivot` its byte looked for) occurs in [at, end). */
static inline bool holds(const uint8_t *at, const uint8_t *end, const uint8_t *needle, int64_t length,
                         int64_t pivot) {
    int64_t size = end - at;
    if (size < length)
        return false;
    /* The needle starts at most at at + size - length, so its pivot byte is at most `pivot` past that. */
    const uint8_t *from = at + pivot, *last = at + (size - length) + pivot;
    while (from <= last) {
        const uint8_t *found = memchr(from, needle[pivot], (size_t)(last - from + 1));
        if (found == NULL)
            return false;
        if (memcmp(found - pivot, needle, (size_t)length) == 0)
            return true;
        from = found + 1;
    }
    return false;
}

/* split_marked(data, starts, ends, index, needles, offsets, marked): marked[k] = whether the line
 * data[starts[i]:ends[i]], i = index[k], holds one of the needles needles[offsets[j]:offsets[j+1]] (an empty
 * one is in every line). The scanning threads ask it of their leftover lines (parse/chunks.py), which are
 * valid UTF-8: a needle's bytes occur in a line's exactly where its characters do. */
static PyObject *py_marked(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, starts, ends, index, needles, offsets, marked;
    PyObject *result = NULL;
    if (arity(n, 7, "split_marked") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "starts", I64, 1, false, &starts) && take(&held, args[2], "ends", I64, 1, false, &ends)
        && take(&held, args[3], "index", I64, 1, false, &index) && take(&held, args[4], "needles", U8, 1, false, &needles)
        && take(&held, args[5], "offsets", I64, 1, false, &offsets)
        && take(&held, args[6], "marked", BOOL, 1, true, &marked)) {
        const int64_t *start = starts.data, *end = ends.data, *at = index.data, *offset = offsets.data;
        bool ok = marked.length == index.length && offsets.length >= 1 && offset[0] == 0
                  && offset[offsets.length - 1] == needles.length;
        for (int64_t j = 1; ok && j < offsets.length; j++)
            ok = offset[j - 1] <= offset[j];
        if (!ok || !ranges_named(data, starts, ends, index)) {
            bad_arguments("split_marked", "index, starts and ends must name ranges of the data, one mark each, and "
                                          "offsets the needles' bounds");
        } else {
            const uint8_t *bytes = data.data, *needle = needles.data;
            bool *out = marked.data;
            int64_t count = offsets.length - 1;
            int64_t *pivots = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof *pivots);
            if (pivots == NULL) {
                PyErr_NoMemory();
            } else {
                for (int64_t j = 0; j < count; j++)
                    pivots[j] = offset[j] < offset[j + 1] ? pivot_of(needle + offset[j], offset[j + 1] - offset[j]) : 0;
                PyThreadState *saved = gil_off(index.length);
                for (int64_t k = 0; k < index.length; k++) {
                    const uint8_t *line = bytes + start[at[k]], *stop = bytes + end[at[k]];
                    bool found = false;
                    for (int64_t j = 0; !found && j < count; j++)
                        found = offset[j] == offset[j + 1]
                                || holds(line, stop, needle + offset[j], offset[j + 1] - offset[j], pivots[j]);
                    out[k] = found;
                }
                gil_back(saved);
                PyMem_Free(pivots);
                Py_INCREF(Py_None);
                result = Py_None;
            }
        }
    }
    release(&held);
    return result;
}

PyMethodDef split_methods[] = {
    {"split_newlines", (PyCFunction)(void (*)(void))py_newlines, METH_FASTCALL, "Newline positions of a chunk."},
    {"split_bounds", (PyCFunction)(void (*)(void))py_bounds, METH_FASTCALL, "Line bounds from newline positions."},
    {"split_last_newline", (PyCFunction)(void (*)(void))py_last_newline, METH_FASTCALL, "The last newline of a range."},
    {"split_next_newline", (PyCFunction)(void (*)(void))py_next_newline, METH_FASTCALL, "The next newline from a place."},
    {"split_keys", (PyCFunction)(void (*)(void))py_keys, METH_FASTCALL, "A key for the text of each line."},
    {"split_views", (PyCFunction)(void (*)(void))py_views, METH_FASTCALL, "Arrow string views of byte ranges."},
    {"split_marked", (PyCFunction)(void (*)(void))py_marked, METH_FASTCALL, "Which lines hold one of some literals."},
    {NULL, NULL, 0, NULL},
};
