"""The real collaborators of the runtime, built from the settings.

The one place where the daemon meets the MySQL layer, the relay-log files and
the prefetch engine: :class:`~lagd.daemon.runtime.Runtime` only sees the small
protocols it declares, and tests pass fakes instead of this module.

Sessions: the status monitor (async, one connection), a blocking session for
the heartbeat with deadlines shorter than the lag poll's (so the poll's own
deadline never has to abandon it mid-query), and one for the rest (relay-log
location, the buffer pool size, the advisor's settings). Every one is opened
by ``lagd.mysql``: read only, with a server-side statement timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lagd.advisor.runtime import AdvisorRuntime
from lagd.config import PrefetchSettings, Settings
from lagd.daemon import sqlthread
from lagd.daemon.collect import ReplicaReading, collect
from lagd.daemon.runtime import Parts, Prefetcher, RelayReader, Runtime, poll_timeout
from lagd.daemon.sqlthread import ProcStall
from lagd.errors import LagdError
from lagd.heartbeat import HeartbeatRow, read_heartbeat
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.monitor import ReplicaMonitor
from lagd.mysql.session import BlockingSession
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine, PrefetchSnapshot, with_limits
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine, check_readable, relay_log_index
from lagd.prefetch.stall import StallMonitor
from lagd.relaylog import LogFiles, RelayLogReader, RelayPosition, TableMapResolver


def endpoint_of(s: Settings) -> Endpoint:
    """Raises CredentialError (a LagdError) when the password cannot be read."""
    return Endpoint.of_replica(s.replica)


def prefetch_options(p: PrefetchSettings) -> PrefetchOptions:
    return PrefetchOptions(
        connections=p.connections, max_keys_per_probe=p.max_keys_per_probe,
        statement_timeout_ms=p.statement_timeout_ms, min_lead_transactions=p.min_lead_transactions,
        max_lead_transactions=p.max_lead_transactions, max_lead_bytes=p.max_lead_bytes,
        max_lead_seconds=p.max_lead_seconds, buffer_pool_share=p.buffer_pool_share, adaptive=p.adaptive,
        evaluate_window_seconds=p.evaluate_window_seconds, schemas=tuple(p.schemas),
        exclude_schemas=tuple(p.exclude_schemas))


def heartbeat_session(endpoint: Endpoint, settings: Settings) -> BlockingSession:
    # Its own deadline (read timeout + 2 s) ends before the poll's: a hung read
    # is dropped by the session, which then reconnects, never reused half-read.
    read = max(0.5, poll_timeout(settings) - 2.5)
    return BlockingSession(endpoint, statement_timeout=read, read_timeout=read)


class SessionHeartbeat:
    def __init__(self, session: BlockingSession) -> None:
        self.session = session

    async def read(self, table: str, server_id: int | None) -> HeartbeatRow | None:
        return await self.session.run(lambda c: read_heartbeat(c, table, server_id))

    def close(self) -> None:
        self.session.close()


class FileRelay:
    """The relay log on this host, located by asking the server where it is."""

    def __init__(self, session: BlockingSession) -> None:
        self.session = session

    async def locate(self, configured: str = "") -> Path:
        index = await self.session.run(lambda c: relay_log_index(c, configured))
        why = check_readable(index)
        if why:
            raise LagdError(f"relay log not readable: {why}")
        return index

    def reader(self, index: Path, start: RelayPosition,
               resync: Callable[[], RelayPosition]) -> RelayReader:
        # The look-ahead needs no schema (TableMapResolver): it never queries the server.
        # Nor the rows' values: it counts them (backlog, advisor), so they are not decoded.
        return RelayLogReader(LogFiles(index), start, TableMapResolver(), resync=resync, chunk_size=1 << 20,
                              values=False)


def configure_engine(engine: PrefetchEngine, p: PrefetchSettings, pool_bytes: int) -> None:
    """Every in-place prefetch setting (``config.RELOAD``), applied to a running engine.

    The lead bounds live in two places (the limits the cursor obeys and the
    tuning the adaptive control moves within): both change together.
    """
    limits = control.limits_for(p.min_lead_transactions, p.max_lead_transactions, p.max_lead_bytes,
                                p.max_lead_seconds, pool_bytes, p.buffer_pool_share)
    with_limits(engine, limits)
    engine.static_off = control.pool_too_small(limits)
    engine.tuning = replace(engine.tuning, min_transactions=p.min_lead_transactions,
                            max_transactions=p.max_lead_transactions, adaptive=p.adaptive)
    if not p.adaptive and not engine.ctl.enabled:
        engine.ctl = replace(engine.ctl, enabled=True, reason="adaptive control is off")
    engine.window_seconds = p.evaluate_window_seconds


class EnginePrefetcher:
    """A PrefetchEngine as the runtime sees it."""

    def __init__(self, engine: PrefetchEngine, pool_bytes: int) -> None:
        self.engine = engine
        self.pool_bytes = pool_bytes

    async def run(self, stop: asyncio.Event) -> None:
        await self.engine.run(stop)

    def snapshot(self) -> PrefetchSnapshot:
        return self.engine.snapshot()

    def configure(self, settings: PrefetchSettings) -> None:
        configure_engine(self.engine, settings, self.pool_bytes)

    def gate(self) -> tuple[bool, str] | None:
        if self.engine.stall is None:
            return None
        return self.engine.gate_view()

    def sql_running(self) -> bool | None:
        return self.engine.sql_running

    async def close(self) -> None:
        pass  # the engine's run closed its pool; the monitor is the daemon's


def _pool_bytes(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.innodb_buffer_pool_size AS v")
        row = cur.fetchone() or {}
    value = row.get("v") if isinstance(row, dict) else row[0]
    return int(value or 128 << 20)


def prefetch_factory(endpoint: Endpoint, session: BlockingSession, monitor: ReplicaMonitor,
                     stall_monitor: StallMonitor | None = None) -> Any:
    async def build(p: PrefetchSettings, index: Path, mariadb: bool) -> Prefetcher:
        pool_bytes = await session.run(_pool_bytes)
        engine = await build_engine(
            endpoint, prefetch_options(p),
            lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe, schemas=o.schemas,
                                   exclude_schemas=o.exclude_schemas),
            index=index, mariadb=mariadb, pool_bytes=pool_bytes, stall_monitor=stall_monitor,
            monitor=monitor)
        return EnginePrefetcher(engine, pool_bytes)
    return build


def parts(settings: Settings) -> Parts:
    endpoint = endpoint_of(settings)
    session = BlockingSession(endpoint)
    # One status monitor and one stall monitor for the daemon's life; the engine
    # borrows both while it runs, so the replica is polled on one connection.
    monitor = ReplicaMonitor.of(endpoint, settings.replica.channel)
    stall = ProcStall(lambda sql: session.run(lambda c: sqlthread.rows(c, sql)), settings.replica.user)
    return Parts(
        monitor=monitor,
        session=session,
        heartbeat=SessionHeartbeat(heartbeat_session(endpoint, settings)),
        relay=FileRelay(session),
        prefetch=prefetch_factory(endpoint, session, monitor, stall.monitor),
        advisor=AdvisorRuntime(settings.advisor), stall=stall)


def runtime(settings: Settings, config_path: Path | None = None,
            on_ready: Any = lambda: None) -> Runtime:
    """The daemon's runtime with the real collaborators."""
    return Runtime(settings, parts(settings), config_path, on_ready)


async def read_replica(settings: Settings) -> ReplicaReading:
    """The replica's lag inputs now, asked directly (``lagctl status`` without the daemon).

    The same :func:`~lagd.daemon.collect.collect` the daemon polls with; a
    password that cannot be read is the status error, as a failed connection is.
    """
    r = settings.replica
    where = f"replica {r.socket or f'{r.host}:{r.port}'}"
    try:
        endpoint = endpoint_of(settings)
    except LagdError as e:
        return ReplicaReading(time.time(), time.monotonic(), None, f"{where}: {e}", None, None, fault=e)
    monitor = ReplicaMonitor.of(endpoint, r.channel)
    hb = SessionHeartbeat(heartbeat_session(endpoint, settings))
    try:
        return await collect(monitor, hb, where=where, timeout=poll_timeout(settings),
                             heartbeat_table=settings.lag.heartbeat_table,
                             heartbeat_server_id=settings.lag.heartbeat_server_id)
    finally:
        await monitor.close()
        hb.close()
