"""Fakes of the runtime's collaborators: a scripted replica, relay log and prefetcher.

No server and no fake database: each fake plays one protocol of
``lagd.daemon.runtime`` the way the real one behaves at its boundary
(answers, errors, hangs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from status_fixtures import prefetch, replica_status

from lagd.advisor.runtime import AdvisorRuntime
from lagd.config import PrefetchSettings, Settings, settings_from_dict
from lagd.daemon.runtime import Clock, Parts, Prefetcher, RelayReader, Runtime
from lagd.errors import LagdError
from lagd.heartbeat import HeartbeatRow, format_ts
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.monitor import Sample
from lagd.mysql.progress import ApplierTrx
from lagd.mysql.replica import ReplicaStatus, ServerFlavor
from lagd.prefetch.engine import PrefetchSnapshot
from lagd.relaylog import Event, RelayPosition, Resynced, TransactionEnd, TransactionStart

T = TypeVar("T")

WHERE = "replica 127.0.0.1:3306"
# As lagd.mysql.errors.translate words them.
DENIED = DatabaseError(f"{WHERE}: Access denied for user 'lagd'@'localhost' (using password: YES)"
                       " (error 1045)", kind=Kind.AUTH, code=1045, where=WHERE)
REFUSED = DatabaseError(f"{WHERE}: Can't connect to MySQL server (error 2003)", kind=Kind.UNREACHABLE,
                        code=2003, where=WHERE)


class FakeMonitor:
    """``mode``: "ok" answers ``status``, "down" fails with ``fault`` (in ``error``'s words when
    set), "hang" never answers."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.status: ReplicaStatus = replica_status()
        self.fault: LagdError | None = REFUSED
        self.error: str | None = None
        self.flavor: ServerFlavor | None = ServerFlavor.from_version_string("10.11.9-MariaDB")
        self.polls = 0
        self.closed = 0
        self.trx: ApplierTrx | None = None  # the applier's open transaction (lagd.mysql.progress)

    async def poll(self) -> Sample:
        self.polls += 1
        if self.mode == "hang":
            await asyncio.Event().wait()
        if self.mode == "down":
            return Sample(time.time(), time.monotonic(), None, self.error or str(self.fault), self.fault)
        return Sample(time.time(), time.monotonic(), self.status)

    async def applier_trx(self) -> ApplierTrx | None:
        return self.trx

    async def applied_gtids(self) -> str | None:
        """No position statement: the engine takes a full status every poll."""
        return None

    async def query(self, sql: str) -> list[dict[str, Any]]:
        """No statement is known here: as a replica that fails them (the caller copes)."""
        verb = sql.split(maxsplit=1)[0]
        raise DatabaseError(f"{WHERE}: the fake monitor answers no {verb}", kind=Kind.OTHER, where=WHERE)

    async def close(self) -> None:
        self.closed += 1


class FakeSession:
    """Blocking queries: every call fails (``fail``) or hangs (``hang``); counts calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.hang = False
        self.fail: DatabaseError | None = DatabaseError(f"{WHERE}: no answer", kind=Kind.LOST, where=WHERE)
        self.closed = 0

    async def run(self, fn: Callable[[Any], T]) -> T:
        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail
        return fn(None)

    def close(self) -> None:
        self.closed += 1


class FakeHeartbeat:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []
        self.age = 1.5  # seconds; None: no row
        self.hang = False

    async def read(self, table: str, server_id: int | None) -> HeartbeatRow | None:
        self.calls.append((table, server_id))
        if self.hang:
            await asyncio.Event().wait()
        ts = time.time() - self.age
        return HeartbeatRow(server_id or 1, ts, format_ts(ts))


class FakeReader:
    """Reads ``relay.log`` (transactions) from its position; ``at_tail`` once all are read."""

    def __init__(self, relay: FakeRelay, start: RelayPosition) -> None:
        self.relay = relay
        self.position = start
        self.at_tail = False
        self.synced = False  # like RelayLogReader: True once a read reached the tail since the last seek
        self.seeks: list[RelayPosition] = []
        self.closed = False

    def read(self, max_bytes: int | None = None) -> list[Event | Resynced]:
        if self.relay.read_fail is not None:
            raise self.relay.read_fail
        out: list[Event | Resynced] = []
        for trx in self.relay.log:
            end = trx[-1]
            assert isinstance(end, TransactionEnd)
            if RelayPosition(end.relay_file, end.relay_offset) > self.position:
                out += trx
                self.position = RelayPosition(end.relay_file, end.relay_offset)
        self.at_tail = self.synced = True
        return out

    def seek(self, position: RelayPosition) -> None:
        self.seeks.append(position)
        self.position = position
        self.at_tail = self.synced = False

    def close(self) -> None:
        self.closed = True


class FakeRelay:
    def __init__(self) -> None:
        self.readers: list[FakeReader] = []
        self.locates = 0
        self.configured = ""
        self.fail: LagdError | None = None
        self.read_fail: Exception | None = None
        self.log: list[list[Event | Resynced]] = []  # transactions, in relay-log order

    async def locate(self, configured: str = "") -> Path:
        self.locates += 1
        self.configured = configured
        if self.fail is not None:
            raise self.fail
        return Path("relay-bin.index")

    def reader(self, index: Path, start: RelayPosition, resync: Callable[[], RelayPosition]) -> RelayReader:
        r = FakeReader(self, start)
        self.readers.append(r)
        return r


class FakePrefetcher:
    def __init__(self, settings: PrefetchSettings) -> None:
        self.settings = settings
        self.configured: list[PrefetchSettings] = []
        self.closed = False
        self.running: bool | None = None  # the engine's own status poll: none yet

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    def snapshot(self) -> PrefetchSnapshot:
        return prefetch("idle", "the replica is caught up", 10, 0, None)

    def configure(self, settings: PrefetchSettings) -> None:
        self.configured.append(settings)

    def gate(self) -> tuple[bool, str] | None:
        return True, "the SQL thread waits on reads: prefetching"

    def sql_running(self) -> bool | None:
        return self.running

    async def close(self) -> None:
        self.closed = True


class FakeParts:
    """Every fake together, and the Parts that hand them to a Runtime."""

    def __init__(self, settings: Settings) -> None:
        self.monitor = FakeMonitor()
        self.session = FakeSession()
        self.heartbeat = FakeHeartbeat()
        self.relay = FakeRelay()
        self.prefetchers: list[FakePrefetcher] = []
        self.advisor = AdvisorRuntime(settings.advisor)

    async def make_prefetcher(self, settings: PrefetchSettings, index: Path, mariadb: bool) -> Prefetcher:
        p = FakePrefetcher(settings)
        self.prefetchers.append(p)
        return p

    def parts(self) -> Parts:
        return Parts(self.monitor, self.session, self.heartbeat, self.relay, self.make_prefetcher,
                     self.advisor, Clock())


def settings(**sections: dict[str, Any]) -> Settings:
    base: dict[str, dict[str, Any]] = {"lag": {"poll_interval": 0.1, "stale_after": 5.0},
                                       "prefetch": {"enabled": False}, "advisor": {"enabled": False}}
    for k, v in sections.items():
        base[k] = {**base.get(k, {}), **v}
    return settings_from_dict(base)


def runtime(s: Settings | None = None) -> tuple[Runtime, FakeParts]:
    s = s or settings()
    fakes = FakeParts(s)
    rt = Runtime(s, fakes.parts())
    rt.poll_timeout = 0.3
    return rt, fakes


def transaction(file: str, start: int, end: int, commit_time: float) -> list[Event | Resynced]:
    return [TransactionStart(file, start, None, None, None, commit_time, int(commit_time), 1),
            TransactionEnd(file, end, None, None, None, True, 1, end - start, 1, 1, 1, frozenset({"t.a"}))]


def at(status: ReplicaStatus, file: str, pos: int, **kw: Any) -> ReplicaStatus:
    return replace(status, relay_log_file=file, relay_log_pos=pos, **kw)
