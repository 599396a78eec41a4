"""Lines of NCCL 2.29.2 → 2.32: each new or reworded shape is read into the table its rules read.

The shapes are restated from NCCL's source (cited in the grammar files); the host names, addresses and
messages are made up.
"""

from __future__ import annotations

import polars as pl
import pytest
from builders import job_of

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import LineParser

HEAD = "gpu-a07:41200:41200 [2] NCCL INFO "
COMM = "comm 0x5611aa0f3c20 rank 5 nranks 8 cudaDev 2 busId 41000"


@pytest.fixture(scope="module")
def parser() -> LineParser:
    return LineParser(load_grammars())


def parse(parser: LineParser, lines: list[str]) -> dict[str, pl.DataFrame]:
    """Every table, with every column ``logsift parse`` writes, of ``lines`` read as one input."""
    return parser.parse(
        LineChunk(
            source_id=0,
            line_no=pl.Series("line_no", range(1, len(lines) + 1), dtype=pl.UInt32),
            byte_offset=pl.Series("byte_offset", [0] * len(lines), dtype=pl.UInt64),
            text=pl.Series("text", lines, dtype=pl.String),
        )
    )


def test_an_attn_line_is_an_nccl_line_of_level_attn_kept_as_a_notice_with_its_text(parser):
    """ATTN (after 2.30.7): printed like a WARN, with a leading blank line, a timestamp, file:line (func)."""
    attn = (
        "[2026-08-03 10:15:42] gpu-a07:41200:41200 [2] transport/net_ib/init.cc:611 (ncclIbInit) "
        "NCCL ATTN NET/IB : Call to ibv_open_device failed for mlx5_4, skipping this NIC"
    )
    tables = parse(parser, [HEAD + "NCCL version 2.32.0+cuda13.1", "", attn])
    assert parser.state.unparsed_envelope_lines == 0
    notes = tables["notes"].filter(pl.col("note_kind") == "attention")
    row = notes.row(0, named=True)
    assert notes.height == 1 and row["level"] == "ATTN" and row["host"] == "gpu-a07"
    assert row["note_text"].startswith("NET/IB : Call to ibv_open_device failed for mlx5_4")
    assert row["src_file"] == "transport/net_ib/init.cc" and row["ts"] == "2026-08-03 10:15:42"
    # A notice, not an error, however its words read: the errors family never sees it.
    assert tables["errors"].filter(pl.col("level") == "ATTN").is_empty()


def test_an_attn_line_glued_after_another_process_line_is_cut_there(tmp_path):
    glued = (
        HEAD + "Channel 00/0 : 5[2] -> 6[3] via P2P/CUMEM"
        "gpu-a08:51210:51210 [0] init.cc:1512 (ncclCommInitRankFunc) NCCL ATTN NCCL_P2P_LEVEL set by the user"
    )
    notes = job_of(tmp_path, ["gpu-a08:51210:51210 [0] NCCL INFO NCCL version 2.32.0+cuda13.1", glued]).table(
        "notes"
    )
    assert notes.filter(pl.col("level") == "ATTN")["host"].to_list() == ["gpu-a08"]


def test_the_git_version_line_after_the_banner_is_a_version_row_that_adds_no_version(tmp_path, parser):
    """2.29.2+: ``NCCL git version <branch> <describe>`` right after ``NCCL version``
    (src/misc/git_version.cc)."""
    from nccl_logsift.report import summarize_job

    lines = [HEAD + "NCCL version 2.30.7+cuda13.0", HEAD + "NCCL git version main v2.30.7-1-g0b7d3e2"]
    versions = parse(parser, lines)["versions"].sort("line_no")
    assert versions["banner_line"].to_list() == ["version", "git"]
    assert versions["git"].to_list() == [None, "main v2.30.7-1-g0b7d3e2"]
    assert summarize_job(job_of(tmp_path, lines)).nccl_versions == ("2.30.7",)


def test_the_ib_completion_warn_of_2_29_2_with_its_function_and_traces_of_2_30_7_are_read(parser):
    """2.29.2 dropped reqSize and req_type, leaving two spaces before "hca" on InfiniBand; 2.30.7 adds
    "(func)" after the WARN's and every trace's file:line."""
    warn = (
        "[2026-08-03 10:20:01] gpu-a07:41200:41377 [2] transport/net_ib/p2p.cc:688 "
        "(ncclIbLogCompletionWithError) NCCL WARN NET/IB: Got completion from peer 10.4.1.18<51004> with "
        "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129  hca mlx5_2"
    )
    trace = (
        "gpu-a07:41200:41377 [2] NCCL INFO transport/net.cc:1318 (sendProxyProgress) -> 6 [Progress Thread]"
    )
    errors = parse(parser, ["", warn, trace])["errors"].sort("line_no")
    ib, chain = errors.row(0, named=True), errors.row(1, named=True)
    assert ib["error_kind"] == "ib_completion" and ib["src_file"] == "transport/net_ib/p2p.cc"
    assert (ib["status"], ib["status_name"], ib["opcode"], ib["hca"]) == (
        12,
        "IBV_WC_RETRY_EXC_ERR",
        1,
        "mlx5_2",
    )
    assert ib["peer_ip"] == "10.4.1.18" and ib["req_type"] is None
    assert chain["error_kind"] == "chain" and chain["chain_func"] == "sendProxyProgress"
    assert (chain["result_code"], chain["thread"]) == (6, "Progress Thread")


def test_teardown_lines_of_the_destroy_subsystem_are_read_like_the_init_ones(parser):
    """2.30.3 moved Destroy/Abort/Revoke into the DESTROY subsystem: same text, printed only on request."""
    lines = [
        HEAD + f"{COMM.replace('nranks', 'nRanks')} - Abort START",
        HEAD + f"{COMM} - Abort COMPLETE",
        HEAD + f"{COMM} - Destroy COMPLETE",
    ]
    comms = parse(parser, lines)["comms"].sort("line_no")
    assert comms["what"].to_list() == ["Abort", "Abort", "Destroy"]
    assert comms["rank"].to_list() == [5, 5, 5]
