"""LS701 flight-recorder-mismatch: Flight Recorder dumps show ranks enqueuing different collectives at the
same SeqNum."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.flight._entries import FR_EVIDENCE, entry_evidence, mismatches, pg_of
from nccl_logsift.findings.wording import rank_word
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job


def _call(row: dict) -> str:
    sizes = ", ".join(f"{list(s)}" for s in row["input_sizes"] or [])
    dtypes = ", ".join(row["input_dtypes"] or [])
    out = ", ".join(f"{list(s)}" for s in row["output_sizes"] or [])
    return f"{row['op']} (in {sizes or '-'} {dtypes}, out {out or '-'})"


class FlightRecorderMismatch(Rule):
    """Flight Recorder dumps show ranks enqueuing different collectives at the same SeqNum.

    What it means:
        At the same collective SeqNum of the same process group, the dumps of some ranks record another
        operation, tensor shape or dtype than the others. The calls cannot be matched: NCCL waits forever
        or corrupts data.

    Why it matters:
        It is an application bug (a rank-dependent branch, a parameter present on one rank only, different
        shapes), and the dump says which call, with its shapes, dtypes and the Python line that made it.
        Restarting the job hits it again.

    How it is detected:
        Entries of every dump are grouped by process group GUID and ``collective_seq_id`` (p2p entries and
        coalesced groups aside); where ranks disagree on (op without backend prefix, input sizes and dtypes,
        output sizes and dtypes), the signature most ranks share is the majority; the other ranks are named.
        Only the first disagreeing SeqNum of each process group is reported: later ones follow from it.

    Example:
        At collective #15 of process group 0 (default_pg), rank 1 enqueued ``nccl:_all_gather_base`` with
        input ``[1024] Float`` while ranks 0, 2 and 3 enqueued ``nccl:all_reduce`` with ``[65536] Float``.

    What to do:
        Open the call site the dump entry names on the culprit rank and make every rank issue the same
        collectives with the same shapes; ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks this at run time.
    """

    code = "LS701"
    name = "flight-recorder-mismatch"
    kind = Kind.COLLECTIVE_MISMATCH
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        for m in mismatches(job):
            major, minor = m["major"], m["minor"]
            first_major, first_minor = major[0], minor[0]
            title = (
                f"Flight Recorder: at collective #{m['seq']} of process group {pg_of(first_major)}, "
                f"{rank_word(r['rank'] for r in minor)} enqueued {_call(first_minor)} while "
                f"{rank_word(r['rank'] for r in major)} enqueued {_call(first_major)}"
            )
            evidence = entry_evidence(job, pl.DataFrame(minor), FR_EVIDENCE) + entry_evidence(
                job, pl.DataFrame(major), 2
            )
            site = f" ({first_minor['call_site']})" if first_minor.get("call_site") else ""
            yield Finding(
                code=self.code,
                name=self.name,
                kind=self.kind,
                severity=self.severity,
                title=title,
                ranks=tuple(sorted({r["rank"] for r in minor})),
                hosts=job.hosts_of([r["rank"] for r in minor]),
                pg=pg_of(first_major),
                seq=m["seq"],
                op=first_minor["op"],
                evidence=evidence,
                advice=f"Find why the call site of rank(s) {', '.join(str(r['rank']) for r in minor)}{site} "
                f"issues {first_minor['op']} where the others issue {first_major['op']} with other "
                "shapes; make every rank issue the same collectives in the same order.",
            )
