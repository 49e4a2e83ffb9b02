"""Statement shapes and templates (lagd.prefetch.fingerprint): the same probes as the sqlglot path."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest
from test_inserts import sent
from test_rewrite_sql import ACCEPTED, REFUSED

from lagd.prefetch.fingerprint import (
    SCAN_C,
    ShapeFlights,
    StatementBatcher,
    build_template,
    fingerprint,
    fingerprint_py,
)
from lagd.prefetch.inserts import TableKeys
from lagd.prefetch.rewrite_sql import rewrite_statement_sql
from lagd.relaylog import Statement

F = "\0"  # where a literal was


@pytest.mark.parametrize(("sql", "shape", "lits"), [
    ("UPDATE t SET c = c + 1 WHERE id = 17", f"UPDATE t SET c = c + {F} WHERE id = {F}", ("1", "17")),
    ("DELETE FROM t WHERE a = 'it''s' AND b = 'x\\'y' AND c = \"q\\\"r\"",
     f"DELETE FROM t WHERE a = {F} AND b = {F} AND c = {F}", ("'it''s'", "'x\\'y'", '"q\\"r"')),
    ("DELETE FROM t WHERE id IN (1, -2,3)", f"DELETE FROM t WHERE id IN ({F})", ("1, -2,3",)),
    ("DELETE FROM t WHERE id IN ('a', 'b''c')", f"DELETE FROM t WHERE id IN ({F})", ("'a', 'b''c'",)),
    ("DELETE FROM t WHERE x = -5 AND y = a-1 AND z = a - 2",
     f"DELETE FROM t WHERE x = {F} AND y = a-{F} AND z = a - {F}", ("-5", "1", "2")),
    ("DELETE FROM t WHERE h = 0x1F AND b = x'0A' AND c = b'101' AND d = 0b11",
     f"DELETE FROM t WHERE h = {F} AND b = {F} AND c = {F} AND d = {F}", ("0x1F", "x'0A'", "b'101'", "0b11")),
    ("DELETE FROM t1 WHERE col2 = 1.5e3 /* 7 */ AND c = .5 -- 8\n# 9",
     f"DELETE FROM t1 WHERE col2 = {F}   AND c = {F}  \n ", ("1.5e3", ".5")),
    ("UPDATE t SET c = 'a' WHERE id = 5 /*traceparent='00-4bf9-01',route='%2Fx'*/",
     f"UPDATE t SET c = {F} WHERE id = {F}  ", ("'a'", "5")),
    ("/* req 7 */UPDATE/**/t SET c = '/* 1 */ -- 2' WHERE id = 3--4",
     f" UPDATE t SET c = {F} WHERE id = {F}--{F}", ("'/* 1 */ -- 2'", "3", "4")),
    ("UPDATE /*+ NO_RANGE_OPTIMIZATION(t) */ t SET c = 1 /*M!100000 , d = 2 */ WHERE id = 3",
     f"UPDATE /*+ NO_RANGE_OPTIMIZATION(t) */ t SET c = {F} /*M!100000 , d = 2 */ WHERE id = {F}",
     ("1", "3")),
    ("DELETE FROM `t 1` WHERE `c2` = 2 AND @v = 3 AND @@x = 4",
     f"DELETE FROM `t 1` WHERE `c2` = {F} AND @v = {F} AND @@x = {F}", ("2", "3", "4")),
    ("DELETE FROM t WHERE a = 1--2", f"DELETE FROM t WHERE a = {F}--{F}", ("1", "2")),  # minus minus
    ("DELETE /*!40000 QUICK 5 */ FROM t", "DELETE /*!40000 QUICK 5 */ FROM t", ()),
    ("DELETE FROM seq_1_to_9 WHERE 1abc = 2", f"DELETE FROM seq_1_to_9 WHERE 1abc = {F}", ("2",)),
    ("DELETE FROM t WHERE id IN (1, 'x')", f"DELETE FROM t WHERE id IN ({F}, {F})", ("1", "'x'")),
    ("DELETE FROM t WHERE id IN (1, 2, 'x')", None, None),  # a mixed list: left to the sqlglot path
    ("DELETE FROM t WHERE a = 'ab\udcff'", None, None),  # not UTF-8
], ids=["numbers", "quotes", "in-list-negative", "in-list-strings", "negative-vs-minus", "hex-bit",
        "comments", "sqlcommenter", "comments-in-strings", "hints-and-code-kept",
        "identifiers-and-variables", "double-minus", "executable-comment", "digits-in-names",
        "mixed-pair", "mixed-list", "not-utf8"])
def test_fingerprint(sql: str, shape: str | None, lits: tuple[str, ...] | None) -> None:
    cut = fingerprint(sql)
    if shape is None:
        assert cut is None
        return
    assert cut is not None
    assert cut[:2] == (shape, lits)


def fast(sql: str, schema: str | None = "s") -> tuple[str | None, str | None]:
    """(probe SQL, refusal) through a template built from this very statement."""
    cut = fingerprint(sql)
    if cut is None:
        return None, "no fingerprint"
    t = build_template(*cut, sql, schema)
    if t.refusal is not None:
        return None, t.refusal.skipped
    assert t.verified, f"no template for {sql!r}"
    return t.bind(cut[1]), None


@pytest.mark.parametrize(("sql", "select"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_templates_give_todays_rewrite(sql: str, select: str) -> None:
    assert fast(sql) == (select, None)


@pytest.mark.parametrize(("sql", "skipped"), [r[1:] for r in REFUSED if "\udcff" not in r[1]],
                         ids=[r[0] for r in REFUSED if "\udcff" not in r[1]])
def test_templates_refuse_what_today_refuses(sql: str, skipped: str) -> None:
    assert fast(sql) == (None, skipped)


# One shape, other literals: the template made from the first statement, bound with the second's.
SAME_SHAPE = [
    ("UPDATE t SET c = c + 1 WHERE id = 17", "UPDATE t SET c = c + 900 WHERE id = -3"),
    ("DELETE FROM t WHERE name = 'plain' AND n > 5", "DELETE FROM t WHERE name = 'it''s 100%' AND n > -5.5"),
    ("DELETE FROM t WHERE name = 'a'", "DELETE FROM t WHERE name = 'back\\\\slash\\' quote'"),
    ("DELETE FROM t WHERE id IN (1)", "DELETE FROM t WHERE id IN (4, -5, 6, 7)"),
    ("DELETE FROM t WHERE h = x'00' OR h = 0x01", "DELETE FROM t WHERE h = x'ffee' OR h = 0xABCDEF"),
    ("UPDATE t SET v = 'a;b' WHERE k BETWEEN 1 AND 2 ORDER BY id LIMIT 3",
     "UPDATE t SET v = '--x' WHERE k BETWEEN 10 AND 20 ORDER BY id LIMIT 30"),
    ("DELETE FROM t WHERE d < NOW() - INTERVAL 1 DAY /* job 1 */",
     "DELETE FROM t WHERE d < NOW() - INTERVAL 30 DAY /* job 1 */"),
    ("DELETE FROM t WHERE c = _utf8mb4'x' COLLATE utf8mb4_bin",
     "DELETE FROM t WHERE c = _utf8mb4'ü' COLLATE utf8mb4_bin"),
]


@pytest.mark.parametrize(("first", "second"), SAME_SHAPE)
def test_a_shapes_template_binds_other_literals_as_the_sqlglot_path_would(first: str, second: str) -> None:
    a, b = fingerprint(first), fingerprint(second)
    assert a is not None and b is not None and a[0] == b[0]
    t = build_template(*a, first, "s")
    assert t.verified and t.refusal is None
    direct = rewrite_statement_sql(second, "s").probe
    assert direct is not None
    assert t.bind(b[1]) == direct.sql


@pytest.mark.parametrize("sql", [
    "DELETE FROM t WHERE id = @v", "UPDATE t SET v = (@x := v) WHERE id = 1",
    "DELETE FROM t WHERE RAND() < 0.1", "DELETE FROM t WHERE u = UUID()", "DELETE FROM t WHERE id = SLEEP(1)",
    "DELETE FROM t WHERE id IN (SELECT id FROM u FOR UPDATE)", "DELETE /*!40000 QUICK */ FROM t WHERE id = 1",
])
def test_refused_shapes_stay_refused_for_every_literal(sql: str) -> None:
    b = StatementBatcher(16)
    for i in range(3):
        probes, refused = b.add(Statement("s", sql.replace("1", str(i + 1)), 0, 0))
        assert probes == [] and refused is not None
    assert b.stats["shapes"] == 1


def test_statements_of_one_shape_are_batched_into_an_in_list() -> None:
    b = StatementBatcher(16)
    got = []
    for i in range(20):
        probes, refused = b.add(Statement("s", f"UPDATE t SET c = c + {i} WHERE id = {i % 18}", 0, 7))
        assert refused is None
        got += probes
    got += b.flush()
    assert [p.sql for p in got] == [
        "SELECT * FROM `s`.t WHERE id = 0 LIMIT 256",  # a shape seen once goes the direct way
        "SELECT * FROM `s`.t WHERE id IN (" + ", ".join(str(i) for i in range(1, 17)) + ") LIMIT 4096",
        "SELECT * FROM `s`.t WHERE id IN (17, 0, 1) LIMIT 768",  # a new batch: 0 and 1 are due again
    ]
    assert [p.rows for p in got] == [1, 16, 3]
    assert (got[1].kind, got[1].params, got[1].source_time) == ("statement", (), 7)
    assert b.stats["shapes"] == 1 and b.flush() == []
    # One name for the shape, direct or templated: the pool explains it once (lagd.mysql.plan).
    assert len({p.plan for p in got}) == 1 and got[0].plan is not None
    other, _ = b.add(Statement("s", "DELETE FROM t WHERE id = 5", 0, 7))
    assert other[0].plan not in (None, got[0].plan)


def test_a_shape_seen_once_costs_what_the_direct_path_costs() -> None:
    b = StatementBatcher(16)
    for i in range(5):  # a name that changes: every statement its own shape
        probes, _ = b.add(Statement("s", f"DELETE FROM t_{i} WHERE id = {i}", 0, 0))
        assert [p.sql for p in probes] == [f"SELECT * FROM `s`.t_{i} WHERE id = {i} LIMIT 256"]
    assert (b.stats["first_seen"], b.stats["shapes"]) == (5, 0)


def test_a_request_id_in_a_comment_is_not_a_shape_of_its_own() -> None:
    """sqlcommenter and marginalia tag each statement with its request: parsed whole and
    probed alone, such statements cost 200-380 µs each instead of 5."""
    b = StatementBatcher(16)
    probes = []
    for i in range(5):
        sql = f"/* app:web,req:{i} */ DELETE FROM t WHERE id = {i} /*traceparent='00-{i:032x}-01'*/"
        probes += b.add(Statement("s", sql, 0, 0))[0]
    probes += b.flush()
    assert (b.stats["first_seen"], b.stats["shapes"], b.stats["templated"]) == (1, 1, 4)
    assert [p.sql for p in probes] == ["SELECT * FROM `s`.t WHERE id = 0 LIMIT 256",
                                       "SELECT * FROM `s`.t WHERE id IN (1, 2, 3, 4) LIMIT 1024"]


def test_in_lists_and_strings_batch_too() -> None:
    b = StatementBatcher(16)
    b.add(Statement("s", "DELETE FROM t WHERE id IN (0)", 0, 0))  # first seen: direct
    b.add(Statement("s", "DELETE FROM t WHERE code = 'z'", 0, 0))
    b.add(Statement("s", "DELETE FROM t WHERE id IN (1, 2)", 0, 0))
    b.add(Statement("s", "DELETE FROM t WHERE id IN (3)", 0, 0))
    b.add(Statement("s", "DELETE FROM t WHERE code = 'a%'", 0, 0))
    b.add(Statement("s", "DELETE FROM t WHERE code = 'b'", 0, 0))
    probes = sorted(b.flush(), key=lambda p: p.sql)
    assert [(p.sql, p.rows) for p in probes] == [
        ("SELECT * FROM `s`.t WHERE code IN ('a%%', 'b') LIMIT 512", 2),
        ("SELECT * FROM `s`.t WHERE id IN (1, 2, 3) LIMIT 512", 3),  # two statements
    ]


OR_BATCHES = [
    # (statement with {a}, {b} for two literals, the batch of (1, 10) and (21, 30))
    ("UPDATE t SET c = c + 1 WHERE id BETWEEN {a} AND {b}",
     "SELECT * FROM `s`.t WHERE (id BETWEEN 1 AND 10) OR (id BETWEEN 21 AND 30) LIMIT 512"),
    ("DELETE FROM t WHERE id >= {a} AND id < {b}",
     "SELECT * FROM `s`.t WHERE (id >= 1 AND id < 10) OR (id >= 21 AND id < 30) LIMIT 512"),
    ("UPDATE t SET v = v + 1 WHERE a = {a} AND b = {b}",  # a composite key
     "SELECT * FROM `s`.t WHERE (a = 1 AND b = 10) OR (a = 21 AND b = 30) LIMIT 512"),
    ("UPDATE t SET c = 'x%', version = {b} + 1 WHERE id = {a} AND version = {b}",  # optimistic locking
     "SELECT * FROM `s`.t WHERE (id = 1 AND version = 10) OR (id = 21 AND version = 30) LIMIT 512"),
    ("UPDATE t SET c = 1 WHERE code BETWEEN '{a}' AND '{b}%'",
     "SELECT * FROM `s`.t WHERE (code BETWEEN '1' AND '10%%') OR (code BETWEEN '21' AND '30%%') LIMIT 512"),
    ("DELETE FROM t WHERE k = {a} AND deleted IS NULL AND id <= {b}",
     "SELECT * FROM `s`.t WHERE (k = 1 AND deleted IS NULL AND id <= 10) OR "
     "(k = 21 AND deleted IS NULL AND id <= 30) LIMIT 512"),
]


@pytest.mark.parametrize(("sql", "batch"), OR_BATCHES)
def test_flat_conditions_of_one_shape_are_batched_as_an_or(sql: str, batch: str) -> None:
    """Range statements and composite keys: one probe for the batch, each statement
    counted once; the range optimizer reads each term as a range of the same index.
    The LIMIT is a statement's times the statements: each reads what its own probe would."""
    b = StatementBatcher(16)
    first, _ = b.add(Statement("s", sql.format(a=100, b=200), 0, 0))  # first seen: direct
    direct = rewrite_statement_sql(sql.format(a=100, b=200), "s").probe
    assert direct is not None and [p.sql for p in first] == [direct.sql]
    for a, z in ((1, 10), (21, 30), (1, 10)):  # the same statement twice is probed once
        probes, refused = b.add(Statement("s", sql.format(a=a, b=z), 0, 0))
        assert probes == [] and refused is None
    got = b.flush()
    assert [(p.sql, p.rows, p.kind) for p in got] == [(batch, 2, "statement")]
    assert got[0].plan == first[0].plan  # one shape: explained once


@pytest.mark.parametrize("sql", [
    "UPDATE t SET c = 1 WHERE id > {a} AND id > {b}",  # open: an OR of them is one open range
    "UPDATE t SET c = 1 WHERE id <> {a} AND k <> {b}",
    "UPDATE t SET c = 1 WHERE id = {a} OR id = {b}",  # an OR already
    "UPDATE t SET c = 1 WHERE id = {a} || id = {b}",
    "UPDATE t SET c = 1 WHERE id = {a} XOR k = {b}",
    "UPDATE t SET c = 1 WHERE (id = {a} AND k = {b})",
    "UPDATE t SET c = 1 WHERE id = {a} AND k IN ({b}, 7)",
    "UPDATE t SET c = 1 WHERE id BETWEEN {a} AND {b} ORDER BY id",
    "UPDATE t SET c = 1 WHERE id BETWEEN {a} AND {b} LIMIT 5",  # its own LIMIT
    "UPDATE t SET c = 1 WHERE id = {a} AND k = ABS({b})",
])
def test_conditions_an_or_would_change_are_probed_one_by_one(sql: str) -> None:
    b = StatementBatcher(16)
    for a, z in ((100, 200), (1, 10), (21, 30)):
        probes, refused = b.add(Statement("s", sql.format(a=a, b=z), 0, 0))
        if refused is not None:
            return
        direct = rewrite_statement_sql(sql.format(a=a, b=z), "s").probe
        assert direct is not None and [p.sql for p in probes] == [direct.sql]
    assert b.flush() == []


@pytest.mark.parametrize("sql", [
    "DELETE FROM t WHERE id = 5 LIMIT 1", "DELETE FROM t WHERE id > 5",
    "UPDATE t JOIN u USING (id) SET v = 1 WHERE id = 5",
    "DELETE FROM t WHERE id = 5 ORDER BY id", "DELETE FROM t FORCE INDEX (k) WHERE k = 5",
])
def test_shapes_that_cannot_be_merged_are_probed_one_by_one(sql: str) -> None:
    b = StatementBatcher(16)
    probes, refused = b.add(Statement("s", sql, 0, 3))
    assert refused is None
    direct = rewrite_statement_sql(sql, "s").probe
    assert direct is not None
    assert [(p.sql, p.rows, p.source_time) for p in probes] == [(direct.sql, 1, 3)]


def test_one_table_probes_of_a_document_table_select_isnull_of_its_documents() -> None:
    """Not SELECT *, which sends the documents (up to 256 of them a probe) for lagd to
    count: ISNULL reads the same pages. Direct, templated and batched probes alike, once
    the table is known, and only where the probe reads its table alone."""
    known: dict[tuple[str, str], TableKeys] = {}
    tables = SimpleNamespace(seen=lambda *a: None, described=lambda s, t: known.get((s, t)),
                             wants=lambda s: True)
    b = StatementBatcher(2, tables=tables)  # type: ignore[arg-type]

    def sqls(*statements: str) -> list[str]:
        return [sent(p) for sql in statements for p in b.add(Statement("s", sql, 0, 0))[0]]

    assert sqls("UPDATE t SET c = 1 WHERE id = 1") == ["SELECT * FROM `s`.t WHERE id = 1 LIMIT 256"]
    known[("s", "t")] = TableKeys(("id", "doc"), (None,) * 2, (), frozenset({"id"}), (), "ISNULL(`doc`)")
    known[("s", "u")] = TableKeys(("id",), (None,), (), frozenset({"id"}), (), "*")
    assert sqls("UPDATE t SET c = 2 WHERE id = 2", "UPDATE t SET c = 3 WHERE id = 3",  # templated, batched
                "DELETE FROM t WHERE k > 5",  # direct (first seen)
                "DELETE FROM t WHERE k > 6",  # templated
                "UPDATE t JOIN u USING (id) SET t.c = 1 WHERE u.id = 4",  # two tables: as it was
                "DELETE FROM u WHERE id > 7") == [  # no document
        "SELECT ISNULL(`doc`) FROM `s`.t WHERE id IN (2, 3) LIMIT 512",
        "SELECT ISNULL(`doc`) FROM `s`.t WHERE k > 5 LIMIT 256",
        "SELECT ISNULL(`doc`) FROM `s`.t WHERE k > 6 LIMIT 256",
        "SELECT * FROM `s`.t JOIN `s`.u USING (id) WHERE u.id = 4 LIMIT 256",
        "SELECT * FROM `s`.u WHERE id > 7 LIMIT 256",
    ]


def test_the_default_schema_is_part_of_the_shape() -> None:
    b = StatementBatcher(1)
    for _ in range(2):
        [p1], _ = b.add(Statement("a", "DELETE FROM t WHERE id = 1", 0, 0))
        [p2], _ = b.add(Statement("b", "DELETE FROM t WHERE id = 1", 0, 0))
        assert (p1.schema, p2.schema) == ("a", "b")
    assert b.stats["shapes"] == 2


def test_excluded_schemas_are_refused_per_statement() -> None:
    b = StatementBatcher(16, wants=lambda schema: schema != "mysql")
    probes, refused = b.add(Statement("mysql", "DELETE FROM t WHERE id = 1", 0, 0))
    assert probes == [] and refused is not None and refused.skipped == "schema_excluded"


def random_literal(rng: random.Random, string: bool, old: str) -> str:
    if string:
        quote = old[0] if old[:1] in ("'", '"') else "'"
        body = []
        for _ in range(rng.randint(0, 8)):
            c = rng.choice(["a", "Z", "0", " ", "%", ";", "-", "#", "/*", "*/", "ü", "日", "\\\\", "\\n",
                            quote * 2, "\\" + quote, "`", "?", "@x", "${"])
            body.append(c)
        return quote + "".join(body) + quote
    if "," in old:  # an IN list keeps being a list
        return ", ".join(str(rng.randint(-10**6, 10**6)) for _ in range(rng.randint(1, 6)))
    if old.lower().startswith(("0x", "x'")):
        return rng.choice([f"0x{rng.getrandbits(24):x}", f"x'{rng.getrandbits(16):04x}'"])
    if old.lower().startswith(("0b", "b'")):
        return rng.choice([f"0b{rng.getrandbits(5):b}", f"b'{rng.getrandbits(5):b}'"])
    # Of the same kind as the original: the statements in a log ran on the source, so a
    # literal where MySQL takes only an unsigned integer (DECIMAL(10, 2), LIMIT) stays one.
    sign = "-" if old.startswith("-") else ""
    if any(c in old for c in ".eE"):
        return sign + rng.choice([f"{rng.random() * 1000:.4f}", "1e3", ".5", f"{rng.randint(1, 9)}.0e-2"])
    return sign + str(rng.randint(0 if not sign else 1, 10**9))


@pytest.mark.parametrize(("sql", "select"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_templates_match_the_sqlglot_path_for_random_literals(sql: str, select: str) -> None:
    """Property: whatever the literals, binding them into the shape's template gives the
    text the sqlglot path gives for the statement itself."""
    cut = fingerprint(sql)
    assert cut is not None
    shape, lits, strs = cut
    t = build_template(shape, lits, strs, sql, "s")
    assert t.verified and t.refusal is None
    rng = random.Random(sql)
    pieces = shape.split("\0")
    for _ in range(20):
        new = tuple(random_literal(rng, s, old) for s, old in zip(strs, lits, strict=True))
        variant = "".join(p + v for p, v in zip(pieces, [*new, ""], strict=True))
        again = fingerprint(variant)
        if again is None or again[0] != shape:
            continue  # e.g. a negative number where a minus sign already stood: another shape
        direct = rewrite_statement_sql(variant, "s").probe
        assert direct is not None, variant
        assert t.bind(again[1]) == direct.sql, variant


@pytest.mark.parametrize(("sql", "skipped"), [r[1:] for r in REFUSED if "\udcff" not in r[1]],
                         ids=[r[0] for r in REFUSED if "\udcff" not in r[1]])
def test_refusals_hold_for_random_literals(sql: str, skipped: str) -> None:
    cut = fingerprint(sql)
    assert cut is not None
    shape, lits, strs = cut
    t = build_template(shape, lits, strs, sql, "s")
    assert t.refusal is not None and t.refusal.skipped == skipped
    rng = random.Random(sql)
    pieces = shape.split("\0")
    for _ in range(10):
        new = tuple(random_literal(rng, s, old) for s, old in zip(strs, lits, strict=True))
        variant = "".join(p + v for p, v in zip(pieces, [*new, ""], strict=True))
        again = fingerprint(variant)
        if again is None or again[0] != shape:
            continue
        assert rewrite_statement_sql(variant, "s").skipped == skipped, variant


def test_the_scanners_prefilter_never_changes_a_match():
    # The lookahead only skips positions where no alternative can start: the
    # scanner without it must find the same literals, comments and identifiers.
    from lagd.prefetch import fingerprint as fp  # noqa: PLC0415 - its private scanner
    head = fp._SCAN.pattern.index("(?:")
    bare = re.compile(fp._SCAN.pattern[head + 3 : -1], re.S)
    alphabet = [*"'\"`/*-#xXbB0123456789.eE+ \n\t\\abc,()=<>@$_", "0x", "0b", "x'", "b'", "/*", "*/",
                "--", "-- ", "1e5", "IN ("]
    rng = random.Random(5)
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert [(m.span(), m.lastgroup) for m in fp._SCAN.finditer(s)] == \
            [(m.span(), m.lastgroup) for m in bare.finditer(s)], s


def test_each_statement_probed_is_reported_with_its_set_list() -> None:
    seen: list[tuple[str, str, frozenset[str], bool]] = []
    tables = SimpleNamespace(seen=lambda s, t, c, n, d: seen.extend([(s, t, c, d)] * n),
                             described=lambda s, t: None)
    b = StatementBatcher(16, lambda schema: schema != "x", tables)  # type: ignore[arg-type]
    for i in range(3):  # direct, then templated twice
        b.add(Statement("s", f"UPDATE t SET k = {i}, c = 'x' WHERE id = {i}", 0, 0))
    for i in range(3):  # a DELETE, either way, is reported as one
        b.add(Statement("s", f"DELETE FROM d.u WHERE id = {i}", 0, 0))
    b.add(Statement("s", "UPDATE t SET k = 1 WHERE id = RAND()", 0, 0))  # refused: not reported
    b.add(Statement("s", "UPDATE x.t SET k = 1 WHERE id = 1", 0, 0))  # schema excluded: likewise
    assert seen == [("s", "t", frozenset({"k", "c"}), False)] * 3 + [("d", "u", frozenset(), True)] * 3
    assert b.stats["templated"] == 4


# The C scanner (_scan.c) against the regular expression: the same cut, or it leaves the
# text to the expression (NotImplemented). Without the accelerator built these skip.
needs_c = pytest.mark.skipif(SCAN_C is None, reason="C accelerator not built")
SOUP = [*"'\"`/*-#xXbB0123456789.eE+ \n\t\r\x0b\x1c\\abcfG,()=<>@$_;", "0x", "0b", "x'", "X'", "b'",
        "B'", "/*", "*/", "--", "-- ", "/*!", "/*M!", "/*+", "1e5", "IN (",
        "in(", " IN ", "''", "\\'", "-5", "1.", ".5", "é"]


@needs_c
@pytest.mark.parametrize("sql", [
    "UPDATE t SET c = c + 1 WHERE id = 17", "DELETE FROM t WHERE id IN (1, -2,3)",
    "INSERT IGNORE INTO sbtest1 VALUES (12, 7, 'ins', 'ins')", "DELETE FROM t WHERE a = 1--2",
    "DELETE FROM t WHERE h = 0x1F AND b = x'0A' AND c = b'101' AND d = 0b11",
    "DELETE FROM t1 WHERE col2 = 1.5e3 /* 7 */ AND c = .5 -- 8\n# 9",
    "DELETE FROM t WHERE id IN (1, 2, 'x')", "DELETE FROM t WHERE id IN ('a', 'b''c')",
    *(a[1] for a in ACCEPTED if a[1].isascii()),
])
def test_the_c_scanner_takes_common_statements_and_cuts_them_as_the_expression_does(sql: str) -> None:
    assert SCAN_C is not None
    assert SCAN_C(sql) == fingerprint_py(sql)


@needs_c
@pytest.mark.parametrize("sql", [r[1] for r in REFUSED])
def test_the_c_scanner_cuts_refused_statements_as_the_expression_does_or_leaves_them(sql: str) -> None:
    assert SCAN_C is not None
    got = SCAN_C(sql)
    assert got is NotImplemented or got == fingerprint_py(sql)


@needs_c
def test_the_c_scanner_cuts_random_text_as_the_expression_does_or_leaves_it() -> None:
    assert SCAN_C is not None
    rng = random.Random(11)
    taken = 0
    for _ in range(40000):
        s = "".join(rng.choice(SOUP) for _ in range(rng.randint(0, 24)))
        got = SCAN_C(s)
        if got is NotImplemented:
            assert not s.isascii() or any(q in s for q in "'\"`") or any(c in s for c in "0123456789."), s
            continue
        taken += 1
        assert got == fingerprint_py(s), s
    assert taken > 10000  # it decides most of them itself


@needs_c
@pytest.mark.parametrize("sql", ["a = 'abc", "a = `abc", "a = 1.5e", "a = 0x1G", "a = 2abc", "a = 'é'",
                                 "a = '\\"])
def test_the_c_scanner_leaves_what_needs_backtracking_to_the_expression(sql: str) -> None:
    assert SCAN_C is not None
    assert SCAN_C(sql) is NotImplemented
    fingerprint(sql)  # the expression decides


def test_a_nul_is_never_cut() -> None:
    assert fingerprint("DELETE FROM t WHERE a = '\0'") is None


def sizes_of(b: StatementBatcher, sql: str, n: int) -> list[int]:
    """The statements in each probe ``n`` statements ``sql.format(i, i + 39)`` make, the rest flushed."""
    got = []
    for i in range(n):
        got += b.add(Statement("s", sql.format(i, i + 39), 0, 0))[0]
    return [p.rows for p in got + b.flush()]


def test_a_shapes_batches_shrink_when_its_probes_are_slow_and_grow_back() -> None:
    """16 many-row statements a probe ran into the statement timeout (update_k_range_stmt):
    a shape's batch halves at a timeout or a slow answer, and grows by one a fast one."""
    b = StatementBatcher(16)

    def batch_sizes(n: int) -> list[int]:
        return sizes_of(b, "UPDATE t SET c = 1 WHERE k BETWEEN {} AND {}", n)

    first = batch_sizes(33)
    assert first == [1, 16, 16]  # the first goes the direct way
    plan = b._templates[next(iter(b._templates))].plan
    other = "s\0UPDATE t SET c = ? WHERE id = ?"
    b.answered(plan, "timeout", 0.5)
    b.answered(plan, "ok", 0.3)
    b.answered(other, "timeout", 0.5)  # another shape's probes size its own batches
    assert batch_sizes(8) == [4, 4]
    for _ in range(3):
        b.answered(plan, "ok", 0.01)
    assert batch_sizes(14) == [7, 7]
    for i in range(5000):  # one-off texts, probed directly: they size nothing, and clear nothing
        b.answered(f"s\0DELETE FROM t WHERE id = {i}", "timeout", 0.5)
    assert batch_sizes(14) == [7, 7]


def test_a_shapes_batches_start_at_the_row_cap_and_grow_to_twice_it_by_fast_answers() -> None:
    """A probe's round trip is most of what a statement costs lagd: a shape whose probes
    answer fast takes up to twice the row probes' keys (control.STATEMENT_KEYS_FACTOR)."""
    b = StatementBatcher(16)
    by_id = "UPDATE t SET c = 1 WHERE id = {}"
    assert sizes_of(b, by_id, 33) == [1, 16, 16]  # the first goes the direct way
    plan = b._templates[next(iter(b._templates))].plan
    for _ in range(40):
        b.answered(plan, "ok", 0.002)
    assert sizes_of(b, by_id, 64) == [32, 32]
    b.answered(plan, "ok", 0.2)  # a slow answer halves it
    assert sizes_of(b, by_id, 32) == [16, 16]


def test_a_shapes_probes_out_are_counted_to_every_answer_and_one_offs_forget_the_oldest() -> None:
    f: ShapeFlights[int] = ShapeFlights(limit=100, most=3)
    shape = "s\0UPDATE t SET c = ? WHERE k BETWEEN ? AND ?"
    assert f.offer(shape, 0)  # a new shape: one out
    f.sent(shape)
    assert not any(f.offer(shape, i) for i in (1, 2, 3, 4))  # held, however many: none dropped
    assert f.answered(shape, "dropped") == ([1], [])  # nothing known of its cost: one out still
    f.sent(shape)
    assert f.answered(shape, "ok") == ([2, 3], [])  # it answered: two out
    f.sent(shape)
    f.sent(shape)
    assert not f.offer(shape, 5)
    assert f.answered(shape, "ok") == ([4, 5], [])  # three out, in the order read
    f.sent(shape)
    f.sent(shape)
    assert not any(f.offer(shape, i) for i in (7, 8))
    assert f.answered(shape, "timeout") == ([], [7, 8])  # one out, and 2 still are
    assert not f.offer(shape, 9) and f.clear() == [9] and f.clear() == []
    assert f.answered(shape, "ok") == ([], [])  # 2 out now, none waiting
    assert f.answered(shape, "ok") == ([], [])
    for i in range(1000):  # one-off shapes answered while the shape runs and answers
        f.sent(f"s\0DELETE FROM t WHERE id = 1 /* {i} */")
        f.answered(f"s\0DELETE FROM t WHERE id = 1 /* {i} */", "ok")
        if i % 50 == 0:
            f.sent(shape)
            f.answered(shape, "ok")
    assert f._window[shape] == 3 and len(f._window) == 100 and not f._out


def test_a_batch_of_integer_values_narrowed_to_a_byte_a_row_is_a_prepared_probe() -> None:
    """Its rows are read whole (the pool's prepared path), so only a probe that selects a
    byte a row, bounded by its LIMIT; its list padded to a power of two (a few texts a
    shape for the connections' caches of prepared statements), the LIMIT with it."""
    known: dict[tuple[str, str], TableKeys] = {}
    tables = SimpleNamespace(seen=lambda *a: None, described=lambda s, t: known.get((s, t)),
                             wants=lambda s: True)
    b = StatementBatcher(4, tables=tables)  # type: ignore[arg-type]

    def probes(*statements: str) -> list[tuple[str, tuple[object, ...], int]]:
        out = [p for sql in statements for p in b.add(Statement("s", sql, 0, 0))[0]] + b.flush()
        return [(p.sql, p.params, p.rows) for p in out]

    b.add(Statement("s", "UPDATE t SET c = 0 WHERE id = 0", 0, 0))  # a shape's first: direct
    b.add(Statement("s", "UPDATE t SET c = 'x' WHERE s = 'x'", 0, 0))
    # The table not known yet: SELECT *, whose rows the pool streams: the values in the text.
    assert probes("UPDATE t SET c = 1 WHERE id = 1") == [
        ("SELECT * FROM `s`.t WHERE id IN (1) LIMIT 256", (), 1)]
    known[("s", "t")] = TableKeys(("id", "c", "s"), (None,) * 3, (), frozenset({"id"}), (), "ISNULL(`c`)")
    assert probes("UPDATE t SET c = 2 WHERE id = 2", "UPDATE t SET c = 3 WHERE id = -3",
                  "UPDATE t SET c = 4 WHERE id = 4") == [
        ("SELECT ISNULL(`c`) FROM `s`.t WHERE id IN (%s, %s, %s, %s) LIMIT 1024", (2, -3, 4, 4), 3)]
    # Strings, decimals, numbers over 64 bits: in the text, as written.
    assert probes("UPDATE t SET c = 1 WHERE s = 'a'", "UPDATE t SET c = 2 WHERE s = 'b'") == [
        ("SELECT ISNULL(`c`) FROM `s`.t WHERE s IN ('a', 'b') LIMIT 512", (), 2)]
    assert probes("UPDATE t SET c = 2 WHERE id = 1.5",
                  "UPDATE t SET c = 2 WHERE id = 99999999999999999999") == [
        ("SELECT ISNULL(`c`) FROM `s`.t WHERE id IN (1.5, 99999999999999999999) LIMIT 512", (), 2)]


def test_a_percent_sign_in_a_narrowed_columns_name_is_escaped_for_the_driver() -> None:
    keys = TableKeys(("id", "a%s"), (None,) * 2, (), frozenset({"id"}), (), "ISNULL(`a%s`)")
    known = {("s", "t"): keys}
    tables = SimpleNamespace(seen=lambda *a: None, described=lambda s, t: known.get((s, t)),
                             wants=lambda s: True)
    b = StatementBatcher(2, tables=tables)  # type: ignore[arg-type]
    b.add(Statement("s", "UPDATE t SET c = 0 WHERE id = 0", 0, 0))
    out = [p for sql in ("UPDATE t SET c = 1 WHERE id = 1", "UPDATE t SET c = 2 WHERE id = 2")
           for p in b.add(Statement("s", sql, 0, 0))[0]]
    assert all(p.params for p in out)
    assert [sent(p) for p in out] == ["SELECT ISNULL(`a%s`) FROM `s`.t WHERE id IN (1, 2) LIMIT 512"]
    first = b.add(Statement("s", "DELETE FROM t WHERE id = 3", 0, 0))[0]  # direct: a text probe
    assert [p.sql.replace("%%", "%") for p in first] == [
        "SELECT ISNULL(`a%s`) FROM `s`.t WHERE id = 3 LIMIT 256"]
