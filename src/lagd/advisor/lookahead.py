"""Big transactions coming up in the relay log, seen before the SQL thread gets there.

:class:`Lookahead` is fed every event the relay-log reader yields, in order.
It keeps a frozen :class:`TransactionSummary` for each *big* transaction
between the SQL thread and the end of the relay log, and reports the big
transaction still being read (a 1 GB LOAD DATA is visible while it streams
in). Small transactions only update counters.

It sees up to ~100,000 row changes a second, so a row change costs two
attribute updates and two identity checks; statement text is kept only as a
short head and classified only once a transaction has turned out big. No row
values are held: memory is bounded whatever the transaction's size.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from lagd.relaylog import (
    CorruptEvent,
    Ddl,
    Event,
    LoadData,
    RelayPosition,
    Resynced,
    RowChange,
    RowKind,
    RowsQuery,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)


class TxKind(StrEnum):
    LOAD_DATA = "load_data"
    INSERT_SELECT = "insert_select"
    BULK_UPDATE = "bulk_update"
    BULK_DELETE = "bulk_delete"
    BULK_INSERT = "bulk_insert"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class LookaheadConfig:
    """What counts as big, and how much is kept.

    A transaction is big when any of its measures reaches its threshold.
    ``big_exec_seconds`` catches statement-based statements whose row count
    the log does not carry: the replica re-runs them for about as long.
    """

    big_bytes: int = 16 * 1024 * 1024
    big_rows: int = 100_000
    big_exec_seconds: int = 10
    max_kept: int = 1000  # big transactions listed; more are only counted
    statement_chars: int = 400
    max_tables: int = 64  # table names kept per summary


@dataclass(frozen=True, slots=True)
class TransactionSummary:
    """One big transaction, as far as the relay log tells.

    ``size_bytes`` is MySQL 8's transaction_length when the log carries it,
    else the bytes counted in the relay log (``size_basis`` says which); for
    a transaction still being read it is what has been read so far.
    ``source_exec_seconds`` is the source's run time of a statement-based
    statement (the header's whole seconds); row events carry none.
    """

    start: RelayPosition
    end: RelayPosition | None  # None while it is still being read
    gtid: str | None
    source_file: str | None
    source_pos: int | None
    commit_time: float  # source commit, seconds since the epoch
    size_bytes: int
    size_basis: str
    rows: int
    row_events: int
    statements: int
    tables: tuple[str, ...]
    key_columns: tuple[str, ...]  # the key of its only table, when it has one
    statement: str | None  # the head of its first statement, when the log has text
    default_schema: str | None  # the statement's default database (statement-based only)
    source_exec_seconds: int | None
    load_data_bytes: int | None  # statement-based LOAD DATA: file bytes in the log
    load_data_lines: int | None
    kind: TxKind
    kind_reason: str
    complete: bool
    committed: bool = True

    @property
    def rows_estimate(self) -> int:
        """Rows it changes: counted from row events, else the LOAD DATA file's lines."""
        return self.rows or self.load_data_lines or 0

    @property
    def statement_based(self) -> bool:
        return self.rows == 0 and (self.load_data_bytes is not None or self.source_exec_seconds is not None)

    @property
    def bytes_per_row(self) -> float | None:
        rows = self.rows_estimate
        return self.size_bytes / rows if rows and self.size_bytes else None

    @property
    def table(self) -> str | None:
        return self.tables[0] if len(self.tables) == 1 else None

    def describe(self) -> str:
        where = f"gtid {self.gtid}" if self.gtid else f"relay {self.start}"
        what = f"{self.rows_estimate:,} rows" + ("" if self.rows else " (file lines)")
        state = "" if self.complete else ", still being read"
        on = ", ".join(self.tables) if self.tables else "unknown tables"
        return f"{self.kind} ({where}): {_mib(self.size_bytes)}, {what} on {on}{state}"


@dataclass(slots=True)
class LookaheadStats:
    transactions: int = 0  # complete transactions seen
    big: int = 0
    big_not_kept: int = 0  # big ones beyond max_kept: counted, not listed
    bytes: int = 0
    rows: int = 0
    abandoned: int = 0  # half-read transactions dropped after damage or a resync
    resyncs: int = 0  # Resynced events: the reader jumped and the list was cleared


class Lookahead:
    """Accumulates the reader's events; see the module docstring."""

    def __init__(
        self,
        config: LookaheadConfig | None = None,
        on_big: Callable[[TransactionSummary], None] | None = None,
    ) -> None:
        """``on_big`` is called with the summary of every big transaction as
        its end is read, listed or not (beyond ``max_kept``)."""
        self.config = config if config is not None else LookaheadConfig()
        self.on_big = on_big
        self.stats = LookaheadStats()
        self._coming: deque[TransactionSummary] = deque()
        # The transaction being read; _reset_open() clears these.
        self._open: TransactionStart | None = None
        self._rare = False  # one of the fields _reset_rare clears was set
        self._rows = 0
        self._kind: RowKind | None = None
        self._mixed = False
        self._table: TableInfo | None = None
        self._tables: list[TableInfo] = []  # distinct by identity; named only when summarised
        self._queries = 0
        self._sql_statements = 0
        self._text: str | None = None
        self._schema: str | None = None
        self._exec: int | None = None
        self._load_bytes: int | None = None
        self._load_lines: int | None = None

    # -- feeding ---------------------------------------------------------

    def feed(self, events: Iterable[Event | Resynced]) -> None:
        for ev in events:
            if type(ev) is RowChange:
                # The hot path: one per row. Everything rare is in _shape.
                self._rows += 1
                if ev.kind is not self._kind or ev.table is not self._table:
                    self._shape(ev)
            elif type(ev) is TransactionStart:
                # _end reset a finished transaction; anything else here never
                # ended, or came before any start (the reader began mid-way).
                if self._open is not None or self._rows or self._queries or self._sql_statements:
                    self._abandon()
                self._open = ev
            elif type(ev) is TransactionEnd:
                self._end(ev)
            elif type(ev) is RowsQuery:
                self._rare = True
                self._queries += 1
                if self._text is None:
                    self._text = ev.sql[: self.config.statement_chars]
            elif type(ev) is LoadData:
                self._sql(ev.sql, ev.exec_time, ev.schema)
                self._load_bytes = (self._load_bytes or 0) + ev.data_bytes
                self._load_lines = (self._load_lines or 0) + ev.data_lines
            elif type(ev) is Statement:
                self._sql(ev.sql, ev.exec_time, ev.schema)
            elif type(ev) is Ddl:
                self._sql(ev.sql, None, ev.schema)
            elif type(ev) is CorruptEvent:
                self._abandon()
            elif type(ev) is Resynced:
                # The reader jumped: what was listed may have been applied or
                # renumbered, and the half-read transaction is gone.
                self._abandon()
                self._coming.clear()
                self.stats.resyncs += 1

    def _reset_open(self) -> None:
        self._open = None
        self._rows = 0
        self._kind = None
        self._table = None
        if self._tables:
            self._tables.clear()  # read only by _summary, which made its own tuple
        if self._rare:
            self._reset_rare()

    def _reset_rare(self) -> None:
        """What only a statement, a Rows_query event or a second kind of row sets: most
        transactions of a row-based backlog set none, and skip this."""
        self._rare = False
        self._mixed = False
        self._queries = 0
        self._sql_statements = 0
        self._text = None
        self._schema = None
        self._exec = None
        self._load_bytes = None
        self._load_lines = None

    def _abandon(self) -> None:
        if self._open is not None:
            self.stats.abandoned += 1
        self._reset_open()

    def _shape(self, ev: RowChange) -> None:
        """A row whose kind or table differs from the previous row's: once
        per row event at most, not once per row."""
        if self._kind is None:
            self._kind = ev.kind
        elif ev.kind is not self._kind:
            self._rare = self._mixed = True
            self._kind = ev.kind  # so that only the next change comes back here
        if ev.table is not self._table:
            if len(self._tables) < self.config.max_tables:
                self._tables.append(ev.table)
            self._table = ev.table

    def _sql(self, sql: str, exec_time: int | None, schema: str | None) -> None:
        self._rare = True
        self._sql_statements += 1
        if self._text is None:
            self._text = sql[: self.config.statement_chars]
            self._schema = schema
        if exec_time is not None and (self._exec is None or exec_time > self._exec):
            self._exec = exec_time

    def _end(self, ev: TransactionEnd) -> None:
        start = self._open
        if start is None:
            self._reset_open()  # the reader started inside it, or its start was damaged
            return
        cfg = self.config
        size = start.size if start.size is not None else ev.size
        st = self.stats
        st.transactions += 1
        st.bytes += size
        st.rows += ev.rows
        big = (
            size >= cfg.big_bytes
            or ev.rows >= cfg.big_rows
            or (self._load_lines or 0) >= cfg.big_rows
            or (self._exec or 0) >= cfg.big_exec_seconds
        )
        if big:
            st.big += 1
            kept = len(self._coming) < cfg.max_kept
            summary = None
            if kept or self.on_big is not None:
                summary = self._summary(start, ev, size, tuple(sorted(ev.tables)[: cfg.max_tables]))
            if summary is not None and kept:
                self._coming.append(summary)
            else:
                st.big_not_kept += 1
            if summary is not None and self.on_big is not None:
                self.on_big(summary)
        self._reset_open()

    def _summary(
        self, start: TransactionStart, end: TransactionEnd | None, size: int, tables: tuple[str, ...],
    ) -> TransactionSummary:
        rows = end.rows if end is not None else self._rows
        statements = end.statements if end is not None else max(self._queries, self._sql_statements)
        if end is not None and start.size is None:
            basis = "counted"
        elif start.size is not None:
            basis = "transaction_length"
        else:
            basis = "read so far"
        row_kind = None if self._mixed else self._kind
        kind, why = classify(self._text, statements, row_kind, len(tables), self._load_bytes is not None,
                             complete=end is not None)
        if not tables and kind is TxKind.LOAD_DATA and self._text is not None:
            # Statement-based: no row events name the table, the statement does.
            target = load_data_target(self._text, self._schema)[1]
            tables = (target,) if target else ()
        return TransactionSummary(
            start=RelayPosition(start.relay_file, start.relay_offset),
            end=RelayPosition(end.relay_file, end.relay_offset) if end is not None else None,
            gtid=start.gtid,
            source_file=start.source_file,
            source_pos=start.source_pos,
            commit_time=start.commit_time,
            size_bytes=size,
            size_basis=basis,
            rows=rows,
            row_events=end.row_events if end is not None else 0,
            statements=statements,
            tables=tables,
            key_columns=self._key_columns(tables),
            statement=self._text,
            default_schema=self._schema,
            source_exec_seconds=self._exec,
            load_data_bytes=self._load_bytes,
            load_data_lines=self._load_lines,
            kind=kind,
            kind_reason=why,
            complete=end is not None,
            committed=end.committed if end is not None else True,
        )

    def _key_columns(self, tables: tuple[str, ...]) -> tuple[str, ...]:
        if len(tables) != 1:
            return ()
        for t in self._tables:
            if t.qualified == tables[0] and t.key is not None:
                return tuple(t.columns[i].name for i in t.key.columns)
        return ()

    # -- asking ------------------------------------------------------------

    def applied_up_to(self, position: RelayPosition) -> int:
        """Forget the big transactions the SQL thread has applied (those that
        end at or before ``position``, its Relay_Log_File/Relay_Log_Pos).
        Returns how many were dropped."""
        dropped = 0
        coming = self._coming
        while coming and coming[0].end is not None and coming[0].end <= position:
            coming.popleft()
            dropped += 1
        return dropped

    def coming(self) -> tuple[TransactionSummary, ...]:
        """The complete big transactions not yet applied, in relay-log order."""
        return tuple(self._coming)

    def next_coming(self) -> TransactionSummary | None:
        """The first of :meth:`coming`: the one the SQL thread reaches next."""
        return self._coming[0] if self._coming else None

    def biggest_coming(self) -> TransactionSummary | None:
        """The biggest (in bytes) of :meth:`coming` and :meth:`in_progress`."""
        candidates = list(self._coming)
        current = self.in_progress()
        if current is not None:
            candidates.append(current)
        return max(candidates, key=lambda s: s.size_bytes, default=None)

    def facts(self, read_position: RelayPosition | None = None) -> dict[str, int | None]:
        """What the settings rules want to know about what is coming, as
        keyword arguments for ``ServerSettings.with_facts``."""
        every = list(self._coming)
        current = self.in_progress(read_position)
        if current is not None:
            every.append(current)
        loads = [s.load_data_bytes for s in every if s.load_data_bytes is not None]
        return {
            "biggest_coming_bytes": max((s.size_bytes for s in every), default=None),
            "statement_load_bytes": max(loads, default=None),
        }

    def in_progress(self, read_position: RelayPosition | None = None) -> TransactionSummary | None:
        """The transaction being read now, when it is already big.

        Its size is MySQL 8's transaction_length when the log has it; else,
        given the reader's position, the bytes read so far (when the
        transaction has not crossed into another relay-log file).
        """
        start = self._open
        if start is None:
            return None
        size = start.size
        if size is None:
            size = 0
            if read_position is not None and read_position.file == start.relay_file:
                size = max(0, read_position.offset - start.relay_offset)
        cfg = self.config
        big = (
            size >= cfg.big_bytes
            or self._rows >= cfg.big_rows
            or (self._load_lines or 0) >= cfg.big_rows
            or (self._exec or 0) >= cfg.big_exec_seconds
        )
        if not big:
            return None
        return self._summary(start, None, size, tuple(sorted({t.qualified for t in self._tables})))

    def clear(self) -> None:
        """Forget everything listed (the relay log was reset or renumbered)."""
        self._coming.clear()
        self._abandon()


# -- classification -----------------------------------------------------------
#
# A light matcher over the head of the statement text, not a parser: it
# must cope with truncated text, comments, hints and any identifier quoting,
# and it runs only for transactions that turned out big.

_COMMENTS = re.compile(r"(?:\s+|/\*.*?\*/|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$))*", re.S)
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_TABLE = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_LOAD = re.compile(r"LOAD\s+(?:DATA|XML)\b", re.I)
_INSERT_HEAD = re.compile(
    rf"(?:INSERT|REPLACE)(?:\s+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE))*\s+(?:INTO\s+)?({_TABLE})"
    r"(?:\s*PARTITION\s*\([^)]*\))?",
    re.I,
)
_CTAS = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\b.*?\bSELECT\b", re.I | re.S)
_SELECTISH = re.compile(r"\(*\s*(?:SELECT|WITH|TABLE)\b", re.I)
_VALUESISH = re.compile(r"(?:VALUES?|SET)\b", re.I)
_FIRST_WORD = re.compile(r"\(*\s*([A-Za-z]+)")


def _strip_leading_comments(text: str) -> str:
    m = _COMMENTS.match(text)
    return text[m.end():] if m else text


def _skip_parens(s: str) -> int:
    """Index just past the parenthesis group that ``s`` opens; -1 if it
    does not close within the text (truncated)."""
    depth = 0
    quote = ""
    i = 0
    while i < len(s):
        c = s[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"`":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def classify_statement(text: str) -> tuple[TxKind | None, str]:
    """The kind of one statement from its text, and what it is in words;
    the kind is None when the text does not tell."""
    s = _strip_leading_comments(text)
    if _LOAD.match(s):
        return TxKind.LOAD_DATA, "a LOAD DATA"
    m = _INSERT_HEAD.match(s)
    if m:
        verb = s.split(None, 1)[0].upper()
        rest = s[m.end():].lstrip()
        if rest.startswith("(") and not _SELECTISH.match(rest):
            end = _skip_parens(rest)  # a column list
            if end < 0:
                return None, f"{verb} into {m.group(1)}, truncated inside its column list"
            rest = rest[end:].lstrip()
        if _SELECTISH.match(rest):
            return TxKind.INSERT_SELECT, f"{verb} ... SELECT into {m.group(1)}"
        if _VALUESISH.match(rest):
            return TxKind.BULK_INSERT, f"{verb} ... VALUES into {m.group(1)}"
        return None, f"{verb} into {m.group(1)} followed by something unrecognised"
    if _CTAS.match(s):
        return TxKind.INSERT_SELECT, "CREATE TABLE ... SELECT"
    w = _FIRST_WORD.match(s)
    word = w.group(1).upper() if w else ""
    if word == "UPDATE":
        return TxKind.BULK_UPDATE, "an UPDATE"
    if word == "DELETE":
        return TxKind.BULK_DELETE, "a DELETE"
    return None, f"a statement starting with {word or 'no keyword'}"


_INFILE = re.compile(r"\bINFILE\s+'((?:[^'\\]|\\.|'')*)'", re.I)
_INTO_TABLE = re.compile(rf"\bINTO\s+TABLE\s+({_TABLE})", re.I)


def _unquote(ident: str) -> list[str]:
    parts = re.findall(r"`((?:[^`]|``)+)`|([\w$]+)", ident)
    return [q.replace("``", "`") if q else bare for q, bare in parts]


def load_data_target(text: str, default_schema: str | None = None) -> tuple[str | None, str | None]:
    """The file and the ``schema.table`` a LOAD DATA statement names (None
    where the text does not say: truncated, or no default schema)."""
    m = _INFILE.search(text)
    path = m.group(1).replace("''", "'") if m else None
    t = _INTO_TABLE.search(text)
    if t is None:
        return path, None
    parts = _unquote(t.group(1))
    if len(parts) == 1:
        return path, f"{default_schema}.{parts[0]}" if default_schema else None
    return path, f"{parts[0]}.{parts[1]}"


_ROW_KINDS = {
    RowKind.INSERT: (TxKind.BULK_INSERT, "write-rows"),
    RowKind.UPDATE: (TxKind.BULK_UPDATE, "update-rows"),
    RowKind.DELETE: (TxKind.BULK_DELETE, "delete-rows"),
}


def classify(
    text: str | None,
    statements: int,
    row_kind: RowKind | None,
    tables: int,
    load_event: bool,
    *,
    complete: bool = True,
) -> tuple[TxKind, str]:
    """A big transaction's kind and the reason, from what the log carries.

    ``row_kind`` is the one kind of all its row changes, None when mixed or
    none; ``statements`` counts statement ends (row events) and SQL
    statements. Text wins over row shape; without text, one statement's
    rows of one kind on one table still say bulk insert/update/delete.
    """
    if load_event:
        return TxKind.LOAD_DATA, "statement-based LOAD DATA (the file travels in the relay log)"
    several = statements > 1
    what = ""
    if text is not None:
        kind, what = classify_statement(text)
        if kind is TxKind.LOAD_DATA:
            # However many statements: the advice (commit the load in chunks) holds.
            also = f", {statements} statements in the transaction" if several else ""
            return kind, f"the statement is {what}, logged row-based{also}"
        if kind is not None and not several:
            return kind, f"the statement is {what}"
        if several:
            return TxKind.OTHER, f"{statements} statements in one transaction, the first {what}"
    if several:
        return TxKind.OTHER, f"{statements} statements in one transaction"
    if row_kind is None:
        why = "mixed or no row changes"
        return TxKind.OTHER, why if text is None else f"{why}; the text is {what}"
    if tables != 1:
        return TxKind.OTHER, f"only {_ROW_KINDS[row_kind][1]} events, but on {tables} tables"
    kind, events = _ROW_KINDS[row_kind]
    so_far = "so far " if not complete else ""
    source = "no statement text in the log" if text is None else f"the text is {what}"
    return kind, f"{so_far}only {events} events on one table from one statement ({source})"


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):,.1f} MiB"


__all__ = [
    "Lookahead",
    "LookaheadConfig",
    "LookaheadStats",
    "TransactionSummary",
    "TxKind",
    "classify",
    "classify_statement",
    "load_data_target",
]
