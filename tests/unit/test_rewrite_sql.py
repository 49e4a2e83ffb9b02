"""Probe SQL text and statement-based UPDATE/DELETE -> SELECT (lagd.prefetch.rewrite_sql)."""

from __future__ import annotations

import itertools
import re

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from lagd.prefetch.rewrite_sql import (
    STATEMENT_ROWS,
    index_probe_sql,
    quote_ident,
    rewrite_statement,
    rewrite_statement_sql,
)
from lagd.relaylog import Statement

MYSQL = sqlglot.Dialect.get_or_raise("mysql")


def unformat(sql: str) -> str:
    """The text the server receives: %s -> a placeholder, %% -> %."""
    return re.sub(r"%(.)", lambda m: "?" if m.group(1) == "s" else m.group(1), sql)


def assert_plain_select(sql: str) -> exp.Select:
    """One SELECT, no locking clause, no INTO, nothing that writes."""
    trees = [t for t in sqlglot.parse(unformat(sql), read="mysql") if t is not None]
    assert len(trees) == 1, sql
    tree = trees[0]
    assert isinstance(tree, exp.Select), sql
    assert not list(tree.find_all(exp.Lock, exp.Into, exp.Update, exp.Delete, exp.Insert)), sql
    words = [t.text.upper() for t in MYSQL.tokenize(unformat(sql)) if t.token_type != TokenType.STRING
             and t.token_type != TokenType.IDENTIFIER]
    for a, b in itertools.pairwise(words):
        assert (a, b) not in (("FOR", "UPDATE"), ("FOR", "SHARE"), ("LOCK", "IN")), sql
    return tree


@pytest.mark.parametrize(("name", "quoted"), [
    ("t", "`t`"),
    ("we`ird", "`we``ird`"),
    ("``", "``````"),
    ("tä ble", "`tä ble`"),
    ("日本", "`日本`"),
    ("PRIMARY", "`PRIMARY`"),
], ids=["plain", "backtick", "only-backticks", "unicode-space", "cjk", "keyword"])
def test_quote_ident(name: str, quoted: str) -> None:
    assert quote_ident(name) == quoted


@pytest.mark.parametrize(("columns", "nulls", "keys", "where"), [
    (("id",), (), 1, "`id` IN (%s)"),
    (("id",), (), 3, "`id` IN (%s, %s, %s)"),
    (("k", "id"), (), 2, "(`k`, `id`) IN ((%s, %s), (%s, %s))"),
    (("id",), ("k",), 2, "`k` IS NULL AND `id` IN (%s, %s)"),
    (("a", "id"), ("b",), 1, "`b` IS NULL AND (`a`, `id`) IN ((%s, %s))"),
], ids=["one-key", "in-list", "row-constructor", "is-null", "is-null-composite"])
def test_index_probe_sql(columns: tuple[str, ...], nulls: tuple[str, ...], keys: int, where: str) -> None:
    sql = index_probe_sql("s", "t", "ix", columns, nulls, keys)
    assert sql == f"SELECT 1 FROM `s`.`t` FORCE INDEX (`ix`) WHERE {where}"
    assert sql.count("%s") == keys * len(columns)
    assert_plain_select(sql)


@pytest.mark.parametrize(("columns", "convert", "where"), [
    (("code", "id"), ("latin1", None), "(`code`, `id`) IN ((CONVERT(%s USING latin1), %s), (CONVERT(%s USING"
                                       " latin1), %s))"),
    (("code",), ("cp1251",), "`code` IN (CONVERT(%s USING cp1251), CONVERT(%s USING cp1251))"),
    # the session's own character set, and binary, compare as sent
    (("a", "b", "c"), ("utf8mb4", "utf8mb3", "binary"), "(`a`, `b`, `c`) IN ((%s, %s, %s), (%s, %s, %s))"),
    (("a", "id"), (), "(`a`, `id`) IN ((%s, %s), (%s, %s))"),  # not known: as sent
    (("a",), ("latin1; DROP",), "`a` IN (%s, %s)"),  # never a name that is not one
], ids=["latin1-row", "cp1251-list", "session-sets", "unknown", "not-a-name"])
def test_index_probe_sql_converts_keys_to_their_columns_character_set(
        columns: tuple[str, ...], convert: tuple[str | None, ...], where: str) -> None:
    sql = index_probe_sql("s", "t", "ix", columns, (), 2, convert)
    assert sql == f"SELECT 1 FROM `s`.`t` FORCE INDEX (`ix`) WHERE {where}"
    assert sql.count("%s") == 2 * len(columns)
    assert_plain_select(sql)


def test_index_probe_sql_quotes_odd_identifiers() -> None:
    sql = index_probe_sql("we`ird", "tä`b", "ix`1", ("c`o l",), (), 1)
    assert sql == "SELECT 1 FROM `we``ird`.`tä``b` FORCE INDEX (`ix``1`) WHERE `c``o l` IN (%s)"
    table = assert_plain_select(sql).find(exp.Table)
    assert table is not None and (table.db, table.name) == ("we`ird", "tä`b")


# (name, statement, its SELECT before the row cap): a statement without a LIMIT of
# its own gets ``LIMIT STATEMENT_ROWS`` appended (ACCEPTED, below).
_SELECTS = [
    ("update", "UPDATE t SET v = v + 1 WHERE id = 2", "SELECT * FROM `s`.t WHERE id = 2"),
    ("update-modifiers", "UPDATE LOW_PRIORITY IGNORE t SET v=1 WHERE k > 5 ORDER BY id DESC LIMIT 10",
     "SELECT * FROM `s`.t WHERE k > 5 ORDER BY id DESC LIMIT 10"),
    ("delete-modifiers", "DELETE LOW_PRIORITY QUICK IGNORE FROM t WHERE id < 10 ORDER BY id LIMIT 5;",
     "SELECT * FROM `s`.t WHERE id < 10 ORDER BY id LIMIT 5"),
    ("delete-limit-only", "DELETE FROM t LIMIT 100", "SELECT * FROM `s`.t LIMIT 100"),
    ("update-no-where", "UPDATE t SET a = 1", "SELECT * FROM `s`.t"),
    ("update-join", "UPDATE t1 JOIN t2 ON t1.id = t2.id SET t1.v = t2.v WHERE t2.x = 1",
     "SELECT * FROM `s`.t1 JOIN `s`.t2 ON t1.id = t2.id WHERE t2.x = 1"),
    ("update-comma-other-schema", "UPDATE t1, db2.t2 SET t1.v = t2.v WHERE t1.id = t2.id",
     "SELECT * FROM `s`.t1, db2.t2 WHERE t1.id = t2.id"),
    ("delete-multi-from", "DELETE t1, t2 FROM t1 INNER JOIN t2 INNER JOIN t3 WHERE t1.id=t2.id",
     "SELECT * FROM `s`.t1 INNER JOIN `s`.t2 INNER JOIN `s`.t3 WHERE t1.id=t2.id"),
    ("delete-multi-using", "DELETE FROM t1, t2 USING t1 INNER JOIN t2 INNER JOIN t3 WHERE t1.id=t2.id",
     "SELECT * FROM `s`.t1 INNER JOIN `s`.t2 INNER JOIN `s`.t3 WHERE t1.id=t2.id"),
    ("delete-alias-left-join", "DELETE a FROM t AS a LEFT JOIN u AS b USING (id) WHERE b.id IS NULL",
     "SELECT * FROM `s`.t AS a LEFT JOIN `s`.u AS b USING (id) WHERE b.id IS NULL"),
    ("odd-identifiers", "UPDATE `we``ird`.`tä` SET v=1 WHERE `c``x`='it''s' AND `日本` = 'ü'",
     "SELECT * FROM `we``ird`.`tä` WHERE `c``x`='it''s' AND `日本` = 'ü'"),
    ("subquery-qualified", "DELETE FROM t WHERE id IN (SELECT id FROM u WHERE u.x > 3)",
     "SELECT * FROM `s`.t WHERE id IN (SELECT id FROM `s`.u WHERE u.x > 3)"),
    ("set-list-dropped", "UPDATE t SET v = (SELECT MAX(x) FROM big), w = SLEEP(1) WHERE id = 1",
     "SELECT * FROM `s`.t WHERE id = 1"),
    # Kept verbatim: sqlglot would regenerate these as REGEXP_LIKE/COALESCE/INTERVAL '1'.
    ("builtins-verbatim", "UPDATE t SET v=1 WHERE a REGEXP '^x' AND d < NOW() - INTERVAL 1 DAY"
     " AND IFNULL(b, 0) = 0 AND c = _utf8mb4'x' COLLATE utf8mb4_bin AND e = x'0aff'",
     "SELECT * FROM `s`.t WHERE a REGEXP '^x' AND d < NOW() - INTERVAL 1 DAY"
     " AND IFNULL(b, 0) = 0 AND c = _utf8mb4'x' COLLATE utf8mb4_bin AND e = x'0aff'"),
    ("percent-doubled", "DELETE FROM t WHERE name LIKE 'a%' AND n MOD 2 = 0",
     "SELECT * FROM `s`.t WHERE name LIKE 'a%%' AND n MOD 2 = 0"),
    ("partition", "DELETE FROM t PARTITION (p0) WHERE id=1", "SELECT * FROM `s`.t PARTITION (p0) WHERE id=1"),
    ("index-hint", "UPDATE t FORCE INDEX (k) SET v=1 WHERE k=1",
     "SELECT * FROM `s`.t FORCE INDEX (k) WHERE k=1"),
    ("with-cte", "WITH c AS (SELECT id FROM u) UPDATE t JOIN c ON t.id=c.id SET t.v=1",
     "WITH c AS (SELECT id FROM `s`.u) SELECT * FROM `s`.t JOIN c ON t.id=c.id"),
    ("comments", "/* lead */ DELETE FROM t WHERE id=1 /* mid */ AND k=2 # trailing",
     "SELECT * FROM `s`.t WHERE id=1   AND k=2"),  # plain comments: a space each
    ("dual-not-qualified", "DELETE FROM t WHERE a = (SELECT 1 FROM DUAL)",
     "SELECT * FROM `s`.t WHERE a = (SELECT 1 FROM DUAL)"),
    ("lowercase", "delete from t where a=1", "SELECT * FROM `s`.t where a=1"),
    ("grammar-before-parens", "UPDATE t SET v=1 WHERE a DIV (b + 1) = 2 AND (a, b) IN ((1, 2))"
     " AND CAST(c AS DECIMAL(10, 2)) > 1 AND EXISTS (SELECT 1 FROM u WHERE u.id = t.id) ORDER BY (a)",
     "SELECT * FROM `s`.t WHERE a DIV (b + 1) = 2 AND (a, b) IN ((1, 2))"
     " AND CAST(c AS DECIMAL(10, 2)) > 1 AND EXISTS (SELECT 1 FROM `s`.u WHERE u.id = t.id) ORDER BY (a)"),
    ("columns-named-like-keywords", "DELETE FROM t WHERE `lock` IN (1) AND `for` = 'for update'",
     "SELECT * FROM `s`.t WHERE `lock` IN (1) AND `for` = 'for update'"),
]
ACCEPTED = [(name, sql, select if name in ("update-modifiers", "delete-modifiers", "delete-limit-only")
             else f"{select} LIMIT {STATEMENT_ROWS}") for name, sql, select in _SELECTS]


@pytest.mark.parametrize(("sql", "select"), [
    # a range: at most STATEMENT_ROWS of its rows reach lagd (and the pool's page budget)
    ("DELETE FROM log WHERE ts < '2026-01-01'", "SELECT * FROM `s`.log WHERE ts < '2026-01-01' LIMIT 256"),
    ("UPDATE t SET v = 1 WHERE k BETWEEN 1 AND 100000 ORDER BY k",
     "SELECT * FROM `s`.t WHERE k BETWEEN 1 AND 100000 ORDER BY k LIMIT 256"),
    # its own LIMIT is the statement's bound: the rows the SQL thread will touch
    ("DELETE FROM log WHERE ts < '2026-01-01' ORDER BY ts LIMIT 1000",
     "SELECT * FROM `s`.log WHERE ts < '2026-01-01' ORDER BY ts LIMIT 1000"),
    # a trailing comment is not in the probe, so the LIMIT cannot end up inside it
    ("DELETE FROM log WHERE id = 5 -- purge job", "SELECT * FROM `s`.log WHERE id = 5 LIMIT 256"),
])
def test_a_statement_probe_reads_a_bounded_number_of_rows(sql: str, select: str) -> None:
    probe = rewrite_statement_sql(sql, "s").probe
    assert probe is not None and probe.sql == select
    assert_plain_select(probe.sql)


@pytest.mark.parametrize(("sql", "select"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_statement_becomes_the_select_of_its_rows(sql: str, select: str) -> None:
    verdict = rewrite_statement_sql(sql, "s", 1_700_000_000)
    assert verdict.skipped is None, verdict.reason
    probe = verdict.probe
    assert probe is not None
    assert probe.sql == select
    assert (probe.params, probe.index, probe.kind, probe.rows, probe.covering) == ((), None, "statement",
                                                                                    0, False)
    assert probe.source_time == 1_700_000_000
    assert probe.sql % () == unformat(probe.sql)  # what the driver sends: %% back to %
    assert_plain_select(probe.sql)


REFUSED = [
    ("ddl", "CREATE TABLE x (a INT)", "not_dml"),
    ("alter", "ALTER TABLE t ADD c INT", "not_dml"),
    ("set", "SET @a = 1", "not_dml"),
    ("select-for-update", "SELECT * FROM t FOR UPDATE", "unsupported_statement"),
    ("select-into-outfile", "SELECT 1 INTO OUTFILE 'f'", "unsupported_statement"),
    ("load-data", "LOAD DATA INFILE 'x' INTO TABLE t", "unsupported_statement"),
    ("call", "CALL p(1)", "unsupported_statement"),
    ("do", "DO SLEEP(1)", "unsupported_statement"),
    ("insert", "INSERT INTO t VALUES (1)", "insert_statement"),
    ("insert-select", "INSERT INTO t SELECT * FROM u", "insert_statement"),
    ("insert-on-duplicate", "INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE v = v + 1", "insert_statement"),
    ("replace", "REPLACE INTO t VALUES (1)", "insert_statement"),
    ("multi-statement", "UPDATE t SET v=1; DELETE FROM t", "multi_statement"),
    ("locking-subquery", "DELETE FROM t WHERE id IN (SELECT id FROM u FOR UPDATE)", "locking_read"),
    ("share-subquery", "DELETE FROM t WHERE id IN (SELECT id FROM u LOCK IN SHARE MODE)", "locking_read"),
    ("user-variable-assignment", "UPDATE t SET v = (@x := v) WHERE id = 1", "user_variable"),
    ("user-variable-read", "DELETE FROM t WHERE id = @x", "user_variable"),
    ("system-variable", "DELETE FROM t WHERE id = @@server_id", "system_variable"),
    ("sleep", "DELETE FROM t WHERE id = SLEEP(1)", "unsafe_function"),
    ("get-lock", "UPDATE t SET v = 1 WHERE GET_LOCK('x', 10)", "unsafe_function"),
    ("release-lock", "DELETE FROM t WHERE RELEASE_LOCK('x')", "unsafe_function"),
    ("benchmark", "DELETE FROM t WHERE BENCHMARK(1000000, MD5('a'))", "unsafe_function"),
    ("load-file", "DELETE FROM t WHERE a = LOAD_FILE('/etc/hosts')", "unsafe_function"),
    ("master-pos-wait", "DELETE FROM t WHERE MASTER_POS_WAIT('f', 4)", "unsafe_function"),
    ("nextval", "DELETE FROM t WHERE id = NEXTVAL(seq)", "unsafe_function"),
    ("next-value-for", "DELETE FROM t WHERE id = NEXT VALUE FOR seq", "unsafe_function"),
    ("last-insert-id-set", "DELETE FROM t WHERE id = LAST_INSERT_ID(5)", "unsafe_function"),
    ("rand", "DELETE FROM t WHERE RAND() < 0.1", "nondeterministic_function"),
    ("uuid", "DELETE FROM t WHERE u = UUID()", "nondeterministic_function"),
    ("sysdate", "DELETE FROM t WHERE d < SYSDATE()", "nondeterministic_function"),
    ("database", "DELETE FROM t WHERE db = DATABASE()", "nondeterministic_function"),
    ("stored-function", "DELETE FROM t WHERE id = f(1)", "stored_function"),
    ("qualified-function", "DELETE FROM t WHERE id = db.f(1)", "stored_function"),
    ("quoted-function", "DELETE FROM t WHERE d < `now`()", "stored_function"),
    ("executable-comment", "DELETE /*!40000 QUICK */ FROM t WHERE id = 1", "executable_comment"),
    ("mariadb-executable-comment", "DELETE FROM t WHERE id = 1 /*M!100100 OR 1 */", "executable_comment"),
    ("returning", "DELETE FROM t WHERE id = 1 RETURNING id", "unsupported_statement"),
    ("straight-join", "UPDATE t1 STRAIGHT_JOIN t2 ON t1.a = t2.a SET t1.v = 1", "unparsable_statement"),
    ("garbage", "UPDATE SET WHERE", "unparsable_statement"),
    ("unterminated-string", "DELETE FROM t WHERE a = 'x", "unparsable_statement"),
    ("empty", "", "unparsable_statement"),
    ("only-semicolon", ";", "unparsable_statement"),
    ("not-utf8", "DELETE FROM t WHERE a = 'ab\udcff'", "undecodable_statement"),
]


@pytest.mark.parametrize(("sql", "skipped"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_statement_refused(sql: str, skipped: str) -> None:
    verdict = rewrite_statement_sql(sql, "s")
    assert (verdict.probe, verdict.skipped) == (None, skipped), verdict.reason
    assert verdict.reason  # a sentence for the log / status page


def test_unqualified_table_needs_a_default_schema() -> None:
    refused = rewrite_statement_sql("DELETE FROM t WHERE id = 1", None)
    assert refused.skipped == "no_default_schema"
    assert "no default database" in refused.reason
    qualified = rewrite_statement_sql("DELETE FROM d.t WHERE id = 1", None)
    assert qualified.probe is not None
    assert qualified.probe.sql == "SELECT * FROM d.t WHERE id = 1 LIMIT 256"
    assert (qualified.probe.schema, qualified.probe.table) == ("d", "t")


@pytest.mark.parametrize(("sql", "table"), [
    ("UPDATE t1 JOIN other.t2 ON t1.id = t2.id SET t2.v = 1", ("s", "t1")),
    ("DELETE t2 FROM x.t1 JOIN t2 USING (id)", ("x", "t1")),
    ("WITH c AS (SELECT 1 AS id FROM u) DELETE t FROM t JOIN c USING (id)", ("s", "t")),
], ids=["update-join", "delete-join", "cte-not-first"])
def test_probe_names_the_first_table_read(sql: str, table: tuple[str, str]) -> None:
    probe = rewrite_statement_sql(sql, "s").probe
    assert probe is not None
    assert (probe.schema, probe.table) == table


def test_statement_event_carries_its_time() -> None:
    verdict = rewrite_statement(Statement("shop", "DELETE FROM orders WHERE id = 7", 0, 1_234))
    assert verdict.probe is not None
    assert verdict.probe.sql == "SELECT * FROM `shop`.orders WHERE id = 7 LIMIT 256"
    assert verdict.probe.source_time == 1_234
    assert "shop.orders" in verdict.reason


@pytest.mark.parametrize(("sql", "sets"), [
    ("UPDATE t SET k = k + 1 WHERE id = 5", {"k"}),
    ("UPDATE t SET `K` = 1, c = 'x' WHERE id = 5", {"k", "c"}),
    ("UPDATE LOW_PRIORITY t SET t.k = 1 WHERE id = 5", {"k"}),
    ("UPDATE t1 JOIN t2 USING (id) SET t1.a = 1, t2.b = 2", {"a", "b"}),  # matched against t1
    ("DELETE FROM t WHERE id = 5", set()),
])
def test_an_updates_assigned_columns_come_with_its_rewrite(sql: str, sets: set[str]) -> None:
    verdict = rewrite_statement_sql(sql, "s")
    assert verdict.probe is not None and verdict.sets == sets


# Whether the probe reads its first table alone, so that a column name alone in its select
# list is that table's (fingerprint.StatementBatcher narrows such probes of document tables).
_SEVERAL = {"update-join", "update-comma-other-schema", "delete-multi-from", "delete-multi-using",
            "delete-alias-left-join", "with-cte"}


@pytest.mark.parametrize(("name", "sql"), [a[:2] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_a_rewrite_says_whether_it_reads_one_table(name: str, sql: str) -> None:
    verdict = rewrite_statement_sql(sql, "s")
    assert verdict.probe is not None and verdict.one_table is (name not in _SEVERAL)
