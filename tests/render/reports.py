"""Reports the HTML tests render: fixtures with known culprits, simulated jobs made on the fly, real logs."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

from nccl_logsift.model import Report
from nccl_logsift.pipeline import analyze
from tests.conftest import CORPUS, FIXTURES

# Payloads that would change the page if any of them ran: each marks <body> with the place it came from.
PAYLOADS = {
    "message": "<script>document.body.setAttribute('data-pwned','message')</script>",
    "attribute": "\"onerror=\"document.body.setAttribute('data-pwned','attribute')\" x=\"",
    # no space: NIC names have none
    "nic": "<img/src='x'/onerror=document.body.setAttribute('data-pwned','nic')>",
    "pg": "<svg/onload=document.body.setAttribute('data-pwned','pg')>",
}
PATH_PAYLOAD = "<img src=x onerror=document.body.setAttribute('data-pwned','path')>"


def fixture_truth(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.truth.json").read_text())


def primary_ranks(truth: dict) -> list[int]:
    return sorted({r for f in truth["faults"] if f["primary"] for r in f["ranks"]})


@functools.cache
def report_of(*paths: str) -> Report:
    return analyze(list(paths))


def simulate(out: Path, *args: str) -> Path:
    """Run ``logsift simulate`` into ``out`` (a file), with its truth beside it."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nccl_logsift",
            "simulate",
            *args,
            "-o",
            str(out),
            "--truth",
            str(out.with_suffix(".json")),
        ],
        check=True,
        capture_output=True,
    )
    return out


def hostile_log(directory: Path) -> Path:
    """A simulated IB-error job whose log carries script payloads in a WARN message, a NIC name, a PyTorch
    process-group description, and in its own file name."""
    base = simulate(directory / "base.log", "-s", "ib-error", "--ranks", "4", "--seed", "3")
    text = base.read_text()
    text = text.replace("NCCL WARN", f"NCCL WARN {PAYLOADS['message']} {PAYLOADS['attribute']}", 3)
    text = text.replace("[0]mlx5_0:1/IB", f"[0]{PAYLOADS['nic']}")
    text = text.replace("(default_pg)", f"({PAYLOADS['pg']})")
    hostile = directory / f"job{PATH_PAYLOAD}.log"
    hostile.write_text(text)
    return hostile


def corpus(prefix: str) -> Path | None:
    if not CORPUS.is_dir():
        return None
    found = sorted(p for p in CORPUS.iterdir() if p.name.startswith(prefix))
    return found[0] if found else None
