"""The demo: the same catch-up of an I/O-bound MariaDB replica, without and with lagd's prefetch.

It starts a private MariaDB source and replica (the sandbox); the replica
has a small buffer pool with O_DIRECT and a table several times its size, so
every UPDATE it applies waits on a random read. A heartbeat is written on
the source every half second. Then, twice (prefetch off, then on):

1. the replica restarts cold (empty buffer pool) with its SQL thread stopped;
2. the source writes random primary-key UPDATEs for ``--backlog`` seconds:
   they pile up in the replica's relay log;
3. the real daemon (``lagd run``) starts on the replica and the SQL thread
   too, while the source keeps writing at the same rate; every ``--refresh``
   seconds one line shows what lagd reports (state, heartbeat lag, backlog,
   apply speed, ETA, prefetch lead and its verdict), until the replica has
   caught up (its heartbeat row is fresh) or ``--limit`` seconds passed.

The same seed makes the same UPDATEs both times. At the end: each catch-up's
measured time, the speed-up, and how close lagd's ETA was to the real
remaining time. Ctrl-C stops everything; no server or daemon outlives it.

    scripts/demo [--rows N] [--rate UPDATES_PER_S] [--backlog S] [--refresh S] [--limit S]
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
    """Random primary-key UPDATEs on the source at about ``rate`` per second."""

    def __init__(self, sandbox: Sandbox, rate: float, rows: int, seed: int = 1) -> None:
        super().__init__(name="demo-load", daemon=True)
        self.sandbox, self.rate, self.rows = sandbox, rate, rows
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
                        cur.execute("UPDATE sbtest1 SET c = %s WHERE id = %s",
                                    (f"c-{self.rng.random():.9f}", self.rng.randint(1, self.rows)))
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
    loaders = [threading.Thread(target=_load_table, args=(s, rows)) for s in (sb.source, sb.replica())]
    for t in loaders:
        t.start()
    for t in loaders:
        t.join()


def _config(sb: Sandbox, http_port: int, workdir: Path, prefetch: bool) -> Path:
    rep = sb.replica()
    path = workdir / f"lagd-{'prefetch' if prefetch else 'plain'}.toml"
    # Not adaptive: the run with prefetch keeps it on all along, so the two
    # catch-ups compare "off" with "on" (adaptive lagd pauses it now and then
    # to measure what it gains).
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
adaptive = false

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

    def line(self) -> str:
        lag = f"{_secs(self.lag)} ({self.lag_method})" if self.lag is not None else "unknown"
        backlog = f"{self.backlog:,}" if self.backlog is not None else "unknown"
        speed = f"{self.speed:.2f}x" if self.speed is not None else "-"
        rate = f"{self.trx_per_s:,.0f}" if self.trx_per_s is not None else "-"
        return (f"  {self.t:5.1f} s  {self.state:<10} {lag:<22} {backlog:>8}  {speed:>6} {rate:>6}  "
                f"{_secs(self.eta):>9}  {self.prefetch}")


HEADER = (f"  {'time':>7}  {'state':<10} {'lag':<22} {'backlog':>8}  {'speed':>6} {'trx/s':>6}  "
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
        prefetch = (f"{p.get('state')}: lead {int(_num(p.get('lead_transactions')) or 0):,} trx"
                    f"{share}{gain}")
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


def _heartbeat_age(sb: Sandbox) -> float | None:
    conn = sb.replica().connect()
    try:
        row = read_heartbeat(conn, HEARTBEAT, None)
    except LagdError:
        return None  # the table has not reached the replica yet
    finally:
        conn.close()
    return None if row is None else time.time() - row.ts


def catch_up(sb: Sandbox, args: argparse.Namespace, tmp: Path, prefetch: bool, bindir: Path) -> CatchUp:
    name = "with prefetch" if prefetch else "without prefetch"
    result = CatchUp(name)
    print(f"\n== catch-up {name}: the replica restarts cold, the source writes "
          f"{args.rate:g} UPDATEs/s for {args.backlog:g} s while the SQL thread is stopped ...", flush=True)
    sb.stop_slave()
    sb.restart_server(sb.replica().name, start_slave=False)
    sb.start_io_thread()
    load = Load(sb, args.rate, args.rows, seed=7)
    load.start()
    daemon: subprocess.Popen[bytes] | None = None
    try:
        if load.stop.wait(args.backlog) or load.error is not None:
            raise LagdError(f"the demo's write load failed: {load.error}")
        result.backlog = load.done
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, LAGD_DEMO_PASSWORD=sb.replica().dsn.password)
        lagd = [str(bindir / "lagd")] if (bindir / "lagd").exists() else [sys.executable, "-m", "lagd.daemon"]
        log = tmp / f"lagd-{'prefetch' if prefetch else 'plain'}.log"
        daemon = subprocess.Popen([*lagd, "run", "--config", str(_config(sb, port, tmp, prefetch))], env=env,
                                  stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        deadline = time.monotonic() + 30
        while _status(url) is None:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise LagdError(f"the daemon did not start:\n{log.read_text(errors='replace')[-1500:]}")
            time.sleep(0.2)
        time.sleep(1.0)  # a poll or two: lagd has seen the backlog before the SQL thread starts
        mode = "prefetch on" if prefetch else "prefetch off"
        print(f"   {load.done:,} UPDATEs wait in the relay log; lagd runs ({mode}, heartbeat {HEARTBEAT}); "
              "SQL thread started, the source keeps writing:", flush=True)
        print(HEADER, flush=True)
        sb.start_sql_thread()
        began = time.monotonic()
        next_line = began
        while True:
            now = time.monotonic()
            if load.error is not None:
                raise LagdError(f"the demo's write load failed: {load.error}")
            if daemon.poll() is not None:
                raise LagdError(f"the daemon exited with {daemon.returncode}:\n"
                                f"{log.read_text(errors='replace')[-1500:]}")
            age = _heartbeat_age(sb)
            if age is not None and age <= CAUGHT_UP and now - began > 1.0:
                result.seconds = now - began
                break
            if now - began > args.limit:
                break
            if now >= next_line:
                status = _status(url)
                if status is not None:
                    r = reading(now - began, status)
                    result.readings.append(r)
                    print(r.line(), flush=True)
                next_line += args.refresh
            time.sleep(0.1)
        if result.seconds is not None:
            print(f"   caught up after {result.seconds:.1f} s (the replica's heartbeat row is "
                  f"{CAUGHT_UP:g} s old or less)", flush=True)
        else:
            print(f"   not caught up after {args.limit:g} s (--limit); stopping this run", flush=True)
    finally:
        load.stop.set()
        load.join(timeout=10)
        result.exit_code = _terminate(daemon)
    return result


def summary(runs: list[CatchUp], args: argparse.Namespace) -> list[str]:
    out = ["", f"== summary: the same {args.backlog:g} s backlog of random UPDATEs "
               f"({args.rate:g}/s, the source writing on through the catch-up), cold 64 MB buffer pool"]
    for r in runs:
        took = f"{r.seconds:.1f} s" if r.seconds is not None else f"more than {args.limit:g} s"
        errors = r.eta_errors()
        within = sum(1 for e in errors if e <= 0.25)
        eta = (f"; ETA within 25% of the real remaining time in {within} of {len(errors)} readings "
               f"after the first 3 s (median error {statistics.median(errors):.0%})" if errors else "")
        out.append(f"   {r.name + ':':<18} caught up in {took}{eta}; lagd exited with {r.exit_code}")
    plain, pre = runs[0].seconds if runs else None, runs[-1].seconds if len(runs) > 1 else None
    if plain is not None and pre is not None and pre > 0:
        out.append(f"   speed-up with prefetch: x{plain / pre:.2f}")
    return out


def run(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(replicas=1, o_direct=True, replica_buffer_pool_mb=64, source_buffer_pool_mb=512)
    print("lagd demo: starting a private MariaDB source and replica ...", flush=True)
    bindir = Path(sys.executable).parent
    runs: list[CatchUp] = []
    with Sandbox(cfg) as sb, tempfile.TemporaryDirectory(prefix="lagd-demo-") as tmp:
        print(f"   source 127.0.0.1:{sb.source.port}, replica 127.0.0.1:{sb.replica().port} "
              f"(64 MB buffer pool, O_DIRECT)")
        size_mb = args.rows * 230 / 2**20
        print(f"   loading {args.rows:,} rows on both (about {size_mb:.0f} MB) ...", flush=True)
        _seed(sb, args.rows)
        stop_beats = threading.Event()
        writer = HeartbeatWriter(sb.source.connect, HEARTBEAT, interval=0.5, create_table=True)
        beats = threading.Thread(target=writer.run, args=(stop_beats,), name="demo-heartbeat", daemon=True)
        beats.start()
        deadline = time.monotonic() + 60
        while _heartbeat_age(sb) is None:  # the table and a first row have reached the replica
            if time.monotonic() > deadline:
                raise LagdError("the heartbeat row did not reach the replica in 60 s")
            time.sleep(0.2)
        try:
            for prefetch in (False, True):
                runs.append(catch_up(sb, args, Path(tmp), prefetch, bindir))
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
    ap.add_argument("--rate", type=float, default=300, help="source UPDATEs per second (default 300)")
    ap.add_argument("--backlog", type=float, default=30, help="seconds of writes the SQL thread waits out "
                    "before each catch-up (default 30)")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between screen lines (default 2)")
    ap.add_argument("--limit", type=float, default=240, help="longest a catch-up may take (default 240 s)")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.rows < 1000 or args.backlog <= 0 or args.refresh <= 0 or args.limit <= 0:
        ap.error("need --rate, --backlog, --refresh and --limit > 0 and --rows >= 1000")
    try:
        return run(args)
    except LagdError as e:
        print(f"lagd demo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
