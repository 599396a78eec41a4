"""A parsing worker process (``main``), started and driven by
:class:`~nccl_logsift.parse.parallel.SegmentPool`.

Reads frames from stdin (the setup, then one segment per frame) and writes one frame of tables per
segment to stdout, until stdin closes.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator

from nccl_logsift.memory import reuse_freed
from nccl_logsift.parse.parallel import Segment, read_frame, serve, write_frame


def main() -> None:
    reuse_freed()
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    setup = _next(requests)
    if setup is None:
        return
    for result in serve(setup, _segments(requests)):
        write_frame(answers, result)


def _segments(stream) -> Iterator[Segment]:
    while (segment := _next(stream)) is not None:
        yield segment


def _next(stream):
    frame = read_frame(stream)
    return None if frame is None else pickle.loads(frame)


if __name__ == "__main__":
    main()
