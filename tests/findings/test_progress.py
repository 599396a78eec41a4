"""LS101 rank-behind's screen of communicators, and the members' last calls it reads."""

from __future__ import annotations

import re

import pytest
from builders import job_of, simulate, two_gpu_processes
from conftest import CAPTURED, FIXTURES

from nccl_logsift.findings.progress.rank_behind import (
    RankBehind,
    gap_of,
    lagging_communicators,
    waiting_ranks,
)
from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.positions import comm_progress, members_last_calls


def jobs(tmp_path):
    yield from (load_job([str(path)]) for path in sorted(FIXTURES.glob("*.log")))
    for scenario in ("rank-stall", "healthy"):
        yield simulate(tmp_path, scenario, ranks=8, nodes=2)[0]
    # Half the world (a data-parallel replica) runs out of data: with Destroy lines (2.21), and without
    # them, where the half ahead timed out and the half behind did not (2.30).
    for version in ("2.21", "2.30"):
        yield simulate(tmp_path, "uneven-data", ranks=16, nodes=2, nccl_version=version, seed=1)[0]


@pytest.mark.parametrize("failing", [False, True])
def test_rank_behind_screens_in_exactly_the_communicators_it_reports(tmp_path, failing):
    reported = screened = 0
    for job in jobs(tmp_path):
        waiting = waiting_ranks(job)
        lagging = lagging_communicators(job, failing, waiting)
        found = {p.uid for p in comm_progress(job) if gap_of(p, failing, waiting) is not None}
        assert lagging == found
        reported, screened = reported + len(found), screened + len(comm_progress(job))
    assert 0 < reported < screened


def test_comm_progress_holds_the_members_last_calls_by_communicator(tmp_path):
    job = load_job([str(FIXTURES / "rank_stall_8ranks.log")])
    progress = comm_progress(job)
    last = members_last_calls(job)
    assert [p.uid for p in progress] == last["comm_uid"].unique(maintain_order=True).to_list()
    assert sum(p.last.height for p in progress) == last.height


def test_rank_behind_names_the_gpu_of_a_process_that_drives_several(tmp_path):
    # Rank 3 is pid 20's second GPU; its calls are logged with the device its thread set last, like rank 2's.
    job = job_of(tmp_path, two_gpu_processes(stalled_rank=3, calls=40))
    (finding,) = RankBehind().check(job)
    assert finding.ranks == (3,) and finding.hosts == ("n1",)
    assert "rank 3 (n1, pid 20, GPU 1)" in finding.title


# ---------------------------------------------------------------------------------------------- LS102
def mismatch_log(tmp_path, *, ranks: int, version: str, layout: str, seed: int):
    from nccl_logsift.simulate import Options, write

    out, truth = tmp_path / "mismatch.log", tmp_path / "mismatch.json"
    options = Options(
        scenario="collective-mismatch",
        ranks=ranks,
        nccl_version=version,
        layout=layout,
        seed=seed,
        noise=False,
    )
    write(options, str(out), str(truth))
    return out


@pytest.mark.parametrize(
    "version, layout, seed", [("2.21", "srun", 0), ("2.21", "srun", 1), ("2.27", "torchrun", 4)]
)
def test_ls102_two_rank_mismatch_names_both_sides_and_blames_neither(tmp_path, version, layout, seed):
    """With two ranks there is no majority: whichever rank the simulator made diverge, both are named."""
    from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch

    job = load_job([str(mismatch_log(tmp_path, ranks=2, version=version, layout=layout, seed=seed))])
    finding = next(f for f in CollectiveMismatch().check(job))
    assert finding.ranks == (0, 1) and "cannot say which side is wrong" in finding.title
    assert finding.severity.label == "critical"


@pytest.mark.parametrize("version", ["2.21", "2.27"])
def test_ls102_mismatch_in_a_log_of_nccl_lines_only_that_stops_there_is_critical(tmp_path, version):
    """NCCL_DEBUG_FILE output of a job killed while it hung (no watchdog, no abort, no exit report): the
    communicator's calls stop right after the divergence, so it hung."""
    from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch

    out = mismatch_log(tmp_path, ranks=8, version=version, layout="interleaved", seed=3)
    lines = [line for line in out.read_text().splitlines() if " NCCL INFO " in line and "Abort" not in line]
    out.write_text("\n".join(lines) + "\n")
    finding = next(f for f in CollectiveMismatch().check(load_job([str(out)])))
    assert finding.severity.label == "critical" and "no sign of a hang" not in finding.title


def test_ls102_mismatch_on_a_communicator_that_was_torn_down_is_only_a_warning(tmp_path):
    """NCCL lines only, and every process destroyed the communicator afterwards: the job went on past the
    divergence, so nothing shows it hung (a line lost to interleaving looks the same)."""
    from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch

    out = mismatch_log(tmp_path, ranks=4, version="2.27", layout="interleaved", seed=3)
    lines = [line for line in out.read_text().splitlines() if " NCCL INFO " in line and "Abort" not in line]
    init = re.compile(
        r"^(\S+ \[\d+\] NCCL INFO )ncclCommInit\w* (comm 0x[0-9a-f]+ rank \d+ nranks \d+ "
        r"cudaDev \d+) nvmlDev \d+ (busId [0-9a-f]+) .* - Init COMPLETE$"
    )
    inits = [m for line in lines if (m := init.match(line))]
    lines += [f"{m.group(1)}{m.group(2)} {m.group(3)} - Destroy COMPLETE" for m in inits]
    out.write_text("\n".join(lines) + "\n")
    finding = next(f for f in CollectiveMismatch().check(load_job([str(out)])))
    assert finding.severity.label == "warning" and "no sign of a hang" in finding.title


def nccl_only_mismatch_lines(tmp_path, banner_version: str) -> list[str]:
    """The NCCL INFO lines of an interleaved 4-rank mismatch log with no teardown line, its banner saying
    ``banner_version``."""
    out = mismatch_log(tmp_path, ranks=4, version="2.27", layout="interleaved", seed=3)
    lines = [line for line in out.read_text().splitlines() if " NCCL INFO " in line and "Abort" not in line]
    return [re.sub(r"NCCL version 2\.27\.\d+", f"NCCL version {banner_version}", line) for line in lines]


def test_ls102_mismatch_in_one_stream_without_teardown_lines_of_nccl_2_30_is_only_a_warning(tmp_path):
    """From NCCL 2.30.3 Destroy/Abort lines need DESTROY in NCCL_DEBUG_SUBSYS: a run that ended normally shows
    none either, so calls that stop near the divergence do not show a hang when a line can have been lost in
    the interleaved output (the same log with a 2.27 banner is critical, above)."""
    from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch

    out = tmp_path / "one-stream.log"
    out.write_text("\n".join(nccl_only_mismatch_lines(tmp_path, "2.30.7")) + "\n")
    finding = next(f for f in CollectiveMismatch().check(load_job([str(out)])))
    assert finding.severity.label == "warning" and "no sign of a hang" in finding.title


def test_ls102_mismatch_in_per_process_files_without_teardown_lines_of_nccl_2_30_stays_critical(tmp_path):
    """One NCCL_DEBUG_FILE per process: no line can be lost to interleaving, so the divergence is real and the
    calls stopping right after it show the hang, teardown lines or not."""
    from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch

    by_process: dict[str, list[str]] = {}
    for line in nccl_only_mismatch_lines(tmp_path, "2.30.7"):
        by_process.setdefault(line.split(" ", 1)[0].rsplit(":", 1)[0], []).append(line)
    paths = []
    for i, lines in enumerate(by_process.values()):
        path = tmp_path / f"nccl.{i}.log"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    assert len(paths) == 4
    finding = next(f for f in CollectiveMismatch().check(load_job(paths)))
    assert finding.severity.label == "critical" and "no sign of a hang" not in finding.title


def test_a_rank_that_destroyed_its_communicator_left_it_and_the_destroy_line_is_the_evidence():
    # A real job (fixtures/captured): rank 2 stops after 8 of 12 steps, destroys its communicators, exits 0.
    job = load_job([str(CAPTURED / "early_exit")])
    (finding,) = RankBehind().check(job)
    assert finding.ranks == (2,) and "left communicator" in finding.title
    assert any("Destroy COMPLETE" in e.text for e in finding.evidence)
    assert "no stack to dump" in finding.advice


def test_a_stalled_rank_did_not_leave():
    (finding,) = RankBehind().check(load_job([str(FIXTURES / "rank_stall_8ranks.log")]))
    assert "never called" in finding.title and "py-spy dump" in finding.advice


def test_a_rank_stuck_in_its_data_loader_is_named_by_its_dump_signal_snapshot_though_it_later_caught_up():
    # A real 8-rank job (fixtures/captured/stall8), its console alone: rank 6 sleeps 90 s, the others time
    # out at work #6 after 15 s; rank 6 then wakes and enqueues up to #9 before it fails too. Its dump-signal
    # line, written when the others timed out, says it had enqueued only #5.
    job = load_job([str(CAPTURED / "stall8" / "console.log")])
    (finding,) = RankBehind().check(job)
    assert finding.ranks == (6,) and "never joined ALLREDUCE #6" in finding.title
    assert "7 rank(s) timed out waiting" in finding.title
