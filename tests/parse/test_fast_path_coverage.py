"""Every COLL line of a canonical form takes the compiled scan (parse/fastcoll.py).

The scan and the grammar read COLL lines alike (tests/parse/test_fastcoll.py), so a COLL shape that the scan
does not take still parses, through the regexes: every other test stays green while the analysis of a
COLL-heavy log runs 3-4x slower with 60 % more memory. These tests hold the scan to the grammar: each COLL
sample of ``grammars/nccl/coll.toml`` takes it unless the sample says ``fast = false``, and so does every COLL
line the simulator writes, for every NCCL series and launcher layout it knows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.parse.fastcoll import CollFastPath
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.simulate import Options, write
from nccl_logsift.simulate.versions import NCCL_PROFILES

GRAMMARS = load_grammars()
COLL = GRAMMARS.family("coll")


def taken(path: Path) -> tuple[int, int]:
    """(COLL lines the scan took, COLL lines the grammar finds) in the file or directory ``path``."""
    sources, problems = expand_paths([str(path)])
    assert not problems, problems
    scan_parser, grammar_parser = LineParser(GRAMMARS), LineParser(GRAMMARS)
    fast = CollFastPath(scan_parser.parse_prefixes)
    took = 0
    for source in sources:
        for chunk in LineReader(source):
            took += len(fast.read(chunk).index)
            grammar_parser.parse(chunk.lines())
    return took, grammar_parser.state.family_counts["coll"]


@pytest.mark.parametrize("sample", COLL.samples, ids=lambda s: f"{s.version}:{s.line[40:80]}")
def test_every_coll_sample_takes_the_scan_unless_it_says_it_does_not(tmp_path, sample):
    path = tmp_path / "sample.log"
    path.write_text(sample.line + "\n")
    assert taken(path) == (int(sample.fast), 1), (
        "the compiled COLL scan does not take this sample: teach accel/csrc/collscan.c its form, or mark the "
        "sample `fast = false` with the reason"
        if sample.fast
        else "the scan takes a sample marked `fast = false`: drop the mark"
    )


LAYOUTS = ["interleaved", "per-rank", "srun", "torchrun", "mpirun"]
SERIES = sorted(NCCL_PROFILES, key=lambda s: tuple(map(int, s.split("."))))
# Every series under one layout in turn, and the newest under every layout: each of both is met once.
JOBS = sorted(
    {(series, LAYOUTS[i % len(LAYOUTS)]) for i, series in enumerate(SERIES)}
    | {(SERIES[-1], layout) for layout in LAYOUTS}
)


@pytest.mark.parametrize(("series", "layout"), JOBS)
def test_every_coll_line_a_simulated_job_writes_takes_the_scan(tmp_path, series, layout):
    out = tmp_path / ("logs" if layout == "per-rank" else "job.log")
    options = Options(
        scenario="healthy", layout=layout, nccl_version=series, ranks=4, nodes=2, noise=False, torn_rate=0.0
    )
    write(options, str(out), None)
    took, coll = taken(out)
    assert coll > 0 and took == coll, f"{took} of {coll} COLL lines took the scan"
