"""``logsift analyze``: the diagnosis — who is stuck, at which collective, why, and what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from nccl_logsift.cli.options import input_paths
from nccl_logsift.cli.progress import read_progress
from nccl_logsift.model import Severity
from nccl_logsift.pipeline import analyze as run_analysis
from nccl_logsift.render.json import render_json
from nccl_logsift.render.terminal import render_terminal

SEVERITIES = [s.label for s in Severity]


@click.command()
@input_paths
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to this file instead of stdout.")
@click.option(
    "--fail-on", type=click.Choice(SEVERITIES), default=None,
    help="Exit with status 1 when a finding of this severity or worse is found (for CI and schedulers).",
)
@click.pass_context
def analyze(ctx: click.Context, paths: tuple[str, ...], fmt: str, output: Path | None, fail_on: str | None) -> None:
    """Diagnose a hung or failed job: the root cause first, then the evidence and what to do.

    PATHS are log files, directories (every file in them, e.g. one file per rank) or - for standard input
    (the default). Compressed logs (.gz, .zst, .bz2) are read directly.

    \b
    Examples:
      logsift analyze job.log
      logsift analyze logs/ --format json -o findings.json
      kubectl logs -l job=train --prefix | logsift analyze --fail-on error
    """
    with read_progress(paths) as progress:
        report = run_analysis(paths, progress=progress)
    if fmt == "json":
        text = render_json(report)
        if output:
            output.write_text(text)
        else:
            click.echo(text, nl=False)
    else:
        if output:
            with output.open("w") as handle:
                render_terminal(report, Console(file=handle, width=120, highlight=False))
        else:
            render_terminal(report, Console(highlight=False, width=None if sys.stdout.isatty() else 120))
    if fail_on and report.worst_severity is not None and report.worst_severity >= Severity.parse(fail_on):
        ctx.exit(1)
