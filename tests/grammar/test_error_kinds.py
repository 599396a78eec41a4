"""The error-kind vocabulary (grammars/nccl/errors.toml [kinds]) is whole, and ``analyze`` and ``watch`` read
the same one: each kind has a role and an owner that is a rule."""

from __future__ import annotations

from nccl_logsift.findings import ALL_RULES, vocabulary
from nccl_logsift.findings.nccl.nccl_error import OWNED, TEARDOWN_KINDS
from nccl_logsift.findings.vocabulary import BENIGN_KINDS
from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.schema import ROLES, read_grammar
from nccl_logsift.resolve import failures

ERRORS = load_grammars().family("errors")


def test_every_kind_a_pattern_sets_is_in_the_vocabulary_and_none_other():
    set_by_patterns = {p.set["error_kind"] for p in ERRORS.patterns if "error_kind" in p.set}
    assert set_by_patterns == set(vocabulary.error_kinds())


def test_every_kind_has_a_role_and_an_owner_that_is_a_rule():
    codes = {rule.code for rule in ALL_RULES}
    for kind in vocabulary.error_kinds().values():
        assert kind.role in ROLES, kind.name
        assert kind.owner in codes or (kind.owner == "" and kind.role == "teardown"), kind.name
        assert kind.doc, kind.name


def test_the_rules_read_their_kinds_from_the_vocabulary():
    kinds = vocabulary.error_kinds()
    assert set(OWNED) == {name for name, k in kinds.items() if k.owner != vocabulary.CATCH_ALL}
    assert set(TEARDOWN_KINDS) == {name for name, k in kinds.items() if k.role == "teardown"}
    assert set(BENIGN_KINDS) == {name for name, k in kinds.items() if k.role in ("benign", "teardown")}
    assert set(failures.BENIGN_KINDS) == set(BENIGN_KINDS)  # resolve/ reads the grammar below findings/
    # watch names the rule analyze reports a kind under: an IB device WARN is the network rule's (it was
    # labelled LS901 live while analyze reported it as LS302).
    assert vocabulary.owner("ib_device") == "LS302"
    assert vocabulary.owner("proxy_closed") == vocabulary.owner("no_such_kind") == vocabulary.CATCH_ALL


def test_a_kind_with_no_role_or_a_bad_owner_is_refused(tmp_path):
    grammar = tmp_path / "g.toml"
    grammar.write_text(
        'schema = "nccl-logsift/grammar/v1"\nfamily = "g"\nlayer = "message"\nsource = "nccl"\ntable = "g"\n'
        '[kinds]\na = { role = "failure", owner = "LS302" }\nb = { owner = "LS302" }\nc = { role = "benign", '
        'owner = "302" }\nd = { role = "benign", owner = "", colour = "red" }\n'
    )
    _, problems = read_grammar(grammar)
    assert [p for p in problems if p.startswith("kinds.")] == [
        "kinds.b: role must be one of failure, cascade, benign, teardown",
        "kinds.c: owner must be a rule code (LS123) or empty",
        "kinds.d: unknown key 'colour'",
    ]
