"""``logsift watch`` end to end: a simulated job piped in at a controlled rate, Ctrl-C, the outputs.

The watcher runs as a subprocess with its standard input a pipe the test writes; a thread reads its
standard output and notes when each event line arrived, so latencies are measured on the test's clock.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from conftest import FIXTURES

from nccl_logsift.simulate import Options, simulate, write

STALL = FIXTURES / "rank_stall_8ranks.log"
COLL = re.compile(r"NCCL INFO \w+: opCount ")
STALL_AFTER = 1.0
REQUIRED_LATENCY = 2.0  # the requirement: a stalled rank is reported this soon after the stall begins
STARTUP = 30.0  # seconds a loaded CI machine may need to start Python and import polars


@dataclass
class SteppedJob:
    """A simulated job cut for feeding: lines before the first call, each rank's calls, everything after."""

    prelude: list[str]
    calls: dict[int, list[str]]  # global rank -> its COLL lines, in order
    tail: list[str]
    culprit: int


def rank_stall_job(seed: int = 1) -> SteppedJob:
    # Fed line by line, as NCCL <= 2.12 wrote them (later releases block-buffer:
    # tests/live/test_live_buffered.py).
    sim = simulate(Options(scenario="rank-stall", ranks=8, seed=seed, noise=False, nccl_version="2.10"))
    records = sorted(sim.records, key=lambda r: (r.t, r.order))
    lines = [(r.t, r.proc, line) for r in records for line in r.text.split("\n")]
    first_call = min(t for t, _, line in lines if COLL.search(line))
    job = SteppedJob([], defaultdict(list), [], sim.truth["faults"][0]["ranks"][0])
    for t, proc, line in lines:
        if COLL.search(line):
            job.calls[proc].append(line)
        else:
            (job.prelude if t < first_call else job.tail).append(line)
    return job


class Watch:
    """``logsift watch`` in a subprocess; :attr:`events` collects (arrival time, event) as they come."""

    def __init__(self, tmp_path: Path, *args: str):
        self.stderr_path = tmp_path / "stderr.txt"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nccl_logsift", "watch", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_path.open("wb"),
        )
        self.events: list[tuple[float, dict]] = []
        self._arrivals: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._arrivals.put((time.monotonic(), json.loads(raw)))
        self._arrivals.put(None)

    def write(self, lines: list[str]) -> None:
        self.proc.stdin.write("".join(line + "\n" for line in lines).encode())
        self.proc.stdin.flush()

    def expect(self, wanted, deadline: float) -> tuple[float, dict]:
        """The first event (already seen or arriving before ``deadline``, monotonic) for which ``wanted``
        holds."""
        for arrival in self.events:
            if wanted(arrival[1]):
                return arrival
        while (left := deadline - time.monotonic()) > 0:
            try:
                arrival = self._arrivals.get(timeout=left)
            except queue.Empty:
                break
            assert arrival is not None, f"watch ended early: {self.stderr_path.read_text()}"
            self.events.append(arrival)
            if wanted(arrival[1]):
                return arrival
        raise AssertionError(f"no such event in time; events: {[e for _, e in self.events]}")

    def finish(self, timeout: float = 60.0) -> int:
        """Close standard input if still open, and wait for the exit status."""
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)


def is_stall(event: dict) -> bool:
    return event["event"] == "finding" and event["finding"]["code"] == "LS101"


def is_report(event: dict) -> bool:
    return event["event"] == "report"


def test_stalled_rank_is_reported_within_2s_of_the_stall_and_named_by_the_final_report(tmp_path):
    job = rank_stall_job()
    watch = Watch(tmp_path, "--stall-after", str(STALL_AFTER), "--format", "json", "-")
    try:
        watch.expect(lambda e: e["event"] == "start", deadline=time.monotonic() + STARTUP)
        watch.write(job.prelude)
        stop = len(job.calls[job.culprit])  # steps before the culprit stops; its peers make a few more calls
        for step in range(max(len(c) for c in job.calls.values())):
            watch.write([calls[step] for calls in job.calls.values() if step < len(calls)])
            if step == stop - 1:
                culprit_last_call = time.monotonic()
            elif step == stop:
                peers_ahead = time.monotonic()
            time.sleep(0.08 if step < stop else 0.6)
        stalled_since = max(culprit_last_call + STALL_AFTER, peers_ahead)
        arrived, event = watch.expect(is_stall, deadline=stalled_since + REQUIRED_LATENCY + 3.0)
        assert -0.05 <= arrived - stalled_since <= REQUIRED_LATENCY, arrived - stalled_since
        assert event["finding"]["ranks"] == [job.culprit]
        # Standard input cannot be read again: the evidence quotes the lines the calls kept.
        assert all("opCount" in e["text"] for e in event["finding"]["evidence"]), event["finding"]["evidence"]
        watch.write(job.tail)
        assert watch.finish() == 0
        _, final = watch.expect(is_report, deadline=time.monotonic() + 30)
    finally:
        watch.proc.kill()
    assert {tuple(e["finding"]["ranks"]) for _, e in watch.events if is_stall(e)} == {(job.culprit,)}
    root = final["report"]["findings"][0]
    assert root["primary"] and root["code"] == "LS101" and root["ranks"] == [job.culprit]


def test_output_to_a_pipe_is_json_lines_ending_with_the_analyze_report(run_cli):
    log = STALL.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "watch", "--stall-after", "60"],
        input=log,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == b""
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert events[0] == {"event": "start", "at": 0.0, "inputs": ["-"], "stall_after": 60.0}
    assert [e["event"] for e in events[1:]] == ["report"]
    analyzed = run_cli("analyze", "-", "--format", "json", input=log)
    assert events[-1]["report"] == json.loads(analyzed.output)


def test_ctrl_c_ends_the_input_and_prints_the_report_of_what_was_read(tmp_path):
    # A line-flushing release (2.10): the live stall is the sign that every line written has been parsed.
    log = tmp_path / "stall.log"
    write(Options(scenario="rank-stall", ranks=8, seed=1, noise=False, nccl_version="2.10"), str(log))
    culprit = rank_stall_job().culprit
    watch = Watch(tmp_path, "--stall-after", str(STALL_AFTER), "--format", "json", "-")
    try:
        watch.expect(lambda e: e["event"] == "start", deadline=time.monotonic() + STARTUP)
        watch.write(log.read_text().splitlines())
        watch.expect(is_stall, deadline=time.monotonic() + 30)  # every line has been parsed by now
        watch.proc.send_signal(signal.SIGINT)
        assert watch.proc.wait(timeout=30) == 0  # standard input is still open
        _, final = watch.expect(is_report, deadline=time.monotonic() + 10)
    finally:
        watch.proc.kill()
        watch.proc.stdin.close()
    report = final["report"]
    assert report["inputs"][0]["lines"] == len(log.read_text().splitlines())
    assert report["findings"][0]["primary"] and report["findings"][0]["ranks"] == [culprit]
    assert "Traceback" not in watch.stderr_path.read_text()


def test_text_format_ends_with_the_verdict_analyze_prints(run_cli):
    watched = run_cli("watch", str(STALL), "--format", "text")
    analyzed = run_cli("analyze", str(STALL))
    assert watched.exit_code == 0
    assert watched.output == analyzed.output
    assert "Root cause: Rank 1 (gpu-node-009, pid 3602651, GPU 1)" in watched.output


def test_unreadable_input_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "watch", str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("Error:") and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_a_fast_live_input_is_parsed_in_few_large_batches(tmp_path):
    """Each batch of a live input pays the general parser's fixed cost, so watch hands out batches of up
    to 16 MiB (LIVE_CHUNK_BYTES, within BATCH_WAIT): 40 MB arriving at once are three batches, not ten."""
    from dataclasses import replace

    from nccl_logsift.cli.watch import BATCH_WAIT, live_options
    from nccl_logsift.pipeline import TableStream

    log = tmp_path / "fast.log"
    text = (FIXTURES / "healthy_8ranks.log").read_bytes()
    log.write_bytes(text * (40_000_000 // len(text)))
    size = log.stat().st_size
    options = live_options(interval=5.0)
    assert options.max_wait == BATCH_WAIT

    def batches(options) -> int:
        return sum(1 for _ in TableStream([str(log)], options))

    assert batches(options) <= -(-size // (16 << 20)) + 1
    assert batches(replace(options, chunk_bytes=4 << 20)) >= size // (4 << 20)
