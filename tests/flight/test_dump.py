"""Reading one Flight Recorder dump: by content, safely, in every format version from 2.0 to 2.10."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from nccl_logsift.flight import dump as fr_dump
from nccl_logsift.flight.table import tables


def _entry(seq: int, name: str = "nccl:all_reduce", **more) -> dict:
    return {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": name,
        "time_created_ns": 1_000 * seq,
        "input_sizes": [[4096]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4096]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": 2_000 * seq,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
        "frames": [
            {"name": "all_reduce", "filename": "/x/torch/distributed/distributed_c10d.py", "line": 1},
            {"name": "main", "filename": "/workspace/train.py", "line": 64},
        ],
        **more,
    }


def _dump(version: str = "2.10", entries=None, **top) -> dict:
    base = {
        "version": version,
        "comm_lib_version": "2.28.9",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": 2,
                "last_started_collective": -1,
                "last_completed_collective": 2,
            }
        },
        "entries": entries if entries is not None else [_entry(1), _entry(2)],
    }
    base.update(top)
    return base


class _WritesAFile:
    """A pickle payload whose reduce would run a shell command that creates a file."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


class _CallsOpen:
    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.mark.parametrize("payload", [_WritesAFile, _CallsOpen], ids=["os.system", "builtins.open"])
def test_dump_load_refuses_a_malicious_pickle_and_runs_nothing(tmp_path, payload):
    target = tmp_path / "pwned"
    evil = tmp_path / "nccl_trace_rank_0"
    evil.write_bytes(pickle.dumps(_dump(entries=[payload(str(target))]), protocol=4))
    with pytest.raises(fr_dump.DumpError, match="refused to load"):
        fr_dump.load(evil)
    assert not target.exists()


def test_dump_malicious_pickle_among_inputs_is_reported_not_run(tmp_path, run_cli):
    from nccl_logsift.simulate import Options, write

    target = tmp_path / "pwned"
    write(Options(scenario="rank-stall", ranks=4, seed=1), str(tmp_path / "job.log"))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(_WritesAFile(str(target)), protocol=2))
    result = run_cli("analyze", str(tmp_path), "--format", "json")
    report = json.loads(result.output)
    assert not target.exists()
    (bad,) = [f for f in report["dumps"]["files"] if f["problem"]]
    assert bad["rank"] == 1 and "refused to load posix.system" in bad["problem"]


def test_dump_sniff_goes_by_content_not_name(tmp_path):
    pickled = tmp_path / "whatever.log"
    pickled.write_bytes(pickle.dumps(_dump(), protocol=4))
    as_json = tmp_path / "notes.txt"
    as_json.write_text(json.dumps(_dump()))
    log = tmp_path / "nccl_trace_rank_3"
    log.write_text("host:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    assert fr_dump.sniff_path(pickled) == "pickle"
    assert fr_dump.sniff_path(as_json) == "json"
    assert fr_dump.sniff_path(log) is None


def test_dump_json_form_reads_like_the_pickle(tmp_path):
    as_json = tmp_path / "nccl_trace_rank_5.json"
    as_json.write_text(json.dumps(_dump()))
    pickled = tmp_path / "nccl_trace_rank_5"
    pickled.write_bytes(pickle.dumps(_dump(), protocol=4))
    a, b = fr_dump.load(as_json), fr_dump.load(pickled)
    assert (a.format, b.format) == ("json", "pickle")
    assert a.rank == b.rank == 5
    ta, tb = tables([a], [])["flight_recorder"], tables([b], [])["flight_recorder"]
    assert ta.drop("dump_id").to_dicts() == tb.drop("dump_id").to_dicts()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.4", "2.7", "2.9", "2.10"])
def test_dump_versions_2_0_to_2_10_are_read(tmp_path, version):
    before_2_10 = version != "2.10"
    entry = {k: v for k, v in _entry(7).items() if not (before_2_10 and k in ("input_dtypes", "is_p2p"))}
    raw = _dump(version, [entry])
    if before_2_10:  # the library's version was nccl_version until 2.10
        raw["nccl_version"] = raw.pop("comm_lib_version")
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(raw, protocol=2))
    loaded = fr_dump.load(path)
    assert loaded.version == version and loaded.note is None
    assert loaded.comm_lib_version == "2.28.9"
    row = tables([loaded], [])["flight_recorder"].row(0, named=True)
    assert row["collective_seq_id"] == 7 and row["op"] == "all_reduce"
    assert row["input_dtypes"] == (None if before_2_10 else ["Float"])


def test_dump_format_1_x_reads_its_seq_id_with_a_note(tmp_path):
    entry = {k: v for k, v in _entry(3).items() if k not in ("collective_seq_id", "p2p_seq_id")}
    entry["seq_id"] = 3
    raw = {"version": "1.4", "pg_config": {}, "entries": [entry]}
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(raw, protocol=2))
    loaded = fr_dump.load(path)
    assert "predates 2.0" in loaded.note
    assert tables([loaded], [])["flight_recorder"]["collective_seq_id"].to_list() == [3]


def test_dump_newer_minor_is_read_with_a_note_and_other_majors_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(_dump("2.11"), protocol=4))
    assert "newer than 2.10" in fr_dump.load(path).note
    path.write_bytes(pickle.dumps(_dump("3.0"), protocol=4))
    with pytest.raises(fr_dump.DumpError, match="not one this reader knows"):
        fr_dump.load(path)


def test_dump_truncated_pickle_is_a_dump_error(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(_dump(), protocol=4)[:40])
    with pytest.raises(fr_dump.DumpError, match="not a readable Flight Recorder pickle"):
        fr_dump.load(path)


@pytest.mark.parametrize(
    "name, op",
    [
        ("nccl:all_reduce", "all_reduce"),
        ("ncclx:all_reduce", "all_reduce"),
        ("nccl2:_all_gather_base", "_all_gather_base"),
        ("gloo:broadcast", "broadcast"),
        ("nccl:coalesced", "coalesced"),
        ("send", "send"),
    ],
)
def test_dump_profiling_names_lose_their_backend_prefix(name, op):
    assert fr_dump.normalise_op(name) == op


def test_dump_rank_comes_from_the_name_unless_given():
    assert fr_dump.rank_from_name("/x/nccl_trace_rank_container-node02_5") == 5
    assert fr_dump.rank_from_name("/x/comm_lib_trace_rank_12.json") == 12
    assert fr_dump.rank_from_name("/x/trace") is None


def test_dump_pg_status_is_keyed_to_the_group_guid_through_the_entries(tmp_path):
    # Rank 2's second group has GUID "2" but local id 1 (real 2.11 dump layout).
    entries = [_entry(1), _entry(1, pg_id=1, process_group=("2", "undefined"))]
    raw = _dump(
        entries=entries,
        pg_config={
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            "2": {"name": "2", "desc": "undefined", "ranks": "[2, 3]"},
        },
        pg_status={
            "0": {
                "last_enqueued_collective": 1,
                "last_started_collective": -1,
                "last_completed_collective": 1,
            },
            "1": {
                "last_enqueued_collective": 1,
                "last_started_collective": -1,
                "last_completed_collective": 0,
            },
        },
    )
    path = tmp_path / "nccl_trace_rank_2"
    path.write_bytes(pickle.dumps(raw, protocol=4))
    status = tables([fr_dump.load(path)], [])["flight_pg_status"].sort("pg_id")
    assert status["pg_name"].to_list() == ["0", "2"]
    assert status["pg_ranks"].to_list() == [[0, 1, 2, 3], [2, 3]]
    assert status["last_completed_collective"].to_list() == [1, 0]
