"""How ``logsift batch --engine local`` scales with cores: the same archive analysed with 1, 2, … workers.

    python benchmarks/batch.py                         32 jobs of 64 MB (2 GB), 1 and 2 workers
    python benchmarks/batch.py --size 200MB --jobs 8   a smoke run
    python benchmarks/batch.py --workers 1,2,4,8       on a bigger machine

The archive is simulated once into the cache (COLL-heavy jobs of 8 ranks: healthy runs and rank stalls,
every fourth job .zst-compressed) and reused. Each measurement is a fresh ``logsift batch`` into an empty
output directory, start-up and the fleet summary included, pinned (``taskset``) to as many cores as it
has workers: the speed-up is that of adding cores, and one worker cannot borrow the second core through
polars' threads. MB/s is decimal megabytes of log text (the
decompressed size, from the ``jobs`` table) per wall-clock second; the speed-up is over one worker. The
peak RSS of the whole process tree (driver and workers) comes from benchmarks/run.py's ``run_measured``;
its CPU time is left out, since the workers are children of the forkserver, which the run never waits for.
The machine's load average is recorded before each run: on a shared machine it says how much of the
cores the batch really had.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOGSIFT = [sys.executable, "-m", "nccl_logsift"]
sys.path.insert(0, str(HERE))  # the harness of benchmarks/run.py: machine facts, measured runs
from run import compressed_copy, machine, run_measured  # noqa: E402  (found through the path set above)

console = Console(stderr=True, highlight=False)
SCENARIOS = ("healthy", "rank-stall")


@dataclass(frozen=True)
class Measurement:
    workers: int  # and cores: the run is pinned to that many
    jobs: int
    input_bytes: int  # decompressed log text over all jobs
    seconds: float
    mb_per_s: float
    speedup: float  # over one worker
    tree_rss_mb: float  # the largest total RSS of the driver and its workers
    load_average: list[float]  # 1, 5, 15 minutes, just before the run
    exit_code: int


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    size = _bytes(args.size)
    archive = build_archive(args.cache, size, args.jobs)
    host = machine()
    results: list[Measurement] = []
    for workers in (int(w) for w in args.workers.split(",")):
        results.append(measure(archive, workers, args.cache, results[0].seconds if results else None))
    _print_table(results)
    document = {
        "machine": host,
        "options": {"size": args.size, "jobs": args.jobs, "archive": str(archive)},
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"Results written to {args.out}")
    return 1 if any(r.exit_code for r in results) else 0


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="2GB", help="Total log text of the archive (default 2GB).")
    parser.add_argument("--jobs", type=int, default=32, help="Jobs in the archive (default 32).")
    parser.add_argument(
        "--workers", default="1,2", help="Comma-separated worker counts to measure (default 1,2)."
    )
    parser.add_argument(
        "--cache", type=Path, default=HERE / ".cache", help="Where the archive is kept and reused."
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "results" / "batch-latest.json", help="The JSON file to write."
    )
    return parser


def _bytes(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def build_archive(cache: Path, size: int, jobs: int) -> Path:
    """``jobs`` simulated jobs of ``size / jobs`` bytes each, one directory per job; built once."""
    archive = cache / f"batch-{size // 10**6}MB-{jobs}jobs"
    done = archive / ".complete"
    if done.exists():
        return archive
    shutil.rmtree(archive, ignore_errors=True)
    per_job = max(size // jobs, 1_000_000)
    for i in range(jobs):
        job = archive / f"job-{i:03d}"
        job.mkdir(parents=True)
        log = job / "train.log"
        console.print(f"[bold]simulating[/] {job.name} ({per_job / 1e6:.0f} MB)")
        subprocess.run(
            [
                *LOGSIFT,
                "simulate",
                "-s",
                SCENARIOS[i % len(SCENARIOS)],
                "--ranks",
                "8",
                "--nodes",
                "2",
                "--seed",
                str(i),
                "--size",
                str(per_job),
                "--no-noise",
                "-o",
                str(log),
            ],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        if i % 4 == 3:
            compressed_copy(log)
            log.unlink()
    done.touch()
    return archive


def measure(archive: Path, workers: int, cache: Path, baseline: float | None) -> Measurement:
    console.print(f"[bold]batch[/] --jobs {workers} {archive.name}")
    load = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        out = Path(scratch) / "dataset"
        pin = (
            ["taskset", "-c", f"0-{workers - 1}"]
            if shutil.which("taskset") and workers <= os.cpu_count()
            else []
        )
        run = run_measured([*pin, *LOGSIFT, "batch", str(archive), "-o", str(out), "--jobs", str(workers)])
        jobs = pl.read_parquet(out / "jobs" / "*" / "*.parquet") if run.exit_code == 0 else pl.DataFrame()
        text = int(jobs["bytes"].sum()) if jobs.height else 0
    return Measurement(
        workers=workers,
        jobs=jobs.height,
        input_bytes=text,
        seconds=round(run.seconds, 2),
        mb_per_s=round(text / run.seconds / 1e6, 1),
        speedup=round((baseline or run.seconds) / run.seconds, 2),
        tree_rss_mb=run.tree_rss_mb,
        load_average=load,
        exit_code=run.exit_code,
    )


def _print_table(results: list[Measurement]) -> None:
    table = Table(
        "workers", "jobs", "log text", "seconds", "MB/s", "speed-up", "peak RSS (tree)", "load before"
    )
    for r in results:
        table.add_row(
            str(r.workers),
            str(r.jobs),
            f"{r.input_bytes / 1e9:.2f} GB",
            f"{r.seconds:.1f}",
            f"{r.mb_per_s:.1f}",
            f"{r.speedup:.2f}×",
            f"{r.tree_rss_mb:.0f} MB",
            " ".join(f"{x:.2f}" for x in r.load_average),
        )
    Console(highlight=False).print(table)


if __name__ == "__main__":
    sys.exit(main())
