"""Driver errors turned into lagd's: one class, a kind a DBA can act on, and the fix.

Every module outside ``lagd.mysql`` catches :class:`DatabaseError` and
branches on its ``kind`` or on ``code`` compared with the constants here; it
never looks at a driver's exception types or spells a numeric code itself.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import asyncmy.errors
import pymysql.err

from lagd.errors import LagdError

# Server codes (ER_*) and client codes (CR_*) lagd reacts to.
ER_CON_COUNT_ERROR: Final = 1040  # max_connections reached
ER_DBACCESS_DENIED: Final = 1044
ER_ACCESS_DENIED: Final = 1045
ER_BAD_DB: Final = 1049
ER_SERVER_SHUTDOWN: Final = 1053
ER_BAD_FIELD: Final = 1054
ER_DUP_ENTRY: Final = 1062
ER_PARSE_ERROR: Final = 1064
ER_TABLEACCESS_DENIED: Final = 1142
ER_NO_SUCH_TABLE: Final = 1146
ER_ABORTED_CONNECTION: Final = 1152
ER_KEY_DOES_NOT_EXIST: Final = 1176
ER_TOO_MANY_USER_CONNECTIONS: Final = 1203  # the global max_user_connections
ER_USER_LIMIT_REACHED: Final = 1226  # the account's MAX_USER_CONNECTIONS (and other resource limits)
ER_LOCK_WAIT_TIMEOUT: Final = 1205
ER_LOCK_DEADLOCK: Final = 1213  # InnoDB chose this transaction as a deadlock's victim
ER_SPECIFIC_ACCESS_DENIED: Final = 1227
ER_OPTION_PREVENTS_STATEMENT: Final = 1290  # --read-only / --super-read-only
ER_CONNECTION_KILLED: Final = 1927  # MariaDB: KILL or shutdown ended the session
ER_STATEMENT_TIMEOUT_MARIADB: Final = 1969  # max_statement_time
ER_QUERY_TIMEOUT_MYSQL: Final = 3024  # max_execution_time
CR_CONNECTION_ERROR: Final = 2002  # socket
CR_CONN_HOST_ERROR: Final = 2003  # TCP
CR_UNKNOWN_HOST: Final = 2005
CR_SERVER_GONE: Final = 2006
CR_SERVER_LOST: Final = 2013
CR_SERVER_LOST_EXTENDED: Final = 2055


class Kind(enum.StrEnum):
    UNREACHABLE = "unreachable"  # cannot connect: nothing listens, host down, socket missing
    AUTH = "auth"  # wrong user or password
    DENIED = "denied"  # connected, but a grant is missing
    LOST = "lost"  # the connection broke or a read timed out (server hung or restarted)
    TIMEOUT = "timeout"  # our own statement or lock-wait timeout ended a statement
    SCHEMA = "schema"  # no such table, column or index (DDL moved under us)
    READ_ONLY = "read_only"  # a write refused by read_only/super_read_only
    FULL = "full"  # no connection slot left: max_connections or the account's limit
    OTHER = "other"


_BY_CODE: Final = {
    CR_CONNECTION_ERROR: Kind.UNREACHABLE, CR_CONN_HOST_ERROR: Kind.UNREACHABLE,
    CR_UNKNOWN_HOST: Kind.UNREACHABLE,
    CR_SERVER_GONE: Kind.LOST, CR_SERVER_LOST: Kind.LOST, CR_SERVER_LOST_EXTENDED: Kind.LOST,
    ER_SERVER_SHUTDOWN: Kind.LOST, ER_ABORTED_CONNECTION: Kind.LOST, ER_CONNECTION_KILLED: Kind.LOST,
    ER_ACCESS_DENIED: Kind.AUTH,
    ER_DBACCESS_DENIED: Kind.DENIED, ER_TABLEACCESS_DENIED: Kind.DENIED,
    ER_SPECIFIC_ACCESS_DENIED: Kind.DENIED,
    ER_STATEMENT_TIMEOUT_MARIADB: Kind.TIMEOUT, ER_QUERY_TIMEOUT_MYSQL: Kind.TIMEOUT,
    ER_LOCK_WAIT_TIMEOUT: Kind.TIMEOUT,
    ER_BAD_DB: Kind.SCHEMA, ER_NO_SUCH_TABLE: Kind.SCHEMA, ER_BAD_FIELD: Kind.SCHEMA,
    ER_KEY_DOES_NOT_EXIST: Kind.SCHEMA,
    ER_OPTION_PREVENTS_STATEMENT: Kind.READ_ONLY,
    ER_CON_COUNT_ERROR: Kind.FULL, ER_TOO_MANY_USER_CONNECTIONS: Kind.FULL, ER_USER_LIMIT_REACHED: Kind.FULL,
}

# The kinds after which a session cannot be trusted (and is reopened).
CONNECTION_KINDS: Final = frozenset({Kind.UNREACHABLE, Kind.AUTH, Kind.LOST})


def default_fix(kind: Kind, role: str = "replica") -> str | None:
    """What a DBA does about ``kind`` on the ``role`` ("replica"/"source") server."""
    if kind is Kind.UNREACHABLE:
        return f"check that the server runs and {role}.host/port/socket in the config"
    if kind is Kind.AUTH:
        return (f"check {role}.user and the password ({role}.password_file) against the server's account; "
                "the account needs a host part matching this client")
    if kind is Kind.DENIED:
        return "grant the lagd account what docs/install.md lists (lagctl doctor shows what is missing)"
    if kind is Kind.FULL:
        return (f"the {role} has no connection slot left: raise its max_connections (or the lagd account's"
                " MAX_USER_CONNECTIONS), or lower prefetch.connections; lagd retries")
    if kind is Kind.LOST:
        return ("none needed if the server was restarting: lagd reconnects by itself; "
                "check the server if it lasts")
    return None


class DatabaseError(LagdError):
    """A MySQL/MariaDB failure, said once in lagd's words."""

    def __init__(self, message: str, *, kind: Kind, code: int | None = None, where: str = "",
                 fix: str | None = None, detail: str | None = None) -> None:
        role = where.split(" ", 1)[0] if where else "replica"
        super().__init__(message, fix if fix is not None else default_fix(kind, role))
        self.kind = kind
        self.code = code
        self.where = where
        self.detail = detail if detail is not None else message  # the server's or driver's own words

    @property
    def broken(self) -> bool:
        """Whether the session that raised this must be reopened."""
        return self.kind in CONNECTION_KINDS

    def __reduce__(self) -> Any:  # picklable, e.g. across a process pool
        return (_rebuild, (self.message, self.kind, self.code, self.where, self.fix, self.detail))


def _rebuild(message: str, kind: Kind, code: int | None, where: str, fix: str | None,
             detail: str) -> DatabaseError:
    return DatabaseError(message, kind=kind, code=code, where=where, fix=fix, detail=detail)


# What may come out of a driver call: catch these at the call, translate, re-raise.
# asyncmy raises its own classes with the same names as PyMySQL's.
DRIVER_ERRORS: Final[tuple[type[BaseException], ...]] = (
    pymysql.err.MySQLError, asyncmy.errors.MySQLError, OSError, EOFError)


def is_database_error(e: BaseException) -> bool:
    """Whether ``e`` came from a server or a driver (translated or not)."""
    return isinstance(e, (DatabaseError, *DRIVER_ERRORS))


def code_of(e: BaseException) -> int | None:
    if isinstance(e, DatabaseError):
        return e.code
    if isinstance(e, OSError):
        return None  # its number is an errno, not a server's code
    args = getattr(e, "args", ())
    code = args[0] if args and isinstance(args[0], int) and not isinstance(args[0], bool) else None
    # InterfaceError(0, '') (a closed connection) carries 0: no server code.
    return code or None


def kind_of(e: BaseException) -> Kind:
    if isinstance(e, DatabaseError):
        return e.kind
    code = code_of(e)
    if code in _BY_CODE:
        return _BY_CODE[code]
    if isinstance(e, TimeoutError | ConnectionError | EOFError) or type(e).__name__ == "InterfaceError":
        return Kind.LOST
    if isinstance(e, OSError):
        return Kind.UNREACHABLE
    return Kind.OTHER


def translate(e: BaseException, where: str, *, fix: str | None = None) -> DatabaseError:
    """``e`` as a :class:`DatabaseError`.

    ``where`` names the server (``replica 127.0.0.1:3306``) and starts the
    message; ``fix`` replaces the kind's default fix.
    """
    if isinstance(e, DatabaseError):
        return e
    code = code_of(e)
    args: tuple[Any, ...] = tuple(getattr(e, "args", ()))
    text = str(args[1]) if len(args) >= 2 and str(args[1]) else (str(e) or type(e).__name__)
    kind = kind_of(e)
    if kind is Kind.LOST and code is None:
        detail = text if text not in (type(e).__name__, "(0, '')") else ""
        text = f"connection lost ({type(e).__name__}{': ' + detail if detail else ''})"
    prefix = f"{where}: " if where else ""
    return DatabaseError(f"{prefix}{text}" + (f" (error {code})" if code else ""), kind=kind, code=code,
                         where=where, fix=fix, detail=text)
