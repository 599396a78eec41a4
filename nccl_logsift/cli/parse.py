"""``logsift parse``: logs in, one Parquet file per table and a manifest out."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nccl_logsift import __version__
from nccl_logsift.cli.options import input_paths, reading_stdin
from nccl_logsift.cli.output import writing
from nccl_logsift.cli.progress import read_progress
from nccl_logsift.errors import OutputError
from nccl_logsift.parse.schema import SCHEMA_VERSION
from nccl_logsift.pipeline import ParseOptions, parse_paths
from nccl_logsift.render.controls import visible
from nccl_logsift.summary import ParseSummary
from nccl_logsift.tables import ParquetSink

MANIFEST = "manifest.json"


@click.command()
@input_paths
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write <table>.parquet files and manifest.json into (created if missing; the files of "
    "an earlier parse into it are replaced when this one is complete).",
)
@click.option(
    "--no-text", is_flag=True, help="Leave the raw line text out of the lines table (smaller output)."
)
def parse(paths: tuple[str, ...], output: Path, no_text: bool) -> None:
    """Parse logs into Parquet tables: lines, comms, collectives, transports, errors, torch, ...

    PATHS are log files, directories (read recursively) or - for standard input (the default).
    .gz, .zst and .bz2 files are decompressed on the fly. Every line lands in the lines table with its
    family, or is counted as unparsed; the summary shows the most frequent unparsed message shapes.

    \b
    Example:
      logsift parse job.log -o tables/
      python -c "import polars as pl; print(pl.read_parquet('tables/collectives.parquet'))"
    """
    with staged(output) as staging:  # before reading: an output that cannot be made fails at once
        sink = ParquetSink(staging)
        with reading_stdin(paths), read_progress(paths) as progress:
            summary = parse_paths(paths, sink, ParseOptions(keep_text=not no_text), progress=progress)
        with writing(output):
            (staging / MANIFEST).write_text(json.dumps(_manifest(summary, sink), indent=2) + "\n")
            publish(staging, output)
    _print_summary(summary, output)


@contextmanager
def staged(output: Path) -> Iterator[Path]:
    """A new hidden directory beside ``output`` (on the same file system, so its files can be renamed into
    place), removed when the block ends however it ends. An interrupted parse leaves ``output`` as it was."""
    target = output.absolute()  # `-o .` has no name of its own
    staging = target.parent / f".{target.name}.logsift-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot create output directory {output}: {exc.strerror}") from None
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, output: Path) -> None:
    """Put the complete run of ``staging`` in place of ``output``'s, so that an ``output`` with a manifest
    holds one complete run: a missing ``output`` is ``staging`` renamed. Into an existing one (which may
    hold other files, or be ``.``), the old manifest is removed first, then the old run's tables, then the
    new tables are renamed in, the manifest last. An interruption in between leaves no manifest."""
    if not output.exists():
        staging.rename(output)
        return
    old = _listed_files(output / MANIFEST)
    (output / MANIFEST).unlink(missing_ok=True)
    new = {path.name for path in staging.iterdir()}
    for name in old - new:
        (output / name).unlink(missing_ok=True)
    for name in sorted(new - {MANIFEST}):
        os.replace(staging / name, output / name)
    os.replace(staging / MANIFEST, output / MANIFEST)


def _listed_files(manifest: Path) -> set[str]:
    """The table files an earlier run's manifest names (plain names only: nothing outside ``output``)."""
    try:
        tables = json.loads(manifest.read_text()).get("tables", {})
        names = {entry["file"] for entry in tables.values()}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return set()
    return {name for name in names if isinstance(name, str) and name == Path(name).name and name != MANIFEST}


def _manifest(summary: ParseSummary, sink: ParquetSink) -> dict:
    import pyarrow.parquet as pq

    return {
        "schema": SCHEMA_VERSION,
        "logsift_version": __version__,
        "inputs": [asdict(i) for i in summary.inputs],
        "skipped": [asdict(p) for p in summary.skipped],
        "tables": {
            name: {
                "file": path.name,
                "rows": summary.table_rows[name],
                "columns": {f.name: str(f.type) for f in pq.read_schema(path)},
            }
            for name, path in sorted(sink.files.items())
        },
        "families": {str(k): v for k, v in sorted(summary.family_counts.items(), key=lambda kv: -kv[1])},
        "unparsed": {
            "envelope_lines": summary.envelope_lines,
            "unparsed_envelope_lines": summary.unparsed_envelope_lines,
            "torn_fragments": summary.torn_fragments,
            "values_out_of_range": summary.values_out_of_range,
            "glued_uncut": summary.glued_uncut,
            "long_lines_cut": summary.long_lines_cut,
            "top_shapes": [{"shape": s, "lines": n} for s, n in summary.unparsed_shapes],
        },
    }


def _print_summary(summary: ParseSummary, output: Path) -> None:
    console = Console(highlight=False)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for skipped in summary.skipped:
        err.print(f"[yellow]skipped[/] {_shown(skipped.path)}: {_shown(skipped.reason)}")
    for item in summary.inputs:
        for problem in item.problems:
            err.print(f"[yellow]warning[/] {_shown(item.path)}: {_shown(problem.describe())}")
    rate = summary.unparsed_envelope_lines / summary.envelope_lines if summary.envelope_lines else 0.0
    console.print(
        f"Read {len(summary.inputs)} input(s), {summary.lines:,} lines; "
        f"{summary.envelope_lines:,} NCCL/PyTorch lines, "
        f"{summary.unparsed_envelope_lines:,} unparsed ({rate:.2%})."
    )
    for damage in summary.damage():
        err.print(f"[yellow]note[/] {_shown(damage)}")
    console.print(f"Tables written to {_shown(str(output))}/")
    tables = Table("table", "rows")
    for name, rows in sorted(summary.table_rows.items()):
        tables.add_row(name, f"{rows:,}")
    console.print(tables)
    families = Table("family", "lines", title="Lines per family", title_justify="left")
    for family, count in sorted(summary.family_counts.items(), key=lambda kv: -kv[1]):
        families.add_row(_shown(family) if family else "[red](unparsed)[/]", f"{count:,}")
    console.print(families)
    if summary.unparsed_shapes:
        shapes = Table(
            "lines",
            "message shape (values masked)",
            title="Most frequent unparsed messages",
            title_justify="left",
        )
        for shape, count in summary.unparsed_shapes[:10]:
            shapes.add_row(f"{count:,}", _shown(shape))
        console.print(shapes)


def _shown(text: str) -> str:
    """Text from the logs or the file system as rich markup that shows it: its control characters made
    visible (render/controls.py) and its square brackets not taken for markup."""
    return escape(visible(text))
