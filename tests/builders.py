"""Small builders the finding tests share: a job from composed lines, from a simulated scenario, from a fixture."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from conftest import FIXTURES
from nccl_logsift.findings.context import Job, load_job
from nccl_logsift.simulate import Options, write


def job_of(tmp_path: Path, lines: list[str], name: str = "job.log") -> Job:
    """A job parsed from log lines written by the test."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return load_job([str(path)])


def simulate(tmp_path: Path, scenario: str, **options) -> tuple[Job, dict]:
    """A simulated scenario parsed as a job, with its ground truth (noise off unless asked for)."""
    options.setdefault("noise", False)
    out, truth = tmp_path / f"{scenario}.log", tmp_path / f"{scenario}.json"
    write(Options(scenario=scenario, **options), str(out), str(truth))
    return load_job([str(out)]), json.loads(truth.read_text())


@functools.cache
def fixture_job(name: str) -> Job:
    return load_job([str(FIXTURES / name)])


def only(findings, **attrs):
    """The one finding whose attributes equal ``attrs`` (fails, listing them all, when not exactly one)."""
    found = [f for f in findings if all(getattr(f, k) == v for k, v in attrs.items())]
    assert len(found) == 1, [(f.severity, f.ranks, f.title) for f in findings]
    return found[0]


def run(rule, job) -> list:
    """The findings of one rule class on a job."""
    return list(rule().check(job))


def serious(findings) -> list:
    """Findings at error or critical."""
    from nccl_logsift.model import Severity

    return [f for f in findings if f.severity >= Severity.ERROR]


def fixture_truth(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.truth.json").read_text())
