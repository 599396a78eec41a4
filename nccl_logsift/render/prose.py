"""Docstring prose for a terminal (``logsift explain``): reST markup shown as the text it marks, and each
paragraph rewrapped to the width of the terminal.

The rules' docstrings are written for the source and for ``explain`` alike: headings at the margin
("What to do:"), their paragraphs indented under them, literals in double backticks. A reader of
``explain`` at 80 columns should get neither 100-column lines nor backticks.
"""

from __future__ import annotations

import re
import textwrap

# :func:`~nccl_logsift.x.name` reads as ``name``, :func:`path.name` as ``path.name``.
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``", re.S)
_EMPHASIS = re.compile(r"(?<![\w*])\*(\w[^*]*?)\*(?![\w*])")
_HEADING = re.compile(r"^\S.*:$")


def unmarked(text: str) -> str:
    """``text`` without reST markup: roles, emphasis and literals become the words they mark. A literal of
    several words (a command, a log line) amid prose is quoted, so that where it ends stays clear."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    parts = _LITERAL.split(text)  # literal contents at the odd indices
    if len(parts) == 3 and not parts[0].strip() and not parts[2].strip():
        return parts[1]  # a paragraph that is one literal needs no quotes
    return "".join(
        (f'"{part}"' if re.search(r"\s", part.strip()) else part) if i % 2 else _EMPHASIS.sub(r"\1", part)
        for i, part in enumerate(parts)
    )


def rewrapped(doc: str, width: int) -> str:
    """``doc`` (a cleaned docstring) unmarked, each paragraph refilled to ``width`` at its own indent; a
    heading line stays on a line of its own. Words are never broken: a path or a command longer than the
    line stands whole on a line of its own."""
    blocks = []
    for block in doc.strip("\n").split("\n\n"):
        lines = block.splitlines()
        head = [lines.pop(0)] if len(lines) > 1 and _HEADING.match(lines[0]) else []
        indent = " " * min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
        text = unmarked(" ".join(line.strip() for line in lines))
        body = textwrap.fill(
            text,
            max(width, len(indent) + 20),
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        blocks.append("\n".join([*head, body]))
    return "\n\n".join(blocks)
