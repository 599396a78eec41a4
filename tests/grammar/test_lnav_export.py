"""``logsift grammar export --lnav``: the lnav format generated from the launcher and envelope grammars.

The tests at the end run the real lnav when it is installed (Debian: ``apt-get install lnav``) and skip
otherwise: lnav loads the format (which checks every sample against every pattern, and each sample's level)
and reads log files with it headless.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import regex

from nccl_logsift.grammar import Layer, load_grammars
from nccl_logsift.grammar.lnav import FORMAT_NAME, SCHEMA_URL, lnav_level, lnav_patterns
from nccl_logsift.grammar.pcre import from_pcre
from nccl_logsift.grammar.registry import grammar_root

GRAMMARS = load_grammars()
LNAV = shutil.which("lnav")
if LNAV is None and os.environ.get("LOGSIFT_REQUIRE_LNAV") == "1":
    raise RuntimeError("lnav is required (LOGSIFT_REQUIRE_LNAV=1, as CI sets) but not installed")
needs_lnav = pytest.mark.skipif(LNAV is None, reason="lnav is not installed (Debian: apt-get install lnav)")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The export as the CLI writes it to a file, and its text."""
    from click.testing import CliRunner

    from nccl_logsift.cli import cli

    path = tmp_path_factory.mktemp("lnav") / "logsift_log.json"
    result = CliRunner().invoke(cli, ["grammar", "export", "--lnav", "-o", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return path, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def fmt(exported):
    return json.loads(exported[1])[FORMAT_NAME]


def compiled(fmt) -> dict[str, regex.Pattern]:
    return {name: regex.compile(from_pcre(spec["pattern"])) for name, spec in fmt["regex"].items()}


def claiming(fmt, line: str) -> list[str]:
    return [name for name, rx in compiled(fmt).items() if rx.fullmatch(line)]


def test_export_is_one_lnav_format_with_the_required_keys(exported):
    doc = json.loads(exported[1])
    assert doc["$schema"] == SCHEMA_URL and list(doc) == ["$schema", FORMAT_NAME]
    fmt = doc[FORMAT_NAME]
    required = {
        "title",
        "description",
        "regex",
        "level-field",
        "level",
        "value",
        "timestamp-field",
        "body-field",
        "sample",
    }
    assert required <= set(fmt)
    assert (fmt["level-field"], fmt["timestamp-field"], fmt["body-field"]) == ("level", "timestamp", "body")


def test_export_without_lnav_flag_is_a_usage_error(run_cli):
    result = run_cli("grammar", "export")
    assert result.exit_code == 2 and "Missing option '--lnav'" in result.output


def test_export_to_stdout_equals_the_file_and_is_deterministic(run_cli, exported):
    first, second = run_cli("grammar", "export", "--lnav"), run_cli("grammar", "export", "--lnav")
    assert first.exit_code == 0 and first.output == second.output == exported[1]


def test_export_reads_the_grammars_of_dir(run_cli, tmp_path):
    root = tmp_path / "grammars"
    shutil.copytree(grammar_root(), root)
    torch = root / "envelope" / "torch.toml"
    torch.write_text(torch.read_text().replace("W0726 10:59:50.786825", "W1126 08:00:00.000001"))
    result = run_cli("grammar", "export", "--lnav", "--dir", str(root))
    assert result.exit_code == 0 and "W1126 08:00:00.000001" in result.output
    assert "W1126" not in run_cli("grammar", "export", "--lnav").output


def test_every_pattern_is_pcre_and_compiles_with_time_level_and_body(fmt):
    for name, spec in fmt["regex"].items():
        pattern = spec["pattern"]
        assert "(?P<" not in pattern, f"{name}: Python named group left in a PCRE pattern"
        groups = regex.compile(from_pcre(pattern)).groupindex
        assert {"timestamp", "body"} <= set(groups), name
        assert pattern.startswith("^") and pattern.endswith("(?<body>.*)$"), name


def test_pattern_names_sort_in_the_order_they_were_composed(fmt):
    # lnav orders a format's patterns by name.
    names = list(fmt["regex"])
    assert names == sorted(names) == [p.name for p in lnav_patterns(GRAMMARS)]


def test_every_sample_is_claimed_by_exactly_one_pattern(fmt):
    # lnav checks each sample against every pattern; a second match with another level is an error there.
    for sample in fmt["sample"]:
        assert len(claiming(fmt, sample["line"])) == 1, sample["line"]


def test_every_pattern_has_a_sample(fmt):
    claimed = {claiming(fmt, s["line"])[0] for s in fmt["sample"]}
    assert claimed == set(fmt["regex"])


def test_every_sample_level_is_what_its_pattern_captures(fmt):
    levels = {name: regex.compile(rx) for name, rx in fmt["level"].items()}
    for sample in fmt["sample"]:
        [name] = claiming(fmt, sample["line"])
        captured = compiled(fmt)[name].fullmatch(sample["line"]).groupdict().get("level")
        expected = [lvl for lvl, rx in levels.items() if captured is not None and rx.search(captured)]
        assert expected == ([sample["level"]] if "level" in sample else []), sample["line"]


@pytest.mark.parametrize(
    "printed, level",
    [
        ("WARN", "error"),
        ("INFO", "info"),
        ("TRACE", "trace"),
        ("CALL", "debug"),
        ("E", "error"),
        ("W", "warning"),
        ("I", "info"),
        ("F", "fatal"),
        ("ERROR", "error"),
        ("WARNING", "warning"),
        ("ATTN", "notice"),
    ],
)
def test_nccl_and_glog_levels_map_to_one_lnav_level(fmt, printed, level):
    matching = [name for name, rx in fmt["level"].items() if regex.search(rx, printed)]
    assert matching == [level] and lnav_level(printed) == level


def test_host_process_thread_device_and_rank_fields_are_identifiers(fmt):
    values = fmt["value"]
    ranks = ("torch_rank", "local_rank", "task", "mpi_rank")
    for name in ("host", "pid", "tid", "dev", "launcher_host", *ranks):
        assert values[name].get("identifier") is True, name
    assert "identifier" not in values["src_file"] and values["pid"]["kind"] == "integer"
    assert values["partial"].get("hidden") is True


def covered_grammars(fmt):
    families = {f for p in lnav_patterns(GRAMMARS) for f in p.families}
    return [g for g in GRAMMARS.grammars if g.family in families]


def test_export_covers_the_launcher_and_envelope_grammars(fmt):
    covered = {g.family for g in covered_grammars(fmt)}
    prefixes = {g.family for g in GRAMMARS.grammars if g.layer in (Layer.LAUNCHER, Layer.ENVELOPE)}
    assert covered == prefixes


def test_a_sample_of_each_covered_grammar_is_in_the_export(fmt):
    # As written in its file, or behind a collector's time (a grammar whose samples carry none).
    lines = [s["line"] for s in fmt["sample"]]
    for grammar in covered_grammars(fmt):
        own = [s.line for s in grammar.samples]
        assert any(line.endswith(o) for line in lines for o in own), grammar.family


def test_every_timed_sample_of_the_grammars_is_claimed(fmt):
    # Every sample line that starts with a collector time, or is an NCCL/PyTorch line printing a full date.
    timed = regex.compile(
        r"^(?:\d{4}-\d\d-\d\dT|\[\d{4}-\d\d-\d\d |[EWIF]\d{4} |(?:\S+: )?\[rank\d+\]:\[[EWIF]\d{4} )"
    )
    lines = [s.line for g in covered_grammars(fmt) for s in g.samples if timed.match(s.line)]
    assert len(lines) >= 8
    for line in lines:
        assert len(claiming(fmt, line)) == 1, line


@pytest.mark.parametrize(
    "line",
    [
        "gpu-node-07:31842:31842 [3] NCCL INFO Using network IB",  # NCCL without NCCL_DEBUG_TIMESTAMP_FORMAT
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout",  # torch < 2.3
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0",
        "Epoch 3 loss 0.25",
    ],
)
def test_lines_without_a_time_are_not_claimed(fmt, line):
    # lnav would reject the format over such a sample, and shows such a line as part of the one before.
    assert claiming(fmt, line) == []


def test_c10_times_without_a_zero_padded_month_are_not_sampled(fmt):
    # lnav 0.11.1 reads no glog time "726 10:59:50..."; the grammar sample with one stays out of the export.
    assert any("[W726 " in s.line for g in GRAMMARS.grammars for s in g.samples)
    assert not any("[W726 " in s["line"] for s in fmt["sample"])


# ---- the real lnav


def lnav_env(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    return {**env, "HOME": str(home), "TZ": "UTC", "TERM": "dumb"}


@pytest.fixture(scope="module")
def lnav_home(exported, tmp_path_factory):
    """A HOME whose ~/.lnav/formats/installed/ holds the export, installed by ``lnav -i``."""
    home = tmp_path_factory.mktemp("home")
    proc = subprocess.run(
        [LNAV, "-i", str(exported[0])],
        check=False,
        env=lnav_env(home),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (home / ".lnav" / "formats" / "installed" / f"{FORMAT_NAME}.json").read_text() == exported[1]
    return home


def lnav_query(home, log, sql: str) -> list[dict]:
    """Rows of ``sql`` over ``log``, from lnav run headless (-n), written as JSON."""
    proc = subprocess.run(
        [LNAV, "-n", "-c", f";{sql}", "-c", ":write-json-to -", str(log)],
        check=False,
        env=lnav_env(home),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    # lnav reports a format it refuses (a sample no pattern matches, a level that differs) on stderr.
    assert proc.returncode == 0 and "error" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@needs_lnav
def test_lnav_accepts_the_format_and_reads_every_sample_at_its_level(lnav_home, fmt, tmp_path):
    log = tmp_path / "samples.log"
    log.write_text("".join(s["line"] + "\n" for s in fmt["sample"]))
    rows = lnav_query(lnav_home, log, f"SELECT log_line, log_level, log_body FROM {FORMAT_NAME}")
    assert [r["log_line"] for r in rows] == list(range(len(fmt["sample"])))
    for row, sample in zip(rows, fmt["sample"], strict=True):
        if "level" in sample:
            assert row["log_level"] == sample["level"], sample["line"]
        assert sample["line"].endswith(row["log_body"])


KUBECTL_LOG = """\
2024-07-19T10:22:31.100000000Z [default0]:gpu-7:311:311 [0] NCCL INFO Bootstrap : Using eth0
2024-07-19T10:22:31.200000000Z [default0]:Epoch 0 step 10 loss 2.31
2024-07-19T10:22:31.300000000Z [default0]:gpu-7:311:311 [0] NCCL INFO Using network IB
2024-07-19T10:22:35.400000000Z [default0]:[rank0]:[E719 10:22:35.400146912 ProcessGroupNCCL.cpp:607] Watchdog
2024-07-19T10:22:35.500000000Z [default0]:gpu-7:311:400 [0] net_ib.cc:1333 NCCL WARN NET/IB : error 12
2024-07-19T10:22:36.000000000Z W0719 10:22:36.000001 140538811684672 elastic/api.py:858] SIGTERM
"""


@needs_lnav
def test_lnav_reads_a_kubectl_log_of_mixed_lines_with_their_fields(lnav_home, tmp_path):
    # A collector-timed print between NCCL lines must not make lnav take the next NCCL lines as plain text.
    log = tmp_path / "pod.log"
    log.write_text(KUBECTL_LOG)
    columns = "log_time, log_level, host, pid, tid, local_rank, torch_rank, log_body"
    rows = lnav_query(lnav_home, log, f"SELECT {columns} FROM {FORMAT_NAME}")
    assert [r["log_level"] for r in rows][2:] == ["info", "error", "error", "warning"]
    assert [r["host"] for r in rows] == ["gpu-7", None, "gpu-7", None, "gpu-7", None]
    assert [r["local_rank"] for r in rows] == [0, 0, 0, 0, 0, None]
    # lnav's JSON writer types a column by its first row, where torch_rank is null: it comes back as text.
    assert int(rows[3]["torch_rank"]) == 0 and rows[4]["tid"] == 400
    assert rows[1]["log_body"] == "Epoch 0 step 10 loss 2.31"
    assert [r["log_time"] for r in rows] == [
        "2024-07-19 10:22:31.100",
        "2024-07-19 10:22:31.200",
        "2024-07-19 10:22:31.300",
        "2024-07-19 10:22:35.400",
        "2024-07-19 10:22:35.500",
        "2024-07-19 10:22:36.000",
    ]


@needs_lnav
def test_lnav_joins_an_untimed_nccl_line_to_the_timed_message_before(lnav_home, tmp_path):
    # NCCL 2.26+ stamps WARN lines only by default: the INFO lines after a WARN read as part of it.
    log = tmp_path / "nccl.log"
    log.write_text(
        "[2025-06-02 14:03:11.250] gpu-7:311:311 [3] include/alloc.h:253 (ncclCuMemAlloc) NCCL WARN oom\n"
        "gpu-7:311:311 [3] NCCL INFO init.cc:1870 -> 1\n"
        "[2025-06-02 14:03:12] gpu-7:311:311 [3] misc/socket.cc:63 NCCL WARN socket closed\n"
    )
    columns = "log_time, log_level, src_file, func, log_body"
    rows = lnav_query(lnav_home, log, f"SELECT {columns} FROM {FORMAT_NAME}")
    assert [(r["log_time"], r["log_level"], r["src_file"]) for r in rows] == [
        ("2025-06-02 14:03:11.250", "error", "include/alloc.h"),
        ("2025-06-02 14:03:12.000", "error", "misc/socket.cc"),
    ]
    assert rows[0]["func"] == "ncclCuMemAlloc" and "NCCL INFO init.cc:1870 -> 1" in rows[0]["log_body"]


@needs_lnav
def test_lnav_dates_a_year_less_glog_line_by_month_day_and_time(lnav_home, tmp_path):
    log = tmp_path / "glog.log"
    log.write_text("[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog timeout\n")
    [row] = lnav_query(lnav_home, log, f"SELECT log_time, log_level, torch_rank, src_line FROM {FORMAT_NAME}")
    # glog prints no year; lnav supplies one.
    assert row["log_time"][4:] == "-10-03 18:37:01.832"
    assert (row["log_level"], row["torch_rank"], row["src_line"]) == ("error", 1, 607)
