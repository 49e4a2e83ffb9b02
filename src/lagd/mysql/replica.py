"""One :class:`ReplicaStatus` value from any server dialect.

MySQL 5.7 says ``Slave_IO_Running``/``Master_Host``; MySQL 8.0.22+ says
``Replica_IO_Running``/``Source_Host`` from ``SHOW REPLICA STATUS`` (and 8.4
removed ``SHOW SLAVE STATUS``); MariaDB accepts ``SHOW REPLICA STATUS`` from
10.5.1 but keeps the Master/Slave column names, and its ``SHOW ALL SLAVES
STATUS`` adds ``Connection_name`` and counters.  Everything above this module
works with the normalised value and never with column names.

The parsing half (:func:`parse_replica_status`) is pure and proven against
recorded result sets in ``tests/fixtures/replica_status``; the I/O half
(:func:`fetch_replica_statuses`, :func:`fetch_replica_status`) picks the
statement from the server's flavor.  ``docs/replica-status.md`` has the
column mapping table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from pymysql.connections import Connection
from pymysql.cursors import DictCursor

from lagd.errors import LagdError, NotAReplicaError, ReplicaStatusError, ServerVersionError
from lagd.mysql.endpoint import where_of
from lagd.mysql.errors import DRIVER_ERRORS, ER_PARSE_ERROR, ER_SPECIFIC_ACCESS_DENIED, code_of, translate

__all__ = [
    "IoState",
    "NotAReplicaError",
    "ReplicaStatus",
    "ReplicaStatusError",
    "ServerFlavor",
    "ServerVersionError",
    "StatementTimeout",
    "ThreadError",
    "Vendor",
    "detect_flavor",
    "fetch_replica_status",
    "fetch_replica_statuses",
    "parse_replica_status",
    "relay_log_index",
]


class Vendor(StrEnum):
    MYSQL = "mysql"
    MARIADB = "mariadb"


@dataclass(frozen=True, slots=True)
class StatementTimeout:
    """How a server caps one statement's run time.

    MariaDB: ``max_statement_time`` in seconds (fractions allowed), applies to
    every statement.  MySQL: ``max_execution_time`` in milliseconds, applies to
    read-only ``SELECT`` statements only (not to ``SHOW``), also usable as the
    ``/*+ MAX_EXECUTION_TIME(ms) */`` optimizer hint.
    """

    variable: Literal["max_statement_time", "max_execution_time"]
    unit: Literal["s", "ms"]

    def value(self, seconds: float) -> float | int:
        """The variable's value for a limit of ``seconds``."""
        if seconds <= 0:
            # 0 means "no limit" to both servers: never produce it by accident.
            raise ValueError(f"a statement timeout must be positive, not {seconds!r}")
        if self.unit == "s":
            return seconds
        return max(1, round(seconds * 1000))

    def set_session_sql(self, seconds: float) -> str:
        """``SET SESSION ...`` applying the limit to the rest of the session."""
        return f"SET SESSION {self.variable} = {self.value(seconds)}"

    def optimizer_hint(self, seconds: float) -> str | None:
        """The per-statement hint, where the server has one (MySQL only)."""
        if self.variable != "max_execution_time":
            return None
        return f"/*+ MAX_EXECUTION_TIME({self.value(seconds)}) */"


_VERSION_RE: Final = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# MariaDB before 11.0 sends this prefix in the handshake so old clients that
# compare against MySQL 5.5 keep working; VERSION() does not carry it.
_MARIADB_HANDSHAKE_PREFIX: Final = "5.5.5-"


@dataclass(frozen=True, slots=True)
class ServerFlavor:
    """Vendor and version: everything that decides the status dialect."""

    vendor: Vendor
    version: tuple[int, int, int]
    version_string: str = field(default="", compare=False)

    @classmethod
    def from_version_string(cls, text: str) -> ServerFlavor:
        """Read ``SELECT VERSION()`` (or the handshake's server version).

        ``"8.0.36"``, ``"5.7.44-log"``, ``"10.11.19-MariaDB-0+deb12u1"``,
        ``"5.5.5-10.11.19-MariaDB"``, ``"11.4.2-MariaDB-log"``.
        """
        stripped = text.strip()
        vendor = Vendor.MARIADB if "mariadb" in stripped.lower() else Vendor.MYSQL
        if vendor is Vendor.MARIADB and stripped.startswith(_MARIADB_HANDSHAKE_PREFIX):
            stripped = stripped[len(_MARIADB_HANDSHAKE_PREFIX) :]
        m = _VERSION_RE.match(stripped)
        if m is None:
            raise ServerVersionError(
                f"cannot read a MySQL or MariaDB version from {text!r}",
                fix="connect lagd to a MySQL 5.7+ or MariaDB 10.x+ server",
            )
        major, minor, patch = m.group(1), m.group(2), m.group(3) or "0"
        return cls(vendor, (int(major), int(minor), int(patch)), version_string=text)

    def __str__(self) -> str:
        name = "MariaDB" if self.is_mariadb else "MySQL"
        return f"{name} {'.'.join(map(str, self.version))}"

    @property
    def is_mariadb(self) -> bool:
        return self.vendor is Vendor.MARIADB

    @property
    def is_mysql(self) -> bool:
        return self.vendor is Vendor.MYSQL

    @property
    def has_show_replica_status(self) -> bool:
        """Whether ``SHOW REPLICA STATUS`` parses on this server."""
        if self.is_mariadb:
            return self.version >= (10, 5, 1)
        return self.version >= (8, 0, 22)

    @property
    def has_show_slave_status(self) -> bool:
        """Whether ``SHOW SLAVE STATUS`` still parses (MySQL 8.4 removed it)."""
        return self.is_mariadb or self.version < (8, 4, 0)

    @property
    def uses_source_replica_columns(self) -> bool:
        """Whether the status statement names columns Source_*/Replica_*.

        Only MySQL 8.0.22+ ``SHOW REPLICA STATUS``; MariaDB keeps Master_*/
        Slave_* under either spelling of the statement.
        """
        return self.is_mysql and self.version >= (8, 0, 22)

    @property
    def replica_status_statement(self) -> str:
        """The statement that lists every replication channel, one row each.

        MariaDB needs ``SHOW ALL SLAVES STATUS``: plain ``SHOW SLAVE STATUS``
        shows only ``@@default_master_connection`` and returns no row at all
        on a multi-source replica without a default connection.  MySQL's
        status statement already returns one row per channel.
        """
        if self.is_mariadb:
            # The SLAVES spelling works on every MariaDB; REPLICAS needs 10.5.1.
            return "SHOW ALL SLAVES STATUS"
        if self.has_show_replica_status:
            return "SHOW REPLICA STATUS"
        return "SHOW SLAVE STATUS"

    @property
    def applied_gtids_statement(self) -> str | None:
        """A one-row statement naming the GTIDs the SQL thread has applied, one per domain,
        or None where lagd knows none it has proven.

        MariaDB's ``@@gtid_slave_pos`` moves with every replicated transaction
        committed (the server updates ``mysql.gtid_slave_pos`` inside it, and
        every MariaDB event group has a GTID; proven live with MASTER_USE_GTID
        = slave_pos), and costs a fifth to a seventh of the client CPU of ``SHOW ALL
        SLAVES STATUS`` with its 60 columns. MySQL would answer with
        ``performance_schema.replication_applier_status_by_worker``'s
        ``LAST_APPLIED_TRANSACTION`` (8.0+, GTID_MODE=ON only); not proven on a
        live MySQL here, so MySQL replicas are polled with the status statement.
        """
        return "SELECT @@GLOBAL.gtid_slave_pos AS gtids" if self.is_mariadb else None

    @property
    def channel_column(self) -> str:
        """The column naming the channel in :attr:`replica_status_statement`."""
        return "Connection_name" if self.is_mariadb else "Channel_Name"

    @property
    def statement_timeout(self) -> StatementTimeout | None:
        """The statement-timeout mechanism, ``None`` on servers too old to have one."""
        if self.is_mariadb:
            if self.version >= (10, 1, 1):
                return StatementTimeout("max_statement_time", "s")
            return None
        if self.version >= (5, 7, 8):
            return StatementTimeout("max_execution_time", "ms")
        return None


class IoState(StrEnum):
    """The receiver (I/O) thread, from ``Slave_IO_Running``/``Replica_IO_Running``."""

    RUNNING = "running"  # Yes: connected and receiving
    CONNECTING = "connecting"  # Connecting (MariaDB also: Preparing)
    STOPPED = "stopped"  # No


_IO_RUNNING_VALUES: Final[Mapping[str, IoState]] = {
    "yes": IoState.RUNNING,
    "connecting": IoState.CONNECTING,
    # MariaDB only: connected, but still registering and requesting the dump;
    # no event can arrive yet, which for lag purposes is still connecting.
    "preparing": IoState.CONNECTING,
    "no": IoState.STOPPED,
}


@dataclass(frozen=True, slots=True)
class ThreadError:
    """The last error one replication thread stopped or retried on."""

    thread: Literal["io", "sql"]
    errno: int
    message: str
    at: datetime | None = None  # MySQL only, in the server's local time

    def __str__(self) -> str:
        return f"{self.thread.upper()} thread error {self.errno}: {self.message}"


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replication channel, the same shape whatever the server dialect.

    Empty strings the server uses for "nothing" (no error, no GTID set, no
    state) are ``None`` here; a NULL ``Seconds_Behind_*`` stays ``None`` and
    never becomes 0: it means "unknown", typically a stopped thread.  The
    binlog file names stay ``str``: they are ``''`` only until the first event
    after a GTID-mode ``CHANGE MASTER`` (MariaDB), with positions at 4.
    ``raw`` keeps the original row for diagnostics and takes no part in
    equality.
    """

    channel: str  # '' is the default channel (MySQL) / connection (MariaDB)
    source_host: str
    source_port: int
    source_user: str
    io_state: IoState
    io_thread_state: str | None  # Slave_IO_State / Replica_IO_State text
    sql_running: bool
    sql_state: str | None  # Slave_SQL_Running_State / Replica_SQL_Running_State
    seconds_behind: int | None
    read_source_log_file: str  # Master_Log_File / Source_Log_File
    read_source_log_pos: int
    relay_log_file: str
    relay_log_pos: int
    relay_source_log_file: str  # Relay_Master_Log_File / Relay_Source_Log_File
    exec_source_log_pos: int
    relay_log_space: int
    last_io_errno: int
    last_io_error: str | None
    last_sql_errno: int
    last_sql_error: str | None
    sql_delay: int
    sql_remaining_delay: int | None  # None unless the applier is waiting out SQL_Delay
    source_server_id: int
    last_io_error_time: datetime | None = None  # MySQL only
    last_sql_error_time: datetime | None = None  # MySQL only
    retrieved_gtid_set: str | None = None  # MySQL
    executed_gtid_set: str | None = None  # MySQL
    source_uuid: str | None = None  # MySQL
    auto_position: bool | None = None  # MySQL
    gtid_io_pos: str | None = None  # MariaDB
    gtid_slave_pos: str | None = None  # MariaDB (server-wide, not per connection)
    using_gtid: str | None = None  # MariaDB: No / Slave_Pos / Current_Pos
    parallel_mode: str | None = None  # MariaDB
    raw: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @property
    def io_running(self) -> bool:
        return self.io_state is IoState.RUNNING

    @property
    def has_error(self) -> bool:
        return self.last_io_errno != 0 or self.last_sql_errno != 0

    @property
    def healthy(self) -> bool:
        """Both threads up and no error recorded; says nothing about lag."""
        return self.io_running and self.sql_running and not self.has_error

    @property
    def last_error(self) -> ThreadError | None:
        """The error that explains the channel's state best, if any.

        A stopped thread's error beats a running thread's (the running one
        recovered, or is retrying); between equals the SQL error wins,
        because an applier error never heals by itself while the receiver
        retries its connection.
        """
        sql = (
            ThreadError(
                "sql", self.last_sql_errno, self.last_sql_error or "", self.last_sql_error_time
            )
            if self.last_sql_errno
            else None
        )
        io = (
            ThreadError("io", self.last_io_errno, self.last_io_error or "", self.last_io_error_time)
            if self.last_io_errno
            else None
        )
        if sql is None or io is None:
            return sql or io
        sql_stopped = not self.sql_running
        io_stopped = self.io_state is not IoState.RUNNING
        if io_stopped and not sql_stopped:
            return io
        return sql


# Every spelling of each column, the Master/Slave one first.
_IO_STATE_TEXT = ("Slave_IO_State", "Replica_IO_State")
_SOURCE_HOST = ("Master_Host", "Source_Host")
_SOURCE_USER = ("Master_User", "Source_User")
_SOURCE_PORT = ("Master_Port", "Source_Port")
_READ_FILE = ("Master_Log_File", "Source_Log_File")
_READ_POS = ("Read_Master_Log_Pos", "Read_Source_Log_Pos")
_RELAY_FILE = ("Relay_Log_File",)
_RELAY_POS = ("Relay_Log_Pos",)
_RELAY_SOURCE_FILE = ("Relay_Master_Log_File", "Relay_Source_Log_File")
_IO_RUNNING = ("Slave_IO_Running", "Replica_IO_Running")
_SQL_RUNNING = ("Slave_SQL_Running", "Replica_SQL_Running")
_EXEC_POS = ("Exec_Master_Log_Pos", "Exec_Source_Log_Pos")
_RELAY_SPACE = ("Relay_Log_Space",)
_SECONDS_BEHIND = ("Seconds_Behind_Master", "Seconds_Behind_Source")
_IO_ERRNO = ("Last_IO_Errno",)
_IO_ERROR = ("Last_IO_Error",)
_SQL_ERRNO = ("Last_SQL_Errno",)
_SQL_ERROR = ("Last_SQL_Error",)
_SOURCE_SERVER_ID = ("Master_Server_Id", "Source_Server_Id")
_SQL_DELAY = ("SQL_Delay",)
_SQL_REMAINING = ("SQL_Remaining_Delay",)
_SQL_STATE = ("Slave_SQL_Running_State", "Replica_SQL_Running_State")
_CHANNEL = ("Channel_Name", "Connection_name")
_IO_ERROR_TIME = ("Last_IO_Error_Timestamp",)
_SQL_ERROR_TIME = ("Last_SQL_Error_Timestamp",)
_RETRIEVED_GTIDS = ("Retrieved_Gtid_Set",)
_EXECUTED_GTIDS = ("Executed_Gtid_Set",)
_SOURCE_UUID = ("Master_UUID", "Source_UUID")
_AUTO_POSITION = ("Auto_Position",)
_GTID_IO_POS = ("Gtid_IO_Pos",)
_GTID_SLAVE_POS = ("Gtid_Slave_Pos",)
_USING_GTID = ("Using_Gtid",)
_PARALLEL_MODE = ("Parallel_Mode",)


def _squeeze_gtids(text: str) -> str | None:
    # MySQL breaks GTID sets after each comma (",\n"); the set is the same.
    return "".join(text.split()) or None


# MySQL writes these as "%02d%02d%02d %02d:%02d:%02d" of the local time.
_MYSQL_ERROR_TIME_FORMAT: Final = "%y%m%d %H:%M:%S"


class _RowReader:
    """Typed, strict access to one status row under every column spelling.

    Missing required columns are collected (so one error names them all);
    a value of the wrong kind raises at once, naming its column.
    """

    def __init__(self, row: Mapping[str, object], flavor: ServerFlavor) -> None:
        self.row = row
        self.flavor = flavor
        self.missing: list[tuple[str, ...]] = []

    def _pick(self, names: tuple[str, ...], required: bool) -> tuple[str, object] | None:
        present = [(n, self.row[n]) for n in names if n in self.row]
        if not present:
            if required:
                self.missing.append(names)
            return None
        name, value = present[0]
        for other, other_value in present[1:]:
            if other_value != value:
                raise ReplicaStatusError(
                    f"replica status row has both {name}={value!r} and "
                    f"{other}={other_value!r}: two spellings of one column disagree",
                    columns=(name, other),
                )
        return name, value

    def _bad(self, name: str, value: object, want: str) -> ReplicaStatusError:
        return ReplicaStatusError(
            f"replica status column {name} holds {value!r} ({type(value).__name__}), "
            f"expected {want}",
            columns=(name,),
        )

    def _str_value(self, name: str, value: object) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, bytes | bytearray):
            try:
                return bytes(value).decode()
            except UnicodeDecodeError:
                raise self._bad(name, value, "UTF-8 text") from None
        raise self._bad(name, value, "text")

    def text(self, names: tuple[str, ...], *, required: bool = True) -> str:
        picked = self._pick(names, required)
        if picked is None or picked[1] is None:
            return ""
        return self._str_value(*picked)

    def opt_text(self, names: tuple[str, ...], *, required: bool = True) -> str | None:
        picked = self._pick(names, required)
        if picked is None or picked[1] is None:
            return None
        return self._str_value(*picked) or None

    def _int_value(self, name: str, value: object) -> int:
        # bool is an int subclass but never a count or position.
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, bytes):
            text = value.decode("ascii", "replace").strip()
        elif isinstance(value, str):
            text = value.strip()
        else:
            raise self._bad(name, value, "an integer")
        # isdigit() alone accepts digits int() refuses, such as superscripts.
        if text.isascii() and text.isdigit():
            return int(text)
        raise self._bad(name, value, "an integer")

    def integer(self, names: tuple[str, ...], *, required: bool = True) -> int:
        picked = self._pick(names, required)
        if picked is None:
            return 0
        return self._int_value(*picked)

    def opt_int(self, names: tuple[str, ...], *, required: bool = True) -> int | None:
        picked = self._pick(names, required)
        if picked is None or picked[1] is None:
            return None
        return self._int_value(*picked)

    def yes_no(self, names: tuple[str, ...]) -> bool:
        picked = self._pick(names, True)
        if picked is None:
            return False
        name, value = picked
        text = self._str_value(name, value) if value is not None else ""
        if text.lower() == "yes":
            return True
        if text.lower() == "no":
            return False
        raise self._bad(name, value, "Yes or No")

    def io_state(self, names: tuple[str, ...]) -> IoState:
        picked = self._pick(names, True)
        if picked is None:
            return IoState.STOPPED
        name, value = picked
        text = self._str_value(name, value) if value is not None else ""
        state = _IO_RUNNING_VALUES.get(text.strip().lower())
        if state is None:
            raise self._bad(name, value, "Yes, Connecting, Preparing or No")
        return state

    def error_time(self, names: tuple[str, ...], *, required: bool) -> datetime | None:
        picked = self._pick(names, required)
        if picked is None or picked[1] is None:
            return None
        name, value = picked
        text = self._str_value(name, value).strip()
        if not text:
            return None
        try:
            return datetime.strptime(text, _MYSQL_ERROR_TIME_FORMAT)
        except ValueError:
            raise self._bad(name, value, "a time like '241121 01:02:03' or ''") from None

    def gtid_set(self, names: tuple[str, ...], *, required: bool) -> str | None:
        text = self.opt_text(names, required=required)
        return _squeeze_gtids(text) if text is not None else None

    def flag(self, names: tuple[str, ...], *, required: bool) -> bool | None:
        value = self.opt_int(names, required=required)
        if value is None:
            return None
        if value not in (0, 1):
            raise self._bad(names[0], value, "0 or 1")
        return value == 1

    def finish(self) -> None:
        if not self.missing:
            return
        spelled = ", ".join("/".join(names) for names in self.missing)
        raise ReplicaStatusError(
            f"replica status row lacks column(s) {spelled}, which {self.flavor} returns",
            fix=(
                f"read the row with {self.flavor.replica_status_statement} from the server "
                "whose VERSION() chose the flavor (a proxy in between can rewrite result sets)"
            ),
            columns=[n for names in self.missing for n in names],
        )


def parse_replica_status(
    row: Mapping[str, object],
    flavor: ServerFlavor,
    *,
    gtid_slave_pos: str | None = None,
) -> ReplicaStatus:
    """Normalise one row of any replica status statement.

    ``row`` is a PyMySQL ``DictCursor`` row of ``SHOW SLAVE STATUS``, ``SHOW
    REPLICA STATUS`` or MariaDB's ``SHOW ALL SLAVES STATUS``, in any naming.
    ``gtid_slave_pos`` (MariaDB's ``@@gtid_slave_pos``) fills in for rows
    without a ``Gtid_Slave_Pos`` column.  Columns lagd does not know are kept
    in ``raw`` only; a column the flavor always returns but the row lacks, or
    a value of the wrong kind, raises :class:`ReplicaStatusError`.
    """
    r = _RowReader(row, flavor)
    mysql, mariadb = flavor.is_mysql, flavor.is_mariadb
    status = ReplicaStatus(
        # MariaDB's single-connection SHOW SLAVE STATUS has no name column.
        channel=r.text(_CHANNEL, required=mysql and flavor.version >= (5, 7, 6)),
        source_host=r.text(_SOURCE_HOST),
        source_port=r.integer(_SOURCE_PORT),
        source_user=r.text(_SOURCE_USER),
        io_state=r.io_state(_IO_RUNNING),
        io_thread_state=r.opt_text(_IO_STATE_TEXT),
        sql_running=r.yes_no(_SQL_RUNNING),
        sql_state=r.opt_text(_SQL_STATE),
        seconds_behind=r.opt_int(_SECONDS_BEHIND),
        read_source_log_file=r.text(_READ_FILE),
        read_source_log_pos=r.integer(_READ_POS),
        relay_log_file=r.text(_RELAY_FILE),
        relay_log_pos=r.integer(_RELAY_POS),
        relay_source_log_file=r.text(_RELAY_SOURCE_FILE),
        exec_source_log_pos=r.integer(_EXEC_POS),
        relay_log_space=r.integer(_RELAY_SPACE),
        last_io_errno=r.integer(_IO_ERRNO),
        last_io_error=r.opt_text(_IO_ERROR),
        last_sql_errno=r.integer(_SQL_ERRNO),
        last_sql_error=r.opt_text(_SQL_ERROR),
        sql_delay=r.integer(_SQL_DELAY),
        sql_remaining_delay=r.opt_int(_SQL_REMAINING),
        source_server_id=r.integer(_SOURCE_SERVER_ID),
        last_io_error_time=r.error_time(_IO_ERROR_TIME, required=mysql),
        last_sql_error_time=r.error_time(_SQL_ERROR_TIME, required=mysql),
        retrieved_gtid_set=r.gtid_set(_RETRIEVED_GTIDS, required=mysql),
        executed_gtid_set=r.gtid_set(_EXECUTED_GTIDS, required=mysql),
        source_uuid=r.opt_text(_SOURCE_UUID, required=mysql),
        auto_position=r.flag(_AUTO_POSITION, required=mysql),
        gtid_io_pos=r.gtid_set(_GTID_IO_POS, required=mariadb),
        gtid_slave_pos=r.gtid_set(_GTID_SLAVE_POS, required=False),
        using_gtid=r.opt_text(_USING_GTID, required=mariadb),
        parallel_mode=r.opt_text(_PARALLEL_MODE, required=mariadb),
        raw=MappingProxyType(dict(row)),
    )
    r.finish()
    if status.gtid_slave_pos is None and mariadb and gtid_slave_pos:
        return replace(status, gtid_slave_pos=_squeeze_gtids(gtid_slave_pos))
    return status


# --- I/O --------------------------------------------------------------------

def _query(conn: Connection[Any], sql: str) -> tuple[dict[str, Any], ...]:
    # An explicit DictCursor: the caller's connection may default to tuples.
    try:
        with conn.cursor(DictCursor) as cur:
            cur.execute(sql)
            return cur.fetchall()
    except DRIVER_ERRORS as e:
        raise translate(e, where_of(conn)) from e


def detect_flavor(conn: Connection[Any]) -> ServerFlavor:
    """The flavor of the server behind ``conn``, from ``SELECT VERSION()``."""
    rows = _query(conn, "SELECT VERSION() AS version")
    return ServerFlavor.from_version_string(str(rows[0]["version"]))


def _monitor_privilege(flavor: ServerFlavor) -> str:
    if flavor.is_mariadb and flavor.version >= (10, 5, 9):
        return "REPLICA MONITOR"
    return "REPLICATION CLIENT"


def fetch_replica_statuses(
    conn: Connection[Any], flavor: ServerFlavor | None = None
) -> list[ReplicaStatus]:
    """Every replication channel of the server, in the server's order.

    The flavor is detected with ``SELECT VERSION()`` unless given.  An empty
    list means the server is not a replica.
    """
    if flavor is None:
        flavor = detect_flavor(conn)
    statement = flavor.replica_status_statement
    try:
        with conn.cursor(DictCursor) as cur:
            cur.execute(statement)
            rows = cur.fetchall()
    except DRIVER_ERRORS as e:
        code = code_of(e)
        if code == ER_SPECIFIC_ACCESS_DENIED:
            raise ReplicaStatusError(
                f"{where_of(conn)} refused {statement}: {e.args[1] if len(e.args) > 1 else e}",
                fix=f"GRANT {_monitor_privilege(flavor)} ON *.* TO the account lagd connects as",
            ) from e
        if code == ER_PARSE_ERROR:
            raise ReplicaStatusError(
                f"{where_of(conn)} does not understand {statement}, so it is not {flavor}",
                fix="let lagd detect the flavor (flavor=None) instead of passing one",
            ) from e
        raise translate(e, where_of(conn)) from e
    gtid_slave_pos: str | None = None
    if flavor.is_mariadb and any("Gtid_Slave_Pos" not in row for row in rows):
        # Only SHOW ALL SLAVES STATUS carries the server-wide applied position.
        pos_rows = _query(conn, "SELECT @@GLOBAL.gtid_slave_pos AS pos")
        gtid_slave_pos = str(pos_rows[0]["pos"] or "") or None
    return [parse_replica_status(row, flavor, gtid_slave_pos=gtid_slave_pos) for row in rows]


def _channel_label(name: str) -> str:
    return repr(name) if name else "'' (the default channel)"


def fetch_replica_status(
    conn: Connection[Any], channel: str = "", flavor: ServerFlavor | None = None
) -> ReplicaStatus:
    """The status of one channel ('' is the default one).

    Raises :class:`NotAReplicaError` when the server is not a replica, or has
    no such channel (the error lists the channels it has).  Channel names
    match exactly first, then ignoring case, as both servers treat them.
    """
    if flavor is None:
        flavor = detect_flavor(conn)
    statuses = fetch_replica_statuses(conn, flavor)
    where = f"{where_of(conn)} ({flavor})"
    if not statuses:
        if flavor.is_mariadb:
            how = "CHANGE MASTER TO ... then START SLAVE"
        elif flavor.version >= (8, 0, 23):
            how = "CHANGE REPLICATION SOURCE TO ... then START REPLICA"
        else:
            how = "CHANGE MASTER TO ... then START SLAVE"
        raise NotAReplicaError(
            f"{where} is not a replica: {flavor.replica_status_statement} returned no rows",
            fix=f"point lagd at a replica, or make this server one ({how})",
        )
    exact = [s for s in statuses if s.channel == channel]
    if len(exact) == 1:
        return exact[0]
    folded = [s for s in statuses if s.channel.casefold() == channel.casefold()]
    if len(folded) == 1:
        return folded[0]
    names = [s.channel for s in statuses]
    raise NotAReplicaError(
        f"{where} has no replication channel {_channel_label(channel)}; "
        f"it has {', '.join(_channel_label(n) for n in names)}",
        fix="configure lagd with one of the channels listed",
        channels=names,
    )


def relay_log_index(conn: Connection[Any], override: str = "") -> Path:
    """Where the replica's relay-log index is: ``override`` (the config), else the server says.

    ``@@relay_log_index`` may be relative to the datadir; without it the
    index is ``@@relay_log_basename`` + ``.index``.
    """
    if override:
        return Path(override)
    rows = _query(conn, "SELECT @@GLOBAL.relay_log_index AS i, @@GLOBAL.relay_log_basename AS b,"
                        " @@GLOBAL.datadir AS d")
    row = rows[0] if rows else {}
    index, basename, datadir = (_str_or_none(row.get(k)) for k in ("i", "b", "d"))
    if index:
        p = Path(index)
        return p if p.is_absolute() or not datadir else Path(datadir) / p
    if basename:
        return Path(f"{basename}.index")
    raise LagdError(f"{where_of(conn)} does not say where its relay-log index is",
                    fix="set replica.relay_log_index in the config")


def _str_or_none(value: object) -> str | None:
    if value is None:
        return None
    return bytes(value).decode() if isinstance(value, bytes | bytearray) else str(value)
