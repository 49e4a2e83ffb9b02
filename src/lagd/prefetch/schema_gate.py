"""Probes follow the schema the SQL thread has applied, not the one the cursor has read.

The cursor runs ahead of the SQL thread. When it meets a DDL, the replica still
has the old definition, and will until the SQL thread applies the statement:
information_schema read now describes the old table (after ``ADD PRIMARY KEY
(b)`` probes would keep ``FORCE INDEX (PRIMARY) WHERE id IN (...)``: a full
scan each), and probes built from the log's new definition name indexes or
columns that do not exist yet (error 1176/1054). So a table a DDL touches is
*held* until the SQL thread's relay position passes the DDL's end: no probes
for it and no information_schema read for it. Once it is passed, the cached
definition is dropped and the next table map resolves it afresh.

Timing: the decoder meets the DDL inside ``reader.read()`` and may resolve a
table map of the same table a few events later, before the engine has seen the
batch. :class:`GatedResolver` closes that gap: from the moment the decoder
invalidates a table (it does so at every schema-changing statement) until the
engine has placed the DDL, that table (every table, when the decoder could not
name them) is answered from the table map alone. Definitions made that way for
tables the engine then does not hold are dropped at once, so they are resolved
properly on their next table map.

A probe that fails with a schema error (no such index, column or table) holds
its table the same way, until the SQL thread reaches where the cursor is now:
the definition is stale for a reason the log did not show (DDL run on the
replica itself), and retrying it would only fail again.

Thread use: the resolver's side runs in the cursor's worker thread, the engine's
side on the event loop, never both at once (the engine awaits every read), but
the lock keeps the two sets consistent regardless.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from lagd.relaylog import SchemaResolver, TableInfo, TableMapResolver
from lagd.relaylog._tablemap import TableMap

Pos = tuple[int, int]  # (relay file sequence, offset), as the engine compares positions
ALL = "*"  # every table: a DDL whose tables could not be named

_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_LEADING = re.compile(r"(?:\s+|/\*(?!!|M!).*?\*/|#[^\n]*(?:\n|$)|--\s[^\n]*(?:\n|$))*", re.S)
# The statement forms whose table names sit at a known place; anything else holds every table.
_FORMS = (
    # ALTER [ONLINE|IGNORE] TABLE t, CREATE [OR REPLACE] [TEMPORARY] TABLE [IF NOT EXISTS] t,
    # DROP [TEMPORARY] TABLE[S] [IF EXISTS] a, b, RENAME TABLE a TO b, c TO d, TRUNCATE [TABLE] t
    re.compile(rf"(?:ALTER|CREATE|DROP|RENAME|TRUNCATE)\b(?:\s+(?:ONLINE|IGNORE|OR\s+REPLACE|TEMPORARY))*"
               rf"\s+TABLES?\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(?P<list>{_QUALIFIED}"
               rf"(?:\s*(?:,|\bTO\b)\s*{_QUALIFIED})*)", re.I),
    re.compile(rf"TRUNCATE\s+(?P<list>{_QUALIFIED})\s*;?\s*$", re.I),
    # CREATE [OR REPLACE] [ONLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX [IF NOT EXISTS] i ON t,
    # DROP INDEX [IF EXISTS] i ON t
    re.compile(rf"(?:CREATE|DROP)\b(?:\s+(?:OR\s+REPLACE|ONLINE|OFFLINE|UNIQUE|FULLTEXT|SPATIAL))*"
               rf"\s+INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}(?:\s+USING\s+\w+)?\s+ON\s+"
               rf"(?P<list>{_QUALIFIED})", re.I),
)
# Objects whose creation or removal leaves every table's definition as it was.
_NO_TABLE = re.compile(
    r"(?:CREATE|ALTER|DROP)\b(?:\s+(?:OR\s+REPLACE|DEFINER\s*=\s*\S+|SQL\s+SECURITY\s+\w+|"
    r"ALGORITHM\s*=\s*\w+|AGGREGATE))*\s+(?:USER|ROLE|VIEW|TRIGGER|PROCEDURE|FUNCTION|EVENT|SERVER|"
    r"PACKAGE(?:\s+BODY)?)\b|(?:CREATE|ALTER)\s+(?:DATABASE|SCHEMA)\b", re.I)
_RENAMED_TO = re.compile(
    rf"\bRENAME\s+(?:TO\s+|AS\s+)?(?!(?:INDEX|KEY|COLUMN)\b)(?P<list>{_QUALIFIED})", re.I)
_SPLIT = re.compile(r"\s*(?:,|\bTO\b)\s*", re.I)
_PART = re.compile(rf"({_NAME})(?:\s*\.\s*({_NAME}))?")
_SCHEMA_WORDS = frozenset({"ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"})
_WORD = re.compile(r"[A-Za-z]+")


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def changes_schema(sql: str) -> bool:
    """Whether a (non-DML) statement may change a table's definition."""
    m = _WORD.match(sql, _LEADING.match(sql).end())  # type: ignore[union-attr]  # matches ""
    return m is not None and m.group(0).upper() in _SCHEMA_WORDS


def ddl_tables(sql: str, schema: str | None) -> tuple[str, ...] | None:
    """``schema.table`` names a DDL touches (case-folded), or None when they cannot be
    named with certainty: then every table must be treated as touched. Empty for
    statements that change no table (users, views, routines, a new database)."""
    start = _LEADING.match(sql).end()  # type: ignore[union-attr]
    if _NO_TABLE.match(sql, start):
        return ()
    for form in _FORMS:
        m = form.match(sql, start)
        if m is None:
            continue
        lists = [m.group("list")]
        if form is _FORMS[0]:  # ALTER TABLE t ... RENAME TO u: u is new, but may be cached
            lists += [r.group("list") for r in _RENAMED_TO.finditer(sql, m.end())]
        names = []
        for part in (p for text in lists for p in _SPLIT.split(text.strip())):
            pm = _PART.fullmatch(part.strip())
            if pm is None:
                return None
            a, b = pm.group(1), pm.group(2)
            if b is not None:
                names.append(f"{_unquote(a)}.{_unquote(b)}".casefold())
            elif schema:
                names.append(f"{schema}.{_unquote(a)}".casefold())
            else:
                return None
        return tuple(names)
    return None


class SchemaGate:
    """Which tables are held, and until which SQL-thread position."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Pos] = {}  # folded table name (or ALL) -> release position
        self._met: set[str] = set()  # invalidated by the decoder, not placed by the engine yet
        self._provisional: set[str] = set()  # resolved from the table map alone while met
        self._quiet = False
        self.holds = 0  # tables held, cumulative (DDL and schema errors)
        self.schema_errors = 0

    # ----- the cursor's thread (through GatedResolver) --------------------

    def met(self, tables: Iterable[str] | None) -> None:
        """The decoder invalidated ``tables`` (None: all) at a DDL it just read."""
        with self._lock:
            if self._quiet:
                return
            if tables is None:
                self._met.add(ALL)
            else:
                self._met.update(t.casefold() for t in tables)

    def blocks(self, table: str) -> bool:
        """Whether ``table`` must not be read from information_schema now."""
        name = table.casefold()
        with self._lock:
            blocked = bool(self._met) and (ALL in self._met or name in self._met)
            blocked = blocked or ALL in self._held or name in self._held
            if blocked:
                self._provisional.add(name)
            return blocked

    # ----- the engine (event loop) ------------------------------------------

    @property
    def held_names(self) -> dict[str, Pos]:
        """The live mapping (empty: no per-row check is needed)."""
        return self._held

    def held(self, table: str) -> bool:
        held = self._held
        return bool(held) and (ALL in held or table.casefold() in held)

    def hold(self, tables: Iterable[str] | None, until: Pos) -> None:
        """Hold ``tables`` (None: every table) until the SQL thread is at ``until``."""
        names = [ALL] if tables is None else [t.casefold() for t in tables]
        with self._lock:
            for name in names:
                old = self._held.get(name)
                if old is None or old < until:
                    self._held[name] = until
                    self.holds += 1

    def placed(self) -> list[str]:
        """The engine has seen every DDL of the batch: forget what the decoder met;
        returns the tables resolved provisionally but not held (to be resolved again)."""
        with self._lock:
            self._met.clear()
            if ALL in self._held:
                return []
            stale = [t for t in self._provisional if t not in self._held]
            self._provisional.difference_update(stale)
            return stale

    def release(self, sql_pos: Pos) -> list[str] | None:
        """Tables whose DDL the SQL thread has applied (None: all), now released."""
        with self._lock:
            done = [t for t, until in self._held.items() if until <= sql_pos]
            for t in done:
                del self._held[t]
            self._provisional.difference_update(done)
            if ALL in done:
                return None
            return done

    def release_all(self) -> None:
        """The relay log was started anew or the cursor jumped past everything held."""
        with self._lock:
            self._held.clear()
            self._met.clear()
            self._provisional.clear()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Invalidations made by the engine itself are not DDL met by the decoder."""
        with self._lock:
            self._quiet = True
        try:
            yield
        finally:
            with self._lock:
                self._quiet = False

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"held": sorted(self._held), "holds": self.holds, "schema_errors": self.schema_errors}


class GatedResolver:
    """A schema resolver that answers held tables from the table map alone."""

    def __init__(self, inner: SchemaResolver, gate: SchemaGate) -> None:
        self.inner = inner
        self.gate = gate
        self._log_only = TableMapResolver(bool(getattr(inner, "decode_all", False)))

    def resolve(self, tm: TableMap) -> TableInfo:
        if self.gate.blocks(tm.qualified):
            return self._log_only.resolve(tm)
        return self.inner.resolve(tm)

    def invalidate(self, tables: Iterable[str] | None = None) -> None:
        names = None if tables is None else tuple(tables)
        self.gate.met(names)
        self.inner.invalidate(names)

    def describe(self, schema: str, table: str) -> Any:
        """The inner resolver's answer, or None (unknown) for a table held: its
        columns and indexes are about to change."""
        look = getattr(self.inner, "describe", None)
        if look is None or self.gate.held(f"{schema}.{table}"):
            return None
        return look(schema, table)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # lookups, failures, last_error, close() of the inner one


def forget(decoder: Any, gate: SchemaGate, tables: list[str] | None) -> None:
    """Drop cached definitions (decoder's and resolver's) without it counting as a DDL met."""
    if tables is not None and not tables:
        return
    drop: Callable[[tuple[str, ...] | None], None] = decoder.invalidate
    with gate.quiet():
        drop(_with_case(decoder, tables) if tables is not None else None)


def _with_case(decoder: Any, tables: list[str]) -> tuple[str, ...]:
    """The decoder and resolver key by the log's spelling; the gate by the folded one."""
    folded = set(tables)
    known = {td.info.qualified for td in getattr(decoder, "_definitions", {}).values()}
    return tuple({*tables, *(n for n in known if n.casefold() in folded)})
