"""Blocking (PyMySQL) sessions: run off the event loop, and every statement's errors in lagd's words.

Heartbeat reads, settings, information_schema: small queries that are easier
with a blocking driver. :class:`BlockingSession` runs each call in a daemon
thread, one at a time, with a socket read timeout *and* an asyncio deadline:
a hung server costs the caller one timeout, never the event loop, and never
keeps the process alive after SIGTERM (a daemon thread is abandoned at exit).
Any driver failure drops the connection, so the next call reconnects; the
caller sees :class:`DatabaseError`. :func:`query` and :func:`execute` are what
code outside this package runs on a blocking connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql.cursors

from lagd.mysql.endpoint import Endpoint, where_of
from lagd.mysql.errors import DRIVER_ERRORS, DatabaseError, Kind, translate
from lagd.threadname import name_this_thread

T = TypeVar("T")


def query(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of ``sql`` as dicts (whatever the connection's cursor class);
    driver errors come out as :class:`DatabaseError`."""
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(sql, args or None)
            return list(cur.fetchall())
    except DRIVER_ERRORS as e:
        raise translate(e, where_of(conn)) from e


def execute(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> int:
    """Run a statement without rows; the number of rows it changed."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args or None)
            return int(cur.rowcount)
    except DRIVER_ERRORS as e:
        raise translate(e, where_of(conn)) from e


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
        name_this_thread("lagd-blocking")
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
    """One hardened connection to the replica, for blocking queries run off the loop.

    ``fn`` passed to :meth:`run` gets a PyMySQL connection with dict rows and
    may use :func:`query`/:func:`execute` on it; whatever driver error or
    connection-kind :class:`DatabaseError` comes out drops the connection.
    """

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
        return self.endpoint.connect_blocking(statement_timeout=self.statement_timeout,
                                              read_timeout=self.read_timeout)

    def _call(self, fn: Callable[[Any], T]) -> T:
        if self._conn is None:
            self._conn = self._open()
        return fn(self._conn)

    @property
    def deadline(self) -> float:
        """Seconds one call may take: a connect and a read, and a little slack."""
        return self.endpoint.connect_timeout + self.read_timeout + 1.0

    async def run(self, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` with a PyMySQL connection (dict rows) in a daemon thread."""
        async with self._lock:
            try:
                return await asyncio.wait_for(in_daemon_thread(lambda: self._call(fn)), self.deadline)
            except TimeoutError as e:
                self._abandon()
                raise DatabaseError(f"{self.where}: no answer in {self.deadline:g} s", kind=Kind.LOST,
                                    where=self.where) from e
            except DatabaseError:
                # Even an error that leaves the session usable costs only a
                # reconnect; telling them apart is how subsystems died for good.
                self.close()
                raise
            except DRIVER_ERRORS as e:
                self.close()
                raise translate(e, self.where) from e

    async def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return await self.run(lambda conn: query(conn, sql, args))

    def _abandon(self) -> None:
        # The thread that owns the connection may still be blocked in it:
        # closing from here could race it, so the socket is shut down instead
        # and the thread ends on its own read error.
        conn, self._conn = self._conn, None
        if conn is not None:
            sock = getattr(conn, "_sock", None)
            with contextlib.suppress(Exception):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Never waits: a call may still be blocked reading this connection
        (a hung server), and closing its buffered socket file from here would
        wait for that read's lock until the read timeout (seen: 7 s past
        SIGTERM). Shut the socket down, which wakes the reader, and leave the
        polite close to a daemon thread."""
        conn = self._conn
        self._abandon()
        if conn is not None:
            def quietly() -> None:
                with contextlib.suppress(Exception):
                    conn.close()
            threading.Thread(target=quietly, name="lagd-close", daemon=True).start()
