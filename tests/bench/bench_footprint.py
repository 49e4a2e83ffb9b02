"""lagd's own footprint: CPU while the replica is caught up, memory through a 1 GB backlog.

The real `lagd run` process (prefetch, lag, advisor, HTTP) against a sandbox:

1. caught up, with a light write load on the source (one small transaction
   every 100 ms): lagd's CPU over a minute, as a share of one core;
2. the SQL thread stopped while the source writes about 1 GB of relay log in
   small transactions (a server-side loop, so the writer costs no client
   CPU); lagd reads all of it ahead (backlog, event-time lag, advisor); then
   the SQL thread is started and lagd prefetches through it: lagd's peak
   resident memory (VmHWM) and where it stood at each phase.

    .venv/bin/python -m tests.bench.bench_footprint [--gb 1.0] [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.bench.bench_prefetch import _cpu_seconds
from tests.integration.daemon_util import running_daemon
from tests.integration.test_relaylog_sandbox import wait_received

ROW_BYTES = 510  # two CHAR(255) columns: before and after image make an event of about 1 KB


def _mem_kb(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _relay_bytes(sb: Sandbox) -> int:
    index = sb.relay_log_index()
    return sum(p.stat().st_size for p in index.parent.glob(index.stem + ".0*"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="relay-log backlog to build")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    rows = 200_000
    cfg = SandboxConfig(replica_buffer_pool_mb=256, source_buffer_pool_mb=256,
                        source_extra_options={"max-binlog-size": "256M"},
                        replica_extra_options={"max-relay-log-size": "256M"})
    result: dict[str, Any] = {}
    with Sandbox(cfg) as sb, tempfile.TemporaryDirectory() as tmp:
        sb.source.query("CREATE DATABASE fp")
        sb.source.query("CREATE TABLE fp.t (id INT PRIMARY KEY, k INT NOT NULL, a CHAR(255) NOT NULL, "
                        "b CHAR(255) NOT NULL, KEY k_1 (k))")
        sb.source.query(f"INSERT INTO fp.t SELECT seq, seq % 1000, 'a', 'b' FROM seq_1_to_{rows}", db="fp")
        sb.wait_caught_up(timeout=300)
        with running_daemon(sb, Path(tmp), extra="[prefetch]\nbuffer_pool_share = 0.25\n") as d:
            pid = d.proc.pid
            d.wait_for(lambda s: s["lag"]["state"] == "idle", timeout=60)

            # 1. Caught up under a light load.
            stop = threading.Event()

            def trickle() -> None:
                conn = sb.source.connect("fp")
                i = 0
                with conn.cursor() as cur:
                    while not stop.is_set():
                        i += 1
                        cur.execute("UPDATE t SET a = %s WHERE id = %s", (f"x{i}", 1 + i % rows))
                        time.sleep(0.1)
                conn.close()

            writer = threading.Thread(target=trickle)
            writer.start()
            time.sleep(5)
            c0, t0 = _cpu_seconds(pid), time.monotonic()
            time.sleep(args.idle_seconds)
            idle_cpu = (_cpu_seconds(pid) - c0) / (time.monotonic() - t0)
            stop.set()
            writer.join()
            result["caught_up_cpu_share_of_one_core"] = round(idle_cpu, 4)
            result["caught_up_mem_kb"] = _mem_kb(pid)
            print(f"caught up: lagd used {idle_cpu:.2%} of one core over {args.idle_seconds:.0f} s; "
                  f"memory {result['caught_up_mem_kb']}", flush=True)

            # 2. A 1 GB backlog of small transactions, read ahead, then applied.
            sb.stop_sql_thread()
            trx = int(args.gb * 2**30 / (2 * ROW_BYTES + 150))
            w0 = time.monotonic()
            sb.source.query(
                "BEGIN NOT ATOMIC DECLARE i INT DEFAULT 0; "
                f"WHILE i < {trx} DO "
                f"UPDATE t SET a = REPEAT(CHAR(97 + i % 26), 255), b = REPEAT(CHAR(65 + i % 26), 255) "
                f"WHERE id = 1 + (i * 7919) % {rows}; SET i = i + 1; END WHILE; END", db="fp")
            wait_received(sb, timeout=600)
            received = _relay_bytes(sb)
            print(f"backlog: {trx:,} transactions, {received / 2**30:.2f} GiB of relay log, written in "
                  f"{time.monotonic() - w0:.0f} s", flush=True)
            s = d.wait_for(lambda s: (s["lag"]["backlog"] or {}).get("transactions", 0) >= trx * 0.99,
                           timeout=600)
            queued = s["lag"]["backlog"]["transactions"]
            result["backlog"] = {"transactions": queued, "relay_bytes": received}
            result["read_ahead_mem_kb"] = _mem_kb(pid)
            print(f"read ahead: {queued:,} transactions queued; memory "
                  f"{result['read_ahead_mem_kb']}", flush=True)
            a0 = time.monotonic()
            c0 = _cpu_seconds(pid)
            sb.start_sql_thread()
            peak = 0
            while time.monotonic() - a0 < 900:
                peak = max(peak, _mem_kb(pid)["VmRSS"])
                s = d.status()
                if s["lag"]["state"] == "idle":
                    break
                time.sleep(1)
            applied_s = time.monotonic() - a0
            result["apply_seconds"] = round(applied_s, 1)
            result["apply_lagd_cpu_s"] = round(_cpu_seconds(pid) - c0, 1)
            result["apply_mem_kb"] = _mem_kb(pid)
            result["apply_peak_rss_kb_sampled"] = peak
            result["prefetch_counters"] = (s.get("prefetch") or {}).get("counters")
            print(f"applied in {applied_s:.0f} s; lagd CPU {result['apply_lagd_cpu_s']} s; memory "
                  f"{result['apply_mem_kb']} (VmHWM is the peak over the whole run)", flush=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
