"""What parsing the inputs found: per input (bytes, lines, problems) and in all (tables, line families,
what was damaged or left unparsed). The pipeline fills them in; the report and `logsift parse` read them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from nccl_logsift.io.lines import (
    MAX_LINE_BYTES,
)
from nccl_logsift.io.sources import SourceProblem
from nccl_logsift.model import InputProblem, ProblemKind
from nccl_logsift.parse.lineparser import MAX_PARTS


@dataclass(frozen=True, slots=True)
class InputSummary:
    """What one input held; ``unparsed_lines`` counts enveloped (NCCL/PyTorch) lines no family claimed.
    ``problem`` says in words what cut it short or skipped it; ``problems`` lists all that went wrong."""

    path: str
    bytes: int
    lines: int
    unparsed_lines: int
    compression: str | None
    invalid_utf8_lines: int
    problem: str | None
    problems: tuple[InputProblem, ...] = ()

    @staticmethod
    def skipped(problem: SourceProblem) -> InputSummary:
        """A path found while expanding the arguments that could not be read at all."""
        unreadable = InputProblem(ProblemKind.UNREADABLE, reason=problem.reason)
        return InputSummary(problem.path, 0, 0, 0, None, 0, unreadable.describe(), (unreadable,))


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
    # Kept but not whole: numbers too large for their column (null), glued heads past the last part of a
    # line (left in its text), lines longer than the limit (cut, io/lines.py MAX_LINE_BYTES).
    values_out_of_range: int = 0
    glued_uncut: int = 0
    long_lines_cut: int = 0
    # Parsed and counted, not kept: NCCL/PyTorch lines past the first tables.REPEATS_KEPT of the same content
    # (an analysis only).
    repeats_folded: int = 0

    def damage(self) -> list[str]:
        """What the parser kept but not whole, as short sentences (empty when nothing was)."""
        glued = f"glued NCCL/PyTorch line head(s) left uncut past {MAX_PARTS} parts of a line"
        counts = [
            (self.values_out_of_range, "number(s) too large for their column read as unknown (null)"),
            (self.glued_uncut, glued),
            (
                self.long_lines_cut,
                f"line(s) longer than {MAX_LINE_BYTES >> 20} MiB cut to their first "
                f"{MAX_LINE_BYTES >> 20} MiB",
            ),
        ]
        return [f"{count:,} {what}" for count, what in counts if count]

    @property
    def lines(self) -> int:
        return sum(i.lines for i in self.inputs)
