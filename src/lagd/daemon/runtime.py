"""The daemon's subsystems as asyncio tasks, and the snapshot they make together.

The runtime schedules and keeps state; it does no I/O of its own. Everything
that talks to the server or the disk is a collaborator passed in
(:class:`Parts`, built from the settings by :mod:`lagd.daemon.wiring`), so a
unit test runs it with fakes and no server.

Ownership (one writer each, everything else reads their latest values):
- ``lag`` task: collects the replica's status and heartbeat every poll
  interval and turns them, with the backlog, into a LagReading.
- ``relay`` task: the look-ahead reader (everything between the SQL thread and
  the end of the relay log, into the Backlog and the advisor) and the
  prefetcher, restarted together on trouble.
- ``advisor`` task: settings advice, every half minute.
The relay log feeds three consumers; MySQL is never queried at scrape time.

Two promises shape the code. Stop: every wait is on the stop event and every
question to the server has a deadline, so SIGTERM ends the daemon within its
budget in any state. No false number: a failed poll makes the status absent
at once, and after anything that may have started the relay log anew (a
restart or reconnect of the replica, STOP/START SLAVE, the SQL thread moving
back or to a file the reader never saw) the backlog, the state idle/applying
and Seconds_Behind are withheld until the reader, repositioned at the SQL
thread, has read to the end of the relay log again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from lagd import __version__
from lagd.advisor.runtime import AdvisorRuntime
from lagd.aio import CANCEL_AGAIN, cancel_and_wait
from lagd.backlog import Backlog
from lagd.config import PrefetchSettings, Settings
from lagd.daemon.collect import HeartbeatSource, ReplicaReading, StatusMonitor, collect
from lagd.daemon.health import Tracked
from lagd.daemon.state import ReplicaInfo, Snapshot, StallView
from lagd.errors import LagdError
from lagd.lag import Backlog as LagBacklog
from lagd.lag import LagMethod, LagReading, LagTracker, ReplicaState
from lagd.mysql.backoff import backoff_delay
from lagd.mysql.replica import IoState, ReplicaStatus
from lagd.prefetch.engine import PrefetchSnapshot
from lagd.relaylog import (
    Event,
    RelayLogError,
    RelayPosition,
    Resynced,
)

log = logging.getLogger("lagd")

T = TypeVar("T")

MIN_PAUSE = 0.05  # seconds every loop yields at least, whatever a slow server made of its budget
RELAY_RETRY = 5.0  # at most this many seconds between attempts to (re)open the relay log
RETRY_RESET = 30.0  # a subsystem that ran this long before failing starts its retries short again
ADVISOR_EVERY = 30.0
READ_CHUNK = 1 << 20  # bytes the look-ahead decodes before it yields to the loop
# The backlog unknown this long while the replica answers is said once in the log, with
# where the look-ahead reader stands: once (2026-11-28) a fault test saw it unknown for
# 90 s after a kill -9 and restart, and nothing said why.
UNKNOWN_WARN = 60.0


# ----- the collaborators ------------------------------------------------------------


class Session(Protocol):
    """Blocking queries run off the event loop (``lagd.mysql.session.BlockingSession``)."""

    async def run(self, fn: Callable[[Any], T]) -> T: ...

    def close(self) -> None: ...


class RelayReader(Protocol):
    """The look-ahead reader (``lagd.relaylog.RelayLogReader``)."""

    position: RelayPosition
    at_tail: bool
    @property
    def synced(self) -> bool: ...  # reached the live tail since it was made, sought or resynced

    def read(self, max_bytes: int | None = None) -> list[Event | Resynced]: ...

    def seek(self, position: RelayPosition) -> None: ...

    def close(self) -> None: ...


class Relay(Protocol):
    """Finds the replica's relay log and opens readers on it."""

    async def locate(self, configured: str = "") -> Path:
        """The relay-log index (``configured``, else where the server says), readable by this
        process; raises LagdError (with the fix) when not."""
        ...

    def reader(self, index: Path, start: RelayPosition,
               resync: Callable[[], RelayPosition]) -> RelayReader: ...


class Prefetcher(Protocol):
    """A running prefetch engine."""

    async def run(self, stop: asyncio.Event) -> None: ...

    def snapshot(self) -> PrefetchSnapshot: ...

    def configure(self, settings: PrefetchSettings) -> None:
        """Apply the reloaded settings that ``config.RELOAD`` marks in place."""
        ...

    def gate(self) -> tuple[bool, str] | None:
        """The fast gate's decision (open, reason); None when it does not use the SQL-thread split."""
        ...

    def sql_running(self) -> bool | None:
        """Whether the SQL thread ran at the engine's last status poll (every 20-250 ms,
        far fresher than the lag poll's); None before its first."""
        ...

    async def close(self) -> None: ...


class Stall(Protocol):
    """Where the SQL thread's time goes (``lagd.daemon.sqlthread.ProcStall``): sampled in a
    thread of its own from start to stop, whether prefetch runs or not."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def refresh(self, sql_running: bool, mariadb: bool, engine: bool) -> None:
        """Find the applier threads again when due (a query with a deadline). ``engine``:
        a prefetch engine runs (its gate sets the sampling rate; else a slower one)."""
        ...

    def view(self, busy: bool, gate: tuple[bool, str] | None) -> StallView: ...


# (prefetch settings, relay-log index, the server is MariaDB) -> a prefetcher ready to run
PrefetchFactory = Callable[[PrefetchSettings, Path, bool], Awaitable[Prefetcher]]


@dataclass(frozen=True, slots=True)
class Clock:
    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic


@dataclass(slots=True)
class Parts:
    """What the runtime talks to; :func:`lagd.daemon.wiring.parts` builds the real ones."""

    monitor: StatusMonitor
    session: Session  # heartbeat, settings, relay-log location: one blocking session
    heartbeat: HeartbeatSource
    relay: Relay
    prefetch: PrefetchFactory
    advisor: AdvisorRuntime
    clock: Clock = field(default_factory=Clock)
    stall: Stall | None = None


# ----- pure decisions -----------------------------------------------------------------


def restart_reason(prev: ReplicaStatus | None, cur: ReplicaStatus, *, asked_before: bool,
                   seen: Collection[str] | None) -> str | None:
    """Why what the look-ahead read may no longer be the relay log's content, or None.

    ``asked_before``: the previous poll had a status (else the replica was down,
    restarted or reconnected in between); ``seen``: the relay-log files the
    reader has read since it was positioned (None: no reader).
    """
    if not asked_before:
        return "the replica answers again after a failed poll (restart or reconnect)"
    if prev is None:
        return None
    if (cur.sql_running and not prev.sql_running and prev.io_state is not IoState.RUNNING
            and cur.io_state is not IoState.STOPPED):
        # Both threads started (MariaDB's GTID replica starts its relay log anew
        # then). The SQL thread started alone leaves the relay log as the IO
        # thread wrote it, running or stopped: the reader reads on, and what the
        # SQL thread passes before the reader reaches it still counts as applied.
        # Repositioning there lost those transactions (18 for 20 in the scrape
        # test), and re-read the whole backlog just as the SQL thread began on it
        # (200,000 changes: 0.6 CPU-seconds in a 3.4-s catch-up from a hot pool,
        # which ran 0.88x). A relay log started anew by an IO thread that failed
        # at once moves the SQL thread to a file not read, or back: see below.
        return "the SQL thread was started"
    if cur.io_state is IoState.RUNNING and prev.io_state is not IoState.RUNNING:
        return f"the IO thread was {prev.io_state.value} and runs again"
    old = RelayPosition(prev.relay_log_file, prev.relay_log_pos)
    new = RelayPosition(cur.relay_log_file, cur.relay_log_pos)
    if new < old:
        # The SQL thread never moves back by itself: the relay log was started
        # anew (MariaDB's GTID replica on restart, RESET SLAVE, CHANGE MASTER).
        return f"the SQL thread moved back from {old} to {new} (relay log started anew)"
    if seen is not None and new.file != old.file and new.file not in seen:
        return f"the SQL thread moved to {new.file}, which the look-ahead reader has not read"
    return None


def withhold(reading: LagReading, why: str) -> LagReading:
    """The reading with what depends on the backlog made unknown: state idle,
    applying or not yet known (a start the tracker doubts), the event-time and
    Seconds_Behind values, the backlog and the ETA.

    The heartbeat stays (it does not depend on the relay log), and so do the
    states read from the threads alone (error, stopped, io_stopped).
    """
    unknown = f"not known yet: {why}"
    state, state_reason = reading.state, reading.state_reason
    if state in (ReplicaState.IDLE, ReplicaState.APPLYING, ReplicaState.UNKNOWN):
        state, state_reason = ReplicaState.UNKNOWN, unknown
    event_time = replace(reading.event_time, seconds=None, reason=unknown, clamped=False)
    sbm = replace(reading.sbm, seconds=None, reason=f"not trusted yet: {why}", clamped=False)
    lag, method, lag_reason = reading.lag, reading.lag_method, reading.lag_reason
    if method is not LagMethod.HEARTBEAT:
        lag, method = None, None
        lag_reason = f"no method has a value: {reading.heartbeat.reason}; {unknown}"
    return replace(reading, state=state, state_reason=state_reason, event_time=event_time, sbm=sbm,
                   lag=lag, lag_method=method, lag_reason=lag_reason, backlog=None, eta=None,
                   eta_reason=unknown)


def overdue(reading: LagReading, why: str) -> LagReading:
    """The last reading while the next poll is overdue: nothing in it is
    current any more, the heartbeat included (it is read from the replica
    too), so every value is unknown until the replica answers. Serving it as
    it was is how a hung replica showed a lag of 0.3 s while 5 s behind."""
    unknown = f"not current: {why}"
    w = withhold(reading, why)
    hb = replace(w.heartbeat, seconds=None, reason=unknown, clamped=False)
    return replace(w, state=ReplicaState.UNKNOWN, state_reason=unknown, heartbeat=hb, lag=None,
                   lag_method=None, lag_reason=unknown, lag_without_delay=None)


def counted_down(reading: LagReading, now: float) -> LagReading:
    """The reading's ETA as of ``now``: a forecast made at the last poll, less
    the time since. Served as it was, it read up to a poll interval long (a
    catch-up shrinking lag 2.5 s per second overstated by 0.5 s of a 2 s ETA)."""
    eta = reading.eta
    if eta is None or not math.isfinite(eta) or eta <= 0 or now <= reading.at:
        return reading
    return replace(reading, eta=max(0.0, eta - (now - reading.at)))


def overdue_after(settings: Settings) -> float:
    """A poll answers in milliseconds; one this late means the replica hangs."""
    return max(1.5, 1.5 * settings.lag.poll_interval)


def poll_timeout(settings: Settings) -> float:
    """How long one question to the replica may take before its reading counts as failed."""
    return max(3.0, min(settings.replica.connect_timeout, 5.0), 2 * settings.lag.poll_interval)


# ----- the runtime ----------------------------------------------------------------------


class Runtime:
    def __init__(self, settings: Settings, parts: Parts, config_path: Path | None = None,
                 on_ready: Callable[[], None] = lambda: None) -> None:
        self.settings = settings
        self.parts = parts
        self.clock = parts.clock
        self.config_path = config_path
        self.config_error: str | None = None
        self.started_at = self.clock.wall()
        self.on_ready = on_ready
        self.ready = False
        r = settings.replica
        self.endpoint = r.socket or f"{r.host}:{r.port}"
        self.where = f"replica {self.endpoint}"
        # Rates react within ~10 s, so a catch-up's ETA is current while it happens.
        self.tracker = LagTracker(stale_after=settings.lag.stale_after, rate_time_constant=10.0)
        self.poll_timeout = poll_timeout(settings)
        self.relay_retry, self.advisor_every = RELAY_RETRY, ADVISOR_EVERY
        self.cancel_again = CANCEL_AGAIN  # aio.cancel_and_wait
        self.backlog = Backlog()
        self.advisor = parts.advisor
        self.reading: ReplicaReading | None = None
        self.lag: LagReading | None = None
        self.prefetcher: Prefetcher | None = None
        self.prefetch_off: str | None = None
        self.tail_off: str | None = None  # why the look-ahead reader does not run (None: it does or will)
        self.health = {n: Tracked(n, self.clock.wall, self.clock.mono) for n in (
            "replica_status", "heartbeat", "relay_log", "prefetch", "advisor")}
        self.loop_tick = self.clock.mono()
        self.last_lag_loop = self.clock.mono()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stop = asyncio.Event()
        self._index: Path | None = None
        self._reader: RelayReader | None = None
        self._seen: set[str] = set()
        # Generations: ``_gen`` counts repositionings of the reader, ``_known_gen``
        # is the one whose read reached the end of the relay log.
        self._gen = 0
        self._known_gen = -1
        self._unknown_why = "the relay log is not read yet"
        self._poll_began: float | None = None  # monotonic start of the poll in flight
        self._unknown_since: float | None = None  # monotonic start of the backlog withheld, if it is
        self._unknown_said = False

    # ----- lifecycle ------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        if self.parts.stall is not None:
            self.parts.stall.start()
        self._tasks = {n: asyncio.create_task(c, name=n) for n, c in (
            ("ticker", self._ticker()), ("lag", self._lag_loop()), ("relay", self._relay_loop()),
            ("advisor", self._advisor_loop()), ("stall", self._stall_loop()))}

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def stop(self) -> None:
        """Stop every task; returns promptly whatever the server does (nothing here waits on it)."""
        self._stop.set()
        await cancel_and_wait(self._tasks.values(), self.cancel_again)
        self._tasks = {}
        if self.parts.stall is not None:
            self.parts.stall.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.parts.monitor.close(), 1.0)
        self.parts.session.close()

    def apply(self, settings: Settings) -> None:
        """A reloaded config: what ``config.RELOAD`` says applies in place, applied."""
        self.settings = settings
        self.tracker.stale_after = settings.lag.stale_after
        self.poll_timeout = poll_timeout(settings)
        self.advisor.configure(settings.advisor)
        if self.prefetcher is not None:
            self.prefetcher.configure(settings.prefetch)

    async def restart_relay(self) -> None:
        """Start the look-ahead reader and the prefetcher afresh (a reload changed how they are made)."""
        old = self._tasks.pop("relay", None)
        if old is not None:
            await cancel_and_wait([old], self.cancel_again)
        if not self._stop.is_set():
            self._tasks["relay"] = asyncio.create_task(self._relay_loop(), name="relay")

    async def _ticker(self) -> None:
        while not self._stop.is_set():
            self.loop_tick = self.clock.mono()
            await self._sleep(1.0)

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds`` or until stopped, whichever comes first; always yields."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(0.0, seconds))

    # ----- lag ------------------------------------------------------------

    async def _lag_loop(self) -> None:
        while not self._stop.is_set():
            t0 = self.clock.mono()
            await self.poll_once()
            self.last_lag_loop = self.clock.mono()
            await self._sleep(max(MIN_PAUSE, self.settings.lag.poll_interval - (self.clock.mono() - t0)))

    async def poll_once(self) -> LagReading:
        """One lag poll: ask the replica, follow restarts, make the reading."""
        s, t0 = self.settings, self.clock.mono()
        prev = self.reading
        self._poll_began = t0
        try:
            cur = await collect(self.parts.monitor, self.parts.heartbeat, where=self.where,
                                timeout=self.poll_timeout, heartbeat_table=s.lag.heartbeat_table,
                                heartbeat_server_id=s.lag.heartbeat_server_id)
        finally:
            self._poll_began = None
        self.reading = cur
        st = self.health["replica_status"]
        if cur.status is None:
            # The fix the fault carries: guessed from its words, a missing grant ("Access denied;
            # you need ... privilege") was told to check the password.
            fix = cur.fault.fix if cur.fault is not None else None
            st.fail(t0, cur.status_error or f"{self.where}: no replica status", fix)
            self._unsettle(cur.status_error or "no replica status")
        else:
            st.ok(t0)
            asked = prev is None or prev.status is not None
            why = restart_reason(prev.status if prev else None, cur.status, asked_before=asked,
                                 seen=self._seen if self._reader is not None else None)
            pos = RelayPosition(cur.status.relay_log_file, cur.status.relay_log_pos)
            if why is not None and prev is not None and prev.status is not None and pos.file in self._seen \
                    and not pos < RelayPosition(prev.status.relay_log_file, prev.status.relay_log_pos):
                # Still the relay log the reader read (a thread restart, not a new
                # log): what the SQL thread got through since the last poll was
                # applied; count it before repositioning, or the counters lose it.
                self.backlog.applied_up_to(pos)
            if why is not None:
                self._reposition(pos, why)
            self.backlog.applied_up_to(pos)
            self.advisor.applied_up_to(pos, self.backlog)
            if self.advisor.wants_progress(cur.status.sql_running):
                await self._count_inside()
        self._heartbeat_health(cur)
        known = self._backlog_known()
        view = self.backlog.view()
        backlog = (LagBacklog(view.transactions, view.bytes, view.rows, view.oldest_commit_time,
                              view.position)
                   if known and cur.status is not None else None)
        # Without a reader at all (relay log not readable here) the status alone
        # decides, as lagctl's direct mode does; while one is (re)positioning, wait for it.
        settling = self.tail_off is None and not known
        inside, ahead = self.advisor.current_stall(cur.wall) if known else (False, None)
        reading = self.tracker.update(cur.inputs(
            backlog, applied_transactions=self.backlog.applied_transactions,
            applied_rows=self.backlog.applied_rows + self.advisor.rows_in_progress(),
            trust_sbm=not settling, inside_big=inside, stall_remaining=ahead))
        if settling and cur.status is not None:
            reading = withhold(reading, self._unknown_why)
            self._unknown_for(t0)
        else:
            self._unknown_since, self._unknown_said = None, False
        self.lag = reading
        self.advisor.observe_rates(reading, self.backlog)
        if cur.status is not None and not self.ready:
            self.ready = True
            self.on_ready()
        return reading

    def _unknown_for(self, now: float) -> None:
        """Say once when the backlog stays withheld UNKNOWN_WARN seconds, and what the reader is doing."""
        if self._unknown_since is None:
            self._unknown_since = now
        if self._unknown_said or now - self._unknown_since < UNKNOWN_WARN:
            return
        self._unknown_said = True
        r, task = self._reader, self._tasks.get("relay")
        where = ("no look-ahead reader" if r is None else
                 f"the look-ahead reader at {r.position} (at the tail: {r.at_tail}, synced: {r.synced})")
        log.warning("the backlog has been unknown for %.0f s while the replica answers: %s; %s,"
                    " generation %d (%d known), relay-log task %s", now - self._unknown_since,
                    self._unknown_why, where, self._gen, self._known_gen,
                    "ended" if task is None or task.done() else "running")

    async def _count_inside(self) -> None:
        """InnoDB's count of the rows the SQL thread has changed inside the big
        transaction it applies: its progress before it commits."""
        try:
            trx = await asyncio.wait_for(self.parts.monitor.applier_trx(), self.poll_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # said in the advisor's basis; the status poll reports a dead server
            self.advisor.progress(None, self.clock.wall(), error=str(e) or type(e).__name__)
            return
        self.advisor.progress(trx, self.clock.wall())

    async def _stall_loop(self) -> None:
        """Point the stall monitor at the applier threads the replica has now.

        A task of its own: a slow answer (bounded by the session's deadline)
        never delays a lag poll."""
        stall = self.parts.stall
        while stall is not None and not self._stop.is_set():
            st = self.reading.status if self.reading is not None else None
            if st is not None:
                # The prefetch engine polls the status every 20-250 ms, the lag loop every
                # poll_interval (1 s): through the engine's a started SQL thread is found
                # at once, and the gate, which measures it for two seconds before any
                # probe, starts measuring up to a second sooner.
                running = self.prefetcher.sql_running() if self.prefetcher is not None else None
                flavor = self.parts.monitor.flavor
                await stall.refresh(st.sql_running if running is None else running,
                                    bool(flavor and flavor.is_mariadb), self.prefetcher is not None)
            await self._sleep(0.25)  # refresh asks the server only when due or the SQL thread changed

    def _heartbeat_health(self, cur: ReplicaReading) -> None:
        h = self.health["heartbeat"]
        if not self.settings.lag.heartbeat_table:
            h.note("not configured")
        elif cur.heartbeat is not None:
            h.ok()
        else:
            # Not read because the status failed: that fault is said once, by replica_status.
            level = logging.DEBUG if cur.status is None else logging.WARNING
            h.fail(None, cur.heartbeat_error or "no heartbeat row", level=level)

    # ----- what the backlog is worth ----------------------------------------

    def _backlog_known(self) -> bool:
        return self._reader is not None and self._known_gen == self._gen

    def _unsettle(self, why: str) -> None:
        """The backlog is unknown from now until the reader is repositioned and at the tail."""
        if self._known_gen == self._gen:
            self._gen += 1
            self._unknown_why = why

    def _reposition(self, pos: RelayPosition, why: str) -> None:
        self._gen += 1
        self._unknown_why = f"{why}; re-reading the relay log from {pos}"
        self.backlog.reset()
        self.advisor.reset()
        self._seen = {pos.file}
        if self._reader is not None:
            log.info("relay log: %s; reading again from %s", why, pos)
            self._reader.seek(pos)

    # ----- the relay log: look-ahead reader and prefetch ------------------

    def _sql_position(self) -> RelayPosition:
        st = self.reading.status if self.reading is not None else None
        if st is None:
            raise RelayLogError("no replica status to resync from")
        return RelayPosition(st.relay_log_file, st.relay_log_pos)

    async def _relay_loop(self) -> None:
        """Find the relay log, then run the look-ahead reader and the prefetcher; retry on trouble."""
        def failed(e: Exception) -> None:
            self.tail_off = str(e)
            if self.settings.prefetch.enabled:
                self.prefetch_off = f"waits for the relay log: {e}"
                self.health["prefetch"].fail(None, self.prefetch_off, level=logging.DEBUG)

        await self._supervise("relay_log", self._relay_once, failed, self._close_relay)

    async def _supervise(self, health: str, once: Callable[[], Awaitable[None]],
                         failed: Callable[[Exception], None], close: Callable[[], Awaitable[None]]) -> None:
        """Run ``once`` until stopped; after each end ``close``, and after a failure say why
        (``health``, once per cause), tell ``failed`` and try again on the backoff."""
        h = self.health[health]
        attempt = 0
        while not self._stop.is_set():
            began = self.clock.mono()
            try:
                await once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a subsystem never dies: say why, try again
                h.failed(None, e)
                if not isinstance(e, LagdError | RelayLogError | OSError):
                    log.error("%s: unexpected failure", health.replace("_", " "), exc_info=e)
                failed(e)
            finally:
                await close()
            attempt = 0 if self.clock.mono() - began > RETRY_RESET else attempt + 1
            await self._retry(attempt)

    async def _retry(self, attempt: int) -> None:
        # Short at first: a restarted replica answers again within a second or
        # two, and the cold catch-up right after is when prefetch matters most.
        # Up to relay_retry while the trouble lasts (each cause is logged once).
        await self._sleep(backoff_delay(attempt, base=0.25, cap=self.relay_retry))

    async def _close_relay(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()
        await self._close_prefetcher()

    async def _close_prefetcher(self) -> None:
        p, self.prefetcher = self.prefetcher, None
        if p is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(p.close(), 1.0)

    async def _relay_once(self) -> None:
        while self.reading is None or self.reading.status is None:
            if self._stop.is_set():
                return
            await self._sleep(min(0.5, self.settings.lag.poll_interval))
        t0 = self.clock.mono()
        index = await self.parts.relay.locate(self.settings.replica.relay_log_index)
        self._index = index
        start = self._sql_position()
        self._reposition(start, "the look-ahead reader starts")
        reader = self._reader = self.parts.relay.reader(index, start, self._sql_position)
        self.tail_off = None
        self.health["relay_log"].ok(t0)
        tail = asyncio.create_task(self._tail(reader), name="tail")
        tasks = [tail]
        if self.settings.prefetch.enabled:
            tasks.append(asyncio.create_task(self._prefetch_loop(index), name="prefetch"))
        else:
            self.prefetch_off = "prefetch.enabled is false in the config"
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait([tail, stop], return_when=asyncio.FIRST_COMPLETED)
            if tail.done():
                tail.result()  # raises what ended it
        finally:
            await cancel_and_wait([stop, *tasks], self.cancel_again)

    async def _tail(self, reader: RelayReader) -> None:
        h = self.health["relay_log"]
        backlog, look = self.backlog, self.advisor
        while not self._stop.is_set():
            t0 = self.clock.mono()
            gen = self._gen
            files = {reader.position.file}
            batch = reader.read(READ_CHUNK)
            if backlog.feed(batch):
                # The reader jumped to the SQL thread by itself (its file was purged).
                self._gen += 1
                gen = self._gen
                self._unknown_why = "the look-ahead reader resynced to the SQL thread"
                self._seen, files = set(), set()
            if gen == self._gen:
                files.add(reader.position.file)
                self._seen |= files
                if reader.at_tail and reader.synced:
                    self._known_gen = gen
            look.feed(batch, reader.position)
            backlog.at_tail = reader.at_tail
            h.ok(t0)
            if batch:
                await asyncio.sleep(0)  # let the other tasks in between two chunks
            else:
                await self._sleep(0.2 if reader.at_tail else 0.01)

    async def _prefetch_loop(self, index: Path) -> None:
        """Build and run the prefetcher; on failure say why and build it again (the tail reads on)."""
        async def once() -> None:
            mariadb = bool(self.parts.monitor.flavor and self.parts.monitor.flavor.is_mariadb)
            self.prefetcher = await self.parts.prefetch(self.settings.prefetch, index, mariadb)
            self.prefetch_off = None
            self.health["prefetch"].ok(self.clock.mono())
            await self.prefetcher.run(self._stop)

        def failed(e: Exception) -> None:
            self.prefetch_off = str(e)

        await self._supervise("prefetch", once, failed, self._close_prefetcher)

    # ----- advisor --------------------------------------------------------

    async def _advisor_loop(self) -> None:
        h = self.health["advisor"]
        while not self._stop.is_set():
            if not (self.settings.advisor.enabled and self.reading is not None and self.reading.status):
                await self._sleep(1.0)  # not yet: look again soon rather than in half a minute
                continue
            t0 = self.clock.mono()
            try:
                await self.advisor.refresh(self.parts.session.run, self.lag)
                h.ok(t0)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a subsystem never dies: say why, try again
                h.failed(t0, e)
                if not isinstance(e, LagdError):
                    log.error("advisor: unexpected failure", exc_info=e)
            await self._sleep(self.advisor_every)

    # ----- the snapshot -----------------------------------------------------

    def snapshot(self) -> Snapshot:
        hl = self.health
        if not self.settings.advisor.enabled:
            hl["advisor"].note("disabled in the config")
        ps = self.prefetcher.snapshot() if self.prefetcher is not None else None
        if ps is not None:
            # "off" by a verdict (a pool too small) is working as designed, not a failure.
            hl["prefetch"].note(f"{ps.state}: {ps.reason}")
        elif not self.settings.prefetch.enabled:
            hl["prefetch"].note("disabled in the config")
        reading = self.reading
        flavor = self.parts.monitor.flavor
        r = self.settings.replica
        lag, began = self.lag, self._poll_began
        if lag is not None and began is not None:
            waited = self.clock.mono() - began
            if waited > overdue_after(self.settings):
                lag = overdue(lag, f"{self.where} has not answered for {waited:.1f} s")
        if lag is not None:
            lag = counted_down(lag, self.clock.wall())
        return Snapshot(
            taken_at=self.clock.wall(), version=__version__, started_at=self.started_at,
            config_path=str(self.config_path) if self.config_path else None,
            config_error=self.config_error, settings=self.settings.public_dict(),
            replica=ReplicaInfo(self.endpoint, r.user, r.channel, str(flavor) if flavor else None,
                                str(self._index) if self._index else None),
            status=reading.status if reading else None,
            status_error=reading.status_error if reading else "not polled yet",
            lag=lag, prefetch=ps, prefetch_off_reason=None if ps else self.prefetch_off,
            advisor=self.advisor.snapshot(),
            health=tuple(t.value() for t in hl.values()),
            loop_age=self.clock.mono() - self.loop_tick, stall=self._stall_view())

    def _stall_view(self) -> StallView | None:
        if self.parts.stall is None:
            return None
        # An SQL thread waiting for events sleeps: only a backlog makes its split mean something.
        state = self.lag.state if self.lag is not None else None
        busy = state is not ReplicaState.IDLE
        gate = self.prefetcher.gate() if self.prefetcher is not None else None
        return self.parts.stall.view(busy, gate)
