"""information_schema.KEY_COLUMN_USAGE rows -> a child table's foreign keys (relaylog.schema)."""

from __future__ import annotations

from typing import Any

import pytest

from lagd.relaylog import ForeignKey
from lagd.relaylog.schema import foreign_keys

ORDINAL = {"id": 0, "order_id": 1, "region": 2, "num": 3, "note": 4}


def fk(name: str, column: str, table: str, ref: str | None, schema: str = "shop") -> dict[str, Any]:
    """One row as the resolver reads it (ORDER BY CONSTRAINT_NAME, ORDINAL_POSITION)."""
    return {"CONSTRAINT_NAME": name, "COLUMN_NAME": column, "REFERENCED_TABLE_SCHEMA": schema,
            "REFERENCED_TABLE_NAME": table, "REFERENCED_COLUMN_NAME": ref}


@pytest.mark.parametrize(("rows", "expected"), [
    ([], []),
    ([fk("to_order", "order_id", "orders", "id")],
     [ForeignKey("to_order", (1,), "shop", "orders", ("id",))]),
    # Composite, and to another schema: the columns stay in the constraint's order.
    ([fk("to_acct", "num", "accounts", "num", "bank"), fk("to_acct", "region", "accounts", "region", "bank")],
     [ForeignKey("to_acct", (3, 2), "bank", "accounts", ("num", "region"))]),
    # Two constraints, and a self-reference.
    ([fk("a", "order_id", "orders", "id"), fk("b", "note", "items", "id")],
     [ForeignKey("a", (1,), "shop", "orders", ("id",)), ForeignKey("b", (4,), "shop", "items", ("id",))]),
    # A primary or unique key's row (no REFERENCED_TABLE_NAME) is not a foreign key.
    ([{**fk("PRIMARY", "id", "", None), "REFERENCED_TABLE_NAME": None}], []),
    # A column the definition lacks (the log and the replica disagree): the key is left out.
    ([fk("gone", "old_col", "orders", "id"), fk("kept", "order_id", "orders", "id")],
     [ForeignKey("kept", (1,), "shop", "orders", ("id",))]),
])
def test_foreign_keys(rows: list[dict[str, Any]], expected: list[ForeignKey]) -> None:
    assert foreign_keys(rows, ORDINAL) == expected
