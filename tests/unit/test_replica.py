"""lagd.mysql.replica against recorded result sets of every server dialect.

The MariaDB 10.11 files were recorded live; the MySQL and MariaDB 11.x files
carry the exact column lists of those servers (see the fixtures README).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pymysql.err
import pytest
from pymysql.cursors import DictCursor

from lagd.errors import LagdError
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.replica import (
    IoState,
    NotAReplicaError,
    ReplicaStatus,
    ReplicaStatusError,
    ServerFlavor,
    ServerVersionError,
    StatementTimeout,
    ThreadError,
    Vendor,
    detect_flavor,
    fetch_replica_status,
    fetch_replica_statuses,
    parse_replica_status,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "replica_status"


@dataclass(frozen=True)
class Recorded:
    name: str
    flavor: ServerFlavor
    statement: str
    variables: dict[str, str]
    rows: list[dict[str, Any]]

    def parse(self) -> list[ReplicaStatus]:
        pos = self.variables.get("gtid_slave_pos")
        return [parse_replica_status(r, self.flavor, gtid_slave_pos=pos) for r in self.rows]


def load(name: str) -> Recorded:
    doc = json.loads((FIXTURES / name).read_text())
    rows = []
    for pairs in doc["rows"]:
        row = {col: value for col, value in pairs}
        assert len(row) == len(pairs), f"{name}: duplicate column names"
        rows.append(row)
    return Recorded(
        name=name,
        flavor=ServerFlavor.from_version_string(doc["server_version"]),
        statement=doc["statement"],
        variables=doc.get("variables", {}),
        rows=rows,
    )


ALL_FILES = sorted(p.name for p in FIXTURES.glob("*.json"))


# --- what every recorded row must normalise to -------------------------------


@dataclass(frozen=True)
class Want:
    channel: str
    io: IoState
    sql: bool
    behind: int | None
    io_errno: int = 0
    sql_errno: int = 0
    relay: tuple[str, int] | None = None  # (relay_log_file, relay_log_pos)
    remaining_delay: int | None = None

    @property
    def healthy(self) -> bool:
        return self.io is IoState.RUNNING and self.sql and not (self.io_errno or self.sql_errno)


RUN = IoState.RUNNING
M_RUNNING = Want("", RUN, True, 0, relay=("rep-relay-bin.000002", 1447))
M_SQL_ERR = Want("", RUN, False, None, sql_errno=1062, relay=("rep-relay-bin.000002", 1620))
MY_RUNNING = Want("", RUN, True, 0, relay=("slave-relay-bin.000002", 1145))
MARIADB11 = Want("", RUN, True, 6, relay=("relay-bin.000042", 17446))

EXPECTED: dict[str, list[Want]] = {
    "mariadb-10.11-show-slave-status-running.json": [M_RUNNING],
    "mariadb-10.11-show-replica-status-running.json": [M_RUNNING],
    "mariadb-10.11-show-all-slaves-status-running.json": [M_RUNNING],
    "mariadb-10.11-show-all-replicas-status-running.json": [M_RUNNING],
    "mariadb-10.11-show-all-slaves-status-sql-stopped.json": [
        Want("", RUN, False, None, relay=("rep-relay-bin.000002", 1447))
    ],
    "mariadb-10.11-show-all-slaves-status-sql-error-1062.json": [M_SQL_ERR],
    "mariadb-10.11-show-slave-status-sql-error-1062.json": [M_SQL_ERR],
    "mariadb-10.11-show-all-slaves-status-io-stopped.json": [
        Want("", IoState.STOPPED, True, None, relay=("rep-relay-bin.000002", 1805))
    ],
    "mariadb-10.11-show-all-slaves-status-multi-source-running.json": [
        Want("conn1", RUN, True, 0),
        Want("conn2", RUN, True, 0),
    ],
    "mariadb-10.11-show-all-slaves-status-multi-source-sql-error-1396.json": [
        Want("conn1", RUN, True, 0),
        Want("conn2", RUN, False, None, sql_errno=1396),
    ],
    "mariadb-10.11-show-all-slaves-status-multi-source-io-connecting-2003.json": [
        Want("conn1", RUN, True, 0),
        Want("conn2", IoState.CONNECTING, True, None, io_errno=2003),
    ],
    "mariadb-10.11-show-all-slaves-status-multi-source-delayed.json": [
        Want("conn1", RUN, True, 5, remaining_delay=3595),
        Want("conn2", RUN, True, 0),
    ],
    "mariadb-11.x-show-slave-status-running.json": [MARIADB11],
    "mariadb-11.x-show-all-slaves-status-running.json": [MARIADB11],
    "mysql-5.7-show-slave-status-running.json": [MY_RUNNING],
    "mysql-8.0-show-replica-status-running.json": [MY_RUNNING],
    "mysql-8.4-show-replica-status-running.json": [MY_RUNNING],
    "mysql-9.x-show-replica-status-running.json": [MY_RUNNING],
    "mysql-8.0-show-replica-status-sql-error-1062.json": [
        Want("", RUN, False, None, sql_errno=1062, relay=("slave-relay-bin.000002", 1145))
    ],
    "mysql-8.0-show-replica-status-io-connecting-2003.json": [
        Want("", IoState.CONNECTING, True, None, io_errno=2003)
    ],
    "mysql-8.4-show-replica-status-sql-stopped.json": [Want("", RUN, False, None)],
    "mysql-8.0-show-replica-status-multi-source.json": [
        Want("source_1", RUN, True, 0, relay=("replica-relay-bin-source_1.000002", 1145)),
        Want("source_2", RUN, True, 12, relay=("replica-relay-bin-source_2.000004", 1870)),
    ],
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(EXPECTED) == ALL_FILES


CASES = [(name, i, want) for name, wants in EXPECTED.items() for i, want in enumerate(wants)]


@pytest.mark.parametrize(("name", "index", "want"), CASES, ids=[f"{n}#{i}" for n, i, _ in CASES])
def test_fixture_normalises(name: str, index: int, want: Want) -> None:
    rec = load(name)
    statuses = rec.parse()
    assert len(statuses) == len(EXPECTED[name])
    st = statuses[index]
    assert st.channel == want.channel
    assert st.io_state is want.io
    assert st.io_running is (want.io is RUN)
    assert st.sql_running is want.sql
    assert st.seconds_behind == want.behind
    assert st.last_io_errno == want.io_errno
    assert st.last_sql_errno == want.sql_errno
    assert st.has_error is bool(want.io_errno or want.sql_errno)
    assert st.healthy is want.healthy
    assert st.sql_remaining_delay == want.remaining_delay
    if want.relay is not None:
        assert (st.relay_log_file, st.relay_log_pos) == want.relay
    # Nothing comes back as the server's "nothing" spelling.
    for text in (st.last_io_error, st.last_sql_error, st.sql_state, st.io_thread_state):
        assert text != ""
    assert (st.last_io_error is None) is (want.io_errno == 0)
    assert (st.last_sql_error is None) is (want.sql_errno == 0)
    assert dict(st.raw) == rec.rows[index]


@pytest.mark.parametrize("name", ALL_FILES)
def test_dialect_specific_fields(name: str) -> None:
    rec = load(name)
    for st in rec.parse():
        assert st.relay_log_file and st.relay_log_pos >= 4
        assert st.read_source_log_pos >= st.exec_source_log_pos > 0
        if not st.read_source_log_file:
            # Real: a GTID CHANGE MASTER clears the coordinates until the
            # first event arrives (see the io-connecting-2003 recording).
            assert rec.flavor.is_mariadb and st.read_source_log_pos == 4
        assert st.source_port > 0 and st.source_server_id > 0
        if rec.flavor.is_mysql:
            assert st.source_uuid is not None and st.auto_position is True
            assert st.executed_gtid_set is not None and "\n" not in st.executed_gtid_set
            assert (st.gtid_io_pos, st.using_gtid, st.parallel_mode) == (None, None, None)
        else:
            assert st.using_gtid == "Slave_Pos"
            assert st.gtid_io_pos and st.parallel_mode
            assert st.gtid_slave_pos, "from the column or the @@gtid_slave_pos fallback"
            assert (st.source_uuid, st.auto_position, st.executed_gtid_set) == (None, None, None)
            assert st.last_io_error_time is None and st.last_sql_error_time is None


def _without_state_text(st: ReplicaStatus) -> ReplicaStatus:
    # MySQL 5.7 says "master" where 8.0.22+ says "source" in these texts.
    return replace(st, io_thread_state=None, sql_state=None)


SAME_VALUES = [
    pytest.param(
        [
            "mariadb-10.11-show-slave-status-running.json",
            "mariadb-10.11-show-replica-status-running.json",
            "mariadb-10.11-show-all-slaves-status-running.json",
            "mariadb-10.11-show-all-replicas-status-running.json",
        ],
        False,
        id="mariadb-10.11-four-statements-one-moment",
    ),
    pytest.param(
        [
            "mariadb-10.11-show-slave-status-sql-error-1062.json",
            "mariadb-10.11-show-all-slaves-status-sql-error-1062.json",
        ],
        False,
        id="mariadb-10.11-sql-error-two-statements",
    ),
    pytest.param(
        [
            "mysql-8.0-show-replica-status-running.json",
            "mysql-8.4-show-replica-status-running.json",
            "mysql-9.x-show-replica-status-running.json",
        ],
        False,
        id="mysql-8.0-8.4-9.x",
    ),
    pytest.param(
        [
            "mysql-5.7-show-slave-status-running.json",
            "mysql-8.0-show-replica-status-running.json",
        ],
        True,
        id="mysql-5.7-master-names-vs-8.0-source-names",
    ),
]


@pytest.mark.parametrize(("names", "ignore_state_text"), SAME_VALUES)
def test_dialects_normalise_to_the_same_value(names: list[str], ignore_state_text: bool) -> None:
    parsed = [load(n).parse() for n in names]
    if ignore_state_text:
        parsed = [[_without_state_text(s) for s in p] for p in parsed]
    first = parsed[0]
    for other in parsed[1:]:
        assert other == first


def test_mariadb_11_single_and_all_agree() -> None:
    single = load("mariadb-11.x-show-slave-status-running.json")
    every = load("mariadb-11.x-show-all-slaves-status-running.json")
    (from_all,) = every.parse()
    (from_single,) = single.parse()  # gtid_slave_pos from the fixture's variables
    assert from_all == from_single
    assert from_all.raw["Master_Slave_time_diff"] == 2  # 11.6+ extra, kept in raw only


# --- NULL lag, stopped threads, errors ------------------------------------------


NULL_LAG = [
    (name, i)
    for name in ALL_FILES
    for i, row in enumerate(load(name).rows)
    if row.get("Seconds_Behind_Master", row.get("Seconds_Behind_Source", 0)) is None
]


@pytest.mark.parametrize(("name", "index"), NULL_LAG)
def test_null_lag_stays_none(name: str, index: int) -> None:
    st = load(name).parse()[index]
    assert st.seconds_behind is None
    assert not st.healthy


def test_null_lag_cases_cover_every_thread_state() -> None:
    states = {(s.io_state, s.sql_running) for n, i in NULL_LAG for s in [load(n).parse()[i]]}
    assert (IoState.RUNNING, False) in states
    assert (IoState.STOPPED, True) in states
    assert (IoState.CONNECTING, True) in states


def test_zero_lag_is_zero_not_none() -> None:
    st = load("mysql-8.0-show-replica-status-running.json").parse()[0]
    assert st.seconds_behind == 0


def test_mysql_sql_error_with_timestamp() -> None:
    (st,) = load("mysql-8.0-show-replica-status-sql-error-1062.json").parse()
    assert st.last_sql_error_time == datetime(2024, 11, 21, 1, 2, 3)
    assert st.last_io_error_time is None
    err = st.last_error
    assert err is not None
    assert (err.thread, err.errno, err.at) == ("sql", 1062, datetime(2024, 11, 21, 1, 2, 3))
    assert "Worker 1 failed executing transaction" in err.message
    assert str(err).startswith("SQL thread error 1062: Coordinator stopped")


def test_mysql_io_connecting_error() -> None:
    (st,) = load("mysql-8.0-show-replica-status-io-connecting-2003.json").parse()
    assert st.io_thread_state == "Connecting to source"
    err = st.last_error
    assert err is not None and (err.thread, err.errno) == ("io", 2003)
    assert err.at == datetime(2024, 11, 21, 1, 5, 9)


def test_mariadb_errors_come_through_verbatim() -> None:
    statuses = load("mariadb-10.11-show-all-slaves-status-multi-source-io-connecting-2003.json")
    conn1, conn2 = statuses.parse()
    assert conn1.last_error is None and conn1.healthy
    err = conn2.last_error
    assert err is not None and err.thread == "io" and err.at is None
    assert err.message.startswith("error connecting to master 'repl@127.0.0.1:23309'")
    (dup,) = load("mariadb-10.11-show-all-slaves-status-sql-error-1062.json").parse()
    assert dup.last_error == ThreadError(
        "sql",
        1062,
        "Error 'Duplicate entry '100' for key 'PRIMARY'' on query. Default database: ''. "
        "Query: 'INSERT INTO app_src1.t VALUES (100,'from-source')'",
    )


def test_delayed_replica_reports_remaining_delay_and_state() -> None:
    conn1, _ = load("mariadb-10.11-show-all-slaves-status-multi-source-delayed.json").parse()
    assert conn1.sql_delay == 3600 and conn1.sql_remaining_delay == 3595
    assert conn1.sql_state == "Waiting until MASTER_DELAY seconds after master executed event"
    assert conn1.healthy  # delayed on purpose: threads up, no error


LAST_ERROR_TABLE = [
    # io state, sql running, io errno, sql errno -> thread whose error is reported
    (IoState.RUNNING, False, 2003, 1062, "sql"),
    (IoState.CONNECTING, True, 2003, 1062, "io"),
    (IoState.STOPPED, False, 2003, 1062, "sql"),
    (IoState.RUNNING, True, 2003, 1062, "sql"),
    (IoState.CONNECTING, True, 2003, 0, "io"),
    (IoState.RUNNING, False, 0, 1062, "sql"),
    (IoState.RUNNING, True, 0, 0, None),
]


@pytest.mark.parametrize(("io", "sql", "io_errno", "sql_errno", "thread"), LAST_ERROR_TABLE)
def test_last_error_prefers_the_stopped_thread(
    io: IoState, sql: bool, io_errno: int, sql_errno: int, thread: str | None
) -> None:
    (base,) = load("mysql-8.0-show-replica-status-running.json").parse()
    st = replace(
        base,
        io_state=io,
        sql_running=sql,
        last_io_errno=io_errno,
        last_io_error="io failed" if io_errno else None,
        last_sql_errno=sql_errno,
        last_sql_error="sql failed" if sql_errno else None,
    )
    err = st.last_error
    assert (err.thread if err else None) == thread


def test_multi_source_gives_one_value_per_channel() -> None:
    mysql = load("mysql-8.0-show-replica-status-multi-source.json").parse()
    assert [s.channel for s in mysql] == ["source_1", "source_2"]
    assert [s.source_server_id for s in mysql] == [1, 2]
    two_uuids = (
        "73f86016-978b-11ee-ade5-8d2a2a562feb:1-3,8a94f357-aab4-11ee-b2b0-0242ac130003:1-7"
    )
    assert {s.executed_gtid_set for s in mysql} == {two_uuids}
    mariadb = load("mariadb-10.11-show-all-slaves-status-multi-source-running.json").parse()
    assert [s.channel for s in mariadb] == ["conn1", "conn2"]
    assert [s.source_port for s in mariadb] == [23306, 23307]
    assert {s.gtid_slave_pos for s in mariadb} == {"1-1-7,2-3-5"}


# --- strictness -----------------------------------------------------------------


MISSING = [
    ("mysql-8.0-show-replica-status-running.json", ["Replica_IO_Running"]),
    ("mysql-8.0-show-replica-status-running.json", ["Channel_Name"]),
    ("mysql-8.4-show-replica-status-running.json", ["Executed_Gtid_Set", "Source_Port"]),
    ("mysql-5.7-show-slave-status-running.json", ["Seconds_Behind_Master"]),
    ("mysql-5.7-show-slave-status-running.json", ["Last_SQL_Error_Timestamp"]),
    ("mariadb-10.11-show-all-slaves-status-running.json", ["Gtid_IO_Pos"]),
    ("mariadb-10.11-show-slave-status-running.json", ["Relay_Log_Pos", "Slave_SQL_Running"]),
    ("mariadb-11.x-show-all-slaves-status-running.json", ["Using_Gtid"]),
]


@pytest.mark.parametrize(("name", "drop"), MISSING)
def test_missing_required_column_is_named(name: str, drop: list[str]) -> None:
    rec = load(name)
    row = {k: v for k, v in rec.rows[0].items() if k not in drop}
    with pytest.raises(ReplicaStatusError) as info:
        parse_replica_status(row, rec.flavor)
    err = info.value
    assert isinstance(err, LagdError) and not isinstance(err, KeyError)
    for col in drop:
        assert col in str(err)
        assert col in err.columns
    assert err.fix and rec.flavor.replica_status_statement in err.fix


def test_missing_column_names_every_spelling() -> None:
    rec = load("mysql-8.0-show-replica-status-running.json")
    row = {k: v for k, v in rec.rows[0].items() if k != "Replica_IO_Running"}
    with pytest.raises(ReplicaStatusError, match="Slave_IO_Running/Replica_IO_Running"):
        parse_replica_status(row, rec.flavor)


def test_wrong_flavor_is_caught() -> None:
    rec = load("mariadb-10.11-show-all-slaves-status-running.json")
    with pytest.raises(ReplicaStatusError) as info:
        parse_replica_status(rec.rows[0], ServerFlavor.from_version_string("8.0.36"))
    assert {"Executed_Gtid_Set", "Auto_Position", "Last_IO_Error_Timestamp"} <= set(
        info.value.columns
    )


BAD_VALUES = [
    ("Replica_IO_Running", "Maybe"),
    ("Replica_SQL_Running", None),
    ("Read_Source_Log_Pos", "twelve"),
    ("Relay_Log_Pos", True),
    ("Relay_Log_Pos", "\u00b2"),  # isdigit() says yes, int() says no
    ("Seconds_Behind_Source", 1.5),
    ("Last_SQL_Error_Timestamp", "yesterday"),
    ("Auto_Position", 2),
    ("Source_Host", 42),
]


@pytest.mark.parametrize(("column", "value"), BAD_VALUES)
def test_value_of_the_wrong_kind_is_named(column: str, value: object) -> None:
    rec = load("mysql-8.0-show-replica-status-running.json")
    row = dict(rec.rows[0], **{column: value})
    with pytest.raises(ReplicaStatusError, match=column) as info:
        parse_replica_status(row, rec.flavor)
    assert info.value.columns == (column,)


def test_two_spellings_that_disagree_are_refused() -> None:
    rec = load("mysql-8.0-show-replica-status-running.json")
    row = dict(rec.rows[0], Slave_IO_Running="No")
    with pytest.raises(ReplicaStatusError) as info:
        parse_replica_status(row, rec.flavor)
    assert set(info.value.columns) == {"Slave_IO_Running", "Replica_IO_Running"}
    agreeing = dict(rec.rows[0], Slave_IO_Running="Yes")
    assert parse_replica_status(agreeing, rec.flavor).io_running


def test_unknown_columns_are_kept_in_raw_only() -> None:
    # MariaDB 12.0 adds Connects_Tried and Master_Retry_Count, for instance.
    rec = load("mariadb-10.11-show-all-slaves-status-running.json")
    row = dict(rec.rows[0], Connects_Tried=1, Master_Retry_Count=100000)
    st = parse_replica_status(row, rec.flavor)
    assert st == rec.parse()[0]
    assert st.raw["Connects_Tried"] == 1


def test_text_protocol_values_are_accepted() -> None:
    # Rows that went through a text-only path (strings for numbers, bytes).
    rec = load("mysql-8.0-show-replica-status-running.json")
    row = {k: (str(v) if isinstance(v, int) else v) for k, v in rec.rows[0].items()}
    row["Source_Host"] = b"127.0.0.1"
    assert parse_replica_status(row, rec.flavor) == rec.parse()[0]


def test_raw_is_a_read_only_copy() -> None:
    rec = load("mysql-8.0-show-replica-status-running.json")
    row = dict(rec.rows[0])
    st = parse_replica_status(row, rec.flavor)
    row["Source_Host"] = "changed"
    assert st.raw["Source_Host"] == "127.0.0.1"
    with pytest.raises(TypeError):
        st.raw["Source_Host"] = "x"  # type: ignore[index]


def test_preparing_counts_as_connecting() -> None:
    rec = load("mariadb-10.11-show-all-slaves-status-running.json")
    st = parse_replica_status(dict(rec.rows[0], Slave_IO_Running="Preparing"), rec.flavor)
    assert st.io_state is IoState.CONNECTING and not st.healthy


# --- flavors ------------------------------------------------------------------


ALL, REPLICA, SLAVE = "SHOW ALL SLAVES STATUS", "SHOW REPLICA STATUS", "SHOW SLAVE STATUS"

# fmt: off
FLAVORS = [
    # version string, vendor, version, SHOW REPLICA, SHOW SLAVE, status statement
    ("8.0.36", "mysql", (8, 0, 36), True, True, REPLICA),
    ("8.0.22", "mysql", (8, 0, 22), True, True, REPLICA),
    ("8.0.21-log", "mysql", (8, 0, 21), False, True, SLAVE),
    ("5.7.44-log", "mysql", (5, 7, 44), False, True, SLAVE),
    ("8.4.3", "mysql", (8, 4, 3), True, False, REPLICA),
    ("9.1.0", "mysql", (9, 1, 0), True, False, REPLICA),
    ("8.0.36-28", "mysql", (8, 0, 36), True, True, REPLICA),  # Percona
    ("10.11.19-MariaDB-0+deb12u1", "mariadb", (10, 11, 19), True, True, ALL),
    ("11.4.2-MariaDB-log", "mariadb", (11, 4, 2), True, True, ALL),
    # The handshake's server version, as PyMySQL's conn.server_version has it.
    ("5.5.5-10.11.19-MariaDB-0+deb12u1", "mariadb", (10, 11, 19), True, True, ALL),
    ("10.5.1-MariaDB", "mariadb", (10, 5, 1), True, True, ALL),
    ("10.4.32-MariaDB", "mariadb", (10, 4, 32), False, True, ALL),
]
# fmt: on


@pytest.mark.parametrize(("text", "vendor", "version", "replica", "slave", "statement"), FLAVORS)
def test_flavor_detection(
    text: str,
    vendor: str,
    version: tuple[int, int, int],
    replica: bool,
    slave: bool,
    statement: str,
) -> None:
    f = ServerFlavor.from_version_string(text)
    assert f.vendor is Vendor(vendor)
    assert f.version == version
    assert f.has_show_replica_status is replica
    assert f.has_show_slave_status is slave
    assert f.replica_status_statement == statement
    assert f.channel_column == ("Connection_name" if f.is_mariadb else "Channel_Name")
    assert f.uses_source_replica_columns is (f.is_mysql and replica)
    assert f.version_string == text
    assert f == ServerFlavor(Vendor(vendor), version)  # the raw string is not identity


@pytest.mark.parametrize("text", ["", "unknown", "MariaDB", "v8"])
def test_unreadable_version_is_a_lagd_error(text: str) -> None:
    with pytest.raises(ServerVersionError):
        ServerFlavor.from_version_string(text)


def test_flavor_str() -> None:
    assert str(ServerFlavor.from_version_string("10.11.19-MariaDB-log")) == "MariaDB 10.11.19"
    assert str(ServerFlavor.from_version_string("8.4.3")) == "MySQL 8.4.3"


def test_statement_timeout_helpers() -> None:
    maria = ServerFlavor.from_version_string("10.11.19-MariaDB").statement_timeout
    mysql = ServerFlavor.from_version_string("8.0.36").statement_timeout
    assert maria == StatementTimeout("max_statement_time", "s")
    assert mysql == StatementTimeout("max_execution_time", "ms")
    assert maria.set_session_sql(2.5) == "SET SESSION max_statement_time = 2.5"
    assert mysql.set_session_sql(2.5) == "SET SESSION max_execution_time = 2500"
    assert mysql.optimizer_hint(0.25) == "/*+ MAX_EXECUTION_TIME(250) */"
    assert maria.optimizer_hint(1) is None
    assert mysql.value(0.0001) == 1  # never rounds down to 0, which means "no limit"
    with pytest.raises(ValueError, match="positive"):
        maria.value(0)
    assert ServerFlavor.from_version_string("5.7.7").statement_timeout is None
    assert ServerFlavor.from_version_string("10.0.38-MariaDB").statement_timeout is None


# --- I/O against a scripted connection -----------------------------------------


class FakeCursor:
    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        self.rows: tuple[dict[str, Any], ...] = ()

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str) -> None:
        self.conn.executed.append(sql)
        answer = self.conn.answers[sql]
        if isinstance(answer, Exception):
            raise answer
        self.rows = tuple(answer)

    def fetchall(self) -> tuple[dict[str, Any], ...]:
        return self.rows


class FakeConn:
    unix_socket = "replica.sock"

    def __init__(self, version: str, answers: dict[str, Any]) -> None:
        self.answers = {"SELECT VERSION() AS version": [{"version": version}], **answers}
        self.executed: list[str] = []

    def cursor(self, cursor: object = None) -> FakeCursor:
        assert cursor is DictCursor, "rows must be read as dicts whatever the connection's default"
        return FakeCursor(self)


def fake_for(name: str, statement: str | None = None) -> tuple[FakeConn, Recorded]:
    rec = load(name)
    flavor = rec.flavor
    conn = FakeConn(
        flavor.version_string,
        {
            statement or flavor.replica_status_statement: rec.rows,
            "SELECT @@GLOBAL.gtid_slave_pos AS pos": [
                {"pos": rec.variables.get("gtid_slave_pos", "")}
            ],
        },
    )
    return conn, rec


FETCH_STATEMENTS = [
    ("mariadb-10.11-show-all-slaves-status-multi-source-running.json", "SHOW ALL SLAVES STATUS"),
    ("mysql-8.0-show-replica-status-multi-source.json", "SHOW REPLICA STATUS"),
    ("mysql-8.4-show-replica-status-running.json", "SHOW REPLICA STATUS"),
    ("mysql-5.7-show-slave-status-running.json", "SHOW SLAVE STATUS"),
]


@pytest.mark.parametrize(("name", "statement"), FETCH_STATEMENTS)
def test_fetch_detects_flavor_and_picks_statement(name: str, statement: str) -> None:
    conn, rec = fake_for(name)
    statuses = fetch_replica_statuses(conn)  # type: ignore[arg-type]
    assert conn.executed == ["SELECT VERSION() AS version", statement]
    assert statuses == rec.parse()


def test_fetch_with_a_given_flavor_skips_detection() -> None:
    conn, rec = fake_for("mysql-8.0-show-replica-status-running.json")
    fetch_replica_statuses(conn, rec.flavor)  # type: ignore[arg-type]
    assert conn.executed == ["SHOW REPLICA STATUS"]
    assert detect_flavor(conn) == rec.flavor  # type: ignore[arg-type]


def test_mariadb_rows_without_gtid_slave_pos_get_the_global_variable() -> None:
    # A server whose rows lack Gtid_Slave_Pos (the single-connection layout).
    conn, rec = fake_for(
        "mariadb-10.11-show-slave-status-running.json", statement="SHOW ALL SLAVES STATUS"
    )
    (st,) = fetch_replica_statuses(conn)  # type: ignore[arg-type]
    assert conn.executed[-1] == "SELECT @@GLOBAL.gtid_slave_pos AS pos"
    assert st.gtid_slave_pos == rec.variables["gtid_slave_pos"] == "1-1-5"


def test_mariadb_all_slaves_rows_need_no_extra_query() -> None:
    conn, _ = fake_for("mariadb-10.11-show-all-slaves-status-running.json")
    fetch_replica_statuses(conn)  # type: ignore[arg-type]
    assert conn.executed == ["SELECT VERSION() AS version", "SHOW ALL SLAVES STATUS"]


@pytest.mark.parametrize(
    ("name", "channel", "found"),
    [
        ("mysql-8.0-show-replica-status-multi-source.json", "source_2", "source_2"),
        ("mysql-8.0-show-replica-status-multi-source.json", "SOURCE_1", "source_1"),
        ("mariadb-10.11-show-all-slaves-status-multi-source-running.json", "conn2", "conn2"),
        ("mariadb-10.11-show-all-slaves-status-running.json", "", ""),
        ("mysql-8.0-show-replica-status-running.json", "", ""),
    ],
)
def test_fetch_one_channel(name: str, channel: str, found: str) -> None:
    conn, _ = fake_for(name)
    assert fetch_replica_status(conn, channel).channel == found  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "channels"),
    [
        ("mysql-8.0-show-replica-status-multi-source.json", ("source_1", "source_2")),
        ("mariadb-10.11-show-all-slaves-status-multi-source-running.json", ("conn1", "conn2")),
    ],
)
def test_unknown_channel_lists_the_channels(name: str, channels: tuple[str, ...]) -> None:
    conn, _ = fake_for(name)
    with pytest.raises(NotAReplicaError) as info:
        fetch_replica_status(conn, "")  # type: ignore[arg-type]
    err = info.value
    assert err.channels == channels
    assert "'' (the default channel)" in str(err)
    for ch in channels:
        assert repr(ch) in str(err)
    assert err.fix


@pytest.mark.parametrize(
    ("version", "statement", "how"),
    [
        ("10.11.19-MariaDB", "SHOW ALL SLAVES STATUS", "CHANGE MASTER TO"),
        ("8.4.3", "SHOW REPLICA STATUS", "CHANGE REPLICATION SOURCE TO"),
        ("5.7.44", "SHOW SLAVE STATUS", "CHANGE MASTER TO"),
    ],
)
def test_not_a_replica(version: str, statement: str, how: str) -> None:
    conn = FakeConn(version, {statement: []})
    assert fetch_replica_statuses(conn) == []  # type: ignore[arg-type]
    with pytest.raises(NotAReplicaError, match="is not a replica") as info:
        fetch_replica_status(conn)  # type: ignore[arg-type]
    assert info.value.channels == ()
    assert info.value.fix is not None and how in info.value.fix
    assert statement in str(info.value)


@pytest.mark.parametrize(
    ("version", "grant"),
    [
        ("10.11.19-MariaDB", "REPLICA MONITOR"),
        ("10.4.32-MariaDB", "REPLICATION CLIENT"),
        ("8.0.36", "REPLICATION CLIENT"),
    ],
)
def test_missing_privilege_says_what_to_grant(version: str, grant: str) -> None:
    flavor = ServerFlavor.from_version_string(version)
    denied = pymysql.err.OperationalError(
        1227, "Access denied; you need (at least one of) the SUPER, SLAVE MONITOR privilege(s)"
    )
    conn = FakeConn(version, {flavor.replica_status_statement: denied})
    with pytest.raises(ReplicaStatusError, match="Access denied") as info:
        fetch_replica_statuses(conn)  # type: ignore[arg-type]
    assert info.value.fix is not None and f"GRANT {grant}" in info.value.fix
    assert info.value.__cause__ is denied


def test_other_server_errors_propagate_as_database_errors() -> None:
    lost = pymysql.err.OperationalError(2013, "Lost connection to server during query")
    conn = FakeConn("8.0.36", {"SHOW REPLICA STATUS": lost})
    with pytest.raises(DatabaseError) as info:
        fetch_replica_statuses(conn)  # type: ignore[arg-type]
    assert info.value.kind is Kind.LOST and info.value.code == 2013
    assert info.value.__cause__ is lost
