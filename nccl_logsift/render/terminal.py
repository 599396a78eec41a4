"""Report → rich renderables for a terminal: verdict first, then findings, then where each rank stopped."""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from nccl_logsift import call_numbers
from nccl_logsift.model import Evidence, Report, Severity
from nccl_logsift.render.controls import visible

STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.ERROR: "red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}
MAX_RANK_ROWS = 64
HASH = re.compile(r"0x[0-9a-fA-F]+")
SHORT_HASH = 6  # hex digits a communicator hash is cut to in the rank table, more where two would look alike


def render_terminal(report: Report, console: Console) -> None:
    job = report.job
    facts = (
        f"{job.ranks_seen} rank(s) seen"
        + (f" of {job.world_size}" if job.world_size else "")
        + f" on {len(job.hosts)} host(s), {job.communicators} communicator(s)"
        + (f", NCCL {', '.join(job.nccl_versions)}" if job.nccl_versions else "")
    )
    # Every string below may quote the logs, which may carry terminal control sequences: each goes through
    # visible() (render/controls.py) on its way out.
    console.print(
        Panel(
            Text(visible(report.verdict)),
            title="Verdict",
            subtitle=visible(facts),
            title_align="left",
            border_style=_worst_style(report),
        )
    )
    for finding in report.findings:
        head = Text()
        head.append(f"{finding.code} ", style="bold")
        head.append(f"{finding.severity.label}", style=STYLE[finding.severity])
        if finding.primary:
            head.append("  root cause", style="bold magenta")
        head.append(f"  {visible(finding.title)}")
        console.print(head)
        for e in finding.evidence:
            _location(console, "  --> ", e)
            _hanging(console, "   | ", visible(e.text))
        if finding.advice:
            _hanging(console, "   = help: ", visible(finding.advice), style="green")
        console.print()
    if report.ranks:
        _print_whole(console, _rank_table(report))
        console.print(Text(call_numbers.LEGEND, style="dim"))
    _flight(report, console)
    for note in report.notes:
        console.print(f"[yellow]note[/] {escape(visible(note))}")
    console.print(
        Text(
            f"{report.lines:,} lines read from {len(report.inputs)} input(s); "
            f"{report.unparsed_lines:,} NCCL/PyTorch lines not understood.",
            style="dim",
        )
    )


def _flight(report: Report, console: Console) -> None:
    """The dump audit, then what to capture next time (settings for what this input lacked)."""
    if report.dumps is not None:
        console.print(Text("Flight Recorder: ", style="bold") + Text(visible(report.dumps.summary)))
        for f in report.dumps.files:
            state = f"{f.entries} entries, format {f.version}" if f.problem is None else f.problem
            rank = f.rank if f.rank is not None else "?"
            console.print(Text(f"  rank {rank}: {visible(f.path)} ({visible(state)})", style="dim"))
        for n in report.dumps.named:
            said = f"  rank {n.rank}: log says {visible(n.path)}" + ("" if n.read else " (not read)")
            console.print(Text(said, style="dim"))
            _location(console, "    --> ", n.line)
    if report.next_run:
        table = Table(title="Next run: capture what this one lacked", title_justify="left")
        table.add_column("missing")
        table.add_column("setting", overflow="fold")  # to be copied: folded, never cut
        table.add_column("why")
        for a in report.next_run:
            table.add_row(visible(a.missing), visible(a.setting), visible(a.why))
        console.print(table)


def _location(console: Console, arrow: str, e: Evidence) -> None:
    """``path:line`` as one piece: never folded, and past the width it overflows rather than being cut."""
    console.print(
        Text(f"{arrow}{visible(e.path)}:{e.line}", style="dim"), no_wrap=True, overflow="ignore", crop=False
    )


def _hanging(console: Console, gutter: str, text: str, style: str = "") -> None:
    """``text`` after ``gutter``, wrapped to the console's width with its later lines under its first: a log
    line is shown whole, however long (a word longer than the room left is folded)."""
    room = max(console.width - len(gutter), 10)
    for i, line in enumerate(Text(text, style=style).wrap(console, room, overflow="fold")):
        line.rstrip()  # the space a line was broken at
        lead = Text(gutter if i == 0 else " " * len(gutter), style=style)
        console.print(lead + line, no_wrap=True, overflow="ignore", crop=False)


def _print_whole(console: Console, table: Table) -> None:
    """``table`` laid out in the console's width, or in the least width that cuts no cell when that is
    more: then it overflows the console instead (the ``min_width`` of each column says what it needs)."""
    needed = sum((c.min_width or 1) + 2 for c in table.columns) + len(table.columns) + 1
    if needed <= console.width:
        console.print(table, crop=False)
    else:  # console.print's width can only narrow: the table is laid out here, in the width it needs
        console.print(Segments(console.render(table, console.options.update_width(needed))), crop=False)


def _rank_table(report: Report) -> Table:
    """One row per rank; the communicator is said once in the title when all rows share it, and otherwise
    its hash is cut to a prefix no other hash of the table shares. No value is cut: a column is at least
    as wide as its longest value and the longest word of its header (headers wrap, a long communicator
    name folds)."""
    states = report.ranks[:MAX_RANK_ROWS]
    comms = {visible(s.comm) for s in states if s.comm}
    title = "Where each rank stopped"
    if len(comms) == 1:
        title += f" (comm {next(iter(comms))})"
    rows = [
        [
            str(state.rank if state.rank is not None else "?"),
            visible(state.host or ""),
            str(state.pid or ""),
            visible(state.last_op or ""),
            str(state.last_seq if state.last_seq is not None else ""),
            str(state.last_completed_seq if state.last_completed_seq is not None else ""),
        ]
        for state in states
    ]
    headers = ["rank", "host", "pid", "last op", "last #", "last completed"]
    table = Table(title=title, title_justify="left")
    shown = _short_comms(comms) if len(comms) > 1 else None
    if shown is not None:
        table.add_column("comm", overflow="fold", min_width=2 + SHORT_HASH)  # a split's /color…#n folds
        for row, state in zip(rows, states):
            row.insert(0, shown.get(visible(state.comm or ""), ""))
    for index, name in enumerate(headers, start=len(table.columns)):
        widest = max((len(row[index]) for row in rows), default=0)
        table.add_column(name, min_width=max(widest, *map(len, name.split())))
    for row in rows:
        table.add_row(*row)
    if len(report.ranks) > MAX_RANK_ROWS:
        table.caption = f"{len(report.ranks) - MAX_RANK_ROWS} more rows in --format json"
    return table


def _short_comms(comms: set[str]) -> dict[str, str]:
    """Each communicator as the table shows it: a leading ``0x`` hash cut to the fewest hex digits (at least
    :data:`SHORT_HASH`) that keep different hashes apart; what follows the hash (``/color…#2`` of a split) and
    names that are not hashes stay whole."""
    hashes = {c: m.group() if (m := HASH.match(c)) else "" for c in comms}
    distinct = {h for h in hashes.values() if h}
    digits = SHORT_HASH
    while len({h[: 2 + digits] for h in distinct}) < len(distinct):
        digits += 1
    return {c: h[: 2 + digits] + c[len(h) :] for c, h in hashes.items()}


def _worst_style(report: Report) -> str:
    worst = report.worst_severity
    return STYLE[worst] if worst else "green"
