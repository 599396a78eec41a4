"""What a finding rule is: a code, a name, a kind, a severity and a docstring that explains it.

Every rule's docstring has these headings, in this order (``logsift explain CODE`` prints it):
What it means / Why it matters / How it is detected / Example / What to do.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import ClassVar

import polars as pl

from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job

HEADINGS = ("What it means", "Why it matters", "How it is detected", "Example", "What to do")


class Rule:
    """Base class: subclasses set the class attributes and implement :meth:`check`."""

    code: ClassVar[str]
    name: ClassVar[str]
    kind: ClassVar[Kind]
    severity: ClassVar[Severity]

    def check(self, job: Job) -> Iterator[Finding]:
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def summary(cls) -> str:
        return cls.doc().split("\n\n", 1)[0]

    def finding(
        self,
        job: Job,
        title: str,
        *,
        evidence_rows: pl.DataFrame | None = None,
        ranks: list[int] | tuple[int, ...] = (),
        hosts: list[str] | tuple[str, ...] = (),
        severity: Severity | None = None,
        advice: str = "",
        comm: str | None = None,
        pg: str | None = None,
        seq: int | None = None,
        op: str | None = None,
        evidence_limit: int = 6,
    ) -> Finding:
        """Build a Finding of this rule; evidence comes from table rows (source_id, line_no, part)."""
        rows = evidence_rows if evidence_rows is not None else pl.DataFrame()
        ranks = tuple(sorted({int(r) for r in ranks if r is not None}))
        hosts = tuple(sorted(set(hosts) | set(job.hosts_of(ranks)))) if ranks or hosts else ()
        return Finding(
            code=self.code,
            name=self.name,
            kind=self.kind,
            severity=severity or self.severity,
            title=title,
            ranks=ranks,
            hosts=hosts,
            comm=comm,
            pg=pg,
            seq=seq,
            op=op,
            evidence=job.evidence(rows, evidence_limit),
            advice=advice,
            first_seen=job.first_seen(rows),
            first_time=job.first_time(rows),
        )
