"""Lag you can trust, end to end: the real daemon on the sandbox with a heartbeat writer.

Stop the SQL thread for N seconds under writes: heartbeat and event-time lag
read about N, state `stopped`, both keep growing, SBM is missing (not 0).
Restart it: back to 0 and `idle`. Stop the IO thread: `io_stopped`, and the
heartbeat lag grows. Then the catch-up ETA against the real time to catch up
(printed, not asserted).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lagd.heartbeat import HeartbeatWriter
from lagd.sandbox.pair import Sandbox
from tests.integration.daemon_util import running_daemon

TABLE = "lagd_hb.heartbeat"


def lag_of(status: dict, method: str) -> float | None:
    return status["lag"][method]["seconds"]


def below(status: dict, method: str, limit: float) -> bool:
    value = lag_of(status, method)
    return value is not None and value < limit


@pytest.fixture
def heartbeat(sandbox: Sandbox):
    writer = HeartbeatWriter(lambda: sandbox.source.connect(), TABLE, interval=0.2, create_table=True)
    stop = threading.Event()
    t = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    t.start()
    try:
        yield writer
    finally:
        stop.set()
        t.join(10)
        writer.close()


@pytest.fixture
def writes(sandbox: Sandbox, schema: str):
    sandbox.source.query("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)", db=schema)
    stop = threading.Event()
    rate = {"per_s": 50.0}

    def run() -> None:
        conn = sandbox.source.connect(schema)
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    cur.execute("INSERT INTO t (v) VALUES (1)")
                    stop.wait(1.0 / rate["per_s"])
        finally:
            conn.close()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        yield rate
    finally:
        stop.set()
        th.join(10)


def test_lag_methods_states_and_eta(sandbox: Sandbox, schema: str, heartbeat, writes,
                                    tmp_path: Path) -> None:
    sb = sandbox
    extra = f'heartbeat_table = "{TABLE}"'
    with running_daemon(sb, tmp_path, extra=extra) as d:
        s = d.wait_for(lambda s: s["lag"]["state"] in ("idle", "applying") and below(s, "heartbeat", 1.5))

        # The SQL thread stops for N seconds: the lag says N, never 0, never gone.
        n = 4.0
        sb.stop_sql_thread()
        stopped_at = time.monotonic()
        try:
            time.sleep(n)
            s = d.wait_for(lambda s: s["lag"]["state"] == "stopped")
            elapsed = time.monotonic() - stopped_at
            hb, ev = lag_of(s, "heartbeat"), lag_of(s, "event_time")
            print(f"after {elapsed:.1f} s stopped: heartbeat {hb:.2f} s, event_time {ev:.2f} s, "
                  f"sbm {lag_of(s, 'sbm')}, state {s['lag']['state']}")
            assert hb is not None and abs(hb - elapsed) < 1.5
            assert ev is not None and abs(ev - elapsed) < 1.5
            assert lag_of(s, "sbm") is None and s["lag"]["sbm"]["reason"]  # missing, with the reason
            time.sleep(2)
            later = d.status()
            assert lag_of(later, "heartbeat") > hb + 1 and lag_of(later, "event_time") > ev + 1
            assert later["lag"]["eta"] == "inf"
        finally:
            sb.start_sql_thread()
        s = d.wait_for(lambda s: s["lag"]["state"] == "idle" and below(s, "event_time", 1.0)
                       and below(s, "heartbeat", 1.5))
        assert lag_of(s, "sbm") is not None

        # The IO thread stops: io_stopped, and only the heartbeat can see the lag grow.
        sb.stop_io_thread()
        try:
            s = d.wait_for(lambda s: s["lag"]["state"] == "io_stopped")
            first = lag_of(s, "heartbeat")
            time.sleep(2.5)
            later = d.status()
            print(f"IO thread stopped: heartbeat {first:.2f} -> {lag_of(later, 'heartbeat'):.2f} s")
            assert lag_of(later, "heartbeat") > (first or 0) + 1.5
        finally:
            sb.start_io_thread()
        d.wait_for(lambda s: s["lag"]["state"] == "idle")

        # ETA: a backlog written by several sessions at once, applied by one SQL
        # thread (so it catches up at a few times the source's pace), predicted
        # against the real time to catch up.
        sb.stop_sql_thread()
        stops = [threading.Event() for _ in range(3)]

        def burst(seed: int) -> None:
            conn = sb.source.connect(schema)
            try:
                with conn.cursor() as cur:
                    n = seed
                    while not stops[seed].is_set():
                        lo = n % 200
                        cur.execute("UPDATE t SET v = v + 1 WHERE id BETWEEN %s AND %s", (lo, lo + 20))
                        n += 7
            finally:
                conn.close()

        bursts = [threading.Thread(target=burst, args=(i,), daemon=True) for i in range(3)]
        for b in bursts:
            b.start()
        try:
            # Long enough that the catch-up spans many lag polls (event times have
            # a resolution of one second on MariaDB).
            time.sleep(30)
            # The ETA's model: the source goes on writing while the replica catches
            # up (lag / (speed - 1)). One session keeps writing until it has.
            for e in stops[1:]:
                e.set()
            for b in bursts[1:]:
                b.join(10)
            sb.start_sql_thread()
            started = time.monotonic()
            etas: list[tuple[float, float]] = []
            seen: list[tuple[float, object, object]] = []
            while time.monotonic() - started < 60:
                s = d.status()
                if s["lag"]["state"] == "idle":
                    break
                eta = s["lag"]["eta"]
                seen.append((round(time.monotonic() - started, 1), eta, s["lag"]["rates"]["speed"]))
                if isinstance(eta, int | float) and eta > 0:
                    etas.append((time.monotonic() - started, float(eta)))
                time.sleep(0.25)
            real = time.monotonic() - started
            stops[0].set()
            bursts[0].join(10)
            print("ETA readings (at, eta, speed):", seen[:16])
            print(f"caught up in {real:.1f} s; ETA readings (at, eta): "
                  + ", ".join(f"({a:.1f}, {e:.1f})" for a, e in etas[:12]))
            for at, eta in etas[:1] + etas[len(etas) // 4:len(etas) // 4 + 1]:
                print(f"ETA at {at:.1f} s: {eta:.1f} s vs {real - at:.1f} s real "
                      f"({abs(eta - (real - at)) / max(real - at, 0.1):.0%} off)")
            if etas:
                at, eta = etas[len(etas) // 2]
                remaining = real - at
                print(f"mid-catch-up ETA {eta:.1f} s vs {remaining:.1f} s real "
                      f"({abs(eta - remaining) / max(remaining, 0.1):.0%} off; goal within 25%)")
        finally:
            # A failed reading must not leave sessions writing into the next test's sandbox.
            for e in stops:
                e.set()
            for b in bursts:
                b.join(10)
