"""Read the newest heartbeat row on a replica."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lagd.heartbeat.table import HeartbeatError, HeartbeatRow, _denied, _missing, parse_ts, quote_table
from lagd.mysql.errors import ER_BAD_DB, ER_BAD_FIELD, ER_NO_SUCH_TABLE, ER_TABLEACCESS_DENIED, DatabaseError
from lagd.mysql.session import query


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


def read_heartbeat(conn: Any, table: str, server_id: int | None) -> HeartbeatRow | None:
    """The row of ``server_id`` (the source's server id), or the newest row when None.

    ``conn`` is a blocking connection (``BlockingSession.run`` gives one).
    None when there is no such row; connection failures are
    :class:`~lagd.mysql.errors.DatabaseError`.  ``SELECT *`` so that tables made by any
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
        rows = query(conn, sql, args)
    except DatabaseError as e:
        if e.code in (ER_NO_SUCH_TABLE, ER_BAD_DB):
            raise _missing(table, e) from e
        if e.code == ER_TABLEACCESS_DENIED:
            raise _denied(table, e, "SELECT") from e
        if e.code == ER_BAD_FIELD:
            raise HeartbeatError(
                f"heartbeat table {table} has no server_id column (a legacy pt-heartbeat table?)",
                fix="recreate it with pt-heartbeat --create-table or lagd heartbeat --create-table",
            ) from e
        raise
    parsed = [_row(table, r) for r in rows]
    # Newest by parsed time: the text does not sort when ' ' and 'T' forms mix.
    return max(parsed, key=lambda r: r.ts, default=None)
