"""The stages wired together: sources → lines → parsed tables → resolved ranks, into a sink.

``parse_paths`` is the one place the parsing stages meet; the CLI and the analysis call it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import chain, islice

import polars as pl

from nccl_logsift.errors import InputError
from nccl_logsift.flight.discover import DumpCollector, partition
from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.io.lines import (
    DEFAULT_CHUNK_BYTES,
    LineReader,
    RawChunk,
    ReadStats,
    split_lines,
)
from nccl_logsift.io.sources import Source, require_sources
from nccl_logsift.model import InputProblem, ProblemKind, Report
from nccl_logsift.parse import parallel
from nccl_logsift.parse.calls import ADDED, Calls, FramePiece, Names
from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.parse.parallel import (
    Segment,
    SegmentPool,
    file_segments,
    missed_hosts,
    parse_segment,
    shift_lines,
    sniff,
    worker_count,
)
from nccl_logsift.parse.repeats import RepeatSkip
from nccl_logsift.parse.schema import conform
from nccl_logsift.resolve.communicators import device_ranks, process_ranks
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.progress import CollectiveNumbering
from nccl_logsift.summary import InputSummary, ParseSummary
from nccl_logsift.tables import REPEATS_KEPT, RankMaps, TableSink

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """How inputs are read and parsed.

    ``workers`` is the number of processes that parse. ``1`` parses in this process: what a caller that
    already runs analyses in a pool of processes should pass, and what live input always gets. ``N`` > 1
    starts N worker processes that parse 16 MB segments of the input while this process numbers the
    calls and runs the diagnosis in input order. ``None`` (the default) chooses: workers only for large
    inputs (files of 96 MB or more, standard input, compressed files) on machines with 3 or more cores,
    ``cores - 1`` of them up to 3 (``parse/parallel.py``, ``worker_count``). The tables are the same
    whatever the number; only speed and memory differ (each worker holds 150-250 MB).
    """

    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    keep_text: bool = True  # keep each line's text in the lines table
    max_wait: float | None = None  # live input: hand out a batch at least this often (seconds)
    every_line: bool = True  # a lines row for every COLL call too (parse); the diagnosis does without
    workers: int | None = None  # parsing processes; None: automatic, 1: this process only


@dataclass(slots=True)
class Batch:
    """Tables parsed from consecutive lines, and their COLL calls, already numbered.

    The lines are those of ``source``, preceded by the last lines of sources before it whose leftovers
    waited for its own (``ChunkParser.hold``): a directory of small files is parsed a few batches in
    all, not one or more per file. The rows keep their sources' ``source_id`` and line numbers.

    ``logsift parse`` (``every_line``) gets the calls as the ``collectives`` table too; the diagnosis
    reads ``calls`` and builds rows only for those it keeps (:attr:`collectives` builds them all).
    """

    tables: dict[str, pl.DataFrame]
    source: Source
    bytes_read: int  # decompressed bytes read so far, over all sources
    calls: Calls

    @property
    def collectives(self) -> pl.DataFrame:
        if "collectives" not in self.tables:
            self.tables["collectives"] = self.calls.frame()
        return self.tables["collectives"]


def _quotable(segment: Segment) -> RawChunk | None:
    """The lines of a segment this process read, or None when it is not valid UTF-8 (a worker repaired it,
    and its byte offsets no longer match the repaired text)."""
    if segment.data is None:
        return None
    stats = ReadStats()
    chunk = split_lines(segment.data, segment.source_id, 1, segment.offset, stats)
    return None if stats.invalid_utf8_lines or not len(chunk) else chunk


def _summary(source: Source, stats: ReadStats, unparsed_lines: int) -> InputSummary:
    """What reading ``source`` found (``stats``, complete) and how many of its lines were not understood."""
    return InputSummary(
        path=source.path,
        bytes=stats.bytes,
        lines=stats.lines,
        unparsed_lines=unparsed_lines,
        compression=stats.compression,
        invalid_utf8_lines=stats.invalid_utf8_lines,
        problem=stats.problem,
        problems=stats.all_problems(),
    )


def _readable_again(source: Source, stats: ReadStats) -> bool:
    """Whether evidence can read a line of ``source`` again at its byte offset: a plain file, not standard
    input or a compressed file. ``stats`` are its reader's, which found whether it is compressed when it
    opened it (a file whose lines were read is not binary): opening every file again to look cost a
    directory of 512 per-rank files ~0.5 s."""
    return not source.is_stream and stats.compression is None


class TableStream:
    """Parse sources batch by batch: iterate for the :class:`Batch` es, then :meth:`finish` into a sink.

    This is the one place the parsing stages meet; ``parse_paths`` (files into a sink), ``analyze`` and
    the live ``watch`` all consume it.
    """

    def __init__(
        self, paths: Sequence[str], options: ParseOptions = ParseOptions(), grammars: GrammarSet | None = None
    ):
        self.options = options
        sources, self.skipped = require_sources(paths)
        # Flight Recorder dumps among the inputs (found by content) are read beside the logs, not as logs.
        self.sources, dumps = partition(sources)
        if not self.sources:
            given = ", ".join(dumps[:3])
            raise InputError(f"only Flight Recorder dumps given ({given}): give the job's logs too")
        self.dumps = DumpCollector(dumps)
        self.grammars = grammars or load_grammars()
        self.parser = LineParser(self.grammars, keep_text=options.keep_text)
        self.ops = Names()
        self.numbering = CollectiveNumbering()
        self.inputs: list[InputSummary] = []
        self.bytes_read = 0
        self.repeats: RepeatSkip | None = None  # set by an Analysis, whose fold of repeats it anticipates

    def __iter__(self) -> Iterator[Batch]:
        parser, options = self.parser, self.options
        chunks = ChunkParser(parser, options.every_line, self.ops, self.repeats)
        live = options.max_wait is not None
        # Every line parsed in line order for `logsift parse`, and at once for a live job.
        chunks.rest_may_wait = not options.every_line and not live
        workers = worker_count(options.workers, self.sources, live)
        pool = (
            SegmentPool(workers, self.grammars, options.keep_text, options.every_line, options.chunk_bytes)
            if workers > 1
            else None
        )
        if pool is None:
            yield from self._in_order(chunks)
            return
        try:
            for source in self.sources:
                unparsed_before = parser.state.unparsed_envelope_lines
                stats = ReadStats()
                yield from self._by_segments(source, chunks, pool, stats)
                unparsed = parser.state.unparsed_envelope_lines - unparsed_before
                self.inputs.append(_summary(source, stats, unparsed))
        finally:
            pool.close()

    def _in_order(self, chunks: ChunkParser) -> Iterator[Batch]:
        """Every source read chunk by chunk in this process, one after the other.

        Live input already arrives through a reader thread and is handed out as it comes; files and pipes
        read to the end are read and scanned ahead in threads that run on from one source into the next.
        At the end of a source, what the fast path left of it may wait to be parsed with the next source's
        leftovers (``ChunkParser.hold``): a directory of per-rank files costs what one file does.
        """
        options = self.options
        live = options.max_wait is not None
        started: list[tuple[Source, ReadStats]] = []  # appended by the thread that reads, in source order
        position = {source.source_id: n for n, source in enumerate(self.sources)}

        def read() -> Iterator[RawChunk]:
            for source in self.sources:
                reader = LineReader(source, options.chunk_bytes, options.max_wait)
                started.append((source, reader.stats))
                yield from reader

        source: Source | None = None  # the source of the chunks being added
        stats, read_before, counted = ReadStats(), 0, 0  # bytes of the sources before ``counted``
        for scanned in map(chunks.scan, read()) if live else chunks.scan_ahead(read()):
            if source is None or scanned.chunk.source_id != source.source_id:  # the first chunk of a source
                if source is not None and not chunks.hold():
                    flushed = chunks.flush_calls()
                    if flushed is not None:
                        yield self._batch(*flushed, source)
                at = position[scanned.chunk.source_id]
                source, stats = started[at]
                # Sources are read in order, each to its end before the next: their bytes are summed once.
                read_before += sum(done.bytes for _, done in started[counted:at])
                counted = at
                chunks.coll_text = not options.every_line and not _readable_again(source, stats)
            chunks.add(scanned.chunk, scanned)
            self.bytes_read = read_before + stats.bytes
            if live or chunks.ready:
                ready = chunks.flush_calls(final=False)
                if ready is not None:
                    yield self._batch(*ready, source)
        flushed = chunks.flush_calls()
        if flushed is not None and source is not None:
            yield self._batch(*flushed, source)
        self.bytes_read = sum(done.bytes for _, done in started)
        for source, stats in started:
            self.inputs.append(_summary(source, stats, chunks.unparsed_lines[source.source_id]))

    def _by_segments(
        self, source: Source, chunks: ChunkParser, pool: SegmentPool, stats: ReadStats
    ) -> Iterator[Batch]:
        """One source cut into segments that worker processes parse; batches still come out in line order.

        A plain file is cut into byte ranges that the workers read; other inputs are read (and
        decompressed) here. An input of one segment is parsed here without starting the workers.
        """
        parser = self.parser
        reader = None
        if not source.is_stream and sniff(source) is None:
            ranges = file_segments(source)
            path = os.path.abspath(source.path)  # workers need not share this process's working directory
            segments = (
                Segment(source.source_id, offset, length, path, None, frozenset(parser.state.known_hosts))
                for offset, length in ranges
            )
        else:
            reader = LineReader(source, parallel.SEGMENT_BYTES)
            reader.stats = stats
            segments = (
                Segment(source.source_id, offset, len(data), None, data, frozenset(parser.state.known_hosts))
                for offset, data in reader.texts()
            )
        head = list(islice(segments, 2))
        results: Iterator[tuple[Segment, parallel.SegmentTables]]
        if len(head) < 2:
            results = (
                (segment, parse_segment(chunks, segment, self.options.chunk_bytes)) for segment in head
            )
        else:
            results = pool.map(chain(head, segments))
        read_before, lines_before = self.bytes_read, 0
        for segment, result in results:
            if result.state is not parser.state:
                if missed_hosts(result, segment, parser.state.known_hosts):
                    result = parse_segment(chunks, segment, self.options.chunk_bytes)
                else:
                    parser.state.absorb(result.state)
            if reader is None:
                stats.bytes += result.bytes
            self.bytes_read = read_before + stats.bytes
            # The COLL lines of an input that cannot be read again are quoted from the segment's bytes, which
            # this process read and sent (a worker's rows carry no text).
            quoted = _quotable(segment) if reader is not None and not self.options.every_line else None
            for tables in result.batches:
                tables = shift_lines(tables, lines_before)
                calls = Calls.from_frame(
                    tables.pop("collectives"), self.ops, parser.schemas.tables["collectives"]
                )
                if quoted is not None:
                    for piece in calls.pieces:
                        if isinstance(piece, FramePiece):  # what from_frame makes
                            piece.quote(quoted)
                yield self._batch(tables, calls, source)
            lines_before += result.lines
            stats.lines += result.lines
            stats.invalid_utf8_lines += result.invalid_utf8_lines
            stats.nul_bytes += result.nul_bytes
            if result.problem:
                stats.problems.append(
                    InputProblem(ProblemKind.UNREADABLE, offset=segment.offset, reason=result.problem)
                )
                break

    def _batch(self, tables: dict[str, pl.DataFrame], calls: Calls, source: Source) -> Batch:
        self.numbering.observe(tables["comms"])
        self.dumps.observe(tables.get("torch"), tables.get("lines"))
        self.numbering.number(calls)
        if self.options.every_line:
            tables["collectives"] = conform(calls.frame(), {**calls.schema, **ADDED})
        return Batch(tables, source, self.bytes_read, calls)

    def finish(self, sink: TableSink) -> ParseSummary:
        """Attach ranks in ``sink`` and summarise; raise InputError when nothing at all could be read."""
        inputs = self.inputs
        if not any(i.lines for i in inputs):
            given = [*inputs, *map(InputSummary.skipped, self.skipped)]
            reasons = "; ".join(f"{i.path}: {i.problem or 'empty'}" for i in given)
            raise InputError(f"no log lines could be read ({reasons})")
        instances = self.numbering.instances
        maps = RankMaps(
            processes=process_ranks(instances), instances=instances, devices=device_ranks(instances)
        )
        processes = _processes(maps)
        ranks_seen = set() if processes.is_empty() else set(processes["global_rank"].drop_nulls().to_list())
        flight = _with_processes(self.dumps.tables(ranks_seen), processes)
        rows = sink.finish(maps, {"communicators": instances, "processes": processes, **flight})
        state = self.parser.state
        return ParseSummary(
            inputs=inputs,
            skipped=self.skipped,
            table_rows=rows,
            family_counts=state.family_counts,
            envelope_lines=state.envelope_lines,
            unparsed_envelope_lines=state.unparsed_envelope_lines,
            torn_fragments=state.torn_fragments,
            unparsed_shapes=state.unparsed_shapes.most_common(20),
            values_out_of_range=state.values_out_of_range,
            glued_uncut=state.glued_uncut,
            long_lines_cut=state.long_lines_cut,
        )


def parse_paths(
    paths: Sequence[str],
    sink: TableSink,
    options: ParseOptions = ParseOptions(),
    grammars: GrammarSet | None = None,
    progress: Callable[[int], None] | None = None,
) -> ParseSummary:
    """Parse every input into ``sink``; raise InputError only when nothing at all could be read."""
    stream = TableStream(paths, options, grammars)
    for batch in stream:
        for name, frame in batch.tables.items():
            sink.write(name, frame)
        if progress is not None:
            progress(batch.bytes_read)
    from nccl_logsift.memory import release_freed

    release_freed()  # the stream's buffers, before the sink writes its tables out
    return stream.finish(sink)


def _processes(maps: RankMaps) -> pl.DataFrame:
    """One row per process that initialised a communicator (per rank, for a process that holds ranks of the
    world on several GPUs): where it ran and what rank it was."""
    inst = maps.instances
    return (
        inst.group_by("host", "pid", "global_rank", maintain_order=True)
        .agg(
            world_size=pl.col("world_size").first(),
            cuda_dev=pl.col("cuda_dev").drop_nulls().first(),
            bus_id=pl.col("bus_id").drop_nulls().first(),
            communicators=pl.len(),
            incomplete_inits=(~pl.col("init_completed")).sum(),
        )
        .sort("global_rank", "host", "pid", nulls_last=True)
    )


def _with_processes(flight: dict[str, pl.DataFrame], processes: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The host and pid of each dump's rank, from the processes its logs resolved (null when not logged)."""
    dumps = flight["flight_dumps"]
    if processes.is_empty() or dumps.is_empty():
        flight["flight_dumps"] = dumps.with_columns(host=pl.lit(None, pl.String), pid=pl.lit(None, pl.Int64))
        return flight
    who = processes.select(
        rank=pl.col("global_rank").cast(pl.Int64), host=pl.col("host"), pid=pl.col("pid").cast(pl.Int64)
    ).unique("rank", keep="first")
    flight["flight_dumps"] = dumps.join(who, on="rank", how="left", maintain_order="left")
    return flight


class Analysis:
    """The diagnosis of a stream: feed it batches with :meth:`add`, then ask for the :meth:`report`.

    ``analyze`` feeds it every batch at once; ``watch`` feeds it as a live job writes its log. COLL calls
    go to a :class:`~nccl_logsift.resolve.digest.CollectiveDigest`, so memory stays bounded whatever
    the size of the log. A batch is folded into the digest in a thread of its own while the stream
    parses and numbers the next one (the fold's compiled loop releases the GIL); batches are folded
    one at a time, in order.
    """

    def __init__(self, stream: TableStream, budget: int | None = None):
        from nccl_logsift.resolve.digest import BUDGET_ROWS, CollectiveDigest
        from nccl_logsift.tables import (
            DIAGNOSIS_COLUMNS,
            MODULE_FRAME,
            UNFOLDED,
            MemorySink,
            PlainLines,
            Repeats,
        )

        self.stream = stream
        self._plain = PlainLines()
        stream.parser.plain_filter = self._plain  # prints past the first of each label are not kept
        self._repeats = Repeats(DIAGNOSIS_COLUMNS)
        # The lines both folds would drop are not parsed at all.
        stream.repeats = RepeatSkip(stream.grammars, self._repeats.kept, UNFOLDED, MODULE_FRAME)
        # Columns the diagnosis never reads are dropped as each batch is written, not held to the end.
        self.sink = MemorySink(DIAGNOSIS_COLUMNS)
        self.digest = CollectiveDigest(budget or BUDGET_ROWS)
        self._folder: ThreadPoolExecutor | None = None
        self._folding: Future | None = None
        self._started = time.perf_counter()  # for -v: how long each stage took

    def add(self, batch: Batch) -> None:
        self._folded()
        if self._folder is None:
            self._folder = ThreadPoolExecutor(1, thread_name_prefix="logsift-digest")
        self._folding = self._folder.submit(self.digest.add, batch.calls)
        for name, frame in self._repeats.fold(batch.tables).items():
            if name == "lines":
                frame = self._plain.needed(frame)
            if name != "collectives":
                self.sink.write(name, frame)

    def _folded(self) -> None:
        """Wait for the batch being folded (its error, if any, is raised here)."""
        folding, self._folding = self._folding, None
        if folding is not None:
            folding.result()

    def job(self) -> tuple[ParseSummary, Job]:
        """The summary and the Job of everything added so far (call once, at the end)."""
        from nccl_logsift.memory import release_freed

        self._folded()
        if self._folder is not None:
            self._folder.shutdown()
        release_freed()  # the stream's buffers, before polars builds the job's tables
        kept = self.digest.table()
        if kept.width:  # every table of a job is there, with its columns, even when no line filled it
            self.sink.write("collectives", kept)
        summary = self.stream.finish(self.sink)
        summary.table_rows["collectives"] = self.digest.calls
        summary.repeats_folded = self._repeats.folded + self.stream.parser.state.repeats_skipped
        tables = {**self.sink.tables, "coll_stats": self.digest.stats()}
        release_freed()  # what building them freed, before the rules
        _log_summary(summary, time.perf_counter() - self._started)
        return summary, Job(tables, tuple(i.path for i in summary.inputs))

    def report(self, views: bool = True):
        """Run every rule and triage: the same Report whether the batches came from a file or a pipe.
        ``views=False`` leaves out what only the HTML page draws (``Report.views`` is None)."""
        summary, job = self.job()
        return report_of(summary, job, views)


def _log_summary(summary: ParseSummary, seconds: float) -> None:
    """What was read and parsed, for -v (INFO) and -vv (DEBUG): the CLI sends the log to stderr."""
    if not log.isEnabledFor(logging.INFO):
        return
    size = sum(i.bytes for i in summary.inputs)
    rate = size / seconds / 1e6 if seconds > 0 else 0.0
    log.info(
        "read %d input(s), %s lines, %.1f MB in %.2f s (%.1f MB/s, parsing and ranks included)",
        len(summary.inputs),
        f"{summary.lines:,}",
        size / 1e6,
        seconds,
        rate,
    )
    share = summary.unparsed_envelope_lines / summary.envelope_lines if summary.envelope_lines else 0.0
    log.info(
        "parsed %s NCCL/PyTorch lines, %s not understood (%.2f%%), %s torn fragment(s)",
        f"{summary.envelope_lines:,}",
        f"{summary.unparsed_envelope_lines:,}",
        100 * share,
        f"{summary.torn_fragments:,}",
    )
    rows = ", ".join(f"{name} {count:,}" for name, count in sorted(summary.table_rows.items()) if count)
    log.info("table rows: %s", rows or "none")
    if summary.repeats_folded:
        log.info(
            "repeats: %s NCCL/PyTorch line(s) parsed and counted, not kept (past the first %d of a content)",
            f"{summary.repeats_folded:,}",
            REPEATS_KEPT,
        )
    for damage in summary.damage():
        log.info("kept but not whole: %s", damage)
    for skipped in summary.skipped:
        log.info("skipped %s: %s", skipped.path, skipped.reason)
    if not log.isEnabledFor(logging.DEBUG):
        return
    for item in summary.inputs:
        log.debug(
            "input %s: %s bytes, %s lines, %s not understood%s%s",
            item.path,
            f"{item.bytes:,}",
            f"{item.lines:,}",
            f"{item.unparsed_lines:,}",
            f", {item.compression}" if item.compression else "",
            f"; {item.problem}" if item.problem else "",
        )
    for family, count in sorted(summary.family_counts.items(), key=lambda kv: -kv[1]):
        log.debug("family %s: %s line(s)", family, f"{count:,}")
    for shape, count in summary.unparsed_shapes[:10]:
        log.debug("not understood, %s line(s): %s", f"{count:,}", shape)


def analyze(
    paths: Sequence[str],
    options: ParseOptions = ParseOptions(),
    progress: Callable[[int], None] | None = None,
    views: bool = True,
) -> Report:
    """Read the logs, resolve ranks, run every rule, triage, and return the Report (with the HTML page's
    views unless ``views`` is False: the grid, timeline and topology of a 4096-rank job take seconds)."""
    summary, job = read_job(paths, options, progress)  # parse, then resolve processes, ranks, calls
    return report_of(summary, job, views)  # the rules, Flight Recorder fusion, triage, the report


def read_job(
    paths: Sequence[str],
    options: ParseOptions = ParseOptions(),
    progress: Callable[[int], None] | None = None,
) -> tuple[ParseSummary, Job]:
    """Read the logs into a Job (its tables and resolved ranks) without diagnosing it: the parse summary
    and the Job. Batches of lines are parsed into tables, the COLL calls numbered and folded into the
    digest as they come; the job's processes, communicators and ranks are resolved at the end."""
    analysis = Analysis(TableStream(paths, replace(options, every_line=False)))
    for batch in analysis.stream:
        analysis.add(batch)
        if progress is not None:
            progress(batch.bytes_read)
    return analysis.job()


def report_of(summary: ParseSummary, job: Job, views: bool = True) -> Report:
    """Diagnose a Job: every rule, the Flight Recorder dumps fused into the findings, triage (the root cause
    first, its consequences after it), then the Report."""
    from nccl_logsift.findings import run_rules
    from nccl_logsift.findings.flight import fuse
    from nccl_logsift.findings.triage import triage
    from nccl_logsift.memory import release_freed
    from nccl_logsift.report import build_report

    started = time.perf_counter()
    findings = triage(fuse(run_rules(job)))
    release_freed()
    ruled = time.perf_counter()
    log.info("diagnosis: %d finding(s) in %.2f s", len(findings), ruled - started)
    report = build_report(summary, job, findings, views)
    log.info("report built in %.2f s%s", time.perf_counter() - ruled, " (with the page's views)" * views)
    return report


def parse_job(paths: Sequence[str], options: ParseOptions | None = None) -> tuple[ParseSummary, Job]:
    """Parse ``paths`` into memory: the parse summary and the tables wrapped as a Job (what rule tests
    use; ``analyze`` goes on to run the rules)."""
    return read_job(list(paths), options or ParseOptions())


def load_job(paths: Sequence[str]) -> Job:
    """Parse ``paths`` into a Job (what rule tests use)."""
    return parse_job(paths)[1]
