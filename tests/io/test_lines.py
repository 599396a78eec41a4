import bz2
import gzip

import pytest

from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths

TEXT = b"first line\r\nsecond \xff line\n\nlast line without newline"


def read_all(path, chunk_bytes=1 << 20):
    sources, problems = expand_paths([str(path)])
    assert not problems
    reader = LineReader(sources[0], chunk_bytes)
    chunks = [c.lines() for c in reader]
    texts = [t for c in chunks for t in c.text.to_list()]
    numbers = [n for c in chunks for n in c.line_no.to_list()]
    offsets = [o for c in chunks for o in c.byte_offset.to_list()]
    return reader.stats, texts, numbers, offsets


def test_lines_keep_every_line_with_numbers_and_offsets(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(TEXT)
    stats, texts, numbers, offsets = read_all(path)
    assert texts == ["first line", "second \ufffd line", "", "last line without newline"]
    assert numbers == [1, 2, 3, 4]
    assert offsets == [0, 12, 26, 27]
    assert stats.invalid_utf8_lines == 1 and stats.lines == 4 and stats.bytes == len(TEXT)


@pytest.mark.parametrize("chunk_bytes", [3, 7, 64])
def test_lines_do_not_depend_on_chunk_size(tmp_path, chunk_bytes):
    path = tmp_path / "a.log"
    path.write_bytes(TEXT)
    assert read_all(path, chunk_bytes)[1:] == read_all(path)[1:]


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_lines_decompress_by_magic_bytes(tmp_path, suffix, compress):
    path = tmp_path / ("a" + suffix)
    path.write_bytes(compress(TEXT))
    stats, texts, _, _ = read_all(path)
    assert stats.compression in {"gzip", "bz2"}
    assert texts[-1] == "last line without newline"


def test_lines_read_zstd(tmp_path):
    import pyarrow as pa

    path = tmp_path / "a.log.zst"
    with pa.CompressedOutputStream(str(path), "zstd") as out:
        out.write(TEXT)
    stats, texts, _, _ = read_all(path)
    assert stats.compression == "zstd" and len(texts) == 4


def test_lines_truncated_gzip_keeps_what_was_read(tmp_path):
    body = b"".join(b"line %d\n" % i for i in range(20000))
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(body)[:-200])
    stats, texts, _, _ = read_all(path, chunk_bytes=4096)
    assert stats.problem and "truncated" in stats.problem
    assert 0 < len(texts) <= 20000 and texts[0] == "line 0"


def test_lines_binary_input_is_refused_with_a_reason(tmp_path):
    path = tmp_path / "core"
    path.write_bytes(bytes(range(256)) * 64)
    stats, texts, _, _ = read_all(path)
    assert texts == [] and "binary" in stats.problem


def test_sources_walk_directories_sorted_and_report_missing(tmp_path):
    (tmp_path / "b.log").write_text("x\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.log").write_text("y\n")
    (tmp_path / ".hidden").write_text("z\n")
    sources, problems = expand_paths([str(tmp_path), str(tmp_path / "missing.log")])
    assert [s.path for s in sources] == [str(tmp_path / "b.log"), str(tmp_path / "sub" / "a.log")]
    assert [s.source_id for s in sources] == [0, 1]
    assert problems[0].reason == "no such file or directory"
