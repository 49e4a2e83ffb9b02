"""Reconnect backoff: the one schedule every lagd connection uses."""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_delay(attempt: int, *, base: float = 0.2, cap: float = 10.0,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds before reconnect ``attempt`` (0-based): capped doubling, "equal jitter".

    Half the delay is fixed and half random, so many clients restarted together
    spread out but none retries at once, and the wait never collapses to zero
    (full jitter can, which turns a dead server into a busy loop).
    """
    delay = min(cap, base * 2.0 ** min(attempt, 60))
    return delay / 2 + delay / 2 * rand()
