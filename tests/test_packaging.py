"""What a wheel carries: every file the package reads at run time, not only its modules."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nccl_logsift"
# Built or compiled: the extension is built into the wheel, its C sources stay out of it.
NOT_DATA = {".py", ".pyc", ".so", ".pyd", ".c", ".h"}


def test_every_data_file_of_the_package_is_declared_as_package_data():
    # A template missing from the wheel passes every test of a checkout and fails `logsift report` installed.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    declared = {
        path
        for package, patterns in config.items()
        for pattern in patterns
        for path in (ROOT / package.replace(".", "/")).glob(pattern)
    }
    data = {
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in NOT_DATA and "__pycache__" not in path.parts
    }
    assert sorted(str(p.relative_to(ROOT)) for p in data - declared) == []
