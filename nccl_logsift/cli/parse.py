"""``logsift parse``: logs in, one Parquet file per table and a manifest out."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from nccl_logsift import __version__
from nccl_logsift.cli.options import input_paths
from nccl_logsift.cli.progress import read_progress
from nccl_logsift.errors import InputError
from nccl_logsift.parse.schema import SCHEMA_VERSION
from nccl_logsift.pipeline import ParseOptions, ParseSummary, parse_paths
from nccl_logsift.tables import ParquetSink


@click.command()
@input_paths
@click.option(
    "-o", "--output", required=True, type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write <table>.parquet files and manifest.json into (created if missing).",
)
@click.option("--no-text", is_flag=True, help="Leave the raw line text out of the lines table (smaller output).")
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
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create output directory {output}: {exc.strerror}") from exc
    sink = ParquetSink(output)
    with read_progress(paths) as progress:
        summary = parse_paths(paths, sink, ParseOptions(keep_text=not no_text), progress=progress)
    manifest = _manifest(summary, sink)
    (output / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    _print_summary(summary, output)


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
        err.print(f"[yellow]skipped[/] {skipped.path}: {skipped.reason}")
    for item in summary.inputs:
        if item.problem:
            err.print(f"[yellow]warning[/] {item.path}: {item.problem}")
    rate = summary.unparsed_envelope_lines / summary.envelope_lines if summary.envelope_lines else 0.0
    console.print(
        f"Read {len(summary.inputs)} input(s), {summary.lines:,} lines; "
        f"{summary.envelope_lines:,} NCCL/PyTorch lines, {summary.unparsed_envelope_lines:,} unparsed ({rate:.2%})."
    )
    for damage in summary.damage():
        err.print(f"[yellow]note[/] {damage}")
    console.print(f"Tables written to {output}/")
    tables = Table("table", "rows")
    for name, rows in sorted(summary.table_rows.items()):
        tables.add_row(name, f"{rows:,}")
    console.print(tables)
    families = Table("family", "lines", title="Lines per family", title_justify="left")
    for family, count in sorted(summary.family_counts.items(), key=lambda kv: -kv[1]):
        families.add_row(family or "[red](unparsed)[/]", f"{count:,}")
    console.print(families)
    if summary.unparsed_shapes:
        shapes = Table("lines", "message shape (values masked)", title="Most frequent unparsed messages", title_justify="left")
        for shape, count in summary.unparsed_shapes[:10]:
            shapes.add_row(f"{count:,}", shape)
        console.print(shapes)
