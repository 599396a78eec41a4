"""A simulated archive of many jobs with its ground truth: a small fleet in which two hosts keep failing.

Each job is one simulated scenario; its hosts are renamed onto a shared pool of fleet hosts (whole host
names, in one pass over the text), so that the same hosts recur across jobs as they do in a real fleet.
The culprit host of a job's root cause is chosen first: ``BAD_HOSTS`` are the culprit of many jobs.
Some jobs are compressed (.gz, .zst, .bz2), some written one file per rank, and one is a corrupt .gz.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from nccl_logsift.simulate import Options, write

# Scenarios whose root cause logsift names with the truth's culprit ranks and hosts over these versions and
# seeds. Left out: uneven-data (seeds 7004 with NCCL 2.14 and 7019 with 2.27, 4 ranks on 2 nodes, end as a
# primary watchdog_timeout of the waiting ranks instead of rank_behind of the short ones) and pp-deadlock
# (seed 7044 with 2.14 names ranks 0,1 instead of 3); init-hang's finding names no host.
SCENARIOS = (
    "healthy",
    "rank-stall",
    "extra-collective",
    "collective-mismatch",
    "bootstrap-failure",
    "veth-interface",
    "ib-error",
    "socket-fallback",
    "gdr-disabled",
    "p2p-disabled",
    "duplicate-gpu",
    "cuda-oom",
    "slow-rank",
)
VERSIONS = ("2.14", "2.18", "2.21", "2.27")
BAD_HOSTS = {"gpu-node-007": 9, "gpu-node-013": 5}  # host -> jobs in which it is the culprit
POOL = [f"gpu-node-{n:03d}" for n in range(20, 60)]
DAYS = ("2025-11-18", "2025-11-19", "2025-11-20")
CORRUPT = "job-corrupt"


@dataclass(frozen=True)
class FleetTruth:
    jobs: int
    truths: dict[str, dict]  # job_id -> the simulator's truth, hosts renamed
    corrupt: str

    def primary_kind_jobs(self) -> Counter:
        """Jobs per root-cause kind."""
        return Counter(
            k for t in self.truths.values() for k in {f["kind"] for f in t["faults"] if f["primary"]}
        )

    def culprit_host_jobs(self) -> Counter:
        return Counter(
            h
            for t in self.truths.values()
            for h in {h for f in t["faults"] if f["primary"] for h in f["hosts"]}
        )

    def version_jobs(self) -> Counter:
        return Counter(t["nccl_version"] for t in self.truths.values())


def build(root: Path, jobs: int = 49, seed: int = 7) -> FleetTruth:
    """``jobs`` simulated jobs plus the corrupt one, one directory or file each under ``root``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    culprit_plan = [h for h, n in BAD_HOSTS.items() for _ in range(n)]
    truths: dict[str, dict] = {}
    for i in range(jobs):
        scenario = SCENARIOS[i % len(SCENARIOS)]
        version = "2.27" if scenario == "slow-rank" else VERSIONS[i % len(VERSIONS)]
        layout = ("interleaved", "per-rank", "srun")[i % 3]
        job_id = f"job-{i:03d}-{scenario}"
        options = Options(
            scenario=scenario,
            ranks=4,
            nodes=2,
            ops=6,
            seed=seed * 1000 + i,
            nccl_version=version,
            layout=layout,
            noise=False,
        )
        staging = root / f".{job_id}"
        target = staging / ("logs" if layout == "per-rank" else "job.log")
        staging.mkdir()
        sim = write(options, str(target))
        truth = sim.truth
        culprit = culprit_plan.pop() if culprit_plan and any(f["primary"] for f in truth["faults"]) else None
        mapping = _host_mapping(truth, culprit, rng)
        compression = (None, "gz", None, "zst", None, "bz2")[i % 6]
        files = sorted(target.iterdir()) if target.is_dir() else [target]
        if layout == "per-rank":
            destination = root / job_id
            destination.mkdir()
            for path in files:
                _emit(path, destination / _rename(path.name, mapping), mapping, compression)
        else:
            _emit(target, root / f"{job_id}.log", mapping, compression)
        for path in files:
            path.unlink()
        if target.is_dir():
            target.rmdir()
        staging.rmdir()
        truths[job_id] = _renamed_truth(truth, mapping)
    corrupt = root / f"{CORRUPT}.log.gz"
    # The gzip header, then a deflate block of the reserved type: not one byte decodes, so the job fails
    # (a stream that decodes for a while and then breaks is read up to the break: an incomplete job).
    corrupt.write_bytes(
        gzip.compress(b"x" * 1000)[:10] + b"\x07" + bytes(rng.randrange(256) for _ in range(4000))
    )
    _spread_dates(root)
    return FleetTruth(jobs + 1, truths, CORRUPT)


def _host_mapping(truth: dict, culprit: str | None, rng: random.Random) -> dict[str, str]:
    originals = list(dict.fromkeys(truth["hosts"]))
    primary = [h for f in truth["faults"] if f["primary"] for h in f["hosts"]]
    others = [h for h in POOL]
    rng.shuffle(others)
    mapping = {}
    if culprit and primary:
        mapping[primary[0]] = culprit
    for host in originals:
        if host not in mapping:
            mapping[host] = others.pop()
    return mapping


def _pattern(mapping: dict[str, str]) -> re.Pattern[str]:
    names = "|".join(re.escape(h) for h in sorted(mapping, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{names})(?![\w-])")


def _rename(text: str, mapping: dict[str, str]) -> str:
    return _pattern(mapping).sub(lambda m: mapping[m.group()], text)


def _emit(source: Path, target: Path, mapping: dict[str, str], compression: str | None) -> None:
    data = _rename(source.read_text(), mapping).encode()
    if compression == "gz":
        target.with_name(target.name + ".gz").write_bytes(gzip.compress(data))
    elif compression == "bz2":
        target.with_name(target.name + ".bz2").write_bytes(bz2.compress(data))
    elif compression == "zst":
        with pa.CompressedOutputStream(str(target.with_name(target.name + ".zst")), "zstd") as out:
            out.write(data)
    else:
        target.write_bytes(data)


def _renamed_truth(truth: dict, mapping: dict[str, str]) -> dict:
    return json.loads(_rename(json.dumps(truth), mapping))


def _spread_dates(root: Path) -> None:
    """Give the jobs three different run dates (the newest modification time of their files)."""
    from datetime import UTC, datetime

    for n, entry in enumerate(sorted(p for p in root.iterdir() if not p.name.startswith("."))):
        stamp = datetime.fromisoformat(DAYS[n % len(DAYS)] + "T12:00:00").replace(tzinfo=UTC).timestamp()
        for path in [entry, *entry.rglob("*")] if entry.is_dir() else [entry]:
            os.utime(path, (stamp, stamp))
