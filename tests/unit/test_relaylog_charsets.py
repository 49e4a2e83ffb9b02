"""Each text column's server character set (Column.charset_name), from the table map's
collations or from information_schema, for the probes that convert their keys to it."""

from __future__ import annotations

from typing import Any

import pytest

from lagd.relaylog import InformationSchemaResolver, TableMapResolver
from lagd.relaylog import _columns as c
from lagd.relaylog._tablemap import TableMap

# (type, metadata, collation id, information_schema COLUMN_TYPE and CHARACTER_SET_NAME, charset_name)
COLUMNS: list[tuple[int, int, int | None, str, str | None, str | None]] = [
    (c.T_VARCHAR, 10, 8, "varchar(10)", "latin1", "latin1"),  # latin1_swedish_ci
    (c.T_LONG, 0, None, "int(11)", None, None),
    (c.T_STRING, (c.T_STRING << 8) | 12, 45, "char(3)", "utf8mb4", "utf8mb4"),
    (c.T_BLOB, 2, 63, "blob", None, None),  # binary: no character set
    (c.T_BLOB, 2, 5, "text", "latin1", "latin1"),  # latin1_german1_ci
    (c.T_STRING, (c.T_ENUM << 8) | 1, 8, "enum('a','b')", "latin1", None),  # logged as its number
    (c.T_STRING, (c.T_SET << 8) | 1, 8, "set('x')", "latin1", None),
    (c.T_STRING, (c.T_STRING << 8) | 4, 63, "binary(4)", None, None),
    (c.T_VARCHAR, 40, 51, "varchar(20)", "cp1251", "cp1251"),  # cp1251_general_ci
]
EXPECTED = [want for *_, want in COLUMNS]


def table_map(collations: bool) -> TableMap:
    return TableMap(1, "s", "t", tuple(t for t, *_ in COLUMNS), tuple(m for _, m, *_ in COLUMNS),
                    (True,) * len(COLUMNS), names=tuple(f"c{i}" for i in range(len(COLUMNS))),
                    collations=tuple(coll for _, _, coll, *_ in COLUMNS) if collations else None)


class Recorded(InformationSchemaResolver):
    """The resolver on recorded information_schema rows (MariaDB 10.11's, for the table above)."""

    def __init__(self) -> None:
        super().__init__(lambda: None)

    def _query(self, schema: str, table: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
        cols = [{"COLUMN_NAME": f"c{i}", "ORDINAL_POSITION": i + 1, "IS_NULLABLE": "YES",
                 "COLUMN_TYPE": ctype, "CHARACTER_SET_NAME": cs}
                for i, (_t, _m, _coll, ctype, cs, _want) in enumerate(COLUMNS)]
        return cols, [], []


@pytest.mark.parametrize(("resolver", "collations"), [
    (TableMapResolver(), True),  # binlog_row_metadata=FULL
    (Recorded(), False),  # MINIMAL metadata: information_schema says
    (Recorded(), True),  # both: the log's
], ids=["table-map", "information-schema", "both"])
def test_text_columns_know_their_character_set(resolver: Any, collations: bool) -> None:
    info = resolver.resolve(table_map(collations))
    assert [col.charset_name for col in info.columns] == EXPECTED


def test_without_collations_or_information_schema_no_character_set_is_guessed() -> None:
    info = TableMapResolver().resolve(table_map(False))
    assert [col.charset_name for col in info.columns] == [None] * len(COLUMNS)


class _Answers:
    """A connection answering the resolver's information_schema lookups from tables of
    rows (the first word after FROM names the view)."""

    def __init__(self, views: dict[str, list[dict[str, Any]]]) -> None:
        self.views, self.asked = views, []
        self._rows: list[dict[str, Any]] = []

    def cursor(self) -> Any:
        return self

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, args: Any = None) -> None:
        view = sql.split(" FROM information_schema.")[1].split(maxsplit=1)[0]
        self.asked.append(view)
        self._rows = self.views.get(view, [])

    def fetchall(self) -> list[dict[str, Any]]:
        return self._rows

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("tables", "row_bytes"), [
    ([{"AVG_ROW_LENGTH": 33_215}], 33_215),
    ([], None),  # not visible: unknown, never 0
    ([{"AVG_ROW_LENGTH": None}], None),
])
def test_a_resolved_table_knows_its_rows_average_size_off_page_parts_included(
        tables: list[dict[str, Any]], row_bytes: int | None) -> None:
    """information_schema.TABLES.AVG_ROW_LENGTH, for the clustered probes that read
    rows' off-page documents (prefetch.rewrite.documents); forgotten with the table."""
    cols = [{"COLUMN_NAME": f"c{i}", "ORDINAL_POSITION": i + 1, "IS_NULLABLE": "YES",
             "COLUMN_TYPE": ctype, "CHARACTER_SET_NAME": cs}
            for i, (_t, _m, _coll, ctype, cs, _want) in enumerate(COLUMNS)]
    conn = _Answers({"COLUMNS": cols, "TABLES": tables})
    resolver = InformationSchemaResolver(lambda: conn)
    assert resolver.resolve(table_map(True)).row_bytes == row_bytes
    assert conn.asked == ["COLUMNS", "STATISTICS", "KEY_COLUMN_USAGE", "TABLES"]
    resolver.invalidate(["s.t"])
    conn.views["TABLES"] = [{"AVG_ROW_LENGTH": 100}]
    assert resolver.resolve(table_map(True)).row_bytes == 100
