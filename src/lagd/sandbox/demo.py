"""The demo: one catch-up of an I/O-bound MariaDB replica, without and with lagd's prefetch, side by side.

It starts a private MariaDB source and two replicas (the sandbox); each
replica has a small buffer pool with O_DIRECT and a table several times its
size, so every row it updates may wait on a random read. A heartbeat is
written on the source every half second. Then:

1. both replicas restart cold (empty buffer pools) with their SQL threads
   stopped;
2. the source writes transactions of ``--batch`` random primary-key row
   UPDATEs for ``--backlog`` seconds: they pile up in both relay logs;
3. a ``lagd run`` starts on each replica (replica 1's prefetches, replica
   0's does not), then both SQL threads, while the source keeps writing at
   the same rate; every ``--refresh`` seconds one line per replica shows
   what its lagd reports (state, heartbeat lag, backlog, apply speed, ETA,
   prefetch lead and its verdict), until both have caught up (their
   heartbeat rows are fresh) or ``--limit`` seconds passed.

Side by side rather than one after the other: a second catch-up on the
same data finds the pages the first one read in caches below InnoDB (the
host's, on a virtual machine), which would flatter whichever runs second.
At the end: each catch-up's measured time, the speed-up, and how close
lagd's ETA was to the real remaining time. Ctrl-C stops everything; no
server or daemon outlives it.

    scripts/demo [--rows N] [--rate TRX_PER_S] [--batch ROWS] [--backlog S] [--refresh S] [--limit S]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lagd.errors import LagdError
from lagd.heartbeat import read_heartbeat
from lagd.heartbeat.writer import HeartbeatWriter
from lagd.sandbox.pair import Sandbox, SandboxConfig
from lagd.sandbox.server import free_port

SCHEMA = "demo"
HEARTBEAT = "demo.heartbeat"
TABLE_DDL = """CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '',
  PRIMARY KEY (id), KEY k_1 (k))"""
CAUGHT_UP = 1.5  # seconds of heartbeat age on the replica that count as caught up (beats every 0.5 s)


class Load(threading.Thread):
    """Transactions of ``batch`` random primary-key row UPDATEs on the source,
    about ``rate`` transactions per second."""

    def __init__(self, sandbox: Sandbox, rate: float, rows: int, seed: int = 1, batch: int = 1) -> None:
        super().__init__(name="demo-load", daemon=True)
        self.sandbox, self.rate, self.rows, self.batch = sandbox, rate, rows, batch
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible load, not secrets
        self.stop = threading.Event()
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = self.sandbox.source.connect(SCHEMA)
            try:
                next_at = time.monotonic()
                with conn.cursor() as cur:
                    while not self.stop.is_set():
                        ids = [self.rng.randint(1, self.rows) for _ in range(self.batch)]
                        cur.execute(f"UPDATE sbtest1 SET c = %s WHERE id IN ({', '.join(['%s'] * len(ids))})",
                                    (f"c-{self.rng.random():.9f}", *ids))
                        self.done += 1
                        next_at += 1.0 / self.rate
                        delay = next_at - time.monotonic()
                        if delay > 0:
                            self.stop.wait(delay)
                        else:
                            next_at = time.monotonic()  # can't keep up: no burst afterwards
            finally:
                conn.close()
        except BaseException as e:  # reported by the main thread
            self.error = e


def _load_table(server: Any, rows: int) -> None:
    """The same rows on source and replica, without replicating them (much faster)."""
    conn = server.connect(SCHEMA)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for lo in range(1, rows + 1, 500_000):
                hi = min(rows, lo + 499_999)
                cur.execute("INSERT INTO sbtest1 SELECT seq, seq % 10007, "
                            "CONCAT(LPAD(seq, 12, '0'), REPEAT('-', 100)), REPEAT('p', 60) "
                            f"FROM seq_{lo}_to_{hi}")
    finally:
        conn.close()


def _seed(sb: Sandbox, rows: int) -> None:
    sb.source.query(f"CREATE DATABASE {SCHEMA}")
    sb.source.query(TABLE_DDL, db=SCHEMA)
    sb.wait_caught_up(timeout=60)
    loaders = [threading.Thread(target=_load_table, args=(s, rows)) for s in sb.servers]
    for t in loaders:
        t.start()
    for t in loaders:
        t.join()


def _config(sb: Sandbox, replica: int, http_port: int, workdir: Path, prefetch: bool) -> Path:
    rep = sb.replica(replica)
    path = workdir / f"lagd-{replica}.toml"
    # Adaptive, as shipped: lagd pauses prefetch now and then to measure what
    # it gains, and backs off when it does not pay (the verdict on screen).
    # Without that safety a run on this shared machine once applied 15 times
    # slower with prefetch than without.
    path.write_text(f"""# written by the lagd demo
[replica]
host = "127.0.0.1"
port = {rep.port}
user = "{rep.dsn.user}"
password_env = "LAGD_DEMO_PASSWORD"

[lag]
poll_interval = 0.5
heartbeat_table = "{HEARTBEAT}"

[http]
listen = "127.0.0.1:{http_port}"

[prefetch]
enabled = {str(prefetch).lower()}
evaluate_window_seconds = 5.0

[advisor]
lag_budget_seconds = 10.0
""")
    return path


def _terminate(proc: subprocess.Popen[bytes] | None, timeout: float = 6.0) -> int | None:
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _status(url: str) -> Mapping[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/status", timeout=2) as r:  # noqa: S310 - our own http://
            got = json.loads(r.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return got if isinstance(got, Mapping) else None


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float | str):
        return None
    try:
        v = float(x)  # /status writes infinity as a string
    except ValueError:
        return None
    return None if math.isnan(v) else v


def _secs(x: float | None) -> str:
    if x is None:
        return "unknown"
    if math.isinf(x):
        return "never"
    return f"{x:.1f} s" if x < 100 else f"{x:,.0f} s"


@dataclass
class Reading:
    """One line of the screen: what lagd said at ``t`` seconds into the catch-up."""

    t: float
    state: str
    lag: float | None
    lag_method: str | None
    backlog: int | None
    speed: float | None
    trx_per_s: float | None
    eta: float | None
    prefetch: str

    def line(self, replica: int) -> str:
        lag = f"{_secs(self.lag)} ({self.lag_method})" if self.lag is not None else "unknown"
        backlog = f"{self.backlog:,}" if self.backlog is not None else "unknown"
        speed = f"{self.speed:.2f}x" if self.speed is not None else "-"
        rate = f"{self.trx_per_s:,.0f}" if self.trx_per_s is not None else "-"
        return (f"  {self.t:5.1f} s  {replica}  {self.state:<10} {lag:<22} {backlog:>8}  {speed:>6} "
                f"{rate:>6}  {_secs(self.eta):>9}  {self.prefetch}")


HEADER = (f"  {'time':>7}  r  {'state':<10} {'lag':<22} {'backlog':>8}  {'speed':>6} {'trx/s':>6}  "
          f"{'ETA':>9}  prefetch")


def reading(t: float, status: Mapping[str, Any]) -> Reading:
    lag = _map(status.get("lag"))
    rates = _map(lag.get("rates"))
    p = status.get("prefetch")
    if isinstance(p, Mapping):
        benefit = _num(p.get("benefit"))
        counters = _map(p.get("counters"))
        in_time, late = _num(counters.get("in_time")) or 0, _num(counters.get("late")) or 0
        share = f", {in_time / (in_time + late):.0%} in time" if in_time + late else ""
        gain = f", measured x{benefit:.2f}" if benefit is not None else ""
        reason = str(p.get("reason") or "")
        shown = p.get("state") in ("backed_off", "paused", "idle") and reason
        verdict = f" ({textwrap.shorten(reason, 80, placeholder=' ...')})" if shown else ""
        prefetch = (f"{p.get('state')}: lead {int(_num(p.get('lead_transactions')) or 0):,} trx"
                    f"{share}{gain}{verdict}")
    else:
        prefetch = f"off: {status.get('prefetch_off_reason') or 'not running'}"
    backlog = _map(lag.get("backlog"))
    trx = _num(backlog.get("transactions"))
    return Reading(t, str(lag.get("state") or "unknown"), _num(lag.get("lag")),
                   str(lag.get("lag_method")) if lag.get("lag_method") else None,
                   int(trx) if trx is not None else None, _num(rates.get("speed")),
                   _num(rates.get("transactions_per_second")), _num(lag.get("eta")), prefetch)


@dataclass
class CatchUp:
    name: str
    seconds: float | None = None  # measured: SQL thread started -> heartbeat fresh on the replica
    backlog: int = 0  # UPDATEs waiting when the SQL thread started
    readings: list[Reading] = field(default_factory=list)
    exit_code: int | None = None
    source_rates: tuple[float, float] | None = None  # transactions/s written before and during the catch-up

    def eta_errors(self, after: float = 3.0) -> list[float]:
        """|ETA - actual remaining| / actual remaining, for readings after the first seconds."""
        if self.seconds is None:
            return []
        out = []
        for r in self.readings:
            left = self.seconds - r.t
            if r.t >= after and left > 1.0 and r.eta is not None and math.isfinite(r.eta):
                out.append(abs(r.eta - left) / left)
        return out


def _heartbeat_age(sb: Sandbox, replica: int, conns: dict[int, Any] | None = None) -> float | None:
    """Seconds since the source wrote the heartbeat row the replica has now
    (the truth lagd is judged by); ``conns`` keeps a connection per replica."""
    conn = conns.get(replica) if conns is not None else None
    if conn is None:
        conn = sb.replica(replica).connect()
        if conns is not None:
            conns[replica] = conn
    try:
        row = read_heartbeat(conn, HEARTBEAT, None)
    except LagdError:
        return None  # the table has not reached the replica yet
    finally:
        if conns is None:
            conn.close()
    return None if row is None else time.time() - row.ts


class Daemon:
    """``lagd run`` on one replica, its log in ``tmp``."""

    def __init__(self, sb: Sandbox, replica: int, prefetch: bool, tmp: Path, bindir: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / f"lagd-{replica}.log"
        env = dict(os.environ, LAGD_DEMO_PASSWORD=sb.replica(replica).dsn.password)
        lagd = [str(bindir / "lagd")] if (bindir / "lagd").exists() else [sys.executable, "-m", "lagd.daemon"]
        config = _config(sb, replica, port, tmp, prefetch)
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen([*lagd, "run", "--config", str(config)], env=env,
                                         stdout=subprocess.DEVNULL, stderr=err)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while _status(self.url) is None:
            self.check()
            if time.monotonic() > deadline:
                raise LagdError(f"the daemon did not answer in {timeout:g} s:\n{self.tail()}")
            time.sleep(0.2)

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise LagdError(f"the daemon exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-1500:]

    def stop(self) -> int | None:
        return _terminate(self.proc)


def race(sb: Sandbox, args: argparse.Namespace, tmp: Path, bindir: Path) -> list[CatchUp]:
    """Both replicas restart cold and wait out the same backlog, then catch up
    at the same time: replica 1 with lagd prefetching, replica 0 without."""
    runs = [CatchUp("without prefetch"), CatchUp("with prefetch")]
    print(f"\n== both replicas restart cold (empty buffer pools); the source writes {args.rate:g} "
          f"transactions/s of {args.batch} random-row UPDATEs for {args.backlog:g} s while their SQL "
          "threads are stopped ...", flush=True)
    for i in (0, 1):
        sb.stop_slave(i)
        sb.restart_server(sb.replica(i).name, start_slave=False)
        sb.start_io_thread(i)
    load = Load(sb, args.rate, args.rows, seed=7, batch=args.batch)
    load.start()
    daemons: list[Daemon] = []
    try:
        if load.stop.wait(args.backlog) or load.error is not None:
            raise LagdError(f"the demo's write load failed: {load.error}")
        daemons = [Daemon(sb, i, prefetch=i == 1, tmp=tmp, bindir=bindir) for i in (0, 1)]
        for d in daemons:
            d.wait_ready()
        time.sleep(1.5)  # a few polls: lagd has read the backlog before the SQL threads start
        print(f"   {load.done:,} transactions wait in both relay logs. lagd runs on each (heartbeat "
              f"{HEARTBEAT}); replica 1's lagd prefetches, replica 0's does not. Both SQL threads start; "
              f"the source keeps writing ({args.catch_up_rate:g} transactions/s):", flush=True)
        print(HEADER, flush=True)
        before = load.done / args.backlog
        load.rate = args.catch_up_rate
        for i in (0, 1):
            sb.start_sql_thread(i)
        began = time.monotonic()
        written = load.done
        next_line = began
        conns: dict[int, Any] = {}
        while any(r.seconds is None for r in runs):
            now = time.monotonic()
            if load.error is not None:
                raise LagdError(f"the demo's write load failed: {load.error}")
            for i, (run, d) in enumerate(zip(runs, daemons, strict=True)):
                d.check()
                age = _heartbeat_age(sb, i, conns) if run.seconds is None else None
                if age is not None and age <= CAUGHT_UP and now - began > 1.0:
                    run.seconds = now - began
                    print(f"  replica {i} ({run.name}) caught up after {run.seconds:.1f} s", flush=True)
            if now - began > args.limit:
                print(f"  stopped after {args.limit:g} s (--limit)", flush=True)
                break
            if now >= next_line:
                for i, (run, d) in enumerate(zip(runs, daemons, strict=True)):
                    status = _status(d.url) if run.seconds is None else None
                    if status is not None:
                        r = reading(now - began, status)
                        run.readings.append(r)
                        print(r.line(i), flush=True)
                next_line += args.refresh
            time.sleep(0.25)
        during = (load.done - written) / max(1e-9, time.monotonic() - began)
        for run in runs:
            run.source_rates = (before, during)
        for conn in conns.values():
            conn.close()
    finally:
        load.stop.set()
        load.join(timeout=10)
        for run, d in zip(runs, daemons, strict=False):
            run.exit_code = d.stop()
    for run in runs:
        run.backlog = load.done
    return runs


def summary(runs: list[CatchUp], args: argparse.Namespace) -> list[str]:
    out = ["", f"== summary: the same {args.backlog:g} s backlog of random-row UPDATEs ({args.rate:g} "
               f"transactions/s of {args.batch} rows, the source writing on at "
               f"{args.catch_up_rate:g}/s through the catch-up), "
               "cold 64 MB buffer pools, both replicas at once"]
    for r in runs:
        took = f"{r.seconds:.1f} s" if r.seconds is not None else f"more than {args.limit:g} s"
        errors = r.eta_errors()
        within = sum(1 for e in errors if e <= 0.25)
        eta = (f"; ETA within 25% of the real remaining time in {within} of {len(errors)} readings "
               f"after the first 3 s (median error {statistics.median(errors):.0%})" if errors else "")
        out.append(f"   {r.name + ':':<18} caught up in {took}{eta}; lagd exited with {r.exit_code}")
    rates = runs[0].source_rates if runs else None
    if rates is not None:
        out.append(f"   the source wrote {rates[0]:,.0f} transactions/s while the backlog built and "
                   f"{rates[1]:,.0f}/s during the catch-up (two cores shared by three servers, two lagd "
                   "and the load); lagd's ETA assumes the source keeps its pace, so where the source "
                   "slows down the real catch-up is shorter")
    plain, pre = runs[0].seconds, runs[1].seconds
    if plain is not None and pre is not None and pre > 0:
        out.append(f"   speed-up with prefetch: x{plain / pre:.2f} (catch-up time without / with)")
    return out


def run(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(replicas=2, o_direct=True, replica_buffer_pool_mb=64, source_buffer_pool_mb=512)
    print("lagd demo: starting a private MariaDB source and two replicas ...", flush=True)
    bindir = Path(sys.executable).parent
    runs: list[CatchUp] = []
    with Sandbox(cfg) as sb, tempfile.TemporaryDirectory(prefix="lagd-demo-") as tmp:
        print(f"   source 127.0.0.1:{sb.source.port}, replicas 127.0.0.1:{sb.replica(0).port} and "
              f"127.0.0.1:{sb.replica(1).port} (64 MB buffer pools, O_DIRECT)")
        size_mb = args.rows * 230 / 2**20
        print(f"   loading {args.rows:,} rows on all three (about {size_mb:.0f} MB each) ...", flush=True)
        _seed(sb, args.rows)
        stop_beats = threading.Event()
        writer = HeartbeatWriter(sb.source.connect, HEARTBEAT, interval=0.5, create_table=True)
        beats = threading.Thread(target=writer.run, args=(stop_beats,), name="demo-heartbeat", daemon=True)
        beats.start()
        try:
            deadline = time.monotonic() + 60
            while any(_heartbeat_age(sb, i) is None for i in (0, 1)):  # the row reached both replicas
                if time.monotonic() > deadline:
                    raise LagdError("the heartbeat row did not reach the replicas in 60 s")
                time.sleep(0.2)
            runs = race(sb, args, Path(tmp), bindir)
        except KeyboardInterrupt:
            print("\n   stopping ...", flush=True)
        finally:
            stop_beats.set()
            beats.join(timeout=5)
            writer.close()
        for line in summary(runs, args):
            print(line, flush=True)
    print("\nlagd demo: done; the servers are stopped and nothing is left running.", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/demo", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the demo table (default 1,000,000)")
    ap.add_argument("--rate", type=float, default=250, help="source transactions per second (default 250)")
    ap.add_argument("--catch-up-rate", type=float, default=None,
                    help="source transactions per second during the catch-up (default: --rate)")
    ap.add_argument("--batch", type=int, default=10, help="random rows each transaction updates (default 10)")
    ap.add_argument("--backlog", type=float, default=30, help="seconds of writes the SQL thread waits out "
                    "before each catch-up (default 30)")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between screen lines (default 2)")
    ap.add_argument("--limit", type=float, default=240, help="longest a catch-up may take (default 240 s)")
    args = ap.parse_args(argv)
    if args.catch_up_rate is None:
        # The same pace as the backlog's: lagd's ETA forecasts in source-seconds, and a
        # source that halves its pace as the catch-up starts makes the first half of
        # the backlog twice as dense as the rest (ETA 1,288 s for a real 58 s). The
        # default rate leaves a cold 64 MB replica room to catch up on a slow day (it
        # applied 380-480 a second; at 400 it had not caught up after 240 s).
        args.catch_up_rate = args.rate
    if (args.rate <= 0 or args.catch_up_rate <= 0 or args.rows < 1000 or args.backlog <= 0
            or args.refresh <= 0 or args.limit <= 0 or args.batch < 1):
        ap.error("need --rate, --catch-up-rate, --backlog, --refresh and --limit > 0, --batch >= 1 and"
                 " --rows >= 1000")
    try:
        return run(args)
    except LagdError as e:
        print(f"lagd demo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
