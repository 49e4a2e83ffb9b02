"""Which secondary-index changes InnoDB buffers instead of reading the index page.

With the change buffer on, InnoDB does not read the leaf page of a non-unique
secondary index to change an entry there when the page is not in the buffer
pool: it records the change and merges it when the page is next read. The SQL
thread then reads only the clustered index and the unique indexes (a unique
index is read for its uniqueness check, and is never buffered). A probe of a
buffered entry reads a page the SQL thread would not read, and its merge
with it: disk reads and buffer pool taken for nothing (prefetch.md, "The
change buffer").

``innodb_change_buffering`` says which operations are buffered (the MySQL
Reference Manual, "Change Buffer"): ``inserts``; ``deletes`` (delete-marking:
a DELETE, and the old entry of an UPDATE that moves it); ``changes`` (both);
``purges`` (purge's physical removal, which lagd never probes for); ``all``;
``none``. ``innodb_change_buffer_max_size = 0`` leaves the buffer no room, so
nothing is buffered.

- MySQL 8.0: ``all`` by default; MySQL 8.4 turned it to ``none``; MySQL 9
  keeps the variable (documented defaults, ``tests/fixtures/server_vars``).
- MariaDB: ``none`` by default since 10.5.15 / 10.6.7; deprecated in 10.9 and
  gone in 11.0, where nothing is buffered (absent: nothing buffered). Proven on
  MariaDB 10.11 by the sandbox tests, with the option set.

Not told here: a buffer that is full (``innodb_change_buffer_max_size`` of the
pool reached) reads pages again until it merges, and MySQL does not buffer
indexes with a descending column or on virtual columns. There lagd probes
less than the SQL thread reads: less gain, never a read the SQL thread would
not have made.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DELETE_MARKS", "INSERTS", "VARIABLES", "buffered"]

INSERTS = "inserts"  # a new entry (INSERT, the new entry of an UPDATE)
DELETE_MARKS = "delete_marks"  # an entry marked deleted (DELETE, the old entry of an UPDATE)
VARIABLES = ("innodb_change_buffering", "innodb_change_buffer_max_size")

_OPS: dict[str, frozenset[str]] = {
    "none": frozenset(),
    "inserts": frozenset({INSERTS}),
    "deletes": frozenset({DELETE_MARKS}),
    "changes": frozenset({INSERTS, DELETE_MARKS}),
    "purges": frozenset(),
    "all": frozenset({INSERTS, DELETE_MARKS}),
}


def buffered(variables: Mapping[str, str | None]) -> frozenset[str]:
    """The secondary-index changes InnoDB buffers (``INSERTS``, ``DELETE_MARKS``), from
    ``SHOW GLOBAL VARIABLES``. Absent, unknown or no room: none, so every entry is
    probed as without a change buffer (the safe side: at worst a useless read)."""
    if str(variables.get("innodb_change_buffer_max_size", "")).strip() == "0":
        return frozenset()
    value = variables.get("innodb_change_buffering")
    return _OPS.get(str(value).strip().lower(), frozenset()) if value is not None else frozenset()
