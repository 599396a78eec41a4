"""The simulator writes only line shapes that real logs of the same NCCL release contain.

Values (hex, numbers, addresses, host and interface names, plugin names) are masked in the NCCL
lines of a simulated healthy 2-node job and in every real log of ../shared/corpus/real whose banner
names the same release series. For each family of lines the real logs cover (first word of the
message, or transport / ring dump / COLL / Init), every simulated shape must occur in a real log,
unless it is in ALLOWED below with the reason the corpus cannot show it.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter

import pytest
from conftest import CORPUS, CORPUS_ABSENT

from nccl_logsift.simulate import Options, simulate
from nccl_logsift.simulate.layout import render_text

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=CORPUS_ABSENT)

SERIES = ("2.10", "2.18", "2.21", "2.26", "2.27")  # simulated releases with real logs of the same series

# (series or "*", regex on the masked shape, why no real log of that series can contain it)
ALLOWED = [
    (
        "2.10",
        r"via NET/<net>/<n>/GDRDMA$",
        (
            "the only 2.10 log (BigScience, Omni-Path hfi1) runs without GPUDirect RDMA; /GDRDMA is the §4.1 "
            "suffix of 2.8.3-2.11.4"
        ),
    ),
    (
        "2.26",
        r"via NET/<net>/<n>/GDRDMA$",
        (
            "the only 2.26 log is a GH200 (C2C) node, whose NET lines end in /GDRDMA(PCI); plain /GDRDMA is "
            "the non-C2C form (§4.1, §4.4)"
        ),
    ),
    (
        "2.18",
        r"^NET/Plugin : ",
        (
            "2.18 logs load an external net plugin (aws-ofi-nccl, HPC-X); the internal-plugin fallback lines "
            "are §4.2's 2.17.1-2.18.6 rows"
        ),
    ),
    (
        "2.21",
        r"^NET/Plugin: No plugin found",
        "2.21 logs load aws-ofi-nccl; 'No plugin found (%s)' is §4.2's 2.21.5 row",
    ),
    (
        "2.26",
        r"^NET/Plugin: Could not find: libnccl-net\.so\. Using internal net plugin\.$",
        "the 2.26 log loads aws-ofi-nccl; the internal fallback is §4.2's 2.26.2-2.27.7 row",
    ),
    (
        "*",
        r" parent <p> ",
        (
            "no real log has ncclCommSplit children (PyTorch eager init + new_group); §2.1 split "
            "START/COMPLETE rows"
        ),
    ),
]

ENVELOPE = re.compile(
    r"(?:^|[\s\]:>])[A-Za-z0-9_][\w.\-]*:\d+:\d+ (?:\[-?\d+\] )?"
    r"(?:\S+ (?:\([^)]*\) )?)?NCCL (INFO|WARN) (.*)$"
)
BANNER = re.compile(r"NCCL version (\d+\.\d+)\.\d+")


def mask(msg: str) -> str:
    """The message with its values replaced by placeholders, lists collapsed."""
    m = msg.rstrip()
    m = re.sub(r"^(AllReduce|AllGather|Broadcast|ReduceScatter|Reduce|Send|Recv|AlltoAll):", "<op>:", m)
    m = re.sub(r"opCount [0-9a-f]+", "opCount <n>", m)
    m = re.sub(r"^nccl\w+ comm ", "<func> comm ", m)
    m = re.sub(r"^Init timings - nccl\w+:", "Init timings - <func>:", m)
    m = re.sub(r"Setting affinity for GPU (\d+) to .*", r"Setting affinity for GPU \1 to <cpus>", m)
    m = re.sub(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", "<ip>", m)
    m = re.sub(r"(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:%\w+)?", "<ip>", m)
    m = re.sub(r"[\w.\-]+:<ip>", "<if>:<ip>", m)
    m = re.sub(r"0x[0-9a-f]+|\(nil\)", "<p>", m)
    m = re.sub(r"\bcuda\d+", "cuda<n>", m)
    m = re.sub(r"\b(?:mlx5|hfi1|bnxt_re|irdma)_?\d+\b", "<nic>", m)
    m = re.sub(r"via NET/[^/]+/", "via NET/<net>/", m)
    m = re.sub(r"^Using network .*$", "Using network <net>", m)
    m = re.sub(r"^(Initialized NET plugin|Assigned NET plugin) .*?( to comm)?$", r"\1 <net>\2", m)
    m = re.sub(r"\b[0-9a-f]*\d[0-9a-f]*\b", "<n>", m)
    m = re.sub(r"<n>\.<n>", "<n>", m)
    m = re.sub(r"(?: \[<n>\]<nic>:<n>/\w+(?:/SHARP)?)+", " <devs>", m)
    m = re.sub(r"(?: \[<n>\]<if>:<ip><<n>>)+", " <ifs>", m)
    m = re.sub(r"(?: \[<n>\] -?<n>/-?<n>/-?<n>->-?<n>->-?<n>)+.*$", " <trees>", m)
    m = re.sub(r"^(Channel <n>/<n> :)(?: +<n>)+(?: *<n>?\.\.\.)?$", r"\1 <ranks>", m)
    return m.replace("-<n>", "<n>")


def family(shape: str) -> str:
    if " via " in shape:
        return "transport"
    if shape.startswith("Channel"):
        return "ring dump"
    if "opCount" in shape:
        return "COLL"
    if "- Init " in shape:
        return "Init"
    return shape.split(" ")[0].rstrip(":")


def shapes(text: str) -> Counter:
    found: Counter = Counter()
    for line in text.splitlines():
        m = ENVELOPE.search(line)
        if m:
            found[(m.group(1), mask(m.group(2)))] += 1
    return found


@functools.cache
def real_shapes(series: str) -> Counter:
    found: Counter = Counter()
    for path in sorted(CORPUS.iterdir()):
        if not path.is_file() or path.suffix == ".md":
            continue
        text = path.read_text(errors="replace")
        if "RCCL version" in text:
            continue
        if series in set(BANNER.findall(text)):
            found.update(shapes(text))
    return found


def simulated_shapes(series: str) -> Counter:
    sim = simulate(
        Options(
            scenario="healthy", ranks=16, nodes=2, nccl_version=series, seed=1, noise=False, torn_rate=0.0
        )
    )
    return shapes(render_text(sim.job, sim.timeline, sim.records, random.Random(0)))


def allowed(series: str, shape: str) -> bool:
    return any(s in ("*", series) and re.search(rx, shape) for s, rx, _ in ALLOWED)


@pytest.mark.parametrize("series", SERIES)
def test_simulated_shapes_occur_in_real_logs_of_the_same_release(series):
    real = real_shapes(series)
    assert real, f"no real log of NCCL {series} in the corpus"
    covered = {family(s) for _, s in real}
    mine = simulated_shapes(series)
    unknown = sorted((level, s) for level, s in mine if family(s) in covered and (level, s) not in real)
    unexplained = [(level, s) for level, s in unknown if not allowed(series, s)]
    report = "\n".join(f"  {level} {s}" for level, s in unexplained)
    assert not unexplained, f"NCCL {series}: simulated shapes no real {series} log contains:\n{report}"
    # The comparison must bite: a good part of what the simulator writes is in families the corpus covers.
    checked = [s for _, s in mine if family(s) in covered]
    assert len(checked) >= 12, (
        f"only {len(checked)} simulated shapes are in families the {series} corpus covers"
    )


def test_every_allowance_is_still_needed():
    """An allow-list entry that matches nothing any more must be removed."""
    used = set()
    for series in SERIES:
        real = real_shapes(series)
        for level, s in simulated_shapes(series):
            if (level, s) not in real:
                used |= {
                    i for i, (ser, rx, _) in enumerate(ALLOWED) if ser in ("*", series) and re.search(rx, s)
                }
    assert used == set(range(len(ALLOWED))), [ALLOWED[i][:2] for i in set(range(len(ALLOWED))) - used]


# NCCL 2.28: the real logs of that release are the two H200 jobs (2.28.9) of ../shared/corpus/gpu-h200, 4
# nodes of one GPU over sockets that hung; what they cannot show, and why.
H200 = CORPUS.parent / "gpu-h200"
ALLOWED_228 = [
    (r" parent <p> ", "no split communicators in these jobs"),
    (r"via NET/<net>/<n>/GDRDMA$", "no IB device on these nodes: sockets only"),
    (r"^NET/IB : Using <devs>", "no IB device on these nodes"),
    (r"via P2P/", "one GPU per node: no intra-node connection"),
    (r"^Connected all trees$", "their collectives ran the ring algorithm only: trees never connected"),
    (r"- Destroy COMPLETE$", "both jobs hung and were stopped: no communicator was destroyed"),
]


@pytest.mark.skipif(not H200.is_dir(), reason="../shared/corpus/gpu-h200 is not available")
def test_simulated_2_28_shapes_occur_in_the_real_h200_jobs():
    real: Counter = Counter()
    for path in sorted(H200.glob("*/*")):
        if path.is_file() and path.name != "injected.json":
            real.update(shapes(path.read_text(errors="replace")))
    covered = {family(s) for _, s in real}
    mine = simulated_shapes("2.28")
    unknown = sorted((level, s) for level, s in mine if family(s) in covered and (level, s) not in real)
    unexplained = [(level, s) for level, s in unknown if not any(re.search(rx, s) for rx, _ in ALLOWED_228)]
    assert not unexplained, "NCCL 2.28: simulated shapes the H200 jobs do not contain:\n" + "\n".join(
        f"  {level} {s}" for level, s in unexplained
    )
    assert len([s for _, s in mine if family(s) in covered]) >= 12
