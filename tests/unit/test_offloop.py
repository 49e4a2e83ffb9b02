"""OneThread: calls run in order in one thread; what they use is closed by that thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lagd.prefetch.offloop import OneThread


@pytest.mark.asyncio
async def test_close_runs_last_in_the_thread_after_the_calls_before_it() -> None:
    one = OneThread("test-offloop")
    seen: list[tuple[str, str]] = []
    started = threading.Event()

    def slow_read() -> str:
        started.set()
        time.sleep(0.05)  # a read still running when the owner closes
        seen.append(("read", threading.current_thread().name))
        return "batch"

    task = asyncio.ensure_future(one.call(slow_read))
    while not started.is_set():
        await asyncio.sleep(0.001)
    task.cancel()  # the engine stopping: its await is abandoned, the read is not
    closed = threading.Event()
    one.close(last=lambda: (seen.append(("close", threading.current_thread().name)), closed.set()))
    assert closed.wait(5)
    assert seen == [("read", "test-offloop"), ("close", "test-offloop")]


def test_close_without_a_thread_runs_last_here() -> None:
    seen: list[str] = []
    OneThread("never-started").close(last=lambda: seen.append("closed"))
    assert seen == ["closed"]


@pytest.mark.asyncio
async def test_a_failing_last_is_swallowed_and_the_thread_ends() -> None:
    one = OneThread("test-offloop-fail")
    assert await one.call(lambda: 7) == 7
    thread = one._thread
    assert thread is not None

    def boom() -> None:
        raise OSError("already closed")

    one.close(last=boom)
    thread.join(5)
    assert not thread.is_alive()
