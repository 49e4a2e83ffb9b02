"""The one reconnect schedule: capped doubling with equal jitter."""

from __future__ import annotations

import pytest

from lagd.mysql.backoff import RECONNECT_CAP, Retry, backoff_delay

CASES = [
    ("first-no-jitter", 0, 0.0, 0.25),
    ("first-full-jitter", 0, 0.999, 0.49975),
    ("doubles", 3, 0.0, 2.0),
    ("capped", 10, 0.0, 15.0),
    ("capped-far-out", 10_000, 0.5, 22.5),
]


@pytest.mark.parametrize(("attempt", "rand", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_backoff_delay(attempt: int, rand: float, want: float) -> None:
    assert backoff_delay(attempt, base=0.5, cap=30.0, rand=lambda: rand) == pytest.approx(want)


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 10, 10_000])
def test_default_schedule_is_short(attempt: int) -> None:
    # A restarted replica is back in use within the cap: prefetch matters most then.
    for rand in (0.0, 0.5, 0.999):
        delay = backoff_delay(attempt, rand=lambda r=rand: r)
        assert 0 < delay <= RECONNECT_CAP <= 2.0
        assert delay >= backoff_delay(attempt, rand=lambda: 0.0)  # never below half


def test_retry_schedules_and_resets() -> None:
    r = Retry(base=1.0, cap=4.0, rand=lambda: 0.0)
    assert r.due(0.0)
    assert [r.failed(10.0), r.failed(10.0), r.failed(10.0), r.failed(10.0)] == [0.5, 1.0, 2.0, 2.0]
    assert not r.due(11.9) and r.due(12.0)
    r.succeeded()
    assert r.due(0.0) and r.failed(0.0) == 0.5
