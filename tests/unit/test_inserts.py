"""Statement-based INSERTs -> probes of the entries they add (prefetch/inserts.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lagd.prefetch.fingerprint import StatementBatcher, fingerprint, marked, marker_slot
from lagd.prefetch.inserts import InsertShape, TableKeys, entries, parse_insert, table_keys
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.rewrite_sql import StatementRewrite
from lagd.relaylog import Statement


def sent(p: Any) -> str:
    """The probe's text as the server gets it: a prepared probe's arguments in their places
    (its list padded with the last entry: rewrite_sql.padded_size)."""
    return p.sql % p.params if p.params else p.sql


def info_rows(columns: list[tuple[str, str]], indexes: list[tuple[str, tuple[str, ...], bool]],
              **extra: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """information_schema COLUMNS and STATISTICS rows, as the resolver returns them."""
    cols = [{"COLUMN_NAME": n, "ORDINAL_POSITION": i + 1, "IS_NULLABLE": "NO", "COLUMN_TYPE": t,
             "CHARACTER_SET_NAME": "utf8mb4" if "char" in t else None} for i, (n, t) in enumerate(columns)]
    stats = [{"INDEX_NAME": name, "NON_UNIQUE": 0 if unique else 1, "SEQ_IN_INDEX": seq + 1,
              "COLUMN_NAME": c, "SUB_PART": None, "INDEX_TYPE": "BTREE", **extra.get(name, {})}
             for name, cs, unique in indexes for seq, c in enumerate(cs)]
    return cols, stats


# The benchmark's table: id PRIMARY, k secondary, c and pad.
SBTEST = info_rows([("id", "int(11)"), ("k", "int(11)"), ("c", "char(120)"), ("pad", "char(60)")],
                   [("PRIMARY", ("id",), True), ("k_1", ("k",), False)])
SB_KEYS = table_keys(*SBTEST)
# A string key, a composite unique key, a column of another class, a prefix index.
ACCOUNTS_KEYS = table_keys(*info_rows(
    [("code", "varchar(32)"), ("region", "smallint(6)"), ("num", "bigint(20) unsigned"),
     ("born", "date"), ("note", "text"), ("bal", "decimal(10,2)")],
    [("PRIMARY", ("code",), True), ("u_rn", ("region", "num"), True), ("k_born", ("born",), False),
     ("k_note", ("note",), False), ("k_bal", ("bal",), False)],
    k_note={"SUB_PART": 10}))


def test_table_keys_classes_and_indexes() -> None:
    assert SB_KEYS is not None and ACCOUNTS_KEYS is not None
    assert SB_KEYS.names == ("id", "k", "c", "pad") and SB_KEYS.classes == ("int", "int", "text", "text")
    assert [(ix.name, ix.columns, ix.where) for ix in SB_KEYS.indexes] == [
        ("PRIMARY", (0,), "`id`"), ("k_1", (1, 0), "(`k`, `id`)")]  # a secondary entry ends in the key
    assert SB_KEYS.indexed == {"id", "k"}
    assert ACCOUNTS_KEYS.classes == ("text", "int", "int", None, None, "num")
    assert [ix.name for ix in ACCOUNTS_KEYS.indexes] == ["PRIMARY", "u_rn", "k_born", "k_bal"]
    assert "note" in ACCOUNTS_KEYS.indexed  # a prefix index is not probed, but an UPDATE moves it
    no_pk = table_keys(*info_rows([("a", "int"), ("b", "int")], [("u", ("a",), True), ("k", ("b",), False)]))
    assert no_pk is not None and [ix.name for ix in no_pk.indexes] == ["u"]  # k's entries: a range
    assert table_keys([], []) is None  # not visible to lagd, or gone
    assert SB_KEYS.select == "ISNULL(`c`)" and ACCOUNTS_KEYS.select == "ISNULL(`note`)"


@pytest.mark.parametrize(("column_type", "select"), [
    ("mediumblob", "ISNULL(`d`)"), ("longtext", "ISNULL(`d`)"), ("json", "ISNULL(`d`)"),
    ("point", "ISNULL(`d`)"),
    # 255 bytes at most, always on the row's page; a row without documents: a column in no index.
    ("tinytext", "ISNULL(`d`)"), ("varchar(4000)", "ISNULL(`d`)"), ("int(11)", "ISNULL(`d`)"),
])
def test_a_statement_probe_of_a_table_with_documents_selects_isnull_of_each(column_type: str,
                                                                              select: str) -> None:
    keys = table_keys(*info_rows([("id", "int(11)"), ("d", column_type)], [("PRIMARY", ("id",), True)]))
    assert keys is not None and keys.select == select


@pytest.mark.parametrize(("columns", "indexes", "select"), [
    # (columns, indexes as (name, columns, unique), what a statement probe selects)
    (("id", "k", "c"), [("PRIMARY", ("id",), True), ("k_1", ("k",), False)], "ISNULL(`c`)"),
    (("id", "k", "c"), [("PRIMARY", ("id",), True), ("k_1", ("k", "c"), False)], "*"),  # all indexed
    (("a", "b", "v"), [("PRIMARY", ("a", "b"), True)], "ISNULL(`v`)"),
    (("id", "Note"), [("PRIMARY", ("id",), True)], "ISNULL(`Note`)"),  # spelled as the table has it
])
def test_a_statement_probe_selects_one_column_no_index_covers(
        columns: tuple[str, ...], indexes: list[tuple[str, tuple[str, ...], bool]], select: str) -> None:
    keys = table_keys(*info_rows([(c, "int(11)") for c in columns], indexes))
    assert keys is not None and keys.select == select


def test_text_in_another_character_set_is_converted_in_the_probe() -> None:
    """MariaDB 10.11 compares a utf8mb4 literal in a row constructor with a latin1
    column unconverted: `(code, n) IN (('é', 1))` found no row (test_rewrite_types_sandbox)."""
    cols, stats = info_rows([("code", "varchar(10)"), ("n", "int(11)"), ("t", "char(3)")],
                            [("PRIMARY", ("code", "n"), True), ("u_t", ("t",), True)])
    cols[0]["CHARACTER_SET_NAME"] = "latin1"
    cols[2]["CHARACTER_SET_NAME"] = "utf8mb3"  # a subset of the session's: compared as sent
    keys = table_keys(cols, stats)
    assert keys is not None and keys.classes == ("text:latin1", "int", "text")
    assert probed("INSERT INTO t VALUES ('é', 1, 'x'), ('a''b', 2, 'y')", keys) == {
        "PRIMARY": ["(CONVERT('é' USING latin1), 1)", "(CONVERT('a''b' USING latin1), 2)"],
        "u_t": ["'x'", "'y'"]}
    assert probed("INSERT INTO t VALUES (7, 1, 'x')", keys) == {"u_t": ["'x'"]}  # a number: not text


def shape_of(sql: str, schema: str | None = "s") -> tuple[InsertShape | StatementRewrite, tuple[str, ...],
                                                           tuple[bool, ...]]:
    cut = fingerprint(sql)
    assert cut is not None
    return parse_insert(marked(cut[0], cut[2]), schema, marker_slot), cut[1], cut[2]


def probed(sql: str, keys: TableKeys | None) -> dict[str, list[str]]:
    shape, lits, strs = shape_of(sql)
    assert isinstance(shape, InsertShape) and keys is not None
    found = entries(shape, keys, lits, strs)
    assert found is not None
    return {ix.name: values for ix, values in found.items()}


@pytest.mark.parametrize(("sql", "expected"), [
    # the benchmark's insert workload: the new primary and (k, id) entries
    ("INSERT IGNORE INTO t VALUES (5, 17, 'ins', 'ins')", {"PRIMARY": ["5"], "k_1": ["(17, 5)"]}),
    ("INSERT INTO t (k, id, c) VALUES (17, 5, 'x'), (-3, 6, 'y')",
     {"PRIMARY": ["5", "6"], "k_1": ["(17, 5)", "(-3, 6)"]}),
    ("REPLACE INTO s.t (id, k) VALUES (5, 17)", {"PRIMARY": ["5"], "k_1": ["(17, 5)"]}),
    ("INSERT INTO t SET id = 5, k = 17", {"PRIMARY": ["5"], "k_1": ["(17, 5)"]}),
    ("INSERT INTO t (id, k) VALUES (5, 17) ON DUPLICATE KEY UPDATE k = k + 1",
     {"PRIMARY": ["5"], "k_1": ["(17, 5)"]}),
    # auto-increment key left out: no primary entry, and no (k, id) entry to name
    ("INSERT INTO t (k, c) VALUES (17, 'x')", {}),
    # a value that is not one literal, or of another class: that index is left out
    ("INSERT INTO t (id, k) VALUES (5, 17 + 1)", {"PRIMARY": ["5"]}),
    ("INSERT INTO t (id, k) VALUES (5, NULL)", {"PRIMARY": ["5"]}),
    ("INSERT INTO t (id, k) VALUES (5, '17')", {"PRIMARY": ["5"]}),  # a string for an INT
    ("INSERT INTO t (id, k) VALUES (5, 1.5)", {"PRIMARY": ["5"]}),
    ("INSERT INTO t (id, k) VALUES (5, 0x11)", {"PRIMARY": ["5"]}),
    ("INSERT INTO t (id, k) VALUES (5, - 17)", {"PRIMARY": ["5"]}),  # a sign the shape kept
    ("INSERT INTO t (id, k) VALUES (5, DEFAULT)", {"PRIMARY": ["5"]}),
])
def test_an_inserts_new_entries(sql: str, expected: dict[str, list[str]]) -> None:
    assert probed(sql, SB_KEYS) == expected


@pytest.mark.parametrize(("sql", "expected"), [
    ("INSERT INTO a VALUES ('it''s', 3, 99, '2024-01-01', 'n', 1.50)",
     {"PRIMARY": ["'it''s'"], "u_rn": ["(3, 99)"], "k_bal": ["(1.50, 'it''s')"]}),
    ("INSERT INTO a (code, region) VALUES (12, 3)", {}),  # a number for a VARCHAR key: a scan
    ("INSERT INTO a (code, region, num) VALUES (\"x\", 3, 4)", {"u_rn": ["(3, 4)"]}),  # ANSI_QUOTES?
    ("INSERT INTO a (code, region, num) VALUES ('x', 3, -4)",
     {"PRIMARY": ["'x'"], "u_rn": ["(3, -4)"]}),
    ("INSERT INTO a (code, region, num, bal) VALUES ('x', 3, 123456789012345678901, 1e3)",
     {"PRIMARY": ["'x'"]}),  # past any integer column; an exponent for a DECIMAL
])
def test_literal_classes_must_match_their_columns(sql: str, expected: dict[str, list[str]]) -> None:
    assert probed(sql, ACCOUNTS_KEYS) == expected


@pytest.mark.parametrize(("sql", "skipped"), [
    ("INSERT INTO t SELECT * FROM u", "insert_statement"),
    ("INSERT INTO t PARTITION (p0) VALUES (1, 2, 'a', 'b')", "insert_statement"),
    ("INSERT /*! IGNORE */ INTO t VALUES (1, 2, 'a', 'b')", "executable_comment"),
    ("INSERT INTO t (id, k) VALUES (1)", "unparsable_statement"),
])
def test_inserts_lagd_does_not_probe(sql: str, skipped: str) -> None:
    shape, _, _ = shape_of(sql)
    assert isinstance(shape, StatementRewrite) and shape.skipped == skipped


def test_an_unqualified_table_needs_a_default_schema() -> None:
    shape, _, _ = shape_of("INSERT INTO t VALUES (1, 2, 'a', 'b')", None)
    assert isinstance(shape, StatementRewrite) and shape.skipped == "no_default_schema"
    shape, _, _ = shape_of("INSERT INTO d.t VALUES (1, 2, 'a', 'b')", None)
    assert isinstance(shape, InsertShape) and (shape.schema, shape.table) == ("d", "t")


def test_a_column_the_replica_lacks_leaves_the_statement_out() -> None:
    shape, lits, strs = shape_of("INSERT INTO t (id, nope) VALUES (1, 2)")
    assert isinstance(shape, InsertShape) and SB_KEYS is not None
    assert entries(shape, SB_KEYS, lits, strs) is None


def test_inserts_are_probed_once_their_table_is_known_and_batched_per_index() -> None:
    b = ProbeBatcher(max_keys=4)
    out = []
    for i in range(12):
        out += b.add_statement(Statement("s", f"INSERT INTO t VALUES ({i}, {100 + i}, 'c', 'p')", 0, 0))
        if i == 2:
            assert b.unknown_tables() == [("s", "t")]
            b.learn_table("s", "t", SB_KEYS)
    out += b.flush()
    # 0: first of its shape; 1, 2: the table not known yet; 3..11 probed
    assert b.skipped["insert_statement"] == 1 and b.skipped["table_lookup"] == 2
    pk = [p for p in out if p.index == "PRIMARY"]
    assert [sent(p) for p in pk] == [
        "SELECT 1 FROM `s`.`t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (3, 4, 5, 6)",
        "SELECT 1 FROM `s`.`t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (7, 8, 9, 10)",
        "SELECT 1 FROM `s`.`t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (11)",
    ]
    k = [p for p in out if p.index == "k_1"]
    assert sent(k[0]) == ("SELECT 1 FROM `s`.`t` FORCE INDEX (`k_1`) WHERE (`k`, `id`) IN"
                          " ((103, 3), (104, 4), (105, 5), (106, 6))")
    # Integer entries are prepared probes, as row probes are: the values are arguments.
    assert pk[0].sql == "SELECT 1 FROM `s`.`t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (%s, %s, %s, %s)"
    assert k[0].params == (103, 3, 104, 4, 105, 5, 106, 6)
    assert sum(p.rows for p in pk) == 9 and all(p.kind == "statement" for p in out)
    assert (b.rows, b.moving) == (11, 0)  # every INSERT probed or waiting counts as its rows


def test_a_percent_sign_in_a_literal_is_escaped_for_the_driver() -> None:
    b = ProbeBatcher(max_keys=1)
    b.learn_table("s", "a", ACCOUNTS_KEYS)
    out = []
    for code in ("50%", "60%"):
        out += b.add_statement(Statement("s", f"INSERT INTO a (code) VALUES ('{code}')", 0, 0))
    assert [p.sql for p in out] == ["SELECT 1 FROM `s`.`a` FORCE INDEX (`PRIMARY`) WHERE `code` IN ('60%%')"]


def test_the_statement_batcher_alone_probes_no_insert() -> None:
    b = StatementBatcher(16)  # no tables to ask: nothing is known
    for i in range(3):
        probes, refused = b.add(Statement("s", f"INSERT INTO t VALUES ({i}, 1, 'c', 'p')", 0, 0))
        assert probes == [] and refused is not None
    assert refused.skipped == "table_lookup"


# ----- foreign keys: the parent entry each new row's check reads --------------------------------

def fk_rows(name: str, pairs: list[tuple[str, str]], parent: str, schema: str = "s") -> list[dict[str, Any]]:
    return [{"CONSTRAINT_NAME": name, "COLUMN_NAME": c, "REFERENCED_TABLE_SCHEMA": schema,
             "REFERENCED_TABLE_NAME": parent, "REFERENCED_COLUMN_NAME": r} for c, r in pairs]


# child(id AUTO_INCREMENT, sb_id -> sbtest(id), num + region -> accounts(num, region), note)
CHILD_KEYS = table_keys(*info_rows(
    [("id", "bigint(20)"), ("sb_id", "int(11)"), ("num", "bigint(20) unsigned"), ("region", "smallint(6)"),
     ("note", "varchar(20)")],
    [("PRIMARY", ("id",), True), ("sb_id", ("sb_id",), False), ("acct", ("num", "region"), False)]),
    fk_rows("to_sb", [("sb_id", "id")], "sbtest") + fk_rows("to_acct", [("num", "num"), ("region", "region")],
                                                           "accounts"))


def test_table_keys_carry_the_foreign_keys() -> None:
    assert CHILD_KEYS is not None
    assert [(fk.name, fk.columns, fk.parent_table, fk.parent_columns) for fk in CHILD_KEYS.foreign] == [
        ("to_sb", (1,), "sbtest", ("id",)), ("to_acct", (2, 3), "accounts", ("num", "region"))]


def fk_batcher(*known: tuple[str, TableKeys | None], exclude: tuple[str, ...] = ()) -> ProbeBatcher:
    b = ProbeBatcher(exclude_schemas=exclude)
    for name, keys in known:
        b.learn_table("s", name, keys)
    return b


def statement_probes(b: ProbeBatcher, *sqls: str) -> list[tuple[str, str, str]]:
    """The probes of ``sqls``, each after a first statement of its shape (a shape is parsed
    from its second statement: fingerprint.py), whose own literals are all 0."""
    for sql in sqls:
        b.add_statement(Statement("s", re.sub(r"\b\d+\b", "0", sql), 0, 0))
    b.flush()
    out = [p for sql in sqls for p in b.add_statement(Statement("s", sql, 0, 0))] + b.flush()
    return sorted((p.table, p.index or "", sent(p).split(" WHERE ")[1]) for p in out)


def test_an_insert_statement_probes_the_parent_entries_its_foreign_keys_check() -> None:
    b = fk_batcher(("child", CHILD_KEYS), ("sbtest", SB_KEYS), ("accounts", ACCOUNTS_KEYS))
    got = statement_probes(b, "INSERT INTO child (sb_id, num, region, note) VALUES (42, 7, 3, 'x')",
                           "INSERT INTO child (sb_id, num, region) VALUES (44, NULL, 3)")
    # accounts' unique key is (region, num): the child's values in that order. A NULL: no check.
    # The child's own entries need its auto-increment id, which the statement does not name.
    assert got == [("accounts", "u_rn", "(`region`, `num`) IN ((3, 7))"),
                   ("sbtest", "PRIMARY", "`id` IN (42, 44)")]
    assert set(b.skipped) == {"insert_statement"}  # the first statement of each shape


def test_an_insert_run_without_foreign_key_checks_probes_no_parent() -> None:
    """foreign_key_checks=0 on the source (the Query event's flags2): the SQL thread checks
    no parent for the statement, so none is probed; the table's own entries are."""
    b = fk_batcher(("child", CHILD_KEYS), ("sbtest", SB_KEYS), ("accounts", ACCOUNTS_KEYS))
    sql = "INSERT INTO child (id, sb_id, num, region) VALUES ({}, 42, 7, 3)"
    b.add_statement(Statement("s", sql.format(0), 0, 0, False))
    out = [*b.add_statement(Statement("s", sql.format(5), 0, 0, False)), *b.flush()]
    own = [("child", "PRIMARY"), ("child", "acct"), ("child", "sb_id")]
    assert sorted((p.table, p.index) for p in out) == own
    checked = [*b.add_statement(Statement("s", sql.format(6), 0, 0)), *b.flush()]
    assert sorted((p.table, p.index) for p in checked) == sorted(
        [*own, ("accounts", "u_rn"), ("sbtest", "PRIMARY")])


def test_a_self_referencing_key_unchecked_keeps_the_tables_own_entries() -> None:
    """employees.manager -> employees.id: the parent entries are in the table's own PRIMARY;
    with foreign_key_checks=0 they are left out, the new rows' own entries are not."""
    keys = table_keys(*info_rows([("id", "int(11)"), ("manager", "int(11)")], [("PRIMARY", ("id",), True)]),
                      fk_rows("to_boss", [("manager", "id")], "emp"))
    b = fk_batcher(("emp", keys))
    sql = "INSERT INTO emp (id, manager) VALUES ({}, 7)"
    b.add_statement(Statement("s", sql.format(0), 0, 0, False))
    out = [*b.add_statement(Statement("s", sql.format(5), 0, 0, False)), *b.flush()]
    assert [(p.table, p.index, sent(p).split(" WHERE ")[1]) for p in out] == [
        ("emp", "PRIMARY", "`id` IN (5)")]
    checked = [*b.add_statement(Statement("s", sql.format(6), 0, 0)), *b.flush()]
    assert sorted(sent(p).split(" WHERE ")[1] for p in checked) == ["`id` IN (6)", "`id` IN (7)"]


def test_a_parent_learnt_after_the_shape_was_planned_is_probed_from_then_on() -> None:
    b = fk_batcher(("child", CHILD_KEYS))
    sql = "INSERT INTO child (sb_id, note) VALUES ({}, 'x')"
    assert statement_probes(b, sql.format(1)) == []
    assert ("s", "sbtest") in b.unknown_tables()
    b.learn_table("s", "sbtest", SB_KEYS)
    assert statement_probes(b, sql.format(2)) == [("sbtest", "PRIMARY", "`id` IN (2)")]


def test_a_parent_in_an_excluded_schema_is_not_probed_from_a_statement() -> None:
    keys = table_keys(*info_rows([("id", "int(11)"), ("pid", "int(11)")], [("PRIMARY", ("id",), True)]),
                      fk_rows("to_p", [("pid", "id")], "p", schema="audit"))
    b = fk_batcher(("c", keys), exclude=("audit",))
    assert statement_probes(b, "INSERT INTO c (id, pid) VALUES (1, 2)") == [("c", "PRIMARY", "`id` IN (1)")]
    assert b.unknown_tables() == []


# ----- upserts: a row that exists is found in the primary key, its other entries not read ---

@pytest.mark.parametrize(("sql", "on_duplicate"), [
    ("INSERT INTO t (id, k) VALUES (5, 17)", None),
    ("REPLACE INTO t (id, k) VALUES (5, 17)", None),  # an existing row is replaced: every entry
    ("INSERT IGNORE INTO t (id, k) VALUES (5, 17)", frozenset()),
    ("INSERT INTO t (id, k, c) VALUES (5, 17, 'x') ON DUPLICATE KEY UPDATE c = VALUES(c)",
     frozenset({"c"})),
    ("INSERT INTO t (id, k, c) VALUES (5, 17, 'x') AS new ON DUPLICATE KEY UPDATE C = new.c, t.k = new.k",
     frozenset({"c", "k"})),
])
def test_an_upserts_shape_knows_what_its_update_assigns(sql: str, on_duplicate: frozenset[str] | None
                                                        ) -> None:
    shape, _, _ = shape_of(sql)
    assert isinstance(shape, InsertShape) and shape.on_duplicate == on_duplicate


def upserts(b: ProbeBatcher, sql: str, ids: range) -> list[Any]:
    out = [p for i in ids for p in b.add_statement(Statement("s", sql.format(i), 0, 0))]
    return out + b.flush()


def test_upserts_of_rows_that_exist_probe_only_the_entries_they_read() -> None:
    b = ProbeBatcher(max_keys=16)
    b.learn_table("s", "t", SB_KEYS)
    sql = "INSERT INTO t (id, k, c) VALUES ({}, 17, 'x') ON DUPLICATE KEY UPDATE c = VALUES(c)"
    b.add_statement(Statement("s", sql.format(0), 0, 0))  # the shape's first: not parsed
    first = upserts(b, sql, range(1, 97))
    # Nothing answered yet: every entry; the primary key's probes say whether rows exist.
    assert sorted({(p.index, p.upsert) for p in first}) == [("PRIMARY", True), ("k_1", False)]
    for p in first:
        if p.upsert:
            b.statements.inserts.found(p.schema, p.table, p.rows, p.rows)  # every row found
    assert b.statements.inserts.upsert_entries("s", "t")[0] is False
    second = upserts(b, sql, range(97, 129))
    assert {p.index for p in second} == {"PRIMARY"} and b.skipped["row_exists"] == 32
    # Rows that turn out new: their entries are probed again.
    for p in second:
        b.statements.inserts.found(p.schema, p.table, p.rows, 0)
    assert {p.index for p in upserts(b, sql, range(129, 131))} == {"PRIMARY", "k_1"}


def test_an_upserts_update_of_an_indexed_column_keeps_its_entry_probed() -> None:
    b = ProbeBatcher(max_keys=16)
    b.learn_table("s", "t", SB_KEYS)
    sql = "INSERT INTO t (id, k) VALUES ({}, 17) ON DUPLICATE KEY UPDATE k = VALUES(k)"
    b.add_statement(Statement("s", sql.format(0), 0, 0))
    b.statements.inserts.found("s", "t", 128, 128)
    assert {p.index for p in upserts(b, sql, range(1, 3))} == {"PRIMARY", "k_1"}


def test_plain_inserts_probe_every_entry_whatever_upserts_found() -> None:
    b = ProbeBatcher(max_keys=16)
    b.learn_table("s", "t", SB_KEYS)
    b.statements.inserts.found("s", "t", 128, 128)
    for sql in ("INSERT INTO t (id, k) VALUES ({}, 17)", "REPLACE INTO t (id, k) VALUES ({}, 17)"):
        b.add_statement(Statement("s", sql.format(0), 0, 0))
        got = upserts(b, sql, range(1, 3))
        assert {(p.index, p.upsert) for p in got} == {("PRIMARY", False), ("k_1", False)}


# ----- AUTO_INCREMENT: the values the source gave (an Intvar INSERT_ID event) ----------------

AUTO_ROWS = info_rows([("id", "int(11)"), ("k", "int(11)"), ("c", "char(120)"), ("pad", "char(60)")],
                      [("PRIMARY", ("id",), True), ("k_1", ("k",), False)])
AUTO_ROWS[0][0]["EXTRA"] = "auto_increment"
AUTO_KEYS = table_keys(*AUTO_ROWS)


@pytest.mark.parametrize(("sql", "insert_id", "step", "expected"), [
    # the id left out: its (k, id) entry from INSERT_ID; the primary key's, an append, not probed
    ("INSERT INTO t (k, c) VALUES (17, 'x')", 100, 1, {"k_1": ["(17, 100)"]}),
    ("INSERT INTO t (k, c) VALUES (17, 'x')", None, 1, {}),
    # sysbench's oltp_insert: VALUES (0, ...) takes the next value too
    ("INSERT INTO t (id, k, c, pad) VALUES (0, 17, \"c\", \"p\")", 100, 1, {"k_1": ["(17, 100)"]}),
    ("INSERT INTO t (id, k, c, pad) VALUES (0, 17, \"c\", \"p\")", None, 1, {}),
    ("INSERT INTO t VALUES (NULL, 17, 'c', 'p')", 100, 1, {"k_1": ["(17, 100)"]}),
    # rows of one statement: auto_increment_increment apart
    ("INSERT INTO t (k) VALUES (1), (2), (3)", 100, 2, {"k_1": ["(1, 100)", "(2, 102)", "(3, 104)"]}),
    # a row naming its own id moves the counter: the others are not followed
    ("INSERT INTO t (id, k) VALUES (0, 1), (500, 2)", 100, 1, {"PRIMARY": ["500"], "k_1": ["(2, 500)"]}),
    ("INSERT INTO t (id, k) VALUES (5, 17)", None, 1, {"PRIMARY": ["5"], "k_1": ["(17, 5)"]}),
])
def test_an_auto_increment_rows_entries_take_the_value_the_source_gave(
        sql: str, insert_id: int | None, step: int, expected: dict[str, list[str]]) -> None:
    shape, lits, strs = shape_of(sql)
    assert isinstance(shape, InsertShape) and AUTO_KEYS is not None and AUTO_KEYS.auto == 0
    found = entries(shape, AUTO_KEYS, lits, strs, insert_id=insert_id, step=step)
    assert found is not None and {ix.name: v for ix, v in found.items()} == expected


def test_the_batcher_counts_an_auto_increment_primary_key_as_an_append() -> None:
    b = ProbeBatcher(max_keys=2)
    b.learn_table("s", "t", AUTO_KEYS)
    sql = "INSERT INTO t (k, c) VALUES ({}, 'x')"
    b.add_statement(Statement("s", sql.format(0), 0, 0, insert_id=1))
    out = [p for i in (1, 2)
           for p in b.add_statement(Statement("s", sql.format(10 + i), 0, 0, insert_id=40 + i))]
    assert [sent(p).split(" WHERE ")[1] for p in out] == ["(`k`, `id`) IN ((11, 41), (12, 42))"]
    assert b.skipped["append"] == 2


USERS_ROWS = info_rows([("id", "int(11)"), ("email", "varchar(100)"), ("name", "varchar(40)")],
                       [("PRIMARY", ("id",), True), ("email", ("email",), True)])
USERS_ROWS[0][0]["EXTRA"] = "auto_increment"
USERS_KEYS = table_keys(*USERS_ROWS)


@pytest.mark.parametrize(("sql", "select"), [
    # an upsert by its unique e-mail: the existing row's record is read to update it
    ("INSERT INTO u (email, name) VALUES ('a@x', 'n') ON DUPLICATE KEY UPDATE name = VALUES(name)",
     "ISNULL(`name`)"),
    ("INSERT IGNORE INTO u (email, name) VALUES ('a@x', 'n')", "ISNULL(`name`)"),
    ("REPLACE INTO u (email, name) VALUES ('a@x', 'n')", "ISNULL(`name`)"),  # deleted first
    ("INSERT INTO u (email, name) VALUES ('a@x', 'n')", "1"),  # a duplicate is an error: the leaf alone
])
def test_an_upsert_by_a_unique_key_probes_the_existing_rows_record(sql: str, select: str) -> None:
    b = ProbeBatcher(max_keys=1)
    b.learn_table("s", "u", USERS_KEYS)
    b.add_statement(Statement("s", sql.replace("a@x", "first"), 0, 0))
    out = [*b.add_statement(Statement("s", sql, 0, 0, insert_id=7)), *b.flush()]
    # The primary key's new entry (INSERT_ID 7) is an append, not probed.
    assert [p.sql for p in out] == [
        f"SELECT {select} FROM `s`.`u` FORCE INDEX (`email`) WHERE `email` IN ('a@x')"]
