from __future__ import annotations

import asyncio
import logging

import pytest

from lagd.aio import Signal, cancel_and_wait


async def _stubborn(stop: asyncio.Event, lost: list[int]) -> None:
    """Loses its first cancellation, as a task inside Python 3.11's asyncio.wait_for can."""
    try:
        await stop.wait()
    except asyncio.CancelledError:
        lost.append(1)
    await stop.wait()


@pytest.mark.asyncio
async def test_a_task_that_lost_its_cancellation_is_cancelled_again(caplog: pytest.LogCaptureFixture) -> None:
    stop, lost = asyncio.Event(), []
    stubborn = asyncio.create_task(_stubborn(stop, lost), name="stubborn")
    plain = asyncio.create_task(stop.wait(), name="plain")
    await asyncio.sleep(0)
    caplog.set_level(logging.WARNING, logger="lagd")
    await asyncio.wait_for(cancel_and_wait([stubborn, plain], again=0.01), 5)
    assert lost == [1] and stubborn.cancelled() and plain.cancelled()
    assert [r.getMessage() for r in caplog.records] == [
        "stubborn did not end within 0.01 s of being cancelled (a lost cancellation, or a slow clean-up):"
        " cancelling again"]


@pytest.mark.asyncio
async def test_what_the_tasks_raised_is_taken_and_ended_ones_are_left_alone() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    done = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait([failed, done])  # no "exception was never retrieved" later
    assert isinstance(failed.exception(), RuntimeError) and done.result() is None
    await cancel_and_wait([])


@pytest.mark.asyncio
async def test_a_signal_set_before_or_during_a_wait_ends_it_at_once() -> None:
    s = Signal()
    s.set()
    assert await s.wait(10.0) is True
    s.clear()
    loop = asyncio.get_running_loop()
    loop.call_soon(s.set)
    assert await asyncio.wait_for(s.wait(10.0), 5.0) is True


@pytest.mark.asyncio
async def test_a_signal_wait_runs_out_quietly() -> None:
    s = Signal()
    assert await s.wait(0.01) is False
    assert not s.is_set()
    s.set()  # no one waits: only the flag
    assert await s.wait(0.0) is True


@pytest.mark.asyncio
async def test_a_cancelled_signal_wait_lets_the_next_one_in() -> None:
    s = Signal()
    t = asyncio.create_task(s.wait())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="another task"):
        await s.wait(1.0)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    asyncio.get_running_loop().call_soon(s.set)
    assert await asyncio.wait_for(s.wait(), 5.0) is True
