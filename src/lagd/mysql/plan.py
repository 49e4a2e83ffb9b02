"""What the server's EXPLAIN says a statement probe would read, before it is sent.

A statement logged as text (STATEMENT or MIXED format) becomes the SELECT of the
rows it touches, spliced from its own WHERE (prefetch/rewrite_sql.py). Nothing in
the text says whether an index serves that WHERE: ``UPDATE t SET ... WHERE
unindexed = 5``, ``WHERE DATE(ts) = ...``, a string column compared with a
number, ``ORDER BY c LIMIT n`` on an unindexed ``c``. The SQL thread reads the
whole table for such a statement; its probe would read it too, up to its
statement timeout, and in a buffer pool smaller than the table every page it
brings in is evicted again before the SQL thread gets there: the table read
twice, the second reader being the one that decides the lag. So the first probe
of each statement shape is explained first, on the probe session itself (read
only, the same deadline), and a shape whose plan reads a whole table or index
is not probed. Row probes need no plan: they name their index (FORCE INDEX).

The access types are those of the traditional tabular EXPLAIN, MariaDB's and
MySQL's alike (``ALL``: the table, ``index``: a whole index; MariaDB's join
buffers add ``hash_ALL`` and ``hash_index``). MySQL 8.0.32 and later take the
output format from ``explain_format`` (TREE or JSON for some users), so MySQL is
asked for the traditional one by name; MariaDB has no such variable and no
``FORMAT=TRADITIONAL``.
"""

from __future__ import annotations

from collections.abc import Sequence

SCAN_TYPES = frozenset({"ALL", "index", "hash_ALL", "hash_index"})
# A whole-table read of a table estimated smaller than this is a few dozen pages
# (at ~100 rows a 16 KiB page) and stays in memory: cheap for the probe and for
# the SQL thread alike, so it is left to the gate, not refused here.
SCAN_ROWS = 1000


def explain_sql(select: str, mariadb: bool) -> str:
    """The EXPLAIN of a probe's SELECT text, in the tabular format on either server."""
    return ("EXPLAIN " if mariadb else "EXPLAIN FORMAT=TRADITIONAL ") + select


def _text(value: object) -> str | None:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)


def _count(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def full_scan(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str | None:
    """Why this plan reads a whole table or index of SCAN_ROWS rows or more (or cannot
    be read), or None when every table is reached through an index. Pure.

    ``columns`` are EXPLAIN's column names, ``rows`` its rows as the driver gave them.
    A plan lagd cannot read counts as a scan: a probe is sent only where it is known
    to be cheap."""
    names = [c.lower() for c in columns]
    if "type" not in names or "rows" not in names:
        return (f"the server's EXPLAIN answered columns {', '.join(columns) or 'none'}, without"
                " type and rows: the probe's cost cannot be checked")
    at_type, at_rows = names.index("type"), names.index("rows")
    at_table = names.index("table") if "table" in names else None
    for row in rows:
        access = _text(row[at_type])
        if access not in SCAN_TYPES:
            continue
        estimate = _count(row[at_rows])
        if estimate is not None and estimate < SCAN_ROWS:
            continue
        table = _text(row[at_table]) if at_table is not None else None
        what = "a whole index of" if str(access).endswith("index") else "all of"
        size = f"{estimate:,} rows estimated" if estimate is not None else "rows not estimated"
        return (f"its plan reads {what} {table or 'a table'} ({size}, access type {access}): the SQL"
                " thread reads it too, and a probe would only read it twice")
    return None
