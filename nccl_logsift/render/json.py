"""Report → the findings contract ``nccl-logsift/findings/v1``, version 1.1 (stable key order)."""

from __future__ import annotations

import dataclasses
import json
from json.encoder import encode_basestring  # the string escape json.dumps(ensure_ascii=False) uses
from typing import Any

from nccl_logsift.model import DumpAudit, Evidence, Finding, InputInfo, InputProblem, RankState, Report


def to_dict(report: Report) -> dict[str, Any]:
    job = report.job
    return {
        "schema": report.schema,
        "schema_version": report.schema_version,
        "inputs": [_input(i) for i in report.inputs],
        "job": {
            "nccl_versions": list(job.nccl_versions),
            "torch_version": job.torch_version,
            "world_size": job.world_size,
            "hosts": list(job.hosts),
            "ranks_seen": job.ranks_seen,
            "communicators": job.communicators,
        },
        "verdict": report.verdict,
        "findings": [finding_dict(f) for f in report.findings],
        "dumps": _dumps(report.dumps),
        "next_run": [{"missing": a.missing, "setting": a.setting, "why": a.why} for a in report.next_run],
        "ranks": [_rank(r) for r in report.ranks],
    }


def _input(i: InputInfo) -> dict[str, Any]:
    return {
        "path": i.path,
        "bytes": i.bytes,
        "lines": i.lines,
        "unparsed_lines": i.unparsed_lines,
        "problems": [_problem(p) for p in i.problems],
    }


def _problem(p: InputProblem) -> dict[str, Any]:
    """``kind`` and the fields that kind uses (offset, bytes, lines, reason)."""
    fields = {"offset": p.offset, "bytes": p.bytes, "lines": p.lines, "reason": p.reason}
    return {"kind": p.kind.value, **{name: value for name, value in fields.items() if value is not None}}


def _dumps(audit: DumpAudit | None) -> dict[str, Any] | None:
    """The Flight Recorder dump audit: ranks dumped, expected and missing; the files; the paths logs name."""
    if audit is None:
        return None
    return {
        "summary": audit.summary,
        "dumped": list(audit.dumped),
        "expected": list(audit.expected),
        "missing": list(audit.missing),
        "written_per_logs": list(audit.written),
        "files": [
            {"rank": f.rank, "path": f.path, "entries": f.entries, "version": f.version, "problem": f.problem}
            for f in audit.files
        ],
        "named_in_logs": [
            {"rank": n.rank, "path": n.path, "read": n.read, "line": _evidence(n.line)} for n in audit.named
        ],
    }


def _evidence(e: Evidence) -> dict[str, Any]:
    return {"path": e.path, "line": e.line, "text": e.text}


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as the contract writes it (also the ``finding`` of each ``logsift watch`` event)."""
    return {
        "code": f.code,
        "kind": f.kind.value,
        "severity": f.severity.label,
        "primary": f.primary,
        "title": f.title,
        "ranks": list(f.ranks),
        "hosts": list(f.hosts),
        "comm": f.comm,
        "pg": f.pg,
        "seq": f.seq,
        "op": f.op,
        "evidence": [_evidence(e) for e in f.evidence],
        "advice": f.advice,
    }


def _rank(r: RankState) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "host": r.host,
        "pid": r.pid,
        "comm": r.comm,
        "last_op": r.last_op,
        "last_seq": r.last_seq,
        "last_completed_seq": r.last_completed_seq,
        "last_line": _evidence(r.last_line) if r.last_line else None,
    }


def render_json(report: Report) -> str:
    """The contract as text: indented, except that each rank state is one line.

    A report has a rank state per member of every communicator (16k for a 4096-rank job): one per line
    reads and greps better than ten. The indenting encoder is pure Python (0.2 s for those 16k), so the
    rank lines are written by :func:`_rank_line`, as json's compact encoder would write :func:`_rank`.
    "ranks" is the last key of :func:`to_dict`.
    """
    data = to_dict(dataclasses.replace(report, ranks=()))  # the rank states are written apart, below
    del data["ranks"]
    head = json.dumps(data, indent=2, ensure_ascii=False)  # ends with "\n}"
    lines = ",\n".join("    " + _rank_line(rank) for rank in report.ranks)
    return head[:-2] + ',\n  "ranks": ' + (f"[\n{lines}\n  ]" if report.ranks else "[]") + "\n}\n"


def _rank_line(r: RankState) -> str:
    """``json.dumps(_rank(r), ensure_ascii=False)``, written field by field: a dict a rank state and json's
    encoder cost a 4096-rank job's 16k rank states 0.20 s, this 0.10 s. tests/render/test_json_ranks.py
    holds the two to the same text."""
    e = r.last_line
    line = (
        "null"
        if e is None
        else f'{{"path": {_text(e.path)}, "line": {_number(e.line)}, "text": {_text(e.text)}}}'
    )
    return (
        f'{{"rank": {_number(r.rank)}, "host": {_text(r.host)}, "pid": {_number(r.pid)}, '
        f'"comm": {_text(r.comm)}, "last_op": {_text(r.last_op)}, "last_seq": {_number(r.last_seq)}, '
        f'"last_completed_seq": {_number(r.last_completed_seq)}, "last_line": {line}}}'
    )


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _number(value: int | None) -> str:
    # int's repr, as json writes an int. RankState holds ints: another type (a float) raises here.
    return "null" if value is None else int.__repr__(value)


def render_jsonl(report: Report) -> str:
    """The contract as JSON Lines for log pipelines: a ``job`` record (inputs, job, verdict, how many
    findings), then one ``finding`` record per finding in the contract's order. Every record names the
    schema and the inputs, so records of many jobs can share one stream."""
    data = to_dict(report)
    common = {"schema": data["schema"], "inputs": [i["path"] for i in data["inputs"]]}
    job = {
        "record": "job",
        **common,
        "job": data["job"],
        "verdict": data["verdict"],
        "worst_severity": report.worst_severity.label if report.worst_severity is not None else None,
        "findings": len(data["findings"]),
    }
    records = [job] + [{"record": "finding", **common, **finding} for finding in data["findings"]]
    return "".join(_one_line(json.dumps(record, ensure_ascii=False)) + "\n" for record in records)


def _one_line(text: str) -> str:
    # json escapes newlines but not U+2028/U+2029, which line-splitting readers (str.splitlines, some
    # collectors) take as line ends. Inside JSON they occur only in strings, where the escape is equivalent.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
