"""LS902 nccl-tests-failure: nccl-tests stopped on an NCCL or CUDA error (or its own timeout) on a rank."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.wording import names
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.failures import nccl_tests_failures
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.job import Job


class NcclTestsFailure(Rule):
    """nccl-tests stopped on an NCCL or CUDA error (or its own timeout) on a rank.

    What it means:
        A benchmark of nccl-tests (all_reduce_perf, …) checks every NCCL and CUDA call and stops at the first
        that fails, printing ``<host>: Test NCCL failure <file>:<line> '<error> / <ncclGetLastError>'`` (or
        ``Test CUDA failure``, ``Test timeout``), then one `` .. <host> pid <P>: Test failure <file>:<line>``
        per frame it returns through, and exits with code 3 (NCCL) or 2 (CUDA); mpirun then stops the job.

    Why it matters:
        The error line is the benchmark's own diagnosis: where it failed and NCCL's error string, with
        NCCL's last error message from 2.13 on (the socket, IB or CUDA call that failed). The exit reports of
        mpirun (or srun) that follow are its consequence.

    How it is detected:
        The failure lines of the ``nccltests`` table, whatever comes before the host name (an mpirun or srun
        label, a pdsh host, a timestamp). The rank comes from the launcher label of the line, else from the
        test's device list (``#  Rank 2 Group 0 Pid P on host``) through the pid of the ``.. host pid P``
        traces when one process of that host failed, else from mpirun's ``Process name: [[jobid,1],N]`` block
        (the first process to exit non-zero) when the device list puts that rank on the same host. Findings
        are grouped by error string.

    Example:
        ``gpu-e08: Test NCCL failure common.cu:1012 'unhandled system error (run with NCCL_DEBUG=INFO for
        details) / socketPollConnect: Connect to 10.4.0.7<50313> returned 113(No route to host)'`` followed by
        ``mpirun detected that one or more processes exited with non-zero status`` naming ``[[41233,1],2]``.

    What to do:
        Read the last error: a connect or IB error points at the network between that host and the peer it
        names (interfaces, routes, firewalls, NCCL_SOCKET_IFNAME / NCCL_IB_HCA), a CUDA error at that GPU.
        Rerun the test with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on the failing hosts to see the calls
        before it.
    """

    code = "LS902"
    name = "nccl-tests-failure"
    kind = Kind.NCCL_ERROR
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        rows = nccl_tests_failures(job)
        if rows.is_empty():
            return
        event = pl.col("event")
        kind = (
            pl.when(event == "test_cuda_failure")
            .then(pl.lit("CUDA"))
            .when(event == "test_timeout")
            .then(pl.lit("timeout"))
            .otherwise(pl.lit("NCCL"))
        )
        rows = rows.with_columns(what=kind, error=pl.col("test_error").fill_null("its -T limit passed"))
        for _, group in rows.group_by("what", "error", maintain_order=True):
            first = group.row(0, named=True)
            ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
            hosts = sorted({nccl_host(h) for h in group["test_host"].drop_nulls()})
            on = f" ({', '.join(hosts)})" if hosts and not job.hosts_of(ranks) else ""
            who = f"host(s) {', '.join(hosts)}" if hosts else "a rank (not identified)"
            if ranks:
                who = names(job, ranks) + on
            where = f" at {first['test_src']}" if first.get("test_src") else ""
            last = f": {first['last_error']}" if first.get("last_error") else ""
            if first["what"] == "timeout":
                title = f"nccl-tests timed out on {who}{where} ({first['error']})"
            else:
                title = f"nccl-tests stopped on an {first['what']} error on {who}{where}: '{first['error']}'"
                title += last
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group).head(4),
                ranks=ranks,
                hosts=hosts,
                advice=self._advice(first),
            )

    @staticmethod
    def _advice(row: dict) -> str:
        text = f"{row.get('error') or ''} {row.get('last_error') or ''}"
        if row["what"] == "CUDA" or "cuda" in text.lower():
            return "Check that GPU on that host (nvidia-smi, dmesg for Xid errors) and its free memory."
        if any(k in text for k in ("Connect", "connect", "socket", "NET/IB", "remote process", "network")):
            return (
                "Check the network between that host and the peer the error names: interfaces and routes "
                "(NCCL_SOCKET_IFNAME, NCCL_IB_HCA), firewalls, link state; rerun with NCCL_DEBUG=INFO "
                "NCCL_DEBUG_SUBSYS=INIT,NET."
            )
        return (
            "Rerun the test with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV to see the NCCL calls "
            "before the failure."
        )
