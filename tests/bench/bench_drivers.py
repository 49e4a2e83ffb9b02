"""Which MySQL client runs lagd's probe SELECTs cheapest: a side-by-side run.

The prefetcher's cost is client CPU per probe (lesson 2 of the prefetch
issue), so each driver runs the same probes on the same sandbox replica (table
in the buffer pool, so the server answers fast and the client's cost shows):
`SELECT 1 FROM t FORCE INDEX (PRIMARY) WHERE id IN (16 ids)`, over N
concurrent connections. It prints probes per second and client CPU
microseconds per probe (this process: one core at most for asyncio).

    .venv/bin/python -m tests.bench.bench_drivers [--probes 20000] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import pymysql

from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.bench.bench_prefetch import _cpu_seconds

SQL = "SELECT 1 FROM t FORCE INDEX (PRIMARY) WHERE id IN ({})".format(", ".join(["%s"] * 16))
ROWS = 100_000


def probes(n: int, seed: int = 7) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(1, ROWS) for _ in range(16)] for _ in range(n)]


def run_pymysql_threads(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    it = iter(work)
    lock = threading.Lock()

    def worker() -> None:
        c = pymysql.connect(**dsn, database="bench", autocommit=True)
        try:
            with c.cursor() as cur:
                while True:
                    with lock:
                        ids = next(it, None)
                    if ids is None:
                        return
                    cur.execute(SQL, ids)
                    cur.fetchall()
        finally:
            c.close()

    threads = [threading.Thread(target=worker) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def _run_async(connect: Callable[[], Awaitable[Any]], work: list[list[int]], conns: int) -> None:
    queue: asyncio.Queue[list[int]] = asyncio.Queue()
    for ids in work:
        queue.put_nowait(ids)

    async def worker() -> None:
        c = await connect()
        try:
            async with c.cursor() as cur:
                while not queue.empty():
                    ids = queue.get_nowait()
                    await cur.execute(SQL, ids)
                    await cur.fetchall()
        finally:
            c.close()

    await asyncio.gather(*(worker() for _ in range(conns)))


def run_asyncmy(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    import asyncmy  # type: ignore[import-untyped]  # noqa: PLC0415 - only when measured

    async def connect() -> Any:
        return await asyncmy.connect(**dsn, database="bench", autocommit=True)

    asyncio.run(_run_async(connect, work, conns))


def run_asyncmy_prepared(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    import asyncmy  # noqa: PLC0415 - only when measured

    async def connect() -> Any:
        # asyncmy's statement cache: each probe text prepared once per
        # connection, then COM_STMT_EXECUTE (binary protocol, no escaping,
        # and no parse on the server).
        return await asyncmy.connect(**dsn, database="bench", autocommit=True, stmt_cache_size=16)

    asyncio.run(_run_async(connect, work, conns))


def run_aiomysql(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    import aiomysql  # type: ignore[import-untyped]  # noqa: PLC0415 - only when measured

    async def connect() -> Any:
        return await aiomysql.connect(**dsn, db="bench", autocommit=True)

    asyncio.run(_run_async(connect, work, conns))


def run_lagd_pool(dsn: dict[str, Any], work: list[list[int]], conns: int,
                  loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
                  text: bool = False, texts: int = 1, hot: int | None = None) -> None:
    """lagd's own probe path: prefetch.pool.ProbePool (queue, session setup, watchdog,
    prepared statements), on asyncio's event loop or on the one lagd run picks.
    ``text``: the keys in the probe's text, as statement and INSERT-entry probes carry
    the literals of the statement (a plain query, its rows counted as they stream).
    ``texts``: the probes cycle over that many texts (``SELECT <i> ...``), as probes of
    many tables and indexes do; ``hot``: how many of them may run prepared
    (pool.HotTexts; None: the pool's own choice)."""
    import asyncmy  # noqa: PLC0415 - only when measured

    from lagd.prefetch.pool import HotTexts, ProbePool  # noqa: PLC0415

    class Probe(NamedTuple):
        sql: str
        params: tuple[Any, ...]

    async def go() -> None:
        finished, done = asyncio.Event(), [0]

        async def connect(prepared: int = 0) -> Any:
            return await asyncmy.connect(**dsn, database="bench", autocommit=True, stmt_cache_size=prepared)

        def on_done(_probe: Any, _tag: Any, outcome: Any) -> None:
            assert outcome.status == "ok", outcome
            done[0] += 1
            if done[0] == len(work):
                finished.set()

        pool = ProbePool(connect, mariadb=True, size=conns, timeout_ms=5000, on_done=on_done,
                         queue_limit=len(work))
        if hot is not None:
            pool._hot = HotTexts(most=hot)  # the measured alternative
        pool.start()
        for i, ids in enumerate(work):
            sql = SQL.replace("SELECT 1", f"SELECT {i % texts + 1}", 1)
            pool.submit(Probe(sql % tuple(ids), ()) if text else Probe(sql, tuple(ids)))
        await finished.wait()
        await pool.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(go())


def run_lagd_pool_lagd_loop(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    from lagd.daemon.main import loop_factory  # noqa: PLC0415

    run_lagd_pool(dsn, work, conns, loop_factory())


def run_lagd_pool_text(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    from lagd.daemon.main import loop_factory  # noqa: PLC0415

    run_lagd_pool(dsn, work, conns, loop_factory(), text=True)


def run_lagd_pool_many(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    from lagd.daemon.main import loop_factory  # noqa: PLC0415

    run_lagd_pool(dsn, work, conns, loop_factory(), texts=64)


def run_lagd_pool_many_prepared(dsn: dict[str, Any], work: list[list[int]], conns: int) -> None:
    from lagd.daemon.main import loop_factory  # noqa: PLC0415

    run_lagd_pool(dsn, work, conns, loop_factory(), texts=64, hot=1 << 30)


DRIVERS = {"pymysql+threads": run_pymysql_threads, "asyncmy": run_asyncmy,
           "asyncmy+prepared": run_asyncmy_prepared, "aiomysql": run_aiomysql,
           "lagd-pool": run_lagd_pool, "lagd-pool+lagd-loop": run_lagd_pool_lagd_loop,
           "lagd-pool+text": run_lagd_pool_text, "lagd-pool+64-texts": run_lagd_pool_many,
           "lagd-pool+64-texts-all-prepared": run_lagd_pool_many_prepared}



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=20_000)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--drivers", default=",".join(DRIVERS), help=f"of {','.join(DRIVERS)}")
    args = ap.parse_args()
    with Sandbox(SandboxConfig(replica_buffer_pool_mb=128)) as sb:
        sb.source.query("CREATE DATABASE bench")
        sb.source.query("CREATE TABLE bench.t (id INT PRIMARY KEY, k INT, c CHAR(120))")
        conn = sb.source.connect("bench")
        with conn.cursor() as cur:
            for lo in range(1, ROWS + 1, 5000):
                cur.executemany("INSERT INTO t VALUES (%s, %s, 'c')",
                                [(i, i) for i in range(lo, lo + 5000)])
        conn.close()
        sb.wait_caught_up(timeout=120)
        dsn = sb.replica().dsn.as_kwargs()
        work = probes(args.probes)
        run_pymysql_threads(dsn, work[:2000], args.connections)  # warm the pool
        results: dict[str, dict[str, float]] = {}
        cpus: dict[str, list[float]] = {}
        for _ in range(args.rounds):  # interleaved, best of rounds: the machine is noisy
            for name in args.drivers.split(","):
                fn = DRIVERS[name]
                w0, c0, s0 = time.perf_counter(), time.process_time(), _cpu_seconds(sb.replica().pid)
                fn(dsn, work, args.connections)
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                server = _cpu_seconds(sb.replica().pid) - s0
                cpus.setdefault(name, []).append(1e6 * cpu / args.probes)
                best = results.get(name)
                if best is None or cpu < best["cpu_s"]:
                    results[name] = {"wall_s": wall, "cpu_s": cpu, "server_cpu_s": server}
    print(f"{args.probes} probes of 16 ids, {args.connections} connections, best of {args.rounds}")
    print(f"{'driver':<22}{'probes/s':>10}{'client CPU us/probe':>22}{'server CPU us/probe':>22}"
          "   client CPU us/probe: median (spread)")
    for name, r in results.items():
        c = sorted(cpus[name])
        print(f"{name:<22}{args.probes / r['wall_s']:>10,.0f}{1e6 * r['cpu_s'] / args.probes:>22.1f}"
              f"{1e6 * r['server_cpu_s'] / args.probes:>22.1f}"
              f"   {statistics.median(c):.1f} ({c[0]:.1f}-{c[-1]:.1f})")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
