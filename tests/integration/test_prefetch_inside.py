"""Prefetch inside one big transaction, through the engine, on a real replica.

One transaction UPDATEs every row of a table in key order (row events, or one
statement a row). A session on the replica holds a row in the middle, so the SQL
thread stops there with its relay-log position still at the transaction's start:
only InnoDB's count of the rows it changed says where it is. Once the engine has
that count, no probe names a row the SQL thread has already changed, and the
rows it passed by are counted as overtaken.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from lagd.mysql.endpoint import Endpoint
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine
from lagd.sandbox.pair import Sandbox
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 4000
HELD = 2501  # the SQL thread changes the rows before it, then waits


def keys_of(probe: Any) -> list[int]:
    if probe.params:
        return [int(k) for k in probe.params]
    listed = re.search(r" IN \(([^)]*)\)", probe.sql)  # a statement's probe: its literals (then LIMIT 256)
    assert listed is not None, probe.sql
    return [int(k) for k in re.findall(r"\d+", listed.group(1))]


@pytest.mark.parametrize("fmt", ["ROW", "STATEMENT"])
def test_rows_the_sql_thread_changed_inside_its_transaction_are_not_probed(
        sandbox: Sandbox, schema: str, fmt: str) -> None:
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, c INT NOT NULL)")
    sb.source.query(f"INSERT INTO t SELECT seq, 0 FROM seq_1_to_{ROWS}", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    try:
        conn = sb.source.connect(schema, autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET SESSION binlog_format = '{fmt}'")
                for i in range(1, ROWS + 1):
                    cur.execute(f"UPDATE t SET c = c + 1 WHERE id = {i}")
            conn.commit()
        finally:
            conn.close()
        wait_received(sb)
        after_count, snap = asyncio.run(_run_engine(sb, schema))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print(fmt, "prefetch:", snap.counters)
    assert after_count, "rows past the SQL thread were probed once it was counted"
    assert min(after_count) >= HELD, "a probe named a row the SQL thread had changed"
    assert snap.counters["skipped"].get("overtaken", 0) > 0
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    src = sb.source.query(f"CHECKSUM TABLE `{schema}`.t")[0]["Checksum"]
    assert sb.replica().query(f"CHECKSUM TABLE `{schema}`.t")[0]["Checksum"] == src


async def _run_engine(sb: Sandbox, schema: str) -> tuple[list[int], Any]:
    dsn = sb.replica().dsn
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user, dsn.password)
    # Not adaptive: the table is in memory, so the gate would (rightly) stay out.
    opts = PrefetchOptions(connections=4, adaptive=False)
    engine = await build_engine(endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe),
                                index=sb.relay_log_index(), mariadb=True, pool_bytes=64 << 20)
    after_count: list[int] = []  # keys probed once InnoDB's count said HELD - 1
    submit = engine.pool.submit

    def recording(probe: Any, tag: Any = None) -> bool:
        inside = engine._inside
        if inside is not None and inside.rows >= HELD - 1 and probe.schema == schema:
            after_count.extend(keys_of(probe))
        return submit(probe, tag)

    engine.pool.submit = recording  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    await asyncio.sleep(0.5)
    blocker = sb.replica().connect(schema, autocommit=False)
    try:
        with blocker.cursor() as cur:
            cur.execute(f"SELECT * FROM t WHERE id = {HELD} FOR UPDATE")
            await asyncio.to_thread(sb.start_sql_thread)
            for _ in range(100):  # until the count has placed the SQL thread and the cursor moved on
                if after_count:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
        blocker.commit()
    finally:
        blocker.close()
    await asyncio.to_thread(sb.wait_caught_up, 60)
    await asyncio.sleep(0.3)
    stop.set()
    await task
    return after_count, engine.snapshot()
