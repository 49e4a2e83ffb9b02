"""Probes follow DDL as the SQL thread applies it, on a real replica.

The SQL thread is stopped while the source writes rows, changes one table's
primary key and drops another's secondary index, then writes more rows. When
the SQL thread starts, a session on the replica holds a row lock its first
transaction needs for two seconds: the cursor reads on past both DDLs while the
replica still has the old definitions. Keys written after the DDL come from
their own range, so each probe tells which side of the DDL it is for.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from lagd.mysql.endpoint import Endpoint
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine
from lagd.sandbox.pair import Sandbox
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 4000
BEFORE = range(2, 101)  # ids updated before the DDL (id 1: the blocked first transaction)
AFTER = range(101, ROWS + 1)  # ids updated after it


def write(sb: Sandbox, schema: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    conn = sb.source.connect(schema, autocommit=False)
    try:
        with conn.cursor() as cur:
            for i, (sql, args) in enumerate(statements):
                cur.execute(sql, args)
                if i % 4 == 3:
                    conn.commit()
        conn.commit()
    finally:
        conn.close()


def updates(ids: range, seed: int) -> list[tuple[str, tuple[Any, ...]]]:
    rng = random.Random(seed)
    out: list[tuple[str, tuple[Any, ...]]] = []
    for i in rng.sample(list(ids), len(ids)):
        out.append(("UPDATE t SET c = %s WHERE id = %s", (rng.randrange(100), i)))
        out.append(("UPDATE p SET c = %s WHERE id = %s", (rng.randrange(100), i)))
    return out


def checksums(server: Any, schema: str) -> list[int]:
    return [int(server.query(f"CHECKSUM TABLE `{schema}`.`{t}`")[0]["Checksum"]) for t in ("t", "p")]


def test_probes_follow_ddl_as_the_sql_thread_applies_it(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    src = sb.source
    src.query(f"CREATE TABLE `{schema}`.t (id INT NOT NULL PRIMARY KEY, c INT NOT NULL,"
              " pad CHAR(100) NOT NULL DEFAULT '', KEY ka (c))")
    src.query(f"CREATE TABLE `{schema}`.p (id INT NOT NULL PRIMARY KEY, b INT NOT NULL, c INT NOT NULL)")
    src.query(f"INSERT INTO `{schema}`.t SELECT seq, seq % 100, 'x' FROM seq_1_to_{ROWS}", db=schema)
    src.query(f"INSERT INTO `{schema}`.p SELECT seq, 1000000 + seq, seq % 100 FROM seq_1_to_{ROWS}",
              db=schema)
    sb.wait_caught_up(timeout=60)

    sb.stop_sql_thread()
    try:
        write(sb, schema, [("UPDATE t SET c = c + 1 WHERE id = 1", ())])
        write(sb, schema, updates(BEFORE, 1))
        src.query(f"ALTER TABLE `{schema}`.p DROP PRIMARY KEY, ADD PRIMARY KEY (b)")
        src.query(f"DROP INDEX ka ON `{schema}`.t")
        write(sb, schema, updates(AFTER, 2))
        wait_received(sb)
        probes, snap = asyncio.run(_run_engine(sb, schema))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)

    print("prefetch:", snap.counters, snap.pool)
    print("probes:", sorted({(p.table, p.index, p.sql.split("WHERE")[1][:12]) for p in probes}))
    assert checksums(src, schema) == checksums(sb.replica(), schema)
    assert snap.counters["schema_errors"] == 0
    assert snap.pool["failed"] == 0, snap.pool["last_error"]
    assert snap.counters["rows_probed"] > 0
    after = set(AFTER)
    mine = [p for p in probes if p.schema == schema]
    stale_index = [p for p in mine if p.table == "t" and p.index == "ka" and after & set(p.params)]
    assert stale_index == [], "a probe named the dropped index for rows written after the DROP"
    old_key = [p for p in mine if p.table == "p" and "`id`" in p.sql and p.index == "PRIMARY"
               and after & set(p.params)]
    assert old_key == [], "a probe used the old primary key for rows written after the change"


async def _run_engine(sb: Sandbox, schema: str) -> tuple[list[Any], Any]:
    dsn = sb.replica().dsn
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user, dsn.password)
    # Not adaptive: on a pool that holds the table the controller would (rightly)
    # back off before the cursor reaches the DDL.
    opts = PrefetchOptions(connections=4, adaptive=False, min_lead_transactions=50,
                           max_lead_transactions=400)
    engine = await build_engine(endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe),
                                index=sb.relay_log_index(), mariadb=True, pool_bytes=256 << 20)
    probes: list[Any] = []
    submit = engine.pool.submit

    def recording(probe: Any, tag: Any = None) -> bool:
        probes.append(probe)
        return submit(probe, tag)

    engine.pool.submit = recording  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    await asyncio.sleep(0.5)  # the engine sees the SQL thread stopped, the cursor waits
    blocker = sb.replica().connect(schema, autocommit=False)
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT * FROM t WHERE id = 1 FOR UPDATE")
            await asyncio.to_thread(sb.start_sql_thread)
            want = {f"{schema}.p", f"{schema}.t"}
            for _ in range(300):  # the cursor meets the DDLs while the SQL thread waits
                if want <= set(engine.gate.snapshot()["held"]):
                    break
                await asyncio.sleep(0.1)
            assert want <= set(engine.gate.snapshot()["held"])
            # The rows before the DDLs were probed with the old schema, rightly; let
            # those probes finish before the SQL thread applies the DDLs. Still queued
            # on a loaded machine, they failed on the dropped index (a harmless read
            # error, but not what this test is about).
            for _ in range(300):
                if engine.pool.queued == 0 and engine.pool.busy == 0:
                    break
                await asyncio.sleep(0.05)
        blocker.commit()
    finally:
        blocker.close()
    await asyncio.to_thread(sb.wait_caught_up, 60)
    await asyncio.sleep(0.5)  # the last probes finish
    stop.set()
    await task
    return probes, engine.snapshot()
