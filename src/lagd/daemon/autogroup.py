"""lagd's nice value, made to count against the server's threads.

The unit runs lagd at ``Nice=10`` so that its decoding and bookkeeping yield the
cores to mysqld. On a kernel with autogroup scheduling (Debian's and Ubuntu's
default, ``/proc/sys/kernel/sched_autogroup_enabled``), a nice value only
weighs a thread against threads of its own session: the scheduler first shares
the CPU between sessions (autogroups), each at the group's own nice value, 0
unless set. systemd starts every service in a session of its own, so lagd's
group weighed as much as mysqld's, and the unit's Nice=10 did not make lagd
yield to the server at all.

So at start, where lagd leads its own session (a service; not a foreground run
from a shell, whose session is the shell's), it gives its group its own nice
value through ``/proc/self/autogroup``, which any process may raise for its
group. Measured (benchmarks.md, "Whose CPU the SQL thread waits for"): what the
promise costs or gains in apply speed could not be told from the runs' spread on
a 2-core machine; the SQL thread waited for a core slightly less with probes.
Where the cpu cgroup controller schedules services instead (autogroup applies to
the root cgroup only), only the unit's ``CPUWeight=`` would (docs/install.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger("lagd.daemon")

AUTOGROUP = "/proc/self/autogroup"


def group_nice(text: str) -> int:
    """The nice value in a /proc/<pid>/autogroup text ("/autogroup-537 nice 0")."""
    return int(text.rsplit(maxsplit=1)[-1])


def wanted(own_nice: int, leader: bool, group: int | None) -> int | None:
    """The nice value to give lagd's autogroup, or None: leave it. Pure.

    Only a session leader's group is its own; never lower than it is."""
    if own_nice <= 0 or not leader or group is None or group >= own_nice:
        return None
    return own_nice


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _leader() -> bool:
    return os.getsid(0) == os.getpid()


def share_nice(*, read: Callable[[str], str] = _read, write: Callable[[str, str], None] = _write,
               own_nice: Callable[[], int] = _own_nice, leader: Callable[[], bool] = _leader) -> int | None:
    """Give lagd's autogroup lagd's own nice value where it leads its session (module
    doc). Returns the value set, None when nothing was to do or it could not."""
    try:
        group: int | None = group_nice(read(AUTOGROUP))
    except (OSError, ValueError, IndexError):
        group = None  # a kernel without autogroup: nice values weigh as they are
    value = wanted(own_nice(), leader(), group)
    if value is None:
        return None
    try:
        write(AUTOGROUP, str(value))
    except OSError as e:
        log.info("cannot give lagd's scheduling group its nice value %d (%s): where the kernel groups"
                 " threads by session, lagd's threads weigh as much as the server's", value, e)
        return None
    log.info("lagd's scheduling group (autogroup) at nice %d, as lagd: its threads yield the cores to"
             " the server's", value)
    return value
