"""Host names as NCCL's line prefix spells them, so that a host named by a launcher, PyTorch or nccl-tests
joins the ``host`` of the NCCL lines.

NCCL prints ``gethostname()`` cut at the first dot (grammar §1.2), and from 2.29.2 it rewrites ``%`` and ``/``
in it as ``-`` (``getHostNameForLog``, src/debug.cc @v2.29.2-1 and @v2.30.7-1), so a host ``gpu%07`` is
``gpu%07`` in an ``srun: error:`` line and ``gpu-07`` in the NCCL lines. Before 2.29.2 such a name could not
be in an NCCL line at all (the envelope's host has neither character), so the rewrite is safe for every
release.
"""

from __future__ import annotations

import polars as pl

# The characters NCCL 2.29.2+ replaces with "-" in the host it logs.
REWRITTEN = "%/"
_REWRITE = str.maketrans(dict.fromkeys(REWRITTEN, "-"))


def nccl_host(host: str | None) -> str | None:
    """``host`` as an NCCL line prints it: cut at the first dot, ``%`` and ``/`` as ``-``."""
    return host.split(".", 1)[0].translate(_REWRITE) if host else host


def nccl_host_expr(expr: pl.Expr) -> pl.Expr:
    """:func:`nccl_host` over a column."""
    return expr.str.split(".").list.first().str.replace_all(f"[{REWRITTEN}]", "-")
