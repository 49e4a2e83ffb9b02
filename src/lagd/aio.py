"""asyncio helpers shared by the daemon and the prefetcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("lagd")

# Seconds a cancelled task gets to end before it is cancelled again: past the clean-ups
# that await on cancellation (a prefetcher's close is bounded at 1 s), which a second
# cancellation would cut short.
CANCEL_AGAIN = 5.0


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], again: float = CANCEL_AGAIN) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again any that
    runs on; what they raised is taken (never "exception was never retrieved").

    A cancellation can be lost: on Python 3.11 ``asyncio.wait_for`` returns its
    awaitable's result when that completes in the same loop turn as the cancellation
    (fixed in 3.12), and the task then goes on. Waiting for such a task with
    ``gather`` waits forever: a relay-log loop held so would keep the backlog unknown,
    with nothing said. The next cancellation reaches it at its next wait.
    """
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    said = False
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=again)
        if pending and not said:
            said = True
            log.warning("%s did not end within %g s of being cancelled (a lost cancellation, or a slow"
                        " clean-up): cancelling again", ", ".join(sorted(
                            getattr(t, "get_name", lambda: "a task")() for t in pending)), again)
    for t in tasks:
        if not t.cancelled():
            t.exception()


class Signal:
    """An :class:`asyncio.Event` for one waiting task at a time, whose wait ends quietly
    at a deadline.

    The prefetch engine's loops wait on such a flag between two steps and two polls,
    about a hundred times a second in a catch-up. Under ``asyncio.timeout`` each wait
    that runs out cancels the task and turns the cancellation into an error that is
    caught; here the deadline is a timer that wakes the wait, and a cancellation only
    ever comes from outside. (What a wait costs is mostly its future and timer: lagd's
    CPU in a catch-up was not told apart, docs/benchmarks.md.)
    """

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Until set, or ``timeout`` seconds have passed; True when set."""
        if self._flag:
            return True
        if self._waiter is not None:
            raise RuntimeError("Signal.wait: another task is waiting already")
        loop = asyncio.get_running_loop()
        w = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _wake, w) if timeout is not None else None
        try:
            await w
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None
        return self._flag


def _wake(w: asyncio.Future[None]) -> None:
    if not w.done():
        w.set_result(None)
