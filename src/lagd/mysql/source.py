"""A writer connection to the SOURCE, for work the user asked lagd to do there (``lagctl load``).

Unlike every replica session this one writes: it runs the user's own load.
It enables LOAD DATA LOCAL on the client side, has read and write timeouts
so a hung server cannot hang the command forever, and runs with autocommit
off so each chunk and its progress row commit together. Every driver error
leaves here as a :class:`~lagd.mysql.errors.DatabaseError` with a fix the
user of ``--source`` can act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import pymysql
import pymysql.cursors
from pymysql.connections import Connection

from lagd.mysql.errors import DRIVER_ERRORS, DatabaseError, Kind, code_of, translate

__all__ = ["LOCAL_INFILE_FIX", "SourceLogin", "SourceWriter"]

# Server refusals of LOAD DATA LOCAL: MariaDB's "command not allowed with
# this version" and MySQL 8's "loading local data is disabled".
ER_NOT_ALLOWED_COMMAND: Final = 1148
ER_CLIENT_LOCAL_FILES_DISABLED: Final = 3948
LOCAL_INFILE_FIX: Final = "run SET GLOBAL local_infile = 1 on the source (and local_infile=1 in its my.cnf)"

_FIX: Final = {
    Kind.UNREACHABLE: "check the host and port in --source, and that the server runs",
    Kind.AUTH: "check the user and password given with --source (or --password-file)",
    Kind.DENIED: "grant the --source account INSERT on the table, and CREATE, INSERT, UPDATE, SELECT "
                 "on the progress table's schema",
}


@dataclass(frozen=True, slots=True)
class SourceLogin:
    host: str
    port: int
    user: str | None
    password: str
    connect_timeout: float = 5.0
    read_timeout: float = 600.0  # one chunk's LOAD DATA must finish within this
    write_timeout: float = 600.0

    @property
    def where(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"source {host}:{self.port}"

    def __repr__(self) -> str:  # never show the password
        return f"SourceLogin({self.user}@{self.host}:{self.port})"


def _error(e: BaseException, where: str) -> DatabaseError:
    code = code_of(e)
    if code in (ER_NOT_ALLOWED_COMMAND, ER_CLIENT_LOCAL_FILES_DISABLED):
        return DatabaseError(f"{where}: LOAD DATA LOCAL is disabled on the server (error {code})",
                             kind=Kind.DENIED, code=code, where=where, fix=LOCAL_INFILE_FIX)
    err = translate(e, where)
    fix = _FIX.get(err.kind, err.fix)
    return DatabaseError(err.message, kind=err.kind, code=err.code, where=where, fix=fix)


class SourceWriter:
    """One blocking connection to the source; not thread-safe."""

    def __init__(self, login: SourceLogin) -> None:
        self.login = login
        self.where = login.where
        try:
            self._conn: Connection[Any] = pymysql.connect(
                host=login.host, port=login.port, user=login.user, password=login.password,
                connect_timeout=login.connect_timeout, read_timeout=login.read_timeout,
                write_timeout=login.write_timeout, autocommit=False, local_infile=True,
                charset="utf8mb4", cursorclass=pymysql.cursors.Cursor)
        except DRIVER_ERRORS as e:
            raise _error(e, self.where) from None

    def query(self, sql: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of one statement (inside the current transaction, if one is open)."""
        try:
            with self._conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except DRIVER_ERRORS as e:
            raise _error(e, self.where) from None

    def execute(self, sql: str, args: Sequence[Any] | None = None) -> tuple[int, int]:
        """Run one statement: (affected rows, warnings)."""
        try:
            with self._conn.cursor() as cur:
                affected = cur.execute(sql, args)
                return int(affected), int(cur.warning_count)
        except DRIVER_ERRORS as e:
            raise _error(e, self.where) from None

    def commit(self) -> None:
        try:
            self._conn.commit()
        except DRIVER_ERRORS as e:
            raise _error(e, self.where) from None

    def rollback(self) -> None:
        try:
            self._conn.rollback()
        except DRIVER_ERRORS as e:
            raise _error(e, self.where) from None

    def close(self) -> None:
        # Closing a broken connection may fail; the server rolls back what was open either way.
        with contextlib.suppress(*DRIVER_ERRORS):
            self._conn.close()
