"""pt-heartbeat compatible heartbeats: the table, a reader and a writer.

A writer on the source stamps one row (its ``server_id``) with the source's
UTC clock every interval; the row replicates like any other write, so on a
replica ``now - ts`` is how old the newest applied change is, whatever the
threads report.  The table and the timestamp text are exactly what
``pt-heartbeat --update --utc`` writes, so either tool can write and either
can read.  ``lagd heartbeat`` (:func:`heartbeat_command`) runs the writer.
"""

from lagd.heartbeat.cli import SourceDsn, heartbeat_command, parse_dsn
from lagd.heartbeat.reader import read_heartbeat
from lagd.heartbeat.table import (
    DEFAULT_TABLE,
    DsnError,
    HeartbeatError,
    HeartbeatRow,
    HeartbeatTableMissingError,
    create_table_sql,
    format_ts,
    parse_ts,
    quote_table,
    split_table,
)
from lagd.heartbeat.writer import HeartbeatWriter

__all__ = [
    "DEFAULT_TABLE",
    "DsnError",
    "HeartbeatError",
    "HeartbeatRow",
    "HeartbeatTableMissingError",
    "HeartbeatWriter",
    "SourceDsn",
    "create_table_sql",
    "format_ts",
    "heartbeat_command",
    "parse_dsn",
    "parse_ts",
    "quote_table",
    "read_heartbeat",
    "split_table",
]

