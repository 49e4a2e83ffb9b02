"""The replica's connection slots: how many more connections it takes, and from whom.

Probe sessions are connections like the applications' own. At
``max_connections`` the server refuses the next client ("Too many
connections", 1040), whoever it is; at the account's ``MAX_USER_CONNECTIONS``
it refuses lagd's next session (1203 on MariaDB and MySQL, 1226 for a
per-account limit), its status session included. lagd reads these numbers and
keeps its probes under both (``prefetch.control.connection_budget``).

Three statements, the same on MariaDB and MySQL, none needing a grant:

- ``@@GLOBAL.max_connections``, and ``@@SESSION.max_user_connections``: the
  session value is the account's own limit where it has one, else the global
  value (0: none).
- ``Threads_connected`` (SHOW GLOBAL STATUS): client connections, lagd's
  included. The replication threads are not in it (MariaDB 10.11, the sandbox
  test).
- lagd's account's sessions: ``information_schema.PROCESSLIST`` rows of its
  user name. Without PROCESS a client sees its own user's threads only, which
  is all that is counted; with it, the filter does the same. MySQL 8 still has
  the table (deprecated for ``performance_schema.processlist``): where it is
  gone the count is unknown and the budget assumes a few sessions.

Proven on MariaDB 10.11 by the sandbox tests; on MySQL the same statements
are documented but not run here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LIMITS_SQL", "OWN_SQL", "Slots", "parse_slots"]

LIMITS_SQL = ("SELECT @@GLOBAL.max_connections AS max_connections,"
              " @@SESSION.max_user_connections AS max_user_connections")
# USER() is the login name @ the client's host; a user name may hold '@', a host never does.
OWN_SQL = ("SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST"
           " WHERE USER = LEFT(USER(),"
           " CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1)")


@dataclass(frozen=True, slots=True)
class Slots:
    """One reading of the replica's connections."""

    max_connections: int
    connected: int  # Threads_connected: every client connection, lagd's own included
    user_limit: int | None  # the account's MAX_USER_CONNECTIONS (or the global limit); None: no limit
    own: int | None  # sessions of lagd's account, its probes included; None: could not be counted


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, bytes | bytearray):
        v = v.decode("ascii", "replace")
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def parse_slots(limits: Iterable[Mapping[str, Any]], connected: int | None,
                own: Iterable[Mapping[str, Any]] | None) -> Slots | None:
    """A reading from the rows of ``LIMITS_SQL``, Threads_connected and the rows of
    ``OWN_SQL`` (None: that statement failed). None when the limits or the count of
    connections cannot be read: then nothing is known, and no number is guessed."""
    row = next(iter(limits), None)
    if row is None or connected is None:
        return None
    most = _int(row.get("max_connections"))
    if most is None or most <= 0:
        return None
    per_user = _int(row.get("max_user_connections"))
    # 0 is "no limit"; MariaDB's -1 (global only: accounts without a limit of their own
    # cannot connect) never reaches a session that did connect, but it is no limit on it.
    user_limit = per_user if per_user is not None and per_user > 0 else None
    n = None if own is None else _int(next(iter(own), {}).get("n"))
    return Slots(most, connected, user_limit, n)
