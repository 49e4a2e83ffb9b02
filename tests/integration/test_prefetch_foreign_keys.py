"""Foreign keys on a real replica: the parent's entry a child's INSERT makes InnoDB read is probed.

The SQL thread waits on a row its first transaction changes while the engine
reads the rest: INSERTs into a child table whose two foreign keys reference
the parent's primary key and a unique index (one of them NULL in some rows),
and UPDATEs that move a child to another parent. The SQL thread checks each
new value in the parent; the engine probes those entries ("parent" probes
into the parent's PRIMARY and ``u``), none for a NULL or an unchanged value,
and the replica ends equal to the source. The same INSERTs logged as statements
(what a MIXED source logs) are probed in the parent from their literals; rows
logged with foreign_key_checks=0 are checked in no parent, and probed in none.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
from tests.integration.test_relaylog_sandbox import wait_received
from tests.integration.test_relaylog_statements import run_on_source

PARENTS = 1000
CHILDREN = 200
PARENT = "CREATE TABLE p (id INT PRIMARY KEY)"
CHILD = ("CREATE TABLE c (id INT PRIMARY KEY, pid INT NOT NULL, n INT NOT NULL DEFAULT 0,"
         " CONSTRAINT to_p FOREIGN KEY (pid) REFERENCES p (id))")
HELD = "UPDATE c SET n = 1 WHERE id = 1"  # the backlog's first change: the SQL thread waits on it


def test_parent_entries_of_foreign_keys_are_probed(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    backlog = [HELD]
    for i in range(2, CHILDREN):
        pu = "NULL" if i % 2 else str(PARENTS + 3 * i)  # half the rows: no check of `u`
        backlog.append(f"INSERT INTO c (id, pid, pu) VALUES ({i}, {3 * i}, {pu})")
    for i in range(2, CHILDREN, 4):
        backlog.append(f"UPDATE c SET pid = {3 * i + 1} WHERE id = {i}")  # a new parent: checked
        backlog.append(f"UPDATE c SET n = 2 WHERE id = {i + 1}")  # no key set: not checked
    _backlog(sb, schema, [
        "CREATE TABLE p (id INT PRIMARY KEY, u INT NOT NULL, UNIQUE KEY u (u))",
        "CREATE TABLE c (id INT PRIMARY KEY, pid INT NOT NULL, pu INT NULL, n INT NOT NULL DEFAULT 0,"
        " CONSTRAINT to_p FOREIGN KEY (pid) REFERENCES p (id),"
        " CONSTRAINT to_pu FOREIGN KEY (pu) REFERENCES p (u))",
        f"INSERT INTO p SELECT seq, seq + {PARENTS} FROM seq_1_to_{PARENTS}",
        "INSERT INTO c (id, pid, pu) VALUES (1, 1, NULL)"], backlog, "ROW")
    keys: dict[str, set[int]] = {}
    try:
        snap = asyncio.run(_run_engine(sb, schema, keys))
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
    _assert_same_data(sb, schema)


def test_insert_statements_probe_their_parents(sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    # The SQL thread waits on the first UPDATE. The cursor's first read passes by the
    # INSERTs in it (table_lookup: c is looked up after the read, with its parent p);
    # the rest are written once it has, and read with both known.
    auto = CHILD.replace("id INT PRIMARY KEY", "id INT AUTO_INCREMENT PRIMARY KEY")
    _backlog(sb, schema, [PARENT, auto, f"INSERT INTO p SELECT seq FROM seq_1_to_{PARENTS}",
                          "INSERT INTO c (pid) VALUES (1)"],
             [HELD, *(f"INSERT INTO c (pid) VALUES ({i})" for i in range(2, 20))], "STATEMENT")
    rest = [f"INSERT INTO c (pid) VALUES ({i})" for i in range(20, PARENTS)]
    writer: list[threading.Thread] = []
    keys: dict[str, set[int]] = {}

    def enough(engine: PrefetchEngine) -> bool:
        if not writer and engine.batcher.skipped.get("table_lookup"):
            writer.append(threading.Thread(target=run_on_source, args=(sb, schema, rest, "STATEMENT")))
            writer[0].start()
        return len(keys.get("p.PRIMARY", ())) >= 100

    try:
        snap = asyncio.run(_run_engine(sb, schema, keys, kind="statement", enough=enough))
    finally:
        for t in writer:
            t.join()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print("probed keys by table.index:", {k: len(v) for k, v in keys.items()},
          "skipped:", snap.counters["skipped"])
    assert writer, "the cursor's first read passed by INSERTs on a table not looked up yet"
    # The child's (pid, id) entries take the ids the source gave (its Intvar INSERT_ID
    # events); its primary key's new entries, at the table's end, are appends.
    assert set(keys) - {"c.None", "c.to_p"} == {"p.PRIMARY"}, keys
    assert snap.counters["skipped"].get("append", 0) >= 100, snap.counters["skipped"]
    assert keys["p.PRIMARY"] <= set(range(2, PARENTS)) and len(keys["p.PRIMARY"]) >= 100
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    _assert_same_data(sb, schema)


@pytest.mark.parametrize("binlog_format", ["ROW", "STATEMENT"])
def test_changes_logged_without_foreign_key_checks_probe_no_parent(
        sandbox: Sandbox, schema: str, binlog_format: str) -> None:
    """A session with foreign_key_checks=0 (a dump restored, a bulk load): its rows events say
    so (a flag), and so do its statements (the Query event's flags2); the SQL thread checks
    no parent, and no parent is probed; the child's entries are."""
    sb = sandbox
    row = binlog_format == "ROW"
    # Descending ids: not appends (rewrite._appends), each one probed. As in the test above,
    # most are written once the cursor's first read has passed (and looked c up, for statements);
    # the first 40 are more than the engine's "caught up" (engine._CAUGHT_UP_BYTES).
    inserts = [f"INSERT INTO c (id, pid) VALUES ({10_000 - 3 * i}, {3 * i})" for i in range(2, CHILDREN)]
    unchecked = "SET SESSION foreign_key_checks = 0"
    _backlog(sb, schema, [PARENT, CHILD, f"INSERT INTO p SELECT seq FROM seq_1_to_{PARENTS}",
                          "INSERT INTO c (id, pid) VALUES (1, 1)"],
             [HELD, unchecked, *inserts[:40]], binlog_format)
    probed: dict[str, int] = {}
    child = "c.pk" if row else "c.statement"  # a statement's probes are all of that kind
    writer: list[threading.Thread] = []

    def seen(_engine: PrefetchEngine, probe: Any) -> None:
        if probe.schema == schema:
            probed[f"{probe.table}.{probe.kind}"] = probed.get(f"{probe.table}.{probe.kind}", 0) + probe.rows

    def enough(engine: PrefetchEngine) -> bool:
        if not writer and (row or engine.batcher.skipped.get("table_lookup")):
            writer.append(threading.Thread(target=run_on_source,
                                           args=(sb, schema, [unchecked, *inserts[40:]], binlog_format)))
            writer[0].start()
        return probed.get(child, 0) >= CHILDREN // 2

    try:
        asyncio.run(run_held(sb, schema, "SELECT * FROM c WHERE id = 1 FOR UPDATE",
                             PrefetchOptions(connections=4, adaptive=False), 64 << 20, seen, enough))
    finally:
        for t in writer:
            t.join()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    print("probed rows by table.kind:", probed)
    assert probed.get(child, 0) >= CHILDREN // 2, probed
    assert not any(k.startswith("p.") for k in probed), probed
    _assert_same_data(sb, schema)


def _backlog(sb: Sandbox, schema: str, setup: list[str], backlog: list[str], binlog_format: str) -> None:
    """``setup`` applied on both servers, then the SQL thread stopped and ``backlog``
    written and received by the replica."""
    for sql in setup:
        sb.source.query(sql, db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    run_on_source(sb, schema, backlog, binlog_format)
    wait_received(sb)


def _assert_same_data(sb: Sandbox, schema: str, tables: tuple[str, ...] = ("p", "c")) -> None:
    for table in tables:
        src = sb.source.query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"]
        assert sb.replica().query(f"CHECKSUM TABLE `{schema}`.{table}")[0]["Checksum"] == src


async def _run_engine(sb: Sandbox, schema: str, keys: dict[str, set[int]], kind: str = "parent",
                      enough: Callable[[PrefetchEngine], bool] | None = None) -> Any:
    """Run the engine held (engine_util.run_held); ``keys`` gets the keys probed by
    table.index, of probes of ``kind``; the engine's snapshot at the end."""

    def seen(_engine: PrefetchEngine, probe: Any) -> None:
        if probe.schema == schema and probe.kind == kind:
            # Row probes bind their keys; statement probes carry them in the text.
            listed = probe.sql.partition(" IN (")[2].rstrip(")")
            values = probe.params or [int(v) for v in listed.split(", ") if v.isdigit()]
            keys.setdefault(f"{probe.table}.{probe.index}", set()).update(
                v for v in values if isinstance(v, int))

    # Not adaptive: the tables are in memory, so the gate would (rightly) stay out.
    engine = await run_held(sb, schema, "SELECT * FROM c WHERE id = 1 FOR UPDATE",
                            PrefetchOptions(connections=4, adaptive=False), 64 << 20, seen,
                            enough or (lambda _engine: len(keys.get("p.PRIMARY", ())) >= CHILDREN // 2))
    return engine.snapshot()
