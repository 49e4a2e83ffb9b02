"""One async connection that watches the replica: status, counters, settings.

The prefetch scheduler needs the SQL thread's position often (tens of times
a second while it works), the lag poller once a second; both read the latest
``ReplicaStatus`` from here instead of querying on their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lagd.mysql.replica import ReplicaStatus, ServerFlavor, parse_replica_status
from lagd.prefetch.pool import backoff_delay

log = logging.getLogger("lagd.mysql.monitor")


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the replica."""

    wall: float  # time.time() when it was taken
    mono: float
    status: ReplicaStatus | None  # None: not a replica / no such channel
    error: str | None = None  # set when the server could not be asked


class ReplicaMonitor:
    def __init__(self, connect: Callable[[], Awaitable[Any]], channel: str = "",
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._connect = connect
        self.channel = channel
        self._sleep = sleep
        self._conn: Any = None
        self.flavor: ServerFlavor | None = None
        self.latest: Sample | None = None
        self.polls = 0
        self.failures = 0
        self._attempt = 0
        self._next_try = 0.0
        self._lock = asyncio.Lock()  # one statement at a time on the one connection

    async def _ensure(self) -> Any:
        if self._conn is None:
            now = time.monotonic()
            if now < self._next_try:
                raise ConnectionError("waiting to reconnect")
            try:
                self._conn = await self._connect()
                rows = await self._rows("SELECT VERSION() AS version")
                self.flavor = ServerFlavor.from_version_string(str(rows[0]["version"]))
                self._attempt = 0
            except BaseException:
                self._conn = None
                self._next_try = now + backoff_delay(self._attempt, base=0.5, cap=15.0)
                self._attempt += 1
                raise
        return self._conn

    async def _rows(self, sql: str) -> list[dict[str, Any]]:
        async with self._conn.cursor() as cur:
            await cur.execute(sql)
            cols = [d[0] for d in cur.description or ()]
            return [dict(zip(cols, _text(r), strict=True)) for r in await cur.fetchall()]

    async def query(self, sql: str) -> list[dict[str, Any]]:
        """Run one statement on the monitor connection (reconnecting)."""
        async with self._lock:
            await self._ensure()
            try:
                return await self._rows(sql)
            except Exception:
                self._drop()
                raise

    async def poll(self) -> Sample:
        """Ask the replica for its status now; never raises."""
        self.polls += 1
        wall, mono = time.time(), time.monotonic()
        try:
            async with self._lock:
                await self._ensure()
                assert self.flavor is not None
                rows = await self._rows(self.flavor.replica_status_statement)
            status = self._pick(rows)
            sample = Sample(wall, mono, status,
                            None if status else f"no replication channel {self.channel!r} on the server")
        except Exception as e:
            self.failures += 1
            self._drop()
            sample = Sample(wall, mono, None, f"{type(e).__name__}: {e}")
        self.latest = sample
        return sample

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

    async def global_status(self, *names: str) -> dict[str, int]:
        """Counters from SHOW GLOBAL STATUS (missing ones are left out)."""
        like = " OR ".join(f"Variable_name = '{n}'" for n in names)
        rows = await self.query(f"SHOW GLOBAL STATUS WHERE {like}")
        out = {}
        for r in rows:
            try:
                out[str(r["Variable_name"])] = int(r["Value"])
            except (TypeError, ValueError):
                continue
        return out

    async def variable(self, name: str) -> str | None:
        rows = await self.query(f"SELECT @@GLOBAL.{name} AS v")
        return None if not rows or rows[0]["v"] is None else str(rows[0]["v"])

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                log.debug("closing the monitor connection failed", exc_info=True)
        self._conn = None

    async def close(self) -> None:
        self._drop()


def _text(row: Any) -> list[Any]:
    return [v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else v for v in row]
