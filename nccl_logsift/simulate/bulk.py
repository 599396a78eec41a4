"""Stream ``--size`` worth of steady-state training steps at disk speed, in constant memory.

Between the warm-up step and the rest of the run every rank repeats the same collectives; only the
opCount (and the step counter of the progress line, and timestamps when INFO lines carry them)
changes. So one step of the whole job is pre-rendered once as a ``%``-format template per variant
(different interleavings of the ranks, a torn line now and then), and each step costs one dict of
numbers and one C-level format call. The engine already moved every clock and counter past the
block (``Engine._release_bulk``), so what follows the block continues from where it ends.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

from nccl_logsift.simulate import noise
from nccl_logsift.simulate.nccl_text import NcclText, envelope, info
from nccl_logsift.simulate.story import Buffers

if TYPE_CHECKING:
    from nccl_logsift.simulate import Simulation
    from nccl_logsift.simulate.job import Options

_SENTINEL = 0xDEADBEEFCAFE
_VARIANTS = 6
_BATCH = 32  # steps per yielded piece


class Block:
    def __init__(self, sim: Simulation):
        job, tl = sim.job, sim.timeline
        self.job = job
        self.steps = tl.bulk_steps
        self.start = tl.bulk_at or 0.0
        self.period = job.shape.period
        self.rng = random.Random(job.rng.random())
        text = NcclText(job.nccl, job.cluster, self.rng)
        self.keys: dict[str, tuple[int, int]] = {}  # placeholder -> (value at step 0, increment per step)
        self.lines: dict[int, list[str]] = {}  # rank -> its lines of one step (templates)
        self.ts_ranks: list[int] = []
        self.offsets: dict[
            tuple[int, int], float
        ] = {}  # (rank, op) -> seconds into the step (timestamped logs)
        layout = job.options.layout
        label = _label(job)
        for run in tl.runs:
            rank = run.rank
            proc = job.cluster.procs[rank]
            items = [it for it in job.shape.items.get(rank, []) if it.op is not None]
            per_comm = Counter(it.op.comm for it in items)  # type: ignore[union-attr]
            seen: Counter = Counter()
            out = []
            offset = 0.0
            if job.info_timestamps:
                self.ts_ranks.append(rank)
            for j, it in enumerate(items):
                offset += it.gap
                stamp = ""
                if job.info_timestamps:
                    stamp = f"[%(t{rank}_{j})s] "
                    self.offsets[(rank, j)] = offset
                op = it.op
                comm = job.cluster.comms[op.comm]  # type: ignore[union-attr]
                base = run.bulk_opcount.get(comm.index, 0)
                k = seen[comm.index]
                seen[comm.index] += 1
                counting = job.nccl.opcount == "plan" or len(comm.nodes) > 1
                msg = text.coll(op, _SENTINEL, comm, rank, Buffers(rank)).replace("%", "%%")  # type: ignore[arg-type]
                if counting:
                    key = f"o{comm.index}_{k}_{base}"
                    self.keys[key] = (base - per_comm[comm.index] + k, per_comm[comm.index])
                    msg = msg.replace(f"opCount {_SENTINEL:x}", f"opCount %({key})x")
                else:
                    msg = msg.replace(f"opCount {_SENTINEL:x}", f"opCount {base:x}")
                head = envelope(proc, proc.pid, info("main", ""), None).replace("%", "%%")
                out.append(label(rank, "nccl").replace("%", "%%") + stamp + head + msg + "\n")
            self.lines[rank] = out
        self.progress = (
            label(0, "out").replace("%", "%%") + "%(progress)s\n"
            if job.options.noise and layout != "per-rank"
            else ""
        )
        self.templates = self._variants(layout)

    # ----------------------------------------------------------------------------------- layout
    def _variants(self, layout: str) -> list[tuple[float, str]]:
        """(probability weight, template) pairs for one step of the single-stream layouts."""
        job = self.job
        ranks = list(self.lines)
        variants = []
        for _ in range(_VARIANTS):
            if job.nccl.flush_per_line:
                queues = [list(self.lines[r]) for r in ranks]
                parts = []
                while queues:
                    q = self.rng.randrange(len(queues))
                    parts.append(queues[q].pop(0))
                    if not queues[q]:
                        queues.pop(q)
            else:
                order = ranks[:]
                self.rng.shuffle(order)
                parts = ["".join(self.lines[r]) for r in order]
            if self.progress:
                parts.insert(self.rng.randrange(len(parts) + 1), self.progress)
            variants.append((1.0, "".join(parts)))
        rate = job.options.torn_rate
        if rate is None:
            rate = 0.0 if job.nccl.flush_per_line or not job.options.noise else 0.002
        if layout == "interleaved" and rate > 0 and len(ranks) > 1:
            lines_per_step = sum(len(v) for v in self.lines.values())
            p_torn = min(0.5, rate * lines_per_step)
            torn = self._torn(ranks)
            variants = [(w * (1 - p_torn) / len(variants), t) for w, t in variants] + [(p_torn, torn)]
        else:
            variants = [(w / len(variants), t) for w, t in variants]
        return variants

    def _torn(self, ranks: list[int]) -> str:
        """A step where one line is cut inside its static tail and another rank's write is glued in."""
        order = ranks[:]
        self.rng.shuffle(order)
        a, b = order[0], order[1]
        line = self.lines[a][-1]
        cut = len(line) - self.rng.randrange(4, 30)
        while line[cut - 1] == "%" or "%(" in line[cut - 12 : cut + 12]:
            cut -= 1
        glued = line[:cut] + "".join(self.lines[b]) + line[cut:]
        rest = [r for r in order[2:]]
        return "".join(self.lines[a][:-1]) + glued + "".join("".join(self.lines[r]) for r in rest)

    # ---------------------------------------------------------------------------------- values
    def values(self, b: int) -> dict:
        vals = {key: c0 + n * (b + 1) for key, (c0, n) in self.keys.items()}
        job = self.job
        if self.progress:
            vals["progress"] = noise.progress_line(
                b + 1, job.steps + self.steps, 1000 * self.period * self.rng.uniform(0.97, 1.03), self.rng
            )
        if self.offsets:
            when = job.time(self.start + b * self.period)
            fmt = (job.info_timestamps or "%Y-%m-%d %H:%M:%S").replace("%6f", "%f")
            jitter = self.rng.random
            for (r, j), offset in self.offsets.items():
                vals[f"t{r}_{j}"] = (when + timedelta(seconds=offset + 0.002 * jitter())).strftime(fmt)
        return vals

    def interleaved(self) -> Iterator[str]:
        weights = [w for w, _ in self.templates]
        templates = [t for _, t in self.templates]
        batch: list[str] = []
        choose = self.rng.choices
        picks = choose(range(len(templates)), weights, k=min(self.steps, 4096)) if self.steps else []
        for b in range(self.steps):
            batch.append(templates[picks[b % len(picks)]] % self.values(b))
            if len(batch) == _BATCH:
                yield "".join(batch)
                batch = []
        if batch:
            yield "".join(batch)

    def for_rank(self, rank: int) -> Iterator[str]:
        template = "".join(self.lines.get(rank, []))
        batch: list[str] = []
        for b in range(self.steps):
            batch.append(template % self.values(b))
            if len(batch) == _BATCH:
                yield "".join(batch)
                batch = []
        if batch:
            yield "".join(batch)

    def step_bytes(self) -> float:
        """Bytes one step adds to the output (all files together)."""
        vals = self.values(max(0, self.steps // 2))
        if self.job.options.layout == "per-rank":
            return sum(len("".join(lines) % vals) for lines in self.lines.values())
        return sum(w * len(t % vals) for w, t in self.templates)


def _label(job):
    from nccl_logsift.simulate.layout import label_for

    label = label_for(job)
    return label if label is not None else (lambda rank, chan: "")


def steps_for_size(options: Options) -> int:
    """How many steady-state steps make the output about ``options.size`` bytes."""
    from nccl_logsift.simulate import simulate
    from nccl_logsift.simulate.layout import stream_text

    size = options.size or 0
    probe = simulate(options, bulk_steps=1)
    if probe.timeline.bulk_at is None:
        return 0
    if options.layout == "per-rank":
        fixed = sum(len(r.text) + len(r.end) for r in probe.records)
    else:
        fixed = sum(
            len(piece) for piece in stream_text(probe.job, probe.timeline, probe.records, random.Random(0))
        )
    block = Block(probe)
    per_step = max(1.0, block.step_bytes())
    steps = 1
    for _ in range(3):  # opCount digits grow with the step count; converge on it
        probe.timeline.bulk_steps = steps
        block.steps = steps
        per_step = max(1.0, block.step_bytes())
        steps = max(1, int((size - fixed + per_step) // per_step))
    return steps
