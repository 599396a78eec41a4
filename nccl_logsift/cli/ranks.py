"""``logsift ranks``: who is who — every rank of a job with its host, pid, GPU, communicators, PyTorch process
groups and launcher labels, and where its rank was read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import polars as pl

from nccl_logsift.cli.options import input_paths, reading_stdin, width_option
from nccl_logsift.cli.output import check_file, text_width, write_text
from nccl_logsift.cli.progress import read_progress
from nccl_logsift.pipeline import read_job
from nccl_logsift.render.controls import visible
from nccl_logsift.resolve.ranks import identity

SCHEMA = "nccl-logsift/ranks/v1"


@click.command()
@input_paths
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="A table for the terminal, or JSON: one object per row, with every communicator, group and label.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file, not stdout."
)
@width_option
def ranks(paths: tuple[str, ...], fmt: str, output: Path | None, width: int | None) -> None:
    """Who is who: every rank of the job, where it runs and where its rank was read.

    A row per GPU that NCCL's Init lines name (its world rank, host, pid, CUDA device and bus id) and per
    rank that only PyTorch or the launcher names. "source" says where the rank was read, strongest first:
    nccl_init (NCCL's Init line), pg_prefix (PyTorch's default-group prefix), torch_label (torchrun's
    [rankN]:), mpi_label / task_label (mpirun's and srun -l's, only where proven to be ranks),
    launcher_summary (torchrun's failure summary), nccl_trees (a Trees line), local_rank (one host).

    \b
    Examples:
      logsift ranks job.log
      logsift ranks logs/ --format json -o ranks.json
    """
    if output:
        check_file(output)
    with reading_stdin(paths), read_progress(paths) as progress:
        _, job = read_job(paths, progress=progress)
    table = identity(job)
    if fmt == "json":
        write_text(json.dumps(as_json(table), indent=2) + "\n", output)
    else:
        terminal = output is None and sys.stdout.isatty()
        write_text(as_text(table, text_width(width, terminal)), output)


def as_json(table: pl.DataFrame) -> dict:
    """The identity table as the ranks JSON (``schema`` names its version)."""
    return {"schema": SCHEMA, "ranks": table.to_dicts()}


def as_text(table: pl.DataFrame, width: int | None) -> str:
    """The identity table for a terminal: one line a row, lists summarised, log text made visible."""
    from rich.console import Console
    from rich.table import Table

    out = Table(box=None, header_style="bold", pad_edge=False)
    for name in (
        "rank",
        "source",
        "host",
        "pid",
        "GPU",
        "bus id",
        "communicators",
        "process groups",
        "labels",
    ):
        out.add_column(name, overflow="fold")
    for row in table.iter_rows(named=True):
        out.add_row(
            *(
                visible(_text(v))
                for v in (
                    row["rank"],
                    row["rank_source"],
                    row["host"],
                    row["pid"],
                    row["cuda_dev"],
                    row["bus_id"],
                    _communicators(row["communicators"]),
                    _groups(row["groups"]),
                    _labels(row["labels"]),
                )
            )
        )
    console = Console(width=width, record=True, force_terminal=False, color_system=None, highlight=False)
    with console.capture() as captured:
        console.print(out)
    return captured.get()


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _communicators(members: list[dict] | None) -> str:
    """How many communicators, and the size of each: "3 (of 16, 4, 2)"."""
    if not members:
        return ""
    sizes = ", ".join(str(m["nranks"]) for m in members)
    return f"{len(members)} (of {sizes})"


def _groups(groups: list[dict] | None) -> str:
    """Each PyTorch group as "ID/GUID description: rank in it"."""
    shown = []
    for g in groups or []:
        name = "/".join(str(v) for v in (g["pg_id"], g["pg_guid"]) if v is not None)
        desc = f" {g['pg_desc']}" if g["pg_desc"] else ""
        shown.append(f"{name}{desc}: {g['pg_rank']}")
    return "; ".join(shown)


def _labels(labels: list[dict] | None) -> str:
    return ", ".join(f"{label['label']}={label['value']}" for label in labels or [])
