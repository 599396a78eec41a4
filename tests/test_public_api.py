"""The library's public names: importable from the package, loaded only when asked for."""

from __future__ import annotations

import subprocess
import sys

from conftest import FIXTURES, ROOT

import nccl_logsift


def test_every_public_name_resolves_and_analyze_returns_a_report():
    for name in nccl_logsift.__all__:
        assert getattr(nccl_logsift, name) is not None, name
    report = nccl_logsift.analyze([str(FIXTURES / "rank_stall_8ranks.log")])
    assert isinstance(report, nccl_logsift.Report)
    assert report.findings[0].severity is nccl_logsift.Severity.CRITICAL


def test_importing_the_package_loads_none_of_the_pipeline():
    script = (
        "import sys, nccl_logsift; print(sorted(m for m in sys.modules if m.startswith('nccl_logsift.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
