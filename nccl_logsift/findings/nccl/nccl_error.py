"""LS901 nccl-error: NCCL reported an error that no more specific rule explains."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings import vocabulary
from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.wording import names, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.work import FAILURE_EVENTS

# ncclResult_t, grammar §7.
RESULT = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
    8: "ncclTimeout",
}
RESULT_MEANING = {
    1: "a CUDA call failed",
    2: "a system call or the network failed",
    3: "NCCL hit an internal error",
    4: "a call got an invalid argument",
    5: "NCCL was used incorrectly",
    6: "a remote process exited or the network failed",
    7: "an operation is still in progress",
    8: "an operation timed out",
}
# Kinds other rules report (grammars/nccl/errors.toml [kinds]); chains that follow them are theirs too.
OWNED = vocabulary.owned_elsewhere()
# Proxy / service-thread chatter that NCCL prints when communicators are torn down at the end of a run.
TEARDOWN_KINDS = vocabulary.with_role("teardown")
TEARDOWN_TEXT = r"\[Service thread\]|operation Close from rank|\[Proxy Service UDS\]"
CHAIN_WINDOW = 40  # lines: a chain belongs to a WARN of its process this close (printed before or after it)


def result_name(code: int | None) -> str:
    if code is None:
        return "?"
    return f"{RESULT.get(int(code), 'unknown result')} ({int(code)})"


def job_failed(job: Job) -> bool:
    """The job shows a failure other than NCCL WARNs: a watchdog, an abort, a dead process, an exception."""
    torch = job.table("torch")
    if (
        not torch.is_empty()
        and "event" in torch.columns
        and torch.filter(pl.col("event").is_in(FAILURE_EVENTS)).height
    ):
        return True
    comms = job.table("comms")
    if not comms.is_empty() and "what" in comms.columns and comms.filter(pl.col("what") == "Abort").height:
        return True
    apps = job.table("app_errors")
    if (
        not apps.is_empty()
        and "event" in apps.columns
        and apps.filter(
            pl.col("event").is_in(["nccl_error", "cpp_terminate", "cuda_oom", "cuda_error", "spawn_exited"])
        ).height
    ):
        return True
    tests = job.table("nccltests")
    if (
        not tests.is_empty()
        and "event" in tests.columns
        and tests.filter(
            pl.col("event").str.starts_with("test_") & pl.col("event").str.contains("fail|timeout")
        ).height
    ):
        return True
    exits = job.table("exits")
    if not exits.is_empty() and "event" in exits.columns:
        rows = assemble_exits(exits)
        if rows.filter(pl.col("signal").is_not_null() | (pl.col("exit_code").fill_null(0) != 0)).height:
            return True
        if exits.filter(pl.col("event").is_in(["slurm_cancelled", "slurm_node_failure"])).height:
            return True
    return False


def _messages(job: Job, rows: pl.DataFrame) -> pl.DataFrame:
    """Add ``message``: the line's text after ``NCCL WARN|INFO``, and ``sig``, the same with numbers
    blanked."""
    lines = (
        job.lines.select("source_id", "line_no", "part", "text")
        if not job.lines.is_empty()
        else pl.DataFrame(
            schema={"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8, "text": pl.String}
        )
    )
    out = rows.join(lines, on=["source_id", "line_no", "part"], how="left", maintain_order="left")
    message = pl.coalesce(
        pl.col("text").str.replace(r"^.*?NCCL (?:WARN|ATTN|INFO|TRACE) ", ""), pl.col("error_text")
    )
    return out.with_columns(message=message.str.strip_chars()).with_columns(
        sig=pl.col("message").str.replace_all(r"0x[0-9a-fA-F]+", "0x").str.replace_all(r"\d+", "N")
    )


class NcclError(Rule):
    """NCCL reported an error that no more specific rule explains.

    What it means:
        NCCL printed a WARN (or returned an error up its call chain, ``file:line -> N``) that is not an IB,
        socket, OFI, CUDA/memory, bootstrap, duplicate-GPU or transport-fallback problem — for example an
        internal error, invalid usage or argument, a proxy failure, ``ncclCommSetAsyncError`` putting a
        communicator in an error state, a version mismatch — or PyTorch raised the NCCL error to the
        application (``NCCL error in: …``, DistBackendError).

    Why it matters:
        An NCCL call that fails returns the error to the framework, which aborts the communicator; every
        collective that needed it then fails or hangs. The return code says which kind of failure it was
        (1 unhandled CUDA error, 2 system error, 3 internal error, 4 invalid argument, 5 invalid usage,
        6 remote error, 7 in progress, 8 timeout).

    How it is detected:
        WARN rows of the ``errors`` table outside the kinds other rules own, grouped by message (numbers
        blanked) across processes, one finding per distinct error; each ``file:line -> N`` chain is tied to
        the WARN of its process printed within 40 lines and gives that error's ncclResult_t. Chains with no
        WARN are grouped by their first call site and code. ``ncclCommSetAsyncError … sets state N`` and
        PyTorch's ``NCCL error in: file:line, <error>`` / ``ncclRemoteError: …`` lines (``app_errors``) are
        included. Proxy service-thread messages printed while communicators are torn down are info; WARNs of
        a job that shows no other failure, chains without a WARN, and errors that follow another rule's error
        on the same rank are warnings; the rest are errors.

    Example:
        ``proxy.cc:1488 NCCL WARN [Proxy Service 3] Failed to execute operation Connect from rank 3, retcode
        3`` followed by ``proxy.cc:1521 -> 3``, on ranks 3 and 7; or ``torch.distributed.DistBackendError:
        NCCL error in: …/ProcessGroupNCCL.cpp:2066, unhandled cuda error`` on rank 0.

    What to do:
        Read the WARN text and the return code: invalid usage or argument points at the application (group
        calls, communicator reuse after an error, mismatched arguments); internal errors at NCCL itself
        (upgrade, report with NCCL_DEBUG=INFO logs); system and remote errors at the host or a peer (check
        the other findings for that rank or its peers first). Re-run with NCCL_DEBUG=INFO and
        NCCL_DEBUG_SUBSYS=INIT,NET,ENV when the chain has no WARN.
    """

    code = "LS901"
    name = "nccl-error"
    kind = Kind.NCCL_ERROR
    severity = Severity.ERROR

    def check(self, job: Job) -> Iterator[Finding]:
        failed = job_failed(job)
        errors = job.table("errors")
        explained: set[int] = set()
        if not errors.is_empty() and "error_kind" in errors.columns:
            yield from self._from_errors(job, errors, failed)
            owned = with_job_rank(
                job, errors.filter(pl.col("error_kind").is_in(OWNED) & (pl.col("level") == "WARN"))
            )
            explained = {int(r) for r in owned["job_rank"].drop_nulls()}
        yield from self._from_pytorch(job, explained)

    # -------------------------------------------------------------------------------------- NCCL lines
    def _from_errors(self, job: Job, errors: pl.DataFrame, failed: bool) -> Iterator[Finding]:
        rows = _messages(job, with_job_rank(job, with_seq(errors)))
        kind = pl.col("error_kind")
        ofi = pl.col("message").fill_null("").str.starts_with("NET/OFI")
        ib_call = (
            (kind == "syscall") & pl.col("call").fill_null("").str.contains(r"^(?:ibv_|mlx5dv_|rdma_)")
            if "call" in rows.columns
            else pl.lit(False)
        )
        owned = kind.is_in(OWNED) | ofi | ib_call
        anchors = rows.filter(kind != "chain").with_columns(
            owned=owned,
            teardown=kind.is_in(TEARDOWN_KINDS)
            | ((kind == "proxy") & pl.col("message").fill_null("").str.contains(TEARDOWN_TEXT)),
            # INFO-level messages (probes, retries, dlsym) are NCCL saying it handled something.
            handled=(pl.col("level") != "WARN") & ~kind.is_in(["async_error", "fatal", "revoked"]),
        )
        warns = anchors.filter(~pl.col("handled"))
        chains = self._attach(rows.filter(kind == "chain"), anchors)
        # Processes whose errors another rule reports, and when they first did.
        explained = {
            (h, p): s
            for h, p, s in warns.filter(pl.col("owned"))
            .group_by("host", "pid")
            .agg(pl.col("seq").min())
            .iter_rows()
        }
        mine = warns.filter(~pl.col("owned"))
        teardown = mine.filter(pl.col("teardown"))
        if teardown.height:
            yield self._teardown(job, teardown, chains)
        for _, group in (
            mine.filter(~pl.col("teardown")).sort("seq").group_by("error_kind", "sig", maintain_order=True)
        ):
            yield self._warn_group(job, group, chains, failed, explained)
        loose = chains.filter(pl.col("warn_seq").is_null())
        if loose.height:
            # Call sites that also unwind another rule's error elsewhere in the job are its fallout too.
            theirs = chains.filter(
                pl.col("warn_seq").is_not_null()
                & (pl.col("warn_owned") | pl.col("warn_teardown") | pl.col("warn_handled"))
            )
            sites = set(
                theirs.select(pl.format("{}:{}>{}", "chain_file", "chain_line", "result_code"))
                .to_series()
                .to_list()
            )
            yield from self._chain_groups(job, loose, failed, sites)

    def _attach(self, chains: pl.DataFrame, warns: pl.DataFrame) -> pl.DataFrame:
        """Give every chain row the seq of the message it unwinds (``warn_seq``): a message of its process
        within CHAIN_WINDOW lines before it, else one just after it (some builds print the chain first), else
        the last one before it; with that message's flags (owned by another rule, teardown, handled)."""
        if chains.is_empty():
            return chains.with_columns(
                warn_seq=pl.lit(None, pl.Int64),
                warn_owned=pl.lit(None, pl.Boolean),
                warn_teardown=pl.lit(None, pl.Boolean),
                warn_handled=pl.lit(None, pl.Boolean),
            )
        keys = ["source_id", "host", "pid"]
        flags = ["owned", "teardown", "handled"]
        w = warns.select(
            *keys,
            pl.col("seq").alias("warn_seq"),
            pl.col("line_no").cast(pl.Int64).alias("warn_line"),
            *[pl.col(f).alias(f"warn_{f}") for f in flags],
        ).sort("warn_seq")
        c = chains.sort("seq")
        before = c.join_asof(
            w, left_on="seq", right_on="warn_seq", by=keys, strategy="backward", check_sortedness=False
        )
        renamed = {
            "warn_seq": "next_seq",
            "warn_line": "next_line",
            **{f"warn_{f}": f"next_{f}" for f in flags},
        }
        nxt = c.join_asof(
            w.rename(renamed),
            left_on="seq",
            right_on="next_seq",
            by=keys,
            strategy="forward",
            check_sortedness=False,
        ).select(*renamed.values())
        both = pl.concat([before, nxt], how="horizontal")
        line = pl.col("line_no").cast(pl.Int64)
        near_before = pl.col("warn_seq").is_not_null() & ((line - pl.col("warn_line")) <= CHAIN_WINDOW)
        near_after = pl.col("next_seq").is_not_null() & ((pl.col("next_line") - line) <= CHAIN_WINDOW)
        any_before = pl.col("warn_seq").is_not_null()

        def pick(name: str) -> pl.Expr:
            return (
                pl.when(near_before)
                .then(pl.col(f"warn_{name}"))
                .when(near_after)
                .then(pl.col(f"next_{name}"))
                .when(any_before)
                .then(pl.col(f"warn_{name}"))
            )

        return both.with_columns(warn_seq=pick("seq"), **{f"warn_{f}": pick(f) for f in flags}).drop(
            "warn_line", *renamed.values()
        )

    def _teardown(self, job: Job, rows: pl.DataFrame, chains: pl.DataFrame) -> Finding:
        ranks = sorted({int(r) for r in rows["job_rank"].drop_nulls()})
        hosts = sorted(set(rows["host"].drop_nulls()))
        kinds = rows.unique("sig", keep="first", maintain_order=True)["message"].head(2).to_list()
        who = f"{len(ranks)} rank(s) ({ranks_text(ranks)})" if ranks else f"{len(hosts)} host(s)"
        return self.finding(
            job,
            f"NCCL's proxy service threads logged {rows.height} error line(s) on {who} while communicators "
            "were "
            f"torn down ({'; '.join(repr(k) for k in kinds)}): shutdown noise unless the job failed then",
            evidence_rows=rows_of(rows).head(3),
            ranks=ranks,
            hosts=hosts,
            severity=Severity.INFO,
            advice="Harmless at the end of a run. If the job hung or failed at that time, look at the other "
            "findings first: these lines only say that a peer's proxy connection went away.",
        )

    def _warn_group(
        self, job: Job, group: pl.DataFrame, chains: pl.DataFrame, failed: bool, explained: dict[tuple, int]
    ) -> Finding:
        ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
        hosts = sorted(set(group["host"].drop_nulls()))
        first = group.row(0, named=True)
        message = first["message"] or first.get("error_text") or first["error_kind"]
        linked = chains.filter(pl.col("warn_seq").is_in(group["seq"].to_list()))
        codes = [int(c) for c in linked["result_code"].drop_nulls().to_list()]
        if first["error_kind"] == "async_error" and first.get("result_code") is not None:
            codes = [int(first["result_code"])] + codes
        code = codes[-1] if codes else None
        who = (
            names(job, ranks)
            if 0 < len(ranks) <= 3
            else f"{len(ranks)} rank(s) ({ranks_text(ranks)})"
            if ranks
            else ", ".join(hosts) or "an unknown process"
        )
        title = f"NCCL error on {who}: '{message}'"
        if group.height > 1:
            title += f" ({group.height} times)"
        if code is not None:
            title += f"; returned {result_name(code)}: {RESULT_MEANING.get(code, 'an error')}"
        followed = [
            (h, p)
            for h, p, s in group.select("host", "pid", "seq").iter_rows()
            if (h, p) in explained and explained[(h, p)] < s
        ]
        if followed and len(followed) == group.height:
            severity = Severity.WARNING
            title += (
                "; it follows an IB, socket, CUDA or bootstrap error of the same process (reported by its "
                "own rule)"
            )
        elif not failed:
            severity = Severity.WARNING
            title += "; the job shows no other sign of failure"
        else:
            severity = Severity.ERROR
        evidence = pl.concat([rows_of(group).head(3), rows_of(linked).head(3)])
        return self.finding(
            job,
            title,
            evidence_rows=evidence,
            ranks=ranks,
            hosts=hosts,
            severity=severity,
            advice=self._advice(code),
        )

    def _chain_groups(
        self, job: Job, chains: pl.DataFrame, failed: bool, sites: set[str]
    ) -> Iterator[Finding]:
        """Return-code chains with no WARN of their process nearby: one group per first call site and code."""
        c = chains.sort("seq").with_columns(line=pl.col("line_no").cast(pl.Int64))
        thread = ["source_id", "host", "pid", "tid"]
        c = c.with_columns(
            starts=(pl.col("line") - pl.col("line").shift(1).over(thread, order_by="seq")).fill_null(
                CHAIN_WINDOW + 1
            )
            > 8
        ).with_columns(trace=pl.col("starts").cast(pl.Int64).cum_sum().over(thread, order_by="seq"))
        traces = (
            c.group_by(*thread, "trace")
            .agg(
                site=pl.format(
                    "{}:{}",
                    pl.col("chain_file").first().str.replace(r"^.*/src/", ""),
                    pl.col("chain_line").first(),
                ),
                code=pl.col("result_code").last(),
                seq=pl.col("seq").min(),
                job_rank=pl.col("job_rank").first(),
                line_no=pl.col("line_no").first(),
                part=pl.col("part").first(),
                calls=pl.format("{}:{}>{}", "chain_file", "chain_line", "result_code"),
            )
            .filter(pl.col("code").fill_null(0) != 0)
        )
        traces = traces.filter(~pl.col("calls").list.eval(pl.element().is_in(list(sites))).list.any())
        for _, group in traces.sort("seq").group_by("site", "code", maintain_order=True):
            row = group.row(0, named=True)
            ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
            hosts = sorted(set(group["host"].drop_nulls()))
            who = (
                names(job, ranks)
                if 0 < len(ranks) <= 3
                else f"{len(ranks)} rank(s) ({ranks_text(ranks)})"
                if ranks
                else ", ".join(hosts) or "an unknown process"
            )
            title = (
                f"An NCCL call failed with {result_name(row['code'])} at {row['site']} on {who} "
                f"({RESULT_MEANING.get(int(row['code']), 'an error')}), with no WARN saying why"
                f"{f' ({group.height} times)' if group.height > 1 else ''}"
            )
            severity = Severity.WARNING
            if not failed:
                title += "; the job went on, so NCCL probably handled it (e.g. a probe during init)"
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group).head(4),
                ranks=ranks,
                hosts=hosts,
                severity=severity,
                advice=self._advice(int(row["code"])),
            )

    # -------------------------------------------------------------------------------------- PyTorch
    def _from_pytorch(self, job: Job, explained: set[int]) -> Iterator[Finding]:
        apps = job.table("app_errors")
        if apps.is_empty() or "event" not in apps.columns:
            return
        apps = with_job_rank(job, apps.sort("source_id", "line_no"))
        detail = pl.col("detail").fill_null("")
        raised = apps.filter(
            (pl.col("event") == "nccl_error")
            | ((pl.col("event") == "cpp_what") & detail.str.contains(r"NCCL error"))
        )
        if raised.is_empty():
            return
        codes = apps.filter(pl.col("event") == "nccl_error_code").select(
            "source_id", (pl.col("line_no") - 1).alias("line_no"), "nccl_error_code"
        )
        raised = raised.drop("nccl_error_code", strict=False).join(
            codes, on=["source_id", "line_no"], how="left", maintain_order="left"
        )
        # "terminate called after throwing an instance of 'c10::DistBackendError'" precedes a what() line.
        classes = apps.filter(pl.col("event") == "cpp_terminate").select(
            "source_id", (pl.col("line_no") + 1).alias("line_no"), pl.col("error_class").alias("thrown")
        )
        raised = raised.join(
            classes, on=["source_id", "line_no"], how="left", maintain_order="left"
        ).with_columns(error_class=pl.coalesce("error_class", "thrown"))
        text = pl.coalesce(
            pl.col("nccl_error"),
            detail.str.extract(r"NCCL error:?\s*(?:in: [^,]+, )?(.*?)(?:, NCCL version.*)?$", 1),
        )
        raised = raised.with_columns(
            what=text.str.replace(r"\s*\(run with NCCL_DEBUG=\w+ for details\)", "").str.strip_chars(),
        ).with_columns(sig=pl.col("what").str.replace_all(r"\d+", "N"))
        for _, group in raised.group_by("sig", maintain_order=True):
            ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
            row = group.row(0, named=True)
            code = row.get("nccl_error_code")
            cls = row.get("error_class") or "an exception"
            who = (
                names(job, ranks)
                if 0 < len(ranks) <= 3
                else f"{len(ranks)} rank(s) ({ranks_text(ranks)})"
                if ranks
                else f"{group.height} process(es)"
            )
            title = (
                f"PyTorch raised the NCCL error '{row['what']}'{f' ({code})' if code else ''} as {cls} on "
                f"{who}"
            )
            remote = (code or "").startswith("ncclRemoteError") or "remote process" in (row["what"] or "")
            follows = bool(ranks) and set(ranks) <= explained
            if remote:
                title += ": a peer process exited or the network failed first"
            elif follows:
                title += ": it surfaces the NCCL-level error of the same rank(s), reported by its own rule"
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group).head(4),
                ranks=ranks,
                severity=Severity.WARNING if remote or follows else Severity.ERROR,
                advice=(
                    "This is how the NCCL failure reached the application; the NCCL lines of the same rank "
                    "(or of its peers, for a remote error) say what failed. Set NCCL_DEBUG=INFO if they are "
                    "missing."
                ),
            )

    @staticmethod
    def _advice(code: int | None) -> str:
        return {
            1: "A CUDA call inside NCCL failed: look for CUDA errors (Xid in dmesg, out of memory) on this "
            "rank.",
            2: "A system call or the network failed: check the host (file descriptors, /dev/shm, memory "
            "locks) "
            "and the network findings for this rank and its peers.",
            3: "NCCL reported an internal error: check that every rank runs the same NCCL version, then "
            "upgrade "
            "NCCL or report the issue with NCCL_DEBUG=INFO logs.",
            4: "An argument of an NCCL call was invalid: check the tensors, counts, datatypes and the root "
            "the "
            "application passes, on every rank.",
            5: "NCCL was used incorrectly: check group calls, communicator reuse after an error, and that "
            "all "
            "ranks call the same collectives.",
            6: "A peer process exited or the network failed: start from the failure of the peer (process "
            "exit, "
            "IB or socket errors on its host).",
        }.get(
            code or 0,
            "Read the WARN text; re-run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET,ENV "
            "for the lines that explain it.",
        )
