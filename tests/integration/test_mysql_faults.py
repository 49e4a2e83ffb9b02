"""A hung replica (SIGSTOP) costs lagd's sessions one timeout each, never the event loop.

The replica is this module's own sandbox: stopping the shared one would stall
every other test. Each await on a hung server must end with a LOST error
while another task keeps running; after SIGCONT both sessions work again and
the monitor says once that it reconnected. The heartbeat writer comes back on
its own after the source is killed and started again.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lagd.heartbeat import HeartbeatWriter
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.monitor import ReplicaMonitor
from lagd.mysql.session import BlockingSession
from lagd.sandbox.pair import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def own_sandbox() -> Iterator[Sandbox]:
    sb = Sandbox(SandboxConfig(replicas=1, source_buffer_pool_mb=16, replica_buffer_pool_mb=16))
    sb.start()
    try:
        yield sb
    finally:
        sb.replica().send_signal(signal.SIGCONT)
        sb.stop()


def _state(pid: int | None) -> str:
    """The process's state letter from /proc ("T": stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def _ticking(aw: object) -> tuple[object, int]:
    """Await ``aw`` while a ticker task runs; the result (or exception) and the ticks seen."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    t = asyncio.create_task(ticker())
    try:
        result: object = await aw  # type: ignore[misc]
    except DatabaseError as e:
        result = e
    finally:
        t.cancel()
    return result, ticks


def test_hung_replica_gives_lost_errors_and_the_loop_ticks(own_sandbox: Sandbox,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    replica = own_sandbox.replica()
    d = replica.dsn
    endpoint = Endpoint(d.host, d.port, d.user, d.password, connect_timeout=1.0)

    async def main() -> None:
        monitor = ReplicaMonitor.of(endpoint, read_timeout=1.0)
        session = BlockingSession(endpoint, statement_timeout=1.0, read_timeout=1.0)
        try:
            assert (await monitor.poll()).status is not None
            assert await session.query("SELECT 1 AS one") == [{"one": 1}]
            replica.send_signal(signal.SIGSTOP)
            try:
                # kill() returns before the server has stopped: under a loaded CI the
                # poll below was answered in under 50 ms (0 ticks) by a server not yet
                # stopped. Hung means stopped.
                until = time.monotonic() + 10
                while _state(replica.pid) != "T" and time.monotonic() < until:
                    await asyncio.sleep(0.01)
                sample, ticks = await _ticking(monitor.poll())
                assert ticks > 0
                assert sample.status is None and sample.fault is not None  # type: ignore[attr-defined]
                assert sample.fault.kind is Kind.LOST, sample.error  # type: ignore[attr-defined]
                assert sample.error.startswith(f"replica {d.host}:{d.port}: ")  # type: ignore[attr-defined]

                error, ticks = await _ticking(session.query("SELECT 1 AS one"))
                assert ticks > 0
                assert isinstance(error, DatabaseError) and error.kind is Kind.LOST, error
            finally:
                replica.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 30
            while (await monitor.poll()).status is None:
                assert time.monotonic() < deadline, monitor.latest
                await asyncio.sleep(0.1)
            assert await session.query("SELECT 1 AS one") == [{"one": 1}]
            assert monitor.reconnects == 1
        finally:
            await monitor.close()
            session.close()

    with caplog.at_level(logging.INFO, logger="lagd.mysql.monitor"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "lagd.mysql.monitor"]
    assert any("no answer in 1 s" in line for line in lines), lines
    assert sum("reconnected after" in line for line in lines) == 1, lines


def test_heartbeat_writer_is_back_soon_after_the_source_restarts(own_sandbox: Sandbox,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    source = own_sandbox.source
    writer = HeartbeatWriter(source.connect, "lagd_faults.heartbeat", interval=0.1, create_table=True)
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    with caplog.at_level(logging.INFO, logger="lagd.heartbeat"):
        thread.start()
        try:
            wait_until(lambda: writer.written >= 3)
            source.kill()  # kill -9: refused connections until it is back
            time.sleep(1.0)
            source.launch()
            source.wait_ready(60)
            ready, before = time.monotonic(), writer.written
            wait_until(lambda: writer.written > before)
            # Reported, not asserted (no timed assertions): the backoff cap is 1.5 s.
            print(f"heartbeat writer: first beat {time.monotonic() - ready:.2f} s after the source answered")
        finally:
            stop.set()
            thread.join(10)
    lines = [r.getMessage() for r in caplog.records if r.name == "lagd.heartbeat"]
    assert sum("reconnected after" in line for line in lines) == 1, lines


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_monitor_is_back_soon_after_the_replica_restarts(own_sandbox: Sandbox,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    replica = own_sandbox.replica()
    d = replica.dsn
    endpoint = Endpoint(d.host, d.port, d.user, d.password, connect_timeout=1.0)

    async def main() -> float:
        monitor = ReplicaMonitor.of(endpoint)
        try:
            assert (await monitor.poll()).status is not None
            replica.kill()  # kill -9
            down = await monitor.poll()
            assert down.fault is not None and down.fault.kind in (Kind.LOST, Kind.UNREACHABLE), down.error
            await asyncio.sleep(1.0)
            await asyncio.to_thread(own_sandbox.restart_server, replica.name)
            ready = time.monotonic()
            while (await monitor.poll()).status is None:  # polled like the lag loop, but faster
                assert time.monotonic() - ready < 60, monitor.latest
                await asyncio.sleep(0.05)
            return time.monotonic() - ready
        finally:
            await monitor.close()

    with caplog.at_level(logging.INFO, logger="lagd.mysql.monitor"):
        back = asyncio.run(main())
    # Reported, not asserted (no timed assertions): the backoff cap is 1.5 s (was 15 s).
    print(f"monitor: status again {back:.2f} s after the replica answered")
    lines = [r.getMessage() for r in caplog.records if r.name == "lagd.mysql.monitor"]
    assert sum("reconnected after" in line for line in lines) == 1, lines
