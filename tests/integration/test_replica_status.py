"""lagd.mysql.replica against a live MariaDB source/replica pair (lagd.sandbox.pair)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from pymysql.connections import Connection

from lagd.mysql.replica import (
    IoState,
    NotAReplicaError,
    ReplicaStatus,
    detect_flavor,
    fetch_replica_status,
    fetch_replica_statuses,
    parse_replica_status,
)
from lagd.sandbox.pair import Sandbox


@pytest.fixture
def replica_conn(sandbox: Sandbox) -> Iterator[Connection[Any]]:
    conn = sandbox.replicas[0].connect()
    try:
        yield conn
    finally:
        conn.close()


def wait_status(
    conn: Connection[Any], ok: Callable[[ReplicaStatus], bool], timeout: float = 15.0
) -> ReplicaStatus:
    deadline = time.monotonic() + timeout
    while True:
        st = fetch_replica_status(conn)
        if ok(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"replica did not reach the wanted state: {st}")
        time.sleep(0.05)


def test_flavor_is_detected_as_mariadb(replica_conn: Connection[Any]) -> None:
    flavor = detect_flavor(replica_conn)
    assert flavor.is_mariadb
    assert flavor.replica_status_statement == "SHOW ALL SLAVES STATUS"


def test_running(sandbox: Sandbox, replica_conn: Connection[Any], schema: str) -> None:
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    sandbox.source.query(f"INSERT INTO `{schema}`.t VALUES (1), (2)")
    sandbox.wait_caught_up(timeout=30)
    # Caught up by GTID; Seconds_Behind_Master settles to 0 a moment later.
    st = wait_status(replica_conn, lambda s: s.seconds_behind == 0)
    assert st.channel == ""
    assert st.io_state is IoState.RUNNING and st.sql_running
    assert st.healthy and st.last_error is None
    assert st.relay_log_file and st.relay_log_pos > 4
    assert (sandbox.relay_log_dir() / st.relay_log_file).is_file()
    assert st.read_source_log_pos >= st.exec_source_log_pos > 0
    assert st.source_port == sandbox.source.port
    assert st.using_gtid == "Slave_Pos"
    source_pos = sandbox.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"]
    assert st.gtid_slave_pos == source_pos
    assert st.raw["Slave_IO_Running"] == "Yes"


def test_every_statement_spelling_agrees(sandbox: Sandbox, replica_conn: Connection[Any]) -> None:
    sandbox.wait_caught_up(timeout=30)
    flavor = detect_flavor(replica_conn)
    wait_status(replica_conn, lambda s: s.seconds_behind == 0)
    (from_all,) = fetch_replica_statuses(replica_conn, flavor)
    pos = sandbox.replicas[0].query("SELECT @@gtid_slave_pos AS p")[0]["p"]
    for statement in ("SHOW SLAVE STATUS", "SHOW REPLICA STATUS"):
        (row,) = sandbox.replicas[0].query(statement)
        assert parse_replica_status(row, flavor, gtid_slave_pos=pos) == from_all, statement


def test_sql_thread_stopped(
    sql_thread_stopped: Sandbox, replica_conn: Connection[Any], schema: str
) -> None:
    sql_thread_stopped.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    # The receiver still fetches what the applier no longer applies.
    st = wait_status(replica_conn, lambda s: s.read_source_log_pos > s.exec_source_log_pos)
    assert not st.sql_running
    assert st.seconds_behind is None
    assert st.io_state is IoState.RUNNING
    assert st.sql_state is None
    assert not st.healthy and not st.has_error
    assert st.relay_log_file and st.relay_log_pos > 0


def test_io_thread_stopped(sandbox: Sandbox, replica_conn: Connection[Any]) -> None:
    sandbox.stop_io_thread()
    try:
        st = fetch_replica_status(replica_conn)
        assert st.io_state is IoState.STOPPED and not st.io_running
        assert st.sql_running
        assert st.seconds_behind is None
        assert st.io_thread_state is None
        assert not st.healthy and st.last_error is None
        assert st.relay_log_file and st.relay_log_pos > 0
    finally:
        sandbox.start_io_thread()
    wait_status(replica_conn, lambda s: s.io_running)


def test_least_privileged_lagd_account_can_read_status(sandbox: Sandbox) -> None:
    conn = pymysql.connect(**sandbox.replicas[0].dsn.as_kwargs())
    try:
        st = fetch_replica_status(conn)
    finally:
        conn.close()
    assert st.io_running and st.sql_running


def test_source_is_not_a_replica(sandbox: Sandbox) -> None:
    conn = sandbox.source.connect()
    try:
        assert fetch_replica_statuses(conn) == []
        with pytest.raises(NotAReplicaError, match="is not a replica") as info:
            fetch_replica_status(conn)
    finally:
        conn.close()
    assert info.value.fix and "CHANGE MASTER TO" in info.value.fix
    assert info.value.channels == ()


def test_unknown_channel_lists_the_default(replica_conn: Connection[Any]) -> None:
    with pytest.raises(NotAReplicaError) as info:
        fetch_replica_status(replica_conn, "no_such_channel")
    assert info.value.channels == ("",)
    assert "'no_such_channel'" in str(info.value)
