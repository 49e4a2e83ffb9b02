"""The daemon's subsystems as asyncio tasks, and the snapshot they make together.

Ownership (one writer each, everything else reads their latest values):
- ``lag`` task: polls the replica's status and heartbeat every poll interval
  and turns them, with the backlog, into a LagReading.
- ``tail`` task: the look-ahead reader; decodes everything between the SQL
  thread and the end of the relay log into the Backlog and the advisor's
  look-ahead.
- ``prefetch`` task: the prefetch engine (its own cursor, monitor and pool).
- ``advisor`` task: settings advice and split advice, every half minute.
The relay log feeds three consumers; MySQL is never queried at scrape time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from lagd import __version__
from lagd.advisor.runtime import AdvisorRuntime
from lagd.backlog import Backlog
from lagd.config import Settings
from lagd.daemon.state import Health, Snapshot
from lagd.errors import LagdError
from lagd.heartbeat import read_heartbeat
from lagd.lag import Backlog as LagBacklog
from lagd.lag import LagInputs, LagReading, LagTracker
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.monitor import ReplicaMonitor, Sample
from lagd.prefetch.engine import PrefetchEngine, with_limits
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine, check_readable, relay_log_index
from lagd.relaylog import (
    LogFiles,
    RelayLogError,
    RelayLogReader,
    RelayPosition,
    Resynced,
    RowChange,
    TableMapResolver,
    TransactionEnd,
    TransactionStart,
)

log = logging.getLogger("lagd")


def endpoint_of(s: Settings) -> Endpoint:
    r = s.replica
    return Endpoint(r.host, r.port, r.user, r.password(), r.socket, r.connect_timeout)


def prefetch_options(s: Settings) -> PrefetchOptions:
    p = s.prefetch
    return PrefetchOptions(
        connections=p.connections, max_keys_per_probe=p.max_keys_per_probe,
        statement_timeout_ms=p.statement_timeout_ms, min_lead_transactions=p.min_lead_transactions,
        max_lead_transactions=p.max_lead_transactions, max_lead_bytes=p.max_lead_bytes,
        max_lead_seconds=p.max_lead_seconds, buffer_pool_share=p.buffer_pool_share, adaptive=p.adaptive,
        evaluate_window_seconds=p.evaluate_window_seconds, schemas=tuple(p.schemas),
        exclude_schemas=tuple(p.exclude_schemas))


class _Tracked:
    """Health bookkeeping for one subsystem."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.up = False
        self.reason = "not run yet"
        self.last_success: float | None = None
        self.last_duration: float | None = None

    def ok(self, started: float, reason: str = "ok") -> None:
        self.up, self.reason = True, reason
        self.last_success = time.time()
        self.last_duration = time.monotonic() - started

    def fail(self, started: float | None, reason: str) -> None:
        self.up, self.reason = False, reason
        if started is not None:
            self.last_duration = time.monotonic() - started

    def value(self) -> Health:
        return Health(self.name, self.up, self.reason, self.last_success, self.last_duration)


class Runtime:
    def __init__(self, settings: Settings, config_path: Path | None,
                 on_ready: Callable[[], None] = lambda: None) -> None:
        self.settings = settings
        self.config_path = config_path
        self.config_error: str | None = None
        self.started_at = time.time()
        self.on_ready = on_ready
        self.ready = False
        self.endpoint = endpoint_of(settings)
        self.monitor = ReplicaMonitor(self.endpoint.async_connect(), settings.replica.channel)
        # Rates react within ~10 s, so a catch-up's ETA is current while it happens.
        self.tracker = LagTracker(stale_after=settings.lag.stale_after, rate_time_constant=10.0)
        self.backlog = Backlog()
        self.advisor = AdvisorRuntime(settings.advisor)
        self.sample: Sample | None = None
        self.lag: LagReading | None = None
        self.engine: PrefetchEngine | None = None
        self.prefetch_off: str | None = None
        self.tail_off: str | None = None
        self.health = {n: _Tracked(n) for n in ("replica_status", "heartbeat", "relay_log", "prefetch",
                                                "advisor")}
        self.loop_tick = time.monotonic()
        self.last_lag_loop = time.monotonic()
        self._sync_conn: Any = None
        self._sync_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._index: Path | None = None
        self._mariadb = True

    # ----- lifecycle ------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.create_task(c, name=n) for n, c in (
            ("ticker", self._ticker()), ("lag", self._lag_loop()), ("relay", self._relay_tasks()),
            ("advisor", self._advisor_loop()))]

    async def stop(self) -> None:
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.monitor.close()
        if self.engine is not None:
            await self.engine.monitor.close()
        self._close_sync()

    def apply(self, settings: Settings) -> None:
        """A reloaded config that keeps the same replica: change what can change in place."""
        self.settings = settings
        self.tracker.stale_after = settings.lag.stale_after
        self.advisor.configure(settings.advisor)
        if self.engine is not None:
            from lagd.prefetch import control  # noqa: PLC0415 - small, only on reload

            o = prefetch_options(settings)
            pool = self.engine.limits.max_pages * control.PAGE_BYTES / max(o.buffer_pool_share, 1e-9)
            with_limits(self.engine, control.limits_for(
                o.min_lead_transactions, o.max_lead_transactions, o.max_lead_bytes, o.max_lead_seconds,
                int(pool), o.buffer_pool_share))

    async def _ticker(self) -> None:
        while True:
            self.loop_tick = time.monotonic()
            await asyncio.sleep(1.0)

    # ----- blocking queries (heartbeat, settings) ---------------------------

    def _sync(self) -> Any:
        if self._sync_conn is None:
            self._sync_conn = pymysql.connect(**self.endpoint.pymysql_kwargs(),
                                              cursorclass=pymysql.cursors.DictCursor)
        return self._sync_conn

    def _close_sync(self) -> None:
        if self._sync_conn is not None:
            with contextlib.suppress(Exception):
                self._sync_conn.close()
        self._sync_conn = None

    async def blocking(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(conn)`` on the blocking connection in a thread, one at a time."""
        async with self._sync_lock:
            try:
                return await asyncio.to_thread(lambda: fn(self._sync()))
            except pymysql.err.OperationalError:
                self._close_sync()
                raise

    # ----- lag ------------------------------------------------------------

    async def _heartbeat(self, sample: Sample) -> tuple[Any, str | None]:
        table = self.settings.lag.heartbeat_table
        if not table:
            return None, None
        h = self.health["heartbeat"]
        t0 = time.monotonic()
        server_id = self.settings.lag.heartbeat_server_id or (
            sample.status.source_server_id if sample.status and sample.status.source_server_id else None)
        try:
            row = await self.blocking(lambda c: read_heartbeat(c, table, server_id))
        except (LagdError, pymysql.err.MySQLError) as e:
            h.fail(t0, str(e))
            return None, str(e)
        if row is None:
            h.fail(t0, f"no row for server_id {server_id} in {table}")
            return None, f"no heartbeat row for server_id {server_id} in {table}"
        h.ok(t0)
        return row, None

    async def _lag_loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            timeout = self.settings.replica.connect_timeout + 5
            try:
                sample = await asyncio.wait_for(self.monitor.poll(), timeout)
            except TimeoutError:
                sample = Sample(time.time(), time.monotonic(), None, f"no answer in {timeout:g} s")
                await self.monitor.close()
            self.sample = sample
            st = self.health["replica_status"]
            if sample.status is not None:
                st.ok(t0)
                self._mariadb = bool(self.monitor.flavor and self.monitor.flavor.is_mariadb)
                pos = RelayPosition(sample.status.relay_log_file, sample.status.relay_log_pos)
                self._follow_relay_reset(pos)
                self.backlog.applied_up_to(pos)
                self.advisor.applied_up_to(pos, self.backlog)
            else:
                st.fail(t0, sample.error or "no status")
            try:
                row, hb_error = await asyncio.wait_for(self._heartbeat(sample), timeout)
            except TimeoutError:
                row, hb_error = None, f"heartbeat read took more than {timeout:g} s"
            view = self.backlog.view()
            reader_ok = self.tail_off is None and self._reader is not None
            backlog = (LagBacklog(view.transactions, view.bytes, view.rows, view.oldest_commit_time)
                       if reader_ok else None)
            self.lag = self.tracker.update(LagInputs(
                now=sample.wall, monotonic=sample.mono, status=sample.status, status_error=sample.error,
                heartbeat=row, heartbeat_error=hb_error, applying_commit_time=None, backlog=backlog,
                applied_transactions=self.backlog.applied_transactions,
                applied_rows=self.backlog.applied_rows))
            self.advisor.observe_rates(self.lag, self.backlog)
            self.last_lag_loop = time.monotonic()
            if sample.status is not None and not self.ready:
                self.ready = True
                self.on_ready()
            await self._sleep(self.settings.lag.poll_interval - (time.monotonic() - t0))

    _last_sql_pos: RelayPosition | None = None

    def _follow_relay_reset(self, pos: RelayPosition) -> None:
        # The SQL thread never moves back by itself: a position below the last
        # one means the relay log was started anew (MariaDB's GTID replica
        # does so when it restarts; RESET SLAVE, CHANGE MASTER). What the
        # look-ahead read from the old files would never be applied.
        last, self._last_sql_pos = self._last_sql_pos, pos
        if last is None or not pos < last or self._reader is None:
            return
        log.info("relay log: the SQL thread moved back from %s:%d to %s:%d (relay log started anew); "
                 "reading again from there", last.file, last.offset, pos.file, pos.offset)
        self._reader.seek(pos)
        self.backlog.reset()
        self.advisor.reset()

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), seconds)

    # ----- the relay log: look-ahead reader and prefetch ------------------

    _reader: RelayLogReader | None = None

    async def _relay_tasks(self) -> None:
        """Find the relay log, then run the tail reader and the prefetcher; retry on trouble."""
        while not self._stop.is_set():
            try:
                await self._relay_once()
            except asyncio.CancelledError:
                raise
            except (LagdError, RelayLogError, OSError, pymysql.err.MySQLError) as e:
                self.tail_off = self.prefetch_off = str(e)
                self.health["relay_log"].fail(None, str(e))
                log.warning("relay log: %s; trying again in 5 s", e)
            finally:
                self._reader = None
                if self.engine is not None:
                    await self.engine.monitor.close()
                    self.engine = None
            await self._sleep(5.0)

    async def _relay_once(self) -> None:
        while self.sample is None or self.sample.status is None:
            await self._sleep(0.5)
        t0 = time.monotonic()
        index = await self.blocking(lambda c: relay_log_index(c, self.settings.replica.relay_log_index))
        why = check_readable(index)
        if why:
            raise LagdError(f"relay log not readable: {why}")
        self._index = index
        st = self.sample.status
        start = RelayPosition(st.relay_log_file, st.relay_log_pos)

        def resync() -> RelayPosition:
            s = self.sample.status if self.sample else None
            if s is None:
                raise RelayLogError("no replica status to resync from")
            return RelayPosition(s.relay_log_file, s.relay_log_pos)

        self._reader = RelayLogReader(LogFiles(index), start, TableMapResolver(), resync=resync,
                                      chunk_size=1 << 20)
        self.backlog.reset()
        self.advisor.reset()
        self.tail_off = None
        self.health["relay_log"].ok(t0)
        tasks = [asyncio.create_task(self._tail(self._reader), name="tail")]
        if self.settings.prefetch.enabled:
            tasks.append(asyncio.create_task(self._prefetch(index), name="prefetch"))
        else:
            self.prefetch_off = "prefetch.enabled is false in the config"
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _tail(self, reader: RelayLogReader) -> None:
        h = self.health["relay_log"]
        backlog, look = self.backlog, self.advisor
        while not self._stop.is_set():
            t0 = time.monotonic()
            batch = reader.read(1 << 20)
            for e in batch:
                t = type(e)
                if t is RowChange:
                    backlog.row()
                elif t is TransactionStart:
                    backlog.start(e)  # type: ignore[arg-type]
                elif t is TransactionEnd:
                    backlog.end(e)  # type: ignore[arg-type]
                elif t is Resynced:
                    backlog.reset()
            look.feed(batch, reader.position)
            backlog.at_tail = reader.at_tail
            h.ok(t0)
            await (self._sleep(0.2) if not batch and reader.at_tail else asyncio.sleep(0))

    async def _prefetch(self, index: Path) -> None:
        s = self.settings
        pool_bytes = int(await self.blocking(
            lambda c: _one(c, "SELECT @@GLOBAL.innodb_buffer_pool_size AS v")) or 128 << 20)
        opts = prefetch_options(s)
        self.engine = await build_engine(
            self.endpoint, opts,
            lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe, schemas=o.schemas,
                                   exclude_schemas=o.exclude_schemas),
            index=index, mariadb=self._mariadb, pool_bytes=pool_bytes)
        self.prefetch_off = None
        self.health["prefetch"].ok(time.monotonic())
        await self.engine.run(self._stop)

    # ----- advisor --------------------------------------------------------

    async def _advisor_loop(self) -> None:
        h = self.health["advisor"]
        while not self._stop.is_set():
            if not (self.settings.advisor.enabled and self.sample is not None and self.sample.status):
                await self._sleep(1.0)  # not yet: look again soon rather than in half a minute
                continue
            t0 = time.monotonic()
            try:
                await self.advisor.refresh(self.blocking, self.lag)
                h.ok(t0)
            except (LagdError, pymysql.err.MySQLError) as e:
                h.fail(t0, str(e))
            await self._sleep(30.0)

    # ----- the snapshot -----------------------------------------------------

    def snapshot(self) -> Snapshot:
        if not self.settings.lag.heartbeat_table:
            self.health["heartbeat"].up, self.health["heartbeat"].reason = True, "not configured"
        if not self.settings.advisor.enabled:
            self.health["advisor"].up, self.health["advisor"].reason = True, "disabled in the config"
        sample = self.sample
        flavor = self.monitor.flavor
        ps = self.engine.snapshot() if self.engine is not None else None
        if ps is not None:
            # "off" by a verdict (a pool too small) is working as designed, not a failure.
            self.health["prefetch"].up = True
            self.health["prefetch"].reason = f"{ps.state}: {ps.reason}"
        elif self.prefetch_off:
            self.health["prefetch"].fail(None, self.prefetch_off)
        r = self.settings.replica
        return Snapshot(
            taken_at=time.time(), version=__version__, started_at=self.started_at,
            config_path=str(self.config_path) if self.config_path else None,
            config_error=self.config_error, settings=self.settings.public_dict(),
            replica={"endpoint": r.socket or f"{r.host}:{r.port}", "user": r.user, "channel": r.channel,
                     "flavor": str(flavor) if flavor else None,
                     "relay_log_index": str(self._index) if self._index else None},
            status=sample.status if sample else None,
            status_error=sample.error if sample else "not polled yet",
            lag=self.lag, prefetch=ps, prefetch_off_reason=None if ps else self.prefetch_off,
            advisor=self.advisor.snapshot(),
            health=tuple(t.value() for t in self.health.values()),
            loop_age=time.monotonic() - self.loop_tick)


def _one(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
