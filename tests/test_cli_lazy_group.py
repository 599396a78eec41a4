"""The command group imports a command's module only when that command is used, and still lists them all."""

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, ROOT

from nccl_logsift import accel
from nccl_logsift.cli import COMMANDS, cli
from nccl_logsift.cli.lazy_group import LazyGroup

COMMAND_MODULES = sorted({target.partition(":")[0] for target in COMMANDS.values()})
# What only other commands or formats need: the simulator, the batch engines, the live view, the HTML page,
# rich (the terminal report and the progress bar, which JSON to a file without a terminal needs neither of)
# and pyarrow's Parquet module (parse writes Parquet; analyze keeps its tables in memory).
NOT_FOR_ANALYZE = [
    "nccl_logsift.simulate",
    "nccl_logsift.batch",
    "nccl_logsift.live",
    "nccl_logsift.render.html",
    "jinja2",
    "rich",
    "nccl_logsift.cli.batch",
    "nccl_logsift.cli.simulate",
    "nccl_logsift.cli.watch",
    "pyarrow.parquet",
]


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (SystemExit is caught; a name hidden
    as not installed is not held), as an exit handler sees them (the entry point leaves with os._exit once its
    exit handlers have run)."""
    script = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(k for k, v in sys.modules.items() "
        "if v is not None)), file=sys.stderr))\n"
        f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.splitlines()[-1]))


def test_importing_the_cli_imports_no_command_module_nor_the_heavy_libraries():
    loaded = imported_after("import nccl_logsift.cli")
    assert (
        sorted(
            loaded
            & {
                *COMMAND_MODULES,
                *NOT_FOR_ANALYZE,
                "polars",
                "pyarrow",
                "nccl_logsift.accel._kernels",
                "nccl_logsift.pipeline",
            }
        )
        == []
    )


def test_version_imports_no_command_module():
    loaded = imported_after("sys.argv = ['logsift', '--version']; from nccl_logsift.cli import main; main()")
    # The pure-Python loops (no compiled module, or LOGSIFT_PURE_PYTHON=1) are numpy code.
    heavy = {"polars", "numpy"} if accel.NATIVE else {"polars"}
    assert sorted(loaded & {*COMMAND_MODULES, *heavy}) == []


def test_version_is_the_installed_packages():
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    loops = "" if accel.NATIVE else " (pure-Python loops: several times slower)"
    assert result.returncode == 0 and result.stdout == f"logsift, version {version('nccl-logsift')}{loops}\n"


def test_analyze_imports_neither_the_simulator_nor_batch_nor_watch_nor_the_html_page(tmp_path):
    out = tmp_path / "findings.json"
    log = FIXTURES / "collective_mismatch_4ranks.log"
    loaded = imported_after(
        f"sys.argv = ['logsift', 'analyze', {str(log)!r}, '--format', 'json', '-o', {str(out)!r}]\n"
        "    from nccl_logsift.cli import main; main()"
    )
    assert json.loads(out.read_text())["findings"]
    assert "nccl_logsift.cli.analyze" in loaded
    assert sorted(loaded & set(NOT_FOR_ANALYZE)) == []
    assert sorted(loaded & {"numba", "llvmlite", "scipy"}) == []  # the loops are C, built at install


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_maps_to_the_command_of_that_name(name):
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command) and command.name == name


def test_help_lists_every_command_with_its_own_short_help():
    result = CliRunner().invoke(cli, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    commands = result.output.split("Commands:\n")[1].split("\n\n")[0]  # the exit status table follows
    listed = dict(line.split(maxsplit=1) for line in commands.splitlines())
    assert sorted(listed) == sorted(COMMANDS)
    for name, text in listed.items():
        short = cli.get_command(click.Context(cli), name).get_short_help_str(limit=1000)
        assert short.startswith(text.removesuffix("...")), name


def _group(lazy_commands: dict[str, str], optional: frozenset[str] = frozenset()) -> click.Group:
    @click.group(cls=LazyGroup, lazy_commands=lazy_commands, optional=optional)
    def group() -> None:
        """A group."""

    return group


def test_an_optional_command_whose_module_is_missing_is_absent():
    group = _group(
        {"tables": "nccl_logsift.cli.tables:tables", "gone": "nccl_logsift.cli.no_such_module:gone"},
        optional=frozenset({"gone"}),
    )
    helped = CliRunner().invoke(group, ["--help"])
    assert helped.exit_code == 0 and "tables" in helped.output and "gone" not in helped.output
    invoked = CliRunner().invoke(group, ["gone"])
    assert invoked.exit_code == 2 and "No such command 'gone'" in invoked.output


def test_a_required_command_whose_module_is_missing_raises():
    group = _group({"gone": "nccl_logsift.cli.no_such_module:gone"})
    with pytest.raises(ModuleNotFoundError):
        group.get_command(click.Context(group), "gone")


def test_a_target_that_is_not_a_command_is_a_type_error():
    group = _group({"answer": "nccl_logsift.cli:COMMANDS"})
    with pytest.raises(TypeError, match="not a click command"):
        group.get_command(click.Context(group), "answer")


def test_the_command_runs_with_the_collector_on_and_the_imports_frozen(tmp_path):
    """The entry point keeps the cyclic collector off while the command's module is imported, then freezes
    what the imports made and turns it back on: the command itself runs with collection as usual."""
    log = FIXTURES / "collective_mismatch_4ranks.log"
    script = (
        "import atexit, gc, json, sys\n"
        "import nccl_logsift.pipeline as pipeline\n"
        "seen = {'at_start': gc.isenabled()}\n"
        "real = pipeline.analyze\n"
        "def spy(*args, **kwargs):\n"
        "    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())\n"
        "    return real(*args, **kwargs)\n"
        "pipeline.analyze = spy\n"
        "atexit.register(lambda: print(json.dumps(seen), file=sys.stderr))\n"
        f"sys.argv = ['logsift', 'analyze', {str(log)!r}, '--format', 'json', '-o', "
        f"{str(tmp_path / 'out.json')!r}]\n"
        "from nccl_logsift.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    seen = json.loads(proc.stderr.splitlines()[-1])
    assert seen["at_start"] and seen["enabled"]
    assert seen["frozen"] > 10_000  # polars' and logsift's module objects
