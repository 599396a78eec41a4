"""``logsift ranks``: the rank-identity table on the terminal and as JSON."""

import json

from conftest import FIXTURES


def test_ranks_json_names_every_rank_with_its_process_and_source(run_cli):
    result = run_cli("ranks", str(FIXTURES / "segfault_4ranks.log"), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "nccl-logsift/ranks/v1"
    rows = doc["ranks"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert {r["rank_source"] for r in rows} == {"nccl_init"}
    assert rows[2]["pid"] == 2346374 and rows[2]["cuda_dev"] == 2  # the rank the segfault killed
    assert all(r["communicators"][0]["nranks"] == 4 for r in rows)


def test_ranks_text_neutralises_log_text(run_cli, tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "evil\x1b[31mhost:100:101 [0] NCCL INFO comm 0x7f0010 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 1000 "
        "commId 0xabc - Init COMPLETE\n"
    )
    result = run_cli("ranks", str(log), "--width", "120")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output


def test_ranks_of_a_missing_path_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "ranks", str(tmp_path / "nope.log")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "nope.log" in proc.stderr
