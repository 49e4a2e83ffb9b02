"""Probes made from real relay-log events, run on a real MariaDB replica.

The source writes while the replica's SQL thread is stopped, so the replica
still holds the rows as they were before: a DELETE's or UPDATE's old keys are
there, an INSERT's and an UPDATE's new keys are not. Every probe is run on the
replica (as the lagd user, read-only session, time_zone +00:00 as the decoder's
TIMESTAMP values require) and must find exactly the keys that exist, through
the index it names, as a point lookup that is covering unless the index is a
prefix index.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from lagd.prefetch.rewrite import Probe, ProbeBatcher
from lagd.relaylog import LogFiles, RelayLogReader, RowChange, Statement
from lagd.sandbox.pair import Sandbox
from tests.integration.test_relaylog_sandbox import read_all, resolver_for, sql_position, wait_received

SCHEMA_SQL = [
    "CREATE TABLE t_int (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, v VARCHAR(20), KEY k_idx (k))",
    "CREATE TABLE t_comp (a INT NOT NULL, b VARCHAR(10) NOT NULL, u INT NULL, v INT,"
    " PRIMARY KEY (a, b), UNIQUE KEY u_idx (u))",
    "CREATE TABLE t_str (code VARCHAR(32) CHARACTER SET utf8mb4 NOT NULL PRIMARY KEY,"
    " name VARCHAR(64) NOT NULL, tag VARCHAR(8) NULL, KEY name_pfx (name(4)), KEY tag_idx (tag))",
    "CREATE TABLE t_types (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, d DECIMAL(10,2) NOT NULL,"
    " ts TIMESTAMP(3) NULL, dt DATE NOT NULL, h VARBINARY(16) NOT NULL,"
    " KEY d_dt (d, dt), KEY ts_idx (ts), UNIQUE KEY h_idx (h))",
    "CREATE TABLE `we``ird` (`i d` INT NOT NULL PRIMARY KEY, `日本` VARCHAR(10) NOT NULL,"
    " KEY `ix``1` (`日本`)) DEFAULT CHARSET=utf8mb4",
    "CREATE TABLE t_nokey (x INT, y INT)",
]
TOP = 18446744073709551615


def preload() -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The rows the workload touches, plus filler it never touches: on a dozen rows the
    optimizer would rather scan the forced index than look keys up, as on no real table."""
    fill = range(5000, 5300)
    return [
        ("t_int", [(i, i % 7, f"v{i}") for i in (*range(1, 41), *fill)]),
        ("t_comp", [(a, b, None if (a + n) % 3 == 0 else a * 10 + n, a)
                    for a in (*range(1, 6), *range(7000, 7100)) for n, b in enumerate("xyz")]),
        ("t_str", [("äöü-Ω" if i == 1 else f"code-{i}", f"name-{i}" if i < 100 else f"fill-{i}",
                    None if i % 2 else f"t{i}") for i in (*range(1, 21), *fill)]),
        ("t_types", [(TOP - i, Decimal(f"{i}.25"), None if i % 4 == 0 else
                      dt.datetime(2024, 1, 1, 12, 0, 0, 125000) + dt.timedelta(hours=i),
                      dt.date(2020, 1, 1) + dt.timedelta(days=i % 3), i.to_bytes(2, "big") + b"\x00\xff`")
                     for i in (*range(1, 13), *fill)]),
        ("`we``ird`", [(i, f"値{i}") for i in (*range(1, 6), *fill)]),
        ("t_nokey", [(1, 1), (2, 2)]),
    ]


# (statement, expected {(table, index): (keys probed, keys found on the replica)})
DELETES = (
    ["DELETE FROM t_int WHERE id <= 6",
     "DELETE FROM t_comp WHERE a = 1",
     "DELETE FROM t_str WHERE code IN ('äöü-Ω', 'code-2', 'code-3')",
     "DELETE FROM t_types WHERE id >= 18446744073709551610",
     "DELETE FROM `we``ird` WHERE `i d` = 2",
     "DELETE FROM t_nokey"],
    {("t_int", "PRIMARY"): (6, 6), ("t_int", "k_idx"): (6, 6),
     # t_comp a=1: u is NULL for b='z' (unique + NULL: not probed)
     ("t_comp", "PRIMARY"): (3, 3), ("t_comp", "u_idx"): (2, 2),
     ("t_str", "PRIMARY"): (3, 3), ("t_str", "name_pfx"): (3, 3), ("t_str", "tag_idx"): (3, 3),
     # ts is NULL for one of them: a non-unique index probes it with IS NULL
     ("t_types", "PRIMARY"): (5, 5), ("t_types", "d_dt"): (5, 5), ("t_types", "ts_idx"): (5, 5),
     ("t_types", "h_idx"): (5, 5),
     ("we`ird", "PRIMARY"): (1, 1), ("we`ird", "ix`1"): (1, 1)},
)
INSERTS = (
    # Descending, and 3,900 apart: neither row is an append (rewrite._appends), both are probed.
    ["INSERT INTO t_int VALUES (4000, 2, 'n'), (100, 1, 'n')",
     "INSERT INTO t_comp VALUES (9, 'q', 900, 0), (9, 'r', NULL, 0)",
     "INSERT INTO t_str VALUES ('新しい', 'neu', NULL)",
     "INSERT INTO t_types VALUES (5, 1.50, '2030-01-01 00:00:00.5', '2030-01-01', x'00')"],
    {("t_int", "PRIMARY"): (2, 0), ("t_int", "k_idx"): (2, 0),
     ("t_comp", "PRIMARY"): (2, 0), ("t_comp", "u_idx"): (1, 0),
     ("t_str", "PRIMARY"): (1, 0), ("t_str", "name_pfx"): (1, 0), ("t_str", "tag_idx"): (1, 0),
     ("t_types", "PRIMARY"): (1, 0), ("t_types", "d_dt"): (1, 0), ("t_types", "ts_idx"): (1, 0),
     ("t_types", "h_idx"): (1, 0)},
)
# An UPDATE's moved non-unique entries are left to the SQL thread (rewrite.PURGED_ENTRIES):
# k_idx, tag_idx and ts_idx below are not probed; a unique index's are.
UPDATES = (
    ["UPDATE t_int SET v = 'x' WHERE id BETWEEN 21 AND 24",  # no indexed column: PK only
     "UPDATE t_int SET k = k + 100 WHERE id BETWEEN 25 AND 28",  # k moves: PK only
     "UPDATE t_int SET id = id + 1000 WHERE id = 30",  # a new key: old found, new not
     "UPDATE t_str SET tag = 'new' WHERE code = 'code-5'",  # NULL -> 'new'
     "UPDATE t_types SET ts = NULL WHERE id = 18446744073709551608",
     "UPDATE t_comp SET u = u + 1000 WHERE a = 2"],  # u 20 and 22 move (old found, new not), NULL stays
    {("t_int", "PRIMARY"): (10, 9), ("t_str", "PRIMARY"): (1, 1), ("t_types", "PRIMARY"): (1, 1),
     ("t_comp", "PRIMARY"): (2, 2), ("t_comp", "u_idx"): (4, 2)},  # the NULL row is not changed: not logged
)
# Statement-based: (statement, rows its SELECT returns on the not-yet-updated replica).
STATEMENTS = [
    ("DELETE LOW_PRIORITY QUICK FROM t_int WHERE k = 3 ORDER BY id LIMIT 2", 2),
    ("UPDATE IGNORE t_int SET v = 'st' WHERE id IN (7, 8, 9)", 3),
    ("UPDATE t_int JOIN t_comp ON t_comp.a = t_int.id SET t_int.v = 'j' WHERE t_comp.b = 'x'", 5),
    ("DELETE t1 FROM t_int AS t1 JOIN t_comp AS c ON c.a = t1.id WHERE c.b = 'y' AND t1.id > 3", 2),
    ("DELETE FROM t_str WHERE name LIKE 'name-1%'", 11),
    ("UPDATE t_int SET v = NOW() WHERE id = 10 AND v REGEXP '^v[0-9]+$'", 1),
    # 300 rows (the filler): the probe reads at most rewrite_sql.STATEMENT_ROWS of them
    ("UPDATE t_int SET v = 'r' WHERE id >= 5000", 256),
]


def probe_conn(sb: Sandbox) -> Any:
    dsn = sb.replica().dsn
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password,
                           autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION TRANSACTION READ ONLY")
    return conn


def run(conn: Any, probe: Probe) -> int:
    with conn.cursor() as cur:
        cur.execute(probe.sql, probe.params)
        return len(cur.fetchall())


def explain(conn: Any, probe: Probe) -> dict[str, Any]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("EXPLAIN " + probe.sql, probe.params)
        [row] = cur.fetchall()
        return row  # type: ignore[no-any-return]


@pytest.fixture
def loaded(sandbox: Sandbox, schema: str) -> Iterator[tuple[Sandbox, str, RelayLogReader]]:
    """Tables and rows on both servers; then the SQL thread stops and a reader starts at it."""
    for stmt in SCHEMA_SQL:
        sandbox.source.query(stmt, db=schema)
    with sandbox.source.connect(db=schema) as conn, conn.cursor() as cur:
        for table, rows in preload():
            marks = ", ".join(["%s"] * len(rows[0]))
            cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            cur.execute(f"ANALYZE TABLE {table}")  # replicated: the replica's statistics too
    with reader_at_sql_thread(sandbox) as reader:
        yield sandbox, schema, reader


@contextlib.contextmanager
def reader_at_sql_thread(sb: Sandbox) -> Iterator[RelayLogReader]:
    """Once the replica has caught up, the SQL thread stopped and a reader at its position
    (what is written next reaches the relay log, not the tables); then started again."""
    sb.wait_caught_up(timeout=60)
    with sb.sql_thread_stopped():
        reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb), resolver_for(sb))
        try:
            yield reader
        finally:
            reader.close()


def write(sb: Sandbox, schema: str, statements: list[str], binlog_format: str = "ROW") -> None:
    with sb.source.connect(db=schema) as conn, conn.cursor() as cur:
        cur.execute(f"SET SESSION binlog_format = '{binlog_format}'")
        for sql in statements:
            cur.execute(sql)
    wait_received(sb)


def probes_of(reader: RelayLogReader, batcher: ProbeBatcher, schema: str) -> list[Probe]:
    out: list[Probe] = []
    for e in read_all(reader):
        if isinstance(e, RowChange | Statement) and (e.schema if isinstance(e, Statement)
                                                      else e.table.schema) == schema:
            out.extend(batcher.feed(e))
    return out + batcher.flush()


def test_row_change_probes_find_what_the_sql_thread_will_touch(
    loaded: tuple[Sandbox, str, RelayLogReader],
) -> None:
    sb, schema, reader = loaded
    conn = probe_conn(sb)
    batcher = ProbeBatcher(max_keys=4, near_span=0)
    # As inside a big transaction, where a DELETE's secondary entries are probed too: every
    # index's probe is tried on the server (rewrite.PURGED_ENTRIES).
    batcher.purge_follows = False
    try:
        for phase, (statements, expected) in {"delete": DELETES, "insert": INSERTS,
                                              "update": UPDATES}.items():
            write(sb, schema, statements)
            probes = probes_of(reader, batcher, schema)
            got: Counter[tuple[str, str]] = Counter()
            found: Counter[tuple[str, str]] = Counter()
            for p in probes:
                assert p.schema == schema and p.kind != "statement"
                assert 1 <= p.rows <= 4
                got[p.table, p.index or ""] += p.rows
                found[p.table, p.index or ""] += run(conn, p)
            assert {k: (got[k], found[k]) for k in got} == expected, phase
            if phase == "delete":
                # Every key exists: each probe finds all of its keys, through its index only.
                for p in probes:
                    assert run(conn, p) == p.rows, p
                    plan = explain(conn, p)
                    assert plan["key"] == p.index, (p, plan)
                    assert plan["type"] in ("const", "eq_ref", "ref", "range"), (p, plan)  # no scans
                    extra = plan["Extra"] or ""
                    if p.covering:
                        # MariaDB reads a const table at optimization (covering: 5 page reads
                        # against 7 with the row, measured) and prints no "Using index" for it.
                        assert "Using index" in extra or plan["type"] == "const", (p, plan)
                    else:
                        assert p.index == "name_pfx" and "Using index" not in extra, (p, plan)
        assert batcher.skipped["no_key"] == 2
        assert batcher.skipped["null_in_unique"] == 2  # t_comp a=1 b='z', and (9, 'r')
        assert set(batcher.skipped) == {"no_key", "null_in_unique", "moved_entry"}
    finally:
        conn.close()


def test_statement_probes_select_the_rows_the_statement_touches(
    loaded: tuple[Sandbox, str, RelayLogReader],
) -> None:
    sb, schema, reader = loaded
    conn = probe_conn(sb)
    # one probe per statement, in order (no batching by shape)
    batcher = ProbeBatcher(max_keys=1, near_span=0)
    try:
        write(sb, schema, [s for s, _ in STATEMENTS] + [
            "INSERT INTO t_nokey VALUES (3, 3)",
            "UPDATE t_int SET v = 'u' WHERE id = @nothing",
        ], binlog_format="STATEMENT")
        probes = probes_of(reader, batcher, schema)
        assert [p.kind for p in probes] == ["statement"] * len(STATEMENTS)
        for p, (statement, rows) in zip(probes, STATEMENTS, strict=True):
            assert run(conn, p) == rows, (statement, p.sql)
            assert p.source_time is not None and p.source_time > 1_700_000_000
        assert dict(batcher.skipped) == {"insert_statement": 1, "user_variable": 1}
    finally:
        conn.close()


def test_statements_of_one_shape_are_probed_together(loaded: tuple[Sandbox, str, RelayLogReader]) -> None:
    """Statement-based single-row UPDATEs, as MIXED logs them: one IN-list probe per 16."""
    sb, schema, reader = loaded
    conn = probe_conn(sb)
    batcher = ProbeBatcher(near_span=0)
    ids = list(range(5000, 5040))
    try:
        write(sb, schema, [f"UPDATE t_int SET v = 'b{i}' WHERE id = {i}" for i in ids]
              + ["UPDATE t_int SET v = 'b' WHERE id = 5000"], binlog_format="STATEMENT")
        probes = probes_of(reader, batcher, schema)
        # The shape's first statement goes the direct way; 5000 again: its batch has left.
        assert [p.rows for p in probes] == [1, 16, 16, 8]
        assert all(p.sql.startswith(f"SELECT * FROM `{schema}`.t_int WHERE id IN (") for p in probes[1:])
        assert sum(run(conn, p) for p in probes) == len(ids) + 1
        assert batcher.statements.stats["shapes"] == 1  # literals differ, the shape does not
    finally:
        conn.close()
