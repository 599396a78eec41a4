"""Failed processes from torchrun summaries, elastic agent lines, Slurm and shell reports (composed logs)."""

from __future__ import annotations

import polars as pl

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import Source
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.resolve.exits import OUTPUT, assemble_exits

SUMMARY = [
    "Traceback (most recent call last):",
    '  File "/opt/venv/bin/torchrun", line 8, in <module>',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train_lm.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2025-02-03_17:40:12",
    "  host      : gpu-a17.example.internal",
    "  rank      : 5 (local_rank: 1)",
    "  exitcode  : -6 (pid: 40112)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 40112",
    "[2]:",
    "  time      : 2025-02-03_17:40:13",
    "  host      : gpu-a17.example.internal",
    "  rank      : 6 (local_rank: 2)",
    "  exitcode  : 1 (pid: 40113)",
    "  error_file: /tmp/torchelastic_x1/attempt_0/2/error.json",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-02-03_17:40:09",
    "  host      : gpu-a17.example.internal",
    "  rank      : 4 (local_rank: 0)",
    "  exitcode  : -9 (pid: 40111)",
    "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 40111",
    "============================================================",
]


def parse(tmp_path, lines: list[str]) -> pl.DataFrame:
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    parser = LineParser(load_grammars())
    frames = [
        parser.parse(chunk.lines())["exits"]
        for chunk in LineReader(Source(0, str(path), path.stat().st_size))
    ]
    return pl.concat(frames)


def test_summary_block_becomes_one_row_per_failed_process(tmp_path):
    exits = parse(tmp_path, SUMMARY)
    assert exits.filter(pl.col("event") == "entry")["entry_index"].to_list() == [1, 2, 0]

    got = assemble_exits(exits)
    assert list(got.schema.items()) == list(OUTPUT.items())
    assert got["origin"].unique().to_list() == ["torchrun_summary"]
    rows = {r["rank"]: r for r in got.iter_rows(named=True)}
    assert sorted(rows) == [4, 5, 6]

    root = rows[4]
    assert root["root_cause"] is True
    assert (root["local_rank"], root["exit_code"], root["pid"], root["signal"]) == (0, -9, 40111, "SIGKILL")
    assert root["time"] == "2025-02-03_17:40:09"
    assert root["host"] == "gpu-a17.example.internal"
    assert root["entry_index"] == 0
    assert root["line_no"] == SUMMARY.index("[0]:") + 1
    assert root["script"] == "train_lm.py"

    assert rows[5]["root_cause"] is False and rows[5]["signal"] == "SIGABRT" and rows[5]["pid"] == 40112
    assert rows[6]["exit_code"] == 1 and rows[6]["signal"] is None
    assert rows[6]["error_file"] == "/tmp/torchelastic_x1/attempt_0/2/error.json"
    assert rows[6]["reason"].startswith("To enable traceback")


def test_summary_without_entry_markers_and_with_no_other_failures(tmp_path):
    # Some launchers take "[0]:" for their own prefix: a "time" line then starts the entry.
    lines = [
        "ChildFailedError: ",
        "pretrain.py FAILED",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "Root Cause (first observed failure):",
        "  time      : 2025-02-04_08:00:01",
        "  host      : node-2",
        "  rank      : 3 (local_rank: 3)",
        "  exitcode  : -11 (pid: 7001)",
        "  error_file: <N/A>",
        "  traceback : Signal 11 (SIGSEGV) received by PID 7001",
    ]
    got = assemble_exits(parse(tmp_path, lines))
    assert got.height == 1
    row = got.row(0, named=True)
    assert (row["rank"], row["signal"], row["root_cause"], row["entry_index"]) == (3, "SIGSEGV", True, None)


def test_interleaved_summaries_are_read_per_srun_task(tmp_path):
    # Two agents (srun tasks 0 and 1) print their summaries at the same time.
    a = [f"0: {line}" for line in SUMMARY[3:]]
    b = [
        f"1: {line.replace('gpu-a17', 'gpu-a18').replace('rank      : ', 'rank      : 1')}"
        for line in SUMMARY[3:]
    ]
    lines = [x for pair in zip(a, b) for x in pair]
    got = assemble_exits(parse(tmp_path, lines))
    assert got.height == 6
    by_host = got.group_by("host").agg(pl.col("rank").sort(), pl.col("root_cause").sum()).sort("host")
    assert by_host["rank"].to_list() == [[4, 5, 6], [14, 15, 16]]
    assert by_host["root_cause"].to_list() == [1, 1]


def test_elastic_slurm_and_shell_reports(tmp_path):
    lines = [
        "E0203 17:40:14.220000 139771 torch/distributed/elastic/multiprocessing/api.py:874] "
        "failed (exitcode: -6) local_rank: 1 (pid: 40112) of binary: /opt/venv/bin/python3",
        "W0203 17:40:14.100000 139771 torch/distributed/elastic/multiprocessing/api.py:858] "
        "Sending process 40113 closing signal SIGTERM",
        "srun: error: gpu-b07: tasks 4-6,9: Terminated",
        "srun: error: gpu-b08: task 12: Out Of Memory",
        "srun: error: gpu-b08: task 13: Exited with exit code 1",
        "3: /opt/jobs/run.sh: line 41: 918301 Aborted                 (core dumped) python -u train.py",
        "gpu-c11.hsn.example.org: rank 6 died from signal 6 and dumped core",
    ]
    got = assemble_exits(parse(tmp_path, lines))
    assert got["origin"].value_counts().sort("origin").rows() == [
        ("elastic", 1),
        ("pals", 1),
        ("shell", 1),
        ("slurm", 6),
    ]
    elastic = got.filter(pl.col("origin") == "elastic").row(0, named=True)
    assert (elastic["local_rank"], elastic["pid"], elastic["exit_code"], elastic["signal"]) == (
        1,
        40112,
        -6,
        "SIGABRT",
    )
    assert elastic["root_cause"] is True and elastic["time"] == "0203 17:40:14.220000"

    slurm = got.filter(pl.col("origin") == "slurm").sort("rank")
    assert slurm["rank"].to_list() == [4, 5, 6, 9, 12, 13]
    assert slurm["host"].to_list() == ["gpu-b07"] * 4 + ["gpu-b08"] * 2
    assert slurm["signal"].to_list() == ["SIGTERM"] * 4 + ["SIGKILL", None]
    assert slurm["exit_code"].to_list() == [None] * 5 + [1]
    assert slurm.filter(pl.col("rank") == 12)["reason"].item() == "Out Of Memory"

    shell = got.filter(pl.col("origin") == "shell").row(0, named=True)
    assert (shell["rank"], shell["pid"], shell["signal"]) == (3, 918301, "SIGABRT")
    assert shell["reason"] == "Aborted (core dumped)"
    pals = got.filter(pl.col("origin") == "pals").row(0, named=True)
    assert (pals["host"], pals["rank"], pals["signal"]) == ("gpu-c11.hsn.example.org", 6, "SIGABRT")


def test_empty_and_narrow_inputs():
    assert assemble_exits(pl.DataFrame(schema={"source_id": pl.UInt16, "line_no": pl.UInt32})).is_empty()
    narrow = pl.DataFrame(
        {
            "source_id": [0],
            "line_no": [1],
            "event": ["slurm_task_exit"],
            "exit_host": ["n1"],
            "exit_tasks": ["2"],
            "exit_reason": ["Killed"],
        }
    )
    got = assemble_exits(narrow)
    assert got.select("rank", "signal", "origin").rows() == [(2, "SIGKILL", "slurm")]
