"""Write the findings JSON of a fixed set of logs, or compare two such sets byte for byte.

    python benchmarks/identity.py snapshot OUT_DIR            every fixture, every shared corpus log, and
                                                              simulated 32/1024/4096-rank jobs
    python benchmarks/identity.py compare BEFORE_DIR AFTER_DIR

A refactoring that changes no behaviour leaves every file identical. ``snapshot`` runs the checkout this
script sits in (``python -m nccl_logsift`` with this root on PYTHONPATH), with ``--root`` to run another.
The corpus is read from ``LOGSIFT_SHARED`` (default ``../shared``); simulated logs are cached in
``benchmarks/.cache`` like ``run.py``'s.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache" / "identity"
SIMULATED = (  # name, ranks, nodes, size, extra simulate options
    ("coll32", 32, 4, "20MB", ()),
    ("coll1024", 1024, 128, "40MB", ()),
    ("coll4096", 4096, 512, "60MB", ()),
    ("world32", 32, 4, "20MB", ("--comms", "world", "--interleave", "op", "--layout", "srun")),
    ("mixed32", 32, 4, "20MB", ("--other-lines", "0.3")),
    ("stall1024", 1024, 128, "", ("-s", "rank-stall")),
)

SCENARIOS = (  # every `logsift simulate --list` scenario, at 16 ranks on 2 nodes in three layouts
    *("healthy", "rank-stall", "extra-collective", "collective-mismatch", "uneven-data", "init-hang"),
    *("bootstrap-failure", "veth-interface", "ib-error", "socket-fallback", "gdr-disabled", "p2p-disabled"),
    *("duplicate-gpu", "hostname-collision", "cuda-oom", "segfault", "slow-rank", "pp-deadlock"),
    *("import-error", "node-death", "debug-mismatch", "gpu-fault", "nccl-tests-failure", "store-host-absent"),
)


def inputs(shared: Path) -> dict[str, Path]:
    """Every log to diagnose, by a stable name."""
    found: dict[str, Path] = {}
    captured = ROOT / "fixtures" / "captured"
    for path in sorted((ROOT / "fixtures").iterdir()):
        if not path.name.endswith(".json") and path != captured:
            found[f"fixtures/{path.name}"] = path
    for path in sorted(captured.iterdir()) if captured.is_dir() else ():
        if path.is_dir():  # a real job this project ran: its logs and Flight Recorder dumps, as one input
            found[f"captured/{path.name}"] = path
    real = shared / "corpus" / "real"
    for path in sorted(real.glob("*")) if real.is_dir() else ():
        if path.name != "SOURCES.md":
            found[f"real/{path.name}"] = path
    jobs = shared / "corpus" / "gpu-h200"
    for path in sorted(jobs.glob("*")) if jobs.is_dir() else ():
        if path.is_dir():  # a job: its logs and Flight Recorder dumps, analyzed as one directory
            found[f"gpu-h200/{path.name}"] = path
    for name, ranks, nodes, size, extra in SIMULATED:
        found[f"simulated/{name}"] = simulated(name, ranks, nodes, size, extra)
    for scenario in SCENARIOS:
        for layout in ("interleaved", "torchrun", "srun"):
            extra = ("-s", scenario, "--layout", layout)
            found[f"scenario/{scenario}-{layout}"] = simulated(f"{scenario}-{layout}", 16, 2, "", extra)
    return found


def simulated(name: str, ranks: int, nodes: int, size: str, extra: tuple[str, ...]) -> Path:
    path = CACHE / f"{name}-{size or 'job'}.log"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        scenario = () if "-s" in extra else ("-s", "healthy", "--no-noise")
        sizing = ("--size", size) if size else ()
        argv = ["simulate", *scenario, "--ranks", str(ranks), "--nodes", str(nodes), *sizing, *extra]
        subprocess.run([*logsift(ROOT), *argv, "--seed", "7", "-o", str(path)], check=True)
    return path


def logsift(root: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, {str(root)!r}); from nccl_logsift.cli import main; main()",
    ]


def snapshot(root: Path, out: Path, shared: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def one(item: tuple[str, Path]) -> None:
        name, path = item
        done = subprocess.run(
            [*logsift(root), "analyze", "--format", "json", str(path)],
            capture_output=True,
            cwd=path.parent,
            env={**os.environ, "COLUMNS": "120"},
        )
        target = out / (name.replace("/", "__") + ".json")
        target.write_bytes(done.stdout + f"\n// exit {done.returncode}\n".encode() + _stderr(done.stderr))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, inputs(shared).items()))


def _stderr(err: bytes) -> bytes:
    failed = (line for line in err.splitlines() if b"Traceback" in line or b"Error" in line)
    return b"".join(b"// " + line + b"\n" for line in failed)


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    changed = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists() or a.read_bytes() != b.read_bytes():
            changed += 1
            print(f"differs: {name}")
            if a.exists() and b.exists():
                lines = a.read_text().splitlines(), b.read_text().splitlines()
                diff = difflib.unified_diff(*lines, lineterm="", n=1)
                print("\n".join(list(diff)[:40]))
    print(f"{len(names) - changed} of {len(names)} identical")
    return 1 if changed else 0


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("out", type=Path)
    snap.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "compare":
        return compare(args.before, args.after)
    shared = Path(os.environ.get("LOGSIFT_SHARED", ROOT.parent / "shared"))
    snapshot(args.root.resolve(), args.out, shared)
    return 0


if __name__ == "__main__":
    sys.exit(main())
