"""CPU per transaction of the prefetch engine's own accounting, offline.

A MIXED source's single-statement transactions (start, one primary-key UPDATE,
end with its GTID) are fed to ``PrefetchEngine._consume`` in reads of 100
transactions, as the cursor hands them over, then popped by
``_advance_sql`` 20 transactions a poll, as the SQL thread applies them. No
server and no probe is sent: the pool takes every probe. ``--batcher none``
leaves the batcher out (the engine's bookkeeping alone), ``real`` uses the
statement batcher as the daemon does. CPU of this process
(``time.process_time``), the daemon's garbage-collector settings, median and
spread of the rounds.

In the catch-up the same code costs 3-4 times this (docs/benchmarks.md,
"Where a MIXED catch-up's CPU goes"): this is the part of lagd's CPU a
change to the accounting can move.

    .venv/bin/python -m tests.bench.bench_engine [--transactions 50000] [--batcher real]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from types import SimpleNamespace
from typing import Any

from lagd.daemon.main import tune_gc
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import RelayPosition, Statement, TransactionEnd, TransactionStart

TRX_BYTES = 300  # relay-log bytes of one such transaction


def events(n: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    off = 4
    for i in range(n):
        gtid = f"0-1-{i + 1}"
        out.append(TransactionStart("relay-bin.000002", off, "bin.000001", off, gtid, 1.0e9, 10**9, 1))
        out.append(Statement("bench", f"UPDATE sbtest1 SET c = c + 1 WHERE id = {rng.randint(1, 10**7)}",
                             0, 10**9))
        off += TRX_BYTES
        out.append(TransactionEnd("relay-bin.000002", off, "bin.000001", off, gtid, True, i, TRX_BYTES,
                                  0, 0, 1, frozenset()))
    return out


class TakesAll:
    """A pool that takes every probe and sends none."""

    size = 32
    queued = busy = 0

    def submit(self, probe: Any, tag: Any) -> bool:
        return True


class NoBatcher:
    purge_follows = True

    def add(self, event: Any) -> list[Any]:
        return []

    def add_statement(self, event: Any) -> list[Any]:
        return []

    def flush(self) -> list[Any]:
        return []


def engine(batcher: Any) -> PrefetchEngine:
    limits = control.limits_for(10, 100_000, 1 << 40, 1e9, 1 << 40, 0.25)
    tuning = control.Tuning(10, 100_000, 4, 8, adaptive=False)
    reader = SimpleNamespace(position=RelayPosition("relay-bin.000002", 4), decoder=None)
    return PrefetchEngine(reader, None, TakesAll(), batcher, limits, tuning)  # type: ignore[arg-type]


def one_round(evs: list[Any], n: int, kind: str) -> tuple[float, float]:
    """(µs a transaction in _consume, in _advance_sql)."""
    eng = engine(NoBatcher() if kind == "none" else ProbeBatcher(max_keys=16))
    t0 = time.process_time()
    for i in range(0, len(evs), 300):
        eng._consume(evs[i:i + 300])
    t1 = time.process_time()
    for j in range(20, n + 1, 20):
        eng._advance_sql((2, 4 + TRX_BYTES * j), float(j))
    t2 = time.process_time()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=50_000)
    ap.add_argument("--batcher", choices=("none", "real"), default="none")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    tune_gc()
    evs = events(args.transactions, 1)
    rounds = [one_round(evs, args.transactions, args.batcher) for _ in range(args.rounds)]
    for name, values in (("_consume", [r[0] for r in rounds]), ("_advance_sql", [r[1] for r in rounds])):
        print(f"{name:<13} batcher={args.batcher}: {statistics.median(values):.2f} µs a transaction"
              f" (median of {len(values)}; {min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
