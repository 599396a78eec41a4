"""Decimal and hexadecimal tokens of a chunk turned into integers, many at once, with numpy.

Each token (up to 16 characters) is read as one or two little-endian 64-bit words from the chunk
(:class:`~nccl_logsift.io.lines.ByteView`), right-aligned by shifting, and its eight digits are combined
pairwise inside the word (the "SWAR" digit-folding trick: ``v*10 + (v>>8)``, then by 100, then by 10⁴).
A dozen vector operations replace a string column and a per-value conversion.
"""

from __future__ import annotations

import numpy as np

from nccl_logsift.io.lines import ByteView

_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_U8 = np.uint64(8)
_LOW32 = np.uint64(0xFFFFFFFF)
_PAIRS = (
    (np.uint64(0x00FF00FF00FF00FF), np.uint64(8)),
    (np.uint64(0x0000FFFF0000FFFF), np.uint64(16)),
    (_LOW32, np.uint64(32)),
)
MAX_DIGITS = 16
_ALL_ONES = np.uint64(0x0101010101010101)
_DECIMAL_DIGIT = np.zeros(256, dtype=np.uint8)
_DECIMAL_DIGIT[ord("0"): ord("9") + 1] = 1
_HEX_DIGIT = _DECIMAL_DIGIT.copy()
_HEX_DIGIT[ord("a"): ord("f") + 1] = 1


def decimal(view: ByteView, start: np.ndarray, stop: np.ndarray, signed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Values (int64) of the decimal tokens ``data[start:stop]`` and whether each one is well formed."""
    negative = np.zeros(len(start), dtype=bool)
    if signed:
        negative = view.raw[np.minimum(start, len(view.raw) - 1)] == ord("-")
        start = start + negative
    value, ok = _fold(view, start, stop, base=10)
    value = value.astype(np.int64)
    return np.where(negative, -value, value), ok


def hexadecimal(view: ByteView, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values (uint64) of lowercase hex tokens without ``0x`` and whether each one is well formed."""
    return _fold(view, start, stop, base=16)


def _fold(view: ByteView, start: np.ndarray, stop: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    length = stop - start
    ok = (length > 0) & (length <= MAX_DIGITS)
    length = np.clip(length, 1, MAX_DIGITS)
    head = np.clip(length - 8, 0, 8)  # digits before the last eight
    tail = np.minimum(length, 8)
    low, low_ok = _fold8(view.words[start + head], tail, base)
    two_words = head > 0
    if not two_words.any():
        return low, ok & low_ok
    high, high_ok = _fold8(view.words[start], np.maximum(head, 1), base)
    scale = np.uint64(10**8 if base == 10 else 1 << 32)
    value = np.where(two_words, high * scale + low, low)
    return value, ok & low_ok & (high_ok | ~two_words)


def _fold8(word: np.ndarray, length: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to eight digits at the start of each word (first character in the lowest byte)."""
    shift = (np.uint64(8) - length.astype(np.uint64)) * _U8
    # Keep the token's bytes only, move them to the top, fill the freed low bytes with '0'.
    kept = np.where(length >= 8, word, word & ((np.uint64(1) << (length.astype(np.uint64) * _U8)) - np.uint64(1)))
    word = (kept << shift) | (_ZEROS & ((np.uint64(1) << shift) - np.uint64(1)))
    # Every byte a digit: look each byte up in a table of 0/1 and read the eight answers as one word.
    table = _DECIMAL_DIGIT if base == 10 else _HEX_DIGIT
    ok = table[word.view(np.uint8)].view(np.uint64) == _ALL_ONES
    if base == 10:
        nibbles = word - _ZEROS
    else:
        nibbles = (word & np.uint64(0x0F0F0F0F0F0F0F0F)) + np.uint64(9) * ((word >> np.uint64(6)) & np.uint64(0x0101010101010101))
    factor = base
    value = nibbles
    for mask, bits in _PAIRS:
        value = (value * np.uint64(factor) + (value >> bits)) & mask
        factor *= factor
    return value, ok
