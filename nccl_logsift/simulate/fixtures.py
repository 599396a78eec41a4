"""Regenerate the simulated fixtures in ``fixtures/``: ``python -m nccl_logsift.simulate.fixtures``.

One small log per important scenario, each with its ground truth next to it
(``<scenario>_<N>ranks.log`` + ``<scenario>_<N>ranks.truth.json``; a per-rank fixture is a directory).
The table below fixes every option, so the files only change when the simulator does; the tests
check that the checked-in files are what this command writes (``--check`` does the same here).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from nccl_logsift.simulate import Options, write

ROOT = Path(__file__).resolve().parents[2] / "fixtures"

# name: options. Versions and layouts are spread so the fixtures show every NCCL and launcher format.
FIXTURES: dict[str, Options] = {
    "healthy_8ranks": Options(
        "healthy", ranks=8, nodes=2, ops=8, nccl_version="2.21", layout="interleaved", seed=1
    ),
    "rank_stall_8ranks": Options(
        "rank-stall", ranks=8, nodes=2, ops=8, nccl_version="2.21", layout="srun", seed=2
    ),
    "extra_collective_4ranks": Options(
        "extra-collective", ranks=4, ops=8, nccl_version="2.18", layout="torchrun", seed=3
    ),
    "collective_mismatch_4ranks": Options("collective-mismatch", ranks=4, ops=8, nccl_version="2.27", seed=4),
    "uneven_data_4ranks": Options(
        "uneven-data", ranks=4, ops=8, nccl_version="2.14", layout="mpirun", seed=5
    ),
    "init_hang_4ranks": Options("init-hang", ranks=4, nodes=2, ops=8, nccl_version="2.26", seed=6),
    "bootstrap_failure_4ranks": Options(
        "bootstrap-failure", ranks=4, ops=8, nccl_version="2.21", layout="torchrun", seed=7
    ),
    "ib_error_4ranks": Options("ib-error", ranks=4, ops=8, nccl_version="2.18", layout="srun", seed=8),
    "socket_fallback_4ranks": Options("socket-fallback", ranks=4, ops=8, nccl_version="2.10", seed=9),
    "cuda_oom_4ranks": Options("cuda-oom", ranks=4, ops=8, nccl_version="2.27", layout="torchrun", seed=10),
    "segfault_4ranks": Options("segfault", ranks=4, ops=8, nccl_version="2.21", layout="torchrun", seed=11),
    "slow_rank_4ranks": Options("slow-rank", ranks=4, ops=12, nccl_version="2.26", seed=12),
    "pp_deadlock_4ranks": Options(
        "pp-deadlock", ranks=4, ops=8, nccl_version="2.27", layout="mpirun", seed=13
    ),
    "duplicate_gpu_4ranks_per_rank": Options(
        "duplicate-gpu", ranks=4, ops=8, nccl_version="2.21", layout="per-rank", seed=14
    ),
}


def generate(target: Path) -> list[Path]:
    """Write every fixture under ``target``; return the paths written."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, options in FIXTURES.items():
        log = target / (name if options.layout == "per-rank" else f"{name}.log")
        if log.is_dir():
            shutil.rmtree(log)
        truth = target / f"{name}.truth.json"
        write(options, str(log), str(truth))
        written += [log, truth]
    return written


def _files(path: Path) -> dict[str, bytes]:
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    return {path.name: path.read_bytes()}


def stale(target: Path = ROOT) -> list[str]:
    """Fixtures whose checked-in bytes differ from what the generator writes now."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [
            p.name for p in fresh if not (target / p.name).exists() or _files(target / p.name) != _files(p)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nccl_logsift.simulate.fixtures", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="report stale fixtures instead of writing them")
    parser.add_argument(
        "--dir", type=Path, default=ROOT, help="where the fixtures live (default: the repository's fixtures/)"
    )
    args = parser.parse_args(argv)
    if args.check:
        names = stale(args.dir)
        for n in names:
            print(f"stale: {n}")
        return 1 if names else 0
    for path in generate(args.dir):
        size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
        print(f"{size:>8}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
