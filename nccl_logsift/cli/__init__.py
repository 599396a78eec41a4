"""The ``logsift`` command: a click group whose subcommands live one per module."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import signal
import sys
import threading
import traceback

import click

from nccl_logsift.cli.lazy_group import LazyGroup
from nccl_logsift.cli.output import ReaderGone, guard_standard_streams, silence_stdout
from nccl_logsift.errors import ExitCode, LogsiftError, OutputError
from nccl_logsift.memory import reuse_freed
from nccl_logsift.render.controls import visible

# Imported only when the command runs or help lists it: analyze needs none of the simulator, the batch
# engines or the live view, and --version needs no command at all.
COMMANDS = {
    "analyze": "nccl_logsift.cli.analyze:analyze",
    "batch": "nccl_logsift.cli.batch:batch",
    "explain": "nccl_logsift.cli.explain:explain",
    "grammar": "nccl_logsift.cli.grammar:grammar",
    "parse": "nccl_logsift.cli.parse:parse",
    "ranks": "nccl_logsift.cli.ranks:ranks",
    "report": "nccl_logsift.cli.analyze:report",
    "simulate": "nccl_logsift.cli.simulate:simulate",
    "tables": "nccl_logsift.cli.tables:tables",
    "watch": "nccl_logsift.cli.watch:watch",
}
OPTIONAL_COMMANDS = frozenset(
    {"simulate"}
)  # the simulator is an optional part of a source checkout in progress
DEBUG_VARIABLE = "LOGSIFT_DEBUG"
EXIT_STATUS = """\b
Exit status (every command):
  0    done (also when the reader of the output goes away, as with | head)
  1    only with --fail-on: a finding at or above that severity was found
  2    usage error, or an input or output that cannot be read or written
  3    internal error, a bug in logsift: one line on stderr; --debug shows the traceback
  130  interrupted (Ctrl-C)
"""
_debug = False  # set by --debug: the handler of an internal error runs after click's context is gone


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    optional=OPTIONAL_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_STATUS,
)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _, shown: _version(ctx, shown),
    help="Show the version and exit.",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Say on stderr what was read and parsed, and how long each stage took (-vv: per input, per "
    "line family, and the most frequent lines not understood).",
)
@click.option(
    "--debug",
    is_flag=True,
    envvar=DEBUG_VARIABLE,
    help=f"On an internal error, print the Python traceback (also {DEBUG_VARIABLE}=1).",
)
def cli(verbose: int, debug: bool) -> None:
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
    global _debug
    _debug = debug
    _imports_done()
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _version(ctx: click.Context, shown: bool) -> None:
    if shown and not ctx.resilient_parsing:
        from nccl_logsift import __version__, accel

        # The per-line loops: compiled, or their pure-Python versions (no C compiler at install, or
        # LOGSIFT_PURE_PYTHON=1), which give the same results several times slower.
        loops = "" if accel.NATIVE else " (pure-Python loops: several times slower)"
        click.echo(f"logsift, version {__version__}{loops}")
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
    guard_standard_streams()
    _leave(_run())


def _imports_done() -> None:
    """Called when click has imported the command to run: what the imports made is moved out of the
    collector's sight for good (``gc.freeze``) and collection resumes for what the command makes.

    Python's own Ctrl-C handler is put back too. Importing polars replaces it with one that sets polars'
    flag and raises KeyboardInterrupt only when Python next runs bytecode: a main thread waiting on a
    queue or lock (for a reader thread, for a worker) was never woken, and Ctrl-C did nothing. A SIGINT
    ignored since the start (nohup, a background job) stays ignored.
    """
    gc.freeze()
    gc.enable()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _run() -> int:
    """Run the command and return its exit status (the contract is in nccl_logsift/errors.py)."""
    status = ExitCode.OK
    try:
        status = _invoke()
        sys.stdout.flush()  # output still buffered fails here, where the handlers below see it
        return status
    except ReaderGone:  # `logsift analyze job.log | head -1`: what was wanted has been read
        silence_stdout()
        return status  # --fail-on's, when the command got that far
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("Aborted.", err=True)
        return ExitCode.INTERRUPTED
    except LogsiftError as exc:
        if isinstance(exc, OutputError):
            silence_stdout()
        click.echo(f"Error: {visible(str(exc))}", err=True)
        return exc.exit_code
    except Exception as exc:
        # The variable too: the error may come before click has parsed --debug.
        if _debug or os.environ.get(DEBUG_VARIABLE, "").lower() in ("1", "true", "yes", "on"):
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        click.echo(
            f"Error: internal error: {type(exc).__name__}{': ' if first else ''}{visible(first)} "
            f"(a bug in logsift; rerun with --debug for the traceback, and report it)",
            err=True,
        )
        return ExitCode.INTERNAL


def _invoke() -> int:
    try:
        # Without standalone mode click returns ctx.exit()'s status (--fail-on) instead of raising it.
        status = cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return ExitCode.USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    return status if isinstance(status, int) else ExitCode.OK


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
        except (OSError, ValueError, ReaderGone, OutputError):  # closed, or a reader that went away
            pass
    if threading.active_count() > 1:
        sys.exit(code)
    os._exit(code)
