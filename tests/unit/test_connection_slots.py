"""Probe sessions within the replica's free connection slots: the reading (recorded
result rows), the budget (pure), and how the engine and the pool follow it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pymysql
import pytest

from lagd.mysql.errors import DatabaseError, Kind, translate
from lagd.mysql.slots import Slots, parse_slots
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.pool import ProbePool

# ----- the reading -------------------------------------------------------------------------

LIMITS = [{"max_connections": 151, "max_user_connections": 0}]  # MariaDB 10.11's defaults


@pytest.mark.parametrize(("limits", "connected", "own", "want"), [
    (LIMITS, 12, [{"n": 5}], Slots(151, 12, None, 5)),
    # the account's own limit (the session value shows it); MariaDB's -1 is no limit on a session
    ([{"max_connections": 151, "max_user_connections": 8}], 12, [{"n": 5}], Slots(151, 12, 8, 5)),
    ([{"max_connections": 151, "max_user_connections": -1}], 12, [{"n": 5}], Slots(151, 12, None, 5)),
    # asyncmy hands some numbers over as text or bytes
    ([{"max_connections": b"500", "max_user_connections": "20"}], 40, [{"n": "3"}], Slots(500, 40, 20, 3)),
    (LIMITS, 12, None, Slots(151, 12, None, None)),  # no PROCESSLIST table: lagd's own not counted
    (LIMITS, None, [{"n": 5}], None),  # Threads_connected missing: nothing is known
    ([], 12, [{"n": 5}], None),
    ([{"max_connections": None, "max_user_connections": 0}], 12, [{"n": 5}], None),
    ([{"max_connections": 0, "max_user_connections": 0}], 12, [{"n": 5}], None),
])
def test_parse_slots(limits: list[dict[str, Any]], connected: int | None, own: list[dict[str, Any]] | None,
                     want: Slots | None) -> None:
    assert parse_slots(limits, connected, own) == want


# ----- the budget --------------------------------------------------------------------------

@pytest.mark.parametrize(("slots", "probe_open", "want", "why"), [
    (None, 0, 32, "not known"),
    # 151 slots, 16 (10%) kept free: room for all 32
    (Slots(151, 20, None, 4), 0, 32, "32 probe sessions (20 of max_connections 151 in use by other clients"),
    (Slots(151, 52, None, 36), 32, 32, "20 of max_connections 151"),  # its own 32 are not "others"
    # the applications use 120: 151 - 120 - 16 = 15 left
    (Slots(151, 120, None, 4), 0, 15, "15 probe sessions of the 32 configured: 120 of max_connections 151"),
    (Slots(151, 140, None, 4), 0, 0, "no probe session: 140 of max_connections 151 in use by other clients,"
                                     " 16 kept free"),
    (Slots(151, 136, None, 4), 1, 0, "no probe session"),  # 135 others + 16 > 151
    (Slots(50, 20, None, 4), 0, 20, "10 kept free"),  # at least RESERVE_MIN
    (Slots(2000, 1500, None, 4), 0, 32, "200 kept free"),
    # the account may hold 10: 4 other sessions of lagd's, 2 kept for reconnects
    (Slots(151, 20, 10, 4), 0, 4, "4 probe sessions of the 32 configured: lagd's account may hold 10"
                                  " sessions (max_user_connections): 4 are its other sessions, 2 kept"),
    (Slots(151, 30, 10, 8), 4, 4, "4 are its other sessions"),  # its 4 open probes counted as its own
    (Slots(151, 20, 10, None), 0, 4, "4 are its other sessions (not countable here: assumed)"),
    (Slots(151, 20, 5, 5), 0, 0, "no probe session: lagd's account may hold 5"),
    (Slots(151, 20, 100, 4), 0, 32, "32 probe sessions (20 of max_connections"),  # the limit is not reached
])
def test_connection_budget(slots: Slots | None, probe_open: int, want: int, why: str) -> None:
    n, reason = control.connection_budget(32, slots, probe_open)
    assert n == want
    assert why in reason, reason


# ----- the engine follows it ---------------------------------------------------------------

@dataclass
class FakePool:
    size: int = 32
    open: int = 0
    busy: int = 0
    queued: int = 0
    last_used: float = field(default_factory=time.monotonic)
    _on_done: Any = None
    sizes: list[int] = field(default_factory=list)
    idle_closes: int = 0

    async def resize(self, size: int) -> None:
        self.size = size
        self.sizes.append(size)

    async def close_idle(self) -> None:
        self.idle_closes += 1
        self.open = 0

    def drop_queued(self) -> int:
        return 0


class SlotsMonitor:
    def __init__(self, *readings: Slots | Exception | None) -> None:
        self.readings = list(readings)
        self.asked = 0

    async def connection_slots(self) -> Slots | None:
        self.asked += 1
        got = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        if isinstance(got, Exception):
            raise got
        return got


def engine(mon: SlotsMonitor, pool: FakePool) -> PrefetchEngine:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 1, 32, adaptive=False)
    eng = PrefetchEngine(None, mon, pool, None, limits, tuning)  # type: ignore[arg-type]
    eng.ctl = control.initial_state(tuning, 32, 100)
    eng.state = "active"
    return eng


def test_the_pool_shrinks_to_the_free_slots_and_grows_back() -> None:
    pool = FakePool()
    mon = SlotsMonitor(Slots(151, 120, None, 4), Slots(151, 20, None, 4))
    eng = engine(mon, pool)
    asyncio.run(eng._check_slots(0.0))
    assert pool.sizes == [15] and eng._enabled
    asyncio.run(eng._check_slots(2.0))  # read every SLOTS_EVERY seconds, not every gate check
    assert mon.asked == 1
    asyncio.run(eng._check_slots(5.0))
    assert pool.sizes == [15, 32] and eng.slots_cap == 32


def test_no_free_slot_keeps_prefetch_out_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    pool = FakePool()
    eng = engine(SlotsMonitor(Slots(151, 140, None, 4)), pool)
    with caplog.at_level(logging.INFO, logger="lagd.prefetch"):
        asyncio.run(eng._check_slots(0.0))
        asyncio.run(eng._check_slots(10.0))
    assert pool.sizes == [0] and not eng._enabled
    assert eng.slots_reason.startswith("no probe session: 140 of max_connections 151")
    said = [r.getMessage() for r in caplog.records if "max_connections" in r.getMessage()]
    assert len(said) == 1, said  # said when it starts binding, not at every reading


def test_a_failed_reading_keeps_the_cap() -> None:
    pool = FakePool()
    lost = DatabaseError("replica: connection lost", kind=Kind.LOST)
    eng = engine(SlotsMonitor(Slots(151, 120, None, 4), lost, None), pool)
    asyncio.run(eng._check_slots(0.0))
    asyncio.run(eng._check_slots(5.0))
    assert eng.slots_cap == 15 and pool.sizes == [15]
    asyncio.run(eng._check_slots(10.0))  # answered, but unreadable: not known, as configured
    assert eng.slots_cap is None and pool.sizes == [15, 32]


def test_sessions_idle_for_long_are_closed_and_a_shut_gate_is_left_alone() -> None:
    pool = FakePool(open=32, last_used=time.monotonic() - control.IDLE_SESSIONS_SECONDS - 1)
    mon = SlotsMonitor(Slots(151, 40, None, 36))
    eng = engine(mon, pool)
    asyncio.run(eng._check_slots(0.0))
    assert pool.idle_closes == 1 and mon.asked == 1
    eng.state = "backed_off"  # prefetch kept out (no probes, no sessions): not read again
    eng.ctl = replace(eng.ctl, enabled=False)
    asyncio.run(eng._check_slots(60.0))
    assert mon.asked == 1


def test_busy_sessions_are_not_closed() -> None:
    pool = FakePool(open=32, busy=1, last_used=time.monotonic() - 100)
    asyncio.run(engine(SlotsMonitor(None), pool)._check_slots(0.0))
    assert pool.idle_closes == 0


# ----- the pool's workers ------------------------------------------------------------------

def test_the_pool_adds_and_lets_go_of_workers_without_touching_the_others() -> None:
    async def never(**_: Any) -> Any:
        raise AssertionError("a worker connects only at its first probe")

    async def scenario() -> list[int]:
        pool = ProbePool(never, mariadb=True, size=4, timeout_ms=500, on_done=lambda *_: None)
        pool.start()
        first = list(pool._workers)
        sizes = [len(pool._workers)]
        await pool.resize(2)
        sizes.append(len(pool._workers))
        assert pool._workers == first[:2] and all(t.cancelled() for t in first[2:])
        await pool.resize(0)
        sizes.append(len(pool._workers))
        await pool.resize(3)
        sizes.append(len(pool._workers))
        await pool.close_idle()
        sizes.append(len(pool._workers))
        await pool.close()
        sizes.append(len(pool._workers))
        await pool.resize(5)  # closed: not started again
        sizes.append(len(pool._workers))
        return sizes

    assert asyncio.run(scenario()) == [4, 2, 0, 3, 3, 0, 0]


def test_a_full_server_is_its_own_kind_with_the_fix() -> None:
    e = translate(pymysql.err.OperationalError(1040, "Too many connections"), "replica 127.0.0.1:3306")
    assert e.kind is Kind.FULL and not e.broken
    assert "max_connections" in (e.fix or "") and "prefetch.connections" in (e.fix or "")
    for code in (1203, 1226):
        assert translate(pymysql.err.OperationalError(code, "x"), "replica").kind is Kind.FULL


def test_a_probe_taken_by_a_worker_let_go_is_answered_as_dropped() -> None:
    """The engine counts a probe's pages as coming until it hears back: a worker let go
    (resize, close) while it connects or probes answers for the probe it holds."""
    heard: list[str] = []

    async def hangs(**_: Any) -> Any:
        await asyncio.Event().wait()  # a connect that never completes

    async def scenario() -> None:
        pool = ProbePool(hangs, mariadb=True, size=2, timeout_ms=500,
                         on_done=lambda _p, tag, out: heard.append(f"{tag}:{out.status}"))
        pool.start()
        pool.submit(SimpleProbe(), "a")
        pool.submit(SimpleProbe(), "b")
        pool.submit(SimpleProbe(), "c")  # queued: no worker free
        await asyncio.sleep(0.01)
        await pool.resize(1)  # the second worker goes with "b"
        await pool.close()  # the first with "a"; "c" was still queued

    asyncio.run(scenario())
    assert sorted(heard) == ["a:dropped", "b:dropped", "c:dropped"]


@dataclass
class SimpleProbe:
    sql: str = "SELECT 1"
    params: tuple[Any, ...] = ()
    rows: int = 1
    pages: int = 0
