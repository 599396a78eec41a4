"""Time `logsift analyze` from two or more checkouts on one log, alternately, run by run.

    python benchmarks/ab.py LOG BEFORE AFTER [--repeat 3] [--json OUT] [-- ANALYZE_OPTIONS]

On the shared 2-core machine a run's time moves by ±0.15 s from one minute to the next, as much as most
changes do. `run.py --against` measures each checkout's runs one after the other and keeps the fastest; here
the checkouts take turns (A B A B ...), so that a slow minute costs each the same, and every run counts: the
mean, the fastest and the slowest wall time, the mean CPU seconds and the largest peak RSS of each.

Each checkout runs from its own directory: `python -m nccl_logsift` imports the package of the working
directory before `PYTHONPATH`, and a script that ran two checkouts from one directory timed the same code
twice (benchmarks/README.md, sixth pass). The package each run imported is checked before the first run,
and each checkout is warmed up as `run.py` warms it (`warm_up`: byte-compiled, the grammar cache filled).
Options after `--` go to `analyze` (default: `--format json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from run import describe, is_checkout, run_measured, warm_up


def main(argv: list[str] | None = None) -> int:
    args, options = _parse(argv)
    log = Path(args.log).resolve()
    checkouts = [Path(c).resolve() for c in args.checkouts]
    for checkout in checkouts:
        _check_imports(checkout)
    warm_up(*checkouts)  # byte-compiled as an install is, the grammar cache filled, before the first run
    labels = [describe(checkout) for checkout in checkouts]
    labels = [f"{label} ({n + 1})" if labels.count(label) > 1 else label for n, label in enumerate(labels)]
    runs: dict[str, list] = {label: [] for label in labels}
    for n in range(args.repeat):
        for checkout, label in zip(checkouts, labels):
            run = run_measured(
                [sys.executable, "-m", "nccl_logsift", "analyze", str(log), *options], cwd=checkout
            )
            if run.exit_code:
                print(f"{label}: exit {run.exit_code} on run {n + 1}", file=sys.stderr)
                return 1
            runs[label].append(run)
    summary = [_summary(label, str(checkout), runs[label]) for checkout, label in zip(checkouts, labels)]
    for row in summary:
        print(
            f"{row['checkout']:<20} wall {row['mean_seconds']:.2f} s [{row['min_seconds']:.2f}-"
            f"{row['max_seconds']:.2f}]  CPU {row['mean_cpu_seconds']:.2f} s  peak RSS "
            f"{row['max_peak_rss_mb']:.0f} MB  (n={row['runs']})"
        )
    if args.json:
        document = {"log": str(log), "analyze_options": options, "repeat": args.repeat, "checkouts": summary}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = sys.argv[1:] if argv is None else argv
    options = ["--format", "json"]
    if "--" in argv:
        at = argv.index("--")
        argv, options = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log", help="The log (file or directory) to analyze.")
    parser.add_argument("checkouts", nargs="+", help="Checkouts of nccl-logsift (worktrees), in turn.")
    parser.add_argument("--repeat", type=int, default=3, help="Runs of each checkout (default 3).")
    parser.add_argument("--json", help="Also write the figures to this file.")
    args = parser.parse_args(argv)
    unknown = [c for c in args.checkouts if not is_checkout(Path(c))]
    if unknown:
        parser.error(f"not a checkout of nccl-logsift: {', '.join(unknown)}")
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    return args, options


def _check_imports(checkout: Path) -> None:
    """Fail unless ``python -m nccl_logsift`` run from ``checkout`` imports that checkout's package, with its
    compiled loops (a worktree needs its own build: ``pip install -e . --no-deps`` there, or a copy of
    ``nccl_logsift/accel/_kernels*.so``)."""
    probe = "import nccl_logsift, nccl_logsift.accel as a; print(a.NATIVE); print(nccl_logsift.__file__)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=checkout, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{checkout}: nccl_logsift does not import: {done.stderr.strip()}")
    native, found = done.stdout.split()
    if not Path(found).resolve().is_relative_to(checkout):
        raise SystemExit(f"{checkout}: python imports nccl_logsift from {found}, not from the checkout")
    if native != "True":
        raise SystemExit(f"{checkout}: the compiled loops are not built there (accel.NATIVE is {native})")


def _summary(label: str, checkout: str, runs: list) -> dict:
    seconds = [run.seconds for run in runs]
    return {
        "checkout": label,
        "path": checkout,
        "runs": len(runs),
        "mean_seconds": round(statistics.fmean(seconds), 3),
        "min_seconds": round(min(seconds), 3),
        "max_seconds": round(max(seconds), 3),
        "mean_cpu_seconds": round(statistics.fmean(run.cpu_seconds for run in runs), 3),
        "max_peak_rss_mb": max(run.tree_rss_mb for run in runs),
    }


if __name__ == "__main__":
    sys.exit(main())
