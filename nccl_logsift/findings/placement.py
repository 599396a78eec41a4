"""Rules of the placement family (see the table in findings/__init__.py)."""

from __future__ import annotations

from nccl_logsift.findings.base import Rule

RULES: tuple[type[Rule], ...] = ()
