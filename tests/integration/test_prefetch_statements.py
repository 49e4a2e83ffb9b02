"""Statement-based and MIXED backlogs through the engine, on a real replica.

The source writes single-row UPDATE/DELETEs by primary key (logged as
statements under STATEMENT and MIXED), IN lists, and statements MIXED logs as
rows (LIMIT without ORDER BY is unsafe for statements). A session on the
replica holds the row the first transaction needs, so the cursor reads ahead
while the SQL thread waits; then the SQL thread applies everything.

One statement in seven moves index entries (``SET k = k - 1``, k indexed): the
engine counts it so for the gate's early stop (control.moved_entries) from
the table's indexes on the replica, as it counts row events; one in seven is a
DELETE, which it counts so too. One in seven is an INSERT, whose new entries
are probed from its literals.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from lagd.prefetch.rewrite_sql import index_probe_sql, rewrite_statement_sql
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
from tests.integration.test_prefetch_foreign_keys import _assert_same_data
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 5000


def write(sb: Sandbox, schema: str, fmt: str, statements: list[str], settings: tuple[str, ...] = (),
          per_trx: int = 5) -> None:
    """``statements`` on the source, logged in ``fmt`` after ``settings``, ``per_trx`` a transaction."""
    conn = sb.source.connect(schema, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_format = '{fmt}'")
            for sql in settings:
                cur.execute(sql)
            for i, sql in enumerate(statements):
                cur.execute(sql)
                if i % per_trx == per_trx - 1:
                    conn.commit()
        conn.commit()
    finally:
        conn.close()


def workload(seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(600):
        key = rng.randint(2, ROWS)
        pick = i % 6
        if pick < 3:
            out.append(f"UPDATE t SET c = c + {rng.randint(1, 9)}, s = 'it''s {i}' WHERE id = {key}")
        elif pick == 3:
            out.append(f"DELETE FROM t WHERE id = {key}")
        elif pick == 4:
            keys = ", ".join(str(rng.randint(2, ROWS)) for _ in range(rng.randint(2, 5)))
            out.append(f"UPDATE t SET k = k - 1 WHERE id IN ({keys})")
        else:
            out.append(f"UPDATE t SET s = 'row-logged' WHERE k = {rng.randint(0, 99)} LIMIT 1")
            # A new row: the INSERT's primary and (k, id) entries are probed from its literals.
            out.append(f"INSERT INTO t (id, k, c, s) VALUES ({ROWS + i}, {rng.randint(0, 99)}, 0, 'new')")
    return out


def _table(sb: Sandbox, schema: str) -> None:
    """t: ROWS rows, k = id % 100 (ROWS / 100 rows a k value), on both servers; the SQL thread stopped."""
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, c INT NOT NULL,"
                    " s VARCHAR(40) NOT NULL DEFAULT '', KEY k_1 (k))")
    sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, seq % 100, 0, '' FROM seq_1_to_{ROWS}", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()


@pytest.mark.parametrize("fmt", ["STATEMENT", "MIXED"])
def test_statement_backlog_is_probed_and_the_data_stays_identical(sandbox: Sandbox, schema: str,
                                                                    fmt: str) -> None:
    sb = sandbox
    _table(sb, schema)
    try:
        write(sb, schema, fmt, ["UPDATE t SET c = c + 1 WHERE id = 1", *workload(7)])
        wait_received(sb)
        probes, snap, (rows, moving, deletes) = asyncio.run(_run_engine(sb, schema))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    statements = [p for p in probes if p.kind == "statement" and p.schema == schema]
    print(fmt, "prefetch:", snap.counters, snap.pool, "rows, moving, deletes:", rows, moving, deletes)
    assert statements, "statement-logged changes were probed"
    assert any(p.rows > 1 for p in statements), "statements of one shape shared a probe"
    inserts = [p for p in statements if "FORCE INDEX" in p.sql]
    assert {p.index for p in inserts} == {"PRIMARY", "k_1"}, "INSERTs' new entries were probed"
    # Those of the first read go before their table is looked up (skipped as table_lookup).
    assert sum(p.rows for p in inserts if p.index == "PRIMARY") >= 20
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    # 100 of the 700 changes counted move a k entry, 100 delete (a jump of the cursor reads
    # some twice).
    assert moving >= 50 and 0.10 <= moving / rows <= 0.25, (rows, moving)
    assert deletes >= 50 and 0.10 <= deletes / rows <= 0.25, (rows, deletes)
    _assert_same_data(sb, schema, ("t",))


async def _run_engine(sb: Sandbox, schema: str, enough: Callable[[list[Any]], bool] | None = None,
                      pool_bytes: int = 256 << 20) -> tuple[list[Any], Any, tuple[int, int, int]]:
    """``enough``: when the SQL thread may go, from the probes sent (20 of them by default)."""
    probes: list[Any] = []
    # Not adaptive: the table is in memory, so the controller would (rightly) back off.
    opts = PrefetchOptions(connections=4, adaptive=False, min_lead_transactions=50,
                           max_lead_transactions=400)
    engine = await run_held(sb, schema, "SELECT * FROM t WHERE id = 1 FOR UPDATE", opts, pool_bytes,
                            lambda _engine, probe: probes.append(probe),
                            # until the cursor has read ahead and probed
                            lambda engine: engine.counters.probes_submitted >= 20 if enough is None
                            else enough(probes))
    return probes, engine.snapshot(), (engine.batcher.rows, engine.batcher.moving, engine.batcher.deletes)


def sent(p: Any) -> str:
    """A probe's text as the server gets it: a prepared probe's arguments (integer entries of
    INSERTs: inserts.prepared) in their places."""
    return str(p.sql % p.params) if p.params else str(p.sql)


def _probed(sb: Sandbox, schema: str, statements: list[str], fmt: str = "STATEMENT",
            settings: tuple[str, ...] = (), per_trx: int = 5,
            enough: Callable[[list[Any]], bool] | None = None, pool_bytes: int = 256 << 20
            ) -> tuple[list[Any], Any]:
    """``statements`` written in ``fmt`` (write) behind a stopped SQL thread, read ahead and
    probed by the engine until ``enough`` (_run_engine); the SQL thread then applies them."""
    try:
        write(sb, schema, fmt, statements, settings, per_trx)
        wait_received(sb)
        probes, snap, _ = asyncio.run(_run_engine(sb, schema, enough, pool_bytes))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    return probes, snap


def test_statements_whose_plan_reads_the_whole_table_are_not_probed(sandbox: Sandbox, schema: str) -> None:
    """An UPDATE by an unindexed column makes the SQL thread read the whole table; its
    probe would read it again. The pool explains each shape's first probe on the replica
    and sends none of such a shape; the primary-key UPDATEs beside them are probed."""
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, c INT NOT NULL,"
                    " s VARCHAR(40) NOT NULL DEFAULT '', KEY k_1 (k))")
    sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, seq % 100, 0, CONCAT('s', seq)"
                    f" FROM seq_1_to_{ROWS}", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    rng = random.Random(11)
    statements = ["UPDATE t SET c = c + 1 WHERE id = 1"]
    for i in range(300):
        if i % 2:
            statements.append(f"UPDATE t SET c = c + 1 WHERE s = 's{rng.randint(2, ROWS)}'")  # s: no index
        else:
            statements.append(f"UPDATE t SET c = c + 2 WHERE id = {rng.randint(2, ROWS)}")
    probes, snap = _probed(sb, schema, statements)
    print("prefetch:", snap.counters, snap.pool)
    by_s = [p for p in probes if p.schema == schema and "WHERE s" in p.sql]
    by_id = [p for p in probes if p.schema == schema and "WHERE id" in p.sql]
    assert by_s and by_id, "both shapes reached the pool"
    assert snap.counters["skipped"].get("full_scan", 0) == snap.pool["scans"] >= len(by_s) - 1
    # Two shapes, each explained by at most each of the 4 sessions (those that took one of
    # its probes while its first EXPLAIN was out), not once a probe.
    assert 2 <= snap.pool["explained"] <= 8 < len(by_s) + len(by_id), (snap.pool, len(by_s), len(by_id))
    assert snap.pool["succeeded"] >= len(by_id) - 1 and snap.pool["failed"] == 0, snap.pool
    _assert_same_data(sb, schema, ("t",))


def test_range_and_composite_key_statements_share_probes_that_read_by_range(sandbox: Sandbox,
                                                                            schema: str) -> None:
    """``id BETWEEN ? AND ?`` and ``a = ? AND b = ?`` statements are batched as an OR of
    their conditions (fingerprint._OR_BATCHABLE): the replica's plan for the batch is a
    range read of the key (the pool explains it, and would skip a whole-table read), the
    probes find the rows the statements change, and the data stays identical."""
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, c INT NOT NULL,"
                    " s VARCHAR(40) NOT NULL DEFAULT '', KEY k_1 (k))")
    sb.source.query(f"CREATE TABLE `{schema}`.ab (a INT NOT NULL, b INT NOT NULL, v INT NOT NULL,"
                    " PRIMARY KEY (a, b))")
    sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, seq % 100, 0, '' FROM seq_1_to_{ROWS}", db=schema)
    sb.source.query(f"INSERT INTO `{schema}`.ab SELECT seq DIV 10, seq MOD 10, 0 FROM seq_1_to_{ROWS}",
                    db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    rng = random.Random(5)
    statements = ["UPDATE t SET c = c + 1 WHERE id = 1"]
    for i in range(300):
        lo = rng.randint(2, ROWS - 10)
        if i % 2:
            statements.append(f"UPDATE t SET c = c + 1 WHERE id BETWEEN {lo} AND {lo + 9}")
        else:
            statements.append(f"UPDATE ab SET v = v + 1 WHERE a = {lo // 10} AND b = {lo % 10}")
    probes, snap = _probed(sb, schema, statements)
    print("prefetch:", snap.counters, snap.pool)
    ranges = [p for p in probes if p.schema == schema and "BETWEEN" in p.sql]
    pairs = [p for p in probes if p.schema == schema and p.table == "ab"]
    assert any(p.rows > 1 and ") OR (" in p.sql for p in ranges), [p.sql for p in ranges[:3]]
    assert any(p.rows > 1 and ") OR (" in p.sql for p in pairs), [p.sql for p in pairs[:3]]
    assert snap.counters["skipped"].get("full_scan", 0) == 0 and snap.pool["scans"] == 0, snap.pool
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool["last_error"]
    # Up to 10 rows a range, one a pair: found rows, not a LIMIT's worth of a scan.
    assert 0 < snap.pool["rows_found"] <= 10 * sum(p.rows for p in ranges) + sum(p.rows for p in pairs)
    _assert_same_data(sb, schema, ("t", "ab"))


def test_a_batch_of_statements_reads_every_row_each_statement_changes(sandbox: Sandbox, schema: str) -> None:
    """UPDATEs by a non-unique key, 50 rows a value: a batch of 16 is 800 rows. Its LIMIT
    is a statement's (rewrite_sql.STATEMENT_ROWS) times its statements; one LIMIT of 256
    for the batch read the rows of the first five values in index order and none of the rest."""
    sb = sandbox
    _table(sb, schema)
    rng = random.Random(3)
    statements = [f"UPDATE t SET c = c + 1 WHERE k = {rng.randrange(100)}" for _ in range(200)]
    probes, snap = _probed(sb, schema, statements)
    print("prefetch:", snap.counters, snap.pool)
    batches = [p for p in probes if p.schema == schema and p.rows >= 6 and " IN (" in p.sql]
    assert batches and snap.pool["scans"] == 0 and snap.pool["failed"] == 0, (snap.pool, probes[:2])
    for p in batches[:3]:
        got = len(sb.replica().query(p.sql.replace("%%", "%")))
        assert got == 50 * p.rows, (p.sql, got)
    _assert_same_data(sb, schema, ("t",))


def test_statements_tagged_with_their_request_share_probes_without_the_tag(sandbox: Sandbox,
                                                                          schema: str) -> None:
    """An application traced with sqlcommenter ends each statement with its request's
    trace context: the server logs the comment, and no two statements' texts repeat.
    Comments are spaces in a shape, so they share a template and probes, and no probe
    carries an application's trace context into the replica's logs."""
    sb = sandbox
    _table(sb, schema)
    rng = random.Random(5)
    statements = [f"/* app:web */ UPDATE t SET c = c + 1 WHERE id = {rng.randint(2, ROWS)}"
                  f" /*traceparent='00-{rng.getrandbits(128):032x}-{i:016x}-01'*/" for i in range(300)]
    probes, snap = _probed(sb, schema, ["UPDATE t SET c = c + 1 WHERE id = 1", *statements])
    print("prefetch:", snap.counters, snap.pool)
    mine = [p for p in probes if p.schema == schema]
    assert mine and snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool
    assert any(p.rows > 1 for p in mine), "statements of one shape shared a probe"
    assert not [p.sql for p in mine if "traceparent" in p.sql or "app:web" in p.sql]
    _assert_same_data(sb, schema, ("t",))


def test_a_statement_probe_reads_what_its_update_reads_off_page_documents_included(
        sandbox: Sandbox, schema: str) -> None:
    """Why a statement probe is ``SELECT *`` even where a row holds a 64 KB document
    (off-page, in four 16 KB pages): InnoDB reads the whole row, off-page parts
    included, for an UPDATE (a read under an exclusive lock fetches the whole
    record), whatever columns it sets. So the probe reads what the statement will
    and no more. A row probe (``SELECT 1`` by the primary key) warms the row's page
    alone, and leaves its document's pages to the SQL thread.

    Counted as buffer-pool page requests (InnoDB's global count around each
    statement, on one otherwise idle session), not timed."""
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, c INT NOT NULL,"
                    " doc MEDIUMBLOB NOT NULL, KEY k_1 (k))")
    sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, seq, 0, REPEAT(MD5(seq), 2048)"
                    " FROM seq_1_to_100", db=schema)
    statement = rewrite_statement_sql("UPDATE t SET c = c + 1 WHERE id = 11", schema).probe
    assert statement is not None
    row = index_probe_sql(schema, "t", "PRIMARY", ("id",), (), 1)
    conn = sb.source.connect(schema, autocommit=True)
    try:
        with conn.cursor() as cur:
            def gets(sql: str, *args: object) -> int:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_read_requests'")
                before = int(cur.fetchone()[1])  # type: ignore[index]
                cur.execute(sql, args)
                cur.fetchall()
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_read_requests'")
                return int(cur.fetchone()[1]) - before  # type: ignore[index]

            # Each on rows of their own: none was read by another just before.
            found = {"row probe": gets(row, 10), "statement probe": gets(statement.sql),
                     "UPDATE": gets("UPDATE t SET c = c + 1 WHERE id = 12"),
                     "UPDATE again, no change": gets("UPDATE t SET c = c WHERE id = 13")}
    finally:
        conn.close()
    print("buffer-pool page requests:", found)
    assert found["row probe"] + 4 <= found["statement probe"] <= found["UPDATE again, no change"], found
    assert found["statement probe"] <= found["UPDATE"], found


def test_a_statement_probe_of_one_unindexed_column_reads_what_select_star_reads(
        sandbox: Sandbox, schema: str) -> None:
    """A statement probe selects ``ISNULL`` of a column in no index (inserts.TableKeys.select),
    one byte a row where ``SELECT *`` sent the whole row for lagd to decode: the record
    must still be read, so no index may cover the select list, NOT NULL or not. Counted
    as buffer-pool page requests of each form on rows of their own, against a covering
    ``SELECT id`` that reads the secondary index alone."""
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL,"
                    " pad CHAR(60), KEY k_1 (k))")
    sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, (seq * 7919) % 20011, MD5(seq), MD5(-seq)"
                    f" FROM seq_1_to_20000", db=schema)
    conn = sb.source.connect(schema, autocommit=True)
    try:
        with conn.cursor() as cur:
            def gets(select: str, ks: range) -> int:
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_read_requests'")
                before = int(cur.fetchone()[1])  # type: ignore[index]
                cur.execute(f"SELECT {select} FROM t WHERE k IN ({', '.join(map(str, ks))}) LIMIT 256")
                cur.fetchall()
                cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_read_requests'")
                return int(cur.fetchone()[1]) - before  # type: ignore[index]

            # The count is the server's: another test's reads only add, so the least of
            # three (each on rows of its own) is the form's.
            found = {s: min(gets(s, range(1000 * i + 100 * j, 1000 * i + 100 * j + 50)) for j in range(3))
                     for i, s in enumerate(["*", "ISNULL(`c`)", "ISNULL(`pad`)", "id"], 1)}
    finally:
        conn.close()
    print("buffer-pool page requests:", found)
    assert found["id"] + 40 <= found["*"], found  # 50 rows' records: it tells covering from not
    for narrow in ("ISNULL(`c`)", "ISNULL(`pad`)"):
        assert abs(found[narrow] - found["*"]) <= 0.1 * found["*"], found


def test_upserts_of_rows_that_exist_probe_their_primary_key_alone(sandbox: Sandbox, schema: str) -> None:
    """INSERT ... ON DUPLICATE KEY UPDATE from a MIXED source, logged as statements: of a
    row that exists the SQL thread reads the primary key's entry and the row, never the
    (k, id) leaf the new row would have had. Once the primary-key probes find the rows,
    the k_1 entries go unprobed; upserts of new rows after them get theirs probed again."""
    sb = sandbox
    _table(sb, schema)
    rng = random.Random(11)
    sql = "INSERT INTO t (id, k, c) VALUES ({}, {}, 1) ON DUPLICATE KEY UPDATE c = c + VALUES(c)"
    # The first few hundred are read before the table's indexes are looked up (table_lookup).
    existing = [sql.format(rng.randint(2, ROWS), rng.randint(0, 99)) for _ in range(1200)]
    # More again: the cursor reads on while the answers that tell them new come back.
    new = [sql.format(ROWS + 1 + i, rng.randint(0, 99)) for i in range(2400)]

    def ids(probe: Any) -> list[int]:
        """The row ids a probe carries: of (k, id) pairs for k_1, else its values."""
        of = r", (\d+)\)" if probe.index == "k_1" else r"\d+"
        return [int(n) for n in re.findall(of, sent(probe).split(" IN ")[-1])]

    def new_ids(probe: Any) -> list[int]:
        return [i for i in ids(probe) if i > ROWS]

    held: list[int] = []  # how many probes were sent while the SQL thread was held

    def enough(probes: list[Any]) -> bool:
        """Every upsert probed: the SQL thread may go. A probe sent after may find a row it
        has inserted, which tells "the rows exist" again."""
        if not held and any(ROWS + len(new) in new_ids(p) for p in probes[-8:]):
            held.append(len(probes))
        return bool(held)

    # A page budget for the whole backlog: the cursor reads it all with the SQL thread held.
    probes, snap = _probed(sb, schema, ["UPDATE t SET c = c + 1 WHERE id = 1", *existing, *new], "MIXED",
                           per_trx=20, enough=enough, pool_bytes=1 << 30)
    print("prefetch:", snap.counters, snap.pool)
    mine = [p for p in probes if p.schema == schema]
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool
    primary = [p for p in mine if p.index == "PRIMARY"]
    assert primary and all(p.upsert for p in primary)

    def existing_entries(index: str) -> int:
        """The entries probed of existing rows' upserts."""
        return sum(p.rows for p in mine if p.index == index and max(ids(p)) <= ROWS)

    k_of_existing, primary_of_existing = existing_entries("k_1"), existing_entries("PRIMARY")
    assert primary_of_existing >= 300, "every upsert's primary-key entry is probed"
    # Those read before the first answers told the rows exist (the cursor reads ahead in
    # bursts), none of the rest.
    assert k_of_existing < primary_of_existing / 2, (k_of_existing, primary_of_existing)
    assert snap.counters["skipped"]["row_exists"] >= 300
    # And again once the answers tell the rows are new. When depends on how fast the cursor
    # reads against how fast they answer: this looks at the new rows probed after it turned,
    # while the SQL thread was held.
    before_release = [p for p in probes[:held[0]] if p.schema == schema] if held else []
    k_new = {i for p in before_release if p.index == "k_1" for i in new_ids(p)}
    assert k_new, "the new rows' k_1 entries are probed again"
    after = {i for p in before_release if p.index == "PRIMARY" for i in new_ids(p) if i > min(k_new)}
    assert len(after) >= 48, (len(after), min(k_new) - ROWS)
    assert len(after - k_new) <= 0.1 * len(after), (len(after), sorted(after - k_new)[:20])
    _assert_same_data(sb, schema, ("t",))


def test_auto_increment_inserts_probe_the_entries_of_the_ids_the_source_gave(sandbox: Sandbox,
                                                                             schema: str) -> None:
    """INSERTs into an AUTO_INCREMENT table from a MIXED source, the id left out (or 0,
    as sysbench's oltp_insert writes it): MariaDB logs each as a statement after an Intvar
    INSERT_ID event, the value the SQL thread gives its first row again. The new (u, id)
    entries are probed with exactly those ids, rows of one statement
    auto_increment_increment apart; the primary key's, at the table's end, are not."""
    sb = sandbox
    _table(sb, schema)
    sb.start_sql_thread()
    sb.source.query("CREATE TABLE ev (id INT AUTO_INCREMENT PRIMARY KEY, u INT NOT NULL,"
                    " note VARCHAR(20), KEY u_1 (u))", db=schema)
    sb.source.query("INSERT INTO ev (u) SELECT seq % 50 FROM seq_1_to_5000", db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    rng = random.Random(3)
    # The first few hundred are read before the table's indexes are looked up (table_lookup).
    single = [f"INSERT INTO ev (u, note) VALUES ({rng.randint(0, 49)}, 'a')" for _ in range(600)]
    zero = [f"INSERT INTO ev (id, u, note) VALUES (0, {rng.randint(0, 49)}, 'b')" for _ in range(100)]
    multi = ["INSERT INTO ev (u) VALUES " + ", ".join(f"({rng.randint(0, 49)})" for _ in range(3))
             for _ in range(100)]
    write(sb, schema, "MIXED", ["UPDATE t SET c = c + 1 WHERE id = 1", *single, *zero])
    multi_from = sb.source.query("SELECT MAX(id) AS m FROM ev", db=schema)[0]["m"]
    probes, snap = _probed(sb, schema, multi, "MIXED", ("SET SESSION auto_increment_increment = 2",),
                           enough=lambda probes: any(int(i) > multi_from + 500 for p in probes[-4:]
                                                     if p.index == "u_1"
                                                     for i in re.findall(r", (\d+)\)", sent(p))))
    print("prefetch:", snap.counters, snap.pool)
    mine = [p for p in probes if p.schema == schema and p.table == "ev"]
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool
    assert not [p for p in mine if p.index == "PRIMARY"], "an auto-increment key's new entry is an append"
    probed = {(int(u), int(i)) for p in mine if p.index == "u_1"
              for u, i in re.findall(r"\((\d+), (\d+)\)", sent(p).split(" IN ")[1])}
    rows = {(r["u"], r["id"]) for r in sb.source.query("SELECT u, id FROM ev WHERE id > 5000", db=schema)}
    assert probed <= rows, f"probed ids the rows did not get: {sorted(probed - rows)[:5]}"
    assert len({p for p in probed if p[1] <= multi_from}) >= 300
    # Three rows a statement, 2 apart (auto_increment_increment 2 in the Query event).
    assert len({p for p in probed if p[1] > multi_from}) >= 150
    _assert_same_data(sb, schema, ("t", "ev"))


def test_upserts_by_a_unique_key_probe_the_existing_rows_record(sandbox: Sandbox, schema: str) -> None:
    """An AUTO_INCREMENT table upserted by its unique e-mail from a STATEMENT source (MIXED
    logs an upsert into a table of two unique keys as rows: unsafe as a statement): the SQL
    thread finds the duplicate in the e-mail index and reads the row's record to update
    it. The probes of that index select what makes the server read the record too."""
    sb = sandbox
    _table(sb, schema)
    sb.start_sql_thread()
    sb.source.query("CREATE TABLE users (id INT AUTO_INCREMENT PRIMARY KEY, email VARCHAR(60) NOT NULL,"
                    " name VARCHAR(40) NOT NULL, UNIQUE KEY email (email))", db=schema)
    sb.source.query("INSERT INTO users (email, name) SELECT CONCAT('u', seq, '@x'), 'n' FROM seq_1_to_3000",
                    db=schema)
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    rng = random.Random(5)
    upserts = [f"INSERT INTO users (email, name) VALUES ('u{rng.randint(1, 3500)}@x', 'm{i}')"
               " ON DUPLICATE KEY UPDATE name = VALUES(name)" for i in range(800)]
    probes, snap = _probed(sb, schema, ["UPDATE t SET c = c + 1 WHERE id = 1", *upserts], enough=lambda
                           probes: sum(p.rows for p in probes if p.table == "users") >= 300)
    print("prefetch:", snap.counters, snap.pool)
    mine = [p for p in probes if p.schema == schema and p.table == "users"]
    assert snap.pool["failed"] == 0 and snap.pool["refused"] == 0, snap.pool
    assert mine, "the upserts were probed"
    assert all(p.index == "email" and p.sql.startswith("SELECT ISNULL(`name`) FROM") for p in mine), \
        sorted({p.sql[:60] for p in mine})
    _assert_same_data(sb, schema, ("t", "users"))
