"""Write a log of NCCL lines other than COLL mixed with training output, for memory runs of ``analyze -``.

The healthy fixture's NCCL INFO lines other than COLL calls come first, then SIZE MB of torchrun training
output (``[defaultN]:step …``) in which every sixth line is one of those NCCL lines again: init, NET,
topology, channel and transport lines by the million, as a job with NCCL_DEBUG_SUBSYS=ALL, a proxy in a
retry loop or a collector that replays its buffer writes them. ``--with-init`` repeats the communicators'
Init lines too (a communicator re-created again and again under the same address and commId, which no real
job does: each such line opens a communicator instance the analysis keeps).

    python benchmarks/chatter.py 10000 | /usr/bin/time -v logsift analyze -
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "healthy_8ranks.log"
PLAIN_PER_NCCL = 5  # training lines between two NCCL lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size_mb", type=float, help="megabytes of mixed output after the fixture's lines")
    parser.add_argument("--with-init", action="store_true", help="repeat the Init lines of communicators too")
    args = parser.parse_args()
    said = [
        line
        for line in FIXTURE.read_bytes().splitlines(keepends=True)
        if b" NCCL " in line and b"opCount" not in line
    ]
    again = said if args.with_init else [line for line in said if b" Init " not in line]
    out = sys.stdout.buffer
    out.writelines(said)
    target, written, step = int(args.size_mb * 1e6), 0, 0
    nccl = itertools.cycle(again)
    while written < target:
        block = []
        for _ in range(1000):
            loss = 1 / (step + 1)
            block += [
                f"[default{k}]:step {step} | loss {loss:.5f} | lr 3.0e-4 | tokens/s 12345\n".encode()
                for k in range(PLAIN_PER_NCCL)
            ]
            block.append(next(nccl))
            step += 1
        data = b"".join(block)
        out.write(data)
        written += len(data)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the reader stopped early
        sys.stderr.close()
