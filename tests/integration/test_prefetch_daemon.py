"""Prefetch in the real daemon: the data stays right, probes run, trouble does not stop it."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.daemon_util import running_daemon

# About 80 MB of rows against a 64 MB pool: the catch-up reads from disk and
# lasts long enough (seconds, not a fraction of one) for the daemon to see it.
ROWS = 300_000

# The catch-ups take seconds: alone on the machine they are not slowed by a
# test beside them (tests/conftest.py).
pytestmark = pytest.mark.solo


@pytest.fixture
def cold_pair():
    """A replica with a small pool and a table larger than it."""
    with Sandbox(SandboxConfig(replica_buffer_pool_mb=64, o_direct=True)) as sb:
        sb.source.query("CREATE DATABASE pf")
        sb.source.query("CREATE TABLE pf.t (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(200) NOT NULL, "
                        "KEY k_1 (k))")
        sb.source.query(f"INSERT INTO pf.t SELECT seq, seq % 1000, REPEAT('x', 200) FROM seq_1_to_{ROWS}",
                        db="pf")
        sb.wait_caught_up(timeout=120)
        sb.restart_server(sb.replica().name)  # cold pool
        yield sb


def checksum(server) -> int:
    return int(server.query("CHECKSUM TABLE pf.t")[0]["Checksum"])


def write_updates(sb: Sandbox, n: int, seed: int) -> None:
    rng = random.Random(seed)
    conn = sb.source.connect("pf", autocommit=False)
    try:
        with conn.cursor() as cur:
            for i in range(n):
                cur.execute("UPDATE t SET c = %s, k = %s WHERE id = %s",
                            (f"u{rng.random()}", rng.randint(0, 999), rng.randint(1, ROWS)))
                if i % 20 == 19:  # small transactions, written quickly
                    conn.commit()
        conn.commit()
    finally:
        conn.close()


def test_catch_up_with_prefetch_keeps_the_data_identical(cold_pair: Sandbox, tmp_path: Path) -> None:
    sb = cold_pair
    # The gate held open (adaptive control off): this test is about probes in
    # the real daemon, and whether the gate opens depends on the machine's disk.
    # On a faster one than ours the SQL thread spent only 12-27% of a catch-up on
    # reads, the gate rightly stayed shut and nothing was probed. The gate's
    # verdicts are table-tested on recorded windows (tests/unit/test_prefetch_stall_gate.py).
    extra = "[prefetch]\nadaptive = false\nbuffer_pool_share = 0.5\n"
    with running_daemon(sb, tmp_path, extra=extra) as d:
        sb.stop_sql_thread()
        write_updates(sb, 10_000, seed=1)
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)
        s = d.wait_for(lambda s: s["lag"]["state"] == "idle")
        pf = s["prefetch"]
        print("prefetch:", pf["state"], pf["reason"], pf["counters"], pf["pool"], s.get("stall"))
        assert checksum(sb.source) == checksum(sb.replica())
        assert pf["counters"]["row_changes"] > 0
        assert pf["counters"]["rows_probed"] > 0 and pf["pool"]["succeeded"] > 0
        assert pf["pool"]["refused"] == 0

        # A replica session holds a write lock: probes fail on lock_wait_timeout, lagd goes on.
        locker = sb.replica().connect("pf")
        try:
            with locker.cursor() as cur:
                cur.execute("LOCK TABLES t WRITE")
                sb.stop_sql_thread()
                write_updates(sb, 500, seed=2)
                sb.start_sql_thread()
                time.sleep(3)
                cur.execute("UNLOCK TABLES")
        finally:
            locker.close()
        sb.wait_caught_up(timeout=120)
        assert d.proc.poll() is None

        # The replica crashes and comes back in the middle of a catch-up.
        sb.stop_sql_thread()
        write_updates(sb, 1500, seed=3)
        sb.start_sql_thread()
        crasher = threading.Timer(0.5, sb.kill_server, args=(sb.replica().name,))
        crasher.start()
        crasher.join()
        time.sleep(1)
        sb.restart_server(sb.replica().name)
        sb.wait_caught_up(timeout=120)
        # 90 s: past runtime.UNKNOWN_WARN, so that a daemon which does not know the backlog again
        # logs where its look-ahead reader is (seen twice in CI, not reproduced here; the likely
        # cause, a lost cancellation holding the relay loop, is handled: aio.cancel_and_wait).
        s = d.wait_for(lambda s: s["lag"]["state"] == "idle" and s["prefetch"] is not None, timeout=90)
        assert d.proc.poll() is None
        assert checksum(sb.source) == checksum(sb.replica())
        print("after crash:", s["prefetch"]["state"], s["prefetch"]["counters"], s["prefetch"]["pool"])
