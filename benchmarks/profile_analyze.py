"""Profile ``logsift analyze LOG`` with py-spy and print where the time goes as Markdown tables.

    python benchmarks/profile_analyze.py benchmarks/.cache/healthy-r32-n4-200MB.log

The "Profiles" section of benchmarks/README.md quotes this output, before and after each optimisation, so
that both come from the same sampler, rate and aggregation. py-spy sees Python frames only, and a rewrite
changes logsift's functions, not polars'; so each sample is charged to the innermost logsift function on
the stack ("own" time: its Python code and the polars, pyarrow, regex calls it makes itself), and "total"
adds the logsift functions it calls. ``--idle`` keeps the samples where the main thread waits for polars'
worker threads with the GIL released; without it a third of the run, and most of the polars work, is lost.
Samples of Python helper threads (stacks that start in ``threading``: the threads that wait for the parsing
workers' answers) are left out, so the tables describe the main thread of the analyze process; the worker
processes are not sampled (their CPU time is in benchmarks/run.py's "CPU s").

``--cprofile`` (where py-spy is not installed) runs the same command under cProfile instead, the main
thread only, and prints one table by total (cumulative) time; "own" is then the time in the function's own
Python lines (cProfile keeps caller-callee pairs, not stacks, so what polars does for a function counts in
its total only). cProfile adds its overhead to every Python call: compare its tables with each other, not
with py-spy's.
"""

from __future__ import annotations

import argparse
import pstats
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTUP = "(start-up: interpreter and imports before logsift runs)"
HELPER_THREAD = "Thread._bootstrap (threading.py)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log", help="The log to analyze.")
    parser.add_argument("--top", type=int, default=12, help="Rows per table.")
    parser.add_argument("--rate", type=int, default=100, help="Samples per second.")
    parser.add_argument("--cprofile", action="store_true", help="Profile with cProfile, not py-spy.")
    args = parser.parse_args(argv)
    if args.cprofile:
        with tempfile.NamedTemporaryFile(suffix=".prof") as raw:
            record_cprofile(args.log, raw.name)
            stats = pstats.Stats(raw.name)
            self_time, total_time = aggregate_cprofile(stats)
        seconds = stats.total_tt  # type: ignore[attr-defined]
        print(f"{seconds:.2f} s of `logsift analyze {Path(args.log).name}` under cProfile (main thread)\n")
        frames = [f for f, _ in total_time.most_common(args.top)]
        print(_markdown("By total time (own: its Python lines only)", frames, self_time, total_time, seconds))
        return
    with tempfile.NamedTemporaryFile(suffix=".txt") as raw:
        record(args.log, raw.name, args.rate)
        own_time, total_time = aggregate(Path(raw.name).read_text().splitlines())
    samples = sum(own_time.values())
    print(f"{samples} samples at {args.rate}/s of `logsift analyze {Path(args.log).name}`\n")
    print(
        _markdown(
            "By own time", [f for f, _ in own_time.most_common(args.top)], own_time, total_time, samples
        )
    )
    print(
        _markdown(
            "By total time", [f for f, _ in total_time.most_common(args.top)], own_time, total_time, samples
        )
    )


def record(log: str, output: str, rate: int) -> None:
    """Sample a fresh ``analyze`` of ``log`` into py-spy's raw (collapsed stacks) format, without line numbers
    so that one function is one row."""
    command = [sys.executable, "-m", "nccl_logsift", "analyze", log, "--format", "json", "-o", "/dev/null"]
    subprocess.run(
        [
            "py-spy",
            "record",
            "--idle",
            "--format",
            "raw",
            "--nolineno",
            "--rate",
            str(rate),
            "-o",
            output,
            "--",
            *command,
        ],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


# The CLI leaves through os._exit after its exit handlers: the profile is written by one.
_CPROFILED = """
import atexit, cProfile, sys
profile = cProfile.Profile()
output = sys.argv[1]
atexit.register(lambda: (profile.disable(), profile.dump_stats(output)))
profile.enable()
from nccl_logsift.cli import main
sys.argv = ["logsift", "analyze", sys.argv[2], "--format", "json", "-o", "/dev/null"]
main()
"""


def record_cprofile(log: str, output: str) -> None:
    """Run a fresh ``analyze`` of ``log`` under cProfile, its statistics written to ``output``."""
    subprocess.run([sys.executable, "-c", _CPROFILED, output, log], check=False, cwd=ROOT)


def aggregate_cprofile(stats: pstats.Stats) -> tuple[Counter, Counter]:
    """Self and total seconds per logsift function from cProfile's statistics: self is the time in its own
    Python lines (``tottime``), total its cumulative time, calls of other modules included. cProfile keeps
    caller-callee pairs, not stacks, so the time polars spends for a function is in its total only."""
    table = stats.stats  # type: ignore[attr-defined]
    self_time: Counter = Counter()
    total_time: Counter = Counter()
    for (path, _, function), (_, _, own, cumulative, _) in table.items():
        at = path.rfind("nccl_logsift/")
        if at >= 0:
            label = f"{function} ({path[at:]})"
            self_time[label] += own
            total_time[label] += cumulative
    return self_time, total_time


def aggregate(lines: list[str]) -> tuple[Counter, Counter]:
    """Own and total samples per logsift function from collapsed stacks (``outer;...;inner COUNT``); a
    recursive function counts once per stack in its total."""
    own_time: Counter = Counter()
    total_time: Counter = Counter()
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if stack.startswith(HELPER_THREAD):
            # a reader thread waiting on a pipe (parsing workers' answers, live stdin): not the run's work
            continue
        ours = [frame for frame in stack.split(";") if "(nccl_logsift/" in frame] or [STARTUP]
        own_time[ours[-1]] += int(count)
        total_time.update(dict.fromkeys(set(ours), int(count)))
    return own_time, total_time


def _markdown(title: str, frames: list[str], own_time: Counter, total_time: Counter, samples: int) -> str:
    """A table of ``frames``, each with its own and total share of the samples."""
    rows = [f"**{title}**\n", "| function | own | total |", "|---|---:|---:|"]
    for frame in frames:
        rows.append(f"| `{frame}` | {own_time[frame] / samples:.1%} | {total_time[frame] / samples:.1%} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
