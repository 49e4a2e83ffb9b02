"""Statement-based DML at row-event cost: rewrite each statement *shape* once.

``rewrite_statement_sql`` parses a statement with sqlglot (about 220 µs) and
its cache is keyed by the exact text, so a stream of ``UPDATE t SET c = c + 1
WHERE id = 17`` with a different id each time parses every one. Here a
statement is cut, with one regular expression, into its *shape* (the text with
every literal taken out) and its literals:

- strings ('...' and "...", backslash escapes and doubled quotes), numbers
  (a unary minus folded in), hex and bit literals (x'..', 0x.., b'..', 0b..)
  are literals; a flat ``IN (1, 2, 3)`` list is one literal, so lists of any
  length share a shape;
- everything else stays in the shape, verbatim: keywords, identifiers
  (backtick-quoted ones skipped whole), comments, whitespace, user and system
  variables, function calls.

Each shape that repeats goes through the sqlglot rewrite once (its first
statement goes the direct way: a shape seen once costs what it always did),
with a marker in place of each literal; the SELECT it returns becomes a
template, and a statement's probe is its literals bound into the template by
text. That is exactly what the sqlglot path would produce for the statement
itself, because that path splices the statement's own text. It is checked,
not assumed: a template is kept only if binding the literals of the
statement it was made from gives the same text as rewriting that statement
directly; a shape that fails the check (a marker that parsed differently) is
rewritten statement by statement as before. Refusals (unsafe or
nondeterministic functions, user variables, executable comments, locking
reads, subqueries it cannot rewrite) are decided by the same path once per
shape and cached with it: none of them depend on a literal's value.

A shape whose SELECT is ``SELECT * FROM <one table> WHERE <col> = ?`` (or ``IN
(...)``) is batched like row probes: the values of ``max_keys`` statements go into
one ``<col> IN (...)``, and up to twice that as the shape's probes answer
fast (control.statement_batch, STATEMENT_KEYS_FACTOR). Any other one-table shape whose
condition is a flat conjunction (``id BETWEEN ? AND ?``, ``id >= ? AND id <
?``, ``a = ? AND b = ?``, ``id = ? AND version = ?``: no parentheses, no OR,
no ORDER BY, no LIMIT of its own) is batched as ``(<cond 1>) OR (<cond
2>) ...``: the range optimizer reads each disjunct as a range of the index
the statement alone would use, so the batch reads the pages the statements
will, in one round trip. ``Probe.rows`` counts the statements a probe covers.
A one-table probe selects ``ISNULL`` of each document (BLOB, TEXT, JSON,
spatial), or of one column in no index, instead of ``*`` once the table is
known (inserts.probe_select: the same pages read, a byte a row sent).

Every statement it probes is also reported to ``tables.seen`` with the
columns its SET list assigns, or as a DELETE (once per shape, from the same
parse): the caller matches them against the table's indexes to count the
row changes that leave purge index entries to remove, as it does for row
events (ProbeBatcher.moving).

INSERT shapes go to inserts.InsertBatcher (the entries they will add), also
from their second statement on.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from lagd.prefetch.control import STATEMENT_KEYS_FACTOR, statement_batch, statement_window
from lagd.prefetch.inserts import InsertBatcher, InsertShape, TableKeys, Tables, is_insert
from lagd.prefetch.rewrite_sql import (
    Probe,
    StatementRewrite,
    integer_arguments,
    padded_size,
    rewrite_statement_sql,
    uncommented,
)
from lagd.relaylog.events import Statement

log = logging.getLogger(__name__)

_SCAN = re.compile(
    # Where none of the alternatives can start, one character-class test instead of
    # five failed alternatives (5.5 -> 2.4 µs a statement for the scan).
    r"""(?=['"`/xXbB0-9.])"""
    r"""(?:(?P<q>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")"""  # a string literal
    r"|`(?:[^`]|``)*`"  # a quoted identifier: part of the shape
    r"|/\*.*?\*/"  # a comment kept (code or a hint: uncommented took the others): part of the shape
    r"|(?P<h>(?<![\w$@.])(?:[xX]'[0-9a-fA-F]*'|[bB]'[01]*'|0x[0-9a-fA-F]+|0b[01]+)(?![\w$]))"
    r"|(?P<n>(?<![\w$@.])(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w$])))",
    re.S,
)
_UNARY_BEFORE = frozenset("=<>(,")  # a minus after one of these is a sign, not a subtraction
_IN_OPEN = re.compile(r"\bIN\s*\(\s*$", re.I)
_LIST_SEP = re.compile(r"\s*,\s*")
_LIST_CLOSE = re.compile(r"\s*\)")
# Markers: literals of the same class that no statement contains (every literal is replaced).
_STR_MARK = "'~lagd:{}~'"
_NUM_MARK = "97531{:05d}86420"
_MARKS = re.compile(r"'~lagd:(\d+)~'|97531(\d{5})86420")
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_MARK = r"(?:'~lagd:\d+~'|97531\d{5}86420)"
# The rewrite's own LIMIT (STATEMENT_ROWS), not a statement's: that is a literal, a marker.
_OWN_LIMIT = r"(?!97531\d{5}86420)\d+"
_BATCHABLE = re.compile(
    rf"SELECT \* FROM (?P<refs>[^,()]+?) WHERE (?P<col>{_NAME}(?:\.{_NAME})*)"
    rf"\s*(?:=\s*{_MARK}|IN\s*\(\s*{_MARK}\s*\))\s*(?:LIMIT (?P<limit>{_OWN_LIMIT}))?", re.I | re.S)
# Any other one-table condition, batched as an OR of conditions when it is a flat
# conjunction (_disjunct): no parentheses (no subquery, function or IN list), and
# only the rewrite's own LIMIT (a statement's LIMIT is a literal, so a marker).
_OR_BATCHABLE = re.compile(
    rf"SELECT \* FROM (?P<refs>[^,()]+?) WHERE (?P<cond>[^()]+?)\s*(?:LIMIT (?P<limit>{_OWN_LIMIT}))?",
    re.I | re.S)
# What would change an OR of the conditions' meaning or plan ("||" is OR in the
# default sql_mode); a quoted name that reads as one is refused too, harmlessly.
_NOT_A_CONJUNCTION = re.compile(r"\b(?:OR|XOR|ORDER|GROUP|HAVING|WINDOW|UNION|SELECT|LIMIT|INTO|FOR|LOCK)\b"
                                r"|\|\|", re.I)
# A condition that bounds what it reads: an equality or BETWEEN, or a lower and an
# upper bound. An OR of open ranges (k > 5, k > 6) is one open range, and its LIMIT
# would read the start of it for all of them: those stay one probe a statement.
_EQUAL = re.compile(r"(?<![<>!])=|\bBETWEEN\b", re.I)
_LOWER = re.compile(r"(?<!<)>")
_UPPER = re.compile(r"<(?!>)")
_STAR = "SELECT * FROM "  # how a one-table statement probe starts (rewrite_sql._splice)
T = TypeVar("T")
_CACHE_LIMIT = 4096  # shapes; a stream of one-off shapes must not grow memory without end


Cut = tuple[str, tuple[str, ...], tuple[bool, ...]]

try:
    # The same cut in C (_scan.c), for what it can make without the expression's
    # backtracking: 5-6 µs a statement-based INSERT here, under 1 µs there.
    if os.environ.get("LAGD_PURE_PYTHON"):
        raise ImportError("pure Python requested")
    from lagd.prefetch._scan import fingerprint as _scan_c

    SCAN_C: Callable[[str], Any] | None = _scan_c
except ImportError:
    SCAN_C = None


def fingerprint(sql: str) -> Cut | None:
    """(shape, literal texts, which literals are strings), or None when the text
    cannot be cut safely (not valid UTF-8)."""
    if SCAN_C is not None:
        cut = SCAN_C(sql)
        if cut is not NotImplemented:
            return cut  # type: ignore[no-any-return]  # _scan.pyi
    return fingerprint_py(sql)


def fingerprint_py(sql: str) -> Cut | None:
    """``fingerprint`` by the regular expression: the reference, and the path for
    what the C scanner leaves (non-ASCII text, an unterminated quote, ...)."""
    if "\0" in sql:
        return None
    if not sql.isascii():
        try:
            sql.encode("utf-8")
        except UnicodeEncodeError:
            return None  # the sqlglot path refuses it; binding it would send bytes the driver cannot
    sql = uncommented(sql)
    pieces: list[str] = []
    lits: list[str] = []
    strs: list[bool] = []
    lists: list[int] = []  # literals that are flat IN lists
    last = 0
    for m in _SCAN.finditer(sql):
        kind = m.lastgroup
        if kind is None:
            continue
        start, end = m.span()
        piece = sql[last:start]
        if kind == "n" and piece.endswith("-") and (piece[:-1].rstrip()[-1:] in _UNARY_BEFORE):
            piece, start = piece[:-1], start - 1
        if lits and strs[-1] == (kind == "q") and _LIST_SEP.fullmatch(piece) and in_list(pieces):
            # The next value of a flat IN list: one literal with the values before it.
            lits[-1] = lits[-1] + piece + sql[start:end]
            if not lists or lists[-1] != len(lits) - 1:
                lists.append(len(lits) - 1)
            last = end
            continue
        pieces.append(piece)
        lits.append(sql[start:end])
        strs.append(kind == "q")
        last = end
    pieces.append(sql[last:])
    for i in lists:  # values of mixed kinds: not one list after all (rare; the slow path takes it)
        if not _LIST_CLOSE.match(pieces[i + 1]):
            return None
    return "\0".join(pieces), tuple(lits), tuple(strs)


def in_list(pieces: list[str]) -> bool:
    """The last literal opened a flat ``IN (`` list."""
    return bool(_IN_OPEN.search(pieces[-1]))


@dataclass(frozen=True, slots=True, eq=False)  # a dict key by identity: hashing the parts costs
class Template:
    """A shape's SELECT with slots for literals; or its refusal; or "no template"."""

    refusal: StatementRewrite | None
    parts: tuple[str, ...] = ()  # text between slots
    slots: tuple[int, ...] = ()  # the literal each slot takes
    schema: str = ""
    table: str = ""
    batch_head: str | None = None  # "SELECT * FROM refs WHERE col IN (" when batchable
    batch_tail: str = ")"  # what closes the list, before the LIMIT
    # The rewrite's own LIMIT a statement (rewrite_sql.STATEMENT_ROWS; 0: none). A batch
    # reads up to that many rows for each of its statements, as their probes one by one
    # would: one LIMIT for the whole batch cut it off in index order (16 statements of
    # 40 rows each: 256 of 640), and the statements whose rows sort last were never read.
    batch_limit: int = 0
    batch_list: bool = False  # the batched value is an IN list (counts as its values)
    # An OR batch (_OR_BATCHABLE): the condition's text between slots and the literal
    # each slot takes; a statement's value is its condition, bound, in parentheses.
    unit_parts: tuple[str, ...] = ()
    unit_slots: tuple[int, ...] = ()
    verified: bool = True
    sets: frozenset[str] = frozenset()  # the columns an UPDATE assigns (StatementRewrite.sets)
    deletes: bool = False  # a DELETE (StatementRewrite.deletes)
    plan: str | None = None  # the shape's name for the pool's plan check (Probe.plan)
    one_table: bool = False  # its select list may name the table's columns (StatementRewrite)

    def bind(self, lits: tuple[str, ...]) -> str:
        return _bind(self.parts, self.slots, lits)

    def batch_value(self, lits: tuple[str, ...]) -> str:
        """What one statement adds to its batch: a value of the IN list, or its condition."""
        if self.unit_parts:
            return f"({_bind(self.unit_parts, self.unit_slots, lits)})"
        return lits[self.slots[0]].replace("%", "%%")

    @property
    def batch_sep(self) -> str:
        return " OR " if self.unit_parts else ", "


def _bind(parts: tuple[str, ...], slots: tuple[int, ...], lits: tuple[str, ...]) -> str:
    out = [parts[0]]
    for slot, part in zip(slots, parts[1:], strict=True):
        out.append(lits[slot].replace("%", "%%"))
        out.append(part)
    return "".join(out)


def _slotted(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``text`` cut at its markers: the text between them, and the literal each stands for."""
    parts: list[str] = []
    slots: list[int] = []
    last = 0
    for m in _MARKS.finditer(text):
        parts.append(text[last:m.start()])
        slots.append(int(m.group(1) or m.group(2)))
        last = m.end()
    parts.append(text[last:])
    return tuple(parts), tuple(slots)


_UNVERIFIED = Template(None, verified=False)


def marked(shape: str, strs: tuple[bool, ...]) -> str:
    """The shape with a marker in place of each literal: parsed once for all its statements."""
    pieces = shape.split("\0")
    marks = [_STR_MARK.format(i) if s else _NUM_MARK.format(i) for i, s in enumerate(strs)]
    return "".join(p + m for p, m in zip(pieces, [*marks, ""], strict=True))


def marker_slot(text: str) -> int | None:
    """The literal slot a marker, as SQL text, stands for; None for any other text."""
    m = _MARKS.fullmatch(text)
    return int(m.group(1) or m.group(2)) if m is not None else None


class _NoTables:
    def described(self, schema: str, table: str) -> TableKeys | None:
        return None

    def seen(self, schema: str, table: str, sets: frozenset[str], rows: int, deletes: bool = False) -> None:
        pass

    def wants(self, schema: str) -> bool:
        return True


def build_template(shape: str, lits: tuple[str, ...], strs: tuple[bool, ...], sql: str,
                   schema: str | None) -> Template:
    """Rewrite the marked shape once; keep it only if it reproduces ``sql``'s own rewrite."""
    direct = rewrite_statement_sql(sql, schema)
    via = rewrite_statement_sql(marked(shape, strs), schema)
    if direct.probe is None or via.probe is None:
        if direct.probe is None and via.probe is None and direct.skipped == via.skipped:
            return Template(direct)
        return _UNVERIFIED
    if (via.sets, via.deletes, via.one_table) != (direct.sets, direct.deletes, direct.one_table):
        return _UNVERIFIED
    text = via.probe.sql
    parts, slots = _slotted(text)
    batch_head: str | None = None
    tail, limit = ")", None
    unit: tuple[tuple[str, ...], tuple[int, ...]] = ((), ())
    b = _BATCHABLE.fullmatch(text)
    o = _OR_BATCHABLE.fullmatch(text) if b is None else None
    if b is not None and len(slots) == 1 and " JOIN " not in b.group("refs").upper():
        batch_head = f"SELECT * FROM {b.group('refs')} WHERE {b.group('col')} IN ("
        limit = b.group("limit")
    elif o is not None and " JOIN " not in o.group("refs").upper() and _disjunct(o.group("cond")):
        batch_head = f"SELECT * FROM {o.group('refs')} WHERE "
        tail = ""
        limit = o.group("limit")
        unit = _slotted(o.group("cond"))
    t = Template(None, parts, slots, via.probe.schema, via.probe.table, batch_head, tail,
                 int(limit or 0), batch_head is not None and not unit[0] and "," in lits[slots[0]],
                 unit[0], unit[1], sets=via.sets, deletes=via.deletes, one_table=via.one_table)
    if t.bind(lits) != direct.probe.sql or (t.schema, t.table) != (direct.probe.schema,
                                                                   direct.probe.table):
        return _UNVERIFIED
    return t


def _disjunct(cond: str) -> bool:
    """The condition can stand as one term of an OR: a flat conjunction with a literal
    that bounds the rows it reads."""
    if _MARKS.search(cond) is None:
        return False
    bare = _MARKS.sub("?", cond)
    bounded = _EQUAL.search(bare) is not None or (
        _LOWER.search(bare) is not None and _UPPER.search(bare) is not None)
    return bounded and _NOT_A_CONJUNCTION.search(bare) is None


class StatementBatcher:
    """Statements -> probes through cached templates; batches of one shape share a probe."""

    def __init__(self, max_keys: int, wants: Callable[[str], bool] = lambda _schema: True,
                 tables: Tables | None = None) -> None:
        self.max_keys = max_keys  # a new shape's first batches
        self.most = STATEMENT_KEYS_FACTOR * max_keys  # ... grown by their answers up to this
        self.wants = wants  # the schema filters
        self.tables = tables or _NoTables()  # told of each statement probed; knows their indexes
        self.inserts = InsertBatcher(max_keys, self.tables)
        self._templates: dict[tuple[str, str | None], Template] = {}
        # Shapes seen once: a template costs two sqlglot parses, so a shape that never
        # repeats (a request id in a comment) must not cost more than the direct path.
        self._once: dict[tuple[str, str | None], None] = {}
        self._waiting: dict[Template, dict[str, int]] = {}  # batchable shapes: value -> keys in it
        self._times: dict[Template, int] = {}
        # Statements a probe of each batching template (by Template.plan), as its probes
        # answer (control.statement_batch); kept and cleared with the templates. Both
        # on the loop: the engine adds statements and hears answers there.
        self._sizes: dict[str | None, int] = {}
        self.stats: Counter[str] = Counter()  # template hits, misses, unverified shapes

    def reset(self) -> None:
        self._waiting.clear()
        self._times.clear()
        self.inserts.reset()

    def add(self, stmt: Statement) -> tuple[list[Probe], StatementRewrite | None]:
        """Probes ready now, and a refusal (or None)."""
        cut = fingerprint(stmt.sql)
        if cut is None:
            self.stats["fallback"] += 1
            return self._direct(stmt)
        shape, lits, strs = cut
        key = (shape, stmt.schema)
        t = self._templates.get(key)
        if t is None:  # an INSERT shape never has a template: the test waits until here
            known = self.inserts.known(key)  # a dict lookup before the verb's regular expression
            if known is not None or is_insert(shape):
                return self._insert(key, lits, strs, stmt, known)
            if self._first_seen(key):
                return self._direct(stmt, _plan_key(key))
            self.stats["shapes"] += 1
            if len(self._templates) >= _CACHE_LIMIT:
                self._templates.clear()
                self._sizes.clear()
            t = build_template(shape, lits, strs, stmt.sql, stmt.schema)
            t = self._templates[key] = replace(t, plan=_plan_key(key))
            if t.batch_head is not None:
                self._sizes[t.plan] = self.max_keys
        if t.refusal is not None:
            return [], t.refusal
        if not t.verified:
            self.stats["fallback"] += 1
            return self._direct(stmt, t.plan)
        if not self.wants(t.schema):
            return [], _excluded(t.schema)
        self.tables.seen(t.schema, t.table, t.sets, 1, t.deletes)
        self.stats["templated"] += 1
        if t.batch_head is None:
            sql = self._narrowed(t.bind(lits), t.one_table, t.schema, t.table)
            return [Probe(sql, (), t.schema, t.table, None, 1, "statement", covering=False,
                          source_time=stmt.header_time, plan=t.plan)], None
        values = self._waiting.get(t)
        if values is None:
            values = self._waiting[t] = {}
            self._times[t] = stmt.header_time
        value = t.batch_value(lits)
        values[value] = value.count(",") + 1 if t.batch_list else 1
        if len(values) >= self._sizes.get(t.plan, self.max_keys):
            return [self._emit(t)], None
        return [], None

    def answered(self, plan: str | None, status: str, seconds: float) -> None:
        """A probe of shape ``plan`` answered: the next batches of it are sized by that.
        A probe of no batching template (a direct one names its shape or its text) sizes
        nothing."""
        size = self._sizes.get(plan)
        if size is None:
            return
        new, why = statement_batch(size, self.most, status, seconds)
        if new != size:
            log.debug("statement shape %r: %s", plan, why)
            self._sizes[plan] = new

    def flush(self) -> list[Probe]:
        return [self._emit(t) for t in list(self._waiting)] + self.inserts.flush()

    def _first_seen(self, key: tuple[str, str | None]) -> bool:
        """Whether this is the shape's first statement (a shape is parsed from its second)."""
        if key in self._once:
            del self._once[key]
            return False
        if len(self._once) >= _CACHE_LIMIT:
            self._once.clear()
        self._once[key] = None
        self.stats["first_seen"] += 1
        return True

    def _insert(self, key: tuple[str, str | None], lits: tuple[str, ...], strs: tuple[bool, ...],
                stmt: Statement, shape: InsertShape | StatementRewrite | None
                ) -> tuple[list[Probe], StatementRewrite | None]:
        if shape is None:
            if self._first_seen(key):
                return [], _INSERT_ONCE
            shape = self.inserts.shape(key, marked(key[0], strs), marker_slot)
        if isinstance(shape, StatementRewrite):
            return [], shape
        if not self.wants(shape.schema):
            return [], _excluded(shape.schema)
        self.stats["inserts"] += 1
        return self.inserts.add(shape, lits, strs, stmt.foreign_key_checks, stmt.insert_id,
                                stmt.auto_increment)

    def _emit(self, t: Template) -> Probe:
        values = self._waiting.pop(t)
        when = self._times.pop(t, None)
        rows = sum(values.values())
        listed = list(values)
        # Integer values (ids) make a prepared probe (rewrite_sql.integer_arguments), where
        # its rows are read whole: only a probe narrowed to a byte a row, with its LIMIT.
        args = integer_arguments(listed, padded_size(len(listed), self.most)) \
            if t.batch_limit and not t.unit_parts else None
        if args is not None:
            limit = f" LIMIT {t.batch_limit * len(args[1])}"
            sql = self._narrowed(f"{t.batch_head}{args[0]}{t.batch_tail}{limit}", t.one_table, t.schema,
                                 t.table)
            if not sql.startswith(_STAR):
                return Probe(sql, args[1], t.schema, t.table, None, rows, "statement", covering=False,
                             source_time=when, plan=t.plan)
        limit = f" LIMIT {t.batch_limit * len(values)}" if t.batch_limit else ""
        sql = self._narrowed(f"{t.batch_head}{t.batch_sep.join(listed)}{t.batch_tail}{limit}",
                             t.one_table, t.schema, t.table)
        return Probe(sql, (), t.schema, t.table, None, rows, "statement", covering=False,
                     source_time=when, plan=t.plan)

    def _narrowed(self, sql: str, one_table: bool, schema: str, table: str) -> str:
        """A one-table probe selects what inserts.probe_select says instead of ``*``, once
        the table is known: ISNULL of each document, or of one column in no index. The
        server reads the same pages (the statement's UPDATE or DELETE reads the whole
        record too) and sends a byte a row or document, not up to STATEMENT_ROWS rows."""
        if not one_table or not sql.startswith(_STAR):
            return sql
        keys = self.tables.described(schema, table)
        if keys is None or keys.select == "*":
            return sql
        # The probe's text is a format for the driver (Probe): a % of a column's name is doubled.
        return f"SELECT {keys.select.replace('%', '%%')} FROM {sql[len(_STAR):]}"

    def _direct(self, stmt: Statement, plan: str | None = None
                ) -> tuple[list[Probe], StatementRewrite | None]:
        """The statement rewritten on its own; ``plan`` names its shape (None: no shape was
        cut, and the text names itself)."""
        verdict = rewrite_statement_sql(stmt.sql, stmt.schema, stmt.header_time)
        if verdict.probe is None:
            return [], verdict
        p = verdict.probe
        if not self.wants(p.schema):
            return [], _excluded(p.schema)
        self.tables.seen(p.schema, p.table, verdict.sets, 1, verdict.deletes)
        sql = self._narrowed(p.sql, verdict.one_table, p.schema, p.table)
        return [Probe(sql, p.params, p.schema, p.table, p.index, 1, p.kind, p.covering,
                      p.source_time, plan or f"{stmt.schema or ''}\0{stmt.sql}")], None


class ShapeFlights(Generic[T]):
    """Statement probes out by shape (``Probe.plan``), how many each shape may have out
    (control.statement_window: from one, by its answers), and the probes waiting for
    room. A probe that may not go now waits, however many wait: the read-ahead makes a
    lead's worth of them at once, and they are in the lead's page budget, which bounds
    them. Dropped past 32 a shape, a shape of 10-row statements lost a third of its
    statements (6,133 of 20,000) and caught up 1.33x against 1.74x with all sent
    (update_in_stmt, 2026-11-29). On the loop: the engine sends, and hears every answer
    (dropped ones too)."""

    def __init__(self, limit: int = _CACHE_LIMIT, most: int = 32) -> None:
        self._out: dict[str, int] = {}
        # The shapes most recently answered: one-off shapes (a request id in a comment)
        # push out the oldest, not the ones still running, which would start from one
        # probe out again.
        self._window: OrderedDict[str, int] = OrderedDict()
        self._held: dict[str, deque[T]] = {}
        self._limit, self._most = limit, most

    def offer(self, plan: str, item: T) -> bool:
        """Whether it may go now; if not, it waits until one of the shape's probes answers."""
        if self._out.get(plan, 0) < self._window.get(plan, 1):
            return True
        held = self._held.get(plan)
        if held is None:
            held = self._held[plan] = deque()
        held.append(item)
        return False

    def sent(self, plan: str) -> None:
        self._out[plan] = self._out.get(plan, 0) + 1

    def answered(self, plan: str, status: str) -> tuple[list[T], list[T]]:
        """A probe of ``plan`` answered: the held probes to send now, and those to drop."""
        out = max(0, self._out.pop(plan, 0) - 1)
        if out:
            self._out[plan] = out
        window = self._window.get(plan, 1)
        if status in ("ok", "timeout"):  # a probe dropped, refused or not sent tells nothing of its cost
            window, why = statement_window(window, self._most, status)
            if window != self._window.get(plan):
                log.debug("statement shape %r: %s", plan, why)
            self._window[plan] = window
            self._window.move_to_end(plan)
            if len(self._window) > self._limit:
                self._window.popitem(last=False)
        held = self._held.get(plan)
        if not held:
            return [], []
        if status == "timeout":  # batched at the size that timed out: the next are smaller
            del self._held[plan]
            return [], list(held)
        send = [held.popleft() for _ in range(min(len(held), max(0, window - out)))]
        if not held:
            del self._held[plan]
        return send, []

    def clear(self) -> list[T]:
        """Every held probe, let go (the queued ones are dropped: the gate shut, the
        reader jumped)."""
        held = [item for items in self._held.values() for item in items]
        self._held.clear()
        return held


def _plan_key(key: tuple[str, str | None]) -> str:
    """A shape's name in the pool's plan check: the shape and the schema it runs in."""
    return f"{key[1] or ''}\0{key[0]}"


_INSERT_ONCE = StatementRewrite(None, "insert_statement", "the first INSERT of its shape is not"
                                " probed (a shape is parsed from its second statement)")


def _excluded(schema: str) -> StatementRewrite:
    return StatementRewrite(None, "schema_excluded", f"{schema} is excluded from prefetch")
