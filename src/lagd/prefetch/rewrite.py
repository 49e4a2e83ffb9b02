"""Relay-log row changes -> batched, covering index probes (the hot path).

Which index entries the SQL thread will touch, per row change:

- UPDATE: the clustered (primary key) leaf of the before image, and of the
  after image when the key changes; every other index whose entry changes,
  at its old and its new value.
- DELETE: the clustered leaf and every other index, before image.
- INSERT: the clustered leaf and every other index, after image; not an
  entry above every one the index's INSERTs have added (an auto-increment
  id, a ``created_at`` index: its leaf is the last, which the SQL thread has
  just written, in memory; "append"; see ``_appends``).

Foreign keys (``TableInfo.foreign_keys``, from information_schema): an
INSERT, and an UPDATE that sets the key's columns, makes InnoDB look the new
value up in the parent table's index (the constraint check), so the parent's
entry is probed too ("parent" probes), unless a column is NULL (no check). The
parent's indexes come from the same lookup statements use (``learn_table``),
dropped when a DDL changes the parent. A parent's DELETE or key UPDATE reads
the child's index; that side is not probed.

Documents: the SQL thread's UPDATE or DELETE reads the whole record, its
off-page BLOB and TEXT parts too, whatever the change names. On a table whose
rows average half a page or more the clustered probe selects ``ISNULL(doc)``
for those columns, which reads the same pages, and counts them in the lead's
page budget (:func:`documents`).

Where InnoDB buffers changes to non-unique secondary indexes
(``buffer_changes``, mysql.changebuf: MySQL 8.0's default), the SQL thread
does not read those leaves for the operations buffered, so neither does a
probe ("change_buffered").

A secondary probe names the index's columns *and* the clustered key's
(``(k, id) IN ((%s, %s))``): InnoDB stores those key columns in every
secondary entry, so the probe is a point lookup, where ``k IN (%s)`` on a
low-cardinality column would walk every entry with that value. A unique index
is looked up by its own columns, which is also what the uniqueness check
reads.

NULL: ``IN`` never matches NULL. In a non-unique index a NULL column becomes
``col IS NULL`` with the rest (clustered key included) still in the IN list,
so it stays a point lookup; rows are grouped into batches by which columns
are NULL. A unique index with a NULL is skipped ("null_in_unique"): NULLs
need no uniqueness check, and the optimizer does not extend a *unique* index
with the clustered key, so ``u IS NULL AND id IN (...)`` would walk every NULL
entry (MariaDB 10.11's EXPLAIN: 6,666 rows for 2 keys). A NULL in a
NOT NULL column means the image does not carry the column
(``binlog_row_image=MINIMAL``): that index is skipped for that image
("not_logged"), and an UPDATE's after image without the key borrows the
missing columns from the before image.

Everything per table is computed once per ``TableInfo`` (the reader reuses
the object per table definition): column slots, getters, SQL text per batch
size.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from decimal import Decimal
from itertools import chain
from operator import itemgetter
from typing import Any

from lagd.errors import LagdError
from lagd.mysql.changebuf import DELETE_MARKS, INSERTS
from lagd.prefetch.control import PAGE_BYTES
from lagd.prefetch.fingerprint import StatementBatcher
from lagd.prefetch.inserts import ParentKey, TableKeys, parent_key
from lagd.prefetch.rewrite_sql import (
    Probe,
    StatementRewrite,
    document_select,
    index_probe_sql,
    padded_size,
    rewrite_statement,
)
from lagd.relaylog.events import Ddl, ForeignKey, Index, LoadData, RowChange, RowKind, Statement, TableInfo

__all__ = [
    "DEFAULT_MAX_KEYS", "MAX_KEYS_LIMIT", "PrefetchConfigError", "Probe", "ProbeBatcher",
    "StatementRewrite", "TablePlan", "padded_size", "plan_table", "rewrite_statement",
]

DEFAULT_MAX_KEYS = 16
# MariaDB turns an IN list of 1000+ values into a subquery over a table value
# constructor (in_predicate_conversion_threshold), which changes the plan.
MAX_KEYS_LIMIT = 999
# The most pages one probe of rows with documents reads (4 MB): its keys are cut to fit,
# so that on a disk of 2 ms a read it still ends within the 500-ms statement timeout.
PROBE_PAGES = 256
_PLAN_CACHE = 4096  # table definitions; a DDL storm must not grow memory without end

# B-tree indexes need a prefix on these; one without is FULLTEXT, SPATIAL or
# MariaDB's hash-based long UNIQUE, which FORCE INDEX cannot use for lookups.
# They are also the columns InnoDB may keep off the row's page (:func:`documents`).
_UNINDEXABLE = frozenset({"blob", "tiny_blob", "medium_blob", "long_blob", "geometry", "json",
                          "vector"})
_SYNTHETIC_NAME = re.compile(r"@\d+")
_NO_PROBES: tuple[Probe, ...] = ()
_WHY = {
    "no_key": "no primary key and no unique key over NOT NULL columns",
    "no_column_names": "column names unknown (binlog_row_metadata=MINIMAL and no information_schema)",
    "schema_excluded": "schema excluded from prefetch",
}
_PARENT = "parent"  # Probe.kind of a foreign key's look-up in its parent
# Non-unique secondary entries an UPDATE moves, or a DELETE delete-marks outside a big
# transaction, are left to the SQL thread; its clustered row (and any unique entry,
# whose check it reads) is still probed. Purge comes back for each of those entries,
# and a probe of one of them queued on that index's tree latch behind the SQL
# thread's page splits and purge (update_k: 13.7 s of probe-session waits in one
# 3-s try). On `mixed` (rows: 50% UPDATEs, 20% of an indexed column, 15% DELETEs, 15%
# INSERTs) probing them made 4 tries of 5 lose on purge (median 0.95x, 0.91-1.04);
# without them 3 of 5 paid (1.13x, 0.93-1.19), as MIXED logging's statements,
# which name only the row, had shown (mixed_fmt 1.11-1.18x). Inside a
# big transaction a DELETE's entries are probed (purge_follows): its undo waits
# for the commit, and delete_big ran 1.80x with them.
PURGED_ENTRIES = ("moved_entry", "deleted_entry")
APPEND_SPAN = 256  # ids under the highest an INSERT had that still count as appends (_appends)
# An integer clustered key within NEAR_SPAN of the one probed last for the same index
# is in the leaf that probe reads, or the next: a row event of a range UPDATE or a
# DELETE ... LIMIT changes rows one after the other. 50 consecutive rows an event were
# 50 keys in 4 probes reading the same one or two leaves; the probes' own CPU on 2
# cores took more from the SQL thread than their reads gave it (update_block: every
# try backed off after 2-3 s; with this, none did, 1.13x against 0.93x over 3 pairs,
# 2026-11-29). Rows wider than a sixteenth of a leaf may let a leaf go unprobed: the
# SQL thread reads it, as without lagd. Random keys are almost never this near the
# last one.
NEAR_SPAN = 16
_ORDERED = frozenset({int, float, Decimal, dt.date, dt.datetime, dt.timedelta})


class PrefetchConfigError(LagdError):
    """A prefetch setting is out of range."""


class _Batch:
    """Keys waiting for one SQL shape: one index, one set of NULL columns."""

    __slots__ = ("convert", "covering", "index", "keys", "kind", "null_columns", "plan", "probe_columns",
                 "single", "sqls", "text")

    def __init__(self, plan: _IndexPlan | _ParentPlan, probe_columns: tuple[str, ...],
                 null_columns: tuple[str, ...], convert: tuple[str | None, ...]) -> None:
        self.plan = plan
        self.index, self.kind, self.covering = plan.name, plan.kind, plan.covering
        self.probe_columns, self.null_columns = probe_columns, null_columns
        self.convert = convert  # each probe column's character set to convert its key to
        self.single = len(probe_columns) == 1
        self.text = plan.text
        self.keys: dict[Any, None] = {}  # insertion-ordered set: duplicates probed once
        self.sqls: dict[int, str] = {}

    def sql(self, n: int) -> str:
        text = self.sqls.get(n)
        if text is None:
            t = self.plan.table
            text = self.sqls[n] = index_probe_sql(t.schema, t.name, self.index, self.probe_columns,
                                                  self.null_columns, n, self.convert, self.plan.select)
        return text


def documents(table: TableInfo) -> tuple[str, int]:
    """What a clustered probe of ``table`` selects, and the pages it reads a row.

    The SQL thread's UPDATE or DELETE reads a row's off-page BLOB and TEXT
    parts with it (rewrite_sql.document_select), pages of their own that a
    ``SELECT 1`` leaves cold: with a 24 KB document, two of the three pages
    the row costs. Where the table's rows average half a page or more
    (information_schema's AVG_ROW_LENGTH, off-page parts included) such
    columns are selected, and the probe counts ``1 + AVG_ROW_LENGTH / page``
    pages a row (at least 2) in the lead's page budget (control.step), so
    that the documents warmed are not evicted before the SQL thread reads
    them. Smaller rows keep their documents in line as a rule; they, and a
    table whose size is not known (no information_schema), are probed with
    ``SELECT 1``, one page a row.
    """
    wide = [c.name for c in table.columns if c.type_name in _UNINDEXABLE]
    if not wide or table.row_bytes is None or table.row_bytes * 2 < PAGE_BYTES:
        return "1", 1
    return document_select(wide), 1 + max(1, round(table.row_bytes / PAGE_BYTES))


class _IndexPlan:
    """One index of one table: slots, getters and batches, precomputed."""

    __slots__ = ("batch", "change", "covering", "ext_columns", "ext_convert", "ext_slots", "get", "keys_cap",
                 "kind", "last", "masked", "name", "row_pages", "select", "table", "text", "top")

    def __init__(self, table: TableInfo, index: Index, kind: str, key: Index) -> None:
        self.table, self.name, self.kind = table, index.name, kind
        self.select, self.row_pages = documents(table) if kind == "pk" else ("1", 1)
        self.keys_cap = max(1, PROBE_PAGES // self.row_pages) if self.row_pages > 1 else MAX_KEYS_LIMIT
        # A prefix index holds only the start of the value: the server must read the row.
        self.covering = kind == "pk" or not any(p is not None for p in index.prefix_lengths)
        ordinals = list(index.columns)
        ext = ordinals + ([c for c in key.columns if c not in ordinals] if kind != "pk" else [])
        probe = ordinals if kind != "secondary" else ext
        self.ext_slots = tuple(table.slot(c) for c in ext)
        self.ext_columns = tuple(table.columns[c].name for c in ext)
        self.ext_convert = tuple(table.columns[c].charset_name for c in ext)
        self.text = any(table.columns[c].charset is not None for c in ext)
        self.get = itemgetter(*(table.slot(c) for c in probe))
        # What must differ for an UPDATE to rewrite this index's entry.
        self.change = itemgetter(*self.ext_slots)
        self.batch = _Batch(self, tuple(table.columns[c].name for c in probe), (),
                            tuple(table.columns[c].charset_name for c in probe))
        self.masked: dict[int, _Batch] = {}
        self.top: Any = None  # the highest entry an INSERT has added here (_appends)
        self.last: int | None = None  # the integer clustered key probed last (_near)


class _Parent:
    """Where a parent table lives, for a batch (as a TableInfo is for its own indexes)."""

    __slots__ = ("name", "qualified", "schema")

    def __init__(self, schema: str, name: str) -> None:
        self.schema, self.name, self.qualified = schema, name, f"{schema}.{name}"


class _ParentPlan:
    """One foreign key's look-up in its parent (inserts.ParentKey): the batch, and the
    getter of the child's values in the parent index's column order."""

    __slots__ = ("batch", "covering", "get", "keys", "keys_cap", "kind", "name", "row_pages", "select",
                 "table", "text")

    def __init__(self, ref: ParentKey, keys: TableKeys, child: TableInfo) -> None:
        self.keys = keys  # the parent as learnt: a new learning (DDL) makes a new plan
        self.select, self.row_pages, self.keys_cap = "1", 1, MAX_KEYS_LIMIT  # the check reads the key alone
        self.table = _Parent(ref.schema, ref.table)
        self.name, self.kind, self.covering = ref.index.name, _PARENT, True
        self.get = itemgetter(*(child.slot(c) for c in ref.columns))
        self.text = any(child.columns[c].charset is not None for c in ref.columns)
        # InnoDB requires a foreign key's text columns to share the parent's character set.
        self.batch = _Batch(self, tuple(keys.names[c] for c in ref.index.columns), (),
                            tuple(child.columns[c].charset_name for c in ref.columns))


class TablePlan:
    """How one table's row changes become probes; built once per TableInfo."""

    __slots__ = ("foreign", "key", "not_null_slots", "others", "parents", "skipped_indexes", "table",
                 "unprobeable")

    def __init__(self, table: TableInfo) -> None:
        self.table = table
        self.key: _IndexPlan | None = None
        self.others: tuple[_IndexPlan, ...] = ()
        self.skipped_indexes: list[tuple[str, str]] = []  # (index, why) for /status
        self.unprobeable: str | None = None
        # Foreign keys whose columns are decoded; their parent plans once the parent is known.
        self.foreign: tuple[ForeignKey, ...] = ()
        self.parents: dict[str, _ParentPlan | None] = {}
        if table.key is None:
            self.unprobeable = "no_key"
        elif all(_SYNTHETIC_NAME.fullmatch(c.name) for c in table.columns):
            self.unprobeable = "no_column_names"  # MINIMAL metadata and no information_schema
        if self.unprobeable or table.key is None:
            self.not_null_slots: tuple[int, ...] = ()
            return
        needed = set(table.needed)
        self.not_null_slots = tuple(table.slot(c) for c in table.needed
                                    if not table.columns[c].nullable)
        self.key = _IndexPlan(table, table.key, "pk", table.key)
        others = []
        for ix in table.indexes:
            if ix.name == table.key.name:
                continue
            why = _unprobeable_index(table, ix, needed)
            if why:
                self.skipped_indexes.append((ix.name, why))
                continue
            others.append(_IndexPlan(table, ix, "unique" if ix.unique else "secondary", table.key))
        self.others = tuple(others)
        self.foreign = tuple(fk for fk in table.foreign_keys if all(c in needed for c in fk.columns))


def _unprobeable_index(table: TableInfo, ix: Index, needed: set[int]) -> str | None:
    if any(c not in needed for c in ix.columns):
        return "columns not decoded"
    prefixes = ix.prefix_lengths or (None,) * len(ix.columns)
    for c, prefix in zip(ix.columns, prefixes, strict=False):
        if table.columns[c].type_name in _UNINDEXABLE and prefix is None:
            return f"{table.columns[c].type_name} column {table.columns[c].name} without a prefix"
    return None


def plan_table(table: TableInfo) -> TablePlan:
    """The probe plan for a table (pure; the batcher caches it per TableInfo)."""
    return TablePlan(table)


class ProbeBatcher:
    """Turns row changes and statements into probes of at most ``max_keys`` keys each.

    ``add``/``add_statement``/``feed`` return the probes that became ready
    (a batch reached ``max_keys``, or a statement); ``flush`` returns every
    partial batch. Duplicate keys waiting in a batch are probed once.
    ``skipped`` counts what was not probed, by reason; ``last_reason`` keeps
    the latest human-readable reason per key.
    """

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS, *, schemas: Iterable[str] = (),
                 exclude_schemas: Iterable[str] = (), near_span: int = NEAR_SPAN) -> None:
        if type(max_keys) is not int or not 1 <= max_keys <= MAX_KEYS_LIMIT:
            raise PrefetchConfigError(
                f"max keys per probe must be between 1 and {MAX_KEYS_LIMIT}, not {max_keys!r}",
                fix=f"set it to a whole number in 1..{MAX_KEYS_LIMIT}; the default is "
                    f"{DEFAULT_MAX_KEYS}",
            )
        self.max_keys = max_keys
        # An integer clustered key this near the one probed last is not probed (_near);
        # 0: every key is (the sandbox tests that count what each key's probe reads).
        self.near_span = near_span
        self.schemas = frozenset(schemas)  # empty: every schema not excluded
        self.exclude_schemas = frozenset(exclude_schemas)
        self.skipped: Counter[str] = Counter()
        self.last_reason: dict[str, str] = {}
        self.rows = 0  # row changes seen; a statement probed, once its table's indexes are known
        # ... of which UPDATEs that move an index entry (``moving``) and DELETEs: both
        # leave purge index entries to remove (control.moved_entries)
        self.moving = 0
        self.deletes = 0
        self.keys = 0  # index entries queued, duplicates included
        self.duplicates = 0  # of those, already waiting in their batch
        self._plans: dict[int, TablePlan] = {}
        self._waiting: dict[_Batch, None] = {}  # batches holding keys, oldest first
        # A statement names no table map: whether its SET list moves index entries, and
        # which entries an INSERT adds, take the table as the replica has it
        # (learn_table). UPDATE statements on a table not looked up yet wait, by the
        # columns they assign, to be counted then; INSERTs are not probed until then.
        self._tables: dict[tuple[str, str], TableKeys] = {}
        self._uncounted: dict[tuple[str, str], dict[frozenset[str], int]] = {}
        self._wanted: set[tuple[str, str]] = set()
        # Non-unique secondary entries InnoDB buffers: (old entries, new entries) not probed.
        self._buffered = (False, False)
        # Whether purge follows the rows fed (see PURGED_ENTRIES): False inside a big
        # transaction, where purge gets none of its undo before the commit (the engine
        # says so once it has read control.INSIDE_ROWS rows of it).
        self.purge_follows = True
        self.statements = StatementBatcher(max_keys, self.wants, self)
        self.statements.inserts.skipped = self.skipped  # one count of what was not probed

    def buffer_changes(self, ops: frozenset[str], setting: str = "") -> None:
        """The secondary-index changes InnoDB buffers (mysql.changebuf.buffered): their
        entries are not probed, the SQL thread reading none of those pages."""
        self._buffered = (DELETE_MARKS in ops, INSERTS in ops)
        self.statements.inserts.buffered = INSERTS in ops
        what = " and ".join(w for w, on in zip(("delete-marks", "inserts"), self._buffered,
                                                strict=True) if on)
        if what:
            self.last_reason["change_buffered"] = (
                f"InnoDB buffers {what} of non-unique secondary indexes{setting}: the SQL thread"
                " does not read those pages, so they are not probed")

    @property
    def pending(self) -> int:
        """Keys waiting for a batch to fill or for ``flush``."""
        return sum(len(b.keys) for b in self._waiting)

    def plan(self, table: TableInfo) -> TablePlan:
        plan = self._plans.get(id(table))
        if plan is None or plan.table is not table:
            if len(self._plans) >= _PLAN_CACHE:
                self._plans.clear()
            plan = self._plans[id(table)] = TablePlan(table)
            if not self.wants(table.schema):
                plan.key, plan.unprobeable = None, "schema_excluded"
        return plan

    def wants(self, schema: str) -> bool:
        """Whether the schema filters let probes into ``schema``."""
        return (not self.schemas or schema in self.schemas) and schema not in self.exclude_schemas

    def reset(self) -> None:
        """Forget every waiting key (the reader jumped: they are stale)."""
        for batch in self._waiting:
            batch.keys = {}
        self._waiting.clear()
        self.statements.reset()
        self._uncounted.clear()
        self._wanted.clear()

    def seen(self, schema: str, table: str, sets: frozenset[str], rows: int, deletes: bool = False) -> None:
        """Count statements' row changes (``rows``, ``moving``, ``deletes``: inserts.Tables),
        an UPDATE's as soon as it can be told whether it moves an index entry."""
        if deletes:  # whatever the table's indexes: as a row DELETE is
            self.rows += rows
            self.deletes += rows
            return
        if not sets:  # INSERT: not moving, as its rows are not
            self.rows += rows
            return
        key = (schema, table)
        found = self._tables.get(key)
        if found is None:
            waiting = self._uncounted.get(key)
            if waiting is None:
                waiting = self._uncounted[key] = {}
            waiting[sets] = waiting.get(sets, 0) + rows
            return
        self.rows += rows
        if not found.indexed.isdisjoint(sets):
            self.moving += rows

    def described(self, schema: str, table: str) -> TableKeys | None:
        """The table as the replica has it, or None: asked for (``unknown_tables``)."""
        found = self._tables.get((schema, table))
        if found is None:
            self._wanted.add((schema, table))
        return found

    def unknown_tables(self) -> list[tuple[str, str]]:
        """The (schema, table)s that statements wait for ``learn_table`` on."""
        return list(self._wanted.union(self._uncounted))

    def learn_table(self, schema: str, table: str, keys: TableKeys | None) -> None:
        """The table as the replica has it (inserts.table_keys), or None: unknown.
        Unknown leaves its statements uncounted (the count errs towards trying) and
        asks again when a statement next needs it."""
        self._wanted.discard((schema, table))
        waiting = self._uncounted.pop((schema, table), None)
        if keys is None:
            return
        self._tables[(schema, table)] = keys
        for sets, n in (waiting or {}).items():
            self.rows += n
            if not keys.indexed.isdisjoint(sets):
                self.moving += n

    def forget_tables(self, tables: Iterable[str] | None) -> None:
        """A DDL changes these tables (qualified names; None: any): look them up again."""
        if tables is None:
            self._tables.clear()
            return
        gone = {t.casefold() for t in tables}
        for key in [k for k in self._tables if f"{k[0]}.{k[1]}".casefold() in gone]:
            del self._tables[key]

    def feed(self, event: object) -> Sequence[Probe]:
        """Any relay-log event: row changes and statements become probes."""
        if isinstance(event, RowChange):
            return self.add(event)
        if isinstance(event, Statement):
            return self.add_statement(event)
        if isinstance(event, LoadData):
            self._skip("load_data", "LOAD DATA: the rows are in a file, not in the log's events")
        elif isinstance(event, Ddl):
            self._skip("not_dml", "DDL is not prefetched")
        return _NO_PROBES

    def add_statement(self, stmt: Statement) -> Sequence[Probe]:
        """A statement's probe through its shape's cached template (see fingerprint.py);
        statements of one batchable shape wait for ``max_keys`` values or ``flush``."""
        probes, refused = self.statements.add(stmt)
        if refused is not None:
            self._skip(refused.skipped or "unsupported_statement", refused.reason)
        return probes or _NO_PROBES

    def add(self, change: RowChange) -> Sequence[Probe]:
        self.rows += 1
        table = change.table
        plan = self._plans.get(id(table))
        if plan is None or plan.table is not table:
            plan = self.plan(table)
        key = plan.key
        if key is None:
            why = plan.unprobeable or "no_key"
            self._skip(why, f"{table.qualified}: {_WHY[why]}")
            return _NO_PROBES
        out: list[Probe] = []
        kind = change.kind
        if kind is RowKind.UPDATE:
            before, after = change.before, change.after
            if before is None or after is None:
                return self._skip_image(table)
            old = key.get(before)
            if not self._queue(key, before, old, out, plan):
                return out or _NO_PROBES
            new = key.get(after)
            moving = False
            if new != old:
                if new is None or (type(new) is tuple and None in new):
                    after = _fill(after, before)  # MINIMAL after image: unlogged = unchanged
                    new = key.get(after)
                if new != old:
                    moving = True
                    self._queue(key, after, new, out, plan)
            skip_old, skip_new = self._buffered
            for ip in plan.others:
                change_of = ip.change
                if change_of(before) != change_of(after):
                    moving = moving or _moves(ip.ext_slots, before, after)
                    if ip.kind == "secondary":
                        # Left to the SQL thread (PURGED_ENTRIES), or buffered by InnoDB.
                        self.skipped["change_buffered" if skip_old else "moved_entry"] += 1
                        self.skipped["change_buffered" if skip_new else "moved_entry"] += 1
                        continue
                    self._queue(ip, before, ip.get(before), out, plan)
                    self._queue(ip, after, ip.get(after), out, plan)
            self.moving += moving
            if plan.foreign:
                self._parents(plan, after, before, out)
        else:
            image = change.before if kind is RowKind.DELETE else change.after
            if image is None:
                return self._skip_image(table)
            # Purge will remove a deleted row from the clustered index and every
            # secondary one, reading each page again (control.moved_entries).
            self.deletes += kind is RowKind.DELETE
            insert = kind is RowKind.INSERT
            value = key.get(image)
            if insert and _appends(key, value):
                # Above every key this table's INSERTs have had (an auto-increment id): its
                # leaf is the last one, which the SQL thread has just read for the last
                # INSERT, in memory. A probe would cost both sides CPU and read nothing.
                self.skipped["append"] += 1
            elif not self._queue(key, image, value, out, plan):
                return out or _NO_PROBES
            # A DELETE delete-marks its entries (old), an INSERT adds them (new).
            skip = self._buffered[1] if insert else self._buffered[0]
            for ip in plan.others:
                if ip.kind == "secondary" and (skip or (not insert and self.purge_follows)):
                    self.skipped["change_buffered" if skip else "deleted_entry"] += 1
                    continue
                value = ip.get(image)
                if insert and _appends(ip, value):
                    self.skipped["append"] += 1  # a created_at index: its last leaf, as above
                else:
                    self._queue(ip, image, value, out, plan)
            if plan.foreign and insert:
                self._parents(plan, image, None, out)
        return out or _NO_PROBES

    def _parents(self, plan: TablePlan, image: tuple[object, ...], before: tuple[object, ...] | None,
                 out: list[Probe]) -> None:
        """The parent entries InnoDB's foreign-key checks will read for this new
        image (``before``: an UPDATE's, whose unchanged keys are not checked)."""
        for fk in plan.foreign:
            parent = (fk.parent_schema, fk.parent_table)
            keys = self._tables.get(parent)
            if keys is None:
                if not self.wants(parent[0]):
                    continue  # a schema kept out of prefetch stays out
                self.described(*parent)
                self._skip("parent_unknown", f"{plan.table.qualified}: the parent {parent[0]}.{parent[1]}"
                                             f" of {fk.name} is not known yet (looked up from"
                                             " information_schema; lagd's account must see it)")
                continue
            pp = plan.parents.get(fk.name)
            if pp is None or pp.keys is not keys:
                ref = parent_key(fk, keys)
                pp = plan.parents[fk.name] = _ParentPlan(ref, keys, plan.table) if ref else None
                if pp is None:
                    self.last_reason["parent_index"] = (
                        f"{plan.table.qualified}: {fk.name} references {parent[0]}.{parent[1]} by columns"
                        " that are not its primary key or a unique index: not probed")
            if pp is None:
                self.skipped["parent_index"] += 1
                continue
            value = pp.get(image)
            if value is None or (type(value) is tuple and None in value):
                continue  # a NULL in the key: InnoDB checks nothing
            if before is not None and value == pp.get(before):
                continue  # an UPDATE that leaves the key as it was: no check
            self._put(pp.batch, value, out)

    def _queue(self, ip: _IndexPlan, image: tuple[object, ...], value: Any, out: list[Probe],
               plan: TablePlan) -> bool:
        """Queue one index entry; False when it cannot be probed."""
        batch = ip.batch
        if value is None or (type(value) is tuple and None in value):
            found = self._with_nulls(ip, image, plan)
            if found is None:
                return False
            batch, value = found
        elif type(value) is int and ip.kind == "pk" and ip.row_pages == 1 and _near(ip, value,
                                                                                    self.near_span):
            # (Not where rows have documents: each row's are pages of their own.)
            self.skipped["near_key"] += 1  # its leaf comes with the key probed before it
            return True
        self._put(batch, value, out)
        return True

    def _put(self, batch: _Batch, value: Any, out: list[Probe]) -> None:
        """Add a key to its batch (once), and the batch to ``out`` when full."""
        self.keys += 1
        keys = batch.keys
        n = len(keys)
        keys[value] = None
        if len(keys) == n:
            self.duplicates += 1
            return
        if n == 0:
            self._waiting[batch] = None
        if n + 1 >= self.max_keys or n + 1 >= batch.plan.keys_cap:
            probe = self._emit(batch)
            if probe is not None:
                out.append(probe)

    def _with_nulls(self, ip: _IndexPlan, image: tuple[object, ...], plan: TablePlan
                    ) -> tuple[_Batch, Any] | None:
        """The batch and key for an entry with NULLs, or None (counted) when unprobeable."""
        name = plan.table.qualified
        if ip.kind == "pk":
            self._skip("null_in_key", f"{name}: NULL in the key {ip.name}")
            return None
        if any(image[s] is None for s in plan.not_null_slots):
            self._skip("not_logged", f"{name}: the row image lacks columns of {ip.name}"
                                     " (binlog_row_image=MINIMAL?)")
            return None
        if ip.kind == "unique":
            self._skip("null_in_unique", f"{name}: NULL in unique index {ip.name}: no uniqueness"
                                         " check, and no point lookup is possible")
            return None
        values = [image[s] for s in ip.ext_slots]
        mask = 0
        for i, v in enumerate(values):
            if v is None:
                mask |= 1 << i
        batch = ip.masked.get(mask)
        if batch is None:
            cols = ip.ext_columns
            batch = ip.masked[mask] = _Batch(
                ip, tuple(c for i, c in enumerate(cols) if not mask >> i & 1),
                tuple(c for i, c in enumerate(cols) if mask >> i & 1),
                tuple(c for i, c in enumerate(ip.ext_convert) if not mask >> i & 1))
        rest = tuple(v for v in values if v is not None)
        return batch, (rest[0] if batch.single else rest)

    def _emit(self, batch: _Batch) -> Probe | None:
        keys = list(batch.keys)
        batch.keys = {}
        self._waiting.pop(batch, None)
        if batch.text:
            good = [k for k in keys if _encodable(k)]
            if len(good) != len(keys):
                self.skipped["undecodable_value"] += len(keys) - len(good)
                self.last_reason["undecodable_value"] = (
                    f"{batch.plan.table.qualified}: a {batch.index} value is not valid in its "
                    "character set")
                keys = good
                if not keys:
                    return None
        n = len(keys)
        size = padded_size(n, self.max_keys)
        if size > n:
            keys.extend([keys[-1]] * (size - n))
        params = tuple(keys) if batch.single else tuple(chain.from_iterable(keys))
        t = batch.plan.table
        pages = batch.plan.row_pages
        return Probe(batch.sql(size), params, t.schema, t.name, batch.index, n,
                     batch.kind, batch.covering, pages=n * pages if pages > 1 else 0)

    def flush(self) -> list[Probe]:
        """Every waiting key, as probes (oldest batch first)."""
        probes = [p for p in (self._emit(b) for b in list(self._waiting)) if p is not None]
        return probes + self.statements.flush()

    def _skip(self, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        self.last_reason[reason] = detail

    def _skip_image(self, table: TableInfo) -> Sequence[Probe]:
        self._skip("no_image", f"{table.qualified}: row change without the image it needs")
        return _NO_PROBES


def _appends(ip: _IndexPlan, entry: Any) -> bool:
    """An INSERT's entry goes after every one this index's INSERTs have added: into the
    leaf the SQL thread has just written for the INSERT before, in memory.

    An integer clustered key also counts within APPEND_SPAN under the highest:
    concurrent writers commit their auto-increment ids out of order (4 writers: 30% of
    them below the highest seen), and the rows just under it are the ones the SQL
    thread has just inserted, in the same last leaves. A secondary or unique entry (a
    ``created_at`` index: its value, then the key) counts only above the highest. Only
    numbers and dates are compared (a collation's order is not Python's). The first
    entry seen is probed: where the index ends is not known yet. Random values set a
    new highest about ln n times in n (and fall within the span about once in n, over a
    range of n x APPEND_SPAN), so nearly all of them are probed."""
    kind = type(entry)
    if kind is tuple:
        if not all(type(v) in _ORDERED for v in entry):
            return False
    elif kind not in _ORDERED:
        return False
    top = ip.top
    if top is None or entry > top:
        ip.top = entry
        return top is not None
    return kind is int and ip.kind == "pk" and entry > top - APPEND_SPAN


def _near(ip: _IndexPlan, key: int, span: int) -> bool:
    """The key is within ``span`` of the clustered key probed last (which it then
    leaves as it is: a run of keys is probed every ``span`` or so)."""
    last = ip.last
    if span and last is not None and -span <= key - last <= span:
        return True
    ip.last = key
    return False


def _moves(slots: tuple[int, ...], before: tuple[object, ...], after: tuple[object, ...]) -> bool:
    """An UPDATE moves this index entry (see ProbeBatcher.moving): a column of
    it has a new value. A None in the after image counts as unchanged: with
    binlog_row_image=MINIMAL it is a column not logged, which the UPDATE did not set (a
    column set to NULL in a FULL image is missed, and the count errs towards trying)."""
    for s in slots:
        v = after[s]
        if v is not None and v != before[s]:
            return True
    return False


def _fill(after: tuple[object, ...], before: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(b if a is None else a for a, b in zip(after, before, strict=True))


def _encodable(key: Any) -> bool:
    """False for text the decoder kept with surrogate escapes (bytes invalid in its charset):
    the driver could not send it."""
    for v in key if type(key) is tuple else (key,):
        if type(v) is str and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True
