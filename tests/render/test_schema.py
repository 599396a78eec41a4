"""The findings contract's JSON Schema, shipped in the package, describes what analyze writes."""

from __future__ import annotations

import copy
import json
from importlib.resources import files

import jsonschema
import pytest
from conftest import FIXTURES, fixture_jobs

FIXTURE_INPUTS = [str(p.relative_to(FIXTURES)) for p in fixture_jobs()]


def shipped_schema() -> dict:
    return json.loads(files("nccl_logsift").joinpath("schemas", "findings-v1.schema.json").read_text())


def closed(schema: dict) -> dict:
    """The schema with every object closed to keys it does not describe: consumers ignore unknown keys, but
    a key this project adds must be described before it ships."""
    schema = copy.deepcopy(schema)

    def close(node):
        if isinstance(node, dict):
            if "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def test_shipped_schema_is_a_valid_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(shipped_schema())


@pytest.mark.parametrize("name", FIXTURE_INPUTS)
def test_every_fixtures_findings_validate_against_the_schema_with_every_key_described(run_cli, name):
    result = run_cli("analyze", str(FIXTURES / name), "--format", "json")
    errors = [
        e.message
        for e in jsonschema.Draft202012Validator(closed(shipped_schema())).iter_errors(
            json.loads(result.stdout)
        )
    ]
    assert errors == []


def test_schema_rejects_what_breaks_the_contract(run_cli):
    contract = json.loads(
        run_cli("analyze", str(FIXTURES / "rank_stall_8ranks.log"), "--format", "json").stdout
    )
    validator = jsonschema.Draft202012Validator(closed(shipped_schema()))
    renamed = copy.deepcopy(contract)
    renamed["findings"][0]["sev"] = renamed["findings"][0].pop("severity")
    graded = copy.deepcopy(contract)
    graded["findings"][0]["severity"] = "fatal"
    assert not validator.is_valid(renamed) and not validator.is_valid(graded)


def test_contract_with_input_problems_and_flight_recorder_dumps_validates(run_cli, tmp_path):
    import gzip

    log, dumps = tmp_path / "job.log", tmp_path / "fr"
    assert (
        run_cli(
            "simulate", "-s", "rank-stall", "--ranks", "4", "-o", str(log), "--flight-recorder", str(dumps)
        ).exit_code
        == 0
    )
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(log.read_bytes())[:-200])
    contract = json.loads(run_cli("analyze", str(cut), str(dumps), "--format", "json").stdout)
    assert contract["inputs"][0]["problems"] and contract["dumps"]["files"]
    errors = [
        e.message for e in jsonschema.Draft202012Validator(closed(shipped_schema())).iter_errors(contract)
    ]
    assert errors == []
