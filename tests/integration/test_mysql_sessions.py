"""Every kind of session lagd opens is hardened, read on the server itself.

Each session asks the server for its own ``tx_read_only``,
``max_statement_time`` and ``lock_wait_timeout``: READ ONLY with both
timeouts on the replica, and only the timeouts for the heartbeat writer,
which writes on the source.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lagd.cli import doctor
from lagd.config import load_settings
from lagd.errors import NotAReplicaError
from lagd.heartbeat.cli import SourceDsn, source_connect
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.monitor import ReplicaMonitor, Sample
from lagd.mysql.session import BlockingSession, query
from lagd.prefetch.pool import ProbePool
from lagd.prefetch.service import information_schema_connect
from lagd.relaylog import InformationSchemaResolver
from lagd.sandbox.pair import Sandbox

VARIABLES = ("SELECT @@session.tx_read_only AS read_only, @@session.max_statement_time AS statement_timeout,"
             " @@session.lock_wait_timeout AS lock_wait")


def endpoint(sandbox: Sandbox, role: str = "replica") -> Endpoint:
    server = sandbox.replica() if role == "replica" else sandbox.source
    d = server.dsn
    return Endpoint(d.host, d.port, d.user, d.password, role=role)


def settings_of(view: dict[str, Any]) -> tuple[int, float, int]:
    return int(view["read_only"]), float(view["statement_timeout"]), int(view["lock_wait"])


def hardened(view: dict[str, Any], *, read_only: bool = True) -> None:
    ro, statement_timeout, lock_wait = settings_of(view)
    assert ro == int(read_only)
    assert 0 < statement_timeout <= 10  # 0 would mean "no limit"
    assert 1 <= lock_wait <= 5  # the server's default is a year


def test_blocking_session(sandbox: Sandbox) -> None:
    async def main() -> list[dict[str, Any]]:
        session = BlockingSession(endpoint(sandbox), statement_timeout=3.0)
        try:
            return await session.query(VARIABLES)
        finally:
            session.close()

    [view] = asyncio.run(main())
    hardened(view)
    assert settings_of(view)[1] == pytest.approx(3.0)


def test_monitor(sandbox: Sandbox) -> None:
    async def main() -> list[dict[str, Any]]:
        monitor = ReplicaMonitor.of(endpoint(sandbox))
        try:
            assert (await monitor.poll()).status is not None
            return await monitor.query(VARIABLES)
        finally:
            await monitor.close()

    [view] = asyncio.run(main())
    hardened(view)


def test_monitor_of_a_channel_the_replica_does_not_have(sandbox: Sandbox) -> None:
    async def main() -> Sample:
        monitor = ReplicaMonitor.of(endpoint(sandbox), "nope")
        try:
            return await monitor.poll()
        finally:
            await monitor.close()

    sample = asyncio.run(main())
    assert sample.status is None and sample.error is not None and "no replication channel" in sample.error
    # The daemon says the fix the fault carries, not one guessed from the words.
    assert isinstance(sample.fault, NotAReplicaError) and "replica.channel" in (sample.fault.fix or "")


def test_information_schema_resolver(sandbox: Sandbox) -> None:
    resolver = InformationSchemaResolver(information_schema_connect(endpoint(sandbox)))
    try:
        resolver._query("mysql", "user")  # opens the session the reader's lookups use
        [view] = query(resolver._conn, VARIABLES)
    finally:
        resolver.close()
    hardened(view)


def test_probe_pool(sandbox: Sandbox) -> None:
    async def main() -> list[dict[str, Any]]:
        pool = ProbePool(endpoint(sandbox).async_connect(), mariadb=True, size=1, timeout_ms=500,
                         on_done=lambda *_: None)
        conn = await pool.open_session()
        try:
            async with conn.cursor() as cur:
                await cur.execute(VARIABLES + ", @@session.tx_isolation AS iso, @@session.time_zone AS tz")
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]
        finally:
            conn.close()

    [view] = asyncio.run(main())
    hardened(view)
    assert settings_of(view)[1] == pytest.approx(0.5)
    assert view["iso"] == "READ-UNCOMMITTED" and view["tz"] == "+00:00"


def test_lagctl(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = sandbox.replica().dsn
    cfg = tmp_path / "lagd.toml"
    cfg.write_text(f'[replica]\nhost = "{d.host}"\nport = {d.port}\nuser = "{d.user}"\n'
                   'password_env = "LAGD_PASSWORD"\n')
    monkeypatch.setenv("LAGD_PASSWORD", d.password)
    conn = doctor.connect(load_settings(cfg).replica)  # lagctl doctor and lagctl advise
    try:
        [view] = query(conn, VARIABLES)
    finally:
        conn.close()
    hardened(view)


def test_heartbeat_writer_has_timeouts_but_writes(sandbox: Sandbox) -> None:
    d = sandbox.source.dsn
    conn = source_connect(SourceDsn(d.host, d.port, d.user), d.password)()
    try:
        [view] = query(conn, VARIABLES)
    finally:
        conn.close()
    hardened(view, read_only=False)
