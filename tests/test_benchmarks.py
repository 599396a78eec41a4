"""The benchmark harness runs end to end on a tiny log and writes the JSON the README describes.

Timing targets are not tested here: the numbers only have to be sane, since the machine may be busy.
"""

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
RESULT_FIELDS = [
    "case",
    "size",
    "tool",
    "input",
    "input_bytes",
    "compressed",
    "seconds",
    "mb_per_s",
    "vs_naive",
    "peak_rss_mb",
    "exit_code",
    "cpu_seconds",
    "tree_rss_mb",
]
MACHINE_FIELDS = [
    "cpu",
    "cores",
    "ram_gb",
    "load_average",
    "python",
    "polars",
    "pyarrow",
    "logsift_commit",
    "date",
]


def test_harness_measures_every_tool_on_plain_and_zst_logs(tmp_path):
    out = tmp_path / "latest.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "run.py"),
            "--sizes",
            "2MB",
            "--cases",
            "coll32,coll32.zst",
            "--no-pipe",
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "× baseline" in proc.stdout
    document = json.loads(out.read_text())
    assert list(document["machine"]) == MACHINE_FIELDS and document["machine"]["cores"] >= 1
    assert document["options"]["sizes"] == ["2MB"] and document["options"]["pipe_size"] is None
    results = document["results"]
    assert all(list(r) == RESULT_FIELDS for r in results)
    assert {(r["case"], r["tool"]) for r in results} >= {
        (case, tool) for case in ("coll32", "coll32.zst") for tool in ("analyze", "parse", "naive")
    }
    for r in results:
        assert r["exit_code"] == 0 and r["seconds"] > 0 and r["peak_rss_mb"] > 1
        assert r["tree_rss_mb"] >= r["peak_rss_mb"] and (r["cpu_seconds"] > 0 or r["tool"] == "rg")
        assert 1.5e6 < r["input_bytes"] < 3e6  # the decompressed size, for .zst inputs too
        assert r["mb_per_s"] > 0 and r["vs_naive"] > 0
        assert r["compressed"] == (
            r["case"] == "coll32.zst" and r["tool"] != "naive"
        )  # naive reads the plain file
    assert {r["vs_naive"] for r in results if r["tool"] == "naive"} == {1.0}
    assert (
        len(list((tmp_path / "cache").glob("*.log*"))) == 2
    )  # one plain log and its .zst, parse's tables gone


def test_harness_measures_the_world_and_per_rank_shapes_against_the_same_baseline(tmp_path):
    # (mixed32 is coll32 with --other-lines, whose lines tests/simulate/test_steady_state.py checks)
    out = tmp_path / "latest.json"
    cases = "world32,world32.per-rank,real8"
    argv = [sys.executable, str(BENCHMARKS / "run.py"), "--sizes", "2MB", "--cases", cases]
    argv += ["--tools", "analyze,naive", "--no-pipe", "--cache", str(tmp_path / "cache"), "--out", str(out)]
    argv += ["--against", str(ROOT)]  # "before" is this checkout too: the harness, not a change, is tested
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    before = {r["tool"] for r in results} - {"analyze", "naive"}
    assert len(before) == 1 and before.pop().startswith("analyze@")
    assert {(r["case"], r["tool"]) for r in results if "@" not in r["tool"]} == {
        (case, tool) for case in cases.split(",") for tool in ("analyze", "naive")
    }
    for r in results:
        assert r["exit_code"] == 0 and r["vs_naive"] > 0
        assert 1.5e6 < r["input_bytes"] < 3e6  # every file of the per-rank directory counted
    cache = tmp_path / "cache"
    per_rank = next(p for p in cache.iterdir() if p.is_dir())
    assert len(list(per_rank.iterdir())) == 33  # one file a rank, and the console's
    world = next(cache.glob("*world-op-p50-srun*.log")).read_text()
    assert " 0: step " in world and "NCCL INFO ReduceScatter: opCount" in world
    assert (cache / "captured-real8-2MB.log").read_text().startswith("gpu-node-11:1104:1104 [0] NCCL INFO")


def test_profile_charges_each_sample_to_the_innermost_logsift_function():
    spec = importlib.util.spec_from_file_location("profile_analyze", BENCHMARKS / "profile_analyze.py")
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    stacks = [
        (
            "main (nccl_logsift/cli/__init__.py);parse (nccl_logsift/parse/lineparser.py);collect "
            "(polars/engine.py) 3"
        ),
        "main (nccl_logsift/cli/__init__.py);report (nccl_logsift/pipeline.py) 1",
        " 2",  # before the first Python frame
    ]
    own, total = profile.aggregate(stacks)
    assert own == {
        "parse (nccl_logsift/parse/lineparser.py)": 3,
        "report (nccl_logsift/pipeline.py)": 1,
        profile.STARTUP: 2,
    }
    assert total["main (nccl_logsift/cli/__init__.py)"] == 4 and "collect (polars/engine.py)" not in total


def test_alternated_runs_of_two_checkouts_are_each_counted(tmp_path):
    out = tmp_path / "ab.json"
    log = ROOT / "fixtures" / "cuda_oom_4ranks.log"
    argv = [sys.executable, str(BENCHMARKS / "ab.py"), str(log), str(ROOT), str(ROOT), "--repeat", "2"]
    proc = subprocess.run(
        [*argv, "--json", str(out)], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert document["analyze_options"] == ["--format", "json"]
    first, second = document["checkouts"]
    assert first["checkout"] != second["checkout"]  # the same commit twice, told apart
    for row in (first, second):
        assert row["runs"] == 2 and row["path"] == str(ROOT)
        assert 0 < row["min_seconds"] <= row["mean_seconds"] <= row["max_seconds"]
        assert row["mean_cpu_seconds"] > 0 and row["max_peak_rss_mb"] > 1


def test_alternated_runs_refuse_a_checkout_without_its_compiled_loops(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "nccl_logsift", copy / "nccl_logsift", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    log = ROOT / "fixtures" / "cuda_oom_4ranks.log"
    argv = [sys.executable, str(BENCHMARKS / "ab.py"), str(log), str(copy), "--repeat", "1"]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "compiled loops are not built" in proc.stderr


def _accuracy():
    spec = importlib.util.spec_from_file_location("accuracy", BENCHMARKS / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy_judges_each_case_against_its_truth(tmp_path):
    out = tmp_path / "accuracy.json"
    argv = ["-s", "healthy", "-s", "rank-stall", "--ranks", "8", "--layouts", "srun"]
    assert (
        _accuracy().main([*argv, "--versions", "2.21", "--seeds", "1", "--jobs", "1", "--out", str(out)]) == 0
    )
    report = json.loads(out.read_text())
    assert report["matrix"]["ranks"] == [8] and len(report["cases"]) == 2
    assert {c["scenario"]: c["result"] for c in report["cases"]} == {
        "healthy": "right",
        "rank-stall": "right",
    }


def test_accuracy_tells_a_wrong_culprit_from_the_right_one_named_by_another_kind():
    verdict = _accuracy().verdict
    truth = {"faults": [{"kind": "process_exit", "primary": True, "ranks": [3]}]}

    def report(*primaries):
        found = [
            {"kind": k, "ranks": r, "primary": True, "severity": "critical", "code": "X"}
            for k, r in primaries
        ]
        return {"findings": found}

    assert verdict(truth, report(("process_exit", [3])))[0] == "right"
    assert verdict(truth, report(("rank_behind", [3])))[0] == "culprit"
    assert verdict(truth, report(("rank_behind", [2])))[0] == "wrong"
    assert verdict(truth, report(("process_exit", [3]), ("rank_behind", [3, 4])))[0] == "wrong"
    healthy = {"faults": []}
    assert verdict(healthy, report())[0] == "right"
    assert verdict(healthy, report(("rank_behind", [1])))[0] == "wrong"


def _extend_module():
    spec = importlib.util.spec_from_file_location("extend", BENCHMARKS / "extend.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("extend", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _numbered_on(text: str, extend) -> dict:
    """Each (process, communicator)'s opCounts in the order written, checked to run 0, 1, 2, ..."""
    counts: dict = {}
    for line in text.splitlines():
        if m := extend.OP_COUNT.search(line):
            counts.setdefault((extend._caller(line), m.group(2)), []).append(int(m.group(1), 16))
    for values in counts.values():
        assert values == list(range(len(values)))
    return counts


def _codes(path) -> tuple[str, list]:
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "analyze", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(proc.stdout)
    return report["verdict"], [(f["severity"], f["code"]) for f in report["findings"]]


def test_a_captured_console_extended_is_the_same_job_running_longer(tmp_path):
    extend = _extend_module()
    source = ROOT / "fixtures/captured/healthy8/console.log"
    original = source.read_text()
    out = tmp_path / "long.log"
    repeats = extend.extend(source, 2_000_000, out)
    text = out.read_text()
    assert repeats > 10 and 2_000_000 <= len(text) < 2_000_000 + 60_000
    before = _numbered_on(original, extend)
    after = _numbered_on(text, extend)
    assert after.keys() == before.keys()
    assert all(len(after[k]) == len(before[k]) * (repeats + 1) for k in before)
    # Start-up and shutdown once, as captured: the extended log starts with the original up to its last
    # collective line and ends with what followed it.
    last = max(i for i, line in enumerate(original.splitlines()) if " opCount " in line)
    kept = original.splitlines(keepends=True)
    assert text.startswith("".join(kept[: last + 1])) and text.endswith("".join(kept[last + 1 :]))
    assert text.count("Init COMPLETE") == original.count("Init COMPLETE")
    steps = [int(s) for s in extend.STEP.findall(text)]
    assert max(steps) == 8 + 12 * repeats  # the prints every 4 steps of 12 go on: 0, 4, 8, 12, ...
    assert _codes(out) == _codes(source)


def test_a_directory_of_debug_files_is_extended_file_by_file(tmp_path):
    extend = _extend_module()
    source = ROOT / "fixtures/captured/healthy_files"
    out = tmp_path / "long"
    repeats = extend.extend(source, 1_000_000, out)
    names = sorted(p.name for p in source.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    assert (out / "console.log").read_text() == (source / "console.log").read_text()  # no calls: as it was
    for name in names:
        if name != "console.log":
            counts = _numbered_on((out / name).read_text(), extend)
            original = _numbered_on((source / name).read_text(), extend)
            assert all(len(counts[k]) == len(original[k]) * (repeats + 1) for k in original)
    assert 1_000_000 <= sum(p.stat().st_size for p in out.iterdir()) < 1_050_000
    assert _codes(out) == _codes(source)


def test_extending_refuses_calls_that_are_not_numbered_one_after_the_other(tmp_path):
    extend = _extend_module()
    line = "h:1:1 [0] NCCL INFO AllReduce: opCount {} sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 "
    line += "root 0 comm 0xab [nranks=2] stream (nil)\n"
    log = tmp_path / "gap.log"
    log.write_text(line.format("0") + line.format("2"))
    with pytest.raises(ValueError, match="one after the other"):
        extend.extend(log, 10_000, tmp_path / "out.log")
    log.write_text("h:1:1 [0] NCCL INFO Init COMPLETE\n")
    with pytest.raises(ValueError, match="no collective line"):
        extend.extend(log, 10_000, tmp_path / "out.log")
