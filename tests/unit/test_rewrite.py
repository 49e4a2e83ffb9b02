"""Row changes -> batched covering index probes (lagd.prefetch.rewrite)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from decimal import Decimal

import pytest
import sqlglot
from sqlglot import exp
from test_inserts import info_rows

from lagd.errors import LagdError
from lagd.mysql.changebuf import DELETE_MARKS, INSERTS
from lagd.prefetch.inserts import table_keys
from lagd.prefetch.rewrite import (
    APPEND_SPAN,
    PROBE_PAGES,
    PURGED_ENTRIES,
    PrefetchConfigError,
    Probe,
    ProbeBatcher,
    documents,
    padded_size,
    plan_table,
)
from lagd.prefetch.rewrite_sql import integer_arguments
from lagd.relaylog import (
    Column,
    Ddl,
    ForeignKey,
    Index,
    LoadData,
    RowChange,
    RowKind,
    Statement,
    TableInfo,
    TransactionStart,
)


def assert_plain_select(sql: str) -> None:
    """One SELECT, without locking clause or INTO (placeholders as the server sees them)."""
    [tree] = sqlglot.parse(re.sub(r"%s", "?", sql), read="mysql")
    assert isinstance(tree, exp.Select), sql
    assert not list(tree.find_all(exp.Lock, exp.Into)), sql

U, D, INS = RowKind.UPDATE, RowKind.DELETE, RowKind.INSERT


def col(name: str, type_name: str = "long", nullable: bool = False, charset: str | None = None) -> Column:
    return Column(name, type_name, nullable, charset=charset)


PK = Index("PRIMARY", (0,), unique=True, primary=True)
# orders(id PK, k INT NOT NULL, u VARCHAR NULL UNIQUE, pad, name VARCHAR NOT NULL KEY name(4))
ORDERS = TableInfo(
    "shop", "orders",
    (col("id"), col("k"), col("u", "varchar", True, "utf8"), col("pad", "string", True, "utf8"),
     col("name", "varchar", False, "utf8")),
    PK,
    (PK, Index("u_1", (2,), unique=True), Index("k_1", (1,), unique=False),
     Index("name_pfx", (4,), unique=False, prefix_lengths=(4,))),
    (0, 1, 2, 4), "table_map+information_schema",
)
# Values are aligned with ORDERS.needed: (id, k, u, name).
ROW = (1, 10, "a", "nm1")


def probes_for(*changes: RowChange, max_keys: int = 16, batcher: ProbeBatcher | None = None,
               purge_follows: bool = False) -> list[Probe]:
    """The probes of ``changes``. Inside a big transaction unless told (``purge_follows``):
    a DELETE's secondary entries are probed there (rewrite.PURGED_ENTRIES), so the shapes
    of every index's probe show."""
    b = batcher or ProbeBatcher(max_keys=max_keys)
    if batcher is None:
        b.purge_follows = purge_follows
    out: list[Probe] = []
    for c in changes:
        out.extend(b.add(c))
    out.extend(b.flush())
    for p in out:
        assert_plain_select(p.sql)
        assert p.sql.count("%s") == len(p.params)
    return out


def summary(probes: list[Probe]) -> list[tuple[str | None, str, tuple[object, ...]]]:
    return sorted((p.index, p.kind, p.params) for p in probes)


# A non-unique secondary entry an UPDATE moves or a DELETE delete-marks is left to the
# SQL thread (rewrite.PURGED_ENTRIES): the row and any unique entry are probed.
CASES = [
    ("update-non-indexed", U, ROW, ROW,
     [("PRIMARY", "pk", (1,))]),
    ("update-secondary", U, ROW, (1, 11, "a", "nm1"),
     [("PRIMARY", "pk", (1,))]),
    ("update-unique", U, ROW, (1, 10, "b", "nm1"),
     [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a", "b"))]),
    ("update-prefix", U, ROW, (1, 10, "a", "nm2"),
     [("PRIMARY", "pk", (1,))]),
    # A new primary key moves the row and rewrites every secondary entry (they hold the key).
    ("update-key", U, ROW, (200, 10, "a", "nm1"),
     [("PRIMARY", "pk", (1, 200)), ("u_1", "unique", ("a",))]),
    # A new key next to the old one: in the leaf the old one's probe reads (_near).
    ("update-key-near", U, ROW, (2, 10, "a", "nm1"),
     [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a",))]),
    ("delete", D, ROW, None,
     [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a",))]),
    ("insert", INS, None, (5, 50, "e", "nm5"),
     [("PRIMARY", "pk", (5,)), ("k_1", "secondary", (50, 5)), ("name_pfx", "secondary", ("nm5", 5)),
      ("u_1", "unique", ("e",))]),
]


@pytest.mark.parametrize(("kind", "after", "follows", "expected", "skipped"), [
    (U, (1, 11, "a", "nm1"), True, [("PRIMARY", "pk", (1,))], {"moved_entry": 2}),
    # an UPDATE's moves are left out inside a big transaction too: it splits pages at once
    (U, (1, 11, "a", "nm1"), False, [("PRIMARY", "pk", (1,))], {"moved_entry": 2}),
    (D, None, True, [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a",))], {"deleted_entry": 2}),
    # inside a big transaction purge waits for the commit: a DELETE's entries are probed
    (D, None, False, [("PRIMARY", "pk", (1,)), ("k_1", "secondary", (10, 1)),
                      ("name_pfx", "secondary", ("nm1", 1)), ("u_1", "unique", ("a",))], {}),
], ids=["update", "update-inside", "delete", "delete-inside"])
def test_entries_purge_comes_back_for_are_left_to_the_sql_thread(
        kind: RowKind, after: tuple | None, follows: bool, expected: list, skipped: dict[str, int]) -> None:
    b = ProbeBatcher()
    b.purge_follows = follows
    probes = probes_for(RowChange(ORDERS, kind, ROW, after), batcher=b)
    assert summary(probes) == sorted(expected)
    assert dict(b.skipped) == skipped


@pytest.mark.parametrize(("kind", "before", "after", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_probe_kinds(kind: RowKind, before: tuple | None, after: tuple | None, expected: list) -> None:
    probes = probes_for(RowChange(ORDERS, kind, before, after), purge_follows=True)
    assert summary(probes) == sorted(expected)
    assert all((p.schema, p.table) == ("shop", "orders") for p in probes)
    assert sum(p.rows for p in probes) == sum(len(e[2]) // (2 if e[1] == "secondary" else 1)
                                              for e in expected)


def test_probe_sql_shapes() -> None:
    by_index = {p.index: p for p in probes_for(RowChange(ORDERS, D, ROW, None))}
    head = "SELECT 1 FROM `shop`.`orders` FORCE INDEX "
    assert by_index["PRIMARY"].sql == head + "(`PRIMARY`) WHERE `id` IN (%s)"
    assert by_index["k_1"].sql == head + "(`k_1`) WHERE (`k`, `id`) IN ((%s, %s))"
    assert by_index["u_1"].sql == head + "(`u_1`) WHERE `u` IN (%s)"
    assert by_index["name_pfx"].sql == head + "(`name_pfx`) WHERE (`name`, `id`) IN ((%s, %s))"
    # A prefix index holds only the start of the value: the server reads the row too.
    assert {i: p.covering for i, p in by_index.items()} == {
        "PRIMARY": True, "k_1": True, "u_1": True, "name_pfx": False}


COMP_PK = Index("PRIMARY", (0, 1), unique=True, primary=True)
# lines(order_id INT, code VARCHAR, qty INT NOT NULL KEY, PRIMARY KEY (order_id, code))
LINES = TableInfo(
    "shop", "lines",
    (col("order_id"), col("code", "varchar", False, "utf8mb4"), col("qty")),
    COMP_PK, (COMP_PK, Index("qty_1", (2,), unique=False)), (0, 1, 2), "table_map",
)


def test_composite_and_string_keys_use_row_constructors() -> None:
    probes = probes_for(RowChange(LINES, D, (7, "äöü-Ω", 3), None),
                        RowChange(LINES, D, (7, "key two", 4), None))
    by_index = {p.index: p for p in probes}
    assert by_index["PRIMARY"].sql.endswith("WHERE (`order_id`, `code`) IN ((%s, %s), (%s, %s))")
    assert by_index["PRIMARY"].params == (7, "äöü-Ω", 7, "key two")
    assert by_index["qty_1"].sql.endswith(
        "WHERE (`qty`, `order_id`, `code`) IN ((%s, %s, %s), (%s, %s, %s))")
    assert by_index["qty_1"].params == (3, 7, "äöü-Ω", 4, 7, "key two")
    assert by_index["PRIMARY"].rows == by_index["qty_1"].rows == 2


BIN_PK = Index("PRIMARY", (0,), unique=True, primary=True)
BLOBS = TableInfo("shop", "blobs", (col("h", "string"), col("v", "varchar", True, "utf8")),
                  BIN_PK, (BIN_PK,), (0,), "table_map")


def test_binary_keys_stay_bytes() -> None:
    key = b"\x00\xff`'\\"
    [probe] = probes_for(RowChange(BLOBS, D, (key,), None))
    assert probe.params == (key,)
    assert type(probe.params[0]) is bytes


ALL_TYPES = (dt.datetime(2024, 2, 29, 23, 59, 59, 123456), dt.date(2024, 1, 1), dt.timedelta(hours=-1),
             Decimal("-12.50"), 18446744073709551615, 1.5, "zürich", b"\x00\x01")
TYPED_PK = Index("PRIMARY", tuple(range(len(ALL_TYPES))), unique=True, primary=True)
TYPED = TableInfo(
    "shop", "typed",
    tuple(col(f"c{i}", t) for i, t in enumerate(
        ("datetime2", "date", "time2", "newdecimal", "longlong", "double", "varchar", "string"))),
    TYPED_PK, (TYPED_PK,), tuple(range(len(ALL_TYPES))), "table_map",
)


def test_values_are_bound_unchanged() -> None:
    [probe] = probes_for(RowChange(TYPED, D, ALL_TYPES, None))
    assert all(a is b for a, b in zip(probe.params, ALL_TYPES, strict=True))
    assert probe.sql.count("%s") == len(ALL_TYPES)


# ---- NULLs ----------------------------------------------------------------------

NK = Index("k_1", (1,), unique=False)
NKB = Index("kb", (1, 2), unique=False)
NU = Index("u_1", (2,), unique=True)
# nul(id PK, k INT NULL, b INT NULL, must INT NOT NULL); KEY k_1 (k), KEY kb (k, b), UNIQUE u_1 (b)
NUL = TableInfo(
    "shop", "nul", (col("id"), col("k", nullable=True), col("b", nullable=True), col("must")),
    PK, (PK, NU, NK, NKB, Index("must_1", (3,), unique=False)), (0, 1, 2, 3), "table_map",
)

NULL_CASES = [
    ("null-secondary-is-null", (1, None, 5, 9),
     {"PRIMARY": "`id` IN (%s)", "k_1": "`k` IS NULL AND `id` IN (%s)",
      "kb": "`k` IS NULL AND (`b`, `id`) IN ((%s, %s))", "u_1": "`b` IN (%s)",
      "must_1": "(`must`, `id`) IN ((%s, %s))"}, {}),
    ("null-in-unique-skipped", (1, 4, None, 9),
     {"PRIMARY": "`id` IN (%s)", "k_1": "(`k`, `id`) IN ((%s, %s))",
      "kb": "`b` IS NULL AND (`k`, `id`) IN ((%s, %s))", "must_1": "(`must`, `id`) IN ((%s, %s))"},
     {"null_in_unique": 1}),
    ("all-nullable-null", (1, None, None, 9),
     {"PRIMARY": "`id` IN (%s)", "k_1": "`k` IS NULL AND `id` IN (%s)",
      "kb": "`k` IS NULL AND `b` IS NULL AND `id` IN (%s)", "must_1": "(`must`, `id`) IN ((%s, %s))"},
     {"null_in_unique": 1}),
    ("null-in-key", (None, 1, 2, 9), {}, {"null_in_key": 1}),
    # NULL in a NOT NULL column: binlog_row_image=MINIMAL left it out of the image.
    ("minimal-image", (1, None, None, None), {"PRIMARY": "`id` IN (%s)"}, {"not_logged": 4}),
]


@pytest.mark.parametrize(("before", "wheres", "skipped"), [c[1:] for c in NULL_CASES],
                         ids=[c[0] for c in NULL_CASES])
def test_nulls(before: tuple, wheres: dict[str, str], skipped: dict[str, int]) -> None:
    b = ProbeBatcher()
    b.purge_follows = False  # a DELETE inside a big transaction: every entry probed
    probes = probes_for(RowChange(NUL, D, before, None), batcher=b)
    assert {p.index: p.sql.split(" WHERE ")[1] for p in probes} == wheres
    assert all(None not in p.params for p in probes)
    assert dict(b.skipped) == skipped


def test_null_batches_are_grouped_by_which_columns_are_null() -> None:
    probes = probes_for(*(RowChange(NUL, D, (i, None if i % 2 else i, 5, 9), None) for i in range(1, 5)))
    k = sorted((p.sql.split(" WHERE ")[1], p.params) for p in probes if p.index == "k_1")
    assert k == [("(`k`, `id`) IN ((%s, %s), (%s, %s))", (2, 2, 4, 4)),
                 ("`k` IS NULL AND `id` IN (%s, %s)", (1, 3))]


def test_minimal_update_borrows_the_key_from_the_before_image() -> None:
    # MINIMAL: before holds only the key; after only the changed column k.
    b = ProbeBatcher()
    probes = probes_for(RowChange(NUL, U, (1, None, None, None), (None, 11, None, None)), batcher=b)
    assert summary(probes) == [("PRIMARY", "pk", (1,))]
    # k_1's and kb's entries move: left to the SQL thread (rewrite.PURGED_ENTRIES), known or not.
    assert dict(b.skipped) == {"moved_entry": 4}


# ---- what is not probed ------------------------------------------------------------

NOKEY = TableInfo("shop", "heap", (col("x", nullable=True),), None, (), (), "table_map")
NONAMES = TableInfo("shop", "anon", (col("@1"), col("@2")), PK, (PK,), (0,), "table_map")
FULLTEXT = TableInfo(
    "shop", "docs", (col("id"), col("body", "blob", True, "utf8"), col("title", "blob", True, "utf8")), PK,
    (PK, Index("ft", (1,), unique=False), Index("title_pfx", (2,), unique=False, prefix_lengths=(10,))),
    (0, 1, 2), "table_map+information_schema",
)


@pytest.mark.parametrize(("change", "skipped"), [
    (RowChange(NOKEY, INS, None, ()), "no_key"),
    (RowChange(NONAMES, D, (1,), None), "no_column_names"),
    (RowChange(ORDERS, U, None, ROW), "no_image"),
], ids=["no-key", "no-column-names", "no-image"])
def test_unprobeable_row_changes_are_counted(change: RowChange, skipped: str) -> None:
    b = ProbeBatcher()
    assert b.add(change) == ()
    assert b.flush() == []
    assert dict(b.skipped) == {skipped: 1}
    assert b.last_reason[skipped].startswith("shop.")


def test_fulltext_shaped_index_is_not_probed() -> None:
    # A BLOB/TEXT index without a prefix is FULLTEXT (or a hash): FORCE INDEX could not seek it.
    plan = plan_table(FULLTEXT)
    assert plan.skipped_indexes == [("ft", "blob column body without a prefix")]
    probes = probes_for(RowChange(FULLTEXT, D, (1, "words", "title"), None))
    assert {p.index: p.covering for p in probes} == {"PRIMARY": True, "title_pfx": False}


def test_schema_filters() -> None:
    b = ProbeBatcher(schemas=["shop", "mysql"], exclude_schemas=["mysql"])
    other = TableInfo("crm", "t", ORDERS.columns, PK, (PK,), (0, 1, 2, 4), "table_map")
    assert b.add(RowChange(other, D, ROW, None)) == ()
    assert b.add_statement(Statement("crm", "DELETE FROM t WHERE id = 1", 0, 0)) == ()
    assert b.add_statement(Statement("mysql", "DELETE FROM user WHERE 0", 0, 0)) == ()
    assert b.skipped["schema_excluded"] == 3
    assert len(b.add_statement(Statement("shop", "DELETE FROM t WHERE id = 1", 0, 0))) == 1
    assert b.add_statement(Statement("shop", "DELETE FROM t WHERE id = 2", 0, 0)) == ()  # batched
    assert len(b.flush()) == 1


def test_not_null_unique_key_is_the_clustered_index() -> None:
    uk = Index("uk", (0,), unique=True)
    table = TableInfo("shop", "codes", (col("code", "varchar", False, "utf8"),), uk, (uk,), (0,), "x")
    [probe] = probes_for(RowChange(table, D, ("x",), None))
    assert (probe.index, probe.kind) == ("uk", "pk")


# ---- batching ----------------------------------------------------------------------

@pytest.mark.parametrize(("n", "max_keys", "size"), [
    (1, 16, 1), (2, 16, 2), (3, 16, 4), (5, 16, 8), (9, 16, 16), (16, 16, 16),
    (17, 24, 24), (13, 12, 13),  # never cut: a full batch is max_keys already
    (3, 3, 3), (5, 6, 6),  # max_keys not a power of two: its own size is the last
])
def test_padded_size(n: int, max_keys: int, size: int) -> None:
    assert padded_size(n, max_keys) == size


def test_a_short_batch_is_padded_with_its_last_key() -> None:
    [probe] = probes_for(*deletes(700, 800, 900), batcher=ProbeBatcher(max_keys=16))
    assert probe.params == (700, 800, 900, 900) and probe.rows == 3
    assert probe.sql.count("%s") == 4
    probes = probes_for(*[RowChange(LINES, D, (7, f"k{i}", i), None) for i in range(3)],
                        batcher=ProbeBatcher(max_keys=16))
    pk = next(p for p in probes if p.index == "PRIMARY")
    assert pk.rows == 3 and pk.params == (7, "k0", 7, "k1", 7, "k2", 7, "k2")
    assert pk.sql.count("%s") == len(pk.params) == 8


PK_ONLY = TableInfo("shop", "kv", (col("id"),), PK, (PK,), (0,), "table_map")


def deletes(*ids: int) -> list[RowChange]:
    return [RowChange(PK_ONLY, D, (i,), None) for i in ids]


@pytest.mark.parametrize(("max_keys", "ids", "batches"), [
    (16, (100, 200, 100, 300, 100), [(100, 200, 300)]),
    (2, (100, 200, 300, 400, 500), [(100, 200), (300, 400), (500,)]),
    (2, (100, 200, 300, 200), [(100, 200), (300, 200)]),  # a key is only deduplicated while it waits
    (1, (100, 200, 100), [(100,), (200,), (100,)]),
    (3, (), []),
], ids=["dedup-in-window", "full-batches-then-flush", "dedup-only-while-waiting", "one-key", "nothing"])
def test_batching(max_keys: int, ids: tuple[int, ...], batches: list[tuple[int, ...]]) -> None:
    b = ProbeBatcher(max_keys=max_keys)
    # A short batch is padded with its last key (padded_size): the keys are the first ``rows``.
    assert [p.params[:p.rows] for p in probes_for(*deletes(*ids), batcher=b)] == batches
    assert b.pending == 0
    assert b.keys == len(ids)
    assert b.duplicates == len(ids) - sum(len(x) for x in batches)


@pytest.mark.parametrize(("ids", "probed"), [
    # a range UPDATE's row event: one key in NEAR_SPAN, the rest in the leaves those read
    (tuple(range(1000, 1100, 2)), (1000, 1018, 1036, 1054, 1072, 1090)),
    ((1000, 1016, 1017, 1001, 984, 983), (1000, 1017, 984)),  # either side of the last probed
    ((5, 5, 900), (5, 900)),  # the same row again, right after: its leaf is in
    ((7_000_000, 12, 9_000_000_000), (7_000_000, 12, 9_000_000_000)),  # random keys: all
], ids=["range", "both-sides", "again", "random"])
def test_a_clustered_key_next_to_the_one_probed_last_is_not_probed(
        ids: tuple[int, ...], probed: tuple[int, ...]) -> None:
    b = ProbeBatcher(max_keys=64)
    got = probes_for(*deletes(*ids), batcher=b)
    assert [k for p in got for k in p.params[:p.rows]] == list(probed)
    assert b.skipped.get("near_key", 0) == len(ids) - len(probed)


def test_near_span_0_probes_every_key() -> None:
    got = probes_for(*deletes(1000, 1002, 1004), batcher=ProbeBatcher(near_span=0))
    assert [p.params[:p.rows] for p in got] == [(1000, 1002, 1004)]


def test_keys_of_rows_with_documents_are_probed_however_near() -> None:
    """Each row's documents are pages of their own: its neighbour's probe reads none."""
    got = probes_for(*(RowChange(DOCS, D, (i, 10), None) for i in (1, 2, 3)))
    assert [p.params[:p.rows] for p in got if p.kind == "pk"] == [(1, 2, 3)]


def test_full_batches_come_out_of_add_the_rest_out_of_flush() -> None:
    b = ProbeBatcher(max_keys=3)
    outs = [b.add(c) for c in deletes(100, 200, 300, 400)]
    assert [len(o) for o in outs] == [0, 0, 1, 0]
    assert b.pending == 1
    assert [p.params for p in b.flush()] == [(400,)]


def test_sql_text_is_stable_per_table_index_and_size() -> None:
    a = probes_for(*deletes(100, 200, 300), max_keys=3)
    b = probes_for(*deletes(700, 800, 900), max_keys=3)
    c = probes_for(*deletes(700, 800), max_keys=3)
    assert a[0].sql == b[0].sql
    assert a[0].sql != c[0].sql


def test_reset_forgets_waiting_keys() -> None:
    b = ProbeBatcher()
    for c in deletes(100, 200):
        b.add(c)
    b.reset()
    assert b.flush() == []
    assert [p.params for p in probes_for(*deletes(300), batcher=b)] == [(300,)]


def test_undecodable_text_is_dropped_not_sent() -> None:
    table = TableInfo("shop", "s", (col("code", "varchar", False, "utf8"),), PK, (PK,), (0,), "table_map")
    b = ProbeBatcher()
    probes = probes_for(RowChange(table, D, ("ok",), None), RowChange(table, D, ("bad\udcff",), None),
                        batcher=b)
    assert [p.params for p in probes] == [("ok",)]
    assert b.skipped["undecodable_value"] == 1


def test_plan_is_cached_per_table_object() -> None:
    b = ProbeBatcher()
    same = TableInfo(*(getattr(ORDERS, f) for f in ORDERS.__slots__))  # equal, but another object
    assert b.plan(ORDERS) is b.plan(ORDERS)
    assert b.plan(same) is not b.plan(ORDERS)


def test_feed_routes_events() -> None:
    b = ProbeBatcher(max_keys=1)
    assert len(b.feed(RowChange(PK_ONLY, D, (1,), None))) == 1
    assert len(b.feed(Statement("shop", "DELETE FROM kv WHERE id > 5", 0, 0))) == 1
    assert b.feed(LoadData("shop", "LOAD DATA INFILE 'f' INTO TABLE kv", 0, 0, 10, 1)) == ()
    assert b.feed(Ddl("shop", "ALTER TABLE kv ADD x INT", ("shop.kv",), 0)) == ()
    assert b.feed(TransactionStart("f", 4, None, None, None, 0.0, 0, 1)) == ()
    assert b.feed(Statement("shop", "INSERT INTO kv VALUES (1)", 0, 0)) == ()
    assert dict(b.skipped) == {"load_data": 1, "not_dml": 1, "insert_statement": 1}


@pytest.mark.parametrize("bad", [0, -1, 1000, "16", 2.0, True], ids=str)
def test_max_keys_out_of_range_is_a_user_error(bad: object) -> None:
    with pytest.raises(PrefetchConfigError) as err:
        ProbeBatcher(max_keys=bad)  # type: ignore[arg-type]
    assert isinstance(err.value, LagdError)
    assert "1 and 999" in err.value.message
    assert err.value.fix and "16" in err.value.fix


ODD = TableInfo(
    "we`ird", "tä`b", (col("i`d"), col("日本", "varchar", False, "utf8mb4")),
    Index("PRIMARY", (0,), True, True),
    (Index("PRIMARY", (0,), True, True), Index("ix`1", (1,), unique=False)), (0, 1), "table_map",
)


def test_odd_identifiers_are_quoted() -> None:
    by_index = {p.index: p for p in probes_for(RowChange(ODD, D, (1, "値"), None))}
    assert by_index["ix`1"].sql == ("SELECT 1 FROM `we``ird`.`tä``b` FORCE INDEX (`ix``1`)"
                                    " WHERE (`日本`, `i``d`) IN ((%s, %s))")
    assert by_index["ix`1"].params == ("値", 1)


# Row changes that leave purge index entries to remove (control.moved_entries): UPDATEs
# that move an entry (the old one delete-marked, the new one inserted elsewhere in the
# index), and DELETEs (the row delete-marked in every index), counted apart.
@pytest.mark.parametrize(("change", "moving", "deletes"), [
    (RowChange(ORDERS, INS, None, ROW), 0, 0),
    (RowChange(ORDERS, D, ROW, None), 0, 1),
    (RowChange(ORDERS, U, ROW, ROW), 0, 0),  # nothing indexed changed (only pad, not logged here)
    (RowChange(ORDERS, U, ROW, (1, 11, "a", "nm1")), 1, 0),  # k: a secondary entry moves
    (RowChange(ORDERS, U, ROW, (1, 10, "b", "nm1")), 1, 0),  # u: a unique entry moves
    (RowChange(ORDERS, U, ROW, (2, 10, "a", "nm1")), 1, 0),  # the primary key
    (RowChange(ORDERS, U, ROW, (1, 11, "b", "nm2")), 1, 0),  # several: still one row
    (RowChange(ORDERS, U, ROW, (1, 10, "a", None)), 0, 0),  # MINIMAL after image: unlogged = unchanged
])
def test_moving_and_deletes_count_what_leaves_purge_entries(change: RowChange, moving: int,
                                                            deletes: int) -> None:
    b = ProbeBatcher()
    probes_for(change, batcher=b)
    assert (b.rows, b.moving, b.deletes) == (1, moving, deletes)


def test_moving_with_minimal_images_counts_only_the_columns_logged() -> None:
    # binlog_row_image=MINIMAL: the before image holds the key, the after image what was set.
    before = (1, None, None, None)
    b = ProbeBatcher()
    probes_for(RowChange(ORDERS, U, before, (None, None, None, "nm2")), batcher=b)  # name set
    probes_for(RowChange(ORDERS, U, before, (None, None, None, None)), batcher=b)  # pad only
    assert (b.rows, b.moving) == (2, 1)


# Statement-based UPDATEs: the SET list against the table's indexes as the replica has them
# (ProbeBatcher.learn_table; the engine looks them up in information_schema).
ORDERS_INDEXED = table_keys(*info_rows(
    [("id", "int(11)"), ("k", "int(11)"), ("u", "varchar(10)"), ("name", "varchar(10)"), ("pad", "text")],
    [("PRIMARY", ("id",), True), ("k", ("k",), False), ("u", ("u",), True), ("name", ("name",), False)]))


@pytest.mark.parametrize(("sql", "rows", "moving", "deletes"), [
    ("UPDATE o SET k = 7 WHERE id = {}", 1, 1, 0),  # update_k, logged as a statement
    ("UPDATE o SET K = K + 1 WHERE id = {}", 1, 1, 0),  # column names are case-insensitive
    ("UPDATE o SET o.u = 'x' WHERE id = {}", 1, 1, 0),  # qualified: a unique entry moves
    ("UPDATE o SET id = id + 100 WHERE id = {}", 1, 1, 0),  # the primary key
    ("UPDATE o SET pad = 'p' WHERE id = {}", 1, 0, 0),  # nothing indexed
    ("UPDATE o SET pad = 'p', name = 'n' WHERE id = {}", 1, 1, 0),  # one of several
    ("DELETE FROM o WHERE id = {}", 1, 0, 1),  # counted as row DELETEs are
    ("INSERT INTO o (id, k) VALUES ({}, 1)", 1, 0, 0),  # adds entries, moves none
])
def test_statements_count_as_row_changes_by_their_set_list(sql: str, rows: int, moving: int,
                                                           deletes: int) -> None:
    b = ProbeBatcher()
    b.learn_table("shop", "o", ORDERS_INDEXED)
    for i in range(3):  # the first of a shape goes the direct way, the rest through its template
        b.add_statement(Statement("shop", sql.format(i + 1), 0, 0))
    n = 2 if sql.startswith("INSERT") else 3  # the first INSERT of a shape is not parsed
    assert (b.rows, b.moving, b.deletes) == (n * rows, n * moving, n * deletes)
    assert b.unknown_tables() == []


def test_statements_wait_for_their_tables_indexes_then_count() -> None:
    b = ProbeBatcher()
    for i in range(4):
        b.add_statement(Statement("shop", f"UPDATE o SET k = {i} WHERE id = {i}", 0, 0))
        b.add_statement(Statement("shop", f"UPDATE o SET pad = 'p' WHERE id = {i}", 0, 0))
    b.add_statement(Statement("shop", "DELETE FROM o WHERE id = 9", 0, 0))  # needs no lookup
    assert (b.rows, b.moving, b.deletes) == (1, 0, 1) and b.unknown_tables() == [("shop", "o")]
    b.learn_table("shop", "o", None)  # the lookup failed: left uncounted, asked again later
    assert (b.rows, b.moving) == (1, 0) and b.unknown_tables() == []
    b.add_statement(Statement("shop", "UPDATE o SET k = 1 WHERE id = 1", 0, 0))
    assert b.unknown_tables() == [("shop", "o")]
    b.learn_table("shop", "o", ORDERS_INDEXED)
    assert (b.rows, b.moving) == (2, 1) and b.unknown_tables() == []
    b.add_statement(Statement("shop", "UPDATE o SET k = 2 WHERE id = 2", 0, 0))
    assert (b.rows, b.moving, b.deletes) == (3, 2, 1)


def test_a_ddl_or_a_jump_makes_statements_look_their_tables_up_again() -> None:
    b = ProbeBatcher()
    b.learn_table("shop", "o", ORDERS_INDEXED)
    b.learn_table("shop", "p", ORDERS_INDEXED)
    b.forget_tables(["SHOP.O"])  # the gate's folded names
    b.add_statement(Statement("shop", "UPDATE o SET k = 1 WHERE id = 1", 0, 0))
    b.add_statement(Statement("shop", "UPDATE p SET k = 1 WHERE id = 1", 0, 0))
    assert b.unknown_tables() == [("shop", "o")] and (b.rows, b.moving) == (1, 1)
    b.reset()  # the reader jumped: what waited is not ahead any more
    assert b.unknown_tables() == []
    b.forget_tables(None)
    b.add_statement(Statement("shop", "UPDATE p SET k = 2 WHERE id = 2", 0, 0))
    assert b.unknown_tables() == [("shop", "p")]


# ----- the change buffer: entries InnoDB buffers are not probed (mysql.changebuf) ------------

BOTH = frozenset({INSERTS, DELETE_MARKS})


@pytest.mark.parametrize(("ops", "kind", "before", "after", "expected", "buffered"), [
    # update_k: the primary key is read to find the row; k's old entry is delete-marked and
    # its new one inserted, both into the change buffer.
    (BOTH, U, ROW, (1, 11, "a", "nm1"), [("PRIMARY", "pk", (1,))], 2),
    # Buffered or not, an entry an UPDATE moves is not probed (rewrite.PURGED_ENTRIES).
    (frozenset({DELETE_MARKS}), U, ROW, (1, 11, "a", "nm1"), [("PRIMARY", "pk", (1,))], 1),
    (frozenset({INSERTS}), U, ROW, (1, 11, "a", "nm1"), [("PRIMARY", "pk", (1,))], 1),
    # A unique index is read for its uniqueness check and never buffered.
    (BOTH, U, ROW, (1, 10, "b", "nm1"), [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a", "b"))], 0),
    (BOTH, D, ROW, None, [("PRIMARY", "pk", (1,)), ("u_1", "unique", ("a",))], 2),
    (frozenset({INSERTS}), D, ROW, None,
     [("PRIMARY", "pk", (1,)), ("k_1", "secondary", (10, 1)), ("name_pfx", "secondary", ("nm1", 1)),
      ("u_1", "unique", ("a",))], 0),
    (BOTH, INS, None, (5, 50, "e", "nm5"), [("PRIMARY", "pk", (5,)), ("u_1", "unique", ("e",))], 2),
    (frozenset({DELETE_MARKS}), INS, None, (5, 50, "e", "nm5"),
     [("PRIMARY", "pk", (5,)), ("k_1", "secondary", (50, 5)), ("name_pfx", "secondary", ("nm5", 5)),
      ("u_1", "unique", ("e",))], 0),
])
def test_entries_innodb_buffers_are_not_probed(ops: frozenset[str], kind: RowKind, before: tuple | None,
                                               after: tuple | None, expected: list, buffered: int) -> None:
    b = ProbeBatcher()
    b.purge_follows = False  # inside a big transaction: a DELETE's entries are left out by the buffer alone
    b.buffer_changes(ops, " (innodb_change_buffering=x)")
    assert summary(probes_for(RowChange(ORDERS, kind, before, after), batcher=b)) == sorted(expected)
    assert b.skipped["change_buffered"] == buffered
    assert "innodb_change_buffering=x" in b.last_reason["change_buffered"]
    # The purge counts are the row's whatever is probed: purge still removes those entries.
    assert (b.moving, b.deletes) == (int(kind is U and before != after), int(kind is D))


def test_the_change_buffer_turned_off_probes_every_entry_again() -> None:
    b = ProbeBatcher()
    b.buffer_changes(BOTH)
    b.buffer_changes(frozenset())
    probes = probes_for(RowChange(ORDERS, INS, None, (5, 50, "e", "nm5")), batcher=b)
    assert len(probes) == 4 and not b.skipped


def test_insert_statements_leave_buffered_entries_unprobed() -> None:
    b = ProbeBatcher()
    b.learn_table("shop", "o", ORDERS_INDEXED)
    sqls = [f"INSERT INTO o (id, k, u, name) VALUES ({i}, {i * 10}, 'u{i}', 'n{i}')" for i in range(1, 5)]
    plain = [p.index for s in sqls for p in b.add_statement(Statement("shop", s, 0, 0))]
    plain += [p.index for p in b.flush()]
    assert sorted(set(plain)) == ["PRIMARY", "k", "name", "u"]
    b.buffer_changes(BOTH)
    got = [p.index for s in sqls for p in b.add_statement(Statement("shop", s, 0, 0))]
    got += [p.index for p in b.flush()]
    assert sorted(set(got)) == ["PRIMARY", "u"]
    assert b.skipped["change_buffered"] == 2 * len(sqls)  # k and name, each statement
    b.buffer_changes(frozenset())  # a shape's plan follows the setting
    again = [p.index for s in sqls for p in b.add_statement(Statement("shop", s, 0, 0))]
    again += [p.index for p in b.flush()]
    assert sorted(set(again)) == ["PRIMARY", "k", "name", "u"]


# ----- foreign keys: the parent's entry InnoDB's check reads is probed ---------------------------

# items(id PK, order_id -> orders(id), region + num -> accounts(region, num) (a unique key
# whose column order differs from the child's), note); needed: (id, order_id, num, region).
ITEMS = TableInfo(
    "shop", "items",
    (col("id"), col("order_id"), col("num", nullable=True), col("region", nullable=True), col("note")),
    PK,
    (PK, Index("fk_order", (1,), unique=False), Index("fk_acct", (2, 3), unique=False)),
    (0, 1, 2, 3), "information_schema",
    (ForeignKey("to_order", (1,), "shop", "orders", ("id",)),
     ForeignKey("to_acct", (2, 3), "shop", "accounts", ("num", "region"))),
)
ORDERS_KEYS = table_keys(*info_rows([("id", "int(11)"), ("k", "int(11)")], [("PRIMARY", ("id",), True)]))
ACCOUNTS = table_keys(*info_rows(
    [("code", "varchar(32)"), ("region", "smallint(6)"), ("num", "bigint(20)")],
    [("PRIMARY", ("code",), True), ("u_rn", ("region", "num"), True), ("k_num", ("num",), False)]))


def parents_known(*tables: tuple[str, object]) -> ProbeBatcher:
    b = ProbeBatcher()
    for name, keys in tables:
        b.learn_table("shop", name, keys)  # type: ignore[arg-type]
    return b


@pytest.mark.parametrize(("kind", "before", "after", "parents"), [
    # An INSERT checks each key in its parent; the composite one in the unique index's order.
    (INS, None, (1, 7, 30, 2), [("PRIMARY", "orders", (7,)), ("u_rn", "accounts", (2, 30))]),
    # A NULL in a key: InnoDB checks nothing.
    (INS, None, (1, 7, None, 2), [("PRIMARY", "orders", (7,))]),
    # An UPDATE checks the keys it sets to a new value, and no other.
    (U, (1, 7, 30, 2), (1, 8, 30, 2), [("PRIMARY", "orders", (8,))]),
    (U, (1, 7, 30, 2), (1, 7, 31, 2), [("u_rn", "accounts", (2, 31))]),
    (U, (1, 7, 30, 2), (1, 7, 30, 2), []),
    # A DELETE of a child checks nothing in its parents.
    (D, (1, 7, 30, 2), None, []),
])
def test_foreign_keys_probe_the_parent_entry_the_check_reads(kind: RowKind, before: tuple | None,
                                                            after: tuple | None, parents: list) -> None:
    b = parents_known(("orders", ORDERS_KEYS), ("accounts", ACCOUNTS))
    probes = probes_for(RowChange(ITEMS, kind, before, after), batcher=b)
    got = sorted((p.index, p.table, p.params) for p in probes if p.kind == "parent")
    assert got == sorted(parents)
    for p in probes:
        if p.kind == "parent" and p.table == "accounts":
            assert "FORCE INDEX (`u_rn`)" in p.sql and "(`region`, `num`) IN" in p.sql
    assert set(b.skipped) <= set(PURGED_ENTRIES)  # the child's own moved or deleted entries


def test_a_parent_not_known_yet_is_asked_for_then_probed() -> None:
    b = parents_known(("accounts", ACCOUNTS))
    first = probes_for(RowChange(ITEMS, INS, None, (1, 7, 30, 2)), batcher=b)
    assert [p.table for p in first if p.kind == "parent"] == ["accounts"]
    assert b.skipped["parent_unknown"] == 1 and "shop.orders" in b.last_reason["parent_unknown"]
    assert ("shop", "orders") in b.unknown_tables()
    b.learn_table("shop", "orders", ORDERS_KEYS)
    again = probes_for(RowChange(ITEMS, INS, None, (2, 9, 30, 2)), batcher=b)
    assert sorted(p.table for p in again if p.kind == "parent") == ["accounts", "orders"]


def test_a_parent_referenced_by_no_unique_index_is_not_probed() -> None:
    # InnoDB accepts a foreign key to a non-unique index: a probe by the value would read a range.
    by_k = table_keys(*info_rows([("id", "int(11)"), ("k", "int(11)")],
                                 [("PRIMARY", ("id",), True), ("k_1", ("k",), False)]))
    child = TableInfo("shop", "c", (col("id"), col("k_ref")), PK, (PK, Index("r", (1,), unique=False)),
                      (0, 1), "information_schema", (ForeignKey("to_k", (1,), "shop", "p", ("k",)),))
    b = parents_known(("p", by_k))
    probes = probes_for(RowChange(child, INS, None, (1, 5)), RowChange(child, INS, None, (2, 6)), batcher=b)
    assert not [p for p in probes if p.kind == "parent"]
    assert b.skipped["parent_index"] == 2 and "shop.p" in b.last_reason["parent_index"]


def test_a_parent_learnt_again_after_a_ddl_is_planned_again() -> None:
    b = parents_known(("orders", ORDERS_KEYS), ("accounts", ACCOUNTS))
    probes_for(RowChange(ITEMS, INS, None, (1, 7, None, 2)), batcher=b)
    # ALTER TABLE orders: its primary key is now (k); the check now reads a unique index on id.
    b.forget_tables(["shop.orders"])
    b.learn_table("shop", "orders", table_keys(*info_rows(
        [("id", "int(11)"), ("k", "int(11)")], [("PRIMARY", ("k",), True), ("u_id", ("id",), True)])))
    probes = probes_for(RowChange(ITEMS, INS, None, (2, 8, None, 2)), batcher=b)
    assert [(p.index, p.params) for p in probes if p.kind == "parent"] == [("u_id", (8,))]


def test_a_parent_in_an_excluded_schema_is_left_alone() -> None:
    child = TableInfo("shop", "c", (col("id"), col("pid")), PK, (PK, Index("r", (1,), unique=False)),
                      (0, 1), "information_schema", (ForeignKey("to_p", (1,), "audit", "p", ("id",)),))
    b = ProbeBatcher(exclude_schemas=["audit"])
    probes = probes_for(RowChange(child, INS, None, (1, 5)), batcher=b)
    assert [p.kind for p in probes] == ["pk", "secondary"] and not b.skipped
    assert b.unknown_tables() == []


# ----- appends: an INSERT's entry after every one its index has had goes to the last leaf -------

SEQ = TableInfo("shop", "seq", (col("id"),), PK, (PK,), (0,), "table_map")


@pytest.mark.parametrize(("ids", "probed", "appends"), [
    ((100, 101, 102, 103), (100,), 3),  # auto-increment: the first is probed, where the table ends
    # Out of commit order (concurrent writers): just under the highest, in the last leaves.
    ((1000, 998, 1001, 999, 1000 - APPEND_SPAN), (1000, 1000 - APPEND_SPAN), 3),
    ((7000, 3000, 9000, 1000, 5000), (7000, 3000, 1000, 5000), 1),  # random keys: a new highest only
])
def test_an_insert_above_every_key_seen_appends_to_the_last_leaf(
        ids: tuple[int, ...], probed: tuple[int, ...], appends: int) -> None:
    b = ProbeBatcher()
    probes = probes_for(*[RowChange(SEQ, INS, None, (i,)) for i in ids], batcher=b)
    assert tuple(k for p in probes for k in p.params[:p.rows]) == probed
    assert b.skipped["append"] == appends


# events(id PK, at DATETIME, KEY at_1 (at), code VARCHAR UNIQUE)
AT = Index("at_1", (1,), unique=False)
EVENTS = TableInfo("shop", "events",
                   (col("id"), col("at", "datetime2"), col("code", "varchar", charset="utf8")), PK,
                   (PK, Index("code_u", (2,), unique=True), AT), (0, 1, 2), "information_schema")
T0 = dt.datetime(2026, 11, 27, 12, 0, 0)


def test_a_created_at_index_appends_but_only_above_every_entry() -> None:
    """A secondary entry (value, key) counts only above the highest: no span under it, as
    a value repeated with random keys spreads over that value's whole range."""
    b = ProbeBatcher()
    rows = [(5000, T0, "a"), (5001, T0 + dt.timedelta(seconds=1), "b"),
            (4990, T0 + dt.timedelta(seconds=1), "c"),  # the same second, a lower key: probed
            (5002, T0 + dt.timedelta(seconds=2), "d")]
    probes = probes_for(*[RowChange(EVENTS, INS, None, r) for r in rows], batcher=b)
    at = [k for p in probes if p.index == "at_1" for k in p.params[:2 * p.rows]]
    assert at == [T0, 5000, T0 + dt.timedelta(seconds=1), 4990]
    # Text is never compared (a collation's order is not Python's): every code is probed.
    assert sum(p.rows for p in probes if p.index == "code_u") == 4
    assert b.skipped["append"] == 3 + 2  # ids 5001, 4990 (in the span) and 5002; at of 5001 and 5002


def test_appends_are_counted_for_inserts_only() -> None:
    b = ProbeBatcher()
    probes_for(RowChange(SEQ, INS, None, (10,)), RowChange(SEQ, D, (110,), None),
               RowChange(SEQ, U, (210,), (310,)), batcher=b)
    assert not b.skipped


# docs(id PK, k INT KEY, body MEDIUMTEXT, shape GEOMETRY): the binlog names every BLOB and
# TEXT column "blob"; information_schema gives the rows' average size, off-page parts included.
DOCS = TableInfo(
    "shop", "docs", (col("id"), col("k"), col("body", "blob", charset="utf8"), col("shape", "geometry")),
    PK, (PK, Index("k_1", (1,), unique=False)), (0, 1), "table_map+information_schema", row_bytes=33_000,
)


@pytest.mark.parametrize(("row_bytes", "columns", "want"), [
    (33_000, DOCS.columns, ("ISNULL(`body`), ISNULL(`shape`)", 3)),  # 24 KB documents: 2 pages + the leaf
    (8_192, DOCS.columns, ("ISNULL(`body`), ISNULL(`shape`)", 2)),  # half a page: off-page as a rule
    (8_000, DOCS.columns, ("1", 1)),  # smaller rows keep their documents in line
    (None, DOCS.columns, ("1", 1)),  # size unknown (no information_schema): one page a row
    (33_000, ORDERS.columns, ("1", 1)),  # wide, but nothing InnoDB puts off the page
], ids=["documents", "half-a-page", "in-line", "unknown-size", "no-document-column"])
def test_clustered_probes_read_documents_where_rows_are_half_a_page_or_more(
        row_bytes: int | None, columns: tuple[Column, ...], want: tuple[str, int]) -> None:
    assert documents(replace(DOCS, columns=columns, row_bytes=row_bytes)) == want


def test_a_document_tables_clustered_probes_read_its_documents_and_count_their_pages() -> None:
    """The SQL thread's UPDATE and DELETE read the whole record, documents included
    (rewrite.documents); the secondary entries it moves are read as before."""
    got = probes_for(RowChange(DOCS, U, (1, 10), (1, 11)), RowChange(DOCS, D, (2, 20), None),
                     RowChange(DOCS, INS, None, (3, 30)))
    pk = [p for p in got if p.kind == "pk"]
    assert [(p.sql, p.rows, p.pages) for p in pk] == [(
        "SELECT ISNULL(`body`), ISNULL(`shape`) FROM `shop`.`docs` FORCE INDEX (`PRIMARY`)"
        " WHERE `id` IN (%s, %s, %s, %s)", 3, 9)]
    for p in got:
        assert_plain_select(p.sql)
        if p.kind != "pk":
            assert p.sql.startswith("SELECT 1 FROM") and p.pages == 0
    plain = probes_for(RowChange(replace(DOCS, row_bytes=None), U, (1, 10), (1, 10)))
    assert [(p.sql.split(" FROM")[0], p.pages) for p in plain] == [("SELECT 1", 0)]


def test_a_probe_of_rows_with_large_documents_reads_at_most_probe_pages() -> None:
    """1 MB documents: 65 pages a row, so 3 rows a probe (256 pages at most), which a
    disk of 2 ms a read still answers within the statement timeout."""
    big = replace(DOCS, row_bytes=1 << 20)
    got = probes_for(*(RowChange(big, U, (i, 10), (i, 10)) for i in range(1, 6)))
    assert PROBE_PAGES == 256
    assert [(p.rows, p.pages) for p in got if p.kind == "pk"] == [(3, 195), (2, 130)]


@pytest.mark.parametrize(
    ("values", "size", "got"),
    [
        (["3", "4", "5"], 4, ("%s, %s, %s, %s", (3, 4, 5, 5))),  # padded with the last
        (["-7"], 1, ("%s", (-7,))),
        (["007"], 1, ("%s", (7,))),
        (["18446744073709551615", "-9223372036854775808"], 2,
         ("%s, %s", (18446744073709551615, -9223372036854775808))),
        (["(1, 2)", "(3, 4)", "(5, 6)"], 4,
         ("(%s, %s), (%s, %s), (%s, %s), (%s, %s)", (1, 2, 3, 4, 5, 6, 5, 6))),
        (["16", "17"], 1, ("%s, %s", (16, 17))),  # never cut
        # Anything else stays in the text, as written.
        (["3", "'a'"], 2, None),
        (["1.5"], 1, None),
        (["18446744073709551616"], 1, None),  # over 64 bits
        (["-9223372036854775809"], 1, None),
        (["\u0663"], 1, None),  # a digit to Python's int(), not to the server
        (["(1, 'a')"], 1, None),
        (["(1, CONVERT('a, b' USING utf8mb4))"], 1, None),
        (["(1, 2)", "(3, 4, 5)"], 2, None),
        (["1", "2, 3"], 2, None),  # a statement's own IN list as one value
    ],
)
def test_integer_values_are_a_prepared_probes_arguments(values: list[str], size: int,
                                                        got: tuple[str, tuple[int, ...]] | None) -> None:
    assert integer_arguments(values, size) == got


def test_integer_values_the_caller_checked_are_not_matched_again() -> None:
    # An INSERT's entries of an index of integer columns: inserts._fits checked each literal.
    assert integer_arguments(["1", "-2", "3"], 4, integers=True) == ("%s, %s, %s, %s", (1, -2, 3, 3))
    assert integer_arguments(["(1, 2)"], 1, integers=True) == ("(%s, %s)", (1, 2))
    assert integer_arguments(["\u0663"], 1, integers=True) is None  # still ASCII digits only
    assert integer_arguments(["18446744073709551616"], 1, integers=True) is None  # still 64 bits
