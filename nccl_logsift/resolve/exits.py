"""Failed processes, one row each, from the per-line rows of the ``exits`` table.

Four kinds of evidence say that a process ended badly (``origin``):

* ``torchrun_summary``: torchrun's ChildFailedError block. Its lines arrive as separate rows (grammar
  ``text/torchrun_summary.toml``): an entry is an ``[i]:`` marker (or, if a launcher ate the marker, a
  ``time`` line not preceded by one) followed by time/host/rank/exitcode/error_file/traceback lines. The
  entries after ``Root Cause (first observed failure):`` are the root cause, those after ``Failures:`` the
  others. Rows are numbered into entries with a cumulative sum over the entry starts, the section is
  forward-filled from the section headers, and each entry's fields are gathered with one group_by.
* ``elastic``: the agent's ``failed (exitcode: N) local_rank: L (pid: P) of binary: ...`` line, which
  reports the first failure the agent observed (``root_cause`` is true for it).
* ``slurm``: ``srun: error: <host>: task(s) <list>: <reason>``; a task list such as ``4-6,9`` becomes one
  row per task, the task being the rank.
* ``shell``, ``pals``, ``mpirun``: bash job-control lines (``line 68: 2523565 Aborted (core dumped) ...``),
  Cray PALS ``rank N died from signal S`` and Open MPI ``mpirun noticed that process rank N ...``; and
  Open MPI's (or PRRTE's) non-zero status block, whose ``Process name: [[jobid,1],N]`` and ``Exit code:``
  lines name the first process that failed.
* ``deepspeed``: DeepSpeed's launcher, ``[launch.py:N:sigkill_handler] [<command>] exits with return code =
  N``: the node's first failed worker, whose command's ``--local_rank=L`` names it.

The same process can be reported by several origins; rows are not merged across origins.
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.communicators import MAX_RANKS

ORIGINS = ("torchrun_summary", "elastic", "slurm", "shell", "pals", "mpirun", "deepspeed")

# Linux signal numbers (x86-64 and arm64 agree on these).
SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
    24: "SIGXCPU",
    25: "SIGXFSZ",
}
# What srun and bash print for a task or job that died from a signal (strsignal() wording).
REASON_SIGNALS = {
    "Hangup": "SIGHUP",
    "Interrupt": "SIGINT",
    "Quit": "SIGQUIT",
    "Illegal instruction": "SIGILL",
    "Trace/breakpoint trap": "SIGTRAP",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Killed": "SIGKILL",
    "User defined signal 1": "SIGUSR1",
    "Segmentation fault": "SIGSEGV",
    "User defined signal 2": "SIGUSR2",
    "Broken pipe": "SIGPIPE",
    "Alarm clock": "SIGALRM",
    "Terminated": "SIGTERM",
    "CPU time limit exceeded": "SIGXCPU",
    "File size limit exceeded": "SIGXFSZ",
    # Slurm reports a task the cgroup OOM killer took as "Out Of Memory"; the signal was SIGKILL.
    "Out Of Memory": "SIGKILL",
}

OUTPUT = {
    "source_id": pl.UInt16(),
    "line_no": pl.UInt32(),
    "time": pl.String(),
    "host": pl.String(),
    "rank": pl.Int64(),
    "local_rank": pl.Int64(),
    "exit_code": pl.Int64(),
    "pid": pl.Int64(),
    "signal": pl.String(),
    "root_cause": pl.Boolean(),
    "error_file": pl.String(),
    "origin": pl.String(),
    "reason": pl.String(),
    "script": pl.String(),
    "entry_index": pl.Int64(),
}

# Columns read from the exits table (added as nulls when a caller passes a narrower frame).
INPUT = {
    "source_id": pl.UInt16(),
    "line_no": pl.UInt32(),
    "part": pl.UInt8(),
    "host": pl.String(),
    "ts": pl.String(),
    "task": pl.Int64(),
    "mpi_rank": pl.Int64(),
    "local_rank": pl.Int64(),
    "torch_rank": pl.Int64(),
    "event": pl.String(),
    "exit_time": pl.String(),
    "exit_host": pl.String(),
    "exit_rank": pl.Int64(),
    "exit_local_rank": pl.Int64(),
    "exit_code": pl.Int64(),
    "exit_pid": pl.Int64(),
    "signal_num": pl.Int64(),
    "signal_name": pl.String(),
    "error_file": pl.String(),
    "entry_index": pl.Int64(),
    "script": pl.String(),
    "exit_tasks": pl.String(),
    "exit_reason": pl.String(),
    "detail": pl.String(),
}

SUMMARY_EVENTS = (
    "summary_start",
    "summary_rule",
    "summary_title",
    "section_failures",
    "section_root_cause",
    "entry",
    "no_other_failures",
    "field_time",
    "field_host",
    "field_rank",
    "field_exitcode",
    "field_error_file",
    "field_traceback",
)
ENTRY_EVENTS = (
    "entry",
    "field_time",
    "field_host",
    "field_rank",
    "field_exitcode",
    "field_error_file",
    "field_traceback",
)
# A summary is read per output stream: the srun task or MPI rank tag separates interleaved agents.
STREAM = ["source_id", "task", "mpi_rank"]
ORDER = "__order"


def assemble_exits(exits: pl.DataFrame) -> pl.DataFrame:
    """One row per failed process reported in ``exits`` (the parser's per-line ``exits`` table)."""
    rows = _conform(exits).with_columns(
        (pl.col("line_no").cast(pl.Int64) * 256 + pl.col("part").cast(pl.Int64).fill_null(0)).alias(ORDER)
    )
    parts = [
        _summary(rows.filter(pl.col("event").is_in(SUMMARY_EVENTS))),
        _elastic(rows.filter(pl.col("event") == "elastic_failed")),
        _slurm(rows.filter(pl.col("event") == "slurm_task_exit")),
        _single(rows.filter(pl.col("event") == "shell_job_exit"), "shell"),
        _single(rows.filter(pl.col("event") == "pals_exit"), "pals"),
        _single(rows.filter(pl.col("event") == "mpirun_exit"), "mpirun"),
        _mpirun_block(rows.filter(pl.col("event").is_in(("mpi_process_name", "mpi_exit_code")))),
        _deepspeed(rows.filter(pl.col("event") == "deepspeed_exit")),
    ]
    out = pl.concat([p.select([pl.col(c).cast(t) for c, t in OUTPUT.items()]) for p in parts], how="vertical")
    return out.sort("source_id", "line_no", "origin", "rank", nulls_last=True)


# ---------------------------------------------------------------------------------------------- origins
def _summary(rows: pl.DataFrame) -> pl.DataFrame:
    event = pl.col("event")
    prev_event = event.shift(1).over(STREAM, order_by=ORDER)
    entry_start = (event == "entry") | ((event == "field_time") & (prev_event.fill_null("") != "entry"))
    section = (
        pl.when(event == "section_root_cause")
        .then(pl.lit("root"))
        .when(event == "section_failures")
        .then(pl.lit("other"))
        .when(event == "summary_title")
        .then(pl.lit("none"))  # a new block: no section until its header
    )
    numbered = rows.with_columns(
        entry_id=entry_start.cast(pl.Int64).cum_sum().over(STREAM, order_by=ORDER),
        section=section.forward_fill().over(STREAM, order_by=ORDER),
        script=pl.col("script").forward_fill().over(STREAM, order_by=ORDER),
    )
    fields = numbered.filter((pl.col("entry_id") > 0) & event.is_in(ENTRY_EVENTS))
    first = lambda name: pl.col(name).drop_nulls().first()
    entries = (
        fields.sort(ORDER)
        .group_by([*STREAM, "entry_id"], maintain_order=True)
        .agg(
            line_no=pl.col("line_no").min(),
            time=first("exit_time"),
            host=first("exit_host"),
            rank=first("exit_rank"),
            local_rank=first("exit_local_rank"),
            exit_code=first("exit_code"),
            pid=pl.coalesce(pl.col("exit_pid").filter(event == "field_exitcode").first(), first("exit_pid")),
            signal_name=first("signal_name"),
            error_file=first("error_file"),
            reason=pl.col("detail").filter(event == "field_traceback").drop_nulls().first(),
            script=first("script"),
            entry_index=first("entry_index"),
            section=pl.col("section").first(),
        )
    )
    entries = entries.filter(pl.col("exit_code").is_not_null() | pl.col("rank").is_not_null())
    return entries.with_columns(
        signal=pl.when(pl.col("signal_name").is_not_null() & (pl.col("signal_name") != "<N/A>"))
        .then(pl.col("signal_name"))
        .otherwise(_signal_of_exit_code(pl.col("exit_code"))),
        root_cause=(pl.col("section") == "root").fill_null(False),
        origin=pl.lit("torchrun_summary"),
    )


def _elastic(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.with_columns(
        time=pl.col("ts"),
        rank=pl.lit(None, dtype=pl.Int64),
        local_rank=pl.col("exit_local_rank"),
        pid=pl.col("exit_pid"),
        signal=_signal_of_exit_code(pl.col("exit_code")),
        root_cause=pl.lit(True),  # the agent logs the failure with the smallest timestamp
        origin=pl.lit("elastic"),
        reason=pl.col("detail"),
        script=pl.lit(None, dtype=pl.String),
    )


def _slurm(rows: pl.DataFrame) -> pl.DataFrame:
    item = pl.col("task_item")
    # A task number too large for 64 bits is null, as the parser reads numbers (parse/kinds.py); a range of
    # more than MAX_RANKS tasks is damage, and only its first task is taken.
    start = item.str.extract(r"^(\d+)", 1).cast(pl.Int64, strict=False)
    end = item.str.extract(r"-(\d+)$", 1).cast(pl.Int64, strict=False)
    end = pl.when(end - start < MAX_RANKS).then(end).otherwise(start)
    per_task = (
        rows.with_columns(task_item=pl.col("exit_tasks").str.split(","))
        .explode("task_item")
        .with_columns(rank=pl.int_ranges(start, end + 1))
        .explode("rank")
    )
    return per_task.with_columns(
        time=pl.lit(None, dtype=pl.String),
        host=pl.col("exit_host"),
        local_rank=pl.lit(None, dtype=pl.Int64),
        pid=pl.lit(None, dtype=pl.Int64),
        signal=_signal_of_reason(pl.col("exit_reason")),
        root_cause=pl.lit(False),
        origin=pl.lit("slurm"),
        reason=_squeeze(pl.col("exit_reason")),
        script=pl.lit(None, dtype=pl.String),
    )


def _mpirun_block(rows: pl.DataFrame) -> pl.DataFrame:
    """Open MPI's "detected that one or more processes exited with non-zero status" block: the first failed
    process is the ``Process name: [[jobid,1],rank]`` line and the ``Exit code:`` line right after it."""
    rows = rows.sort(ORDER).with_columns(
        next_event=pl.col("event").shift(-1).over(STREAM, order_by=ORDER),
        next_code=pl.col("exit_code").shift(-1).over(STREAM, order_by=ORDER),
    )
    named = rows.filter((pl.col("event") == "mpi_process_name") & (pl.col("next_event") == "mpi_exit_code"))
    return named.with_columns(
        time=pl.lit(None, dtype=pl.String),
        host=pl.col("host"),
        rank=pl.col("exit_rank"),
        exit_code=pl.col("next_code"),
        pid=pl.lit(None, dtype=pl.Int64),
        signal=pl.lit(None, dtype=pl.String),
        root_cause=pl.lit(True),  # "The first process to do so was:"
        origin=pl.lit("mpirun"),
        reason=pl.format("exited with non-zero status {}", pl.col("next_code")),
        script=pl.lit(None, dtype=pl.String),
    )


LOCAL_RANK_ARG = r"'--local_rank=(\d+)'"  # how DeepSpeed's launcher passes a worker its local rank


def _deepspeed(rows: pl.DataFrame) -> pl.DataFrame:
    """DeepSpeed's sigkill_handler: the node's first failed worker, named by its command's --local_rank."""
    code = pl.col("exit_code")
    return rows.with_columns(
        time=pl.lit(None, dtype=pl.String),
        host=pl.coalesce(pl.col("exit_host"), pl.col("host")),
        rank=pl.coalesce(pl.col("exit_rank"), pl.col("task"), pl.col("torch_rank")),
        local_rank=pl.coalesce("exit_local_rank", pl.col("script").str.extract(LOCAL_RANK_ARG, 1).cast(int)),
        pid=pl.col("exit_pid"),
        signal=_signal_of_exit_code(code),
        root_cause=pl.lit(True),
        origin=pl.lit("deepspeed"),
        reason=pl.format("exits with return code = {}", code),
        script=pl.col("script").str.extract(r"'([^']+\.py)'", 1),
    )


def _single(rows: pl.DataFrame, origin: str) -> pl.DataFrame:
    """One process per line: shell job-control, PALS and mpirun exit reports."""
    by_number = pl.col("signal_num").replace_strict(SIGNAL_NAMES, default=None, return_dtype=pl.String)
    return rows.with_columns(
        time=pl.lit(None, dtype=pl.String),
        host=pl.coalesce(pl.col("exit_host"), pl.col("host")),
        # a shell line carries no rank of its own: the srun task (or the PyTorch rank prefix) labels it
        rank=pl.coalesce(pl.col("exit_rank"), pl.col("task"), pl.col("torch_rank")),
        pid=pl.col("exit_pid"),
        signal=pl.coalesce(by_number, _signal_of_reason(pl.col("exit_reason"))),
        root_cause=pl.lit(False),
        origin=pl.lit(origin),
        reason=_squeeze(pl.coalesce(pl.col("exit_reason"), pl.col("detail"))),
        script=pl.lit(None, dtype=pl.String),
    )


# ---------------------------------------------------------------------------------------------- helpers
def _signal_of_exit_code(code: pl.Expr) -> pl.Expr:
    """torchrun's negative exit codes are the signal that killed the worker (-6: SIGABRT)."""
    return pl.when(code < 0).then((-code).replace_strict(SIGNAL_NAMES, default=None, return_dtype=pl.String))


def _signal_of_reason(reason: pl.Expr) -> pl.Expr:
    plain = reason.str.replace(r"\s*\(core dumped\)\s*$", "").str.strip_chars()
    return plain.replace_strict(REASON_SIGNALS, default=None, return_dtype=pl.String)


def _squeeze(text: pl.Expr) -> pl.Expr:
    """Bash pads the job-control reason to a column ("Aborted                 (core dumped)")."""
    return text.str.replace_all(r"\s+", " ").str.strip_chars()


def _conform(exits: pl.DataFrame) -> pl.DataFrame:
    present = set(exits.columns)
    return exits.select(
        [
            (pl.col(name) if name in present else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in INPUT.items()
        ]
    )
