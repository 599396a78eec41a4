"""Where the per-job task runs: a process pool on this machine, or Ray tasks on a cluster.

Both engines map :func:`~nccl_logsift.batch.task.run_job` over the jobs and yield each
:class:`~nccl_logsift.batch.task.JobOutcome` as it arrives, keeping a bounded number of jobs in flight.
A worker that dies (killed, out of memory) fails its job, not the batch.

This module imports nothing heavy at the top: the pool's worker initializer lives here and must run
before polars is imported in the worker, to size its thread pool.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from nccl_logsift.errors import LogsiftError

if TYPE_CHECKING:
    from nccl_logsift.batch.archive import JobInput
    from nccl_logsift.batch.task import JobOutcome

log = logging.getLogger(__name__)

IN_FLIGHT_PER_WORKER = 2  # enough to keep a worker busy while the driver handles an outcome
RAY_MISSING = "--engine ray needs Ray, an optional extra: pip install 'nccl-logsift[ray]'"


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _init_worker(polars_threads: int) -> None:
    """Give each worker a share of the cores: N workers each running polars on every core would thrash.

    Ctrl-C reaches the whole process group; a worker ignores it and the driver ends the workers itself
    (:func:`_stop_workers`), so that the pool is never left waiting on a worker that a KeyboardInterrupt
    left half-way."""
    os.environ["POLARS_MAX_THREADS"] = str(polars_threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_context() -> multiprocessing.context.BaseContext:
    # Never fork: polars is not fork-safe once its thread pool runs, and the driver has used it.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


class LocalEngine:
    """A pool of ``workers`` processes on this machine (spawned fresh, never forked)."""

    def __init__(self, workers: int | None = None, task: Callable[..., JobOutcome] | None = None) -> None:
        self.workers = max(1, workers or available_cpus())
        self.task = task  # run_job unless a test swaps it (it must be importable by the workers)

    def run(self, jobs: Sequence[JobInput], out: str, with_tables: bool) -> Iterator[JobOutcome]:
        suspects: list[JobInput] = []
        yield from self._pooled(deque(jobs), out, with_tables, self.workers, suspects)
        # The pool broke: one of the jobs in flight killed its worker. Run each alone to find which.
        for job in suspects:
            alone: list[JobInput] = []
            yield from self._pooled(deque([job]), out, with_tables, 1, alone)
            if alone:
                from nccl_logsift.batch.task import failed_outcome

                yield failed_outcome(
                    job, out, "the worker process analysing this job died (killed, or out of memory)"
                )

    def _pooled(
        self, pending: deque, out: str, with_tables: bool, workers: int, suspects: list[JobInput]
    ) -> Iterator[JobOutcome]:
        """Run ``pending`` on a pool; when the pool breaks, set the jobs it lost aside and go on with a new
        one."""
        from nccl_logsift.batch.task import failed_outcome, run_job

        task = self.task or run_job
        threads = max(1, available_cpus() // workers)
        while pending:
            pool = ProcessPoolExecutor(
                workers, mp_context=_pool_context(), initializer=_init_worker, initargs=(threads,)
            )
            in_flight: dict[Future, JobInput] = {}
            broken = False
            try:
                while (pending or in_flight) and not broken:
                    while pending and len(in_flight) < workers * IN_FLIGHT_PER_WORKER:
                        job = pending.popleft()
                        in_flight[pool.submit(task, job, out, with_tables)] = job
                    done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                    for future in done:
                        job = in_flight.pop(future)
                        try:
                            yield future.result()
                        except BrokenProcessPool:
                            suspects.append(job)
                            broken = True
                        except Exception as exc:  # the outcome could not come back; the batch goes on
                            log.debug("job %s: no outcome", job.job_id, exc_info=True)
                            yield failed_outcome(job, out, f"{type(exc).__name__}: {exc}")
                suspects.extend(in_flight.values())  # lost with a broken pool
                in_flight.clear()
            except BaseException:
                # Ctrl-C, or the caller stopped early: end the jobs in flight now. A job's files are renamed
                # into place whole and its jobs row is written last, so a rerun analyses exactly the jobs
                # that were cut off.
                _stop_workers(pool)
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers and wait for them. Without this, shutting the pool down waits for the
    jobs they run, and so does the interpreter's exit (concurrent.futures joins its pools at exit)."""
    processes = list((pool._processes or {}).values())  # no public way to end a pool's workers before 3.14
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


class RayEngine:
    """Ray tasks on the cluster at ``address``, or on a Ray started here when no address is given."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        self.address = address
        self.workers = workers

    def run(self, jobs: Sequence[JobInput], out: str, with_tables: bool) -> Iterator[JobOutcome]:
        ray = import_ray()
        from nccl_logsift.batch.task import failed_outcome, run_job

        started_here = not ray.is_initialized()
        if started_here:
            self._init(ray)
        try:
            # --jobs caps the tasks running at once; by default Ray queues twice the cluster's CPUs.
            limit = self.workers or IN_FLIGHT_PER_WORKER * max(1, int(ray.cluster_resources().get("CPU", 1)))
            # One CPU per task, so polars gets one thread; retry once if the node running it is lost.
            task = ray.remote(num_cpus=1, max_retries=1)(run_job).options(
                runtime_env={"env_vars": {"POLARS_MAX_THREADS": "1"}}
            )
            pending = deque(jobs)
            in_flight: dict = {}
            while pending or in_flight:
                while pending and len(in_flight) < limit:
                    job = pending.popleft()
                    in_flight[task.remote(job, out, with_tables)] = job
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    job = in_flight.pop(ref)
                    try:
                        yield ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                        yield failed_outcome(job, out, f"the Ray task analysing this job failed: {first}")
        finally:
            if started_here:
                ray.shutdown()

    def _init(self, ray) -> None:
        settings = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        try:
            if self.address:
                ray.init(address=self.address, **settings)
            else:
                ray.init(num_cpus=self.workers or available_cpus(), **settings)
        except (
            ConnectionError,
            ValueError,
            RuntimeError,
        ) as exc:  # unreachable, malformed, or Ray Client missing
            raise LogsiftError(
                f"cannot start or join Ray{f' at {self.address}' if self.address else ''}: {exc}"
            ) from exc


def import_ray():
    """Ray, imported only when asked for: it is an optional extra."""
    try:
        import ray
    except ImportError:
        raise LogsiftError(RAY_MISSING) from None
    return ray


def engine_for(name: str, workers: int | None = None, address: str | None = None):
    if name == "local":
        if address:
            raise LogsiftError("--address is for --engine ray")
        return LocalEngine(workers)
    if name == "ray":
        import_ray()
        return RayEngine(address, workers)
    raise LogsiftError(f"unknown engine {name!r}: choose local or ray")
