"""CPU per statement-based statement: fingerprint + cached template + batching.

Statements are generated in memory with varied literals over a dozen shapes
(sysbench-like primary-key UPDATEs, DELETEs, string keys with quotes and
escapes, IN lists of varying length, comments, a join, refusals); each is fed
to the ProbeBatcher as the engine does, and the probes are drained. CPU time
of this process (time.process_time), best of three; the sqlglot path per
statement (the cache keyed by exact text misses) on a sample for comparison.

    .venv/bin/python -m tests.bench.bench_fingerprint [--statements 40000]
"""

from __future__ import annotations

import argparse
import random
import time

from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.rewrite_sql import rewrite_statement_sql
from lagd.relaylog import Statement

SHAPES = [
    lambda r: f"UPDATE sbtest1 SET k=k+1 WHERE id={r.randrange(1, 10_000_000)}",
    lambda r: (f"UPDATE sbtest1 SET c='{r.random():.12f}-{r.randrange(10**6)}'"
               f" WHERE id={r.randrange(1, 10**7)}"),
    lambda r: f"DELETE FROM sbtest1 WHERE id={r.randrange(1, 10_000_000)}",
    lambda r: (f"UPDATE `orders` SET `state` = 'shipped', note = 'it''s \\'ok\\''"
               f" WHERE `id` = {r.randrange(10**9)}"),
    lambda r: f"DELETE FROM sessions WHERE token = '{r.getrandbits(64):016x}'",
    lambda r: "DELETE FROM t WHERE id IN (" + ", ".join(str(r.randrange(10**6))
                                                       for _ in range(r.randrange(1, 12))) + ")",
    lambda r: (f"/* app:worker-3 */ UPDATE counters SET n = n + {r.randrange(1, 9)}"
               f" WHERE k = -{r.randrange(10**5)}"),
    lambda r: (f"UPDATE items SET price = {r.random() * 100:.2f}"
               f" WHERE sku = x'{r.getrandbits(32):08x}' LIMIT 1"),
    lambda r: f"DELETE FROM log WHERE created < '2024-01-{r.randrange(1, 29):02d}' ORDER BY id LIMIT 1000",
    lambda r: f"UPDATE a JOIN b ON a.id = b.id SET a.v = {r.randrange(100)} WHERE b.k = {r.randrange(10**4)}",
    # RAND() in the SET list is not in the probe: fine; in the WHERE clause: refused, once per shape.
    lambda r: f"UPDATE t SET v = RAND() * {r.randrange(10)} WHERE id = {r.randrange(10**6)}",
    lambda r: f"DELETE FROM t WHERE id = {r.randrange(10**6)} AND RAND() < 0.5",
]


def statements(n: int, seed: int = 7) -> list[Statement]:
    r = random.Random(seed)
    return [Statement("shop", SHAPES[r.randrange(len(SHAPES))](r), 0, 1_700_000_000) for _ in range(n)]


def run(stmts: list[Statement]) -> float:
    b = ProbeBatcher()
    probes = 0
    t0 = time.process_time()
    for s in stmts:
        probes += len(b.add_statement(s))
    probes += len(b.flush())
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--statements", type=int, default=40_000)
    ap.add_argument("--sample", type=int, default=400, help="statements through the sqlglot path")
    args = ap.parse_args()
    stmts = statements(args.statements)
    best = min(run(stmts) for _ in range(3))
    print(f"fingerprint path: {best / len(stmts) * 1e6:.2f} µs/statement over {len(stmts)} statements"
          f" ({len(SHAPES)} shapes, templates built once per run included)")
    sample = statements(args.sample, seed=11)
    t0 = time.process_time()
    for s in sample:
        rewrite_statement_sql(s.sql, s.schema, s.header_time)
    slow = (time.process_time() - t0) / len(sample)
    print(f"sqlglot path:     {slow * 1e6:.0f} µs/statement over {len(sample)} statements")


if __name__ == "__main__":
    main()
