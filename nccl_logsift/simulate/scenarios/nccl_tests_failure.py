"""nccl-tests-failure: all_reduce_perf across the nodes stops on an NCCL error on one rank.

A plain benchmark run (no NCCL_DEBUG, no PyTorch): rank 0 prints the header, the device list and a result row
per size; at one size a rank's network fails (an IB completion error, or a peer it cannot reach), and its
NCCLCHECK prints ``<host>: Test NCCL failure common.cu:<line> '<error> / <last error>'`` (no last error before
NCCL 2.13) and the trace of the frames, and it exits 3. The others wait in that all-reduce: mpirun stops them
and prints its non-zero-status block, torchrun its summary, srun/Slurm cancel them at the time limit.
"""

from nccl_logsift.simulate.program import FLOAT32, Item, Op
from nccl_logsift.simulate.scenarios import Scenario
from nccl_logsift.simulate.versions import nccl_error_string, version_key

SIZES = [8 << (2 * i) for i in range(10)]  # 8 B to 2 MiB, -b 8 -e 2M -f 4
COLUMNS = "     time   algbw   busbw #wrong"  # per out-of-place / in-place block
UNITS = "     (us)  (GB/s)  (GB/s)       "


def setup(job) -> None:
    job.nccl_debug = False
    job.python = False
    job.faults.watchdog = False


def _row(size: int, nranks: int, rng) -> str:
    count = size // 4
    t = 18.0 + size / 22e3 * rng.uniform(0.95, 1.05)
    algbw = size / t / 1e3
    busbw = algbw * 2 * (nranks - 1) / nranks
    t2 = t * rng.uniform(0.97, 1.03)
    return (
        f"{size:>12}  {count:>12}     float     sum      -1  {t:7.2f}  {algbw:6.2f}  {busbw:6.2f}      0  "
        f"{t2:7.2f}  {size / t2 / 1e3:6.2f}  {size / t2 / 1e3 * 2 * (nranks - 1) / nranks:6.2f}      0"
    )


def inject(job) -> None:
    world = job.cluster.world
    n = job.ranks
    culprit = job.pick(list(range(n)))
    at = job.rng.randrange(2, len(SIZES))
    peer = job.cluster.procs[(culprit + job.cluster.hosts[0].gpus) % n]
    result = job.rng.choice((2, 6))
    me, port = job.cluster.procs[culprit], job.rng.randrange(30000, 60000)
    if result == 6:
        last = (
            f"NET/IB : Got completion from peer {peer.host.ip}<{port}> with status=12 opcode=0 len=0 "
            f"vendor err 129 (Recv) localGid ::ffff:{me.host.ip} remoteGid ::ffff:{peer.host.ip} "
            f"hca mlx5_{me.nic}"
        )
    else:
        last = f"socketPollConnect: Connect to {peer.host.ip}<{port}> returned 113(No route to host)"
    error = nccl_error_string(job.nccl, result)
    if version_key(job.nccl.version) >= (2, 13):  # ncclGetLastError from 2.13 on (nccl-tests src/common.h)
        error += f" / {last}"
    procs = job.cluster.procs
    major, minor, patch = (list(version_key(job.nccl.version)) + [0, 0, 0])[:3]
    code = major * 10000 + minor * 100 + patch  # NCCL_VERSION_CODE (2.9+)
    header = [
        f"# nccl-tests version 2.17.6 nccl-headers={code} nccl-library={code}",
        "# Collective test starting: all_reduce_perf",
        f"# nThread 1 nGpus 1 minBytes 8 maxBytes {SIZES[-1]} step: 4(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {p.rank:2d} Group  0 Pid {p.pid:6d} on {p.host.name:>10} device {p.cuda_dev:2d} "
            f"[0x{(int(p.bus, 16) >> 12) & 0xFF:02x}] NVIDIA H100 80GB HBM3"
            for p in procs
        ),
        "#",
        f"#{'out-of-place':>74}{'in-place':>31}          ",
        f"#{'size':>11}{'count':>14}{'type':>10}{'redop':>8}{'root':>8}" + COLUMNS * 2,
        f"#{'(B)':>11}{'(elements)':>14}{'':>34}(us)  (GB/s)  (GB/s)       " + UNITS,
    ]
    for rank in range(n):
        prog = [it for it in job.programs[rank] if it.kind == "init" and it.comm == world.index][:1] or [
            Item("init", comm=world.index, gap=0.3)
        ]
        if rank == 0:
            prog.append(Item("print", gap=0.01, text="\n".join(header)))
        for i, size in enumerate(SIZES):
            if rank == culprit and i == at:
                prog.append(
                    Item(
                        "raise",
                        gap=0.001,
                        what={
                            "kind": "nccl_tests",
                            "error": error,
                            "src": "common.cu:1012",
                            "trace": ["common.cu:1159", "common.cu:1455"],
                            "exit_code": 3,
                        },
                    )
                )
                break
            op = Op(
                world.index,
                "AllReduce",
                size // 4,
                FLOAT32,
                torch_op="ALLREDUCE",
                numel_in=size // 4,
                numel_out=size // 4,
                dur=0.0005 + size / 2e10,
                label="all_reduce_perf",
            )
            prog.append(Item("op", op, gap=0.002))
            prog.append(Item("sync", gap=0.001))
            if rank == 0:
                prog.append(Item("print", gap=0.0005, text=_row(size, n, job.rng)))
        else:
            prog.append(Item("exit", gap=0.05))
        job.programs[rank] = prog
    job.notes.update(culprit=culprit, at=at, error=error)


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    job.fault(
        "nccl_error",
        True,
        [rank],
        comm=job.cluster.world,
        op="AllReduce",
        detail=f"all_reduce_perf stopped on rank {rank}: {job.notes['error']}",
    )
    if job.options.layout in ("srun", "mpirun", "torchrun"):
        job.fault(
            "process_exit", False, [rank], detail=f"rank {rank} exited with code 3; the launcher reports it"
        )


SCENARIO = Scenario(
    "nccl-tests-failure",
    "all_reduce_perf stops on an NCCL error on one rank (no NCCL_DEBUG)",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
    trains=False,
)
