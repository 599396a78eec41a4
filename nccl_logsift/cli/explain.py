"""``logsift explain``: what a finding code means, why it matters and what to do."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from nccl_logsift import call_numbers
from nccl_logsift.findings import ALL_RULES, rule_for
from nccl_logsift.findings.triage import policy_text


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
    if policy:
        click.echo(policy_text())
        return
    if numbering:
        click.echo(call_numbers.EXPLANATION)
        return
    if show_all:
        for rule in ALL_RULES:
            click.echo(_text(rule) + "\n")
        return
    if not code:
        table = Table("code", "name", "kind", "severity", "summary")
        for rule in ALL_RULES:
            table.add_row(rule.code, rule.name, rule.kind.value, rule.severity.label, rule.summary())
        console = Console(highlight=False)
        console.print(table)
        # The column is each rule's usual severity; a finding is graded by what it did to this job.
        click.echo("A rule grades each finding by the policy below; the column is its usual severity.\n")
        click.echo(policy_text() + "\n")
        click.echo(call_numbers.EXPLANATION)
        return
    try:
        rule = rule_for(code)
    except KeyError:
        known = ", ".join(r.code for r in ALL_RULES)
        raise click.UsageError(f"unknown finding code {code!r}; known codes: {known}") from None
    click.echo(_text(rule))


def _text(rule) -> str:
    return f"{rule.code} {rule.name} ({rule.kind.value}, {rule.severity.label})\n\n{rule.doc()}"
