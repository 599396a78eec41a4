"""Time logsift against the naive baseline and ripgrep on simulated logs, and on captured jobs extended to
the size (benchmarks/extend.py): one command, one table, one JSON.

    python benchmarks/run.py                      the full run: 100MB,1GB,2GB x every case, then 10 GB piped
    python benchmarks/run.py --quick              100 MB only, nothing piped: a smoke run
    python benchmarks/run.py --sizes 200MB --cases coll32 --tools analyze,naive

Every measurement is a fresh subprocess; its peak RSS is the ru_maxrss that ``os.wait4`` reports for it.
MB/s is decimal megabytes of log text (the decompressed size for .zst) per wall-clock second, start-up
included. See benchmarks/README.md for what each case shows and for the targets.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import extend
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOGSIFT = [
    sys.executable,
    "-m",
    "nccl_logsift",
]  # the checkout this script sits in, not whatever is installed
TOOLS = ("analyze", "parse", "naive", "rg")
AGAINST: dict[str, Path] = {}  # "analyze@LABEL" -> the other checkout it runs from (--against)
FULL_SIZES = "100MB,1GB,2GB"
FULL_PIPE_SIZE = "10GB"
console = Console(stderr=True, highlight=False)


@dataclass(frozen=True)
class Case:
    """A simulated COLL-heavy job: a healthy run whose steady-state training steps fill the size asked.
    ``shape`` is more ``logsift simulate`` options (and ``tag`` names them in the cached file's name);
    with ``--layout per-rank`` the log is a directory of one file per rank, analyzed as a directory."""

    name: str
    ranks: int
    nodes: int
    zstd: bool = False
    shape: tuple[str, ...] = ()
    tag: str = ""
    # A captured job's log (a file, or a directory of per-process files) that benchmarks/extend.py repeats
    # to the size, instead of a simulated one.
    template: str = ""

    @property
    def per_rank(self) -> bool:
        if self.template:
            return (ROOT / self.template).is_dir()
        return "per-rank" in self.shape

    def simulate_argv(self, size: str, output: str) -> list[str]:
        return [
            *LOGSIFT,
            "simulate",
            "-s",
            "healthy",
            "--ranks",
            str(self.ranks),
            "--nodes",
            str(self.nodes),
            "--size",
            size,
            "--no-noise",
            *self.shape,
            "-o",
            output,
        ]


# One world communicator, FSDP's AllGather/ReduceScatter/AllReduce interleaved op by op across the ranks
# of a combined srun stream, a training print every 50 COLL lines (98% COLL lines): issue 24's user job.
WORLD = ("--comms", "world", "--interleave", "op", "--print-every", "50", "--layout", "srun")
CASES = {
    c.name: c
    for c in (
        Case("coll32", 32, 4),
        Case("coll32.zst", 32, 4, zstd=True),
        Case("coll1024", 1024, 128),
        Case("coll1024.zst", 1024, 128, zstd=True),
        Case("coll4096", 4096, 512),  # the job size a quadratic step would show up on first
        # An input that cannot be read again keeps the text of the calls the digest holds: its memory bound.
        Case("coll4096.zst", 4096, 512, zstd=True),
        Case("world32", 32, 4, shape=WORLD, tag="-world-op-p50-srun"),
        # world32 with one line in a thousand of another kind (a NET or INIT INFO line, a warning, a print).
        Case(
            "world32.rare", 32, 4, shape=(*WORLD, "--other-lines", "0.001"), tag="-world-op-p50-srun-other0.1"
        ),
        Case("world512", 512, 64, shape=WORLD, tag="-world-op-p50-srun"),
        # The same job as world32, NCCL_DEBUG_FILE=%h.%p: a directory of 32 files (and console.log).
        Case(
            "world32.per-rank",
            32,
            4,
            shape=("--comms", "world", "--layout", "per-rank"),
            tag="-world-per-rank",
        ),
        # The same for a 512-rank job: 512 files of ~2 MB at 1 GB, where what each file costs shows.
        Case(
            "world512.per-rank",
            512,
            64,
            shape=("--comms", "world", "--layout", "per-rank"),
            tag="-world-per-rank",
        ),
        # coll32 with 30% of its lines other than COLL: NET/INIT/tuning INFO lines, warnings, prints.
        Case("mixed32", 32, 4, shape=("--other-lines", "0.3"), tag="-other30"),
        # Jobs that ran (NCCL 2.28.9, one H200), their steady state repeated: 8 processes interleaved in one
        # console as 8 torchruns wrote it, and 4 and 16 processes with an NCCL_DEBUG_FILE each.
        Case("real8", 8, 8, template="fixtures/captured/healthy8/console.log"),
        Case("real4.per-rank", 4, 4, template="fixtures/captured/healthy_files"),
        Case("real16.per-rank", 16, 16, template="fixtures/captured/healthy16_files"),
    )
}


@dataclass(frozen=True)
class Run:
    """One finished subprocess: how long it took, how much memory it peaked at, what it printed."""

    seconds: float
    peak_rss_mb: float
    exit_code: int
    stdout: str
    cpu_seconds: float = 0.0  # user + system, with the children it waited for (parsing workers)
    tree_rss_mb: float = 0.0  # the largest sum of RSS over the process and its children, sampled


@dataclass(frozen=True)
class Result:
    case: str
    size: str
    tool: str
    input: str
    input_bytes: int  # decompressed bytes of log text
    compressed: bool
    seconds: float
    mb_per_s: float
    vs_naive: float | None  # MB/s over the naive baseline's MB/s on the same log text
    peak_rss_mb: float
    exit_code: int
    cpu_seconds: float = 0.0
    tree_rss_mb: float = 0.0  # process + worker processes, sampled every 20 ms


def main(argv: list[str] | None = None) -> int:
    parser = _arguments()
    args = parser.parse_args(argv)
    sizes = ["100MB"] if args.quick else (args.sizes or FULL_SIZES).split(",")
    cases = [CASES[name] for name in _choices(parser, "--cases", args.cases, CASES)]
    tools = _choices(parser, "--tools", args.tools, TOOLS)
    for checkout in args.against or []:
        tools.append(_against(parser, checkout))
    if "rg" in tools and not shutil.which("rg"):
        console.print("[yellow]ripgrep is not installed: no rg floor[/]")
        tools.remove("rg")
    pipe_size = _pipe_size(args)
    args.cache.mkdir(parents=True, exist_ok=True)
    host = machine()  # before measuring: its load average tells whether others were busy
    warm_up(ROOT, *AGAINST.values())
    results = [r for size in sizes for case in cases for r in measure_case(case, size, tools, args)]
    if pipe_size:
        results.append(measure_pipe(CASES["coll32"], pipe_size, args.repeat))
    _print_table(results)
    options = {
        "sizes": sizes,
        "cases": [c.name for c in cases],
        "tools": tools,
        "repeat": args.repeat,
        "pipe_size": pipe_size,
        "cache": str(args.cache),
    }
    _write_json(args.out, {"machine": host, "options": options, "results": [asdict(r) for r in results]})
    console.print(f"Results written to {args.out}")
    return 1 if any(r.exit_code for r in results) else 0


def warm_up(*checkouts: Path) -> None:
    """Run analyze once on a small fixture, so that the grammar cache (~/.cache/nccl-logsift) and the page
    cache hold what every run reads: the first run after an install or an edit parses the grammar files and
    is not what the figures are about. The package's modules are byte-compiled first, as ``pip install``
    does: a checkout run with PYTHONDONTWRITEBYTECODE (or freshly edited) compiles every module it imports
    on every run (~0.1-0.3 s)."""
    fixture = ROOT / "fixtures" / "collective_mismatch_4ranks.log"
    for checkout in checkouts:
        compileall.compile_dir(checkout / "nccl_logsift", quiet=1)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nccl_logsift",
                "analyze",
                str(fixture),
                "--format",
                "json",
                "-o",
                os.devnull,
            ],
            check=False,
            cwd=checkout,
            stdout=subprocess.DEVNULL,
        )


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", help=f"Comma-separated log sizes (default {FULL_SIZES}).")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"Comma-separated cases among {', '.join(CASES)}."
    )
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help=f"Comma-separated tools among {', '.join(TOOLS)}."
    )
    parser.add_argument("--quick", action="store_true", help="Only 100MB and nothing piped: a smoke run.")
    parser.add_argument(
        "--pipe-size",
        help=f"Stream this much from the simulator into analyze through a pipe "
        f"(default {FULL_PIPE_SIZE} in the full run, none when --sizes or --quick is given).",
    )
    parser.add_argument("--no-pipe", action="store_true", help="Skip the piped case.")
    parser.add_argument(
        "--discard",
        action="store_true",
        help="Delete each log once its case is measured (a run of many 1 GB cases on a small disk).",
    )
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        metavar="DIR",
        help="Also time `analyze` run from another checkout (a git worktree of the commit before a change, "
        "its extension built), as the tool analyze@COMMIT in the same run, on the same logs.",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="Run each measurement N times and keep the fastest."
    )
    parser.add_argument(
        "--cache", type=Path, default=HERE / ".cache", help="Where generated logs are kept and reused."
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "results" / "latest.json", help="The JSON file to write."
    )
    return parser


def _choices(parser: argparse.ArgumentParser, option: str, text: str, allowed) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in allowed]
    if unknown:
        parser.error(f"{option}: unknown {', '.join(unknown)}; choose among {', '.join(allowed)}")
    return names


def _against(parser: argparse.ArgumentParser, checkout: Path) -> str:
    """The tool name of ``analyze`` run from ``checkout``: analyze@ its ``git describe``."""
    if not is_checkout(checkout):
        parser.error(f"--against: {checkout} is not a checkout of nccl-logsift")
    tool = f"analyze@{describe(checkout)}"
    AGAINST[tool] = checkout.resolve()
    return tool


def is_checkout(path: Path) -> bool:
    return (path / "nccl_logsift" / "__main__.py").is_file()


def describe(checkout: Path) -> str:
    """A checkout's ``git describe`` (its commit, ``-dirty`` when it has changes), or its folder's name."""
    git = ["git", "-C", str(checkout), "describe", "--always", "--dirty"]
    described = subprocess.run(git, check=False, capture_output=True, text=True).stdout.strip()
    return described or checkout.name


def _pipe_size(args: argparse.Namespace) -> str | None:
    """The piped case takes minutes, so only the full run (no --sizes, no --quick) does it unasked."""
    if args.no_pipe or args.quick:
        return None
    return args.pipe_size or (FULL_PIPE_SIZE if args.sizes is None else None)


def measure_case(case: Case, size: str, tools: list[str], args: argparse.Namespace) -> list[Result]:
    """Every tool on one simulated log; naive reads the plain file (it cannot decompress), so a .zst case's
    ratio is to the baseline on the same log text."""
    plain = simulated_log(case, size, args.cache)
    log = compressed_copy(plain) if case.zstd else plain
    text_bytes = log_bytes(plain)
    inputs = {tool: plain if tool == "naive" else log for tool in tools}
    runs = {tool: measure_tool(tool, path, args.repeat, args.cache) for tool, path in inputs.items()}
    naive_mb_per_s = _mb_per_s(text_bytes, runs["naive"]) if "naive" in runs else None
    if args.discard:  # the next case's log takes its place on disk
        for path in {plain, log}:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return [
        _result(case.name, size, tool, inputs[tool], text_bytes, run, naive_mb_per_s)
        for tool, run in runs.items()
    ]


def measure_pipe(case: Case, size: str, repeat: int) -> Result:
    """``logsift simulate -o - | logsift analyze -``: the bytes never touch disk, so the analyze process's
    peak RSS shows whether memory stays flat however much is streamed."""
    console.print(f"[bold]piping[/] {size} of {case.name} into analyze")
    run = best_of(
        repeat,
        lambda: run_piped(case.simulate_argv(size, "-"), [*LOGSIFT, "analyze", "-", "--format", "json"]),
    )
    streamed = sum(i["bytes"] for i in json.loads(run.stdout)["inputs"]) if run.exit_code == 0 else 0
    return _result(f"{case.name} piped", size, "analyze", Path("-"), streamed, run, None)


def _result(
    case: str, size: str, tool: str, log: Path, text_bytes: int, run: Run, naive: float | None
) -> Result:
    mb_per_s = _mb_per_s(text_bytes, run)
    return Result(
        case,
        size,
        tool,
        str(log),
        text_bytes,
        log.suffix == ".zst",
        round(run.seconds, 3),
        round(mb_per_s, 1),
        round(mb_per_s / naive, 2) if naive else None,
        run.peak_rss_mb,
        run.exit_code,
        round(run.cpu_seconds, 2),
        run.tree_rss_mb,
    )


def _mb_per_s(text_bytes: int, run: Run) -> float:
    return text_bytes / 1e6 / run.seconds


def simulated_log(case: Case, size: str, cache: Path) -> Path:
    """The plain log of this job and size (a directory for per-rank files), simulated once and reused while
    a file of that name exists."""
    if case.template:
        name = f"captured-{case.name}-{size}"
    else:
        name = f"healthy-r{case.ranks}-n{case.nodes}{case.tag}-{size}"
    path = cache / (name if case.per_rank else f"{name}.log")
    if not path.exists():
        console.print(f"[bold]{'extending' if case.template else 'simulating'}[/] {path.name}")
        partial = cache / f"{name}.tmp"
        shutil.rmtree(partial, ignore_errors=True)  # a per-rank directory left by an interrupted run
        if case.template:
            extend.extend(ROOT / case.template, extend.size_of(size), partial)
        else:
            subprocess.run(case.simulate_argv(size, str(partial)), check=True, cwd=ROOT)
        partial.rename(path)  # only complete files are reused
    return path


def log_bytes(path: Path) -> int:
    """Bytes of log text in a file, or in every file of a per-rank directory."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


def compressed_copy(plain: Path) -> Path:
    """``plain`` compressed with zstd, by the zstd CLI when installed, else by pyarrow."""
    path = plain.with_name(plain.name + ".zst")
    if not path.exists():
        console.print(f"[bold]compressing[/] {path.name}")
        partial = path.with_suffix(".tmp")
        if shutil.which("zstd"):
            subprocess.run(["zstd", "-q", "-f", "-T0", str(plain), "-o", str(partial)], check=True)
        else:
            import pyarrow as pa

            with open(plain, "rb") as source, pa.CompressedOutputStream(str(partial), "zstd") as sink:
                shutil.copyfileobj(source, sink, 4 << 20)
        partial.rename(path)
    return path


@functools.cache
def measure_tool(tool: str, log: Path, repeat: int, cache: Path) -> Run:
    """The fastest of ``repeat`` runs of ``tool`` on ``log``, measured once per log: a plain case and its
    .zst twin share the baseline's run on the plain file."""
    return best_of(repeat, lambda: run_tool(tool, log, cache))


def run_tool(tool: str, log: Path, cache: Path) -> Run:
    console.print(f"[bold]{tool}[/] {log.name}")
    with tempfile.TemporaryDirectory(dir=cache) as scratch:  # parse's tables, deleted after each run
        return run_measured(tool_argv(tool, log, scratch), AGAINST.get(tool, ROOT))


def tool_argv(tool: str, log: Path, scratch: str) -> list[str]:
    """The command line of each tool: the commands a user would type, so start-up is part of the cost."""
    if tool in AGAINST:  # run in that checkout, whose package `python -m` imports first
        return [*LOGSIFT, "analyze", str(log.resolve()), "--format", "json"]
    return {
        "analyze": [*LOGSIFT, "analyze", str(log), "--format", "json"],
        "parse": [*LOGSIFT, "parse", str(log), "-o", scratch],
        "naive": [sys.executable, str(HERE / "naive.py"), str(log)],
        "rg": ["rg", "-c", *(["-z"] if log.suffix == ".zst" else []), "opCount", str(log)],
    }[tool]


def run_measured(argv: list[str], cwd: Path = ROOT) -> Run:
    """Run ``argv`` in a fresh process; its stdout goes to a file, since a 4096-rank report exceeds a pipe."""
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, cwd=cwd)
        return _waited(proc, start, out)


def run_piped(producer: list[str], consumer: list[str]) -> Run:
    """Run ``producer | consumer`` and measure the consumer alone (its wall time spans the whole pipe); a
    failed producer fails the run, since the consumer then read less than asked."""
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        source = subprocess.Popen(producer, stdout=subprocess.PIPE, cwd=ROOT)
        sink = subprocess.Popen(consumer, stdin=source.stdout, stdout=out, cwd=ROOT)
        source.stdout.close()  # the consumer holds the only read end, so the producer sees its exit
        run = _waited(sink, start, out)
        return replace(run, exit_code=run.exit_code or source.wait())


def _waited(proc: subprocess.Popen, start: float, out: IO[str]) -> Run:
    """Wait for ``proc`` with wait4, the one call that returns a child's own peak RSS (KB on Linux), and
    its CPU time including the children it waited for; a thread samples the RSS of the whole process tree
    meanwhile, since ``analyze`` parses large inputs in worker processes whose memory counts too."""
    tree = TreeMemory(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    tree.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        console.print(f"[red]exit {proc.returncode}[/]: {' '.join(proc.args)}")
    out.seek(0)
    own = round(usage.ru_maxrss / 1024, 1)
    return Run(
        seconds, own, proc.returncode, out.read(), usage.ru_utime + usage.ru_stime, max(own, tree.peak_mb)
    )


class TreeMemory:
    """The largest total RSS of a process and its descendants, sampled every 20 ms from /proc (Linux)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_mb = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        page_mb = os.sysconf("SC_PAGE_SIZE") / (1 << 20)
        while not self._done.wait(0.02):
            pages = sum(_resident_pages(pid) for pid in _tree(self.pid))
            self.peak_mb = max(self.peak_mb, round(pages * page_mb, 1))


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc/PID/task/*/children; [] once it has exited."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return found


def _resident_pages(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def best_of(repeat: int, measure: Callable[[], Run]) -> Run:
    """The fastest of ``repeat`` runs: the others were slowed by something besides the tool."""
    return min((measure() for _ in range(max(repeat, 1))), key=lambda run: run.seconds)


def machine() -> dict:
    """What the figures depend on, so that a README quoting them can name the machine (Linux: /proc)."""
    import polars
    import pyarrow

    git = ["git", "describe", "--always", "--dirty"]
    commit = subprocess.run(
        git, check=False, capture_output=True, text=True, cwd=ROOT
    )  # None outside a clone
    return {
        "cpu": _proc_field("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "ram_gb": round(int(_proc_field("/proc/meminfo", "MemTotal").split()[0]) / 1024**2, 1),
        "load_average": os.getloadavg(),  # others' jobs on a shared machine slow every figure
        "python": platform.python_version(),
        "polars": polars.__version__,
        "pyarrow": pyarrow.__version__,
        "logsift_commit": commit.stdout.strip() or None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _proc_field(path: str, name: str) -> str:
    with open(path) as lines:
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith(name))


def _print_table(results: list[Result]) -> None:
    table = Table(
        "case",
        "size",
        "tool",
        "seconds",
        "MB/s",
        "× baseline",
        "CPU s",
        "peak RSS MB",
        "with workers MB",
        title="nccl-logsift benchmarks",
        caption="naive reads the plain file in .zst cases; rg -z decompresses through zstd.",
    )
    for r in results:
        ratio = f"{r.vs_naive:.2f}" if r.vs_naive is not None else ""
        size = f"{r.input_bytes / 1e6:,.0f} MB"  # what was read, which the simulator makes about --size
        table.add_row(
            r.case,
            size,
            r.tool,
            f"{r.seconds:.2f}",
            f"{r.mb_per_s:.1f}",
            ratio,
            f"{r.cpu_seconds:.1f}",
            f"{r.peak_rss_mb:.0f}",
            f"{r.tree_rss_mb:.0f}",
            style="red" if r.exit_code else None,
        )
    Console(highlight=False, width=None if sys.stdout.isatty() else 120).print(table)


def _write_json(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
    partial.rename(path)


if __name__ == "__main__":
    sys.exit(main())
