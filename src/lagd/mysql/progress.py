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

__all__ = ["MARIADB_APPLIER_TRX_SQL", "MARIADB_HISTORY_LENGTH_SQL", "MYSQL_APPLIER_TRX_SQL",
           "MYSQL_HISTORY_LENGTH_SQL", "ApplierTrx", "applier_trx", "applier_trx_sql", "history_length",
           "history_length_sql"]

# InnoDB's purge history: committed transactions whose undo purge has not processed
# yet (delete-marked index entries not yet removed, old row versions not yet freed).
# The same counter and table on both; whether it counts is ENABLED (1/0) on MariaDB
# (10.11, recorded) and STATUS ('enabled'/'disabled') on MySQL 8 (documented). Reading
# it needs PROCESS.
MARIADB_HISTORY_LENGTH_SQL = ("SELECT `COUNT` AS n, `ENABLED` AS status"
                              " FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
MYSQL_HISTORY_LENGTH_SQL = ("SELECT `COUNT` AS n, `STATUS` AS status"
                            " FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")

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


def history_length_sql(mariadb: bool) -> str:
    """The statement whose rows :func:`history_length` reads (columns n, status)."""
    return MARIADB_HISTORY_LENGTH_SQL if mariadb else MYSQL_HISTORY_LENGTH_SQL


def history_length(rows: Iterable[Mapping[str, Any]]) -> int | None:
    """The purge history length from :func:`history_length_sql`'s rows; None when it is
    not known: no row, an unreadable value, or the counter switched off
    (``innodb_monitor_disable``), where its 0 would be a false "purge is done"."""
    for r in rows:
        status = str(r.get("status")).lower()
        if status not in ("enabled", "1"):
            return None
        try:
            n = int(r["n"])
        except (KeyError, TypeError, ValueError):
            return None
        return n if n >= 0 else None
    return None
