"""Probe-rewrite cost per row change: the batcher's share of the prefetch hot path.

Row changes are built in memory (the decoder's output types, values of the
decoder's types) and fed to a ProbeBatcher with the default 16 keys per probe;
the time is CPU seconds of this process (one core), best of three runs.

    .venv/bin/python -m tests.bench.bench_rewrite [--rows 200000]

Shapes:

- ``pk-update``: sysbench-like table, single-row UPDATE of a non-indexed column
  (one primary-key probe key per row);
- ``2-secondary-update``: primary key + non-unique ``k`` + unique ``u``; the
  UPDATE changes ``k`` (PK key + old and new ``k`` entries per row);
- ``2-secondary-insert`` / ``2-secondary-delete``: the same table, every index
  probed from one image.

When ``tests/bench/bench_reader.py`` has left its relay log in the cache, the
same rate is also measured reading that log (decode + rewrite together).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import Column, Index, LogFiles, RelayLogReader, RowChange, RowKind, TableInfo
from lagd.sandbox.server import default_cache_dir
from tests.bench.bench_reader import SbtestResolver

PK = Index("PRIMARY", (0,), unique=True, primary=True)
SBTEST = TableInfo(
    "sbtest", "sbtest1",
    (Column("id", "long", False), Column("k", "long", False),
     Column("c", "string", False, charset="utf8"), Column("pad", "string", False, charset="utf8")),
    PK, (PK,), (0,), "table_map",
)
K = Index("k_1", (1,), unique=False)
U = Index("u_1", (2,), unique=True)
TWO = TableInfo(
    "sbtest", "two_idx",
    (Column("id", "long", False), Column("k", "long", False),
     Column("u", "varchar", False, charset="utf8"), Column("pad", "string", False, charset="utf8")),
    PK, (PK, U, K), (0, 1, 2), "table_map+information_schema",
)


def changes(shape: str, n: int) -> list[RowChange]:
    rng = random.Random(7)
    out = []
    for _ in range(n):
        i = rng.randrange(1, 10_000_000)
        k = rng.randrange(100_000)
        if shape == "pk-update":
            out.append(RowChange(SBTEST, RowKind.UPDATE, (i,), (i,)))
        elif shape == "2-secondary-update":
            u = f"user-{i}"
            out.append(RowChange(TWO, RowKind.UPDATE, (i, k, u), (i, k + 1, u)))
        elif shape == "2-secondary-insert":
            out.append(RowChange(TWO, RowKind.INSERT, None, (i, k, f"user-{i}")))
        else:
            out.append(RowChange(TWO, RowKind.DELETE, (i, k, f"user-{i}"), None))
    return out


def run(rows: list[RowChange]) -> tuple[float, int]:
    """CPU seconds to batch ``rows``, and the probes made."""
    batcher = ProbeBatcher()
    add = batcher.add
    probes = 0
    t0 = time.process_time()
    for rc in rows:
        probes += len(add(rc))
    probes += len(batcher.flush())
    return time.process_time() - t0, probes


def best_of(fn: Callable[[], tuple[float, int]], runs: int = 3) -> tuple[float, int]:
    return min((fn() for _ in range(runs)), key=lambda r: r[0])


def reader_with_rewrite() -> tuple[int, float, float] | None:
    """(rows, decode-only CPU s, decode+rewrite CPU s) on bench_reader's cached log."""
    caches = sorted((default_cache_dir() / "bench").glob("reader-*/files.json"))
    if not caches:
        return None
    files = [caches[-1].parent / name for name in json.loads(caches[-1].read_text())]

    def once(rewrite: bool) -> tuple[int, float]:
        reader = RelayLogReader(LogFiles.of(*files), resolver=SbtestResolver())
        batcher = ProbeBatcher()
        n = 0
        t0 = time.process_time()
        while True:
            batch = reader.read(1 << 24)
            if not batch and reader.at_tail:
                break
            for e in batch:
                if type(e) is RowChange:
                    n += 1
                    if rewrite:
                        batcher.add(e)
        batcher.flush()
        reader.close()
        return n, time.process_time() - t0

    n, decode = min((once(False) for _ in range(2)), key=lambda r: r[1])
    _, both = min((once(True) for _ in range(2)), key=lambda r: r[1])
    return n, decode, both


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--no-reader", action="store_true", help="skip the decode+rewrite measurement")
    args = ap.parse_args()
    print(f"{'shape':<22} {'rows':>8} {'probes':>8} {'µs/row':>8} {'rows/s':>10}")
    for shape in ("pk-update", "2-secondary-update", "2-secondary-insert", "2-secondary-delete"):
        rows = changes(shape, args.rows)
        cpu, probes = best_of(lambda rows=rows: run(rows))
        print(f"{shape:<22} {len(rows):>8} {probes:>8} {cpu / len(rows) * 1e6:>8.2f}"
              f" {len(rows) / cpu:>10,.0f}")
    if not args.no_reader:
        got = reader_with_rewrite()
        if got is None:
            print("(no cached relay log: run tests.bench.bench_reader once for decode+rewrite)")
        else:
            n, decode, both = got
            print(f"bench_reader's log, {n} single-row UPDATEs: decode {decode / n * 1e6:.2f} µs/row, "
                  f"decode+rewrite {both / n * 1e6:.2f} µs/row ({n / both:,.0f} rows/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
