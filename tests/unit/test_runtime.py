"""The runtime with fakes of its collaborators (tests/unit/runtime_fakes.py), no server.

Stop in every state, stale marking, reconnect, and "nothing is published
until it is known again" after anything that may have started the relay log
anew. Waits are bounded by a deadline; nothing asserts how long a step took.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_fakes import (
    DENIED,
    REFUSED,
    WHERE,
    FakeParts,
    FakePrefetcher,
    at,
    runtime,
    settings,
    transaction,
)

from lagd.config import PrefetchSettings
from lagd.daemon.collect import HUNG_FIX
from lagd.daemon.http import readiness
from lagd.daemon.main import STOP_BUDGET, YOUNG_GC_THRESHOLD, loop_factory, run_async, tune_gc
from lagd.daemon.runtime import Clock, Prefetcher, Runtime, counted_down, overdue, restart_reason, withhold
from lagd.errors import LagdError, NotAReplicaError
from lagd.lag import LagMethod, ReplicaState
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.replica import IoState
from lagd.relaylog import Event, RelayLogError, Resynced

FILE = "db2-relay-bin.000007"  # where status_fixtures.replica_status() has the SQL thread, at 5000


async def until(cond: Callable[[], bool], what: str, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0.01)


def state(rt: Runtime) -> ReplicaState | None:
    return rt.lag.state if rt.lag is not None else None


async def stop_within_budget(rt: Runtime) -> None:
    await asyncio.wait_for(rt.stop(), STOP_BUDGET)
    await asyncio.sleep(0.01)  # a reload that raced the stop finishes its last step
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert others == [], others


async def running(rt: Runtime) -> None:
    rt.start()
    await until(lambda: state(rt) is ReplicaState.IDLE, "idle")


# ----- stop in every state ------------------------------------------------------------------


STATES = ["starting", "unreachable", "wrong_password", "hung", "running", "reloading", "relay_unreadable",
          "prefetching"]


@pytest.mark.asyncio
@pytest.mark.parametrize("where", STATES)
async def test_stop_within_budget(where: str) -> None:
    s = settings(prefetch={"enabled": True}, advisor={"enabled": True},
                 lag={"heartbeat_table": "percona.heartbeat"})
    rt, f = runtime(s)
    rt.advisor_every = 0.05
    if where == "unreachable":
        f.monitor.mode = "down"
    elif where == "wrong_password":
        f.monitor.mode, f.monitor.fault = "down", DENIED
    elif where == "hung":
        f.monitor.mode, f.session.hang, f.heartbeat.hang = "hang", True, True
    elif where == "relay_unreadable":
        f.relay.fail = LagdError("relay log not readable: /var/lib/mysql is not readable")
    rt.start()
    if where in ("unreachable", "wrong_password"):
        await until(lambda: f.monitor.polls >= 3, "three failed polls")
        assert state(rt) is ReplicaState.UNKNOWN
    elif where == "hung":
        await until(lambda: f.monitor.polls >= 1 and f.session.calls == 0, "a hung poll")
        await asyncio.sleep(0.05)
    elif where in ("running", "prefetching"):
        await until(lambda: state(rt) is ReplicaState.IDLE and bool(f.prefetchers), "idle, prefetching")
    elif where == "reloading":
        await until(lambda: state(rt) is ReplicaState.IDLE, "idle")
        asyncio.get_running_loop().create_task(rt.restart_relay())
        await asyncio.sleep(0)
    elif where == "relay_unreadable":
        await until(lambda: rt.tail_off is not None, "the relay log refused")
    await stop_within_budget(rt)
    assert f.session.closed == 1 and f.monitor.closed >= 1


@pytest.mark.asyncio
async def test_stop_while_waiting_for_a_first_status_does_not_spin() -> None:
    rt, f = runtime()
    f.monitor.mode = "down"
    rt.start()
    await until(lambda: f.monitor.polls >= 2, "two polls")
    # The relay task waits for a status on the stop event: stopping ends it, and
    # the lag loop paused between polls (two polls, not thousands, by now).
    await stop_within_budget(rt)
    assert f.relay.locates == 0


# ----- stale marking: a failed poll is unknown at once --------------------------------------


@pytest.mark.asyncio
async def test_a_failed_poll_makes_everything_unknown_at_once() -> None:
    rt, f = runtime(settings(lag={"heartbeat_table": "percona.heartbeat"}))
    await running(rt)
    assert rt.lag is not None and rt.lag.lag is not None
    f.monitor.mode = "down"
    r = await rt.poll_once()
    assert r.state is ReplicaState.UNKNOWN and r.lag is None and r.backlog is None
    assert all(m.seconds is None for m in r.methods)
    snap = rt.snapshot()
    assert snap.status is None and snap.status_error is not None and snap.status_error.startswith(WHERE)
    assert r.heartbeat.reason.startswith("not read: " + WHERE)
    ready, why = readiness(snap)
    assert not ready and WHERE in why
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_hung_replica_is_named_and_its_connection_dropped() -> None:
    rt, f = runtime()
    await running(rt)
    f.monitor.mode = "hang"
    closed = f.monitor.closed
    r = await rt.poll_once()
    assert r.state is ReplicaState.UNKNOWN
    assert rt.snapshot().status_error == f"{WHERE} did not answer in 0.3 s"
    assert f.monitor.closed == closed + 1
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_hung_heartbeat_read_is_marked_not_served(caplog: pytest.LogCaptureFixture) -> None:
    rt, f = runtime(settings(lag={"heartbeat_table": "percona.heartbeat"}))
    await running(rt)
    f.heartbeat.hang = True
    r = await rt.poll_once()
    assert r.heartbeat.seconds is None and "did not answer the heartbeat read" in r.heartbeat.reason
    assert r.lag_method is not LagMethod.HEARTBEAT
    f.heartbeat.hang = False
    r = await rt.poll_once()  # the subsystem did not die with the hang
    assert r.heartbeat.seconds is not None and rt.health["heartbeat"].up
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_fault_is_logged_once_with_its_fix_then_its_end(caplog: pytest.LogCaptureFixture) -> None:
    rt, f = runtime()
    f.monitor.mode, f.monitor.fault = "down", DENIED
    caplog.set_level(logging.INFO, logger="lagd")
    for _ in range(5):
        await rt.poll_once()
    said = [r.getMessage() for r in caplog.records if "Access denied" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("replica_status: " + WHERE)
    assert "(fix: check replica.user" in said[0]
    h = next(h for h in rt.snapshot().failing() if h.name == "replica_status")
    assert h.fix and h.failing_since is not None
    f.monitor.mode = "ok"
    await rt.poll_once()
    assert any("recovered after" in r.getMessage() for r in caplog.records)
    assert rt.health["replica_status"].up


def _fault(message: str, kind: Kind, code: int) -> DatabaseError:
    return DatabaseError(f"{WHERE}: {message} (error {code})", kind=kind, code=code, where=WHERE)


# (what happened, the monitor's fault: None answers nothing, "hang" never answers; words in the fix)
STATUS_FAULTS = [
    ("wrong_password", DENIED, "check replica.user and the password"),
    ("not_running", REFUSED, "check that the server runs and replica.host/port/socket"),
    ("restarting", _fault("Lost connection to server during query", Kind.LOST, 2013), "reconnects by itself"),
    # "Access denied" in the words, but a grant is missing, not the password wrong.
    ("missing_grant", _fault("Access denied; you need (at least one of) the SLAVE MONITOR privilege(s)",
                             Kind.DENIED, 1227), "grant the lagd account"),
    ("no_such_channel", NotAReplicaError(f"{WHERE}: no replication channel 'x'", fix="check replica.channel"),
     "replica.channel"),
    ("hung", "hang", HUNG_FIX),
    ("unreadable_status_row", None, None),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("what", "fault", "fix"), STATUS_FAULTS, ids=[c[0] for c in STATUS_FAULTS])
async def test_a_failed_status_is_said_with_its_faults_own_fix(what: str, fault: object,
                                                               fix: str | None) -> None:
    rt, f = runtime()
    if fault == "hang":
        f.monitor.mode = "hang"
    else:
        f.monitor.mode = "down"
        f.monitor.fault = fault  # type: ignore[assignment]
        f.monitor.error = None if fault is not None else f"{WHERE}: a status row lagd cannot read"
    await rt.poll_once()
    h = rt.health["replica_status"]
    assert not h.up and h.reason.startswith(WHERE)
    assert (h.fix is None) if fix is None else (h.fix is not None and fix in h.fix), h.fix


# ----- after a restart nothing is published until it is known again --------------------------

def _pending(file: str, first: int) -> list[list[Event | Resynced]]:
    """Three transactions received from ``first`` on, committed 50 s ago on the source."""
    return [transaction(file, first + 100 * i, first + 100 * (i + 1), time.time() - 50) for i in range(3)]


def _restart(f: FakeParts, how: str) -> None:
    """The relay log after the restart, and the SQL thread's place in it."""
    file, first = {"moved_back": ("db2-relay-bin.000001", 4),  # a new relay log (GTID restart, RESET SLAVE)
                   "unseen_file": ("db2-relay-bin.000009", 4)}.get(how, (FILE, 5000))
    f.monitor.status = at(f.monitor.status, file, first)
    f.relay.log = _pending(file, first)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["failed_poll", "sql_thread_started", "io_thread_reconnected", "moved_back",
                                 "unseen_file"])
async def test_after_a_restart_state_lag_and_backlog_wait_until_known(how: str) -> None:
    rt, f = runtime()
    await running(rt)
    # The server's own numbers right after a restart: everything "caught up", SBM 0.
    if how == "failed_poll":
        f.monitor.mode = "down"
        await rt.poll_once()
        f.monitor.mode = "ok"
    elif how == "sql_thread_started":
        # Both threads: with the IO thread running on, the relay log stays (test_sql_thread_alone...).
        f.monitor.status = at(f.monitor.status, FILE, 5000, sql_running=False, seconds_behind=None,
                              io_state=IoState.STOPPED)
        await rt.poll_once()
        f.monitor.status = at(f.monitor.status, FILE, 5000, sql_running=True, seconds_behind=0,
                              io_state=IoState.RUNNING)
    elif how == "io_thread_reconnected":
        f.monitor.status = at(f.monitor.status, FILE, 5000, io_state=IoState.CONNECTING)
        await rt.poll_once()
        f.monitor.status = at(f.monitor.status, FILE, 5000, io_state=IoState.RUNNING)
    _restart(f, how)
    r = await rt.poll_once()
    assert r.state is ReplicaState.UNKNOWN, r.state_reason
    assert r.lag is None and r.backlog is None and r.sbm.seconds is None
    assert "not known yet" in r.state_reason
    assert not readiness(rt.snapshot())[0]
    # Once the reader, repositioned at the SQL thread, has read to the tail: the truth.
    await until(lambda: rt._backlog_known(), "the reader at the tail again")
    r = await rt.poll_once()
    assert r.state is ReplicaState.APPLYING and r.backlog is not None and r.backlog.transactions == 3
    assert r.lag is not None and r.lag > 40
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_sql_thread_alone_restarted_counts_what_it_passed_before_the_reader() -> None:
    # The scrape test under load: 20 inserts queued behind a stopped SQL thread,
    # which on START passed them before the reader got there. Repositioning the
    # reader at the SQL thread lost them from the applied counter (18 for 20).
    rt, f = runtime()
    await running(rt)
    f.monitor.status = at(f.monitor.status, FILE, 5000, sql_running=False, seconds_behind=None)
    await rt.poll_once()
    before = rt.backlog.applied_transactions
    f.relay.log += _pending(FILE, 5000)  # not read yet: the reader sleeps at the tail
    f.monitor.status = at(f.monitor.status, FILE, 5300, sql_running=True, seconds_behind=0)
    await rt.poll_once()
    assert not f.relay.readers[-1].seeks[1:], "the IO thread ran on: the relay log is the one read"
    await until(lambda: rt.backlog.transactions == 3 or rt.backlog.applied_transactions == before + 3,
                "the reader has read them")
    await rt.poll_once()
    assert rt.backlog.applied_transactions == before + 3
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_the_heartbeat_stays_while_the_backlog_is_unknown() -> None:
    rt, f = runtime(settings(lag={"heartbeat_table": "percona.heartbeat"}))
    await running(rt)
    _restart(f, "moved_back")
    r = await rt.poll_once()
    assert r.state is ReplicaState.UNKNOWN and r.lag_method is LagMethod.HEARTBEAT and r.lag is not None
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_no_idle_before_the_reader_has_read_once() -> None:
    rt, _ = runtime()
    r = await rt.poll_once()  # the relay task has not opened the relay log yet
    assert r.state is ReplicaState.UNKNOWN and r.sbm.seconds is None


@pytest.mark.asyncio
async def test_a_backlog_unknown_for_a_minute_is_said_once_with_where_the_reader_stands(
        caplog: pytest.LogCaptureFixture) -> None:
    rt, _ = runtime()  # no relay task: the relay log is never read
    now = [1000.0]
    rt.clock = Clock(mono=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for t in (1000.0, 1030.0, 1061.0, 1100.0):
            now[0] = t
            assert (await rt.poll_once()).state is ReplicaState.UNKNOWN
    assert [m for m in caplog.messages if "unknown for" in m] == [
        "the backlog has been unknown for 61 s while the replica answers: the relay log is not read yet;"
        " no look-ahead reader, generation 0 (-1 known), relay-log task ended"]


def test_restart_reason_table() -> None:
    from status_fixtures import replica_status  # noqa: PLC0415

    st = replica_status()
    cases = [
        (st, st, True, {FILE}, None),
        (st, at(st, FILE, 6000), True, {FILE}, None),
        (st, at(st, "db2-relay-bin.000008", 4), True, {FILE, "db2-relay-bin.000008"}, None),
        (st, at(st, "db2-relay-bin.000008", 4), True, {FILE}, "has not read"),
        (st, at(st, FILE, 4), True, {FILE}, "moved back"),
        (st, st, False, {FILE}, "failed poll"),
        (at(st, FILE, 5000, sql_running=False, io_state=IoState.STOPPED), st, True, {FILE},
         "SQL thread was started"),
        (at(st, FILE, 5000, sql_running=False), st, True, {FILE}, None),  # the IO thread ran on
        # The SQL thread started alone, the IO thread still stopped: the same relay log.
        (at(st, FILE, 5000, sql_running=False, io_state=IoState.STOPPED), at(st, FILE, 5000,
         io_state=IoState.STOPPED), True, {FILE}, None),
        (at(st, FILE, 5000, sql_running=False, io_state=IoState.STOPPED), at(st, FILE, 5000,
         io_state=IoState.CONNECTING), True, {FILE}, "SQL thread was started"),
        (at(st, FILE, 5000, io_state=IoState.STOPPED), st, True, {FILE}, "runs again"),
        (None, st, True, None, None),
    ]
    for prev, cur, asked, seen, want in cases:
        got = restart_reason(prev, cur, asked_before=asked, seen=seen)
        assert (got is None) if want is None else (got is not None and want in got), (prev, cur, got)


def test_withhold_keeps_states_read_from_the_threads() -> None:
    from status_fixtures import replica_status, track  # noqa: PLC0415

    stopped = track([(0.0, replica_status(sql_running=False, seconds_behind=None), None, None, 0)])
    assert withhold(stopped, "x").state is ReplicaState.STOPPED
    idle = track([(0.0, replica_status(), None, None, 0)])
    assert idle.state is ReplicaState.IDLE and idle.lag == 0.0
    w = withhold(idle, "the replica restarted")
    assert w.state is ReplicaState.UNKNOWN and w.lag is None and "the replica restarted" in w.state_reason


def test_an_overdue_reading_has_no_current_value() -> None:
    from status_fixtures import replica_status, track  # noqa: PLC0415

    stopped = track([(0.0, replica_status(sql_running=False, seconds_behind=None), None, None, 0)])
    o = overdue(stopped, "replica x has not answered for 2.0 s")
    # Even a state read from the threads is old news while the replica does not answer.
    assert o.state is ReplicaState.UNKNOWN and o.lag is None and o.heartbeat.seconds is None
    assert o.backlog is None and o.eta is None and "has not answered" in o.lag_reason


@pytest.mark.asyncio
async def test_a_hanging_poll_makes_the_served_reading_unknown_before_its_deadline() -> None:
    rt, _ = runtime()
    await running(rt)
    assert rt.snapshot().lag is not None and rt.snapshot().lag.lag is not None  # type: ignore[union-attr]
    rt._poll_began = time.monotonic() - 60  # a poll in flight for a minute (the clock is the real one)
    served = rt.snapshot().lag
    assert served is not None and served.lag is None and served.state is ReplicaState.UNKNOWN
    rt._poll_began = None
    await stop_within_budget(rt)


# ----- subsystems never die -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_advisor_keeps_trying_after_failures() -> None:
    rt, f = runtime(settings(advisor={"enabled": True}))
    rt.advisor_every = 0.02
    rt.start()
    await until(lambda: f.session.calls >= 3, "three failed advisor queries")
    assert not rt.health["advisor"].up and WHERE in rt.health["advisor"].reason
    f.session.fail = None  # the query runs (on a fake connection, where it fails unexpectedly)
    calls = f.session.calls
    await until(lambda: f.session.calls >= calls + 2, "still trying after an unexpected error")
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_broken_relay_log_is_retried_and_the_status_still_served() -> None:
    rt, f = runtime()
    rt.relay_retry = 0.02
    f.relay.read_fail = RelayLogError("relay-bin.000007 at 5000: the file ended inside an event")
    rt.start()
    # The third locate succeeds and marks the reader up until its first read
    # fails a moment later: wait for that failure, do not sample between.
    await until(lambda: f.relay.locates >= 3 and rt.tail_off is not None and not rt.health["relay_log"].up,
                "three failed attempts")
    # Without a reader the status alone decides, as lagctl's direct mode does.
    await until(lambda: state(rt) is ReplicaState.IDLE, "a status-only state")
    f.relay.read_fail = None
    await until(lambda: rt._backlog_known() and rt.health["relay_log"].up, "the reader back")
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_failing_prefetcher_leaves_the_look_ahead_running() -> None:
    rt, _ = runtime(settings(prefetch={"enabled": True}))
    rt.relay_retry = 0.02
    attempts = 0

    async def broken(*_: object) -> Prefetcher:
        nonlocal attempts
        attempts += 1
        raise LagdError(f"{WHERE}: cannot open probe sessions", fix="grant SELECT to lagd")

    rt.parts.prefetch = broken
    await running(rt)
    await until(lambda: attempts >= 3, "three prefetch attempts")
    assert rt._backlog_known() and not rt.health["prefetch"].up
    off = rt.snapshot().prefetch_off_reason
    assert off == f"{WHERE}: cannot open probe sessions (fix: grant SELECT to lagd)"
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_failing_prefetcher_is_closed_and_built_again(caplog: pytest.LogCaptureFixture) -> None:
    rt, _ = runtime(settings(prefetch={"enabled": True}))
    rt.relay_retry = 0.02
    built: list[FakePrefetcher] = []

    class Crashing(FakePrefetcher):
        async def run(self, stop: asyncio.Event) -> None:
            raise RuntimeError("prefetch bug")

    async def make(p: PrefetchSettings, index: Path, mariadb: bool) -> Prefetcher:
        built.append(Crashing(p))
        return built[-1]

    rt.parts.prefetch = make
    caplog.set_level(logging.ERROR, logger="lagd")
    await running(rt)
    await until(lambda: len(built) >= 3, "three prefetchers")
    assert all(p.closed for p in built[:2]) and rt._backlog_known()
    assert not rt.health["prefetch"].up and rt.health["prefetch"].reason == "prefetch bug"
    assert any(r.getMessage() == "prefetch: unexpected failure" and r.exc_info for r in caplog.records)
    await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_a_prefetcher_that_lost_its_cancellation_does_not_hold_the_relay_log_loop() -> None:
    """The look-ahead reader fails and its loop cancels the prefetcher, which loses that
    cancellation (Python 3.11's asyncio.wait_for can): the loop cancels it again and
    builds the reader anew, and the backlog is known again."""
    rt, f = runtime(settings(prefetch={"enabled": True}))
    rt.relay_retry, rt.cancel_again = 0.02, 0.05
    lost: list[int] = []

    class Stubborn(FakePrefetcher):
        async def run(self, stop: asyncio.Event) -> None:
            try:
                await stop.wait()
            except asyncio.CancelledError:
                lost.append(1)
            await stop.wait()

    async def make(p: PrefetchSettings, index: Path, mariadb: bool) -> Prefetcher:
        return Stubborn(p)

    rt.parts.prefetch = make
    await running(rt)
    await until(rt._backlog_known, "the backlog known")
    f.relay.read_fail = RelayLogError("relay-bin.000002 at 672: the file ended inside an event")
    await until(lambda: f.relay.locates >= 2, "the reader built anew")
    f.relay.read_fail = None
    await until(lambda: rt._backlog_known() and rt.health["relay_log"].up, "the reader back")
    assert lost
    await stop_within_budget(rt)


def test_fakes_are_not_a_database() -> None:
    # The runtime module itself talks to nothing: no driver, no files.
    import lagd.daemon.runtime as mod  # noqa: PLC0415

    text = Path(mod.__file__).read_text()
    assert "pymysql" not in text and "asyncmy" not in text and "open(" not in text


def test_an_alternating_fault_is_said_once_per_cause(caplog: pytest.LogCaptureFixture) -> None:
    from lagd.daemon.health import Tracked  # noqa: PLC0415

    clock = [0.0]
    h = Tracked("replica_status", lambda: 1e9 + clock[0], lambda: clock[0])
    caplog.set_level(logging.INFO, logger="lagd")
    for i in range(20):
        clock[0] = float(i)
        h.fail(None, f"{WHERE}: Can't connect" if i % 2 else f"{WHERE}: waiting to reconnect", "start it")
    assert len(caplog.records) == 2
    clock[0] = 400.0
    h.fail(None, f"{WHERE}: Can't connect", "start it")
    assert len(caplog.records) == 3 and "(for 400 s)" in caplog.records[-1].getMessage()
    h.ok()
    assert caplog.records[-1].getMessage().startswith("replica_status: recovered after 400 s")


# ----- collect: the replica's lag inputs now (the daemon's poll and lagctl's direct mode) ------


@pytest.mark.asyncio
async def test_collect_reads_the_heartbeat_of_the_source_it_replicates_from() -> None:
    from runtime_fakes import FakeHeartbeat, FakeMonitor  # noqa: PLC0415

    from lagd.daemon.collect import collect  # noqa: PLC0415

    mon, hb = FakeMonitor(), FakeHeartbeat()
    got = await collect(mon, hb, where=WHERE, timeout=1.0, heartbeat_table="percona.heartbeat")
    assert got.status is not None and got.heartbeat is not None and hb.calls == [("percona.heartbeat", 1)]
    got = await collect(mon, hb, where=WHERE, timeout=1.0, heartbeat_table="percona.heartbeat",
                        heartbeat_server_id=9)
    assert hb.calls[-1] == ("percona.heartbeat", 9)
    got = await collect(mon, hb, where=WHERE, timeout=1.0)  # no table: not read, not an error
    assert got.heartbeat is None and got.heartbeat_error is None and len(hb.calls) == 2
    mon.mode, mon.error, mon.fault = "down", "OperationalError: (2013, 'Lost connection')", None
    got = await collect(mon, hb, where=WHERE, timeout=1.0, heartbeat_table="percona.heartbeat")
    assert got.status_error == f"{WHERE}: OperationalError: (2013, 'Lost connection')"  # named once
    assert got.heartbeat_error == f"not read: {got.status_error}" and len(hb.calls) == 2
    assert got.inputs().status is None


def test_inputs_hide_seconds_behind_only_when_told() -> None:
    from status_fixtures import replica_status  # noqa: PLC0415

    from lagd.daemon.collect import ReplicaReading  # noqa: PLC0415

    r = ReplicaReading(1.0, 2.0, replica_status(seconds_behind=0), None, None, None)
    trusted, untrusted = r.inputs().status, r.inputs(trust_sbm=False).status
    assert trusted is not None and trusted.seconds_behind == 0
    assert untrusted is not None and untrusted.seconds_behind is None


@pytest.mark.parametrize(("eta", "age", "want"), [
    (10.0, 0.5, 9.5),  # the forecast of the last poll, half a second later
    (0.3, 0.5, 0.0),  # never below 0
    (math.inf, 0.5, math.inf),  # never is never
    (None, 0.5, None),
    (0.0, 0.5, 0.0),
    (10.0, -1.0, 10.0),  # a clock that went back: as it was
])
def test_the_eta_is_counted_down_to_the_moment_it_is_served(eta: float | None, age: float,
                                                            want: float | None) -> None:
    from dataclasses import replace as _replace  # noqa: PLC0415

    from lagd.lag import LagInputs, LagTracker  # noqa: PLC0415
    base = LagTracker().update(LagInputs(now=1000.0, monotonic=1.0, status=None))
    got = counted_down(_replace(base, eta=eta), 1000.0 + age).eta
    assert got == (pytest.approx(want) if want is not None and math.isfinite(want) else want)


def test_tune_gc_raises_only_the_young_threshold_and_freezes_what_start_up_made() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.parametrize(("setting", "uvloop"), [
    (None, True), ("", True), ("asyncio", False), (" AsyncIO ", False)])
def test_the_daemon_runs_on_uvloop_unless_told_asyncio(monkeypatch: pytest.MonkeyPatch, setting: str | None,
                                                       uvloop: bool) -> None:
    if setting is None:
        monkeypatch.delenv("LAGD_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("LAGD_EVENT_LOOP", setting)
    factory = loop_factory()
    assert (factory is not None) == uvloop  # uvloop is one of lagd's requirements

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run_async(which()).startswith("uvloop") == uvloop
