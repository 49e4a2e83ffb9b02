"""Reconnect backoff: the one schedule every lagd connection uses."""

from __future__ import annotations

import random
from collections.abc import Callable

# Reconnects are cheap and the replica is local: a short cap gets prefetch and
# the heartbeat back within about a second of the server's return, which is
# when they matter most (the cold catch-up after a restart).
RECONNECT_BASE: float = 0.25
RECONNECT_CAP: float = 1.5


def backoff_delay(attempt: int, *, base: float = RECONNECT_BASE, cap: float = RECONNECT_CAP,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds before reconnect ``attempt`` (0-based): capped doubling, "equal jitter".

    Half the delay is fixed and half random, so many clients restarted together
    spread out but none retries at once, and the wait never collapses to zero
    (full jitter can, which turns a dead server into a busy loop).
    """
    delay = min(cap, base * 2.0 ** min(attempt, 60))
    return delay / 2 + delay / 2 * rand()


class Retry:
    """When the next attempt is due, for a connection retried by its users' calls.

    ``failed(now)`` after a failure, ``succeeded()`` after a success;
    ``due(now)`` tells whether trying now keeps to the schedule.
    """

    def __init__(self, *, base: float = RECONNECT_BASE, cap: float = RECONNECT_CAP,
                 rand: Callable[[], float] = random.random) -> None:
        self.base, self.cap, self._rand = base, cap, rand
        self.attempt = 0
        self.next_try = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def failed(self, now: float) -> float:
        """Record a failure; the seconds until the next attempt is due."""
        delay = backoff_delay(self.attempt, base=self.base, cap=self.cap, rand=self._rand)
        self.attempt += 1
        self.next_try = now + delay
        return delay

    def succeeded(self) -> None:
        self.attempt = 0
        self.next_try = 0.0
