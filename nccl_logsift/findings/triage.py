"""Put the root cause first: decide which findings are primary, order them, and write the verdict.

A failed job produces many findings, most of them fallout: the ranks that waited time out, sockets close
when a peer dies, the watchdog's teardown aborts processes. Kinds are ranked by how far up the chain of
cause they usually sit (hardware and configuration, then the network, then the application, then process
deaths, then ranks behind, then performance, then symptoms). Among the findings of the worst severity, those
of the highest-ranked kind are candidates, and the earliest of them in the log (with any other finding of
the same kind and severity) is primary. Warnings become primary only when nothing is wrong at error level.
"""

from __future__ import annotations

import dataclasses

from nccl_logsift.model import Finding, Kind, Severity

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
    # So the candidates are the findings of the worst severity (warnings when nothing is worse).
    candidates = [f for f in findings if f.severity == max(top, Severity.WARNING)]
    primary_ids: set[int] = set()
    if candidates:
        best_tier = min(CAUSAL_TIER[f.kind] for f in candidates)
        tier = [f for f in candidates if CAUSAL_TIER[f.kind] == best_tier]
        first = min(tier, key=_position)
        primary_ids = {
            id(f) for f in tier if f is first or (f.kind == first.kind and f.severity == first.severity)
        }
    marked = [dataclasses.replace(f, primary=id(f) in primary_ids) for f in findings]
    return sorted(marked, key=lambda f: (not f.primary, -f.severity, CAUSAL_TIER[f.kind], _position(f), f.code))


def _position(finding: Finding) -> int:
    return finding.first_seen if finding.first_seen is not None else _UNKNOWN_POSITION


def verdict(findings: list[Finding], ranks_seen: int, hosts: int) -> str:
    """One paragraph in plain words: what happened, who, where, what to do next."""
    serious = [f for f in findings if f.severity >= Severity.ERROR]
    primary = [f for f in findings if f.primary]
    if not serious:
        # The counts are of what the logs show, which may be one node's output of a larger job: findings
        # speak of the job ("this 2-node job"), so the scope says it counts the logs.
        scope = f"in these logs ({ranks_seen} rank(s) on {hosts} host(s))" if ranks_seen else "in these logs"
        if not findings:
            return f"No sign of a hang or failure {scope}."
        notes = "; ".join(_sentence(f.title) for f in primary or findings[:2])
        return f"No hang or failure found {scope}, but worth a look: {notes}."
    lead = primary[0] if primary else serious[0]
    parts = [f"Root cause: {_sentence(lead.title)}."]
    more = [f for f in primary[1:]]
    if more:
        parts.append("Also: " + "; ".join(_sentence(f.title) for f in more) + ".")
    fallout = [f for f in findings if not f.primary and f.severity >= Severity.ERROR]
    if fallout:
        kinds = sorted({f.kind.value.replace("_", " ") for f in fallout})
        parts.append(f"Consequences reported after it: {', '.join(kinds)}.")
    if lead.advice:
        parts.append(f"Next: {lead.advice}")
    return " ".join(parts)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] if text else text
