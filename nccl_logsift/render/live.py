"""``logsift watch`` output: the live terminal view of a :class:`LiveSnapshot`, and events as JSON lines.

Event objects (one per line, ``at`` in seconds since the watch started):

* ``{"event": "start", "at": 0.0, "inputs": [...], "stall_after": S}`` once the input is being read;
* ``{"event": "finding", "at": T, "finding": {...}}`` for a rank that stalled (LS101) or a WARN, with the
  keys of a finding of the findings contract ``nccl-logsift/findings/v1``;
* ``{"event": "recovered", "at": T, "note": "...", "finding": {...}}`` when a stalled rank advances again
  (``finding`` is the stall it ends);
* ``{"event": "report", "report": {...}}`` last: the report ``logsift analyze --format json`` writes.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nccl_logsift.live.state import EventKind, LiveEvent, LiveSnapshot, RankRow
from nccl_logsift.model import Report
from nccl_logsift.render.controls import visible
from nccl_logsift.render.json import finding_dict, to_dict
from nccl_logsift.render.terminal import STYLE

EVENT_LINES = 6  # live findings shown under the table
CHROME_LINES = 8  # header, table title, head, borders and caption


def live_view(
    snapshot: LiveSnapshot, height: int, width: int = 0, full: bool = False, hint: str = ""
) -> RenderableType:
    """Header (``hint``, the keys there are, at its end), the last collective of every rank (problems first,
    cut to fit ``height`` lines), live findings: one line each, cut at the screen's edge, or with ``full``
    (``watch --full``, or the key f) each whole, wrapped to ``width`` with its advice under it, as many of the
    latest as leave the table three rows."""
    note = 2 * snapshot.block_buffered  # the buffering note takes two lines
    recent = snapshot.events[-EVENT_LINES:]
    if full and width > 0:
        lines = _whole_events(recent, width, budget=height - CHROME_LINES - 3 - note)
    else:
        lines = [_event_line(e) for e in recent]
    room = max(3, height - CHROME_LINES - len(lines) - note)
    return Group(_header(snapshot, hint), *_buffering_note(snapshot), _rank_table(snapshot, room), *lines)


def _header(s: LiveSnapshot, hint: str = "") -> Text:
    ranks = f"{s.ranks_seen}" + (f"/{s.world_size}" if s.world_size else "")
    minutes, seconds = divmod(int(s.elapsed), 60)
    text = Text("logsift watch", style="bold", no_wrap=True, overflow="ellipsis")
    if hint:  # before the figures, which a narrow screen cuts
        text.append(f" [{hint}]", style="dim")
    text.append(
        f"  {ranks} ranks seen · {s.calls_per_second:,.0f} collectives/s · {s.bytes_read / 1e6:,.1f} MB read "
        f"· {minutes}:{seconds:02d} elapsed · stall after {s.stall_after:g} s"
    )
    return text


def _buffering_note(s: LiveSnapshot) -> list[Text]:
    if not s.block_buffered:
        return []
    return [
        Text(
            "NCCL ≥ 2.13.4 writes to a pipe in 4 KiB blocks, so a lag shorter than a block "
            "is not reported live "
            "(the final verdict sees it); run the job under `stdbuf -oL` to see every line as it is written.",
            style="dim",
        )
    ]


def _rank_table(s: LiveSnapshot, room: int) -> Table:
    table = Table(
        "comm",
        "rank",
        "host",
        "pid",
        "last op",
        "last #",
        "behind",
        "idle",
        title="Last collective per rank",
        title_justify="left",
    )
    shown = s.rows[:room]
    for row in shown:
        table.add_row(*_cells(row), style=_row_style(row))
    hidden = s.more_rows + len(s.rows) - len(shown)
    if hidden:
        table.caption = f"{hidden} more"
    return table


def _cells(row: RankRow) -> tuple[str, ...]:
    # Host, communicator and op come from the log: visible() keeps its control sequences off the terminal.
    rank = str(row.rank) if row.rank is not None else f"({row.comm_rank})"
    return (
        visible(row.comm),
        rank,
        visible(row.host or ""),
        str(row.pid or ""),
        visible(row.op or ""),
        str(row.call),
        str(row.behind) if row.behind else "",
        f"{row.idle:.0f} s",
    )


def _row_style(row: RankRow) -> str:
    if row.stalled:
        return "bold red"
    return "yellow" if row.behind else ""


def _event_line(event: LiveEvent) -> Text:
    finding = event.finding
    line = Text(f"{event.at:7.1f} s  ", style="dim", no_wrap=True, overflow="ellipsis")
    if event.kind is EventKind.RECOVERED:
        line.append("recovered", style="green")
        line.append(f"  {visible(event.note)}")
        return line
    line.append(f"{finding.code} ", style="bold")
    line.append(finding.severity.label, style=STYLE[finding.severity])
    line.append(f"  {visible(finding.title)}")
    return line


def _whole_events(events: Sequence[LiveEvent], width: int, budget: int) -> list[Text]:
    """The latest events that fit in ``budget`` lines (the newest always), each whole, oldest first."""
    blocks: list[list[Text]] = []
    for event in reversed(events):
        block = _event_block(event, width)
        if blocks and sum(map(len, blocks)) + len(block) > budget:
            break
        blocks.insert(0, block)
    return [line for block in blocks for line in block]


def _event_block(event: LiveEvent, width: int) -> list[Text]:
    """One event whole: its line wrapped under its text (time and code stay at the left), then the
    finding's advice. Words longer than the width are broken: nothing may run past the screen's edge."""
    prefix = f"{event.at:7.1f} s  "
    hang = " " * len(prefix)
    finding = event.finding
    if event.kind is EventKind.RECOVERED:
        marks = [("recovered", "green")]
        body, advice = f"recovered  {visible(event.note)}", ""
    else:
        marks = [(finding.code, "bold"), (finding.severity.label, STYLE[finding.severity])]
        body, advice = f"{finding.code} {finding.severity.label}  {visible(finding.title)}", finding.advice
    wrap = functools.partial(textwrap.wrap, width=width, break_on_hyphens=False)
    lines = [Text(line) for line in wrap(prefix + body, subsequent_indent=hang)]
    lines[0].stylize("dim", 0, len(prefix))
    at = len(prefix)
    for word, style in marks:  # the words the one-line form styles, where they are on the first line
        lines[0].stylize(style, at, at + len(word))
        at += len(word) + 1
    if advice:
        help_lines = wrap(f"= help: {visible(advice)}", initial_indent=hang, subsequent_indent=hang + " " * 8)
        lines += [Text(line, style="green") for line in help_lines]
    return lines


# ------------------------------------------------------------------------------------------ JSON lines
def start_dict(inputs: Sequence[str], stall_after: float) -> dict[str, Any]:
    return {"event": "start", "at": 0.0, "inputs": list(inputs), "stall_after": stall_after}


def event_dict(event: LiveEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"event": event.kind.value, "at": round(event.at, 3)}
    if event.kind is EventKind.RECOVERED:
        out["note"] = event.note
    out["finding"] = finding_dict(event.finding)
    return out


def report_dict(report: Report) -> dict[str, Any]:
    return {"event": "report", "report": to_dict(report)}
