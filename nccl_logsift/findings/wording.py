"""How findings name ranks, processes and counts: one way for every rule.

A set of ranks is written as spans, ``0–3, 6–7, 9`` (an en dash joins two or more consecutive ranks), at most
eight spans then `` …``; a single rank as ``rank 3``, several as ``ranks 0–3, 9``; a rank whose process is
known as ``rank 3 (host, pid 12, GPU 3)``.
"""

from __future__ import annotations

from collections.abc import Iterable

from nccl_logsift.resolve.job import Job


def ranks_text(ranks: Iterable[int], limit: int = 8) -> str:
    """``0–3, 6–7, 9`` for a set of ranks (``?`` for none): at most ``limit`` spans, then `` …``."""
    ordered = sorted({int(r) for r in ranks})
    if not ordered:
        return "?"
    spans: list[str] = []
    start = prev = ordered[0]
    for r in [*ordered[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(f"{start}" if start == prev else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    text = ", ".join(spans[:limit])
    return text + (" …" if len(spans) > limit else "")


def rank_word(ranks: Iterable[int]) -> str:
    """``rank 3``, or ``ranks 2–3, 7``."""
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def plural(n: int, word: str) -> str:
    """``1 rank``, ``3 ranks``, ``2 processes``."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word}" + ("es" if word.endswith("s") else "s")


def describe_rank(job: Job, rank: int) -> str:
    """``rank 3 (host, pid 12, GPU 3)`` when its process is known, else ``rank 3``."""
    proc = job.process_of(rank)
    if not proc:
        return f"rank {rank}"
    gpu = f", GPU {proc['cuda_dev']}" if proc.get("cuda_dev") is not None else ""
    return f"rank {rank} ({proc['host']}, pid {proc['pid']}{gpu})"


def names(job: Job, ranks: Iterable[int], limit: int = 4) -> str:
    """The first ``limit`` ranks described (:func:`describe_rank`), then ``and N more``."""
    ordered = sorted(set(ranks))
    text = ", ".join(describe_rank(job, r) for r in ordered[:limit])
    return text + (f" and {len(ordered) - limit} more" if len(ordered) > limit else "")


def names_or_span(job: Job, ranks: Iterable[int], limit: int = 4, hosts: Iterable[str] = ()) -> str:
    """A few ranks with known processes described (:func:`describe_rank`); more, or any unknown, as their
    span and hosts: ``ranks 0–7 (host-a, host-b)``."""
    ordered = sorted(set(ranks))
    if not ordered:
        return ""
    if len(ordered) > limit or any(job.process_of(r) is None for r in ordered):
        where = sorted(set(job.hosts_of(ordered)) | set(hosts))
        tail = f" ({', '.join(where[:3])}{' …' if len(where) > 3 else ''})" if where else ""
        return rank_word(ordered) + tail
    return ", ".join(describe_rank(job, r) for r in ordered)
