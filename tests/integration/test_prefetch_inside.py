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

from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
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
    after_count: list[int] = []  # keys probed once InnoDB's count said HELD - 1

    def seen(engine: PrefetchEngine, probe: Any) -> None:
        inside = engine._inside
        if inside is not None and inside.rows >= HELD - 1 and probe.schema == schema:
            after_count.extend(keys_of(probe))

    # Not adaptive: the table is in memory, so the gate would (rightly) stay out.
    engine = await run_held(sb, schema, f"SELECT * FROM t WHERE id = {HELD} FOR UPDATE",
                            PrefetchOptions(connections=4, adaptive=False), 64 << 20, seen,
                            lambda _engine: bool(after_count))
    return after_count, engine.snapshot()
