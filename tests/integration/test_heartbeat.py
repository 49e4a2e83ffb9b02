"""lagd.heartbeat on a live MariaDB source/replica pair (lagd.sandbox.pair).

The writer runs as root over the source's socket (it writes); everything that
reads does so as the ``lagd`` user over TCP, as the daemon would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from click.testing import CliRunner
from pymysql.connections import Connection

from lagd.heartbeat import (
    HeartbeatError,
    HeartbeatRow,
    HeartbeatTableMissingError,
    HeartbeatWriter,
    create_table_sql,
    heartbeat_command,
    read_heartbeat,
)
from lagd.lag import LagInputs, LagMethod, LagTracker, ReplicaState
from lagd.mysql.replica import fetch_replica_status
from lagd.sandbox.pair import Sandbox, Server


def lagd_conn(server: Server) -> Connection[Any]:
    return pymysql.connect(**server.dsn.as_kwargs(), autocommit=True)


def server_id(server: Server) -> int:
    return int(server.query("SELECT @@server_id AS id")[0]["id"])


@pytest.fixture
def replica_reader(sandbox: Sandbox) -> Iterator[Connection[Any]]:
    conn = lagd_conn(sandbox.replica())
    try:
        yield conn
    finally:
        conn.close()


def read_if_there(conn: Connection[Any], table: str, sid: int) -> HeartbeatRow | None:
    """The heartbeat row, or None while the table has not reached this server."""
    try:
        return read_heartbeat(conn, table, sid)
    except HeartbeatTableMissingError:
        return None


def wait_for(what: str, probe: Callable[[], HeartbeatRow | None], timeout: float = 30.0) -> HeartbeatRow:
    """Poll until ``probe`` returns a row; a deadline, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        row = probe()
        if row is not None:
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def restore_read_only(sandbox: Sandbox) -> Iterator[None]:
    servers = [sandbox.source, sandbox.replica()]
    before = [int(s.query("SELECT @@global.read_only AS ro")[0]["ro"]) for s in servers]
    try:
        yield
    finally:
        for s, ro in zip(servers, before, strict=True):
            s.query(f"SET GLOBAL read_only = {ro}")


def test_writer_creates_pt_heartbeat_table_and_writes_utc(
    sandbox: Sandbox, schema: str, replica_reader: Connection[Any]
) -> None:
    table = f"{schema}.heartbeat"
    writer = HeartbeatWriter(sandbox.source.connect, table, create_table=True)
    source_reader = lagd_conn(sandbox.source)
    try:
        before = time.time()
        assert writer.beat()
        after = time.time()
        sid = server_id(sandbox.source)
        first = read_heartbeat(source_reader, table, sid)
        assert first is not None and first.server_id == sid
        # Written by this host's clock in UTC: between the two readings of it.
        assert before - 1e-6 <= first.ts <= after + 1e-6
        assert len(first.ts_text) == 26 and first.ts_text[10] == "T"
        assert first.file is not None and first.file.startswith("source-bin.")
        assert first.position is not None and first.position > 4

        assert writer.beat()
        second = read_heartbeat(source_reader, table, sid)
        assert second is not None and second.ts > first.ts
        rows = sandbox.source.query(f"SELECT COUNT(*) AS n FROM `{schema}`.heartbeat")
        assert rows[0]["n"] == 1  # one row per server, updated in place

        columns = sandbox.source.query(f"SHOW COLUMNS FROM `{schema}`.heartbeat")
        assert [(c["Field"], c["Type"], c["Null"], c["Key"]) for c in columns] == [
            ("ts", "varchar(26)", "NO", ""),
            ("server_id", "int(10) unsigned", "NO", "PRI"),
            ("file", "varchar(255)", "YES", ""),
            ("position", "bigint(20) unsigned", "YES", ""),
            ("relay_master_log_file", "varchar(255)", "YES", ""),
            ("exec_master_log_pos", "bigint(20) unsigned", "YES", ""),
        ]

        sandbox.wait_caught_up(timeout=30)
        on_replica = read_heartbeat(replica_reader, table, sid)
        assert on_replica == second
        assert read_heartbeat(replica_reader, table, None) == second  # newest row
        assert read_heartbeat(replica_reader, table, sid + 1000) is None
    finally:
        writer.close()
        source_reader.close()


def test_writer_pauses_on_a_read_only_replica(
    sandbox: Sandbox, schema: str, restore_read_only: None, caplog: pytest.LogCaptureFixture
) -> None:
    replica = sandbox.replica()
    replica.query("SET GLOBAL read_only = 1")
    writer = HeartbeatWriter(replica.connect, f"{schema}.heartbeat", create_table=True)
    try:
        with caplog.at_level(logging.INFO, logger="lagd.heartbeat"):
            assert [writer.beat() for _ in range(3)] == [False, False, False]
    finally:
        writer.close()
    assert writer.paused and writer.written == 0
    paused = [r for r in caplog.records if "paused" in r.getMessage()]
    assert len(paused) == 1 and "read_only=1" in paused[0].getMessage()
    # Not even the table was created on the replica.
    assert replica.query(f"SHOW TABLES FROM `{schema}` LIKE 'heartbeat'") == []


def test_writer_resumes_when_the_source_becomes_writable(
    sandbox: Sandbox, schema: str, restore_read_only: None, caplog: pytest.LogCaptureFixture
) -> None:
    writer = HeartbeatWriter(sandbox.source.connect, f"{schema}.heartbeat", create_table=True)
    try:
        with caplog.at_level(logging.INFO, logger="lagd.heartbeat"):
            assert writer.beat()
            sandbox.source.query("SET GLOBAL read_only = 1")  # demoted, e.g. during a switchover
            assert not writer.beat() and not writer.beat()
            sandbox.source.query("SET GLOBAL read_only = 0")
            assert writer.beat() and writer.beat()
    finally:
        writer.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("paused" in m for m in messages) == 1
    assert sum("resumed" in m for m in messages) == 1
    assert writer.written == 3


def test_missing_table_names_the_fix(sandbox: Sandbox, schema: str, replica_reader: Connection[Any]) -> None:
    sandbox.wait_caught_up(timeout=30)
    for table in (f"{schema}.no_such_table", "no_such_schema_hb.heartbeat"):
        with pytest.raises(HeartbeatTableMissingError) as e:
            read_heartbeat(replica_reader, table, None)
        assert table in e.value.message
        assert e.value.fix and "lagd heartbeat --source" in e.value.fix
        assert 'lag.heartbeat_table = ""' in e.value.fix

    for table in (f"{schema}.heartbeat", "no_such_schema_hb.heartbeat"):
        writer = HeartbeatWriter(sandbox.source.connect, table)
        try:
            with pytest.raises(HeartbeatTableMissingError) as e:
                writer.beat()
            assert e.value.fix and "--create-table" in e.value.fix
        finally:
            writer.close()


def test_command_reports_a_missing_table_in_one_line(sandbox: Sandbox, schema: str) -> None:
    dsn = sandbox.source.dsn
    source = f"mysql://{dsn.user}:{dsn.password}@{dsn.host}:{dsn.port}"
    result = CliRunner().invoke(heartbeat_command, ["--source", source, "--table", f"{schema}.heartbeat"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0] and "--create-table" in lines[0]


def test_heartbeat_lag_grows_while_the_sql_thread_is_stopped(
    sandbox: Sandbox, schema: str, replica_reader: Connection[Any]
) -> None:
    table = f"{schema}.heartbeat"
    sid = server_id(sandbox.source)
    writer = HeartbeatWriter(sandbox.source.connect, table, interval=0.25, create_table=True)
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), name="heartbeat-writer")
    thread.start()
    source_reader = lagd_conn(sandbox.source)
    try:
        sandbox.wait_caught_up(timeout=30)
        # The writer's thread creates the table: wait_caught_up can return before
        # it has, and the replica then has no table yet (a CI flake under load).
        wait_for("the heartbeat on the replica", lambda: read_if_there(replica_reader, table, sid))

        sandbox.stop_sql_thread()
        try:
            at_stop = read_heartbeat(replica_reader, table, sid)
            assert at_stop is not None
            time.sleep(3.0)  # the stop we measure, not a bound we assert on
            row = read_heartbeat(replica_reader, table, sid)
            now = time.time()
            assert row == at_stop  # the replica's row stands still while the SQL thread is stopped
            assert row is not None
            lag = now - row.ts
            source_row = read_heartbeat(source_reader, table, sid)
            assert source_row is not None
            print(f"heartbeat lag after stopping the SQL thread for ~3 s: {lag:.3f} s")
            print(f"source row is {source_row.ts - row.ts:.3f} s newer than the replica's")
            assert lag >= 2.0
            assert source_row.ts - row.ts >= 2.0  # the writer kept writing on the source

            status = fetch_replica_status(replica_reader)
            reading = LagTracker().update(
                LagInputs(now=now, monotonic=time.monotonic(), status=status, heartbeat=row)
            )
            print(
                f"state={reading.state} lag={reading.lag:.3f} s via {reading.lag_method}; sbm={reading.sbm}"
            )
            assert reading.state is ReplicaState.STOPPED
            assert reading.lag_method is LagMethod.HEARTBEAT and reading.lag == pytest.approx(lag)
            assert reading.sbm.seconds is None  # MariaDB reports NULL, never 0
            assert reading.eta == float("inf")
        finally:
            sandbox.start_sql_thread()
            sandbox.wait_caught_up(timeout=60)

        caught_up = wait_for(
            "a newer heartbeat on the replica",
            lambda: r if (r := read_heartbeat(replica_reader, table, sid)) and r.ts > row.ts else None,
        )
        after = time.time() - caught_up.ts
        print(f"heartbeat lag after the SQL thread caught up: {after:.3f} s")
        assert after < lag
    finally:
        stop.set()
        thread.join(timeout=30)
        source_reader.close()
    assert not thread.is_alive()
    assert writer.written >= 8  # about 4 per second for the seconds above


def test_table_privileges_are_enough_and_missing_ones_name_the_grant(sandbox: Sandbox, schema: str) -> None:
    table = f"{schema}.heartbeat"
    sandbox.source.query(create_table_sql(table))  # pt-heartbeat's definition, as a DBA would
    dsn = sandbox.source.dsn
    admin = sandbox.source.connect()
    try:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("CREATE USER 'hb_writer'@'127.0.0.1' IDENTIFIED BY 'hb'")
            cur.execute(f"GRANT SELECT, INSERT, UPDATE ON `{schema}`.* TO 'hb_writer'@'127.0.0.1'")

        def as_writer() -> Connection[Any]:
            return pymysql.connect(
                host=dsn.host, port=dsn.port, user="hb_writer", password="hb", autocommit=True
            )

        writer = HeartbeatWriter(as_writer, table)
        try:
            assert writer.beat() and writer.beat()
        finally:
            writer.close()
        reader = lagd_conn(sandbox.source)
        try:
            row = read_heartbeat(reader, table, server_id(sandbox.source))
        finally:
            reader.close()
        assert row is not None and row.file is None and row.position is None  # no BINLOG MONITOR: NULL

        # The lagd account may read but not write: the error names the grant.
        reader_only = HeartbeatWriter(lambda: lagd_conn(sandbox.source), table)
        try:
            with pytest.raises(HeartbeatError) as e:
                reader_only.beat()
            assert e.value.fix and e.value.fix.startswith("GRANT SELECT, INSERT, UPDATE")
        finally:
            reader_only.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DROP USER IF EXISTS 'hb_writer'@'127.0.0.1'")
        admin.close()
