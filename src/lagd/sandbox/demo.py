"""The demo: lagd at work on a lagging, I/O-bound MariaDB replica.

It starts a private MariaDB source and replica (the sandbox) whose replica
has a 64 MB buffer pool with O_DIRECT and a table several times that size,
puts a write load of random primary-key UPDATEs on the source, and stalls
the replica's SQL thread for a while out of every cycle, as a big
transaction or a restart would: the replica falls behind, then catches up.
It runs the real daemon (`lagd run`) against the replica and `lagctl status
--watch` on top, so you see lag by every method, backlog, apply speed, the
catch-up ETA and the prefetcher's lead while it happens. Ctrl-C (or
--seconds) stops everything; no server or daemon outlives it.

    scripts/demo [--seconds N] [--rate TRX_PER_S] [--stall S] [--period S] [--rows N]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lagd.errors import LagdError
from lagd.sandbox.pair import Sandbox, SandboxConfig
from lagd.sandbox.server import free_port

SCHEMA = "demo"
TABLE_DDL = """CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '',
  PRIMARY KEY (id), KEY k_1 (k))"""


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


class Stalls(threading.Thread):
    """Stops the replica's SQL thread for ``stall`` seconds of every ``period``."""

    def __init__(self, sandbox: Sandbox, stall: float, period: float) -> None:
        super().__init__(name="demo-stalls", daemon=True)
        self.sandbox, self.stall, self.period = sandbox, stall, period
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period - self.stall):
            self.sandbox.stop_sql_thread()
            if self.stop.wait(self.stall):
                break
            self.sandbox.start_sql_thread()
        try:
            self.sandbox.start_sql_thread()
        except Exception:  # the servers may already be stopping
            return


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
    # A cold replica: restart it so its buffer pool starts empty.
    sb.restart_server(sb.replica().name)


def _config(sb: Sandbox, http_port: int, workdir: Path) -> Path:
    rep = sb.replica()
    path = workdir / "lagd.toml"
    path.write_text(f"""# written by the lagd demo
[replica]
host = "127.0.0.1"
port = {rep.port}
user = "{rep.dsn.user}"
password_env = "LAGD_DEMO_PASSWORD"

[http]
listen = "127.0.0.1:{http_port}"

[prefetch]
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


def run(args: argparse.Namespace) -> int:
    cfg = SandboxConfig(replicas=1, o_direct=True, replica_buffer_pool_mb=64, source_buffer_pool_mb=512)
    print("lagd demo: starting a private MariaDB source and replica ...", flush=True)
    daemon: subprocess.Popen[bytes] | None = None
    watcher: subprocess.Popen[bytes] | None = None
    with Sandbox(cfg) as sb, tempfile.TemporaryDirectory(prefix="lagd-demo-") as tmp:
        print(f"  source 127.0.0.1:{sb.source.port}, replica 127.0.0.1:{sb.replica().port} "
              f"(64 MB buffer pool, O_DIRECT)")
        size_mb = args.rows * 230 / 2**20
        print(f"  loading {args.rows:,} rows on both (about {size_mb:.0f} MB) ...", flush=True)
        _seed(sb, args.rows)
        port = free_port()
        config = _config(sb, port, Path(tmp))
        env = dict(os.environ, LAGD_DEMO_PASSWORD=sb.replica().dsn.password)
        bindir = Path(sys.executable).parent
        # The console scripts next to this interpreter; the modules if they are not installed.
        lagd = [str(bindir / "lagd")] if (bindir / "lagd").exists() else [sys.executable, "-m", "lagd.daemon"]
        lagctl = ([str(bindir / "lagctl")] if (bindir / "lagctl").exists()
                  else [sys.executable, "-m", "lagd.cli.main"])
        print(f"  starting the daemon: lagd run --config {config}", flush=True)
        daemon = subprocess.Popen([*lagd, "run", "--config", str(config)], env=env,
                                  stderr=open(Path(tmp) / "lagd.log", "wb"))  # noqa: SIM115
        load = Load(sb, args.rate, args.rows)
        stalls = Stalls(sb, args.stall, args.period)
        load.start()
        stalls.start()
        print(f"  load: {args.rate:g} UPDATEs/s on random rows; the SQL thread stalls {args.stall:g} s of "
              f"every {args.period:g} s. Ctrl-C stops.\n", flush=True)
        time.sleep(2.0)
        url = f"http://127.0.0.1:{port}"
        watcher = subprocess.Popen([*lagctl, "status", "--url", url, "--watch", str(args.refresh)], env=env)
        began = time.monotonic()
        try:
            while args.seconds <= 0 or time.monotonic() - began < args.seconds:
                if load.error is not None:
                    raise LagdError(f"the demo's write load failed: {load.error}")
                if daemon.poll() is not None:
                    log = (Path(tmp) / "lagd.log").read_text(errors="replace")[-2000:]
                    raise LagdError(f"the daemon exited with {daemon.returncode}:\n{log}")
                if watcher.poll() is not None:
                    break
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("\nstopping ...", flush=True)
        finally:
            _terminate(watcher)
            load.stop.set()
            stalls.stop.set()
            load.join(timeout=10)
            stalls.join(timeout=10)
            code = _terminate(daemon)
            print(f"\ndone: {load.done} UPDATEs written; lagd exited with {code}; "
                  f"its log: {tail_log(Path(tmp) / 'lagd.log')}", flush=True)
    print("servers stopped.", flush=True)
    return 0


def tail_log(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(none)"
    return " | ".join(text[-lines:]) if text else "(empty)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/demo", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (default: Ctrl-C)")
    ap.add_argument("--rate", type=float, default=1500, help="source UPDATEs per second")
    ap.add_argument("--stall", type=float, default=12, help="seconds the SQL thread is stopped per cycle")
    ap.add_argument("--period", type=float, default=40, help="length of a cycle in seconds")
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows in the demo table")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between status screens")
    args = ap.parse_args(argv)
    if not 0 <= args.stall < args.period or args.rate <= 0 or args.rows < 1000:
        ap.error("need 0 <= --stall < --period, --rate > 0 and --rows >= 1000")
    try:
        return run(args)
    except LagdError as e:
        print(f"lagd demo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
