/* Dense slots for 64-bit keys (keymap.py's KeyMap): an open-addressing table, linear probing, power-of-two
 * capacity, at most half full, held in two numpy arrays (keys uint64, slots int64; EMPTY marks a free
 * place). The kernels that look keys up inline these. */
#ifndef LOGSIFT_KEYMAP_H
#define LOGSIFT_KEYMAP_H

#include "arrays.h"

#define EMPTY (-1)

/* SplitMix64's finaliser: polars' integer hashes are not guaranteed to spread over the low bits. */
static inline int64_t keymap_home(uint64_t key, uint64_t mask) {
    uint64_t z = key + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return (int64_t)(z & mask);
}

/* A 64-bit hash of the pair (a, b): a key made of two keys. */
static inline uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = (a * 0xBF58476D1CE4E5B9ull) ^ (b + 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t *keys;
    int64_t *slots;
    int64_t size; /* a power of two */
} KeyTable;

/* Where `key` is in the table, or the empty place where it would go. */
static inline int64_t keymap_probe(KeyTable table, uint64_t key) {
    uint64_t mask = (uint64_t)table.size - 1;
    int64_t at = keymap_home(key, mask);
    while (table.slots[at] != EMPTY && table.keys[at] != key)
        at = (at + 1) & (int64_t)mask;
    return at;
}

/* The slot of `key`, or EMPTY. */
static inline int64_t keymap_find(KeyTable table, uint64_t key) {
    return table.slots[keymap_probe(table, key)];
}

/* The slot of `key`; if absent it is added with `new_slot` (the caller checks `== new_slot` and has made
 * room). */
static inline int64_t keymap_find_or_add(KeyTable table, uint64_t key, int64_t new_slot) {
    int64_t at = keymap_probe(table, key);
    if (table.slots[at] == EMPTY) {
        table.keys[at] = key;
        table.slots[at] = new_slot;
    }
    return table.slots[at];
}

/* Whether a table holding `count` keys must grow before one more is added. */
static inline bool keymap_full(KeyTable table, int64_t count) {
    return 2 * (count + 1) > table.size;
}

/* Take a table's two arrays (keymap.py's KeyMap.keys and .slots). */
static inline bool take_table(Held *held, PyObject *keys, PyObject *slots, const char *name, KeyTable *out) {
    Array k, s;
    if (!take(held, keys, name, U64, 1, true, &k) || !take(held, slots, name, I64, 1, true, &s))
        return false;
    if (k.length != s.length || k.length < 1 || (k.length & (k.length - 1)))
        return bad_arguments(name, "a key table's keys and slots must have the same power-of-two length");
    *out = (KeyTable){k.data, s.data, k.length};
    return true;
}

#endif
