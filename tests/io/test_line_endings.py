"""Metamorphic: how lines end (blanks, CRLF, CR CR LF, lone CR, no final newline) never changes the diagnosis.

Every fixture is rewritten with each ending and analysed; the primary findings (code and ranks) must be
those of the fixture as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from nccl_logsift.pipeline import analyze

CASES = sorted(p for p in FIXTURES.iterdir() if not p.name.endswith(".json"))

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
    if case.is_dir():
        into.mkdir()
        for file in case.iterdir():
            (into / file.name).write_bytes(ending(file.read_bytes()))
        return into
    into.write_bytes(ending(case.read_bytes()))
    return into


_EXPECTED: dict[Path, list] = {}


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("case", CASES, ids=[p.name for p in CASES])
def test_line_endings_leave_the_primary_findings_as_they_are(tmp_path, case, ending):
    if case not in _EXPECTED:
        _EXPECTED[case] = _primary([str(case)])
    changed = _rewritten(case, ENDINGS[ending], tmp_path / re.sub(r"\W", "_", case.name))
    assert _primary([str(changed)]) == _EXPECTED[case]
