"""What the SQL thread reads with the change buffer on and off: pages read a row change.

Why lagd leaves out the entries InnoDB buffers (prefetch.md, "The change
buffer"): with ``innodb_change_buffering`` on, the SQL thread does not read a
non-unique secondary index's leaf to insert or delete-mark an entry, so a
probe of it would read a page the SQL thread does not.

A sandbox (source + replica, the replica's buffer pool ``--pool-mb``, 16 MB by
default, O_DIRECT) holds ``--rows`` rows of ``t(id PK, k INT, c, pad, KEY k)``.
Each round writes ``--changes`` changes of one kind on the source with the
replica's SQL thread stopped (UPDATEs of ``k``, DELETEs, INSERTs of new ids,
random rows, one a transaction), sets ``innodb_change_buffering`` on the
replica, starts the SQL thread and counts ``Innodb_buffer_pool_reads`` and the
change buffer's merges until it has caught up. Rounds alternate none/all
(then the order flips) ``--rounds`` times for each kind; the table grows
and shrinks little over a run (a few changes per thousand rows).

    .venv/bin/python -m tests.bench.bench_changebuf [--rows 1500000] [--changes 4000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.bench.bench_prefetch import status_of

COUNTERS = ("Innodb_buffer_pool_reads", "Innodb_ibuf_merges", "Innodb_ibuf_merged_inserts",
            "Innodb_ibuf_merged_delete_marks")


def _write(sb: Sandbox, kind: str, n: int, rng: random.Random, top: list[int]) -> None:
    conn = sb.source.connect("cb")
    try:
        with conn.cursor() as cur:
            for _ in range(n):
                row, k = rng.randrange(1, top[0]), rng.randrange(top[0])
                if kind == "update_k":
                    cur.execute("UPDATE t SET k = %s WHERE id = %s", (k, row))
                elif kind == "delete":
                    cur.execute("DELETE FROM t WHERE id = %s", (row,))
                else:
                    top[0] += 1
                    cur.execute("INSERT INTO t (id, k, c) VALUES (%s, %s, 'x')", (top[0], k))
    finally:
        conn.close()


def one(sb: Sandbox, kind: str, mode: str, n: int, rng: random.Random, top: list[int]) -> dict[str, Any]:
    sb.stop_sql_thread()
    _write(sb, kind, n, rng, top)
    sb.replica().query(f"SET GLOBAL innodb_change_buffering = '{mode}'")
    before, t0 = status_of(sb.replica(), COUNTERS), time.monotonic()
    sb.start_sql_thread()
    sb.wait_caught_up(timeout=600)
    seconds = time.monotonic() - t0
    after = status_of(sb.replica(), COUNTERS)
    d = {c: after[c] - before[c] for c in COUNTERS}
    return {"kind": kind, "mode": mode, "changes": n, "seconds": round(seconds, 2),
            "reads_per_change": round(d["Innodb_buffer_pool_reads"] / n, 2),
            "merges": d["Innodb_ibuf_merges"], "merged_inserts": d["Innodb_ibuf_merged_inserts"],
            "merged_delete_marks": d["Innodb_ibuf_merged_delete_marks"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--changes", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pool-mb", type=int, default=16)
    args = ap.parse_args(argv)
    cfg = SandboxConfig(replica_buffer_pool_mb=args.pool_mb, source_buffer_pool_mb=256, o_direct=True)
    rng = random.Random(7)
    runs: list[dict[str, Any]] = []
    with Sandbox(cfg) as sb:
        sb.source.query("CREATE DATABASE cb")
        sb.source.query("CREATE TABLE cb.t (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL,"
                        " pad CHAR(60) NOT NULL DEFAULT '', KEY k (k))")
        for lo in range(1, args.rows + 1, 250_000):
            hi = min(args.rows, lo + 249_999)
            sb.source.query(f"INSERT INTO cb.t (id, k, c) SELECT seq, FLOOR(RAND(seq) * {args.rows}), 'x'"
                            f" FROM seq_{lo}_to_{hi}", db="cb")
        sb.wait_caught_up(timeout=900)
        top = [args.rows]
        for r in range(args.rounds):
            for kind in ("update_k", "delete", "insert"):
                for mode in (("none", "all") if r % 2 == 0 else ("all", "none")):
                    run = one(sb, kind, mode, args.changes, rng, top)
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    print("\n| changes | innodb_change_buffering | pages read a change (median, runs) | seconds (median) |"
          " change-buffer merges a change |")
    print("|---|---|---|---|---|")
    for kind in ("update_k", "delete", "insert"):
        for mode in ("none", "all"):
            got = [x for x in runs if x["kind"] == kind and x["mode"] == mode]
            reads = [x["reads_per_change"] for x in got]
            each = ", ".join(f"{v:.2f}" for v in reads)
            print(f"| {kind} | {mode} | {statistics.median(reads):.2f} ({each})"
                  f" | {statistics.median(x['seconds'] for x in got):.1f}"
                  f" | {statistics.median(x['merges'] / x['changes'] for x in got):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
