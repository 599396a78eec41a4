"""The one-expression answers the README promises work on the shipped fixture."""

import polars as pl
import pytest
from conftest import FIXTURES

from nccl_logsift.pipeline import parse_paths
from nccl_logsift.tables import MemorySink


@pytest.fixture(scope="module")
def t():
    sink = MemorySink()
    parse_paths([str(FIXTURES / "rank3_stalled_4ranks.log")], sink)
    return sink.tables


def test_readme_ranks_per_communicator(t):
    got = t["communicators"].group_by("comm_uid", "nranks").agg(pl.col("rank").sort())
    assert got.rows() == [("0x7c3e91a5d2b4f608", 4, [0, 1, 2, 3])]


def test_readme_last_collective_per_rank(t):
    last = t["collectives"].sort("ordinal").group_by("comm_uid", "global_rank").agg(pl.all().last())
    assert dict(last.select("global_rank", "ordinal").rows()) == {0: 5, 1: 5, 2: 5, 3: 3}


def test_readme_transport_per_connection(t):
    got = t["transports"].select("global_rank", "channel", "from_rank", "to_rank", "transport", "path")
    assert got.height == 12
    inter = got.filter(pl.col("path").str.starts_with("NET/IB"))
    assert set(inter["transport"].to_list()) == {"NET"} and inter.height == 8


def test_readme_every_warn_with_its_decoded_error(tmp_path):
    log = tmp_path / "ib.log"
    log.write_text(
        "\n"
        "h1:10:12 [0] transport/net_ib.cc:1333 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4711> "
        "with error 12, opcode 0, len 0, vendor err 129 (Send)\n"
        "h1:10:12 [0] NCCL INFO transport/net.cc:1287 -> 6\n"
    )
    sink = MemorySink()
    parse_paths([str(log)], sink)
    errors = sink.tables["errors"]
    warn = errors.filter(pl.col("level") == "WARN").row(0, named=True)
    assert (warn["status"], warn["vendor_err"], warn["peer_ip"]) == (12, 129, "10.0.0.2")
    assert errors.filter(pl.col("level") == "INFO")["result_code"].to_list() == [6]
