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


def live_view(snapshot: LiveSnapshot, height: int) -> RenderableType:
    """Header, the last collective of every rank (problems first, cut to fit ``height`` lines), live
    findings."""
    events = snapshot.events[-EVENT_LINES:]
    room = max(3, height - CHROME_LINES - len(events) - 2 * snapshot.block_buffered)  # the note: two lines
    return Group(
        _header(snapshot),
        *_buffering_note(snapshot),
        _rank_table(snapshot, room),
        *(_event_line(e) for e in events),
    )


def _header(s: LiveSnapshot) -> Text:
    ranks = f"{s.ranks_seen}" + (f"/{s.world_size}" if s.world_size else "")
    minutes, seconds = divmod(int(s.elapsed), 60)
    text = Text("logsift watch", style="bold", no_wrap=True, overflow="ellipsis")
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
