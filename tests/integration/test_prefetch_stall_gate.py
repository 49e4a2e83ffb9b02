"""The engine measures its SQL thread on a real replica and gates prefetch on it.

With PROCESS granted, the engine finds the applier thread by its OS id, samples
it during a catch-up and reports the split and the gate's verdict in its
snapshot; the data stays identical. Which verdict depends on the machine (a
loaded 2-core box is as much CPU-bound as read-bound), so only the wiring is
asserted, and the figures are printed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest

from lagd.mysql.endpoint import Endpoint
from lagd.prefetch import control
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine
from lagd.sandbox.pair import LAGD_USER, Sandbox, SandboxConfig
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 300_000  # about 80 MB of rows against a 64 MB pool
MEASURING = "measuring the SQL thread before prefetching"


@pytest.fixture(scope="module")
def cold_pair() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(replica_buffer_pool_mb=64, o_direct=True)) as sb:
        sb.source.query("CREATE DATABASE sg")
        sb.source.query("CREATE TABLE sg.big (id INT PRIMARY KEY, c CHAR(200) NOT NULL)")
        sb.source.query(f"INSERT INTO sg.big SELECT seq, REPEAT('x', 200) FROM seq_1_to_{ROWS}", db="sg")
        sb.wait_caught_up(timeout=180)
        for host in ("localhost", "127.0.0.1"):  # what docs/prefetch.md asks for the split
            sb.replica().query(f"GRANT PROCESS ON *.* TO '{LAGD_USER}'@'{host}'")
        yield sb


def test_the_engine_measures_the_sql_thread_and_gates_on_it(cold_pair: Sandbox) -> None:
    sb = cold_pair
    sb.stop_sql_thread()
    rng = random.Random(3)
    conn = sb.source.connect("sg")
    try:
        with conn.cursor() as cur:
            for i in range(800):  # 80,000 rows at random: a catch-up of seconds
                keys = ", ".join(str(rng.randint(1, ROWS)) for _ in range(100))
                cur.execute(f"UPDATE big SET c = 'v{i}' WHERE id IN ({keys})")
    finally:
        conn.close()
    sb.restart_server(sb.replica().name, start_slave=False)  # a cold pool
    sb.start_io_thread()
    wait_received(sb)
    snap, gates = asyncio.run(_run(sb))
    st = snap
    print("stall:", st, "gates:", gates)
    assert st is not None and st["threads"] == [], "after the catch-up the SQL thread is found again"
    assert sum(st["seconds"].values()) > 0, "the SQL thread's time was measured"
    measured = [g for g in gates if g not in (control.UNMEASURED.reason, MEASURING)]
    assert measured, "the gate judged at least one second of the SQL thread's time"
    src = sb.source.query("CHECKSUM TABLE sg.big")[0]["Checksum"]
    assert sb.replica().query("CHECKSUM TABLE sg.big")[0]["Checksum"] == src


async def _run(sb: Sandbox) -> tuple[Any, list[str]]:
    dsn = sb.replica().dsn
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user, dsn.password)
    opts = PrefetchOptions(connections=8, evaluate_window_seconds=2.0, buffer_pool_share=0.5)
    engine = await build_engine(endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe),
                                index=sb.relay_log_index(), mariadb=True, pool_bytes=64 << 20)
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    gates: list[str] = []
    await asyncio.sleep(0.3)
    await asyncio.to_thread(sb.start_sql_thread)
    caught_up = asyncio.create_task(asyncio.to_thread(sb.wait_caught_up, 120))
    while not caught_up.done():
        reason = engine.gate_state.reason
        if not gates or gates[-1] != reason:
            gates.append(reason)
        await asyncio.sleep(0.1)
    await caught_up
    await asyncio.to_thread(sb.stop_sql_thread)  # no applier thread: the split is "not running"
    await asyncio.sleep(2.5)  # the next discovery finds none
    stop.set()
    await task
    snap = engine.stall_snapshot()
    await asyncio.to_thread(sb.start_sql_thread)
    return snap, gates
