"""The change buffer on a real replica: entries InnoDB buffers are not probed.

MariaDB 10.11 still has the change buffer, off by default; the test turns it on
(``SET GLOBAL innodb_change_buffering = 'all'``, MySQL 8.0's default) and back
off. The SQL thread waits on a row its first transaction changes while the
engine reads the rest: UPDATEs of an indexed column, DELETEs and INSERTs into a
table with a non-unique index ``k`` and a unique one ``u``. With the buffer on,
no probe names ``k`` (its entries would be buffered, not read, by the SQL
thread); the primary key and ``u`` are probed; the replica ends equal to the
source.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 300


def test_entries_the_change_buffer_takes_are_not_probed(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, u INT NOT NULL,"
                    " c INT NOT NULL DEFAULT 0, KEY k (k), UNIQUE KEY u (u))")
    sb.source.query(f"INSERT INTO t (id, k, u) SELECT seq, seq, seq FROM seq_1_to_{ROWS}", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    replica = sb.replica()
    try:
        replica.query("SET GLOBAL innodb_change_buffering = 'all'")
        conn = sb.source.connect(schema, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION binlog_format = 'ROW'")
                cur.execute("UPDATE t SET c = 1 WHERE id = 1")  # the SQL thread waits here
                for i in range(2, ROWS // 3):
                    cur.execute(f"UPDATE t SET k = k + {ROWS} WHERE id = {i}")
                for i in range(ROWS // 3, 2 * ROWS // 3):
                    cur.execute(f"DELETE FROM t WHERE id = {i}")
                for i in range(ROWS + 1, ROWS + ROWS // 3):
                    cur.execute(f"INSERT INTO t (id, k, u) VALUES ({i}, {i}, {i})")
        finally:
            conn.close()
        wait_received(sb)
        changes = ROWS - 3
        indexes, snap = asyncio.run(_run_engine(sb, schema, changes))
    finally:
        replica.query("SET GLOBAL innodb_change_buffering = DEFAULT")
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print("probed rows by index:", indexes, "skipped:", snap.counters["skipped"])
    assert indexes.get("PRIMARY", 0) >= changes // 2
    assert indexes.get("u", 0) > 0, "the unique index is read for its uniqueness check: probed"
    assert "k" not in indexes, "an entry the change buffer takes was probed"
    # Each UPDATE leaves two entries of k to the buffer, each DELETE and INSERT one.
    assert snap.counters["skipped"]["change_buffered"] >= indexes["PRIMARY"]
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    src = sb.source.query(f"CHECKSUM TABLE `{schema}`.t")[0]["Checksum"]
    assert replica.query(f"CHECKSUM TABLE `{schema}`.t")[0]["Checksum"] == src


async def _run_engine(sb: Sandbox, schema: str, changes: int) -> tuple[dict[str, int], Any]:
    indexes: dict[str, int] = {}

    def seen(_engine: PrefetchEngine, probe: Any) -> None:
        if probe.schema == schema:
            indexes[probe.index] = indexes.get(probe.index, 0) + probe.rows

    # Not adaptive: the table is in memory, so the gate would (rightly) stay out.
    engine = await run_held(sb, schema, "SELECT * FROM t WHERE id = 1 FOR UPDATE",
                            PrefetchOptions(connections=4, adaptive=False), 64 << 20, seen,
                            lambda _engine: indexes.get("PRIMARY", 0) >= changes // 2)
    return indexes, engine.snapshot()
