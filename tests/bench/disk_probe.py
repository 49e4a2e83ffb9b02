"""How fast the disk answers one random page read right now: a check to run before
each benchmark run on a shared machine, whose disk (and CPU) can drift by a third
within minutes (benchmarks.md, 2026-12-07, a thirty-first session).

Reads random 16 KiB pages of a large file with O_DIRECT, one at a time, as a cold
SQL thread does, and prints the median and 90th percentile of their times. Point it
at the benchmark's table file (in the cache's replica-base).

    .venv/bin/python -m tests.bench.disk_probe FILE [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import sys
import time

PAGE = 16384


def probe(path: str, seconds: float) -> tuple[int, float, float]:
    """Reads made, and the median and 90th percentile of their times in seconds."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        pages = os.fstat(fd).st_size // PAGE
        if pages < 1024:
            raise SystemExit(f"{path}: {pages} pages; point it at a file of the benchmark's table"
                             " (a few GB), which the page cache cannot hold")
        buf = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT needs
        times: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            at = random.randrange(pages) * PAGE
            t0 = time.perf_counter()
            os.preadv(fd, [buf], at)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    times.sort()
    return len(times), times[len(times) // 2], times[int(len(times) * 0.9)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--seconds", type=float, default=1.5)
    args = ap.parse_args(argv)
    try:
        n, median, p90 = probe(args.file, args.seconds)
    except OSError as e:
        print(f"cannot read {args.file}: {e.strerror}; give a file on the benchmark's disk", file=sys.stderr)
        return 2
    print(f"{n} reads: median {median * 1000:.3f} ms, 90th percentile {p90 * 1000:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
