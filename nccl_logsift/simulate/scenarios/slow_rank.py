"""slow-rank: one rank is consistently late to every step (a throttled GPU, a noisy neighbour on its host).

Nothing fails; the signal is in the timestamps: the job sets NCCL_DEBUG_TIMESTAMP_LEVELS=INFO,WARN
and NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] " (NCCL 2.26.2+, nccl-log-grammar.md §1.4), so every
COLL line carries the time it was issued; the slow rank's lines trail the others' by the same lag
each step, and the whole job runs at its pace.
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    job.info_timestamps = "%Y-%m-%d %H:%M:%S.%6f"


def inject(job) -> None:
    rank = job.pick(list(range(job.ranks)))
    lag = job.rng.uniform(0.12, 0.3)
    prog = job.programs[rank]
    seen = set()
    for i, it in enumerate(prog):
        if it.kind == "op" and it.step >= 0 and it.step not in seen:
            seen.add(it.step)
            prog[i] = type(it)(**{**{f: getattr(it, f) for f in it.__slots__}, "gap": it.gap + lag})
    shape = job.shape.items[rank]  # the steady-state step --size repeats
    shape[0] = type(shape[0])(
        **{**{f: getattr(shape[0], f) for f in shape[0].__slots__}, "gap": shape[0].gap + lag}
    )
    job.shape.period += lag
    job.notes.update(slow={rank}, lag=lag, culprit=rank)


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    # The job completes at the slow rank's pace: degraded, so a warning and no root cause (severity policy).
    job.fault(
        "latency_outlier",
        False,
        [rank],
        comm=job.data_comm(rank),
        severity="warning",
        detail=f"rank {rank} issues each step's collectives ~{job.notes['lag'] * 1000:.0f} ms "
        "after the others",
    )


SCENARIO = Scenario(
    "slow-rank",
    "one rank is late to every collective; visible in NCCL 2.26+ timestamps",
    inject,
    truth,
    setup=setup,
    min_nccl="2.26.2",
    min_nccl_why="NCCL lines carry timestamps only from 2.26.2",
)
