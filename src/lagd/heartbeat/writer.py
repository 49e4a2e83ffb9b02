"""The heartbeat writer: stamps the source's row every interval while it is writable."""

from __future__ import annotations

import logging
import random as _random
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from lagd.heartbeat.table import (
    HeartbeatError,
    _denied,
    _ident,
    _missing,
    create_table_sql,
    format_ts,
    quote_table,
    split_table,
)
from lagd.mysql.backoff import backoff_delay
from lagd.mysql.endpoint import where_of
from lagd.mysql.errors import (
    DRIVER_ERRORS,
    ER_BAD_DB,
    ER_DBACCESS_DENIED,
    ER_DUP_ENTRY,
    ER_NO_SUCH_TABLE,
    ER_PARSE_ERROR,
    ER_SPECIFIC_ACCESS_DENIED,
    ER_TABLEACCESS_DENIED,
    DatabaseError,
    Kind,
    is_database_error,
    translate,
)
from lagd.mysql.faultlog import FailureLog
from lagd.mysql.replica import ReplicaStatusError, ServerFlavor, detect_flavor, fetch_replica_statuses
from lagd.mysql.session import execute, query

log = logging.getLogger("lagd.heartbeat")


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
    ``connect`` returns a blocking connection (``Endpoint.connect_blocking(
    read_only=False)`` on the source). A lost source is retried on a short
    backoff (capped at ``backoff_cap``, 1.5 s): every second without a beat
    reads as a second of lag on every replica.
    ``sleep``/``random``/``clock``/``monotonic`` are injectable for tests.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        table: str,
        interval: float = 1.0,
        server_id: int | None = None,
        *,
        create_table: bool = False,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        random: Callable[[], float] = _random.random,
        backoff_base: float = 0.25,
        backoff_cap: float = 1.5,
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
        self._conn: Any = None
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

    def _query(self, conn: Any, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return query(conn, sql, args)

    def _open(self) -> tuple[Any, _Session]:
        if self._conn is not None and self._session is not None:
            return self._conn, self._session
        try:
            conn = self._connect()
        except Exception as e:
            if not is_database_error(e):
                raise
            fault = translate(e, "source")
            if fault.kind is Kind.AUTH or fault.code == ER_DBACCESS_DENIED:
                raise HeartbeatError(
                    f"the server refused the heartbeat writer's login: {fault.message}",
                    fix="check the user and password given with --source, --password-file "
                    "or LAGD_HEARTBEAT_PASSWORD",
                ) from e
            raise fault from e
        try:
            flavor = detect_flavor(conn)
            server_id = self.server_id
            if server_id is None:
                server_id = int(self._query(conn, "SELECT @@server_id AS id")[0]["id"])
        except BaseException:
            with suppress(Exception):
                conn.close()
            raise
        self._conn, self._session = conn, _Session(flavor, server_id)
        return conn, self._session

    def _set_paused(self, paused: bool, conn: Any, why: str = "") -> None:
        if paused == self._paused:
            return
        if paused:
            log.warning(
                "heartbeat paused: %s is read-only (%s); resumes when it is writable", where_of(conn), why
            )
        elif self._paused is not None:
            log.warning("heartbeat resumed: %s is writable again", where_of(conn))
        self._paused = paused

    def _read_only(self, conn: Any, s: _Session) -> str | None:
        if s.flavor.is_mysql and s.flavor.version >= (5, 7, 8):
            sql = "SELECT @@global.read_only AS read_only, @@global.super_read_only AS super_read_only"
        else:
            sql = "SELECT @@global.read_only AS read_only"
        row = self._query(conn, sql)[0]
        if _writable(row):
            return None
        return ", ".join(f"{k}={v}" for k, v in row.items())

    def _columns(self, conn: Any, s: _Session) -> dict[str, str]:
        if s.columns is not None:
            return s.columns
        if self.create_table:
            # pt-heartbeat wants the schema to exist; the default percona.* rarely does.
            self._query(conn, f"CREATE DATABASE IF NOT EXISTS {_ident(split_table(self.table)[0])}")
            self._query(conn, create_table_sql(self.table))
        try:
            names = {str(r["Field"]).lower() for r in self._query(conn, f"SHOW COLUMNS FROM {self._quoted}")}
        except DatabaseError as e:
            if e.code in (ER_NO_SUCH_TABLE, ER_BAD_DB):
                err = _missing(self.table, e)
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

    def _coordinates(self, conn: Any, s: _Session) -> dict[str, object]:
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
        except DatabaseError as e:
            if e.code not in (ER_SPECIFIC_ACCESS_DENIED, ER_PARSE_ERROR):
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

    def _write(self, conn: Any, s: _Session, columns: dict[str, str]) -> None:
        values = self._coordinates(conn, s)
        names = ["ts", *columns.values()]
        args: list[object] = [format_ts(self._clock()), *(values[k] for k in columns)]
        sets = ", ".join(f"`{n}` = %s" for n in names)
        update = f"UPDATE {self._quoted} SET {sets} WHERE server_id = %s"
        changed = execute(conn, update, (*args, s.server_id))
        if changed == 0:
            # pt-heartbeat needs the row inserted beforehand; we insert it on the first beat.
            cols = ", ".join(f"`{n}`" for n in [*names, "server_id"])
            marks = ", ".join(["%s"] * (len(names) + 1))
            try:
                execute(conn, f"INSERT INTO {self._quoted} ({cols}) VALUES ({marks})", (*args, s.server_id))
            except DatabaseError as e:
                if e.code != ER_DUP_ENTRY:
                    raise
        try:
            conn.commit()  # a no-op under autocommit; the writer may be handed a connection without it
        except DRIVER_ERRORS as e:
            raise translate(e, where_of(conn)) from e

    def beat(self) -> bool:
        """Write one heartbeat; False when paused because the server is read-only.

        Server failures are :class:`DatabaseError` and drop the connection,
        so the next beat reconnects; configuration errors are
        :class:`HeartbeatError`.
        """
        conn, s = self._open()
        try:
            why = self._read_only(conn, s)
            if why is not None:
                self._set_paused(True, conn, why)
                return False
            columns = self._columns(conn, s)
            self._write(conn, s, columns)
        except DatabaseError as e:
            if e.kind is Kind.READ_ONLY:
                # Turned read-only between the check and the write.
                self._set_paused(True, conn, e.message)
                return False
            if e.code in (ER_TABLEACCESS_DENIED, ER_DBACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED):
                raise _denied(self.table, e, "SELECT, INSERT, UPDATE (and CREATE with --create-table)") from e
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        self._set_paused(False, conn)
        self.written += 1
        return True

    def run(self, stop: threading.Event) -> None:
        """Beat every ``interval`` seconds until ``stop`` is set.

        Server failures are retried with capped exponential backoff and
        jitter, logged once with their cause (then once a minute while they
        last) and once more on recovery; a :class:`HeartbeatError`
        (configuration) ends the loop. Missed beats are skipped, never
        written in a burst.
        """
        pause: Callable[[float], object] = self._sleep or stop.wait
        failures = FailureLog(log, "heartbeat writer", clock=self._monotonic)
        attempt = 0
        due = self._monotonic()
        try:
            while not stop.is_set():
                try:
                    self.beat()
                except DatabaseError as e:
                    delay = backoff_delay(
                        attempt, base=self.backoff_base, cap=self.backoff_cap, rand=self._random
                    )
                    attempt += 1
                    failures.failed(e, retry_in=delay)
                    pause(delay)
                    due = self._monotonic()
                    continue
                failures.recovered()
                attempt = 0
                now = self._monotonic()
                due = max(due + self.interval, now)
                pause(due - now)
        finally:
            self.close()
