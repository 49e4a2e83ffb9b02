"""asyncio helpers shared by the daemon and the prefetcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("lagd")

# Seconds a cancelled task gets to end before it is cancelled again.
CANCEL_AGAIN = 1.0


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
            log.warning("%s did not end when cancelled (a lost cancellation): cancelling again",
                        ", ".join(sorted(getattr(t, "get_name", lambda: "a task")() for t in pending)))
    for t in tasks:
        if not t.cancelled():
            t.exception()
