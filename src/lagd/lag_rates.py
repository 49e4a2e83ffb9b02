"""The arithmetic behind lag summaries: smoothed rates, catch-up ETA,
histogram, windowed averages and the clock-offset bound.

Everything here works on timestamps handed in by the caller (monotonic
seconds), never on a clock of its own, so the same samples always give the
same numbers.  :mod:`lagd.lag` wires these together; docs/lag.md explains the
choices for operators.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = [
    "AVERAGE_WINDOWS",
    "LAG_BUCKETS",
    "RATE_TIME_CONSTANT",
    "SPEED_TIME_CONSTANT",
    "ClockOffset",
    "ClockOffsetEstimator",
    "DecayingRate",
    "HistogramSnapshot",
    "LagHistogram",
    "ProgressRate",
    "WindowAverage",
    "WindowAverages",
    "catch_up_eta",
]

# Seconds. Long enough that one slow or fast poll interval barely moves the
# forecast, short enough that a catch-up's ETA follows a real change in apply
# speed while it happens (63% of a step after 10 s, 95% after 30 s).
RATE_TIME_CONSTANT: Final = 10.0

# Seconds, for the apply speed the ETA divides by (source-seconds per second).
# Shorter than the rates': a catch-up speeds up as it goes (at its start the
# IO thread, the look-ahead reader and the SQL thread compete for the CPU),
# and at 10 s the forecast trailed that by 40-80% on the sandbox; the speed's
# position is fine enough (lagd.backlog.Backlog.position) for 4 s to be steady.
SPEED_TIME_CONSTANT: Final = 4.0

# Upper bounds in seconds, Prometheus "le" semantics (value <= bound).
LAG_BUCKETS: Final = (
    0.1,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    math.inf,
)

# 1, 5 and 15 minutes, in seconds: what uptime(1) and pt-heartbeat --frames show.
AVERAGE_WINDOWS: Final = (60.0, 300.0, 900.0)


class DecayingRate:
    """The rate of change of a cumulative quantity, smoothed in time.

    Each update gives one raw rate over the interval since the previous one;
    it is blended in with weight ``1 - exp(-dt / time_constant)``, which makes
    the result independent of how regularly the caller polls (two half
    intervals weigh exactly as much as one whole).  ``counter=True`` treats a
    decrease as a reset (the counter restarted) rather than a negative rate.
    """

    def __init__(self, time_constant: float = RATE_TIME_CONSTANT, *, counter: bool = True) -> None:
        if time_constant <= 0:
            raise ValueError(f"time_constant must be positive, not {time_constant!r}")
        self.time_constant = time_constant
        self.counter = counter
        self._last: tuple[float, float] | None = None
        self._value: float | None = None

    @property
    def value(self) -> float | None:
        """The smoothed rate per second, None until two samples were seen."""
        return self._value

    def reset(self) -> None:
        """Forget the history: the next two samples start the rate afresh."""
        self._last = None
        self._value = None

    def add(self, at: float, total: float) -> float | None:
        """Record the cumulative ``total`` at monotonic time ``at``; returns :attr:`value`."""
        if self._last is None:
            self._last = (at, total)
            return self._value
        last_at, last_total = self._last
        dt = at - last_at
        if dt <= 0:
            return self._value
        self._last = (at, total)
        delta = total - last_total
        if delta < 0 and self.counter:
            return self._value
        sample = delta / dt
        if self._value is None:
            self._value = sample
        else:
            alpha = 1.0 - math.exp(-dt / self.time_constant)
            self._value += alpha * (sample - self._value)
        return self._value


class ProgressRate:
    """The rate of a position that can stall: a time-decayed ratio of sums.

    Each interval adds its progress and its seconds to two sums that decay
    with ``time_constant``; the rate is their ratio. Unlike blending each
    interval's rate in (:class:`DecayingRate`), the first intervals after a
    start weigh by their length: one odd first interval (half of it still
    inside a stall) does not hold the rate down for many polls. Two half
    intervals weigh exactly as much as one whole.

    A stall of more than ``max_gap`` seconds (the position does not move) or
    a reading without a position ends the sums: while stalled the rate is
    0, and when the position moves again the rate starts afresh from the
    last reading of the stall. Without that, the first sample after a stop,
    an idle spell or a long transaction spans the whole gap (minutes of
    "nothing" in the speed of the catch-up that follows), and the decayed
    zeros of the gap hold the speed down long after it ended. Shorter stalls
    count as zeros: they are part of the real speed of a workload with
    transactions of a few seconds.
    """

    def __init__(
        self, time_constant: float = RATE_TIME_CONSTANT, *, max_gap: float = 5.0, counter: bool = False
    ) -> None:
        if time_constant <= 0 or max_gap <= 0:
            raise ValueError(f"time_constant and max_gap must be positive, not {time_constant!r} and "
                             f"{max_gap!r}")
        self.time_constant = time_constant
        self.max_gap = max_gap
        self.counter = counter
        self._progress = self._seconds = 0.0
        self._position: float | None = None
        self._at = 0.0
        self._moved_at = 0.0
        self._stalled = False

    @property
    def value(self) -> float | None:
        """Per second: None until two readings, 0 while stalled for more than ``max_gap``."""
        if self._stalled:
            return 0.0
        return self._progress / self._seconds if self._seconds > 0 else None

    @property
    def seconds(self) -> float:
        """The (decayed) seconds the value rests on: small right after a start."""
        return 0.0 if self._stalled else self._seconds

    def stalled_for(self, at: float) -> float | None:
        """Seconds without progress at ``at``; None without a position."""
        return None if self._position is None else at - self._moved_at

    def restart(self) -> None:
        """Forget everything: the next two readings start the rate afresh."""
        self._progress = self._seconds = 0.0
        self._position = None
        self._stalled = False

    def add(self, at: float, position: float | None) -> float | None:
        """The position at monotonic time ``at`` (None: not measurable now); returns :attr:`value`."""
        if position is None:
            self.restart()
            return None
        if self._position is None:
            self._position, self._at, self._moved_at = position, at, at
            return self.value
        dt = at - self._at
        if dt <= 0:
            return self.value
        delta = position - self._position
        self._position, self._at = position, at
        if delta < 0 and self.counter:
            return self.value  # the counter restarted: no sample
        if delta != 0:
            self._moved_at = at
            self._stalled = False
            self._add(delta, dt)
        elif at - self._moved_at > self.max_gap:
            # A gap: forget it; the next sample starts here, not where the gap began.
            self._stalled = True
            self._progress = self._seconds = 0.0
        else:
            self._add(0.0, dt)
        return self.value

    def skip(self, at: float, position: float | None) -> float | None:
        """A reading that does not count: the interval up to it is left out of
        the rate, which stays what it was (the SQL thread is inside one big
        transaction, whose own time is forecast another way)."""
        if position is None:
            return self.add(at, position)
        self._position, self._at, self._moved_at = position, at, at
        return None if self._stalled else self.value

    def _add(self, progress: float, seconds: float) -> None:
        keep = math.exp(-seconds / self.time_constant)
        self._progress = self._progress * keep + progress
        self._seconds = self._seconds * keep + seconds


def catch_up_eta(
    lag: float | None,
    speed: float | None,
    *,
    caught_up: bool = False,
    blocked: str | None = None,
    stalled: float | None = None,
    inside: float | None = None,
) -> tuple[float | None, str]:
    """Seconds until the replica has caught up, and why.

    ``speed`` is in source-seconds applied per wall-second.  The source adds
    one second of work every second and the replica removes ``speed`` seconds
    of it, so lag shrinks by ``speed - 1`` seconds per second and reaches
    zero after ``lag / (speed - 1)`` seconds; at ``speed <= 1`` it never does
    (``math.inf``).  ``blocked`` names why lag cannot shrink at all (a stopped
    thread): also ``math.inf``.  ``stalled`` is how long nothing was applied
    though there is work (inside one long transaction): the ETA is unknown
    until applying resumes, not infinite. ``inside`` is how long the big
    transaction the SQL thread is in will still hold it (the advisor's
    estimate): the ETA is that, plus the catch-up of the lag it leaves at
    ``speed`` (the speed measured before it).
    """
    if blocked is not None:
        return math.inf, f"{blocked}, so lag cannot shrink"
    if caught_up or lag == 0:
        return 0.0, "caught up: nothing received is waiting to be applied"
    if lag is None:
        return None, "no lag value to forecast from"
    if stalled is not None:
        return None, (
            f"nothing applied for {stalled:.0f} s though transactions wait (a long transaction, "
            "or the SQL thread waits on a lock): the ETA returns when applying resumes"
        )
    if speed is None:
        return None, "apply speed not measured yet (needs two updates)"
    if inside is not None:
        # One big transaction holds the SQL thread for ``inside`` more seconds;
        # when it commits, the lag is what it is now plus those seconds, and
        # shrinks from there at the speed measured before it.
        if speed <= 1.0:
            return math.inf, (
                f"inside a big transaction for about {inside:.1f} s more, and applying "
                f"{speed:.2f} source-seconds per second before it: lag does not shrink")
        return inside + (lag + inside) / (speed - 1.0), (
            f"inside a big transaction for about {inside:.1f} s more; then lag {lag + inside:.1f} s "
            f"shrinks by {speed - 1.0:.2f} s per second (the speed before it)")
    if speed <= 1.0:
        return math.inf, (
            f"applying {speed:.2f} source-seconds per second, not faster than the source "
            "writes, so lag does not shrink"
        )
    return lag / (speed - 1.0), (
        f"lag {lag:.1f} s shrinks by {speed - 1.0:.2f} s per second "
        f"(applying {speed:.2f} source-seconds per second)"
    )


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative counts as Prometheus exposes them: ``counts[i]`` observations were <= ``bounds[i]``."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum: float  # seconds


class LagHistogram:
    """Counts of lag values per bucket, plus their sum (seconds)."""

    def __init__(self, bounds: tuple[float, ...] = LAG_BUCKETS) -> None:
        if list(bounds) != sorted(bounds) or bounds[-1] != math.inf:
            raise ValueError("histogram bounds must ascend and end with math.inf")
        self.bounds = bounds
        self._per_bucket = [0] * len(bounds)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(self.bounds):
            if seconds <= bound:
                self._per_bucket[i] += 1
                break
        self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        cumulative: list[int] = []
        running = 0
        for n in self._per_bucket:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), running, self._sum)


@dataclass(frozen=True, slots=True)
class WindowAverage:
    """Time-weighted mean lag over the last ``window`` seconds.

    ``covered`` is how many of those seconds had a lag value: less than the
    window right after start, or when lag was unknown for a while.
    """

    window: float
    seconds: float | None
    covered: float


class WindowAverages:
    """Time-weighted averages of a value over sliding windows.

    A value stands for the interval since the previous update (capped at
    ``max_span`` seconds, so a stalled caller does not stretch one reading
    over minutes).  Updates without a value mark time that counts for nothing.
    """

    def __init__(self, windows: tuple[float, ...] = AVERAGE_WINDOWS, *, max_span: float = 30.0) -> None:
        self.windows = windows
        self.max_span = max_span
        self._samples: deque[tuple[float, float | None]] = deque()

    def add(self, at: float, value: float | None) -> None:
        if self._samples and at <= self._samples[-1][0]:
            return
        self._samples.append((at, value))
        horizon = at - max(self.windows)
        # Keep one sample older than the longest window: it bounds the next one's interval.
        while len(self._samples) >= 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()

    def averages(self) -> tuple[WindowAverage, ...]:
        if not self._samples:
            return tuple(WindowAverage(w, None, 0.0) for w in self.windows)
        now = self._samples[-1][0]
        weighted = [0.0] * len(self.windows)
        covered = [0.0] * len(self.windows)
        samples = list(self._samples)
        for i in range(len(samples) - 1, 0, -1):
            at, value = samples[i]
            if value is None:
                continue
            begin = max(samples[i - 1][0], at - self.max_span)
            for k, window in enumerate(self.windows):
                span = at - max(begin, now - window)
                if span > 0:
                    weighted[k] += value * span
                    covered[k] += span
        out = []
        for k, window in enumerate(self.windows):
            if covered[k] > 0:
                out.append(WindowAverage(window, weighted[k] / covered[k], covered[k]))
            elif samples[-1][1] is not None:
                # A single reading covers no interval yet; it is still the best average there is.
                out.append(WindowAverage(window, samples[-1][1], 0.0))
            else:
                out.append(WindowAverage(window, None, 0.0))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """What heartbeats prove about the replica's clock relative to the source's.

    A heartbeat row carries the source's clock, so the replica sees
    ``heartbeat lag = age of the row + offset`` where ``offset`` is replica
    clock minus source clock and the age is never negative.  The smallest
    heartbeat lag seen is therefore an upper bound on the offset:
    ``offset <= upper_bound``.  It is tight when the window holds readings
    taken while the replica was idle (the row's age was only the replication
    delay); while lagging it is loose.  A negative bound proves the replica's
    clock is behind the source's by at least ``-upper_bound`` seconds.  No
    lower bound on the offset can be had from one-way timestamps.
    """

    upper_bound: float  # seconds, replica clock minus source clock is at most this
    samples: int
    idle_samples: int
    window: float  # seconds
    replica_behind: bool
    reason: str


# A time-zone mistake shows up as an offset of whole (or half) hours.
_TZ_STEP: Final = 1800.0
_TZ_TOLERANCE: Final = 120.0


def _looks_like_time_zone(offset: float) -> bool:
    if abs(offset) < _TZ_STEP - _TZ_TOLERANCE:
        return False
    return abs(offset - round(offset / _TZ_STEP) * _TZ_STEP) <= _TZ_TOLERANCE


class ClockOffsetEstimator:
    """Bound the replica-minus-source clock offset from raw (unclamped) heartbeat lags.

    The minimum is taken over every reading of the window, idle or not: each
    one is a valid upper bound, so the smallest of them is the best.  The
    estimate is only published once an idle reading makes it tight, unless it
    is negative, which is proof whatever the state.
    """

    def __init__(self, window: float = 600.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, float, bool]] = deque()

    def add(self, at: float, raw_lag: float, *, idle: bool) -> None:
        self._samples.append((at, raw_lag, idle))
        while self._samples and self._samples[0][0] < at - self.window:
            self._samples.popleft()

    def estimate(self) -> ClockOffset | None:
        if not self._samples:
            return None
        bound = min(s[1] for s in self._samples)
        idle = sum(1 for s in self._samples if s[2])
        behind = bound < 0
        if not behind and idle == 0:
            return None
        if behind:
            reason = (
                f"a heartbeat written {-bound:.3f} s in the replica's future: the replica's clock "
                f"is behind the source's by at least {-bound:.3f} s"
            )
        else:
            reason = (
                f"smallest heartbeat lag of the last {self.window:.0f} s ({idle} idle readings): "
                f"the replica's clock is at most {bound:.3f} s ahead of the source's"
            )
        if _looks_like_time_zone(bound):
            reason += (
                "; a multiple of 30 minutes usually means the writer stores local time, "
                "not UTC (pt-heartbeat without --utc)"
            )
        return ClockOffset(bound, len(self._samples), idle, self.window, behind, reason)
