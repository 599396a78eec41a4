"""The finding rules, one class per problem in a module named after it (``progress/rank_behind.py`` is
LS101 rank-behind), grouped in family packages; ``ALL_RULES`` lists them all.

| range | family | what |
|---|---|---|
| LS1xx | progress | ranks behind, mismatched collectives, watchdog timeouts |
| LS2xx | startup | init that never completed, bootstrap and interface problems |
| LS3xx | transport | transport fallbacks, network errors |
| LS4xx | placement | CUDA errors and OOM, duplicate GPUs, host identity collisions |
| LS5xx | process | processes that died |
| LS6xx | performance | latency outliers |
| LS7xx | flight | what PyTorch Flight Recorder dumps show: mismatched collectives, ranks behind |
| LS9xx | nccl | NCCL errors not explained by a more specific rule |

A rule imports the shared modules (``base``, ``wording``, ``evidence``, ``vocabulary``), the private helpers
of its own family (``_*.py``) and ``nccl_logsift.resolve``, never another rule (tests/test_layering.py).
Codes are never reused; a retired rule keeps its code.
"""

from __future__ import annotations

import logging

from nccl_logsift.findings import flight, nccl, performance, placement, process, progress, startup, transport
from nccl_logsift.findings.base import Rule
from nccl_logsift.model import Finding
from nccl_logsift.resolve.job import Job

log = logging.getLogger(__name__)

MODULES = (progress, startup, transport, placement, process, performance, flight, nccl)
ALL_RULES: tuple[type[Rule], ...] = tuple(sorted((r for m in MODULES for r in m.RULES), key=lambda r: r.code))


def rule_for(code: str) -> type[Rule]:
    for rule in ALL_RULES:
        if rule.code.lower() == code.lower() or rule.name == code:
            return rule
    raise KeyError(code)


def run_rules(job: Job) -> list[Finding]:
    """Every rule's findings, in rule order (triage orders them by importance afterwards)."""
    found: list[Finding] = []
    for rule in ALL_RULES:
        found.extend(rule().check(job))
    return found
