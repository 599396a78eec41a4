"""The stages wired together: sources → lines → parsed tables → resolved ranks, into a sink.

``parse_paths`` is the one place the parsing stages meet; the CLI and the analysis call it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import polars as pl

from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.io.lines import DEFAULT_CHUNK_BYTES, LineReader
from nccl_logsift.io.sources import SourceProblem, require_sources
from nccl_logsift.errors import InputError
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.resolve.communicators import process_ranks
from nccl_logsift.resolve.progress import CollectiveNumbering
from nccl_logsift.tables import RankMaps, TableSink

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ParseOptions:
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    keep_text: bool = True  # keep each line's text in the lines table


@dataclass(frozen=True, slots=True)
class InputSummary:
    """What one input held; ``unparsed_lines`` counts enveloped (NCCL/PyTorch) lines no family claimed."""

    path: str
    bytes: int
    lines: int
    unparsed_lines: int
    compression: str | None
    invalid_utf8_lines: int
    problem: str | None


@dataclass(slots=True)
class ParseSummary:
    inputs: list[InputSummary]
    skipped: list[SourceProblem]
    table_rows: dict[str, int]
    family_counts: Counter
    envelope_lines: int
    unparsed_envelope_lines: int
    torn_fragments: int
    unparsed_shapes: list[tuple[str, int]]
    extra: dict = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(i.lines for i in self.inputs)


def parse_paths(
    paths: Sequence[str],
    sink: TableSink,
    options: ParseOptions = ParseOptions(),
    grammars: GrammarSet | None = None,
    progress: Callable[[int], None] | None = None,
) -> ParseSummary:
    """Parse every input into ``sink``; raise InputError only when nothing at all could be read."""
    sources, skipped = require_sources(paths)
    parser = LineParser(grammars or load_grammars(), keep_text=options.keep_text)
    numbering = CollectiveNumbering()
    inputs = []
    for source in sources:
        unparsed_before = parser.state.unparsed_envelope_lines
        reader = LineReader(source, options.chunk_bytes)
        for chunk in reader:
            tables = parser.parse(chunk)
            numbering.observe(tables["comms"])
            tables["collectives"] = numbering.number(tables["collectives"])
            for name, frame in tables.items():
                sink.write(name, frame)
            if progress is not None:
                progress(reader.stats.bytes)
        stats = reader.stats
        inputs.append(
            InputSummary(
                path=source.path,
                bytes=stats.bytes,
                lines=stats.lines,
                unparsed_lines=parser.state.unparsed_envelope_lines - unparsed_before,
                compression=stats.compression,
                invalid_utf8_lines=stats.invalid_utf8_lines,
                problem=stats.problem,
            )
        )
    if not any(i.lines for i in inputs):
        reasons = "; ".join(f"{i.path}: {i.problem or 'empty'}" for i in inputs)
        raise InputError(f"no log lines could be read ({reasons})")
    instances = numbering.instances
    maps = RankMaps(processes=process_ranks(instances), instances=instances)
    rows = sink.finish(maps, {"communicators": instances, "processes": _processes(maps)})
    state = parser.state
    return ParseSummary(
        inputs=inputs,
        skipped=skipped,
        table_rows=rows,
        family_counts=state.family_counts,
        envelope_lines=state.envelope_lines,
        unparsed_envelope_lines=state.unparsed_envelope_lines,
        torn_fragments=state.torn_fragments,
        unparsed_shapes=state.unparsed_shapes.most_common(20),
    )


def _processes(maps: RankMaps) -> pl.DataFrame:
    """One row per process that initialised a communicator: where it ran and what rank it was."""
    inst = maps.instances
    return (
        inst.group_by("host", "pid")
        .agg(
            global_rank=pl.col("global_rank").first(),
            world_size=pl.col("world_size").first(),
            cuda_dev=pl.col("cuda_dev").drop_nulls().first(),
            bus_id=pl.col("bus_id").drop_nulls().first(),
            communicators=pl.len(),
            incomplete_inits=(~pl.col("init_completed")).sum(),
        )
        .sort("global_rank", "host", "pid", nulls_last=True)
    )


def analyze(paths: Sequence[str], options: ParseOptions = ParseOptions()):
    """Read the logs, resolve ranks, run every rule, triage, and return the Report."""
    from nccl_logsift.findings import run_rules
    from nccl_logsift.findings.context import parse_job
    from nccl_logsift.findings.triage import triage
    from nccl_logsift.report import build_report

    summary, job = parse_job(paths, options)
    return build_report(summary, job, triage(run_rules(job)))
