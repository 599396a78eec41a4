"""The transport lines' fast path (parse/fasttransport.py) against the grammar-driven parser it stands in for.

tests/parse/test_fastcoll.py compares the tables of every fixture and real log, with both fast paths, to
those of the general parser alone; here, lines made to sit at the edges of what the fast path takes.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.parse import fasttransport
from nccl_logsift.parse.fastcoll import CollFastPath
from nccl_logsift.parse.lineparser import LineParser
from tests.parse.test_fastcoll import assert_same_tables

GRAMMARS = load_grammars()
HEAD = "gpu-node-3:4120:4188 [2] NCCL INFO "
# (message, taken by the fast path)
MESSAGES = [
    ("Channel 02/0 : 2[2] -> 3[3] via P2P/CUMEM/read", True),
    ("Channel 02/1 : 2[2] -> 3[3] via P2P/CUMEM/read", True),
    ("Channel 02 : 2[1b000] -> 3[3d000] via P2P/IPC", True),
    ("Ring 01 : 2[2] -> 3[3] via P2P/direct pointer/read", True),
    ("Channel 02 : 2[2] -> 5[1] via P2P/indirect/1[1]/read", True),
    ("Channel 00 : 2[2] -> 1[1] via SHM/direct/direct", True),
    ("Channel 00 : 2[25000] -> 1[41000] via direct shared memory", True),
    ("Channel 00/0 : 10[2] -> 2[2] [receive] via NET/IB/1/GDRDMA", True),
    ("Channel 00/0 : 2[2] -> 10[2] [send] via NET/IB/1(0)/GDRDMA(PCI)/Shared", True),
    ("Channel 01/0 : 2[2] -> 10[2] [send] via NET/Socket/0", True),
    ("Channel 01/0 : 2[2] -> 10[2] [send] via NET/AWS Libfabric/3/GDRDMA", True),
    ("Ring 00 : 1 -> 8 [send] via NET/IB/0", True),  # 2.4
    ("Channel 06/0 : 3[4c000] -> 4[8c000] via P2P/IPC comm 0x5c2e81d0 nRanks 08", True),  # RCCL
    ("Channel 00/02 :    0   1   2   3", False),  # the ring dump (topology)
    ("Channel 00/02 : 0 1 2 3", False),
    ("Ring 00 : 3 -> 0 -> 1", False),  # 2.10+ neighbours (topology)
    ("Channel 02/0 : 2[2] -> 3[3] via P2P/CUMEM/write", False),  # no pattern reads it: unparsed
    ("Channel 02/0 : 2[2] -> 3[3] [send] via P2P/CUMEM/read", False),
    ("Channel 02/0 : 2[2] -> 3[3] via NET/IB/0", False),  # NET without a direction
    ("Channel 02/0 : 2[1B000] -> 3[3] via P2P/IPC", False),
    ("Channel 1234567890123456789 : 2[2] -> 3[3] via P2P/IPC", False),  # 19 digits
    ("Channel 99999999999999999999/0 : 2[2] -> 3[3] via P2P/IPC", False),  # beyond int64
    (
        "Channel 02/0 : 2[2] -> 3[3] via P2P/IPC gpu-node-4:4121:4121 [3] NCCL INFO cudaDriverVersion 12040",
        False,
    ),
    ("Channel 02/0 : 2[2] -> 3[3] via P2P/\u00cfPC", False),
    ("Channel 02/0 : 2[2] -> 3[3] via P2P/IPC \t", True),  # the reader trims a line's trailing blanks
]


def _log(tmp_path, lines: list[str]):
    path = tmp_path / "job.log"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def taken(path) -> int:
    """The lines of ``path`` the transport fast path takes."""
    sources, problems = expand_paths([str(path)])
    assert not problems, problems
    parser = LineParser(GRAMMARS)
    coll = CollFastPath(parser.parse_prefixes)
    fast = fasttransport.TransportFastPath(
        coll.prefixes, lambda tails: fasttransport.tail_fields(parser, tails)
    )
    count = 0
    for source in sources:
        for chunk in LineReader(source):
            count += len(fast.read(chunk, np.arange(len(chunk)))[0])
    return count


@pytest.mark.parametrize(("message", "fast"), MESSAGES, ids=[m[:48] for m, _ in MESSAGES])
def test_a_transport_line_takes_the_fast_path_only_where_the_grammar_reads_it_alike(tmp_path, message, fast):
    path = _log(tmp_path, [HEAD + message])
    assert taken(path) == int(fast)
    assert_same_tables(path)


def test_lines_of_every_kind_between_transport_lines_keep_their_order_and_heads(tmp_path):
    heads = [
        HEAD,
        "0: " + HEAD,  # srun's label: a launcher field of the row
        "[rank3]:" + HEAD,
        "\x1b[32m" + HEAD,  # ANSI: the general parser's
        "gpu-node-3:4120:4188 [2] NCCL WARN ",
        "gpu-node-3:4120:99999999999999999999 [2] NCCL INFO ",  # a number beyond its column
    ]
    lines = [head + message for message, _ in MESSAGES for head in heads]
    lines += [
        HEAD + "AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 "
        "comm 0x55 [nranks=4] stream 0x9",
        "step 1 | loss 2.5",
    ]
    path = _log(tmp_path, lines * 3)
    assert taken(path) == 3 * 3 * sum(fast for _, fast in MESSAGES)  # three heads are clean envelopes
    assert_same_tables(path)


def test_a_few_lines_under_a_new_head_take_the_fast_path(tmp_path):
    """A per-rank file's init thread prints a few dozen transport lines under a head no line before had:
    the head is read for them (as tuples, ``LineParser.parse_prefixes``), not left to the general parser."""
    lines = [HEAD + "Channel 02/0 : 2[2] -> 3[3] via P2P/CUMEM/read"]
    assert taken(_log(tmp_path, lines)) == 1
    other = HEAD.replace(":4188 ", ":4189 ")
    assert other != HEAD
    mixed = lines * 2 + [other + "Channel 03/0 : 2[2] -> 3[3] via P2P/CUMEM/read"]
    assert taken(_log(tmp_path, mixed)) == 3
    assert_same_tables(_log(tmp_path, mixed))


def test_tail_fields_take_a_tail_only_when_the_grammar_reads_the_scanned_values():
    parser = LineParser(GRAMMARS)
    tails = [
        " via P2P/CUMEM/read",
        " -> 1",
        " [receive] via NET/IB/0/GDRDMA",
        " via P2P/IPC NCCL INFO x",
        " ",
    ]
    fields = fasttransport.tail_fields(parser, tails)
    assert fields.get_column("__taken").to_list() == [True, False, True, False, False]
    assert fields.get_column("pattern").to_list()[:3] == ["p2p", None, "net"]
    assert fields.row(2, named=True)["direction"] == "receive"
    assert parser.state.lines == 0  # nothing counted


def test_a_tail_no_grammar_claims_is_refused_without_fields():
    parser = LineParser(GRAMMARS)
    fields = fasttransport.tail_fields(parser, [" x", " y"])
    assert fields.get_column("__taken").to_list() == [False, False]
    assert fields.height == 2 and fields.schema["pattern"] == pl.String


def test_merged_rows_come_in_line_order_whichever_side_is_empty_or_out_of_order():
    def rows(places: list[tuple[int, int]]) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "source_id": pl.Series([s for s, _ in places], dtype=pl.UInt16),
                "line_no": pl.Series([n for _, n in places], dtype=pl.UInt32),
                "part": pl.Series([0] * len(places), dtype=pl.UInt8),
            }
        )

    general, fast = rows([(0, 2), (0, 9), (1, 1)]), rows([(0, 5), (1, 3)])
    empty = general.clear()
    order = fasttransport.merged(general, fast).select("source_id", "line_no").rows()
    assert order == [(0, 2), (0, 5), (0, 9), (1, 1), (1, 3)]
    assert fasttransport.merged(general, empty).equals(general)
    assert fasttransport.merged(empty, fast).equals(fast)
    backwards = rows([(1, 3), (0, 5)])
    assert fasttransport.merged(empty, backwards).rows() == [(0, 5, 0), (1, 3, 0)]
    # Every bit of each column counts: the largest source and line number, a glued line's parts.
    far = pl.DataFrame(
        {
            "source_id": pl.Series([65535, 65535, 0], dtype=pl.UInt16),
            "line_no": pl.Series([4_294_967_295, 7, 7], dtype=pl.UInt32),
            "part": pl.Series([255, 2, 1], dtype=pl.UInt8),
        }
    )
    near = far.with_columns(pl.col("part") - 1)
    assert fasttransport.merged(far, near).rows() == [
        (0, 7, 0),
        (0, 7, 1),
        (65535, 7, 1),
        (65535, 7, 2),
        (65535, 4_294_967_295, 254),
        (65535, 4_294_967_295, 255),
    ]
