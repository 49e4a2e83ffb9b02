"""A blocking (PyMySQL) session used from asyncio without ever blocking the loop.

Heartbeat reads, settings, information_schema: small queries that are easier
with a blocking driver. Each call runs in a daemon thread, one at a time, with
a socket read timeout *and* an asyncio deadline: a hung server costs the caller
one timeout, never the event loop, and never keeps the process alive after
SIGTERM (a daemon thread is abandoned at exit). Any driver failure drops the
connection, so the next call reconnects; the caller sees :class:`DatabaseError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql
import pymysql.cursors

from lagd.mysql.endpoint import Endpoint, hardening_sql
from lagd.mysql.errors import DRIVER_ERRORS, DatabaseError, Kind, translate

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a fresh daemon thread; cancelling the await abandons it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def done(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def body() -> None:
        try:
            value = fn()
        except BaseException as e:
            with contextlib.suppress(RuntimeError):  # loop closed: nobody waits any more
                loop.call_soon_threadsafe(done, False, e)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(done, True, value)

    threading.Thread(target=body, name="lagd-blocking", daemon=True).start()
    return await fut


class BlockingSession:
    """One hardened connection to the replica, for blocking queries run off the loop."""

    def __init__(self, endpoint: Endpoint, *, statement_timeout: float = 5.0,
                 read_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self.statement_timeout = statement_timeout
        self.read_timeout = read_timeout
        self._conn: Any = None
        self._lock = asyncio.Lock()

    @property
    def where(self) -> str:
        return self.endpoint.where

    def _open(self) -> Any:
        conn = pymysql.connect(**self.endpoint.pymysql_kwargs(), read_timeout=self.read_timeout,
                               write_timeout=self.read_timeout, cursorclass=pymysql.cursors.DictCursor)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION() AS v")
                row = cur.fetchone() or {}
                mariadb = "mariadb" in str(row.get("v", "")).lower()
                for sql in hardening_sql(mariadb, self.statement_timeout):
                    cur.execute(sql)
        except BaseException:
            conn.close()
            raise
        return conn

    def _call(self, fn: Callable[[Any], T]) -> T:
        if self._conn is None:
            self._conn = self._open()
        return fn(self._conn)

    async def run(self, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` with a PyMySQL connection (DictCursor rows) in a thread."""
        async with self._lock:
            try:
                return await asyncio.wait_for(in_daemon_thread(lambda: self._call(fn)), self.read_timeout + 2)
            except TimeoutError as e:
                self.close()
                raise DatabaseError(f"{self.where}: no answer in {self.read_timeout + 2:g} s", kind=Kind.LOST,
                                    where=self.where) from e
            except DRIVER_ERRORS as e:
                self.close()
                raise translate(e, self.where) from e

    async def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        def q(conn: Any) -> list[dict[str, Any]]:
            with conn.cursor() as cur:
                cur.execute(sql, args or None)
                return list(cur.fetchall())
        return await self.run(q)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
