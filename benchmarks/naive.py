"""The reference a user would write in ten minutes: one Python loop, one regex per line, COLL lines only.

Run as ``python benchmarks/naive.py LOG`` (a file, or a directory of per-rank files, read one after the
other); ``run.py`` times it beside logsift. It is deliberately plain (no chunking, no vectorisation)
because that is the baseline the targets are stated against. A line may start with ``srun -l``'s label
(`` 3: ``), as a combined srun log's lines do.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow as pa

COLL = re.compile(
    r"^(?: *\d+: )?(\S+):(\d+):(\d+) \[(\d+)\] NCCL INFO (\w+): opCount ([0-9a-f]+) "
    r"sendbuff \S+ recvbuff \S+ "
    r"count (\d+) datatype (\d+) op (\d+) root (-?\d+) comm (0x[0-9a-f]+) \[nranks=(\d+)\]"
)
NAMES = ("host", "pid", "tid", "dev", "op", "opcount", "count", "datatype", "redop", "root", "comm", "nranks")


def collectives(path: str) -> pa.Table:
    columns: list[list[str]] = [[] for _ in NAMES]
    files = sorted(p for p in Path(path).iterdir() if p.is_file()) if Path(path).is_dir() else [path]
    for file in files:
        with open(file, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                match = COLL.match(line)
                if match:
                    for column, value in zip(columns, match.groups()):
                        column.append(value)
    return pa.table(dict(zip(NAMES, columns)))


if __name__ == "__main__":
    print(collectives(sys.argv[1]).num_rows)
