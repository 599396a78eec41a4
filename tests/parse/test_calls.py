"""COLL calls as arrays: rows built on demand are the rows the tables hold, whichever piece they came from."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from nccl_logsift.parse import chunks
from nccl_logsift.parse.calls import KERNEL, NO_ID, Calls, Names, signatures
from nccl_logsift.pipeline import ParseOptions, TableStream
from nccl_logsift.simulate import Options, write


@pytest.fixture(scope="module")
def stream_batches(tmp_path_factory):
    """A log whose torn lines send some COLL calls to the general parser, parsed as ``logsift parse`` does."""
    path = tmp_path_factory.mktemp("calls") / "job.log"
    write(Options(scenario="rank-stall", ranks=8, nodes=2, ops=200, torn_rate=0.02), str(path))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunks, "FAST_ROWS", 500)
        batches = list(TableStream([str(path)], ParseOptions(chunk_bytes=1 << 15, workers=1)))
    assert len(batches) > 2
    return batches


def test_a_batch_mixes_fast_rows_and_general_parser_rows(stream_batches):
    kinds = {type(piece).__name__ for batch in stream_batches for piece in batch.calls.pieces}
    assert kinds == {"FastPiece", "FramePiece"}


def test_calls_are_in_line_order(stream_batches):
    for batch in stream_batches:
        seq = batch.calls["seq"]
        assert (np.diff(seq) > 0).all()
        assert batch.tables["collectives"]["line_no"].to_list() == (seq >> 8 & 0xFFFFFFFF).tolist()


def test_taken_calls_build_the_rows_of_the_table(stream_batches):
    rng = np.random.default_rng(7)
    for batch in stream_batches:
        calls, table = batch.calls, batch.tables["collectives"]
        keep = rng.random(len(calls)) < 0.3
        built = calls.take(keep).frame().drop("text")  # the COLL lines' text, which logsift parse keeps
        want = table.filter(pl.Series(keep)).select(built.columns)
        assert built.equals(want, null_equal=True)


def test_concatenated_calls_build_the_rows_of_both(stream_batches):
    first, second = stream_batches[0].calls, stream_batches[1].calls
    both = Calls.concat([first.take(np.arange(len(first)) % 2 == 0), second])
    built = both.frame().drop("text")
    want = pl.concat(
        [stream_batches[0].tables["collectives"].gather_every(2), stream_batches[1].tables["collectives"]]
    )
    assert built.equals(want.select(built.columns), null_equal=True)


def test_rows_come_out_in_line_order_whatever_the_order_of_the_pieces(stream_batches):
    first, second = stream_batches[0].calls, stream_batches[1].calls
    built = Calls.concat([second, first]).frame().drop("text")
    want = pl.concat([stream_batches[0].tables["collectives"], stream_batches[1].tables["collectives"]])
    assert built.equals(want.select(built.columns), null_equal=True)


def test_fast_rows_of_many_chunks_make_one_frame_with_the_rows_of_one_frame_each(stream_batches, monkeypatch):
    """Consecutive chunks' fast rows, from both scanning threads (each with its prefix fields), are joined
    into one frame: the rows and columns of a frame per chunk, put together."""
    from nccl_logsift.parse import calls as calls_module

    both = Calls.concat([batch.calls for batch in stream_batches])
    taken = both.take(np.random.default_rng(3).random(len(both)) < 0.4)
    runs = calls_module._runs(taken.pieces)
    joined = [run for run in runs if len({id(getattr(taken.pieces[p], "fields", None)) for p in run}) > 1]
    assert len(runs) < len(taken.pieces) and joined
    built = taken.frame()
    monkeypatch.setattr(calls_module, "_runs", lambda pieces: [[p] for p in range(len(pieces))])
    assert built.equals(taken.frame(), null_equal=True)


def test_calls_from_a_frame_give_the_same_loop_columns(stream_batches):
    batch = stream_batches[0]
    rebuilt = Calls.from_frame(batch.tables["collectives"], batch.calls.ops, batch.calls.schema)
    for name in ("seq", "process", "comm", "opcount", "nranks", "sig", "op"):
        assert (rebuilt[name] == batch.calls[name]).all(), name


def test_no_calls_have_the_loop_columns_types_of_some(stream_batches):
    # A batch without COLL lines still goes through the compiled loops, which are typed by their arrays.
    calls = stream_batches[0].calls
    empty = Calls.of([], calls.ops, calls.schema)
    assert len(empty) == 0
    assert {name: empty[name].dtype for name in KERNEL} == {name: calls[name].dtype for name in KERNEL}


def test_names_number_strings_in_order_of_first_sight():
    names = Names()
    assert names.ids(["AllReduce", None, "Send", "AllReduce"]).tolist() == [0, NO_ID, 1, 0]
    assert names.of(pl.Series(["Send", None, "Recv"])).tolist() == [1, NO_ID, 2]
    assert names.series("op", np.array([2, NO_ID, 0], dtype=np.int32)).to_list() == [
        "Recv",
        None,
        "AllReduce",
    ]


def test_a_signature_changes_with_every_field():
    base = [
        np.array([v], dtype=np.int32 if i == 0 else np.int64) for i, v in enumerate((1, 1024, 7, 0, -1))
    ]  # op ids are int32
    sig = signatures(*base)[0]
    assert signatures(*[b.copy() for b in base])[0] == sig
    for field in range(5):
        changed = [b.copy() for b in base]
        changed[field] += 1
        assert signatures(*changed)[0] != sig, field


def test_kept_text_keeps_a_chunk_only_while_enough_of_it_is_kept(tmp_path):
    """Pieces of an input that cannot be read again carry their lines: taking most rows keeps the chunk,
    taking less than half of its bytes copies their text out, and either way the rows' text is the line's."""
    from nccl_logsift.grammar import load_grammars
    from nccl_logsift.io.lines import LineReader
    from nccl_logsift.io.sources import expand_paths
    from nccl_logsift.parse.fastcoll import CollFastPath
    from nccl_logsift.parse.lineparser import LineParser

    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=300), str(path))
    chunk = next(iter(LineReader(expand_paths([str(path)])[0][0])))
    found = CollFastPath(LineParser(load_grammars()).parse_prefixes).read(chunk)
    piece = found.piece
    piece.lines = (chunk.view, chunk.starts[found.index], chunk.ends[found.index])
    texts = path.read_bytes().decode().split("\n")
    want = lambda rows: [texts[i] for i in found.index[rows]]
    # A live batch's chunk is up to 16 MiB, and the digest's window keeps about a sixth of it: a chunk kept
    # for that held 5 times the text kept (~500 MB pinned for ~60 MB of rows, at 1 GB of a 32-rank log).
    most, sixth, few = np.arange(len(piece) // 4, len(piece)), np.arange(len(piece) // 6), np.arange(3)
    kept = piece.take(most)
    assert kept.lines is not None and kept.text is None
    for rows in (sixth, few):
        copied = piece.take(rows)
        assert copied.lines is None and copied.text is not None and copied.text.to_list() == want(rows)
    assert kept.frame()["text"].to_list() == want(most)


def test_rows_taken_again_from_copied_text_do_not_keep_its_buffer(tmp_path):
    """The digest's window takes a few rows of a piece at every trim: their text is copied out of the text
    it was taken from, which would otherwise stay whole in memory behind them (polars gathers views)."""
    from nccl_logsift.grammar import load_grammars
    from nccl_logsift.io.lines import LineReader
    from nccl_logsift.io.sources import expand_paths
    from nccl_logsift.memory import _shares
    from nccl_logsift.parse.fastcoll import CollFastPath
    from nccl_logsift.parse.lineparser import LineParser

    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=6000, noise=False), str(path))
    chunk = next(iter(LineReader(expand_paths([str(path)])[0][0])))
    found = CollFastPath(LineParser(load_grammars()).parse_prefixes).read(chunk)
    piece = found.piece
    piece.lines = (chunk.view, chunk.starts[found.index], chunk.ends[found.index])
    copied = piece.take(np.arange(len(piece) * 2 // 5))
    assert copied.text is not None and copied.text.str.len_bytes().sum() > 1 << 20
    few = copied.take(np.arange(3))
    assert few.text.to_list() == copied.text.head(3).to_list()
    assert not _shares(few.text)


def test_fast_rows_of_many_files_make_one_frame_with_the_rows_of_one_frame_each(tmp_path, monkeypatch):
    """A directory of per-rank files: each file brings a new prefix, and a scanning thread's prefix fields
    grow in place (``PrefixFields``), so the pieces of every file a thread read share them; pieces of
    several files join into one frame, with each row's source, as a frame per piece gives them."""
    from nccl_logsift.parse import calls as calls_module

    job = tmp_path / "job"
    write(Options(scenario="healthy", ranks=8, nodes=2, ops=30, noise=False, layout="per-rank"), str(job))
    batches = list(TableStream([str(job)], ParseOptions(chunk_bytes=1 << 14, workers=1)))
    both = Calls.concat([batch.calls for batch in batches])
    fast = [piece for piece in both.pieces if type(piece).__name__ == "FastPiece"]
    assert len({piece.source_id for piece in fast}) == 8
    assert len({id(piece.fields) for piece in fast}) <= chunks.SCAN_THREADS  # one per thread, grown in place
    taken = both.take(np.random.default_rng(5).random(len(both)) < 0.5)
    runs = calls_module._runs(taken.pieces)
    assert any(len({taken.pieces[p].source_id for p in run}) > 1 for run in runs)
    built = taken.frame()
    assert built["source_id"].n_unique() == 8
    monkeypatch.setattr(calls_module, "_runs", lambda pieces: [[p] for p in range(len(pieces))])
    assert built.equals(taken.frame(), null_equal=True)
    want = pl.concat([batch.tables["collectives"] for batch in batches]).sort("source_id", "line_no")
    kept = pl.DataFrame({"source_id": built["source_id"], "line_no": built["line_no"]})
    assert built.drop("text").equals(
        want.join(kept, on=["source_id", "line_no"], how="semi").select(built.drop("text").columns),
        null_equal=True,
    )


def test_process_keys_tell_every_host_and_pid_apart_alike_for_few_rows_and_many(monkeypatch):
    """A few rows are hashed in Python and a larger frame through its distinct pairs in polars: both give
    each row its pair's key, the same in every run (a fixed value below), and tell a null host or pid from
    every value, the empty host among them."""
    from nccl_logsift.parse import calls as calls_module
    from nccl_logsift.parse.calls import process_keys

    pairs = pl.DataFrame(
        {"host": ["a", "b", None, "a", "", None, "a"], "pid": [1, 1, 1, None, 1, None, 12]},
        schema={"host": pl.String, "pid": pl.Int64},
    )
    few = process_keys(pairs)
    assert few.dtype == np.uint64 and len(set(few.tolist())) == pairs.height
    assert few[0] == calls_module._process_key("a", 1) == 8333252978470123185
    many = pl.concat([pairs] * 20)
    assert many.height > calls_module._FEW_PROCESS_ROWS
    assert process_keys(many).tolist() == few.tolist() * 20
    monkeypatch.setattr(calls_module, "_FEW_PROCESS_ROWS", 0)
    assert process_keys(pairs).tolist() == few.tolist()
    # No host or pid column: every row is the (null, null) process.
    assert process_keys(pl.DataFrame({"x": [1, 2]})).tolist() == [calls_module._process_key(None, None)] * 2


def test_prefix_fields_added_by_one_thread_are_read_whole_by_another():
    """A scanning thread adds a file's prefix rows (``PrefixFields.add``, a frame or tuples); they join the
    frame when it is read, in the order added, so a piece that indexes them finds them, while the thread
    goes on adding."""
    import threading

    from nccl_logsift.parse.calls import PrefixFields

    fields = PrefixFields(pl.DataFrame({"host": ["h0"], "pid": [0]}))
    done = threading.Event()

    def add() -> None:  # frames and tuples (a fast path's new prefixes), in turns of a few
        for n in range(1, 2001):
            if n // 3 % 2:
                fields.add([(f"h{n}", n)])
            else:
                fields.add(pl.DataFrame({"host": [f"h{n}"], "pid": [n]}))
        done.set()

    thread = threading.Thread(target=add)
    thread.start()
    while not done.is_set():
        frame = fields.frame
        assert frame["pid"].to_list() == list(range(frame.height))
    thread.join()
    assert fields.frame["pid"].to_list() == list(range(2001))
    assert fields.frame["host"].to_list() == [f"h{n}" for n in range(2001)]
    assert fields.frame.schema == {"host": pl.String, "pid": pl.Int64}
    assert fields.frame.n_chunks() == 1
