"""numba's cache is keyed on the source of every module with compiled loops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nccl_logsift

PACKAGE = Path(nccl_logsift.__file__).parent


def test_every_module_that_compiles_with_numba_is_listed():
    compiling = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "import numba" in path.read_text()
    }
    assert compiling == set(nccl_logsift.COMPILED_MODULES)


def test_the_cache_directory_follows_the_kernels_source(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    code = "import os, nccl_logsift; print(os.environ['NUMBA_CACHE_DIR'])"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(first).parent == tmp_path / "nccl-logsift" and Path(first).is_dir()
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    chosen = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert chosen == str(tmp_path / "mine")
