"""DDL in the middle of a backlog: the SQL thread is stopped, updates wait in the relay log,
then a DDL, then more updates; the SQL thread starts and lagd prefetches through it.

lagd's probes must follow the schema the SQL thread has applied: once the
replica has the new definition, no probe may force a dropped index, name a
dropped column, key the old primary key or read a renamed or dropped table
(each such probe is an error 1176/1054/1146 or a full scan on the replica).
The replica's general log shows every probe lagd sent, with its time, and a
thread notes when the DDL became visible on the replica.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox
from tests.faults.faultkit import (
    Checks,
    assert_nothing_written,
    backlog_of,
    checksum,
    lagd_running,
    lagd_statements,
    record,
    replica_now,
    state_of,
    wait_idle,
    wait_received,
)

ROWS = 10_000
LOCK_BEFORE, LOCK_AFTER = 17, 18

# case: (DDL on the source, updates after it, "applied on the replica" query, bad probe regex)
CASES: dict[str, tuple[str, str, str, str]] = {
    "pk_change": (
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (b)",
        "UPDATE t SET c = %s WHERE b IN ({ids})",
        "SELECT COUNT(*) AS n FROM information_schema.STATISTICS WHERE table_schema = %s "
        "AND table_name = 't' AND index_name = 'PRIMARY' AND column_name = 'b'",
        r"`t` FORCE INDEX \(`PRIMARY`\) WHERE .*`id` IN",
    ),
    "drop_index": (
        "ALTER TABLE t DROP INDEX ka",
        "UPDATE t SET k = k + 1, c = %s WHERE id IN ({ids})",
        "SELECT 1 - COUNT(*) AS n FROM information_schema.STATISTICS WHERE table_schema = %s "
        "AND table_name = 't' AND index_name = 'ka'",
        r"`t` FORCE INDEX \(`ka`\)",
    ),
    "add_column": (
        "ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7 AFTER id",
        "UPDATE t SET c = %s, d = d + 1 WHERE id IN ({ids})",
        "SELECT COUNT(*) AS n FROM information_schema.COLUMNS WHERE table_schema = %s "
        "AND table_name = 't' AND column_name = 'd'",
        r"`t` FORCE INDEX \(`(?!PRIMARY|ka|ub)",  # any probe through an index t does not have
    ),
    "drop_column": (
        "ALTER TABLE t DROP COLUMN k",  # and with it its index ka
        "UPDATE t SET c = %s WHERE id IN ({ids})",
        "SELECT 1 - COUNT(*) AS n FROM information_schema.COLUMNS WHERE table_schema = %s "
        "AND table_name = 't' AND column_name = 'k'",
        r"`t` FORCE INDEX \(`ka`\)|`t` .*`k`",
    ),
    "rename_table": (
        "RENAME TABLE t TO t2",
        "UPDATE t2 SET c = %s WHERE id IN ({ids})",
        "SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE table_schema = %s AND table_name = 't2'",
        r"\.`t` ",
    ),
    "drop_table": (
        "DROP TABLE t",
        "UPDATE u SET c = %s WHERE id IN ({ids})",
        "SELECT 1 - COUNT(*) AS n FROM information_schema.TABLES WHERE table_schema = %s "
        "AND table_name = 't'",
        r"\.`t` ",
    ),
}


def _create(sb: Sandbox, db: str) -> None:
    for name in ("t", "u"):
        sb.source.query(f"CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, b INT NOT NULL, k INT NOT NULL, "
                        f"c VARCHAR(40) NOT NULL, UNIQUE KEY ub (b), KEY ka (k))", db=db)
        sb.source.query(f"INSERT INTO {name} SELECT seq, seq + 1000000, seq % 500, 'x' FROM seq_1_to_{ROWS}",
                        db=db)


def _updates(sb: Sandbox, db: str, sql: str, n: int, seed: int, key_offset: int = 0) -> None:
    """``n`` transactions of 5 scattered rows each."""
    conn = sb.source.connect(db)
    try:
        with conn.cursor() as cur:
            for i in range(n):
                ids = ", ".join(str((seed + i * 5 + j) * 7919 % ROWS + 1 + key_offset) for j in range(5))
                cur.execute(sql.format(ids=ids), (f"s{seed}-{i}",))
    finally:
        conn.close()


def _watch_applied(sb: Sandbox, db: str, query: str, stop: threading.Event, out: dict[str, str]) -> None:
    """Note the replica's clock when the DDL became visible there."""
    conn = sb.replica().connect(db)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute(query, (db,))
                if int(cur.fetchone()[0]) == 1:
                    cur.execute("SELECT NOW(6)")
                    out["at"] = str(cur.fetchone()[0])
                    return
                stop.wait(0.02)
    finally:
        conn.close()


@pytest.mark.parametrize("case", list(CASES))
def test_ddl_mid_stream(fsb: Sandbox, db: str, tmp_path: Path, case: str) -> None:
    check = Checks()
    ddl, after_sql, applied_q, bad_re = CASES[case]
    _create(fsb, db)
    fsb.wait_caught_up(timeout=60)
    since = replica_now(fsb.replica())
    # A short lead: lagd keeps probing through the catch-up instead of all at once.
    extra = ("[prefetch]\nevaluate_window_seconds = 2.0\nadaptive = false\n"
             "min_lead_transactions = 20\nmax_lead_transactions = 100\n")
    with lagd_running(fsb, tmp_path, extra=extra) as d:
        wait_idle(d)
        fsb.stop_sql_thread()
        # k changes too: the index ka is maintained, so lagd probes it.
        _updates(fsb, db, "UPDATE t SET k = k + 1, c = %s WHERE id IN ({ids})", 200, seed=1)
        # Two transactions around the DDL wait on row locks the test holds on the replica.
        # Held before: the SQL thread stands just before the DDL while lagd reads past it
        # (and meets the tables' new maps while the replica still has the old definition).
        # Held after: the SQL thread has applied the DDL and stands still while lagd goes
        # on probing what follows. Deterministic, whatever the machine's speed.
        fsb.source.query(f"UPDATE u SET c = 'before' WHERE id = {LOCK_BEFORE}", db=db)
        fsb.source.query(ddl, db=db)
        fsb.source.query(f"UPDATE u SET c = 'after' WHERE id = {LOCK_AFTER}", db=db)
        key_offset = 1_000_000 if case == "pk_change" else 0
        _updates(fsb, db, after_sql, 1500, seed=2, key_offset=key_offset)
        wait_received(fsb)
        d.wait_for(lambda s: (backlog_of(s) or 0) >= 1500, timeout=20, what="the backlog seen")
        stop = threading.Event()
        applied: dict[str, str] = {}
        watcher = threading.Thread(target=_watch_applied, args=(fsb, db, applied_q, stop, applied),
                                   daemon=True)
        watcher.start()
        lockers = {}
        for row in (LOCK_BEFORE, LOCK_AFTER):
            lockers[row] = fsb.replica().connect(db, autocommit=False)
            with lockers[row].cursor() as cur:
                cur.execute(f"SELECT id FROM u WHERE id = {row} FOR UPDATE")
        try:
            t0 = time.monotonic()
            fsb.start_sql_thread()
            time.sleep(2.0)  # lagd reads up to its lead past the DDL
            assert "at" not in applied, "the SQL thread passed the row lock held before the DDL"
            lockers[LOCK_BEFORE].rollback()
            watcher.join(30)
            time.sleep(1.5)  # lagd probes what follows the DDL, with the DDL applied
            print("prefetch during the hold after the DDL:",
                  ((d.status() or {}).get("prefetch") or {}).get("counters"))
        finally:
            for conn in lockers.values():
                conn.rollback()
                conn.close()
        try:
            fsb.wait_caught_up(timeout=120)
        finally:
            stop.set()
            watcher.join(5)
        caught = time.monotonic() - t0
        idle = d.poll_until(lambda s: state_of(s) == "idle", 20)
        record(f"DDL mid-stream ({case})", "catch-up through the DDL (by the servers)", caught)
        record(f"DDL mid-stream ({case})", "idle after caught up", idle)
        status_text = str(d.status())
        log = d.log()
    assert "at" in applied, "the DDL never became visible on the replica"
    after = lagd_statements(fsb.replica(), applied["at"])
    probes_after = [s for s in after if s.lstrip().upper().startswith("SELECT 1 FROM")]
    rx = re.compile(bad_re)
    bad = [s[:160] for s in probes_after if rx.search(s) and f"`{db}`" in s]
    print(f"{case}: {len(probes_after)} probes after the DDL was applied, {len(bad)} against the old schema")
    # Error-shaped only ("(1176, ...", "error 1176"): a counter may well read 1146.
    error_rx = re.compile(r"(?:\(|error |errno |code )(1176|1054|1146)\b", re.IGNORECASE)
    errors = sorted(set(error_rx.findall(log + status_text)))
    check(not bad, f"{len(bad)} probe(s) after the DDL was applied still use the old schema: {bad[:2]}")
    check(not errors, f"errors {errors} in lagd's log or /status after {case}")
    for table in ("t2", "u") if case in ("rename_table", "drop_table") else ("t", "u"):
        check(checksum(fsb.source, f"`{db}`.{table}") == checksum(fsb.replica(), f"`{db}`.{table}"),
              f"the replica's {table} differs from the source's")
    assert_nothing_written(fsb.replica(), since)
    check.done()
