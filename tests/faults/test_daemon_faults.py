"""Faults of the daemon itself: wrong credentials, a broken config on SIGHUP, a flood of
HTTP clients (some of them slow-loris), and SIGTERM in every state it can be in."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox
from lagd.sandbox.server import free_port
from tests.faults.faultkit import (
    HB_TABLE,
    LAGCTL,
    STATUS_RE,
    STOP_BUDGET,
    Checks,
    Lagd,
    assert_nothing_written,
    heartbeat_table,
    lagd_running,
    lagd_sessions,
    log_lines,
    record,
    replica_now,
    state_of,
    unhardened,
    wait_idle,
    wait_received,
)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


def cpu_share(pid: int, seconds: float = 2.0) -> float:
    """The share of one core the process used over ``seconds``."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def lagctl_status(d: Lagd, *, as_json: bool = False) -> tuple[int, str]:
    args = [LAGCTL, "status", "--config", str(d.config), "--url", d.url] + (["--json"] if as_json else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=d.env)
    return p.returncode, p.stdout + p.stderr


# ----- wrong credentials ------------------------------------------------------------------


def test_wrong_password_is_named_consistently_and_stop_works(fsb: Sandbox, tmp_path: Path) -> None:
    check = Checks()
    since = replica_now(fsb.replica())
    with lagd_running(fsb, tmp_path, password="not-the-password", wait_status=False) as d:
        d.wait_for(lambda s: s.get("status_error") is not None, timeout=20, what="a status error")
        time.sleep(3.0)  # several reconnect attempts
        share = cpu_share(d.proc.pid)
        print(f"CPU while the password is wrong: {share:.0%} of a core")

        # /readyz says the real error every time, not "waiting to reconnect" half of the time.
        bodies = []
        for _ in range(8):
            code, body = d.get("/readyz")
            bodies.append((code, body.strip()))
            time.sleep(0.4)
        print("readyz:", bodies[:3])
        s = d.status()
        assert s is not None
        print("status_error:", s["status_error"], "| state:", state_of(s))
        rc, text = lagctl_status(d)
        print(f"lagctl status (exit {rc}):\n{text}")
        log = d.log()
        named = log_lines(log, r"(1045|access denied)")
        print("log lines naming it:", named[:3])

        check(all(code == 503 for code, _ in bodies), f"/readyz not 503 every time: {bodies}")
        check(all(("1045" in b or "access denied" in b.lower()) for _, b in bodies),
              f"/readyz does not say the real error every time: {bodies}")
        check("1045" in str(s["status_error"]) or "access denied" in str(s["status_error"]).lower(),
              f"/status status_error does not say 1045 Access denied: {s['status_error']!r}")
        check(s["lag"] is None or s["lag"]["lag"] is None,
              "a lag value without a replica status")
        check("access denied" in text.lower() or "1045" in text,
              "lagctl status does not say why")
        check(named,
              "no log line names the authentication failure")
        check(any("lagd" in line and ("password" in line.lower() or "grant" in line.lower())
                  for line in named),
              f"the log line names neither the account nor the fix: {named[:2]}")
        check(len(named) <= 10,
              f"logged {len(named)} times in a few seconds: not rate-limited")
        check(share < 0.5,
              f"lagd burns {share:.0%} of a core while the password is wrong")

        rc_stop, took = d.terminate()
        record("wrong password", "SIGTERM to exit", took)
        check(rc_stop == 0,
              f"exit code {rc_stop} after SIGTERM (None: still running after {STOP_BUDGET} s)")
    assert_nothing_written(fsb.replica(), since)
    check.done()


# ----- SIGHUP with a broken file ------------------------------------------------------------


def _break(text: str, how: str) -> str:
    if how == "not-toml":
        return text + "\n[lag\npoll_interval = \n"
    if how == "bad-value":
        return text.replace("poll_interval = 0.5", "poll_interval = -3")
    # A password file that cannot be read: the config parses, the credentials do not.
    return text.replace('password_env = "LAGD_TEST_PASSWORD"', 'password_file = "/nonexistent/lagd-password"')


@pytest.mark.parametrize("broken", ["not-toml", "bad-value", "unreadable-password-file"])
def test_sighup_with_a_broken_config_keeps_the_old_one(fsb: Sandbox, tmp_path: Path, broken: str) -> None:
    check = Checks()
    with lagd_running(fsb, tmp_path) as d:
        good = d.config.read_text()
        wait_idle(d)
        bad = _break(good, broken)
        assert bad != good
        d.config.write_text(bad)
        d.proc.send_signal(signal.SIGHUP)
        s, took = d.wait_for(lambda s: bool(s.get("config_error")), timeout=15, what="config_error")
        record(f"SIGHUP broken config ({broken})", "config_error shown", took)
        print("config_error:", s["config_error"])
        check(d.alive(), "lagd exited on SIGHUP with a broken config")
        check(s["settings"]["lag"]["poll_interval"] == 0.5,
              "the old settings are no longer in force")
        check(d.get("/healthz")[0] == 200, "/healthz not 200 after the refused reload")
        # Still measuring on the old config: the lag reading moves on.
        at = s["lag"]["at"]
        d.wait_for(lambda s: s["lag"]["at"] > at + 1.0, timeout=10, what="a newer lag reading")
        rc, text = lagctl_status(d)
        print(f"lagctl status (exit {rc}):\n{text}")
        check("reload" in text.lower() or "config" in text.lower(),
              "lagctl status hides the refused reload")
        check(any(w in text.lower() for w in ("previous config", "old config", "refused", "kept")),
              "lagctl status (reading the same broken file) does not say the daemon kept the previous config")
        check(log_lines(d.log(), r"reload"),
              "no log line about the refused reload")
        rc_stop, took = d.terminate()
        record("SIGHUP broken config", "SIGTERM to exit", took)
        check(rc_stop == 0, f"exit code {rc_stop} after SIGTERM")
    check.done()


# ----- 300 scrapes and 50 slow clients --------------------------------------------------------


def _slow_client(port: int, trickle: bool, closed_at: dict[int, float], idx: int,
                 stop: threading.Event) -> None:
    """Connect and send nothing, or one byte of a request header a second; note when lagd hangs up."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(1.0)
    header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    t0 = time.monotonic()
    i = 0
    try:
        while not stop.is_set():
            if trickle:
                try:
                    s.send(header[i % len(header):i % len(header) + 1])
                except OSError:
                    closed_at[idx] = time.monotonic() - t0
                    return
                i += 1
            try:
                data = s.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                closed_at[idx] = time.monotonic() - t0
                return
            if not data:  # lagd closed it (perhaps after a 408)
                closed_at[idx] = time.monotonic() - t0
                return
            # An error response is fine as long as the socket is then closed.
    finally:
        s.close()


SLOW_BOUND = 30.0  # seconds a slow or idle client may hold a connection


def test_scrape_flood_and_slow_clients(fsb: Sandbox, tmp_path: Path) -> None:
    check = Checks()
    with lagd_running(fsb, tmp_path) as d:
        wait_idle(d)
        stop = threading.Event()
        closed_at: dict[int, float] = {}
        slow = [threading.Thread(target=_slow_client, args=(d.port, i % 2 == 1, closed_at, i, stop),
                                 daemon=True) for i in range(50)]
        for t in slow:
            t.start()
        time.sleep(1.0)

        def scrape(i: int) -> tuple[int, float]:
            t0 = time.monotonic()
            code, _ = d.get("/metrics" if i % 2 else "/status", timeout=20)
            return code, time.monotonic() - t0

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=300) as ex:
            results = list(ex.map(scrape, range(300)))
        wall = time.monotonic() - t0
        ok = sum(1 for c, _ in results if c == 200)
        slowest = max(t for _, t in results)
        record("300 scrapes + 50 slow clients", "all 300 scrapes answered (wall)", wall)
        codes: dict[int, int] = {}
        for c, _ in results:
            codes[c] = codes.get(c, 0) + 1
        print(f"{ok}/300 scrapes answered 200 (codes {codes}; 0 = no answer); slowest {slowest:.2f} s; "
              f"wall {wall:.2f} s")
        check(d.get("/healthz")[0] == 200, "/healthz not 200 after the flood")
        check(ok == 300,
              f"only {ok} of 300 scrapes answered 200 while 50 slow clients were connected: {codes}")

        deadline = time.monotonic() + SLOW_BOUND
        while time.monotonic() < deadline and len(closed_at) < 50:
            time.sleep(0.5)
        stop.set()
        for t in slow:
            t.join(5)
        record("slow clients", f"last of {len(closed_at)}/50 closed by lagd",
               max(closed_at.values()) if len(closed_at) == 50 else None)
        print(f"slow clients closed by lagd: {len(closed_at)}/50 within {SLOW_BOUND:g} s")
        check(len(closed_at) == 50,
              f"lagd still holds {50 - len(closed_at)} of 50 slow/idle connections after {SLOW_BOUND:g} s")
        rc, took = d.terminate()
        record("after scrape flood", "SIGTERM to exit", took)
        check(rc == 0, f"exit code {rc} after SIGTERM")
    check.done()


# ----- SIGTERM in every state -------------------------------------------------------------------

STATES = ["first-instant", "starting-port-closed", "wrong-password", "replica-hung", "running",
          "catching-up-prefetch", "reloading"]


@pytest.mark.parametrize("state", STATES)
def test_sigterm_in_every_state(fsb: Sandbox, tmp_path: Path, state: str, db: str) -> None:
    check = Checks()
    rep = fsb.replica()
    kw: dict[str, object] = {}
    if state == "starting-port-closed":
        kw["replica_port"] = free_port()  # nothing listens there
    elif state == "wrong-password":
        kw["password"] = "wrong"
    elif state == "replica-hung":
        # A heartbeat table too: its reader thread must not keep the process alive.
        heartbeat_table(fsb)
        kw["extra"] = f'[lag]\nheartbeat_table = "{HB_TABLE}"'.replace("[lag]\n", "")
    d = Lagd(fsb, tmp_path, **kw)  # type: ignore[arg-type]
    hung = False
    try:
        if state == "first-instant":
            time.sleep(0.1)  # inside Python's start-up, before or while the handlers are installed
        elif state in ("starting-port-closed", "wrong-password"):
            time.sleep(3.0)  # well into its retries
            share = cpu_share(d.proc.pid, 2.0)
            print(f"CPU in state {state}: {share:.0%} of a core")
        elif state == "replica-hung":
            wait_idle(d)
            rep.send_signal(signal.SIGSTOP)
            hung = True
            time.sleep(3.0)
            check(d.get("/healthz", timeout=3)[0] == 200, "/healthz does not answer while the replica hangs")
        elif state == "running":
            wait_idle(d)
        elif state == "catching-up-prefetch":
            wait_idle(d)
            fsb.source.query("CREATE TABLE k (id INT PRIMARY KEY, v INT, pad CHAR(200))", db=db)
            fsb.source.query("INSERT INTO k SELECT seq, 0, 'x' FROM seq_1_to_20000", db=db)
            fsb.wait_caught_up(timeout=60)
            fsb.stop_sql_thread()
            conn = fsb.source.connect(db)
            with conn.cursor() as cur:
                for i in range(3000):
                    cur.execute("UPDATE k SET v = v + 1 WHERE id = %s", ((i * 7919) % 20000 + 1,))
            conn.close()
            wait_received(fsb)
            fsb.start_sql_thread()
            time.sleep(0.5)
        elif state == "reloading":
            wait_idle(d)
            # A replica.* change restarts the subsystems: SIGTERM lands in the middle of it.
            text = d.config.read_text()
            d.config.write_text(text.replace("connect_timeout = 2.0", "connect_timeout = 3.0"))
            d.proc.send_signal(signal.SIGHUP)
            time.sleep(0.05)
        check(d.alive(),
              f"lagd exited before the SIGTERM:\n{d.log()[-2000:]}")
        rc, took = d.terminate()
        record(f"SIGTERM while {state}", "SIGTERM to exit", took if rc is not None else None)
        print(f"state {state}: exit code {rc} after {took:.2f} s")
        check(rc is not None,
              f"still running {STOP_BUDGET:g} s after SIGTERM in state {state}")
        check(rc == 0,
              f"exit code {rc} after SIGTERM in state {state}")
        if state in ("starting-port-closed", "wrong-password"):
            check(share < 0.5,
                  f"lagd burned {share:.0%} of a core in state {state}")
            cause = (r"(2003|can't connect|refused)" if state == "starting-port-closed"
                     else r"(1045|access denied)")
            check(log_lines(d.log(), cause), f"no log line names the cause ({cause}) in state {state}")
    finally:
        if hung:
            rep.send_signal(signal.SIGCONT)
        d.kill()
        if state == "replica-hung":
            fsb.source.query("DROP DATABASE IF EXISTS lagd_hb")
            fsb.wait_caught_up(timeout=60)
    check.done()


def test_lagctl_json_when_the_replica_is_down(fsb: Sandbox, tmp_path: Path) -> None:
    """`lagctl status --json` says unknown (exit 3) with the cause, never a lag of 0."""
    check = Checks()
    with lagd_running(fsb, tmp_path, replica_port=free_port(), wait_status=False) as d:
        d.wait_for(lambda s: s.get("status_error") is not None, timeout=20, what="a status error")
        time.sleep(1.0)
        rc, out = lagctl_status(d, as_json=True)
        doc = json.loads(out[out.index("{"):])
        print("lagctl verdict:", doc["verdict"])
        check(rc == 3,
              f"lagctl status exits {rc} when the replica is unreachable (3 is UNKNOWN)")
        lag = doc.get("lag") or {}
        check(lag.get("lag") is None,
              f"a lag of {lag.get('lag')} with the replica unreachable")
        check(doc["status_error"],
              "no status_error")
        check(log_lines(d.log(), r"(2003|can't connect|connection refused|unreachable)"),
              "no log line names the unreachable replica")
    check.done()


def test_every_session_is_read_only_with_a_timeout(fsb: Sandbox, tmp_path: Path, db: str) -> None:
    """Monitor, heartbeat, advisor, schema and probe sessions alike (from the replica's general log)."""
    check = Checks()
    heartbeat_table(fsb)
    fsb.source.query("CREATE TABLE k (id INT PRIMARY KEY, v INT, pad CHAR(100))", db=db)
    fsb.source.query("INSERT INTO k SELECT seq, 0, 'x' FROM seq_1_to_10000", db=db)
    fsb.wait_caught_up(timeout=60)
    since = replica_now(fsb.replica())
    try:
        with lagd_running(fsb, tmp_path, extra=f'heartbeat_table = "{HB_TABLE}"') as d:
            wait_idle(d)
            fsb.stop_sql_thread()
            conn = fsb.source.connect(db)
            with conn.cursor() as cur:
                for i in range(1500):
                    cur.execute("UPDATE k SET v = v + 1 WHERE id = %s", ((i * 7919) % 10000 + 1,))
            conn.close()
            wait_received(fsb)
            fsb.start_sql_thread()
            fsb.wait_caught_up(timeout=60)
            wait_idle(d)
            time.sleep(1.0)
        sessions = lagd_sessions(fsb.replica(), since)
        bad = unhardened(sessions)
        print(f"sessions without READ ONLY and a statement timeout: {len(bad)}")
        for thread, stmts in list(bad.items())[:6]:
            print(f"  thread {thread}: {[s[:70] for s in stmts[:4]]}")
        check(not bad, f"{len(bad)} lagd session(s) ran queries without READ ONLY and a statement timeout, "
                       f"first statements: {[v[0][:60] for v in list(bad.values())[:4]]}")
        # The prefetch engine borrows the daemon's status monitor: one session polls the status.
        pollers = {t: sum(1 for s in stmts if STATUS_RE.match(s)) for t, stmts in sessions.items()}
        pollers = {t: n for t, n in pollers.items() if n}
        print(f"sessions polling the replica's status: {len(pollers)} ({sum(pollers.values())} polls)")
        check(len(pollers) == 1, f"{len(pollers)} lagd sessions polled the replica's status, not one")
        assert_nothing_written(fsb.replica(), since)
    finally:
        fsb.source.query("DROP DATABASE IF EXISTS lagd_hb")
        fsb.wait_caught_up(timeout=60)
    check.done()
