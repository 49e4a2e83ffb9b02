"""How far the SQL thread is inside the transaction it applies: InnoDB's row count.

A big transaction's rows reach the relay log long before the SQL thread
commits it, and until it commits the replica's position does not move.
``information_schema.INNODB_TRX.trx_rows_modified`` counts the rows the
transaction changed so far, so joined to the applier's connection id it says
how much of the transaction is done, and at what rate it is going *inside*
this transaction (without the per-transaction costs small transactions pay).

- MariaDB: the applier's connection id is ``information_schema.PROCESSLIST.ID``
  where ``COMMAND`` is ``Slave_SQL`` (or ``Slave_worker`` with parallel
  replication).
- MySQL 8: ``performance_schema.threads.PROCESSLIST_ID`` where ``NAME`` is
  ``thread/sql/replica_sql`` / ``replica_worker`` (``slave_*`` before 8.0.26).

Both need the PROCESS privilege (INNODB_TRX refuses without it, so the
question fails and the progress is unknown, never 0). Proven on MariaDB
10.11 by the sandbox tests; the MySQL statement is checked only against
result sets recreated in the unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MARIADB_APPLIER_TRX_SQL", "MYSQL_APPLIER_TRX_SQL", "ApplierTrx", "applier_trx",
           "applier_trx_sql"]

MARIADB_APPLIER_TRX_SQL = (
    "SELECT p.ID AS id, p.COMMAND AS role, t.trx_id AS trx_id, t.trx_rows_modified AS rows_modified"
    " FROM information_schema.PROCESSLIST p"
    " JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID"
    " WHERE p.COMMAND IN ('Slave_SQL', 'Slave_worker')")
MYSQL_APPLIER_TRX_SQL = (
    "SELECT th.PROCESSLIST_ID AS id, th.NAME AS role, t.trx_id AS trx_id,"
    " t.trx_rows_modified AS rows_modified"
    " FROM performance_schema.threads th"
    " JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = th.PROCESSLIST_ID"
    " WHERE th.NAME IN ('thread/sql/replica_sql', 'thread/sql/slave_sql',"
    " 'thread/sql/replica_worker', 'thread/sql/slave_worker')")


def applier_trx_sql(mariadb: bool) -> str:
    """The statement whose rows :func:`applier_trx` reads (columns id, role, trx_id, rows_modified)."""
    return MARIADB_APPLIER_TRX_SQL if mariadb else MYSQL_APPLIER_TRX_SQL


@dataclass(frozen=True, slots=True)
class ApplierTrx:
    """The applier's open InnoDB transaction: its id and the rows it changed so far."""

    trx_id: str
    rows_modified: int
    connection_id: int | None


def applier_trx(rows: Iterable[Mapping[str, Any]]) -> ApplierTrx | None:
    """The applier transaction with the most rows changed (with parallel
    replication the big one is the one that has done the most); None when no
    applier has a transaction open. Rows that cannot be read are skipped."""
    best: ApplierTrx | None = None
    for r in rows:
        role = str(r.get("role") or "").lower()
        if not role.endswith(("slave_sql", "replica_sql", "worker")):
            continue  # never the IO thread
        try:
            n = int(r["rows_modified"])
            trx = str(r["trx_id"])
        except (KeyError, TypeError, ValueError):
            continue
        if n < 0 or not trx or trx == "None":
            continue
        cid = r.get("id")
        try:
            conn = int(cid) if cid is not None else None
        except (TypeError, ValueError):
            conn = None
        if best is None or n > best.rows_modified:
            best = ApplierTrx(trx, n, conn)
    return best
