"""How often the diagnosis is right across the simulator's whole matrix, not only on the fixtures.

    python benchmarks/accuracy.py                               every scenario, the default matrix
    python benchmarks/accuracy.py -s uneven-data -s rank-stall  some scenarios
    python benchmarks/accuracy.py --ranks 16 --versions 2.30 --seeds 1 2 3 --out results/accuracy.json

Each case simulates one scenario at one world size, launcher layout, NCCL release and seed, with its ground
truth, and analyzes it. A case is right when its root causes are exactly the truth's primary faults, each a
finding of the fault's kind naming exactly its culprit ranks, and a job that works (no primary fault) has
nothing at error or worse. A case whose root causes name exactly the culprit ranks, but not as the truth's
kinds (a crash that the layout shows only as a rank behind, one stop told twice), is counted as ``culprit``.
The cases run in a pool of worker processes (``--jobs``, default: the cores). A case the simulator cannot make
(a release too old for the scenario) is counted apart, as skipped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RANKS = (8, 16, 32)
LAYOUTS = ("interleaved", "srun", "torchrun", "mpirun", "per-rank")
VERSIONS = ("2.14", "2.21", "2.27", "2.30")
SEEDS = (1, 2)


def verdict(truth: dict, report: dict) -> tuple[str, str | None]:
    """``right``: the root causes are exactly the truth's primary faults, each of its kind and naming exactly
    its culprit ranks (no other root cause, none split or widened); ``culprit``: the root causes name
    exactly the culprit ranks, but not as the truth's kinds (a crash that the layout shows only as a rank
    behind, a stop told in two findings); ``wrong`` otherwise. With what is off."""
    primaries = {(f["kind"], tuple(sorted(f["ranks"]))) for f in report["findings"] if f["primary"]}
    wanted = {(f["kind"], tuple(sorted(f["ranks"]))) for f in truth["faults"] if f["primary"]}
    if not wanted:
        serious = [f["code"] for f in report["findings"] if f["severity"] in ("error", "critical")]
        return ("wrong", f"a working job, but {serious} at error or worse") if serious else ("right", None)
    if primaries == wanted:
        return "right", None
    why = f"want {sorted(wanted)}, got {sorted(primaries)}"
    named = {r for _, ranks in primaries for r in ranks}
    return ("culprit" if named == {r for _, ranks in wanted for r in ranks} else "wrong"), why


def run_case(case: tuple[str, int, str, str, int]) -> dict:
    from nccl_logsift.errors import LogsiftError
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import to_dict
    from nccl_logsift.simulate import Options, write

    scenario, ranks, layout, version, seed = case
    record = {"scenario": scenario, "ranks": ranks, "layout": layout, "nccl": version, "seed": seed}
    with tempfile.TemporaryDirectory() as folder:
        out, truth_path = Path(folder) / "job", Path(folder) / "truth.json"
        options = Options(scenario=scenario, ranks=ranks, layout=layout, nccl_version=version, seed=seed)
        try:
            write(options, str(out), str(truth_path))
        except (LogsiftError, ValueError) as error:
            return {**record, "result": "skipped", "why": str(error)[:200]}
        truth = json.loads(truth_path.read_text())
        result, why = verdict(truth, to_dict(analyze([str(out)])))
    return {**record, "result": result, **({"why": why} if why else {})}


def main(argv: list[str] | None = None) -> int:
    from nccl_logsift.simulate.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-s", "--scenario", action="append", choices=sorted(SCENARIOS), help="(repeatable)")
    parser.add_argument("--ranks", type=int, nargs="+", default=RANKS)
    parser.add_argument("--layouts", nargs="+", default=LAYOUTS, choices=LAYOUTS)
    parser.add_argument("--versions", nargs="+", default=VERSIONS)
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, help="write every case's result here (JSON)")
    args = parser.parse_args(argv)

    scenarios = args.scenario or sorted(SCENARIOS)
    cases = list(itertools.product(scenarios, args.ranks, args.layouts, args.versions, args.seeds))
    if args.jobs <= 1:
        results = [run_case(case) for case in cases]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run_case, cases, chunksize=4))

    tally: dict[str, Counter] = {s: Counter() for s in scenarios}
    for result in results:
        tally[result["scenario"]][result["result"]] += 1
    tally["all"] = sum(tally.values(), Counter())
    print(f"{'scenario':<22} {'right':>6} {'culprit':>8} {'wrong':>6} {'skipped':>8}")
    for scenario, counts in tally.items():
        judged = counts["right"] + counts["culprit"] + counts["wrong"]
        share = f"{100 * counts['right'] / judged:5.1f} % right" if judged else ""
        print(
            f"{scenario:<22} {counts['right']:>6} {counts['culprit']:>8} {counts['wrong']:>6} "
            f"{counts['skipped']:>8}   {share}"
        )
    for result in (r for r in results if r["result"] in ("wrong", "culprit")):
        where = f"{result['scenario']} {result['ranks']} ranks {result['layout']} {result['nccl']}"
        print(f"  {result['result']}: {where} seed {result['seed']}: {result['why']}")
    if args.out:
        matrix = {"ranks": args.ranks, "layouts": args.layouts, "nccl": args.versions, "seeds": args.seeds}
        head = {
            "commit": _commit(),
            "date": time.strftime("%Y-%m-%d"),
            "argv": sys.argv[1:],
            "matrix": matrix,
        }
        cases = ",\n".join(json.dumps(r, separators=(",", ":")) for r in results)  # a case a line
        args.out.write_text(json.dumps(head)[:-1] + ', "cases": [\n' + cases + "\n]}\n")
    return 0


def _commit() -> str | None:
    """The checkout's commit, when it is a git checkout."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return found.stdout.strip() or None


if __name__ == "__main__":
    raise SystemExit(main())
