"""The heartbeat table: pt-heartbeat's layout, its timestamps and names, and errors."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from lagd.errors import LagdError
from lagd.mysql.errors import DatabaseError

log = logging.getLogger("lagd.heartbeat")

DEFAULT_TABLE: Final = "percona.heartbeat"

# pt-heartbeat's own definition (--create-table), column for column.
_TABLE_BODY: Final = (
    "(ts varchar(26) NOT NULL, server_id int unsigned NOT NULL PRIMARY KEY, "
    "file varchar(255) DEFAULT NULL, position bigint unsigned DEFAULT NULL, "
    "relay_master_log_file varchar(255) DEFAULT NULL, exec_master_log_pos bigint unsigned DEFAULT NULL)"
)

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


def _missing(table: str, e: DatabaseError) -> HeartbeatTableMissingError:
    return HeartbeatTableMissingError(
        f"heartbeat table {table} does not exist on {e.where or 'the server'} ({e.detail})",
        fix="create it on the source (lagd heartbeat --source DSN --create-table, or pt-heartbeat "
        '--create-table), or set lag.heartbeat_table = "" to measure lag without heartbeats',
    )


def _denied(table: str, e: DatabaseError, grant: str) -> HeartbeatError:
    return HeartbeatError(
        f"{e.where or 'the server'} refused access to heartbeat table {table} ({e.detail})",
        fix=f"GRANT {grant} ON {table} TO the account lagd connects as",
    )
