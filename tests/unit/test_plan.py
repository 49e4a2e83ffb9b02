"""lagd.mysql.plan: which EXPLAIN rows make a statement probe a whole-table read.

The MariaDB rows were recorded from MariaDB 10.11.19 (a 20,000-row table `pt` with a
primary key, an index on `k` and a unique key on `u`; unindexed `c`). MySQL 8's
traditional EXPLAIN has the same access types and two more columns (partitions,
filtered): its rows below follow that documented layout; no MySQL server ran here.
"""

from __future__ import annotations

import pytest

from lagd.mysql.plan import SCAN_ROWS, explain_sql, full_scan

MARIADB = ("id", "select_type", "table", "type", "possible_keys", "key", "key_len", "ref", "rows", "Extra")
MYSQL = ("id", "select_type", "table", "partitions", "type", "possible_keys", "key", "key_len", "ref",
         "rows", "filtered", "Extra")


def maria(table: object, access: object, rows: object, extra: str = "") -> tuple[object, ...]:
    return (1, "SIMPLE", table, access, None, None, None, None, rows, extra)


def mysql(table: str, access: str, rows: int) -> tuple[object, ...]:
    return (1, "SIMPLE", table, None, access, None, None, None, None, rows, 100.0, "")


@pytest.mark.parametrize(("columns", "rows", "scans"), [
    # WHERE c IN ('a','b') LIMIT 256: c has no index
    (MARIADB, [maria("pt", "ALL", 20230, "Using where")],
     "all of pt (20,230 rows estimated, access type ALL)"),
    # WHERE id IN (1,2,3): the primary key
    (MARIADB, [maria("pt", "range", 3, "Using where")], None),
    (MARIADB, [maria("pt", "ref", 200)], None),  # WHERE k IN (5)
    (MARIADB, [maria("pt", "const", 1)], None),  # WHERE u = '5'
    # WHERE id < 100000 LIMIT 256: a long range, bounded by the LIMIT
    (MARIADB, [maria("pt", "range", 10115, "Using where")], None),
    # ORDER BY c LIMIT 256: every row read to sort
    (MARIADB, [maria("pt", "ALL", 20230, "Using filesort")], "all of pt"),
    # a join whose second table is scanned
    (MARIADB, [maria("a", "const", 1), maria("b", "ALL", 20230, "Using where")], "all of b"),
    # Impossible WHERE: no table read at all
    (MARIADB, [maria(None, None, None, "Impossible WHERE noticed after reading const tables")], None),
    # a small table read whole: a few pages, left to the gate
    (MARIADB, [maria("pt", "ALL", SCAN_ROWS - 1)], None),
    (MARIADB, [maria("pt", "ALL", SCAN_ROWS)], "all of pt"),
    (MARIADB, [maria("pt", "index", 50000)], "a whole index of pt"),
    (MARIADB, [maria("pt", "hash_ALL", 50000)], "all of pt"),
    # no estimate: a scan of unknown size is a scan
    (MARIADB, [maria("pt", "ALL", None)], "rows not estimated"),
    (MARIADB, [maria(b"pt", b"ALL", 20230)], "all of pt"),  # bytes from a binary result
    (MYSQL, [mysql("pt", "ALL", 20230)], "all of pt"),
    (MYSQL, [mysql("pt", "eq_ref", 1)], None),
    # explain_format=TREE answered anyway: the plan cannot be read
    (("EXPLAIN",), [("-> Table scan on pt",)], "without type and rows"),
])
def test_full_scan(columns: tuple[str, ...], rows: list[tuple[object, ...]], scans: str | None) -> None:
    why = full_scan(columns, rows)
    if scans is None:
        assert why is None
    else:
        assert why is not None and scans in why


def test_mysql_is_asked_for_the_tabular_format_by_name() -> None:
    assert explain_sql("SELECT 1", mariadb=True) == "EXPLAIN SELECT 1"
    assert explain_sql("SELECT 1", mariadb=False) == "EXPLAIN FORMAT=TRADITIONAL SELECT 1"
