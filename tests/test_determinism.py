"""logsift analyze gives the same report on every run, whatever polars' threads do.

Polars returns the rows of a join, a group_by or a unique, and the order of equal keys of a sort, in an
order that depends on its threads unless asked to keep it. Two checks, each in subprocesses: the same input
under POLARS_MAX_THREADS=1 and 4, and under tests/polars_shuffled.py, which makes every such order an
arbitrary (seeded) shuffle for calls from the diagnosis, so an order that reaches the output shows on every
run instead of now and then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, CORPUS_ABSENT, FIXTURES

HELPER = Path(__file__).with_name("polars_shuffled.py")
# Fixtures whose report followed polars' threads (LS601 evidence; the grid's member order), and fixtures
# that exercise the other rules' tie-breaks.
FIXTURE_INPUTS = [
    "slow_rank_4ranks.log",
    "pp_deadlock_4ranks.log",
    "collective_mismatch_4ranks.log",
    "cuda_oom_4ranks.log",
    "healthy_8ranks.log",
    "rank_stall_8ranks.log",
    "duplicate_gpu_4ranks_per_rank",
]
# Real logs whose report followed polars' threads: the LS101 title's SeqNum (a tie between two SeqNums), the
# grid drawn among same-size communicators, LS203 evidence, the topology's GPU order, LS401 teardown messages.
CORPUS_INPUTS = [
    "LambdaLabsML__training_results_v4.0__Lambda__benchmarks__llama2_70b_lora__implementations__nemo__results_old__1cc_1x8x4xtp4pp1cp1_24-09-28_18-41-54__240928184157637375208_2.log",
    "LambdaLabsML__training_results_v4.0__Lambda__benchmarks__llama2_70b_lora__implementations__nemo__results_old__1cc_1x8x4xtp4pp1cp1_1008_24-10-09_06-04-18__241009060420237035816_10.log",
    "mlcommons__training_results_v3.1__Dell__results__XE9640x4H100-SXM-80GB__maskrcnn__result_0.txt",
    "Timez-zx__nccl-tests__nccl-fault.log",
    "mlcommons__training_results_v4.1__Oracle__results__512xBM.GPU.H100.8__llama2_70b_lora__result_2.txt",
]


def _reports(seed: int, paths: list[str], threads: int | None = None) -> dict[str, dict]:
    env = dict(os.environ)
    if threads is not None:
        env["POLARS_MAX_THREADS"] = str(threads)
    done = subprocess.run(
        [sys.executable, str(HELPER), str(seed), *paths], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["path"]: r for r in map(json.loads, done.stdout.splitlines())}


def _differences(a: dict[str, dict], b: dict[str, dict]) -> list[str]:
    return [Path(p).name for p in a if a[p] != b[p]]


def _fixtures() -> list[str]:
    return [str(FIXTURES / name) for name in FIXTURE_INPUTS]


def _corpus() -> list[str]:
    paths = [CORPUS / name for name in CORPUS_INPUTS]
    if not all(p.is_file() for p in paths):
        pytest.skip(CORPUS_ABSENT)
    return [str(p) for p in paths]


def test_fixture_reports_do_not_follow_polars_row_order():
    plain = _reports(0, _fixtures())
    for seed in (1, 2):
        assert _differences(plain, _reports(seed, _fixtures())) == []


def test_corpus_reports_do_not_follow_polars_row_order():
    plain = _reports(0, _corpus())
    for seed in (1, 2):
        assert _differences(plain, _reports(seed, _corpus())) == []


def test_reports_are_the_same_with_one_or_four_polars_threads():
    paths = _fixtures()[:2]
    assert _differences(_reports(0, paths, threads=1), _reports(0, paths, threads=4)) == []
