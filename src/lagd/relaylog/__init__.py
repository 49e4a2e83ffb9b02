"""Relay-log files -> lagd's own event types.

This package is the only place that knows the binary-log format. It imports
no MySQL driver; pymysqlreplication is the tests' reference decoder only
(``tests/unit/reference_decoder.py``).
"""

from lagd.relaylog.decoder import EventDecoder, ReaderStats
from lagd.relaylog.errors import (
    EncryptedRelayLogError,
    NotALogFileError,
    RelayLogAccessError,
    RelayLogError,
    RelayLogPurgedError,
)
from lagd.relaylog.events import (
    Column,
    CorruptEvent,
    Ddl,
    Event,
    ForeignKey,
    Gtid,
    Index,
    LoadData,
    RowChange,
    RowKind,
    RowsQuery,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)
from lagd.relaylog.position import Position, RelayPosition
from lagd.relaylog.reader import LogFiles, RelayLogReader, Resynced, read_log_files
from lagd.relaylog.schema import InformationSchemaResolver, SchemaResolver, TableMapResolver

__all__ = [
    "Column", "CorruptEvent", "Ddl", "EncryptedRelayLogError", "Event", "EventDecoder", "ForeignKey",
    "Gtid",
    "Index", "InformationSchemaResolver", "LoadData", "LogFiles", "NotALogFileError", "Position",
    "ReaderStats", "RelayLogAccessError", "RelayLogError", "RelayLogPurgedError",
    "RelayLogReader", "RelayPosition", "Resynced", "RowChange", "RowKind", "RowsQuery",
    "SchemaResolver", "Statement", "TableInfo", "TableMapResolver", "TransactionEnd",
    "TransactionStart", "read_log_files",
]
