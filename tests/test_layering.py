"""Imports run one way: ``cli → pipeline → {parse, resolve, findings, report} → model``.

Read from the source with ``ast`` (nothing is imported):

* no import cycle among the package's modules, counting the imports a module runs when it is loaded;
* a rule (a module that defines a :class:`~nccl_logsift.findings.base.Rule`) imports the shared modules of
  ``findings/``, the private helpers (``_*.py``) of its own family and ``resolve/``, never another rule;
* ``report.py``, ``views/``, ``live/`` and ``render/`` import no rule and no rule family;
* nothing below the pipeline imports ``nccl_logsift.pipeline`` or ``nccl_logsift.cli``.

An import inside a function counts for all but the first: it hides a cycle, it does not remove the
dependency.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nccl_logsift"

# The findings modules every rule may use: the Rule base class, how findings word ranks, which lines they
# quote, and the error-kind vocabulary.
SHARED = {f"nccl_logsift.findings.{m}" for m in ("base", "wording", "evidence", "vocabulary")}
# Above the rules: the catalogue (findings/__init__.py: ALL_RULES, rule_for) and the triage of findings.
CATALOGUE = {"nccl_logsift.findings", "nccl_logsift.findings.triage"}
BELOW_PIPELINE = ("parse", "resolve", "findings", "report", "views", "model", "io", "grammar")
NO_RULES = ("report", "views", "live", "render")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(name: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules an import statement of module ``name`` loads (a name imported from a package
    counts as its submodule when there is one)."""
    known = modules()
    if isinstance(node, ast.Import):
        found = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name if name in known and _is_package(name) else name.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}".rstrip(".")
        found = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return [m for m in found if m in known]


def _is_package(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


def _type_checking(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def _loaded(body: list[ast.stmt]):
    """Import statements run when the module loads: its top level and the branches of top-level ``if`` and
    ``try`` (not ``if TYPE_CHECKING``), not function or class bodies."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try)) and not _type_checking(node):
            for branch in ("body", "orelse", "finalbody", "handlers"):
                for inner in getattr(node, branch, []):
                    yield from _loaded(inner.body if isinstance(inner, ast.ExceptHandler) else [inner])


@functools.cache
def imports(load_time_only: bool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, tree in modules().items():
        nodes = (
            _loaded(tree.body)
            if load_time_only
            else (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
        )
        out[name] = {t for node in nodes for t in _targets(name, node)} - {name}
    return out


@functools.cache
def rule_modules() -> frozenset[str]:
    """Modules that define a subclass of Rule."""
    return frozenset(
        name
        for name, tree in modules().items()
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Rule" for b in node.bases)
    )


def _within(name: str, *packages: str) -> bool:
    return any(name == f"nccl_logsift.{p}" or name.startswith(f"nccl_logsift.{p}.") for p in packages)


def _family(name: str) -> str:
    return name.split(".")[2]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_is_read():
    assert len(modules()) > 100 and len(rule_modules()) == 17


def test_no_import_cycle():
    assert cycles(imports(load_time_only=True)) == []


def test_a_rule_imports_no_other_rule_and_no_other_family():
    wrong = []
    for rule in sorted(rule_modules()):
        family = rule.rsplit(".", 1)[0]
        for target in imports(load_time_only=False)[rule]:
            if not _within(target, "findings") or target in SHARED:
                continue
            private = target.rsplit(".", 1)[0] == family and target.rsplit(".", 1)[1].startswith("_")
            if not private:
                wrong.append(f"{rule} imports {target}")
    assert wrong == []


def test_family_helpers_import_no_rule():
    helpers = [
        name
        for name in modules()
        if _within(name, "findings") and name.rsplit(".", 1)[1].startswith("_") and name.count(".") == 3
    ]
    assert helpers
    wrong = [f"{h} imports {t}" for h in helpers for t in imports(False)[h] if t in rule_modules()]
    assert wrong == []


def test_reports_views_live_and_render_import_no_rule():
    wrong = [
        f"{name} imports {target}"
        for name, targets in imports(load_time_only=False).items()
        if _within(name, *NO_RULES)
        for target in targets
        if _within(target, "findings") and target not in SHARED | CATALOGUE
    ]
    assert wrong == []


def test_nothing_below_the_pipeline_imports_it_or_the_cli():
    wrong = [
        f"{name} imports {target}"
        for name, targets in imports(load_time_only=False).items()
        if _within(name, *BELOW_PIPELINE)
        for target in targets
        if _within(target, "pipeline", "cli")
    ]
    assert wrong == []


def test_resolve_imports_nothing_of_findings():
    """Resolving facts comes before judging them: findings/__init__ loads every rule, and a rule loads
    resolve/, so resolve/ importing findings/ would be a cycle at load time."""
    wrong = [
        f"{name} imports {target}"
        for name, targets in imports(load_time_only=False).items()
        if _within(name, "resolve")
        for target in targets
        if _within(target, "findings")
    ]
    assert wrong == []


def test_the_checks_see_a_rule_import_and_a_cycle():
    """The checks themselves: a rule-to-rule import and a two-module cycle are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]
    rule = "nccl_logsift.findings.progress.rank_behind"
    assert _family(rule) == "progress" and rule in rule_modules()
