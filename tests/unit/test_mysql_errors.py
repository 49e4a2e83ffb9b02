"""Driver exceptions, as the drivers raise them, in lagd's words: kind, code, message, fix."""

from __future__ import annotations

import pickle

import asyncmy.errors
import pymysql.err
import pytest

from lagd.mysql import errors as E
from lagd.mysql.errors import DatabaseError, Kind, is_database_error, kind_of, translate

WHERE = "replica 127.0.0.1:3306"

# (id, exception as raised, kind, code, text in the message)
CASES = [
    ("wrong-password", pymysql.err.OperationalError(
        1045, "Access denied for user 'lagd'@'localhost' (using password: YES)"),
     Kind.AUTH, 1045, "Access denied for user 'lagd'@'localhost' (using password: YES) (error 1045)"),
    ("refused", pymysql.err.OperationalError(
        2003, "Can't connect to MySQL server on '127.0.0.1' ([Errno 111] Connection refused)"),
     Kind.UNREACHABLE, 2003, "[Errno 111] Connection refused"),
    ("refused-asyncmy", asyncmy.errors.OperationalError(
        2003, "Can't connect to MySQL server on '127.0.0.1' ([Errno 111] Connect call failed)"),
     Kind.UNREACHABLE, 2003, "Connect call failed"),
    ("lost", pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"),
     Kind.LOST, 2013, "Lost connection to MySQL server during query (error 2013)"),
    ("gone", pymysql.err.OperationalError(2006, "MySQL server has gone away"), Kind.LOST, 2006, "gone away"),
    ("killed", pymysql.err.OperationalError(1927, "Connection was killed"), Kind.LOST, 1927, "killed"),
    ("no-table", pymysql.err.ProgrammingError(1146, "Table 'shop.orders' doesn't exist"),
     Kind.SCHEMA, 1146, "Table 'shop.orders' doesn't exist"),
    ("dropped-index", pymysql.err.OperationalError(1176, "Key 'ka' doesn't exist in table 't'"),
     Kind.SCHEMA, 1176, "Key 'ka'"),
    ("mariadb-statement-timeout", pymysql.err.OperationalError(
        1969, "Query execution was interrupted (max_statement_time exceeded)"),
     Kind.TIMEOUT, 1969, "max_statement_time exceeded"),
    ("mysql-statement-timeout", asyncmy.errors.OperationalError(
        3024, "Query execution was interrupted, maximum statement execution time exceeded"),
     Kind.TIMEOUT, 3024, "maximum statement execution time"),
    ("lock-wait", pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting"),
     Kind.TIMEOUT, 1205, "Lock wait timeout"),
    ("missing-grant", pymysql.err.OperationalError(
        1227, "Access denied; you need (at least one of) the SLAVE MONITOR privilege(s) for this operation"),
     Kind.DENIED, 1227, "SLAVE MONITOR"),
    ("read-only", pymysql.err.OperationalError(
        1290, "The MariaDB server is running with the --read-only option so it cannot execute this "
        "statement"),
     Kind.READ_ONLY, 1290, "--read-only"),
    ("closed-connection", pymysql.err.InterfaceError(0, ""), Kind.LOST, None,
     "connection lost (InterfaceError)"),
    ("closed-connection-asyncmy", asyncmy.errors.InterfaceError(0, ""), Kind.LOST, None,
     "connection lost (InterfaceError)"),
    ("socket-missing", FileNotFoundError(2, "No such file or directory"), Kind.UNREACHABLE, None,
     "No such file or directory"),
    ("reset", ConnectionResetError(104, "Connection reset by peer"), Kind.LOST, None,
     "connection lost (ConnectionResetError: Connection reset by peer)"),
    ("read-timeout", TimeoutError(), Kind.LOST, None, "connection lost (TimeoutError)"),
    ("eof", EOFError(), Kind.LOST, None, "connection lost (EOFError)"),
    ("parse", pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), Kind.OTHER, 1064,
     "SQL syntax"),
]


@pytest.mark.parametrize(("exc", "kind", "code", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_translate(exc: BaseException, kind: Kind, code: int | None, text: str) -> None:
    assert kind_of(exc) is kind
    assert is_database_error(exc)
    e = translate(exc, WHERE)
    assert (e.kind, e.code, e.where) == (kind, code, WHERE)
    assert e.message.startswith(f"{WHERE}: ")
    assert text in e.message
    assert e.broken is (kind in (Kind.UNREACHABLE, Kind.AUTH, Kind.LOST))
    assert translate(e, "elsewhere") is e  # translating twice changes nothing


def test_wrong_password_says_what_to_check() -> None:
    e = translate(CASES[0][1], WHERE)
    assert str(e) == ("replica 127.0.0.1:3306: Access denied for user 'lagd'@'localhost' (using password: "
                      "YES) (error 1045) (fix: check replica.user and the password (replica.password_file) "
                      "against the server's account; the account needs a host part matching this client)")
    assert e.detail == "Access denied for user 'lagd'@'localhost' (using password: YES)"


@pytest.mark.parametrize(("where", "kind", "fix"), [
    ("source db1:3306", Kind.AUTH, "check source.user"),
    ("replica db2:3306", Kind.UNREACHABLE, "replica.host/port/socket"),
    ("replica db2:3306", Kind.DENIED, "lagctl doctor"),
    ("replica db2:3306", Kind.LOST, "lagd reconnects by itself"),
    ("replica db2:3306", Kind.SCHEMA, None),
])
def test_default_fix_names_the_servers_role(where: str, kind: Kind, fix: str | None) -> None:
    e = DatabaseError("x", kind=kind, where=where)
    assert (e.fix is None) if fix is None else (fix in (e.fix or ""))


def test_an_explicit_fix_wins() -> None:
    assert translate(CASES[0][1], WHERE, fix="use --source").fix == "use --source"


def test_not_database_errors() -> None:
    assert not is_database_error(ValueError("x"))
    assert kind_of(ValueError("x")) is Kind.OTHER


def test_pickles() -> None:
    e = translate(CASES[0][1], WHERE)
    back = pickle.loads(pickle.dumps(e))
    assert (back.message, back.kind, back.code, back.where, back.fix, back.detail) == (
        e.message, e.kind, e.code, e.where, e.fix, e.detail)


def test_codes_are_the_servers() -> None:
    # The constants are what servers send; a typo here would silently misfile errors.
    assert (E.ER_ACCESS_DENIED, E.CR_CONN_HOST_ERROR, E.CR_SERVER_LOST, E.ER_NO_SUCH_TABLE,
            E.ER_KEY_DOES_NOT_EXIST, E.ER_STATEMENT_TIMEOUT_MARIADB, E.ER_QUERY_TIMEOUT_MYSQL) == (
        1045, 2003, 2013, 1146, 1176, 1969, 3024)
