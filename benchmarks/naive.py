"""The reference a user would write in ten minutes: one Python loop, one regex per line, COLL lines only.

Run as ``python benchmarks/naive.py LOG``; ``run.py`` times it beside logsift. It is deliberately plain
(no chunking, no vectorisation) because that is the baseline the targets are stated against.
"""

from __future__ import annotations

import re
import sys

import pyarrow as pa

COLL = re.compile(
    r"^(\S+):(\d+):(\d+) \[(\d+)\] NCCL INFO (\w+): opCount ([0-9a-f]+) sendbuff \S+ recvbuff \S+ "
    r"count (\d+) datatype (\d+) op (\d+) root (-?\d+) comm (0x[0-9a-f]+) \[nranks=(\d+)\]"
)
NAMES = ("host", "pid", "tid", "dev", "op", "opcount", "count", "datatype", "redop", "root", "comm", "nranks")


def collectives(path: str) -> pa.Table:
    columns: list[list[str]] = [[] for _ in NAMES]
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            match = COLL.match(line)
            if match:
                for column, value in zip(columns, match.groups()):
                    column.append(value)
    return pa.table(dict(zip(NAMES, columns)))


if __name__ == "__main__":
    print(collectives(sys.argv[1]).num_rows)
