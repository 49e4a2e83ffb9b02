"""Data and backlogs for the catch-up benchmark (bench_prefetch), made once and cached.

The replica's table must be far larger than its buffer pool (16x a 256 MB
pool), and every run must start from the same data and apply the same
backlog. So, once:

1. a sandbox (file/position replication: with MASTER_USE_GTID=slave_pos
   MariaDB 10.11 throws the relay log away when a replica restarts) gets a
   sysbench-like table of N rows, loaded on source and replica separately
   with sql_log_bin=0 (same deterministic content; replicating 4 GB would take
   far longer), ids even so that INSERT workloads can use the odd ones;
2. the replica's datadir is saved as the base;
3. for each workload, the replica's relay log is pointed at the source's
   current binlog position, the source writes the workload while only the
   replica's IO thread runs, and the relay-log files plus replication info
   files are saved as that workload's overlay. The replica's InnoDB data is
   never touched (its SQL thread never runs), so base + overlay is a replica
   with exactly that backlog.

Workloads run one after the other on the source, so they are written to be
compatible with a replica at the base: deletes and inserts use disjoint id
pools (an UPDATE of a row deleted earlier on the source logs nothing).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from lagd.mysql.errors import ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
from lagd.sandbox.pair import Sandbox, SandboxConfig

log = logging.getLogger("bench.setup")

TABLE = "sbtest1"
DDL = (f"CREATE TABLE {TABLE} (id INT NOT NULL, k INT NOT NULL DEFAULT 0, "
       "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id)) ENGINE=InnoDB")
OVERLAY_GLOBS = ("*-relay-bin.*", "master.info", "relay-log.info", "multi-master.info")


# Row seq of the base load has id 2 * seq and k (seq * K_HASH) % n_rows (base_k).
K_HASH = 2654435761


def base_k(row_id: int, n_rows: int) -> int:
    """The k the base load gave the row with this id."""
    return (row_id // 2 * K_HASH) % n_rows


def _load_sql(lo: int, hi: int, n_rows: int) -> str:
    # Deterministic content, so source and replica hold the same rows.
    return (f"INSERT INTO {TABLE} SELECT seq * 2, (seq * {K_HASH}) % {n_rows}, "
            "CONCAT(LPAD(seq, 12, '0'), '-', REPEAT(CHAR(97 + seq % 26), 107)), "
            "REPEAT(CHAR(65 + seq % 26), 60) "
            f"FROM seq_{lo}_to_{hi}")


# Documents: a row with a 24,000-byte BLOB, which InnoDB keeps off the row's page (two
# 16 KB pages of its own). An UPDATE reads the whole record, the document's pages too.
DOCS = "docs"
DOCS_DDL = (f"CREATE TABLE {DOCS} (id INT NOT NULL PRIMARY KEY, c INT NOT NULL DEFAULT 0,"
            " doc MEDIUMBLOB NOT NULL) ENGINE=InnoDB")
DOC_BYTES = 24_000
# Events: an AUTO_INCREMENT table of the kind every application has, with an index on the
# user an event belongs to. A new event's id is the table's end (in memory); its
# (user_id, id) entry goes to a random leaf of an index larger than the pool (12M
# entries: about 300 MB; with 6M it stayed in a 256 MB pool, 7,600 reads a catch-up).
EVENTS = "events"
EVENTS_DDL = (f"CREATE TABLE {EVENTS} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
              " user_id INT NOT NULL, kind TINYINT NOT NULL, note CHAR(40) NOT NULL DEFAULT '')"
              " ENGINE=InnoDB")
BASE_VERSION = 4  # 2: with the documents table; 3: and the events table; 4: twice the events


def event_users(n_rows: int) -> int:
    """Users in the events table: 10 events each in the base."""
    return max(100, n_rows // 10)


def doc_rows(n_rows: int) -> int:
    """Documents in the base: about 2.4 GB for the 12M-row benchmark, 10x a 256 MB pool."""
    return max(1000, n_rows // 120)


def _load(server: Any, n_rows: int, chunk: int = 1_000_000) -> None:
    conn = server.connect("bench")
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for lo in range(1, n_rows + 1, chunk):
                cur.execute(_load_sql(lo, min(n_rows, lo + chunk - 1), n_rows))
            cur.execute(f"ALTER TABLE {TABLE} ADD INDEX k_1 (k)")
            cur.execute(DOCS_DDL)
            docs, step = doc_rows(n_rows), 5000
            for lo in range(1, docs + 1, step):
                cur.execute(f"INSERT INTO {DOCS} SELECT seq, 0, REPEAT(MD5(seq), {DOC_BYTES // 32})"
                            f" FROM seq_{lo}_to_{min(docs, lo + step - 1)}")
            cur.execute(EVENTS_DDL)
            events, users = n_rows, event_users(n_rows)
            for lo in range(1, events + 1, chunk):
                cur.execute(f"INSERT INTO {EVENTS} SELECT seq, (seq * {K_HASH}) % {users}, seq % 5,"
                            f" LPAD(seq, 40, 'e') FROM seq_{lo}_to_{min(events, lo + chunk - 1)}")
            cur.execute(f"ALTER TABLE {EVENTS} ADD INDEX user_id (user_id)")
    finally:
        conn.close()


# ----- workloads: each writes on the source and returns row changes made ------

class Ids:
    """Id pools that keep workloads compatible with the base replica."""

    def __init__(self, n_rows: int, seed: int, worker: int = 0, workers: int = 1) -> None:
        self.n = n_rows
        self.rng = random.Random(seed)
        self.worker, self.workers = worker, workers  # the writing thread, of how many

    def existing(self) -> int:
        return 2 * self.rng.randint(1, self.n)

    def deletable(self, part: int) -> int:
        # Disjoint quarter of the id space per deleting workload.
        q = self.n // 4
        return 2 * self.rng.randint(part * q + 1, (part + 1) * q)

    def own_deletable(self, part: int) -> int:
        # As deletable, but only ids no other writing thread picks.
        q = self.n // 4
        return self._own(part * q, (part + 1) * q)

    def own_existing(self) -> int:
        # As existing, but only ids no other writing thread picks.
        return self._own(0, self.n)

    def _own(self, lo: int, hi: int) -> int:
        # An id 2 * i, i within (lo, hi), that only this writing thread picks: big
        # transactions of several threads must not wait on each other's row locks.
        r = self.rng.randint(lo // self.workers + 1, hi // self.workers - 1)
        return 2 * (self.workers * r + self.worker)

    def free(self, part: int) -> int:
        # Odd ids: ids % 4 == 1 for one workload, == 3 for the other.
        return 4 * self.rng.randint(0, self.n // 2 - 1) + (1 if part == 0 else 3)


def _w_update(cur: Any, ids: Ids) -> int:
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s", (f"u{ids.rng.random():.12f}", ids.existing()))
    return 1


def _w_update_k(cur: Any, ids: Ids) -> int:
    cur.execute(f"UPDATE {TABLE} SET k = %s WHERE id = %s", (ids.rng.randint(0, ids.n), ids.existing()))
    return 1


def _w_delete(cur: Any, ids: Ids) -> int:
    cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (ids.deletable(0),))
    return 1


def _w_insert(cur: Any, ids: Ids) -> int:
    cur.execute(f"INSERT IGNORE INTO {TABLE} VALUES (%s, %s, 'ins', 'ins')",
                (ids.free(0), ids.rng.randint(0, ids.n)))
    return 1


def _w_mixed(cur: Any, ids: Ids) -> int:
    r = ids.rng.random()
    if r < 0.5:
        return _w_update(cur, ids)
    if r < 0.7:
        return _w_update_k(cur, ids)
    if r < 0.85:
        cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (ids.deletable(1),))
        return 1
    cur.execute(f"INSERT IGNORE INTO {TABLE} VALUES (%s, %s, 'mix', 'mix')",
                (ids.free(1), ids.rng.randint(0, ids.n)))
    return 1


def _w_update_doc(cur: Any, ids: Ids) -> int:
    cur.execute(f"UPDATE {DOCS} SET c = c + 1 WHERE id = %s", (ids.rng.randint(1, doc_rows(ids.n)),))
    return 1


def _w_update_hot(cur: Any, ids: Ids) -> int:
    # A skewed hot set: 90% of the updates go to 1% of the rows.
    hot = ids.rng.random() < 0.9
    row = 2 * ids.rng.randint(1, max(1, ids.n // 100)) if hot else ids.existing()
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s", (f"h{ids.rng.random():.12f}", row))
    return 1


def _w_multi(cur: Any, ids: Ids) -> int:
    # A transaction of 10 single-row updates, like an application batch.
    for _ in range(10):
        _w_update(cur, ids)
    return 10


def _w_delete_big(cur: Any, ids: Ids) -> int:
    # One transaction of 50,000 random-row DELETEs (a purge job's batch): the SQL thread
    # spends several seconds inside it, so the gate measures it alone without its
    # position moving, and DELETEs do not count for the early stop there.
    for _ in range(50_000):
        cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (ids.own_deletable(2),))
    return 50_000


def _w_update_big_stmt(cur: Any, ids: Ids) -> int:
    # One transaction of 50,000 random primary-key UPDATEs, as a batch job writes them; on a
    # STATEMENT or MIXED source each is a statement event: the SQL thread is inside one
    # transaction for seconds, and only InnoDB's count says where.
    for _ in range(50_000):
        cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s",
                    (f"b{ids.rng.random():.12f}", ids.own_existing()))
    return 50_000


def _w_oltp_write(cur: Any, ids: Ids) -> int:
    # sysbench's oltp_write_only transaction, the workload DBAs try first: an UPDATE of the
    # indexed k, an UPDATE of c, and a DELETE of a row inserted back at once, each by a
    # random primary key (ids of this writing thread alone: no lock waits between threads).
    cur.execute(f"UPDATE {TABLE} SET k = k + 1 WHERE id = %s", (ids.own_existing(),))
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s", (f"o{ids.rng.random():.12f}", ids.own_existing()))
    gone = ids.own_existing()
    cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (gone,))
    cur.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 'oltp', 'oltp')", (gone, ids.rng.randint(0, ids.n)))
    return 4


def _w_update_range(cur: Any, ids: Ids) -> int:
    # An UPDATE of 10 consecutive rows (the even ids lo to lo + 18), as a job touching a
    # customer's recent rows writes it: one statement, one or two leaf pages. Blocks of
    # 20 ids, every other one left alone: the range's next-key lock falls in a free block,
    # never on another writing thread's rows.
    lo = 40 * (ids.workers * ids.rng.randint(0, ids.n // (20 * ids.workers) - 1) + ids.worker) + 2
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id BETWEEN %s AND %s",
                (f"r{ids.rng.random():.12f}", lo, lo + 18))
    # Counted as one change (the backlog's statements), or 200,000 changes would be a
    # catch-up of 7 s, too short for the gate to be judged.
    return 1


def _w_update_checked(cur: Any, ids: Ids) -> int:
    # An UPDATE by primary key that also checks a second column, as optimistic locking
    # writes it (WHERE id = ? AND version = ?): here the row's k as the base load made it.
    # Not `col = ?` alone, so it is batched as an OR of the conditions (fingerprint.py).
    row = ids.existing()
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s AND k = %s",
                (f"v{ids.rng.random():.12f}", row, base_k(row, ids.n)))
    return 1


def _w_update_by_k(cur: Any, ids: Ids) -> int:
    # An UPDATE found by the secondary index k (about one row a value): the SQL thread
    # reads k's leaf, then the row's.
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE k = %s",
                (f"q{ids.rng.random():.12f}", ids.rng.randint(0, ids.n)))
    return 1


def _w_update_k_range(cur: Any, ids: Ids) -> int:
    # An UPDATE of the rows of 40 consecutive k values (about one row a value, scattered
    # over the primary key), as a job by a date or a status writes it: one or two leaves
    # of k_1 and 40 rows' pages. A batch of 16 such statements is 640 rows, past one
    # statement's probe bound (rewrite_sql.STATEMENT_ROWS), which it once shared.
    lo = ids.rng.randint(0, ids.n - 40)
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE k BETWEEN %s AND %s",
                (f"g{ids.rng.random():.12f}", lo, lo + 39))
    return 40  # its rows, about: the catch-up reads as many pages as update_pk's


def _w_update_traced(cur: Any, ids: Ids) -> int:
    # update_pk as an application traced with sqlcommenter writes it: each statement ends
    # in a comment with its request's trace context, so no two statements' texts repeat.
    trace = f"{ids.rng.getrandbits(128):032x}-{ids.rng.getrandbits(64):016x}"
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id = %s /*action='update',traceparent='00-{trace}-01'*/",
                (f"t{ids.rng.random():.12f}", ids.existing()))
    return 1


def _w_upsert(cur: Any, ids: Ids) -> int:
    # An upsert of an existing row (a counter, a last-seen stamp): INSERT ... ON DUPLICATE
    # KEY UPDATE. With one unique key MIXED logs it as a statement; the SQL thread finds
    # the duplicate in the primary key's leaf, the row's page, and updates it there.
    cur.execute(f"INSERT INTO {TABLE} (id, k, c, pad) VALUES (%s, 0, %s, 'up')"
                " ON DUPLICATE KEY UPDATE c = VALUES(c)", (ids.own_existing(), f"x{ids.rng.random():.12f}"))
    return 1


def _w_upsert_row(cur: Any, ids: Ids) -> int:
    # An application writing its whole row as an upsert (a cache of another system's
    # objects, a sync job): every column, k too, whose value the existing row keeps. Of
    # an existing row the SQL thread reads the primary key alone; the new row's (k, id)
    # leaf, a random one of k_1, it never reads.
    cur.execute(f"INSERT INTO {TABLE} (id, k, c, pad) VALUES (%s, %s, %s, 'up')"
                " ON DUPLICATE KEY UPDATE c = VALUES(c)",
                (ids.own_existing(), ids.rng.randint(0, ids.n), f"x{ids.rng.random():.12f}"))
    return 1


def _w_update_in(cur: Any, ids: Ids) -> int:
    # An application's batch written as one statement: UPDATE ... WHERE id IN (10 random
    # ids), 10 scattered rows (ids of this writing thread alone: no lock waits).
    rows = sorted({ids.own_existing() for _ in range(10)})
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id IN ({', '.join(['%s'] * len(rows))})",
                (f"i{ids.rng.random():.12f}", *rows))
    return len(rows)


def _w_update_block(cur: Any, ids: Ids) -> int:
    # An UPDATE of 50 consecutive rows (a job by a range of ids), row-based: one rows
    # event of 50 rows in two or three leaf pages. The SQL thread spends most of its time
    # on the rows, a third on reads: probes pay only if they cost little (a key every
    # rewrite.NEAR_SPAN). Blocks of 100 ids, every other one left alone (the next-key
    # lock falls in a free block).
    lo = 200 * (ids.workers * ids.rng.randint(0, ids.n // (100 * ids.workers) - 1) + ids.worker) + 2
    cur.execute(f"UPDATE {TABLE} SET c = %s WHERE id BETWEEN %s AND %s",
                (f"b{ids.rng.random():.12f}", lo, lo + 98))
    # Counted as 5 changes: 40,000 statements of 50 rows, a cold catch-up of about 15 s
    # (counted as 10, 7-10 s: the gate opened at 4-5 s and had 3 s left to show anything).
    return 5


# A child table whose every row references a row of the big table: InnoDB checks each new
# row's parent_id in the parent's primary key, a random read the SQL thread makes per INSERT.
CHILD = "child_fk"
CHILD_DDL = (f"CREATE TABLE IF NOT EXISTS {CHILD} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
             " parent_id INT NOT NULL, note CHAR(20) NOT NULL DEFAULT '', KEY parent_id (parent_id),"
             f" CONSTRAINT to_parent FOREIGN KEY (parent_id) REFERENCES {TABLE} (id)) ENGINE=InnoDB")


def _w_insert_auto(cur: Any, ids: Ids) -> int:
    # An event appended for a random user, its id left to AUTO_INCREMENT: MIXED logs it
    # as a statement after an INSERT_ID event. The SQL thread reads the user's leaf of
    # user_id (the entry (user_id, id) goes at its end); the clustered leaf is the last.
    cur.execute(f"INSERT INTO {EVENTS} (user_id, kind, note) VALUES (%s, %s, 'new')",
                (ids.rng.randint(0, event_users(ids.n) - 1), ids.rng.randint(0, 4)))
    return 1


def _w_insert_fk(cur: Any, ids: Ids) -> int:
    # Parents from the last quarter of the ids, which no workload deletes on the source.
    cur.execute(f"INSERT INTO {CHILD} (parent_id, note) VALUES (%s, 'fk')", (ids.deletable(3),))
    return 1


WORKLOADS: dict[str, tuple[str, Callable[[Any, Ids], int]]] = {
    "update_pk": ("random primary-key UPDATEs of a non-indexed column", _w_update),
    "update_pk_stmt": ("update_pk logged as statements (binlog_format=STATEMENT)", _w_update),
    "mixed_fmt": ("mixed logged with binlog_format=MIXED (MariaDB's default)", _w_mixed),
    "update_hot": ("primary-key UPDATEs, 90% of them to 1% of the rows", _w_update_hot),
    "update_k": ("UPDATEs of an indexed column", _w_update_k),
    "update_k_stmt": ("update_k logged as statements (binlog_format=STATEMENT; MIXED logs it so too)",
                      _w_update_k),
    "delete": ("random DELETEs", _w_delete),
    "insert": ("INSERTs with random unique keys", _w_insert),
    "insert_stmt": ("insert logged as statements (binlog_format=STATEMENT)", _w_insert),
    "mixed": ("50% update, 20% indexed update, 15% delete, 15% insert", _w_mixed),
    "multi_row": ("transactions of 10 random-row UPDATEs", _w_multi),
    "delete_big": ("transactions of 50,000 random-row DELETEs", _w_delete_big),
    "update_big_stmt": ("transactions of 50,000 random primary-key UPDATEs logged as statements",
                        _w_update_big_stmt),
    "update_doc": ("primary-key UPDATEs of rows holding a 24 KB document (off-page BLOB),"
                   " binlog_row_image=MINIMAL", _w_update_doc),
    "update_doc_stmt": ("update_doc logged as statements (binlog_format=STATEMENT)", _w_update_doc),
    "insert_fk": ("INSERTs into a child table whose foreign key references a random row", _w_insert_fk),
    "insert_fk_stmt": ("insert_fk logged as statements (binlog_format=STATEMENT)", _w_insert_fk),
    "oltp_write": ("sysbench oltp_write_only transactions: UPDATE of k, UPDATE of c, DELETE and"
                   " INSERT back, random primary keys", _w_oltp_write),
    "oltp_write_mixed": ("oltp_write logged with binlog_format=MIXED (statements)", _w_oltp_write),
    "update_range_stmt": ("UPDATEs of 10 consecutive rows by a primary-key range, logged as statements"
                          " (a statement counted as one change)",
                          _w_update_range),
    "update_by_k_stmt": ("UPDATEs of the rows of a random k value (secondary index), logged as statements",
                         _w_update_by_k),
    "update_k_range_stmt": ("UPDATEs of the rows of 40 consecutive k values (secondary-index range,"
                            " about 40 scattered rows), logged as statements (counted as 40 changes)",
                            _w_update_k_range),
    "update_checked_mixed": ("primary-key UPDATEs that also check a second column (optimistic locking),"
                             " binlog_format=MIXED (logged as statements)", _w_update_checked),
    "update_traced_stmt": ("update_pk with a trace context comment on each statement (sqlcommenter),"
                           " logged as statements", _w_update_traced),
    "upsert_mixed": ("INSERT ... ON DUPLICATE KEY UPDATE of existing rows, binlog_format=MIXED"
                     " (logged as statements)", _w_upsert),
    "upsert_row_mixed": ("INSERT ... ON DUPLICATE KEY UPDATE of existing rows giving every column,"
                         " k random, binlog_format=MIXED (logged as statements)", _w_upsert_row),
    "update_in_stmt": ("UPDATEs of 10 random rows by an IN list, logged as statements", _w_update_in),
    "insert_auto_mixed": ("INSERTs into an AUTO_INCREMENT table for random users (the id left out),"
                          " binlog_format=MIXED (logged as statements)", _w_insert_auto),
    "update_block": ("UPDATEs of 50 consecutive rows by a primary-key range, row-based (one event"
                     " of 50 rows; counted as 5 changes)", _w_update_block),
}
# Statements the source runs before a workload, in its backlog: the SQL thread applies them
# first. The table is dropped unlogged first: MariaDB does not log CREATE TABLE IF NOT EXISTS
# of a table that exists, and another workload may have made it on the source.
PREPARE = {"insert_fk": (f"DROP TABLE IF EXISTS {CHILD}", CHILD_DDL),
           "insert_fk_stmt": (f"DROP TABLE IF EXISTS {CHILD}", CHILD_DDL)}
# Settings of the source's writing sessions per workload: a documents table's rows are
# logged without their documents, as binlog sizes make DBAs set them.
SESSION = {"update_doc": ("SET SESSION binlog_row_image = 'MINIMAL'",)}
# The source session's binlog_format per workload (the server's, ROW, otherwise).
BINLOG_FORMAT = {"update_doc_stmt": "STATEMENT", "update_pk_stmt": "STATEMENT", "mixed_fmt": "MIXED",
                 "update_k_stmt": "STATEMENT", "insert_stmt": "STATEMENT", "update_big_stmt": "STATEMENT",
                 "insert_fk_stmt": "STATEMENT", "oltp_write_mixed": "MIXED",
                 "update_range_stmt": "STATEMENT", "update_by_k_stmt": "STATEMENT",
                 "update_checked_mixed": "MIXED", "update_k_range_stmt": "STATEMENT",
                 "upsert_mixed": "MIXED", "upsert_row_mixed": "MIXED", "update_in_stmt": "STATEMENT",
                 "insert_auto_mixed": "MIXED",
                 "update_traced_stmt": "STATEMENT"}


def _write_workload(sb: Sandbox, fn: Callable[[Any, Ids], int], changes: int, seed: int,
                    threads: int = 4, binlog_format: str | None = None, session: tuple[str, ...] = ()
                    ) -> int:
    made = [0]
    lock = threading.Lock()
    per = changes // threads

    def worker(i: int) -> None:
        ids = Ids(N_ROWS[0], seed * 100 + i, i, threads)
        conn = sb.source.connect("bench", autocommit=False)
        n = 0
        try:
            with conn.cursor() as cur:
                if binlog_format:
                    cur.execute(f"SET SESSION binlog_format = '{binlog_format}'")
                for sql in session:
                    cur.execute(sql)
                while n < per:
                    try:
                        made_now = fn(cur, ids)
                    except pymysql.err.OperationalError as e:
                        if e.args[0] not in (ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK):  # try another
                            raise
                        conn.rollback()
                        continue
                    n += made_now
                    conn.commit()
        finally:
            conn.close()
        with lock:
            made[0] += n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return made[0]


N_ROWS = [0]


def _wait_received(sb: Sandbox, timeout: float = 600) -> None:
    ms = sb.source.query("SHOW MASTER STATUS")[0]
    want = (ms["File"], int(ms["Position"]))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.slave_status()
        if (st["Master_Log_File"], int(st["Read_Master_Log_Pos"])) >= want:
            return
        time.sleep(0.2)
    raise RuntimeError("the replica's IO thread did not receive the workload in time")


def to_build(cached: dict[str, Any] | None, n_rows: int, changes: int, wanted: list[str]) -> list[str]:
    """The workloads to build, [] when the cache (its meta.json, or None) holds them all.

    The source is not cached, so one workload missing means building it all again,
    and then the cached workloads are built again with it rather than dropped. A
    cache of another table or backlog length is another benchmark: replaced."""
    if (cached is None or cached.get("rows") != n_rows or cached.get("changes") != changes
            or cached.get("base_version", 1) != BASE_VERSION):
        return list(wanted)
    have = list(cached.get("workloads") or {})
    if set(wanted) <= set(have):
        return []
    return [*have, *(w for w in wanted if w not in have)]


def build(cache: Path, n_rows: int, changes: int, workloads: list[str]) -> dict[str, Any]:
    """Make (or reuse) the cached base datadir and workload overlays."""
    meta_path = cache / "meta.json"
    cached: dict[str, Any] | None = json.loads(meta_path.read_text()) if meta_path.exists() else None
    todo = to_build(cached, n_rows, changes, workloads)
    if cached is not None and not todo:
        return cached
    workloads = todo
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    N_ROWS[0] = n_rows
    cfg = SandboxConfig(gtid=False, o_direct=True, source_buffer_pool_mb=2048,
                        replica_buffer_pool_mb=2048,
                        source_extra_options={"innodb-log-file-size": "1G"},
                        replica_extra_options={"innodb-log-file-size": "1G"})
    t0 = time.monotonic()
    with Sandbox(cfg) as sb:
        sb.source.query("CREATE DATABASE bench")
        sb.source.query(DDL, db="bench")
        sb.wait_caught_up(timeout=60)
        sb.stop_slave()
        loaders = [threading.Thread(target=_load, args=(s, n_rows)) for s in (sb.source, sb.replica())]
        for t in loaders:
            t.start()
        for t in loaders:
            t.join()
        log.info("loaded %d rows on source and replica in %.0f s", n_rows, time.monotonic() - t0)
        rep = sb.replica()
        size = sum(f.stat().st_size for f in (rep.datadir / "bench").glob("*.ibd"))
        rep.send_signal(signal.SIGTERM)  # clean shutdown: a consistent datadir to copy
        if not rep.wait_exit(300):
            raise RuntimeError("the replica did not shut down")
        shutil.copytree(rep.datadir, cache / "replica-base", symlinks=True)
        sb.restart_server(rep.name, start_slave=False)
        meta = {"rows": n_rows, "table_bytes": size, "changes": changes, "workloads": {},
                "replica_name": rep.name, "base_version": BASE_VERSION}
        for i, name in enumerate(workloads):
            desc, fn = WORKLOADS[name]
            rep.query("STOP SLAVE")
            rep.query("RESET SLAVE")
            ms = sb.source.query("SHOW MASTER STATUS")[0]
            rep.query("CHANGE MASTER TO MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s",
                      (ms["File"], int(ms["Position"])))
            rep.query("START SLAVE IO_THREAD")
            for sql in PREPARE.get(name, ()):
                conn = sb.source.connect("bench")
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"SET SESSION sql_log_bin = {0 if sql.startswith('DROP') else 1}")
                        cur.execute(sql)
                finally:
                    conn.close()
            w0 = time.monotonic()
            made = _write_workload(sb, fn, changes, seed=i + 1,
                                   binlog_format=BINLOG_FORMAT.get(name), session=SESSION.get(name, ()))
            _wait_received(sb)
            rep.query("STOP SLAVE IO_THREAD")
            out = cache / "workloads" / name
            out.mkdir(parents=True)
            for pattern in OVERLAY_GLOBS:
                for f in rep.datadir.glob(pattern):
                    shutil.copy2(f, out / f.name)
            meta["workloads"][name] = {"description": desc, "row_changes": made,
                                       "binlog_format": BINLOG_FORMAT.get(name, "ROW"),
                                       "write_seconds": round(time.monotonic() - w0, 1)}
            log.info("workload %s: %d row changes", name, made)
    meta["setup_seconds"] = round(time.monotonic() - t0)
    meta_path.write_text(json.dumps(meta, indent=2))
    return meta


def restore(cache: Path, workload: str, datadir: Path) -> None:
    """Make ``datadir`` the base replica with ``workload``'s backlog."""
    shutil.rmtree(datadir, ignore_errors=True)
    shutil.copytree(cache / "replica-base", datadir, symlinks=True)
    for f in datadir.glob("*-relay-bin.*"):
        f.unlink()
    for f in (cache / "workloads" / workload).iterdir():
        shutil.copy2(f, datadir / f.name)
