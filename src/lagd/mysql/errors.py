"""Driver errors turned into lagd's: one class, a kind a DBA can act on, and the fix.

Every module outside ``lagd.mysql`` catches :class:`DatabaseError` (or
``DRIVER_ERRORS`` at the one place that calls a driver) and never looks at a
driver's exception types or at numeric error codes itself.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import asyncmy.errors
import pymysql.err

from lagd.errors import LagdError

# Client-side codes (CR_*) and server codes (ER_*) that mean the same to lagd.
ER_DBACCESS_DENIED: Final = 1044
ER_ACCESS_DENIED: Final = 1045
ER_BAD_DB: Final = 1049
ER_BAD_FIELD: Final = 1054
ER_DUP_ENTRY: Final = 1062
ER_PARSE_ERROR: Final = 1064
ER_TABLEACCESS_DENIED: Final = 1142
ER_NO_SUCH_TABLE: Final = 1146
ER_KEY_DOES_NOT_EXIST: Final = 1176
ER_LOCK_WAIT_TIMEOUT: Final = 1205
ER_SPECIFIC_ACCESS_DENIED: Final = 1227
ER_OPTION_PREVENTS_STATEMENT: Final = 1290
ER_STATEMENT_TIMEOUT_MARIADB: Final = 1969
ER_QUERY_TIMEOUT_MYSQL: Final = 3024
CR_CONNECTION_ERROR: Final = 2002
CR_CONN_HOST_ERROR: Final = 2003
CR_SERVER_GONE: Final = 2006
CR_SERVER_LOST: Final = 2013


class Kind(enum.StrEnum):
    UNREACHABLE = "unreachable"  # cannot connect: nothing listens, host down, socket missing
    AUTH = "auth"  # wrong user or password
    DENIED = "denied"  # connected, but a grant is missing
    LOST = "lost"  # the connection broke or a read timed out (server hung or restarted)
    TIMEOUT = "timeout"  # our own statement or lock-wait timeout ended a statement
    SCHEMA = "schema"  # no such table, column or index (DDL moved under us)
    OTHER = "other"


_BY_CODE: Final = {
    CR_CONNECTION_ERROR: Kind.UNREACHABLE, CR_CONN_HOST_ERROR: Kind.UNREACHABLE,
    CR_SERVER_GONE: Kind.LOST, CR_SERVER_LOST: Kind.LOST,
    ER_ACCESS_DENIED: Kind.AUTH,
    ER_DBACCESS_DENIED: Kind.DENIED, ER_TABLEACCESS_DENIED: Kind.DENIED,
    ER_SPECIFIC_ACCESS_DENIED: Kind.DENIED,
    ER_STATEMENT_TIMEOUT_MARIADB: Kind.TIMEOUT, ER_QUERY_TIMEOUT_MYSQL: Kind.TIMEOUT,
    ER_LOCK_WAIT_TIMEOUT: Kind.TIMEOUT,
    ER_BAD_DB: Kind.SCHEMA, ER_NO_SUCH_TABLE: Kind.SCHEMA, ER_BAD_FIELD: Kind.SCHEMA,
    ER_KEY_DOES_NOT_EXIST: Kind.SCHEMA,
}

_FIX: Final = {
    Kind.UNREACHABLE: "check that the server runs and replica.host/port/socket in the config",
    Kind.AUTH: "check replica.user and the password (replica.password_file) against the server's account",
    Kind.DENIED: "grant the lagd account what docs/install.md lists (lagctl doctor shows what is missing)",
}


class DatabaseError(LagdError):
    """A MySQL/MariaDB failure, said once in lagd's words."""

    def __init__(self, message: str, *, kind: Kind, code: int | None = None, where: str = "",
                 fix: str | None = None) -> None:
        super().__init__(message, fix if fix is not None else _FIX.get(kind))
        self.kind = kind
        self.code = code
        self.where = where


# What may come out of a driver call: catch these at the call, translate, re-raise.
# asyncmy raises its own classes with the same names as PyMySQL's.
DRIVER_ERRORS: Final[tuple[type[BaseException], ...]] = (
    pymysql.err.MySQLError, asyncmy.errors.MySQLError, OSError, EOFError)


def code_of(e: BaseException) -> int | None:
    args = getattr(e, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def kind_of(e: BaseException) -> Kind:
    code = code_of(e)
    if code in _BY_CODE:
        return _BY_CODE[code]
    if isinstance(e, TimeoutError | ConnectionError | EOFError) or type(e).__name__ == "InterfaceError":
        return Kind.LOST
    if isinstance(e, OSError):
        return Kind.UNREACHABLE
    return Kind.OTHER


def translate(e: BaseException, where: str) -> DatabaseError:
    """``where``: the server, e.g. ``replica 127.0.0.1:3306``; it starts the message."""
    if isinstance(e, DatabaseError):
        return e
    code = code_of(e)
    args: tuple[Any, ...] = tuple(getattr(e, "args", ()))
    text = str(args[1]) if len(args) >= 2 else (str(e) or type(e).__name__)
    kind = kind_of(e)
    if kind is Kind.LOST and code is None:
        text = f"no answer ({type(e).__name__}{': ' + str(e) if str(e) else ''})"
    prefix = f"{where}: " if where else ""
    return DatabaseError(f"{prefix}{text}" + (f" (error {code})" if code else ""), kind=kind, code=code,
                         where=where)
