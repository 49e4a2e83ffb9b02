"""lagd.lag and lagd.lag_rates: tables of inputs and the lag they must give.

Clocks are plain numbers here: ``NOW`` is the replica's wall clock, ``T0`` a
monotonic origin. Nothing reads a real clock.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import pytest

from lagd.heartbeat import HeartbeatRow, format_ts
from lagd.lag import (
    Backlog,
    LagInputs,
    LagMethod,
    LagReading,
    LagTracker,
    ReplicaState,
    choose_primary,
    event_time_lag,
    heartbeat_lag,
    resolve_state,
    sbm_lag,
)
from lagd.lag_rates import (
    LAG_BUCKETS,
    ClockOffsetEstimator,
    DecayingRate,
    LagHistogram,
    WindowAverages,
    catch_up_eta,
)
from lagd.mysql.replica import IoState, ReplicaStatus

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0 = 5_000.0


def status(**kw: Any) -> ReplicaStatus:
    """A healthy, caught-up replica; override what a case is about."""
    base: dict[str, Any] = dict(
        channel="",
        source_host="10.0.0.1",
        source_port=3306,
        source_user="repl",
        io_state=IoState.RUNNING,
        io_thread_state="Waiting for master to send event",
        sql_running=True,
        sql_state="Slave has read all relay log; waiting for more updates",
        seconds_behind=0,
        read_source_log_file="source-bin.000007",
        read_source_log_pos=4_000,
        relay_log_file="relay-bin.000003",
        relay_log_pos=900,
        relay_source_log_file="source-bin.000007",
        exec_source_log_pos=4_000,
        relay_log_space=5_000,
        last_io_errno=0,
        last_io_error=None,
        last_sql_errno=0,
        last_sql_error=None,
        sql_delay=0,
        sql_remaining_delay=None,
        source_server_id=1,
    )
    base.update(kw)
    return ReplicaStatus(**base)


SQL_STOPPED = dict(sql_running=False, seconds_behind=None, sql_state=None)
DUP_KEY = dict(last_sql_errno=1062, last_sql_error="Duplicate entry '7' for key 'PRIMARY'")
IO_DOWN = dict(last_io_errno=2003, last_io_error="error connecting to master 'repl@10.0.0.1:3306'")
EMPTY = Backlog(0, 0, 0, None)


def hb_row(age: float, t: float = 0.0, server_id: int = 1) -> HeartbeatRow:
    """The row a read ``t`` seconds after the start finds, ``age`` seconds old."""
    ts = NOW + t - age
    return HeartbeatRow(server_id, ts, format_ts(ts))


# --- state ----------------------------------------------------------------------

STATE_CASES = [
    ("unreachable", None, None, None, ReplicaState.UNKNOWN, "Can't connect"),
    ("sql-stopped-on-error", status(**SQL_STOPPED, **DUP_KEY), EMPTY, None, ReplicaState.ERROR, "1062"),
    (
        "io-stopped-on-error",
        status(io_state=IoState.STOPPED, seconds_behind=None, **IO_DOWN),
        EMPTY,
        None,
        ReplicaState.ERROR,
        "IO thread error 2003",
    ),
    (
        "both-stopped-both-errors-sql-wins",
        status(io_state=IoState.STOPPED, **SQL_STOPPED, **DUP_KEY, **IO_DOWN),
        EMPTY,
        None,
        ReplicaState.ERROR,
        "SQL thread",
    ),
    (
        "sql-stopped-by-hand-io-stopped-on-error",
        status(io_state=IoState.STOPPED, **SQL_STOPPED, **IO_DOWN),
        EMPTY,
        None,
        ReplicaState.ERROR,
        "IO thread error",
    ),
    (
        "sql-stopped-null-sbm",
        status(**SQL_STOPPED),
        Backlog(3, 900, 3, NOW - 5),
        None,
        ReplicaState.STOPPED,
        "pile up",
    ),
    (
        "both-stopped-no-error",
        status(io_state=IoState.STOPPED, **SQL_STOPPED),
        EMPTY,
        None,
        ReplicaState.STOPPED,
        "IO thread stopped too",
    ),
    (
        "sql-stopped-io-retrying",
        status(io_state=IoState.CONNECTING, **SQL_STOPPED, **IO_DOWN),
        EMPTY,
        None,
        ReplicaState.STOPPED,
        "connecting",
    ),
    (
        "io-stopped-no-error",
        status(io_state=IoState.STOPPED, seconds_behind=None),
        EMPTY,
        None,
        ReplicaState.IO_STOPPED,
        "stopped",
    ),
    (
        "io-connecting-retrying-on-error",
        status(io_state=IoState.CONNECTING, seconds_behind=None, **IO_DOWN),
        EMPTY,
        None,
        ReplicaState.IO_STOPPED,
        "retrying after IO thread error 2003",
    ),
    (
        "backlog-waiting",
        status(seconds_behind=4),
        Backlog(2, 700, 9, NOW - 4),
        None,
        ReplicaState.APPLYING,
        "2 transactions",
    ),
    ("inside-a-transaction", status(), EMPTY, NOW - 1, ReplicaState.APPLYING, "received"),
    ("caught-up", status(), EMPTY, None, ReplicaState.IDLE, "everything received is applied"),
    (
        "running-with-an-old-sql-error",
        status(**DUP_KEY),
        EMPTY,
        None,
        ReplicaState.IDLE,
        "both threads running",
    ),
    ("no-reader-positions-equal", status(), None, None, ReplicaState.IDLE, "equals the read position"),
    ("no-reader-exec-behind", status(exec_source_log_pos=3_000), None, None, ReplicaState.APPLYING, "behind"),
    (
        "no-reader-exec-in-older-file",
        status(relay_source_log_file="source-bin.000006", exec_source_log_pos=4_000),
        None,
        None,
        ReplicaState.APPLYING,
        "behind",
    ),
    (
        "waiting-out-sql-delay",
        status(sql_delay=3600, sql_remaining_delay=1200),
        Backlog(1, 300, 1, NOW - 2400),
        None,
        ReplicaState.APPLYING,
        "SQL_Delay=3600 s, 1200 s remaining",
    ),
]


@pytest.mark.parametrize(
    ("st", "backlog", "applying", "want", "reason_has"),
    [c[1:] for c in STATE_CASES],
    ids=[c[0] for c in STATE_CASES],
)
def test_resolve_state(
    st: ReplicaStatus | None,
    backlog: Backlog | None,
    applying: float | None,
    want: ReplicaState,
    reason_has: str,
) -> None:
    state, reason = resolve_state(st, '(2003, "Can\'t connect to MySQL server")', backlog, applying)
    assert state is want
    assert reason_has in reason


# --- the three methods ----------------------------------------------------------------

EVENT_TIME_CASES = [
    ("caught-up-is-zero", status(), None, EMPTY, 0.0, "applied everything received"),
    ("applying-a-transaction", status(), NOW - 12.5, Backlog(4, 1_000, 4, NOW - 12.5), 12.5, "applying"),
    ("between-transactions-next-one", status(), None, Backlog(4, 1_000, 4, NOW - 8), 8.0, "next transaction"),
    (
        "oldest-of-applying-and-queued",
        status(),
        NOW - 3,
        Backlog(4, 1_000, 4, NOW - 9),
        9.0,
        "next transaction",
    ),
    (
        "sql-stopped-next-unapplied",
        status(**SQL_STOPPED),
        None,
        Backlog(4, 1_000, 4, NOW - 30),
        30.0,
        "SQL thread stopped",
    ),
    ("sql-stopped-nothing-received", status(**SQL_STOPPED), None, EMPTY, None, "not 0"),
    ("io-stopped-caught-up-not-zero", status(io_state=IoState.STOPPED), None, EMPTY, None, "not 0"),
    (
        "io-connecting-caught-up-not-zero",
        status(io_state=IoState.CONNECTING),
        None,
        EMPTY,
        None,
        "source may be ahead",
    ),
    ("reader-unavailable", status(), None, None, None, "reader not available"),
    ("reader-unavailable-but-applying-known", status(), NOW - 2, None, 2.0, "applying"),
    ("queued-commit-time-unknown", status(), None, Backlog(1, 200, 1, None), None, "not known"),
    ("unreachable-last-known-oldest", None, None, Backlog(1, 200, 1, NOW - 7), 7.0, "unreachable"),
    ("unreachable-nothing-known", None, None, EMPTY, None, "unreachable"),
    ("commit-in-the-future-is-clamped", status(), NOW + 1.5, EMPTY, 0.0, "clock skew"),
    ("delayed-replica-says-so", status(sql_delay=60), NOW - 61, EMPTY, 61.0, "SQL_Delay=60"),
]


@pytest.mark.parametrize(
    ("st", "applying", "backlog", "want", "reason_has"),
    [c[1:] for c in EVENT_TIME_CASES],
    ids=[c[0] for c in EVENT_TIME_CASES],
)
def test_event_time(
    st: ReplicaStatus | None,
    applying: float | None,
    backlog: Backlog | None,
    want: float | None,
    reason_has: str,
) -> None:
    m = event_time_lag(NOW, st, applying, backlog)
    assert m.seconds == (pytest.approx(want) if want is not None else None)
    assert reason_has in m.reason


def test_event_time_grows_while_the_sql_thread_is_stopped() -> None:
    waiting = Backlog(4, 1_000, 4, NOW - 30)
    seen = [event_time_lag(NOW + t, status(**SQL_STOPPED), None, waiting).seconds for t in (0, 10, 100)]
    assert seen == [pytest.approx(30), pytest.approx(40), pytest.approx(130)]


HEARTBEAT_CASES = [
    ("fresh-row", hb_row(0.25), None, 0.25, False, "server_id 1"),
    ("old-row-is-lag", hb_row(42.0), None, 42.0, False, "UTC"),
    ("row-from-the-future-is-skew", hb_row(-3.0), None, 0.0, True, "3.000 s in the future"),
    (
        "table-missing",
        None,
        "heartbeat table percona.heartbeat does not exist",
        None,
        False,
        "does not exist",
    ),
    ("not-configured", None, None, None, False, "not configured"),
]


@pytest.mark.parametrize(
    ("row", "error", "want", "clamped", "reason_has"),
    [c[1:] for c in HEARTBEAT_CASES],
    ids=[c[0] for c in HEARTBEAT_CASES],
)
def test_heartbeat_lag(
    row: HeartbeatRow | None, error: str | None, want: float | None, clamped: bool, reason_has: str
) -> None:
    m = heartbeat_lag(NOW, row, error)
    assert m.seconds == (pytest.approx(want, abs=1e-6) if want is not None else None)
    assert m.clamped is clamped
    assert reason_has in m.reason


SBM_CASES = [
    ("reported", status(seconds_behind=17), 17.0, "as reported"),
    ("zero-is-zero-when-reported", status(seconds_behind=0), 0.0, "as reported"),
    ("null-sql-stopped", status(**SQL_STOPPED), None, "SQL thread is not running"),
    ("null-io-stopped", status(io_state=IoState.STOPPED, seconds_behind=None), None, "IO thread is stopped"),
    ("null-running", status(seconds_behind=None), None, "does not know"),
    ("unreachable", None, None, "no replica status"),
]


@pytest.mark.parametrize(
    ("st", "want", "reason_has"), [c[1:] for c in SBM_CASES], ids=[c[0] for c in SBM_CASES]
)
def test_sbm_null_stays_missing(st: ReplicaStatus | None, want: float | None, reason_has: str) -> None:
    m = sbm_lag(st)
    assert m.seconds == want
    assert reason_has in m.reason


BEHIND = dict(exec_source_log_pos=1_000)  # received up to 4,000, applied up to 1,000

UNMOVED_CASES = [
    # (status, the SQL thread applied nothing since it started, want)
    ("zero-behind-before-first-event", status(**BEHIND), True, None),
    ("zero-behind-after-first-event", status(**BEHIND), False, 0.0),
    ("zero-caught-up-before-first-event", status(), True, 0.0),
    ("nonzero-before-first-event", status(seconds_behind=40, **BEHIND), True, 40.0),
]


@pytest.mark.parametrize(("st", "unmoved", "want"), [c[1:] for c in UNMOVED_CASES],
                         ids=[c[0] for c in UNMOVED_CASES])
def test_a_zero_before_the_sql_thread_applied_anything_is_not_zero(
        st: ReplicaStatus, unmoved: bool, want: float | None) -> None:
    """The server counts from the last event applied: before the first since a start it
    says 0 whatever waits (MariaDB 10.11, a replica killed and restarted: the fault test)."""
    m = sbm_lag(st, unmoved_since_start=unmoved)
    assert m.seconds == want
    if want is None:
        assert "not 0" in m.reason


def test_the_tracker_distrusts_sbm_zero_until_the_sql_thread_moves_after_a_restart() -> None:
    """No heartbeat, no relay-log reader (backlog None): SBM is all there is. A restarted
    replica's first readings say 0 with 3,000 bytes received and not applied: unknown
    until its executed position moves, and again after the next spell without status."""
    t = LagTracker()
    zero_behind = status(**BEHIND)
    moved = status(exec_source_log_pos=1_500)
    lags = [t.update(inputs(i, status=st, backlog=None)).lag
            for i, st in enumerate([None, zero_behind, zero_behind, moved, zero_behind, None, zero_behind,
                                    status(**SQL_STOPPED), zero_behind])]
    assert lags == [None, None, None, 0.0, 0.0, None, None, None, None]
    # A first reading is no restart seen (`lagctl status` asks once): the server's 0 stands.
    assert LagTracker().update(inputs(0, status=zero_behind, backlog=None)).lag == 0.0


CONNECTING = dict(io_state=IoState.CONNECTING, seconds_behind=None)
APPLIED = dict(exec_source_log_pos=4_000, relay_log_pos=9_000)
WAITING = Backlog(3, 3_000, 30, NOW - 5)

START_CASES = [
    # (readings: (t, status or None, backlog), what each reading's state and lag are)
    ("first-reading-is-no-start", [(0, status(), EMPTY)], [("idle", 0.0)]),
    # A replica restarted with nothing received yet: not idle for START_SETTLE seconds,
    # then idle if nothing came (the source had nothing more).
    ("restart-nothing-arrives", [(0, None, None), (1, status(), EMPTY), (2, status(), EMPTY),
                                 (2.9, status(), EMPTY), (3, status(), EMPTY)],
     [("unknown", None), ("unknown", None), ("unknown", None), ("unknown", None), ("idle", 0.0)]),
    # ... and when the source had more: applying once it arrives, idle as soon as it is applied.
    ("restart-then-catch-up", [(0, None, None), (1, status(), EMPTY), (1.5, status(**BEHIND), WAITING),
                               (2, status(**APPLIED), EMPTY)],
     [("unknown", None), ("unknown", None), ("applying", 6.5), ("idle", 0.0)]),
    # An IO thread that reconnects is a start too; the SQL thread stopped and started as well.
    ("io-reconnects", [(0, status(), EMPTY), (1, status(**CONNECTING), EMPTY), (2, status(), EMPTY),
                       (4, status(), EMPTY)],
     [("idle", 0.0), ("io_stopped", None), ("unknown", None), ("idle", 0.0)]),
    ("sql-restarted", [(0, status(), EMPTY), (1, status(**SQL_STOPPED), EMPTY), (2, status(), EMPTY)],
     [("idle", 0.0), ("stopped", None), ("unknown", None)]),
    # Without a relay-log reader (SBM alone) the same.
    ("restart-no-reader", [(0, None, None), (1, status(), None), (3.5, status(), None)],
     [("unknown", None), ("unknown", None), ("idle", 0.0)]),
]


@pytest.mark.parametrize(("readings", "want"), [c[1:] for c in START_CASES], ids=[c[0] for c in START_CASES])
def test_nothing_waiting_right_after_a_start_is_not_yet_caught_up(
        readings: list[tuple[float, ReplicaStatus | None, Backlog | None]],
        want: list[tuple[str, float | None]]) -> None:
    """The fault test's false idle: a killed and restarted GTID replica starts its relay log
    at the executed position, and looks caught up until its IO thread has fetched."""
    t = LagTracker()
    got = []
    for at, st, backlog in readings:
        r = t.update(inputs(at, status=st, backlog=backlog))
        got.append((r.state.value, None if r.lag is None else round(r.lag, 3)))
        if r.state is ReplicaState.UNKNOWN and st is not None:
            assert "started" in r.state_reason and "not 0 yet" in r.event_time.reason + r.sbm.reason
    assert got == want


def test_a_heartbeat_still_tells_the_lag_right_after_a_start() -> None:
    t = LagTracker()
    t.update(inputs(0, status=None, backlog=None))
    r = t.update(inputs(1, status=status(), backlog=EMPTY, heartbeat=hb_row(30, 1)))
    assert r.state is ReplicaState.UNKNOWN and r.lag_method is LagMethod.HEARTBEAT
    assert r.lag == pytest.approx(30)


def test_primary_prefers_heartbeat_then_event_time_then_sbm() -> None:
    hb_ok, hb_missing = heartbeat_lag(NOW, hb_row(5)), heartbeat_lag(NOW, None, "no row for server_id 1")
    ev_ok, ev_missing = (
        event_time_lag(NOW, status(), NOW - 4, EMPTY),
        event_time_lag(NOW, status(), None, None),
    )
    sbm_ok, sbm_missing = sbm_lag(status(seconds_behind=3)), sbm_lag(status(**SQL_STOPPED))
    assert choose_primary(hb_ok, ev_ok, sbm_ok)[:2] == (pytest.approx(5), LagMethod.HEARTBEAT)
    value, method, reason = choose_primary(hb_missing, ev_ok, sbm_ok)
    assert (value, method) == (pytest.approx(4), LagMethod.EVENT_TIME)
    assert "no row for server_id 1" in reason
    assert choose_primary(hb_missing, ev_missing, sbm_ok)[:2] == (3.0, LagMethod.SBM)
    value, method, reason = choose_primary(hb_missing, ev_missing, sbm_missing)
    assert (value, method) == (None, None)
    assert "no method has a value" in reason and "NULL" in reason


# --- the tracker: scenarios over time -------------------------------------------------


def inputs(t: float, **kw: Any) -> LagInputs:
    """Inputs ``t`` seconds after the start; both clocks advance together."""
    base: dict[str, Any] = dict(now=NOW + t, monotonic=T0 + t, status=status(), backlog=EMPTY)
    base.update(kw)
    return LagInputs(**base)


def run(tracker: LagTracker, steps: list[LagInputs]) -> list[LagReading]:
    return [tracker.update(s) for s in steps]


def test_stopped_sql_thread_lag_keeps_growing_and_never_reads_zero() -> None:
    stop_at = NOW  # the heartbeat row and the first waiting transaction stop changing here
    frozen_row = HeartbeatRow(1, stop_at - 0.5, format_ts(stop_at - 0.5))
    steps = [
        inputs(
            t,
            status=status(**SQL_STOPPED),
            heartbeat=frozen_row,
            backlog=Backlog(int(t), int(t) * 300, int(t), stop_at + 0.2),
            applied_transactions=100,
        )
        for t in range(1, 41)
    ]
    readings = run(LagTracker(stale_after=30.0), steps)
    for r in readings:
        assert r.state is ReplicaState.STOPPED
        assert r.sbm.seconds is None and "SQL thread is not running" in r.sbm.reason
        assert r.lag_method is LagMethod.HEARTBEAT
        assert r.eta == math.inf
    lags = [r.lag for r in readings]
    assert lags[0] == pytest.approx(1.5) and lags[-1] == pytest.approx(40.5)
    assert all(b is not None and a is not None and b > a for a, b in pairwise(lags))
    ev = [r.event_time.seconds for r in readings]
    assert ev[0] == pytest.approx(0.8) and ev[-1] == pytest.approx(39.8)
    assert readings[-1].rates.transactions_per_second == 0.0
    # NULL since the first update (t=1): stale once that is more than 30 s ago.
    assert [r.sbm.stale for r in readings[29:32]] == [False, False, True]
    assert readings[-1].backlog is not None and readings[-1].backlog.oldest_age == pytest.approx(39.8)


def test_staleness_and_last_success() -> None:
    tracker = LagTracker(stale_after=30.0)
    ok = tracker.update(inputs(0, heartbeat=hb_row(0.3)))
    assert ok.heartbeat.seconds == pytest.approx(0.3) and ok.heartbeat.last_success == NOW
    missing = "heartbeat table percona.heartbeat does not exist on 127.0.0.1:3306"
    after = [tracker.update(inputs(t, heartbeat_error=missing)) for t in (10, 30, 31, 300)]
    assert [r.heartbeat.seconds for r in after] == [None] * 4
    assert [r.heartbeat.stale for r in after] == [False, False, True, True]
    assert all(r.heartbeat.last_success == NOW and r.heartbeat.reason == missing for r in after)
    assert all(r.lag_method is LagMethod.EVENT_TIME and r.lag == 0.0 for r in after)


def test_never_succeeded_goes_stale_after_the_grace_and_unconfigured_never() -> None:
    tracker = LagTracker(stale_after=5.0)
    rs = run(tracker, [inputs(t, backlog=None) for t in (0, 5, 6)])
    assert [r.event_time.stale for r in rs] == [False, False, True]
    assert all(r.event_time.last_success is None for r in rs)
    assert not any(r.heartbeat.stale for r in rs)  # heartbeat not configured: missing by design


def test_unreachable_server_is_unknown_not_zero() -> None:
    tracker = LagTracker()
    tracker.update(inputs(0, heartbeat=hb_row(0.4)))
    r = tracker.update(
        inputs(
            1,
            status=None,
            status_error="(2013, 'Lost connection')",
            heartbeat_error="(2013, 'Lost connection')",
        )
    )
    assert r.state is ReplicaState.UNKNOWN and "Lost connection" in r.state_reason
    assert r.lag is None and r.lag_method is None
    assert r.eta is None
    assert r.histogram.count == 1  # the unknown update is not counted as a lag of 0


def test_lag_is_never_negative_and_skew_is_flagged() -> None:
    r = LagTracker().update(
        inputs(0, heartbeat=hb_row(-2.0), applying_commit_time=NOW + 1.0, backlog=Backlog(1, 9, 1, NOW + 1))
    )
    assert r.heartbeat.seconds == 0.0 and r.heartbeat.clamped
    assert r.event_time.seconds == 0.0 and r.event_time.clamped
    assert r.lag == 0.0 and r.clock_skew
    assert r.clock_offset is not None and r.clock_offset.replica_behind
    assert r.clock_offset.upper_bound == pytest.approx(-2.0)


def test_clock_offset_bound_from_idle_heartbeats() -> None:
    tracker = LagTracker()
    ages = [0.9, 0.31, 0.55, 0.42]  # idle: each read sees a row up to one interval old
    rs = run(tracker, [inputs(t, heartbeat=hb_row(a, t)) for t, a in enumerate(ages)])
    off = rs[-1].clock_offset
    assert off is not None and off.upper_bound == pytest.approx(0.31)
    assert off.idle_samples == 4 and not off.replica_behind
    assert not rs[-1].clock_skew
    assert [r.heartbeat.seconds for r in rs] == [
        pytest.approx(a) for a in ages
    ]  # reported raw, not corrected


def test_clock_offset_needs_an_idle_reading_unless_it_proves_skew() -> None:
    est = ClockOffsetEstimator(window=600)
    est.add(T0, 250.0, idle=False)  # lagging: only a loose bound
    assert est.estimate() is None
    est.add(T0 + 1, 0.2, idle=True)
    got = est.estimate()
    assert got is not None and got.upper_bound == 0.2
    est.add(T0 + 700, 0.5, idle=True)  # the old readings leave the window
    got = est.estimate()
    assert got is not None and got.upper_bound == 0.5 and got.samples == 1


def test_clock_offset_of_whole_hours_hints_at_local_time() -> None:
    est = ClockOffsetEstimator()
    est.add(T0, -7200.3, idle=True)  # writer east of UTC without --utc
    got = est.estimate()
    assert got is not None and got.replica_behind and "--utc" in got.reason


# --- rates and ETA ------------------------------------------------------------------


def test_apply_speed_in_source_seconds_per_second_and_eta() -> None:
    # 100 s behind; every wall second the SQL thread gets through 3 source seconds.
    steps = [
        inputs(
            t,
            status=status(seconds_behind=int(100 - 2 * t)),
            applying_commit_time=NOW - 100 + 3 * t,
            backlog=Backlog(50, 10_000, 500, NOW - 100 + 3 * t),
            applied_transactions=1_000 + 20 * t,
            applied_rows=10_000 + 400 * t,
        )
        for t in range(0, 11)
    ]
    rs = run(LagTracker(), steps)
    assert rs[0].rates.speed is None and rs[0].eta is None and "not measured yet" in rs[0].eta_reason
    last = rs[-1]
    assert last.state is ReplicaState.APPLYING
    assert last.event_time.seconds == pytest.approx(80.0)
    assert last.rates.speed == pytest.approx(3.0)
    assert last.rates.transactions_per_second == pytest.approx(20.0)
    assert last.rates.rows_per_second == pytest.approx(400.0)
    assert last.lag_method is LagMethod.EVENT_TIME
    assert last.eta == pytest.approx(80.0 / 2.0)  # lag / (speed - 1)


def test_speed_after_a_stopped_sql_thread_is_not_averaged_with_the_stop() -> None:
    # 60 s stopped (speed 0), then applying 3 source seconds per second: the
    # ETA is finite from the second reading of the catch-up, not held at
    # infinity by a minute of smoothed zeros.
    stopped = [inputs(t, status=status(sql_running=False, seconds_behind=None),
                      applying_commit_time=NOW - 100 - t, backlog=Backlog(50, 10_000, 500, NOW - 100 - t))
               for t in range(0, 60, 5)]
    resumed = [inputs(60 + t, status=status(seconds_behind=int(160 - 2 * t)),
                      applying_commit_time=NOW - 100 + 3 * t,
                      backlog=Backlog(50, 10_000, 500, NOW - 100 + 3 * t))
               for t in range(0, 3)]
    rs = run(LagTracker(), stopped + resumed)
    assert rs[len(stopped) - 1].rates.speed == 0.0 and rs[len(stopped) - 1].eta == math.inf
    assert rs[-1].rates.speed == pytest.approx(3.0)
    assert rs[-1].eta is not None and math.isfinite(rs[-1].eta)


def test_idle_replica_is_caught_up_whatever_the_heartbeat_age() -> None:
    rs = run(LagTracker(), [inputs(t, heartbeat=hb_row(0.6, t)) for t in range(3)])
    assert rs[-1].state is ReplicaState.IDLE
    assert rs[-1].lag == pytest.approx(0.6) and rs[-1].eta == 0.0
    assert rs[-1].rates.speed == pytest.approx(1.0)  # keeps pace with the source


def test_counter_restart_is_not_a_negative_rate() -> None:
    rate = DecayingRate(60.0)
    for t, total in [(0, 1000), (1, 1010), (2, 5), (3, 15)]:
        rate.add(T0 + t, total)
    assert rate.value == pytest.approx(10.0)


def test_decay_time_constant() -> None:
    rate = DecayingRate(60.0, counter=False)
    rate.add(0, 0.0)
    rate.add(1, 0.0)  # starts at 0/s
    position = 0.0
    for t in range(2, 62):
        position += 1.0
        rate.add(t, position)  # from now on 1/s
    assert rate.value == pytest.approx(1 - math.exp(-1))  # 63% of a step after one time constant


def test_decay_does_not_depend_on_poll_regularity() -> None:
    every_second, every_half = DecayingRate(30.0, counter=False), DecayingRate(30.0, counter=False)
    for r in (every_second, every_half):
        r.add(0, 0.0)
        r.add(1, 0.0)
    for i in range(2, 40):
        every_second.add(i, (i - 1) * 2.0)
    for i in range(4, 79):
        every_half.add(i / 2, (i / 2 - 1) * 2.0)
    assert every_second.value == pytest.approx(every_half.value)


ETA_CASES = [
    ("catching-up", 120.0, 3.0, False, None, 60.0),
    ("barely-faster", 10.0, 1.5, False, None, 20.0),
    ("same-speed-never", 120.0, 1.0, False, None, math.inf),
    ("slower-never", 120.0, 0.4, False, None, math.inf),
    ("inside-long-transaction", 120.0, 0.0, False, None, math.inf),
    ("caught-up", 0.4, 1.0, True, None, 0.0),
    ("zero-lag", 0.0, None, False, None, 0.0),
    ("sql-stopped", 30.0, 2.0, False, "the SQL thread is not running", math.inf),
    ("no-speed-yet", 30.0, None, False, None, None),
    ("no-lag", None, 2.0, False, None, None),
]


@pytest.mark.parametrize(
    ("lag", "speed", "caught_up", "blocked", "want"),
    [c[1:] for c in ETA_CASES],
    ids=[c[0] for c in ETA_CASES],
)
def test_catch_up_eta(
    lag: float | None, speed: float | None, caught_up: bool, blocked: str | None, want: float | None
) -> None:
    eta, reason = catch_up_eta(lag, speed, caught_up=caught_up, blocked=blocked)
    assert eta == (pytest.approx(want) if want is not None and not math.isinf(want) else want)
    assert reason


def test_old_heartbeat_on_an_idle_replica_stays_primary_with_a_hint() -> None:
    rs = run(LagTracker(stale_after=30.0), [inputs(t, heartbeat=hb_row(25.0 + t, t)) for t in (0, 10)])
    assert [r.lag for r in rs] == [pytest.approx(25.0), pytest.approx(35.0)]
    assert all(r.lag_method is LagMethod.HEARTBEAT for r in rs)
    assert "writer" not in rs[0].heartbeat.reason
    assert "writer on the source is not running, or the network stalls" in rs[1].heartbeat.reason


def test_io_thread_down_means_no_catching_up() -> None:
    st = status(io_state=IoState.CONNECTING, seconds_behind=None)
    rs = run(LagTracker(), [inputs(t, status=st, heartbeat=hb_row(40 + t, t)) for t in range(3)])
    assert rs[-1].state is ReplicaState.IO_STOPPED
    assert rs[-1].eta == math.inf and "IO thread is connecting" in rs[-1].eta_reason
    assert rs[-1].event_time.seconds is None  # not a false 0


# --- histogram and averages ------------------------------------------------------------


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = LagHistogram()
    for v in (0.0, 0.1, 0.3, 1.0, 59.0, 4000.0):
        h.observe(v)
    snap = h.snapshot()
    counts = dict(zip(snap.bounds, snap.counts, strict=True))
    assert snap.bounds == LAG_BUCKETS
    assert counts[0.1] == 2 and counts[0.5] == 3 and counts[1.0] == 4
    assert counts[30.0] == 4 and counts[60.0] == 5 and counts[3600.0] == 5
    assert counts[math.inf] == snap.count == 6
    assert snap.sum == pytest.approx(4060.4)


def test_tracker_histogram_counts_primary_lag_per_update() -> None:
    rs = run(LagTracker(), [inputs(t, heartbeat=hb_row(age, t)) for t, age in enumerate((0.05, 0.7, 7.0))])
    snap = rs[-1].histogram
    assert snap.count == 3 and snap.sum == pytest.approx(7.75)
    assert dict(zip(snap.bounds, snap.counts, strict=True))[1.0] == 2


def test_one_five_fifteen_minute_averages() -> None:
    avg = WindowAverages()
    for t in range(0, 661):
        avg.add(T0 + t, 10.0 if t <= 600 else 0.0)
    one, five, fifteen = avg.averages()
    assert (one.window, five.window, fifteen.window) == (60.0, 300.0, 900.0)
    assert one.seconds == pytest.approx(0.0) and one.covered == pytest.approx(60)
    assert five.seconds == pytest.approx((240 * 10) / 300)
    assert fifteen.seconds == pytest.approx(6000 / 660) and fifteen.covered == pytest.approx(660)


def test_averages_skip_unknown_time_and_stalls() -> None:
    avg = WindowAverages(max_span=5.0)
    avg.add(T0, 4.0)
    assert avg.averages()[0].seconds == 4.0  # one reading is its own average
    avg.add(T0 + 1, 4.0)
    avg.add(T0 + 2, None)  # unknown for a second: counts for nothing
    avg.add(T0 + 50, 8.0)  # after a stall: stands for max_span seconds only
    one = avg.averages()[0]
    assert one.covered == pytest.approx(6.0)
    assert one.seconds == pytest.approx((4.0 * 1 + 8.0 * 5) / 6)


def test_tracker_averages_follow_the_primary_lag() -> None:
    rs = run(LagTracker(), [inputs(t, heartbeat=hb_row(2.0, t)) for t in range(0, 120)])
    one, five, fifteen = rs[-1].averages
    assert one.seconds == pytest.approx(2.0) and five.seconds == pytest.approx(2.0)
    assert fifteen.covered == pytest.approx(119.0)


def test_update_is_deterministic() -> None:
    steps = [
        inputs(t, heartbeat=hb_row(0.5 + t, t), applying_commit_time=NOW - 3, applied_rows=7 * t)
        for t in range(5)
    ]
    a, b = run(LagTracker(), steps), run(LagTracker(), steps)
    assert a == b


# --- rates and ETA after a gap without progress ------------------------------------
#
# Every scenario ends in the same catch-up: at t = GAP the oldest unapplied
# transaction committed LAG0 s ago and the SQL thread then gets through 3
# source-seconds per second, so lag shrinks by 2 s per second and the truth
# is ETA = lag / 2. What differs is the gap before it; the first sample of
# the catch-up must not span it.

GAP, LAG0, SPEED = 40, 40.0, 3.0


def _gap(kind: str, t: int) -> LagInputs:
    if kind == "io_stop":  # caught up, nothing arrives
        return inputs(t, status=status(io_state=IoState.STOPPED, seconds_behind=None), backlog=EMPTY,
                      applied_transactions=500)
    if kind == "sql_stop":  # received transactions pile up
        return inputs(t, status=status(**SQL_STOPPED), backlog=Backlog(10 * t + 1, 100 * t + 1, t + 1, NOW),
                      applied_transactions=500)
    if kind == "big_transaction":  # applying one transaction: the position does not move
        return inputs(t, status=status(seconds_behind=t),
                      backlog=Backlog(10 * t + 1, 100 * t + 1, t + 1, NOW), applied_transactions=500)
    if kind == "idle_source":  # caught up, the source writes nothing
        return inputs(t, status=status(), backlog=EMPTY, applied_transactions=500)
    raise AssertionError(kind)


def _catch_up(k: int) -> LagInputs:
    oldest = NOW + GAP - LAG0 + SPEED * k
    return inputs(GAP + k, status=status(seconds_behind=None), backlog=Backlog(1000, 100_000, 1000, oldest),
                  applied_transactions=500 + 100 * k, applied_rows=1000 * k)


@pytest.mark.parametrize("kind", ["io_stop", "sql_stop", "big_transaction", "idle_source"])
def test_eta_follows_the_truth_after_a_gap_without_progress(kind: str) -> None:
    tracker = LagTracker(rate_time_constant=10.0)
    before = [tracker.update(_gap(kind, t)) for t in range(GAP)]
    catch = [tracker.update(_catch_up(k)) for k in range(int(LAG0 / (SPEED - 1)))]
    if kind == "big_transaction":
        # Stalled with work waiting: neither infinite nor a made-up number.
        assert before[-1].eta is None and "nothing applied" in before[-1].eta_reason
        assert before[-1].rates.speed == 0.0
    for k, r in enumerate(catch):
        truth = (LAG0 - (SPEED - 1) * k) / (SPEED - 1)
        if k >= 2:  # after its first few seconds
            assert r.eta is not None and r.eta == pytest.approx(truth, rel=0.25), (k, r.eta, r.eta_reason)
        if r.eta is not None:
            assert math.isfinite(r.eta) and r.eta <= 1.25 * truth + 1, (k, r.eta)


def test_short_stalls_are_part_of_the_speed() -> None:
    # Transactions of 2 s each, 4 source-seconds apart: 2 source-seconds per
    # second on average; the zeros between are real and count.
    steps = [inputs(t, status=status(), backlog=Backlog(100, 1000, 100, NOW - 100 + 4 * (t // 2)))
             for t in range(60)]
    rs = run(LagTracker(rate_time_constant=10.0), steps)
    assert rs[-1].rates.speed == pytest.approx(2.0, rel=0.3)
    assert all(r.eta is not None for r in rs[1:])


def test_counters_for_rate() -> None:
    steps = [_catch_up(k) for k in range(5)]
    rs = run(LagTracker(), steps)
    assert rs[-1].rates.transactions_total == 900 and rs[-1].rates.rows_total == 4000
    assert rs[-1].rates.source_seconds_total == pytest.approx(4 * SPEED)
    no_reader = LagTracker().update(inputs(0, backlog=None))
    assert no_reader.rates.transactions_total is None and no_reader.rates.rows_total is None


@pytest.mark.parametrize(("lag", "delay", "want"), [
    (100.0, 0, 100.0), (100.0, 60, 40.0), (30.0, 60, 0.0), (None, 60, None),
])
def test_lag_without_sql_delay(lag: float | None, delay: int, want: float | None) -> None:
    from lagd.lag import without_delay  # noqa: PLC0415
    assert without_delay(lag, status(sql_delay=delay)) == want
    assert without_delay(10.0, None) is None


PROGRESS_CASES = [
    # (name, [(t, position)], value after the last, stalled_for after the last)
    ("first-reading", [(0, 10.0)], None, 0.0),
    ("steady", [(0, 10.0), (1, 13.0), (2, 16.0)], 3.0, 0.0),
    ("short-stall-counts", [(0, 10.0), (1, 13.0), (2, 13.0)], 3 * math.exp(-0.1) / (math.exp(-0.1) + 1), 1.0),
    ("long-stall-is-zero", [(0, 10.0), (1, 13.0)] + [(t, 13.0) for t in range(2, 9)], 0.0, 7.0),
    ("after-a-stall-one-interval", [(0, 10.0), (1, 13.0)] + [(t, 13.0) for t in range(2, 30)] + [(30, 15.0)],
     2.0, 0.0),
    ("unknown-restarts", [(0, 10.0), (1, 13.0), (2, None), (3, 20.0)], None, 0.0),
    ("after-unknown-one-interval", [(0, 10.0), (2, None), (3, 20.0), (4, 25.0)], 5.0, 0.0),
]


@pytest.mark.parametrize(("name", "readings", "value", "stalled"), PROGRESS_CASES,
                         ids=[c[0] for c in PROGRESS_CASES])
def test_progress_rate(name: str, readings: list[tuple[float, float | None]], value: float | None,
                       stalled: float) -> None:
    from lagd.lag_rates import ProgressRate  # noqa: PLC0415
    rate = ProgressRate(10.0, max_gap=5.0)
    for at, pos in readings:
        rate.add(at, pos)
    assert rate.value == (None if value is None else pytest.approx(value))
    assert rate.stalled_for(readings[-1][0]) == pytest.approx(stalled)


def test_a_stall_is_seen_whatever_the_clock_s_fractions() -> None:
    # The same oldest commit time read at clock values with fractions: the
    # position must not drift by float rounding, or the stall goes unseen.
    oldest = NOW - 123.456789
    steps = [inputs(t + 0.123456789, status=status(seconds_behind=100),
                    backlog=Backlog(10, 1000, 10, oldest)) for t in range(12)]
    rs = run(LagTracker(rate_time_constant=10.0), steps)
    assert rs[-1].rates.speed == 0.0 and rs[-1].eta is None and "nothing applied" in rs[-1].eta_reason


def test_an_odd_first_interval_after_a_stall_does_not_hold_the_speed_down() -> None:
    # A stall, then an interval that was half stall (0.5 source-s in 1 s),
    # then 3 source-seconds per second: after 3 more seconds the rate is the
    # time-weighted mean of those 4 s (about 2.4), where blending interval
    # rates in would still read about 1.6, the odd interval weighing most.
    from lagd.lag_rates import ProgressRate  # noqa: PLC0415
    rate, blended = ProgressRate(10.0, max_gap=5.0), DecayingRate(10.0, counter=False)
    readings = [(t, 100.0) for t in range(10)] + [(10, 100.5)] + [(10 + k, 100.5 + 3 * k) for k in (1, 2, 3)]
    for at, pos in readings:
        rate.add(at, pos)
    for at, pos in readings[9:]:
        blended.add(at, pos)
    assert rate.value == pytest.approx((0.5 + 9 * 1.0) / 4, rel=0.05)  # 9.5 source-s in 4 s, decayed a little
    assert blended.value is not None and blended.value < 1.7


def test_a_slow_poll_is_not_a_gap() -> None:
    # Polled every 10 s, one interval without progress is not yet a stall.
    steps = [inputs(10 * k, status=status(seconds_behind=100),
                    backlog=Backlog(10, 1000, 10, NOW - 100 + (30 * k if k < 5 else 120)))
             for k in range(6)]
    rs = run(LagTracker(rate_time_constant=60.0), steps)
    assert rs[-1].rates.speed is not None and rs[-1].rates.speed > 0 and rs[-1].eta is not None


INSIDE_CASES = [
    # One big transaction holds the SQL thread 4 s more; lag 6 s then, shrinking 1.5 s/s.
    ("inside-a-big-transaction", 2.0, 2.5, 4.0, 4.0 + 6.0 / 1.5),
    ("inside-and-not-faster", 2.0, 1.0, 4.0, math.inf),
    ("inside-no-speed", 2.0, None, 4.0, None),
]


@pytest.mark.parametrize(("lag", "speed", "inside", "want"), [c[1:] for c in INSIDE_CASES],
                         ids=[c[0] for c in INSIDE_CASES])
def test_catch_up_eta_inside_a_big_transaction(lag: float, speed: float | None, inside: float,
                                               want: float | None) -> None:
    eta, reason = catch_up_eta(lag, speed, inside=inside)
    assert eta == (pytest.approx(want) if want is not None and not math.isinf(want) else want)
    assert reason


def test_inside_a_big_transaction_the_eta_adds_its_stall_and_the_speed_holds() -> None:
    # 2 source-seconds per second, then a big transaction: the position stands
    # still for 6 s; the speed stays 2 and the ETA is the stall plus the catch-up it leaves.
    steps = [inputs(t, status=status(seconds_behind=10), backlog=Backlog(50, 5000, 50, NOW - 20 + 2 * t))
             for t in range(4)]
    steps += [inputs(t, status=status(seconds_behind=10), backlog=Backlog(50, 5000, 50, NOW - 14),
                     inside_big=True, stall_remaining=10.0 - t) for t in range(4, 10)]
    rs = run(LagTracker(rate_time_constant=10.0), steps)
    last = rs[-1]
    assert last.rates.speed == pytest.approx(2.0)
    assert last.lag is not None and last.eta == pytest.approx(1.0 + (last.lag + 1.0) / 1.0)
    assert "inside a big transaction" in last.eta_reason
    # Not known how long it still holds the SQL thread: unknown, not infinite.
    unknown = LagTracker().update(inputs(0, status=status(seconds_behind=10),
                                         backlog=Backlog(5, 500, 5, NOW - 14), inside_big=True))
    assert unknown.eta is None and "not known" in unknown.eta_reason


def test_the_finer_position_is_the_speed_s_position() -> None:
    # Whole commit seconds, but the share of the second applied moves: the speed is that share.
    steps = [inputs(t, status=status(seconds_behind=10),
                    backlog=Backlog(50, 5000, 50, NOW - 20, NOW - 20 + 0.3 * t)) for t in range(3)]
    rs = run(LagTracker(rate_time_constant=10.0), steps)
    assert rs[-1].rates.speed == pytest.approx(0.3)
    assert rs[-1].event_time.seconds == pytest.approx(20 + 2)  # event time stays the commit second


def test_skip_leaves_the_interval_out_of_the_rate() -> None:
    from lagd.lag_rates import ProgressRate  # noqa: PLC0415
    rate = ProgressRate(10.0, max_gap=5.0)
    for at in range(4):
        rate.add(at, 100.0 + 2 * at)
    for at in range(4, 12):  # inside a big transaction: the position stands still, not a stall
        rate.skip(at, 106.0)
    assert rate.value == pytest.approx(2.0) and rate.stalled_for(11) == 0
    rate.add(12, 108.0)
    assert rate.value == pytest.approx(2.0)
