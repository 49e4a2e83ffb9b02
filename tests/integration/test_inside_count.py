"""InnoDB's count of the rows the SQL thread has changed inside the transaction it applies
(real mariadbd): what places the SQL thread inside a big transaction, where its relay-log
position stands still until the commit (prefetch's cursor, control.rows_behind).

The SQL thread is held mid-transaction on a row lock another session of the replica takes,
so the count it stops at is known exactly.
"""

from __future__ import annotations

import asyncio
import time

from lagd.mysql.endpoint import Endpoint
from lagd.mysql.monitor import ReplicaMonitor
from lagd.mysql.progress import ApplierTrx
from lagd.prefetch import control
from lagd.sandbox.pair import Sandbox

ROWS = 3_000
HELD = 2_001  # the row the replica's other session holds: the SQL thread stops before it


def counts(ep: Endpoint, until: float) -> list[ApplierTrx | None]:
    async def main() -> list[ApplierTrx | None]:
        monitor = ReplicaMonitor.of(ep)
        seen: list[ApplierTrx | None] = []
        try:
            while time.monotonic() < until:
                trx = await monitor.applier_trx()
                seen.append(trx)
                if trx is not None and trx.rows_modified >= HELD - 1:
                    break
                # Not more often: InnoDB refreshes INNODB_TRX only once nobody has read it
                # for 0.1 s, so faster reads would see one count for ever.
                await asyncio.sleep(control.INSIDE_EVERY)
        finally:
            await monitor.close()
        return seen
    return asyncio.run(main())


def test_the_count_stops_where_the_sql_thread_waits_inside_its_transaction(
        sandbox: Sandbox, schema: str) -> None:
    src = sandbox.source
    src.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
    src.query(f"INSERT INTO t SELECT seq, 0 FROM seq_1_to_{ROWS}", db=schema)
    sandbox.wait_caught_up(timeout=60)
    d = sandbox.replica().dsn
    ep = Endpoint(d.host, d.port, d.user, d.password, role="replica")
    holder = sandbox.replica().connect()
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT id FROM `{schema}`.t WHERE id = {HELD} FOR UPDATE")
        # One transaction, its rows in key order (row-based: one row change each).
        src.query(f"UPDATE `{schema}`.t SET v = v + 1 ORDER BY id")
        seen = counts(ep, time.monotonic() + 30)
    finally:
        holder.rollback()
        holder.close()
    sandbox.wait_caught_up(timeout=60)
    last = seen[-1]
    assert last is not None and last.rows_modified == HELD - 1, seen[-5:]
    assert last.trx_id and last.connection_id is not None
    assert src.query(f"SELECT SUM(v) AS n FROM `{schema}`.t")[0]["n"] == ROWS
