"""One-shot LOAD DATA vs `lagctl load`: replica lag, total time, largest transaction.

A sandbox (source + one replica, 256 MB buffer pools) with a real `lagd run`
on the replica. The same generated TSV file (``--rows``, default 2M, about
59 bytes a row, a secondary index) is loaded into an empty table:

- one-shot: ``LOAD DATA LOCAL INFILE`` in one transaction;
- chunked: ``lagctl load --replica-lagd <lagd> --max-lag <budget>``.

Each run lasts until the replica has applied everything. Lag is sampled from
lagd's ``/check`` every 0.25 s (its headline method plus the received-not-
applied backlog is what the replica will reach; the plain headline is
reported). Runs alternate (one-shot, chunked, chunked, one-shot, ...) over
``--rounds`` rounds. Before them, a chunk-level comparison of the two ways
to send a chunk: LOAD DATA LOCAL of a 50,000-row file vs multi-row INSERTs
of the same rows (1,000 rows per statement), medians of 3 interleaved runs.

    .venv/bin/python -m tests.bench.bench_load [--rows 2000000] [--budget 5] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from lagd.mysql.source import SourceLogin, SourceWriter
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.daemon_util import running_daemon

LAGCTL = str(Path(sys.executable).parent / "lagctl")
USER, PASSWORD = "bench_loader", "bench-pw"
TABLE = ("CREATE TABLE b.orders (id INT PRIMARY KEY, k INT NOT NULL, customer VARCHAR(40) NOT NULL, "
         "amount DECIMAL(10,2) NOT NULL, created DATETIME NOT NULL, KEY (k))")


def make_file(path: Path, rows: int) -> None:
    rnd = random.Random(1)
    with path.open("w") as f:
        for i in range(1, rows + 1):
            f.write(f"{i}\t{rnd.randint(1, 10**9)}\tcustomer-{i % 50_000}\t{rnd.random() * 1000:.2f}\t"
                    f"2026-01-{i % 28 + 1:02d} 10:00:00\n")


class LagSampler:
    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, float | None, float | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not self._stop.is_set():
            try:
                with opener.open(f"{self.url}/check?max_lag=1000", timeout=2) as r:
                    d = json.loads(r.read())
            except Exception:
                d = {}
            self.samples.append((time.monotonic(), d.get("lag"), d.get("backlog_seconds")))
            self._stop.wait(0.25)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def summary(self, start: float, end: float) -> dict[str, float | None]:
        lags = [lag for t, lag, _ in self.samples if start <= t <= end and lag is not None]
        return {"peak_lag": max(lags) if lags else None,
                "mean_lag": statistics.fmean(lags) if lags else None, "samples": len(lags)}


def _reset(sb: Sandbox) -> None:
    sb.source.query("DROP DATABASE IF EXISTS b")
    sb.source.query("CREATE DATABASE b")
    sb.source.query(TABLE)
    sb.source.query("DROP DATABASE IF EXISTS lagd")  # lagctl's progress: each run loads from the start
    sb.wait_caught_up(timeout=120)
    time.sleep(2)


def one_shot(sb: Sandbox, login: SourceLogin, path: Path, lag: LagSampler, rows: int) -> dict[str, Any]:
    _reset(sb)
    w = SourceWriter(login)
    t0 = time.monotonic()
    w.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE b.orders")
    w.commit()
    source_s = time.monotonic() - t0
    w.close()
    sb.wait_caught_up(timeout=1800)
    total = time.monotonic() - t0
    return {"way": "one-shot LOAD DATA", "source_seconds": source_s, "total_seconds": total,
            "largest_transaction_rows": rows, **lag.summary(t0, time.monotonic())}


def chunked(sb: Sandbox, dsn: str, url: str, path: Path, lag: LagSampler, budget: float) -> dict[str, Any]:
    _reset(sb)
    t0 = time.monotonic()
    res = subprocess.run([LAGCTL, "load", str(path), "--table", "b.orders", "--source", dsn,
                          "--replica-lagd", url, "--max-lag", str(budget)],
                         capture_output=True, text=True, env=dict(os.environ), check=False)
    source_s = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"lagctl load failed: {res.stderr[-2000:]}")
    sb.wait_caught_up(timeout=1800)
    total = time.monotonic() - t0
    last = res.stderr.strip().splitlines()[-1]
    largest = int(last.rsplit("largest chunk ", 1)[1].split()[0].replace(",", ""))
    chunks = int(last.split(" chunks;")[0].rsplit(" in ", 1)[1])
    return {"way": f"lagctl load --max-lag {budget:g}", "source_seconds": source_s, "total_seconds": total,
            "largest_transaction_rows": largest, "chunks": chunks, **lag.summary(t0, time.monotonic())}


def chunk_methods(sb: Sandbox, login: SourceLogin, tmp: Path, n: int = 50_000) -> dict[str, Any]:
    """LOAD DATA LOCAL vs multi-row INSERT for one chunk of ``n`` rows."""
    path = tmp / "chunk.tsv"
    make_file(path, n)
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    times: dict[str, list[float]] = {"load_data_local": [], "multi_row_insert": []}
    for _ in range(3):
        for way, runs in times.items():
            _reset(sb)
            w = SourceWriter(login)
            t0 = time.monotonic()
            if way == "load_data_local":
                w.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE b.orders")
            else:
                for i in range(0, n, 1000):
                    part = rows[i:i + 1000]
                    values = ",".join(["(%s,%s,%s,%s,%s)"] * len(part))
                    w.execute(f"INSERT INTO b.orders VALUES {values}", [v for r in part for v in r])
            w.commit()
            runs.append(time.monotonic() - t0)
            w.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"rows": n, "median_seconds": med, "runs": times,
            "insert_over_load_data": med["multi_row_insert"] / med["load_data_local"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = SandboxConfig(replica_buffer_pool_mb=256, source_buffer_pool_mb=256,
                        source_extra_options={"max-binlog-size": "256M"},
                        replica_extra_options={"max-relay-log-size": "256M"})
    out: dict[str, Any] = {"rows": args.rows, "budget": args.budget, "runs": []}
    with Sandbox(cfg) as sb, tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        src = sb.source
        src.query(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
        src.query(f"GRANT ALL ON *.* TO '{USER}'@'127.0.0.1'")
        login = SourceLogin("127.0.0.1", src.port, USER, PASSWORD)
        dsn = f"mysql://{USER}:{PASSWORD}@127.0.0.1:{src.port}"
        data = tmp / "orders.tsv"
        make_file(data, args.rows)
        out["file_bytes"] = data.stat().st_size
        out["chunk_methods"] = chunk_methods(sb, login, tmp)
        print(json.dumps(out["chunk_methods"]), flush=True)
        with running_daemon(sb, tmp) as d, LagSampler(d.url) as lag:
            for r in range(args.rounds):
                order = ("one", "chunked") if r % 2 == 0 else ("chunked", "one")
                for way in order:
                    res = (one_shot(sb, login, data, lag, args.rows) if way == "one"
                           else chunked(sb, dsn, d.url, data, lag, args.budget))
                    out["runs"].append(res)
                    print(json.dumps(res), flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
