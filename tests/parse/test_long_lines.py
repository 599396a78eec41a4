"""Lines longer than MAX_LINE_BYTES: cut, counted, and read in bounded memory; the lines around them keep
their numbers and byte offsets."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
from conftest import cli_peak_mb

from nccl_logsift.io.lines import MAX_LINE_BYTES

MIB = 1 << 20
ENVELOPE = b"h:1:1 [0] NCCL INFO cudaDriverVersion 12020"


def test_parse_cuts_long_lines_and_keeps_the_numbers_and_offsets_of_the_others(run_cli, tmp_path):
    lines = [
        ENVELOPE,
        b"x" * (3 * MIB),  # longer than a read of the reader (4 MiB with what is pending): skipped while read
        ENVELOPE,
        b"y" * (MAX_LINE_BYTES - 1) + "é".encode() * 3,  # the cut would split a character: it ends before it
        b"z" * (9 * MIB) + b"\r",
        b"h:1:1 [0] NCCL WARN last line",
        b"w" * (5 * MIB),  # the last line, without a newline
    ]
    data = b"\n".join(lines)
    path = tmp_path / "long.log"
    path.write_bytes(data)
    out = tmp_path / "tables"
    result = run_cli("parse", str(path), "-o", str(out))
    assert result.exit_code == 0 and "4 line(s) longer than 1 MiB cut" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["unparsed"]["long_lines_cut"] == 4
    assert manifest["inputs"][0]["lines"] == len(lines) and manifest["inputs"][0]["bytes"] == len(data)
    table = pl.read_parquet(out / "lines.parquet").sort("line_no")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    assert table["line_no"].to_list() == list(range(1, len(lines) + 1))
    assert table["byte_offset"].to_list() == starts
    texts = table["text"].to_list()
    cut = MAX_LINE_BYTES
    lengths = [len(t.encode()) for t in texts]
    assert lengths == [len(ENVELOPE), cut, len(ENVELOPE), cut - 1, cut, len(lines[5]), cut]
    assert texts[3].endswith("y") and set(texts[4]) == {"z"}
    assert table["family"].to_list()[5] == "errors"


def test_a_line_of_hundreds_of_megabytes_is_read_in_bounded_memory():
    # Before, a 128 MB line without a newline took 1.9 GB; the reader now holds 1 MiB of it.
    writer = (
        "import sys\n"
        f"sys.stdout.buffer.write({ENVELOPE!r} + b'\\n')\n"
        "block = b'a' * (1 << 20)\n"
        "for _ in range(128):\n"
        "    sys.stdout.buffer.write(block)\n"
    )
    feed = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryDirectory() as tmp:
        status, peak = cli_peak_mb(["analyze", "-", "--format", "json"], feed.stdout, out, Path(tmp))
        feed.stdout.close()
        feed.wait()
        out.seek(0)
        report = json.loads(out.read())
    assert status == 0
    assert report["inputs"][0]["lines"] == 2 and report["inputs"][0]["bytes"] == len(ENVELOPE) + 1 + 128 * MIB
    assert peak < 600, f"peak {peak:.0f} MB"


def test_many_long_lines_of_blanks_are_parsed_in_bounded_memory(tmp_path):
    """NCCL lines of a megabyte of spaces each (distinct, so none is skipped as a repeat): the general
    parser's search for its patterns' anchors lists what it finds, and a list of every " " found in 60 MB
    took 1.8 GB (LineParser._present now looks for the short anchors one by one, and for the others in
    slices of the batch)."""
    path = tmp_path / "blanks.log"
    with path.open("wb") as out:
        for n in range(60):
            out.write(b"h:1:1 [0] NCCL INFO x" + b" " * (MIB - 64) + b"y%d\n" % n)
    with tempfile.TemporaryFile() as out:
        status, peak = cli_peak_mb(["analyze", str(path), "--format", "json"], None, out, tmp_path)
    assert status == 0
    assert peak < 1000, f"peak {peak:.0f} MB"
