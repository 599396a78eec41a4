"""Shared test helpers: paths to fixtures and to the real corpus, a CLI runner, and the compiled or the
pure-Python loops (``loops``).

The real logs live outside the repository, in the project's shared folder. Tests find it through one setting,
``LOGSIFT_SHARED`` (default: ``../shared`` beside the checkout). Tests that need it skip with a reason when it
is absent, and the session header says where it was looked for; with ``LOGSIFT_REQUIRE_SHARED=1`` (as CI sets)
its absence is an error instead of a skip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED = Path(os.environ.get("LOGSIFT_SHARED") or ROOT / ".." / "shared").resolve()
CORPUS = SHARED / "corpus" / "real"
GPU_CORPUS = SHARED / "corpus" / "gpu-h200"
CORPUS_ABSENT = f"the real corpus is absent: {CORPUS} (set LOGSIFT_SHARED)"
# Real jobs this project ran itself (fixtures/captured/README.md): a directory of logs and flight-recorder
# dumps per job, with its truth beside it.
CAPTURED = FIXTURES / "captured"


def fixture_jobs() -> list[Path]:
    """Every job among the fixtures, as a user would hand it to logsift: a simulated log file or directory of
    per-rank files at the top of fixtures/, and each captured job's directory."""
    top = [p for p in FIXTURES.iterdir() if p != CAPTURED and (p.suffix == ".log" or p.is_dir())]
    return sorted(top) + sorted(p for p in CAPTURED.iterdir() if p.is_dir())


def fixture_truths() -> list[Path]:
    """The ground truth of every fixture job that has one: ``<job>.truth.json`` beside the job."""
    return sorted(FIXTURES.glob("*.truth.json")) + sorted(CAPTURED.glob("*.truth.json"))


def pytest_report_header(config) -> str:
    found = "found" if CORPUS.is_dir() else "ABSENT: tests of real logs will skip"
    return f"shared corpus (LOGSIFT_SHARED): {SHARED} ({found})"


def pytest_configure(config) -> None:
    if os.environ.get("LOGSIFT_REQUIRE_SHARED") == "1" and not CORPUS.is_dir():
        raise pytest.UsageError(
            f"LOGSIFT_REQUIRE_SHARED=1 but {CORPUS} is not a directory (set LOGSIFT_SHARED)"
        )


@pytest.fixture
def run_cli():
    from nccl_logsift.cli import cli

    def run(*args: str, input: bytes | str | None = None):
        return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)

    return run


@pytest.fixture(params=["compiled", "pure-python"])
def loops(request, monkeypatch):
    """Run the test with each implementation of the loops behind nccl_logsift.accel in turn (the compiled one
    is skipped where it is not built)."""
    from nccl_logsift import accel
    from nccl_logsift.accel import fallback

    implementation = fallback if request.param == "pure-python" else accel.compiled()
    if implementation is None:
        pytest.skip("the compiled loops are not built")
    for name in accel.ENTRY_POINTS:
        monkeypatch.setattr(accel, name, getattr(implementation, name))
    return implementation


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.iterdir() if p.is_file() and p.suffix != ".md")


@pytest.fixture(scope="session")
def corpus_job():
    """Parse a real corpus log by file name once per session; skip when ../shared is absent."""
    from nccl_logsift.pipeline import load_job

    cache: dict[str, object] = {}

    def get(name: str):
        path = CORPUS / name
        if not path.exists():
            pytest.skip(CORPUS_ABSENT)
        if name not in cache:
            cache[name] = load_job([str(path)])
        return cache[name]

    return get


# Runs the CLI and, as it exits, writes its peak resident memory (VmHWM, kB) to the file named first. The
# peak is the process's own: ru_maxrss of a child of this test process starts at the size of the test process
# it was forked from (Linux keeps the pre-exec high-water mark), which late in a suite is over a gigabyte.
_PEAK_WRAPPER = """
import atexit, sys
def _peak(path=sys.argv[1]):
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(kb)
atexit.register(_peak)
sys.argv = ["logsift", *sys.argv[2:]]
from nccl_logsift.cli import main
main()
"""


def cli_peak_mb(args: list[str], stdin, stdout, tmp_dir: Path) -> tuple[int, float]:
    """Run ``logsift ARGS`` in a fresh process; its exit status and its own peak resident memory in MB."""
    import subprocess
    import sys

    peak = tmp_dir / f"peak-{id(args)}.kb"
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_WRAPPER, str(peak), *args],
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    return proc.returncode, int(peak.read_text()) / 1024


# Run a command as a shell runs a foreground job: with Ctrl-C's SIGINT at its default disposition. A process
# started in the background by a non-interactive shell (`cmd &`, as CI runners and `nohup` wrappers may
# start the tests) inherits SIGINT ignored, and so would every command a test starts, which logsift then
# leaves ignored, as it must for `nohup logsift ...`.
_FOREGROUND = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def foreground(argv: list[str]) -> list[str]:
    """``argv`` (a program and its arguments) run with SIGINT at its default disposition."""
    return [sys.executable, "-c", _FOREGROUND, *argv]
