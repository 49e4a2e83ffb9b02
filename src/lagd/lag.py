"""Replication lag you can trust: three methods, a state, backlog and forecast.

The daemon gathers one :class:`LagInputs` per poll (replica status, heartbeat
row, what the relay-log reader knows, the clocks) and hands it to
:meth:`LagTracker.update`, which returns a frozen :class:`LagReading`.  The
tracker reads no clock itself, so every unit test is a table of inputs.

Rules that make the numbers trustworthy (docs/lag.md has the operator's view):

- A lag that cannot be measured is ``None`` with a reason, never 0; a method
  that stopped working keeps its last-success time so staleness shows.
- 0 means "applied everything received" only while both threads run.
- Lag is never negative: a negative raw value is clock skew, reported as 0
  with ``clamped`` set and explained by :class:`~lagd.lag_rates.ClockOffset`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from lagd.heartbeat import HeartbeatRow
from lagd.lag_rates import (
    RATE_TIME_CONSTANT,
    SPEED_TIME_CONSTANT,
    ClockOffset,
    ClockOffsetEstimator,
    DecayingRate,
    HistogramSnapshot,
    LagHistogram,
    ProgressRate,
    WindowAverage,
    WindowAverages,
    catch_up_eta,
)
from lagd.mysql.replica import IoState, ReplicaStatus

__all__ = [
    "ApplyRates",
    "Backlog",
    "BacklogReading",
    "LagInputs",
    "LagMethod",
    "LagReading",
    "LagTracker",
    "Measurement",
    "MethodReading",
    "ReplicaState",
    "choose_primary",
    "event_time_lag",
    "heartbeat_lag",
    "resolve_state",
    "sbm_lag",
]


class ReplicaState(StrEnum):
    """What the replica is doing, in order of precedence (first match wins)."""

    UNKNOWN = "unknown"  # server unreachable, or no status for the channel
    ERROR = "error"  # a thread stopped with its last error set
    STOPPED = "stopped"  # SQL (applier) thread not running
    IO_STOPPED = "io_stopped"  # SQL thread runs, IO (receiver) thread stopped or (re)connecting
    APPLYING = "applying"  # both run, something received is not applied yet
    IDLE = "idle"  # both run, everything received is applied


class LagMethod(StrEnum):
    """The ``method`` label: the same names whatever the server calls its columns."""

    HEARTBEAT = "heartbeat"
    EVENT_TIME = "event_time"
    SBM = "sbm"


@dataclass(frozen=True, slots=True)
class Backlog:
    """Received by the IO thread, not yet applied by the SQL thread (from the relay-log reader).

    ``oldest_commit_time``: source commit time (epoch seconds) of the oldest
    of those transactions, None when there are none or it is not known.
    """

    transactions: int
    bytes: int
    rows: int
    oldest_commit_time: float | None = None
    # The SQL thread's place in source time, finer than the commit second (lagd.backlog); None: use
    # oldest_commit_time.
    position: float | None = None

    @property
    def empty(self) -> bool:
        return self.transactions == 0 and self.bytes == 0


@dataclass(frozen=True, slots=True)
class LagInputs:
    """Everything one update needs, gathered by the daemon at one moment.

    ``applying_commit_time`` is the source commit time (epoch seconds) of the
    transaction the SQL thread is inside of, None between transactions.
    ``applied_transactions``/``applied_rows`` are cumulative counters; a
    decrease is taken as a restart of the count.
    """

    now: float  # wall clock, epoch seconds, on the replica's host
    monotonic: float  # seconds, for intervals
    status: ReplicaStatus | None  # None: server unreachable or no such channel
    status_error: str | None = None
    heartbeat: HeartbeatRow | None = None
    heartbeat_error: str | None = None  # None together with heartbeat=None: not configured
    applying_commit_time: float | None = None
    backlog: Backlog | None = None  # None: relay-log reader not available
    applied_transactions: int = 0
    applied_rows: int = 0
    # The SQL thread is inside a big transaction the look-ahead saw (the
    # advisor), and how many seconds it will still hold it (None: not known).
    inside_big: bool = False
    stall_remaining: float | None = None


@dataclass(frozen=True, slots=True)
class Measurement:
    """One method's verdict for one moment: seconds (never negative) or None, and why."""

    seconds: float | None
    reason: str
    raw: float | None = None  # before clamping; may be negative
    clamped: bool = False  # raw was negative (clock skew) and is reported as 0


@dataclass(frozen=True, slots=True)
class MethodReading:
    """A method's value as exported: the measurement plus its history.

    ``stale``: no value now, and none for more than ``stale_after`` seconds
    (counted from the tracker's first update when there never was one).
    """

    method: LagMethod
    seconds: float | None
    reason: str
    last_success: float | None  # wall clock (epoch s) of the last update with a value
    stale: bool
    clamped: bool = False


@dataclass(frozen=True, slots=True)
class BacklogReading:
    transactions: int
    bytes: int
    rows: int
    oldest_age: float | None  # seconds since the oldest waiting transaction committed on the source


@dataclass(frozen=True, slots=True)
class ApplyRates:
    """Smoothed with time constant ``time_constant`` seconds; None until measured.

    ``speed`` is in source-seconds applied per wall-second: 1 keeps pace with
    the source, above 1 catches up, 0 applies nothing (stopped, or inside one
    long transaction). The smoothing starts afresh after every gap without
    progress (see :class:`~lagd.lag_rates.ProgressRate`). The ``*_total``
    fields are counters since the daemon started (for Prometheus' rate()):
    transactions and rows the SQL thread passed the end of, and source-seconds
    its applied position advanced while it had work; None without the
    relay-log reader, which is what counts them.
    """

    speed: float | None
    transactions_per_second: float | None
    rows_per_second: float | None
    time_constant: float
    transactions_total: int | None = None
    rows_total: int | None = None
    source_seconds_total: float | None = None


@dataclass(frozen=True, slots=True)
class LagReading:
    at: float  # wall clock of the inputs, epoch seconds
    state: ReplicaState
    state_reason: str
    heartbeat: MethodReading
    event_time: MethodReading
    sbm: MethodReading
    lag: float | None  # primary lag, seconds
    lag_method: LagMethod | None
    lag_reason: str
    backlog: BacklogReading | None
    rates: ApplyRates
    eta: float | None  # seconds to catch up; math.inf: never at the current speed
    eta_reason: str
    averages: tuple[WindowAverage, ...]  # 1, 5, 15 minutes
    clock_offset: ClockOffset | None
    clock_skew: bool  # a value was clamped now, or the replica's clock is proven behind
    histogram: HistogramSnapshot
    lag_without_delay: float | None = None  # primary lag minus the configured SQL_Delay (as mysqld-mixin)

    @property
    def methods(self) -> tuple[MethodReading, ...]:
        return (self.heartbeat, self.event_time, self.sbm)


# --- pure decisions -----------------------------------------------------------


def _sql_error(st: ReplicaStatus) -> str:
    text = f"SQL thread error {st.last_sql_errno}"
    return f"{text}: {st.last_sql_error}" if st.last_sql_error else text


def _io_error(st: ReplicaStatus) -> str:
    text = f"IO thread error {st.last_io_errno}"
    return f"{text}: {st.last_io_error}" if st.last_io_error else text


def _blocked(st: ReplicaStatus) -> str | None:
    # Why lag cannot shrink to 0 whatever the apply speed.
    if not st.sql_running:
        return "the SQL thread is not running"
    if st.io_state is not IoState.RUNNING:
        return f"the IO thread is {st.io_state.value} and nothing new arrives from the source"
    return None


def _caught_up_by_position(st: ReplicaStatus) -> bool:
    # Without the relay-log reader: the SQL thread has executed up to where the IO thread has read.
    return (
        st.relay_source_log_file == st.read_source_log_file
        and st.exec_source_log_pos == st.read_source_log_pos
    )


def resolve_state(
    status: ReplicaStatus | None,
    status_error: str | None = None,
    backlog: Backlog | None = None,
    applying_commit_time: float | None = None,
) -> tuple[ReplicaState, str]:
    """The replica's state and a one-line reason. Precedence, first match wins:

    unknown (no status) > error (a stopped thread with its error set; SQL
    first) > stopped (SQL thread not running) > io_stopped (IO thread stopped
    or connecting) > applying (something received not applied) > idle.
    Whether something waits comes from the relay-log reader when it is
    available, else from the source coordinates executed vs read.
    """
    if status is None:
        return ReplicaState.UNKNOWN, f"no replica status: {status_error or 'server not asked yet'}"
    io = status.io_state
    if not status.sql_running and status.last_sql_errno:
        return ReplicaState.ERROR, f"SQL thread stopped on {_sql_error(status)}"
    if io is IoState.STOPPED and status.last_io_errno:
        return ReplicaState.ERROR, f"IO thread stopped on {_io_error(status)}"
    if not status.sql_running:
        io_note = (
            "IO thread running, so received transactions pile up"
            if io is IoState.RUNNING
            else (f"IO thread {io.value} too")
        )
        return ReplicaState.STOPPED, f"SQL thread not running (no error); {io_note}"
    if io is not IoState.RUNNING:
        why = f"IO thread {io.value}"
        if status.last_io_errno:
            why += f", retrying after {_io_error(status)}"
        return ReplicaState.IO_STOPPED, f"{why}: nothing new arrives from the source"
    if status.sql_remaining_delay is not None:
        return ReplicaState.APPLYING, (
            f"waiting out SQL_Delay={status.sql_delay} s, {status.sql_remaining_delay} s remaining"
        )
    if backlog is not None:
        if applying_commit_time is not None or not backlog.empty:
            return ReplicaState.APPLYING, (
                f"{backlog.transactions} transactions ({backlog.bytes} bytes) received, not applied"
            )
        return ReplicaState.IDLE, "both threads running; everything received is applied"
    if applying_commit_time is not None or not _caught_up_by_position(status):
        return ReplicaState.APPLYING, "executed source position is behind the read position"
    return ReplicaState.IDLE, "both threads running; executed source position equals the read position"


def heartbeat_lag(now: float, row: HeartbeatRow | None, error: str | None = None) -> Measurement:
    """Replica ``now`` minus the heartbeat row's source timestamp."""
    if row is None:
        return Measurement(None, error or "heartbeat not configured (lag.heartbeat_table is empty)")
    raw = now - row.ts
    where = f"row of server_id {row.server_id} written {row.ts_text} UTC by the source's clock"
    if raw < 0:
        return Measurement(
            0.0,
            f"{where} is {-raw:.3f} s in the future: the replica's clock is behind the source's "
            "(clock skew, reported as 0)",
            raw,
            clamped=True,
        )
    return Measurement(raw, where, raw)


def event_time_lag(
    now: float,
    status: ReplicaStatus | None,
    applying_commit_time: float | None,
    backlog: Backlog | None,
) -> Measurement:
    """Replica ``now`` minus the source commit time of the oldest transaction not yet applied.

    That is the one being applied, else the oldest waiting in the backlog. 0
    only when everything received is applied and both threads run: with the
    IO thread down the source may be ahead, with the SQL thread down the
    replica is not keeping up with anything.
    """
    times = [
        t for t in (applying_commit_time, backlog.oldest_commit_time if backlog else None) if t is not None
    ]
    if times:
        raw = now - min(times)
        if status is None:
            what = "server unreachable; the oldest transaction not applied when last seen"
        elif not status.sql_running:
            what = "SQL thread stopped; the next transaction to apply"
        elif applying_commit_time is not None and applying_commit_time <= min(times):
            what = "applying a transaction that"
        else:
            what = "the next transaction to apply"
        delay = f" (includes SQL_Delay={status.sql_delay} s)" if status and status.sql_delay else ""
        if raw < 0:
            return Measurement(
                0.0,
                f"{what} committed {-raw:.3f} s in the replica's future: clock skew, reported as 0",
                raw,
                clamped=True,
            )
        return Measurement(raw, f"{what} committed on the source {raw:.3f} s ago{delay}", raw)
    if backlog is None:
        return Measurement(None, "relay-log reader not available")
    if not backlog.empty:
        return Measurement(
            None, f"{backlog.transactions} transactions waiting but their source commit time is not known"
        )
    if status is None:
        return Measurement(None, "server unreachable: cannot tell whether everything received is applied")
    if not status.sql_running:
        return Measurement(None, "SQL thread stopped and nothing received since: lag unknown, not 0")
    if status.io_state is not IoState.RUNNING:
        return Measurement(
            None,
            f"applied everything received, but the IO thread is {status.io_state.value}: "
            "the source may be ahead, so not 0",
        )
    return Measurement(0.0, "applied everything received; both threads running", 0.0)


def sbm_lag(status: ReplicaStatus | None, *, unmoved_since_start: bool = False) -> Measurement:
    """Seconds_Behind_Master / Seconds_Behind_Source as the server reports it; NULL stays None.

    ``unmoved_since_start``: the SQL thread has not applied anything since it (or its
    server) started. The server counts the lag from the last event it applied, and
    before the first it reports 0 whatever waits: MariaDB 10.11, a replica killed and
    restarted with 372 transactions received and not applied, reported 0 for its first
    readings (tests/faults/test_replica_process.py). A 0 then, with the executed position
    behind the read one, is not 0 but unknown."""
    if status is None:
        return Measurement(None, "no replica status")
    if unmoved_since_start and status.seconds_behind == 0 and status.sql_running \
            and not _caught_up_by_position(status):
        return Measurement(None, "server reports 0 before its SQL thread has applied anything since it"
                                 " started, with transactions received and not applied: not 0")
    if status.seconds_behind is None:
        if not status.sql_running:
            why = "the SQL thread is not running"
        elif status.io_state is not IoState.RUNNING:
            why = f"the IO thread is {status.io_state.value}"
        else:
            why = "the server does not know"
        return Measurement(None, f"server reports NULL: {why}")
    value = float(status.seconds_behind)
    return Measurement(value, "as reported by the server (whole seconds)", value)


def choose_primary(
    heartbeat: Measurement, event_time: Measurement, sbm: Measurement
) -> tuple[float | None, LagMethod | None, str]:
    """Heartbeat when it has a value now, else event_time, else sbm; and why."""
    skipped: list[str] = []
    for method, m in (
        (LagMethod.HEARTBEAT, heartbeat),
        (LagMethod.EVENT_TIME, event_time),
        (LagMethod.SBM, sbm),
    ):
        if m.seconds is not None:
            because = f" ({'; '.join(skipped)})" if skipped else ""
            return m.seconds, method, f"{method.value}{because}"
        skipped.append(f"no {method.value}: {m.reason}")
    return None, None, "no method has a value: " + "; ".join(skipped)


def without_delay(lag: float | None, status: ReplicaStatus | None) -> float | None:
    """The lag minus the configured SQL_Delay, never below 0: what mysqld-mixin's
    ``mysql_slave_lag_seconds`` shows. None when the lag or the status is unknown."""
    if lag is None or status is None:
        return None
    return max(0.0, lag - float(status.sql_delay or 0))


def applied_position(inputs: LagInputs, state: ReplicaState, event_time: Measurement) -> float | None:
    """Where the SQL thread is, in source time (epoch seconds): the commit
    time of the oldest transaction not applied, or the replica's clock when
    caught up. None when it cannot be told (no event time, or not running)."""
    if event_time.raw is None or state in (ReplicaState.UNKNOWN, ReplicaState.STOPPED, ReplicaState.ERROR):
        return None
    # The commit time itself, not now - lag: a stall must read as exactly the
    # same position, which float rounding of the difference would not give.
    backlog = inputs.backlog
    head = None if backlog is None else (
        backlog.position if backlog.position is not None else backlog.oldest_commit_time)
    times = [t for t in (inputs.applying_commit_time, head) if t is not None]
    return min(times) if times else inputs.now


def _not_idle_yet(since: float, ev: Measurement, sb: Measurement
                  ) -> tuple[ReplicaState, str, Measurement, Measurement]:
    """Right after a start nothing waiting is not yet caught up (START_SETTLE): the
    state and the zeros that say so are unknown."""
    why = (f"the replica's threads started {since:.1f} s ago and nothing has arrived or been applied "
           f"since: caught up is not believed before {START_SETTLE:g} s")
    if ev.seconds == 0:
        ev = Measurement(None, f"not 0 yet: {why}")
    if sb.seconds == 0:
        sb = Measurement(None, f"not 0 yet: {why}")
    return ReplicaState.UNKNOWN, why, ev, sb


# --- the stateful part ----------------------------------------------------------

YOUNG = 1.5  # seconds of measured apply before a catch-up's own speed is the ETA's
# Seconds both threads run after a start before "everything received is applied" is
# believed while nothing has been applied since. A restarted MariaDB GTID replica
# starts its relay log again at the executed position: read = executed, nothing
# waits, and for a few hundred ms (the IO thread connecting and asking for the
# stream) it looks caught up with hundreds of transactions still on the source
# (tests/faults/test_replica_process.py, about 1 run in 13). Events reach a
# connected IO thread within a round trip; 2 s is a generous bound.
START_SETTLE = 2.0


class _History:
    """Last success of one method, in both clocks."""

    __slots__ = ("last_mono", "last_wall")

    def __init__(self) -> None:
        self.last_wall: float | None = None
        self.last_mono: float | None = None


class LagTracker:
    """Turns one :class:`LagInputs` per poll into a :class:`LagReading`.

    Keeps only what the summaries need: last successes, smoothed rates, the
    histogram, up to 15 minutes of lag values and ``offset_window`` seconds of
    heartbeat readings.  Deterministic: it reads no clock.
    """

    def __init__(
        self,
        *,
        stale_after: float = 10.0,  # as lag.stale_after in defaults.toml
        rate_time_constant: float = RATE_TIME_CONSTANT,
        offset_window: float = 600.0,
        max_gap: float = 5.0,
    ) -> None:
        self.stale_after = stale_after
        self._first_mono: float | None = None
        self._history = {m: _History() for m in LagMethod}
        self._speed = ProgressRate(min(rate_time_constant, SPEED_TIME_CONSTANT), max_gap=max_gap)
        # Counts jump when the SQL thread passes a transaction's end: a long
        # transaction is seconds of nothing and then all its rows, which a
        # smoothed rate of the counter spreads out rather than restarting on.
        self._transactions = DecayingRate(rate_time_constant)
        self._rows = DecayingRate(rate_time_constant)
        self._rate_time_constant = rate_time_constant
        self._max_gap = max_gap
        self._last_mono: float | None = None
        self._last_state: ReplicaState | None = None
        self._last_position: float | None = None
        self._catch_up_speed: float | None = None  # the last speed measured while applying
        self._idle_lag: float | None = None  # the heartbeat lag while caught up, smoothed
        self._was_inside = False  # the last reading was inside a big transaction
        self._young_after_big = False  # a big transaction ended and the speed is not measured again yet
        self._source_seconds = 0.0
        self._histogram = LagHistogram()
        self._averages = WindowAverages(max_span=stale_after)
        self._offset = ClockOffsetEstimator(offset_window)
        # A start this tracker saw (sbm_lag, START_SETTLE): ``_stopped`` while there is no
        # status or a thread does not run; then ``_start``, where the SQL thread was and
        # when, until it moves. A first reading is no start seen: `lagctl status` asks
        # once, and a busy replica's 0 with its executed position a few events behind is
        # true there.
        self._stopped = False
        self._start: tuple[tuple[str, int], float] | None = None

    def _reading(
        self, method: LagMethod, m: Measurement, inputs: LagInputs, configured: bool
    ) -> MethodReading:
        h = self._history[method]
        if m.seconds is not None:
            h.last_wall, h.last_mono = inputs.now, inputs.monotonic
            return MethodReading(method, m.seconds, m.reason, h.last_wall, False, m.clamped)
        assert self._first_mono is not None
        since = inputs.monotonic - (h.last_mono if h.last_mono is not None else self._first_mono)
        stale = configured and since > self.stale_after
        return MethodReading(method, None, m.reason, h.last_wall, stale, m.clamped)

    def _rates(
        self, inputs: LagInputs, state: ReplicaState, ev: Measurement
    ) -> tuple[ApplyRates, float | None]:
        """Apply rates, and how long nothing was applied though work waits (None: not stalled)."""
        mono, st = inputs.monotonic, inputs.status
        position = applied_position(inputs, state, ev)
        if self._last_mono is not None and mono > self._last_mono:
            # A gap is longer than a couple of polls, however slowly the daemon polls.
            self._speed.max_gap = max(self._max_gap, 2.5 * (mono - self._last_mono))
        self._last_mono = mono
        last_state, self._last_state = self._last_state, state
        if last_state is ReplicaState.IDLE and state is not ReplicaState.IDLE:
            # Caught up, the position is the clock (speed 1 whatever the replica
            # could do); a catch-up that starts is measured from its own start.
            self._speed.restart()
        busy = state in (ReplicaState.APPLYING, ReplicaState.IO_STOPPED) and position is not None
        if busy and self._last_position is not None and position is not None and last_state is state:
            self._source_seconds += max(0.0, position - self._last_position)
        self._last_position = position if busy else None
        was_inside, self._was_inside = self._was_inside, inputs.inside_big and busy
        if (inputs.inside_big or was_inside) and busy:
            # Inside one big transaction the position stands still for its whole
            # apply: those seconds are forecast from its rows, and the speed
            # stays the one of the work around it. The interval it commits in
            # is half stall too.
            self._speed.skip(mono, position)
        else:
            self._speed.add(mono, position)
        counted = inputs.backlog is not None
        if st is not None and not st.sql_running:
            # Stopped, nothing is applied: 0 for every rate, and each starts
            # afresh when the SQL thread does.
            self._speed.restart()
            self._transactions.reset()
            self._rows.reset()
            speed: float | None = 0.0
            trx: float | None = 0.0 if counted else None
            rows: float | None = trx
        else:
            if counted:
                self._transactions.add(mono, inputs.applied_transactions)
                self._rows.add(mono, inputs.applied_rows)
            else:
                self._transactions.reset()
                self._rows.reset()
            speed, trx, rows = self._speed.value, self._transactions.value, self._rows.value
        if inputs.inside_big:
            self._young_after_big = True
        elif self._speed.seconds >= YOUNG or state is not ReplicaState.APPLYING:
            self._young_after_big = False
        if (speed is not None and speed > 0 and self._speed.seconds >= YOUNG
                and state in (ReplicaState.APPLYING, ReplicaState.IO_STOPPED)):
            self._catch_up_speed = speed
        stalled_for = self._speed.stalled_for(mono)
        stalled = (stalled_for if state is ReplicaState.APPLYING and stalled_for is not None
                   and stalled_for > self._speed.max_gap and not inputs.inside_big else None)
        rates = ApplyRates(
            None if speed is None else max(0.0, speed), trx, rows, self._rate_time_constant,
            inputs.applied_transactions if counted else None,
            inputs.applied_rows if counted else None,
            self._source_seconds if counted else None,
        )
        return rates, stalled

    def _since_start(self, st: ReplicaStatus | None, mono: float) -> float | None:
        """Seconds since both threads were seen starting, while the SQL thread has
        applied nothing since; None when no such start is pending."""
        if st is None or not st.sql_running or st.io_state is not IoState.RUNNING:
            self._stopped, self._start = True, None
            return None
        pos = (st.relay_source_log_file, st.exec_source_log_pos)
        if self._stopped:
            self._stopped, self._start = False, (pos, mono)
        elif self._start is not None and pos != self._start[0]:
            self._start = None
        return None if self._start is None else mono - self._start[1]

    def update(self, inputs: LagInputs) -> LagReading:
        if self._first_mono is None:
            self._first_mono = inputs.monotonic
        now, mono, st = inputs.now, inputs.monotonic, inputs.status
        state, state_reason = resolve_state(
            st, inputs.status_error, inputs.backlog, inputs.applying_commit_time
        )

        hb = heartbeat_lag(now, inputs.heartbeat, inputs.heartbeat_error)
        if state is ReplicaState.IDLE and hb.seconds is not None and hb.seconds > self.stale_after:
            # Still reported and still primary: a stalled network looks exactly
            # like this, and a false alarm beats a false zero.
            hb = replace(
                hb,
                reason=f"{hb.reason}; the replica has applied all it received, so an old row means "
                "the writer on the source is not running, or the network stalls",
            )
        ev = event_time_lag(now, st, inputs.applying_commit_time, inputs.backlog)
        since = self._since_start(st, mono)
        sb = sbm_lag(st, unmoved_since_start=since is not None)
        if state is ReplicaState.IDLE and since is not None and since < START_SETTLE:
            state, state_reason, ev, sb = _not_idle_yet(since, ev, sb)
        hb_configured = inputs.heartbeat is not None or inputs.heartbeat_error is not None
        readings = (
            self._reading(LagMethod.HEARTBEAT, hb, inputs, hb_configured),
            self._reading(LagMethod.EVENT_TIME, ev, inputs, True),
            self._reading(LagMethod.SBM, sb, inputs, True),
        )
        lag, lag_method, lag_reason = choose_primary(hb, ev, sb)

        if hb.raw is not None:
            self._offset.add(mono, hb.raw, idle=state is ReplicaState.IDLE)
        offset = self._offset.estimate()

        rates, stalled = self._rates(inputs, state, ev)
        if st is None:
            eta, eta_reason = None, "replica state unknown"
        else:
            inside = inputs.inside_big and state in (ReplicaState.APPLYING, ReplicaState.IO_STOPPED)
            speed = rates.speed
            if (inside or self._young_after_big) and self._catch_up_speed is not None and (
                    speed is None or self._speed.seconds < YOUNG):
                # A catch-up that starts with a big transaction has no speed of its
                # own yet (nor one right after it): the last catch-up's is the best
                # guess of what follows it.
                speed = self._catch_up_speed
            if lag is not None and state is not ReplicaState.IDLE and self._idle_lag is not None:
                # Caught up is the lag of an idle replica (a heartbeat is as old as
                # its interval, plus the trip), not 0: forecast the time to that.
                lag = max(0.0, lag - self._idle_lag)
            if inside and inputs.stall_remaining is None and _blocked(st) is None:
                eta, eta_reason = None, (
                    "inside a big transaction whose remaining apply time is not known: the ETA "
                    "returns when it is estimated or has been applied")
            else:
                eta, eta_reason = catch_up_eta(
                    lag, speed, caught_up=state is ReplicaState.IDLE, blocked=_blocked(st),
                    stalled=stalled, inside=inputs.stall_remaining if inside else None,
                )

        if lag is not None:
            self._histogram.observe(lag)
            if state is ReplicaState.IDLE and lag_method is LagMethod.HEARTBEAT:
                self._idle_lag = lag if self._idle_lag is None else self._idle_lag + 0.1 * (
                    min(lag, self.stale_after) - self._idle_lag)
        self._averages.max_span = self.stale_after  # follows a configuration reload
        self._averages.add(mono, lag)

        backlog = None
        if inputs.backlog is not None:
            b = inputs.backlog
            age = None if b.oldest_commit_time is None or b.empty else max(0.0, now - b.oldest_commit_time)
            backlog = BacklogReading(b.transactions, b.bytes, b.rows, age)

        skew = any(r.clamped for r in readings) or (offset is not None and offset.replica_behind)
        return LagReading(
            at=now,
            state=state,
            state_reason=state_reason,
            heartbeat=readings[0],
            event_time=readings[1],
            sbm=readings[2],
            lag=lag,
            lag_method=lag_method,
            lag_reason=lag_reason,
            lag_without_delay=without_delay(lag, st),
            backlog=backlog,
            rates=rates,
            eta=eta,
            eta_reason=eta_reason,
            averages=self._averages.averages(),
            clock_offset=offset,
            clock_skew=skew,
            histogram=self._histogram.snapshot(),
        )
