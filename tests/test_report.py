"""The report's job summary."""

from builders import job_of

from nccl_logsift.report import summarize_job


def test_summarize_job_names_hosts_of_several_nccl_lines_and_not_the_tail_of_a_torn_line(tmp_path):
    lines = [
        "node-a:1001:1001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
        "node-a:1001:1001 [0] NCCL INFO Using network IB",
        "node-b:2001:2001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
        "node-b:2001:2001 [0] NCCL INFO Using network IB",
        "e0365:2279249:2279249 [0] NCCL INFO Using network IB",  # the tail of a line torn by another writer
    ]
    assert summarize_job(job_of(tmp_path, lines)).hosts == ("node-a", "node-b")


def test_summarize_job_lists_the_librarys_versions_not_rocr_nor_the_kernel(tmp_path):
    lines = [
        "mi300x-01:397:397 [0] NCCL INFO RCCL version : 2.22.3-HEAD:0fc5e8c",
        "mi300x-01:397:397 [0] NCCL INFO Kernel version: 5.15.0-113-generic",
        "mi300x-01:397:397 [0] NCCL INFO ROCr version 1.15",
        "NCCL version 2.18.1+cuda12.1",
    ]
    assert summarize_job(job_of(tmp_path, lines)).nccl_versions == ("2.18.1", "RCCL 2.22.3")
