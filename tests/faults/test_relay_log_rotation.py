"""Replication control and relay-log rotation under a running lagd: STOP/START SLAVE,
RESET SLAVE, FLUSH RELAY LOGS under load (also twice 50 ms apart), a tiny
max_relay_log_size, relay logs purged while lagd is stalled.

After each fault the same probe: stop the SQL thread, write 1000 transactions,
and lagd must count them (a reader stranded on a purged file says backlog 0 and
idle forever: the issue's worst bug), then report idle once they are applied.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from lagd.sandbox.pair import Sandbox
from tests.faults.faultkit import (
    Checks,
    Lagd,
    Watch,
    Writer,
    assert_nothing_written,
    backlog_of,
    brief,
    lagd_running,
    log_lines,
    record,
    replica_now,
    state_of,
    wait_idle,
    wait_received,
    write_backlog,
)

PROBE = 1000


def sees_new_backlog(sb: Sandbox, d: Lagd, db: str, fault: str, check: Checks) -> None:
    """The probe: a fresh backlog of PROBE transactions must be counted, then drained to idle."""
    with Watch(sb, d) as w:
        sb.stop_sql_thread()
        write_backlog(sb, db, PROBE, table="probe")
        wait_received(sb)
        seen = d.poll_until(lambda s: (backlog_of(s) or 0) >= PROBE * 0.9, 15)
        record(fault, f"a new backlog of {PROBE} counted (after it was received)", seen)
        last = d.status() or {}
        check(seen is not None, f"after {fault}: a backlog of {PROBE} received transactions is not counted "
                                f"(lagd says backlog {backlog_of(last)}, state {state_of(last)})")
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
        idle = d.poll_until(lambda s: state_of(s) == "idle" and backlog_of(s) == 0, 20)
        record(fault, "idle again after the probe backlog was applied", idle)
        check(idle is not None, f"after {fault}: not idle within 20 s of catching up "
                                f"({brief(d.status())})")
    fz = w.false_zeros()
    check(not fz, f"after {fault}: {len(fz)} false zero(s) while the probe backlog waited: {fz[:3]}")


def test_stop_start_slave(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        with Watch(fsb, d) as w:
            for cycle in range(3):
                received = cycle == 2
                if received:
                    # The backlog waits in the relay log (SQL thread stopped) when both threads
                    # stop: a GTID replica then drops its relay log and fetches it again.
                    fsb.stop_sql_thread()
                    write_backlog(fsb, db, 3000)
                    wait_received(fsb)
                fsb.stop_slave()
                s, took = d.wait_for(lambda s: state_of(s) == "stopped", timeout=10, what="state stopped")
                record("STOP SLAVE", "state stopped shown", took)
                reason = s["lag"]["state_reason"].lower()
                check("sql" in reason or "stopped" in reason,
                      f"the state's reason does not name the stopped thread: {reason!r}")
                if not received:
                    write_backlog(fsb, db, 3000)  # not received: the IO thread is stopped too
                time.sleep(2.5)  # old enough that a lag under 0.5 s is surely false
                fsb.start_slave()
                t0 = time.monotonic()
                fsb.wait_caught_up(timeout=60)
                caught = time.monotonic() - t0
                idle = d.poll_until(lambda s: state_of(s) == "idle", 20)
                what = "backlog received before STOP SLAVE" if received else "backlog written while stopped"
                record("START SLAVE", f"caught up ({what}, by the servers)", caught)
                record("START SLAVE", f"idle after caught up ({what})", idle)
                check(idle is not None, f"not idle within 20 s of catching up, {what} ({brief(d.status())})")
        fz = w.false_zeros()
        print(f"{len(w.readings)} readings; false zeros: {fz[:5]}")
        check(not fz, f"{len(fz)} false zero(s) around STOP/START SLAVE: {fz[:3]}")
        sees_new_backlog(fsb, d, db, "STOP/START SLAVE", check)
    assert_nothing_written(fsb.replica(), since)
    check.done()


def test_reset_slave(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        fsb.stop_sql_thread()
        write_backlog(fsb, db, 1000)
        wait_received(fsb)
        d.wait_for(lambda s: (backlog_of(s) or 0) >= 900, timeout=15, what="the backlog seen")
        mark = d.log_mark()
        with Watch(fsb, d) as w:
            fsb.stop_slave()
            fsb.replica().query("RESET SLAVE")  # the relay logs are deleted, numbering starts again
            t0 = time.monotonic()
            fsb._wire(fsb.replica())  # CHANGE MASTER ... MASTER_USE_GTID=slave_pos; START SLAVE
            back = d.poll_until(lambda s: s.get("status") is not None and backlog_of(s) is not None
                                and state_of(s) not in (None, "unknown", "stopped"), 30)
            record("RESET SLAVE", "state and backlog known again after re-wiring", back)
            fsb.wait_caught_up(timeout=60)
            record("RESET SLAVE", "caught up (by the servers) after re-wiring", time.monotonic() - t0)
            idle = d.poll_until(lambda s: state_of(s) == "idle", 20)
            record("RESET SLAVE", "idle after caught up", idle)
        log = d.log_since(mark)
        print("lagd log after RESET SLAVE:\n" + log[-1500:])
        fz = w.false_zeros()
        check(not fz, f"{len(fz)} false zero(s) around RESET SLAVE: {fz[:3]}")
        check(not log_lines(log, r"usermod"),
              "the log blames permissions (usermod) for a relay log that RESET SLAVE deleted")
        check(log_lines(log, r"(reset|anew|renumber|new relay log|moved back|started again|deleted)"),
              "no log line says the relay log was started anew")
        sees_new_backlog(fsb, d, db, "RESET SLAVE", check)
    assert_nothing_written(fsb.replica(), since)
    check.done()


def test_flush_relay_logs_under_load(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    rep = fsb.replica()
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        with Watch(fsb, d) as w, Writer(fsb, db, rate=400) as wr:
            time.sleep(1.0)
            for _ in range(3):
                rep.query("FLUSH RELAY LOGS")
                time.sleep(1.0)
            for i in range(6):
                rep.query("FLUSH RELAY LOGS")
                time.sleep(0.05)
                rep.query("FLUSH RELAY LOGS")
                time.sleep(0.7 + 0.1 * i)
        print(f"writer: {wr.count} transactions, {wr.errors} errors")
        fsb.wait_caught_up(timeout=60)
        fz = w.false_zeros()
        check(not fz, f"{len(fz)} false zero(s) during the flushes: {fz[:3]}")
        sees_new_backlog(fsb, d, db, "FLUSH RELAY LOGS under load", check)
    assert_nothing_written(fsb.replica(), since)
    check.done()


def test_tiny_max_relay_log_size(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    rep = fsb.replica()
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        rep.query("SET GLOBAL max_relay_log_size = 4096")  # the smallest: a new file every few events
        try:
            with Watch(fsb, d) as w:
                for _ in range(3):  # bursts
                    with Writer(fsb, db, rate=400):
                        time.sleep(1.5)
                    time.sleep(0.5)
            fsb.wait_caught_up(timeout=60)
            index = fsb.relay_log_index()
            print("relay log files in the index now:", len(index.read_text().split()))
            fz = w.false_zeros()
            check(not fz, f"{len(fz)} false zero(s) with a tiny max_relay_log_size: {fz[:3]}")
            sees_new_backlog(fsb, d, db, "max_relay_log_size=4096", check)
        finally:
            rep.query("SET GLOBAL max_relay_log_size = 0")
    assert_nothing_written(fsb.replica(), since)
    check.done()


def test_purge_under_stalled_lagd(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    rep = fsb.replica()
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        mark = d.log_mark()
        d.proc.send_signal(signal.SIGSTOP)
        try:
            with Writer(fsb, db, rate=400):
                for _ in range(5):
                    time.sleep(0.4)
                    rep.query("FLUSH RELAY LOGS")  # the SQL thread purges the files it finished
                time.sleep(0.5)
            fsb.wait_caught_up(timeout=60)
        finally:
            d.proc.send_signal(signal.SIGCONT)
        t0 = time.monotonic()
        idle = d.poll_until(lambda s: state_of(s) == "idle", 20)
        record("purge under a stalled lagd", "idle after SIGCONT (replica caught up)", idle)
        sees_new_backlog(fsb, d, db, "purge under a stalled lagd", check)
        record("purge under a stalled lagd", "SIGCONT to the probe backlog drained", time.monotonic() - t0)
        log = d.log_since(mark)
        print("lagd log after SIGCONT:\n" + log[-1500:])
        check(log_lines(log, r"(purged|resync|skipp|gone|left the index|missing|no longer|deleted)"),
              "no log line says the relay log lagd was reading was purged under it")
    assert_nothing_written(fsb.replica(), since)
    check.done()
