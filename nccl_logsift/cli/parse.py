"""``logsift parse``: logs in, one Parquet file per table out."""

from __future__ import annotations

import click


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(allow_dash=True, dir_okay=True))
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False), help="Directory for the Parquet tables and manifest.json.")
def parse(paths: tuple[str, ...], output: str) -> None:
    """Parse logs into Parquet tables (placeholder wiring, replaced below)."""
    raise click.UsageError("not wired yet")
