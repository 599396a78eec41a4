"""``logsift analyze``: the diagnosis — who is stuck, at which collective, why, and what to do.
``logsift report`` is the same diagnosis written as one HTML page."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from nccl_logsift.cli.options import input_paths, reading_stdin, width_option
from nccl_logsift.cli.output import check_file, replacing, text_width, write_text
from nccl_logsift.cli.progress import read_progress
from nccl_logsift.model import Report, Severity
from nccl_logsift.pipeline import analyze as run_analysis
from nccl_logsift.render.controls import visible
from nccl_logsift.render.json import render_json, render_jsonl

log = logging.getLogger(__name__)
SEVERITIES = [s.label for s in Severity]
DEFAULT_REPORT = "logsift-report.html"

fail_on_option = click.option(
    "--fail-on",
    type=click.Choice(SEVERITIES),
    default=None,
    help="Exit with status 1 when a finding of this severity or worse is found (for CI and schedulers): "
    "error when the job failed or hung, warning also when it ran degraded (logsift explain --policy).",
)


@click.command()
@input_paths
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "jsonl", "html"]),
    default="text",
    show_default=True,
    help="Output format: a terminal report, the findings contract (JSON), the same as JSON Lines (a job "
    "record, then one record per finding, for log pipelines), or one self-contained HTML page.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to this file instead of stdout.",
)
@width_option
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the verdict (text format); notes still go to stderr."
)
@fail_on_option
@click.pass_context
def analyze(
    ctx: click.Context,
    paths: tuple[str, ...],
    fmt: str,
    output: Path | None,
    width: int | None,
    quiet: bool,
    fail_on: str | None,
) -> None:
    """Diagnose a hung or failed job: the root cause first, then the evidence and what to do.

    PATHS are log files, directories (every file in them, e.g. one file per rank) or - for standard input
    (the default). Compressed logs (.gz, .zst, .bz2) are read directly.

    \b
    Examples:
      logsift analyze job.log
      logsift analyze logs/ --format json -o findings.json
      logsift analyze job.log --format html -o report.html
      kubectl logs -l job=train --prefix | logsift analyze --fail-on error
    """
    if output:
        check_file(output)
    with reading_stdin(paths), read_progress(paths) as progress:
        report = run_analysis(paths, progress=progress, views=fmt == "html")  # only the page draws them
    if fmt != "text" or output is not None or quiet:  # the text report on stdout lists them itself
        _print_notes(report)
    started = time.perf_counter()
    # The HTML page (jinja2) and the terminal report (rich) are imported only when chosen: together they
    # are ~40 ms of every run, and scripts and hooks ask for JSON.
    if fmt == "json":
        write_text(render_json(report), output)
    elif fmt == "jsonl":
        write_text(render_jsonl(report), output)
    elif fmt == "html":
        from nccl_logsift.render.html import render_html

        write_text(render_html(report), output)
    elif quiet:
        write_text(visible(report.verdict) + "\n", output)
    else:
        _print_text(report, output, width)
    log.info(
        "%s written in %.2f s", "verdict" if quiet and fmt == "text" else fmt, time.perf_counter() - started
    )
    _exit_status(ctx, report, fail_on)


@click.command()
@input_paths
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(DEFAULT_REPORT),
    show_default=True,
    help="The HTML file to write (- for standard output).",
)
@fail_on_option
@click.pass_context
def report(ctx: click.Context, paths: tuple[str, ...], output: Path, fail_on: str | None) -> None:
    """Write the diagnosis as one self-contained HTML page to open, attach or share.

    The page holds the verdict, the findings with their evidence lines, a rank × collective grid per
    communicator, a timeline (when the lines carry timestamps) and the topology. It loads nothing from
    anywhere and runs no code but its own, so it opens offline, years later. Same as
    ``logsift analyze --format html -o FILE``.

    \b
    Examples:
      logsift report job.log -o hang.html
      logsift report logs/rank*.log.gz
    """
    from nccl_logsift.render.html import render_html

    if str(output) != "-":
        check_file(output)
    with reading_stdin(paths), read_progress(paths) as progress:
        result = run_analysis(paths, progress=progress)
    _print_notes(result)
    page = render_html(result)
    if str(output) == "-":
        write_text(page, None)
    else:
        write_text(page, output)
        click.echo(
            f"wrote {output} ({len(page.encode()) / 1e3:,.0f} KB): {visible(result.verdict[:160])}", err=True
        )
    _exit_status(ctx, result, fail_on)


def _print_text(report: Report, output: Path | None, width: int | None) -> None:
    from rich.console import Console

    from nccl_logsift.render.terminal import render_terminal

    if output:
        with replacing(output) as handle:
            render_terminal(report, Console(file=handle, width=text_width(width, False), highlight=False))
    else:
        render_terminal(report, Console(highlight=False, width=text_width(width, sys.stdout.isatty())))


def _print_notes(report: Report) -> None:
    """What went wrong reading the inputs, one line each on stderr: a damaged input must not pass unseen
    where stdout is a file or a pipe."""
    for note in report.notes:
        click.echo(f"note: {visible(note)}", err=True)


def _exit_status(ctx: click.Context, result: Report, fail_on: str | None) -> None:
    if fail_on and result.worst_severity is not None and result.worst_severity >= Severity.parse(fail_on):
        ctx.exit(1)
