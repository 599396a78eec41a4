"""A compressed stream that breaks off keeps every byte its format lets a decoder recover before the break."""

from __future__ import annotations

import bz2
import gzip
import shutil
import subprocess
import zlib

import pytest
from conftest import FIXTURES

from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.model import ProblemKind

LOG = (FIXTURES / "rank_stall_8ranks.log").read_bytes()  # 85 KB: far below one 4 MiB read


def _zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def _unzstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-d", "-c"], input=data, capture_output=True).stdout


def _gunzip(data: bytes) -> bytes:
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)


def _bunzip(data: bytes) -> bytes:
    return bz2.BZ2Decompressor().decompress(data)


CODECS = {
    "gzip": (gzip.compress, _gunzip),
    "bz2": (bz2.compress, _bunzip),
    "zstd": (_zstd, _unzstd),  # zstdcat, where it is installed, says what is recoverable
}


def read(path, chunk_bytes=4 << 20):
    sources, problems = expand_paths([str(path)])
    assert not problems
    reader = LineReader(sources[0], chunk_bytes)
    texts = [t for chunk in reader for t in chunk.lines().text.to_list()]
    return reader.stats, texts


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("kept", [0.5, 0.9, 0.99, "trailer"])
def test_a_truncated_stream_keeps_what_its_decoder_recovers(tmp_path, codec, kept):
    if codec == "zstd" and not shutil.which("zstd"):
        pytest.skip("the zstd command is not installed")
    compress, recover = CODECS[codec]
    whole = compress(LOG)
    cut = whole[:-4] if kept == "trailer" else whole[: int(len(whole) * kept)]
    expected = recover(cut)
    # bz2 recovers whole 900 KB blocks only: here, maybe none.
    assert len(expected) <= len(LOG) and LOG.startswith(expected)
    path = tmp_path / "job.log.cut"
    path.write_bytes(cut)
    stats, texts = read(path)
    assert stats.bytes == len(expected)
    # Every whole line decoded, and the torn last one as far as it goes.
    assert texts == [line.rstrip(" \r") for line in expected.decode().split("\n")][: len(texts)]
    assert len(texts) == expected.count(b"\n") + (bool(expected) and not expected.endswith(b"\n"))
    (problem,) = stats.problems
    assert problem.kind is ProblemKind.TRUNCATED and problem.offset == len(expected)


@pytest.mark.parametrize("chunk_bytes", [1 << 10, 1 << 16])
def test_a_truncated_gzip_stream_keeps_the_same_bytes_whatever_the_read_size(tmp_path, chunk_bytes):
    cut = gzip.compress(LOG)[:-1000]
    path = tmp_path / "job.log.gz"
    path.write_bytes(cut)
    stats, _ = read(path, chunk_bytes)
    assert stats.bytes == len(_gunzip(cut)) and stats.problems[0].offset == stats.bytes


@pytest.mark.parametrize("codec", ["gzip", "bz2"])
def test_members_written_one_after_another_are_read_as_one_stream(tmp_path, codec):
    compress, _ = CODECS[codec]
    half = len(LOG) // 2
    path = tmp_path / "job.log.z"
    path.write_bytes(compress(LOG[:half]) + compress(LOG[half:]))
    stats, texts = read(path)
    assert stats.bytes == len(LOG) and not stats.problems and len(texts) == LOG.count(b"\n")


def test_a_corrupt_stream_keeps_what_was_decoded_before_the_damage(tmp_path):
    whole = bytearray(gzip.compress(LOG))
    at = len(whole) * 3 // 4
    whole[at : at + 40] = b"\xff" * 40
    path = tmp_path / "job.log.gz"
    path.write_bytes(bytes(whole))
    stats, texts = read(path)
    (problem,) = stats.problems
    assert problem.kind is ProblemKind.CORRUPT and problem.offset == stats.bytes > len(LOG) // 2
    # Deflate notices the damage only at the member's checksum: what came before it is the log's own text.
    first_half = [line.rstrip(" \r") for line in LOG[: len(LOG) // 2].decode().split("\n")][:-1]
    assert texts[: len(first_half)] == first_half


def test_a_compressed_pipe_hands_out_what_it_decoded_without_waiting_for_its_end():
    import os
    import threading

    from nccl_logsift.io.decode import DecodedStream

    read_end, write_end = os.pipe()
    os.write(write_end, gzip.compress(b"first line\n"))
    got: list[bytes] = []
    with open(read_end, "rb") as raw:
        stream = DecodedStream(raw, "gzip")
        reader = threading.Thread(target=lambda: got.append(stream.read1(1 << 20)), daemon=True)
        reader.start()
        reader.join(5)
        os.close(write_end)  # the writer is still there while the read above waits
        assert got == [b"first line\n"]
