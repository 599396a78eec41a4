"""Extend the log of a job that ran to a size: its steady state repeated, its calls numbered on.

    python benchmarks/extend.py fixtures/captured/healthy8/console.log 1GB OUT.log
    python benchmarks/extend.py fixtures/captured/healthy_files 1GB OUTDIR

The simulated cases of benchmarks/run.py are logs as our simulator writes them. The ``real*`` cases start
from a job that ran (fixtures/captured/: NCCL 2.28.9 and PyTorch 2.11 on one H200), so that what the
processes really print, and the order a shared console really interleaves them in, is measured too. A
file keeps its lines before its first collective line and after its last one as they are (start-up,
shutdown). Between them, the first time, every line; then its collective lines and its step prints
(lines that are not NCCL's and say ``step N``), in the order they were written, again and again until
the input has the size asked. Each repeat numbers a communicator's calls on from where the one before
ended (``opCount`` counts per communicator and process, in hex), and a print's ``step N`` likewise, so
the longer log reads as the same job running for more steps. A directory (one NCCL debug file per
process) is extended file by file, each repeated as many times as the others.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

OP_COUNT = re.compile(r" opCount ([0-9a-fA-F]+) .* comm (0x[0-9a-fA-F]+) ")
STEP = re.compile(r"\bstep (\d+)")
# An NCCL line, after any launcher label: "host:pid:tid [dev] NCCL INFO|WARN|...".
NCCL = re.compile(r"^(?:\S*?:)?\s*([\w.\-]+:\d+:\d+) \[\d+\] NCCL ")


@dataclass(frozen=True)
class _Piece:
    """A repeated line: ``before`` + a number advanced by ``step`` each repeat, written in ``form`` +
    ``after``."""

    before: str
    value: int
    step: int
    form: str
    after: str


@dataclass(frozen=True)
class Template:
    """One file of the job, cut into what is written once and what repeats."""

    head: str  # up to the first collective line, then every line to the last one
    unit: tuple[_Piece, ...]
    tail: str

    @property
    def unit_bytes(self) -> int:
        return sum(len(p.before) + len(format(p.value, p.form)) + len(p.after) for p in self.unit)

    def write(self, out, repeats: int) -> None:
        out.write(self.head)
        for k in range(1, repeats + 1):
            out.write("".join(p.before + format(p.value + k * p.step, p.form) + p.after for p in self.unit))
        out.write(self.tail)


def template(text: str) -> Template | None:
    """The file's template, or None when it has no collective line to repeat (a console beside per-process
    debug files: copied as it is)."""
    lines = text.splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines) if OP_COUNT.search(line)]
    if not calls:
        return None
    first, last = calls[0], calls[-1]
    body = lines[first : last + 1]
    ops: dict[tuple[str, str], list[int]] = defaultdict(list)
    steps: set[int] = set()
    for line in body:
        if m := OP_COUNT.search(line):
            ops[_caller(line), m.group(2)].append(int(m.group(1), 16))
        elif not NCCL.match(line) and (s := STEP.search(line)):
            steps.add(int(s.group(1)))
    for key, values in ops.items():
        if values != list(range(values[0], values[0] + len(values))):
            raise ValueError(f"the calls of {key} are not numbered one after the other: {values[:8]} ...")
    ordered = sorted(steps)
    stride = min((b - a for a, b in zip(ordered, ordered[1:])), default=1)
    step_span = (ordered[-1] - ordered[0] + stride) if ordered else 0
    unit = []
    for line in body:
        if m := OP_COUNT.search(line):
            count = len(ops[_caller(line), m.group(2)])
            unit.append(_Piece(line[: m.start(1)], int(m.group(1), 16), count, "x", line[m.end(1) :]))
        elif not NCCL.match(line) and (s := STEP.search(line)):
            unit.append(_Piece(line[: s.start(1)], int(s.group(1)), step_span, "d", line[s.end(1) :]))
    return Template("".join(lines[: last + 1]), tuple(unit), "".join(lines[last + 1 :]))


def _caller(line: str) -> str:
    m = NCCL.match(line)
    return m.group(1).rsplit(":", 1)[0] if m else ""  # host:pid (a process's threads share its counts)


def extend(source: Path, size: int, out: Path) -> int:
    """Write ``source`` (a file, or a directory of files) extended to about ``size`` bytes at ``out``;
    the repeats it took."""
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    texts = {p: p.read_text() for p in files}
    templates = {p: template(t) for p, t in texts.items()}
    once = sum(len(t) for t in texts.values())
    per_repeat = sum(t.unit_bytes for t in templates.values() if t)
    if not per_repeat:
        raise ValueError(f"{source}: no collective line to repeat")
    repeats = max(0, math.ceil((size - once) / per_repeat))
    if source.is_dir():
        out.mkdir(parents=True, exist_ok=True)
    for path in files:
        target = out / path.name if source.is_dir() else out
        with open(target, "w") as sink:
            t = templates[path]
            if t is None:
                sink.write(texts[path])
            else:
                t.write(sink, repeats)
    return repeats


def size_of(text: str) -> int:
    """A size as ``logsift simulate --size`` reads it (1GB, 500MB, 64KiB), by its own parser."""
    from nccl_logsift.cli.simulate import ByteSize

    return ByteSize().convert(text, None, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path, help="a captured job's log file, or its directory of files")
    parser.add_argument("size", help="the size to reach, e.g. 1GB")
    parser.add_argument("out", type=Path, help="the file (or, for a directory, the directory) to write")
    args = parser.parse_args(argv)
    repeats = extend(args.source, size_of(args.size), args.out)
    print(f"{args.out}: {repeats} repeats of the steady state", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
