"""LS601 latency-outlier: Some ranks are consistently late to their collectives, or a run moves data far
slower than its peers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.wording import names, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.failures import hang_evidence
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.timing import arrival_times

MIN_ALIGNED = 5  # calls a rank must share with its peers before it can be called late
MIN_LATE_SHARE = 0.5  # ... and the share of them it must be late for
FLOOR_MS = 5.0  # never call a lag below this late (scheduling noise)
HUGE_LAG_MS = 1000.0  # a rank a second or more behind at every call, in a job that failed: error
MAD_SCALE = 1.4826  # MAD of a normal distribution -> standard deviation
STEP_TOLERANCE = 0.03  # a lag under 3 % of the step time is skew a healthy job has (1 % is common)
STEP_QUANTILE = 0.9  # the step time: this quantile of the gaps between consecutive calls (the loop's big one)
BANDWIDTH_BYTES = 1 << 20  # nccl-tests sizes from here on measure bandwidth, below mostly latency
SLOW_RATIO = 0.5  # a run below half its peers' bus bandwidth is slow
VERY_SLOW_RATIO = 0.2  # below a fifth: error


class LatencyOutlier(Rule):
    """Some ranks are consistently late to their collectives, or a run moves data far slower than its peers.

    What it means:
        The listed ranks enter the same collectives later than their peers, call after call, by a margin
        well above the normal jitter; or an nccl-tests run reaches a bus bandwidth far below other runs of
        the same test at the same sizes. The job still makes progress: this is a straggler, not a hang.

    Why it matters:
        A collective finishes when its last member arrives, so one late rank slows every step of the whole
        job by its lag, and a lag that grows can end in a watchdog timeout. Stragglers come from a slow or
        throttled GPU, a busy CPU or data loader on one host, a noisy neighbour, or a degraded link; a low
        nccl-tests bandwidth points at the fabric, the topology or the NCCL configuration of that run.

    How it is detected:
        COLL lines are aligned across ranks by communicator uid and position (ordinal). Arrival times come
        from NCCL 2.26+ line timestamps, the collector's prefix (docker, kubectl; the finer of the two
        when lines have both) or, for TRACE logs, the per-process ``tms`` aligned on the first shared call
        (differences only). For every call the lag of a rank is its time minus the median of the members;
        a rank is late when its median lag exceeds 5 ms (and twice the clock resolution), 3 % of the step
        time (the 90th percentile of the gaps between consecutive calls: a 1 % skew is healthy) and three
        robust standard deviations (1.4826 × MAD) of all lags, is late in at least half of at least five
        shared calls, and is a minority. For nccl-tests, result rows of runs with the same test and device
        count are compared size by size above 1 MiB; a run below half the median of the others is slow.
        Warning; error when the lag is a second or more in a job that failed or hung (a watchdog, an abort, a
        WARN, a failed exit: a job that completed has no root cause), or the bandwidth below a fifth.

    Example:
        ``[2025-06-02 14:12:55.218200] host:1062793:1062793 [3] NCCL INFO AllReduce: opCount 3 …`` while
        ranks 0–2 logged the same call at ``14:12:55.096415``, in 12 of 16 calls: rank 3 is ~122 ms late.

    What to do:
        Look at what the late rank does between collectives: its data loader (CPU, I/O), host contention,
        GPU clocks and throttling (``nvidia-smi -q -d PERFORMANCE``), and its node's network links. If all
        ranks of one host are late by the same amount, compare the hosts' clocks (NTP) before blaming the
        host. For a slow nccl-tests run, compare its transports and settings with the fast run (GPUDirect
        RDMA, sockets, channel counts) and test the links of its nodes pair by pair.
    """

    code = "LS601"
    name = "latency-outlier"
    kind = Kind.LATENCY_OUTLIER
    severity = Severity.WARNING

    def check(self, job: Job) -> Iterator[Finding]:
        yield from self._late_ranks(job)
        yield from self._slow_runs(job)

    # -------------------------------------------------------------------------------------- late ranks
    def _late_ranks(self, job: Job) -> Iterator[Finding]:
        times = arrival_times(job)
        if times.is_empty():
            return
        # One row per rank and call, the first line that logged it; rows in line order from here on, so the
        # communicators, the worst calls and their peers are taken in the same order on every run.
        times = (
            times.filter(pl.col("job_rank").is_not_null())
            .sort("source_id", "line_no", "part")
            .unique(["comm_uid", "ordinal", "job_rank"], keep="first", maintain_order=True)
        )
        per_call = times.group_by("comm_uid", "ordinal").agg(
            n=pl.len(), med=pl.col("t_ms").median(), total=pl.col("t_ms").sum()
        )
        times = times.join(
            per_call.filter(pl.col("n") >= 2), on=["comm_uid", "ordinal"], how="inner", maintain_order="left"
        )
        # Two members: the other's time; more: the median of all members.
        centre = pl.when(pl.col("n") == 2).then(pl.col("total") - pl.col("t_ms")).otherwise(pl.col("med"))
        times = times.with_columns(lag=pl.col("t_ms") - centre)
        reported: list[tuple[frozenset, Finding, int]] = []
        for (uid,), calls in times.group_by("comm_uid", maintain_order=True):
            finding = self._comm(job, uid, calls)
            if finding is None:
                continue
            key = frozenset(finding.ranks)
            aligned = calls["ordinal"].n_unique()
            same = next((i for i, (k, _, _) in enumerate(reported) if k == key), None)
            if same is None:
                reported.append((key, finding, aligned))
            elif aligned > reported[same][2]:
                reported[same] = (key, finding, aligned)
        for _, finding, _ in reported:
            yield finding

    def _comm(self, job: Job, uid: str, calls: pl.DataFrame) -> Finding | None:
        resolution = float(calls["res_ms"].max() or 0.0)
        mad = float((calls["lag"] - calls["lag"].median()).abs().median() or 0.0)
        # The step: within a step the calls follow each other closely, between steps comes the compute; the
        # upper quantile of the gaps between the calls' centres picks the latter (or less, never more).
        gaps = (
            calls.group_by("ordinal")
            .agg(centre=pl.col("t_ms").median())
            .sort("ordinal")
            .select(pl.col("centre").diff().clip(lower_bound=0.0).quantile(STEP_QUANTILE))
            .item()
        )
        step = float(gaps or 0.0)
        threshold = max(FLOOR_MS, 2 * resolution, 3 * MAD_SCALE * mad, STEP_TOLERANCE * step)
        members = calls["job_rank"].n_unique()
        stats = calls.group_by("job_rank").agg(
            calls=pl.len(),
            median_lag=pl.col("lag").median(),
            late=(pl.col("lag") > threshold).mean(),
            host=pl.col("host").first(),
        )  # rows of a rank in line order: first is its first line's host
        late = stats.filter(
            (pl.col("calls") >= MIN_ALIGNED)
            & (pl.col("median_lag") > threshold)
            & (pl.col("late") >= MIN_LATE_SHARE)
        )
        if late.is_empty() or late.height * 2 >= members:
            return None
        ranks = sorted(int(r) for r in late["job_rank"])
        lag = float(late["median_lag"].median())
        share = f"{int(late['late'].min() * 100)}%"
        clock = calls["clock"][0]
        aligned = calls["ordinal"].n_unique()
        hosts = sorted(set(late["host"].drop_nulls()))
        title = (
            f"{names(job, ranks) if len(ranks) <= 3 else f'{len(ranks)} ranks ({ranks_text(ranks)})'} "
            f"arrive{'s' if len(ranks) == 1 else ''} about {_ms(lag)} after the median of the "
            f"{members} member(s) of communicator {uid}, in at least {share} of {aligned} aligned calls "
            f"(noise threshold {_ms(threshold)}; {clock} clock): slow but progressing"
        )
        if clock != "tms" and calls["host"].n_unique() > 1:
            whole = [
                h for h in hosts if set(calls.filter(pl.col("host") == h)["job_rank"].unique()) <= set(ranks)
            ]
            if whole:
                title += (
                    f"; every rank of {', '.join(whole)} lags alike, which clock skew between hosts would "
                    "also explain"
                )
        worst = (
            calls.filter(pl.col("job_rank").is_in(ranks))
            .sort("lag", descending=True, maintain_order=True)
            .head(2)
        )
        peers = (
            calls.join(worst.select("ordinal"), on="ordinal", maintain_order="left")
            .filter(~pl.col("job_rank").is_in(ranks))
            .head(2)
        )
        op = (
            worst["op"].mode().sort(nulls_last=True).first()
            if "op" in worst.columns and worst["op"].drop_nulls().len()
            else None
        )
        return self.finding(
            job,
            title,
            evidence_rows=pl.concat([rows_of(worst), rows_of(peers)]),
            ranks=ranks,
            hosts=hosts,
            # A straggler slows a job that goes on: degraded. Seconds behind in a job that failed or hung
            # is a failure's likely start.
            severity=Severity.ERROR if lag >= HUGE_LAG_MS and hang_evidence(job) else Severity.WARNING,
            comm=uid,
            op=op,
            advice=(
                "Profile what the late rank does between collectives (py-spy on its pid, data loader and "
                "I/O, "
                "CPU contention, `nvidia-smi -q -d PERFORMANCE` for throttling); compare host clocks (NTP) "
                "if a whole host is late by the same amount."
            ),
        )

    # -------------------------------------------------------------------------------------- nccl-tests
    def _slow_runs(self, job: Job) -> Iterator[Finding]:
        runs = nccltests_runs(job)
        if runs.is_empty():
            return
        large = runs.filter(pl.col("size") >= BANDWIDTH_BYTES)
        for run, group in large.group_by("run", maintain_order=True):
            run = run[0]
            mine = group.select("test_name", "ndev", "dtype", "redop", "size", "busbw")
            peers = large.filter(pl.col("run") != run).join(
                mine.select("test_name", "ndev", "dtype", "redop", "size"),
                on=["test_name", "ndev", "dtype", "redop", "size"],
                how="semi",
                nulls_equal=True,
            )
            if peers.is_empty():
                continue
            others = peers.group_by("size").agg(peer=pl.col("busbw").median(), runs=pl.col("run").n_unique())
            joined = mine.join(others, on="size").filter(pl.col("peer") > 0)
            if joined.height < 3:
                continue
            joined = joined.with_columns(ratio=pl.col("busbw") / pl.col("peer"))
            ratio = float(joined["ratio"].median())
            slow_share = float((joined["ratio"] < SLOW_RATIO).mean())
            if ratio >= SLOW_RATIO or slow_share < 2 / 3:
                continue
            info = group.row(0, named=True)
            peer_runs = peers["run"].unique().to_list()
            peer_files = sorted({self._where(job, r, runs) for r in peer_runs})
            ranks = (
                sorted({int(r) for r in group["ranks"].explode().drop_nulls()})
                if "ranks" in group.columns
                else []
            )
            title = (
                f"nccl-tests {info['test_name'] or 'run'} in {self._where(job, run, runs)} reaches "
                f"{joined['busbw'].median():.3g} "
                f"GB/s bus bandwidth at sizes ≥ 1 MiB, {ratio:.0%} of the {joined['peer'].median():.3g} GB/s "
                "of "
                f"{len(peer_runs)} other run(s) of the same test ({', '.join(peer_files[:3])}), over "
                f"{joined.height} sizes"
            )
            evidence = group.sort("size", descending=True).head(4)
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(evidence),
                ranks=ranks,
                hosts=sorted(set(group["hosts"].explode().drop_nulls())) if "hosts" in group.columns else [],
                severity=Severity.ERROR if ratio < VERY_SLOW_RATIO else Severity.WARNING,
                advice=(
                    "Compare this run's NCCL INFO lines with the fast run's: transports (NET/Socket, missing "
                    "/GDRDMA, SHM), channel counts and settings; then test its nodes and links pair by pair."
                ),
            )

    @staticmethod
    def _where(job: Job, run: str, runs: pl.DataFrame) -> str:
        source, _, line = run.partition(":")
        path = job.paths[int(source)] if int(source) < len(job.paths) else "?"
        name = re.split(r"[\\/]", path)[-1]
        several = runs.filter(pl.col("run").str.starts_with(f"{source}:"))["run"].n_unique() > 1
        return f"{name} (run at line {line})" if several else name


def _ms(value: float) -> str:
    return f"{value / 1000:.3g} s" if abs(value) >= 1000 else f"{value:.3g} ms"


def nccltests_runs(job: Job) -> pl.DataFrame:
    """nccl-tests result rows, one per (run, size), with the run's test name, device count, ranks and hosts.

    A run starts at a ``# nThread … minBytes …`` parameters line; sizes come from the result row, or from
    the ``result_head`` row that precedes split ``result_timings`` rows (COLL lines interleaved). The bus
    bandwidth is the better of out-of-place and in-place.
    """
    t = job.table("nccltests")
    if t.is_empty() or "event" not in t.columns:
        return pl.DataFrame()
    t = t.sort("source_id", "line_no", "part").with_columns(
        run_no=(pl.col("event") == "parameters").cast(pl.Int32).cum_sum().over("source_id"),
    )
    firsts = (
        t.filter(pl.col("event") == "parameters")
        .group_by("source_id", "run_no")
        .agg(start=pl.col("line_no").min())
    )
    t = t.join(firsts, on=["source_id", "run_no"], how="left", maintain_order="left").with_columns(
        run=pl.format("{}:{}", pl.col("source_id"), pl.col("start").fill_null(0)),
        test_name=pl.col("test_name").forward_fill().over("source_id"),
    )
    ndev = (
        t.filter(pl.col("event") == "device")
        .group_by("run")
        .agg(
            ndev=pl.len(),
            hosts=pl.col("test_host").unique() if "test_host" in t.columns else pl.lit(None),
            pids=pl.col("test_pid").unique() if "test_pid" in t.columns else pl.lit(None),
        )
    )
    head = pl.col("event") == "result_head"
    rows = t.with_columns(
        *[
            pl.when(head | (pl.col("event") == "result"))
            .then(pl.col(c))
            .forward_fill()
            .over("source_id")
            .alias(c)
            for c in ("size", "dtype", "redop")
        ],
    ).filter(pl.col("event").is_in(["result", "result_timings"]) & pl.col("size").is_not_null())
    rows = rows.with_columns(busbw=pl.max_horizontal("oop_busbw", "ip_busbw")).filter(
        pl.col("busbw").is_not_null()
    )
    if rows.is_empty():
        return pl.DataFrame()
    per_size = rows.group_by("run", "test_name", "dtype", "redop", "size").agg(
        busbw=pl.col("busbw").max(),
        source_id=pl.col("source_id").first(),
        line_no=pl.col("line_no").first(),
        part=pl.col("part").first(),
    )
    per_size = per_size.join(ndev, on="run", how="left")
    if not job.processes.is_empty() and "pids" in per_size.columns:
        procs = job.processes.select(pl.col("pid"), "global_rank")
        pid_ranks = (
            per_size.select("run", "pids")
            .unique("run")
            .explode("pids")
            .rename({"pids": "pid"})
            .join(procs, on="pid", how="inner")
            .group_by("run")
            .agg(ranks=pl.col("global_rank").unique())
        )
        per_size = per_size.join(pid_ranks, on="run", how="left")
    # A total order: a run can hold several rows of one size (one per datatype or reduction).
    return per_size.sort("run", "size", "test_name", "dtype", "redop", nulls_last=True)
