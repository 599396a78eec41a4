"""LS601 late ranks from whatever timestamps the lines carry: NCCL 2.26+ INFO timestamps, a collector's
RFC 3339 prefix (docker, kubectl --timestamps, CRI files), or both; and a 1 % skew that stays healthy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from builders import job_of

from nccl_logsift.findings.performance.latency_outlier import LatencyOutlier
from nccl_logsift.model import Kind
from nccl_logsift.pipeline import load_job
from nccl_logsift.simulate import Options, write

# The NCCL timestamp of a simulated line, after the launcher's label (srun ``3: ``, torchrun ``[default3]:``).
NCCL_TS = re.compile(r"^(\s*\d+: |\[\w+\]:)?\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)\.(\d+)\] ")


def slow_rank(tmp_path: Path, version: str, layout: str) -> tuple[Path, dict]:
    out, truth = tmp_path / "slow.log", tmp_path / "slow.json"
    write(Options(scenario="slow-rank", nccl_version=version, layout=layout), str(out), str(truth))
    return out, json.loads(truth.read_text())["faults"][0]


def collected(path: Path, *, zone: str = "Z", tag: str = "", keep_nccl: str | None = None) -> Path:
    """The log as a collector stores it: each line behind an RFC 3339 prefix made from its NCCL time (the last
    one seen for lines without). ``keep_nccl``: None drops NCCL's own timestamp, "seconds" keeps it in NCCL's
    default ``[%F %T] `` format (whole seconds)."""
    last, out = "2025-06-02T00:00:00.000000000", []
    for line in path.read_text().splitlines():
        m = NCCL_TS.match(line)
        if m:
            last = f"{m[2]}T{m[3]}.{m[4].ljust(9, '0')}"
            own = f"[{m[2]} {m[3]}] " if keep_nccl == "seconds" else ""
            line = f"{m[1] or ''}{own}{line[m.end() :]}"
        out.append(f"{last}{zone} {tag}{line}")
    assert last != "2025-06-02T00:00:00.000000000", "no NCCL timestamps to move"
    dest = path.with_name("collected.log")
    dest.write_text("\n".join(out) + "\n")
    return dest


def late_ranks(path: Path):
    return [f for f in LatencyOutlier().check(load_job([str(path)])) if f.kind == Kind.LATENCY_OUTLIER]


@pytest.mark.parametrize(("version", "layout"), [("2.26", "interleaved"), ("2.27", "srun")])
def test_slow_rank_is_named_from_nccl_timestamps(tmp_path, version, layout):
    log, fault = slow_rank(tmp_path, version, layout)
    (finding,) = late_ranks(log)
    assert list(finding.ranks) == fault["ranks"] and "timestamp clock" in finding.title


@pytest.mark.parametrize(
    ("version", "layout", "zone", "tag"),
    [
        ("2.26", "interleaved", "Z", "stdout F "),  # CRI log file
        ("2.27", "srun", "+00:00", ""),  # an offset in place of Z: its digits are not the fraction's
        ("2.27", "torchrun", "+00:00", "stderr F "),
    ],
)
def test_slow_rank_is_named_from_collector_timestamps_alone(tmp_path, version, layout, zone, tag):
    log, fault = slow_rank(tmp_path, version, layout)
    (finding,) = late_ranks(collected(log, zone=zone, tag=tag))
    assert list(finding.ranks) == fault["ranks"] and "collector clock" in finding.title
    assert finding.comm == fault["comm"]


@pytest.mark.parametrize(("version", "layout"), [("2.26", "srun"), ("2.27", "interleaved")])
def test_slow_rank_is_named_from_the_collector_when_nccl_prints_whole_seconds(tmp_path, version, layout):
    # NCCL's default NCCL_DEBUG_TIMESTAMP_FORMAT has whole seconds: the collector's nanoseconds are finer.
    log, fault = slow_rank(tmp_path, version, layout)
    (finding,) = late_ranks(collected(log, keep_nccl="seconds"))
    assert list(finding.ranks) == fault["ranks"] and "collector clock" in finding.title


def stepped_job(tmp_path: Path, late_ms: float, *, period_ms: float = 2000.0, collector: bool = False):
    """8 ranks on 2 hosts, 12 steps of 4 AllReduces 10 ms apart, ``period_ms`` from step to step; rank 5
    enters every call ``late_ms`` after the others, who differ by a little jitter."""
    comm, n, lines = "0x1a2b3c4d5e6f7081", 8, []

    def stamp(ms: float, text: str) -> str:
        sec, frac = divmod(ms / 1000.0, 1)
        clock = f"14:{12 + int(sec) // 60:02d}:{int(sec) % 60:02d}.{round(frac * 1e6):06d}"
        return f"2025-06-02T{clock}000Z {text}" if collector else f"[2025-06-02 {clock}] {text}"

    for rank in range(n):
        host, dev, pid = f"gpu-{rank // 4}", rank % 4, 7000 + rank
        init = (
            f"{host}:{pid}:{pid + 9} [{dev}] NCCL INFO ncclCommInitRankConfig comm 0x55{rank:02d}00aa rank "
            f"{rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000 commId {comm}"
        )
        lines += [stamp(0, f"{init} - Init START"), stamp(10, f"{init} - Init COMPLETE")]
    for call in range(48):
        step, within = divmod(call, 4)
        for rank in range(n):
            host, dev, pid = f"gpu-{rank // 4}", rank % 4, 7000 + rank
            jitter = ((rank * 7 + call * 3) % 5) * 0.4  # up to 1.6 ms
            t = 1000 + period_ms * step + 10 * within + jitter + (late_ms if rank == 5 else 0.0)
            lines.append(
                stamp(
                    t,
                    f"{host}:{pid}:{pid} [{dev}] NCCL INFO AllReduce: opCount {call:x} sendbuff 0x7f00 "
                    f"recvbuff 0x7f00 count 1024 datatype 7 op 0 root 0 comm 0x55{rank:02d}00aa "
                    f"[nranks={n}] stream 0x5600",
                )
            )
    return job_of(tmp_path, lines)


@pytest.mark.parametrize("collector", [False, True])
def test_a_one_percent_skew_is_healthy(tmp_path, collector):
    job = stepped_job(tmp_path, late_ms=20.0, collector=collector)  # 1 % of a 2 s step
    assert list(LatencyOutlier().check(job)) == []


@pytest.mark.parametrize("collector", [False, True])
def test_a_quarter_second_late_rank_is_named_at_the_same_step_time(tmp_path, collector):
    job = stepped_job(tmp_path, late_ms=250.0, collector=collector)
    (finding,) = LatencyOutlier().check(job)
    assert finding.kind == Kind.LATENCY_OUTLIER and finding.ranks == (5,) and finding.hosts == ("gpu-1",)
