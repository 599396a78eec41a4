"""CPU seconds of one ``analyze`` by thread: where the work runs, and whether two cores can be kept busy.

    python benchmarks/thread_cpu.py benchmarks/.cache/healthy-r32-n4-1GB.log

Runs ``pipeline.analyze`` in this process (after the imports, which are not counted), without the HTML
page's views, as the command runs it for text and JSON (a 4096-rank job's grid and topology took ~1.5 s),
and prints its wall time, the process's CPU time, the main thread's, each of logsift's threads' (reading,
scanning, the digest's fold) and the rest (polars' thread pool). A wall time close to the CPU time on a
machine with two idle cores means the threads waited for each other (the GIL) rather than ran side by side.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import Counter


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log", help="The log to analyze.")
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the command does (cli.main)
    by_thread = _count_thread_cpu()
    from nccl_logsift import pipeline

    wall, process, main_thread = time.perf_counter(), time.process_time(), time.thread_time()
    pipeline.analyze([args.log], views=False)  # as `logsift analyze` in text or JSON: no page to draw
    main_thread = time.thread_time() - main_thread
    process = time.process_time() - process
    print(f"wall {time.perf_counter() - wall:.2f} s, CPU {process:.2f} s: main thread {main_thread:.2f} s")
    for name, seconds in by_thread.most_common():
        print(f"  {name:<16} {seconds:.2f} s")
    print(f"  {'other':<16} {process - main_thread - sum(by_thread.values()):.2f} s (polars' threads)")


def _count_thread_cpu() -> Counter:
    """CPU seconds of every Python thread that ends from now on, by name (digits and separators dropped)."""
    totals: Counter = Counter()
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            totals[self.name.rstrip("0123456789_-")] += time.thread_time()

    threading.Thread.run = counted
    return totals


if __name__ == "__main__":
    main()
