"""Foreign keys on a real replica: the parent's entry a child's INSERT makes InnoDB read is probed.

The SQL thread waits on a row its first transaction changes while the engine
reads the rest: INSERTs into a child table whose two foreign keys reference
the parent's primary key and a unique index (one of them NULL in some rows),
and UPDATEs that move a child to another parent. The SQL thread checks each
new value in the parent; the engine probes those entries ("parent" probes
into the parent's PRIMARY and ``u``), none for a NULL or an unchanged value,
and the replica ends equal to the source. The same INSERTs logged as statements
(what a MIXED source logs) are probed in the parent from their literals.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
from tests.integration.test_relaylog_sandbox import wait_received

PARENTS = 1000
CHILDREN = 200


def test_parent_entries_of_foreign_keys_are_probed(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.p (id INT PRIMARY KEY, u INT NOT NULL, UNIQUE KEY u (u))")
    sb.source.query(f"CREATE TABLE `{schema}`.c (id INT PRIMARY KEY, pid INT NOT NULL, pu INT NULL,"
                    " n INT NOT NULL DEFAULT 0,"
                    " CONSTRAINT to_p FOREIGN KEY (pid) REFERENCES p (id),"
                    " CONSTRAINT to_pu FOREIGN KEY (pu) REFERENCES p (u))")
    sb.source.query(f"INSERT INTO p SELECT seq, seq + {PARENTS} FROM seq_1_to_{PARENTS}", db=schema)
    sb.source.query("INSERT INTO c (id, pid, pu) VALUES (1, 1, NULL)", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    conn = sb.source.connect(schema, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'ROW'")
            cur.execute("UPDATE c SET n = 1 WHERE id = 1")  # the SQL thread waits here
            for i in range(2, CHILDREN):
                pu = "NULL" if i % 2 else str(PARENTS + 3 * i)  # half the rows: no check of `u`
                cur.execute(f"INSERT INTO c (id, pid, pu) VALUES ({i}, {3 * i}, {pu})")
            for i in range(2, CHILDREN, 4):
                cur.execute(f"UPDATE c SET pid = {3 * i + 1} WHERE id = {i}")  # a new parent: checked
                cur.execute(f"UPDATE c SET n = 2 WHERE id = {i + 1}")  # no key set: not checked
    finally:
        conn.close()
    wait_received(sb)
    replica = sb.replica()
    try:
        keys, snap = asyncio.run(_run_engine(sb, schema))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print("probed keys by table.index:", {k: len(v) for k, v in keys.items()},
          "skipped:", snap.counters["skipped"])
    inserted = set(range(6, 3 * CHILDREN, 3))
    moved = {3 * i + 1 for i in range(2, CHILDREN, 4)}
    assert keys.get("p.PRIMARY", set()) <= inserted | moved  # only the parents checked
    assert len(keys.get("p.PRIMARY", set()) & inserted) >= len(inserted) // 2
    assert keys.get("p.PRIMARY", set()) & moved, "an UPDATE that moves a child: its new parent probed"
    probed_u = keys.get("p.u", set())
    assert probed_u and all((v - PARENTS) % 6 == 0 for v in probed_u), probed_u  # even i only
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    for table in ("p", "c"):
        src = sb.source.query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"]
        assert replica.query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"] == src


async def _run_engine(sb: Sandbox, schema: str, kind: str = "parent", **options: Any
                      ) -> tuple[dict[str, set[int]], Any]:
    keys: dict[str, set[int]] = {}

    def seen(_engine: PrefetchEngine, probe: Any) -> None:
        if probe.schema == schema and probe.kind == kind:
            # Row probes bind their keys; statement probes carry them in the text.
            listed = probe.sql.partition(" IN (")[2].rstrip(")")
            values = probe.params or [int(v) for v in listed.split(", ") if v.isdigit()]
            keys.setdefault(f"{probe.table}.{probe.index}", set()).update(
                v for v in values if isinstance(v, int))

    # Not adaptive: the tables are in memory, so the gate would (rightly) stay out.
    engine = await run_held(sb, schema, "SELECT * FROM c WHERE id = 1 FOR UPDATE",
                            PrefetchOptions(connections=4, adaptive=False, **options), 64 << 20, seen,
                            lambda _engine: len(keys.get("p.PRIMARY", ())) >= CHILDREN // 2)
    return keys, engine.snapshot()


def test_insert_statements_probe_their_parents(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.p (id INT PRIMARY KEY)")
    sb.source.query(f"CREATE TABLE `{schema}`.c (id INT AUTO_INCREMENT PRIMARY KEY, pid INT NOT NULL,"
                    " n INT NOT NULL DEFAULT 0, CONSTRAINT to_p FOREIGN KEY (pid) REFERENCES p (id))")
    sb.source.query(f"INSERT INTO p SELECT seq FROM seq_1_to_{PARENTS}", db=schema)
    sb.source.query("INSERT INTO c (pid) VALUES (1)", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    conn = sb.source.connect(schema, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            cur.execute("UPDATE c SET n = 1 WHERE id = 1")  # the SQL thread waits here
            for i in range(2, PARENTS):  # more than one read of the cursor's (see below)
                cur.execute(f"INSERT INTO c (pid) VALUES ({i})")
    finally:
        conn.close()
    wait_received(sb)
    replica = sb.replica()
    try:
        # Statements on a table not looked up yet are passed (table_lookup): the first read's
        # (64 KiB); a lead of up to 600 transactions lets the cursor read on.
        keys, snap = asyncio.run(_run_engine(sb, schema, kind="statement", min_lead_transactions=50,
                                             max_lead_transactions=600))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print("probed keys by table.index:", {k: len(v) for k, v in keys.items()},
          "skipped:", snap.counters["skipped"])
    assert set(keys) - {"c.None"} == {"p.PRIMARY"}, keys  # the child's entries need its auto-increment id
    assert keys["p.PRIMARY"] <= set(range(2, PARENTS)) and len(keys["p.PRIMARY"]) >= 100
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    for table in ("p", "c"):
        src = sb.source.query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"]
        assert replica.query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"] == src
