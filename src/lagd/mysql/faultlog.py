"""How a connection failure reaches the log: once with its cause and fix, then rarely, then healed.

A DBA reading the log after an outage wants the first line (what broke and
what to do), proof it lasted, and when it ended; not one line per retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lagd.mysql.errors import DatabaseError, Kind

REPEAT_LOG_SECONDS = 60.0  # a failure that lasts is logged again at most this often


class FailureLog:
    """Logs a connection failure once, then at most every ``repeat`` seconds, and the recovery.

    A different cause (say refused, then access denied) is news and is logged
    at once.
    """

    def __init__(self, logger: logging.Logger, where: str, *, repeat: float = REPEAT_LOG_SECONDS,
                 clock: Callable[[], float] = time.monotonic, level: int = logging.WARNING) -> None:
        self._log, self.where, self.repeat, self._clock = logger, where, repeat, clock
        self.level = level
        self.since: float | None = None  # when the current failure began
        self.count = 0
        self._last_key: tuple[Kind, int | None] | None = None
        self._last_logged = 0.0

    def failed(self, e: DatabaseError, *, retry_in: float | None = None) -> None:
        now = self._clock()
        key = (e.kind, e.code)
        if self.since is None:
            self.since, self.count = now, 0
        self.count += 1
        retry = f"; reconnecting in {retry_in:.1f} s" if retry_in is not None else ""
        if key != self._last_key:
            self._log.log(self.level, "%s%s", e, retry)
        elif now - self._last_logged >= self.repeat:
            self._log.log(self.level, "%s (still failing after %.0f s, %d attempts)%s", e,
                          now - self.since, self.count, retry)
        else:
            return
        self._last_key, self._last_logged = key, now

    def recovered(self) -> None:
        if self.since is None:
            return
        self._log.log(min(self.level, logging.INFO), "%s: reconnected after %.1f s (%d failed attempts)",
                      self.where, self._clock() - self.since, self.count)
        self.since, self._last_key, self.count = None, None, 0
