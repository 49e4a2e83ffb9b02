"""What every fault test needs: a real `lagd run`, the truth from the servers, and the checks.

The checks are the issue's four, the same for every fault:
- nothing written on the replica by lagd (the replica's general log, lagd's user only);
- no false 0: while the replica has transactions it has not applied, lagd never
  says lag 0, backlog 0 or state idle (unknown is absent, never 0);
- a log line that names the cause;
- the recovery time, measured and printed (collected in docs/reliability.md).

The truth is read from the servers around each /status reading, never at the
same instant, so every judgement uses bounds that only grow more lenient with
the race: GTID sequence numbers only go up, so the replica's applied position
read *after* a reading is an upper bound of what it had applied *at* it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from lagd.sandbox.pair import Sandbox, SandboxConfig
from lagd.sandbox.server import LAGD_PASSWORD, LAGD_USER, Server, free_port

BIN = Path(sys.executable).parent
LAGD = str(BIN / "lagd")
LAGCTL = str(BIN / "lagctl")

# The unit's TimeoutStopSec is 5 s (systemd/lagd.service); the suite allows
# twice that so a loaded CI box does not flake, and prints what it measured.
STOP_BUDGET = 10.0

# The replica logs every statement to mysql.general_log (a CSV table that
# survives a crash and a restart), so the test can prove what lagd sent.
GENERAL_LOG = {"general-log": "ON", "log-output": "TABLE"}

TIMINGS: list[tuple[str, str, float | None]] = []


def record(fault: str, what: str, seconds: float | None, unit: str = "s") -> None:
    """Print a measured time (or, with ``unit``, another measure) and keep it for the summary."""
    TIMINGS.append((fault, f"{what} ({unit})" if unit != "s" else what, seconds))
    shown = "not reached" if seconds is None else f"{seconds:.2f} {unit}"
    print(f"FAULT-TIMING {fault}: {what} = {shown}")
    out = os.environ.get("LAGD_FAULT_TIMINGS")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"fault": fault, "what": what, "value": seconds, "unit": unit}) + "\n")


def sandbox_config(**kw: Any) -> SandboxConfig:
    extra = dict(GENERAL_LOG)
    extra.update(kw.pop("replica_extra_options", {}))
    return SandboxConfig(replica_extra_options=extra, **kw)


# ----- the daemon ---------------------------------------------------------------


def config_text(sb: Sandbox, http_port: int, *, replica_port: int | None = None, extra: str = "",
                replica_extra: str = "") -> str:
    rep = sb.replica()
    return f"""[replica]
host = "127.0.0.1"
port = {replica_port if replica_port is not None else rep.port}
user = "{LAGD_USER}"
password_env = "LAGD_TEST_PASSWORD"
connect_timeout = 2.0
{replica_extra}

[http]
listen = "127.0.0.1:{http_port}"

[lag]
poll_interval = 0.5
stale_after = 5.0

{extra}
"""


class Lagd:
    """One `lagd run` process with its config file and its stderr log."""

    def __init__(self, sb: Sandbox, tmp: Path, *, extra: str = "", replica_extra: str = "",
                 password: str = LAGD_PASSWORD, replica_port: int | None = None, name: str = "lagd") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp / f"{name}.toml"
        self.config.write_text(config_text(sb, self.port, replica_port=replica_port, extra=extra,
                                           replica_extra=replica_extra))
        self.log_path = tmp / f"{name}.log"
        self.env = dict(os.environ, LAGD_TEST_PASSWORD=password)
        self.proc = subprocess.Popen([LAGD, "run", "--config", str(self.config)], env=self.env,
                                     stdin=subprocess.DEVNULL, stderr=open(self.log_path, "wb"))  # noqa: SIM115
        self.started = time.monotonic()

    # -- reading it --

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_since(self, mark: int) -> str:
        return self.log()[mark:]

    def log_mark(self) -> int:
        return len(self.log())

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """(HTTP status, body); (0, why) when it does not answer at all."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (OSError, ValueError) as e:
            return 0, f"no answer: {e}"

    def status(self, timeout: float = 5.0) -> dict[str, Any] | None:
        code, body = self.get("/status", timeout)
        if code != 200:
            return None
        try:
            return dict(json.loads(body))
        except ValueError:
            return None

    def wait_for(self, cond: Callable[[dict[str, Any]], bool], timeout: float = 30.0,
                 what: str = "condition") -> tuple[dict[str, Any], float]:
        """The first /status meeting ``cond`` and the seconds it took; fails with the log."""
        t0 = time.monotonic()
        last: dict[str, Any] | None = None
        while time.monotonic() - t0 < timeout:
            s = self.status(timeout=2.0)
            if s is not None:
                last = s
                with suppress(KeyError, TypeError, AttributeError):
                    if cond(s):
                        return s, time.monotonic() - t0
            time.sleep(0.2)
        raise AssertionError(f"{what}: not met in {timeout:g} s; last lag: {brief(last)}\n"
                             f"lagd log tail:\n{self.log()[-2500:]}")

    def poll_until(self, cond: Callable[[dict[str, Any]], bool], timeout: float) -> float | None:
        """Like wait_for, but returns None instead of failing (for recovery times)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            s = self.status(timeout=2.0)
            with suppress(KeyError, TypeError, AttributeError):
                if s is not None and cond(s):
                    return time.monotonic() - t0
            time.sleep(0.2)
        return None

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- stopping it --

    def terminate(self, budget: float = STOP_BUDGET) -> tuple[int | None, float]:
        """SIGTERM; (exit code or None if still running after ``budget``, seconds)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = self.proc.wait(budget)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


@contextmanager
def lagd_running(sb: Sandbox, tmp: Path, *, wait_status: bool = True, **kw: Any) -> Iterator[Lagd]:
    d = Lagd(sb, tmp, **kw)
    try:
        if wait_status:
            d.wait_for(lambda s: s.get("lag") is not None, timeout=30, what="first lag reading")
        yield d
    finally:
        d.kill()


def wait_idle(d: Lagd, timeout: float = 30.0) -> dict[str, Any]:
    return d.wait_for(lambda s: s["lag"] is not None and s["lag"]["state"] == "idle", timeout, "idle")[0]


def brief(s: dict[str, Any] | None) -> str:
    if not s:
        return "no status"
    lag = s.get("lag") or {}
    bl = lag.get("backlog")
    return (f"state={lag.get('state')} lag={lag.get('lag')} backlog={bl and bl.get('transactions')} "
            f"status_error={s.get('status_error')!r}")


def lag_of(s: dict[str, Any]) -> dict[str, Any]:
    return s.get("lag") or {}


def state_of(s: dict[str, Any]) -> str | None:
    return lag_of(s).get("state")


def backlog_of(s: dict[str, Any]) -> int | None:
    bl = lag_of(s).get("backlog")
    return None if bl is None else int(bl["transactions"])


# ----- the truth from the servers -------------------------------------------------


def _seq(pos: str | None) -> int:
    """The highest sequence number in a MariaDB GTID position (our sandbox writes domain 0 only)."""
    best = 0
    for part in (pos or "").split(","):
        bits = part.strip().split("-")
        if len(bits) == 3 and bits[2].isdigit():
            best = max(best, int(bits[2]))
    return best


def _quick(server: Server, sql: str) -> dict[str, Any] | None:
    """One query with short timeouts; None when the server does not answer (down or hung)."""
    try:
        conn = server.connect(connect_timeout=1, read_timeout=1, write_timeout=1,
                              cursorclass=pymysql.cursors.DictCursor)
    except pymysql.err.MySQLError:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            return dict(row) if row else {}
    except pymysql.err.MySQLError:
        return None
    finally:
        with suppress(Exception):
            conn.close()


@dataclass
class Truth:
    at: float  # monotonic
    source: int | None  # source's last GTID seq
    received: int | None  # replica's IO thread (Gtid_IO_Pos)
    applied: int | None  # replica's gtid_slave_pos


def truth(sb: Sandbox) -> Truth:
    src = _quick(sb.source, "SELECT @@gtid_binlog_pos AS p")
    rep = _quick(sb.replica(), "SHOW SLAVE STATUS")
    applied = _quick(sb.replica(), "SELECT @@gtid_slave_pos AS p") if rep is not None else None
    return Truth(time.monotonic(), _seq(src["p"]) if src else None,
                 _seq(rep.get("Gtid_IO_Pos")) if rep else None,
                 _seq(applied["p"]) if applied else None)


def pending(sb: Sandbox) -> int:
    t = truth(sb)
    assert t.source is not None and t.applied is not None
    return t.source - t.applied


@dataclass
class Reading:
    at: float
    status: dict[str, Any] | None
    http: int


@dataclass
class Watch:
    """Samples /status and the servers' truth in a thread; judges false zeros afterwards."""

    sb: Sandbox
    d: Lagd
    interval: float = 0.1
    readings: list[Reading] = field(default_factory=list)
    truths: list[Truth] = field(default_factory=list)
    healthz: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Watch:
        # Two threads: a dead or hung server slows the truth queries down (their
        # timeouts), and must not thin out the /status readings.
        self._threads = [threading.Thread(target=self._readings, daemon=True),
                         threading.Thread(target=self._truths, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        self.truths.append(truth(self.sb))

    def _truths(self) -> None:
        while not self._stop.is_set():
            self.truths.append(truth(self.sb))
            self._stop.wait(0.1)

    def _readings(self) -> None:
        n = 0
        while not self._stop.is_set():
            t = time.monotonic()
            code, body = self.d.get("/status", timeout=2.0)
            st = None
            if code == 200:
                with suppress(ValueError):
                    st = json.loads(body)
            self.readings.append(Reading(t, st, code))
            if n % 4 == 0:
                self.healthz.append((time.monotonic(), self.d.get("/healthz", timeout=2.0)[0]))
            n += 1
            self._stop.wait(self.interval)

    # -- judging --

    def _applied_after(self, t: float) -> int | None:
        for x in self.truths:
            if x.at >= t and x.applied is not None:
                return x.applied
        return None

    def _latest_before(self, t: float, attr: str) -> int | None:
        best = None
        for x in self.truths:
            if x.at <= t and getattr(x, attr) is not None:
                best = getattr(x, attr)
        return best

    def false_zeros(self, k: int = 20) -> list[str]:
        """Readings that said 0 / idle while at least ``k`` transactions were surely unapplied.

        Lag: a transaction the source had committed 2 s before the reading was
        not applied even after it. Backlog and idle: a transaction the replica
        had received 1 s before the reading was not applied after it.
        """
        bad: list[str] = []
        t0 = self.readings[0].at if self.readings else 0.0
        for r in self.readings:
            if r.status is None:
                continue
            lag = lag_of(r.status)
            if not lag:
                continue
            applied = self._applied_after(r.at)
            if applied is None:
                continue
            src = self._latest_before(r.at - 2.0, "source")
            rcv = self._latest_before(r.at - 1.0, "received")
            rcv_after = next((x.received for x in self.truths
                              if x.at >= r.at and x.received is not None), None)
            if rcv is not None and rcv_after is not None:
                rcv = min(rcv, rcv_after)  # RESET SLAVE forgets what was received
            when = f"t+{r.at - t0:.1f}s"
            if src is not None and src - applied >= k:
                value = lag.get("lag")
                if value is not None and float(value) < 0.5:
                    bad.append(f"{when}: lag {value} while {src - applied} transactions older than 2 s "
                               f"were unapplied ({brief(r.status)})")
            if rcv is not None and rcv - applied >= k:
                if lag.get("state") == "idle":
                    bad.append(f"{when}: state idle while {rcv - applied} received transactions were "
                               f"unapplied ({brief(r.status)})")
                bl = lag.get("backlog")
                if bl is not None and int(bl["transactions"]) == 0:
                    bad.append(f"{when}: backlog 0 while {rcv - applied} received transactions were "
                               f"unapplied ({brief(r.status)})")
        return bad

    def healthz_failures(self) -> list[str]:
        return [f"t+{t - self.healthz[0][0]:.1f}s: /healthz {c}" for t, c in self.healthz if c != 200]


# ----- what lagd sent to the replica ------------------------------------------------

WRITE_RE = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(INSERT|UPDATE|DELETE|REPLACE|LOAD|CREATE|DROP|ALTER|TRUNCATE|RENAME|GRANT|REVOKE"
    r"|LOCK|FLUSH|KILL|PURGE|RESET|CHANGE|START|STOP|SET\s+(?:GLOBAL|@@GLOBAL|PERSIST)|HANDLER|XA|CALL|DO)\b",
    re.IGNORECASE | re.DOTALL)
LOCKING_READ_RE = re.compile(r"\bFOR\s+UPDATE\b|\bLOCK\s+IN\s+SHARE\s+MODE\b|\bFOR\s+SHARE\b", re.IGNORECASE)


def replica_now(server: Server) -> str:
    return str(server.query("SELECT NOW(6) AS t")[0]["t"])


def lagd_statements(server: Server, since: str | None = None) -> list[str]:
    """Every statement lagd's user sent to the replica (from the general log)."""
    sql = ("SELECT argument FROM mysql.general_log WHERE user_host LIKE %s "
           "AND command_type IN ('Query', 'Prepare', 'Execute')")
    args: list[Any] = [f"{LAGD_USER}[%"]
    if since is not None:
        sql += " AND event_time >= %s"
        args.append(since)
    rows = server.query(sql, args)
    return [r["argument"].decode(errors="replace") if isinstance(r["argument"], bytes) else str(r["argument"])
            for r in rows]


def assert_nothing_written(server: Server, since: str | None = None) -> int:
    """No DML, DDL, global SET, lock or locking read from lagd; returns how many statements it sent."""
    stmts = lagd_statements(server, since)
    bad = [s[:200] for s in stmts if WRITE_RE.match(s) or LOCKING_READ_RE.search(s)]
    assert not bad, f"lagd sent {len(bad)} writing/locking statement(s) to the replica: {bad[:5]}"
    return len(stmts)


# ----- load ------------------------------------------------------------------------------


class Writer:
    """Small transactions on the source at about ``rate`` per second, in a thread."""

    def __init__(self, sb: Sandbox, db: str, rate: float = 400.0, table: str = "w") -> None:
        self.sb, self.db, self.rate, self.table = sb, db, rate, table
        self.count = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.sb.source.query(f"CREATE TABLE IF NOT EXISTS `{self.table}` "
                             "(id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad CHAR(100))", db=self.db)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(20)

    def _run(self) -> None:
        conn = None
        batch = max(1, int(self.rate / 50))
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self.sb.source.connect(self.db, read_timeout=5, write_timeout=5)
                t0 = time.monotonic()
                with conn.cursor() as cur:
                    for _ in range(batch):
                        cur.execute(f"INSERT INTO `{self.table}` (v, pad) VALUES (1, 'x')")
                        self.count += 1
                self._stop.wait(max(0.0, batch / self.rate - (time.monotonic() - t0)))
            except pymysql.err.MySQLError:
                self.errors += 1
                with suppress(Exception):
                    if conn is not None:
                        conn.close()
                conn = None
                self._stop.wait(0.2)
        if conn is not None:
            with suppress(Exception):
                conn.close()


def write_backlog(sb: Sandbox, db: str, n: int, table: str = "w") -> None:
    """``n`` one-row transactions on the source, fast (the replica's SQL thread is usually stopped)."""
    sb.source.query(f"CREATE TABLE IF NOT EXISTS `{table}` "
                    "(id INT AUTO_INCREMENT PRIMARY KEY, v INT, pad CHAR(100))", db=db)
    conn = sb.source.connect(db)
    try:
        with conn.cursor() as cur:
            for _ in range(n):
                cur.execute(f"INSERT INTO `{table}` (v, pad) VALUES (1, 'x')")
    finally:
        conn.close()


def wait_received(sb: Sandbox, timeout: float = 30.0) -> None:
    """Until the replica's IO thread has everything the source logged."""
    want = _seq(str(sb.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"]))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.replica().query("SHOW SLAVE STATUS")
        if st and _seq(st[0].get("Gtid_IO_Pos")) >= want:
            return
        time.sleep(0.05)
    raise AssertionError("the replica's IO thread did not receive everything in time")


def checksum(server: Server, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE {table}")[0]["Checksum"] or 0)


def ensure_replicating(sb: Sandbox) -> None:
    """Leave the replica as the next test expects it: both threads running, caught up."""
    r = sb.replica()
    if not r.is_alive():
        sb.restart_server(r.name)
    st = sb.slave_status()
    if st["Slave_SQL_Running"] != "Yes" or st["Slave_IO_Running"] != "Yes":
        sb.start_slave()
    sb.wait_caught_up(timeout=120)


def log_lines(text: str, pattern: str) -> list[str]:
    rx = re.compile(pattern, re.IGNORECASE)
    return [line for line in text.splitlines() if rx.search(line)]


HB_TABLE = "lagd_hb.heartbeat"


def heartbeat_table(sb: Sandbox) -> None:
    """pt-heartbeat's table on the source with one fresh row, replicated."""
    from lagd.heartbeat.table import create_table_sql  # noqa: PLC0415

    sb.source.query("CREATE DATABASE IF NOT EXISTS lagd_hb")
    sb.source.query(create_table_sql(HB_TABLE))
    sb.source.query(f"REPLACE INTO {HB_TABLE} (ts, server_id) VALUES "
                    "(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%f'), @@server_id)")
    sb.wait_caught_up(timeout=60)


class Checks:
    """Every failed check of a test, reported together: one fault often breaks several."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: object, message: str) -> bool:
        if not ok:
            self.failed.append(message)
            print(f"CHECK FAILED: {message}")
        return bool(ok)

    def done(self) -> None:
        assert not self.failed, f"{len(self.failed)} check(s) failed:\n- " + "\n- ".join(self.failed)


READ_ONLY_RE = re.compile(r"READ\s+ONLY|\b(tx|transaction)_read_only\s*=\s*(1|ON)", re.IGNORECASE)
TIMEOUT_RE = re.compile(r"max_statement_time|MAX_EXECUTION_TIME", re.IGNORECASE)


STATUS_RE = re.compile(r"^\s*SHOW\s+(ALL\s+)?(SLAVES?|REPLICAS?)\s+STATUS", re.IGNORECASE)


def lagd_sessions(server: Server, since: str) -> dict[int, list[str]]:
    """lagd's sessions (by thread id) and the statements each ran, from the general log."""
    rows = server.query(
        "SELECT thread_id, argument FROM mysql.general_log WHERE user_host LIKE %s "
        "AND command_type IN ('Query', 'Prepare', 'Execute') AND event_time >= %s ORDER BY event_time",
        (f"{LAGD_USER}[%", since))
    by_thread: dict[int, list[str]] = {}
    for r in rows:
        arg = r["argument"]
        arg = arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
        by_thread.setdefault(int(r["thread_id"]), []).append(arg)
    return by_thread


def unhardened(sessions: dict[int, list[str]]) -> dict[int, list[str]]:
    """The sessions that ran queries without READ ONLY and a statement timeout."""
    return {t: stmts for t, stmts in sessions.items()
            if not (any(READ_ONLY_RE.search(s) for s in stmts) and any(TIMEOUT_RE.search(s) for s in stmts))}
