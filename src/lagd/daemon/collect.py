"""The replica's lag inputs now: its status and its heartbeat row, or why not.

One function for the daemon's lag poller and for ``lagctl status`` when the
daemon does not answer, so both show the same thing for the same server. It
never raises and never waits longer than its timeout per question: a hung
replica gives "replica 127.0.0.1:3306 did not answer in 5 s", and nothing
read earlier is passed off as current.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Protocol

from lagd.errors import LagdError
from lagd.heartbeat import HeartbeatRow
from lagd.lag import Backlog, LagInputs
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.monitor import Sample
from lagd.mysql.progress import ApplierTrx
from lagd.mysql.replica import ReplicaStatus, ServerFlavor

HUNG_FIX = "the server hangs or is overloaded: check it (SHOW PROCESSLIST, its error log)"


class StatusMonitor(Protocol):
    """Asks the replica for its status (``lagd.mysql.monitor.ReplicaMonitor``)."""

    @property
    def flavor(self) -> ServerFlavor | None: ...

    async def poll(self) -> Sample: ...

    async def applier_trx(self) -> ApplierTrx | None:
        """The SQL thread's open InnoDB transaction (None: none); raises when it cannot be asked."""
        ...

    async def close(self) -> None: ...


class HeartbeatSource(Protocol):
    """Reads the heartbeat row of ``server_id`` (None: the newest) from ``table``."""

    async def read(self, table: str, server_id: int | None) -> HeartbeatRow | None: ...


@dataclass(frozen=True, slots=True)
class ReplicaReading:
    """What the replica said at one moment (``wall``/``mono``), or why it said nothing."""

    wall: float
    mono: float
    status: ReplicaStatus | None
    status_error: str | None
    heartbeat: HeartbeatRow | None
    heartbeat_error: str | None  # None with heartbeat None: not configured
    flavor: ServerFlavor | None = None  # as far as the monitor knows it
    fault: LagdError | None = None  # why status is None, with its fix, when that is known

    def inputs(self, backlog: Backlog | None = None, *, applied_transactions: int = 0,
               applied_rows: int = 0, trust_sbm: bool = True, inside_big: bool = False,
               stall_remaining: float | None = None) -> LagInputs:
        """The tracker's inputs; ``trust_sbm=False`` hides a Seconds_Behind value the
        server reports before it knows (just after a restart of its threads)."""
        status = self.status
        if status is not None and not trust_sbm and status.seconds_behind is not None:
            status = replace(status, seconds_behind=None)
        return LagInputs(now=self.wall, monotonic=self.mono, status=status, status_error=self.status_error,
                         heartbeat=self.heartbeat, heartbeat_error=self.heartbeat_error, backlog=backlog,
                         applied_transactions=applied_transactions, applied_rows=applied_rows,
                         inside_big=inside_big, stall_remaining=stall_remaining)


def named(error: str, where: str) -> str:
    """The error, starting with the server it is about (the replica, not lagd, failed)."""
    return error if where in error else f"{where}: {error}"


async def collect(monitor: StatusMonitor, heartbeat: HeartbeatSource | None, *, where: str, timeout: float,
                  heartbeat_table: str = "", heartbeat_server_id: int = 0) -> ReplicaReading:
    """Status, then (when a table is configured and the status came) the heartbeat row."""
    try:
        sample = await asyncio.wait_for(monitor.poll(), timeout)
    except TimeoutError:
        await monitor.close()  # a hung connection is not reused; the next poll reconnects
        hung = DatabaseError(f"{where} did not answer in {timeout:g} s", kind=Kind.LOST, where=where,
                             fix=HUNG_FIX)
        sample = Sample(time.time(), time.monotonic(), None, hung.message, hung)
    status = sample.status
    error = named(sample.error, where) if sample.error else None
    if status is None:
        if error is None:
            error = f"{where}: no replica status"
        unread = f"not read: {error}" if heartbeat_table else None
        return ReplicaReading(sample.wall, sample.mono, None, error, None, unread, monitor.flavor,
                              sample.fault)
    if not heartbeat_table or heartbeat is None:
        return ReplicaReading(sample.wall, sample.mono, status, None, None, None, monitor.flavor)
    server_id = heartbeat_server_id or status.source_server_id or None
    row: HeartbeatRow | None = None
    hb_error: str | None = None
    try:
        row = await asyncio.wait_for(heartbeat.read(heartbeat_table, server_id), timeout)
    except TimeoutError:
        hb_error = f"{where} did not answer the heartbeat read in {timeout:g} s"
    except LagdError as e:
        hb_error = named(str(e), where)
    if row is None and hb_error is None:
        hb_error = f"no heartbeat row for server_id {server_id} in {heartbeat_table}"
    return ReplicaReading(sample.wall, sample.mono, status, None, row, hb_error, monitor.flavor)
