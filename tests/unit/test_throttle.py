"""The throttle verdict over recorded snapshots: a table of (snapshot, budget, clock) -> verdict."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import status_fixtures as fx
from status_fixtures import NOW

from lagd.advisor.runtime import ApplyRateView
from lagd.daemon.state import Snapshot
from lagd.daemon.throttle import BadBudget, budget_from_query, decide, default_budget
from lagd.lag import Backlog, LagMethod


def _sbm_only() -> Snapshot:
    # No heartbeat and no relay-log reader: only the server's own number is left.
    st = fx.replica_status(seconds_behind=0)
    lag = fx.track([(b, st, None, None, 5_000) for b in range(30, -1, -10)])
    assert lag.lag_method is LagMethod.SBM
    return dataclasses.replace(fx.caught_up(), status=st, lag=lag)


def _stalled() -> Snapshot:
    return dataclasses.replace(fx.caught_up(), loop_age=30.0)


def _event_time_caught_up() -> Snapshot:
    st = fx.replica_status()
    lag = fx.track([(b, st, None, Backlog(0, 0, 0, None), 5_000) for b in range(30, -1, -10)])
    assert lag.lag_method is LagMethod.EVENT_TIME
    return dataclasses.replace(fx.caught_up(), status=st, lag=lag)


CASES: list[tuple[str, Callable[[], Snapshot], float, float, int, str]] = [
    # name, snapshot, max_lag, clock, status, words in the reason
    ("caught up", fx.caught_up, 5.0, NOW + 1, 200, "within the budget of 5 s"),
    ("caught up by event time", _event_time_caught_up, 5.0, NOW + 1, 200, "(event_time)"),
    ("lagging", fx.lagging, 5.0, NOW + 1, 429, "over the budget of 5 s"),
    ("lagging, generous budget", fx.lagging, 600.0, NOW + 1, 200, "within"),
    ("SQL thread stopped on an error", fx.sql_error, 1e9, NOW + 1, 503, "stopped on an error"),
    ("IO thread reconnecting", fx.io_stopped, 1e9, NOW + 1, 503, "IO thread is not running"),
    ("not polled yet", fx.starting, 5.0, NOW + 1, 503, "lag unknown: not polled yet"),
    ("stale reading", fx.caught_up, 5.0, NOW + 60, 503, "60 s old"),
    ("main loop stalled", _stalled, 5.0, NOW + 1, 503, "main loop stalled"),
    ("Seconds_Behind_Master alone", _sbm_only, 5.0, NOW + 1, 503, "only Seconds_Behind_Master"),
]


@pytest.mark.parametrize(("name", "make", "max_lag", "now", "status", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_verdicts(name: str, make: Callable[[], Snapshot], max_lag: float, now: float, status: int,
                  words: str) -> None:
    v = decide(make(), max_lag, now)
    assert v.status == status, v.reason
    assert v.ok is (status == 200)
    assert words in v.reason
    body = v.to_json()
    assert body["StatusCode"] == status and body["Threshold"] == max_lag and body["Message"] == v.reason


def test_stopped_sql_thread_without_error() -> None:
    st = fx.replica_status(sql_running=False, seconds_behind=None)
    lag = fx.track([(b, st, 0.2, Backlog(0, 0, 0, None), 5_000) for b in range(30, -1, -10)])
    v = decide(dataclasses.replace(fx.caught_up(), status=st, lag=lag), 1e9, NOW + 1)
    assert v.status == 503 and "SQL thread is not running" in v.reason


def test_unknown_lag_is_never_zero() -> None:
    v = decide(fx.io_stopped(), 5.0, NOW + 1)
    assert not v.ok and (v.lag is None or v.lag > 0 or v.state == "io_stopped")


def test_budget_from_query() -> None:
    assert budget_from_query({}, 7.0) == 7.0
    assert budget_from_query({"max_lag": "2.5"}, 7.0) == 2.5
    assert budget_from_query({"max_lag_ms": "1500"}, 7.0) == 1.5
    for bad in ("0", "-1", "abc", "nan", "inf"):
        with pytest.raises(BadBudget):
            budget_from_query({"max_lag": bad}, 7.0)


def test_default_budget_is_the_advisors() -> None:
    assert default_budget(fx.caught_up()) == fx.caught_up().settings["advisor"]["lag_budget_seconds"]
    assert default_budget(dataclasses.replace(fx.caught_up(), settings={})) == 5.0


def test_backlog_in_seconds_at_the_learned_rate() -> None:
    snap = fx.lagging()
    v = decide(snap, 5.0, NOW + 1)
    assert v.backlog_bytes == 310 * 2**20 and v.backlog_seconds is None  # no rate learned
    assert v.at == snap.lag.at if snap.lag else False
    assert snap.advisor is not None
    rate = ApplyRateView(bytes_per_second=2**20, rows_per_second=1000.0, observed_seconds=None,
                         observed_rows=None, scope=None, tables={})
    advisor = dataclasses.replace(snap.advisor, apply_rate=rate)
    v = decide(dataclasses.replace(snap, advisor=advisor), 5.0, NOW + 1)
    assert v.backlog_seconds == 310.0 and v.to_json()["backlog_seconds"] == 310.0
    assert decide(fx.starting(), 5.0, NOW + 1).backlog_bytes is None
