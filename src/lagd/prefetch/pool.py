"""Concurrent probe SELECTs on the local replica, which they must never harm.

N workers, each owning one connection, take probes from a bounded queue. Every
session is set up so that a probe can only read and can never hold the SQL
thread up for long:

- ``TRANSACTION READ ONLY`` and autocommit: the server itself refuses writes,
  and each probe's metadata lock ends with the statement.
- ``READ UNCOMMITTED``: no read view and no undo-log walks; the probe wants the
  current pages (the ones the SQL thread will touch), not an old version.
- a server-side statement timeout (MariaDB ``max_statement_time``, MySQL
  ``MAX_EXECUTION_TIME``) and a short ``lock_wait_timeout``, so a probe queued
  behind a DDL's metadata lock gives up instead of adding to the queue.

The pool also refuses any text that is not a plain SELECT (defence in depth:
``rewrite`` only makes SELECTs). Driver: asyncmy, chosen by
tests/bench/bench_drivers.py (client CPU per probe about half of aiomysql's
and of PyMySQL in threads).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lagd.mysql.errors import kind_of

log = logging.getLogger("lagd.prefetch.pool")

_TIMEOUT_ERRORS = {1969, 3024}  # MariaDB ER_STATEMENT_TIMEOUT, MySQL ER_QUERY_TIMEOUT
_LOCK_WAIT_ERRORS = {1205}  # lock_wait_timeout on a metadata lock
_CONNECTION_ERRORS = {2002, 2003, 2006, 2013, 2055, 1927, 1053, 1152}
_LOCKING = re.compile(r"\bFOR\s+(UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b|\bINTO\b", re.I)


class ProbeLike(Protocol):
    @property
    def sql(self) -> str: ...
    @property
    def params(self) -> tuple[Any, ...]: ...


def session_setup(mariadb: bool, timeout_ms: int) -> list[str]:
    """The statements that make a probe session harmless (see module doc)."""
    stmts = ["SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED, READ ONLY",
             "SET SESSION lock_wait_timeout = 1",
             # The decoder gives TIMESTAMP values as UTC; compared in another
             # zone a key would point at the wrong page.
             "SET SESSION time_zone = '+00:00'"]
    if mariadb:
        stmts.append(f"SET SESSION max_statement_time = {timeout_ms / 1000:.3f}")
    else:
        stmts.append(f"SET SESSION MAX_EXECUTION_TIME = {int(timeout_ms)}")
    return stmts


def refuse_reason(sql: str) -> str | None:
    """Why this text must not run as a probe, or None when it may."""
    head = sql.lstrip()[:7].upper()
    if head != "SELECT " and head[:5] != "WITH ":
        return "not a SELECT"
    if ";" in sql:
        return "more than one statement"
    if _LOCKING.search(sql):
        return "locking read or INTO"
    return None


def backoff_delay(attempt: int, base: float = 0.2, cap: float = 10.0,
                  rng: Callable[[], float] = random.random) -> float:
    """Capped exponential backoff with full jitter: spread reconnects out."""
    return float(rng() * min(cap, base * (2 ** min(attempt, 16))))


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # "ok", "timeout", "lock_wait", "error", "refused", "dropped"
    rows: int  # rows the probe found (pages it warmed)
    seconds: float
    error: str | None = None
    kind: str | None = None  # lagd.mysql.errors.Kind of a failure (SCHEMA: the definition moved)


@dataclass(slots=True)
class PoolCounters:
    issued: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    refused: int = 0
    rows_found: int = 0
    latency_sum: float = 0.0
    reconnects: int = 0
    connected: int = 0


Connect = Callable[[], Awaitable[Any]]
Done = Callable[[Any, Any, Outcome], None]  # (probe, tag, outcome)


class ProbePool:
    """``submit()`` queues a probe (and an opaque tag); ``on_done`` hears back."""

    def __init__(self, connect: Connect, *, mariadb: bool, size: int, timeout_ms: int,
                 on_done: Done, queue_limit: int | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._connect = connect
        self._setup = session_setup(mariadb, timeout_ms)
        self.size = size
        self._on_done = on_done
        self._sleep = sleep
        self._queue: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue(queue_limit or size * 4)
        self._workers: list[asyncio.Task[None]] = []
        self.counters = PoolCounters()
        self.busy = 0
        self.last_error: str | None = None

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    @property
    def full(self) -> bool:
        return self._queue.full()

    def submit(self, probe: ProbeLike, tag: Any = None) -> bool:
        """Queue a probe; False (and nothing queued) when the queue is full."""
        try:
            self._queue.put_nowait((probe, tag))
        except asyncio.QueueFull:
            return False
        return True

    async def wait_room(self) -> None:
        """Until the queue has room (or the pool is idle)."""
        while self._queue.full():
            await asyncio.sleep(0.001)

    def drop_queued(self, keep: Callable[[Any], bool] = lambda _tag: False) -> int:
        """Throw away queued probes whose tag ``keep`` rejects (the SQL
        thread got there first: running them now would only cost)."""
        kept, dropped = [], 0
        while not self._queue.empty():
            probe, tag = self._queue.get_nowait()
            if keep(tag):
                kept.append((probe, tag))
            else:
                dropped += 1
                self._on_done(probe, tag, Outcome("dropped", 0, 0.0))
        for item in kept:
            self._queue.put_nowait(item)
        return dropped

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._worker(i), name=f"probe-{i}")
                         for i in range(self.size)]

    async def resize(self, size: int) -> None:
        """Change the number of connections (the controller tunes it)."""
        if size == self.size:
            return
        await self.close()
        self.size = size
        self.start()

    async def close(self) -> None:
        """Cancel the workers; a probe in flight is abandoned (its server-side
        timeout ends it), queued probes are dropped."""
        for t in self._workers:
            t.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        self.drop_queued()

    async def _open(self) -> Any:
        attempt = 0
        while True:
            try:
                conn = await self._connect()
                async with conn.cursor() as cur:
                    for stmt in self._setup:
                        await cur.execute(stmt)
                self.counters.connected += 1
                return conn
            except asyncio.CancelledError:
                raise
            except Exception as e:  # server down or restarting: keep trying, slowly
                self.last_error = f"connect: {e}"
                if attempt == 0:
                    log.warning("probe connection failed: %s; retrying with backoff", e)
                self.counters.reconnects += 1
                await self._sleep(backoff_delay(attempt))
                attempt += 1

    async def _worker(self, _n: int) -> None:
        conn: Any = None
        try:
            while True:
                probe, tag = await self._queue.get()
                reason = refuse_reason(probe.sql)
                if reason is not None:
                    self.counters.refused += 1
                    log.error("refused probe (%s): %.200s", reason, probe.sql)
                    self._on_done(probe, tag, Outcome("refused", 0, 0.0, reason))
                    continue
                if conn is None:
                    conn = await self._open()
                self.busy += 1
                t0 = time.perf_counter()
                try:
                    async with conn.cursor() as cur:
                        await cur.execute(probe.sql, probe.params)
                        found = len(await cur.fetchall())
                    outcome = Outcome("ok", found, time.perf_counter() - t0)
                    self.counters.succeeded += 1
                    self.counters.rows_found += found
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    outcome, broken = self._classify(e, time.perf_counter() - t0)
                    if broken:
                        _close_quietly(conn)
                        conn = None
                finally:
                    self.busy -= 1
                self.counters.issued += 1
                self.counters.latency_sum += outcome.seconds
                self._on_done(probe, tag, outcome)
        finally:
            if conn is not None:
                _close_quietly(conn)

    def _classify(self, e: Exception, seconds: float) -> tuple[Outcome, bool]:
        code = e.args[0] if e.args and isinstance(e.args[0], int) else None
        if code in _TIMEOUT_ERRORS:
            self.counters.timed_out += 1
            return Outcome("timeout", 0, seconds, str(e)), False
        if code in _LOCK_WAIT_ERRORS:
            self.counters.failed += 1
            return Outcome("lock_wait", 0, seconds, str(e)), False
        self.counters.failed += 1
        self.last_error = f"{type(e).__name__}: {e}"
        broken = code in _CONNECTION_ERRORS or code is None
        return Outcome("error", 0, seconds, self.last_error, kind_of(e)), broken


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # already gone
        log.debug("closing a probe connection failed", exc_info=True)
