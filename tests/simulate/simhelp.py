"""Helpers for the simulator tests: simulate into tmp_path, parse with the project's line parser."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.simulate import Options, write
from nccl_logsift.simulate.versions import version_key

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, **options) -> tuple[Path, dict]:
    """Write a simulated log (file, or directory for per-rank) and its truth; return both."""
    opts = Options(**options)
    out = tmp_path / ("logs" if opts.layout == "per-rank" else "job.log")
    truth = tmp_path / "truth.json"
    write(opts, str(out), str(truth))
    return out, json.loads(truth.read_text())


def parse(path: Path) -> tuple[LineParser, dict[str, pl.DataFrame]]:
    sources, problems = expand_paths([str(path)])
    assert not problems, problems
    parser = LineParser(load_grammars())
    parts: dict[str, list[pl.DataFrame]] = {}
    for source in sources:
        for chunk in LineReader(source):
            for name, frame in parser.parse(chunk.lines()).items():
                parts.setdefault(name, []).append(frame)
    return parser, {name: pl.concat(frames, how="diagonal_relaxed") for name, frames in parts.items()}


def unparsed_nccl(lines: pl.DataFrame) -> pl.DataFrame:
    """NCCL-envelope lines no grammar family claimed (torn fragments of glued lines excluded)."""
    return lines.filter((pl.col("producer") == "nccl") & pl.col("family").is_null() & ~pl.col("torn"))


def logs_comm_id(version: str, created_by: str) -> bool:
    """commId is printed from 2.16.2, and no longer for split children from 2.23.4 (grammar §2.1)."""
    v = version_key(version)
    if v < (2, 16, 2):
        return False
    return not (created_by == "ncclCommSplit" and v >= (2, 23, 4))


def logs_init_start(version: str) -> bool:
    return version_key(version) >= (2, 18, 3)


def expected_comm_rows(truth: dict) -> dict[tuple[str, int], set[tuple]]:
    """(host, pid) -> {(comm_id or None, nranks, rank)} every process must show in its Init lines."""
    version = truth["nccl_version"]
    procs = {p["rank"]: (p["host"], p["pid"]) for p in truth["processes"]}
    out: dict[tuple[str, int], set[tuple]] = {}
    for c in truth["communicators"]:
        logged = c["init_started"] if logs_init_start(version) else c["init_completed"]
        cid = c["comm_id"] if logs_comm_id(version, c["created_by"]) else None
        for r in logged:
            out.setdefault(procs[r], set()).add((cid, c["nranks"], c["ranks"].index(r)))
    return out


def actual_comm_rows(comms: pl.DataFrame) -> dict[tuple[str, int], set[tuple]]:
    rows = comms.filter(pl.col("what") == "Init").select("host", "pid", "comm_id", "nranks", "rank")
    out: dict[tuple[str, int], set[tuple]] = {}
    for host, pid, cid, nranks, rank in rows.iter_rows():
        out.setdefault((host, pid), set()).add((cid, nranks, rank))
    return out
