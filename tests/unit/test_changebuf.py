"""Which secondary-index changes InnoDB buffers (lagd.mysql.changebuf)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lagd.mysql.changebuf import DELETE_MARKS, INSERTS, buffered

VARS = Path(__file__).parents[1] / "fixtures" / "server_vars"
BOTH = frozenset({INSERTS, DELETE_MARKS})


@pytest.mark.parametrize(("variables", "ops"), [
    ({"innodb_change_buffering": "all", "innodb_change_buffer_max_size": "25"}, BOTH),
    ({"innodb_change_buffering": "changes"}, BOTH),
    ({"innodb_change_buffering": "inserts"}, frozenset({INSERTS})),
    ({"innodb_change_buffering": "deletes"}, frozenset({DELETE_MARKS})),  # delete-marking
    ({"innodb_change_buffering": "purges"}, frozenset()),  # purge's removals: never probed for
    ({"innodb_change_buffering": "none"}, frozenset()),
    ({"innodb_change_buffering": "ALL"}, BOTH),
    ({"innodb_change_buffering": "all", "innodb_change_buffer_max_size": "0"}, frozenset()),  # no room
    ({}, frozenset()),  # MariaDB 11: the change buffer is gone
    ({"innodb_change_buffering": "sometimes"}, frozenset()),  # unknown: probe as without one
    ({"innodb_change_buffering": None}, frozenset()),
])
def test_buffered(variables: dict[str, str | None], ops: frozenset[str]) -> None:
    assert buffered(variables) == ops


@pytest.mark.parametrize(("fixture", "ops"), [
    ("mysql-8.0-defaults.json", BOTH),  # documented defaults: MySQL 8.0 buffers everything
    ("mysql-8.4-defaults.json", frozenset()),
    ("mariadb-10.11-replica.json", frozenset()),  # recorded
])
def test_server_defaults(fixture: str, ops: frozenset[str]) -> None:
    assert buffered(json.loads((VARS / fixture).read_text())["variables"]) == ops
