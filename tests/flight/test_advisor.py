"""The next-run advice follows from what a job's input lacks, not from a fixed list."""

from __future__ import annotations

from pathlib import Path

from nccl_logsift.pipeline import analyze
from nccl_logsift.simulate import Options, write


def _settings(report) -> set[str]:
    return {a.setting for a in report.next_run}


def _init_only(tmp_path: Path) -> Path:
    """A job logged with NCCL_DEBUG_SUBSYS=INIT: the same job with its COLL lines left out."""
    full = tmp_path / "full.log"
    write(Options(scenario="rank-stall", ranks=4, seed=2, noise=False, nccl_version="2.27"), str(full))
    kept = [
        line
        for line in full.read_text().splitlines(keepends=True)
        if not (" NCCL INFO " in line and " opCount " in line)
    ]
    init_only = tmp_path / "init" / "job.log"
    init_only.parent.mkdir()
    init_only.write_text("".join(kept))
    return init_only


def test_advisor_differs_between_init_only_and_coll_with_timestamps(tmp_path):
    init_only = analyze([str(_init_only(tmp_path))])
    # slow-rank writes COLL lines with NCCL_DEBUG_TIMESTAMP_FORMAT timestamps on INFO lines.
    timed = tmp_path / "timed.log"
    write(Options(scenario="slow-rank", ranks=4, seed=2, noise=False, nccl_version="2.27"), str(timed))
    coll_timed = analyze([str(timed)])
    assert "NCCL_DEBUG_SUBSYS=INIT,COLL" in _settings(init_only)
    assert "NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO" in _settings(init_only)
    assert not {"NCCL_DEBUG_SUBSYS=INIT,COLL", "NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO"} & _settings(
        coll_timed
    )
    assert [a.missing for a in init_only.next_run] != [a.missing for a in coll_timed.next_run]


def test_advisor_per_process_files_need_no_debug_file_advice(tmp_path):
    out = tmp_path / "logs"
    write(Options(scenario="rank-stall", ranks=4, seed=1, layout="per-rank"), str(out))
    per_rank = analyze([str(out)])
    one = tmp_path / "one.log"
    write(Options(scenario="rank-stall", ranks=4, seed=1), str(one))
    interleaved = analyze([str(one)])
    assert "NCCL_DEBUG_FILE=/shared/logs/nccl.%h.%p" in _settings(interleaved)
    assert "NCCL_DEBUG_FILE=/shared/logs/nccl.%h.%p" not in _settings(per_rank)


def test_advisor_asks_for_dump_on_timeout_only_when_a_timeout_left_no_dump(tmp_path):
    # PyTorch 2.0 neither dumps on timeout by default nor prints dump signals.
    old = tmp_path / "old.log"
    write(Options(scenario="rank-stall", ranks=4, seed=1, nccl_version="2.18", torch_version="2.0"), str(old))
    log = tmp_path / "new" / "job.log"
    log.parent.mkdir()
    write(Options(scenario="rank-stall", ranks=4, seed=1), str(log), flight_dir=str(tmp_path / "new" / "fr"))
    on_timeout = lambda report: [
        a for a in report.next_run if a.setting.startswith("TORCH_FR_DUMP_ON_TIMEOUT=1")
    ]
    shared_prefix = lambda report: [
        a for a in report.next_run if a.setting.startswith("TORCH_FR_DUMP_TEMP_FILE=")
    ]
    no_signal = analyze([str(old)])
    signalled_lost = analyze([str(log)])  # its logs say ranks were asked to dump; the dumps are not here
    with_dumps = analyze([str(log.parent)])
    assert on_timeout(no_signal) and not shared_prefix(no_signal)
    assert shared_prefix(signalled_lost) and not on_timeout(signalled_lost)
    assert not on_timeout(with_dumps) and not shared_prefix(with_dumps)


def test_advisor_buffer_size_from_ops_per_step_when_the_ring_wrapped(tmp_path):
    log = tmp_path / "job.log"
    write(
        Options(scenario="rank-stall", ranks=4, seed=1),
        str(log),
        flight_dir=str(tmp_path / "fr"),
        flight_buffer=5,
    )
    small = [a for a in analyze([str(tmp_path)]).next_run if a.setting.startswith("TORCH_FR_BUFFER_SIZE=")]
    assert len(small) == 1 and "holds the last 5 ops but a step issues about 4" in small[0].why
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    write(
        Options(scenario="rank-stall", ranks=4, seed=1), str(roomy / "job.log"), flight_dir=str(roomy / "fr")
    )
    assert not [a for a in analyze([str(roomy)]).next_run if a.setting.startswith("TORCH_FR_BUFFER_SIZE=")]


def test_advisor_missing_dumps_ask_for_a_shared_dump_prefix(tmp_path):
    log = tmp_path / "job.log"
    write(Options(scenario="segfault", ranks=8, seed=0), str(log), flight_dir=str(tmp_path / "fr"))
    advice = analyze([str(tmp_path)]).next_run
    assert any(a.setting.startswith("TORCH_FR_DUMP_TEMP_FILE=") for a in advice)
