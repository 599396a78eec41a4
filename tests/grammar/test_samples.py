"""Every sample line of every grammar file parses to exactly what the file says it must yield."""

import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.validate import check_samples

RESULTS = check_samples(load_grammars())


@pytest.mark.parametrize("result", RESULTS, ids=[r.id for r in RESULTS])
def test_grammar_sample_parses_as_declared(result):
    assert not result.problems, f"{result.grammar.path}: " + "; ".join(result.problems)


def test_every_grammar_has_samples():
    grammars = load_grammars().grammars
    assert grammars and all(g.samples for g in grammars)


def test_shipped_grammars_pass_the_dialect_check():
    """Runtime loading skips compiling every regex in both engines; the shipped files are checked here."""
    from nccl_logsift.grammar.registry import grammar_root

    assert load_grammars(grammar_root(), check_dialect=True).grammars
