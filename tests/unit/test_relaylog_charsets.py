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
