"""Probe sessions leave the replica's connection slots to its other clients (real mariadbd).

The replica's max_connections is lowered for these tests and put back after;
"applications" are plain root connections over the socket, as a client would
hold them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pymysql
import pytest

from lagd.mysql.endpoint import Endpoint
from lagd.mysql.errors import DatabaseError, Kind, translate
from lagd.mysql.monitor import ReplicaMonitor
from lagd.mysql.slots import Slots
from lagd.prefetch import control
from lagd.prefetch.pool import ProbePool
from lagd.sandbox.pair import Sandbox

USER = "lagdslots"


def endpoint(sandbox: Sandbox, user: str | None = None) -> Endpoint:
    d = sandbox.replica().dsn
    ep = Endpoint(d.host, d.port, d.user, d.password, role="replica")
    return replace(ep, user=user, password="pw") if user else ep


@contextlib.contextmanager
def max_connections(sandbox: Sandbox, n: int) -> Iterator[None]:
    before = int(sandbox.replica().query("SELECT @@GLOBAL.max_connections AS n")[0]["n"])
    sandbox.replica().query(f"SET GLOBAL max_connections = {n}")
    try:
        yield
    finally:
        sandbox.replica().query(f"SET GLOBAL max_connections = {before}")


@contextlib.contextmanager
def clients(sandbox: Sandbox, n: int) -> Iterator[list[Any]]:
    held = [sandbox.replica().connect() for _ in range(n)]
    try:
        yield held
    finally:
        for c in held:
            c.close()


def slots(ep: Endpoint) -> Slots | None:
    async def main() -> Slots | None:
        monitor = ReplicaMonitor.of(ep)
        try:
            return await monitor.connection_slots()
        finally:
            await monitor.close()
    return asyncio.run(main())


def test_the_reading_counts_clients_not_replication_threads(sandbox: Sandbox) -> None:
    """Threads_connected against the server's own list, asked on one session; sessions
    other tests leave closing can change the list in between, so until two lists agree."""
    async def main() -> tuple[int, list[str]]:
        monitor = ReplicaMonitor.of(endpoint(sandbox))
        listing = "SELECT COMMAND AS c FROM information_schema.PROCESSLIST"
        try:
            for _ in range(50):
                before = [str(r["c"]) for r in await monitor.query(listing)]
                reading = await monitor.connection_slots()
                after = [str(r["c"]) for r in await monitor.query(listing)]
                if sorted(before) == sorted(after):
                    assert reading is not None
                    return reading.connected, after
                await asyncio.sleep(0.1)
            raise AssertionError("the server's connections never held still")
        finally:
            await monitor.close()

    connected, threads = asyncio.run(main())
    assert "Slave_SQL" in threads and "Slave_IO" in threads
    replication = ("Daemon", "Slave_IO", "Slave_SQL", "Slave_worker")
    assert connected == len([c for c in threads if c not in replication]), threads
    with clients(sandbox, 5):
        during = slots(endpoint(sandbox))
    assert during is not None and during.connected >= 5 + 1  # the five and the monitor asking


def test_the_account_limit_is_read_and_its_own_sessions_counted(sandbox: Sandbox) -> None:
    for sql in ["SET SESSION sql_log_bin = 0",
                f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY 'pw'"
                " WITH MAX_USER_CONNECTIONS 6",
                f"GRANT SELECT, SLAVE MONITOR ON *.* TO '{USER}'@'127.0.0.1'"]:
        sandbox.replica().query(sql)
    try:
        got = slots(endpoint(sandbox, USER))
        assert got is not None and got.user_limit == 6 and got.own == 1  # only its own session
        n, why = control.connection_budget(32, got, 0)
        assert n == 3 and "may hold 6 sessions" in why  # 6 - its status session - 2 kept
    finally:
        sandbox.replica().query(f"DROP USER IF EXISTS '{USER}'@'127.0.0.1'")


@dataclass
class Probe:
    sql: str = "SELECT SLEEP(0.2) AS s"
    params: tuple[Any, ...] = ()
    rows: int = 1


def test_probe_sessions_fit_the_free_slots_and_a_client_still_connects(sandbox: Sandbox) -> None:
    """32 configured, 40 slots, 14 held by clients: lagd holds what the budget leaves,
    and the next client connects while every probe session is busy."""
    ep = endpoint(sandbox)

    async def main() -> tuple[int, int, int]:
        done: list[Any] = []
        pool = ProbePool(ep.async_connect(), mariadb=True, size=32, timeout_ms=2000,
                         on_done=lambda *a: done.append(a))
        monitor = ReplicaMonitor.of(ep)
        try:
            reading = await monitor.connection_slots()
            cap, _ = control.connection_budget(32, reading, pool.open)
            await pool.resize(cap)
            pool.start()
            for _ in range(cap * 2):
                pool.submit(Probe())
            while pool.open < cap:  # every session connected
                await asyncio.sleep(0.01)
            busy = 0
            for _ in range(20):  # and busy: the last one connected sends its probe a moment later
                own = await monitor.query("SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST"
                                          " WHERE INFO LIKE 'SELECT SLEEP(0.2)%'")
                busy = max(busy, int(own[0]["n"]))
                if busy >= cap:
                    break
                await asyncio.sleep(0.01)
            # One more client while lagd holds all it may: the server takes it.
            extra = sandbox.replica().connect()
            extra.close()
            while len(done) < cap * 2:
                await asyncio.sleep(0.01)
            return cap, pool.open, busy
        finally:
            await pool.close()
            await monitor.close()

    with max_connections(sandbox, 40), clients(sandbox, 14):
        cap, opened, busy = asyncio.run(main())
    # 40 slots - (14 clients + the monitor + any other session) - 10 kept free
    assert 0 < cap <= 40 - 15 - control.RESERVE_MIN, cap
    assert opened == cap and busy == cap


def test_a_full_server_refuses_with_its_own_kind_and_fix(sandbox: Sandbox) -> None:
    ep = endpoint(sandbox)
    with max_connections(sandbox, 12):
        held: list[Any] = []
        try:
            # lagd's account has no SUPER: the server refuses it at max_connections
            # (root would still get one more, the slot kept for an administrator).
            with pytest.raises(pymysql.err.OperationalError) as refused:
                for _ in range(20):
                    held.append(pymysql.connect(host=ep.host, port=ep.port, user=ep.user,
                                                password=ep.password))
        finally:
            for c in held:
                c.close()
    fault = translate(refused.value, ep.where)
    assert isinstance(fault, DatabaseError) and fault.kind is Kind.FULL and fault.code == 1040
    assert "max_connections" in (fault.fix or "")
