"""The look-ahead: which transactions are big, how they are classified, and
what happens as the SQL thread applies them."""

from __future__ import annotations

from typing import Any

import pytest

from lagd.advisor.lookahead import (
    Lookahead,
    LookaheadConfig,
    TxKind,
    classify,
    classify_statement,
    load_data_target,
)
from lagd.relaylog import (
    Column,
    CorruptEvent,
    Index,
    LoadData,
    RelayPosition,
    Resynced,
    RowChange,
    RowKind,
    RowsQuery,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)


def table(schema: str = "shop", name: str = "orders") -> TableInfo:
    pk = Index("PRIMARY", (0,), unique=True, primary=True)
    cols = (Column("id", "LONG", False), Column("qty", "LONG", True), Column("note", "VARCHAR", True))
    return TableInfo(schema, name, cols, pk, (pk,), (0,), "table_map")


ORDERS = table()
ITEMS = table(name="items")


def start(offset: int, file: str = "relay-bin.000001", size: int | None = None, gtid: str = "0-1-1"):
    return TransactionStart(
        file, offset, "src-bin.000001", offset, gtid, 1700000000.0, 1700000000, 1, size=size
    )


def end(
    offset: int,
    *,
    file: str = "relay-bin.000001",
    size: int = 1000,
    rows: int = 0,
    row_events: int = 0,
    statements: int = 1,
    tables: frozenset[str] = frozenset(),
    gtid: str = "0-1-1",
) -> TransactionEnd:
    return TransactionEnd(
        file, offset, "src-bin.000001", offset, gtid, True, 7, size, rows, row_events, statements, tables
    )


def rows(n: int, kind: RowKind = RowKind.INSERT, tbl: TableInfo = ORDERS) -> list[RowChange]:
    return [
        RowChange(
            tbl, kind, None if kind is RowKind.INSERT else (i,), None if kind is RowKind.DELETE else (i,)
        )
        for i in range(n)
    ]


def row_trx(
    at: int,
    n: int,
    *,
    kind: RowKind = RowKind.INSERT,
    text: str | None = None,
    size: int | None = None,
    tbl: TableInfo = ORDERS,
    statements: int = 1,
    file: str = "relay-bin.000001",
) -> list[Any]:
    out: list[Any] = [start(at, file=file, size=size, gtid=f"0-1-{at}")]
    if text is not None:
        out.append(RowsQuery(text))
    out += rows(n, kind, tbl)
    counted = n * 25
    out.append(
        end(
            at + counted,
            file=file,
            size=counted,
            rows=n,
            row_events=max(1, n // 300),
            statements=statements,
            tables=frozenset({tbl.qualified}),
            gtid=f"0-1-{at}",
        )
    )
    return out


SMALL = LookaheadConfig(big_bytes=10_000, big_rows=100, big_exec_seconds=5, max_kept=3)


# -- the statement matcher ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param("LOAD DATA LOCAL INFILE '/x.csv' INTO TABLE t", TxKind.LOAD_DATA, id="load-local"),
        pytest.param("load data infile 'x' into table t", TxKind.LOAD_DATA, id="load-lowercase"),
        pytest.param(
            "/* import job 7 */ LOAD XML INFILE 'x' INTO TABLE t", TxKind.LOAD_DATA, id="load-xml-comment"
        ),
        pytest.param(
            "-- nightly\n  LOAD DATA INFILE 'x' INTO TABLE t", TxKind.LOAD_DATA, id="load-line-comment"
        ),
        pytest.param("INSERT INTO t SELECT * FROM s", TxKind.INSERT_SELECT, id="insert-select"),
        pytest.param(
            "INSERT IGNORE INTO `db`.`t` (a, b) SELECT a, b FROM s",
            TxKind.INSERT_SELECT,
            id="insert-ignore-collist-select",
        ),
        pytest.param(
            "INSERT INTO t (id, value) SELECT id, v FROM s", TxKind.INSERT_SELECT, id="column-named-value"
        ),
        pytest.param("INSERT INTO t (SELECT * FROM s)", TxKind.INSERT_SELECT, id="parenthesised-select"),
        pytest.param("INSERT INTO t TABLE s", TxKind.INSERT_SELECT, id="insert-table"),
        pytest.param(
            "INSERT INTO t WITH c AS (SELECT 1) SELECT * FROM c", TxKind.INSERT_SELECT, id="insert-with"
        ),
        pytest.param(
            "REPLACE LOW_PRIORITY INTO t PARTITION (p0) SELECT * FROM s",
            TxKind.INSERT_SELECT,
            id="replace-partition-select",
        ),
        pytest.param("CREATE TABLE t2 AS SELECT * FROM t", TxKind.INSERT_SELECT, id="ctas"),
        pytest.param("INSERT INTO t VALUES (1, 'a'), (2, 'b')", TxKind.BULK_INSERT, id="insert-values"),
        pytest.param("insert into t(a,b) value (1,2)", TxKind.BULK_INSERT, id="insert-value-lowercase"),
        pytest.param(
            "INSERT INTO t (a, `select`) VALUES (1, 2)", TxKind.BULK_INSERT, id="column-named-select"
        ),
        pytest.param("INSERT INTO t SET a = 1", TxKind.BULK_INSERT, id="insert-set"),
        pytest.param("REPLACE INTO t VALUES (1)", TxKind.BULK_INSERT, id="replace-values"),
        pytest.param("UPDATE t SET a = a + 1 WHERE b < 10", TxKind.BULK_UPDATE, id="update"),
        pytest.param(
            "/*+ hint */ UPDATE t1 JOIN t2 USING (id) SET t1.a = t2.a",
            TxKind.BULK_UPDATE,
            id="multi-table-update",
        ),
        pytest.param(
            "DELETE FROM t WHERE created < NOW() - INTERVAL 1 YEAR", TxKind.BULK_DELETE, id="delete"
        ),
        pytest.param(
            "DELETE t1 FROM t1 JOIN t2 ON t1.id = t2.id", TxKind.BULK_DELETE, id="multi-table-delete"
        ),
        pytest.param("SELECT 1", None, id="select"),
        pytest.param("INSERT INTO t (a, b, c", None, id="truncated-column-list"),
        pytest.param("", None, id="empty"),
    ],
)
def test_statement_text_is_classified(text: str, kind: TxKind | None) -> None:
    got, what = classify_statement(text)
    assert got is kind
    assert what


@pytest.mark.parametrize(
    ("args", "kind", "says"),
    [
        pytest.param((None, 1, None, 0, True), TxKind.LOAD_DATA, "statement-based", id="load-event"),
        pytest.param(
            ("LOAD DATA INFILE 'f' INTO TABLE t", 1, RowKind.INSERT, 1, False),
            TxKind.LOAD_DATA,
            "row-based",
            id="row-based-load",
        ),
        pytest.param(
            ("LOAD DATA INFILE 'f' INTO TABLE t", 2, RowKind.INSERT, 1, False),
            TxKind.LOAD_DATA,
            "2 statements",
            id="two-loads-in-one-trx",
        ),
        pytest.param(
            ("INSERT INTO t SELECT * FROM s", 3, RowKind.INSERT, 1, False),
            TxKind.OTHER,
            "3 statements",
            id="several-statements-first-insert-select",
        ),
        pytest.param((None, 1, RowKind.INSERT, 1, False), TxKind.BULK_INSERT, "write-rows", id="rows-insert"),
        pytest.param(
            (None, 1, RowKind.UPDATE, 1, False), TxKind.BULK_UPDATE, "update-rows", id="rows-update"
        ),
        pytest.param(
            (None, 1, RowKind.DELETE, 1, False), TxKind.BULK_DELETE, "delete-rows", id="rows-delete"
        ),
        pytest.param(
            (None, 2, RowKind.INSERT, 1, False), TxKind.OTHER, "2 statements", id="rows-two-statements"
        ),
        pytest.param((None, 1, RowKind.INSERT, 2, False), TxKind.OTHER, "2 tables", id="rows-two-tables"),
        pytest.param((None, 1, None, 1, False), TxKind.OTHER, "mixed", id="rows-mixed"),
        pytest.param(
            ("SELECT f()", 1, RowKind.INSERT, 1, False),
            TxKind.BULK_INSERT,
            "the text is",
            id="unclear-text-falls-back-to-rows",
        ),
    ],
)
def test_transaction_is_classified(args: tuple[Any, ...], kind: TxKind, says: str) -> None:
    got, why = classify(*args)
    assert got is kind
    assert says in why


@pytest.mark.parametrize(
    ("text", "schema", "want"),
    [
        pytest.param(
            "LOAD DATA LOCAL INFILE '/d/x.csv' INTO TABLE imp",
            "db",
            ("/d/x.csv", "db.imp"),
            id="default-schema",
        ),
        pytest.param(
            "LOAD DATA INFILE 'it''s.csv' IGNORE INTO TABLE `my db`.`t``x`",
            None,
            ("it's.csv", "my db.t`x"),
            id="quoted",
        ),
        pytest.param("LOAD DATA INFILE 'x' INTO TABLE t", None, ("x", None), id="no-schema"),
        pytest.param("LOAD DATA INFILE 'x", None, (None, None), id="truncated"),
    ],
)
def test_load_data_target(text: str, schema: str | None, want: tuple[str | None, str | None]) -> None:
    assert load_data_target(text, schema) == want


# -- the accumulator ---------------------------------------------------------


def test_small_transactions_only_count() -> None:
    la = Lookahead(SMALL)
    for i in range(50):
        la.feed(row_trx(1000 + i * 100, 3))
    assert la.coming() == ()
    assert (la.stats.transactions, la.stats.big, la.stats.rows) == (50, 0, 150)
    assert la.stats.bytes == 50 * 75


def test_row_based_load_without_text_is_bulk_insert() -> None:
    la = Lookahead(SMALL)
    la.feed(row_trx(4, 250))
    (s,) = la.coming()
    assert s.kind is TxKind.BULK_INSERT
    assert "no statement text" in s.kind_reason
    assert (s.rows, s.size_bytes, s.size_basis) == (250, 250 * 25, "counted")
    assert s.tables == ("shop.orders",)
    assert s.key_columns == ("id",)
    assert s.start == RelayPosition("relay-bin.000001", 4)
    assert s.end == RelayPosition("relay-bin.000001", 4 + 250 * 25)
    assert s.statement is None and s.complete


def test_annotated_load_is_load_data_and_text_is_truncated() -> None:
    cfg = LookaheadConfig(big_rows=100, statement_chars=40)
    la = Lookahead(cfg)
    text = "LOAD DATA LOCAL INFILE '/data/2024/orders-export.csv' INTO TABLE orders"
    la.feed(row_trx(4, 120, text=text))
    (s,) = la.coming()
    assert s.kind is TxKind.LOAD_DATA
    assert s.statement == text[:40]


def test_transaction_length_is_the_size_when_present() -> None:
    la = Lookahead(SMALL)
    la.feed(row_trx(4, 10, size=50_000))  # 10 rows, but 50 kB by MySQL 8's own count
    (s,) = la.coming()
    assert (s.size_bytes, s.size_basis) == (50_000, "transaction_length")


def test_statement_based_load_is_big_by_its_file_lines() -> None:
    la = Lookahead(SMALL)
    la.feed(
        [
            start(4),
            LoadData("shop", "LOAD DATA INFILE 'f.tsv' INTO TABLE imp", 3, 0, 4000, 200),
            end(5000, size=4500),
        ]
    )
    (s,) = la.coming()
    assert s.kind is TxKind.LOAD_DATA
    assert (s.rows, s.rows_estimate, s.load_data_bytes, s.source_exec_seconds) == (0, 200, 4000, 3)
    assert s.statement_based
    assert s.tables == ("shop.imp",)  # from the statement: no row events name it


def test_long_statement_based_update_is_big_by_source_run_time() -> None:
    la = Lookahead(SMALL)
    la.feed([start(4), Statement("shop", "UPDATE orders SET qty = 0", 7, 0), end(300, size=296)])
    (s,) = la.coming()
    assert (s.kind, s.source_exec_seconds, s.rows_estimate) == (TxKind.BULK_UPDATE, 7, 0)


def test_mixed_rows_on_two_tables_are_other() -> None:
    la = Lookahead(SMALL)
    events = [
        start(4),
        *rows(60, RowKind.UPDATE),
        *rows(60, RowKind.DELETE, ITEMS),
        end(4000, rows=120, statements=1, tables=frozenset({"shop.orders", "shop.items"})),
    ]
    la.feed(events)
    (s,) = la.coming()
    assert s.kind is TxKind.OTHER
    assert s.tables == ("shop.items", "shop.orders")
    assert s.key_columns == ()


def test_a_big_transaction_is_reported_while_it_streams_in() -> None:
    la = Lookahead(SMALL)
    la.feed([start(4), RowsQuery("LOAD DATA INFILE 'big.csv' INTO TABLE orders"), *rows(150)])
    assert la.coming() == ()
    s = la.in_progress()
    assert s is not None and not s.complete and s.end is None
    assert (s.kind, s.rows, s.tables) == (TxKind.LOAD_DATA, 150, ("shop.orders",))
    with_bytes = la.in_progress(RelayPosition("relay-bin.000001", 8004))
    assert with_bytes is not None and (with_bytes.size_bytes, with_bytes.size_basis) == (8000, "read so far")
    la.feed([end(9000, rows=150, tables=frozenset({"shop.orders"}))])
    assert la.in_progress() is None
    assert len(la.coming()) == 1


def test_in_progress_is_quiet_while_small_unless_the_size_is_known() -> None:
    la = Lookahead(SMALL)
    la.feed([start(4), *rows(5)])
    assert la.in_progress() is None
    assert la.in_progress(RelayPosition("relay-bin.000001", 20_004)) is not None  # 20 kB read
    la.feed([start(30_000, size=1_000_000), *rows(1)])  # MySQL 8 says 1 MB before the rows arrive
    s = la.in_progress()
    assert s is not None and s.size_basis == "transaction_length"
    assert la.stats.abandoned == 1  # the first never ended: a new start replaced it


def test_applied_transactions_are_dropped_in_order_across_files() -> None:
    la = Lookahead(SMALL)
    la.feed(row_trx(4, 200, file="relay-bin.000009"))
    la.feed(row_trx(10_000, 200, file="relay-bin.000009"))
    la.feed(row_trx(4, 200, file="relay-bin.000010"))
    assert len(la.coming()) == 3
    assert la.applied_up_to(RelayPosition("relay-bin.000009", 9_000)) == 1
    assert la.applied_up_to(RelayPosition("relay-bin.000009", 9_000)) == 0
    # A later file orders after any offset of an earlier one.
    assert la.applied_up_to(RelayPosition("relay-bin.000010", 4)) == 1
    (left,) = la.coming()
    assert left.start.file == "relay-bin.000010"


def test_the_big_list_is_bounded() -> None:
    la = Lookahead(SMALL)  # max_kept=3
    for i in range(5):
        la.feed(row_trx(4 + i * 10_000, 150))
    assert len(la.coming()) == 3
    assert (la.stats.big, la.stats.big_not_kept) == (5, 2)
    assert la.biggest_coming() is not None


def test_every_big_transaction_reaches_on_big_listed_or_not() -> None:
    got: list[int] = []
    la = Lookahead(SMALL, on_big=lambda s: got.append(s.rows))  # max_kept=3
    for i in range(5):
        la.feed(row_trx(4 + i * 10_000, 150 + i))
    la.feed(row_trx(60_000, 5))  # small: not reported
    assert got == [150, 151, 152, 153, 154] and len(la.coming()) == 3
    first = la.next_coming()
    assert first is not None and first.rows == 150
    la.applied_up_to(RelayPosition("relay-bin.000001", 60_000))
    assert la.next_coming() is None


def test_damage_drops_the_half_read_transaction() -> None:
    la = Lookahead(SMALL)
    la.feed([start(4), *rows(150), CorruptEvent("relay-bin.000001", 3000, "checksum mismatch")])
    assert la.in_progress() is None
    la.feed([end(4000, rows=150)])  # an end without a start is ignored
    assert la.coming() == () and la.stats.abandoned == 1


def test_a_resync_forgets_everything_listed() -> None:
    la = Lookahead(SMALL)
    la.feed(row_trx(4, 150))
    la.feed(
        [
            start(10_000),
            *rows(150),
            Resynced("relay-bin.000001", RelayPosition("relay-bin.000003", 4), "purged"),
        ]
    )
    assert la.coming() == () and la.in_progress() is None and la.stats.resyncs == 1


def test_row_values_are_not_kept() -> None:
    """Memory stays bounded: the summary holds counts and names, not rows."""
    la = Lookahead(SMALL)
    la.feed(row_trx(4, 5000))
    (s,) = la.coming()
    held = [v for v in vars_of(s) if isinstance(v, (list, tuple)) and len(v) > 10]
    assert held == []


def vars_of(obj: Any) -> list[Any]:
    return [getattr(obj, name) for name in obj.__slots__]


def test_facts_for_the_settings_rules() -> None:
    la = Lookahead(SMALL)
    assert la.facts() == {"biggest_coming_bytes": None, "statement_load_bytes": None}
    la.feed(row_trx(4, 400))
    la.feed(
        [
            start(20_000),
            LoadData("shop", "LOAD DATA INFILE 'f' INTO TABLE t", 1, 0, 4000, 200),
            end(24_500, size=4500),
        ]
    )
    assert la.facts() == {"biggest_coming_bytes": 10_000, "statement_load_bytes": 4000}


def test_events_before_the_first_start_do_not_leak_into_the_next_transaction() -> None:
    la = Lookahead(SMALL)
    la.feed([*rows(90), RowsQuery("UPDATE t SET a = 1")])  # the reader started mid-transaction
    la.feed(row_trx(5000, 20))
    assert la.in_progress() is None and la.coming() == ()
    la.feed([*rows(90), end(100, rows=90)])  # an orphan end clears what came before it too
    la.feed([start(200), *rows(20)])
    assert la.in_progress() is None
