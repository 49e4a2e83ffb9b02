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
from dataclasses import dataclass
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


def _cold_backlog(sb: Sandbox, seed: int, statements: int = 800) -> None:
    """Random rows changed on the source, 100 a statement, while the SQL thread is stopped,
    and the replica restarted (a cold pool) with the backlog received: 800 statements are
    a catch-up of about 4 s here."""
    sb.stop_sql_thread()
    rng = random.Random(seed)
    conn = sb.source.connect("sg")
    try:
        with conn.cursor() as cur:
            for i in range(statements):
                keys = ", ".join(str(rng.randint(1, ROWS)) for _ in range(100))
                cur.execute(f"UPDATE big SET c = 'v{seed}-{i}' WHERE id IN ({keys})")
    finally:
        conn.close()
    sb.restart_server(sb.replica().name, start_slave=False)
    sb.start_io_thread()
    wait_received(sb)


def test_the_engine_measures_the_sql_thread_and_gates_on_it(cold_pair: Sandbox) -> None:
    sb = cold_pair
    _cold_backlog(sb, 3)
    run = asyncio.run(_run(sb))
    st, gates = run.snap, [why for _, why in run.moves]
    print("stall:", st, "gates:", gates)
    assert st is not None and st["threads"] == [], "after the catch-up the SQL thread is found again"
    assert sum(st["seconds"].values()) > 0, "the SQL thread's time was measured"
    measured = [g for g in gates if g not in (control.UNMEASURED.reason, MEASURING)]
    assert measured, "the gate judged at least one second of the SQL thread's time"
    src = sb.source.query("CHECKSUM TABLE sg.big")[0]["Checksum"]
    assert sb.replica().query("CHECKSUM TABLE sg.big")[0]["Checksum"] == src


def test_a_catch_up_with_nothing_to_probe_is_left_after_three_seconds(cold_pair: Sandbox) -> None:
    """The schema excluded: reads are high, so the gate may open, but no change gives a
    probe; the engine must not decode the whole catch-up for nothing (control.UNPROBED_SECONDS)."""
    sb = cold_pair
    _cold_backlog(sb, 4, 3000)  # long enough for a gate that opens at 3-4 s to find it
    run = asyncio.run(_run(sb, exclude=("sg",)))
    print("gate moves:", run.moves, "caught up at", run.caught_up)
    assert run.rows_probed == 0
    opened = [t for t, why in run.moves if why.endswith(": prefetching")]
    if opened and run.caught_up - opened[0] > control.UNPROBED_SECONDS + 1.5:
        # Open long enough: it must have found nothing to probe and left.
        assert any(why.startswith("nothing to prefetch: none of the") and "schema excluded" in why
                   for _, why in run.moves), run.moves
    src = sb.source.query("CHECKSUM TABLE sg.big")[0]["Checksum"]
    assert sb.replica().query("CHECKSUM TABLE sg.big")[0]["Checksum"] == src


@dataclass(frozen=True)
class Run:
    snap: Any  # the engine's stall snapshot once the SQL thread is stopped after the catch-up
    moves: list[tuple[float, str]]  # each new gate reason, seconds after the engine started
    caught_up: float  # seconds after the engine started
    rows_probed: int


async def _run(sb: Sandbox, exclude: tuple[str, ...] = ()) -> Run:
    dsn = sb.replica().dsn
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user, dsn.password)
    opts = PrefetchOptions(connections=8, evaluate_window_seconds=2.0, buffer_pool_share=0.5)
    engine = await build_engine(
        endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe, exclude_schemas=exclude),
        index=sb.relay_log_index(), mariadb=True, pool_bytes=64 << 20)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    moves: list[tuple[float, str]] = []
    await asyncio.sleep(0.3)
    await asyncio.to_thread(sb.start_sql_thread)
    caught_up = asyncio.create_task(asyncio.to_thread(sb.wait_caught_up, 120))
    while not caught_up.done():
        reason = engine.gate_state.reason
        if not moves or moves[-1][1] != reason:
            moves.append((round(loop.time() - t0, 1), reason))
        await asyncio.sleep(0.1)
    await caught_up
    done_at = round(loop.time() - t0, 1)
    await asyncio.to_thread(sb.stop_sql_thread)  # no applier thread: the split is "not running"
    await asyncio.sleep(2.5)  # the next discovery finds none
    stop.set()
    await task
    snap = engine.stall_snapshot()
    await asyncio.to_thread(sb.start_sql_thread)
    return Run(snap, moves, done_at, engine.counters.rows_probed)
