"""Write the records the way a job's output reaches disk: buffered, interleaved, labelled by a launcher.

* Each process's NCCL output goes through C stdio: flushed per line by NCCL <= 2.12, block-buffered
  (4 KiB) after that when stdout is a pipe or file (nccl-log-grammar.md §1.6, §9.2). Python's stdout
  and stderr are line-buffered here (``PYTHONUNBUFFERED=1``, as most launch scripts set it).
* Buffers of different processes meet in one stream in the order they are flushed; a line of one
  process can be cut and another process's output glued into it (rare: ``torn_rate`` per line).
* Launchers label lines: ``srun -l`` (`` 3: ``), torchrun (``[default3]:``), Open MPI
  ``--tag-output`` (``[1,3]<stdout>:``). ``per-rank`` writes NCCL_DEBUG_FILE=%h.%p files plus the
  console stream.

The tail of a block buffer is written when the process ends, even when it was killed; a real killed
process loses it (noted in the report of the simulator).
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nccl_logsift.simulate.engine import Timeline
from nccl_logsift.simulate.job import Job
from nccl_logsift.simulate.story import Record

BLOCK = 4096
CONSOLE = "console.log"


@dataclass(slots=True)
class Chunk:
    t: float
    proc: int
    chan: str
    text: str
    order: int


def chunks(job: Job, timeline: Timeline, records: list[Record], *, buffered: bool) -> list[Chunk]:
    """Group records into the writes that reach the stream, in flush order."""
    out: list[Chunk] = []
    pending: dict[int, list[Record]] = {}
    size: dict[int, int] = {}
    per_line = job.nccl.flush_per_line or not buffered
    for r in records:
        text = r.text + r.end
        if r.chan == "nccl" and not per_line:
            pending.setdefault(r.proc, []).append(r)
            size[r.proc] = size.get(r.proc, 0) + len(text)
            if size[r.proc] >= BLOCK:
                group = pending.pop(r.proc)
                size[r.proc] = 0
                out.append(Chunk(r.t, r.proc, "nccl", "".join(x.text + x.end for x in group), group[0].order))
            continue
        if r.chan == "bulk":
            for proc, group in pending.items():
                out.append(
                    Chunk(r.t - 1e-6, proc, "nccl", "".join(x.text + x.end for x in group), group[0].order)
                )
            pending.clear()
            size.clear()
        out.append(Chunk(r.t, r.proc, r.chan, text, r.order))
    for proc, group in pending.items():
        end = timeline.runs[proc].end if proc >= 0 and timeline.runs[proc].end is not None else timeline.end
        out.append(
            Chunk(max(end, group[-1].t), proc, "nccl", "".join(x.text + x.end for x in group), group[0].order)
        )
    out.sort(key=lambda c: (c.t, c.order))
    return out


def tear(chunks_: list[Chunk], rate: float, rng: random.Random) -> list[Chunk]:
    """Cut a few NCCL lines in two and glue another process's next NCCL write into the cut (§9.2).

    Only NCCL's block-buffered writes are torn: Python's line-buffered output arrives as whole lines.
    """
    if rate <= 0:
        return chunks_
    out: list[Chunk] = []
    queue = list(chunks_)
    i = 0
    while i < len(queue):
        c = queue[i]
        lines = c.text.count("\n")
        if c.chan == "nccl" and lines and rng.random() < min(0.5, rate * lines):
            j = next(
                (
                    k
                    for k in range(i + 1, min(i + 40, len(queue)))
                    if queue[k].proc != c.proc and queue[k].chan == "nccl"
                ),
                None,
            )
            starts = [0] + [k + 1 for k, ch in enumerate(c.text) if ch == "\n"][:-1]
            line_start = rng.choice(starts)
            line_end = c.text.index("\n", line_start)
            if j is not None and line_end - line_start > 8:
                cut = rng.randrange(line_start + 4, line_end - 2)
                other = queue.pop(j)
                out.append(Chunk(c.t, c.proc, c.chan, c.text[:cut], c.order))
                out.append(other)
                out.append(Chunk(other.t, c.proc, c.chan, c.text[cut:], c.order))
                i += 1
                continue
        out.append(c)
        i += 1
    return out


class Labeler:
    """Prefix every line with its launcher label, holding partial lines (tqdm) until they end."""

    def __init__(self, label: Callable[[int, str], str]):
        self.label = label
        self.pending: dict[tuple[int, str], str] = {}

    def feed(self, c: Chunk) -> str:
        if c.proc < 0:
            return c.text if c.text.endswith("\n") else c.text + "\n"
        key = (c.proc, "err" if c.chan == "err" else "out")
        text = self.pending.pop(key, "") + c.text
        *lines, rest = text.split("\n")
        if rest:
            self.pending[key] = rest
        prefix = self.label(c.proc, c.chan)
        return "".join(f"{prefix}{line}\n" for line in lines)

    def flush(self) -> str:
        out = "".join(f"{self.label(proc, chan)}{text}\n" for (proc, chan), text in self.pending.items())
        self.pending.clear()
        return out


def label_for(job: Job) -> Callable[[int, str], str] | None:
    layout = job.options.layout
    procs = job.cluster.procs
    if layout == "srun":
        width = len(str(len(procs) - 1))
        return lambda proc, chan: f"{proc:>{width}}: "
    if layout == "torchrun":
        return lambda proc, chan: f"[default{procs[proc].local_rank}]:"
    if layout == "mpirun":
        return lambda proc, chan: f"[1,{proc}]<{'stderr' if chan == 'err' else 'stdout'}>:"
    return None


def stream_text(
    job: Job,
    timeline: Timeline,
    records: list[Record],
    rng: random.Random,
    bulk: Callable[[], Iterable[str]] | None = None,
) -> Iterable[str]:
    """The single-stream layouts (interleaved, srun, torchrun, mpirun) as text pieces."""
    label = label_for(job)
    groups = chunks(job, timeline, records, buffered=True)
    if label is None:
        rate = job.options.torn_rate
        if rate is None:
            rate = 0.0 if job.nccl.flush_per_line else 0.002
            rate = rate if job.options.noise else 0.0
        groups = tear(groups, rate, rng)
        for c in groups:
            if c.chan == "bulk":
                if bulk:
                    yield from bulk()
                continue
            yield c.text
        return
    labeler = Labeler(label)
    for c in groups:
        if c.chan == "bulk":
            yield labeler.flush()
            if bulk:
                yield from bulk()
            continue
        yield labeler.feed(c)
    yield labeler.flush()


def write_stream(out: BinaryIO, pieces: Iterable[str]) -> int:
    written = 0
    buf: list[str] = []
    size = 0
    for piece in pieces:
        buf.append(piece)
        size += len(piece)
        if size > 1 << 20:
            data = "".join(buf).encode()
            out.write(data)
            written += len(data)
            buf, size = [], 0
    data = "".join(buf).encode()
    out.write(data)
    return written + len(data)


def write_per_rank(
    directory: Path,
    job: Job,
    timeline: Timeline,
    records: list[Record],
    bulk_for: Callable[[int], Iterable[str]] | None = None,
) -> list[Path]:
    """NCCL_DEBUG_FILE=%h.%p files (whole lines: unbuffered/line-buffered, §1.6) plus the console stream."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[int, list[Record]] = {}
    console: list[Record] = []
    for r in records:
        if r.chan == "nccl" and r.proc >= 0:
            files.setdefault(r.proc, []).append(r)
        elif r.chan == "bulk":
            for proc in range(len(job.cluster.procs)):
                files.setdefault(proc, []).append(r)
        else:
            console.append(r)
    written = []
    for proc in range(len(job.cluster.procs)):
        p = job.cluster.procs[proc]
        path = directory / f"{p.host.name}.{p.pid}"
        with open(path, "wb") as fh:

            def pieces(proc: int = proc):
                for r in files.get(proc, []):
                    if r.chan == "bulk":
                        if bulk_for:
                            yield from bulk_for(proc)
                        continue
                    yield r.text + r.end

            write_stream(fh, pieces())
        written.append(path)
    with open(directory / CONSOLE, "wb") as fh:
        write_stream(fh, (c.text for c in chunks(job, timeline, console, buffered=False) if c.chan != "bulk"))
    written.append(directory / CONSOLE)
    return written


def render_text(job: Job, timeline: Timeline, records: list[Record], rng: random.Random) -> str:
    """The whole single-stream output as one string (small jobs and tests)."""
    buf = io.StringIO()
    for piece in stream_text(job, timeline, records, rng):
        buf.write(piece)
    return buf.getvalue()
