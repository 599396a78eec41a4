"""``logsift tables``: print the documentation of every table and column."""

from __future__ import annotations

import click

from nccl_logsift.grammar import load_grammars
from nccl_logsift.tables import table_docs


@click.command()
def tables() -> None:
    """Describe every table `logsift parse` writes, column by column (Markdown).

    The description is generated from the grammar files, so it always matches what the parser produces.
    """
    click.echo(table_docs(load_grammars()))
