"""numba's cache is keyed on the source of every module with compiled loops."""

from __future__ import annotations

import json
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
        if "import numba" in (text := path.read_text()) or "from nccl_logsift.compiled import njit" in text
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


LOAD_TWICE = """
import json, sys
import numpy as np
from nccl_logsift.io import split
data = np.frombuffer(b"first\\nsecond\\r\\nthird", dtype=np.uint8)
print(json.dumps({
    "last": int(split.last_newline(data, 0, len(data))),
    "compiling_modules": sorted(m for m in ("numba.np.polynomial.polynomial_core", "numba.typed.typeddict") if m in sys.modules),
}))
"""


def test_cached_loops_load_without_what_only_compiling_needs(tmp_path):
    """The first process compiles a loop (numba imports its typing and lowering registries for that); the
    next loads it from the cache without them, ~0.2 s of every run, and computes the same."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", LOAD_TWICE], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    compiled, loaded = run(), run()
    assert compiled["last"] == loaded["last"] == len(b"first\nsecond\r")
    assert compiled["compiling_modules"] and not loaded["compiling_modules"]


def _double(x):
    return 2 * x


def test_a_cache_whose_internals_changed_loads_as_numba_does(monkeypatch):
    from types import SimpleNamespace

    from numba.core import caching

    from nccl_logsift import compiled

    cache = caching.FunctionCache(_double)
    monkeypatch.setattr(cache, "load_overload", lambda signature, context: ("numba's own", signature))
    compiled._load_without_refresh(SimpleNamespace(_cache=cache))

    def changed(*args):
        raise TypeError("another signature")

    monkeypatch.setattr(cache, "_load_overload", changed)
    assert cache.load_overload("sig", object()) == ("numba's own", "sig")
