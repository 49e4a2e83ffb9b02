"""Check the SQL thread's read-stall share against an independent estimate, once.

A cold catch-up on a sandbox (a table larger than the pool, O_DIRECT, a
restart before the catch-up) is sampled by ``prefetch/stall.py``; the
independent estimate is the buffer-pool reads the server counted in the same
span times the device's mean read latency from /proc/diskstats (ms spent
reading / reads completed). Without prefetch nearly every buffer-pool read of
a catch-up is the SQL thread's own, so the two should agree within the
device-wide latency's spread (other processes share the disk).

A second reference, exact rather than estimated: with ``--trace`` (root and
Debian's linux-perf) the kernel's scheduler events of the SQL thread over the
same span (``sched_trace``), split into the same states as stall.py.

With ``--prefetch`` lagd's prefetch engine probes the whole catch-up (the
adaptive control off, as in the CPU measurements of docs/prefetch.md): the
read share both measure should then fall.

    .venv/bin/python -m tests.bench.bench_stall_check [--rows 300000] [--changes 80000] [--trace] [--prefetch]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from lagd.prefetch import stall
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.bench import prefetch_runner
from tests.bench.bench_prefetch import disk_counts
from tests.bench.sched_trace import PerfTrace, split
from tests.integration.test_relaylog_sandbox import wait_received


def start_engine(sb: Sandbox) -> subprocess.Popen[str]:
    """lagd's prefetch engine on the replica, in its own process, probing whatever comes."""
    d = sb.replica().dsn
    return prefetch_runner.start({"host": d.host, "port": d.port, "user": d.user, "password": d.password,
                                  "index": str(sb.relay_log_index()), "pool_bytes": 64 << 20,
                                  "options": {"adaptive": False}})


def pool_reads(sb: Sandbox) -> int:
    return int(sb.replica().query("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'")[0]["Value"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--changes", type=int, default=80_000)
    ap.add_argument("--trace", action="store_true", help="also trace the SQL thread's scheduler events")
    ap.add_argument("--keep-trace", type=Path, help="with --trace: write perf script's lines here")
    ap.add_argument("--prefetch", action="store_true", help="lagd's prefetch engine probes the catch-up")
    ap.add_argument("--hz", type=float, default=50.0, help="stall.py's samples a second")
    args = ap.parse_args()
    why = PerfTrace.unavailable() if args.trace else None
    if why:
        raise SystemExit(f"bench_stall_check: cannot trace: {why}")
    trace: PerfTrace | None = None
    with Sandbox(SandboxConfig(replica_buffer_pool_mb=64, o_direct=True)) as sb, \
            contextlib.ExitStack() as helpers:  # perf and the engine stop on any way out
        sb.source.query("CREATE DATABASE sc")
        sb.source.query("CREATE TABLE sc.big (id INT PRIMARY KEY, c CHAR(200) NOT NULL)")
        sb.source.query(f"INSERT INTO sc.big SELECT seq, REPEAT('x', 200) FROM seq_1_to_{args.rows}", db="sc")
        sb.wait_caught_up(timeout=300)
        sb.stop_sql_thread()
        rng = random.Random(5)
        conn = sb.source.connect("sc")
        with conn.cursor() as cur:
            for i in range(args.changes // 100):
                keys = ", ".join(str(rng.randint(1, args.rows)) for _ in range(100))
                cur.execute(f"UPDATE big SET c = 'v{i}' WHERE id IN ({keys})")
        conn.close()
        sb.restart_server(sb.replica().name, start_slave=False)
        sb.start_io_thread()
        wait_received(sb)
        datadir = Path(sb.replica().datadir)
        reads0, disk0 = pool_reads(sb), disk_counts(datadir)[:2]
        mon = stall.StallMonitor()
        engine = start_engine(sb) if args.prefetch else None
        engine_out: dict[str, Any] = {}
        if engine is not None:
            helpers.callback(lambda: engine_out.update(prefetch_runner.stop(engine) or {}))
        sb.start_sql_thread()
        tids: tuple[int, ...] = ()
        while not tids:
            tids = stall.applier_tids(sb.replica().query(stall.appliers_sql(mariadb=True)))
        if args.trace:
            # Both measure from when the trace is ready (perf takes a moment to start).
            trace = helpers.enter_context(PerfTrace(tids, datadir.parent / "sched.data"))
        t0 = time.monotonic()
        mon.set_threads(tids)
        mon.start(hz=args.hz)
        sb.wait_caught_up(timeout=300)
        mon.stop()
        t1 = time.monotonic()
        wall = t1 - t0
        traced = None
        helpers.close()  # the span is over: perf and the engine stop here
        if trace is not None:
            lines = trace.lines()
            if args.keep_trace:
                args.keep_trace.write_text("\n".join(lines) + "\n")
            traced = split(lines, tids, t0, t1)
        reads1, disk1 = pool_reads(sb), disk_counts(datadir)[:2]
        if engine is not None:
            counters = engine_out.get("counters", {})
            print(f"prefetch: {counters.get('probes_submitted')} probes, {counters.get('rows_probed')} keys,"
                  f" {counters.get('in_time')} in time, {counters.get('late')} late")
    seconds = mon.totals()
    done, ms = disk1[0] - disk0[0], disk1[1] - disk0[1]
    latency = ms / done / 1000 if done else float("nan")
    estimate = (reads1 - reads0) * latency
    measured = sum(seconds.values())
    print(f"catch-up {wall:.2f} s, SQL thread measured {measured:.2f} s:",
          {k: round(v, 3) for k, v in seconds.items()})
    print(f"buffer-pool reads {reads1 - reads0}, device mean read latency {latency * 1e6:.0f} µs"
          f" -> read wait estimate {estimate:.2f} s ({100 * estimate / measured:.0f}% of the SQL"
          " thread's time)")
    print(f"stall.py disk_read {seconds['disk_read']:.2f} s ({100 * seconds['disk_read'] / measured:.0f}%),"
          f" other_wait {seconds['other_wait']:.2f} s")
    if traced is not None:
        known = sum(traced.values()) - traced["unknown"]
        print(f"kernel trace (threads {', '.join(map(str, tids))}): {known:.2f} s of the span known,"
              f" {traced['unknown']:.2f} s before the first switch out or after the last"
              f"{'; ' + trace.lost if trace is not None and trace.lost else ''}")
        print("  stall.py                     | trace: off CPU by the state it left in,"
              " with the wait for a core after")
        rows = [("on_cpu", "on_cpu"), ("cpu_wait", "preempted"), ("disk_read", "read"),
                ("flush_wait", "flush"), ("other_wait", "other")]
        for ours, theirs in rows:
            left, right = _share(seconds[ours], measured), _share(traced[theirs], known)
            print(f"  {ours:11s} {left} | {theirs:9s} {right}")


def _share(x: float, total: float) -> str:
    return f"{x:6.2f} s {100 * x / total if total else 0:4.0f}%"


if __name__ == "__main__":
    main()
