"""pt-heartbeat compatible heartbeats: the table, a reader and a writer.

A writer on the source stamps one row (its ``server_id``) with the source's
UTC clock every interval; the row replicates like any other write, so on a
replica ``now - ts`` is how old the newest applied change is, whatever the
threads report.  The table and the timestamp text are exactly what
``pt-heartbeat --update --utc`` writes, so either tool can write and either
can read.  ``lagd heartbeat`` (:func:`heartbeat_command`) runs the writer.
"""

from __future__ import annotations

import logging
import os
import random as _random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import click
import pymysql
import pymysql.err
from pymysql.connections import Connection
from pymysql.cursors import DictCursor

from lagd.errors import LagdError
from lagd.replica import ReplicaStatusError, ServerFlavor, detect_flavor, fetch_replica_statuses

__all__ = [
    "DEFAULT_TABLE",
    "DsnError",
    "HeartbeatError",
    "HeartbeatRow",
    "HeartbeatTableMissingError",
    "HeartbeatWriter",
    "SourceDsn",
    "backoff_delay",
    "create_table_sql",
    "format_ts",
    "heartbeat_command",
    "parse_dsn",
    "parse_ts",
    "quote_table",
    "read_heartbeat",
    "split_table",
]

log = logging.getLogger("lagd.heartbeat")

DEFAULT_TABLE: Final = "percona.heartbeat"

# pt-heartbeat's own definition (--create-table), column for column.
_TABLE_BODY: Final = (
    "(ts varchar(26) NOT NULL, server_id int unsigned NOT NULL PRIMARY KEY, "
    "file varchar(255) DEFAULT NULL, position bigint unsigned DEFAULT NULL, "
    "relay_master_log_file varchar(255) DEFAULT NULL, exec_master_log_pos bigint unsigned DEFAULT NULL)"
)

_ER_DBACCESS_DENIED: Final = 1044
_ER_ACCESS_DENIED: Final = 1045
_ER_BAD_DB: Final = 1049
_ER_BAD_FIELD: Final = 1054
_ER_DUP_ENTRY: Final = 1062
_ER_TABLEACCESS_DENIED: Final = 1142
_ER_NO_SUCH_TABLE: Final = 1146
_ER_SPECIFIC_ACCESS_DENIED: Final = 1227
_ER_OPTION_PREVENTS_STATEMENT: Final = 1290  # --read-only / --super-read-only
_ER_PARSE_ERROR: Final = 1064


class HeartbeatError(LagdError):
    """The heartbeat table cannot be read or written as configured."""


class HeartbeatTableMissingError(HeartbeatError):
    """The heartbeat table (or its schema) does not exist on the server."""


class DsnError(LagdError):
    """``--source`` is not a DSN lagd understands."""


@dataclass(frozen=True, slots=True)
class HeartbeatRow:
    """One row of the heartbeat table; ``ts`` is the row's text read as UTC."""

    server_id: int
    ts: float  # seconds since the epoch, by the writing server's clock
    ts_text: str
    file: str | None = None  # binary log coordinates of the writer at the beat
    position: int | None = None
    relay_master_log_file: str | None = None  # if the writer is itself a replica
    exec_master_log_pos: int | None = None


# --- timestamps and names ------------------------------------------------------

_TS_RE: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def format_ts(epoch: float) -> str:
    """``pt-heartbeat --utc``'s text: ``YYYY-MM-DDTHH:MM:SS.ffffff`` in UTC."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def parse_ts(text: str) -> float:
    """Seconds since the epoch of a heartbeat ``ts``, read as UTC.

    Takes pt-heartbeat's ``T`` form with 0-6 fraction digits, and the
    ``YYYY-MM-DD HH:MM:SS`` that its ``--create-table`` first row gets from
    ``UTC_TIMESTAMP()``.
    """
    m = _TS_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a heartbeat timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    whole = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    fraction = m.group(7)
    return whole + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


_IDENT_PART: Final = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_TABLE_RE: Final = re.compile(rf"^({_IDENT_PART})\.({_IDENT_PART})$")


def _unquote_ident(part: str) -> str:
    return part[1:-1].replace("``", "`") if part.startswith("`") else part


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def split_table(table: str) -> tuple[str, str]:
    """(schema, name) of ``schema.name``; either part may be backquoted."""
    m = _TABLE_RE.match(table.strip())
    if m is None:
        raise HeartbeatError(
            f"heartbeat table {table!r} is not schema.table",
            fix=f"name it with its schema, e.g. {DEFAULT_TABLE}",
        )
    schema, name = m.groups()
    return _unquote_ident(schema), _unquote_ident(name)


def quote_table(table: str) -> str:
    """```schema`.`name``` for ``schema.name``."""
    schema, name = split_table(table)
    return f"{_ident(schema)}.{_ident(name)}"


def create_table_sql(table: str) -> str:
    """pt-heartbeat's ``--create-table`` statement for ``table``."""
    return f"CREATE TABLE IF NOT EXISTS {quote_table(table)} {_TABLE_BODY}"


def _where(conn: Connection[Any]) -> str:
    sock = getattr(conn, "unix_socket", None)
    return str(sock) if sock else f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"


def _code(e: pymysql.err.MySQLError) -> int | None:
    return e.args[0] if e.args and isinstance(e.args[0], int) else None


def _missing(table: str, conn: Connection[Any], e: Exception) -> HeartbeatTableMissingError:
    return HeartbeatTableMissingError(
        f"heartbeat table {table} does not exist on {_where(conn)} ({e.args[-1] if e.args else e})",
        fix="create it on the source (lagd heartbeat --source DSN --create-table, or pt-heartbeat "
        '--create-table), or set lag.heartbeat_table = "" to measure lag without heartbeats',
    )


def _denied(table: str, conn: Connection[Any], e: Exception, grant: str) -> HeartbeatError:
    return HeartbeatError(
        f"{_where(conn)} refused access to heartbeat table {table} ({e.args[-1] if e.args else e})",
        fix=f"GRANT {grant} ON {table} TO the account lagd connects as",
    )


# --- reader --------------------------------------------------------------------


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _row(table: str, row: dict[str, Any]) -> HeartbeatRow:
    cols = {k.lower(): v for k, v in row.items()}
    raw_ts = cols["ts"]
    # A DATETIME(6) column instead of pt-heartbeat's varchar means the same.
    is_dt = isinstance(raw_ts, datetime)
    ts_text = raw_ts.strftime("%Y-%m-%dT%H:%M:%S.%f") if is_dt else _text(raw_ts) or ""
    try:
        ts = parse_ts(ts_text)
    except ValueError:
        raise HeartbeatError(
            f"heartbeat table {table} row for server_id {cols.get('server_id')} has ts {ts_text!r}, "
            "not YYYY-MM-DDTHH:MM:SS.ffffff",
            fix="write it with lagd heartbeat or pt-heartbeat --utc",
        ) from None
    return HeartbeatRow(
        server_id=int(str(cols["server_id"])),
        ts=ts,
        ts_text=ts_text,
        file=_text(cols.get("file")),
        position=_int(cols.get("position")),
        relay_master_log_file=_text(cols.get("relay_master_log_file", cols.get("relay_source_log_file"))),
        exec_master_log_pos=_int(cols.get("exec_master_log_pos", cols.get("exec_source_log_pos"))),
    )


def read_heartbeat(conn: Connection[Any], table: str, server_id: int | None) -> HeartbeatRow | None:
    """The row of ``server_id`` (the source's server id), or the newest row when None.

    None when there is no such row.  ``SELECT *`` so that tables made by any
    pt-heartbeat version (``relay_source_log_file``/``exec_source_log_pos``
    since 3.6) read alike.
    """
    quoted = quote_table(table)
    sql = f"SELECT * FROM {quoted}"
    args: tuple[int, ...] = ()
    if server_id is not None:
        sql += " WHERE server_id = %s"
        args = (server_id,)
    try:
        with conn.cursor(DictCursor) as cur:
            cur.execute(sql, args)
            rows = list(cur.fetchall())
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as e:
        code = _code(e)
        if code in (_ER_NO_SUCH_TABLE, _ER_BAD_DB):
            raise _missing(table, conn, e) from e
        if code == _ER_TABLEACCESS_DENIED:
            raise _denied(table, conn, e, "SELECT") from e
        if code == _ER_BAD_FIELD:
            raise HeartbeatError(
                f"heartbeat table {table} has no server_id column (a legacy pt-heartbeat table?)",
                fix="recreate it with pt-heartbeat --create-table or lagd heartbeat --create-table",
            ) from e
        raise
    parsed = [_row(table, r) for r in rows]
    # Newest by parsed time: the text does not sort when ' ' and 'T' forms mix.
    return max(parsed, key=lambda r: r.ts, default=None)


# --- writer --------------------------------------------------------------------


def backoff_delay(attempt: int, *, base: float, cap: float, rand: float) -> float:
    """Seconds before reconnect ``attempt`` (0-based): capped doubling, "equal jitter".

    Half the delay is fixed and half random (``rand`` in [0, 1)), so many
    writers restarted together spread out but none retries at once.
    """
    delay = min(cap, base * 2.0 ** min(attempt, 60))
    return delay / 2 + delay / 2 * rand


def _writable(row: dict[str, Any]) -> bool:
    # 0/1 on MySQL and MariaDB 10.x; newer MariaDB may answer with a name.
    return all(str(v).upper() in ("0", "OFF") for v in row.values())


@dataclass(slots=True)
class _Session:
    """What one connection learned once: flavor, server id, the table's columns."""

    flavor: ServerFlavor
    server_id: int
    columns: dict[str, str] | None = None  # our name -> the table's column name
    can_read_coordinates: bool = True


class HeartbeatWriter:
    """Writes ``server_id``'s row every ``interval`` seconds while the server is writable.

    Writable means ``@@read_only = 0`` and, on MySQL, ``@@super_read_only =
    0``, checked before every beat: on a read-only server (a replica, or a
    demoted source) it pauses and logs once, and resumes by itself after a
    failover.  ``create_table`` creates the schema and table when missing.
    ``sleep``/``random``/``clock``/``monotonic`` are injectable for tests.
    """

    def __init__(
        self,
        connect: Callable[[], Connection[Any]],
        table: str,
        interval: float = 1.0,
        server_id: int | None = None,
        *,
        create_table: bool = False,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        random: Callable[[], float] = _random.random,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.table = table
        self._quoted = quote_table(table)
        self._connect = connect
        self.interval = interval
        self.server_id = server_id
        self.create_table = create_table
        self._clock, self._monotonic, self._sleep, self._random = clock, monotonic, sleep, random
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self._conn: Connection[Any] | None = None
        self._session: _Session | None = None
        self._paused: bool | None = None
        self.written = 0  # rows written since start

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def close(self) -> None:
        conn, self._conn, self._session = self._conn, None, None
        if conn is not None:
            # Usually already broken; there is nothing to tell about closing it.
            with suppress(Exception):
                conn.close()

    def _query(self, conn: Connection[Any], sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with conn.cursor(DictCursor) as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def _open(self) -> tuple[Connection[Any], _Session]:
        if self._conn is not None and self._session is not None:
            return self._conn, self._session
        try:
            conn = self._connect()
        except pymysql.err.OperationalError as e:
            if _code(e) in (_ER_ACCESS_DENIED, _ER_DBACCESS_DENIED):
                raise HeartbeatError(
                    f"the server refused the heartbeat writer's login: {e.args[-1]}",
                    fix="check the user and password given with --source, --password-file "
                    "or LAGD_HEARTBEAT_PASSWORD",
                ) from e
            raise
        try:
            flavor = detect_flavor(conn)
            server_id = self.server_id
            if server_id is None:
                server_id = int(self._query(conn, "SELECT @@server_id AS id")[0]["id"])
        except BaseException:
            conn.close()
            raise
        self._conn, self._session = conn, _Session(flavor, server_id)
        return conn, self._session

    def _set_paused(self, paused: bool, conn: Connection[Any], why: str = "") -> None:
        if paused == self._paused:
            return
        if paused:
            log.warning(
                "heartbeat paused: %s is read-only (%s); resumes when it is writable", _where(conn), why
            )
        elif self._paused is not None:
            log.warning("heartbeat resumed: %s is writable again", _where(conn))
        self._paused = paused

    def _read_only(self, conn: Connection[Any], s: _Session) -> str | None:
        if s.flavor.is_mysql and s.flavor.version >= (5, 7, 8):
            sql = "SELECT @@global.read_only AS read_only, @@global.super_read_only AS super_read_only"
        else:
            sql = "SELECT @@global.read_only AS read_only"
        row = self._query(conn, sql)[0]
        if _writable(row):
            return None
        return ", ".join(f"{k}={v}" for k, v in row.items())

    def _columns(self, conn: Connection[Any], s: _Session) -> dict[str, str]:
        if s.columns is not None:
            return s.columns
        if self.create_table:
            # pt-heartbeat wants the schema to exist; the default percona.* rarely does.
            self._query(conn, f"CREATE DATABASE IF NOT EXISTS {_ident(split_table(self.table)[0])}")
            self._query(conn, create_table_sql(self.table))
        try:
            names = {str(r["Field"]).lower() for r in self._query(conn, f"SHOW COLUMNS FROM {self._quoted}")}
        except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as e:
            if _code(e) in (_ER_NO_SUCH_TABLE, _ER_BAD_DB):
                err = _missing(self.table, conn, e)
                err.fix = "run the writer with --create-table (create_table=True), or " + (err.fix or "")
                raise err from e
            raise
        if not {"ts", "server_id"} <= names:
            raise HeartbeatError(
                f"{self.table} has no ts and server_id columns: not a pt-heartbeat table",
                fix="point --table at a pt-heartbeat table, or a new name with --create-table",
            )
        wanted = {
            "file": ("file",),
            "position": ("position",),
            "relay_file": ("relay_master_log_file", "relay_source_log_file"),
            "exec_pos": ("exec_master_log_pos", "exec_source_log_pos"),
        }
        s.columns = {
            ours: next(n for n in theirs if n in names)
            for ours, theirs in wanted.items()
            if any(n in names for n in theirs)
        }
        return s.columns

    def _coordinates(self, conn: Connection[Any], s: _Session) -> dict[str, object]:
        # Informational columns, as pt-heartbeat fills them; without the
        # privilege to read them the beat goes on with NULLs.
        out: dict[str, object] = {"file": None, "position": None, "relay_file": None, "exec_pos": None}
        if not s.can_read_coordinates:
            return out
        mysql_new = s.flavor.is_mysql and s.flavor.version >= (8, 2, 0)
        try:
            rows = self._query(conn, "SHOW BINARY LOG STATUS" if mysql_new else "SHOW MASTER STATUS")
            statuses = fetch_replica_statuses(conn, s.flavor)
        except ReplicaStatusError as e:
            return self._no_coordinates(s, e, out)
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as e:
            if _code(e) not in (_ER_SPECIFIC_ACCESS_DENIED, _ER_PARSE_ERROR):
                raise
            return self._no_coordinates(s, e, out)
        if rows:
            out["file"], out["position"] = rows[0].get("File"), rows[0].get("Position")
        mine = next((st for st in statuses if st.channel == ""), statuses[0] if statuses else None)
        if mine is not None:
            out["relay_file"], out["exec_pos"] = mine.relay_source_log_file, mine.exec_source_log_pos
        return out

    def _no_coordinates(self, s: _Session, e: Exception, out: dict[str, object]) -> dict[str, object]:
        log.info("heartbeat: writing NULL binary log coordinates from now on (%s)", e)
        s.can_read_coordinates = False
        return out

    def _write(self, conn: Connection[Any], s: _Session, columns: dict[str, str]) -> None:
        values = self._coordinates(conn, s)
        names = ["ts", *columns.values()]
        args: list[object] = [format_ts(self._clock()), *(values[k] for k in columns)]
        with conn.cursor() as cur:
            sets = ", ".join(f"`{n}` = %s" for n in names)
            cur.execute(f"UPDATE {self._quoted} SET {sets} WHERE server_id = %s", (*args, s.server_id))
            if cur.rowcount == 0:
                # pt-heartbeat needs the row inserted beforehand; we insert it on the first beat.
                cols = ", ".join(f"`{n}`" for n in [*names, "server_id"])
                marks = ", ".join(["%s"] * (len(names) + 1))
                try:
                    cur.execute(f"INSERT INTO {self._quoted} ({cols}) VALUES ({marks})", (*args, s.server_id))
                except pymysql.err.IntegrityError as e:
                    if _code(e) != _ER_DUP_ENTRY:
                        raise
        conn.commit()

    def beat(self) -> bool:
        """Write one heartbeat; False when paused because the server is read-only.

        Connection errors propagate (and drop the connection, so the next
        beat reconnects); configuration errors are :class:`HeartbeatError`.
        """
        conn, s = self._open()
        try:
            why = self._read_only(conn, s)
            if why is not None:
                self._set_paused(True, conn, why)
                return False
            columns = self._columns(conn, s)
            self._write(conn, s, columns)
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as e:
            code = _code(e)
            if code == _ER_OPTION_PREVENTS_STATEMENT:
                # Turned read-only between the check and the write.
                self._set_paused(True, conn, str(e.args[-1]))
                return False
            if code in (_ER_TABLEACCESS_DENIED, _ER_DBACCESS_DENIED, _ER_SPECIFIC_ACCESS_DENIED):
                raise _denied(
                    self.table, conn, e, "SELECT, INSERT, UPDATE (and CREATE with --create-table)"
                ) from e
            self.close()
            raise
        except (pymysql.err.InterfaceError, OSError):
            self.close()
            raise
        self._set_paused(False, conn)
        self.written += 1
        return True

    def run(self, stop: threading.Event) -> None:
        """Beat every ``interval`` seconds until ``stop`` is set.

        Lost connections are retried with capped exponential backoff and
        jitter; a :class:`HeartbeatError` (configuration) ends the loop.
        Missed beats are skipped, never written in a burst.
        """
        pause: Callable[[float], object] = self._sleep or stop.wait
        attempt = 0
        due = self._monotonic()
        try:
            while not stop.is_set():
                try:
                    self.beat()
                except (
                    pymysql.err.OperationalError,
                    pymysql.err.InterfaceError,
                    pymysql.err.InternalError,
                    OSError,
                ) as e:
                    delay = backoff_delay(
                        attempt, base=self.backoff_base, cap=self.backoff_cap, rand=self._random()
                    )
                    attempt += 1
                    log.warning("heartbeat: %s; reconnecting in %.1f s", e, delay)
                    pause(delay)
                    due = self._monotonic()
                    continue
                attempt = 0
                now = self._monotonic()
                due = max(due + self.interval, now)
                pause(due - now)
        finally:
            self.close()


# --- command line ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceDsn:
    host: str
    port: int = 3306
    user: str | None = None  # None: the login name, as the mysql client does
    password: str | None = None

    def __str__(self) -> str:
        who = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{who}{host}:{self.port}"


_DSN_FIX: Final = "write it as mysql://user[:password]@host[:port] or host:port"


def parse_dsn(text: str) -> SourceDsn:
    """``mysql://user[:password]@host[:port]`` or ``host[:port]``; user and password are %-decoded."""
    if "://" in text:
        if not text.lower().startswith("mysql://"):
            raise DsnError(f"--source {text.split('://', maxsplit=1)[0]}:// is not a MySQL DSN", fix=_DSN_FIX)
        parts = urlsplit(text)
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise DsnError(f"--source {text!r} has a path or options lagd does not take", fix=_DSN_FIX)
    else:
        parts = urlsplit("//" + text)
        if parts.path or parts.query or parts.fragment:
            raise DsnError(f"--source {text!r} is not host:port", fix=_DSN_FIX)
    try:
        port = parts.port
    except ValueError:
        raise DsnError(f"--source {text!r} has a bad port", fix=_DSN_FIX) from None
    if not parts.hostname:
        raise DsnError(f"--source {text!r} names no host", fix=_DSN_FIX)
    if port == 0:
        raise DsnError(f"--source {text!r} has port 0", fix=_DSN_FIX)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return SourceDsn(parts.hostname, port or 3306, user, password)


@contextmanager
def _user_errors() -> Iterator[None]:
    # A LagdError is something the user can fix: one line, no traceback.
    try:
        yield
    except LagdError as e:
        click.echo(f"lagd heartbeat: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None


@click.command("heartbeat")
@click.option(
    "--source",
    "source",
    required=True,
    metavar="DSN",
    help="The server to write to: mysql://user[:password]@host[:port] or host:port.",
)
@click.option(
    "--password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read the password from this file (first line) unless the DSN has one.",
)
@click.option("--table", default=DEFAULT_TABLE, show_default=True, help="schema.table, pt-heartbeat layout.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option("--create-table", is_flag=True, help="Create the schema and table if missing.")
@click.option(
    "--server-id",
    type=click.IntRange(0, 2**32 - 1),
    default=None,
    help="Row to write (default: the server's @@server_id).",
)
def heartbeat_command(
    *,
    source: str,
    password_file: Path | None,
    table: str,
    interval: float,
    create_table: bool,
    server_id: int | None,
) -> None:
    """Write pt-heartbeat compatible heartbeats on the source, pausing while it is read-only.

    The password comes from the DSN, else --password-file, else the
    LAGD_HEARTBEAT_PASSWORD environment variable.
    """
    with _user_errors():
        dsn = parse_dsn(source)
        password = dsn.password
        if password is None and password_file is not None:
            try:
                text = password_file.read_text()
            except OSError as e:
                raise DsnError(
                    f"cannot read --password-file {password_file}: {e.strerror}",
                    fix="give a readable file holding the password",
                ) from None
            password = text.splitlines()[0] if text else ""
        if password is None:
            password = os.environ.get("LAGD_HEARTBEAT_PASSWORD")
        quote_table(table)

        def connect() -> Connection[Any]:
            return pymysql.connect(
                host=dsn.host,
                port=dsn.port,
                user=dsn.user,
                password=password or "",
                autocommit=True,
                connect_timeout=5,
                read_timeout=30,
                write_timeout=30,
            )

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        writer = HeartbeatWriter(connect, table, interval, server_id, create_table=create_table)
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info("writing heartbeats to %s on %s every %s s", table, dsn, interval)
        try:
            writer.run(stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("stopped after %d heartbeats", writer.written)
