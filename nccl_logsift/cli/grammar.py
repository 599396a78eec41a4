"""``logsift grammar check``: validate the grammar files by running their samples through the parser;
``logsift grammar export``: write the grammars as another tool's format (lnav)."""

from __future__ import annotations

from pathlib import Path

import click

from nccl_logsift.errors import GrammarError
from nccl_logsift.grammar.lnav import render_lnav_format
from nccl_logsift.grammar.registry import grammar_root, load_grammars
from nccl_logsift.grammar.validate import check_samples


@click.group()
def grammar() -> None:
    """Inspect and validate the line grammars (grammars/*.toml)."""


@grammar.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A grammar directory to check instead of the installed one (e.g. your edited copy).",
)
def check(directory: Path | None) -> None:
    """Check every grammar file: schema, regex dialect, and that each sample line parses as declared.

    Exits with status 2 and one line per problem when anything is wrong.
    """
    root = directory or grammar_root()
    grammars = load_grammars(root)  # structural problems raise GrammarError with every diagnostic
    problems = [
        f"{r.grammar.path.relative_to(root.parent)}: sample {r.index}: {p}"
        if r.index >= 0
        else f"{r.grammar.path.relative_to(root.parent)}: {p}"
        for r in check_samples(grammars)
        for p in r.problems
    ]
    if problems:
        raise GrammarError(problems)
    samples = sum(len(g.samples) for g in grammars.grammars)
    patterns = sum(len(g.patterns) for g in grammars.grammars)
    click.echo(
        f"{len(grammars.grammars)} grammar files, {patterns} patterns, {samples} samples: "
        "all parse as declared."
    )


@grammar.command()
@click.option(
    "--lnav",
    "target",
    flag_value="lnav",
    required=True,
    help="Write an lnav log format (format-v1 JSON) of the lines that carry a time (install: lnav -i FILE).",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file, not stdout."
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A grammar directory to export instead of the installed one.",
)
def export(target: str, output: Path | None, directory: Path | None) -> None:
    """Write the launcher and envelope grammars as a format another log tool reads.

    The lnav format is generated: its patterns compose the launcher-prefix and envelope regexes, its
    samples are the grammars' samples. lnav needs a time on each line, so lines without one (plain NCCL
    lines) are not covered; see README, "Reading raw logs in lnav".
    """
    text = render_lnav_format(load_grammars(directory))
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
