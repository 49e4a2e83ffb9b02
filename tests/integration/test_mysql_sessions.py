"""Every kind of session lagd opens is hardened, read on the server itself.

Each session asks the server for its own ``tx_read_only``,
``max_statement_time`` and ``lock_wait_timeout``: READ ONLY with both
timeouts on the replica, and only the timeouts for the heartbeat writer,
which writes on the source.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lagd.cli import doctor
from lagd.config import load_settings
from lagd.errors import NotAReplicaError
from lagd.heartbeat.cli import SourceDsn, source_connect
from lagd.mysql.endpoint import IDENTITY_SQL, Endpoint, local_socket
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.monitor import ReplicaMonitor, Sample
from lagd.mysql.session import BlockingSession, query
from lagd.prefetch.pool import HotTexts, ProbePool
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


def test_monitor_reads_the_purge_history_with_process_only(sandbox: Sandbox) -> None:
    """InnoDB's history length on the real server; without PROCESS the server refuses, and
    that is an error the engine reads as unknown (never 0)."""
    stmts = ["SET SESSION sql_log_bin = 0",
             "CREATE USER IF NOT EXISTS 'lagdhist'@'127.0.0.1' IDENTIFIED BY 'pw'",
             "GRANT SELECT, SLAVE MONITOR ON *.* TO 'lagdhist'@'127.0.0.1'"]
    for sql in stmts:
        sandbox.replica().query(sql)

    async def history(ep: Endpoint) -> int | None:
        monitor = ReplicaMonitor.of(ep)
        try:
            return await monitor.history_length()
        finally:
            await monitor.close()

    ep = replace(endpoint(sandbox), user="lagdhist", password="pw")
    try:
        with pytest.raises(DatabaseError) as denied:
            asyncio.run(history(ep))
        assert denied.value.kind == Kind.DENIED
        sandbox.replica().query("GRANT PROCESS ON *.* TO 'lagdhist'@'127.0.0.1'")
        n = asyncio.run(history(ep))
        assert isinstance(n, int) and n >= 0
    finally:
        sandbox.replica().query("DROP USER IF EXISTS 'lagdhist'@'127.0.0.1'")


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


class _Probe:
    def __init__(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.sql, self.params = sql, params


def test_probe_pool_prepares_row_probes_and_keeps_statement_probes_text(sandbox: Sandbox,
                                                                         schema: str) -> None:
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, c VARCHAR(10))")
    sandbox.source.query(f"INSERT INTO `{schema}`.t VALUES (1, 'a%b'), (2, 'ab'), (3, 'xa%')")
    sandbox.wait_caught_up(timeout=60)
    replica = sandbox.replica()

    def status() -> dict[str, int]:
        rows = replica.query("SHOW GLOBAL STATUS WHERE Variable_name IN "
                             "('Com_stmt_prepare', 'Com_stmt_execute')")
        return {r["Variable_name"]: int(r["Value"]) for r in rows}

    row = f"SELECT 1 FROM `{schema}`.t FORCE INDEX (PRIMARY) WHERE id IN (%s, %s)"
    probes = [_Probe(row, (1, 2)), _Probe(row, (2, 3)), _Probe(row, (3, 3)),
              # a statement probe: its values in its text, a literal % written %%
              _Probe(f"SELECT 1 FROM `{schema}`.t WHERE c LIKE 'a%%'"),
              # the server-side timeout holds for a prepared probe too
              _Probe(f"SELECT SLEEP(%s) FROM `{schema}`.t WHERE id IN (%s)", (3, 1))]

    before = status()
    done, _ = asyncio.run(_run_probes(sandbox, probes, 500))
    after = status()
    assert done[:4] == [("ok", 2), ("ok", 2), ("ok", 1), ("ok", 2)], done
    assert done[4][0] == "timeout", done
    # Two texts with arguments, each prepared once; every one of their probes executed.
    assert after["Com_stmt_prepare"] - before["Com_stmt_prepare"] == 2
    assert after["Com_stmt_execute"] - before["Com_stmt_execute"] == 4


def test_probe_pool_sends_texts_past_its_hot_ones_as_plain_queries(sandbox: Sandbox, schema: str) -> None:
    """Past the texts a connection keeps prepared every probe would prepare its text again:
    those the pool does not count among the hot ones (HotTexts) go as plain queries, their
    arguments written in by the driver, and find the same rows."""
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id BIGINT UNSIGNED PRIMARY KEY, c VARCHAR(10))")
    sandbox.source.query(f"INSERT INTO `{schema}`.t VALUES (1, 'a'), (2, 'b'), (18446744073709551615, 'c')")
    sandbox.wait_caught_up(timeout=60)
    replica = sandbox.replica()

    def prepares() -> int:
        return int(replica.query("SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'")[0]["Value"])

    hot = f"SELECT 1 FROM `{schema}`.t FORCE INDEX (PRIMARY) WHERE id IN (%s, %s)"
    cold = f"SELECT 2 FROM `{schema}`.t FORCE INDEX (PRIMARY) WHERE id IN (%s, %s)"
    probes = [_Probe(hot, (1, 2)), _Probe(cold, (2, 18446744073709551615)), _Probe(cold, (3, 1)),
              _Probe(hot, (18446744073709551615, -1))]

    before = prepares()
    done, pool = asyncio.run(_run_probes(sandbox, probes, 2000, HotTexts(most=1)))  # the first text hot
    assert done == [("ok", 2), ("ok", 2), ("ok", 1), ("ok", 1)], done
    assert pool.counters.unprepared == 2 and prepares() - before == 1


async def _run_probes(sandbox: Sandbox, probes: list[_Probe], timeout_ms: int,
                      hot: HotTexts | None = None) -> tuple[list[tuple[str, int]], ProbePool]:
    """``probes`` through a one-session pool, in order: each one's (status, rows)."""
    done: list[tuple[str, int]] = []
    pool = ProbePool(endpoint(sandbox).async_connect(), mariadb=True, size=1, timeout_ms=timeout_ms,
                     on_done=lambda _p, _t, o: done.append((o.status, o.rows)), queue_limit=16)
    if hot is not None:
        pool._hot = hot
    pool.start()
    try:
        for p in probes:
            assert pool.submit(p)
        while len(done) < len(probes):
            await asyncio.sleep(0.05)
    finally:
        await pool.close()
    return done, pool


def _local_socket(e: Endpoint, **instead: Any) -> tuple[Endpoint | None, str]:
    """local_socket as the engine asks it, over a monitor's TCP session; ``instead``
    replaces values of that session's identity row."""
    async def main() -> tuple[Endpoint | None, str]:
        mon = ReplicaMonitor.of(e)

        async def query(sql: str) -> list[dict[str, Any]]:
            rows = await mon.query(sql)
            return [{**rows[0], **instead}] if sql == IDENTITY_SQL else rows
        try:
            return await local_socket(e, query)
        finally:
            await mon.close()
    return asyncio.run(main())


def test_probes_take_the_replicas_own_socket_only_to_the_same_server_and_grants(sandbox: Sandbox) -> None:
    tcp = endpoint(sandbox)
    via, why = _local_socket(tcp)
    assert via is not None and via.socket == str(sandbox.replica().socket_path), why
    # A socket that reaches another server (a container's /run, say): TCP it stays.
    other, why = _local_socket(tcp, server_id=999)
    assert other is None and "another server" in why
    assert _local_socket(replace(tcp, host="db2.example"))[0] is None
    # user@localhost is another account, with other grants.
    stmts = ["SET SESSION sql_log_bin = 0",
             "CREATE USER IF NOT EXISTS 'lagdsock'@'127.0.0.1' IDENTIFIED BY 'pw'",
             "GRANT SELECT, PROCESS ON *.* TO 'lagdsock'@'127.0.0.1'",
             "CREATE USER IF NOT EXISTS 'lagdsock'@'localhost' IDENTIFIED BY 'pw'"]
    for sql in stmts:
        sandbox.replica().query(sql)
    try:
        via, why = _local_socket(replace(tcp, user="lagdsock", password="pw"))
        assert via is None and "grants differ" in why, why
    finally:
        sandbox.replica().query("DROP USER IF EXISTS 'lagdsock'@'127.0.0.1', 'lagdsock'@'localhost'")


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
