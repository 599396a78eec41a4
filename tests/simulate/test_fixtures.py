"""The simulated fixtures in fixtures/ are current and parse; regenerate with python -m
nccl_logsift.simulate.fixtures."""

from __future__ import annotations

import json

import pytest
from simhelp import parse, unparsed_nccl

from nccl_logsift.simulate.fixtures import FIXTURES, ROOT, stale
from nccl_logsift.simulate.truth import SCHEMA


def test_checked_in_fixtures_are_what_the_generator_writes():
    assert stale() == [], "run: python -m nccl_logsift.simulate.fixtures"


@pytest.mark.parametrize("name", list(FIXTURES))
def test_fixture_parses_and_names_its_scenario(name):
    options = FIXTURES[name]
    log = ROOT / (name if options.layout == "per-rank" else f"{name}.log")
    truth = json.loads((ROOT / f"{name}.truth.json").read_text())
    assert truth["schema"] == SCHEMA and truth["scenario"] == options.scenario
    _, tables = parse(log)
    assert unparsed_nccl(tables["lines"]).is_empty()
