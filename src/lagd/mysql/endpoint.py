"""Where and as whom lagd connects to its replica, and how every session is opened."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncmy


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and as whom lagd connects to its replica."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "lagd"
    password: str = ""
    socket: str = ""
    connect_timeout: float = 5.0

    def pymysql_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"user": self.user, "password": self.password,
                              "connect_timeout": self.connect_timeout, "autocommit": True}
        if self.socket:
            kw["unix_socket"] = self.socket
        else:
            kw.update(host=self.host, port=self.port)
        return kw

    def async_connect(self) -> Callable[[], Awaitable[Any]]:
        async def connect() -> Any:
            kw: dict[str, Any] = {"user": self.user, "password": self.password, "autocommit": True,
                                  "connect_timeout": int(max(1, self.connect_timeout))}
            if self.socket:
                kw["unix_socket"] = self.socket
            else:
                kw.update(host=self.host, port=self.port)
            return await asyncmy.connect(**kw)
        return connect

    @property
    def where(self) -> str:
        """How log lines and errors name the server: ``replica 127.0.0.1:3306``."""
        return f"replica {self.socket or f'{self.host}:{self.port}'}"

    def __repr__(self) -> str:  # never show the password
        where = self.socket or f"{self.host}:{self.port}"
        return f"Endpoint({self.user}@{where})"


def hardening_sql(mariadb: bool, statement_timeout_s: float, *, lock_wait_timeout_s: int = 1) -> list[str]:
    """Statements that make any lagd session harmless to the replica.

    READ ONLY: the server refuses writes whatever a bug asks for. A server-side
    statement timeout (MariaDB ``max_statement_time`` covers every statement;
    MySQL ``MAX_EXECUTION_TIME`` covers SELECTs) and a short
    ``lock_wait_timeout``, so a session queued behind DDL's metadata lock gives
    up instead of holding the SQL thread up.
    """
    stmts = ["SET SESSION TRANSACTION READ ONLY",
             f"SET SESSION lock_wait_timeout = {int(lock_wait_timeout_s)}"]
    if mariadb:
        stmts.append(f"SET SESSION max_statement_time = {statement_timeout_s:.3f}")
    else:
        stmts.append(f"SET SESSION MAX_EXECUTION_TIME = {max(1, round(statement_timeout_s * 1000))}")
    return stmts
