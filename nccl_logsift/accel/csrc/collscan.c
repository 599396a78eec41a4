/* The COLL fast path (parse/collscan.py): which lines of a chunk are canonical COLL lines, and their fields;
 * the same for transport lines (parse/fasttransport.py, at the end); and the table of distinct byte strings
 * in which both number line prefixes, op names, transport tails and device brackets.
 *
 * One pass per line, forwards: the loop finds " NCCL INFO " and reads the message of INFO(NCCL_COLL,
 * "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream
 * %p", ...) (grammar §5.1) from there, literal by literal and value by value, to the line's end. A line is
 * taken only when every token has exactly the shape for which the general parser's `coll` pattern
 * (grammars/nccl/coll.toml) gives the same typed value; anything else is left to that parser.
 *
 * Bytes are read eight at a time through the chunk's words view (ByteView.words: the data followed by
 * padding). Every word is read at a position inside the line or string; it may run up to seven bytes past
 * its end, into the next line or the padding, and those bytes are masked off.
 *
 * The string table (collscan.py's ByteTable) holds its strings end to end in one byte array, with their
 * offsets and hashes; an open-addressing table of slots (linear probing, at most half full) maps a hash to
 * the ids that have it. A lookup that finds an equal hash compares the bytes too, so strings whose hashes
 * collide keep their own ids. The COLL scan adds the prefixes and op names it meets while the tables have
 * room (ByteTable.make_room leaves some before every chunk): a new per-rank file's thousands of lines share
 * a prefix or two, and numbering them afterwards (collscan_add) read each line's prefix again after the
 * chunk had left the cache (~75 ns a line). What it could not add is added afterwards, in the same order.
 */
#include "arrays.h"

/* Rows of the outputs: integers (int64), addresses (uint64, and their nil flags), ids (int32). */
enum { LINE, OPCOUNT, COUNT, DATATYPE, REDOP, ROOT, NRANKS, PREFIX_STOP, OP_START, OP_STOP, INTEGER_ROWS };
enum { COMM, SENDBUFF, RECVBUFF, STREAM, ADDRESS_ROWS };
enum { OP_ID, PREFIX_ID, ID_ROWS };

#define MAX_HEX_DIGITS 16 /* what a 64-bit %p / %lx prints; longer values do not fit the columns */
#define SHORT_DIGITS 18   /* up to 18 decimal digits are below 10**18, far from the int64 limit */
#define INT64_LIMIT 0x7FFFFFFFFFFFFFFFull
#define SAFE ((INT64_LIMIT - 9) / 10) /* below this, one more digit cannot pass int64 */

#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull
#define LOW7 0x7F7F7F7F7F7F7F7Full
#define SPACES 0x2020202020202020ull
#define ESCAPES 0x1B1B1B1B1B1B1B1Bull /* ESC starts an ANSI colour: left to the general parser */
#define ZEROS 0x3030303030303030ull   /* "00000000" */
#define NS 0x4E4E4E4E4E4E4E4Eull      /* "NNNNNNNN": where " NCCL INFO " may start */

/* A word keeping its first `length` bytes (1 to 8). */
static inline uint64_t mask(int64_t length) {
    return ~0ull >> (64 - 8 * length);
}

/* Eight bytes as a little-endian word, for literals the compiler folds into constants. */
#define WORD(a, b, c, d, e, f, g, h)                                                                            \
    ((uint64_t)(uint8_t)(a) | (uint64_t)(uint8_t)(b) << 8 | (uint64_t)(uint8_t)(c) << 16 | (uint64_t)(uint8_t)(d) << 24 \
     | (uint64_t)(uint8_t)(e) << 32 | (uint64_t)(uint8_t)(f) << 40 | (uint64_t)(uint8_t)(g) << 48                \
     | (uint64_t)(uint8_t)(h) << 56)
#define NCCL_IN WORD(' ', 'N', 'C', 'C', 'L', ' ', 'I', 'N') /* the space before NCCL starts the message */
#define FO_ WORD('F', 'O', ' ', 0, 0, 0, 0, 0)
#define NIL WORD('(', 'n', 'i', 'l', ')', 0, 0, 0)
#define HEX_PREFIX WORD('0', 'x', 0, 0, 0, 0, 0, 0)

/* The first `length` (at most 8) bytes of `text` as a little-endian word (the template's literals, made
 * once per scan: a word assembled in memory on every line would cost a store-forwarding stall). */
static inline uint64_t literal(const char *text, int64_t length) {
    uint64_t word = 0;
    memcpy(&word, text, length < 8 ? length : 8);
    return word;
}

/* The high bit of every byte of `word` that is zero (exactly those: no borrow between bytes). */
static inline uint64_t zero_bytes(uint64_t word) {
    return ~(((word & LOW7) + LOW7) | word | LOW7);
}

/* ------------------------------------------------------------------------------ the table of strings */

#define EMPTY_ID (-1)
#define STRINGS 0   /* state: how many strings, */
#define USED 1      /* the bytes they use, */
#define HASH_MASK 2 /* and the mask applied to every hash (all ones, except in tests that force collisions) */
#define SEED 0x243F6A8885A308D3ull
#define MULTIPLY 0x9E3779B97F4A7C15ull
#define FINISH 0xFF51AFD7ED558CCDull /* murmur3's fmix64: every bit of the hash depends on every input bit */

typedef struct {
    int32_t *slots;
    int64_t size; /* of slots: a power of two */
    uint64_t *hashes;
    int64_t *offsets;
    uint8_t *store;
    const uint8_t *store_words; /* the store's words view */
    int64_t *state;
    int64_t capacity; /* strings the hashes and offsets have room for */
    int64_t room;     /* bytes the store has room for (the padding after them excluded) */
} Strings;

/* Take a table as ByteTable.arrays gives it: (slots, hashes, offsets, store, store words, state). */
static bool take_strings(Held *held, PyObject *arrays, const char *name, Strings *out) {
    if (!PyTuple_Check(arrays) || PyTuple_GET_SIZE(arrays) != 6) {
        PyErr_Format(PyExc_TypeError, "%s: expected ByteTable.arrays (a tuple of six arrays)", name);
        return false;
    }
    Array slots, hashes, offsets, store, words, state;
    if (!take(held, PyTuple_GET_ITEM(arrays, 0), name, I32, 1, true, &slots)
        || !take(held, PyTuple_GET_ITEM(arrays, 1), name, U64, 1, true, &hashes)
        || !take(held, PyTuple_GET_ITEM(arrays, 2), name, I64, 1, true, &offsets)
        || !take(held, PyTuple_GET_ITEM(arrays, 3), name, U8, 1, true, &store)
        || !take(held, PyTuple_GET_ITEM(arrays, 4), name, WORDS, 1, false, &words)
        || !take(held, PyTuple_GET_ITEM(arrays, 5), name, I64, 1, true, &state))
        return false;
    int64_t *counts = state.data;
    bool fits = slots.length >= 2 && !(slots.length & (slots.length - 1)) && state.length == 3
                && offsets.length == hashes.length + 1 && counts[STRINGS] <= hashes.length
                && words.data == store.data && words.length + 7 >= store.length;
    if (!fits)
        return bad_arguments(name, "not the arrays of one ByteTable");
    *out = (Strings){slots.data, slots.length, hashes.data, offsets.data, store.data, words.data, state.data,
                     hashes.length, words.length - 1};
    return true;
}

static inline int64_t home(uint64_t hash, int64_t size) {
    return (int64_t)(hash >> 32) & (size - 1);
}

/* A 64-bit hash of the bytes [start, stop) read through `words`. */
static inline uint64_t hash_of(const uint8_t *words, int64_t start, int64_t stop) {
    uint64_t hash = SEED ^ (uint64_t)(stop - start);
    for (int64_t at = start; at < stop; at += 8) {
        uint64_t word = word_at(words, at);
        if (stop - at < 8)
            word &= mask(stop - at);
        hash = (hash ^ word) * MULTIPLY;
        hash ^= hash >> 32;
    }
    hash ^= hash >> 33;
    hash *= FINISH;
    return hash ^ (hash >> 33);
}

static inline bool same(const uint8_t *words, int64_t start, const uint8_t *other, int64_t other_start, int64_t length) {
    for (int64_t i = 0; i < length; i += 8) {
        uint64_t differ = word_at(words, start + i) ^ word_at(other, other_start + i);
        if (length - i < 8)
            differ &= mask(length - i);
        if (differ)
            return false;
    }
    return true;
}

/* The place in the slots of the bytes [start, stop) of `words` (hash `hash`): where their id is, or the
 * empty place where it would go. */
static inline int64_t probe(Strings table, const uint8_t *words, int64_t start, int64_t stop, uint64_t hash) {
    int64_t length = stop - start, slot = home(hash, table.size);
    for (;;) {
        int64_t known = table.slots[slot];
        if (known == EMPTY_ID)
            return slot;
        if (table.hashes[known] == hash && table.offsets[known + 1] - table.offsets[known] == length
            && same(words, start, table.store_words, table.offsets[known], length))
            return slot;
        slot = (slot + 1) & (table.size - 1);
    }
}

/* The id of the bytes [start, stop) read through `words`, or -1 when the table lacks them. */
static inline int32_t find(Strings table, const uint8_t *words, int64_t start, int64_t stop) {
    uint64_t hash = hash_of(words, start, stop) & (uint64_t)table.state[HASH_MASK];
    return table.slots[probe(table, words, start, stop, hash)];
}

/* The id of the bytes data[start:stop] (`words` is data's words view), added as the next id when the table
 * lacks them and has room for one more string (its slots at most half full); -1 when it lacks them and has
 * none. */
static inline int32_t find_or_add(Strings table, const uint8_t *data, const uint8_t *words, int64_t start,
                                  int64_t stop) {
    uint64_t hash = hash_of(words, start, stop) & (uint64_t)table.state[HASH_MASK];
    int64_t slot = probe(table, words, start, stop, hash);
    if (table.slots[slot] != EMPTY_ID)
        return table.slots[slot];
    int64_t known = table.state[STRINGS], at = table.state[USED], length = stop - start;
    if (2 * (known + 1) > table.size || known + 1 > table.capacity || at + length > table.room)
        return EMPTY_ID;
    memcpy(table.store + at, data + start, length);
    table.hashes[known] = hash;
    table.offsets[known + 1] = at + length;
    table.slots[slot] = (int32_t)known;
    table.state[STRINGS] = known + 1;
    table.state[USED] = at + length;
    return (int32_t)known;
}

/* Number the strings data[starts[row]:stops[row]] of the rows whose id is -1, in place; the table has room
 * for all (ByteTable.make_room). */
static void add_loop(Strings table, const uint8_t *data, const uint8_t *words, const int64_t *starts,
                     const int64_t *stops, int32_t *ids, int64_t rows) {
    for (int64_t row = 0; row < rows; row++)
        if (ids[row] < 0)
            ids[row] = find_or_add(table, data, words, starts[row], stops[row]);
}

/* ------------------------------------------------------------------------------------- the COLL lines */

typedef struct {
    const uint8_t *data, *words;
    int64_t *integers;
    uint64_t *addresses;
    bool *nil;
    int64_t width; /* of every output: the column of the j-th line taken is j */
} Outputs;

enum { HEX, POINTER, DECIMAL, SIGNED, BRACKETED }; /* kinds of value; BRACKETED: "16]" */

/* The message after the op name, as (literal, value) pairs: each literal starts at the space that ended
 * the token before it and is at most 16 bytes; each value runs to the next space, the last one to the end
 * of the line. */
static const struct {
    const char *text;
    int kind, row;
} TEMPLATE[] = {
    {" opCount ", HEX, OPCOUNT},   {" sendbuff ", POINTER, SENDBUFF}, {" recvbuff ", POINTER, RECVBUFF},
    {" count ", DECIMAL, COUNT},   {" datatype ", DECIMAL, DATATYPE}, {" op ", DECIMAL, REDOP},
    {" root ", SIGNED, ROOT},      {" comm ", POINTER, COMM},         {" [nranks=", BRACKETED, NRANKS},
    {" stream ", POINTER, STREAM},
};
#define FIELDS ((int)(sizeof TEMPLATE / sizeof *TEMPLATE))

/* A literal of the template as words: its first eight bytes and the rest. */
typedef struct {
    uint64_t head, tail;
    int64_t length;
} Literal;

/* Where the first space in [at, end) is, or end. */
static inline int64_t space(const uint8_t *words, int64_t at, int64_t end) {
    for (; at < end; at += 8) {
        uint64_t spaces = zero_bytes(word_at(words, at) ^ SPACES);
        if (spaces) {
            int64_t found = at + (ctz64(spaces) >> 3);
            return found < end ? found : end;
        }
    }
    return end;
}

static inline bool has_escape(const uint8_t *words, int64_t start, int64_t stop) {
    for (int64_t at = start; at < stop; at += 8) {
        uint64_t other = word_at(words, at) ^ ESCAPES;
        if (stop - at < 8)
            other |= ~mask(stop - at);
        if (zero_bytes(other))
            return true;
    }
    return false;
}

static inline bool letters(const uint8_t *data, int64_t start, int64_t stop) {
    for (int64_t at = start; at < stop; at++) {
        uint8_t byte = data[at] | 32; /* lowercase */
        if (byte < 'a' || byte > 'z')
            return false;
    }
    return true;
}

/* The first `length` (1 to 8) bytes of `word` as hex digits, all eight at once (SWAR); false when one is
 * not a lowercase hex digit. */
static inline bool hex8(uint64_t word, int64_t length, uint64_t *out) {
    /* Move the digits to the top (the last digit, least significant, into the last byte) and fill the
     * bytes freed at the start with leading "0"s. */
    int shift = 8 * (8 - (int)length);
    word = ((word & mask(length)) << shift) | (ZEROS & ((1ull << shift) - 1));
    /* Bytes below 0x80 in [0-9] or [a-f]: x + (0x80 - lo) has its high bit set iff x >= lo, and
     * x + (0x7f - hi) iff x > hi; neither carries into the next byte. */
    uint64_t digit = (word + ONES * (0x80 - '0')) & ~(word + ONES * (0x7F - '9'));
    uint64_t letter = (word + ONES * (0x80 - 'a')) & ~(word + ONES * (0x7F - 'f'));
    bool ok = (word & HIGH) == 0 && ((digit | letter) & HIGH) == HIGH;
    /* "0"-"9" → 0-9 and "a"-"f" → 1-6 + 9; then digits fold pairwise: 16·a + b, 256·ab + cd, ... */
    uint64_t value = (word & 0x0F0F0F0F0F0F0F0Full) + 9 * ((word >> 6) & ONES);
    value = (value * 16 + (value >> 8)) & 0x00FF00FF00FF00FFull;
    value = (value * 256 + (value >> 16)) & 0x0000FFFF0000FFFFull;
    value = (value * 65536 + (value >> 32)) & 0xFFFFFFFFull;
    *out = value;
    return ok;
}

/* Lowercase hex digits (1 to 16) as a uint64; false when not well formed. */
static inline bool hex(const uint8_t *words, int64_t start, int64_t stop, uint64_t *out) {
    int64_t length = stop - start;
    if (length < 1 || length > MAX_HEX_DIGITS)
        return false;
    if (length <= 8)
        return hex8(word_at(words, start), length, out);
    uint64_t high, low;
    bool ok = hex8(word_at(words, start), length - 8, &high);
    ok &= hex8(word_at(words, start + length - 8), 8, &low);
    *out = (high << 32) | low;
    return ok;
}

/* The first `length` (1 to 8) bytes of `word` as decimal digits, all eight at once (SWAR, as hex8). */
static inline bool decimal8(uint64_t word, int64_t length, uint64_t *out) {
    int shift = 8 * (8 - (int)length);
    word = ((word & mask(length)) << shift) | (ZEROS & ((1ull << shift) - 1));
    uint64_t digit = (word + ONES * (0x80 - '0')) & ~(word + ONES * (0x7F - '9'));
    bool ok = (word & HIGH) == 0 && (digit & HIGH) == HIGH;
    uint64_t value = word - ZEROS;
    value = (value * 10 + (value >> 8)) & 0x00FF00FF00FF00FFull;
    value = (value * 100 + (value >> 16)) & 0x0000FFFF0000FFFFull;
    value = (value * 10000 + (value >> 32)) & 0xFFFFFFFFull;
    *out = value;
    return ok;
}

/* 1 to 18 digits: up to 16 eight at a time (SWAR), more one at a time. */
static inline bool short_decimal(const uint8_t *data, const uint8_t *words, int64_t start, int64_t stop, uint64_t *out) {
    int64_t length = stop - start;
    if (length <= 8)
        return decimal8(word_at(words, start), length, out);
    if (length <= 16) {
        uint64_t high, low;
        bool ok = decimal8(word_at(words, start), length - 8, &high);
        ok &= decimal8(word_at(words, start + length - 8), 8, &low);
        *out = high * 100000000ull + low;
        return ok;
    }
    uint64_t value = 0;
    for (int64_t at = start; at < stop; at++) {
        uint64_t digit = (uint64_t)data[at] - '0'; /* bytes below "0" wrap around to large values */
        if (digit > 9)
            return false;
        value = value * 10 + digit;
    }
    *out = value;
    return true;
}

/* More than 18 digits (leading zeros, or a value near the int64 limit): one at a time, up to `limit`. */
static inline bool long_decimal(const uint8_t *data, int64_t start, int64_t stop, uint64_t limit, uint64_t *out) {
    uint64_t value = 0;
    for (int64_t at = start; at < stop; at++) {
        uint8_t byte = data[at];
        if (byte < '0' || byte > '9')
            return false;
        uint64_t digit = byte - '0';
        if (value > SAFE && value > (limit - digit) / 10)
            return false;
        value = value * 10 + digit;
    }
    *out = value;
    return true;
}

/* "-?[0-9]+" (the sign only when `is_signed`) as an int64; false when not well formed. Any number of
 * digits (leading zeros) is fine; a value beyond int64 is not (the general parser makes it null). ASCII
 * digits only: \d also matches other scripts' digits, which do not convert. */
static inline bool decimal(const uint8_t *data, const uint8_t *words, int64_t start, int64_t stop, bool is_signed,
                           int64_t *out) {
    bool negative = is_signed && stop - start >= 1 && data[start] == '-';
    if (negative)
        start++;
    if (stop - start < 1)
        return false;
    uint64_t value = 0;
    bool ok = stop - start <= SHORT_DIGITS ? short_decimal(data, words, start, stop, &value)
                                           : long_decimal(data, start, stop, INT64_LIMIT + negative, &value);
    if (!ok)
        return false;
    *out = negative ? -(int64_t)(value - 1) - 1 : (int64_t)value; /* -2**63 has no positive int64 */
    return true;
}

/* Read "AllReduce: opCount ... stream 0x..." from `at` to exactly `end` into `column` of the outputs;
 * false when any literal or value is not in its exact form. */
static inline bool read_message(Outputs out, const Literal *literals, int64_t at, int64_t end, int64_t column) {
    const uint8_t *data = out.data, *words = out.words;
    int64_t width = out.width;
    /* "AllReduce:": letters, then the colon. */
    int64_t stop = space(words, at, end), colon = stop - 1;
    if (colon <= at || data[colon] != ':' || !letters(data, at, colon))
        return false;
    out.integers[OP_STOP * width + column] = colon;
    at = stop;
    for (int k = 0; k < FIELDS; k++) {
        Literal expected = literals[k];
        if ((word_at(words, at) & mask(expected.length < 8 ? expected.length : 8)) != expected.head)
            return false;
        if (expected.length > 8 && (word_at(words, at + 8) & mask(expected.length - 8)) != expected.tail)
            return false;
        int64_t start = at + expected.length;
        at = space(words, start, end);
        int kind = TEMPLATE[k].kind, row = TEMPLATE[k].row;
        if (kind == HEX || kind == POINTER) {
            int64_t digits = start;
            bool is_nil = false;
            if (kind == POINTER) {
                if (at - start == 5 && (word_at(words, start) & mask(5)) == NIL)
                    is_nil = true;
                else if (at - start >= 3 && (word_at(words, start) & mask(2)) == HEX_PREFIX)
                    digits = start + 2;
                else
                    return false;
            }
            uint64_t value = 0;
            if (!is_nil && !hex(words, digits, at, &value))
                return false;
            if (kind == HEX) {
                if (value > INT64_LIMIT) /* %lx of a value beyond int64: the general parser makes it null */
                    return false;
                out.integers[row * width + column] = (int64_t)value;
            } else {
                if (is_nil && row == COMM) /* comm is never (nil) */
                    return false;
                out.addresses[row * width + column] = value;
                out.nil[row * width + column] = is_nil;
            }
        } else {
            int64_t digits_stop = at;
            if (kind == BRACKETED) {
                digits_stop--;
                if (digits_stop <= start || data[digits_stop] != ']')
                    return false;
            }
            int64_t number;
            if (!decimal(data, words, start, digits_stop, kind == SIGNED, &number))
                return false;
            out.integers[row * width + column] = number;
        }
    }
    return at == end;
}

/* Where the space before "NCCL INFO" is when the line from there to its end is one COLL message in its
 * exact form, its values read into `column` of the outputs (overwritten by the next line if this one is
 * not taken); -1 otherwise. The message is read forwards from each " NCCL INFO " of the line in turn: if
 * one is followed by the message to the end of the line, no other can be (the message ends the line). */
static inline int64_t message(Outputs out, const Literal *literals, int64_t start, int64_t end, int64_t column) {
    const uint8_t *words = out.words;
    for (int64_t at = start + 1; at + 10 < end; at += 8) { /* "N" of NCCL, with a space before it */
        for (uint64_t found = zero_bytes(word_at(words, at) ^ NS); found; found &= found - 1) {
            int64_t n = at + (ctz64(found) >> 3);
            if (n + 10 >= end)
                return -1;
            if (word_at(words, n - 1) == NCCL_IN && (word_at(words, n + 7) & mask(3)) == FO_
                && read_message(out, literals, n + 10, end, column))
                return n - 1;
        }
    }
    return -1;
}

/* Fill the outputs for each canonical COLL line; returns how many lines were taken. */
static int64_t scan_loop(Outputs out, const int64_t *starts, const int64_t *ends, int64_t lines, int64_t size,
                         Strings prefixes, Strings ops, int32_t *ids) {
    Literal literals[FIELDS];
    for (int k = 0; k < FIELDS; k++) {
        int64_t length = (int64_t)strlen(TEMPLATE[k].text);
        literals[k] = (Literal){literal(TEMPLATE[k].text, length),
                                length > 8 ? literal(TEMPLATE[k].text + 8, length - 8) : 0, length};
    }
    int64_t taken = 0, width = out.width;
    for (int64_t line = 0; line < lines; line++) {
        int64_t start = starts[line], end = ends[line];
        if (start < 0 || end > size)
            continue;
        int64_t at = message(out, literals, start, end, taken);
        /* Every byte of the message has been checked, so it holds no ESC; the prefix may. */
        if (at < 0 || has_escape(out.words, start, at))
            continue;
        int64_t op_start = at + 11, op_stop = out.integers[OP_STOP * width + taken];
        ids[PREFIX_ID * width + taken] = find_or_add(prefixes, out.data, out.words, start, at);
        ids[OP_ID * width + taken] = find_or_add(ops, out.data, out.words, op_start, op_stop);
        out.integers[PREFIX_STOP * width + taken] = at;
        out.integers[OP_START * width + taken] = op_start;
        out.integers[LINE * width + taken] = line;
        taken++;
    }
    return taken;
}

/* ------------------------------------------------------------------------------- the transport lines */

/* The message of a connection's transport line (grammar §4.1; grammars/nccl/transport.toml):
 *   (Channel|Ring) CHANNEL[/CONN] : FROM[[DEV]] -> TO[[DEV]]TAIL
 * where TAIL (" via P2P/CUMEM/read", " [receive] via NET/IB/0/GDRDMA", an RCCL " comm %p nRanks %02d"
 * suffix) runs to the end of the line. The scan reads the numbers and device brackets and numbers the tail
 * in a string table; the grammar reads each distinct tail once (parse/fasttransport.py), and says whether
 * lines with it are transport lines at all. Rows of the outputs: */
enum { T_LINE, T_CHANNEL, T_CONN, T_FROM, T_TO, T_PREFIX_STOP, T_TAIL_START, T_FROM_DEV_START, T_FROM_DEV_STOP,
       T_TO_DEV_START, T_TO_DEV_STOP, T_INTEGER_ROWS };
enum { T_PREFIX_ID, T_TAIL_ID, T_FROM_DEV_ID, T_TO_DEV_ID, T_ID_ROWS };
#define NO_VALUE (-1)   /* no /CONN, no device bracket: the general parser's null */
#define MAX_TAIL 256    /* longer tails are left to the general parser, not kept in the table */
#define CHANNEL_ WORD('C', 'h', 'a', 'n', 'n', 'e', 'l', ' ')
#define RING_ WORD('R', 'i', 'n', 'g', ' ', 0, 0, 0)
#define ARROW WORD(' ', '-', '>', ' ', 0, 0, 0, 0)
#define COLON WORD(' ', ':', ' ', 0, 0, 0, 0, 0)

/* Where the ASCII digits from `at` stop (before `end`). */
static inline int64_t digits_end(const uint8_t *data, int64_t at, int64_t end) {
    while (at < end && data[at] >= '0' && data[at] <= '9')
        at++;
    return at;
}

/* A number of 1 to SHORT_DIGITS ASCII digits at `*at`, its end into `*at`; false otherwise (more digits
 * than that are left to the general parser, which says whether they fit). */
static inline bool transport_number(const uint8_t *data, const uint8_t *words, int64_t *at, int64_t end, int64_t *out) {
    int64_t start = *at, stop = digits_end(data, start, end);
    uint64_t value;
    if (stop == start || stop - start > SHORT_DIGITS || !short_decimal(data, words, start, stop, &value))
        return false;
    *out = (int64_t)value;
    *at = stop;
    return true;
}

/* An optional "[hex]" at `*at` (lowercase hex digits, as the grammar's [0-9a-f]+): its digits' bounds, or
 * NO_VALUE when there is no bracket; false when a bracket is not well formed. */
static inline bool device(const uint8_t *data, int64_t *at, int64_t end, int64_t *start, int64_t *stop) {
    *start = *stop = NO_VALUE;
    if (*at >= end || data[*at] != '[')
        return true;
    int64_t first = *at + 1, last = first;
    while (last < end && ((data[last] >= '0' && data[last] <= '9') || (data[last] >= 'a' && data[last] <= 'f')))
        last++;
    if (last == first || last >= end || data[last] != ']')
        return false;
    *start = first;
    *stop = last;
    *at = last + 1;
    return true;
}

/* " : FROM[[DEV]]" or " -> TO[[DEV]]" at `*at`: the literal (`length` bytes), a rank and an optional device
 * bracket, read into rows `rank`, `dev_start` and `dev_stop` of `column`; its end into `*at`. */
static inline bool peer(const uint8_t *data, const uint8_t *words, int64_t *at, int64_t end, uint64_t literal_word,
                        int64_t length, int64_t *integers, int64_t width, int64_t column, int rank, int dev_start,
                        int dev_stop) {
    if (end - *at < length || (word_at(words, *at) & mask(length)) != literal_word)
        return false;
    *at += length;
    int64_t value;
    if (!transport_number(data, words, at, end, &value))
        return false;
    integers[rank * width + column] = value;
    return device(data, at, end, &integers[dev_start * width + column], &integers[dev_stop * width + column]);
}

/* Read the message at `at` (after " NCCL INFO ") to `end` into `column`; false when it is not of the form. */
static inline bool read_transport(const uint8_t *data, const uint8_t *words, int64_t at, int64_t end,
                                  int64_t *integers, int64_t width, int64_t column) {
    if (end - at >= 8 && word_at(words, at) == CHANNEL_)
        at += 8;
    else if (end - at >= 5 && (word_at(words, at) & mask(5)) == RING_)
        at += 5;
    else
        return false;
    int64_t value;
    if (!transport_number(data, words, &at, end, &value))
        return false;
    integers[T_CHANNEL * width + column] = value;
    integers[T_CONN * width + column] = NO_VALUE;
    if (at < end && data[at] == '/') {
        at++;
        if (!transport_number(data, words, &at, end, &value))
            return false;
        integers[T_CONN * width + column] = value;
    }
    if (!peer(data, words, &at, end, COLON, 3, integers, width, column, T_FROM, T_FROM_DEV_START, T_FROM_DEV_STOP)
        || !peer(data, words, &at, end, ARROW, 4, integers, width, column, T_TO, T_TO_DEV_START, T_TO_DEV_STOP))
        return false;
    /* The tail: a space first, then printable ASCII only (no ESC, no byte the grammar's text may hold
     * otherwise), to the end of the line. */
    if (at >= end || data[at] != ' ' || end - at > MAX_TAIL)
        return false;
    for (int64_t i = at; i < end; i++)
        if (data[i] < 0x20 || data[i] > 0x7E)
            return false;
    integers[T_TAIL_START * width + column] = at;
    return true;
}

/* The space before the first "NCCL INFO " of [start, end), or -1. */
static inline int64_t first_info(const uint8_t *words, int64_t start, int64_t end) {
    for (int64_t at = start + 1; at + 10 < end; at += 8) {
        for (uint64_t found = zero_bytes(word_at(words, at) ^ NS); found; found &= found - 1) {
            int64_t n = at + (ctz64(found) >> 3);
            if (n + 10 >= end)
                return -1;
            if (word_at(words, n - 1) == NCCL_IN && (word_at(words, n + 7) & mask(3)) == FO_)
                return n - 1;
        }
    }
    return -1;
}

/* Fill the outputs for each transport line among the lines `rows`; returns how many were taken. */
static int64_t transport_loop(const uint8_t *data, const uint8_t *words, const int64_t *starts, const int64_t *ends,
                              const int64_t *rows, int64_t count, int64_t lines, int64_t size, Strings prefixes,
                              Strings tails, Strings devs, int64_t *integers, int32_t *ids, int64_t width) {
    int64_t taken = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t line = rows[k];
        if (line < 0 || line >= lines)
            continue;
        int64_t start = starts[line], end = ends[line];
        if (start < 0 || end > size || end - start < 12)
            continue;
        /* The head is what precedes the first " NCCL INFO " (as the general parser cuts it) and holds no ESC. */
        int64_t at = first_info(words, start, end);
        if (at < 0 || !read_transport(data, words, at + 11, end, integers, width, taken) || has_escape(words, start, at))
            continue;
        int64_t tail = integers[T_TAIL_START * width + taken];
        ids[T_PREFIX_ID * width + taken] = find(prefixes, words, start, at);
        ids[T_TAIL_ID * width + taken] = find(tails, words, tail, end);
        int64_t from = integers[T_FROM_DEV_START * width + taken], to = integers[T_TO_DEV_START * width + taken];
        ids[T_FROM_DEV_ID * width + taken] =
            from < 0 ? NO_VALUE : find(devs, words, from, integers[T_FROM_DEV_STOP * width + taken]);
        ids[T_TO_DEV_ID * width + taken] =
            to < 0 ? NO_VALUE : find(devs, words, to, integers[T_TO_DEV_STOP * width + taken]);
        integers[T_PREFIX_STOP * width + taken] = at;
        integers[T_LINE * width + taken] = line;
        taken++;
    }
    return taken;
}

/* ---------------------------------------------------------------------------------- the entry points */

/* collscan_scan(data, words, starts, ends, prefixes, ops, integers, addresses, nil, ids) -> lines taken */
static PyObject *py_scan(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, words, starts, ends, integers, addresses, nil, ids;
    Strings prefixes, ops;
    PyObject *result = NULL;
    if (arity(n, 10, "collscan_scan") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "words", WORDS, 1, false, &words) && take(&held, args[2], "starts", I64, 1, false, &starts)
        && take(&held, args[3], "ends", I64, 1, false, &ends) && take_strings(&held, args[4], "prefixes", &prefixes)
        && take_strings(&held, args[5], "ops", &ops) && take(&held, args[6], "integers", I64, 2, true, &integers)
        && take(&held, args[7], "addresses", U64, 2, true, &addresses) && take(&held, args[8], "nil", BOOL, 2, true, &nil)
        && take(&held, args[9], "ids", I32, 2, true, &ids)) {
        int64_t lines = starts.length, width = integers.width;
        bool fits = ends.length == lines && integers.length == INTEGER_ROWS && width >= lines
                    && addresses.length == ADDRESS_ROWS && addresses.width == width && nil.length == ADDRESS_ROWS
                    && nil.width == width && ids.length == ID_ROWS && ids.width == width;
        if (!fits) {
            bad_arguments("collscan_scan", "the outputs must be collscan.outputs(len(starts))");
        } else if (words.data != data.data || words.length < data.length + 8) {
            result = PyLong_FromLong(0); /* not the data's words view with its padding: nothing is read */
        } else {
            Outputs out = {data.data, words.data, integers.data, addresses.data, nil.data, width};
            int64_t taken;
            Py_BEGIN_ALLOW_THREADS
            taken = scan_loop(out, starts.data, ends.data, lines, data.length, prefixes, ops, ids.data);
            Py_END_ALLOW_THREADS
            result = PyLong_FromLongLong(taken);
        }
    }
    release(&held);
    return result;
}

/* collscan_transports(data, words, starts, ends, rows, prefixes, tails, devs, integers, ids) -> lines taken:
 * the transport lines among the lines `rows` (int64 indices into starts/ends). */
static PyObject *py_transports(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array data, words, starts, ends, rows, integers, ids;
    Strings prefixes, tails, devs;
    PyObject *result = NULL;
    if (arity(n, 10, "collscan_transports") && take(&held, args[0], "data", U8, 1, false, &data)
        && take(&held, args[1], "words", WORDS, 1, false, &words) && take(&held, args[2], "starts", I64, 1, false, &starts)
        && take(&held, args[3], "ends", I64, 1, false, &ends) && take(&held, args[4], "rows", I64, 1, false, &rows)
        && take_strings(&held, args[5], "prefixes", &prefixes) && take_strings(&held, args[6], "tails", &tails)
        && take_strings(&held, args[7], "devs", &devs) && take(&held, args[8], "integers", I64, 2, true, &integers)
        && take(&held, args[9], "ids", I32, 2, true, &ids)) {
        int64_t count = rows.length, width = integers.width;
        bool fits = ends.length == starts.length && integers.length == T_INTEGER_ROWS && width >= count
                    && ids.length == T_ID_ROWS && ids.width == width;
        if (!fits) {
            bad_arguments("collscan_transports", "the outputs must be collscan.transport_outputs(len(rows))");
        } else if (words.data != data.data || words.length < data.length + 8) {
            result = PyLong_FromLong(0); /* not the data's words view with its padding: nothing is read */
        } else {
            int64_t taken;
            PyThreadState *saved = gil_off(count);
            taken = transport_loop(data.data, words.data, starts.data, ends.data, rows.data, count, starts.length,
                                   data.length, prefixes, tails, devs, integers.data, ids.data, width);
            gil_back(saved);
            result = PyLong_FromLongLong(taken);
        }
    }
    release(&held);
    return result;
}

/* Take the rows of strings of a table: data, its words view, starts and stops (int64), ids (int32). */
static bool take_rows(Held *held, PyObject *const *args, const char *function, Array *data, Array *words,
                      Array *starts, Array *stops, Array *ids) {
    if (!take(held, args[0], "data", U8, 1, false, data) || !take(held, args[1], "words", WORDS, 1, false, words)
        || !take(held, args[2], "starts", I64, 1, false, starts) || !take(held, args[3], "stops", I64, 1, false, stops)
        || !take(held, args[4], "ids", I32, 1, true, ids))
        return false;
    if (words->data != data->data || words->length < data->length + 8)
        return bad_arguments(function, "words must be the data's words view, with its padding");
    if (stops->length != starts->length || ids->length != starts->length)
        return bad_arguments(function, "starts, stops and ids must be as long");
    const int64_t *first = starts->data, *last = stops->data;
    for (int64_t row = 0; row < starts->length; row++)
        if (first[row] < 0 || last[row] < first[row] || last[row] > data->length)
            return bad_arguments(function, "a string is outside the data");
    return true;
}

/* collscan_find(table, data, words, starts, stops, ids): the id of each string data[start:stop] in the
 * table (ByteTable.arrays), -1 when the table lacks it. */
static PyObject *py_find(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Strings table;
    Array data, words, starts, stops, ids;
    PyObject *result = NULL;
    if (arity(n, 6, "collscan_find") && take_strings(&held, args[0], "table", &table)
        && take_rows(&held, args + 1, "collscan_find", &data, &words, &starts, &stops, &ids)) {
        const int64_t *first = starts.data, *last = stops.data;
        int32_t *out = ids.data;
        PyThreadState *saved = gil_off(starts.length);
        for (int64_t row = 0; row < starts.length; row++)
            out[row] = find(table, words.data, first[row], last[row]);
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

/* collscan_add(table, data, words, starts, stops, ids): number the strings of the rows whose id is -1, in
 * place (ByteTable.add has made room). */
static PyObject *py_add(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Strings table;
    Array data, words, starts, stops, ids;
    PyObject *result = NULL;
    if (arity(n, 6, "collscan_add") && take_strings(&held, args[0], "table", &table)
        && take_rows(&held, args + 1, "collscan_add", &data, &words, &starts, &stops, &ids)) {
        /* Room: every missing string may be new. */
        const int64_t *first = starts.data, *last = stops.data;
        const int32_t *known = ids.data;
        int64_t strings = table.state[STRINGS], used = table.state[USED];
        for (int64_t row = 0; row < starts.length; row++)
            if (known[row] < 0) {
                strings++;
                used += last[row] - first[row];
            }
        if (2 * strings > table.size || strings > table.capacity || used > table.room) {
            bad_arguments("collscan_add", "the table has no room for the strings (ByteTable.make_room)");
        } else {
            PyThreadState *saved = gil_off(starts.length);
            add_loop(table, data.data, words.data, starts.data, stops.data, ids.data, starts.length);
            gil_back(saved);
            result = Py_NewRef(Py_None);
        }
    }
    release(&held);
    return result;
}

/* collscan_rehash(slots, hashes, count): the ids of the first `count` strings into an empty slot table. */
static PyObject *py_rehash(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    Held held = {.count = 0};
    Array slots, hashes;
    int64_t count;
    PyObject *result = NULL;
    if (arity(n, 3, "collscan_rehash") && take(&held, args[0], "slots", I32, 1, true, &slots)
        && take(&held, args[1], "hashes", U64, 1, false, &hashes) && take_int(args[2], "count", &count)
        && ((count >= 0 && count <= hashes.length && 2 * count <= slots.length && slots.length >= 2
             && !(slots.length & (slots.length - 1)))
            || bad_arguments("collscan_rehash", "the slots must be a power of two, twice the strings"))) {
        int32_t *slot_of = slots.data;
        const uint64_t *hash = hashes.data;
        int64_t size = slots.length;
        PyThreadState *saved = gil_off(count);
        for (int64_t i = 0; i < count; i++) {
            int64_t slot = home(hash[i], size);
            while (slot_of[slot] != EMPTY_ID)
                slot = (slot + 1) & (size - 1);
            slot_of[slot] = (int32_t)i;
        }
        gil_back(saved);
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

PyMethodDef collscan_methods[] = {
    {"collscan_scan", (PyCFunction)(void (*)(void))py_scan, METH_FASTCALL, "The canonical COLL lines of a chunk."},
    {"collscan_transports", (PyCFunction)(void (*)(void))py_transports, METH_FASTCALL, "The transport lines of a chunk."},
    {"collscan_find", (PyCFunction)(void (*)(void))py_find, METH_FASTCALL, "The ids of byte strings in a table."},
    {"collscan_add", (PyCFunction)(void (*)(void))py_add, METH_FASTCALL, "Number the strings a lookup missed."},
    {"collscan_rehash", (PyCFunction)(void (*)(void))py_rehash, METH_FASTCALL, "Slots for a grown table."},
    {NULL, NULL, 0, NULL},
};
