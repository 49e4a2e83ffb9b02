"""Faults of the server processes: the replica killed (-9) and restarted in the middle of a
prefetched catch-up, the replica hung (SIGSTOP) for 10 s, the source hung for 10 s."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lagd.heartbeat import HeartbeatWriter
from lagd.sandbox.pair import Sandbox
from tests.faults.faultkit import (
    HB_TABLE,
    LAGCTL,
    LAGD,
    Checks,
    Watch,
    assert_nothing_written,
    backlog_of,
    checksum,
    heartbeat_table,
    lag_of,
    lagd_running,
    log_lines,
    pending,
    record,
    replica_now,
    state_of,
    wait_idle,
    wait_received,
    write_backlog,
)

HANG = 10.0  # seconds a server stays SIGSTOPped


def _updates(sb: Sandbox, db: str, n: int, rows: int, per: int = 20) -> None:
    """``n`` transactions of ``per`` scattered single-row updates each."""
    conn = sb.source.connect(db)
    try:
        with conn.cursor() as cur:
            for i in range(n):
                ids = ", ".join(str((i * per + j) * 7919 % rows + 1) for j in range(per))
                cur.execute(f"UPDATE p SET k = k + 1, c = 'u{i}' WHERE id IN ({ids})")
    finally:
        conn.close()


def _known(s: dict) -> bool:
    """lagd has a picture again: a replica status, a state, a backlog."""
    return s.get("status") is not None and state_of(s) not in (None, "unknown") and backlog_of(s) is not None


def test_replica_kill9_and_restart_mid_prefetch(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    rows = 30_000
    fsb.source.query("CREATE TABLE p (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(200) NOT NULL, KEY kk (k))",
                     db=db)
    fsb.source.query(f"INSERT INTO p SELECT seq, seq % 1000, 'x' FROM seq_1_to_{rows}", db=db)
    fsb.wait_caught_up(timeout=60)
    since = replica_now(fsb.replica())
    extra = "[prefetch]\nevaluate_window_seconds = 2.0\n"
    with lagd_running(fsb, tmp_path, extra=extra) as d:
        wait_idle(d)
        fsb.stop_sql_thread()
        _updates(fsb, db, 3000, rows)
        wait_received(fsb)
        d.wait_for(lambda s: (backlog_of(s) or 0) > 1000, timeout=20, what="the backlog seen")
        with Watch(fsb, d) as w:
            fsb.start_sql_thread()
            d.poll_until(lambda s: s["prefetch"]["counters"]["probes_submitted"] > 0, 1.0)
            at_kill = d.status() or {}
            pf = at_kill.get("prefetch") or {}
            print("prefetch when the replica is killed:", pf.get("state"), pf.get("reason"),
                  (pf.get("counters") or {}).get("probes_submitted"), "probes; pending", pending(fsb))
            mark = d.log_mark()
            t_kill = time.monotonic()
            fsb.kill_server(fsb.replica().name)
            unknown_after = d.poll_until(lambda s: state_of(s) == "unknown" or s.get("status") is None, 15)
            record("replica kill -9", "state unknown after the kill", unknown_after)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t_kill)))
            fsb.restart_server(fsb.replica().name)
            back = d.poll_until(_known, 60)
            record("replica kill -9", "replica status, state and backlog known again after restart", back)
            if back is None:  # seen once in CI (2026-11-28), cause not found: say what lagd said
                last = d.status() or {}
                print("not known again; lagd said:", lag_of(last).get("state"),
                      lag_of(last).get("state_reason"), "| health:", last.get("health"))
                print("lagd's log since the kill:\n" + "\n".join(d.log_since(mark).splitlines()[-60:]))
            # Recorded, not checked: the catch-up may end before prefetch could matter.
            pf_back = d.poll_until(lambda s: s["prefetch"]["state"] == "active", 5)
            record("replica kill -9", "prefetch active again (after state known again)", pf_back)
            fsb.wait_caught_up(timeout=120)
            idle = d.poll_until(lambda s: state_of(s) == "idle", 30)
            record("replica kill -9", "idle after the replica caught up", idle)
        log = d.log_since(mark)
        named = log_lines(log, r"(2013|2006|2003|lost connection|gone away|can't connect|refused|restart)")
        print("log lines naming the crash:", named[:4])
        fz = w.false_zeros()
        print(f"{len(w.readings)} readings; false zeros: {fz[:5]}")
        check(not fz, f"{len(fz)} false zero(s) around the crash: {fz[:3]}")
        check(not w.healthz_failures(), f"/healthz failed: {w.healthz_failures()[:3]}")
        check(unknown_after is not None, "lagd never said unknown while the replica was dead")
        check(back is not None, "lagd did not know the replica's state and backlog again within 60 s")
        check(named, "no log line names the lost replica")
        check(d.alive(), "lagd died")
        check(checksum(fsb.source, f"`{db}`.p") == checksum(fsb.replica(), f"`{db}`.p"),
              "the replica's data differs from the source's")
    n = assert_nothing_written(fsb.replica(), since)
    print(f"lagd sent {n} statements to the replica, none writing")
    check.done()


def test_replica_hung_10s(fsb: Sandbox, db: str, tmp_path: Path) -> None:
    check = Checks()
    heartbeat_table(fsb)
    writer = HeartbeatWriter(lambda: fsb.source.connect(), HB_TABLE, interval=0.3)
    hb_stop = threading.Event()
    hb = threading.Thread(target=writer.run, args=(hb_stop,), daemon=True)
    hb.start()
    since = replica_now(fsb.replica())
    rep = fsb.replica()
    hung = False
    try:
        with lagd_running(fsb, tmp_path, extra=f'heartbeat_table = "{HB_TABLE}"') as d:
            wait_idle(d)
            fsb.stop_sql_thread()
            write_backlog(fsb, db, 500)
            wait_received(fsb)
            d.wait_for(lambda s: (backlog_of(s) or 0) >= 450, timeout=20, what="the backlog seen")
            # Tables lagd has not met yet wait in the relay log when the replica hangs: its
            # look-ahead meets them (and asks information_schema) while the replica cannot answer.
            d.proc.send_signal(signal.SIGSTOP)
            for i in range(3):
                fsb.source.query(f"CREATE TABLE n{i} (id INT PRIMARY KEY, v INT)", db=db)
                fsb.source.query(f"INSERT INTO n{i} VALUES (1, 1), (2, 2)", db=db)
            wait_received(fsb)
            mark = d.log_mark()
            with Watch(fsb, d) as w:
                rep.send_signal(signal.SIGSTOP)
                hung = True
                t_hang = time.monotonic()
                d.proc.send_signal(signal.SIGCONT)
                stale = d.poll_until(lambda s: state_of(s) == "unknown" or lag_of(s).get("lag") is None, HANG)
                record("replica SIGSTOP 10 s", "readings marked unknown after the hang began", stale)
                time.sleep(max(0.0, HANG - 2.0 - (time.monotonic() - t_hang)))
                metrics_code = d.get("/metrics", timeout=3)[0]
                ready_code, ready_body = d.get("/readyz", timeout=3)
                p = subprocess.run([LAGCTL, "status", "--config", str(d.config),
                                    "--url", d.url], capture_output=True, text=True, timeout=30, env=d.env)
                lagctl_text = p.stdout + p.stderr
                time.sleep(max(0.0, HANG - (time.monotonic() - t_hang)))
                rep.send_signal(signal.SIGCONT)
                hung = False
                back = d.poll_until(lambda s: _known(s) and state_of(s) == "stopped"
                                    and (backlog_of(s) or 0) >= 450 and s["status_error"] is None, 60)
                record("replica SIGSTOP 10 s", "state and backlog known again after SIGCONT", back)
                healthy = d.poll_until(lambda s: all(h["up"] for h in s["health"]), 40)
                record("replica SIGSTOP 10 s", "every subsystem up again after SIGCONT", healthy)
                fsb.start_sql_thread()
                fsb.wait_caught_up(timeout=60)
                idle = d.poll_until(lambda s: state_of(s) == "idle", 30)
                record("replica SIGSTOP 10 s", "idle after catch-up", idle)
            print("lagctl during the hang:\n" + lagctl_text)
            log = d.log_since(mark)
            named = log_lines(log, r"(time(d)? ?out|no answer|not answer|hung|unresponsive|2013|not respond)")
            print("log lines naming the hang:", named[:4])
            fz = w.false_zeros()
            check(not fz, f"{len(fz)} false zero(s) around the hang: {fz[:3]}")
            check(not w.healthz_failures(), f"/healthz failed during the hang: {w.healthz_failures()[:3]}")
            check(metrics_code == 200, f"/metrics answered {metrics_code} while the replica hung")
            check(ready_code == 503, f"/readyz {ready_code} 8 s into the hang: {ready_body.strip()!r}")
            check(stale is not None, f"readings not marked unknown within the {HANG:g} s hang")
            check("stuck" not in lagctl_text, "lagctl blames lagd (\"stuck\") for a hung replica")
            check(named, "no log line says the replica does not answer")
            check(back is not None, "state/backlog not known again within 60 s of SIGCONT")
            down = [(h["name"], h["reason"]) for h in (d.status() or {}).get("health", []) if not h["up"]]
            check(healthy is not None, f"a subsystem stayed down after the hang: {down}")
            check(d.alive(), "lagd died")
    finally:
        if hung:
            rep.send_signal(signal.SIGCONT)
        hb_stop.set()
        hb.join(10)
        writer.close()
    assert_nothing_written(fsb.replica(), since)
    check.done()


@pytest.mark.parametrize("how", ["sigstop", "kill9"])
def test_source_down_10s(fsb: Sandbox, db: str, tmp_path: Path, how: str) -> None:
    """`lagd heartbeat` and lagd through a hung or crashed source: no false lag once it is back."""
    check = Checks()
    src = fsb.source
    conn = src.connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS 'hb'@'127.0.0.1' IDENTIFIED BY 'hb'")
        cur.execute("GRANT ALL ON *.* TO 'hb'@'127.0.0.1'")
    conn.close()
    heartbeat_table(fsb)
    hb_log = tmp_path / "heartbeat.log"
    hb = subprocess.Popen([LAGD, "heartbeat", "--source", f"mysql://hb:hb@127.0.0.1:{src.port}",
                           "--table", HB_TABLE, "--interval", "0.5"], stderr=open(hb_log, "wb"))  # noqa: SIM115
    since = replica_now(fsb.replica())
    hung = False
    try:
        with lagd_running(fsb, tmp_path, extra=f'heartbeat_table = "{HB_TABLE}"') as d:
            d.wait_for(lambda s: (lag_of(s)["heartbeat"]["seconds"] or 99) < 1.5, timeout=30,
                       what="heartbeat lag under 1.5 s")
            with Watch(fsb, d) as w:
                if how == "sigstop":
                    src.send_signal(signal.SIGSTOP)
                    hung = True
                else:
                    fsb.kill_server(src.name)
                time.sleep(HANG - 1.0)
                during = d.status() or {}
                time.sleep(1.0)
                if how == "sigstop":
                    src.send_signal(signal.SIGCONT)
                    hung = False
                else:
                    fsb.restart_server(src.name)
                t_cont = time.monotonic()
                highest = 0.0
                back = None
                while time.monotonic() - t_cont < 30:
                    s = d.status() or {}
                    v = lag_of(s).get("heartbeat", {}).get("seconds") if s else None
                    if v is not None:
                        highest = max(highest, float(v))
                        if v < 2.0:
                            back = time.monotonic() - t_cont
                            break
                    time.sleep(0.2)
                record(f"source {how} 10 s", "heartbeat lag under 2 s after it is back", back)
                record(f"source {how} 10 s", "highest heartbeat lag after it is back", highest)
            hb_during = lag_of(during).get("heartbeat", {}).get("seconds")
            print(f"heartbeat lag 9 s into the hang: {hb_during}; highest after SIGCONT: {highest:.1f} s")
            fz = w.false_zeros()
            check(not fz, f"{len(fz)} false zero(s): {fz[:3]}")
            check(hb_during is not None and hb_during >= HANG - 4.0,
                  f"heartbeat lag {hb_during} 9 s into a source hang: the lag is hidden")
            check(back is not None and back <= 10.0,
                  f"heartbeat lag not back under 2 s within 10 s of the source's return ({back})")
            check(highest <= HANG + 5.0, f"false lag after the source returned: {highest:.1f} s")
            check(d.alive() and hb.poll() is None, "lagd or lagd heartbeat died")
    finally:
        if hung:
            src.send_signal(signal.SIGCONT)
        hb.terminate()
        try:
            hb.wait(10)
        except subprocess.TimeoutExpired:
            hb.kill()
        fsb.source.query("DROP DATABASE IF EXISTS lagd_hb")
    print("lagd heartbeat log:", hb_log.read_text()[-1500:])
    assert_nothing_written(fsb.replica(), since)
    check.done()
