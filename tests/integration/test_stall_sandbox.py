"""The SQL thread's time split on a real replica: stopped, busy on CPU, cold.

The applier threads are found as lagd finds them (information_schema.PROCESSLIST.TID,
which needs the PROCESS privilege; the test asks as root) and sampled from
/proc at 50 Hz while the SQL thread applies a backlog. Shares are compared
between runs, never against a clock: a warm table applies mostly on CPU, a
table larger than the buffer pool after a restart mostly waits for reads.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lagd.prefetch import stall
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.test_relaylog_sandbox import wait_received

ROWS = 300_000  # about 80 MB of rows against a 64 MB pool

# The split is compared between two catch-ups: another test's load beside one of
# them would move it (tests/conftest.py).
pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def pair() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(replica_buffer_pool_mb=64, o_direct=True)) as sb:
        sb.source.query("CREATE DATABASE st")
        sb.source.query("CREATE TABLE st.big (id INT PRIMARY KEY, c CHAR(200) NOT NULL)")
        sb.source.query(f"INSERT INTO st.big SELECT seq, REPEAT('x', 200) FROM seq_1_to_{ROWS}", db="st")
        sb.source.query("CREATE TABLE st.small (id INT PRIMARY KEY, n INT NOT NULL)")
        sb.source.query("INSERT INTO st.small SELECT seq, 0 FROM seq_1_to_1000", db="st")
        sb.wait_caught_up(timeout=180)
        yield sb


def appliers(sb: Sandbox) -> tuple[int, ...]:
    return stall.applier_tids(sb.replica().query(stall.appliers_sql(mariadb=True)))


def write(sb: Sandbox, statements: list[str]) -> None:
    conn = sb.source.connect("st")
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def measure_catch_up(sb: Sandbox) -> dict[str, Any]:
    """Start the SQL thread and sample its applier until it has caught up."""
    sb.start_sql_thread()
    mon = stall.StallMonitor()
    deadline = time.monotonic() + 120
    while not appliers(sb) and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.set_threads(appliers(sb))
    mon.start(hz=50)
    try:
        sb.wait_caught_up(timeout=120)
    finally:
        mon.stop()
    mon.sample()
    split = stall.shares(mon.seconds)
    assert split is not None, "no samples of the SQL thread"
    v = stall.verdict(mon.seconds, running=True, headroom=mon.headroom_over(2.0))
    print(f"{mon.samples} samples, {sum(mon.seconds.values()):.2f} s:",
          {k: round(x, 3) for k, x in split.items()}, v.text)
    return {"split": split, "verdict": v}


def test_stall_split_moves_the_right_way(pair: Sandbox) -> None:
    sb = pair
    assert appliers(sb), "the running SQL thread is found by its OS thread id"

    sb.stop_sql_thread()
    assert appliers(sb) == ()  # stopped: nothing to sample
    mon = stall.StallMonitor()
    mon.set_threads(appliers(sb))
    mon.sample()
    assert mon.samples == 0 and mon.snapshot()["verdict"] == "unknown"

    # Busy on CPU: the small table is in the pool; every change is a page already there.
    sb.replica().query("SELECT COUNT(*) FROM st.small")
    write(sb, [f"UPDATE small SET n = n + {i}" for i in range(500)])  # 500,000 row changes
    warm = measure_catch_up(sb)

    # Cold: the big table after a restart of the replica, O_DIRECT: every page a disk read.
    sb.stop_sql_thread()
    rng = random.Random(2)
    keys = [", ".join(str(rng.randint(1, ROWS)) for _ in range(100)) for _ in range(200)]  # 20,000 rows
    write(sb, [f"UPDATE big SET c = 'v{i}' WHERE id IN ({k})" for i, k in enumerate(keys)])
    sb.restart_server(sb.replica().name, start_slave=False)
    sb.start_io_thread()
    wait_received(sb)
    cold = measure_catch_up(sb)

    # The machine is shared: waiting for a core counts with the CPU, not with the reads.
    assert cold["split"]["disk_read"] > warm["split"]["disk_read"]
    cpu = {run: r["split"]["on_cpu"] + r["split"]["cpu_wait"] for run, r in (("warm", warm), ("cold", cold))}
    assert cpu["warm"] > cpu["cold"]
    assert warm["verdict"].kind != "reads"
