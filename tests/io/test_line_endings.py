"""Metamorphic: how lines end (blanks, CRLF, CR CR LF, lone CR, no final newline) never changes the diagnosis.

Every fixture is rewritten with each ending and analysed; the primary findings (code and ranks) must be
those of the fixture as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES, fixture_jobs

from nccl_logsift.pipeline import analyze

CASES = fixture_jobs()

ENDINGS = {
    "trailing_space": lambda text: text.replace(b"\n", b" \n"),
    "trailing_tab": lambda text: text.replace(b"\n", b"\t\n"),
    "crlf": lambda text: text.replace(b"\n", b"\r\n"),
    "cr_cr_lf": lambda text: text.replace(b"\n", b"\r\r\n"),  # a CRLF stream through a tty's onlcr
    # Old Mac files; the fixtures' own in-place progress redraws ("\r" inside a line) become lines too.
    "cr_only": lambda text: text.replace(b"\n", b"\r"),
    "no_final_newline": lambda text: text.rstrip(b"\n"),
}


def _primary(paths: list[str]) -> list[tuple[str, tuple[int, ...]]]:
    report = analyze(paths, views=False)
    return [(f.code, f.ranks) for f in report.findings if f.primary]


def _rewritten(case: Path, ending, into: Path) -> Path:
    """``case`` with every text file's lines ended by ``ending``; a binary file (a flight-recorder dump) is
    copied as it is."""
    if case.is_dir():
        for file in (p for p in case.rglob("*") if p.is_file()):
            target = into / file.relative_to(case)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = file.read_bytes()
            target.write_bytes(data if b"\0" in data else ending(data))
        return into
    into.write_bytes(ending(case.read_bytes()))
    return into


_EXPECTED: dict[Path, list] = {}


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("case", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_line_endings_leave_the_primary_findings_as_they_are(tmp_path, case, ending):
    if case not in _EXPECTED:
        _EXPECTED[case] = _primary([str(case)])
    changed = _rewritten(case, ENDINGS[ending], tmp_path / re.sub(r"\W", "_", case.name))
    assert _primary([str(changed)]) == _EXPECTED[case]


COLL = (
    b"gpu7:31842:31842 [3] NCCL INFO AllReduce: opCount 1a4 sendbuff 0x7f3a1c000000 recvbuff (nil)"
    b" count 4194304 datatype 7 op 0 root -1 comm 0x55d2e4b1a6c0 [nranks=16] stream 0x55d2e3f0c900"
)


def _fast_rows(path: Path):
    from nccl_logsift.grammar import load_grammars
    from nccl_logsift.io.lines import LineReader
    from nccl_logsift.io.sources import expand_paths
    from nccl_logsift.parse.fastcoll import CollFastPath
    from nccl_logsift.parse.lineparser import LineParser

    fast = CollFastPath(LineParser(load_grammars()).parse_prefixes)
    chunk = next(iter(LineReader(expand_paths([str(path)])[0][0])))
    return fast.read(chunk)


@pytest.mark.parametrize("ending", [b" ", b"\t", b"\r", b"\r\r", b" \t\r", b"\xff\xfe", b"\x00\x00"])
def test_the_coll_fast_path_reads_a_call_whatever_ends_its_line(tmp_path, ending):
    clean, damaged = tmp_path / "clean.log", tmp_path / "damaged.log"
    clean.write_bytes(COLL + b"\n" + COLL + b"\n")
    damaged.write_bytes(COLL + ending + b"\n" + COLL + ending + b"\n")
    want, got = _fast_rows(clean), _fast_rows(damaged)
    assert got.index.tolist() == want.index.tolist() == [0, 1]
    assert got.rows.drop("byte_offset").equals(want.rows.drop("byte_offset"))
