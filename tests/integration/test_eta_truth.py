"""The catch-up ETA and the big-transaction stall estimate of a live ``lagd run``,
against the truth, in the scenarios where they used to be wrong.

The truth is a heartbeat written on the source every 0.2 s: the replica has
caught up when its copy of the row is as fresh again as it is while the
replica is idle (the median age then, plus 0.15 s). The replica is made slow
on purpose, the same way for every scenario: a trigger that exists only on
the replica (MariaDB runs it for row events with slave_run_triggers_for_rbr)
sleeps ``ROW_COST`` for each row the SQL thread changes. A timer, not work:
an earlier version slowed the replica with table scans, and on the shared
2-core machine, with other tests and benchmarks beside it, that CPU-bound
replica changed its own speed 1.5-2.5-fold within one catch-up, which no
forecast made from the present can know (docs/lag.md has those runs). The
source writes at 30% of what the replica applied when calibrated, so a
catch-up takes seconds, not milliseconds.

Scenarios: SQL thread stopped, IO thread stopped, an idle source then a
stopped SQL thread, and a big transaction (followed from its start: the ETA
inside it is its remaining stall plus the catch-up it leaves). For each
catch-up every /status reading from its second second on, while more than
1.5 s remain, is compared with the real remaining time; the median error is
printed with what lagd said (its lag and apply speed) and held within
``ETA_LIMIT`` (and all readings together within ``POOLED_LIMIT``); a catch-up
that misses is measured once more and the second one is judged instead, since
one catch-up on a shared machine can be bent by a neighbour; the big
transaction's stall estimate, the first one and the one from InnoDB's count
inside it, within 2x of its measured apply time, and its remaining stall must
shrink while it applies.
The numbers are printed (``pytest -s``); a line starting ETA_TRUTH sums
them up.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lagd.errors import LagdError
from lagd.heartbeat import read_heartbeat
from lagd.heartbeat.writer import HeartbeatWriter
from lagd.sandbox.pair import Sandbox

from .test_prometheus_scrape import run_lagd

ROWS = 6_000
FRESH = 0.6  # heartbeat age on the replica that surely means caught up (beats every 0.2 s)
# Caught up, for the truth: the heartbeat as young as it is on the idle replica (measured
# before the scenarios, its median plus this), as lagd's ETA aims at the idle lag, not 0.
IDLE_MARGIN = 0.15
CAUGHT_UP = [FRESH]
GAP = 8.0  # seconds of each gap, at least
FIRST_GAP = 20.0  # the first is sized from the calibration alone: longer, in case the replica is faster now
ETA_LIMIT = 0.25  # the median ETA error a catch-up may have (the acceptance)
POOLED_LIMIT = 0.25  # the median over every judged reading of every catch-up
STALL_LIMIT = 2.0  # how far off the big transaction's stall estimate may be, either way
ROW_COST = 0.002  # seconds the replica's trigger sleeps per row change
CATCH_UP = 9.0  # seconds each catch-up should last, for enough readings to judge
MAX_GAP = 25.0
SOURCE_SHARE = 0.3  # of the calibrated apply rate, written by the source
BIG_SECONDS = 8.0  # apply time of the big transaction (at 6 s its catch-up once gave 3 readings)
# A catch-up with fewer judged readings than this proves nothing either way (the
# shared machine made some last 3 s where 9 were planned): it is printed, not held.
# All catch-ups together must give at least MIN_POOLED, or nothing was proven.
MIN_READINGS = 4
MIN_POOLED = 12
DIAG: list[str] = []  # what lagd said with each ETA reading: its lag and apply speed

# The source's writer and the heartbeat are threads of this process: a test on
# the other worker would slow them, and the forecast assumes the source's pace.
pytestmark = pytest.mark.solo


class Writer(threading.Thread):
    """Single-row UPDATEs on the source at ``rate`` per second; ``pause`` holds it."""

    def __init__(self, sb: Sandbox, schema: str, rate: float) -> None:
        super().__init__(name="eta-load", daemon=True)
        self.sb, self.schema, self.rate = sb, schema, rate
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.done = 0
        self.rng = random.Random(3)

    def run(self) -> None:
        conn = self.sb.source.connect(self.schema)
        try:
            with conn.cursor() as cur:
                next_at = time.monotonic()
                while not self.stop.is_set():
                    if self.paused.is_set():
                        self.stop.wait(0.05)
                        next_at = time.monotonic()
                        continue
                    cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (self.rng.randint(1, ROWS),))
                    self.done += 1
                    next_at += 1.0 / self.rate
                    self.stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            conn.close()


def status(target: str) -> Mapping[str, Any]:
    with urllib.request.urlopen(f"http://{target}/status", timeout=5) as r:
        got = json.loads(r.read().decode())
    assert isinstance(got, Mapping)
    return got


def eta_of(snap: Mapping[str, Any]) -> float | None:
    eta = (snap.get("lag") or {}).get("eta")
    try:
        return None if eta is None else float(eta)
    except (TypeError, ValueError):
        return None


def heartbeat_age(sb: Sandbox, table: str) -> float | None:
    conn = sb.replica().connect()
    try:
        row = read_heartbeat(conn, table, None)
    except LagdError:
        return None  # not replicated yet
    finally:
        conn.close()
    return None if row is None else time.time() - row.ts


def follow(sb: Sandbox, target: str, table: str,
           limit: float = 150.0) -> tuple[float, list[tuple[float, float]]]:
    """From now until the replica has caught up: its duration, and (t, ETA) every 0.5 s."""
    began = time.monotonic()
    readings: list[tuple[float, float]] = []
    next_at = began
    while True:
        now = time.monotonic()
        age = heartbeat_age(sb, table)
        if age is not None and age <= CAUGHT_UP[0] and now - began > 0.5:
            return now - began, readings
        assert now - began < limit, f"not caught up in {limit} s (heartbeat {age} s old)"
        if now >= next_at:
            snap = status(target)
            eta = eta_of(snap)
            if eta is not None:
                readings.append((now - began, eta))
                lag = snap.get("lag") or {}
                DIAG.append(f"{now - began:.1f}: lag {lag.get('lag') or 0:.1f} s, "
                            f"speed {(lag.get('rates') or {}).get('speed') or 0:.2f}")
            next_at += 0.5
        time.sleep(0.1)


ERRORS: list[float] = []  # every judged reading's error, all catch-ups together
REMEASURED: list[str] = []  # the catch-ups measured twice, with the first one's error


def eta_error(took: float, readings: list[tuple[float, float]]) -> tuple[float | None, int]:
    errors = [abs(eta - (took - t)) / (took - t) for t, eta in readings
              if t >= 2.0 and took - t > 1.5]
    ERRORS.extend(errors)
    return (statistics.median(errors) if errors else None), len(errors)


def wait_caught_up(sb: Sandbox, table: str) -> None:
    deadline = time.monotonic() + 150
    while (age := heartbeat_age(sb, table)) is None or age > FRESH:
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.1)


@pytest.fixture
def slow_replica(sandbox: Sandbox, schema: str) -> Iterator[tuple[Sandbox, str]]:
    sb = sandbox
    sb.source.query("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, pad CHAR(100) NOT NULL DEFAULT '')",
                    db=schema)
    sb.source.query(f"INSERT INTO t (id, v) SELECT seq, 0 FROM seq_1_to_{ROWS}", db=schema)
    sb.wait_caught_up(timeout=60)
    conn = sb.replica().connect(schema)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"CREATE TRIGGER t_slow BEFORE UPDATE ON t FOR EACH ROW "
                        f"SET NEW.v = NEW.v + SLEEP({ROW_COST})")
    finally:
        conn.close()
    sb.stop_sql_thread()
    sb.replica().query("SET GLOBAL slave_run_triggers_for_rbr = 'YES'")
    sb.start_sql_thread()
    try:
        yield sb, schema
    finally:
        sb.replica().query("SET GLOBAL slave_run_triggers_for_rbr = 'NO'")


def apply_rate(sb: Sandbox, schema: str, n: int = 4000) -> float:
    """Row changes per second the slowed replica applies."""
    sb.stop_sql_thread()
    conn = sb.source.connect(schema)
    rng = random.Random(5)
    try:
        with conn.cursor() as cur:
            for _ in range(n):
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (rng.randint(1, ROWS),))
    finally:
        conn.close()
    t0 = time.monotonic()
    sb.start_sql_thread()
    sb.wait_caught_up(timeout=120)
    return n / (time.monotonic() - t0)


def test_eta_and_stall_follow_the_truth(slow_replica: tuple[Sandbox, str], tmp_path: Path) -> None:
    sb, schema = slow_replica
    table = f"{schema}.heartbeat"
    rate_a = apply_rate(sb, schema)
    rate = rate_a * SOURCE_SHARE
    stop_beats = threading.Event()
    beats = HeartbeatWriter(sb.source.connect, table, interval=0.2, create_table=True)
    beater = threading.Thread(target=beats.run, args=(stop_beats,), daemon=True)
    beater.start()
    writer = Writer(sb, schema, rate)
    results: dict[str, tuple[float, float | None, int]] = {}
    try:
        wait_caught_up(sb, table)
        with run_lagd(sb.replica().port, tmp_path, advisor=True, heartbeat=table,
                      big_rows=int(rate_a)) as (target, _lagd):
            writer.start()
            wait_caught_up(sb, table)
            idle = []
            for _ in range(20):
                age = heartbeat_age(sb, table)
                if age is not None:
                    idle.append(age)
                time.sleep(0.1)
            CAUGHT_UP[0] = min(FRESH, statistics.median(idle) + IDLE_MARGIN)
            print(f"caught up: a heartbeat at most {CAUGHT_UP[0]:.2f} s old "
                  f"(idle median {statistics.median(idle):.2f} s)", flush=True)

            # The replica's speed on a shared machine is not the calibrated
            # one for long: each gap is sized from the last catch-up so that
            # the next lasts about CATCH_UP seconds, and the replica's rows/s
            # seen in it sizes the big transaction.
            gap_s, live_rate = [FIRST_GAP], [rate_a]

            def scenario(name: str, gap: Callable[[], None], resume: Callable[[], None]) -> None:
                judged = len(ERRORS)
                once(name, gap, resume)
                _took, err, n = results[name]
                if n >= MIN_READINGS and err is not None and err > ETA_LIMIT:
                    # One catch-up on a shared machine can be bent by a neighbour (CPU
                    # stolen by the host, the pure-Python unit run beside this one): it
                    # is measured once more and the second replaces it, readings and
                    # all. A fault in the forecast misses twice.
                    print(f"  {name}: median ETA error {err:.0%}, measured once more", flush=True)
                    REMEASURED.append(f"{name} {err:.0%}")
                    del ERRORS[judged:]
                    once(name, gap, resume)

            def once(name: str, gap: Callable[[], None], resume: Callable[[], None]) -> None:
                gap()
                g = gap_s[0]
                time.sleep(g)
                resume()
                print(f"{name}: following the catch-up of a {g:.1f} s gap", flush=True)
                took, readings = follow(sb, target, table)
                err, n = eta_error(took, readings)
                results[name] = (took, err, n)
                gap_s[0] = min(MAX_GAP, max(GAP, g * CATCH_UP / took))
                live_rate[0] = rate * (g + took) / took
                print("  ETA vs real remaining: " + ", ".join(
                    f"{t:.1f}: {eta:.1f}/{took - t:.1f}" for t, eta in readings), flush=True)
                print("  lagd's inputs: " + "; ".join(DIAG), flush=True)
                DIAG.clear()
                wait_caught_up(sb, table)
                time.sleep(1.0)

            scenario("sql_stop", sb.stop_sql_thread, sb.start_sql_thread)
            scenario("io_stop", sb.stop_io_thread, sb.start_io_thread)

            def idle_then_stop() -> None:
                # The source idles (the replica is caught up, its position
                # is the clock), then the SQL thread stops as the writes
                # resume: the catch-up must not inherit the idle readings.
                writer.paused.set()
                time.sleep(GAP)  # idle: the replica catches up and stays so
                sb.stop_sql_thread()
                writer.paused.clear()

            scenario("idle_source", idle_then_stop, sb.start_sql_thread)

            # A big transaction: about BIG_SECONDS of apply on the replica, on
            # rows spread over the table in random order like the load's.
            want = BIG_SECONDS * live_rate[0]
            statements = -(-int(want) // ROWS)
            every = max(1, round(ROWS * statements / want))
            big_rows = statements * (ROWS // every)
            conn = sb.source.connect(schema, autocommit=False)
            try:
                with conn.cursor() as cur:
                    for _ in range(statements):
                        cur.execute(f"UPDATE t SET v = v + 1 WHERE MOD(id, {every}) = 0 ORDER BY RAND()")
                conn.commit()
                with conn.cursor() as cur:
                    cur.execute("SELECT @@last_gtid")
                    gtid = str(cur.fetchone()[0])  # type: ignore[index]
            finally:
                conn.close()
            domain, _server, seq = gtid.split("-")
            estimates: list[float] = []  # estimated_seconds, the first before any count inside it
            # (t, whole, remaining, estimated from InnoDB's count inside it) while it applies
            inside: list[tuple[float, float, float | None, bool]] = []
            big_eta: list[tuple[float, float]] = []  # (seconds since it started, ETA)
            started = ended = None
            next_status = 0.0
            deadline = time.monotonic() + 90
            while ended is None:
                assert time.monotonic() < deadline, "the big transaction was not applied in 90 s"
                pos = str(sb.replica().query("SELECT @@gtid_slave_pos AS p")[0]["p"])
                applied = max((int(p.split("-")[2]) for p in pos.split(",") if p.startswith(f"{domain}-")),
                              default=0)
                now = time.monotonic()
                if started is None and applied >= int(seq) - 1:
                    started = now
                if applied >= int(seq):
                    ended = now
                    break
                if now >= next_status:
                    next_status = now + 0.5
                    snap = status(target)
                    for u in ((snap.get("advisor") or {}).get("upcoming")) or []:
                        if u.get("gtid") != gtid or u.get("estimated_seconds") is None:
                            continue
                        estimates.append(float(u["estimated_seconds"]))
                        if u.get("applying") and started is not None:
                            left = u.get("remaining_seconds")
                            inside.append((now - started, float(u["estimated_seconds"]),
                                           None if left is None else float(left),
                                           "inside this transaction" in str(u.get("estimate_basis"))))
                    eta = eta_of(snap)
                    if started is not None and eta is not None:
                        big_eta.append((now - started, eta))
                time.sleep(0.1)
            assert started is not None
            measured = ended - started
            took, readings = follow(sb, target, table)
            readings = [(t + measured, eta) for t, eta in readings]
            took += measured
            readings = big_eta + readings
            err, n = eta_error(took, readings)
            results["big_transaction"] = (took, err, n)
            print("big_transaction: from its start to caught up")
            print("  ETA vs real remaining: " + ", ".join(
                f"{t:.1f}: {eta:.1f}/{took - t:.1f}" for t, eta in readings), flush=True)
            print("  while applying (t: whole/remaining): " + ", ".join(
                f"{t:.1f}: {w:.1f}/{r if r is None else round(r, 1)}" for t, w, r, _c in inside), flush=True)
    finally:
        writer.stop.set()
        stop_beats.set()
        if writer.is_alive():
            writer.join(timeout=10)
        beater.join(timeout=10)
        beats.close()
        if sb.slave_status()["Slave_SQL_Running"] != "Yes":
            sb.start_sql_thread()

    print(f"\nreplica applied {rate_a:,.0f} rows/s when calibrated, {live_rate[0]:,.0f} in the last "
          f"catch-up; the source writes {rate:,.0f}/s "
          f"({writer.done:,} UPDATEs in all)")
    for name, (took, err, n) in results.items():
        shown = f"{err:.0%}" if err is not None else "n/a"
        print(f"{name:16} catch-up {took:5.1f} s; median ETA error {shown} over {n} readings")
    first = estimates[0] if estimates else None
    lefts = [left for _t, _whole, left, _counted in inside if left is not None]
    counted = next((whole for _t, whole, _left, c in inside if c), None)
    print(f"big transaction: {big_rows:,} rows applied in {measured:.1f} s; estimated "
          f"{first if first is None else round(first, 1)} s when first seen; the stall still "
          f"ahead while it applied: {', '.join(f'{x:.1f}' for x in lefts)}")
    if REMEASURED:
        print(f"measured twice (the first missed): {', '.join(REMEASURED)}")
    pooled = statistics.median(ERRORS) if ERRORS else None
    print(f"ETA_TRUTH {' '.join(f'{k}={v[1]:.2f}/{v[2]}' for k, v in results.items() if v[1] is not None)} "
          f"pooled={pooled if pooled is None else round(pooled, 2)}/{len(ERRORS)} "
          f"stall={first if first is None else round(first / measured, 2)}x "
          f"counted={counted if counted is None else round(counted / measured, 2)}x")
    # The acceptance: a median error within 25% after the first
    # seconds of each catch-up, the stall within 2x and shrinking while it
    # applies (it grew 14-fold in the issue). A catch-up cut short of
    # MIN_READINGS is printed, not held; all of them together must give
    # MIN_POOLED readings, or nothing was proven.
    for name, (_took, err, n) in results.items():
        if n >= MIN_READINGS and err is not None:
            assert err <= ETA_LIMIT, (name, err, n)
    assert len(ERRORS) >= MIN_POOLED, (len(ERRORS), results)
    assert pooled is not None and pooled <= POOLED_LIMIT, (pooled, len(ERRORS))
    assert first is not None and measured / STALL_LIMIT <= first <= measured * STALL_LIMIT, (first, measured)
    assert counted is not None and measured / STALL_LIMIT <= counted <= measured * STALL_LIMIT, (
        counted, measured, inside)
    assert len(lefts) >= 2 and lefts[-1] < lefts[0], inside
