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
