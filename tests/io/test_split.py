"""The compiled line splitter gives the line bounds of a plain Python split, and says when a chunk is
ASCII."""

from __future__ import annotations

import numpy as np
import pytest

from nccl_logsift.io import split
from nccl_logsift.io.lines import PADDING, ByteView, LineReader, ReadStats, padded, split_lines
from nccl_logsift.io.sources import expand_paths

pytestmark = pytest.mark.usefixtures("loops")  # the compiled and the pure-Python loops

REPLACEMENT = "\ufffd".encode()


def reference(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every line: what lies between two "\\n" (or after the last one), less the NUL bytes
    it starts with and the blanks, NUL bytes and U+FFFD it ends with."""
    bounds, start = [], 0
    while start < len(data):
        newline = data.find(b"\n", start)
        stop = len(data) if newline < 0 else newline
        begin, end = start, stop
        while begin < end and data[begin] == 0:
            begin += 1
        while end > begin:
            if data[end - 1] in b" \t\r\x00":
                end -= 1
            elif data[begin:end].endswith(REPLACEMENT):
                end -= 3
            else:
                break
        bounds.append((begin, end))
        if newline < 0:
            break
        start = newline + 1
    return bounds


def left_out_nul(data: bytes) -> int:
    """The NUL bytes outside the reference bounds."""
    bounds = reference(data)
    inside = sum(data[start:end].count(0) for start, end in bounds)
    return data.count(0) - inside


def found(data: bytes) -> tuple[list[tuple[int, int]], bool]:
    view = ByteView(data)
    starts, ends, ascii, nul_bytes, has_nul = split.find_lines(view.raw)
    assert nul_bytes == left_out_nul(data)
    assert has_nul == (0 in data)
    return list(zip(starts.tolist(), ends.tolist())), ascii


@pytest.mark.parametrize("cut", [1, 6, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 65])
def test_find_lines_finds_a_newline_at_every_position_of_a_word_and_a_step(cut):
    data = b"x" * (cut - 1) + b"\n" + b"y" * 70 + b"\n" + b"z" * 3
    assert found(data) == (reference(data), True)


@pytest.mark.parametrize("size", [0, 1, 5, 8, 13, 31, 32, 33, 100, 1001])
def test_find_lines_reads_chunks_whose_size_is_not_a_multiple_of_the_word(size):
    data = (b"ab\ncd\r\n" * 200)[:size]
    assert found(data) == (reference(data), True)


def test_find_lines_drops_the_crs_that_end_a_line_and_keeps_those_inside():
    data = b"one\r\ntwo\rhalf\n\r\n\r\rx\r\n\nlast\r"
    assert found(data)[0] == [(0, 3), (5, 13), (14, 14), (16, 19), (21, 21), (22, 26)]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r\r\n", b" \n", b"\t\n", b" \t \r\n", b"\x00\x00\n"])
def test_find_lines_gives_the_same_text_whatever_ends_the_line(ending):
    data = b"a NCCL INFO line" + ending + b"b" + ending
    view = ByteView(data)
    starts, ends, _, _, _ = split.find_lines(view.raw)
    assert [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())] == [b"a NCCL INFO line", b"b"]


@pytest.mark.parametrize("at", [0, 7, 15, 16, 31, 32, 33, 63, 64, 100, 1000, 1023, 1026])
def test_find_lines_says_whether_a_byte_is_nul_wherever_it_is(at):
    # In either 16-byte half of a 32-byte step, in a later step, and in the last bytes, read one at a time.
    data = bytearray(b"abc def\n" * 128 + b"tail\n")
    assert found(bytes(data)) == (reference(bytes(data)), True)
    data[at] = 0
    found(bytes(data))  # asserts has_nul


def test_find_lines_leaves_out_nul_padding_at_both_ends_of_a_line_and_counts_it():
    data = b"text\x00\x00\n\x00\x00\x00more\n\x00\x00"
    view = ByteView(data)
    starts, ends, _, nul_bytes, _ = split.find_lines(view.raw)
    assert [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())] == [b"text", b"more", b""]
    assert nul_bytes == 7


def test_find_lines_takes_a_chunk_without_newline_as_one_line():
    data = b"no newline at all " * 10
    assert found(data) == ([(0, len(data) - 1)], True)  # less its trailing space


def test_find_lines_ends_at_the_last_newline():
    assert found(b"a\nb\n")[0] == [(0, 1), (2, 3)]
    assert found(b"\n\n")[0] == [(0, 0), (1, 1)]


@pytest.mark.parametrize("at", [0, 7, 8, 31, 32, 40])
def test_find_lines_sees_a_byte_above_ascii_anywhere(at):
    data = bytearray(b"a" * 41)
    data[at] = 0xC3
    assert found(bytes(data))[1] is False


def test_find_lines_makes_room_for_more_newlines_than_estimated():
    data = b"\n" * 50_000 + b"\r\n" * 20_000
    assert found(data) == (reference(data), True)


def test_find_lines_matches_a_python_split_on_random_bytes():
    rng = np.random.default_rng(20240611)
    alphabet = np.frombuffer(b"\n\r\n ab\xc3\xa9\xff\x00\t\xef\xbf\xbd", dtype=np.uint8)
    for trial in range(2000):
        size = int(rng.integers(0, 300))
        if trial % 2:
            data = rng.choice(alphabet, size).astype(np.uint8).tobytes()
        else:
            data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert found(data) == (reference(data), all(b < 128 for b in data)), data


def test_find_lines_reads_a_slice_of_a_buffer_from_any_offset():
    rng = np.random.default_rng(7)
    text = b"".join(b"line %d %s\r\n" % (i, b"x" * int(rng.integers(0, 40))) for i in range(300))
    buffer = padded(len(text))
    buffer[:] = np.frombuffer(text, dtype=np.uint8)
    for start in range(40):
        stop = len(text) - int(rng.integers(0, 40))
        piece = buffer[start:stop]
        starts, ends, ascii, _, _ = split.find_lines(piece)
        assert list(zip(starts.tolist(), ends.tolist())) == reference(text[start:stop]) and ascii


def test_newline_search_backwards_and_forwards():
    raw = np.frombuffer(b"ab\ncd\nef", dtype=np.uint8)
    assert split.last_newline(raw, 0, 8) == 5 and split.last_newline(raw, 0, 5) == 2
    assert split.last_newline(raw, 3, 5) == -1
    assert split.next_newline(raw, 3) == 5 and split.next_newline(raw, 6) == -1


def test_split_lines_counts_no_valid_utf8_line_as_invalid():
    data = "naïve ünïcode ✓\nplain\n€ at the end".encode()
    stats = ReadStats()
    chunk = split_lines(data, 0, 1, 0, stats)
    assert chunk.lines().text.to_list() == ["naïve ünïcode ✓", "plain", "€ at the end"]
    assert stats.invalid_utf8_lines == 0


def test_split_lines_repairs_and_counts_invalid_utf8_lines():
    data = b"ok\nbad \xff\xfe here\r\nfine \xc3\xa9\ncut \xe2\x82\nend"
    stats = ReadStats()
    chunk = split_lines(data, 0, 10, 100, stats)
    lines = chunk.lines()
    # A torn character at the end of a line goes with the line's end: the grammars read what is left.
    assert lines.text.to_list() == ["ok", "bad \ufffd\ufffd here", "fine é", "cut", "end"]
    assert lines.line_no.to_list() == [10, 11, 12, 13, 14]
    # Offsets are those of the bytes as read, before the repair changed their length.
    assert lines.byte_offset.to_list() == [100 + start for start, _ in reference(data)]
    assert stats.invalid_utf8_lines == 2


def test_reader_blocks_are_viewed_without_a_copy_and_never_written_again(tmp_path):
    text = b"".join(b"line %05d of the log\n" % i for i in range(3000)) + b"and a last line without newline"
    path = tmp_path / "a.log"
    path.write_bytes(text)
    reader = LineReader(expand_paths([str(path)])[0][0], chunk_bytes=1000)
    blocks = list(reader.texts())
    # Read to the end before looking: a buffer written again by a later read would show here.
    assert b"".join(bytes(data) for _, data in blocks) == text
    for offset, data in blocks:
        view = ByteView(data)
        assert np.shares_memory(view.raw, data) and view.data == text[offset : offset + len(data)]
        assert data.base.nbytes - (data.ctypes.data - data.base.ctypes.data) >= len(data) + PADDING


def test_byte_view_of_bytes_copies_them_once_with_padding():
    view = ByteView(b"abc")
    assert view.data == b"abc" and len(view.raw) == 3 and len(view.words) == 11
    assert int(view.words[0]) == int.from_bytes(b"abc", "little")


def test_split_lines_counts_the_nul_padding_of_a_repaired_line_once():
    stats = ReadStats()
    chunk = split_lines(b"text\x00\x00\xff\nok\n", 0, 1, 0, stats)
    assert chunk.lines().text.to_list() == ["text", "ok"]
    assert stats.nul_bytes == 2 and stats.invalid_utf8_lines == 1


@pytest.mark.parametrize("pure_python", [False, True])
def test_a_views_column_reads_back_every_range_of_every_length(monkeypatch, pure_python):
    from nccl_logsift import accel
    from nccl_logsift.accel import fallback

    if pure_python:
        monkeypatch.setattr(accel, "split_views", fallback.split_views)
    text = "é line ±0123456789abcdef " * 3
    view = ByteView(text.encode())
    starts, lengths = [], []
    for start in range(0, len(view.raw), 3):
        for length in (0, 1, 4, 11, 12, 13, 16, 30):
            end = start + length
            if end <= len(view.raw) and all(
                (view.raw[at] & 0xC0) != 0x80 for at in (start, end) if at < len(view.raw)
            ):
                starts.append(start)
                lengths.append(length)
    starts_, lengths_ = np.array(starts), np.array(lengths)
    expected = [bytes(view.raw[s : s + n]).decode() for s, n in zip(starts, lengths)]
    assert view.strings(starts_, lengths_, "text").to_list() == expected
    assert view.copied(starts_, lengths_, "text").to_list() == expected
    assert view.strings(starts_[:0], lengths_[:0], "text").to_list() == []
    # Strided and narrower integer arrays, as the scans' outputs give them.
    pairs = np.stack([starts_, lengths_]).astype(np.int32)
    assert view.strings(pairs[0, ::2], pairs[1, ::2], "text").to_list() == expected[::2]
