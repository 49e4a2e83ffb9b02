"""Build a running prefetch engine from plain settings (the daemon and benchmarks use this)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lagd.errors import LagdError
from lagd.mysql.endpoint import Endpoint, local_socket
from lagd.mysql.monitor import ReplicaMonitor
from lagd.mysql.replica import relay_log_index
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.pool import ProbePool
from lagd.prefetch.stall import StallMonitor
from lagd.relaylog import InformationSchemaResolver, LogFiles, RelayLogError, RelayLogReader, RelayPosition

# relay_log_index lives in lagd.mysql.replica; re-exported while callers move there.
__all__ = ["PrefetchOptions", "build_engine", "check_readable", "information_schema_connect",
           "relay_log_index"]

log = logging.getLogger("lagd.prefetch")


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
    buffer_pool_share: float = 0.08
    adaptive: bool = True
    evaluate_window_seconds: float = 10.0
    schemas: tuple[str, ...] = ()
    exclude_schemas: tuple[str, ...] = ("mysql", "sys", "performance_schema", "information_schema")


def check_readable(index: Path) -> str | None:
    """Why the relay log cannot be read by this process, or None.

    A missing index in a directory this process can enter and list is not a
    permission problem: the replica has no relay log (RESET SLAVE removes
    it), or the config points elsewhere.
    """
    if not index.exists():
        try:
            names = os.listdir(index.parent)
        except PermissionError:
            return (f"cannot enter {index.parent} (permission denied): add the lagd user to the "
                    "mysql group (SupplementaryGroups=mysql in the unit)")
        except FileNotFoundError:
            return (f"{index} does not exist (nor does {index.parent}): lagd must run on the replica's "
                    "host, and replica.relay_log_index must point at the relay-log index")
        except OSError as e:
            return f"cannot list {index.parent}: {e.strerror}"
        others = sorted(n for n in names if n.endswith(".index") and n != index.name)
        hint = f" ({index.parent} has {', '.join(others[:3])})" if others else ""
        return (f"the relay log index {index} does not exist: the replica has no relay log (RESET SLAVE?) "
                f"or replica.relay_log_index points elsewhere{hint}; lagd retries until it appears")
    if not os.access(index, os.R_OK):
        return (f"{index} is not readable by this user: add the lagd user to the mysql group "
                "(SupplementaryGroups=mysql in the unit)")
    return None


def information_schema_connect(endpoint: Endpoint) -> Callable[[], Any]:
    """Connections for :class:`InformationSchemaResolver`: hardened, and short
    timeouts, because the reader may ask while the event loop waits (a hung
    replica then costs one connect or one read per resolver pause)."""
    quick = replace(endpoint, connect_timeout=min(endpoint.connect_timeout, 2.0))
    return lambda: quick.connect_blocking(statement_timeout=2.0, read_timeout=3.0)


async def _probe_endpoint(endpoint: Endpoint, monitor: ReplicaMonitor) -> Endpoint:
    """Where the probes connect: the replica's own unix socket when a session
    through it is the same server with the same grants (mysql.endpoint.local_socket)."""
    via, why = await local_socket(endpoint, monitor.query)
    log.info("probe connections: %s", why if via is not None else f"{endpoint.address} ({why})")
    return via or endpoint


async def build_engine(endpoint: Endpoint, opts: PrefetchOptions, batcher_factory: Callable[..., Any],
                       *, index: Path, mariadb: bool, pool_bytes: int, channel: str = "",
                       stall_monitor: StallMonitor | None = None,
                       monitor: ReplicaMonitor | None = None) -> PrefetchEngine:
    """A prefetch engine whose cursor starts at the SQL thread's position.

    ``stall_monitor``: the daemon's own, which samples and finds the applier
    threads itself; without it the engine makes and runs one of its own.
    ``monitor``: the daemon's status monitor, borrowed (one connection polls the
    replica, one voice says its faults; its owner closes it); without it the
    engine opens one of its own (benchmarks, tests), which nobody else polls."""
    monitor = monitor or ReplicaMonitor.of(endpoint, channel)
    sample = await monitor.poll()
    if sample.status is None:
        raise LagdError(f"cannot read the replica's status: {sample.error}",
                        fix="check replica.* in the config and the lagd user's grants")
    start = RelayPosition(sample.status.relay_log_file, sample.status.relay_log_pos)

    def resync() -> RelayPosition:
        # The engine polls the monitor many times a second: its latest status
        # is fresh, and reading it costs the event loop nothing.
        sample = monitor.latest
        latest = sample.status if sample else None
        if latest is None:
            why = sample.error if sample else "no poll yet"
            raise RelayLogError(f"no replica status to resync from ({why})")
        return RelayPosition(latest.relay_log_file, latest.relay_log_pos)

    resolver = InformationSchemaResolver(information_schema_connect(endpoint))
    reader = RelayLogReader(LogFiles(index), start, resolver, resync=resync, chunk_size=256 * 1024)
    probes = await _probe_endpoint(endpoint, monitor)
    pool = ProbePool(probes.async_connect(), mariadb=mariadb, size=opts.connections,
                     timeout_ms=opts.statement_timeout_ms, on_done=lambda *_: None,
                     queue_limit=opts.connections * 8, where=endpoint.where,
                     connect_timeout=endpoint.connect_timeout)
    limits = control.limits_for(opts.min_lead_transactions, opts.max_lead_transactions,
                                opts.max_lead_bytes, opts.max_lead_seconds, pool_bytes,
                                opts.buffer_pool_share)
    tuning = control.Tuning(opts.min_lead_transactions, opts.max_lead_transactions,
                            max(1, opts.connections // 2), opts.connections, opts.adaptive)
    return PrefetchEngine(reader, monitor, pool, batcher_factory(opts), limits, tuning,
                          window_seconds=opts.evaluate_window_seconds,
                          stall_monitor=stall_monitor or StallMonitor(),
                          stall_shared=stall_monitor is not None)
