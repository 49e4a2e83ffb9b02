"""Where and as whom lagd connects, and how every session is opened and hardened."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import asyncmy
import pymysql
import pymysql.cursors
from asyncmy.cursors import DictCursor, SSCursor

from lagd.mysql.errors import DRIVER_ERRORS, translate

# What a blocking connection is, for annotations outside this package.
BlockingConnection = pymysql.connections.Connection


class ReplicaSettingsLike(Protocol):
    """What :meth:`Endpoint.of_replica` reads: the config's ``[replica]``."""

    host: str
    port: int
    user: str
    socket: str
    connect_timeout: float

    def password(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and as whom lagd connects: its replica, or (the heartbeat writer) a source."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "lagd"
    password: str = ""
    socket: str = ""
    connect_timeout: float = 5.0
    role: str = "replica"  # names the server in messages and fixes ("replica.user ...")

    @classmethod
    def of_replica(cls, r: ReplicaSettingsLike) -> Endpoint:
        """The replica of the config (reads the password: may raise CredentialError)."""
        return cls(r.host, r.port, r.user, r.password(), r.socket, r.connect_timeout)

    def pymysql_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"user": self.user, "password": self.password,
                              "connect_timeout": self.connect_timeout, "autocommit": True}
        if self.socket:
            kw["unix_socket"] = self.socket
        else:
            kw.update(host=self.host, port=self.port)
        return kw

    def async_connect(self) -> Callable[..., Awaitable[Any]]:
        """An asyncmy connect function; the caller hardens the session (the
        monitor and the probe pool each know their own setup) and bounds every
        await with a deadline: asyncmy has no read timeout. ``prepared``: how
        many prepared statements the connection keeps for queries run with
        arguments (asyncmy's statement cache; 0: none, every query is text)."""
        async def connect(prepared: int = 0) -> Any:
            kw: dict[str, Any] = {"user": self.user, "password": self.password, "autocommit": True,
                                  "connect_timeout": int(max(1, self.connect_timeout)),
                                  "stmt_cache_size": prepared}
            if self.socket:
                kw["unix_socket"] = self.socket
            else:
                kw.update(host=self.host, port=self.port)
            return await asyncmy.connect(**kw)
        return connect

    def connect_blocking(self, *, statement_timeout: float = 5.0, read_timeout: float = 10.0,
                         read_only: bool = True, lock_wait_timeout: int = 1,
                         setup: Sequence[str] = (), dict_rows: bool = True) -> BlockingConnection[Any]:
        """A hardened PyMySQL connection: read and write timeouts on the socket,
        then :func:`hardening_sql` (``read_only=False`` only for the heartbeat
        writer on a source), then ``setup``.

        Raises :class:`~lagd.mysql.errors.DatabaseError`. Blocking: call it
        from a thread (or a command-line tool), never from the event loop.
        """
        kw = self.pymysql_kwargs()
        if dict_rows:
            kw["cursorclass"] = pymysql.cursors.DictCursor
        try:
            conn = pymysql.connect(**kw, read_timeout=read_timeout, write_timeout=read_timeout)
        except DRIVER_ERRORS as e:
            raise translate(e, self.where) from e
        try:
            # The handshake's version is enough to pick the dialect: no round trip.
            mariadb = "mariadb" in str(getattr(conn, "server_version", "")).lower()
            with conn.cursor() as cur:
                for sql in [*hardening_sql(mariadb, statement_timeout, lock_wait_timeout_s=lock_wait_timeout,
                                           read_only=read_only), *setup]:
                    cur.execute(sql)
        except DRIVER_ERRORS as e:
            conn.close()
            raise translate(e, self.where) from e
        conn.lagd_where = self.where  # type: ignore[attr-defined]  # how errors on it name the server
        return conn

    @property
    def address(self) -> str:
        return self.socket or f"{self.host}:{self.port}"

    @property
    def where(self) -> str:
        """How log lines and errors name the server: ``replica 127.0.0.1:3306``."""
        return f"{self.role} {self.address}"

    def __repr__(self) -> str:  # never show the password
        return f"Endpoint({self.role} {self.user}@{self.address})"


LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# Who a session is talking to, and as whom: read over TCP, then through the socket.
IDENTITY_SQL = ("SELECT @@socket AS socket, @@port AS port, @@server_id AS server_id,"
                " @@datadir AS datadir, CURRENT_USER() AS account")
_GRANTEE = re.compile(r" TO .*$")


Query = Callable[[str], Awaitable[list[dict[str, Any]]]]  # one statement, rows as dicts


async def _who(query: Query) -> tuple[dict[str, Any], list[str]]:
    """:data:`IDENTITY_SQL`'s row and the session's ``SHOW GRANTS`` lines."""
    identity = (await query(IDENTITY_SQL))[0]
    return identity, [str(next(iter(r.values()))) for r in await query("SHOW GRANTS")]


async def local_socket(endpoint: Endpoint, query: Query, timeout: float = 3.0) -> tuple[Endpoint | None, str]:
    """The same server through its unix socket, or None; and why, for the log.

    lagd runs beside its replica, often configured as 127.0.0.1: over TCP
    loopback every query's ``send()`` delivers the packet and wakes the server
    in lagd's time, a fifth of the prefetcher's event loop (docs/prefetch.md).
    ``query`` runs a statement on a hardened TCP session (the monitor's). The
    socket is used only when a session through it reaches the same server
    (port, server id, data directory) with the same privileges: a socket
    connection logs in as ``user@localhost``, which may be another account,
    and in a container ``@@socket`` may name another server's file.
    """
    if endpoint.socket:
        return None, "the configured socket is in use"
    if endpoint.host not in LOOPBACK:
        return None, f"{endpoint.host} is not this host"
    try:
        identity, grants = await _who(query)
    except Exception as e:  # the monitor says the replica's faults: TCP it stays
        return None, f"who the server is not read ({e})"
    path = str(identity.get("socket") or "")
    if not path:
        return None, "the server has no socket"
    try:
        # No access(W_OK): under the unit's ProtectSystem=strict it says EROFS for a
        # socket that connect() reaches all the same. Connecting is the test.
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return None, f"{path} is not a socket"
    except OSError as e:
        return None, f"{path}: {e.strerror or e}"
    via = replace(endpoint, socket=path)
    try:
        conn = await asyncio.wait_for(via.async_connect()(), timeout)
    except Exception as e:  # another account, a full server: TCP it stays
        return None, f"{path}: {translate(e, via.where).message}"
    try:
        mariadb = "mariadb" in str(getattr(conn, "server_version", "")).lower()

        async def ask(sql: str) -> list[dict[str, Any]]:
            async with conn.cursor(DictCursor) as cur:
                await cur.execute(sql)
                return list(await cur.fetchall())

        async def hardened_who() -> tuple[dict[str, Any], list[str]]:
            for sql in hardening_sql(mariadb, timeout):  # as every lagd session is
                await ask(sql)
            return await _who(ask)
        there, their_grants = await asyncio.wait_for(hardened_who(), timeout)
    except Exception as e:
        return None, f"{path}: {translate(e, via.where).message}"
    finally:
        conn.close()
    for key in ("port", "server_id", "datadir"):
        if str(there.get(key)) != str(identity.get(key)):
            return None, f"{path} is another server ({key} {there.get(key)} != {identity.get(key)})"
    if there.get("account") != identity.get("account") and \
            sorted(_GRANTEE.sub("", g) for g in their_grants) != sorted(_GRANTEE.sub("", g) for g in grants):
        return None, (f"{path} logs in as {there.get('account')}, whose grants differ from"
                      f" {identity.get('account')}'s")
    return via, f"the replica's own socket {path}: the same server and grants as over TCP"


def hardening_sql(mariadb: bool, statement_timeout_s: float, *, lock_wait_timeout_s: int = 1,
                  read_only: bool = True) -> list[str]:
    """Statements that make any lagd session harmless to the server.

    READ ONLY: the server refuses writes whatever a bug asks for. A server-side
    statement timeout (MariaDB ``max_statement_time`` covers every statement;
    MySQL ``MAX_EXECUTION_TIME`` covers SELECTs) and a short
    ``lock_wait_timeout``, so a session queued behind DDL's metadata lock gives
    up instead of holding the SQL thread up. ``read_only=False`` is for the one
    session that writes: the heartbeat writer, on the source.
    """
    if statement_timeout_s <= 0:
        # 0 means "no limit" to both servers: never produce it by accident.
        raise ValueError(f"a statement timeout must be positive, not {statement_timeout_s!r}")
    stmts = ["SET SESSION TRANSACTION READ ONLY"] if read_only else []
    stmts.append(f"SET SESSION lock_wait_timeout = {max(1, int(lock_wait_timeout_s))}")
    if mariadb:
        stmts.append(f"SET SESSION max_statement_time = {statement_timeout_s:.3f}")
    else:
        stmts.append(f"SET SESSION MAX_EXECUTION_TIME = {max(1, round(statement_timeout_s * 1000))}")
    return stmts


def streaming_cursor(conn: Any) -> Any:
    """A cursor of an asyncmy connection that reads its result row by row from the socket
    instead of holding it whole (fetchall): for results of unknown size."""
    return conn.cursor(SSCursor)


def where_of(conn: Any) -> str:
    """How to name the server behind a blocking connection in a message."""
    where = getattr(conn, "lagd_where", None)
    if where:
        return str(where)
    sock = getattr(conn, "unix_socket", None)
    return f"server {sock}" if sock else f"server {getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"
