"""Turn the engine's timeline into what each process (and each launcher) wrote, with times.

Output is a list of :class:`Record` s: one or more lines written at once by one process on one
channel. Channels are ``nccl`` (NCCL's stdout, or its NCCL_DEBUG_FILE in the per-rank layout),
``out``/``err`` (Python's stdout/stderr, c10 logging), ``agent`` (torchrun's agent of a node) and
``launcher`` (srun/mpirun's own messages). ``layout.py`` decides how channels meet in the files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime

from nccl_logsift.simulate import noise
from nccl_logsift.simulate.engine import Issue, RankRun, Timeline
from nccl_logsift.simulate.job import Job
from nccl_logsift.simulate.nccl_text import Msg, NcclText, envelope, info
from nccl_logsift.simulate.torch_text import ElasticText, TorchText

LAUNCHER = -1_000_000


@dataclass(slots=True)
class Record:
    t: float
    proc: int  # global rank; -(1 + node) for a node's torchrun agent; LAUNCHER for srun/mpirun
    chan: str  # nccl | out | err | agent | launcher | bulk
    text: str  # lines joined by "\n", without the final terminator
    end: str = "\n"
    order: int = 0


@dataclass(slots=True)
class Story:
    records: list[Record] = field(default_factory=list)
    counter: int = 0

    def add(self, t: float, proc: int, chan: str, text: str, end: str = "\n") -> None:
        self.counter += 1
        self.records.append(Record(t, proc, chan, text, end, self.counter))


class Narrator:
    """Writes the records of one job from its timeline."""

    def __init__(self, job: Job, timeline: Timeline):
        self.job = job
        self.tl = timeline
        self.rng = random.Random(job.rng.random())
        self.nccl = NcclText(job.nccl, job.cluster, self.rng)
        self.nccl.env = job.env
        py = job.torch.python
        self.site = f"/usr/local/lib/python{py}/dist-packages"
        self.torch = TorchText(job.torch, job.nccl, self.rng, self.site)
        self.elastic = ElasticText(job.torch, self.site, self.rng)
        self.story = Story()
        self._pg_index: dict[int, dict[int, int]] = {}
        self.per_rank = job.options.layout == "per-rank"
        self.pg_local: dict[tuple[int, int], int] = {}
        count: dict[int, int] = {}
        for pg in job.cluster.pgs:
            for r in pg.ranks:
                self.pg_local[(r, pg.index)] = count.get(r, 0)
                count[r] = count.get(r, 0) + 1

    # ---------------------------------------------------------------------------------- helpers
    def when(self, t: float) -> datetime:
        return self.job.time(t)

    def ts(self, t: float, msg: Msg) -> str | None:
        fmt = self.job.info_timestamps
        if fmt and msg.level in ("INFO", "WARN"):
            return self.when(t).strftime(fmt.replace("%6f", "%f"))
        if self.job.nccl.warn_timestamp and msg.level == "WARN":
            return self.when(t).strftime("%Y-%m-%d %H:%M:%S")
        return None

    def emit(self, rank: int, t: float, msgs: list[Msg], step: float = 0.0002) -> float:
        proc = self.job.cluster.procs[rank]
        for m in msgs:
            tid = proc.tid(m.role.split(":")[0] if m.role.startswith("connect") else m.role)
            self.story.add(t, rank, "nccl", envelope(proc, tid, m, self.ts(t, m)))
            t += step
        return t

    def pg_rank(self, pg, rank: int) -> int:
        index = self._pg_index.get(pg.index)
        if index is None:
            index = self._pg_index[pg.index] = {r: i for i, r in enumerate(pg.ranks)}
        return index[rank]

    def buffers_of(self, rank: int) -> dict[str, int]:
        return Buffers(rank)

    # -------------------------------------------------------------------------------- the story
    def tell(self) -> list[Record]:
        for run in self.tl.runs:
            self.process(run)
        self.launcher()
        records = self.story.records
        if not self.job.nccl_debug:
            records = [r for r in records if r.chan != "nccl"]
        return sorted(records, key=lambda r: (r.t, r.order))

    def process(self, run: RankRun) -> None:
        job = self.job
        rank = run.rank
        if rank in job.never_started:
            return
        proc = job.cluster.procs[rank]
        end = run.end if run.end is not None else self.tl.end
        t0 = run.issues[0].t - 2.0 if run.issues else max(0.0, (run.end or 1.0) - 1.0)
        if job.options.noise and job.python:
            self.story.add(
                max(0.0, t0 - 1.5), rank, "err", "\n".join(noise.python_warnings(self.site, self.rng))
            )
            first_op = next((i.t for i in run.issues if i.pos > 0), None)
            if rank == 0 and first_op is not None:
                par = job.cluster.parallel
                total = job.steps + job.bulk_steps
                self.story.add(
                    first_op - 0.5,
                    rank,
                    "out",
                    "\n".join(noise.config_lines(job.ranks, par.tp, par.pp, par.dp, total, self.rng)),
                )
        started = False
        banner = False
        failure = job.faults.init_fail
        for issue in run.issues:
            if issue.t > end:
                break
            comm = job.cluster.comms[issue.comm]
            if issue.pos == 0:
                t = issue.t
                kind = failure.get((rank, comm.index), "")
                if kind == "unique_id":  # PyTorch waits for rank 0's ncclUniqueId before calling NCCL at all
                    self.init_failure(run, issue, kind, t)
                    continue
                if not started:
                    started = True
                    t = self.process_start(rank, t, kind)
                    if kind == "no_interface":
                        self.init_failure(run, issue, kind, t)
                        continue
                role = f"init:{comm.index}"
                if job.nccl.banner == "printf" and not banner and comm.rank_of(rank) == 0:
                    banner = True
                    if self.per_rank:
                        self.story.add(t, rank, "out", self.nccl.banner())
                        t = self.emit(rank, t, [info("main", self.nccl.banner())])
                    else:
                        t = self.emit(rank, t, [Msg("main", "BARE", self.nccl.banner())])
                t = self.emit(rank, t, self.nccl.init_before_bootstrap(comm, rank, role))
                if kind:
                    self.init_failure(run, issue, kind, t)
                elif issue.done is not None and issue.done <= end:
                    self.emit(
                        rank,
                        issue.done - 0.05,
                        self.nccl.init_after_bootstrap(comm, rank, role, connect=not job.nccl.lazy_connect),
                    )
                continue
            op = issue.op
            assert op is not None
            self.story.add(
                issue.t,
                rank,
                "nccl",
                envelope(proc, proc.pid, info("main", ""), self.ts(issue.t, info("main", "")))
                + self.nccl.coll(op, issue.opcount, comm, rank, self.buffers_of(rank)),
            )
            if issue.first:
                msgs = []
                if comm.kind == "p2p":
                    msgs = self.nccl.p2p_connect(comm, rank, op, f"connect:{comm.index}")
                elif job.nccl.lazy_connect:
                    msgs = self.nccl.transports(comm, rank, f"connect:{comm.index}")
                self.emit(rank, issue.t + 0.0005, msgs, step=0.00005)
        if rank in job.store_wait:
            self.store_barrier(run, end)
        self.steps(run, end)
        for t, kind, data in run.extra:
            if kind == "net_error":
                self.net_error(run, t, data)
            elif kind == "peer_closed":
                self.peer_closed(run, t, data)
            elif kind == "print" and t <= end:
                self.story.add(t, rank, "out", data["text"])
            elif kind == "ras" and t <= end:  # NCCL's RAS thread (NCCL_DEBUG_SUBSYS with RAS, 2.24.3+)
                self.emit(rank, t, [info("ras", data["text"])])
        for w in run.watchdogs:
            self.watchdog(run, w)
        if run.end_kind == "raised":
            self.raised(run)
        self.ending(run)

    def process_start(self, rank: int, t: float, failure: str) -> float:
        main, net = self.nccl.process_start(self.job.cluster.procs[rank])
        if failure == "no_interface":
            main = [m for m in main if not m.text.startswith("Bootstrap")] + self.nccl.no_interface()
            return self.emit(rank, t - 0.05, main)
        t = self.emit(rank, t - 0.05, main)
        return self.emit(rank, t, net)

    # ----------------------------------------------------------------------------------- steps
    def steps(self, run: RankRun, end: float) -> None:
        job = self.job
        if run.rank != 0 or not job.options.noise or not job.python:
            return
        total = job.steps + job.bulk_steps
        prev = None
        start = run.steps[0][1] - 1.0 if run.steps else 0.0
        for step, t in run.steps:
            if t > end:
                break
            shown = step + (job.bulk_steps if step >= 1 else 0)
            ms = (t - prev) * 1000 if prev is not None else 1000 * job.shape.period
            prev = t
            self.story.add(t, 0, "out", noise.progress_line(shown, total, ms, self.rng))
            self.story.add(t + 0.0001, 0, "err", "\r" + noise.tqdm_bar(shown + 1, total, t - start), end="")
        if run.end_kind == "exit":
            self.story.add(run.end - 0.2, 0, "err", "", end="\n")
            self.story.add(run.end - 0.15, 0, "out", f"> training finished after {total} steps")

    # ------------------------------------------------------------------------------- failures
    def init_failure(self, run: RankRun, issue: Issue, kind: str, t: float) -> None:
        job, rank = self.job, run.rank
        comm = job.cluster.comms[issue.comm]
        role = f"init:{comm.index}"
        proc = job.cluster.procs[rank]
        if kind == "unique_id":
            t = run.end or issue.t
            lines = self.torch.unique_id_exception(comm.rank_of(rank))
            self.story.add(t - 0.05, rank, "err", "\n".join(lines))
            return
        if kind == "oom":
            t = self.emit(
                rank, issue.t + 0.4, self.nccl.init_after_bootstrap(comm, rank, role, connect=False)[:3]
            )
            msgs = self.nccl.cuda_oom(role)
            code, last = 1, job.nccl.cuda_oom
        elif kind == "duplicate_gpu":
            other = job.notes["duplicate_of"][rank]
            msgs = self.nccl.duplicate_gpu(role, comm.rank_of(rank), comm.rank_of(other), proc.bus)
            code, last = 5, msgs[0].text
        elif kind == "no_interface":
            code, last, msgs = 3, job.nccl.no_interface, []
        elif kind in ("connect_refused", "connect_timeout"):
            addr = job.notes["connect_addr"][rank]
            err = "Connection refused" if kind == "connect_refused" else "Connection timed out"
            msgs = self.nccl.connect_failure(role, addr, err, timed_out=kind == "connect_timeout")
            code = 2
            last = next(m.text for m in msgs if m.level == "WARN")
        else:
            raise ValueError(kind)
        t = self.emit(rank, max(t, issue.t + 0.3), msgs)
        where = "init_process_group" if comm.eager and comm.kind == "world" else "ddp"
        self.story.add(t + 0.05, rank, "err", "\n".join(self.torch.init_exception(code, last, where)))

    def net_error(self, run: RankRun, t: float, data: dict) -> None:
        job, rank = self.job, run.rank
        peer = job.faults.net_peer[rank]
        msgs = self.nccl.ib_completion_error(job.cluster.procs[rank], job.cluster.procs[peer], self.rng)
        self.emit(rank, t, msgs)
        issue = run.failed_issue
        assert issue is not None
        pg = job.cluster.pgs[issue.pg]
        mine = [i for i in run.issues if i.pg == issue.pg and i.pos > 0]
        done = [i.seq for i in mine if i.done is not None]
        block = self.torch.async_error_block(
            pg=pg,
            pg_local_id=self.pg_local[(rank, pg.index)],
            pg_rank=self.pg_rank(pg, rank),
            seq=issue.seq,
            last_enqueued=max(i.seq for i in mine),
            last_completed=max(done, default=0),
            code=job.nccl.remote_error if job.nccl.remote_error == 6 else 2,
            last_error=msgs[0].text,
        )
        self.c10_block(rank, (run.end or t) - 0.3, block)
        self.abort_comms(rank, (run.end or t) - 0.1)

    def peer_closed(self, run: RankRun, t: float, data: dict) -> None:
        job, rank = self.job, run.rank
        peer = job.cluster.procs[data["peer"]]
        comm = job.cluster.comms[run.issues[-1].comm] if run.issues else job.cluster.world
        msgs = self.nccl.socket_closed(
            f"init:{comm.index}", peer, self.rng, ("bootstrap", "bootstrap", *self.nccl.async_tail())
        )
        t = self.emit(rank, t, msgs)
        code = job.nccl.remote_error if job.nccl.remote_error == 6 else 2
        where = "init_process_group" if comm.eager and comm.kind == "world" else "ddp"
        self.story.add(t + 0.05, rank, "err", "\n".join(self.torch.init_exception(code, msgs[0].text, where)))

    def watchdog(self, run: RankRun, w) -> None:
        job, rank = self.job, run.rank
        pg = job.cluster.pgs[w.pg]
        op = w.issue.op
        ran = int((w.t - w.issue.t) * 1000)
        block = self.torch.watchdog_block(
            job.cluster.procs[rank],
            self.when(w.t),
            pg=pg,
            pg_local_id=self.pg_local[(rank, pg.index)],
            pg_rank=self.pg_rank(pg, rank),
            seq=w.issue.seq,
            torch_op=op.torch_op,
            numel_in=op.numel_in,
            numel_out=op.numel_out,
            ran_ms=ran,
            last_enqueued=w.last_enqueued,
            last_completed=w.last_completed,
            first_pg=w is run.watchdogs[0],
        )
        self.c10_block(rank, w.t, block)
        if w is run.watchdogs[-1]:
            self.abort_comms(rank, (run.end or w.t) - 0.02)

    def raised(self, run: RankRun) -> None:
        """What a process that raised (or aborted) at a ``raise`` item printed (the item says what)."""
        job, rank = self.job, run.rank
        what = job.programs[rank][run.pc - 1].what or {}
        t = run.end or run.t
        if what.get("kind") == "fingerprint":
            self.story.add(t, rank, "err", "\n".join(self.torch.fingerprint_exception(what["reports"][rank])))
        elif what.get("kind") == "nccl_tests":
            # NCCLCHECK's line, then TESTCHECK's trace of each frame it returns through (nccl-tests common.h).
            proc = job.cluster.procs[rank]
            host = proc.host.name
            lines = [f"{host}: Test NCCL failure {what['src']} '{what['error']}'"]
            lines += [f" .. {host} pid {proc.pid}: Test failure {src}" for src in what["trace"]]
            self.story.add(t, rank, "out", "\n".join(lines))
        elif what.get("kind") == "store_timeout":
            lines = self.torch.store_connect_timeout(self.when(t), what["host"], what["port"], what["waited"])
            self.story.add(t, rank, "err", "\n".join(lines))
        elif what.get("kind") == "gpu_fault":
            pg = job.cluster.pgs[0]
            pg_rank = self.pg_rank(pg, rank)
            block = self.torch.cuda_watchdog_block(pg=pg, pg_local_id=0, pg_rank=pg_rank, error=what["error"])
            self.c10_block(rank, t, block)
            if what.get("xid"):
                # A node health check (or the job's epilogue) copies the kernel's NVRM line into the output.
                d = self.when(t - 0.4)
                stamp = f"{d:%a %b} {d.day:2d} {d:%H:%M:%S %Y}"  # dmesg -T
                self.story.add(self.tl.end, LAUNCHER, "launcher", f"[{stamp}] {what['xid']}")

    def c10_block(self, rank: int, t: float, block: list[tuple[str, str]]) -> None:
        proc = self.job.cluster.procs[rank]
        lines = []
        for i, (kind, text) in enumerate(block):
            if kind.startswith("c10:"):
                lines.append(self.torch.c10(proc, self.when(t + i * 2.3e-5), "E", kind[4:], text))
            else:
                lines.append(text)
        self.story.add(t, rank, "err", "\n".join(lines))

    def abort_comms(self, rank: int, t: float) -> None:
        msgs = []
        for comm in self.job.cluster.comms_of(rank):
            if any(
                i.comm == comm.index and i.pos == 0 and i.done is not None for i in self.tl.runs[rank].issues
            ):
                msgs += self.nccl.teardown(comm, rank, "Abort", "watchdog")
        self.emit(rank, t, msgs)

    def store_barrier(self, run: RankRun, end: float) -> None:
        job, rank = self.job, run.rank
        joined = job.ranks - len(job.notes.get("missing", []))
        interval = 10.0 * max(1, job.ranks // 64)
        t = (run.t if not run.issues else run.issues[0].t) + interval
        t_end = min(end, run.end or end)
        while t < t_end - 0.5:
            self.story.add(t, rank, "err", self.torch.store_barrier_wait(rank, job.ranks, joined))
            t += interval
        if run.end_kind == "init_fail":
            self.story.add(
                run.end - 0.1,
                rank,
                "err",
                "\n".join(self.torch.store_barrier_timeout(rank, job.ranks, joined)),
            )

    def ending(self, run: RankRun) -> None:
        if run.end_kind == "exception":
            exc = self.job.programs[run.rank][run.pc - 1].text
            lines = self.torch.uncaught_exception(exc)
            self.story.add((run.end or 0.0) - 0.02, run.rank, "err", "\n".join(lines))
        if run.end_kind == "exit":
            msgs = []
            for comm in self.job.cluster.comms_of(run.rank):
                if any(i.comm == comm.index and i.pos == 0 for i in run.issues):
                    msgs += self.nccl.teardown(comm, run.rank, "Destroy", "main")
            self.emit(run.rank, (run.end or 0.0) - 0.05, msgs)

    # -------------------------------------------------------------------------------- launchers
    def launcher(self) -> None:
        job = self.job
        layout = job.options.layout
        runs = self.tl.runs
        if layout == "torchrun":
            self.torchrun()
        elif layout in ("srun", "mpirun"):
            quiet = ("exit", "killed", "cancelled", "vanished")  # no launcher line of their own
            abnormal = sorted(
                (r for r in runs if r.end_kind not in quiet and r.end is not None), key=lambda r: r.end
            )
            if layout == "srun":
                for r in abnormal:
                    p = job.cluster.procs[r.rank]
                    what = {-6: "Aborted (core dumped)", -11: "Segmentation fault (core dumped)"}.get(
                        r.exit_code, f"Exited with exit code {r.exit_code}"
                    )
                    self.story.add(
                        r.end + 0.3,
                        LAUNCHER,
                        "launcher",
                        f"srun: error: {p.host.name}: task {r.rank}: {what}",
                    )
                if self.tl.killer == "cancel":
                    jobid = 400000 + self.rng.randrange(0, 500000)
                    t = self.tl.end
                    stamp = self.when(t).strftime("%Y-%m-%dT%H:%M:%S")
                    self.story.add(
                        t - 0.5,
                        LAUNCHER,
                        "launcher",
                        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                    )
                    for host in job.cluster.hosts:
                        self.story.add(
                            t,
                            LAUNCHER,
                            "launcher",
                            f"slurmstepd: error: *** STEP {jobid}.0 ON {host.name} CANCELLED AT {stamp} ***",
                        )
            elif abnormal:
                r = abnormal[0]
                p = job.cluster.procs[r.rank]
                rule = "-" * 74
                if r.exit_code < 0:
                    name = {6: "Aborted", 11: "Segmentation fault", 15: "Terminated"}.get(
                        -r.exit_code, "Killed"
                    )
                    text = [
                        rule,
                        "Primary job  terminated normally, but 1 process returned",
                        "a non-zero exit code. Per user-direction, the job has been aborted.",
                        rule,
                        rule,
                        f"mpirun noticed that process rank {r.rank} with PID {p.pid} on node {p.host.name} "
                        f"exited on signal {-r.exit_code} ({name}).",
                        rule,
                    ]
                else:
                    text = [
                        rule,
                        "mpirun detected that one or more processes exited with non-zero status, "
                        "thus causing",
                        "the job to be terminated. The first process to do so was:",
                        "",
                        f"  Process name: [[{self.rng.randrange(10000, 60000)},1],{r.rank}]",
                        f"  Exit code:    {r.exit_code}",
                        rule,
                    ]
                self.story.add(r.end + 1.0, LAUNCHER, "launcher", "\n".join(text))

    def torchrun(self) -> None:
        job = self.job
        runs = self.tl.runs
        for host in job.cluster.hosts:
            agent = -(1 + host.index)
            agent_pid = job.cluster.procs[host.index * host.gpus].pid - self.rng.randrange(5, 60)
            mine = [runs[p.rank] for p in job.cluster.procs if p.host is host]
            first = min((r.issues[0].t for r in mine if r.issues), default=0.5)
            self.story.add(
                max(0.0, first - 3.0),
                agent,
                "agent",
                "\n".join(self.elastic.omp_warning(self.when(max(0.0, first - 3.0)), agent_pid)),
            )
            if any(r.end_kind == "vanished" for r in mine):
                continue  # the agent died with its node
            failed = sorted(
                (r for r in mine if r.end_kind not in ("exit", "killed", "cancelled")),
                key=lambda r: r.end or 0.0,
            )
            killed = [r for r in mine if r.end_kind in ("killed", "cancelled")]
            if not failed and not killed:
                continue
            t = (min(r.end for r in killed) if killed else (failed[0].end or 0.0) + 0.5) - 0.01
            lines = []
            for r in killed:
                lines += self.elastic.sigterm(self.when(t), job.cluster.procs[r.rank].pid, agent_pid)
            if lines:
                self.story.add(t, agent, "agent", "\n".join(lines))
            if failed:
                root = failed[0]
                p = job.cluster.procs[root.rank]
                t_fail = max(t, max(r.end or 0.0 for r in mine)) + 0.4
                self.story.add(
                    t_fail,
                    agent,
                    "agent",
                    "\n".join(
                        self.elastic.failed(self.when(t_fail), root.exit_code, p.local_rank, p.pid, agent_pid)
                    ),
                )
                failures = [
                    {
                        "time": self.when(r.end or 0.0),
                        "host": f"{host.name}.cluster.local",
                        "rank": r.rank,
                        "local_rank": job.cluster.procs[r.rank].local_rank,
                        "exitcode": r.exit_code,
                        "pid": job.cluster.procs[r.rank].pid,
                    }
                    for r in failed
                ]
                self.story.add(t_fail + 0.05, agent, "agent", "\n".join(self.elastic.child_failed(failures)))


SLOTS = ("shape", "b0", "b1", "b2", "loss", "barrier", "tpf", "tpb", "act", "grad", "x")


class Buffers(dict):
    """Device buffer addresses of one process: fixed per (rank, slot), as a training loop reuses them."""

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def __missing__(self, slot: str) -> int:
        i = SLOTS.index(slot) if slot in SLOTS else len(SLOTS)
        base = 0x7F0000000000 + (((self.rank * 7919 + 13) % 0xFF) << 32)
        value = base + i * 0x4000000 + ((self.rank * 131 + i * 17) % 0x400) * 0x200
        self[slot] = value
        return value


def tell(job: Job, timeline: Timeline) -> list[Record]:
    return Narrator(job, timeline).tell()
