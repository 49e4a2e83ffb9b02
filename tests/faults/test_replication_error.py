"""Replication breaks mid-backlog under a running lagd: the SQL thread stops on an error.

The commonest page a DBA gets: a row written on the replica by hand (or by an
application pointed at the wrong server) is inserted again by the source, and
the SQL thread stops on error 1062 with a backlog behind it. lagd must say so:
state ``error`` naming the error, a lag that grows and is never 0, no catch-up
time, no probe while nothing applies, CRITICAL from ``lagctl status``; and once
the DBA has removed the row and started the SQL thread, follow the catch-up to
idle, having written nothing.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

from lagd.sandbox.pair import Sandbox
from tests.faults.faultkit import (
    LAGCTL,
    Checks,
    Lagd,
    Watch,
    assert_nothing_written,
    backlog_of,
    brief,
    checksum,
    ensure_replicating,
    lag_of,
    lagd_running,
    record,
    replica_now,
    state_of,
    wait_idle,
    wait_received,
)

ROWS = 3000
DUPLICATE = 1500  # the row the replica already has: the SQL thread stops on it
FAULT = "SQL thread error 1062"


def _probes(s: dict[str, Any] | None) -> int | None:
    counters = ((s or {}).get("prefetch") or {}).get("counters") or {}
    return None if counters.get("probes_submitted") is None else int(counters["probes_submitted"])


def _backlog_behind_a_duplicate(sb: Sandbox, db: str) -> None:
    """The replica gets row DUPLICATE on its own; the source then inserts rows 1..ROWS."""
    sb.replica().query(f"INSERT INTO dup VALUES ({DUPLICATE}, 0, 'written on the replica')", db=db)
    conn = sb.source.connect(db)
    try:
        with conn.cursor() as cur:
            for i in range(1, ROWS + 1):
                cur.execute("INSERT INTO dup VALUES (%s, 1, 'x')", (i,))
    finally:
        conn.close()
    wait_received(sb)


def _stopped_on_the_error(d: Lagd, check: Checks) -> None:
    """What lagd shows while the SQL thread stands on the error."""
    s, took = d.wait_for(lambda s: state_of(s) == "error", timeout=20, what="state error")
    record(FAULT, "state error shown", took)
    reason = lag_of(s).get("state_reason")
    check("1062" in str(reason), f"the state's reason does not name the error: {reason!r}")
    time.sleep(3.0)  # the lag grows, the backlog stays; nothing applies
    s = d.status() or {}
    lag = lag_of(s)
    check(lag.get("lag") is not None and float(lag["lag"]) >= 2.0,
          f"lag {lag.get('lag')} while nothing applied for 3 s ({brief(s)})")
    check((backlog_of(s) or 0) >= ROWS - DUPLICATE - 10,
          f"backlog {backlog_of(s)} with {ROWS - DUPLICATE} transactions unapplied")
    check(lag.get("eta") in (None, "inf"), f"a catch-up time {lag.get('eta')!r} while nothing applies")
    before = _probes(s)
    time.sleep(2.0)
    after = d.status() or {}
    check(_probes(after) == before,
          f"probes sent while the SQL thread stood on its error: {before} -> {_probes(after)}")
    check(state_of(after) == "error", f"state {state_of(after)!r} while stopped on the error")
    cli = subprocess.run([LAGCTL, "status", "--url", d.url], capture_output=True, text=True, timeout=30)
    check(cli.returncode == 2 and "1062" in cli.stdout,
          f"lagctl status exit {cli.returncode} (CRITICAL is 2), output:\n{cli.stdout}{cli.stderr}")
    check(re.search(r"^lagd_replica_last_sql_errno\{[^}]*\} 1062(?:\.0)?$", d.get("/metrics")[1], re.M),
          "lagd_replica_last_sql_errno is not 1062")


def test_sql_thread_error_mid_backlog(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    fsb.source.query("CREATE TABLE dup (id INT PRIMARY KEY, v INT, pad CHAR(100))", db=db)
    fsb.wait_caught_up(timeout=60)
    since = replica_now(fsb.replica())
    extra = "[prefetch]\nevaluate_window_seconds = 2.0\nadaptive = false\n"
    try:
        with lagd_running(fsb, tmp_path, extra=extra) as d:
            wait_idle(d)
            fsb.stop_sql_thread()
            _backlog_behind_a_duplicate(fsb, db)
            with Watch(fsb, d) as w:
                fsb.start_sql_thread()
                _stopped_on_the_error(d, check)
                # The DBA's fix: the replica's own row goes, the SQL thread applies the source's.
                fsb.replica().query(f"DELETE FROM dup WHERE id = {DUPLICATE}", db=db)
                t0 = time.monotonic()
                fsb.start_sql_thread()
                fsb.wait_caught_up(timeout=60)
                record(FAULT, "caught up after the fix (by the servers)", time.monotonic() - t0)
                idle = d.poll_until(lambda s: state_of(s) == "idle" and backlog_of(s) == 0, 20)
                record(FAULT, "idle after caught up", idle)
                check(idle is not None, f"not idle within 20 s of catching up ({brief(d.status())})")
            fz = w.false_zeros()
            check(not fz, f"{len(fz)} false zero(s) around the error: {fz[:3]}")
            check(d.alive(), "lagd exited")
        check(checksum(fsb.source, f"`{db}`.dup") == checksum(fsb.replica(), f"`{db}`.dup"),
              "the replica's table differs from the source's")
        assert_nothing_written(fsb.replica(), since)
    finally:
        ensure_replicating(fsb)
    check.done()
