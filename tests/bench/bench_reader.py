"""Reader decode-rate benchmark: lagd's decoder beside pymysqlreplication's.

A real relay log of N single-row UPDATE transactions on a sysbench-like table
(int primary key, int secondary key, two CHAR columns) is made once on the
sandbox (source writes while the replica's SQL thread is stopped) and cached.
Both decoders then read the same bytes in this process, one after the other,
and the rates are printed side by side (CPU seconds of this process: one core).

    .venv/bin/python -m tests.bench.bench_reader [--rows 200000] [--rebuild] [--json FILE]

The pure-Python path (no C accelerator) is measured in a child process started
with LAGD_PURE_PYTHON=1, on the same cached file, in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lagd.relaylog import (
    Index,
    LogFiles,
    RelayLogReader,
    RowChange,
    TableInfo,
    TableMapResolver,
)
from lagd.relaylog._construct import ACCELERATED
from lagd.relaylog._tablemap import TableMap
from lagd.sandbox.pair import Sandbox, SandboxConfig
from lagd.sandbox.server import default_cache_dir
from tests.unit.reference_decoder import ReferenceDecoder, iter_raw_events

TABLE_DDL = """CREATE TABLE sbtest1 (
  id INT NOT NULL, k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '',
  PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB"""


class SbtestResolver(TableMapResolver):
    """The log's metadata plus the secondary index information_schema would add."""

    def resolve(self, tm: TableMap) -> TableInfo:
        info = super().resolve(tm)
        if tm.table != "sbtest1":
            return info
        k = Index("k_1", (1,), unique=False)
        indexes = (*info.indexes, k)
        return TableInfo(info.schema, info.name, info.columns, info.key, indexes,
                         (0, 1), "table_map+information_schema")


def wait_received(sb: Sandbox, timeout: float) -> None:
    """Until the replica's IO thread has everything the source logged."""
    row = sb.source.query("SHOW MASTER STATUS")[0]
    target = (row["File"], int(row["Position"]))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.slave_status()
        if (st["Master_Log_File"], int(st["Read_Master_Log_Pos"])) >= target:
            return
        time.sleep(0.2)
    raise TimeoutError("the replica's IO thread did not receive the backlog in time")


def build_relay_log(rows: int, out_dir: Path) -> list[Path]:
    """Run the write load on a sandbox and keep a copy of the relay log."""
    cfg = SandboxConfig(source_buffer_pool_mb=128, replica_buffer_pool_mb=64)
    rng = random.Random(42)
    table_rows = 100_000
    with Sandbox(cfg) as sb:
        src = sb.source
        with src.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
            cur.execute("USE sbtest")
            cur.execute(TABLE_DDL)
            for lo in range(1, table_rows + 1, 5000):
                values = ",".join(
                    f"({i},{rng.randrange(table_rows)},'{rng.getrandbits(64):020d}-c','pad')"
                    for i in range(lo, min(lo + 5000, table_rows + 1))
                )
                cur.execute(f"INSERT INTO sbtest1 VALUES {values}")
        sb.wait_caught_up(timeout=120)
        # Rotate and let the SQL thread step into the new file, so the copied
        # relay log holds the UPDATE backlog and nothing else.
        sb.flush_relay_logs()
        sb.source.query("FLUSH LOGS")  # an event after the rotation moves the SQL thread on
        sb.wait_caught_up(timeout=60)
        sb.stop_sql_thread()
        st = sb.slave_status()
        first = st["Relay_Log_File"]
        t0 = time.monotonic()
        with src.connect(client_flag=1 << 16) as conn, conn.cursor() as cur:  # MULTI_STATEMENTS
            cur.execute("USE sbtest")
            batch = 500
            for lo in range(0, rows, batch):
                stmts = ";".join(
                    f"UPDATE sbtest1 SET c='{rng.getrandbits(64):020d}-{n}' "
                    f"WHERE id={rng.randrange(1, table_rows + 1)}"
                    for n in range(lo, min(lo + batch, rows))
                )
                cur.execute(stmts)
                while cur.nextset():
                    pass
        print(f"wrote {rows} single-row UPDATE transactions in {time.monotonic() - t0:.1f}s",
              file=sys.stderr)
        wait_received(sb, timeout=300)
        index = sb.relay_log_index()
        names = [line.strip() for line in index.read_text().splitlines() if line.strip()]
        names = [Path(n).name for n in names]
        keep = names[names.index(first):]
        out_dir.mkdir(parents=True, exist_ok=True)
        copied = []
        for name in keep:
            dst = out_dir / name
            shutil.copyfile(sb.relay_log_dir() / name, dst)
            copied.append(dst)
        (out_dir / "files.json").write_text(json.dumps([p.name for p in copied]))
        return copied


def decode_lagd(files: list[Path]) -> tuple[int, float]:
    reader = RelayLogReader(LogFiles.of(*files), resolver=SbtestResolver())
    n = 0
    t0 = time.process_time()
    while True:
        batch = reader.read(1 << 24)
        if not batch and reader.at_tail:
            break
        for e in batch:
            if type(e) is RowChange:
                n += 1
    elapsed = time.process_time() - t0
    reader.close()
    return n, elapsed


def decode_reference(files: list[Path], limit: int) -> tuple[int, float]:
    """pymysqlreplication decoding every column of the same events."""
    dec = ReferenceDecoder("mariadb")
    n = 0
    t0 = time.process_time()
    for f in files:
        buf = f.read_bytes()
        for _off, typ, raw, crc in iter_raw_events(buf):
            if typ in (19, 23, 24, 25, 30, 31, 32):
                n += len(dec.rows(raw, crc))
                if n >= limit:
                    return n, time.process_time() - t0
    return n, time.process_time() - t0


def decode_pure(files: list[Path]) -> tuple[int, float]:
    """The same decode in a child process that has the accelerator switched off."""
    code = ("import json, sys; from pathlib import Path; from tests.bench.bench_reader import decode_lagd;"
            "fs = [Path(a) for a in sys.argv[1:]];"
            "print(json.dumps(min((decode_lagd(fs) for _ in range(2)), key=lambda r: r[1])))")
    env = dict(os.environ, LAGD_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code, *map(str, files)], env=env, check=True,
                         capture_output=True, text=True).stdout
    rows, cpu = json.loads(out.strip().splitlines()[-1])
    return int(rows), float(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--reference-rows", type=int, default=40_000,
                    help="rows pymysqlreplication decodes (it is slow; its rate is what counts)")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--profile", action="store_true", help="print where lagd's decode time goes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    cache = default_cache_dir() / "bench" / f"reader-{args.rows}"
    listing = cache / "files.json"
    if args.rebuild or not listing.exists():
        shutil.rmtree(cache, ignore_errors=True)
        files = build_relay_log(args.rows, cache)
    else:
        files = [cache / n for n in json.loads(listing.read_text())]
    size = sum(f.stat().st_size for f in files)

    lagd_runs = [decode_lagd(files) for _ in range(3)]
    lagd_rows = lagd_runs[0][0]
    lagd_cpu = min(t for _, t in lagd_runs)
    pure_rows, pure_cpu = decode_pure(files)
    ref_rows, ref_cpu = decode_reference(files, args.reference_rows)
    lagd_rate = lagd_rows / lagd_cpu
    pure_rate = pure_rows / pure_cpu
    ref_rate = ref_rows / ref_cpu
    result = {
        "relay_log_bytes": size,
        "row_changes": lagd_rows,
        "lagd_cpu_seconds": round(lagd_cpu, 3),
        "lagd_rows_per_second": round(lagd_rate),
        "lagd_us_per_row": round(1e6 / lagd_rate, 2),
        "lagd_accelerated": ACCELERATED,
        "pure_python_rows_per_second": round(pure_rate),
        "reference_rows": ref_rows,
        "reference_cpu_seconds": round(ref_cpu, 3),
        "reference_rows_per_second": round(ref_rate),
        "ratio": round(lagd_rate / ref_rate, 1),
        "goal_rows_per_second": 100_000,
    }
    print(f"relay log: {len(files)} file(s), {size / 1e6:.1f} MB, {lagd_rows} row changes")
    print(f"{'decoder':<34}{'rows':>10}{'CPU s':>9}{'rows/s':>12}{'us/row':>9}")
    label = "lagd, C accelerator" if ACCELERATED else "lagd (accelerator NOT built)"
    print(f"{label:<34}{lagd_rows:>10}{lagd_cpu:>9.2f}{lagd_rate:>12,.0f}{1e6 / lagd_rate:>9.2f}")
    print(f"{'lagd, pure Python':<34}{pure_rows:>10}{pure_cpu:>9.2f}"
          f"{pure_rate:>12,.0f}{1e6 / pure_rate:>9.2f}")
    print(f"{'pymysqlreplication (all columns)':<34}{ref_rows:>10}{ref_cpu:>9.2f}"
          f"{ref_rate:>12,.0f}{1e6 / ref_rate:>9.2f}")
    print("lagd decodes the key and changed indexed columns; pymysqlreplication every column")
    print(f"ratio lagd/pymysqlreplication: {lagd_rate / ref_rate:.1f}x"
          f" (pure Python: {pure_rate / ref_rate:.1f}x); goal 100,000 rows/s:"
          f" {'met' if lagd_rate >= 100_000 else 'NOT met'}")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(decode_lagd, files)
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
