"""The examples of CONTRIBUTING.md do what the guide says they do."""

from __future__ import annotations

import ast
import re
import shutil

from conftest import FIXTURES, ROOT

from nccl_logsift.findings.base import HEADINGS
from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.validate import check_samples
from nccl_logsift.pipeline import load_job

GUIDE = (ROOT / "CONTRIBUTING.md").read_text()


def example(name: str) -> str:
    """The fenced block that follows ``<!-- example: NAME -->`` in the guide."""
    found = re.search(rf"<!-- example: {name} -->\n```\w+\n(.*?)```", GUIDE, re.S)
    assert found, f"CONTRIBUTING.md has no example {name!r}"
    return found.group(1)


def test_a_new_warn_takes_one_kinds_line_and_one_pattern_with_its_sample(tmp_path):
    grammars = tmp_path / "grammars"
    shutil.copytree(ROOT / "grammars", grammars)
    errors = grammars / "nccl" / "errors.toml"
    text = errors.read_text()
    text = text.replace("[kinds]\n", "[kinds]\n" + example("kind"), 1)
    catch_all = text.rindex("[[patterns]]")  # the guide: before the last pattern, the catch-all
    errors.write_text(text[:catch_all] + example("pattern") + "\n" + text[catch_all:])

    loaded = load_grammars(grammars, check_dialect=True)  # raises on any problem of the files
    family = loaded.family("errors")
    assert {k.name: (k.role, k.owner) for k in family.kinds}["fabric_down"] == ("failure", "LS302")
    results = [r for r in check_samples(loaded) if r.grammar.family == "errors"]
    assert results and not [r.problems for r in results if r.problems]
    added = [s for s in family.samples if "fabric reports" in s.line]
    assert len(added) == 1 and added[0].expect["error_kind"] == "fabric_down"


def test_the_rule_example_is_a_rule_that_finds_what_it_says_and_nothing_on_a_healthy_job():
    namespace: dict = {}
    exec(compile(example("rule"), "CONTRIBUTING.md", "exec"), namespace)
    rule = namespace["SocketPaths"]
    doc = rule.doc()
    positions = [doc.find(f"\n{heading}:\n") for heading in HEADINGS]
    assert -1 not in positions and positions == sorted(positions)
    (finding,) = rule().check(load_job([str(FIXTURES / "socket_fallback_4ranks.log")]))
    assert finding.code == "LS399" and finding.evidence and "NET/Socket" in finding.evidence[0].text
    assert list(rule().check(load_job([str(FIXTURES / "healthy_8ranks.log")]))) == []


def test_the_rule_example_imports_only_what_a_rule_may_import():
    """The guide's rule is one file: it needs the shared modules, resolve/ and the model, no other rule."""
    from test_layering import SHARED

    imported = {n.module for n in ast.walk(ast.parse(example("rule"))) if isinstance(n, ast.ImportFrom)}
    ours = {m for m in imported if m and m.startswith("nccl_logsift")}
    assert ours and all(
        m in SHARED or m.startswith("nccl_logsift.resolve.") or m == "nccl_logsift.model" for m in ours
    )
    assert "socket_paths.py" in GUIDE  # the file is named after the rule, as test_catalogue checks


def test_the_guide_names_files_that_exist():
    for path in sorted(set(re.findall(r"`((?:grammars|nccl_logsift|tests|docs|fixtures)/[\w./]+)`", GUIDE))):
        assert (ROOT / path).exists(), path
