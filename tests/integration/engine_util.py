"""The prefetch engine run on the sandbox's replica while a session there holds a row the
SQL thread needs: the cursor reads ahead of a SQL thread that waits (shared by tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lagd.mysql.endpoint import Endpoint
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine
from lagd.sandbox.pair import Sandbox


async def run_held(sb: Sandbox, schema: str, held: str, opts: PrefetchOptions, pool_bytes: int,
                   seen: Callable[[PrefetchEngine, Any], None],
                   enough: Callable[[PrefetchEngine], bool]) -> PrefetchEngine:
    """Start the engine, take ``held`` (a locking SELECT) on the replica, start the SQL
    thread, hand every probe submitted to ``seen``, release once ``enough`` (or after
    30 s), and stop the engine once the replica has caught up."""
    dsn = sb.replica().dsn
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user, dsn.password)
    # Every key probed (near_span=0): these tests count what each key's probe reads.
    engine = await build_engine(endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe,
                                                                       near_span=0),
                                index=sb.relay_log_index(), mariadb=True, pool_bytes=pool_bytes)
    submit = engine.pool.submit

    def recording(probe: Any, tag: Any = None) -> bool:
        seen(engine, probe)
        return submit(probe, tag)

    engine.pool.submit = recording  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    await asyncio.sleep(0.5)
    blocker = sb.replica().connect(schema, autocommit=False)
    try:
        with blocker.cursor() as cur:
            cur.execute(held)
            await asyncio.to_thread(sb.start_sql_thread)
            for _ in range(300):
                if enough(engine):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
        blocker.commit()
    finally:
        blocker.close()
    await asyncio.to_thread(sb.wait_caught_up, 60)
    await asyncio.sleep(0.3)
    stop.set()
    await task
    return engine
