"""Lines an analysis would parse only to drop them: repeats of a line already parsed, skipped before the
general parser runs.

An analysis keeps the first ``tables.REPEATS_KEPT`` rows of each content per table and counts the rest
(``tables.Repeats``), and of the plain lines (no envelope, no family) only those a rule reads and the first
of each launcher label (``tables.PlainLines``). Both decide on what a line parses to, after the parser has
run its regexes over it. A line is parsed to the same rows whatever came before it when it is not torn or
glued (grammar §9.2: where a glued line is cut depends on the hosts known so far) and has no number too
large for its column: such a line says the same as the last time its text was seen in the same source.
:class:`RepeatSkip` remembers, per source and by a key of the text, what such a line parsed to, and
counts how often it was seen since: once a text was parsed ``kept`` times (a row of a folded table) or once
(a plain line), the lines that repeat it are the ones the folds drop, and they are counted instead of
parsed, as the parser would have counted them (lines, family, envelope) and as ``Repeats`` would have
(:attr:`ParseState.repeats_skipped`).

Lines whose rows anything else reads before the folds (the ``comms`` rows the numbering observes, PyTorch's
lines and rows that the Flight Recorder discovery reads) and lines nothing folds are always parsed.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from nccl_logsift.accel.keymap import earlier
from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import TORCH_PRODUCERS, ParseState

# Texts remembered per source at most: past it the source's texts are forgotten, and lines are parsed
# again until they are seen enough. Only texts whose repeats can be skipped, seen twice in one batch, are
# remembered (a log of distinct lines, training prints, adds none).
MAX_TEXTS = 1 << 18
# Families whose rows something reads before the folds (pipeline.TableStream._batch).
_OBSERVED_TABLES = frozenset({"comms", "torch"})


@dataclass(frozen=True, slots=True)
class _Texts:
    """The texts of one source whose repeats can be skipped, by key (sorted), with what they parsed to.

    :meth:`RepeatSkip.learn` replaces the whole table at once, and only :meth:`RepeatSkip.skip` changes it
    in place: ``seen`` grows, up to ``limit``. So a scanning thread that reads the table once reads arrays
    of one table, and a text it finds seen enough stays so for as long as the table's ``generation`` (a new
    one when the source's texts are forgotten) lasts."""

    generation: int
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    family: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # RepeatSkip._families
    enveloped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    folded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # counted by Repeats
    limit: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # parsed before skipping
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # parsed so far (≤ limit)

    def slots(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each of ``keys`` is known, and where it is (or would be) in the table."""
        if not len(self.keys):
            return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return self.keys[at] == keys, at

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``keys`` that are known, and their positions in the table."""
        known, at = self.slots(keys)
        rows = np.flatnonzero(known)
        return rows, at[rows]


@dataclass(frozen=True, slots=True)
class Saturated:
    """What a scanning thread found of a chunk's leftover lines in its source's texts
    (``RepeatSkip.saturated``): which are known (``known``), and which are seen enough that
    :meth:`RepeatSkip.skip` skips them in any case (``lines``), with what they count for; valid while the
    texts' ``generation`` lasts."""

    generation: int
    known: np.ndarray  # bool, per leftover line
    lines: np.ndarray  # bool, per leftover line: skipped whatever comes before them
    counts: _Counts  # what those count for

    def kept(self, keep: np.ndarray) -> Saturated:
        """The same of the lines ``keep`` (a mask) keeps, none of those it drops skipped in any case."""
        return replace(self, known=self.known[keep], lines=self.lines[keep])


class RepeatSkip:
    """Per source, the texts seen often enough to skip their repeats; see the module's docstring.

    ``kept`` is ``tables.REPEATS_KEPT``; ``unfolded`` the tables never folded; ``read_text`` the regex of
    the plain lines a rule reads (``tables.MODULE_FRAME``), which are always kept.
    """

    def __init__(self, grammars: GrammarSet, kept: int, unfolded: Collection[str], read_text: str):
        self.kept = kept
        self._read_text = read_text
        self._foldable = sorted(
            g.family for g in grammars.grammars if g.table and g.table not in {*unfolded, *_OBSERVED_TABLES}
        )
        self._families = ["text", "blank", *self._foldable]
        self._texts: dict[int, _Texts] = {}
        self._generations = itertools.count()

    def skip(self, source_id: int, keys: np.ndarray, state: ParseState) -> np.ndarray | None:
        """Of lines of ``source_id`` in line order, by the keys of their texts (``accel.split_keys``), which
        to parse (a mask; None for all of them); the others are counted into ``state``."""
        texts = self._texts.get(source_id)
        if texts is None:
            return None
        rows, slots = texts.find(keys)
        if not len(rows):
            return None
        # Each line's occurrence: those of this chunk before it, plus those parsed before.
        skip = earlier(slots) + texts.seen[slots] >= texts.limit[slots]
        np.add(texts.seen, np.bincount(slots[~skip], minlength=len(texts.keys)), out=texts.seen)
        np.minimum(texts.seen, texts.limit, out=texts.seen)
        if not skip.any():
            return None
        self._count(_counts(texts, slots[skip], len(self._families)), state)
        keep = np.ones(len(keys), dtype=bool)
        keep[rows[skip]] = False
        return keep

    def saturated(self, source_id: int, keys: np.ndarray) -> Saturated | None:
        """Of leftover lines of ``source_id`` (by the keys of their texts), those known and those :meth:`skip`
        skips in any case: their texts were seen as often as they are parsed. For a scanning thread, which
        then makes no string of those lines; the table it reads may lag behind :meth:`learn`, which only
        makes it find fewer. None when the source has no texts remembered."""
        texts = self._texts.get(source_id)  # read once: one table's arrays
        if texts is None or not len(texts.keys):  # none, or made by a batch that learnt nothing yet
            return None
        known, at = texts.slots(keys)
        full = known & (texts.seen[at] >= texts.limit[at])
        return Saturated(texts.generation, known, full, _counts(texts, at[full], len(self._families)))

    def skip_saturated(self, source_id: int, saturated: Saturated, state: ParseState) -> bool:
        """Count the lines ``saturated`` found skipped in any case as :meth:`skip` would, and say so; False
        when the source's texts were forgotten since (then :meth:`skip` decides on every line)."""
        texts = self._texts.get(source_id)
        if texts is None or texts.generation != saturated.generation:
            return False
        self._count(saturated.counts, state)
        return True

    def _count(self, counts: _Counts, state: ParseState) -> None:
        """Count skipped lines (``_counts``) as the parser and the fold of repeats would have."""
        families, enveloped, folded = counts
        state.count_unparsed(
            {self._families[code]: int(count) for code, count in enumerate(families)}, enveloped, folded
        )

    def learn(
        self,
        chunk: LineChunk,
        keys: np.ndarray,
        lines: pl.DataFrame,
        unfit: pl.Series,
        sources: np.ndarray | None = None,
    ) -> None:
        """Remember what the new texts among the lines of ``chunk`` (``keys``: those of their texts; parsed:
        their ``lines`` rows, and the line numbers with a value out of range) parsed to, when their repeats
        can be skipped. ``sources`` gives each line's source when ``chunk`` joins the lines of several
        (``parse/sources.py``: numbered 1 to n, as ``lines`` and ``unfit`` are); each source's texts are
        learnt from its own lines, all in one query (a directory of 512 per-rank files ran 512)."""
        if sources is None:
            sources = np.full(len(keys), chunk.source_id, dtype=np.uint16)
        tables, new = self._repeated(keys, sources)
        if not new.any():
            return
        pick = pl.Series(new)
        parsed = pl.DataFrame(
            {"source": sources[new], "key": keys[new], "line_no": chunk.line_no.filter(pick)}
        )
        heads = lines.filter(pl.col("part") == 0).select("line_no", "family", "producer", "torn", "text")
        plain = (
            pl.col("producer").is_null()
            & pl.col("family").is_in(["text", "blank"])
            & ~pl.col("text").str.contains(self._read_text)
        )
        torch = pl.col("producer").is_in(TORCH_PRODUCERS).fill_null(False)
        table_row = pl.col("family").is_in(self._foldable) & ~torch
        glued = _glued(enveloped=pl.col("producer").is_not_null())
        same = (plain | table_row) & ~pl.col("torn") & ~glued & ~pl.col("line_no").is_in(unfit.implode())
        learned = (
            parsed.join(heads, on="line_no", how="inner")
            .group_by("source", "key")
            .agg(
                family=pl.col("family")
                .first()
                .replace_strict(
                    self._families, range(len(self._families)), default=-1, return_dtype=pl.Int32
                ),
                enveloped=pl.col("producer").first().is_not_null(),
                plain=plain.first(),
                seen=pl.len(),
                same=same.all().fill_null(False),
            )
            # A text seen once is not remembered: most are (training prints), and the table would grow with
            # the log; a text that repeats is seen again within a batch.
            .filter(pl.col("same") & (pl.col("family") >= 0) & (pl.col("seen") > 1))
            .sort("source")
        )
        if learned.is_empty():
            return
        folded = ~learned.get_column("plain").to_numpy()
        self._remember(
            tables,
            learned.get_column("source").to_numpy(),
            learned.get_column("key").to_numpy(),
            learned.get_column("family").to_numpy(),
            learned.get_column("enveloped").to_numpy(),
            folded,
            learned.get_column("seen").to_numpy(),
        )

    def learn_rows(self, keys: np.ndarray, sources: np.ndarray, text: pl.Series, family: str) -> None:
        """:meth:`learn` for lines a fast path read into rows of one ``family`` (keys: those of their texts,
        ``text``: the texts, ``sources``: each line's source): each an NCCL line (enveloped), not torn, with
        no value out of range, so what :meth:`learn` finds of them from their ``lines`` rows is known but
        whether the text may be glued, and no join is needed (a 4096-rank job's transport lines: 0.32 s of the
        main thread's wall time through the join, 0.13 s without)."""
        if family not in self._foldable:  # a row no fold counts is never remembered (learn's ``same``)
            return
        tables, new = self._repeated(keys, sources)
        if not new.any():
            return
        # As learn: a text is not remembered when it may be glued (its lines all alike: one text, one key).
        marks = text.filter(pl.Series(new)).to_frame("text").select(_glued(enveloped=1)).to_series()
        new[np.flatnonzero(new)[marks.to_numpy()]] = False
        if not new.any():
            return
        source, key = sources[new], keys[new]
        order = np.lexsort((key, source))  # by source, then key
        source, key = source[order], key[order]
        first = np.flatnonzero(np.r_[True, (source[1:] != source[:-1]) | (key[1:] != key[:-1])])
        seen = np.diff(np.r_[first, len(key)])
        count = len(first)
        self._remember(
            tables,
            source[first],
            key[first],
            np.full(count, self._families.index(family), dtype=np.int32),
            np.ones(count, dtype=bool),
            np.ones(count, dtype=bool),
            seen,
        )

    def _repeated(self, keys: np.ndarray, sources: np.ndarray) -> tuple[dict[int, _Texts], np.ndarray]:
        """Each source's table of texts (a fresh one past MAX_TEXTS), and which lines say a text their source
        has not remembered and says at least twice among these lines."""
        order = np.argsort(sources, kind="stable")
        tables: dict[int, _Texts] = {}
        new = np.ones(len(keys), dtype=bool)
        for sid, start, stop in _runs(sources[order]):
            texts = self._texts.get(sid)
            if texts is None or len(texts.keys) > MAX_TEXTS:
                texts = self._texts[sid] = _Texts(next(self._generations))
            tables[sid] = texts
            if len(texts.keys):
                rows = order[start:stop]
                new[rows[texts.find(keys[rows])[0]]] = False
        # Only a text seen twice in its source here is remembered (_remember): the others are left out
        # before the joins (a 4096-rank job's init lines are all distinct). Keys are mixed with the source
        # here, which can only find more texts twice; the query counts each source's own.
        mixed = keys[new] ^ (sources[new].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        _, inverse, counts = np.unique(mixed, return_inverse=True, return_counts=True)
        new[np.flatnonzero(new)[counts[inverse] < 2]] = False
        return tables, new

    def _remember(
        self,
        tables: dict[int, _Texts],
        source: np.ndarray,
        key: np.ndarray,
        family: np.ndarray,
        enveloped: np.ndarray,
        folded: np.ndarray,
        seen: np.ndarray,
    ) -> None:
        """Add the texts ``key`` (sorted by ``source``) to their sources' tables, each with what it parsed to
        and how often it was seen (a folded text is parsed up to ``kept`` times, a plain one once)."""
        limit = np.where(folded, self.kept, 1)
        seen = np.minimum(seen.astype(np.int64), limit)
        for sid, start, stop in _runs(source):
            texts = tables[sid]
            at = slice(start, stop)
            merged = np.concatenate([texts.keys, key[at]])
            order = np.argsort(merged, kind="stable")
            # A new table, in place of the old at once: a scanning thread reads either whole (_Texts).
            self._texts[sid] = _Texts(
                texts.generation,
                merged[order],
                np.concatenate([texts.family, family[at]])[order],
                np.concatenate([texts.enveloped, enveloped[at]])[order],
                np.concatenate([texts.folded, folded[at]])[order],
                np.concatenate([texts.limit, limit[at]])[order],
                np.concatenate([texts.seen, seen[at]])[order],
            )


def _glued(enveloped: pl.Expr | int) -> pl.Expr:
    """Whether a line's ``text`` may be glued (``enveloped``: 1 when it has an envelope, whose " NCCL " is
    its own, else 0): where a glued line is cut depends on the hosts known so far
    (LineParser._split_glued)."""
    return (
        pl.col("text").str.contains("]:[", literal=True)
        | pl.col("text").str.contains(".cpp:", literal=True)
        | (pl.col("text").str.count_matches(" NCCL ", literal=True) > enveloped)
    )


def _runs(sorted_ids: np.ndarray) -> list[tuple[int, int, int]]:
    """Each id of ``sorted_ids`` (sorted) with where its run starts and stops."""
    ids, starts = np.unique(sorted_ids, return_index=True)
    return list(zip(ids.tolist(), starts.tolist(), [*starts[1:].tolist(), len(sorted_ids)]))


# Of skipped lines: how many per family code (RepeatSkip._families), how many enveloped and how many folded.
_Counts = tuple[np.ndarray, int, int]


def _counts(texts: _Texts, skipped: np.ndarray, families: int) -> _Counts:
    """What the lines at ``skipped`` (positions in ``texts``) count for."""
    return (
        np.bincount(texts.family[skipped], minlength=families),
        int(texts.enveloped[skipped].sum()),
        int(texts.folded[skipped].sum()),
    )
