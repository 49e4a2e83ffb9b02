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

from lagd.prefetch.inserts import table_keys
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


# The catch-up benchmark's table (prefetch_setup): information_schema's rows of it.
_COLUMNS = [{"COLUMN_NAME": n, "ORDINAL_POSITION": i + 1, "IS_NULLABLE": "NO", "COLUMN_TYPE": t,
             "CHARACTER_SET_NAME": "utf8mb4" if "char" in t else None}
            for i, (n, t) in enumerate([("id", "int(11)"), ("k", "int(11)"), ("c", "char(120)"),
                                        ("pad", "char(60)")])]
_STATS = [{"INDEX_NAME": name, "NON_UNIQUE": 0 if name == "PRIMARY" else 1, "SEQ_IN_INDEX": 1,
           "COLUMN_NAME": c, "SUB_PART": None, "INDEX_TYPE": "BTREE"}
          for name, c in (("PRIMARY", "id"), ("k_1", "k"))]


def inserts(n: int, seed: int = 7) -> list[Statement]:
    """upsert_row_mixed's and mixed_fmt's INSERTs as a MIXED source logs them."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        if i % 4:
            sql = (f"INSERT INTO sbtest1 (id, k, c, pad) VALUES ({r.randrange(1, 12_000_000)},"
                   f" {r.randrange(12_000_000)}, 'x{r.random():.12f}', 'up')"
                   " ON DUPLICATE KEY UPDATE c = VALUES(c)")
        else:
            sql = (f"INSERT IGNORE INTO sbtest1 VALUES ({r.randrange(1, 12_000_000)},"
                   f" {r.randrange(12_000_000)}, 'mix', 'mix')")
        out.append(Statement("sbtest", sql, 0, 1_700_000_000))
    return out


def run_inserts(stmts: list[Statement]) -> float:
    """INSERTs into a table the batcher knows, upserts' rows found to exist as the answers say."""
    b = ProbeBatcher()
    b.learn_table("sbtest", "sbtest1", table_keys(_COLUMNS, _STATS))
    t0 = time.process_time()
    for s in stmts:
        for p in b.add_statement(s):
            if p.upsert:
                b.statements.inserts.found(p.schema, p.table, p.rows, p.rows)
    b.flush()
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
    ins = inserts(args.statements)
    best = min(run_inserts(ins) for _ in range(3))
    print(f"INSERTs and upserts: {best / len(ins) * 1e6:.2f} µs/statement over {len(ins)} statements"
          " (a table the batcher knows; probes built, not sent)")
    sample = statements(args.sample, seed=11)
    t0 = time.process_time()
    for s in sample:
        rewrite_statement_sql(s.sql, s.schema, s.header_time)
    slow = (time.process_time() - t0) / len(sample)
    print(f"sqlglot path:     {slow * 1e6:.0f} µs/statement over {len(sample)} statements")


if __name__ == "__main__":
    main()
