"""render/prose.py: a docstring as ``logsift explain`` prints it, without reST markup and refilled."""

from __future__ import annotations

import inspect

from nccl_logsift.render.prose import rewrapped, unmarked

DOC = inspect.cleandoc(
    """
    A rank stopped: see :func:`~nccl_logsift.findings.progress.positioned` and :class:`Job`.

    What to do:
        Run ``py-spy dump --pid PID`` on its host, then set ``NCCL_DEBUG=INFO`` and rerun; the error shows on
        *other* ranks, not on veth*/docker* interfaces.

    Example:
        ``node0081:4907:4907 [0] NCCL INFO Bootstrap : Using veth0d5eefd:172.18.0.1<0>``
    """
)


def test_roles_emphasis_and_literals_become_their_words():
    assert unmarked(":func:`~a.b.positioned` or :meth:`Calls.add`") == "positioned or Calls.add"
    assert unmarked("on *other* ranks, veth*/docker*") == "on other ranks, veth*/docker*"
    # a command amid prose is quoted so that its end stays clear; a single word needs no quotes
    assert (
        unmarked("run ``py-spy dump --pid 7`` with ``NCCL_DEBUG``")
        == 'run "py-spy dump --pid 7" with NCCL_DEBUG'
    )
    assert unmarked("``a whole line``") == "a whole line"


def test_paragraphs_are_refilled_under_their_headings_and_keep_every_word():
    text = rewrapped(DOC, 40)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 40
    assert "What to do:" in lines and "Example:" in lines
    body = lines[lines.index("What to do:") + 1 : lines.index("Example:") - 1]
    assert body and all(line.startswith("    ") for line in body)
    assert " ".join(" ".join(body).split()) == (
        'Run "py-spy dump --pid PID" on its host, then set NCCL_DEBUG=INFO and rerun; the error shows on '
        "other ranks, not on veth*/docker* interfaces."
    )
    # A word longer than the line stands whole on its own line.
    assert "    veth0d5eefd:172.18.0.1<0>" in lines
