"""The ``logsift`` command: a click group whose subcommands live one per module."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import threading

import click

from nccl_logsift.cli.lazy_group import LazyGroup
from nccl_logsift.errors import LogsiftError
from nccl_logsift.memory import reuse_freed

# Imported only when the command runs or help lists it: analyze needs none of the simulator, the batch
# engines or the live view, and --version needs no command at all.
COMMANDS = {
    "analyze": "nccl_logsift.cli.analyze:analyze",
    "batch": "nccl_logsift.cli.batch:batch",
    "explain": "nccl_logsift.cli.explain:explain",
    "grammar": "nccl_logsift.cli.grammar:grammar",
    "parse": "nccl_logsift.cli.parse:parse",
    "report": "nccl_logsift.cli.analyze:report",
    "simulate": "nccl_logsift.cli.simulate:simulate",
    "tables": "nccl_logsift.cli.tables:tables",
    "watch": "nccl_logsift.cli.watch:watch",
}
OPTIONAL_COMMANDS = frozenset({"simulate"})  # the simulator is an optional part of a source checkout in progress


@click.group(
    cls=LazyGroup, lazy_commands=COMMANDS, optional=OPTIONAL_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda ctx, _, shown: _version(ctx, shown),
              help="Show the version and exit.")
@click.option("-v", "--verbose", count=True, help="Log what the tool is doing to stderr (-vv for debug detail).")
def cli(verbose: int) -> None:
    """Find out why a distributed GPU training job hung or failed, from the logs it already wrote.

    logsift reads NCCL debug output (NCCL_DEBUG=INFO/TRACE), PyTorch ProcessGroupNCCL messages and
    launcher output (torchrun, srun, mpirun, Ray, pdsh, docker/kubectl), as one interleaved stream or one
    file per rank, plain or compressed (.gz, .zst, .bz2).

    \b
    Start here:
      logsift analyze job.log              why did it hang? root cause first, evidence, what to do
      logsift report job.log -o hang.html  the same as one HTML page to share: grid, timeline, topology
      ... | logsift watch                  follow a running job live: stalls and WARNs as they happen
      logsift explain LS101                what a finding code means
      logsift parse job.log -o tables/     turn the logs into Parquet tables you can query
      logsift tables                       what every table and column means
    """
    _imports_done()
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _version(ctx: click.Context, shown: bool) -> None:
    if shown and not ctx.resilient_parsing:
        from nccl_logsift import __version__

        click.echo(f"logsift, version {__version__}")
        ctx.exit()


def main() -> None:
    """Entry point: run the CLI, turning LogsiftError into a one-line message and its exit code."""
    # The imports ahead (the command's module, polars, pyarrow) make a few hundred thousand objects that live
    # until the exit; the cyclic collector would walk them again and again (~0.1 s a run) while finding
    # no garbage among them. It is off until the command's module is in (see _imports_done).
    gc.disable()
    # numpy's OpenBLAS starts a thread per core when imported, and they spin for a while (~0.1 CPU s a run);
    # logsift does no linear algebra. Set before anything imports numpy; a value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    reuse_freed()  # freed read buffers are kept for the next chunks (nccl_logsift/memory.py)
    _leave(_run())


def _imports_done() -> None:
    """Called when click has imported the command to run: what the imports made is moved out of the
    collector's sight for good (``gc.freeze``) and collection resumes for what the command makes."""
    gc.freeze()
    gc.enable()


def _run() -> int:
    try:
        # Without standalone mode click returns ctx.exit()'s status (--fail-on) instead of raising it.
        status = cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except LogsiftError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    return status if isinstance(status, int) else 0


def _leave(code: int) -> None:
    """Exit with ``code`` without tearing the interpreter down.

    Once the command has written its output, the normal shutdown (freeing every module and polars' objects
    one by one) costs ~0.25 CPU s of a run that may take a
    second. The exit handlers still run and the standard streams are flushed; when a thread other than
    this one is still alive, the normal exit waits for it as usual.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that went away
            pass
    if threading.active_count() > 1:
        sys.exit(code)
    os._exit(code)
