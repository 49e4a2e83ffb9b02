"""Read a server's variables and status into a :class:`ServerSettings`.

``SHOW GLOBAL VARIABLES`` and ``SHOW GLOBAL STATUS`` need no privilege
beyond a login on MySQL 5.7+ and MariaDB, so lagd's own account suffices.
Counter deltas (Innodb_log_waits, buffer-pool reads and free-page waits) come from two
gatherings some time apart: :func:`status_deltas`.
"""

from __future__ import annotations

import os
from typing import Any

from lagd.advisor.settings import AdvisorError, ServerSettings
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.replica import ServerFlavor, detect_flavor
from lagd.mysql.session import query


def _name_value(conn: Any, sql: str) -> dict[str, str]:
    try:
        rows = query(conn, sql)
    except DatabaseError as e:
        if e.kind in (Kind.DENIED, Kind.AUTH):
            raise AdvisorError(f"{sql} was refused: {e.message}",
                               fix="connect as an account that may run it (lagd's own account can)") from e
        raise
    # The first two columns are name and value, whatever the server calls them.
    out: dict[str, str] = {}
    for row in rows:
        name, value = tuple(row.values())[:2]
        out[str(name).lower()] = "" if value is None else str(value)
    return out


def read_variables(conn: Any) -> dict[str, str]:
    """``SHOW GLOBAL VARIABLES``, names lower-cased."""
    return _name_value(conn, "SHOW GLOBAL VARIABLES")


def read_status(conn: Any) -> dict[str, str]:
    """``SHOW GLOBAL STATUS``, names lower-cased."""
    return _name_value(conn, "SHOW GLOBAL STATUS")


def gather_settings(
    conn: Any, role: str, *, flavor: ServerFlavor | None = None,
) -> ServerSettings:
    """The variables, status and flavor of the server behind ``conn``.

    ``role`` is "source" or "replica": what the rules should judge it as
    (a replica that feeds other replicas is both; gather it twice).
    """
    if flavor is None:
        flavor = detect_flavor(conn)
    return ServerSettings.of(flavor, role, read_variables(conn), read_status(conn))


def status_deltas(before: ServerSettings, after: ServerSettings) -> dict[str, int | None]:
    """The counter facts the rules use, from two gatherings of one server.

    A counter that went down (the server restarted in between) gives None:
    no delta can be trusted across a restart.
    """
    def delta(name: str) -> int | None:
        a, b = before.status_int(name), after.status_int(name)
        return b - a if a is not None and b is not None and b >= a else None

    return {
        "log_waits_delta": delta("innodb_log_waits"),
        "buffer_pool_reads_delta": delta("innodb_buffer_pool_reads"),
        "buffer_pool_read_requests_delta": delta("innodb_buffer_pool_read_requests"),
        "free_page_waits_delta": delta("innodb_buffer_pool_wait_free"),
    }


def load_tmpdir_free_bytes(settings: ServerSettings) -> int | None:
    """Free bytes (for unprivileged users) in the replica's load tmpdir, read
    on this host: valid only when lagd runs beside the server, as it does to
    read the relay logs. None when the directory cannot be read here."""
    path = settings.var("replica_load_tmpdir", "slave_load_tmpdir") or settings.var("tmpdir")
    if not path:
        return None
    # tmpdir may list several directories (":"-separated); the first is used.
    first = path.split(":")[0]
    try:
        st = os.statvfs(first)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


__all__ = ["gather_settings", "load_tmpdir_free_bytes", "read_status", "read_variables", "status_deltas"]
