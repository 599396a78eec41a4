"""Raw chunks into tables: the COLL fast path takes the bulk, the transport fast path the connection lines
of communicator inits, the grammar-driven parser the rest.

The general parser (:class:`~nccl_logsift.parse.lineparser.LineParser`) costs a fixed few tens of
milliseconds per call whatever the number of lines, so the lines the fast paths leave are gathered over
several chunks and parsed together; the fast rows wait with them, so every batch comes out in line
order with its communicator inits, as one chunk always did. Transport rows go out with the leftover lines
they were among (parse/fasttransport.py).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from nccl_logsift import accel
from nccl_logsift.io.lines import MAX_LINE_BYTES, LineChunk, RawChunk
from nccl_logsift.memory import copied
from nccl_logsift.parse import fastcoll, fasttransport
from nccl_logsift.parse.calls import LAUNCHER_STREAM, Calls, FastPiece, Names
from nccl_logsift.parse.lineparser import GLUE_MARKS, PLAIN_FAMILIES, LineParser, ParsedPrefixes
from nccl_logsift.parse.repeats import RepeatSkip, Saturated
from nccl_logsift.parse.schema import conform
from nccl_logsift.parse.sources import cut_alike, parse_sources

# A batch is parsed when this many leftover lines or fast rows of a source wait, or at the end of a source
# when this many wait in all or its leftovers may not wait for the next source's (ChunkParser.hold).
# Leftover lines are counted before repeats are skipped and plain lines dropped, so that where batches end
# (and where a glued line is cut: LineParser._split_glued) does not depend on what is skipped. Most of a
# training log's leftovers are skipped or dropped, so a batch's parse is mostly its fixed cost: 100,000
# (from 50,000) took mixed32 from 4.71 to 4.06 s and coll4096 from 5.62 to 5.17 s (+55 and +9 MB).
REST_LINES = 100_000
FAST_ROWS = 200_000
# The calls that the sources held for the next one's leftovers (``ChunkParser.hold``) may hold in all. Each
# source's init lines must be parsed before its calls are numbered, so the sources held flush as one batch,
# one call of the general parser: a directory of 512 per-rank files of 2 MB paid that call (~50 ms) and a
# batch's numbering every ~20 files at FAST_ROWS. Twice FAST_ROWS: 10.2 to 8.2 s, 378 to 501 MB (a held call
# costs ~150 bytes, and the flush copies it); 4 times: 6.6 s and 740 MB.
HELD_ROWS = 2 * FAST_ROWS
# The first batch ends sooner: its leftovers (a job's init lines) are parsed while the next chunks are read
# and scanned, instead of after FAST_ROWS calls were (the start of every run, on one core).
FIRST_ROWS = 20_000
# The tables whose rows the calls of a batch are numbered by (communicator inits) or that hold calls: a
# leftover line that may bring one is parsed with the fast rows around it (ChunkParser.rest_may_wait).
NUMBERED_BY = ("comms", fastcoll.TABLE)
SCAN_AHEAD = 6  # chunks read and scanned ahead of the batches (4 MB each)
# Threads that scan chunks side by side: the compiled scan releases the GIL, so two keep two cores busy
# while the batches are numbered and digested between them.
SCAN_THREADS = min(4, max(2, os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class Scanned:
    """A chunk with what the fast path found in it, and the hosts of the new prefixes it parsed."""

    chunk: RawChunk  # with its lines longer than MAX_LINE_BYTES cut
    found: fastcoll.FastRows
    rest: np.ndarray  # the positions of the lines the fast path left, for the general parser
    keys: np.ndarray | None = None  # the keys of their texts (accel.split_keys), when repeats are skipped
    hosts: list[str] = field(default_factory=list)
    cut: int = 0  # lines cut
    lines: LineChunk | None = None  # the lines at ``rest`` (less those ``saturated`` skips), if any
    # Which of them may change how calls are numbered or be glued (ChunkParser._blocking), when leftovers
    # may wait (ChunkParser.rest_may_wait).
    blocking: np.ndarray | None = None
    # Of those, the plain lines an analysis drops once it drops unlabeled ones (LineParser.unlabeled_plain:
    # their family's code, else 0), when it does.
    plain: np.ndarray | None = None
    # Which of the leftover lines are skipped as repeats in any case (RepeatSkip.saturated): ``lines``,
    # ``blocking`` and ``plain`` leave them out while its generation of texts lasts.
    saturated: Saturated | None = None
    # The transport lines the transport fast path took (parse/fasttransport.py), not among ``rest``.
    transports: fasttransport.TransportPiece | None = None


@dataclass(frozen=True, slots=True)
class Literals:
    """Literals that lines are searched for as bytes (``accel.split_marked``), end to end with their bounds:
    in the scanning threads, with the GIL released, where a polars ``contains_any`` over each chunk's
    leftovers waited for polars' threads, busy with the batches (mixed32: 0.4 s of CPU, 3 s of wall)."""

    needles: np.ndarray  # uint8: the literals' UTF-8 bytes, end to end
    offsets: np.ndarray  # int64: where each starts, and the end

    @classmethod
    def of(cls, texts: Iterable[str]) -> Literals:
        encoded = [text.encode() for text in texts]
        offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int64)
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def marked(self, chunk: RawChunk, rows: np.ndarray) -> np.ndarray:
        """Which of the lines ``rows`` of ``chunk`` hold one of the literals."""
        found = np.zeros(len(rows), dtype=bool)
        accel.split_marked(chunk.view.raw, chunk.starts, chunk.ends, rows, self.needles, self.offsets, found)
        return found


class ChunkParser:
    """Feed raw chunks with :meth:`add`; :meth:`flush` returns the tables of everything added since, and
    :meth:`flush_calls` the same with the COLL calls as :class:`~nccl_logsift.parse.calls.Calls`.

    ``every_line`` keeps a ``lines`` row (and the sendbuff/recvbuff/stream addresses) for every COLL
    call, as ``logsift parse`` writes them; the diagnosis does without, so its ``lines`` table holds
    the other lines only and COLL calls live in ``collectives``. Their text is read again from the file
    for evidence; ``coll_text`` (set for standard input and compressed files, which cannot be read again)
    keeps it for the calls that are kept (:class:`~nccl_logsift.parse.calls.FastPiece`).
    """

    def __init__(
        self,
        parser: LineParser,
        every_line: bool = True,
        ops: Names | None = None,
        repeats: RepeatSkip | None = None,
    ):
        self.parser = parser
        self.repeats = repeats  # an analysis's: repeats of lines already parsed are counted, not parsed
        self.every_line = every_line
        self.ops = ops or Names()
        self._scanner = self._new_scanner()
        self._fast: list[FastPiece] = []
        self._rest: list[LineChunk] = []
        # Transport lines read by their fast path: they wait, and go out, with the leftover lines.
        self._transports: list[fasttransport.TransportPiece] = []
        self._rest_copied = 0  # the first chunks of _rest whose text is copied out already (_copy_out_rest)
        self._transports_copied = 0  # the same of _transports
        self._keys: list[np.ndarray] = []  # the keys of the lines in _rest, when repeats are skipped
        self._source_id = 0
        self._fast_rows = 0
        self._empty = parser.empty_tables  # the tables of a batch without leftover lines
        self._rest_lines = 0
        self.coll_text = False
        # Set by an analysis: fast rows may go out without the leftover lines waiting beside them, when
        # none of those can change how the calls are numbered (see flush_calls).
        self.rest_may_wait = False
        self._rest_blocks = False  # a waiting leftover line may bring a comms row or a call, or be glued
        self._flushed = False  # a batch went out
        # What waits of sources before the one being read (hold): their leftover lines, keys and fast rows.
        self._held_rest: list[LineChunk] = []
        self._held_keys: list[np.ndarray] = []
        self._held_fast: list[FastPiece] = []
        self._held_transports: list[fasttransport.TransportPiece] = []
        self._held_lines = 0  # the lines of _held_rest and the rows of _held_fast, counted as they are held
        self._held_rows = 0
        self.unparsed_lines: Counter[int] = Counter()  # by source: its enveloped lines no family claimed
        self._blocking = Literals.of(
            sorted(
                {p.anchor for g in parser.grammars.grammars if g.table in NUMBERED_BY for p in g.patterns}
                | set(GLUE_MARKS)
            )
        )

    @property
    def ready(self) -> bool:
        rows = FAST_ROWS if self._flushed else min(FIRST_ROWS, FAST_ROWS)
        return self._rest_lines >= REST_LINES or self._fast_rows >= rows

    @property
    def fast(self) -> fastcoll.CollFastPath:
        return self._scanner.fast

    def scan(self, chunk: RawChunk) -> Scanned:
        """The fast path's part of :meth:`add`, which may run in another thread (:meth:`scan_ahead`)."""
        return self._scanner.scan(chunk, self._blocking_marks())

    def _blocking_marks(self) -> Literals | None:
        """What a scan looks for in the leftover lines (``Scanned.blocking``); None when they never wait."""
        return self._blocking if self.rest_may_wait else None

    def _new_scanner(self) -> _Scanner:
        return _Scanner(self.parser, self.every_line, self.ops, self.repeats)

    def scan_ahead(self, chunks: Iterable[RawChunk], threads: int = SCAN_THREADS) -> Iterator[Scanned]:
        """``scan`` every chunk, up to SCAN_AHEAD chunks ahead, in ``threads`` threads; in input order.

        A thread reads (and splits) the chunks and hands them to the scanning threads, each with a fast
        path (prefix and op tables) of its own. Reading, decompression and the compiled COLL scan
        release the GIL, so on two cores they run beside the batches being parsed, numbered and
        digested. What a scan learns (the hosts of new prefixes) reaches the parser's state only in
        :meth:`add`, in input order, so the tables are those of reading one chunk after the other.
        """
        order: queue.Queue = queue.Queue(maxsize=SCAN_AHEAD)  # a Future per chunk, in input order
        todo: queue.Queue = queue.Queue()
        stop = threading.Event()

        def put(where: queue.Queue, item) -> bool:
            while not stop.is_set():
                try:
                    where.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for chunk in chunks:
                    done: Future = Future()
                    if not put(order, done):
                        return
                    todo.put((done, chunk))
                put(order, None)
            except BaseException as exc:  # handed to the consumer, raised there
                put(order, exc)
            finally:
                for _ in range(threads):
                    todo.put(None)

        marks = self._blocking_marks()

        def scan(scanner: _Scanner) -> None:
            while (work := todo.get()) is not None:
                done, chunk = work
                if stop.is_set():
                    done.cancel()
                    continue
                try:
                    done.set_result(scanner.scan(chunk, marks))
                except BaseException as exc:
                    done.set_exception(exc)

        scanners = [self._scanner] + [self._new_scanner() for _ in range(threads - 1)]
        workers = [threading.Thread(target=read, name="logsift-read", daemon=True)]
        workers += [
            threading.Thread(target=scan, args=(scanner,), name=f"logsift-scan-{n}", daemon=True)
            for n, scanner in enumerate(scanners)
        ]
        for worker in workers:
            worker.start()
        try:
            while (item := order.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item.result()
        finally:
            stop.set()
            for worker in workers:
                worker.join()

    def add(self, chunk: RawChunk, scanned: Scanned | None = None) -> None:
        self._source_id = chunk.source_id
        scanned = scanned or self.scan(chunk)
        chunk = scanned.chunk
        self.parser.state.known_hosts.update(scanned.hosts)
        self.parser.state.long_lines_cut += scanned.cut
        found = scanned.found
        if len(found.index):
            piece = found.piece
            lines = found.index
            if self.every_line and self.parser.keep_text:
                piece.text = chunk.view.strings(
                    chunk.starts[lines], chunk.ends[lines] - chunk.starts[lines], "text"
                )
            elif self.coll_text:
                piece.lines = (chunk.view, chunk.starts[lines], chunk.ends[lines])
            self._fast.append(piece)
            self._fast_rows += len(piece)
        transports = scanned.transports
        if transports is not None:
            # Counted as the leftover lines they were before they had a fast path (before repeats are
            # skipped), so batches end where they did and cut glued lines with the same hosts known.
            self._rest_lines += len(transports)
            if self.repeats is not None and transports.keys is not None:
                keep = self.repeats.skip(chunk.source_id, transports.keys, self.parser.state)
                if keep is not None:
                    transports = transports.take(keep)
            if len(transports):
                self._transports.append(transports)
        rest = scanned.rest
        if not len(rest):
            return
        # Counted before repeats are skipped, so that a batch holds the same lines whatever is skipped.
        self._rest_lines += len(rest)
        lines, blocking, keys, plain = scanned.lines, scanned.blocking, scanned.keys, scanned.plain
        saturated = scanned.saturated
        if saturated is not None and saturated.lines.any():
            assert self.repeats is not None and keys is not None
            if self.repeats.skip_saturated(chunk.source_id, saturated, self.parser.state):
                rest, keys = rest[~saturated.lines], keys[~saturated.lines]
                if not len(rest):
                    return
            else:  # the source's texts were forgotten since the scan: every line as if none were known
                lines, plain = None, None
                blocking = None if blocking is None else np.ones(len(rest), dtype=bool)  # may block
        # Whether ``lines`` (the scan's strings of ``rest``) no longer are those of ``rest``.
        stale = lines is None
        filter_ = self.parser.plain_filter
        if plain is not None and filter_ is not None and filter_.unlabeled_known() and plain.any():
            keep = self._drop_plain(plain)
            rest, stale = rest[keep], True
            keys = None if keys is None else keys[keep]
            blocking = None if blocking is None else blocking[keep]
            if not len(rest):
                return
        if self.repeats is not None and keys is not None:
            keep = self.repeats.skip(chunk.source_id, keys, self.parser.state)
            if keep is not None:
                rest, keys, stale = rest[keep], keys[keep], True
                blocking = None if blocking is None else blocking[keep]
            if not len(rest):
                return
            self._keys.append(keys)
        # The lines kept made strings again rather than filtered out of the scan's: a polars filter per chunk
        # waited ~2 ms for the GIL and polars' pool on the main thread (mixed32: 0.7 s of wall, 0.15 s of
        # CPU), the views' compiled loop does not wait.
        self._rest.append(chunk.lines(rest) if stale else lines)
        if blocking is not None:
            self._rest_blocks = self._rest_blocks or bool(blocking.any())

    def _drop_plain(self, plain: np.ndarray) -> np.ndarray:
        """Count the plain lines marked in ``plain`` (``Scanned.plain``) as the parser would have counted
        them when its plain filter dropped them (``LineParser._without_known``); the lines to keep."""
        counts = np.bincount(plain, minlength=len(PLAIN_FAMILIES) + 1)
        self.parser.state.count_unparsed(
            {family: int(counts[code]) for code, family in PLAIN_FAMILIES.items()}
        )
        return plain == 0

    def flush(self) -> dict[str, pl.DataFrame] | None:
        """Tables of the lines added since the last flush, or None when nothing is waiting."""
        flushed = self.flush_calls()
        if flushed is None:
            return None
        tables, calls = flushed
        schema = self.parser.schemas.tables[fastcoll.TABLE]
        coll = calls.frame()
        tables[fastcoll.TABLE] = conform(coll, schema) if self.every_line or coll.is_empty() else coll
        return tables

    def flush_calls(self, final: bool = True) -> tuple[dict[str, pl.DataFrame], Calls] | None:
        """The tables of the lines added since the last flush but ``collectives``, and their COLL calls;
        None when nothing is waiting.

        With ``rest_may_wait``, a flush that is not ``final`` (the end of a source) and finds fewer than
        REST_LINES leftover lines waiting gives the fast rows' calls alone, with empty tables, and the
        leftovers wait for the next flush, when none of them can change the numbering of those calls: no
        communicator's Init or Destroy line or COLL line (their patterns' anchors), and no line that may
        be glued (where it is cut depends on the hosts known when it is parsed). The general parser then
        runs once per REST_LINES leftovers, not once per FAST_ROWS calls: each call compiles again every
        regex it uses (polars keeps 32 per thread), a fixed cost that a training print every 50 COLL
        lines paid 20 times per GB. The tables are the same, in the same order: only COLL calls went out
        ahead of the lines they came between."""
        held = bool(self._held_rest or self._held_fast or self._held_transports)
        if not self._fast and not self._rest and not self._rest_lines and not held:
            return None
        self._flushed = True
        alone = (
            not final
            and self.rest_may_wait
            and bool(self._fast)
            and not self._blocks()
            and self._rest_lines < REST_LINES
        )
        parser = self.parser
        # What sources before this one held goes out whole, with this source's calls alone or its lines.
        rest, keys, pieces = self._held_rest, self._held_keys, [*self._held_fast, *self._fast]
        transports = self._held_transports
        self._held_rest, self._held_keys, self._held_fast, self._held_transports = [], [], [], []
        self._held_lines = self._held_rows = 0
        if not alone:
            rest, keys = [*rest, *self._rest], [*keys, *self._keys]
            transports = [*transports, *self._transports]
        tables = self._parse_rest(rest, keys)
        if transports:
            self._add_transports(tables, transports)
        general = tables.pop(fastcoll.TABLE)
        schema = parser.schemas.tables[fastcoll.TABLE]
        calls = Calls.of([*pieces, *Calls.from_frame(general, self.ops, schema).pieces], self.ops, schema)
        if alone:
            self._leftovers_wait(pieces)
            return tables, calls
        self._rest_blocks = False
        if pieces:
            fast_rows = sum(len(piece) for piece in pieces)
            if self.every_line:
                fast = pl.concat([piece.frame() for piece in pieces], how="vertical_relaxed")
                lines = (
                    fast.drop(*fastcoll.COLL_FIELDS)
                    .rename({LAUNCHER_STREAM: "stream"})
                    .with_columns(producer=pl.lit("nccl"), torn=pl.lit(False))
                )
                tables["lines"] = pl.concat([tables["lines"], conform(lines, parser.schemas.lines)]).sort(
                    "source_id", "line_no", "part"
                )
            parser.account_fast(fastcoll.FAMILY, fast_rows)
        self._fast, self._rest, self._keys, self._fast_rows, self._rest_lines = [], [], [], 0, 0
        self._transports = []
        self._rest_copied = self._transports_copied = 0
        return tables, calls

    def _add_transports(
        self, tables: dict[str, pl.DataFrame], pieces: list[fasttransport.TransportPiece]
    ) -> None:
        """The rows of the transport lines read by their fast path into ``tables``, in line order, counted as
        the general parser counts the lines it parses."""
        parser = self.parser
        transports, lines = fasttransport.tables(pieces, parser.schemas)
        if self.repeats is not None and all(piece.keys is not None for piece in pieces):
            self._learn_transports(pieces, lines)
        tables[fasttransport.TABLE] = fasttransport.merged(tables[fasttransport.TABLE], transports)
        tables["lines"] = fasttransport.merged(tables["lines"], lines)
        parser.account_fast(fasttransport.FAMILY, transports.height)

    def _learn_transports(self, pieces: list[fasttransport.TransportPiece], lines: pl.DataFrame) -> None:
        """Let the repeats learn the texts of the transport lines of ``pieces`` (``lines``: their rows, in the
        same order) as they learn those the general parser parsed (``_parse_rest``): their repeats are then
        skipped before they are scanned, as were those of the lines they once were. A text the other call
        learnt is not learnt again (one under a head the prefix table lacked may have been a leftover line in
        another chunk): its count then falls short of the lines seen, which parses a line more, never skips
        one the fold keeps."""
        assert self.repeats is not None
        sources = np.concatenate([np.full(len(piece), piece.source_id, dtype=np.uint16) for piece in pieces])
        keys = np.concatenate([piece.keys for piece in pieces if piece.keys is not None])
        self.repeats.learn_rows(keys, sources, lines.get_column("text"), fasttransport.FAMILY)

    def _blocks(self) -> bool:
        """Whether a waiting leftover line may change how calls are numbered or be glued (``_blocking``):
        each chunk's scan marked its leftover lines that may (``Scanned.blocking``), in the scanning
        threads; looked for here, on the main thread, it cost mixed32 0.23 s a GB."""
        return self._rest_blocks

    def _parse_rest(self, rest: list[LineChunk], keys: list[np.ndarray]) -> dict[str, pl.DataFrame]:
        """The tables of leftover lines (``keys``: theirs, when repeats are skipped), of one source or of
        several (``parse/sources.py``), in one call of the general parser; their repeats learnt."""
        parser = self.parser
        if not rest:
            return dict(self._empty)
        if rest[0].source_id != rest[-1].source_id:  # leftovers of sources held for the next one's
            tables, unparsed = parse_sources(parser, self.repeats, rest, keys)
            self.unparsed_lines.update(unparsed)
            return tables
        unparsed_before = parser.state.unparsed_envelope_lines
        lines = LineChunk.concat(rest)
        if self.repeats is not None:
            tables, unfit = parser.parse_unfit(lines)
            self.repeats.learn(lines, np.concatenate(keys), tables["lines"], unfit)
        else:
            tables = parser.parse(lines)
        self.unparsed_lines[lines.source_id] += parser.state.unparsed_envelope_lines - unparsed_before
        return tables

    def hold(self) -> bool:
        """At the end of a source: keep what waits for the next source's lines, to be parsed with them in
        one call of the general parser (``parse/sources.py``), and say so; False when it must be parsed now:
        when REST_LINES leftover lines or HELD_ROWS calls wait in all, or a leftover line of the source could
        be cut where it would not be if parsed now. The next source's batches then end where they would on
        their own (``ready`` counts its lines alone); the held lines' text is copied out of the chunks they
        were read in, which are freed."""
        # Counted as they were held: summed over every source held, at every source's end, the counts cost a
        # directory of 4096 files 4 s.
        rest = self._rest_lines + self._held_lines
        fast = self._fast_rows + self._held_rows
        if rest >= REST_LINES or fast >= HELD_ROWS:
            return False
        if self._rest and not cut_alike(pl.concat([chunk.text for chunk in self._rest])):
            return False
        self._copy_out_rest()
        self._held_rest += self._rest
        self._held_keys += self._keys
        self._held_fast += self._fast
        self._held_transports += self._transports
        self._held_lines += sum(map(len, self._rest)) + sum(map(len, self._transports))
        self._held_rows += self._fast_rows
        self._fast, self._rest, self._keys, self._fast_rows, self._rest_lines = [], [], [], 0, 0
        self._transports = []
        self._rest_copied = self._transports_copied = 0
        self._rest_blocks = False
        return True

    def _leftovers_wait(self, pieces: list[FastPiece]) -> None:
        """The calls of ``pieces`` went out without this source's leftover lines, which keep waiting: their
        text is copied out of the chunks they were read in (a few lines held every 4 MB chunk)."""
        self.parser.account_fast(fastcoll.FAMILY, sum(len(piece) for piece in pieces))
        self._copy_out_rest()
        self._fast, self._fast_rows = [], 0

    def _copy_out_rest(self) -> None:
        """Copy the text of the waiting leftover chunks out of the chunks they were read in, once each: a
        training print every 50 calls left ~440 lines a chunk waiting through ~10 flushes of calls, and each
        flush checked every chunk waiting again (``memory.detached``)."""
        fresh = self._rest[self._rest_copied :]
        if fresh:
            # In one copy (~0.5 ms a call however few the lines), each chunk a slice of it.
            # Copied whatever it shares: the chunks are freed, and asking first (memory.detached) cost more.
            text = copied(pl.concat([c.text for c in fresh]))
            bounds = np.cumsum([0] + [len(c) for c in fresh])
            self._rest[self._rest_copied :] = [
                replace(c, text=text.slice(int(start), len(c))) for c, start in zip(fresh, bounds)
            ]
        self._rest_copied = len(self._rest)
        fresh_transports = self._transports[self._transports_copied :]
        if fresh_transports:
            self._transports[self._transports_copied :] = [piece.detached() for piece in fresh_transports]
        self._transports_copied = len(self._transports)


class _Scanner:
    """A COLL fast path, a transport fast path sharing its prefixes, and the hosts its new prefixes taught it
    since the last scan: one per thread. With ``repeats``, it also keys the text of every line the fast paths
    left (to skip the repeats of lines parsed already, parse/repeats.py), here where the bytes are, before
    any of them becomes a string: those whose texts were seen enough never become one
    (``Scanned.saturated``); and it marks those of the others not known as repeats yet that an analysis may
    drop unparsed (``Scanned.plain``)."""

    def __init__(self, parser: LineParser, every_line: bool, ops: Names, repeats: RepeatSkip | None = None):
        self._parser = parser  # its heads are read once between the scanning threads
        self.fast = fastcoll.CollFastPath(self._parse_prefixes, pointers=every_line, ops=ops)
        self.transports = fasttransport.TransportFastPath(
            self.fast.prefixes, self._tail_fields, text=parser.keep_text
        )
        self._repeats = repeats
        self._learned: list[str] = []

    def scan(self, chunk: RawChunk, blocking: Literals | None = None) -> Scanned:
        """What the fast path takes of ``chunk``, and the lines it leaves; with ``blocking``, which of those
        hold one of its literals."""
        chunk, cut = cut_long_lines(chunk)
        found = self.fast.read(chunk)
        # The lines the fast path left: a mask, not a set difference (10x cheaper).
        left = np.ones(len(chunk), dtype=bool)
        left[found.index] = False
        rest = np.flatnonzero(left)
        keys = saturated = None
        if self._repeats is not None and len(rest):
            keys = np.empty(len(rest), dtype=np.uint64)
            accel.split_keys(chunk.view.raw, chunk.starts, chunk.ends, rest, keys)
            saturated = self._repeats.saturated(chunk.source_id, keys)
        skipped = saturated is not None and saturated.lines.any()
        # The transport lines among them, but those skipped in any case; with the keys of their texts.
        taken, transports = self.transports.read(chunk, rest[~saturated.lines] if skipped else rest)
        if len(taken):
            left[taken] = False
            kept = left[rest]
            if keys is not None:
                transports = replace(transports, keys=keys[~kept])
                keys = keys[kept]
            if saturated is not None:
                saturated = saturated.kept(kept)
            rest = rest[kept]
        strung = rest  # the leftovers made strings: all but those skipped in any case
        if saturated is not None and saturated.lines.any():
            strung = rest[~saturated.lines]
        hosts, self._learned = self._learned, []
        lines = marks = plain = None
        if len(strung):
            lines = chunk.lines(strung)
            known = None if saturated is None else saturated.known[~saturated.lines]
            marks = None if blocking is None else blocking.marked(chunk, strung)
            plain = self._plain(lines, known)
        return Scanned(chunk, found, rest, keys, hosts, cut, lines, marks, plain, saturated, transports)

    def _plain(self, lines: LineChunk, known: np.ndarray | None) -> np.ndarray | None:
        """``Scanned.plain`` of ``lines``, tested only once an analysis drops unlabeled plain lines, and only
        on the lines whose texts are not ``known`` as repeats (most of a log's leftovers, which are
        skipped in any case). A line left unmarked is parsed, so a stale view only costs time."""
        parser = self._parser
        if parser.plain_filter is None or not parser.plain_filter.unlabeled_known():
            return None
        if known is None or not known.any():
            return parser.unlabeled_plain(lines.text)
        fresh = ~known
        if not fresh.any():
            return None
        codes = np.zeros(len(lines), dtype=np.uint8)
        tested = parser.unlabeled_plain(lines.text.filter(pl.Series(fresh)))
        if tested is None:
            return None
        codes[fresh] = tested
        return codes

    def _tail_fields(self, tails: list[str]) -> pl.DataFrame:
        return fasttransport.tail_fields(self._parser, tails)

    def _parse_prefixes(self, prefixes: list[str]) -> ParsedPrefixes:
        parsed = self._parser.parse_prefixes(prefixes, learn=False)
        self._learned += parsed.hosts()
        return parsed


def cut_long_lines(chunk: RawChunk) -> tuple[RawChunk, int]:
    """The chunk with every line longer than MAX_LINE_BYTES cut to that many bytes (less the bytes of a
    UTF-8 character it would split), and how many were cut: the regexes, the text columns and the evidence
    of a line cost several times its length (a line of 512 MB took 7 GB)."""
    long = np.flatnonzero(chunk.ends - chunk.starts > MAX_LINE_BYTES)
    if not len(long):
        return chunk, 0
    cut = chunk.starts[long] + MAX_LINE_BYTES
    raw = chunk.view.raw
    for _ in range(3):  # a character has at most 3 continuation bytes
        cut -= (raw[cut] & 0xC0) == 0x80
    ends = chunk.ends.copy()
    ends[long] = cut
    return replace(chunk, ends=ends), len(long)
