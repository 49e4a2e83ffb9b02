"""Build a running prefetch engine from plain settings (the daemon and benchmarks use this)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from lagd.errors import LagdError
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.monitor import ReplicaMonitor
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.pool import ProbePool
from lagd.prefetch.stall import StallMonitor
from lagd.relaylog import InformationSchemaResolver, LogFiles, RelayLogReader, RelayPosition


@dataclass(frozen=True, slots=True)
class PrefetchOptions:
    # Defaults from tests/bench/bench_prefetch.py (docs/prefetch.md); the
    # daemon takes them from its config, whose defaults are the same.
    connections: int = 32
    max_keys_per_probe: int = 16
    statement_timeout_ms: int = 500
    min_lead_transactions: int = 100
    max_lead_transactions: int = 5000
    max_lead_bytes: int = 64 << 20
    max_lead_seconds: float = 30.0
    buffer_pool_share: float = 0.25
    adaptive: bool = True
    evaluate_window_seconds: float = 10.0
    schemas: tuple[str, ...] = ()
    exclude_schemas: tuple[str, ...] = ("mysql", "sys", "performance_schema", "information_schema")


def relay_log_index(conn: Any, override: str = "") -> Path:
    """Where the replica's relay-log index is: the config, else the server says."""
    if override:
        return Path(override)
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.relay_log_index AS i, @@GLOBAL.relay_log_basename AS b,"
                    " @@GLOBAL.datadir AS d")
        row = cur.fetchone()
    index, basename, datadir = (row["i"], row["b"], row["d"]) if isinstance(row, dict) else row
    if index:
        p = Path(index)
        return p if p.is_absolute() else Path(datadir) / p
    if basename:
        return Path(f"{basename}.index")
    raise LagdError("the server does not say where its relay-log index is",
                    fix="set replica.relay_log_index in the config")


def check_readable(index: Path) -> str | None:
    """Why the relay log cannot be read by this process, or None."""
    if not index.exists():
        try:
            index.parent.stat()
        except PermissionError:
            return (f"cannot enter {index.parent} (permission denied): add the lagd user to the "
                    "mysql group (SupplementaryGroups=mysql in the unit)")
        except FileNotFoundError:
            return (f"{index} does not exist (nor does {index.parent}): lagd must run on the replica's "
                    "host, and replica.relay_log_index must point at the relay-log index")
        return f"{index} does not exist: check replica.relay_log_index (or relay_log on the server)"
    if not os.access(index, os.R_OK):
        return (f"{index} is not readable by this user: add the lagd user to the mysql group "
                "(SupplementaryGroups=mysql in the unit)")
    return None


async def build_engine(endpoint: Endpoint, opts: PrefetchOptions, batcher_factory: Callable[..., Any],
                       *, index: Path, mariadb: bool, pool_bytes: int) -> PrefetchEngine:
    """A prefetch engine whose cursor starts at the SQL thread's position."""
    monitor = ReplicaMonitor(endpoint.async_connect())
    sample = await monitor.poll()
    if sample.status is None:
        raise LagdError(f"cannot read the replica's status: {sample.error}",
                        fix="check replica.* in the config and the lagd user's grants")
    start = RelayPosition(sample.status.relay_log_file, sample.status.relay_log_pos)

    def resync() -> RelayPosition:
        conn = pymysql.connect(**endpoint.pymysql_kwargs())
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute("SHOW SLAVE STATUS" if mariadb else "SHOW REPLICA STATUS")
                row = cur.fetchone() or {}
        finally:
            conn.close()
        file = row.get("Relay_Log_File") or ""
        return RelayPosition(str(file), int(row.get("Relay_Log_Pos") or 4))

    # The resolver runs in the engine's cursor thread: a hung replica costs it one read timeout.
    resolver = InformationSchemaResolver(lambda: pymysql.connect(
        **endpoint.pymysql_kwargs(), read_timeout=10.0, write_timeout=10.0))
    reader = RelayLogReader(LogFiles(index), start, resolver, resync=resync, chunk_size=256 * 1024)
    pool = ProbePool(endpoint.async_connect(), mariadb=mariadb, size=opts.connections,
                     timeout_ms=opts.statement_timeout_ms, on_done=lambda *_: None,
                     queue_limit=opts.connections * 8)
    limits = control.limits_for(opts.min_lead_transactions, opts.max_lead_transactions,
                                opts.max_lead_bytes, opts.max_lead_seconds, pool_bytes,
                                opts.buffer_pool_share)
    tuning = control.Tuning(opts.min_lead_transactions, opts.max_lead_transactions,
                            max(1, opts.connections // 2), opts.connections, opts.adaptive)
    return PrefetchEngine(reader, monitor, pool, batcher_factory(opts), limits, tuning,
                          window_seconds=opts.evaluate_window_seconds, stall_monitor=StallMonitor())
