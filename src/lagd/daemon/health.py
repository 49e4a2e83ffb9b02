"""Each subsystem's health, and the one rule for logging its faults.

A fault is logged once when it starts (or changes), with its cause and the
fix, then at most every ``REPEAT_SECONDS`` while it lasts, and once more when
it ends, with how long it lasted. A DBA reading the journal sees "replica
127.0.0.1:3306: Access denied (error 1045) (fix: ...)" once, not a line per
poll, and not nothing at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lagd.daemon.state import Health
from lagd.errors import LagdError

log = logging.getLogger("lagd")

REPEAT_SECONDS = 300.0  # a lasting fault is said again this often


def describe(e: BaseException) -> tuple[str, str | None]:
    """(message without the fix, fix) of an error, in lagd's words when it has them."""
    if isinstance(e, LagdError):
        return e.message, e.fix
    return str(e) or type(e).__name__, None


class Tracked:
    """Health bookkeeping for one subsystem; ``wall``/``mono`` are the clocks."""

    def __init__(self, name: str, wall: Callable[[], float], mono: Callable[[], float]) -> None:
        self.name = name
        self._wall, self._mono = wall, mono
        self.up = False
        self.reason = "not run yet"
        self.fix: str | None = None
        self.last_success: float | None = None
        self.last_duration: float | None = None
        self.failing_since: float | None = None  # wall clock
        self._said: str | None = None  # the fault last logged
        self._said_at = 0.0  # monotonic
        self._episode: set[str] = set()  # reasons said since the fault began

    def ok(self, started: float | None = None, reason: str = "ok") -> None:
        if self.failing_since is not None and self._said is not None:
            log.info("%s: recovered after %.0f s (was: %s)", self.name, self._wall() - self.failing_since,
                     self._said)
        self.up, self.reason, self.fix = True, reason, None
        self.failing_since, self._said = None, None
        self._episode.clear()
        self.last_success = self._wall()
        if started is not None:
            self.last_duration = self._mono() - started

    def note(self, reason: str) -> None:
        """Up, with a reason that is not a fault ("not configured", "disabled")."""
        self.up, self.reason, self.fix = True, reason, None
        self.failing_since, self._said = None, None
        self._episode.clear()

    def fail(self, started: float | None, reason: str, fix: str | None = None, *,
             level: int = logging.WARNING) -> None:
        now = self._mono()
        if self.failing_since is None:
            self.failing_since = self._wall()
        self.up, self.reason, self.fix = False, reason, fix
        if started is not None:
            self.last_duration = now - started
        # A new cause is said at once; one already said in this fault (a client
        # alternating between the error and "waiting to reconnect") only again
        # after REPEAT_SECONDS.
        new = reason not in self._episode and len(self._episode) < 16
        if new or now - self._said_at >= REPEAT_SECONDS:
            lasting = f" (for {self._wall() - self.failing_since:.0f} s)" if not new else ""
            said_fix = f" (fix: {fix})" if fix and fix not in reason else ""
            log.log(level, "%s: %s%s%s", self.name, reason, said_fix, lasting)
            self._said, self._said_at = reason, now
            self._episode.add(reason)

    def failed(self, started: float | None, e: BaseException) -> None:
        message, fix = describe(e)
        self.fail(started, message, fix)

    def value(self) -> Health:
        return Health(self.name, self.up, self.reason, self.last_success, self.last_duration,
                      self.failing_since, self.fix)
