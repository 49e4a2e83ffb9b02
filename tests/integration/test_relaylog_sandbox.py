"""The relay-log reader on a real MariaDB replica.

With the replica's SQL thread stopped, the source runs a known write load;
the reader, started at the SQL thread's position, must return exactly those
row changes, in order, across forced relay-log rotations. Then the SQL
thread is let loose so it purges relay logs under a reader that is behind.
"""

from __future__ import annotations

import time
from typing import Any

import pymysql
import pytest

from lagd.relaylog import (
    InformationSchemaResolver,
    LogFiles,
    RelayLogReader,
    RelayPosition,
    Resynced,
    RowChange,
    RowKind,
    TableMapResolver,
    TransactionEnd,
    TransactionStart,
    decoder,
)
from lagd.sandbox.pair import Sandbox


def sql_position(sb: Sandbox) -> RelayPosition:
    st = sb.slave_status()
    return RelayPosition(st["Relay_Log_File"], int(st["Relay_Log_Pos"]))


def wait_received(sb: Sandbox, timeout: float = 60) -> None:
    """Until the IO thread has received everything the source has logged."""
    row = sb.source.query("SHOW MASTER STATUS")[0]
    target = (row["File"], int(row["Position"]))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.slave_status()
        if (st["Master_Log_File"], int(st["Read_Master_Log_Pos"])) >= target:
            _wait_relay_log_settled(sb, deadline)
            return
        time.sleep(0.05)
    raise AssertionError("replica did not receive the source's binlog in time")


def _wait_relay_log_settled(sb: Sandbox, deadline: float) -> None:
    # Read_Master_Log_Pos was seen to run ahead of the bytes in the relay-log
    # file (a big transaction, its last few KB still in the IO thread's
    # cache): the size of the newest file must stand still for a moment.
    index = sb.relay_log_index()
    last: int | None = None
    while time.monotonic() < deadline:
        names = [ln.strip() for ln in index.read_text().splitlines() if ln.strip()]
        path = index.parent / names[-1].rsplit("/", 1)[-1]
        size = path.stat().st_size if path.exists() else -1
        if size == last:
            return
        last = size
        time.sleep(0.1)


def resolver_for(sb: Sandbox) -> InformationSchemaResolver:
    dsn = sb.replica().dsn
    return InformationSchemaResolver(
        lambda: pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user,
                                password=dsn.password, autocommit=True)
    )


def read_all(reader: RelayLogReader) -> list[Any]:
    out: list[Any] = []
    for _ in range(1000):
        batch = reader.read()
        out.extend(batch)
        if not batch and reader.at_tail:
            return out
    raise AssertionError("reader did not reach the tail")


SCHEMA_SQL = [
    "CREATE TABLE t_int (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, v VARCHAR(20),"
    " KEY k_idx (k))",
    "CREATE TABLE t_comp (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT,"
    " PRIMARY KEY (a, b))",
    "CREATE TABLE t_str (code VARCHAR(32) CHARACTER SET utf8mb4 NOT NULL PRIMARY KEY, v INT)",
    "CREATE TABLE t_uniq (u BIGINT UNSIGNED NOT NULL, v INT, UNIQUE KEY u_idx (u))",
    "CREATE TABLE t_nokey (x INT, y INT)",
]

# (statement, expected row changes as (table, kind, key before, key after)).
WORKLOAD: list[tuple[str, list[tuple[str, RowKind, tuple | None, tuple | None]]]] = [
    ("INSERT INTO t_int VALUES (1, 10, 'a')", [("t_int", RowKind.INSERT, None, (1,))]),
    ("INSERT INTO t_int VALUES (2, 20, 'b'), (3, 30, 'c'), (4, 40, 'd')",
     [("t_int", RowKind.INSERT, None, (i,)) for i in (2, 3, 4)]),
    ("UPDATE t_int SET v = 'x' WHERE id = 2", [("t_int", RowKind.UPDATE, (2,), (2,))]),
    ("UPDATE t_int SET k = k + 1 WHERE id IN (1, 3)",
     [("t_int", RowKind.UPDATE, (1,), (1,)), ("t_int", RowKind.UPDATE, (3,), (3,))]),
    ("UPDATE t_int SET id = 5 WHERE id = 4", [("t_int", RowKind.UPDATE, (4,), (5,))]),
    ("DELETE FROM t_int WHERE id = 1", [("t_int", RowKind.DELETE, (1,), None)]),
    ("INSERT INTO t_comp VALUES (1, 'x', 1), (1, 'y', 2), (2, 'x', 3)",
     [("t_comp", RowKind.INSERT, None, k) for k in ((1, "x"), (1, "y"), (2, "x"))]),
    ("UPDATE t_comp SET v = v * 10 WHERE a = 1",
     [("t_comp", RowKind.UPDATE, k, k) for k in ((1, "x"), (1, "y"))]),
    ("DELETE FROM t_comp WHERE a = 2", [("t_comp", RowKind.DELETE, (2, "x"), None)]),
    ("INSERT INTO t_str VALUES ('äöü-1', 1), ('key two', 2), ('Ω', 3)",
     [("t_str", RowKind.INSERT, None, (s,)) for s in ("äöü-1", "key two", "Ω")]),
    ("UPDATE t_str SET code = 'Ω2' WHERE code = 'Ω'", [("t_str", RowKind.UPDATE, ("Ω",), ("Ω2",))]),
    ("DELETE FROM t_str WHERE v <= 2",
     [("t_str", RowKind.DELETE, (s,), None) for s in ("äöü-1", "key two")]),  # PK collation order
    ("INSERT INTO t_uniq VALUES (18446744073709551615, 1), (7, 2)",
     [("t_uniq", RowKind.INSERT, None, (u,)) for u in (18446744073709551615, 7)]),
    ("UPDATE t_uniq SET v = 9 WHERE u = 7", [("t_uniq", RowKind.UPDATE, (7,), (7,))]),
    ("INSERT INTO t_nokey VALUES (1, 1), (2, 2)",
     [("t_nokey", RowKind.INSERT, None, None), ("t_nokey", RowKind.INSERT, None, None)]),
]


def test_reader_yields_exactly_the_row_changes_made(sandbox: Sandbox, schema: str) -> None:
    for stmt in SCHEMA_SQL:
        sandbox.source.query(stmt, db=schema)
    sandbox.wait_caught_up(timeout=60)
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        expected = []
        for i, (stmt, rows) in enumerate(WORKLOAD):
            sandbox.source.query(stmt, db=schema)
            expected.extend(rows)
            if i % 4 == 3:
                wait_received(sandbox)
                sandbox.flush_relay_logs()  # force a rotation mid-stream
        # One multi-statement transaction: its rows stay together, in order.
        with sandbox.source.connect(db=schema) as conn, conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t_int VALUES (100, 1, 'txn')")
            cur.execute("UPDATE t_int SET v = 'txn2' WHERE id = 100")
            cur.execute("DELETE FROM t_int WHERE id = 100")
            cur.execute("COMMIT")
        expected += [("t_int", RowKind.INSERT, None, (100,)), ("t_int", RowKind.UPDATE, (100,), (100,)),
                     ("t_int", RowKind.DELETE, (100,), None)]
        wait_received(sandbox)

        reader = RelayLogReader(LogFiles(sandbox.relay_log_index()), start, resolver_for(sandbox))
        events = read_all(reader)
        ours = [e for e in events if isinstance(e, RowChange) and e.table.schema == schema]
        got = [(e.table.name, e.kind, e.table.key_values(e.before) if e.before else None,
                e.table.key_values(e.after) if e.after else None) for e in ours]
        assert got == expected
        assert reader.stats.corrupt_events == 0
        assert reader.stats.files >= 4, "the load spanned forced rotations"

        # Indexed columns come with their old and new values.
        k_update = next(e for e in ours if e.table.name == "t_int" and e.kind is RowKind.UPDATE
                        and e.before and e.before[0] == 1)
        slot = k_update.table.slot(1)
        assert (k_update.before[slot], k_update.after[slot]) == (10, 11)
        assert {ix.name for ix in k_update.table.indexes} == {"PRIMARY", "k_idx"}
        nokey = next(e for e in ours if e.table.name == "t_nokey")
        assert not nokey.table.probeable
        assert reader.stats.rows_unprobeable >= 2

        # Transactions are whole and ordered; positions increase across files.
        starts = [e for e in events if isinstance(e, TransactionStart)]
        ends = [e for e in events if isinstance(e, TransactionEnd)]
        assert len(starts) == len(ends) >= len(WORKLOAD) + 1
        positions = [e.position for e in ends]
        assert positions == sorted(positions)
        assert all(s.gtid_info is not None and s.gtid_info.flavor == "mariadb" for s in starts)
        assert ends[-1].rows == 3 and ends[-1].statements == 3

        # The SQL thread, once started, ends exactly where the reader's last transaction ends.
        sandbox.start_sql_thread()
        sandbox.wait_caught_up(timeout=60)
        assert sql_position(sandbox) == ends[-1].position.relay or \
            sql_position(sandbox).sequence > ends[-1].position.relay.sequence
        reader.close()


def test_reader_resyncs_when_its_relay_log_is_purged(sandbox: Sandbox, schema: str) -> None:
    sandbox.source.query("CREATE TABLE t (id INT PRIMARY KEY, v INT)", db=schema)
    sandbox.wait_caught_up(timeout=60)
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        for batch in range(5):
            values = ",".join(f"({batch * 100 + i}, {i})" for i in range(100))
            sandbox.source.query(f"INSERT INTO t VALUES {values}", db=schema)
            wait_received(sandbox)
            sandbox.flush_relay_logs()
        reader = RelayLogReader(
            LogFiles(sandbox.relay_log_index()), start, resolver_for(sandbox),
            resync=lambda: sql_position(sandbox),
        )
        first = reader.read(max_bytes=64)  # the reader falls behind in the first file
        reader.close()  # ...and lets go of it, like a reader that reopens on each poll
        sandbox.start_sql_thread()
        sandbox.wait_caught_up(timeout=60)  # relay_log_purge deletes the applied files
        assert not (sandbox.relay_log_dir() / start.file).exists()
        events = first + read_all(reader)
        resyncs = [e for e in events if isinstance(e, Resynced)]
        assert resyncs and resyncs[0].from_file == start.file
        assert reader.stats.resyncs >= 1
        assert reader.position >= resyncs[-1].to


@pytest.mark.parametrize("chunk", [512, 1 << 20])
def test_small_chunks_give_the_same_events(sandbox: Sandbox, schema: str, chunk: int) -> None:
    """Events cut across read chunks (a tailing reader's normal case) decode the same."""
    sandbox.source.query("CREATE TABLE t (id INT PRIMARY KEY, c CHAR(200))", db=schema)
    sandbox.wait_caught_up(timeout=60)
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        values = ",".join(f"({i}, REPEAT('x', {i % 200}))" for i in range(300))
        sandbox.source.query(f"INSERT INTO t VALUES {values}", db=schema)
        sandbox.source.query("UPDATE t SET c = 'y' WHERE id % 3 = 0", db=schema)
        wait_received(sandbox)
        reader = RelayLogReader(LogFiles(sandbox.relay_log_index()), start,
                                resolver_for(sandbox), chunk_size=chunk)
        rows = [e for e in read_all(reader) if isinstance(e, RowChange)]
        assert [e.key for e in rows] == [(i,) for i in range(300)] + [(i,) for i in range(0, 300, 3)]
        reader.close()


def c_loop_transactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the transactions each call of the C loop takes (skips without it)."""
    fast = decoder.fast_transactions
    if fast is None:
        pytest.skip("C accelerator not built")
    taken: list[int] = []

    def counted(*args: Any) -> Any:
        out = fast(*args)
        taken.append(out[4])
        return out

    monkeypatch.setattr(decoder, "fast_transactions", counted)
    return taken


def read_both(sandbox: Sandbox, start: RelayPosition, resolver: Any, values: bool,
              accelerated: bool) -> list[Any]:
    """Every event from ``start`` to the tail, by the C loop or by the Python path alone."""
    reader = RelayLogReader(LogFiles(sandbox.relay_log_index()), start, resolver, values=values)
    reader.decoder.accelerated = accelerated
    try:
        return read_all(reader)
    finally:
        reader.close()


@pytest.mark.parametrize("values", [True, False])
def test_the_c_loop_gives_the_python_paths_events_over_several_tables(
        sandbox: Sandbox, schema: str, values: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C loop keeps its last table map, rows-event lookups and one-table set from
    one transaction to the next: transactions that switch tables, column bitmaps
    (MINIMAL row images beside FULL ones) and foreign-key checks between them must
    decode exactly as the Python path decodes them, every transaction's tables included."""
    for stmt in ("CREATE TABLE a (id INT PRIMARY KEY, k INT, v VARCHAR(20), KEY k_idx (k))",
                 "CREATE TABLE b (id INT PRIMARY KEY, a_id INT, KEY a_idx (a_id))"):
        sandbox.source.query(stmt, db=schema)
    sandbox.wait_caught_up(timeout=60)
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        with sandbox.source.connect(db=schema) as conn, conn.cursor() as cur:
            for i in range(1, 41):
                cur.execute(f"SET SESSION binlog_row_image = '{'MINIMAL' if i % 3 == 0 else 'FULL'}'")
                cur.execute(f"SET SESSION foreign_key_checks = {i % 2}")
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO a VALUES ({i}, {i}, 'x')")
                if i % 2 == 0:
                    cur.execute(f"INSERT INTO b VALUES ({i}, {i})")
                if i % 4 == 0:
                    cur.execute(f"UPDATE a SET v = 'y' WHERE id = {i}")
                cur.execute("COMMIT")
                if i % 5 == 0:
                    cur.execute(f"UPDATE b SET a_id = a_id + 1 WHERE id = {i}")
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
        wait_received(sandbox)

    taken = c_loop_transactions(monkeypatch)
    c_loop, python = (read_both(sandbox, start, TableMapResolver(), values, accelerated)
                      for accelerated in (True, False))
    assert c_loop == python
    ends = [e for e in c_loop if isinstance(e, TransactionEnd) and any(schema in t for t in e.tables)]
    assert len(ends) == 44  # 40 transactions, and 4 UPDATEs of b's even ids
    assert {len(e.tables) for e in ends} == {1, 2}
    assert sum(taken) >= 30, "the C loop took most transactions (a table's first is Python's)"


def test_integer_keys_decoded_in_c_are_the_python_paths_values(sandbox: Sandbox, schema: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Row images whose needed columns are all integers are decoded by the C loop itself
    (_rowcodec.value_layout): every width, signed and unsigned, at its extremes, NULL in a
    nullable indexed column, and the columns around them skipped, must come out as the
    generated Python functions give them."""
    sandbox.source.query(
        "CREATE TABLE ints (a TINYINT NOT NULL, b SMALLINT UNSIGNED NOT NULL, c MEDIUMINT NOT NULL,"
        " d INT UNSIGNED NOT NULL, e BIGINT NOT NULL, v VARCHAR(300), f BIGINT UNSIGNED NULL, t TEXT,"
        " m MEDIUMINT UNSIGNED NULL, PRIMARY KEY (a, b, c, d, e), KEY f_idx (f), KEY m_idx (m))", db=schema)
    sandbox.wait_caught_up(timeout=60)
    extremes = [(-128, 0, -8388608, 0, -9223372036854775808, 0, 0),
                (127, 65535, 8388607, 4294967295, 9223372036854775807, 18446744073709551615, 16777215),
                (-1, 1, -1, 1, -1, None, None)]
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        with sandbox.source.connect(db=schema) as conn, conn.cursor() as cur:
            for rnd in range(3):  # a table's first transaction is the Python path's
                for i, (a, b, c, d, e, f, m) in enumerate(extremes):
                    cur.execute("INSERT INTO ints VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                                (a, b, c + rnd * (1 if c < 0 else -1), d, e, "x" * (i * 120), f, "t" * i, m))
            cur.execute("UPDATE ints SET f = NULL, m = 5 WHERE a = 127")
            cur.execute("DELETE FROM ints WHERE a = -1")
        wait_received(sandbox)

    taken = c_loop_transactions(monkeypatch)
    c_loop, python = ([e for e in read_both(sandbox, start, resolver_for(sandbox), True, accelerated)
                       if isinstance(e, RowChange)] for accelerated in (True, False))
    assert c_loop == python
    assert sum(taken) >= 8
    keys = {e.key for e in python if e.kind is RowKind.INSERT}
    assert (127, 65535, 8388607 - 2, 4294967295, 9223372036854775807) in keys
    assert (-128, 0, -8388608 + 2, 0, -9223372036854775808) in keys
    table = python[0].table
    by_name = {col.name: table.slot(i) for i, col in enumerate(table.columns) if i in table.needed}
    top = next(e for e in python if e.kind is RowKind.INSERT and e.key[0] == 127)
    assert top.after[by_name["f"]] == 18446744073709551615 and top.after[by_name["m"]] == 16777215
    nulls = next(e for e in python if e.kind is RowKind.INSERT and e.key[0] == -1)
    assert nulls.after[by_name["f"]] is None and nulls.after[by_name["m"]] is None
