"""Shared test helpers: paths to fixtures and to the real corpus, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
CORPUS = (ROOT / ".." / "shared" / "corpus" / "real").resolve()


@pytest.fixture
def run_cli():
    from nccl_logsift.cli import cli

    def run(*args: str, input: bytes | str | None = None):
        return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)

    return run


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.iterdir() if p.is_file() and p.suffix != ".md")


@pytest.fixture(scope="session")
def corpus_job():
    """Parse a real corpus log by file name once per session; skip when ../shared is absent."""
    from nccl_logsift.findings.context import load_job

    cache: dict[str, object] = {}

    def get(name: str):
        path = CORPUS / name
        if not path.exists():
            pytest.skip("real corpus not available")
        if name not in cache:
            cache[name] = load_job([str(path)])
        return cache[name]

    return get
