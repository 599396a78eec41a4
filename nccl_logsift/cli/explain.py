"""``logsift explain``: what a finding code means, why it matters and what to do."""

from __future__ import annotations

import shutil
import textwrap

import click

from nccl_logsift import call_numbers
from nccl_logsift.findings import ALL_RULES, rule_for
from nccl_logsift.findings.triage import policy_text
from nccl_logsift.render.prose import rewrapped, unmarked

# Prose reads best short of a wide terminal's full width; COLUMNS (or the terminal) narrows it.
MAX_WIDTH = 100


@click.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="Print the explanation of every code.")
@click.option(
    "--policy", is_flag=True, help="Print what each severity means and when a finding is a root cause."
)
@click.option("--numbering", is_flag=True, help="Print what a call number (#881) counts.")
def explain(code: str | None, show_all: bool, policy: bool, numbering: bool) -> None:
    """Explain a finding CODE (e.g. LS101 or rank-behind); without CODE, list every code, the policy and
    what a call number counts.

    \b
    Examples:
      logsift explain LS101
      logsift explain net-error
      logsift explain --all
      logsift explain --policy
      logsift explain --numbering
    """
    width = min(shutil.get_terminal_size((80, 24)).columns, MAX_WIDTH)
    if policy:
        click.echo(policy_text())
        return
    if numbering:
        click.echo(call_numbers.EXPLANATION)
        return
    if show_all:
        for rule in ALL_RULES:
            click.echo(_text(rule, width) + "\n")
        return
    if not code:
        click.echo(_overview(width) + "\n")
        # The severity shown is each rule's usual one; a finding is graded by what it did to this job.
        click.echo("A finding is graded by the policy below; the list gives its rule's usual grade.\n")
        click.echo(policy_text() + "\n")
        click.echo(call_numbers.EXPLANATION)
        return
    try:
        rule = rule_for(code)
    except KeyError:
        known = ", ".join(r.code for r in ALL_RULES)
        raise click.UsageError(f"unknown finding code {code!r}; known codes: {known}") from None
    click.echo(_text(rule, width))


def _heading(rule) -> str:
    """Code, name and usual severity; the contract's kind only where it is not the name said otherwise."""
    kind = "" if rule.kind.value == rule.name.replace("-", "_") else f" · kind {rule.kind.value}"
    return f"{rule.code} {rule.name} · {rule.severity.label}{kind}"


def _overview(width: int) -> str:
    """Every rule: its heading, and its summary indented under it."""
    entries = []
    for rule in ALL_RULES:
        summary = textwrap.fill(
            unmarked(rule.summary()),
            width,
            initial_indent="      ",
            subsequent_indent="      ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        entries.append(f"{_heading(rule)}\n{summary}")
    return "\n".join(entries)


def _text(rule, width: int) -> str:
    return f"{_heading(rule)}\n\n{rewrapped(rule.doc(), width)}"
