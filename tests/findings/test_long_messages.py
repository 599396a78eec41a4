"""The rules read long messages in time linear in their length (an interface list of 1 MiB is as cheap as
its regexes in the parser)."""

from __future__ import annotations

import json
import time

import pytest


@pytest.mark.parametrize("head", ["NET/Socket : Using ", "Bootstrap : Using "])
def test_a_long_list_of_interfaces_without_addresses_is_read_in_seconds(run_cli, tmp_path, head):
    # Before, each "[0]" (or ":") retried the rest of the list: 120 KB took 18 s, 1 MiB about 20 minutes.
    path = tmp_path / "interfaces.log"
    path.write_text(f"h:1:1 [0] NCCL INFO {head}" + "[0]a:b" * 40_000 + "\n")
    start = time.perf_counter()
    result = run_cli("analyze", str(path), "--format", "json")
    assert time.perf_counter() - start < 10
    assert result.exit_code == 0 and json.loads(result.output)["inputs"][0]["lines"] == 1
