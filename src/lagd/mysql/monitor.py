"""One async connection that watches the replica: status, counters, settings.

The prefetch scheduler needs the SQL thread's position often (tens of times
a second while it works), the lag poller once a second; both read the latest
``ReplicaStatus`` from here instead of querying on their own.

The session is hardened like every other (READ ONLY, statement and lock-wait
timeouts) and, since asyncmy has no read timeout, every await on it has a
deadline: a hung replica costs a poll ``read_timeout`` seconds, never the
event loop. A connection failure is logged once with its cause and fix, then
at most once a minute while it lasts, and once more when it heals; while the
monitor waits out its backoff, polls report that same real error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lagd.errors import LagdError, NotAReplicaError
from lagd.mysql.backoff import Retry
from lagd.mysql.endpoint import Endpoint, hardening_sql
from lagd.mysql.errors import DatabaseError, Kind, is_database_error, translate
from lagd.mysql.faultlog import FailureLog
from lagd.mysql.progress import ApplierTrx, applier_trx, applier_trx_sql, history_length, history_length_sql
from lagd.mysql.replica import ReplicaStatus, ServerFlavor, parse_replica_status
from lagd.mysql.slots import LIMITS_SQL, OWN_SQL, Slots, parse_slots

log = logging.getLogger("lagd.mysql.monitor")

T = TypeVar("T")

@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the replica."""

    wall: float  # time.time() when it was taken
    mono: float
    status: ReplicaStatus | None  # None: not a replica / no such channel / the server could not be asked
    error: str | None = None  # why status is None
    # Why status is None with its fix: a DatabaseError (kind, code) when the server could not
    # be asked, NotAReplicaError when it has no such channel, the parse error of a row lagd cannot read.
    fault: LagdError | None = None


class ReplicaMonitor:
    """``connect`` opens an asyncmy connection (:meth:`Endpoint.async_connect`);
    :meth:`of` builds one from an :class:`Endpoint`."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], channel: str = "",
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, *,
                 where: str = "replica", read_timeout: float = 3.0, statement_timeout: float = 2.0,
                 connect_timeout: float = 5.0, retry: Retry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._connect = connect
        self.channel = channel
        self._sleep = sleep
        self.where = where
        self.read_timeout = read_timeout
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self._retry = retry or Retry()
        self._clock = clock
        self._conn: Any = None
        self.flavor: ServerFlavor | None = None
        self.latest: Sample | None = None
        self.last_fault: DatabaseError | None = None
        self.polls = 0
        self.failures = 0
        self.reconnects = 0
        self._ever_connected = False
        self.failure_log = FailureLog(log, where, clock=clock)
        self._lock = asyncio.Lock()  # one statement at a time on the one connection

    @classmethod
    def of(cls, endpoint: Endpoint, channel: str = "", **kw: Any) -> ReplicaMonitor:
        kw.setdefault("connect_timeout", endpoint.connect_timeout)
        return cls(endpoint.async_connect(), channel, where=endpoint.where, **kw)

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def _bounded(self, aw: Awaitable[T], seconds: float) -> T:
        try:
            # On this task: wait_for would make one per statement (the engine polls 50 times a second).
            async with asyncio.timeout(seconds):
                return await aw
        except TimeoutError as e:
            raise DatabaseError(f"{self.where}: no answer in {seconds:g} s (the server hangs or is "
                                "overloaded)", kind=Kind.LOST, where=self.where) from e

    async def _ensure(self) -> Any:
        if self._conn is not None:
            return self._conn
        if not self._retry.due(self._clock()):
            # Waiting out the backoff: the last real cause is still the news.
            assert self.last_fault is not None
            raise self.last_fault
        try:
            self._conn = await self._connect_bounded()
            rows = await self._rows("SELECT VERSION() AS version")
            self.flavor = ServerFlavor.from_version_string(str(rows[0]["version"]))
            for sql in hardening_sql(self.flavor.is_mariadb, self.statement_timeout):
                await self._rows(sql)
        except BaseException as e:
            self._drop()
            if not is_database_error(e):
                raise
            fault = translate(e, self.where)
            self._connect_failed(fault)
            raise fault from e
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        self._retry.succeeded()
        self.failure_log.recovered()
        return self._conn

    async def _connect_bounded(self) -> Any:
        seconds = self.connect_timeout + 1.0
        try:
            return await asyncio.wait_for(self._connect(), seconds)
        except TimeoutError as e:
            raise DatabaseError(f"{self.where}: no answer to connect in {seconds:g} s (host down, "
                                "unreachable, or the server hangs)", kind=Kind.UNREACHABLE,
                                where=self.where) from e

    def _connect_failed(self, fault: DatabaseError) -> None:
        self.last_fault = fault
        self._retry.failed(self._clock())
        self.failure_log.failed(fault)

    async def _rows(self, sql: str) -> list[dict[str, Any]]:
        async def run() -> list[dict[str, Any]]:
            async with self._conn.cursor() as cur:
                await cur.execute(sql)
                cols = [d[0] for d in cur.description or ()]
                return [dict(zip(cols, _text(r), strict=True)) for r in await cur.fetchall()]
        return await self._bounded(run(), self.read_timeout)

    async def _statement(self, sql: str) -> list[dict[str, Any]]:
        """``sql`` on the (re)opened connection; DatabaseError on failure, connection dropped."""
        await self._ensure()
        try:
            return await self._rows(sql)
        except BaseException as e:
            self._drop()
            if is_database_error(e):
                fault = translate(e, self.where)
                if fault.broken:
                    # Lost mid-statement: the next attempt is a reconnect, on the schedule.
                    self._connect_failed(fault)
                raise fault from e
            raise

    async def query(self, sql: str) -> list[dict[str, Any]]:
        """Run one statement on the monitor connection (reconnecting); raises DatabaseError."""
        async with self._lock:
            return await self._statement(sql)

    async def poll(self) -> Sample:
        """Ask the replica for its status now; never raises (but for cancellation)."""
        self.polls += 1
        wall, mono = time.time(), time.monotonic()
        try:
            async with self._lock:
                await self._ensure()
                assert self.flavor is not None
                rows = await self._statement(self.flavor.replica_status_statement)
            status = self._pick(rows)
            if status is not None:
                sample = Sample(wall, mono, status)
            else:
                missing = f"{self.where}: no replication channel {self.channel!r}"
                sample = Sample(wall, mono, None, missing, NotAReplicaError(
                    missing, fix="check replica.channel, or set up replication on this server"))
        except DatabaseError as e:
            self.failures += 1
            sample = Sample(wall, mono, None, str(e), e)
        except Exception as e:  # a status row lagd cannot read: say so, keep polling
            self.failures += 1
            sample = Sample(wall, mono, None, f"{self.where}: {e}", e if isinstance(e, LagdError) else None)
        self.latest = sample
        return sample

    async def applied_gtids(self) -> str | None:
        """The GTIDs the SQL thread has applied (:attr:`ServerFlavor.applied_gtids_statement`),
        as the server spells them; None where the flavor has no such statement. Raises
        DatabaseError. Unlike :meth:`poll` this leaves :attr:`latest` alone: it is a
        position, not a status."""
        async with self._lock:
            await self._ensure()
            assert self.flavor is not None
            sql = self.flavor.applied_gtids_statement
            if sql is None:
                return None
            rows = await self._statement(sql)
        value = rows[0]["gtids"] if rows else None
        return None if value is None else str(value)

    def _pick(self, rows: list[dict[str, Any]]) -> ReplicaStatus | None:
        assert self.flavor is not None
        statuses = [parse_replica_status(r, self.flavor) for r in rows]
        for s in statuses:
            if s.channel == self.channel:
                return s
        for s in statuses:
            if s.channel.casefold() == self.channel.casefold():
                return s
        return None

    async def _flavored(self, sql_of: Callable[[bool], str]) -> list[dict[str, Any]]:
        """The rows of a statement that MariaDB and MySQL spell differently (``sql_of(is_mariadb)``);
        the flavor is known once connected."""
        async with self._lock:
            await self._ensure()
            assert self.flavor is not None
            return await self._statement(sql_of(self.flavor.is_mariadb))

    async def applier_trx(self) -> ApplierTrx | None:
        """The SQL thread's open transaction and its rows changed so far (None: none open);
        raises DatabaseError when it cannot be asked (without PROCESS: access denied)."""
        return applier_trx(await self._flavored(applier_trx_sql))

    async def history_length(self) -> int | None:
        """InnoDB's purge history length (:func:`lagd.mysql.progress.history_length`);
        raises DatabaseError when it cannot be asked (without PROCESS: access denied)."""
        return history_length(await self._flavored(history_length_sql))

    async def connection_slots(self) -> Slots | None:
        """The replica's connection limits and use (:mod:`lagd.mysql.slots`); None when they
        cannot be read. Raises DatabaseError when the server cannot be asked at all."""
        limits = await self.query(LIMITS_SQL)
        connected = (await self.global_status("Threads_connected")).get("Threads_connected")
        try:
            own: list[dict[str, Any]] | None = await self.query(OWN_SQL)
        except DatabaseError as e:
            if e.broken:
                raise
            own = None  # no PROCESSLIST table (a later MySQL): lagd's own sessions are not counted
        return parse_slots(limits, connected, own)

    async def _show_global(self, what: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """``SHOW GLOBAL STATUS`` or ``VARIABLES``, only the rows of ``names``: one the
        server lacks (another version) is simply absent."""
        listed = ", ".join(f"'{n}'" for n in names)
        return await self.query(f"SHOW GLOBAL {what} WHERE Variable_name IN ({listed})")

    async def global_status(self, *names: str) -> dict[str, int]:
        """Counters from SHOW GLOBAL STATUS (missing ones are left out)."""
        rows = await self._show_global("STATUS", names)
        out = {}
        for r in rows:
            try:
                out[str(r["Variable_name"])] = int(r["Value"])
            except (TypeError, ValueError):
                continue
        return out

    async def variables(self, *names: str) -> dict[str, str]:
        """Global variables by name (missing ones are left out), names lower-cased."""
        rows = await self._show_global("VARIABLES", names)
        return {str(r["Variable_name"]).lower(): str(r["Value"]) for r in rows if r["Value"] is not None}

    async def variable(self, name: str) -> str | None:
        rows = await self.query(f"SELECT @@GLOBAL.{name} AS v")
        return None if not rows or rows[0]["v"] is None else str(rows[0]["v"])

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                # close() only drops the socket: QUIT could wait on a hung server.
                conn.close()
            except Exception:
                log.debug("closing the monitor connection failed", exc_info=True)

    async def close(self) -> None:
        self._drop()


def _text(row: Any) -> list[Any]:
    return [v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else v for v in row]
