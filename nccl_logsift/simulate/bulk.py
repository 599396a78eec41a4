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
        self.prints = 0  # training prints of a step (--print-every, --other-lines): %(printK)s
        options = job.options
        shaped = options.interleave == "op" or options.print_every > 0 or options.other_lines > 0
        self.progress = (
            label(0, "out").replace("%", "%%") + "%(progress)s\n"
            if job.options.noise and layout != "per-rank" and not shaped
            else ""
        )
        self.templates = self._variants(layout)

    # ----------------------------------------------------------------------------------- layout
    def _variants(self, layout: str) -> list[tuple[float, str]]:
        """(probability weight, template) pairs for one step of the single-stream layouts."""
        job = self.job
        ranks = list(self.lines)
        options = job.options
        if options.interleave == "op" or options.print_every or options.other_lines:
            return self._shaped_variants(ranks)
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

    def _shaped_variants(self, ranks: list[int]) -> list[tuple[float, str]]:
        """One step as --interleave, --print-every and --other-lines shape it: the COLL lines in the order
        they reach the stream, a training print after every ``print_every``-th of them, and lines of other
        kinds at random places until they are ``other_lines`` of the step's lines. No line is torn."""
        options = self.job.options
        coll_lines = sum(len(lines) for lines in self.lines.values())
        every = options.print_every
        others = round(coll_lines * options.other_lines / (1.0 - options.other_lines))
        pool = self._other_lines() if others else []
        regular = coll_lines // every if every else 0
        variants = []
        for _ in range(_VARIANTS):
            lines = self._coll_order(ranks)
            for k in reversed(range(regular)):
                lines.insert((k + 1) * every, self.print_template(k))
            prints = regular
            added = 0
            while added < others:
                text = pool[self.rng.randrange(len(pool))]
                if text is None:  # a training print of its own, numbered after print_every's
                    text = self.print_template(prints)
                    prints += 1
                lines.insert(self.rng.randrange(len(lines) + 1), text)
                added += text.count("\n")  # a warning is two lines
            self.prints = max(self.prints, prints)  # values() fills the placeholders of every template
            variants.append((1.0 / _VARIANTS, "".join(lines)))
        return variants

    def _coll_order(self, ranks: list[int]) -> list[str]:
        """The step's COLL lines in stream order: op by op (each rank's n-th call, the ranks in a random
        order, then the n+1-th), or each rank's step in one write, the ranks in a random order."""
        if self.job.options.interleave == "op":
            longest = max(len(lines) for lines in self.lines.values())
            out = []
            for n in range(longest):
                order = [r for r in ranks if n < len(self.lines[r])]
                self.rng.shuffle(order)
                out += [self.lines[r][n] for r in order]
            return out
        order = ranks[:]
        self.rng.shuffle(order)
        return [line for r in order for line in self.lines[r]]

    def print_template(self, k: int) -> str:
        label = _label(self.job)(0, "out").replace("%", "%%")
        return f"{label}%(print{k})s\n"

    def _other_lines(self) -> list[str | None]:
        """What shares a stream with COLL lines (templates): each rank's NCCL INFO lines of other
        families (NET, INIT, the channel, transport and tuning lines of its world communicator's
        init), PyTorch's Python warnings, and training prints (None: numbered when placed). NCCL lines
        are three in five of the pool's draws, warnings and prints one each."""
        job = self.job
        label = _label(job)
        text = NcclText(job.nccl, job.cluster, self.rng)
        world = job.cluster.world
        nccl: list[str] = []
        for rank in self.lines:
            proc = job.cluster.procs[rank]
            msgs = text.net_devices(proc, "main")
            msgs += text.init_before_bootstrap(world, rank, "main")
            msgs += text.init_after_bootstrap(world, rank, "main", connect=True)
            prefix = label(rank, "nccl")
            nccl += [
                prefix + envelope(proc, proc.pid, msg, None) + "\n" for msg in msgs if msg.level == "INFO"
            ]
        site = "/usr/local/lib/python3.11/site-packages"
        warnings = []
        for rank in self.lines:
            pair = noise.python_warnings(site, self.rng)
            prefix = label(rank, "err")
            warnings.append("".join(f"{prefix}{line}\n" for line in pair[:2]))
        nccl = [line.replace("%", "%%") for line in nccl]
        warnings = [line.replace("%", "%%") for line in warnings]
        draws = max(len(nccl), 1)
        pool: list[str | None] = []
        for i in range(3 * draws):
            pool.append(nccl[i % len(nccl)] if nccl else None)
        pool += [warnings[i % len(warnings)] for i in range(draws)]
        pool += [None] * draws
        return pool

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
        prints = self.prints
        for k in range(prints):  # iterations of the step (micro-batches), each printed
            vals[f"print{k}"] = noise.progress_line(
                b * prints + k, (job.steps + self.steps) * prints, 1000 * self.period / prints, self.rng
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
