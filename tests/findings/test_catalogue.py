"""The rule catalogue: unique codes in their family's range, complete docstrings, explain covers every
code."""

import re

import pytest

from nccl_logsift.findings import ALL_RULES, MODULES, rule_for
from nccl_logsift.findings.base import HEADINGS
from nccl_logsift.model import Kind, Severity

FAMILY_DIGIT = {
    "progress": "1",
    "startup": "2",
    "transport": "3",
    "placement": "4",
    "process": "5",
    "performance": "6",
    "flight": "7",
    "nccl": "9",
}


def test_catalogue_codes_are_unique_and_in_their_family_range():
    codes = [r.code for r in ALL_RULES]
    assert len(codes) == len(set(codes))
    for module in MODULES:
        family = module.__name__.rsplit(".", 1)[1]
        for rule in module.RULES:
            assert re.fullmatch(rf"LS{FAMILY_DIGIT[family]}\d\d", rule.code), rule.code
            assert re.fullmatch(r"[a-z]+(-[a-z0-9]+)*", rule.name)
            assert isinstance(rule.kind, Kind) and isinstance(rule.severity, Severity)


def test_catalogue_each_rule_is_one_module_of_its_family_named_after_it():
    for module in MODULES:
        for rule in module.RULES:
            assert rule.__module__ == f"{module.__name__}.{rule.name.replace('-', '_')}", rule.code
    assert len({r.__module__ for r in ALL_RULES}) == len(ALL_RULES)


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_catalogue_docstring_has_every_heading_in_order(rule):
    doc = rule.doc()
    positions = [doc.find(f"\n{h}:\n") for h in HEADINGS]
    assert all(p > 0 for p in positions), (
        f"{rule.code}: missing headings {[h for h, p in zip(HEADINGS, positions) if p < 0]}"
    )
    assert positions == sorted(positions)
    assert rule.summary() and not rule.summary().endswith(":")


def test_catalogue_module_tables_list_their_rules():
    for module in MODULES:
        for rule in module.RULES:
            assert f"| {rule.code} | {rule.name} | {rule.kind.value} |" in module.__doc__, rule.code


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_explain_prints_the_rule(run_cli, rule):
    result = run_cli("explain", rule.code)
    assert result.exit_code == 0 and rule.name in result.output and "What to do:" in result.output


def test_explain_unknown_code_is_a_usage_error(run_cli):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "explain", "LS999"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "unknown finding code" in proc.stderr


def test_explain_policy_prints_every_severity_and_the_verdict_rule(run_cli):
    from nccl_logsift.model import Severity

    result = run_cli("explain", "--policy")
    assert result.exit_code == 0
    flat = " ".join(result.output.split())
    for severity in Severity:
        assert f" {severity.label} {severity.meaning}" in flat
    assert "no root cause" in result.output and "--fail-on error" in result.output


def test_explain_overview_ends_with_the_policy_and_the_call_numbers(run_cli):
    from nccl_logsift.call_numbers import EXPLANATION
    from nccl_logsift.findings.triage import policy_text

    output = run_cli("explain").output.rstrip()
    assert output.endswith(policy_text() + "\n\n" + EXPLANATION)


def test_readme_states_the_policy_that_explain_prints():
    from conftest import ROOT

    from nccl_logsift.findings.triage import policy_text

    assert policy_text() in (ROOT / "README.md").read_text(), "README: paste `logsift explain --policy`"


def test_explain_numbering_says_what_a_call_number_counts(run_cli):
    from nccl_logsift.call_numbers import EXPLANATION

    result = run_cli("explain", "--numbering")
    assert result.exit_code == 0 and result.output.rstrip() == EXPLANATION
    # The mapping, with the worked example: opCount is hex and counts from 0, SeqNum counts from 1.
    assert int("370", 16) + 1 == 881 and "opCount 370 is #881" in " ".join(EXPLANATION.split())
    assert "SeqNum=881" in EXPLANATION and "#881" in EXPLANATION


def test_readme_explains_the_call_numbers_as_explain_does():
    from conftest import ROOT

    from nccl_logsift.call_numbers import EXPLANATION

    readme = (ROOT / "README.md").read_text()
    assert readme.count(EXPLANATION) == 1, "README: paste `logsift explain --numbering` once"


MARKUP = re.compile(r"``|:[a-z]+:`|(?<![\w*])\*\w[^*]*\*(?![\w*])")


@pytest.mark.parametrize(
    "args",
    [[r.code] for r in ALL_RULES] + [[], ["--all"], ["--policy"], ["--numbering"]],
    ids=[r.code for r in ALL_RULES] + ["overview", "all", "policy", "numbering"],
)
def test_explain_reads_whole_at_80_columns_without_markup(args):
    from click.testing import CliRunner

    from nccl_logsift.cli import cli

    result = CliRunner().invoke(cli, ["explain", *args], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    assert not MARKUP.search(result.output), MARKUP.search(result.output).group()
    if args and args[0].startswith("LS"):
        rule = rule_for(args[0])
        assert lines[0].startswith(f"{rule.code} {rule.name} · {rule.severity.label}")
        assert [h for h in HEADINGS if f"\n{h}:\n" in result.output] == list(HEADINGS)


def test_explain_names_the_kind_only_where_it_differs_from_the_name(run_cli):
    overview = run_cli("explain").output
    assert "LS701 flight-recorder-mismatch · critical · kind collective_mismatch" in overview
    assert "LS101 rank-behind · critical\n" in overview and "rank_behind" not in overview.split("LS102")[0]
