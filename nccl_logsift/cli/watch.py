"""``logsift watch``: follow a running job's log live, then give the same verdict as ``analyze``."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Sequence
from typing import Self, TextIO

import click
from rich.console import Console, RenderableType
from rich.live import Live

from nccl_logsift.cli.options import check_stdin, input_paths
from nccl_logsift.cli.output import text_width
from nccl_logsift.live import Feed, LiveEvent, LiveState
from nccl_logsift.live.keys import Keys
from nccl_logsift.model import Report
from nccl_logsift.pipeline import Analysis, ParseOptions, TableStream
from nccl_logsift.render.live import event_dict, live_view, report_dict, start_dict
from nccl_logsift.render.terminal import render_terminal

BATCH_WAIT = 0.25  # seconds: the parser hands out what arrived at least this often
# The most bytes of a live input parsed as one batch: past a few MB/s the wait above, not the size, ends a
# batch. Each batch pays the general parser's fixed cost (its queries and its regexes compiled again, some
# tens of ms however few its lines), which at 4 MiB batches kept a core busy at 50 MB/s of a log with 30%
# lines other than COLL.
LIVE_CHUNK_BYTES = 16 << 20


def live_options(interval: float) -> ParseOptions:
    """How watch parses: as analyze does (no lines rows for COLL calls: twice as fast, and memory stays
    bounded), in batches handed out at least every BATCH_WAIT seconds (or ``interval``, if shorter) and of
    at most LIVE_CHUNK_BYTES."""
    return ParseOptions(max_wait=min(BATCH_WAIT, interval), every_line=False, chunk_bytes=LIVE_CHUNK_BYTES)


@click.command()
@input_paths
@click.option(
    "--stall-after",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Report a rank that has not advanced for this long while a peer in its communicator is ahead.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "text", "json"]),
    default="auto",
    show_default=True,
    help="text: a live view; json: one JSON object per event; auto: text on a terminal, json otherwise.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=1.0),
    default=0.5,
    show_default=True,
    metavar="SECONDS",
    help="How often stalls are judged and the view redrawn, whether or not input arrives.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Show each live finding whole, wrapped, with its advice (by default one line each, cut at the "
    "terminal's edge); the key f switches between the two. JSON events always carry the whole finding.",
)
def watch(paths: tuple[str, ...], stall_after: float, fmt: str, interval: float, full: bool) -> None:
    """Watch a running job: ranks, collectives per second, where each rank is, stalls and WARNs as they
    happen.

    PATHS are log files, directories or - for standard input (the default); pipe a running job into it.
    At the end of the input, or on Ctrl-C, it prints the same verdict as `logsift analyze` (with --format
    json, as the last event). Live findings are early warnings; the verdict weighs the whole job.

    \b
    Examples:
      torchrun ... 2>&1 | tee job.log | logsift watch
      tail -n +1 -f job.log | logsift watch --stall-after 60
      kubectl logs -f train-0 | logsift watch --format json > events.jsonl
      srun -l python train.py 2>&1 | logsift watch --full
    """
    # Ctrl-C is handled below (InterruptOnce), and the feed copies a terminal itself.
    typed_log = check_stdin(paths)
    stream = TableStream(paths, live_options(interval))
    state = LiveState(stall_after)
    analysis = Analysis(stream)
    if fmt == "json" or (fmt == "auto" and not sys.stdout.isatty()):
        output: JsonLines | LiveScreen = JsonLines(sys.stdout, [s.path for s in stream.sources], stall_after)
    else:
        console = Console(highlight=False, width=text_width(None, sys.stdout.isatty()))  # as analyze
        # Keys come from the terminal, unless the log is being typed into it.
        output = LiveScreen(console, full, keys=None if typed_log else Keys())
    with Feed(stream) as feed, output:
        _follow(feed, state, analysis, output, interval)
    report = analysis.report(views=False)  # the verdict: nothing of the HTML page
    if isinstance(output, JsonLines):  # the screen's verdict lists them itself
        for note in report.notes:
            click.echo(f"note: {note}", err=True)
    output.report(report)


def _follow(
    feed: Feed, state: LiveState, analysis: Analysis, output: JsonLines | LiveScreen, interval: float
) -> None:
    """Until the input ends: fold batches in as they arrive and show their WARNs; every ``interval``, judge
    stalls and redraw.

    The first Ctrl-C ends standard input, so what was read still reaches the verdict; a second one aborts.
    """
    next_tick = time.monotonic()
    with InterruptOnce() as interrupt:
        while not feed.ended:
            for batch in feed.take(timeout=max(0.0, next_tick - time.monotonic())):
                analysis.add(batch)
                state.add(batch)
            tick = time.monotonic() >= next_tick
            output.show(state, state.check() if tick else state.warnings(), redraw=tick)
            if tick:
                next_tick = time.monotonic() + interval
            if interrupt.fresh() and not feed.stop():
                click.echo(
                    "Reading the rest of the input for the verdict; press Ctrl-C again to quit.", err=True
                )


class InterruptOnce:
    """While active, the first SIGINT only sets a flag (read once with :meth:`fresh`); the second aborts."""

    def __init__(self) -> None:
        self._interrupted = False
        self._unread = False

    def __enter__(self) -> Self:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def fresh(self) -> bool:
        """True once, after the first interrupt."""
        fresh, self._unread = self._unread, False
        return fresh

    def _handle(self, signum: int, frame) -> None:
        if self._interrupted:
            raise KeyboardInterrupt
        self._interrupted = self._unread = True


class JsonLines:
    """Events as JSON lines, each flushed at once so that a consumer sees it as it happens."""

    def __init__(self, file: TextIO, inputs: Sequence[str], stall_after: float):
        self.file = file
        self.inputs = list(inputs)
        self.stall_after = stall_after

    def __enter__(self) -> Self:
        self._write(start_dict(self.inputs, self.stall_after))
        return self

    def __exit__(self, *exc) -> None:
        self.file.flush()

    def show(self, state: LiveState, events: list[LiveEvent], redraw: bool) -> None:
        for event in events:
            self._write(event_dict(event))

    def report(self, report: Report) -> None:
        self._write(report_dict(report))

    def _write(self, obj: dict) -> None:
        self.file.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.file.flush()


FULL_KEY = "f"  # on the live view: findings whole, or one line each


class LiveScreen:
    """A rich Live view redrawn on the caller's timer (events are part of it); the verdict replaces it.
    With ``keys``, the key ``f`` switches the live findings between one line each and whole (``--full``)."""

    def __init__(self, console: Console, full: bool = False, keys: Keys | None = None):
        self.console = console
        self.full = full  # live findings whole (watch --full)
        self.keys = keys
        self._live = Live(console=console, auto_refresh=False, transient=True)

    def __enter__(self) -> Self:
        if self.keys is not None:
            self.keys.__enter__()
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._live.stop()
        finally:
            if self.keys is not None:
                self.keys.__exit__(*exc)

    def show(self, state: LiveState, events: list[LiveEvent], redraw: bool) -> None:
        if self.keys is not None and FULL_KEY in self.keys.pressed().lower():
            self.full = not self.full
            redraw = True
        if redraw:
            self._live.update(self.view(state), refresh=True)

    def view(self, state: LiveState) -> RenderableType:
        hint = ""
        if self.keys is not None and self.keys.available:
            hint = f"{FULL_KEY}: findings {'on one line' if self.full else 'whole'}"
        return live_view(state.snapshot(), self.console.height, self.console.width, self.full, hint)

    def report(self, report: Report) -> None:
        render_terminal(report, self.console)
