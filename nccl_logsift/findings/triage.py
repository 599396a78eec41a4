"""Put the root cause first: decide which findings are primary, order them, and write the verdict.

A failed job produces many findings, most of them fallout: the ranks that waited time out, sockets close
when a peer dies, the watchdog's teardown aborts processes. Kinds are ranked by how far up the chain of
cause they usually sit (hardware and configuration, then the network, then the application, then process
deaths, then ranks behind, then performance, then symptoms). Among the findings of the worst severity, those
of the highest-ranked kind are candidates, and the earliest of them in the log (with any other finding of
the same kind and severity) is primary; "earliest" is by the lines' timestamps when every contender has
one (per-rank files are in no common order), else by position.

The severity policy (``logsift explain --policy``, README "Severities"): critical caused the failure or hang,
error is a failure or its direct consequence, warning means the job works but degraded, info is worth
knowing. So a job whose worst finding is a warning has no root cause: it is healthy, and its verdict says so
and lists the warnings apart from the notes. Nothing below error is ever primary.
"""

from __future__ import annotations

import dataclasses
import textwrap

from nccl_logsift.model import Diagnosis, Finding, Kind, Severity

POLICY_WIDTH = 80  # explain prints the policy as is: it reads whole in an 80-column terminal


def policy_text() -> str:
    """The severity and verdict policy, as ``logsift explain --policy`` prints it and the README states it."""
    rows = [
        textwrap.fill(s.meaning, POLICY_WIDTH, initial_indent=f"  {s.label:<9} ", subsequent_indent=" " * 12)
        for s in sorted(Severity, reverse=True)
    ]
    sections = {
        "Verdict": (
            "A root cause is a finding at error or worse: the first in causal order of the worst severity "
            "is primary, and what followed from it (closed sockets, peers that exited, watchdog timeouts, "
            "aborts) are consequences. A job with nothing at error or worse has no root cause: the verdict "
            "says it looks healthy and lists its warnings apart from its notes."
        ),
        "--fail-on": (
            "--fail-on error exits 1 when the job failed or hung; --fail-on warning also when it only ran "
            "degraded; --fail-on info on any finding."
        ),
    }
    wrapped = [
        f"{title}\n" + textwrap.fill(text, POLICY_WIDTH, initial_indent="  ", subsequent_indent="  ")
        for title, text in sections.items()
    ]
    return "\n\n".join(["Severities\n" + "\n".join(rows), *wrapped])


# Lower is closer to the root of a cascade.
CAUSAL_TIER: dict[Kind, int] = {
    Kind.DUPLICATE_GPU: 0,
    Kind.HOST_COLLISION: 0,
    Kind.INTERFACE_MISCONFIG: 1,  # a bad interface is why bootstrap connections fail
    Kind.BOOTSTRAP_FAILURE: 2,
    Kind.CUDA_ERROR: 3,
    Kind.NET_ERROR: 3,
    Kind.COLLECTIVE_MISMATCH: 4,
    Kind.INIT_INCOMPLETE: 5,  # processes that exit during a stuck init are its fallout
    Kind.PROCESS_EXIT: 6,
    Kind.RANK_BEHIND: 7,  # a rank that died is also behind: the death is the cause
    Kind.TRANSPORT_FALLBACK: 8,
    Kind.LATENCY_OUTLIER: 8,
    Kind.NCCL_ERROR: 9,
    Kind.WATCHDOG_TIMEOUT: 10,
}
_UNKNOWN_POSITION = 1 << 62


def triage(findings: list[Finding]) -> list[Finding]:
    """Mark primary findings and sort: primary first, then by severity, causal tier and position."""
    if not findings:
        return []
    top = max(f.severity for f in findings)
    # Rules grade their own findings: what certainly stops a job is critical, fallout is error or lower.
    # So the candidates are the findings of the worst severity; a warning never names a root cause, because
    # a job that only has warnings did not fail (the policy in this module's docstring).
    candidates = _unexplained([f for f in findings if f.severity == top and top >= Severity.ERROR])
    primary_ids: set[int] = set()
    if candidates:
        best_tier = min(CAUSAL_TIER[f.kind] for f in candidates)
        tier = [f for f in candidates if CAUSAL_TIER[f.kind] == best_tier]
        first = min(tier, key=_order_of(tier))
        primary_ids = {
            id(f) for f in tier if f is first or (f.kind == first.kind and f.severity == first.severity)
        }
    marked = [dataclasses.replace(f, primary=id(f) in primary_ids) for f in findings]
    # The primaries lead in the order they happened (the verdict names the first), the rest in line order.
    lead = _order_of([f for f in marked if f.primary])
    return sorted(
        marked,
        key=lambda f: (
            not f.primary,
            -f.severity,
            CAUSAL_TIER[f.kind],
            lead(f) if f.primary else (0.0, _position(f)),
            f.code,
        ),
    )


def _unexplained(candidates: list[Finding]) -> list[Finding]:
    """The candidates less those another candidate explains: an init that never completed because the ranks it
    waits for are dead (an ImportError or crash at startup, reported by their launcher) follows from those
    deaths, though init sits higher in the causal tiers (its waiting ranks exit as its fallout)."""
    died = {r for f in candidates if f.kind == Kind.PROCESS_EXIT for r in f.ranks}
    left = [
        f for f in candidates if not (f.kind == Kind.INIT_INCOMPLETE and f.ranks and set(f.ranks) <= died)
    ]
    return left or candidates


def _order_of(contenders: list[Finding]):
    """What came first among ``contenders``: their times when all have one (lines of different files, one per
    rank, are in no common order), else their positions in the job's lines."""
    if contenders and all(f.first_time is not None for f in contenders):
        return lambda f: (f.first_time, _position(f))
    return lambda f: (0.0, _position(f))


def _position(finding: Finding) -> int:
    return finding.first_seen if finding.first_seen is not None else _UNKNOWN_POSITION


def diagnose(findings: list[Finding]) -> Diagnosis:
    """The verdict in its parts, from triaged findings: the root causes (the primary findings), what followed
    from them (every other finding at error or worse) and the next step (the leading cause's advice).

    Without a finding at error or worse the job is healthy: no root cause, and its warnings (degraded) are
    kept apart from its notes (info)."""
    serious = [f for f in findings if f.severity >= Severity.ERROR]
    if not serious:
        return Diagnosis(
            warnings=tuple(f for f in findings if f.severity == Severity.WARNING),
            notes=tuple(f for f in findings if f.severity < Severity.WARNING),
        )
    # Untriaged findings have no primary: the first serious one leads, as triage would have put it first.
    causes = [f for f in findings if f.primary] or serious[:1]
    return Diagnosis(
        causes=tuple(causes),
        consequences=tuple(f for f in serious if not any(f is c for c in causes)),
        next_step=causes[0].advice,
    )


def verdict(findings: list[Finding], ranks_seen: int, hosts: int) -> str:
    """One paragraph in plain words: what happened, who, where, what to do next."""
    return verdict_text(diagnose(findings), ranks_seen, hosts)


def verdict_text(diagnosis: Diagnosis, ranks_seen: int, hosts: int) -> str:
    """The paragraph :func:`verdict` writes, from the verdict's parts, its caveat last."""
    text = _paragraph(diagnosis, ranks_seen, hosts)
    return f"{text} {diagnosis.caveat}" if diagnosis.caveat else text


def _paragraph(diagnosis: Diagnosis, ranks_seen: int, hosts: int) -> str:
    if diagnosis.healthy:
        # The counts are of what the logs show, which may be one node's output of a larger job: findings
        # speak of the job ("this 2-node job"), so the scope says it counts the logs.
        scope = f"in these logs ({ranks_seen} rank(s) on {hosts} host(s))" if ranks_seen else "in these logs"
        # "Looks": the logs may miss what they never printed (a run at NCCL_DEBUG=WARN, a test harness's
        # own failure message); the claim is about what they show.
        if not (diagnosis.warnings or diagnosis.notes):
            return f"No sign of a hang or failure {scope}: the job looks healthy."
        parts = [f"No hang or failure found {scope}: the job looks healthy, no root cause."]
        if diagnosis.warnings:
            parts.append(f"Warnings (it works, degraded): {_titles(diagnosis.warnings)}.")
        if diagnosis.notes:
            parts.append(f"Worth knowing: {_titles(diagnosis.notes)}.")
        return " ".join(parts)
    lead, *more = diagnosis.causes
    parts = [f"Root cause: {_sentence(lead.title)}."]
    if more:
        parts.append("Also: " + "; ".join(_sentence(f.title) for f in more) + ".")
    if diagnosis.consequences:
        kinds = sorted({f.kind.value.replace("_", " ") for f in diagnosis.consequences})
        parts.append(f"Consequences reported after it: {', '.join(kinds)}.")
    if diagnosis.next_step:
        parts.append(f"Next: {diagnosis.next_step}")
    return " ".join(parts)


def _titles(findings: tuple[Finding, ...], limit: int = 2) -> str:
    text = "; ".join(_sentence(f.title) for f in findings[:limit])
    return text + (f" (and {len(findings) - limit} more)" if len(findings) > limit else "")


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] if text else text
