"""Freed memory handed back to the system."""

import platform
import sys

import pytest

from nccl_logsift import memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibcs_trim_is_found_and_runs():
    assert memory._malloc_trim() is not None
    memory.release_freed()


def test_release_is_harmless_anywhere():
    memory.release_freed()
    memory.release_freed()
