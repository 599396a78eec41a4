"""Freed memory kept for reuse while streaming, handed back to the system between stages."""

import platform
import subprocess
import sys

import pytest

from nccl_logsift import memory

GLIBC_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

# Allocates and touches a 40 MB block five times and prints the page faults of the last four: glibc maps a
# block of 32 MB or more afresh every time by default (every page faulted in again), and reuses it once
# reuse_freed has raised the threshold.
_FAULTS = """
import resource, sys
import numpy as np
from nccl_logsift import memory
if sys.argv[1] == "reuse":
    memory.reuse_freed()
def touched():
    block = np.empty(40 << 20, dtype=np.uint8)
    block[::4096] = 1
touched()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    touched()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@GLIBC_ONLY
def test_glibcs_trim_is_found_and_runs():
    assert memory._libc_function("malloc_trim", (memory.ctypes.c_size_t,)) is not None
    memory.release_freed()


@GLIBC_ONLY
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    def faults(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert faults("default") >= 4 * 10  # each 40 MB block faulted in again (10,240 pages; fewer when huge)
    assert faults("reuse") < 10


def test_release_is_harmless_anywhere():
    memory.release_freed()
    memory.release_freed()


@pytest.mark.parametrize("few", [True, False])
def test_a_copied_column_holds_its_values_in_buffers_of_its_own(few, monkeypatch):
    """``copied`` makes a column that shared a far larger buffer (a chunk's text) hold only its own values,
    nulls and empty texts kept: through Python strings for a few rows, through Arrow for more."""
    import numpy as np
    import polars as pl

    if not few:
        monkeypatch.setattr(memory, "_FEW_STRINGS", 0)
    chunk = pl.Series("text", [f"line {n} " + "x" * 150 for n in range(20_000)])
    odd = pl.Series("text", [None, ""], dtype=pl.String)
    kept = pl.concat([chunk.gather(np.arange(0, 20_000, 400)), odd])
    assert memory._shares(kept)
    copy = memory.copied(kept)
    assert copy.name == "text" and copy.dtype == pl.String
    assert copy.to_list() == kept.to_list()
    assert not memory._shares(copy)
