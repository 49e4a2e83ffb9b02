"""The events that leave the relay-log reader: our own frozen value types.

Nothing outside ``lagd.relaylog`` sees a pymysqlreplication object. Events
keep raw integers for their coordinates and build :class:`Position` values
only when asked, because the reader makes hundreds of thousands of these a
second and most are consumed without looking at where they came from.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lagd.relaylog.position import Position, RelayPosition


class RowKind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_name: str
    nullable: bool
    unsigned: bool = False
    charset: str | None = None  # Python codec for text; None for binary/non-text
    # The server's character set of a CHAR/VARCHAR/TEXT column ("latin1"); None for any
    # other column, or where neither the log nor information_schema says it. A probe
    # converts its key to it (rewrite_sql.index_probe_sql).
    charset_name: str | None = None


@dataclass(frozen=True, slots=True)
class Index:
    name: str
    columns: tuple[int, ...]  # ordinal positions in the table
    unique: bool
    primary: bool = False
    prefix_lengths: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True)
class ForeignKey:
    """A foreign key of this table (the child): InnoDB checks each new value of
    ``columns`` in ``parent_columns`` of the parent table, a read of the parent's
    index the SQL thread makes for every INSERT and every UPDATE that sets them."""

    name: str
    columns: tuple[int, ...]  # ordinal positions in the child table
    parent_schema: str
    parent_table: str
    parent_columns: tuple[str, ...]  # in the order of ``columns``


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table as the reader knows it, and which columns it decodes.

    ``needed`` lists (ascending) the ordinals decoded into each RowChange; a
    row's values are aligned with it. ``key`` is the index that identifies a
    row: the primary key, else a unique key over NOT NULL columns, else None
    (rows are then counted as not probeable).
    """

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: Index | None
    indexes: tuple[Index, ...]
    needed: tuple[int, ...]
    source: str  # "table_map", "information_schema" or "table_map+information_schema"
    # Only information_schema knows them; the table map never does.
    foreign_keys: tuple[ForeignKey, ...] = ()
    # The bytes a row takes in the clustered index, its off-page BLOB and TEXT parts
    # included (information_schema.TABLES.AVG_ROW_LENGTH, InnoDB's estimate); None: unknown.
    row_bytes: int | None = None

    @property
    def probeable(self) -> bool:
        return self.key is not None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def slot(self, ordinal: int) -> int:
        """Where column ``ordinal`` sits in a RowChange's value tuples."""
        return self.needed.index(ordinal)

    def key_values(self, values: tuple[object, ...]) -> tuple[object, ...] | None:
        if self.key is None:
            return None
        return tuple(values[self.needed.index(c)] for c in self.key.columns)


@dataclass(frozen=True, slots=True)
class Gtid:
    """A GTID as the server writes it: ``uuid[:tag]:gno`` or ``domain-server-seq``.

    Events carry the text; this is its parsed form, made on demand.
    """

    text: str
    flavor: str  # "mysql" or "mariadb"
    origin: str  # source UUID, or MariaDB "domain-server"
    sequence: int
    tag: str | None = None

    @classmethod
    def parse(cls, text: str) -> Gtid:
        if ":" in text:
            head, _, number = text.rpartition(":")
            uuid, _, tag = head.partition(":")
            return cls(text, "mysql", uuid, int(number), tag or None)
        domain, server, seq = text.split("-")
        return cls(text, "mariadb", f"{domain}-{server}", int(seq))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class TransactionStart:
    """The first event of a transaction (GTID, anonymous GTID or BEGIN).

    ``commit_time`` is the source's commit time in seconds since the epoch:
    MySQL 8's original_commit_timestamp (microseconds) when the log has it,
    otherwise the event header's second. ``size`` is MySQL 8's
    transaction_length (bytes, GTID event included) when the log says it.
    """

    relay_file: str
    relay_offset: int
    source_file: str | None
    source_pos: int | None
    gtid: str | None
    commit_time: float
    header_time: int
    server_id: int
    size: int | None = None
    immediate_commit_time: float | None = None
    last_committed: int | None = None
    sequence_number: int | None = None
    standalone: bool = False  # MariaDB FL_STANDALONE: no COMMIT follows (DDL)

    @property
    def position(self) -> Position:
        return Position(
            RelayPosition(self.relay_file, self.relay_offset),
            self.source_file,
            self.source_pos,
            self.gtid,
        )

    @property
    def gtid_info(self) -> Gtid | None:
        return Gtid.parse(self.gtid) if self.gtid else None


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    """The end of a transaction: ``relay_offset`` is just past its last event,
    which is where the SQL thread's Relay_Log_Pos stands once it is applied.

    The counters summarise what the reader saw inside it.
    """

    relay_file: str
    relay_offset: int
    source_file: str | None
    source_pos: int | None
    gtid: str | None
    committed: bool
    xid: int | None
    size: int  # bytes in the relay log, counted
    rows: int
    row_events: int
    statements: int  # statements seen: rows-event statement ends plus SQL statements
    tables: frozenset[str]

    @property
    def position(self) -> Position:
        return Position(
            RelayPosition(self.relay_file, self.relay_offset),
            self.source_file,
            self.source_pos,
            self.gtid,
        )

    @property
    def gtid_info(self) -> Gtid | None:
        return Gtid.parse(self.gtid) if self.gtid else None


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row changed by a row event.

    ``before``/``after`` hold the values of ``table.needed`` columns (key and
    indexed columns; every column in decode-all mode): ``before`` for UPDATE
    and DELETE, ``after`` for INSERT and UPDATE, otherwise None.
    """

    table: TableInfo
    kind: RowKind
    before: tuple[object, ...] | None
    after: tuple[object, ...] | None

    @property
    def key(self) -> tuple[object, ...] | None:
        image = self.before if self.before is not None else self.after
        return None if image is None else self.table.key_values(image)


@dataclass(frozen=True, slots=True)
class RowsQuery:
    """The statement behind the following row events (Rows_query, Annotate_rows)."""

    sql: str


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement-based DML statement, run with ``schema`` as default database."""

    schema: str | None
    sql: str
    exec_time: int  # seconds the source took to run it
    header_time: int
    # False when the source session ran it with foreign_key_checks=0 (the Query event's
    # flags2, OPTION_NO_FOREIGN_KEY_CHECKS): the SQL thread then checks no parent either.
    foreign_key_checks: bool = True
    # The first auto-increment value the source gave the statement's rows (an Intvar
    # INSERT_ID event before it), which the SQL thread gives them again; each next one
    # ``auto_increment`` higher (the session's auto_increment_increment, Q_AUTO_INCREMENT).
    insert_id: int | None = None
    auto_increment: int = 1


@dataclass(frozen=True, slots=True)
class LoadData:
    """A statement-based LOAD DATA (Begin_load_query ... Execute_load_query).

    The file's bytes travel in the relay log; ``data_lines`` counts its
    newlines, an estimate of the rows it loads.
    """

    schema: str | None
    sql: str
    exec_time: int
    header_time: int
    data_bytes: int
    data_lines: int


@dataclass(frozen=True, slots=True)
class Ddl:
    """A DDL statement. ``tables`` are the ``schema.table`` names it touches
    when they could be read from the text (empty when unknown)."""

    schema: str | None
    sql: str
    tables: tuple[str, ...]
    header_time: int


@dataclass(frozen=True, slots=True)
class CorruptEvent:
    """An event the reader could not decode. The transaction it belongs to is
    incomplete; the reader resumes at the next transaction boundary."""

    relay_file: str
    relay_offset: int
    reason: str


Event = (
    TransactionStart
    | TransactionEnd
    | RowChange
    | RowsQuery
    | Statement
    | LoadData
    | Ddl
    | CorruptEvent
)
