"""Row-change probes find their rows on every column type InnoDB indexes (sandbox).

test_rewrite_sandbox covers the common types; this is the rest of what a replica
in the field may hold: the edges of each integer width, FLOAT and DOUBLE keys,
fixed CHAR and BINARY (padding), latin1 and utf8mb3 text, case-insensitive
collations, ENUM, SET, BIT, YEAR, negative TIME, fractional DATETIME and
TIMESTAMP, and the table shapes that change what a row image holds: generated
columns (virtual and stored), a descending index, a partitioned table, an
invisible column. Every row is deleted on the source and logged as rows; each
probe must find every key it carries on the replica, through its own index. A
probe that misses is a read the SQL thread still makes (and a page lagd read
for nothing); a probe the server rejects is an error in its log.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest

from lagd.prefetch.inserts import table_keys
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import RelayLogReader
from lagd.sandbox.pair import Sandbox
from tests.integration.test_relaylog_sandbox import resolver_for
from tests.integration.test_rewrite_sandbox import (
    explain,
    probe_conn,
    probes_of,
    reader_at_sql_thread,
    run,
    write,
)

# (table suffix, column type, SQL literals of the values the test deletes)
TYPES: list[tuple[str, str, list[str]]] = [
    ("tinyint", "TINYINT", ["-128", "-1", "0", "127"]),
    ("usmallint", "SMALLINT UNSIGNED", ["0", "65535"]),
    ("mediumint", "MEDIUMINT", ["-8388608", "-1", "8388607"]),
    ("umediumint", "MEDIUMINT UNSIGNED", ["16777215", "1"]),
    ("int", "INT", ["-2147483648", "2147483647"]),
    ("bigint", "BIGINT", ["-9223372036854775808", "9223372036854775807", "-1"]),
    ("float", "FLOAT", ["0.1", "-1.5", "3.4e38", "1e-30"]),
    ("double", "DOUBLE", ["0.1", "-2.5e-300", "1e308", "1.0000000000000002"]),
    ("decimal", "DECIMAL(30,10)", ["-12345678901234567890.0123456789", "0.0000000001", "0", "-0.5"]),
    ("decimal0", "DECIMAL(5,0)", ["-99999", "99999"]),
    ("char_latin1", "CHAR(10) CHARACTER SET latin1", ["'é'", "'a  '", "''", "'ÿþ'"]),
    ("varchar_ci", "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
     ["'Abc'", "'ß'", "'😀'", "'x '"]),
    ("varchar_mb3", "VARCHAR(20) CHARACTER SET utf8mb3", ["'ü'", "'日本'"]),
    ("varchar_latin1", "VARCHAR(300) CHARACTER SET latin1", ["'café'", "CONCAT(REPEAT('z', 290), 'é')"]),
    ("varbinary", "VARBINARY(10)", ["x'00'", "x'ff00'", "''", "x'27'"]),
    ("binary", "BINARY(4)", ["x'01'", "x'00000000'", "x'ffffffff'"]),
    ("enum", "ENUM('a','b','c')", ["'a'", "'c'"]),
    ("set", "SET('x','y','z')", ["'x,z'", "''", "'y'"]),
    ("bit10", "BIT(10)", ["b'1010101010'", "b'0'", "b'1'"]),
    ("bit64", "BIT(64)", ["0xFFFFFFFFFFFFFFFF", "0x8000000000000000"]),
    ("year", "YEAR", ["1901", "2155", "0"]),
    ("date", "DATE", ["'1000-01-01'", "'9999-12-31'"]),
    ("time3", "TIME(3)", ["'-838:59:59.000'", "'12:34:56.789'", "'-00:00:01.5'"]),
    ("time", "TIME", ["'00:00:00'", "'838:59:59'"]),
    ("datetime6", "DATETIME(6)", ["'1000-01-01 00:00:00.000001'", "'9999-12-31 23:59:59.999999'"]),
    ("datetime", "DATETIME", ["'2024-02-29 12:00:00'"]),
    ("timestamp6", "TIMESTAMP(6)", ["'1970-01-01 00:00:01.000001'", "'2038-01-19 03:14:07.999999'"]),
    ("timestamp", "TIMESTAMP", ["'2024-10-27 01:30:00'"]),
]
FILL = 200  # rows the test keeps: on a few rows the optimizer scans instead


def _type_tables() -> list[str]:
    return [f"CREATE TABLE z_{name} (pk {typ} NOT NULL, id INT NOT NULL, k {typ} NULL,"
            " PRIMARY KEY (pk, id), KEY k_idx (k))" for name, typ, _ in TYPES]


SHAPES = [
    # generated columns: the row image holds the stored one; a virtual one is
    # computed by the server (MariaDB logs it in a FULL image, MySQL does too)
    "CREATE TABLE z_gen (id INT NOT NULL PRIMARY KEY, v INT NOT NULL, g INT AS (v * 2) VIRTUAL,"
    " s VARCHAR(12) AS (CONCAT('s', v)) STORED, KEY g_idx (g), KEY s_idx (s))",
    "CREATE TABLE z_desc (id INT NOT NULL, k INT NOT NULL, PRIMARY KEY (id DESC), KEY k_desc (k DESC, id))",
    "CREATE TABLE z_part (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, KEY k_idx (k))"
    " PARTITION BY HASH (id) PARTITIONS 4",
    "CREATE TABLE z_inv (id INT NOT NULL PRIMARY KEY, h INT INVISIBLE, k INT NOT NULL, KEY h_idx (h))",
    "CREATE TABLE z_json (id INT NOT NULL PRIMARY KEY, j JSON NOT NULL,"
    " a INT AS (JSON_VALUE(j, '$.a')) VIRTUAL, KEY a_idx (a))",
    "CREATE TABLE z_text (id INT NOT NULL PRIMARY KEY, t TEXT NOT NULL, b BLOB NOT NULL,"
    " KEY t_pfx (t(8)), KEY b_pfx (b(4)))",
    # InnoDB clusters on the first NOT NULL unique key where there is no primary key
    "CREATE TABLE z_nopk (id INT NOT NULL, u VARCHAR(12) CHARACTER SET latin1 NOT NULL, k INT NOT NULL,"
    " UNIQUE KEY u_idx (u, id), KEY k_idx (k))",
    "CREATE TABLE z_pkpfx (id INT NOT NULL, t VARCHAR(40) NOT NULL, PRIMARY KEY (t(30)), KEY id_idx (id))",
]
SHAPE_TABLES = ("z_gen", "z_desc", "z_part", "z_inv", "z_json", "z_text", "z_nopk", "z_pkpfx")


def _shape_rows(ids: range) -> list[str]:
    return [
        *(f"INSERT INTO z_gen (id, v) VALUES ({i}, {i * 3})" for i in ids),
        *(f"INSERT INTO z_desc VALUES ({i}, {i % 17})" for i in ids),
        *(f"INSERT INTO z_part VALUES ({i}, {i % 13})" for i in ids),
        *(f"INSERT INTO z_inv (id, h, k) VALUES ({i}, {i * 5}, {i})" for i in ids),
        *(f"INSERT INTO z_json (id, j) VALUES ({i}, '{{\"a\": {i}, \"b\": \"x{i}\"}}')" for i in ids),
        *(f"INSERT INTO z_text VALUES ({i}, CONCAT(REPEAT('t', 20), '{i}'), CONCAT(x'00ff', '{i}'))"
          for i in ids),
        *(f"INSERT INTO z_nopk VALUES ({i}, 'ü-{i}', {i % 7})" for i in ids),
        *(f"INSERT INTO z_pkpfx VALUES ({i}, CONCAT(REPEAT('p', 24), LPAD({i}, 6, '0'), 'tail'))"
          for i in ids),
    ]


TARGETS = range(1, 7)  # the shape tables' rows the test deletes
LOOKUPS = ("const", "eq_ref", "ref", "range")  # never a scan of the index


@pytest.fixture
def zoo(sandbox: Sandbox, schema: str) -> Iterator[tuple[Sandbox, str, RelayLogReader]]:
    with sandbox.source.connect(db=schema) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00', sql_mode = ''")
        for stmt in _type_tables() + SHAPES:
            cur.execute(stmt)
        for name, _typ, values in TYPES:
            rows = [f"({v}, {n}, {v})" for n, v in enumerate(values, 1)]
            rows += [f"({values[n % len(values)]}, {1000 + n}, {values[n % len(values)]})"
                     for n in range(FILL)]
            cur.execute(f"INSERT INTO z_{name} VALUES {', '.join(rows)}")
        for stmt in _shape_rows(range(1, 1 + FILL)):
            cur.execute(stmt)
        for name, _typ, _values in TYPES:
            cur.execute(f"ANALYZE TABLE z_{name}")
        for table in SHAPE_TABLES:
            cur.execute(f"ANALYZE TABLE {table}")
    with reader_at_sql_thread(sandbox) as reader:
        yield sandbox, schema, reader


def test_row_probes_find_every_key_on_every_type(zoo: tuple[Sandbox, str, RelayLogReader]) -> None:
    sb, schema, reader = zoo
    deletes = [f"DELETE FROM z_{name} WHERE id BETWEEN 1 AND {len(values)}" for name, _t, values in TYPES]
    deletes += [f"DELETE FROM {t} WHERE id BETWEEN {TARGETS.start} AND {TARGETS.stop - 1}"
                for t in SHAPE_TABLES]
    write(sb, schema, ["SET SESSION time_zone = '+00:00'", "SET SESSION sql_mode = ''", *deletes])
    conn = probe_conn(sb)
    batcher = ProbeBatcher(max_keys=4, near_span=0)
    batcher.purge_follows = False  # as inside a big transaction: every index's entries probed
    try:
        probes = probes_of(reader, batcher, schema)
        got: Counter[tuple[str, str]] = Counter()
        missed: list[tuple[str, str | None, str, tuple[object, ...]]] = []
        scans: list[tuple[str, str | None, str, tuple[object, ...]]] = []
        for p in probes:
            got[p.table, p.index or ""] += p.rows
            found = run(conn, p)
            if found != p.rows:
                missed.append((p.table, p.index, p.sql, p.params))
            plan = explain(conn, p)
            if plan["key"] != p.index or plan["type"] not in LOOKUPS:
                scans.append((p.table, p.index, plan["type"], p.params))
        assert not scans, "\n".join(map(str, scans))
        assert not missed, "\n".join(f"{t} {i} {p}" for t, i, _s, p in missed)
        expected = {(f"z_{name}", idx): len(values) for name, _t, values in TYPES
                    for idx in ("PRIMARY", "k_idx")}
        n = len(TARGETS)
        expected |= {("z_gen", "PRIMARY"): n, ("z_gen", "g_idx"): n, ("z_gen", "s_idx"): n,
                     ("z_desc", "PRIMARY"): n, ("z_desc", "k_desc"): n,
                     ("z_part", "PRIMARY"): n, ("z_part", "k_idx"): n,
                     ("z_inv", "PRIMARY"): n, ("z_inv", "h_idx"): n,
                     ("z_json", "PRIMARY"): n, ("z_json", "a_idx"): n,
                     ("z_text", "PRIMARY"): n, ("z_text", "t_pfx"): n, ("z_text", "b_pfx"): n,
                     ("z_nopk", "u_idx"): n, ("z_nopk", "k_idx"): n,
                     ("z_pkpfx", "PRIMARY"): n, ("z_pkpfx", "id_idx"): n}
        assert dict(got) == expected
        assert not batcher.skipped, batcher.skipped
    finally:
        conn.close()


# A foreign key over a latin1 column and an INT: its check reads the parent's
# two-column primary key, probed as a row constructor, from row images and from
# statements' literals.
PARENT = ("CREATE TABLE z_par (code VARCHAR(10) CHARACTER SET latin1 NOT NULL, n INT NOT NULL,"
          " PRIMARY KEY (code, n))")
CHILD = ("CREATE TABLE z_chi (id INT NOT NULL PRIMARY KEY, code VARCHAR(10) CHARACTER SET latin1 NOT NULL,"
         " n INT NOT NULL, CONSTRAINT to_par FOREIGN KEY (code, n) REFERENCES z_par (code, n))")
CODES = ["é", "ÿþ", "a", "Ñandú"]


@pytest.mark.parametrize("binlog_format", ["ROW", "STATEMENT"])
def test_parent_probes_find_latin1_keys(sandbox: Sandbox, schema: str, binlog_format: str) -> None:
    sb = sandbox
    with sb.source.connect(db=schema) as conn, conn.cursor() as cur:
        cur.execute(PARENT)
        cur.execute(CHILD)
        cur.executemany("INSERT INTO z_par VALUES (%s, %s)",
                        [(code, n) for code in [*CODES, *(f"f{i}" for i in range(FILL))] for n in (1, 2)])
        cur.execute("ANALYZE TABLE z_par")
    resolver = resolver_for(sb)
    with reader_at_sql_thread(sb) as reader, contextlib.closing(probe_conn(sb)) as conn:
        batcher = ProbeBatcher(max_keys=4, near_span=0)
        for table in ("z_par", "z_chi"):  # what the engine looks up for statements and parents
            described = resolver.describe(schema, table)
            assert described is not None
            batcher.learn_table(schema, table, table_keys(*described))
        # The first statement of a shape goes the direct way, where an INSERT gets no probe.
        write(sb, schema, [f"INSERT INTO z_chi VALUES ({i}, '{code}', {1 + i % 2})"
                           for i, code in enumerate(["f1", *CODES])], binlog_format)
        parents = [p for p in probes_of(reader, batcher, schema) if p.table == "z_par"]
        assert sum(p.rows for p in parents) == len(CODES) + (binlog_format == "ROW"), parents
        for p in parents:
            assert "CONVERT(" in p.sql, p.sql
            assert run(conn, p) == p.rows, (p.sql, p.params)
            plan = explain(conn, p)
            assert plan["key"] == "PRIMARY" and plan["type"] in LOOKUPS, (p, plan)
