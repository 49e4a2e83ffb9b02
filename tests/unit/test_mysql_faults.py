"""Connection failures without a server: logged once with cause and fix, rate-limited, healed;
the monitor reports the real error while it backs off; the probe pool keeps sessions that
only had a statement refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import asyncmy.errors
import pymysql.err
import pytest
from asyncmy.cursors import SSCursor
from test_connection_slots import SimpleProbe

from lagd.mysql.backoff import Retry
from lagd.mysql.errors import DatabaseError, Kind, translate
from lagd.mysql.faultlog import FailureLog
from lagd.mysql.monitor import ReplicaMonitor
from lagd.prefetch import pool as pool_mod
from lagd.prefetch.pool import ProbePool

WHERE = "replica 127.0.0.1:3306"
DENIED = pymysql.err.OperationalError(1045, "Access denied for user 'lagd'@'localhost' (using password: YES)")
REFUSED = pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1' (111)")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failure_log_once_then_each_minute_then_healed(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flog = FailureLog(logging.getLogger("t"), WHERE, clock=clock)
    with caplog.at_level(logging.INFO, logger="t"):
        steps = [(0, DENIED), (1, DENIED), (30, DENIED), (61, DENIED), (62, DENIED), (63, REFUSED),
                 (64, REFUSED)]
        for t, exc in steps:
            clock.now = 1000.0 + t
            flog.failed(translate(exc, WHERE))
        clock.now = 1070.0
        flog.recovered()
        flog.recovered()  # healed once, said once
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert lines[0].startswith(f"{WHERE}: Access denied") and "(fix: check replica.user" in lines[0]
    assert "still failing after 61 s, 4 attempts" in lines[1]
    assert "Can't connect" in lines[2]  # a new cause is news at once
    assert lines[3] == f"{WHERE}: reconnected after 70.0 s (7 failed attempts)"


def failing_connect(exc: BaseException, calls: list[int]) -> Any:
    async def connect() -> Any:
        calls.append(1)
        raise exc
    return connect


def test_monitor_reports_the_real_error_while_backing_off(caplog: pytest.LogCaptureFixture) -> None:
    clock, calls = Clock(), []
    monitor = ReplicaMonitor(failing_connect(DENIED, calls), where=WHERE, clock=clock,
                             retry=Retry(rand=lambda: 0.0))

    async def polls() -> list[Any]:
        out = []
        for dt in (0.0, 0.01, 0.01, 5.0):
            clock.now += dt
            out.append(await monitor.poll())
        return out

    with caplog.at_level(logging.WARNING, logger="lagd.mysql.monitor"):
        samples = asyncio.run(polls())
    assert calls == [1, 1]  # the two middle polls fell inside the backoff
    for s in samples:
        assert s.status is None and s.fault is not None
        assert s.fault.kind is Kind.AUTH and s.fault.code == 1045
        assert s.error is not None and "Access denied" in s.error and "waiting" not in s.error
    assert monitor.failures == 4
    assert len(caplog.records) == 1  # once, not once per poll


def test_monitor_connect_that_never_answers_is_unreachable() -> None:
    async def hang() -> Any:
        await asyncio.sleep(60)

    monitor = ReplicaMonitor(hang, where=WHERE, connect_timeout=0.01)
    sample = asyncio.run(monitor.poll())
    assert sample.fault is not None and sample.fault.kind is Kind.UNREACHABLE
    assert "no answer to connect" in (sample.error or "")


def pool() -> ProbePool:
    async def never() -> Any:
        raise AssertionError("not used")
    return ProbePool(never, mariadb=True, size=1, timeout_ms=500, on_done=lambda *_: None, where=WHERE)


CLASSIFY = [
    ("statement-timeout", pymysql.err.OperationalError(1969, "max_statement_time exceeded"), "timeout",
     False),
    ("mysql-timeout", asyncmy.errors.OperationalError(3024, "maximum statement execution time"), "timeout",
     False),
    ("lock-wait", asyncmy.errors.OperationalError(1205, "Lock wait timeout exceeded"), "lock_wait", False),
    ("dropped-index", asyncmy.errors.OperationalError(1176, "Key 'ka' doesn't exist"), "error", False),
    ("lost", asyncmy.errors.OperationalError(2013, "Lost connection"), "error", True),
    ("closed", asyncmy.errors.InterfaceError(0, ""), "error", True),
    ("hung", TimeoutError(), "error", True),
    ("unknown", RuntimeError("driver state"), "error", True),
]


@pytest.mark.parametrize(("exc", "status", "broken"), [c[1:] for c in CLASSIFY], ids=[c[0] for c in CLASSIFY])
def test_probe_failures(exc: BaseException, status: str, broken: bool) -> None:
    outcome, drop = pool()._classify(exc, 0.1)
    assert (outcome.status, drop) == (status, broken)
    assert outcome.kind is not None


def test_a_dropped_index_is_a_schema_outcome() -> None:
    # The engine can tell DDL (re-read the table) from a sick server.
    outcome, _ = pool()._classify(asyncmy.errors.OperationalError(1176, "Key 'ka' doesn't exist"), 0.1)
    assert outcome.kind is Kind.SCHEMA


def test_a_database_error_passes_through_the_pool_unchanged() -> None:
    e = DatabaseError(f"{WHERE}: x", kind=Kind.LOST, where=WHERE)
    outcome, drop = pool()._classify(e, 0.1)
    assert drop and outcome.error == e.message


class _FakeCur:
    """A probe session's cursor: its answer to the last statement is ``_rows``; the
    session's SET statements answer nothing (``answer`` decides the rest)."""

    description: tuple[tuple[str], ...] = ()
    _rows: list[Any]

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None

    async def execute(self, sql: str, params: Any = None) -> None:
        self._rows = [] if sql.startswith("SET") else await self.answer(sql)

    async def answer(self, sql: str) -> list[Any]:
        return [(1,)]

    async def fetchall(self) -> list[Any]:
        return self._rows

    async def fetchmany(self, _n: int) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows


class _HungConn:
    """A probe connection whose server stops answering after ``answers`` probes."""

    def __init__(self, answers: int, log: list[str]) -> None:
        self.answers, self.log = answers, log

    def cursor(self, _kind: object = None) -> Any:
        conn = self

        class Cur(_FakeCur):
            async def answer(self, sql: str) -> list[Any]:
                if conn.answers <= 0:
                    await asyncio.Event().wait()  # hangs: only the deadline ends it
                conn.answers -= 1
                return [(1,)]
        return Cur()

    def close(self) -> None:
        self.log.append("closed")


def test_a_hung_probe_ends_at_its_deadline_and_its_connection_goes() -> None:
    """The watchdog cancels a probe past the server's timeout plus the slack; the worker
    reports it as a lost server, drops the connection, and probes on with a new one."""
    heard: list[str] = []
    conns: list[str] = []

    async def connect(**_: Any) -> Any:
        conns.append("open")
        return _HungConn(1 if len(conns) == 1 else 5, conns)

    async def scenario() -> None:
        p = ProbePool(connect, mariadb=True, size=1, timeout_ms=10, hang_slack=0.05, where=WHERE,
                      on_done=lambda _p, tag, out: heard.append(f"{tag}:{out.status}:{out.kind}"))
        p.start()
        for tag in "abc":
            p.submit(SimpleProbe(), tag)
        while len(heard) < 3:
            await asyncio.sleep(0.01)
        await p.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert heard == ["a:ok:None", "b:error:lost", "c:ok:None"]
    assert conns == ["open", "closed", "open", "closed"]


def test_a_worker_let_go_while_overdue_is_dropped_not_timed_out() -> None:
    """A resize or close that lands with the watchdog's cancellation still stops the worker."""
    heard: list[str] = []

    async def connect(**_: Any) -> Any:
        return _HungConn(0, [])

    async def scenario() -> None:
        p = ProbePool(connect, mariadb=True, size=1, timeout_ms=10, hang_slack=0.0, where=WHERE,
                      on_done=lambda _p, tag, out: heard.append(f"{tag}:{out.status}"))
        p.start()
        p.submit(SimpleProbe(), "a")
        while not p._inflight:
            await asyncio.sleep(0.001)
        p._overdue.add(0)
        p._workers[0].cancel()  # the watchdog's cancellation ...
        await p.close()  # ... and a close in the same turn

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert heard == ["a:dropped"]


def test_a_row_probe_text_is_checked_once_and_a_refused_one_every_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real = pool_mod.refuse_reason

    def counting(sql: str) -> str | None:
        checked.append(sql)
        return real(sql)

    monkeypatch.setattr(pool_mod, "refuse_reason", counting)
    p = pool()
    row = SimpleProbe("SELECT id FROM t WHERE id IN (%s)", (1,))
    bad = SimpleProbe("UPDATE t SET a = 1 WHERE id IN (%s)", (1,))
    stmt = SimpleProbe("SELECT id FROM t WHERE id IN (5)")
    assert [p._approve(x) for x in (row, row, bad, bad, stmt, stmt)] == [
        None, None, "not a SELECT", "not a SELECT", None, None]
    assert checked == [row.sql, bad.sql, bad.sql, stmt.sql, stmt.sql]


class _PlanConn:
    """A probe connection whose EXPLAIN reads a whole table for texts naming `c`."""

    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    def check(self, sql: str) -> None:
        """Where a subclass's server refuses a statement."""

    def cursor(self, _kind: object = None) -> Any:
        ran, check = self.ran, self.check

        class Cur(_FakeCur):
            async def answer(self, sql: str) -> list[Any]:
                ran.append(sql)
                check(sql)
                explain = sql.startswith("EXPLAIN")
                self.description = (("table",), ("type",), ("rows",)) if explain else (("1",),)
                return ([("t", "ALL", 50000) if " c IN" in sql else ("t", "range", 2)] if explain
                        else [(1,)])
        return Cur()

    def close(self) -> None:
        pass


def _shaped(sql: str, plan: str) -> SimpleProbe:
    """A statement probe of the shape named ``plan`` (rewrite_sql.Probe.plan)."""
    probe = SimpleProbe(sql)
    probe.plan = plan  # type: ignore[attr-defined]
    return probe


def _answers(conn: Callable[[], Any], probes: list[tuple[Any, str]], *, mariadb: bool = True) -> list[str]:
    """``tag:status:rows`` of each probe, run one after another by a one-session pool."""
    heard: list[str] = []

    async def connect(**_: Any) -> Any:
        return conn()

    async def main() -> None:
        p = ProbePool(connect, mariadb=mariadb, size=1, timeout_ms=500, where=WHERE,
                      on_done=lambda _p, tag, out: heard.append(f"{tag}:{out.status}:{out.rows}"))
        p.start()
        for probe, tag in probes:
            p.submit(probe, tag)
        while len(heard) < len(probes):
            await asyncio.sleep(0.001)
        await p.close()

    asyncio.run(asyncio.wait_for(main(), 10))
    return heard


def test_a_statement_shape_whose_plan_scans_a_table_is_explained_once_and_never_sent() -> None:
    """Each shape's first probe is explained on the probe session; a whole-table read is
    answered "scan" without running, and so is every later probe of the shape; another
    shape's probes run. A DDL (forget_plans) has the shapes explained again."""
    heard: list[str] = []
    ran: list[str] = []

    async def connect(**_: Any) -> Any:
        return _PlanConn(ran)

    scan = _shaped("SELECT * FROM t WHERE c IN (1, 2) LIMIT 256", "s\0scan")
    key = _shaped("SELECT * FROM t WHERE id IN (1, 2) LIMIT 256", "s\0key")

    async def scenario(pool: ProbePool, probes: list[tuple[Any, str]]) -> None:
        heard.clear()
        for probe, tag in probes:
            pool.submit(probe, tag)
        while len(heard) < len(probes):
            await asyncio.sleep(0.001)

    async def main() -> None:
        p = ProbePool(connect, mariadb=True, size=1, timeout_ms=500, where=WHERE,
                      on_done=lambda _p, tag, out: heard.append(f"{tag}:{out.status}"))
        p.start()
        await scenario(p, [(scan, "a"), (key, "b"), (scan, "c"), (key, "d")])
        assert heard == ["a:scan", "b:ok", "c:scan", "d:ok"]
        assert ran == [f"EXPLAIN {scan.sql}", f"EXPLAIN {key.sql}", key.sql, key.sql]
        assert (p.counters.scans, p.counters.explained, p.counters.issued) == (2, 2, 2)
        ran.clear()
        p.forget_plans()
        await scenario(p, [(scan, "e")])
        assert heard == ["e:scan"] and ran == [f"EXPLAIN {scan.sql}"]
        ran.clear()
        # A verdict is renewed after PLAN_SECONDS: tables grow, statistics change.
        p._plans = {k: (why, at - pool_mod.PLAN_SECONDS) for k, (why, at) in p._plans.items()}
        await scenario(p, [(scan, "f"), (scan, "g")])
        assert heard == ["f:scan", "g:scan"] and ran == [f"EXPLAIN {scan.sql}"]
        await p.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_mysql_probe_sessions_ask_for_the_tabular_explain() -> None:
    ran: list[str] = []
    probe = _shaped("SELECT * FROM t WHERE id = 1", "s\0one")
    assert _answers(lambda: _PlanConn(ran), [(probe, "a")], mariadb=False) == ["a:ok:1"]
    assert ran[0] == "EXPLAIN FORMAT=TRADITIONAL SELECT * FROM t WHERE id = 1"


class _RefusingConn(_PlanConn):
    """EXPLAIN refused by the server for texts naming `v` (a view without SHOW VIEW);
    the session lost mid-EXPLAIN for texts naming `gone`, once."""

    lost = [True]

    def check(self, sql: str) -> None:
        if sql.startswith("EXPLAIN") and " v " in sql:
            raise pymysql.err.OperationalError(
                1345, "EXPLAIN/SHOW can not be issued; lacking privileges for underlying table")
        if sql.startswith("EXPLAIN") and " gone " in sql and self.lost[0]:
            self.lost[0] = False
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query")


def test_an_explain_the_server_refuses_is_a_verdict_and_a_lost_one_is_not() -> None:
    ran: list[str] = []
    opened: list[int] = []

    def conn() -> Any:
        opened.append(1)
        return _RefusingConn(ran)

    view = _shaped("SELECT * FROM v WHERE id = 1", "s\0view")
    gone = _shaped("SELECT * FROM gone WHERE id = 1", "s\0gone")
    heard = _answers(conn, [(view, "a"), (view, "b"), (gone, "c"), (gone, "d")])
    # The refused EXPLAIN once, its shape not probed; the lost one fails as a probe would,
    # its session reopened, and the shape explained again.
    assert heard == ["a:scan:0", "b:scan:0", "c:error:0", "d:ok:1"]
    assert ran == [f"EXPLAIN {view.sql}", f"EXPLAIN {gone.sql}", f"EXPLAIN {gone.sql}", gone.sql]
    assert len(opened) == 2


class _WideConn:
    """Text probes answer 150 rows, which the pool must count as they stream (fetchmany
    on the streaming cursor), never hold whole (fetchall)."""

    def __init__(self, kinds: list[object]) -> None:
        self.kinds = kinds

    def cursor(self, kind: object = None) -> Any:
        self.kinds.append(kind)

        class Cur(_FakeCur):
            async def answer(self, sql: str) -> list[Any]:
                return [(b"x" * 10,)] * 150

            async def fetchall(self) -> list[Any]:
                raise AssertionError("a text probe's result was read whole")

            async def fetchmany(self, n: int) -> list[Any]:
                rows, self._rows = self._rows[:n], self._rows[n:]
                return rows
        return Cur()

    def close(self) -> None:
        pass


def test_a_statement_probes_rows_are_counted_as_they_stream_not_held() -> None:
    kinds: list[object] = []
    probe = SimpleProbe("SELECT * FROM t WHERE d < '2026-01-01' LIMIT 256")
    assert _answers(lambda: _WideConn(kinds), [(probe, "a")]) == ["a:ok:150"]
    assert SSCursor in kinds
