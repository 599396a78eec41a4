"""A log simulator with ground truth: the NCCL/PyTorch output of a distributed training job, faults included.

    >>> from nccl_logsift.simulate import Options, simulate
    >>> sim = simulate(Options(scenario="rank-stall", ranks=16, seed=3))
    >>> sim.truth["faults"][0]["kind"]
    'rank_behind'

``simulate`` builds the job (``job.py``), runs the ranks' programs against each other
(``engine.py``), narrates what every process printed (``story.py``) and keeps the ground truth;
:func:`write` lays the output out as a launcher would (``layout.py``), streaming a ``--size`` block
of steady-state steps (``bulk.py``) when asked.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

from nccl_logsift.simulate.engine import Engine, Timeline
from nccl_logsift.simulate.job import LAYOUTS, Job, OptionError, Options, build_job
from nccl_logsift.simulate.scenarios import SCENARIOS
from nccl_logsift.simulate.story import Record, tell
from nccl_logsift.simulate.truth import dumps, truth_document

__all__ = ["LAYOUTS", "SCENARIOS", "OptionError", "Options", "Simulation", "simulate", "write"]


@dataclass(slots=True)
class Simulation:
    job: Job
    timeline: Timeline
    records: list[Record]
    truth: dict


def simulate(options: Options, bulk_steps: int = 0) -> Simulation:
    """Build and run the job; nothing is written yet."""
    job = build_job(options)
    job.bulk_steps = bulk_steps
    engine = Engine(
        job.cluster,
        job.programs,
        job.faults,
        timeout=job.torch.timeout_ms / 1000.0,
        kill_on_failure=options.layout in ("torchrun", "mpirun"),
        rng=random.Random(job.rng.random()),
        bulk_steps=bulk_steps,
        bulk_period=job.shape.period,
        opcount_rule=job.nccl.opcount,
        bulk_shape=job.shape.items,
    )
    timeline = engine.run()
    if job.scenario.events:
        job.scenario.events(job, timeline)
    job.scenario.truth(job, timeline)
    records = tell(job, timeline)
    if timeline.bulk_at is not None:
        records.append(Record(timeline.bulk_at + 1e-6, -1, "bulk", ""))
        records.sort(key=lambda r: (r.t, r.order))
    return Simulation(job, timeline, records, truth_document(job, timeline))


def write(
    options: Options,
    output: str,
    truth_path: str | None = None,
    flight_dir: str | None = None,
    flight_format: str = "pickle",
    flight_buffer: int | None = None,
) -> Simulation:
    """Simulate and write the log(s) to ``output`` (a file, a directory for per-rank, or '-'), and with
    ``flight_dir`` the Flight Recorder dumps of the ranks alive when the first timeout fired."""
    from nccl_logsift.simulate import bulk, layout

    steps = 0
    if options.size is not None:
        steps = bulk.steps_for_size(options)
    sim = simulate(options, bulk_steps=steps)
    rng = random.Random(sim.job.rng.random())
    block = bulk.Block(sim) if steps else None
    if options.layout == "per-rank":
        layout.write_per_rank(
            Path(output), sim.job, sim.timeline, sim.records, block.for_rank if block else None
        )
    else:
        pieces = layout.stream_text(
            sim.job, sim.timeline, sim.records, rng, block.interleaved if block else None
        )
        if output == "-":
            layout.write_stream(sys.stdout.buffer, pieces)
            sys.stdout.buffer.flush()
        else:
            with open(output, "wb") as fh:
                layout.write_stream(fh, pieces)
    if flight_dir is not None:
        from nccl_logsift.simulate import flight

        written, skipped = flight.dumps(sim.job, sim.timeline, flight_buffer or flight.DEFAULT_BUFFER)
        flight.write(Path(flight_dir), written, flight_format)
        sim.truth["flight_recorder"] = flight.truth(Path(flight_dir), written, skipped, flight_format)
    if truth_path:
        Path(truth_path).write_text(dumps(sim.truth))
    return sim
