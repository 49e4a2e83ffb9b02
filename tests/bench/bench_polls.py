"""What one look at the replica costs lagd and the server: the full status against the
SQL thread's position alone (the prefetch engine's position poll, prefetch.md).

On a sandbox replica, rounds of N calls of each, interleaved; lagd's CPU is this
process's (the event loop lagd runs), the server's is the replica's mariadbd from /proc.

    .venv/bin/python -m tests.bench.bench_polls [--calls 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncmy  # type: ignore[import-untyped]

from lagd.daemon.main import run_async
from lagd.mysql.monitor import ReplicaMonitor
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.bench.bench_prefetch import _cpu_seconds

Costs = dict[str, list[tuple[float, float]]]  # per case: (lagd µs, server µs) a call, each round


async def _measure(dsn: dict[str, Any], server_pid: int, calls: int, rounds: int) -> Costs:
    async def connect() -> Any:
        return await asyncmy.connect(**dsn, autocommit=True)

    monitor = ReplicaMonitor(connect)
    first = await monitor.poll()
    assert first.status is not None, first.error
    status = first.status

    async def moved() -> None:  # what a position poll adds: the status moved to a transaction's end
        dataclasses.replace(status, relay_log_file="relay.000002", relay_log_pos=4096)

    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "full status (ReplicaMonitor.poll)": monitor.poll,
        "position (ReplicaMonitor.applied_gtids)": monitor.applied_gtids,
        "the status moved (dataclasses.replace)": moved,
    }
    out: Costs = {name: [] for name in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            own, server = time.process_time(), _cpu_seconds(server_pid)
            for _ in range(calls):
                await call()
            own, server = time.process_time() - own, _cpu_seconds(server_pid) - server
            out[name].append((own / calls * 1e6, server / calls * 1e6))
    await monitor.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with Sandbox(SandboxConfig(replicas=1)) as sb:
        replica = sb.replica()
        assert replica.pid is not None
        results = run_async(_measure(replica.dsn.as_kwargs(), replica.pid, args.calls, args.rounds))
    print(f"{'one call':42s} {'lagd µs':>9s} {'server µs':>10s}"
          f"   (median of {args.rounds} rounds of {args.calls})")
    for name, rows in results.items():
        own = statistics.median(r[0] for r in rows)
        server = statistics.median(r[1] for r in rows)
        print(f"{name:42s} {own:9.1f} {server:10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
