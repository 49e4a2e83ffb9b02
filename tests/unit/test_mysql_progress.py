"""The applier's open transaction from recorded result sets.

MariaDB rows are as 10.11 returns them to the sandbox's lagd account (the
integration test asks the real server); the MySQL 8 rows are recreated from
the documented columns of performance_schema.threads and INNODB_TRX, not
recorded from a server.
"""

from __future__ import annotations

from typing import Any

import pytest

from lagd.mysql.progress import (
    MARIADB_APPLIER_TRX_SQL,
    MYSQL_APPLIER_TRX_SQL,
    ApplierTrx,
    applier_trx,
    applier_trx_sql,
    history_length,
    history_length_sql,
)

MARIADB_SQL_THREAD = {"id": 8, "role": "Slave_SQL", "trx_id": 42, "rows_modified": 1695}
MYSQL_REPLICA_SQL = {"id": 12, "role": "thread/sql/replica_sql", "trx_id": "421937", "rows_modified": 88}
MYSQL_OLD_SQL = {"id": 12, "role": "thread/sql/slave_sql", "trx_id": "421937", "rows_modified": 88}


@pytest.mark.parametrize(("rows", "want"), [
    ([], None),  # no applier has a transaction open
    ([MARIADB_SQL_THREAD], ApplierTrx("42", 1695, 8)),
    ([MYSQL_REPLICA_SQL], ApplierTrx("421937", 88, 12)),
    ([MYSQL_OLD_SQL], ApplierTrx("421937", 88, 12)),  # before 8.0.26
    # Parallel replication: the worker that has done the most is the big one.
    ([{"id": 9, "role": "Slave_worker", "trx_id": 50, "rows_modified": 3},
      {"id": 10, "role": "Slave_worker", "trx_id": 51, "rows_modified": 90_000}],
     ApplierTrx("51", 90_000, 10)),
    ([{"id": 3, "role": "Slave_IO", "trx_id": 7, "rows_modified": 5}], None),  # never the IO thread
    ([{"id": 8, "role": "Slave_SQL", "trx_id": 42, "rows_modified": None}], None),  # unreadable: skipped
    ([{"id": None, "role": "Slave_SQL", "trx_id": 42, "rows_modified": "12"}], ApplierTrx("42", 12, None)),
])
def test_applier_trx(rows: list[dict[str, Any]], want: ApplierTrx | None) -> None:
    assert applier_trx(rows) == want


def test_the_statement_per_flavor_names_its_columns() -> None:
    assert applier_trx_sql(True) == MARIADB_APPLIER_TRX_SQL
    assert applier_trx_sql(False) == MYSQL_APPLIER_TRX_SQL
    for sql in (MARIADB_APPLIER_TRX_SQL, MYSQL_APPLIER_TRX_SQL):
        for col in (" AS id", " AS role", " AS trx_id", " AS rows_modified"):
            assert col in sql
    assert "'Slave_SQL'" in MARIADB_APPLIER_TRX_SQL and "replica_sql" in MYSQL_APPLIER_TRX_SQL


# INNODB_METRICS' trx_rseg_history_len: MariaDB 10.11's row as the server returns it
# (ENABLED 1/0); MySQL 8's recreated from the documented columns (STATUS 'enabled').
@pytest.mark.parametrize(("rows", "want"), [
    ([{"n": 31333, "status": 1}], 31333),
    ([{"n": 0, "status": 1}], 0),  # purge is done: a real 0
    ([{"n": 0, "status": 0}], None),  # the counter is switched off: its 0 means nothing
    ([{"n": 88, "status": "enabled"}], 88),
    ([{"n": 0, "status": "disabled"}], None),
    ([], None),  # no such counter
    ([{"n": None, "status": 1}], None),
    ([{"n": -1, "status": 1}], None),
])
def test_history_length(rows: list[dict[str, Any]], want: int | None) -> None:
    assert history_length(rows) == want


def test_history_length_statement_follows_the_flavor() -> None:
    assert "`ENABLED` AS status" in history_length_sql(True)
    assert "`STATUS` AS status" in history_length_sql(False)
