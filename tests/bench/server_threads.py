"""The replica server's CPU and page reads during a catch-up, by whose thread did them.

The server's total CPU (bench_prefetch's ``server_cpu_s``) says the probes cost
something, not what: a run with lagd can spend more in the probe sessions, in the
SQL thread, or in InnoDB's own threads (purge, the page cleaner) that the probes
give more work. MariaDB 10.11 names none of its threads (every ``comm`` is
``mariadbd``) and the sandbox runs without performance_schema, so a thread's role
comes from ``information_schema.PROCESSLIST.TID``: the SQL thread and its workers
by their COMMAND, lagd's sessions by their user, the other clients by theirs;
a thread with no row there is the server's own (InnoDB's task pool, purge, the
page cleaner, I/O completion).

Each sample reads every thread's CPU ticks and read bytes (/proc/<pid>/task/<tid>/
stat and io: the same user as the server, or root) and gives what a thread did since
the last sample to the role it has now: a connection thread goes back to the
server's thread cache and may serve another client next, so a role is known only
for the interval it was seen in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lagd.prefetch.stall import parse_io, parse_stat

PAGE_BYTES = 16384
ROLES = ("sql", "lagd", "clients", "server")
PROCESSLIST_SQL = "SELECT TID AS tid, USER AS user, COMMAND AS command FROM information_schema.PROCESSLIST"


def role_of(command: str | None, user: str | None, lagd_user: str) -> str:
    """The role of a thread with a PROCESSLIST row. Pure."""
    if command in ("Slave_SQL", "Slave_worker"):
        return "sql"
    if user == lagd_user:
        return "lagd"
    if command == "Slave_IO" or user in (None, "system user", "event_scheduler"):
        return "server"
    return "clients"


def roles(rows: Iterable[Mapping[str, Any]], lagd_user: str) -> dict[int, str]:
    """OS thread id -> role, for the threads that have a PROCESSLIST row. Pure."""
    return {int(r["tid"]): role_of(r.get("command"), r.get("user"), lagd_user)
            for r in rows if r.get("tid") is not None}


def add_interval(totals: dict[str, list[float]], before: Mapping[int, tuple[float, int]],
                 now: Mapping[int, tuple[float, int]], role: Mapping[int, str]) -> None:
    """Add what each thread did between two readings ((CPU s, read bytes) by thread id)
    to its role's totals ([CPU s, pages read]). A thread new since ``before`` counts
    from 0: it started inside the interval. Pure but for ``totals``."""
    for tid, (cpu, read) in now.items():
        cpu0, read0 = before.get(tid, (0.0, 0))
        t = totals.setdefault(role.get(tid, "server"), [0.0, 0.0])
        t[0] += max(0.0, cpu - cpu0)
        t[1] += max(0, read - read0) / PAGE_BYTES


def read_threads(pid: int) -> dict[int, tuple[float, int]]:
    """Every thread of ``pid``: (user + system CPU seconds, bytes read from storage), parsed
    as lagd's stall sampler parses them."""
    out: dict[int, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat, io = (task / "stat").read_text(), (task / "io").read_text()
        except OSError:  # ended between the listing and the read
            continue
        out[int(task.name)] = (parse_stat(stat)[1] / 1e9, parse_io(io) or 0)
    return out


class ServerThreads:
    """Samples one server's threads; ``result()``: CPU seconds and pages read by role."""

    def __init__(self, pid: int, lagd_user: str) -> None:
        self.pid, self.lagd_user = pid, lagd_user
        self._last = read_threads(pid)
        self._totals: dict[str, list[float]] = {}

    def sample(self, processlist: Iterable[Mapping[str, Any]]) -> None:
        now = read_threads(self.pid)
        add_interval(self._totals, self._last, now, roles(processlist, self.lagd_user))
        self._last = now

    def result(self) -> dict[str, dict[str, float]]:
        return {r: {"cpu_s": round(t[0], 2), "pages_read": round(t[1])}
                for r in ROLES if (t := self._totals.get(r)) is not None}
