"""Which columns and indexes a table has, for the reader to decode.

Two sources: the table map itself (``binlog_row_metadata=FULL`` carries names
and the primary key) and information_schema on the replica, which alone knows
secondary and unique indexes and foreign keys. The reader asks once per table
definition (it caches decoders by the table map's bytes) and drops the answer
when DDL for the table passes in the relay log.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from lagd.mysql.charsets import charset_of_collation, codec_for_charset, codec_for_collation
from lagd.relaylog import _columns as c
from lagd.relaylog._tablemap import TableMap
from lagd.relaylog.events import Column, ForeignKey, Index, TableInfo

_STRING_TYPE = re.compile(r"(var)?char|(tiny|medium|long)?text")

log = logging.getLogger("lagd.relaylog.schema")

class SchemaResolver(Protocol):
    def resolve(self, tm: TableMap) -> TableInfo: ...

    def invalidate(self, tables: Iterable[str] | None = None) -> None:
        """Forget ``schema.table`` names (all when None)."""


def _needed(columns: int, indexes: Iterable[Index], decode_all: bool) -> tuple[int, ...]:
    if decode_all:
        return tuple(range(columns))
    return tuple(sorted({col for ix in indexes for col in ix.columns}))


def _default_columns(tm: TableMap) -> list[Column]:
    cols = []
    for i in range(tm.column_count):
        t = tm.real_type(i)
        text = t in c.CHARACTER_TYPES or t in (c.T_ENUM, c.T_SET)
        collation = tm.collations[i] if tm.collations else None
        if text and tm.collations is None:
            # Without collation metadata, treat text as utf8 (lossless with
            # surrogateescape); BLOB and BINARY stay bytes only when known.
            codec: str | None = "utf8" if t != c.T_BLOB else None
        else:
            codec = codec_for_collation(collation) if text else None
        named = charset_of_collation(collation) if t in c.CHARACTER_TYPES and collation is not None else None
        cols.append(
            Column(
                name=tm.names[i] if tm.names else f"@{i + 1}",
                type_name=c.TYPE_NAMES.get(t, str(t)),
                nullable=tm.nullable[i],
                unsigned=bool(tm.unsigned[i]) if tm.unsigned else False,
                charset=codec,
                charset_name=None if named == "binary" else named,  # ENUM and SET log numbers
            )
        )
    return cols


class TableMapResolver:
    """Knows only what the log says: names and primary key under FULL metadata."""

    def __init__(self, decode_all: bool = False) -> None:
        self.decode_all = decode_all

    def resolve(self, tm: TableMap) -> TableInfo:
        cols = _default_columns(tm)
        key = None
        if tm.primary_key:
            prefixes = tm.pk_prefixes or tuple(None for _ in tm.primary_key)
            key = Index("PRIMARY", tm.primary_key, unique=True, primary=True,
                        prefix_lengths=prefixes)
        indexes = (key,) if key else ()
        return TableInfo(tm.schema, tm.table, tuple(cols), key, indexes,
                         _needed(len(cols), indexes, self.decode_all), "table_map")

    def invalidate(self, tables: Iterable[str] | None = None) -> None:
        return None


Connect = Callable[[], Any]  # returns a hardened PyMySQL connection with a read timeout


def btree_indexes(stat_rows: Iterable[Mapping[str, Any]], ordinal: Mapping[str, int]) -> list[Index]:
    """The B-tree indexes in information_schema.STATISTICS rows (ordered by index and
    SEQ_IN_INDEX) over the columns ``ordinal`` numbers."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for r in stat_rows:
        grouped.setdefault(str(r["INDEX_NAME"]), []).append(r)
    indexes = []
    for name, parts in grouped.items():
        if any(p["COLUMN_NAME"] not in ordinal for p in parts):
            continue  # functional index over a hidden expression: nothing to decode
        if str(parts[0].get("INDEX_TYPE") or "BTREE").upper() != "BTREE":
            # FULLTEXT, SPATIAL, MariaDB's long-unique HASH: a probe through
            # them would scan the table instead of reading a few pages.
            continue
        indexes.append(
            Index(
                name,
                tuple(ordinal[p["COLUMN_NAME"]] for p in parts),
                unique=not int(parts[0]["NON_UNIQUE"]),
                primary=name == "PRIMARY",
                prefix_lengths=tuple(
                    int(p["SUB_PART"]) if p["SUB_PART"] is not None else None for p in parts
                ),
            )
        )
    return indexes


def foreign_keys(fk_rows: Iterable[Mapping[str, Any]], ordinal: Mapping[str, int]) -> list[ForeignKey]:
    """The foreign keys in information_schema.KEY_COLUMN_USAGE rows (those with a
    REFERENCED_TABLE_NAME, ordered by constraint and ORDINAL_POSITION) over the
    columns ``ordinal`` numbers."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for r in fk_rows:
        if r.get("REFERENCED_TABLE_NAME") is not None:
            grouped.setdefault(str(r["CONSTRAINT_NAME"]), []).append(r)
    out = []
    for name, parts in grouped.items():
        if any(p["COLUMN_NAME"] not in ordinal or p.get("REFERENCED_COLUMN_NAME") is None
               for p in parts):
            continue
        out.append(ForeignKey(name, tuple(ordinal[p["COLUMN_NAME"]] for p in parts),
                              str(parts[0]["REFERENCED_TABLE_SCHEMA"]),
                              str(parts[0]["REFERENCED_TABLE_NAME"]),
                              tuple(str(p["REFERENCED_COLUMN_NAME"]) for p in parts)))
    return out


Rows = list[dict[str, Any]]


class InformationSchemaResolver(TableMapResolver):
    """Adds indexes (and, without FULL metadata, names) from the replica.

    The replica's definition can differ from the log's while the reader is
    ahead of a DDL the SQL thread has not applied; then the column count
    disagrees and the table-map-only answer is used until the DDL passes.
    """

    def __init__(self, connect: Connect, decode_all: bool = False, *,
                 retry_after: Callable[[int], float] = lambda n: min(30.0, 2.0 * 2.0 ** n),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(decode_all)
        self._connect = connect
        # After a failed lookup the replica is left alone for a while: the
        # reader asks while the event loop waits, so a hung replica must cost
        # one read timeout per pause, not one per table map.
        self._retry_after, self._clock = retry_after, clock
        self._failed_in_a_row = 0
        self._next_try = 0.0
        self._conn: Any = None
        self._cache: dict[str, tuple[Rows, Rows, Rows]] = {}  # COLUMNS, STATISTICS, foreign keys
        self._row_bytes: dict[str, int] = {}  # TABLES.AVG_ROW_LENGTH, looked up with them
        self._lock = threading.Lock()
        self._referenced: dict[tuple[str, str], None] = {}  # parents of the foreign keys resolved
        self.lookups = 0
        self.failures = 0
        self.last_error: str | None = None

    def invalidate(self, tables: Iterable[str] | None = None) -> None:
        with self._lock:
            if tables is None:
                self._cache.clear()
                self._row_bytes.clear()
            else:
                for name in tables:
                    self._cache.pop(name, None)
                    self._row_bytes.pop(name, None)

    def _query(self, schema: str, table: str) -> tuple[Rows, Rows, Rows]:
        key = f"{schema}.{table}"
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if self._clock() < self._next_try:
            return [], [], []
        self.lookups += 1
        avg: Any = None
        for attempt in (1, 2):
            fresh = self._conn is None
            try:
                if fresh:
                    self._conn = self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(
                        "SELECT COLUMN_NAME, ORDINAL_POSITION, IS_NULLABLE, COLUMN_TYPE,"
                        " CHARACTER_SET_NAME, EXTRA FROM information_schema.COLUMNS"
                        " WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
                        (schema, table),
                    )
                    cols = [self._row(cur, r) for r in cur.fetchall()]
                    cur.execute(
                        "SELECT INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, SUB_PART, INDEX_TYPE"
                        " FROM information_schema.STATISTICS"
                        " WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s"
                        " ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                        (schema, table),
                    )
                    stats = [self._row(cur, r) for r in cur.fetchall()]
                    cur.execute(
                        "SELECT CONSTRAINT_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA,"
                        " REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME"
                        " FROM information_schema.KEY_COLUMN_USAGE"
                        " WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND REFERENCED_TABLE_NAME IS NOT NULL"
                        " ORDER BY CONSTRAINT_NAME, ORDINAL_POSITION",
                        (schema, table),
                    )
                    fks = [self._row(cur, r) for r in cur.fetchall()]
                    cur.execute(
                        "SELECT AVG_ROW_LENGTH FROM information_schema.TABLES"
                        " WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (schema, table))
                    found = [self._row(cur, r) for r in cur.fetchall()]
                    avg = found[0].get("AVG_ROW_LENGTH") if found else None
                break
            except Exception as exc:  # any failure drops the session
                self.last_error = str(exc)
                self._close()
                if attempt == 2 or fresh:
                    # A kept session may just have gone stale (one reconnect);
                    # a fresh one failing means the replica is in trouble.
                    self.failures += 1
                    pause = self._retry_after(self._failed_in_a_row)
                    self._failed_in_a_row += 1
                    self._next_try = self._clock() + pause
                    log.warning("information_schema lookup of %s failed: %s; using the relay log's "
                                "metadata alone for %.0f s", key, self.last_error, pause)
                    return [], [], []
        self._failed_in_a_row = 0
        with self._lock:
            self._cache[key] = (cols, stats, fks)
            if avg is not None:  # else unknown: invalidate dropped any older reading with the rows
                self._row_bytes[key] = int(avg)
        return cols, stats, fks

    def describe(self, schema: str, table: str) -> tuple[Rows, Rows, Rows] | None:
        """The table's information_schema COLUMNS, STATISTICS and foreign-key rows as
        the replica has it (cached with the definitions), for statements, which name
        no table map, and for foreign keys' parents; None when unknown (no such table
        visible, or the lookup failed)."""
        rows = self._query(schema, table)
        return rows if rows[0] else None

    def take_referenced(self) -> list[tuple[str, str]]:
        """The (schema, table) parents of the foreign keys in the definitions resolved
        since the last call: the rows just read will be checked against them, so the
        prefetch cursor describes them before it rewrites those rows."""
        with self._lock:
            out, self._referenced = list(self._referenced), {}
        return out

    @staticmethod
    def _row(cur: Any, row: Any) -> dict[str, Any]:
        if isinstance(row, dict):
            return {k.upper(): v for k, v in row.items()}
        return {d[0].upper(): v for d, v in zip(cur.description, row, strict=True)}

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._close()

    def resolve(self, tm: TableMap) -> TableInfo:
        base = super().resolve(tm)
        cols_rows, stat_rows, fk_rows = self._query(tm.schema, tm.table)
        if len(cols_rows) != tm.column_count:
            if cols_rows:
                log.info(
                    "%s has %d columns on the replica but %d in the relay log (DDL pending?);"
                    " using the log's metadata only", tm.qualified, len(cols_rows), tm.column_count,
                )
                self.invalidate([tm.qualified])
            return base
        names = [str(r["COLUMN_NAME"]) for r in cols_rows]
        if tm.names and list(tm.names) != names:
            log.info("%s column names differ between relay log and replica", tm.qualified)
            self.invalidate([tm.qualified])
            return base
        columns = []
        for i, (col, r) in enumerate(zip(base.columns, cols_rows, strict=True)):
            ctype = str(r.get("COLUMN_TYPE") or "").lower()
            unsigned = bool(tm.unsigned[i]) if tm.unsigned else "unsigned" in ctype
            charset, charset_name = col.charset, col.charset_name
            if tm.collations is None:
                charset = codec_for_charset(r.get("CHARACTER_SET_NAME"))
            if charset_name is None and r.get("CHARACTER_SET_NAME") and _STRING_TYPE.match(ctype):
                charset_name = str(r["CHARACTER_SET_NAME"]).lower()
            columns.append(Column(names[i], col.type_name, r.get("IS_NULLABLE") == "YES",
                                  unsigned, charset, charset_name))
        ordinal = {n: i for i, n in enumerate(names)}
        indexes = btree_indexes(stat_rows, ordinal)
        indexes.sort(key=lambda ix: (not ix.primary, not ix.unique, ix.name))
        key = next((ix for ix in indexes if ix.primary), None)
        if key is None:
            # InnoDB clusters on the first unique index over NOT NULL columns.
            key = next(
                (ix for ix in indexes
                 if ix.unique and all(not columns[col].nullable for col in ix.columns)),
                None,
            )
        fks = tuple(foreign_keys(fk_rows, ordinal))
        if fks:
            with self._lock:
                self._referenced.update(((fk.parent_schema, fk.parent_table), None) for fk in fks)
        with self._lock:
            row_bytes = self._row_bytes.get(f"{tm.schema}.{tm.table}")
        return TableInfo(tm.schema, tm.table, tuple(columns), key, tuple(indexes),
                         _needed(len(columns), indexes, self.decode_all),
                         "table_map+information_schema" if tm.names else "information_schema", fks,
                         row_bytes)

