"""PyTorch's side of the log: ProcessGroupNCCL watchdog output, Python exceptions, torchrun's reports.

Templates follow pytorch-and-peers.md §1.3-1.4 for each watchdog generation (1.13/2.0, 2.2, 2.3-2.5,
2.6+). ``c10`` lines get the glog-style prefix of their generation; continuation lines (C++ frames,
the message after ``what():``) are printed raw, as ``std::terminate`` prints them.
"""

from __future__ import annotations

import random
from datetime import datetime

from nccl_logsift.simulate.cluster import Process, ProcessGroup
from nccl_logsift.simulate.versions import NCCL_RESULTS, NcclProfile, TorchProfile, nccl_error_string

CPP = "ProcessGroupNCCL.cpp"

# The watchdog's messages (pytorch-and-peers.md §1.4; the number there in brackets). A profile lists the
# ones its release prints (versions.TorchProfile.timeout_report and friends).
MESSAGES = {
    "caught": (
        "{rank_tag} Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds "
        "before timing out."
    ),  # [1]
    "status": (
        "{pgp} Timeout at NCCL work: {seq}, last enqueued NCCL work: {enq}, last completed NCCL work: {done}."
    ),  # [3]
    "exception_at": (
        "{pgp} Exception (either an error or timeout) detected by watchdog at work: {seq}, "
        "last enqueued NCCL work: {enq}, last completed NCCL work: {done}."
    ),  # [4]
    "failure": (
        "{pgp}  failure detected by watchdog at work sequence id: {seq} PG status: "
        "last enqueued work: {enq}, last completed work: {done}"
    ),  # [5]
    "stack": (
        "Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. "
        "You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value."
    ),  # [12]
    "dump": (
        "{pgp} Received a dump signal due to a collective timeout from this local rank and we will try our "
        "best to dump the debug info. Last enqueued NCCL work: {enq}, last completed NCCL work: {done}.This "
        "is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the "
        "order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't "
        "run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or "
        "bugs in the "
        "communications library (e.g. NCCL), etc. "
    ),  # [11]
    "first_pg": "{pgp} First PG on this rank to signal dumping.",  # [11]
}
MESSAGE_LINE = {"caught": "timeout", "first_pg": "dump"}  # message key -> key of TorchProfile.lines
# How ProcessGroupWrapper prints a fingerprint's device types (the tensors' options, as real reports show).
DEVICE_TYPES = (
    "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
    "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))"
)


def glog_c10(when: datetime, severity: str, line: int, timed: bool) -> str:
    """c10's MessageLogger prefix: ``[E602 14:03:11.123456789 ProcessGroupNCCL.cpp:607] `` or
    ``[E ...:607] ``."""
    if timed:
        ns = when.microsecond * 1000 + (when.microsecond * 7 + line) % 1000
        return f"[{severity}{when.month}{when.day:02d} {when:%H:%M:%S}.{ns:09d} {CPP}:{line}] "
    return f"[{severity} {CPP}:{line}] "


class TorchText:
    def __init__(self, profile: TorchProfile, nccl: NcclProfile, rng: random.Random, site_packages: str):
        self.p = profile
        self.nccl = nccl
        self.rng = rng
        self.site = site_packages  # e.g. /usr/local/lib/python3.10/dist-packages

    # ------------------------------------------------------------------------------- prefixes
    def c10(self, proc: Process, when: datetime, severity: str, key: str, text: str) -> str:
        p = self.p
        head = f"[rank{proc.rank}]:" if p.rank_prefix else ""
        return head + glog_c10(when, severity, p.lines.get(key, 0) or p.lines["timeout"], p.glog_time) + text

    def pg_prefix(self, pg: ProcessGroup, pg_local_id: int, pg_rank: int) -> str:
        style = self.p.pg_prefix
        if style == "rank":
            return f"[Rank {pg_rank}]"
        if style == "pg":
            return f"[PG {pg.guid} Rank {pg_rank}]"
        if style == "pg_desc":
            return f"[PG {pg.guid} ({pg.desc}) Rank {pg_rank}]"
        return f"[PG ID {pg_local_id} PG GUID {pg.guid}({pg.desc}) Rank {pg_rank}]"

    def work_tag(self, pg: ProcessGroup, pg_rank: int) -> str:
        """WorkNCCL's prefix: ``[Rank N]``, and from 2.13 ``[PG GUID g(desc) Rank N]``."""
        if self.p.work_prefix == "pg_guid":
            return f"[PG GUID {pg.guid}({pg.desc}) Rank {pg_rank}]"
        return f"[Rank {pg_rank}]"

    def work(self, seq: int, torch_op: str, numel_in: int, numel_out: int) -> str:
        numel = f", NumelIn={numel_in}, NumelOut={numel_out}" if self.p.numel else ""
        return f"WorkNCCL(SeqNum={seq}, OpType={torch_op}{numel}, Timeout(ms)={self.p.timeout_ms})"

    # ---------------------------------------------------------------------- C++ frames / terminate
    def frames(self, kind: str) -> list[str]:
        lib = f"{self.site}/torch/lib"
        base = self.rng.randrange(0x7F0000000000, 0x7FFF00000000) & ~0xFFF
        names = {
            "timeout": [
                "c10::Error::Error(c10::SourceLocation, std::string) + 0x98",
                "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout("
                "std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2",
                "c10d::ProcessGroupNCCL::watchdogHandler() + 0x233",
                "c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d",
            ],
            "error": [
                "c10::Error::Error(c10::SourceLocation, std::string) + 0x98",
                "c10d::ProcessGroupNCCL::checkForNCCLErrorsInternal("
                "std::shared_ptr<c10d::NCCLComm>&) + 0x2e1",
                "c10d::ProcessGroupNCCL::WorkNCCL::checkAndSetException() + 0x7c",
                "c10d::ProcessGroupNCCL::watchdogHandler() + 0x21a",
            ],
            "loop": [
                "c10::Error::Error(c10::SourceLocation, std::string) + 0x98",
                "<unknown function> + 0x10d4f3f",
            ],
        }[kind]
        libs = ["libc10.so"] + ["libtorch_cuda.so"] * (len(names) - 1)
        out = [
            f"frame #{i}: {name} ({hex(base + 0x1000 * i + 0x2B8 * i)} in {lib}/{so})"
            for i, (name, so) in enumerate(zip(names, libs))
        ]
        n = len(out)
        out.append(
            f"frame #{n}: <unknown function> + 0xdc253 ({hex(base + 0x5A6000)} "
            "in /lib/x86_64-linux-gnu/libstdc++.so.6)"
        )
        out.append(
            f"frame #{n + 1}: <unknown function> + 0x94ac3 ({hex(base + 0x7E1000)} "
            "in /lib/x86_64-linux-gnu/libc.so.6)"
        )
        out.append(
            f"frame #{n + 2}: <unknown function> + 0x126850 ({hex(base + 0x873000)} "
            "in /lib/x86_64-linux-gnu/libc.so.6)"
        )
        return out

    def _raised(self, where: str, line: int) -> str:
        return (
            f"Exception raised from {where} at /opt/pytorch/pytorch/torch/csrc/distributed/c10d/{CPP}:{line} "
            "(most recent call first):"
        )

    # ------------------------------------------------------------------------------- watchdog
    def _report(self, keys: tuple[str, ...], fields: dict) -> list[tuple[str, str]]:
        return [(f"c10:{MESSAGE_LINE.get(k, k)}", MESSAGES[k].format(**fields)) for k in keys]

    def watchdog_block(
        self,
        proc: Process,
        when: datetime,
        *,
        pg: ProcessGroup,
        pg_local_id: int,
        pg_rank: int,
        seq: int,
        torch_op: str,
        numel_in: int,
        numel_out: int,
        ran_ms: int,
        last_enqueued: int,
        last_completed: int,
        first_pg: bool,
    ) -> list[tuple[str, str]]:
        """A collective timeout as the watchdog reports it: ("c10:<line key>"|"raw", text) pairs, in order."""
        p = self.p
        fields = {
            "rank_tag": self.work_tag(pg, pg_rank),
            "pgp": self.pg_prefix(pg, pg_local_id, pg_rank),
            "seq": seq,
            "enq": last_enqueued,
            "done": last_completed,
            "ran": ran_ms,
            "work": self.work(seq, torch_op, numel_in, numel_out),
        }
        lines = self._report(p.timeout_report, fields)
        if first_pg:
            lines += self._report(p.first_pg_report, fields)
        lines += self._take_down(fields["rank_tag"])
        lines += self._terminate(
            MESSAGES["caught"].format(**fields), fields["pgp"], fields["rank_tag"], "timeout", "checkTimeout"
        )
        return lines

    def _take_down(self, rank_tag: str) -> list[tuple[str, str]]:
        p = self.p
        tag = f"{rank_tag} " if p.rank_tag_take_down else ""
        some = (
            "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
            "subsequent GPU operations might run on corrupted/incomplete data."
        )
        if not p.split_warning:
            return [
                (
                    "c10:some_ops",
                    some + " To avoid this inconsistency, we are taking the entire process down.",
                )
            ]
        return [
            ("c10:some_ops", tag + some),
            ("c10:take_down", tag + "To avoid data inconsistency, we are taking the entire process down."),
        ]

    def _terminate(
        self, reason: str, pgp: str, rank_tag: str, frames: str, raised_in: str
    ) -> list[tuple[str, str]]:
        p = self.p
        out: list[tuple[str, str]] = []
        if p.watchdog_exit == "what":
            out.append(("raw", f"terminate called after throwing an instance of '{p.cpp_exception}'"))
            out += [
                ("raw", f"  what():  {line}" if i == 0 else line) for i, line in enumerate(reason.split("\n"))
            ]
            return out
        if p.watchdog_exit == "nccl_watchdog":
            head = f"{rank_tag} NCCL watchdog thread terminated with exception: "
        else:
            head = f"{pgp} Process group watchdog thread terminated with exception: "
        message = head + reason
        raised = [self._raised(raised_in, p.lines["check"]), *self.frames(frames), ""]
        first, *rest = message.split("\n")
        out.append(("c10:watchdog_exc", first))
        out += [("raw", line) for line in rest]
        out += [("raw", line) for line in raised]
        out.append(("raw", f"terminate called after throwing an instance of '{p.cpp_exception}'"))
        out += [
            ("raw", f"  what():  {line}" if i == 0 else line) for i, line in enumerate(message.split("\n"))
        ]
        out += [("raw", line) for line in raised]
        out.append(("raw", self._raised("ncclCommWatchdog", p.lines["watchdog_loop"])))
        out += [("raw", line) for line in self.frames("loop")]
        out.append(("raw", ""))
        return out

    def nccl_error_text(self, code: int, last_error: str) -> str:
        detail = NCCL_RESULTS[code]
        return (
            f"NCCL error: {nccl_error_string(self.nccl, code)}, NCCL version {self.nccl.version}\n"
            f"{detail[1]}: {detail[2]}\nLast error:\n{last_error}"
        )

    def async_error_block(
        self,
        *,
        pg: ProcessGroup,
        pg_local_id: int,
        pg_rank: int,
        seq: int,
        last_enqueued: int,
        last_completed: int,
        code: int,
        last_error: str,
    ) -> list[tuple[str, str]]:
        """An asynchronous NCCL error (e.g. an IB completion error) found by the watchdog."""
        fields = {
            "rank_tag": self.work_tag(pg, pg_rank),
            "pgp": self.pg_prefix(pg, pg_local_id, pg_rank),
            "seq": seq,
            "enq": last_enqueued,
            "done": last_completed,
        }
        lines = self._report(self.p.error_report, fields)
        lines += self._take_down(fields["rank_tag"])
        lines += self._terminate(
            self.nccl_error_text(code, last_error),
            fields["pgp"],
            fields["rank_tag"],
            "error",
            "checkForNCCLErrorsInternal",
        )
        return lines

    def cuda_watchdog_block(
        self, *, pg: ProcessGroup, pg_local_id: int, pg_rank: int, error: str
    ) -> list[tuple[str, str]]:
        """A CUDA error the watchdog hits while polling its work's events (a GPU fault): the watchdog thread
        dies with the CUDA error and takes the process down, with no timeout or NCCL error report first."""
        reason = "\n".join(
            (
                f"CUDA error: {error}",
                "CUDA kernel errors might be asynchronously reported at some other API call, "
                "so the stacktrace "
                "below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            )
        )
        return self._terminate(
            reason,
            self.pg_prefix(pg, pg_local_id, pg_rank),
            self.work_tag(pg, pg_rank),
            "error",
            "c10_cuda_check_implementation",
        )

    def fingerprint(self, fp: dict, peer: bool) -> str:
        """ProcessGroupWrapper's CollectiveFingerPrint as its operator<< prints it (DETAIL debug mode).

        1.13 prints no sequence number; 2.0 adds it but prints the peer's fingerprint without its tensors
        (num_tensors was not deserialised, fixed by pytorch PR #100213 in 2.1)."""
        seq = f"SequenceNumber={fp['seq']}" if self.p.series != "1.13" else ""
        if peer and self.p.series == "2.0":
            return f"CollectiveFingerPrint({seq}OpType={fp['op']})"
        head = f"{seq}, " if seq else ""
        shape = ", ".join(map(str, fp["shape"]))
        return (
            f"CollectiveFingerPrint({head}OpType={fp['op']}, TensorShape=[{shape}], "
            f"TensorDtypes={fp['dtype']}, TensorDeviceTypes={DEVICE_TYPES})"
        )

    def fingerprint_exception(self, report: dict) -> list[str]:
        """The traceback of a rank whose collective check failed (ProcessGroupWrapper.cpp, verify_tensors)."""
        mine, other = report["mine"], report["other"]
        text = (
            f"Detected mismatch between collectives on ranks. Rank {report['rank']} is running "
            f"collective: {self.fingerprint(mine, False)}, but Rank {report['peer']} is running "
            f"collective: {self.fingerprint(other, True)}."
        )
        if self.p.series not in ("1.13", "2.0"):  # compute_collective_diff, 2.1+
            diff = []
            if mine["seq"] != other["seq"]:
                diff.append(f"\t Sequence number: {mine['seq']}vs {other['seq']}")
            if mine["op"] != other["op"]:
                diff.append(f"  Op type: {mine['op']}vs {other['op']}")
            if mine["shape"] != other["shape"]:
                sizes = ["".join(map(str, fp["shape"])) for fp in (mine, other)]
                diff.append(f"  Tensor Tensor shapes: {sizes[0]}vs {sizes[1]}")
            if mine["dtype"] != other["dtype"]:
                diff.append(f"  Tensor Tensor dtypes: {mine['dtype']}vs {other['dtype']}")
            text += "Collectives differ in the following aspects: " + "".join(diff)
        site = self.site
        rng = self.rng
        return [
            "Traceback (most recent call last):",
            f'  File "/workspace/train.py", line {rng.randrange(180, 260)}, in <module>',
            "    main()",
            f'  File "/workspace/train.py", line {rng.randrange(120, 170)}, in main',
            f"    {report['call']}",
            f'  File "{site}/torch/distributed/c10d_logger.py", line {rng.randrange(70, 100)}, in wrapper',
            "    return func(*args, **kwargs)",
            f'  File "{site}/torch/distributed/distributed_c10d.py", line {rng.randrange(2300, 2900)}, '
            f"in {report['fn']}",
            f"    work = group.{report['fn']}(",
            f"RuntimeError: {text}",
        ]

    # ------------------------------------------------------------------------- Python exceptions
    def uncaught_exception(self, exception: str) -> list[str]:
        """The traceback of an exception raised at the script's top level before any distributed call (an
        import that fails): ``exception`` is its last line (``ModuleNotFoundError: No module named
        'apex'``)."""
        module = exception.rsplit(" ", 1)[-1].strip("'") if "No module named" in exception else "apex"
        return [
            "Traceback (most recent call last):",
            f'  File "/workspace/train.py", line {self.rng.randrange(8, 30)}, in <module>',
            f"    from {module}.optimizers import FusedAdam",
            exception,
        ]

    def store_connect_timeout(self, when: datetime, host: str, port: int, waited: str) -> list[str]:
        """A rank's TCPStore client that never reached the store on MASTER_ADDR:MASTER_PORT: socket.cpp logs
        the timeout (``C10D_ERROR``, before the process group exists, so without ``[rankN]:``), then
        ``init_process_group`` raises it (SocketConnectOp::throwTimeoutError)."""
        text = f"The client socket has timed out after {waited} while trying to connect to ({host}, {port})."
        site, rng = self.site, self.rng
        ns = when.microsecond * 1000 + rng.randrange(1000)
        stamp = f"{when.month}{when.day:02d} {when:%H:%M:%S}.{ns:09d}"
        head = f"[E{stamp} socket.cpp:1011] " if self.p.glog_time else "[E socket.cpp:1011] "
        return [
            f"{head}[c10d] {text}",
            "Traceback (most recent call last):",
            f'  File "/workspace/train.py", line {rng.randrange(180, 260)}, in <module>',
            "    main()",
            f'  File "/workspace/train.py", line {rng.randrange(60, 120)}, in main',
            '    dist.init_process_group(backend="nccl")',
            f'  File "{site}/torch/distributed/rendezvous.py", line {rng.randrange(180, 280)}, in '
            "_create_c10d_store",
            "    return TCPStore(",
            f"torch.distributed.DistNetworkError: {text}",
        ]

    def init_exception(self, code: int, last_error: str, where: str) -> list[str]:
        """The traceback a rank prints when a NCCL call made from Python fails (DistBackendError)."""
        site = self.site
        rng = self.rng
        lines = [
            "Traceback (most recent call last):",
            f'  File "/workspace/train.py", line {rng.randrange(180, 260)}, in <module>',
            "    main()",
        ]
        if where == "init_process_group":
            lines += [
                f'  File "/workspace/train.py", line {rng.randrange(60, 120)}, in main',
                '    dist.init_process_group(backend="nccl", device_id=torch.device("cuda", local_rank))',
                f'  File "{site}/torch/distributed/c10d_logger.py", '
                f"line {rng.randrange(70, 100)}, in wrapper",
                "    func_return = func(*args, **kwargs)",
                f'  File "{site}/torch/distributed/distributed_c10d.py", '
                f"line {rng.randrange(1500, 1800)}, in init_process_group",
                "    default_pg, _ = _new_process_group_helper(",
                f'  File "{site}/torch/distributed/distributed_c10d.py", '
                f"line {rng.randrange(1900, 2100)}, in _new_process_group_helper",
                "    backend_class._eager_connect_single_device(device_id)",
            ]
        else:
            lines += [
                f'  File "/workspace/train.py", line {rng.randrange(120, 170)}, in main',
                "    model = DDP(model, device_ids=[local_rank])",
                f'  File "{site}/torch/nn/parallel/distributed.py", '
                f"line {rng.randrange(780, 840)}, in __init__",
                "    _verify_param_shape_across_processes(self.process_group, parameters)",
                f'  File "{site}/torch/distributed/utils.py", '
                f"line {rng.randrange(260, 300)}, in _verify_param_shape_across_processes",
                "    return dist._verify_params_across_processes(process_group, tensors, logger)",
            ]
        line = rng.randrange(1200, 2300)
        lines.append(
            f"{self.p.exception_class}: NCCL error in: ../torch/csrc/distributed/c10d/{CPP}:{line}, "
            f"{nccl_error_string(self.nccl, code)}, NCCL version {self.nccl.version}"
        )
        detail = NCCL_RESULTS[code]
        lines += [f"{detail[1]}: {detail[2]}", "Last error:", last_error]
        return lines

    def unique_id_exception(self, rank: int) -> list[str]:
        """A rank's first collective creates the NCCL communicator (lazy init): it waits in the c10d store for
        the ncclUniqueId rank 0 publishes, and gives up at the store timeout (ProcessGroupNCCL.cpp,
        broadcastUniqueNCCLID). Some releases spell it "retreiving"; the older profiles here print that."""
        site = self.site
        verb = "retreiving" if self.p.series in ("1.13", "2.0", "2.1") else "retrieving"
        return [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 231, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 131, in main',
            "    model = DDP(model, device_ids=[local_rank])",
            f'  File "{site}/torch/nn/parallel/distributed.py", line 798, in __init__',
            "    _verify_param_shape_across_processes(self.process_group, parameters)",
            f'  File "{site}/torch/distributed/utils.py", line 269, in _verify_param_shape_across_processes',
            "    return dist._verify_params_across_processes(process_group, tensors, logger)",
            f"{self.p.exception_class}: [{rank}] is setting up NCCL communicator and {verb} ncclUniqueId "
            "from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
        ]

    def store_barrier_wait(self, rank: int, world: int, joined: int) -> str:
        timeout = "0:30:00" if self.p.timeout_ms >= 1800000 else "0:10:00"
        return (
            "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier "
            f"to initialize process group for rank: {rank}, "
            f"key: store_based_barrier_key:1 (world_size={world}, worker_count={joined}, timeout={timeout})"
        )

    def store_barrier_timeout(self, rank: int, world: int, joined: int) -> list[str]:
        timeout = "0:30:00" if self.p.timeout_ms >= 1800000 else "0:10:00"
        site = self.site
        return [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 231, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 74, in main',
            '    dist.init_process_group(backend="nccl")',
            f'  File "{site}/torch/distributed/distributed_c10d.py", line 761, in init_process_group',
            "    _store_based_barrier(rank, store, timeout)",
            f'  File "{site}/torch/distributed/distributed_c10d.py", line 379, in _store_based_barrier',
            "    raise RuntimeError(",
            f"RuntimeError: Timed out initializing process group in store based barrier on rank: {rank}, "
            "for key: store_based_barrier_key:1 "
            f"(world_size={world}, worker_count={joined}, timeout={timeout})",
        ]


# ------------------------------------------------------------------------------------ torchrun
class ElasticText:
    """torchrun's agent output in the logging style of the release (pytorch-and-peers.md §1.4)."""

    def __init__(self, profile: TorchProfile, site_packages: str, rng: random.Random):
        self.p = profile
        self.site = site_packages
        self.rng = rng
        self.thread = rng.randrange(139_600_000_000_000, 140_700_000_000_000)

    def _log(
        self, when: datetime, level: str, module: str, line: int, text: str, agent_pid: int
    ) -> list[str]:
        style = self.p.elastic_log
        lines = text.split("\n")
        if style == "glog":
            head = (
                f"{level[0]}{when:%m%d %H:%M:%S}.{when.microsecond:06d} {agent_pid} "
                f"torch/distributed/{module.replace('.', '/')}.py:{line}] "
            )
            return [head + part for part in lines]
        if style == "bracketed":
            head = (
                f"[{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d}] "
                f"torch.distributed.{module}: [{level}] "
            )
            return [head + part for part in lines]
        return [f"{level}:torch.distributed.{module}:{lines[0]}", *lines[1:]]

    def omp_warning(self, when: datetime, agent_pid: int) -> list[str]:
        text = (
            "\n*****************************************\n"
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
            "system being overloaded, please further tune the variable for optimal performance in your "
            "application as needed. \n"
            "*****************************************"
        )
        return self._log(when, "WARNING", "run", 793, text, agent_pid)

    def sigterm(self, when: datetime, pid: int, agent_pid: int) -> list[str]:
        return self._log(
            when,
            "WARNING",
            "elastic.multiprocessing.api",
            897,
            f"Sending process {pid} closing signal SIGTERM",
            agent_pid,
        )

    def failed(self, when: datetime, code: int, local_rank: int, pid: int, agent_pid: int) -> list[str]:
        return self._log(
            when,
            "ERROR",
            "elastic.multiprocessing.api",
            869,
            f"failed (exitcode: {code}) local_rank: {local_rank} (pid: {pid}) of binary: /usr/bin/python3",
            agent_pid,
        )

    def child_failed(self, failures: list[dict], script: str = "train.py") -> list[str]:
        """The ChildFailedError summary: ``failures`` sorted by time; the first is the root cause."""
        site = self.site
        root, others = failures[0], failures[1:]
        lines = [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            f'  File "{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", '
            "line 355, in wrapper",
            "    return f(*args, **kwargs)",
            f'  File "{site}/torch/distributed/run.py", line 919, in main',
            "    run(args)",
            f'  File "{site}/torch/distributed/run.py", line 910, in run',
            "    elastic_launch(",
            f'  File "{site}/torch/distributed/launcher/api.py", line 138, in __call__',
            "    return launch_agent(self._config, self._entrypoint, list(args))",
            f'  File "{site}/torch/distributed/launcher/api.py", line 269, in launch_agent',
            "    raise ChildFailedError(",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        ]
        body: list[str] = [f"{script} FAILED", "-" * 60, "Failures:"]
        if not others:
            body.append("  <NO_OTHER_FAILURES>")
        for i, f in enumerate(others, start=1):
            body += [f"[{i}]:", *self._failure(f)]
        body += ["-" * 60, "Root Cause (first observed failure):", "[0]:", *self._failure(root)]
        width = min(max(len(x) for x in body), 60)
        return lines + ["=" * width, *body, "=" * width]

    @staticmethod
    def _failure(f: dict) -> list[str]:
        code = f["exitcode"]
        if code < 0:
            sig = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS"}.get(
                -code, f"SIG{-code}"
            )
            tb = f"Signal {-code} ({sig}) received by PID {f['pid']}"
        else:
            tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return [
            f"  time      : {f['time']:%Y-%m-%d_%H:%M:%S}",
            f"  host      : {f['host']}",
            f"  rank      : {f['rank']} (local_rank: {f['local_rank']})",
            f"  exitcode  : {code} (pid: {f['pid']})",
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]
