"""Numbers too large for their column: read as null, counted, and every finding and view still runs."""

from __future__ import annotations

import json
import re

import pytest

INIT = (
    "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x5555cf86c9b0 rank {rank} nranks 2 cudaDev 0 nvmlDev 0 "
    "busId 3000 commId 0x85061f05012e40c6 - Init COMPLETE"
)


def coll(op: str, opcount: str, nranks: str = "2") -> str:
    return (
        f"h:1:1 [0] NCCL INFO {op}: opCount {opcount} sendbuff 0x7f0d00000000 recvbuff 0x7f0d00000000 "
        f"count 1 datatype 4 op 0 root 0 comm 0x5555cf86c9b0 [nranks={nranks}] stream 0x5555cf872650"
    )


# Each log, and how many of its values do not fit their column.
LOGS = {
    "pid_beyond_int64": (
        ["h:99999999999999999999:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"],
        1,
    ),
    "opcount_beyond_int64": (
        [INIT.format(rank=0), coll("AllGather", "8000000000000000"), coll("Broadcast", "8000000000000000")],
        2,
    ),
    "opcount_all_ones": (
        [INIT.format(rank=0), coll("AllGather", "ffffffffffffffff"), coll("Broadcast", "ffffffffffffffff")],
        2,
    ),
    "opcount_of_19_digits": (
        [
            INIT.format(rank=0),
            coll("AllGather", "123456789abcdef0123"),
            coll("Broadcast", "123456789abcdef0123"),
        ],
        2,
    ),
    "nranks_beyond_int64": ([INIT.format(rank=0), coll("AllGather", "0", "99999999999999999999")], 1),
    "rank_beyond_int64": (
        [INIT.format(rank=9223372036854775808), coll("AllGather", "0"), coll("Broadcast", "1")],
        1,
    ),
}


@pytest.fixture
def log(tmp_path, request):
    lines, _ = LOGS[request.param]
    path = tmp_path / f"{request.param}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("log", list(LOGS), indirect=True)
def test_analyze_json_reads_a_number_beyond_its_column_as_null(run_cli, log):
    result = run_cli("analyze", str(log), "--format", "json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["inputs"][0]["lines"] == len(LOGS[log.stem][0])


@pytest.mark.parametrize("log", list(LOGS), indirect=True)
def test_analyze_html_draws_a_log_with_a_number_beyond_its_column(run_cli, log, tmp_path):
    out = tmp_path / "page.html"
    result = run_cli("analyze", str(log), "--format", "html", "-o", str(out))
    assert result.exit_code == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


@pytest.mark.parametrize("log", list(LOGS), indirect=True)
def test_analyze_text_notes_how_many_numbers_did_not_fit(run_cli, log):
    result = run_cli("analyze", str(log))
    assert result.exit_code == 0
    assert f"{LOGS[log.stem][1]} number(s) too large for their column" in result.output


@pytest.mark.parametrize("log", list(LOGS), indirect=True)
def test_parse_manifest_counts_the_numbers_that_did_not_fit(run_cli, log, tmp_path):
    out = tmp_path / "tables"
    assert run_cli("parse", str(log), "-o", str(out)).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["unparsed"]["values_out_of_range"] == LOGS[log.stem][1]
    assert manifest["inputs"][0]["lines"] == len(LOGS[log.stem][0])


def test_a_number_that_fits_is_not_counted(run_cli, tmp_path):
    path = tmp_path / "fits.log"
    path.write_text("\n".join([INIT.format(rank=0), coll("AllGather", "7fffffffffffffff", "2")]) + "\n")
    out = tmp_path / "tables"
    assert run_cli("parse", str(path), "-o", str(out)).exit_code == 0
    assert json.loads((out / "manifest.json").read_text())["unparsed"]["values_out_of_range"] == 0


def test_html_of_a_timed_log_whose_every_rank_is_beyond_int64_has_no_timeline_and_no_error(run_cli, tmp_path):
    # slow_rank_4ranks.log carries NCCL 2.26+ timestamps: the timeline is drawn, from ranks that are all null.
    from conftest import FIXTURES

    text = (FIXTURES / "slow_rank_4ranks.log").read_text()
    path = tmp_path / "ranks.log"
    path.write_text(re.sub(r"( rank )\d+", r"\g<1>99999999999999999999", text))
    out = tmp_path / "page.html"
    result = run_cli("analyze", str(path), "--format", "html", "-o", str(out))
    assert result.exit_code == 0
    assert "No timeline: no timed collective line could be placed on a rank." in out.read_text()


START = (
    "gpu-node-211:2702238:2702305 [0] NCCL INFO ncclCommInitRankConfig comm 0x5509e7ccfed0 rank 0 "
    "nranks {nranks} cudaDev 0 nvmlDev 0 busId 1b000 commId 0x7bbff3add302d34a - Init START"
)
# Sizes that fit 64 bits but no job has: the rules that list a world's silent ranks must not enumerate them.
HUGE = {
    "init_of_8e15_ranks": [START.format(nranks=8000000000000000)],
    "init_of_a_size_beyond_int64": [START.format(nranks=99999999999999999999)],
}


def _huge_torch_labels() -> list[str]:
    """collective_mismatch_4ranks.log with every PyTorch [rankN]: label naming rank 8e15 (the world size)."""
    from conftest import FIXTURES

    text = (FIXTURES / "collective_mismatch_4ranks.log").read_text()
    return re.sub(r"\[rank\d+", "[rank8000000000000000", text).splitlines()


HUGE["torch_labels_of_rank_8e15"] = _huge_torch_labels()
HUGE["slurm_task_range_of_8e15"] = ["srun: error: nid001207: tasks 0-8000000000000000: Terminated"]


def test_a_rank_beyond_int64_in_a_ring_and_a_task_list_is_null(run_cli, tmp_path):
    from conftest import FIXTURES

    text = (FIXTURES / "collective_mismatch_4ranks.log").read_text()
    text = re.sub(r"(Channel \d+/\d+ :)( \d+)+", r"\1 99999999999999999999 1", text)
    path = tmp_path / "ring.log"
    path.write_text(text + "srun: error: nid001207: tasks 99999999999999999999: Terminated\n")
    out = tmp_path / "page.html"
    result = run_cli("analyze", str(path), "--format", "html", "-o", str(out))
    assert result.exit_code == 0 and out.read_text().rstrip().endswith("</html>")


@pytest.mark.parametrize("name", list(HUGE))
def test_a_huge_size_or_rank_gives_an_answer_in_bounded_memory(tmp_path, name):
    # In a process of its own with 3 GB of address space: enumerating 8e15 ranks filled 24 GB before.
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    path = tmp_path / f"{name}.log"
    path.write_text("\n".join(HUGE[name]) + "\n")
    out = tmp_path / "page.html"

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    for fmt in ("json", "html"):
        command = [sys.executable, "-m", "nccl_logsift", "analyze", str(path), "--format", fmt]
        proc = subprocess.run(
            [*command, "-o", str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            preexec_fn=limited,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-1500:]
        assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr
    assert out.read_text().rstrip().endswith("</html>")
