"""The error kinds of NCCL WARN lines and what each means to the diagnosis, read from the ``[kinds]`` table of
``grammars/nccl/errors.toml``: the one place ``analyze``'s rules and ``watch`` learn which rule reports a kind
(its owner) and whether it is a process's own failure, a peer's fallout, a handled probe or teardown chatter
(its role)."""

from __future__ import annotations

import functools

from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.schema import ErrorKind

# The rule that reports every WARN no other rule owns (findings/nccl/nccl_error.py).
CATCH_ALL = "LS901"


@functools.cache
def error_kinds() -> dict[str, ErrorKind]:
    return {kind.name: kind for kind in load_grammars().family("errors").kinds}


def with_role(*roles: str) -> tuple[str, ...]:
    """The error kinds of these roles."""
    return tuple(name for name, kind in error_kinds().items() if kind.role in roles)


def owned_elsewhere() -> tuple[str, ...]:
    """The error kinds that a rule other than the catch-all reports, or none does (teardown chatter)."""
    return tuple(name for name, kind in error_kinds().items() if kind.owner != CATCH_ALL)


def owner(kind: str | None) -> str:
    """The code of the rule that reports a WARN of ``kind``: the catch-all's for a kind it does not know, and
    for teardown chatter no rule reports."""
    known = error_kinds().get(kind or "")
    return known.owner if known is not None and known.owner else CATCH_ALL


# Error kinds that are never a sign of a process's failure: probes, retries and fallbacks NCCL handled, and
# teardown chatter.
BENIGN_KINDS = with_role("benign", "teardown")
# Error kinds of a socket connection to a peer that failed (bootstrap and interface rules).
CONNECT_KINDS = ("socket_connect", "socket_handshake", "socket_truncated")
