"""``logsift simulate``: write the logs a distributed training job would write, with a fault we choose."""

from __future__ import annotations

import re
from pathlib import Path

import click

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


class ByteSize(click.ParamType):
    """A size like 1GB, 500MB, 64KiB or 1000000 (decimal units; KiB/MiB/GiB are binary)."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            self.fail(f"{value!r} is not a size like 1GB, 500MB or 64KiB", param, ctx)
        size = int(float(m.group(1)) * _UNITS[unit])
        if size < 1:
            self.fail("the size must be positive", param, ctx)
        return size


def _scenario_names() -> list[str]:
    from nccl_logsift.simulate.scenarios import SCENARIOS

    return list(SCENARIOS)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "-s",
    "--scenario",
    metavar="NAME",
    help="What goes wrong: a scenario name from --list (default: healthy).",
)
@click.option("--list", "list_scenarios", is_flag=True, help="Print the scenarios, one per line, and exit.")
@click.option(
    "--ranks",
    type=click.IntRange(2, 4096),
    default=8,
    show_default=True,
    help="Number of ranks (GPUs, one process each), 2 to 4096.",
)
@click.option(
    "--nodes",
    type=click.IntRange(1),
    default=None,
    help="Number of hosts the ranks are spread over (default: 8 GPUs per host, or what the scenario needs).",
)
@click.option(
    "--ops",
    type=click.IntRange(1),
    default=40,
    show_default=True,
    help="About how many collectives each rank issues in the training loop.",
)
@click.option(
    "--nccl-version",
    default=None,
    metavar="V",
    help="NCCL release whose log format to write: 2.10, 2.14, 2.18, 2.21, 2.26, 2.27, 2.28, 2.29 or 2.30 "
    "(a patch level such as 2.18.5 is printed as given). Default: 2.21, or the first release that can "
    "show the scenario.",
)
@click.option(
    "--torch-version",
    default=None,
    metavar="V",
    help="PyTorch release whose watchdog and torchrun messages to write: 1.13, 2.0 to 2.8, or 2.13 "
    "(default: one that shipped with that NCCL).",
)
@click.option(
    "--layout",
    type=click.Choice(["interleaved", "per-rank", "srun", "torchrun", "mpirun"]),
    default="interleaved",
    show_default=True,
    help="How the output reaches disk: one interleaved stream, one NCCL_DEBUG_FILE per rank (a directory), "
    "or a launcher's labelled stream (srun -l, torchrun, mpirun --tag-output).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Random seed: the same seed and options give the same bytes.",
)
@click.option(
    "--size",
    type=ByteSize(),
    default=None,
    help="Stream about this much log (e.g. 1GB): steady-state training steps are repeated before the fault.",
)
@click.option(
    "--noise/--no-noise",
    default=True,
    show_default=True,
    help="Add what shares the stream in practice: progress lines, tqdm bars, Python warnings, torn lines.",
)
@click.option(
    "--nccl-debug/--no-nccl-debug",
    default=True,
    show_default=True,
    help="Whether the job ran with NCCL_DEBUG=INFO; without it NCCL prints nothing, and only "
    "PyTorch's, Python's and the launcher's lines are left.",
)
@click.option(
    "--torn-rate",
    type=click.FloatRange(0.0, 0.5),
    default=None,
    metavar="P",
    help="Probability per line that another process's output is glued into it "
    "(interleaved layout; default 0.002 with --noise).",
)
@click.option(
    "--comms",
    type=click.Choice(["groups", "world"]),
    default="groups",
    show_default=True,
    help="Which communicators the training step uses: Megatron-style tensor, pipeline and data-parallel "
    "groups (from 16 ranks), or the world communicator alone, with FSDP's AllGather, ReduceScatter and "
    "AllReduce calls.",
)
@click.option(
    "--interleave",
    type=click.Choice(["buffered", "op"]),
    default="buffered",
    show_default=True,
    help="How the ranks' COLL lines of the --size steady state meet in one stream: as NCCL's stdio "
    "buffers flush them, or op by op (every rank's n-th call before any rank's next, as line-buffered "
    "output arrives).",
)
@click.option(
    "--print-every",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    metavar="N",
    help="In the --size steady state, a training print after every N-th COLL line of a step (0: none "
    "besides --noise's one a step).",
)
@click.option(
    "--other-lines",
    type=click.FloatRange(0.0, 0.9),
    default=0.0,
    show_default=True,
    metavar="P",
    help="The fraction of the --size steady state's lines that are not COLL lines: NCCL INFO lines of "
    "the NET, INIT and tuning families, PyTorch's Python warnings and training prints.",
)
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    help="Where to write: a file, '-' for standard output, or a directory for --layout per-rank.",
)
@click.option(
    "--truth",
    "truth_path",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write the ground truth (what happened, to which ranks) as JSON to FILE.",
)
@click.option(
    "--flight-recorder",
    "flight_dir",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Also write the PyTorch Flight Recorder dumps (nccl_trace_rank_<rank>) of every rank "
    "alive when the first watchdog timeout fired into DIR; ranks that died before write none "
    "(the truth lists them).",
)
@click.option(
    "--flight-recorder-format",
    "flight_format",
    type=click.Choice(["pickle", "json"]),
    default="pickle",
    show_default=True,
    help="Write the dumps as PyTorch's pickle or as JSON (_dump_nccl_trace_json).",
)
@click.option(
    "--flight-recorder-buffer",
    "flight_buffer",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    metavar="N",
    help="TORCH_FR_BUFFER_SIZE: the dumps keep each rank's newest N entries.",
)
def simulate(
    scenario,
    list_scenarios,
    ranks,
    nodes,
    ops,
    nccl_version,
    torch_version,
    layout,
    seed,
    size,
    noise,
    nccl_debug,
    torn_rate,
    comms,
    interleave,
    print_every,
    other_lines,
    output,
    truth_path,
    flight_dir,
    flight_format,
    flight_buffer,
):
    """Simulate the logs of a distributed training job, with a fault injected where you choose.

    Writes what NCCL, PyTorch and the launcher print for every rank, in the exact line formats of the
    chosen releases, and optionally a ground-truth JSON naming the culprit ranks. Use it to try
    logsift on a failure you have not met yet, to build test fixtures, or to make big benchmark logs.

    \b
    Examples:
      logsift simulate --list
      logsift simulate -s rank-stall --ranks 16 -o stall.log --truth stall.json
      logsift simulate -s ib-error --nccl-version 2.27 --layout srun -o ib.log
      logsift simulate -s healthy --layout per-rank -o logs/
      logsift simulate -s healthy --size 1GB --no-noise -o big.log
      logsift simulate --ranks 32 --comms world --interleave op --print-every 50 --size 1GB -o world.log
      logsift simulate -s rank-stall -o job/stall.log --flight-recorder job/fr --truth job/truth.json
    """
    from nccl_logsift.simulate import OptionError, Options, write
    from nccl_logsift.simulate.scenarios import SCENARIOS

    if list_scenarios:
        width = max(len(n) for n in SCENARIOS)
        for name, sc in SCENARIOS.items():
            click.echo(f"{name:<{width}}  {sc.summary}")
        return
    if output is None:
        raise click.UsageError(
            "Missing option '-o' / '--output' (a file, '-' or a directory for --layout per-rank)."
        )
    name = scenario or "healthy"
    if name not in SCENARIOS:
        raise click.BadParameter(
            f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}",
            param_hint="'-s' / '--scenario'",
        )
    if output == "-" and layout == "per-rank":
        raise click.UsageError(
            "--layout per-rank writes one file per rank into a directory; give -o DIR, not '-'."
        )
    target = Path(output)
    if output != "-":
        if layout == "per-rank":
            if target.exists() and not target.is_dir():
                raise click.BadParameter(
                    f"{output} exists and is not a directory", param_hint="'-o' / '--output'"
                )
        elif target.is_dir():
            raise click.BadParameter(
                f"{output} is a directory; give a file name (or use --layout per-rank)",
                param_hint="'-o' / '--output'",
            )
        if not target.parent.is_dir():
            raise click.BadParameter(
                f"directory {target.parent} does not exist", param_hint="'-o' / '--output'"
            )
    if truth_path is not None and not Path(truth_path).parent.is_dir():
        raise click.BadParameter(
            f"directory {Path(truth_path).parent} does not exist", param_hint="'--truth'"
        )
    options = Options(
        scenario=name,
        ranks=ranks,
        nodes=nodes,
        ops=ops,
        nccl_version=nccl_version or default_nccl_version(SCENARIOS[name]),
        torch_version=torch_version,
        layout=layout,
        seed=seed,
        size=size,
        noise=noise,
        torn_rate=torn_rate,
        nccl_debug=nccl_debug,
        comms=comms,
        interleave=interleave,
        print_every=print_every,
        other_lines=other_lines,
    )
    try:
        sim = write(options, output, truth_path, flight_dir, flight_format, flight_buffer)
    except OptionError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"cannot write {exc.filename or output}: {exc.strerror or exc}") from None
    # On stderr, so that `-o -` keeps stdout for the log alone.
    click.echo(wrote_text(sim.job, output, truth_path), err=True)


def default_nccl_version(scenario) -> str:
    """The default release, or the first simulated one whose logs can show the scenario (slow-rank needs INFO
    timestamps, node-death NCCL's RAS)."""
    from nccl_logsift.simulate.versions import DEFAULT_NCCL, NCCL_PROFILES, nccl_profile, version_key

    if not scenario.min_nccl or version_key(scenario.min_nccl) <= version_key(DEFAULT_NCCL):
        return DEFAULT_NCCL
    able = [
        s for s in NCCL_PROFILES if version_key(nccl_profile(s).version) >= version_key(scenario.min_nccl)
    ]
    return min(able, key=lambda s: version_key(nccl_profile(s).version)) if able else scenario.min_nccl


def wrote_text(job, output: str, truth_path: str | None) -> str:
    target = "standard output" if output == "-" else output
    if output != "-":
        path = Path(output)
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        size = sum(p.stat().st_size for p in files)
        target += f" ({len(files)} file(s), {size:,} bytes)" if path.is_dir() else f" ({size:,} bytes)"
    nodes = len({proc.host.name for proc in job.cluster.procs})
    text = (
        f"Wrote {target}: scenario {job.scenario.name}, {job.ranks} ranks on {nodes} node(s), "
        f"NCCL {job.nccl.version}, PyTorch {job.torch.version}, layout {job.options.layout}."
    )
    if truth_path:
        text += f" Ground truth: {truth_path}."
    return text
