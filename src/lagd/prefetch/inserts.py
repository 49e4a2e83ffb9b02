"""Statement-based INSERTs -> probes of the index entries they will add.

On a MIXED-format source (MariaDB's default) an ``INSERT ... VALUES`` reaches
the replica as a statement, and the rewrite to a SELECT (rewrite_sql) has
nothing to select: the rows do not exist yet. What the SQL thread will read is
the leaf page of each index where each new entry goes (InnoDB checks the
primary and unique keys and inserts into every index, but for a non-unique one
whose inserts it buffers: mysql.changebuf). A row-based INSERT is probed for
exactly those pages from its after image (rewrite.ProbeBatcher). Here the
same entries come from the statement's literals:

- a statement's shape (fingerprint.py) is parsed once: the table, the column
  list, and for each row which literal each column takes (``None`` for a
  value that is not one literal: NULL, DEFAULT, an expression);
- the table's columns and indexes as the replica has them (information_schema,
  looked up by the engine, :func:`table_keys`) decide which entries can be
  probed: an index whose every column (and, for a non-unique index, every
  primary-key column, so that the probe names one entry and not a range)
  has a literal of its column's class. Integer columns take integer literals,
  other numeric columns numbers, character columns single-quoted strings;
  any other pairing (a number for a VARCHAR would make the server compare
  as numbers and scan the index) leaves that index out for that row;
- the probe is ``SELECT 1 FROM t FORCE INDEX (ix) WHERE (cols) IN ((...),
  ...)`` with the literals' own text, batched per index like row probes.

- a foreign key's new value is looked up in the parent's primary key or
  unique index by InnoDB's check: probed there too, from the literal of each
  of its columns (:class:`ParentKey`; the parent's indexes are learnt like the
  table's own).

- an AUTO_INCREMENT column left to the server takes the values the source
  gave the rows (the statement's Intvar INSERT_ID, :func:`auto_values`).

- upserts (ON DUPLICATE KEY UPDATE, INSERT IGNORE) and REPLACE read an
  existing row: their unique secondary probes select what reads its record
  too, and while their primary-key probes find the rows, their other entries
  go unprobed (InsertBatcher.found, control.upsert_entries).

``INSERT ... SET a = 1`` is read as its column list and one row; REPLACE
as INSERT but for the above. Refused shapes: INSERT ... SELECT, a PARTITION
clause, an executable comment, an unqualified table without a default database.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from lagd.prefetch.control import EXISTING_KEYS, upsert_entries
from lagd.prefetch.rewrite_sql import (
    Probe,
    StatementRewrite,
    converted,
    document_select,
    integer_arguments,
    padded_size,
    quote_ident,
)
from lagd.relaylog.events import ForeignKey
from lagd.relaylog.schema import btree_indexes, foreign_keys

log = logging.getLogger(__name__)
_MYSQL = sqlglot.Dialect.get_or_raise("mysql")
# A shape sqlglot cannot parse is refused here, once per shape, with its reason in the
# skip counters; its own "falling back to parsing as a Command" warning would only puzzle.
logging.getLogger("sqlglot").setLevel(logging.ERROR)
_VERB = re.compile(r"\s*(?:/\*(?![!M]).*?\*/\s*)*(INSERT|REPLACE)\b", re.I | re.S)
# At most 20 digits (an integer column's range), no exponent (a DECIMAL compared
# with a DOUBLE constant): the literals whose comparison stays an index lookup.
_INTEGER = re.compile(r"-?\d{1,20}")
_NUMBER = re.compile(r"-?(?:\d{1,65}\.?\d{0,38}|\.\d{1,38})")
_INT_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
_NUM_TYPES = ("decimal", "float", "double")
_TEXT_TYPES = ("char", "varchar")
_DOCUMENT_TYPES = frozenset({
    "blob", "mediumblob", "longblob", "text", "mediumtext", "longtext", "json", "geometry", "point",
    "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection",
    "vector",
})


def is_insert(shape: str) -> bool:
    """The shape is an INSERT or REPLACE (cheap: its first word)."""
    return _VERB.match(shape) is not None


@dataclass(frozen=True, slots=True)
class InsertShape:
    """What an INSERT shape writes: ``rows[i][j]`` is the literal slot of column
    ``j`` (of ``columns``, or of the table's own order when None) in row ``i``."""

    schema: str
    table: str
    columns: tuple[str, ...] | None
    rows: tuple[tuple[int | None, ...], ...]
    # None: a row that exists is an error (INSERT) or replaced (REPLACE): every new entry
    # is read. Else an upsert: the columns its update of an existing row assigns (ON
    # DUPLICATE KEY UPDATE; none for INSERT IGNORE), whose indexes' entries it reads.
    on_duplicate: frozenset[str] | None = None
    replaces: bool = False  # REPLACE: an existing row is deleted (its record read) first


def _refused(skipped: str, reason: str) -> StatementRewrite:
    return StatementRewrite(None, skipped, reason)


def parse_insert(marked: str, schema: str | None, slot_of: Callable[[str], int | None]
                 ) -> InsertShape | StatementRewrite:
    """An INSERT whose literals are markers (fingerprint.marked), parsed once;
    ``slot_of`` tells the literal slot a marker's text stands for (fingerprint.marker_slot)."""
    verb = _VERB.match(marked)
    if verb is not None and verb.group(1).upper() == "REPLACE":
        # sqlglot's MySQL parser has no REPLACE; the entries it adds are an INSERT's.
        marked = f"{marked[:verb.start(1)]}INSERT{marked[verb.end(1):]}"
    try:
        tokens = list(_MYSQL.tokenize(marked))
        if any(c.lstrip().startswith(("!", "M!")) for t in tokens for c in t.comments):
            return _refused("executable_comment", "executable comment in an INSERT")
        trees = [t for t in _MYSQL.parser().parse(tokens, marked) if t is not None]
    except SqlglotError as exc:
        return _refused("unparsable_statement", f"sqlglot: {str(exc).splitlines()[0]}")
    if len(trees) != 1 or not isinstance(trees[0], exp.Insert):
        return _refused("unsupported_statement", "not one INSERT")
    tree = trees[0]
    values = tree.expression
    if not isinstance(values, exp.Values):
        return _refused("insert_statement", "INSERT without VALUES (INSERT ... SELECT)")
    target = tree.this
    columns: tuple[str, ...] | None = None
    if isinstance(target, exp.Schema):
        cols = target.expressions
        if not all(isinstance(c, exp.Identifier | exp.Column) for c in cols):
            return _refused("insert_statement", "INSERT with a column list lagd cannot read")
        columns = tuple(c.name.lower() for c in cols)
        target = target.this
    if not isinstance(target, exp.Table) or target.args.get("partition") is not None:
        return _refused("insert_statement", "INSERT into something other than one table")
    db = target.args.get("db")
    table_schema = db.name if db is not None else schema
    if table_schema is None:
        return _refused("no_default_schema", f"table {target.name} is unqualified and the statement"
                                            " has no default database")
    rows = []
    for row in values.expressions:
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        if columns is not None and len(items) != len(columns):
            return _refused("unparsable_statement", "a row's values do not match the column list")
        rows.append(tuple(_slot(v, slot_of) for v in items))
    replaces = verb is not None and verb.group(1).upper() == "REPLACE"
    return InsertShape(table_schema, target.name, columns, tuple(rows),
                       None if replaces else _on_duplicate(tree), replaces)


def _on_duplicate(tree: exp.Insert) -> frozenset[str] | None:
    """The columns an upsert's update of an existing row assigns (none for INSERT IGNORE);
    None for a plain INSERT, or an update lagd cannot read (then it is one)."""
    conflict = tree.args.get("conflict")
    if conflict is None:
        return frozenset() if tree.args.get("ignore") else None
    if not conflict.args.get("duplicate"):
        return None
    sets = []
    for e in conflict.expressions:
        if not isinstance(e, exp.EQ) or not isinstance(e.this, exp.Column):
            return None
        sets.append(e.this.name.lower())
    return frozenset(sets)


def _slot(value: Any, slot_of: Callable[[str], int | None]) -> int | None:
    """The literal slot a value is, or None. A sign the fingerprint folded is in the
    literal's text; one it left in the shape (``- 5``) makes a Neg: not one literal."""
    if not isinstance(value, exp.Literal):
        return None
    return slot_of(f"'{value.this}'" if value.is_string else str(value.this))


# ----- the table as the replica has it ---------------------------------------------

@dataclass(frozen=True, slots=True)
class KeyIndex:
    """An index as a probe names its entries: its columns, and for a non-unique
    one the primary key's after them (InnoDB's entry), so a probe names one entry."""

    name: str
    columns: tuple[int, ...]  # the ordinals a probe gives values for
    where: str  # their quoted names: `a` or (`a`, `b`)
    unique: bool = True  # the primary key or a unique index: never change-buffered


@dataclass(frozen=True, slots=True)
class TableKeys:
    """A table's columns and B-tree indexes, from information_schema."""

    names: tuple[str, ...]  # lower-cased, in the table's order
    classes: tuple[str | None, ...]  # "int", "num", "text" or None (not probed from a literal)
    indexes: tuple[KeyIndex, ...]  # those a probe can name entries of
    indexed: frozenset[str]  # every column of any index: an UPDATE setting one moves an entry
    foreign: tuple[ForeignKey, ...] = ()  # its foreign keys (the child's side)
    # What a one-table statement probe of it selects (probe_select): the same pages
    # ``*`` reads, a byte a row (or a document) sent instead of the rows.
    select: str = "*"
    auto: int | None = None  # the ordinal of its AUTO_INCREMENT column


@dataclass(frozen=True, slots=True)
class ParentKey:
    """A foreign key's check as a probe names it: the parent's index, and the child's
    columns (ordinals) in that index's column order."""

    schema: str
    table: str
    index: KeyIndex
    columns: tuple[int, ...]


def parent_key(fk: ForeignKey, parent: TableKeys) -> ParentKey | None:
    """Where InnoDB's check of ``fk`` reads: the parent's primary key or a unique index
    over exactly the referenced columns; None for any other (InnoDB also accepts a
    non-unique index, or a longer one starting with them, where a probe by the
    referenced values alone would read a range, not the one entry)."""
    refs = [c.lower() for c in fk.parent_columns]
    want = set(refs)
    found = [ix for ix in parent.indexes if ix.unique and len(ix.columns) == len(want)
             and {parent.names[c] for c in ix.columns} == want]
    ix = next((i for i in found if i.name == "PRIMARY"), found[0] if found else None)
    if ix is None:
        return None
    return ParentKey(fk.parent_schema, fk.parent_table, ix,
                     tuple(fk.columns[refs.index(parent.names[c])] for c in ix.columns))


def table_keys(columns: Iterable[Mapping[str, Any]], stats: Iterable[Mapping[str, Any]],
               fks: Iterable[Mapping[str, Any]] = ()) -> TableKeys | None:
    """From information_schema.COLUMNS, .STATISTICS and .KEY_COLUMN_USAGE rows (the
    resolver's); None when the table has no columns (not visible to lagd, or gone)."""
    cols = list(columns)
    if not cols:
        return None
    stat_rows = list(stats)
    spelled = [str(c["COLUMN_NAME"]) for c in cols]
    names = tuple(n.lower() for n in spelled)
    classes = tuple(_class(str(c.get("COLUMN_TYPE") or ""), c.get("CHARACTER_SET_NAME")) for c in cols)
    # Prefix, FULLTEXT and functional indexes too: an UPDATE of their columns moves an entry.
    indexed = {str(r["COLUMN_NAME"]).lower() for r in stat_rows if r.get("COLUMN_NAME") is not None}
    ordinal = {n: i for i, n in enumerate(spelled)}
    usable = [ix for ix in btree_indexes(stat_rows, ordinal)
              if not any(p is not None for p in ix.prefix_lengths)]
    primary = next((ix.columns for ix in usable if ix.primary), ())
    indexes = []
    for ix in usable:
        if not ix.unique and not primary:
            continue  # no entry to name: a probe would read every equal value
        probed = ix.columns if ix.unique else ix.columns + tuple(c for c in primary if c not in ix.columns)
        quoted = [quote_ident(names[c]) for c in probed]
        indexes.append(KeyIndex(ix.name, probed, quoted[0] if len(quoted) == 1 else f"({', '.join(quoted)})",
                                ix.unique or ix.primary))
    wide = [n for n, c in zip(spelled, cols, strict=True) if _document(str(c.get("COLUMN_TYPE") or ""))]
    auto = next((i for i, c in enumerate(cols) if classes[i] == "int"
                 and "auto_increment" in str(c.get("EXTRA") or "").lower()), None)
    return TableKeys(names, classes, tuple(indexes), frozenset(indexed),
                     tuple(foreign_keys(fks, ordinal)), probe_select(spelled, wide, indexed), auto)


def probe_select(columns: list[str], wide: list[str], indexed: Collection[str]) -> str:
    """What a statement probe selects to read the pages ``SELECT *`` reads.

    Where the table has documents (BLOB, TEXT, JSON, spatial): ISNULL of each
    (rewrite_sql.document_select). Else ISNULL of one column in no index: no index
    covers it, so the probe reads each row's record as ``*`` does, whatever index
    its condition uses (MariaDB 10.11, the same buffer-pool page requests, NOT NULL
    column or not, where a covering ``SELECT id`` read a third fewer:
    test_a_statement_probe_of_one_unindexed_column_reads_what_select_star_reads),
    and sends a byte a row. ``*`` sent the whole row for lagd to decode and count:
    160 rows of sysbench's 200 bytes a probe of 16 ranges. ``*`` where every column
    is in some index."""
    if wide:
        return document_select(wide)
    bare = next((c for c in columns if c.lower() not in indexed), None)
    return "*" if bare is None else f"ISNULL({quote_ident(bare)})"


def _base_type(column_type: str) -> str:
    """``int`` of information_schema's ``int(11) unsigned``; "" for an empty type."""
    return column_type.lower().split("(")[0].split()[0] if column_type.strip() else ""


def _document(column_type: str) -> bool:
    """A column type whose values InnoDB may keep off the row's page."""
    return _base_type(column_type) in _DOCUMENT_TYPES


def _class(column_type: str, charset: Any = None) -> str | None:
    """"int", "num", "text", or "text:<charset>" for text a probe converts (rewrite_sql.converted)."""
    base = _base_type(column_type)
    if base in _INT_TYPES:
        return "int"
    if base in _NUM_TYPES:
        return "num"
    if base in _TEXT_TYPES and "binary" not in column_type.lower():
        to = converted(str(charset).lower() if charset else None)
        return "text" if to is None else f"text:{to}"
    return None


def _fits(cls: str | None, literal: str, is_string: bool) -> bool:
    if cls == "int":
        return not is_string and _INTEGER.fullmatch(literal) is not None
    if cls == "num":
        return not is_string and _NUMBER.fullmatch(literal) is not None
    if cls is not None and cls.startswith("text"):
        return is_string and literal.startswith("'")
    return False


Plan = tuple[tuple[KeyIndex | ParentKey, tuple[tuple[int, str], ...]], ...]


def plan(shape: InsertShape, keys: TableKeys, parents: Iterable[ParentKey] = ()) -> Plan | None:
    """For each row and probeable index (and each foreign key's parent index), the
    (literal slot, column class) of each of its columns, where every one has a
    literal; None when the column list names a column the table lacks, or a row has
    another number of values. Made once per shape and table: a statement then only
    checks its literals' classes. A NULL has no slot: no entry, and no foreign-key check.

    The table's AUTO_INCREMENT column, in one of its own indexes, is a part of class
    ``@<row>`` (``^<row>`` leading the primary key), its slot the row's literal or -1
    where it has none (left out, NULL, DEFAULT): the value the source gave that row
    where the statement has one (:func:`auto_values`), else the literal's own."""
    if shape.columns is None:
        order: tuple[int, ...] = tuple(range(len(keys.names)))
    else:
        where = {n: i for i, n in enumerate(keys.names)}
        if any(c not in where for c in shape.columns):
            return None
        order = tuple(where[c] for c in shape.columns)
    out: list[tuple[KeyIndex | ParentKey, tuple[tuple[int, str], ...]]] = []
    targets: list[tuple[KeyIndex | ParentKey, tuple[int, ...]]] = [
        *((ix, ix.columns) for ix in keys.indexes), *((p, p.columns) for p in parents)]
    auto = keys.auto
    for i, row in enumerate(shape.rows):
        if len(row) != len(order):
            return None
        slot_of = dict(zip(order, row, strict=True))
        for ix, columns in targets:
            parts = []
            for c in columns:
                slot, cls = slot_of.get(c), keys.classes[c]
                if c == auto and isinstance(ix, KeyIndex):
                    lead = ix.name == "PRIMARY" and columns[0] == c
                    parts.append((-1 if slot is None else slot, f"{'^' if lead else '@'}{i}"))
                    continue
                if slot is None or cls is None:
                    break
                parts.append((slot, cls))
            else:
                out.append((ix, tuple(parts)))
    return tuple(out)


def auto_slots(shape: InsertShape, keys: TableKeys) -> tuple[int, ...]:
    """Each row's literal slot of the AUTO_INCREMENT column, -1 where it has none; ()
    for a table without one, or a shape that names a column the table lacks."""
    if keys.auto is None:
        return ()
    if shape.columns is None:
        at = keys.auto
    elif keys.names[keys.auto] in shape.columns:
        at = shape.columns.index(keys.names[keys.auto])
    else:
        return tuple(-1 for _ in shape.rows)
    return tuple(-1 if len(r) <= at else _or_none(r[at]) for r in shape.rows)


def _or_none(slot: int | None) -> int:
    return -1 if slot is None else slot


def auto_values(slots: tuple[int, ...], lits: tuple[str, ...], insert_id: int | None, step: int
                ) -> tuple[str, ...] | None:
    """The AUTO_INCREMENT value of each row where the source gave it one: ``insert_id``
    (the statement's Intvar INSERT_ID), then ``step`` more a row, for the rows without a
    value or with 0 (sysbench's ``VALUES (0, ...)``). None without an INSERT_ID, or where
    a row names its own value: an explicit id above the counter moves the counter, which
    the rows after it then follow, and lagd does not follow that."""
    if insert_id is None or not slots:
        return None
    out: list[str] = []
    for slot in slots:
        if slot >= 0 and lits[slot] != "0":
            return None
        out.append(str(insert_id + len(out) * step))
    return tuple(out)


# _entry's answer for an AUTO_INCREMENT primary key's new value: above every key, at the
# table's end, in the leaf the SQL thread has just written (rewrite.py's "append").
APPEND = "append"


def entries(shape: InsertShape, keys: TableKeys, lits: tuple[str, ...], strs: tuple[bool, ...],
            parents: Iterable[ParentKey] = (), insert_id: int | None = None, step: int = 1,
            ) -> dict[KeyIndex | ParentKey, list[str]] | None:
    """Each probeable index's new entries (and the parent entries the foreign keys'
    checks read), as ``(a, b)`` literal texts (``a`` for one column); None as for :func:`plan`."""
    made = plan(shape, keys, parents)
    if made is None:
        return None
    auto = auto_values(auto_slots(shape, keys), lits, insert_id, step)
    out: dict[KeyIndex | ParentKey, list[str]] = {}
    for ix, parts in made:
        value = _entry(parts, lits, strs, auto)
        if value is not None and value is not APPEND:
            out.setdefault(ix, []).append(value)
    return out


def _entry(parts: tuple[tuple[int, str], ...], lits: tuple[str, ...], strs: tuple[bool, ...],
           auto: tuple[str, ...] | None = None) -> str | None:
    """One entry's literal text; None when a literal is not of its column's class, or an
    AUTO_INCREMENT value is not known; APPEND for one at the end of the primary key."""
    texts = []
    for slot, cls in parts:
        if cls[0] in "@^":  # the AUTO_INCREMENT column (plan)
            if auto is not None:
                if cls[0] == "^":
                    return APPEND
                texts.append(auto[int(cls[1:])])
                continue
            if slot < 0 or lits[slot] == "0" or not _fits("int", lits[slot], strs[slot]):
                return None  # a value the source gave, not known here
            texts.append(lits[slot])
            continue
        if not _fits(cls, lits[slot], strs[slot]):
            return None
        texts.append(f"CONVERT({lits[slot]} USING {cls[5:]})" if cls[4:5] == ":" else lits[slot])
    return texts[0] if len(texts) == 1 else f"({', '.join(texts)})"


def probe_head(schema: str, table: str, ix: KeyIndex, select: str = "1") -> str:
    """``SELECT 1 FROM s.t FORCE INDEX (ix) WHERE (cols) IN (`` for ``entries``' texts;
    ``select``: what it selects instead of 1 (TableKeys.select: the record read too)."""
    return (f"SELECT {select} FROM {quote_ident(schema)}.{quote_ident(table)} FORCE INDEX"
            f" ({quote_ident(ix.name)}) WHERE {ix.where} IN (")


# ----- batching ------------------------------------------------------------------

class Tables(Protocol):
    """What the statement batchers ask of the tables they write (ProbeBatcher)."""

    def described(self, schema: str, table: str) -> TableKeys | None:
        """The table as the replica has it; None: not known (yet): looked up later."""

    def seen(self, schema: str, table: str, sets: frozenset[str], rows: int, deletes: bool = False) -> None:
        """``rows`` row changes probed, assigning ``sets`` (UPDATE), deleting (DELETE) or
        neither (INSERT)."""

    def wants(self, schema: str) -> bool:
        """Whether probes may go into ``schema`` (a foreign key's parent may be elsewhere)."""


class _Entries:
    """One index's new entries waiting for their probe (a dict key by identity)."""

    __slots__ = ("head", "index", "integers", "parent", "schema", "table", "upsert", "values")

    def __init__(self, schema: str, table: str, ix: KeyIndex, parent: bool, upsert: bool = False,
                 select: str = "1", integers: bool = False) -> None:
        self.head = probe_head(schema, table, ix, select).replace("%", "%%")
        self.schema, self.table, self.index = schema, table, ix.name
        self.parent = parent  # a foreign key's check, in its parent
        self.upsert = upsert  # upserts' primary-key entries: what they find tells whether rows exist
        # Every column of the index is an integer one: each literal was checked as one (_fits).
        self.integers = integers
        self.values: dict[str, None] = {}


class InsertBatcher:
    """INSERT statements -> probes of their new entries, batched per index."""

    def __init__(self, max_keys: int, tables: Tables) -> None:
        self.max_keys = max_keys
        self.tables = tables
        self._shapes: dict[tuple[str, str | None], InsertShape | StatementRewrite] = {}
        # id(shape) -> (shape, the table it was planned for, its steps or None, the entries
        # a statement leaves to the change buffer, the parents as known then, its rows'
        # AUTO_INCREMENT slots): see plan(), auto_slots()
        self._plans: dict[int, tuple[InsertShape, TableKeys, tuple[_Step, ...] | None,
                                     int, tuple[TableKeys | None, ...], tuple[int, ...]]] = {}
        self._batches: dict[tuple[str, str, KeyIndex, bool, bool, str], _Entries] = {}
        # (schema, table) -> the primary-key entries its upserts' probes asked for and
        # found, decayed (control.upsert_entries): whether their rows exist
        self._existing: dict[tuple[str, str], tuple[float, float]] = {}
        self._rows_exist: set[tuple[str, str]] = set()  # those whose upserts' rows exist
        self._waiting: dict[_Entries, None] = {}  # batches holding entries, oldest first
        self._buffered = False
        self.skipped: Counter[str] = Counter()  # the entries left to the change buffer

    @property
    def buffered(self) -> bool:
        """InnoDB buffers inserts into non-unique secondary indexes: those entries are
        not probed (mysql.changebuf)."""
        return self._buffered

    @buffered.setter
    def buffered(self, on: bool) -> None:
        if on != self._buffered:
            self._buffered = on
            self._plans.clear()  # made with the other setting

    def reset(self) -> None:
        for batch in self._waiting:
            batch.values = {}
        self._waiting.clear()

    def known(self, key: tuple[str, str | None]) -> InsertShape | StatementRewrite | None:
        """A (shape, default schema) parsed before, or None."""
        return self._shapes.get(key)

    def shape(self, key: tuple[str, str | None], marked: str, slot_of: Callable[[str], int | None]
              ) -> InsertShape | StatementRewrite:
        """Parse a shape (``marked``: its text with markers, see parse_insert) and keep it."""
        if len(self._shapes) >= _CACHE_LIMIT:
            self._shapes.clear()
        got = self._shapes[key] = parse_insert(marked, key[1], slot_of)
        return got

    def add(self, shape: InsertShape, lits: tuple[str, ...], strs: tuple[bool, ...], checks: bool = True,
            insert_id: int | None = None, step: int = 1) -> tuple[list[Probe], StatementRewrite | None]:
        """``checks``: False for a statement run with foreign_key_checks=0, whose parents the
        SQL thread does not read. ``insert_id``, ``step``: the AUTO_INCREMENT values the
        source gave its rows (events.Statement)."""
        self.tables.seen(shape.schema, shape.table, frozenset(), len(shape.rows))
        keys = self.tables.described(shape.schema, shape.table)
        if keys is None:
            return [], _LOOKING_UP
        got = self._plans.get(id(shape))
        parents = self._parents(keys) if keys.foreign else ()
        if got is None or got[0] is not shape or got[1] is not keys or got[4] != parents:
            if len(self._plans) >= _CACHE_LIMIT:
                self._plans.clear()
                self._batches.clear()  # waiting ones stay in _waiting until emitted
            got = self._plans[id(shape)] = (shape, keys, *self._steps(shape, keys, parents), parents,
                                            auto_slots(shape, keys))
        steps = got[2]
        if got[3]:
            self.skipped["change_buffered"] += got[3]
        if steps is None:
            return [], _refused("unsupported_statement", f"INSERT into {shape.schema}.{shape.table}"
                                                        " names a column the replica's table lacks")
        # The verdict as the last answer left it: a statement costs a set lookup.
        every = shape.on_duplicate is None or (shape.schema, shape.table) not in self._rows_exist
        auto = auto_values(got[5], lits, insert_id, step) if got[5] else None
        out: list[Probe] = []
        for batch, parts, read in steps:
            if batch.parent and not checks:
                continue
            if not (every or read):
                self.skipped["row_exists"] += 1
                continue
            value = _entry(parts, lits, strs, auto)
            if value is None:
                continue
            if value is APPEND:
                self.skipped["append"] += 1
                continue
            values = batch.values
            if not values:
                self._waiting[batch] = None
            values[value.replace("%", "%%") if "%" in value else value] = None
            if len(values) >= self.max_keys:
                out.append(self._emit(batch))
        return out, None

    def upsert_entries(self, schema: str, table: str) -> tuple[bool, str]:
        """Whether the table's upserts get their other entries probed, and why."""
        return upsert_entries(*self._existing.get((schema, table), (0.0, 0.0)))

    def found(self, schema: str, table: str, asked: int, found: int) -> None:
        """A probe of upserts' primary-key entries answered: ``found`` of ``asked`` exist."""
        key = (schema, table)
        was_asked, was_found = self._existing.get(key, (0.0, 0.0))
        keep = 0.5 ** (asked / EXISTING_KEYS)  # what was asked before counts half after as many again
        if key not in self._existing and len(self._existing) >= _CACHE_LIMIT:
            self._existing.clear()
            self._rows_exist.clear()
        now = self._existing[key] = (was_asked * keep + asked, was_found * keep + min(found, asked))
        every, why = upsert_entries(*now)
        if every == (key in self._rows_exist):  # the verdict turned
            log.debug("upserts into %s.%s: %s", schema, table, why)
            if every:
                self._rows_exist.discard(key)
            else:
                self._rows_exist.add(key)

    def _parents(self, keys: TableKeys) -> tuple[TableKeys | None, ...]:
        """The parent of each foreign key as known now (None: not yet, asked for; or kept
        out of prefetch): a plan made before a parent was known is made again."""
        t = self.tables
        return tuple(t.described(fk.parent_schema, fk.parent_table) if t.wants(fk.parent_schema) else None
                     for fk in keys.foreign)

    def _steps(self, shape: InsertShape, keys: TableKeys, parents: tuple[TableKeys | None, ...]
               ) -> tuple[tuple[_Step, ...] | None, int]:
        refs = [ref for fk, parent in zip(keys.foreign, parents, strict=True)
                if parent is not None and (ref := parent_key(fk, parent)) is not None]
        made = plan(shape, keys, refs)
        if made is None:
            return None, 0
        steps = []
        buffered = 0
        sets = shape.on_duplicate
        for target, parts in made:
            if isinstance(target, ParentKey):
                schema, table, ix = target.schema, target.table, target.index
            else:
                schema, table, ix = shape.schema, shape.table, target
            if self._buffered and not ix.unique:
                buffered += 1
                continue
            # A self-referencing key's parent entries get a batch of their own: with
            # foreign_key_checks=0 they are left out, the table's own entries are not.
            parent = isinstance(target, ParentKey)
            upsert = sets is not None and not parent and ix.name == "PRIMARY"
            # Read when the row exists: the primary key's entry, and the entries (or a
            # parent's check) of the columns the update assigns.
            read = upsert or sets is None or any(keys.names[c] in sets for c in target.columns)
            # An upsert or REPLACE that finds its duplicate in a unique secondary index
            # (an AUTO_INCREMENT table upserting by e-mail, say) then reads that row's
            # record to update or delete it: the probe reads it too (no index covers
            # what it selects), and of a new row finds nothing more to read.
            select = keys.select if (sets is not None or shape.replaces) and not parent \
                and ix.unique and ix.name != "PRIMARY" else "1"
            key = (schema, table, ix, parent, upsert, select)
            integers = all(cls == "int" or cls[0] in "@^" for _, cls in parts)
            batch = self._batches.get(key)
            if batch is None:
                batch = self._batches[key] = _Entries(schema, table, ix, parent, upsert, select, integers)
            batch.integers = batch.integers and integers
            steps.append((batch, parts, read))
        return tuple(steps), buffered

    def flush(self) -> list[Probe]:
        return [self._emit(b) for b in list(self._waiting)]

    def _emit(self, batch: _Entries) -> Probe:
        values = list(batch.values)
        batch.values = {}
        self._waiting.pop(batch, None)
        n = len(values)
        # Integer entries (ids, the common key) are a prepared probe: integer_arguments.
        args = integer_arguments(values, padded_size(n, self.max_keys), batch.integers)
        if args is None:
            return Probe(f"{batch.head}{', '.join(values)})", (), batch.schema, batch.table, batch.index,
                         n, "statement", upsert=batch.upsert)
        return Probe(f"{batch.head}{args[0]})", args[1], batch.schema, batch.table, batch.index, n,
                     "statement", upsert=batch.upsert)


# A batch of a plan, the (literal slot, column class) of each column of its entry, and
# whether the SQL thread reads that entry when an upsert's row exists.
_Step = tuple[_Entries, tuple[tuple[int, str], ...], bool]


_CACHE_LIMIT = 4096
_LOOKING_UP = _refused("table_lookup", "INSERT into a table whose columns and indexes lagd is looking up")
