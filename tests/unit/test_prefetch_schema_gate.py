"""Probes follow the schema the SQL thread has applied (recorded event sequences, no server)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from lagd.mysql.errors import Kind
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.pool import Outcome
from lagd.prefetch.schema_gate import GatedResolver, SchemaGate, changes_schema, ddl_tables
from lagd.relaylog import (
    Column,
    Ddl,
    Index,
    RelayPosition,
    RowChange,
    RowKind,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)
from lagd.relaylog._tablemap import TableMap

FILE = "relay.000002"
SEQ = RelayPosition(FILE, 4).sequence


@pytest.mark.parametrize(("sql", "tables"), [
    ("ALTER TABLE t ADD PRIMARY KEY (b)", ("s.t",)),
    ("alter table `d`.`T` drop index ka", ("d.t",)),
    ("/* why */ ALTER ONLINE TABLE t ADD COLUMN c INT", ("s.t",)),
    ("DROP TABLE IF EXISTS a, `b`", ("s.a", "s.b")),
    ("RENAME TABLE a TO b, x.c TO d", ("s.a", "s.b", "x.c", "s.d")),
    ("ALTER TABLE t RENAME TO u", ("s.t", "s.u")),
    ("ALTER TABLE t RENAME INDEX a TO b", ("s.t",)),
    ("TRUNCATE t", ("s.t",)),
    ("TRUNCATE TABLE d.t", ("d.t",)),
    ("CREATE INDEX ix ON t (a)", ("s.t",)),
    ("DROP INDEX ka ON t", ("s.t",)),
    ("CREATE UNIQUE INDEX IF NOT EXISTS u ON d.t (a)", ("d.t",)),
    ("CREATE TEMPORARY TABLE tmp (a INT)", ("s.tmp",)),
    ("CREATE TABLE t2 LIKE t1", ("s.t2",)),
    # No table's definition changes: nothing held.
    ("CREATE USER u", ()),
    ("CREATE OR REPLACE VIEW v AS SELECT 1", ()),
    ("CREATE DEFINER=`a`@`%` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @x = 1", ()),
    ("CREATE DATABASE z", ()),
    # Tables that cannot be named: every table is held.
    ("DROP DATABASE z", None),
    ("CREATE SEQUENCE s1", None),
])
def test_ddl_tables(sql: str, tables: tuple[str, ...] | None) -> None:
    assert changes_schema(sql)
    assert ddl_tables(sql, "s") == tables


def test_an_unqualified_table_without_a_default_schema_holds_every_table() -> None:
    assert ddl_tables("ALTER TABLE t ADD c INT", None) is None


def test_statements_that_change_no_schema() -> None:
    assert not changes_schema("GRANT SELECT ON *.* TO u")
    assert not changes_schema("/* c */ FLUSH PRIVILEGES")


# ----- the resolver in the cursor's thread --------------------------------------------

def table_map(table: str) -> TableMap:
    return TableMap(1, "s", table, (3, 3), (0, 0), (False, False), names=("id", "b"),
                    primary_key=(0,))


@dataclass
class CountingResolver:
    """Stands in for information_schema: records what was asked."""

    asked: list[str] = field(default_factory=list)
    dropped: list[Any] = field(default_factory=list)

    def resolve(self, tm: TableMap) -> TableInfo:
        self.asked.append(tm.qualified)
        return info(tm.table, source="information_schema")

    def invalidate(self, tables: Any = None) -> None:
        self.dropped.append(tables)


def test_a_table_met_in_a_ddl_is_resolved_from_the_log_alone_until_placed() -> None:
    gate = SchemaGate()
    inner = CountingResolver()
    r = GatedResolver(inner, gate)
    r.invalidate(("s.t",))  # the decoder meets ALTER TABLE t
    assert r.resolve(table_map("t")).source == "table_map"
    assert r.resolve(table_map("u")).source == "information_schema"
    assert inner.asked == ["s.u"]
    gate.hold(["s.t"], (SEQ, 800))
    assert gate.placed() == []  # t is held: nothing to resolve again yet
    assert r.resolve(table_map("t")).source == "table_map"
    assert gate.release((SEQ, 799)) == []
    assert gate.release((SEQ, 800)) == ["s.t"]
    assert r.resolve(table_map("t")).source == "information_schema"


def test_an_unnamed_ddl_blocks_every_table_until_the_engine_places_it() -> None:
    gate = SchemaGate()
    r = GatedResolver(CountingResolver(), gate)
    r.invalidate(None)
    assert r.resolve(table_map("u")).source == "table_map"
    gate.hold(["s.t"], (SEQ, 800))  # the engine could name it after all
    assert gate.placed() == ["s.u"]  # resolved poorly meanwhile: to be resolved again


def test_a_held_tables_indexes_are_unknown_until_the_sql_thread_has_applied_its_ddl() -> None:
    gate = SchemaGate()
    inner = SimpleNamespace(describe=lambda s, t: ([{"COLUMN_NAME": "id"}], []))
    r = GatedResolver(inner, gate)  # type: ignore[arg-type]
    gate.hold(["S.T"], (SEQ, 800))
    assert r.describe("s", "t") is None  # about to change: statements on it wait
    assert r.describe("s", "u") == ([{"COLUMN_NAME": "id"}], [])
    gate.release((SEQ, 800))
    assert r.describe("s", "t") is not None
    assert GatedResolver(CountingResolver(), gate).describe("s", "u") is None  # no lookup


def test_the_engines_own_invalidations_are_not_ddl() -> None:
    gate = SchemaGate()
    r = GatedResolver(CountingResolver(), gate)
    with gate.quiet():
        r.invalidate(("s.t",))
    assert not gate.blocks("s.t")


# ----- the engine over recorded events ----------------------------------------------

def info(table: str, source: str = "table_map") -> TableInfo:
    pk = Index("PRIMARY", (0,), unique=True, primary=True)
    return TableInfo("s", table, (Column("id", "long", False), Column("b", "long", False)), pk, (pk,),
                     (0, 1), source)


def start(offset: int) -> TransactionStart:
    return TransactionStart(FILE, offset, None, None, None, 0.0, 0, 1)


def end(offset: int) -> TransactionEnd:
    return TransactionEnd(FILE, offset, None, None, None, True, None, 100, 1, 1, 1, frozenset())


def row(table: str, key: int) -> RowChange:
    return RowChange(info(table), RowKind.UPDATE, (key, 1), (key, 2))


@dataclass
class FakeProbe:
    schema: str
    table: str
    rows: int = 1
    kind: str = "pk"
    pages: int = 0


class FakeBatcher:
    def __init__(self) -> None:
        self.skipped: dict[str, int] = {}

    def add(self, e: RowChange) -> list[FakeProbe]:
        return [FakeProbe(e.table.schema, e.table.name)]

    def add_statement(self, e: Statement) -> list[FakeProbe]:
        return [FakeProbe(e.schema or "", e.sql.split()[1], kind="statement")]  # "DELETE t ..."

    def flush(self) -> list[FakeProbe]:
        return []

    def reset(self) -> None:
        pass


@dataclass
class FakePool:
    size: int = 4
    submitted: list[Any] = field(default_factory=list)
    _on_done: Any = None

    dropped: int = 0

    tags: list[Any] = field(default_factory=list)

    def submit(self, probe: Any, tag: Any) -> bool:
        self.submitted.append(probe)
        self.tags.append(tag)
        return True

    def drop_queued(self) -> int:
        self.dropped += 1
        return 0


class FakeDecoder:
    def __init__(self) -> None:
        self.resolver: Any = CountingResolver()
        self._definitions: dict[bytes, Any] = {}
        self.invalidated: list[Any] = []

    def invalidate(self, tables: Any) -> None:
        self.invalidated.append(tables)
        self.resolver.invalidate(tables)


class FakeReader:
    def __init__(self, batches: list[list[Any]]) -> None:
        self.batches = batches
        self.decoder = FakeDecoder()
        self.position = RelayPosition(FILE, 4)
        self.threads: list[str] = []

    def read(self, budget: int) -> list[Any]:
        self.threads.append(threading.current_thread().name)
        return self.batches.pop(0) if self.batches else []


def engine(reader: FakeReader) -> tuple[PrefetchEngine, FakePool]:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    pool = FakePool()
    eng = PrefetchEngine(reader, None, pool, FakeBatcher(), limits, tuning)  # type: ignore[arg-type]
    return eng, pool


RECORDED = [
    start(100), row("t", 1), row("u", 1), end(500),
    start(500), Ddl("s", "ALTER TABLE t ADD PRIMARY KEY (b)", ("s.t",), 0), end(800),
    start(800), row("t", 2), row("u", 2), end(900),
]


def test_rows_after_a_ddl_are_not_probed_until_the_sql_thread_has_applied_it() -> None:
    reader = FakeReader([RECORDED])
    eng, pool = engine(reader)
    asyncio.run(eng._read(1 << 16))
    assert [(p.table) for p in pool.submitted] == ["t", "u", "u"]
    assert eng.counters.skipped == {"schema_pending": 1}
    assert reader.threads == ["lagd-cursor"]  # off the event loop

    eng._follow_schema((SEQ, 500), moved_back=False)
    assert eng.gate.held("s.t") and reader.decoder.invalidated == [] and pool.dropped == 0
    eng._follow_schema((SEQ, 800), moved_back=False)  # the SQL thread applied the ALTER
    assert not eng.gate.held("s.t")
    assert pool.dropped == 1  # probes queued with the old schema would only fail now
    assert reader.decoder.invalidated == [("s.t",)]
    assert not eng.gate.blocks("s.t")  # the engine's drop did not count as a DDL met


def test_a_relay_log_started_anew_releases_everything() -> None:
    reader = FakeReader([RECORDED])
    eng, _ = engine(reader)
    asyncio.run(eng._read(1 << 16))
    eng._follow_schema((1, 4), moved_back=True)
    assert not eng.gate.held_names
    assert reader.decoder.invalidated == [None]


def test_a_ddl_whose_end_is_not_read_yet_is_held_to_the_cursor() -> None:
    reader = FakeReader([[start(500), Ddl("s", "DROP INDEX ka ON t", (), 0)]])
    reader.position = RelayPosition(FILE, 650)
    eng, _ = engine(reader)
    asyncio.run(eng._read(1 << 16))
    assert eng.gate.held_names == {"s.t": (SEQ, 650)}


def test_a_probe_failing_on_the_schema_drops_the_tables_definition_once() -> None:
    reader = FakeReader([[start(100), row("t", 1), end(200)]])
    eng, _ = engine(reader)
    err = Outcome("error", 0, 0.0, "OperationalError: (1176, \"Key 'ka' doesn't exist\")", Kind.SCHEMA)
    for _ in range(3):
        eng._on_done(FakeProbe("s", "t"), None, err)
    eng._on_done(FakeProbe("s", "u"), None, Outcome("error", 0, 0.0, "lost", Kind.LOST))
    assert eng.counters.schema_errors == 3
    asyncio.run(eng._read(1 << 16))
    assert reader.decoder.invalidated == [("s.t",)]


def test_the_event_loop_runs_while_the_cursor_reads() -> None:
    class SlowReader(FakeReader):
        def read(self, budget: int) -> list[Any]:
            # A stand-in for an information_schema query on a hung replica.
            self.released = loop_ran.wait(10)
            return []

    loop_ran = threading.Event()
    reader = SlowReader([])
    eng, _ = engine(reader)

    async def main() -> None:
        async def tick() -> None:
            loop_ran.set()
        ticker = asyncio.get_running_loop().create_task(tick())
        await eng._read(1 << 16)
        await ticker

    asyncio.run(main())
    assert reader.released


def test_statements_on_a_held_table_are_not_probed() -> None:
    reader = FakeReader([[start(100), Ddl("s", "TRUNCATE t", ("s.t",), 0), end(200),
                          start(200), Statement("s", "DELETE t WHERE id = 1", 0, 0),
                          Statement("s", "DELETE u WHERE id = 1", 0, 0), end(300)]])
    eng, pool = engine(reader)
    asyncio.run(eng._read(1 << 16))
    assert [p.table for p in pool.submitted] == ["u"]
    assert eng.counters.skipped == {"schema_pending": 1}


def test_a_batch_of_statements_is_tagged_with_its_oldest_transaction() -> None:
    """In time means in time for every transaction in the batch, as for rows."""
    reader = FakeReader([[start(100), Statement("s", "DELETE u WHERE id = 1", 0, 0), end(200),
                          start(200), Statement("s", "DELETE u WHERE id = 2", 0, 0), end(300)]])
    eng, pool = engine(reader)
    asyncio.run(eng._read(1 << 16))
    assert pool.tags and set(pool.tags) == {(1, 0)}  # (transaction, its first row in the batch)


def test_a_foreign_keys_parent_held_by_its_ddl_is_not_probed() -> None:
    """A parent probe names the parent as information_schema described it: like a statement's,
    it waits for the parent's DDL to be applied (the child's own rows are probed)."""
    class ParentProbing(FakeBatcher):
        def add(self, e: RowChange) -> list[FakeProbe]:
            return [FakeProbe("s", e.table.name), FakeProbe("s", "p", kind="parent")]

    reader = FakeReader([[start(100), Ddl("s", "ALTER TABLE p DROP PRIMARY KEY", ("s.p",), 0), end(200),
                          start(200), row("t", 1), end(300)]])
    eng, pool = engine(reader)
    eng.batcher = ParentProbing()  # type: ignore[assignment]
    asyncio.run(eng._read(1 << 16))
    assert [(p.table, p.kind) for p in pool.submitted] == [("t", "pk")]
    assert eng.counters.skipped == {"schema_pending": 1}


def test_the_parents_of_foreign_keys_just_resolved_are_learnt_before_their_rows() -> None:
    """The rows read with a child's first table map check their parents: the cursor describes
    those parents in the same read, so the first rows already have their parent probes."""
    class Referencing(CountingResolver):
        def take_referenced(self) -> list[tuple[str, str]]:
            return [("s", "p")]

        def describe(self, schema: str, table: str) -> Any:
            return ([{"COLUMN_NAME": "id", "COLUMN_TYPE": "int(11)"}],
                    [{"INDEX_NAME": "PRIMARY", "NON_UNIQUE": 0, "SEQ_IN_INDEX": 1, "COLUMN_NAME": "id",
                      "SUB_PART": None, "INDEX_TYPE": "BTREE"}])

    order: list[str] = []

    class Learning(FakeBatcher):
        def learn_table(self, schema: str, table: str, keys: Any) -> None:
            order.append(f"learn {schema}.{table} {keys.indexes[0].name}")

        def add(self, e: RowChange) -> list[FakeProbe]:
            order.append(f"row {e.table.name}")
            return []

    reader = FakeReader([[start(100), row("t", 1), end(200)]])
    reader.decoder.resolver = Referencing()
    eng, _ = engine(reader)
    eng.batcher = Learning()  # type: ignore[assignment]
    asyncio.run(eng._read(1 << 16))
    assert order == ["learn s.p PRIMARY", "row t"]


def test_a_tables_parents_are_described_with_it() -> None:
    """A statement's table and the parents its INSERTs check are learnt in one lookup round:
    otherwise the parents would wait for the next read, and its statements go unprobed."""
    from lagd.prefetch.engine import _described  # noqa: PLC0415

    col = [{"COLUMN_NAME": "id", "COLUMN_TYPE": "int(11)"}, {"COLUMN_NAME": "pid", "COLUMN_TYPE": "int(11)"}]
    pk = [{"INDEX_NAME": "PRIMARY", "NON_UNIQUE": 0, "SEQ_IN_INDEX": 1, "COLUMN_NAME": "id", "SUB_PART": None,
           "INDEX_TYPE": "BTREE"}]
    fk = [{"CONSTRAINT_NAME": "to_p", "COLUMN_NAME": "pid", "REFERENCED_TABLE_SCHEMA": "s",
           "REFERENCED_TABLE_NAME": "p", "REFERENCED_COLUMN_NAME": "id"}]
    tables = {"c": (col, pk, fk), "p": (col, pk, [])}
    asked: list[str] = []

    def look(schema: str, table: str) -> Any:
        asked.append(table)
        return tables.get(table)

    got = _described(look, [("s", "c"), ("s", "gone")])
    assert [(s, t, keys is not None) for s, t, keys in got] == [
        ("s", "c", True), ("s", "gone", False), ("s", "p", True)]
    assert asked == ["c", "gone", "p"]
