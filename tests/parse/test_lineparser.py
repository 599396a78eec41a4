"""The grammar-driven line parser: how message patterns claim lines, and the tables of a batch."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.grammar.schema import Layer, read_grammar
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import LineParser

PROBE = """
schema = "nccl-logsift/grammar/v1"
family = "probe"
layer = "message"
source = "nccl"
table = "probes"
priority = 1

[fields]
n = { kind = "int" }
word = { kind = "str" }
tail = { kind = "str" }

[[patterns]]
name = "number"
anchor = "Probe "
regex = \'\'\'^Probe (?P<n>\\d+)$\'\'\'

[[patterns]]
name = "word"
anchor = "Probe "
regex = \'\'\'^Probe (?P<word>[a-z]+)$\'\'\'

[[patterns]]
name = "bare"
anchor = "Bare"
regex = \'\'\'^Bare(?: (?P<tail>\\S+))?$\'\'\'

[[patterns]]
name = "warned"
anchor = "Warned"
level = "WARN"
regex = \'\'\'^Warned$\'\'\'
"""


@pytest.fixture(scope="module")
def parser(tmp_path_factory) -> LineParser:
    """The shipped launcher and envelope grammars with one message grammar of our own."""
    path = tmp_path_factory.mktemp("grammars") / "probe.toml"
    path.write_text(PROBE)
    probe, problems = read_grammar(path)
    assert not problems
    shipped = load_grammars().grammars
    return LineParser(GrammarSet(tuple(g for g in shipped if g.layer is not Layer.MESSAGE) + (probe,)))


def parse(parser: LineParser, messages: list[str]) -> dict[str, pl.DataFrame]:
    """``messages`` (level and text) as the NCCL lines of one batch."""
    lines = [f"node1:7:7 [0] NCCL {message}" for message in messages]
    return parser.parse(
        LineChunk(
            source_id=0,
            line_no=pl.Series("line_no", range(1, len(lines) + 1), dtype=pl.UInt32),
            byte_offset=pl.Series("byte_offset", [0] * len(lines), dtype=pl.UInt64),
            text=pl.Series("text", lines, dtype=pl.String),
        )
    )


def test_a_pattern_claims_only_the_lines_its_regex_matches_and_leaves_the_rest_to_the_next(parser):
    tables = parse(parser, ["INFO Probe 7", "INFO Probe seven", "INFO Probe 7 and 8"])
    probes = tables["probes"]
    assert probes.select("line_no", "pattern", "n", "word").rows() == [
        (1, "number", 7, None),
        (2, "word", None, "seven"),
    ]
    lines = tables["lines"].sort("line_no")
    assert lines["family"].to_list() == ["probe", "probe", None]


def test_a_match_whose_groups_are_all_empty_is_still_a_match(parser):
    tables = parse(parser, ["INFO Bare", "INFO Bare words", "INFO Bareback riding"])
    assert tables["probes"].select("line_no", "pattern", "tail").rows() == [
        (1, "bare", None),
        (2, "bare", "words"),
    ]


def test_a_pattern_with_a_level_claims_only_lines_of_that_level(parser):
    tables = parse(parser, ["INFO Warned", "WARN Warned"])
    assert tables["probes"].select("line_no", "pattern").rows() == [(2, "warned")]
    assert tables["lines"].sort("line_no")["family"].to_list() == [None, "probe"]


def test_stacked_launcher_prefixes_are_stripped_in_either_order_beside_lines_without_any(parser):
    """The launcher patterns are tested before they capture: one that matches only once another has stripped
    its prefix (here srun's label behind PyTorch's rank tag, or the other way round) still applies."""
    texts = [
        "node1:7:7 [0] NCCL INFO Probe 1",
        "3: [rank3]:node1:7:7 [0] NCCL INFO Probe 2",
        "[rank4]:4: node1:7:8 [0] NCCL INFO Probe 3",
    ]
    tables = parser.parse(
        LineChunk(
            source_id=0,
            line_no=pl.Series("line_no", range(1, len(texts) + 1), dtype=pl.UInt32),
            byte_offset=pl.Series("byte_offset", [0] * len(texts), dtype=pl.UInt64),
            text=pl.Series("text", texts, dtype=pl.String),
        )
    )
    assert tables["probes"].select("line_no", "n", "task", "torch_rank", "tid").rows() == [
        (1, 1, None, None, 7),
        (2, 2, 3, 3, 7),
        (3, 3, 4, 4, 8),
    ]


def test_tables_no_line_reached_are_empty_with_their_schema(parser):
    tables = parse(parser, ["INFO nothing anyone claims"])
    for name, columns in parser.schemas.tables.items():
        assert tables[name].is_empty() and tables[name].schema == pl.Schema(columns), name
    tables = parse(parser, ["INFO Probe 1"])
    assert tables["probes"].height == 1 and parser.empty_tables["probes"].is_empty()


def test_the_lines_set_apart_as_plain_are_parsed_as_the_stages_parse_them():
    """parse() makes the lines row of a line it can tell is plain without the stages (no launcher or envelope
    head, no glued head, no text pattern; or none of these once its launcher prefixes are stripped): the
    tables and counts are those of running every line through them (parse_frame), the glued lines' pieces
    included."""
    texts = [
        "step 10/100 | loss 2.5 |     15.1 ms/step",
        "",
        "  warnings.warn(",
        "gpu-node-1:12:12 [0] NCCL INFO Using network IB",
        "0: gpu-node-1:12:12 [0] NCCL INFO cudaDriverVersion 12040",
        "plain then glued gpu-node-1:12:13 [0] NCCL INFO Using network IB",
        "Traceback (most recent call last):",
        "\x1b[31mred\x1b[0m text",
        "[rank3]:[E1126 10:00:00.000 ProcessGroupNCCL.cpp:100] something",
        "NCCL version 2.21.5+cuda12.4",
        # Plain once a launcher prefix is stripped (srun -l, torchrun's tag), or not.
        " 3: step 10/100 | loss 2.5 |     15.1 ms/step",
        "12: ",
        "[default0]:step 11/100 | loss 2.4",
        " 3: [default0]:  warnings.warn(",
        "99999999999999999999999: step 12/100",
        " 0: Traceback (most recent call last):",
        " 1: plain then glued gpu-node-1:12:13 [0] NCCL INFO Using network IB",
    ]
    chunk = LineChunk(
        0,
        pl.Series("line_no", range(1, len(texts) + 1), dtype=pl.UInt32),
        pl.Series("byte_offset", [100 * n for n in range(len(texts))], dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    apart, whole = LineParser(load_grammars()), LineParser(load_grammars())
    tables = apart.parse(chunk)
    expected, _ = whole.parse_frame(chunk)
    assert tables["lines"]["family"].to_list()[:3] == ["text", "blank", "text"]
    assert tables["lines"].height == len(texts) + 2  # the glued lines in two pieces each
    for name, table in expected.items():
        assert tables[name].equals(table), name
    assert apart.state == whole.state


SIDE_BY_SIDE_LOGS = ["collective_mismatch_4ranks.log", "ib_error_4ranks.log", "cuda_oom_4ranks.log"]


@pytest.mark.parametrize("log", SIDE_BY_SIDE_LOGS)
def test_patterns_matched_in_python_side_by_side_or_in_turn_claim_the_same_rows(log, monkeypatch):
    """Over a small pool the messages are matched in Python, over a larger one a grammar's patterns capture
    together in polars, and over a large one one after the other (LineParser._claim): each way each line
    goes to the first pattern that matches it, with the same fields. Each log is parsed with every pool
    counted small, then middling, then large."""
    from conftest import FIXTURES

    from nccl_logsift.parse import lineparser

    texts = (FIXTURES / log).read_text().splitlines()
    chunk = LineChunk(
        0,
        pl.Series("line_no", range(1, len(texts) + 1), dtype=pl.UInt32),
        pl.Series("byte_offset", [0] * len(texts), dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    results = []
    for small, together in ((1 << 30, 1 << 30), (0, 1 << 30), (0, 0)):
        monkeypatch.setattr(lineparser, "_SMALL_ROWS", small)
        monkeypatch.setattr(lineparser, "_TOGETHER_ROWS", together)
        parser = LineParser(load_grammars())
        results.append((parser.parse(chunk), parser.state))
    (python, state), *others = results
    assert python["lines"]["family"].is_not_null().sum() > len(texts) // 2
    for tables, other_state in others:
        for name, table in python.items():
            assert table.equals(tables[name]), name
        assert state == other_state


def test_a_large_pool_claims_what_a_small_one_does_whatever_its_row_numbers(monkeypatch):
    """Over a large pool each pattern captures over the messages that hold its anchor, found by their place
    in the pool (LineParser._claim_routed); over a small one a grammar's patterns capture side by side. The
    messages of every grammar's samples, numbered out of order and apart (as a pool is after its short
    messages went to Python), are claimed alike either way, by the same patterns with the same fields."""
    from nccl_logsift.parse import lineparser

    grammars = load_grammars()
    parser = LineParser(grammars)
    samples = [s.line for g in grammars.grammars for s in g.samples]
    texts = [*samples, *(f"{line} and more" for line in samples), "nothing a grammar knows", ""]
    chunk = LineChunk(
        0,
        pl.Series("line_no", range(1, len(texts) + 1), dtype=pl.UInt32),
        pl.Series("byte_offset", [0] * len(texts), dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    _, frame = parser.parse_frame(chunk)
    messages = frame.filter(pl.col("producer") == "nccl").select("msg", "level").unique(maintain_order=True)
    rows = pl.Series("row", [7 * (messages.height - n) + 3 for n in range(messages.height)], dtype=pl.UInt32)
    pool = messages.with_columns(rows).select("row", "msg", "level")
    monkeypatch.setattr(lineparser, "_SMALL_ROWS", 0)
    claims = []
    for together in (1 << 30, 0):
        monkeypatch.setattr(lineparser, "_TOGETHER_ROWS", together)
        claimed = parser._claim(pool, grammars.messages("nccl"))
        claims.append({t: pl.concat(f, how="diagonal_relaxed").sort("row") for t, f in claimed.items()})
    side_by_side, routed = claims
    assert sum(t.height for t in side_by_side.values()) > messages.height // 2
    assert side_by_side.keys() == routed.keys()
    for table, claimed in side_by_side.items():
        assert claimed.equals(routed[table].select(claimed.columns)), table


def test_parsers_of_one_grammar_set_share_what_is_built_from_it():
    """What a parser builds from its grammars (schemas, steps, capture steps) is built once per process for
    each grammar set and keep_text; a parser of another set, or keeping no text, builds its own."""
    grammars = load_grammars()
    first, second = LineParser(grammars), LineParser(grammars)
    assert first.schemas is second.schemas and first._extractions is second._extractions
    assert LineParser(grammars, keep_text=False).schemas is not first.schemas
    tuning = next(g for g in grammars.grammars if g.family == "tuning")
    other = LineParser(GrammarSet(tuple(g for g in grammars.grammars if g is not tuning)))
    assert other._extractions is not first._extractions
    line = tuning.samples[0].line
    chunk = LineChunk(
        0,
        pl.Series("line_no", [1], dtype=pl.UInt32),
        pl.Series("byte_offset", [0], dtype=pl.UInt64),
        pl.Series("text", [line]),
    )
    assert first.parse(chunk)["lines"]["family"].to_list() == ["tuning"]
    assert other.parse(chunk)["lines"]["family"].to_list() != ["tuning"]


BACKTRACKS = """
schema = "nccl-logsift/grammar/v1"
family = "slow"
layer = "message"
source = "nccl"
table = "slows"
priority = 1

[fields]
tail = { kind = "str" }

[[patterns]]
name = "doubled"
anchor = "Slow "
regex = \'\'\'^Slow (?P<tail>(?:a|a)+)!$\'\'\'
"""


def test_a_pattern_that_backtracks_without_end_is_left_to_polars(tmp_path, monkeypatch):
    """Python's engine backtracks: "(?:a|a)+" takes time doubling with every "a" of a message it does not
    match (24 of them: ~1 s). The searches of a small pool share a time budget; past it polars, whose
    engine is linear, parses the pool, and the tables are the same."""
    from nccl_logsift.parse import lineparser

    path = tmp_path / "slow.toml"
    path.write_text(BACKTRACKS)
    slow, problems = read_grammar(path)
    assert not problems
    shipped = load_grammars().grammars
    parser = LineParser(GrammarSet(tuple(g for g in shipped if g.layer is not Layer.MESSAGE) + (slow,)))
    outcomes = []
    claim_small = LineParser._claim_small

    def spied(self, pool, grammars):
        outcomes.append(claim_small(self, pool, grammars))
        return outcomes[-1]

    monkeypatch.setattr(LineParser, "_claim_small", spied)
    monkeypatch.setattr(lineparser, "_SMALL_SECONDS", 0.05)
    messages = ["INFO Slow aaa!", "INFO Slow " + "a" * 40 + "?", "INFO Slow aa!"]
    tables = parse(parser, messages)
    assert outcomes == [None]  # the budget ran out, and polars took the pool
    assert tables["slows"].select("line_no", "tail").rows() == [(1, "aaa"), (3, "aa")]


def test_a_small_pool_with_long_messages_is_split_between_python_and_polars(parser, monkeypatch):
    """In a small pool the short messages are matched in Python and those longer than _SMALL_BYTES in
    polars: together they claim what polars alone claims."""
    from nccl_logsift.parse import lineparser

    long_word = "w" * (lineparser._SMALL_BYTES + 10)
    messages = ["INFO Probe 7", f"INFO Probe {long_word}", "INFO Probe seven", f"INFO Probe 7{long_word}"]
    split = parse(parser, messages)
    monkeypatch.setattr(lineparser, "_SMALL_ROWS", 0)
    polars_only = parse(parser, messages)
    assert split["probes"].select("line_no", "pattern").rows() == [(1, "number"), (2, "word"), (3, "word")]
    for name, table in split.items():
        assert table.equals(polars_only[name]), name


HEADED = [
    "gpu-node-1:12:12 [0] NCCL INFO Using network IB",
    "gpu-node-1:12:13 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/CUMEM/read",
    # The same head again, and heads behind launcher prefixes (srun -l, torchrun, a container's stamp).
    "gpu-node-1:12:12 [0] NCCL INFO comm 0x55d2e4b1a6c0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0",
    " 3: gpu-node-2:40:40 [3] NCCL INFO cudaDriverVersion 12040",
    "[default1]:gpu-node-2:41:41 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
    "2025-06-02T14:03:11.123Z stdout F gpu-node-2:42:42 [2] NCCL INFO NET/Plugin: No plugin found",
    "[2025-06-02 14:03:11] gpu-node-3:7:7 [0] NCCL INFO Using network Socket",
    "(Worker pid=77) gpu-node-1:12:12 [0] NCCL INFO Using network IB",
    "node-9: gpu-node-1:12:12 [0] NCCL INFO Using network IB",  # pdsh
    # Characters of more than one byte after the head (a head with one is not clean: no launcher or envelope
    # pattern reads them).
    "gpu-node-1:12:12 [0] NCCL INFO Setting affinity for GPU 0 to ffff → «all»",
    # A second " NCCL INFO " inside the message, and a glued line of another process.
    "gpu-node-1:12:12 [0] NCCL INFO quoted NCCL INFO inside",
    "gpu-node-1:12:12 [0] NCCL INFO Using network IBgpu-node-3:7:7 [0] NCCL INFO Using network Socket",
    " 3: gpu-node-2:40:40 [3] NCCL INFO Using network IBgpu-node-3:7:7 [0] NCCL INFO Using network Socket",
]
# Lines with " NCCL INFO " whose head is not one clean INFO envelope: left to the launcher and envelope steps.
UNHEADED = [
    "gpu-node-1:12:12 [0] misc/socket.cc:5 (f NCCL INFO g) NCCL WARN Net : Connection closed",
    "gpu-node-1:12:12 [0] NCCL WARN message with NCCL INFO in it",
    "[rank0]:[W1126 10:00:00.000 ProcessGroupNCCL.cpp:100] saw gpu-node-1:12:12 [0] NCCL INFO x",
    "gpu-node-1:99999999999999999999:12 [0] NCCL INFO Using network IB",
    "\x1b[32mgpu-node-1:12:12 [0] NCCL INFO Using network IB\x1b[0m",
    "gpu-node-1:12:12 [0] NCCL INFO",
    "step 3 gpu-node-1:12:12 [0] NCCL INFO Using network IB",
    "nœud-1:5:5 [0] NCCL INFO Using network IB",
    "(Wörker pid=77) gpu-node-1:12:12 [0] NCCL INFO Using network IB",
]


@pytest.mark.parametrize("max_heads", [1 << 16, 2])
def test_nccl_info_lines_read_by_their_head_parse_as_the_launcher_and_envelope_steps_parse_them(
    monkeypatch, max_heads
):
    """An NCCL INFO line whose head (before its first " NCCL INFO ") is one clean envelope takes the head's
    fields, read once per distinct head (LineParser._apart_by_head): the tables and counts are those of
    running every line through the launcher and envelope steps, heads whose parse is not clean left to them,
    whether the parser keeps what it read of every head or forgets it past two heads."""
    from nccl_logsift.parse import lineparser

    monkeypatch.setattr(lineparser, "_MAX_HEADS", max_heads)
    texts = HEADED + UNHEADED + ["step 10/100 | loss 2.5", ""] + HEADED
    chunk = LineChunk(
        0,
        pl.Series("line_no", range(1, len(texts) + 1), dtype=pl.UInt32),
        pl.Series("byte_offset", [100 * n for n in range(len(texts))], dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    headed, stepped = LineParser(load_grammars()), LineParser(load_grammars())
    monkeypatch.setattr(stepped, "_apart_by_head", lambda frame: (frame, None))
    frame = pl.DataFrame({"row": pl.int_range(len(texts), dtype=pl.UInt32, eager=True), "text": texts})
    _, taken = headed._apart_by_head(frame.with_columns(rest=pl.col("text")))
    assert taken["text"].to_list() == HEADED + HEADED
    for _ in range(2):  # the heads read, then known
        tables = headed.parse(chunk)
        expected = stepped.parse(chunk)
        for name, table in expected.items():
            assert tables[name].equals(table), name
        assert headed.state == stepped.state
    lines = tables["lines"].filter(pl.col("text").str.starts_with("(Worker "))
    assert lines["ray_actor"].to_list() == ["Worker"] * 2 and lines["host"].to_list() == ["gpu-node-1"] * 2
    assert tables["lines"]["line_no"].unique().to_list() == list(range(1, len(texts) + 1))
    assert tables["lines"].filter(pl.col("part") > 0).height >= 4  # the two glued lines, twice, cut in pieces


def test_the_heads_a_parser_read_are_kept_until_there_are_too_many(monkeypatch):
    """Each head is read once (LineParser._read_heads); past _MAX_HEADS the parser forgets what it read
    and reads the heads asked for again, and each call gets the rows of its heads in their order."""
    from nccl_logsift.parse import lineparser

    monkeypatch.setattr(lineparser, "_MAX_HEADS", 3)
    read: list[list[str]] = []
    read_heads = LineParser._read_heads

    def counted(self: LineParser, heads: pl.Series) -> pl.DataFrame:
        read.append(heads.to_list())
        return read_heads(self, heads)

    monkeypatch.setattr(LineParser, "_read_heads", counted)
    parser = LineParser(load_grammars())
    heads = [f"gpu-node-{n}:12:12 [0]" for n in range(5)]
    asked = [heads[:2], heads[1:3], heads[:3], heads[2:5] + heads[2:3]]
    for some in asked:
        rows = parser.parse_prefixes(some).frame()
        assert rows["prefix"].to_list() == some
        assert rows["host"].to_list() == [head.split(":")[0] for head in some]
    assert read == [heads[:2], heads[2:3], heads[2:5]]


@pytest.mark.parametrize("max_heads", [6, 1000])
def test_threads_reading_heads_at_once_each_get_the_rows_of_their_heads(monkeypatch, max_heads):
    """New heads are read outside the lock (``_Heads.rows``): threads asking at once, for heads new to both
    or known, each get their heads' rows in their order; a head another thread is reading is waited for,
    not read twice; and a thread whose heads another forgot meanwhile asks again."""
    import threading
    import time
    from collections import Counter

    from nccl_logsift.parse import lineparser

    monkeypatch.setattr(lineparser, "_MAX_HEADS", max_heads)
    read_heads = LineParser._read_heads
    reads: Counter[str] = Counter()

    def slow(self: LineParser, heads: pl.Series) -> pl.DataFrame:
        reads.update(heads.to_list())
        time.sleep(0.01)  # the threads are inside reads at once
        return read_heads(self, heads)

    monkeypatch.setattr(LineParser, "_read_heads", slow)
    parser = LineParser(load_grammars())
    heads = [f"gpu-node-{n}:12:12 [0]" for n in range(9)]
    asked = [[heads[(n + k) % 9] for k in range(n % 4 + 1)] for n in range(40)]
    failures: list[str] = []

    def ask(some: list[list[str]]) -> None:
        for wanted in some:
            rows = parser.parse_prefixes(wanted).frame()
            if rows["host"].to_list() != [head.split(":")[0] for head in wanted]:
                failures.append(f"{wanted}: {rows['host'].to_list()}")

    threads = [threading.Thread(target=ask, args=(asked[n::3],)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread never got its heads"
    assert not failures
    assert parser._heads._known is not None
    known = parser._heads._known.frame
    assert known["__head"].n_unique() == known.height <= max_heads
    if max_heads > len(heads):  # nothing forgotten: each head read once
        assert reads == Counter(heads)


def _heads_of_lines(texts: list[str]) -> list[str]:
    return [text.split(" NCCL INFO ", 1)[0] for text in texts if " NCCL INFO " in text]


# Heads made to differ: launcher stacks, numbers at and past their columns' limits, negative and missing
# devices, TRACE and WARN middles, timestamps, other producers, nothing at all.
ODD_HEADS = [
    "",
    "x",
    "gpu-node-1:12:12 [-1]",
    "gpu-node-1:12:12",
    "gpu-node-1:9223372036854775807:1 [0]",
    "gpu-node-1:9223372036854775808:1 [0]",
    "gpu-node-1:99999999999999999999:12 [0]",
    "gpu-node-1:+5:12 [0]",
    "gpu-node-1:12:12 [0] 1234.567890 init.cc:10",
    "gpu-node-1:12:12 [0] misc/socket.cc:5 (f)",
    "[2026-11-27 10:00:00.123] gpu-node-1:12:12 [0]",
    "3: gpu-node-1:12:12 [0]",
    " 3: gpu-node-1:12:12 [0]",
    "[default0]:gpu-node-1:12:12 [0]",
    "[1,3]<stdout>:gpu-node-1:12:12 [0]",
    "2026-11-27T10:00:00.123456789Z [default0]:3: gpu-node-1:12:12 [0]",
    "(Worker pid=77) gpu-node-1:12:12 [0]",
    "(Wörker pid=77) gpu-node-1:12:12 [0]",
    "[rank0]:[W1126 10:00:00.000 ProcessGroupNCCL.cpp:100] saw gpu-node-1:12:12 [0]",
    "gpu-node-1:12:12 [0] misc/socket.cc:5 (f NCCL INFO g)",
    "nœud-1:5:5 [0]",
    "\x1b[32mgpu-node-1:12:12 [0]",
    "step 3 gpu-node-1:12:12 [0]",
    "gpu-node-1:12:12 [0] NCCL WARN x",
    "a" * 300,
]


def test_heads_read_in_python_are_read_as_the_launcher_and_envelope_steps_read_them(monkeypatch):
    """A few heads are read in Python (``_HeadReader``): the rows are those of the steps in polars, for the
    heads of every grammar sample and heads made to differ; and a head Python does not vouch for (too
    long, a number it does not cast) sends them all to polars."""
    from nccl_logsift.parse import lineparser

    grammars = load_grammars()
    samples = [sample.line for grammar in grammars.grammars for sample in grammar.samples]
    heads = list(dict.fromkeys(_heads_of_lines(samples + HEADED + UNHEADED) + ODD_HEADS))
    parser = LineParser(grammars)
    read_in_python = []
    for head in heads:
        python = parser._head_reader.read([head])
        read_in_python.append(python is not None)
        monkeypatch.setattr(lineparser, "_SMALL_HEADS", 0)
        steps = parser._read_heads(pl.Series([head], dtype=pl.String))
        monkeypatch.setattr(lineparser, "_SMALL_HEADS", 64)
        if python is not None:
            assert python.frame().equals(steps, null_equal=True), head
            assert python.frame().schema == steps.schema
    assert sum(read_in_python) >= len(heads) - 6  # the long one, +5, and the few Python leaves to polars
    assert parser._head_reader.read(["gpu-node-1:12:12 [0]", "a" * 300]) is None
    vouched = [head for head, ok in zip(heads, read_in_python) if ok]
    together = parser._head_reader.read(vouched)
    assert together is not None and [row[0] for row in together.rows] == vouched


@pytest.mark.parametrize("small_heads", [0, 64])
def test_parsed_prefixes_are_the_heads_rows_however_they_were_read(monkeypatch, small_heads):
    """The fast paths get a head's fields as tuples (``parse_prefixes``), read in Python or, past
    _SMALL_HEADS, by the steps in polars: either way ``frame()`` holds the rows the general parser's frame
    of the same heads holds, asked for once or again once known, and ``hosts()`` the hosts of the clean
    ones only."""
    from nccl_logsift.parse import lineparser

    monkeypatch.setattr(lineparser, "_SMALL_HEADS", small_heads)
    heads = list(dict.fromkeys(_heads_of_lines(HEADED + UNHEADED) + ODD_HEADS))
    expected = LineParser(load_grammars())._heads.rows(heads)
    parser = LineParser(load_grammars())
    for ask in ([heads[0]], heads, heads[::-1]):  # new, then partly known, then known
        parsed = parser.parse_prefixes(ask)
        rows = expected[[heads.index(head) for head in ask]]
        frame = parsed.frame()
        assert frame["prefix"].to_list() == ask
        assert frame["producer"].to_list() == ["nccl" if c else None for c in rows["__clean"].to_list()]
        columns = list(parser.schemas.prefix_columns)
        assert frame.select(columns).equals(rows.select(columns), null_equal=True)
        assert parsed.hosts() == [
            h for c, h in rows.select("__clean", "host").iter_rows() if c and h is not None
        ]
    assert any(parsed.clean) and not all(parsed.clean)
    assert parsed.column("no such field") == [None] * len(heads)


def test_literals_mark_the_lines_polars_finds_them_in():
    """The scanning threads look for literals in their leftover lines' bytes (``chunks.Literals``,
    ``ChunkParser._blocking``): the lines marked are those whose text ``contains_any`` finds one in,
    wherever the literal is, or is not, in them (at either end, a line that is one, one cut short of it,
    characters of several bytes), over every line or some of them."""
    from nccl_logsift.io.lines import ByteView, RawChunk
    from nccl_logsift.parse.chunks import GLUE_MARKS, Literals
    from tests.conftest import FIXTURES

    marks = [*GLUE_MARKS, "- Init ", "opCount ", "commId", "→"]
    texts = [
        *("", "x", " NCCL ", "host:1:1 [0] NCCL INFO opCount 1", "step 3 | loss 2.0", "opCount", "NCCL INFO"),
        *("[rank0]:[W1126 ProcessGroupNCCL.cpp:1] x", "ncclCommInitRank comm 0x1 - Init COMPLETE", "]:"),
        *("nœud NCCL x", "nœud  NCCL x", "- Init", " -  Init ", "a]:[b", "ends with commId", "é→", "x.cpp"),
    ]
    for path in sorted(FIXTURES.rglob("*.log")):
        texts += path.read_text(errors="replace").splitlines()
    lengths = np.array([len(t.encode()) for t in texts], dtype=np.int64)
    starts = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)
    chunk = RawChunk(
        0, 1, ByteView("\n".join(texts).encode()), starts, starts + lengths, starts.astype(np.uint64)
    )
    every = np.arange(len(texts), dtype=np.int64)
    for rows in (every, every[1::2].copy(), every[:0]):
        marked = Literals.of(marks).marked(chunk, rows)
        expected = (
            pl.Series("text", [texts[i] for i in rows], dtype=pl.String).str.contains_any(marks).to_list()
        )
        assert marked.dtype == np.bool_ and marked.tolist() == expected
        assert not len(rows) or (any(expected) and not all(expected))


def test_fields_cast_in_python_are_the_fields_polars_casts():
    """A small batch's claimed fields are cast in Python (``_cast_claims``) when every text is one
    ``kinds.cast_value`` vouches for: on every message pattern's samples the frame is the one polars' cast
    step makes, values, columns and types; a number too large for its column is counted alike. The claims
    of several patterns of one table make one frame: the patterns' frames one after the other."""
    from nccl_logsift.parse.lineparser import _MATCH, _cast_claims, _claims_schema, _Extraction, python_regex

    grammars = load_grammars()
    cast = compared = together = 0
    by_table: dict[str, list] = {}
    for grammar in grammars.layer(Layer.MESSAGE):
        for pattern in grammar.patterns:
            extraction = _Extraction.of(grammar, pattern)
            messages = [s.line.split(" NCCL INFO ", 1)[-1] for s in grammar.samples]
            # And each with a number past any column where its first "1" was: counted out of range alike.
            messages += [m.replace("1", "99999999999999999999", 1) for m in messages]
            regex_ = python_regex(f"(?P<{_MATCH}>)(?:{pattern.regex})")
            matches = [m for m in map(regex_.search, messages) if m is not None]
            if not matches:
                continue
            rows = pl.Series("row", range(len(matches)), dtype=pl.UInt32)
            want = extraction.matched(rows, matches).collect()
            claim = [(extraction, rows, matches)]
            got = _cast_claims(claim, _claims_schema(claim))
            compared += 1
            if got is not None:
                cast += 1
                assert got.equals(want, null_equal=True) and got.schema == want.schema, pattern.name
                by_table.setdefault(grammar.table, []).append((extraction, rows, matches, want))
    for claims in by_table.values():
        schema = _claims_schema([claim[:3] for claim in claims])
        got = _cast_claims([claim[:3] for claim in claims], schema) if schema is not None else None
        want = pl.concat([claim[3] for claim in claims], how="diagonal_relaxed")
        if got is not None:
            together += len(claims) > 1
            assert got.select(want.columns).equals(want, null_equal=True), claims[0][0].constants
            assert got.select(want.columns).schema == want.schema and set(got.columns) == set(want.columns)
    assert compared > 100 and cast > compared // 2 and together > 5
