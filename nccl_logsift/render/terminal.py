"""Report → rich renderables for a terminal: verdict first, then findings, then where each rank stopped."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from nccl_logsift.model import Report, Severity
from nccl_logsift.render.controls import visible

STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.ERROR: "red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}
MAX_RANK_ROWS = 64


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
            console.print(Text(f"  --> {visible(e.path)}:{e.line}", style="dim"))
            console.print(Text(f"   | {visible(e.text)}"), overflow="ellipsis", no_wrap=True)
        if finding.advice:
            console.print(Text(f"   = help: {visible(finding.advice)}", style="green"))
        console.print()
    if report.ranks:
        console.print(_rank_table(report))
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
        console.print(Text("Flight Recorder: ", style="bold") + Text(report.dumps.summary))
        for f in report.dumps.files:
            state = f"{f.entries} entries, format {f.version}" if f.problem is None else f.problem
            rank = f.rank if f.rank is not None else "?"
            console.print(Text(f"  rank {rank}: {f.path} ({state})", style="dim"))
        for n in report.dumps.named:
            console.print(
                Text(
                    f"  rank {n.rank}: log says {n.path}"
                    + ("" if n.read else " (not read)")
                    + f"  --> {n.line.path}:{n.line.line}",
                    style="dim",
                )
            )
    if report.next_run:
        table = Table(
            "missing", "setting", "why", title="Next run: capture what this one lacked", title_justify="left"
        )
        for a in report.next_run:
            table.add_row(a.missing, a.setting, a.why)
        console.print(table)


def _rank_table(report: Report) -> Table:
    table = Table(
        "comm",
        "rank",
        "host",
        "pid",
        "last op",
        "last #",
        "last completed",
        title="Where each rank stopped",
        title_justify="left",
    )
    for state in report.ranks[:MAX_RANK_ROWS]:
        table.add_row(
            visible(str(state.comm or "")),
            str(state.rank if state.rank is not None else "?"),
            visible(state.host or ""),
            str(state.pid or ""),
            visible(state.last_op or ""),
            str(state.last_seq if state.last_seq is not None else ""),
            str(state.last_completed_seq if state.last_completed_seq is not None else ""),
        )
    if len(report.ranks) > MAX_RANK_ROWS:
        table.caption = f"{len(report.ranks) - MAX_RANK_ROWS} more rows in --format json"
    return table


def _worst_style(report: Report) -> str:
    worst = report.worst_severity
    return STYLE[worst] if worst else "green"
