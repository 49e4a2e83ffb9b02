"""lagd.heartbeat without a server: timestamps, names, DSNs, backoff, the command's errors.

Reading and writing real tables is in tests/integration/test_heartbeat.py.
"""

from __future__ import annotations

import logging
import socket
import threading

import pymysql
import pytest
from click.testing import CliRunner

from lagd.heartbeat import (
    DsnError,
    HeartbeatError,
    HeartbeatWriter,
    SourceDsn,
    create_table_sql,
    format_ts,
    heartbeat_command,
    parse_dsn,
    parse_ts,
    quote_table,
)

# 2027-01-15T08:00:00Z
EPOCH = 1_800_000_000.0

TS_CASES = [
    ("pt-heartbeat-utc", "2027-01-15T08:00:00.250000", EPOCH + 0.25),
    ("first-row-from-utc-timestamp", "2027-01-15 08:00:00", EPOCH),
    ("no-fraction", "2027-01-15T08:00:00", EPOCH),
    ("short-fraction", "2027-01-15T08:00:01.5", EPOCH + 1.5),
    ("microseconds", "2027-01-15T07:59:59.000001", EPOCH - 1 + 0.000001),
    ("surrounding-space", " 2027-01-15T08:00:00.000000 ", EPOCH),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in TS_CASES], ids=[c[0] for c in TS_CASES])
def test_parse_ts_reads_utc(text: str, want: float) -> None:
    assert parse_ts(text) == pytest.approx(want, abs=1e-7)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2027-01-15",
        "2027-01-15T08:00",
        "15/01/2027 08:00:00",
        "2027-01-15T08:00:00.1234567",
        "2027-13-01T00:00:00",
    ],
    ids=["empty", "date-only", "no-seconds", "not-iso", "seven-digits", "month-13"],
)
def test_parse_ts_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ts(text)


FORMAT_CASES = [
    ("whole-second", EPOCH, "2027-01-15T08:00:00.000000"),
    ("fraction", EPOCH + 0.123456, "2027-01-15T08:00:00.123456"),
    ("before-midnight", EPOCH - 8 * 3600 - 0.5, "2027-01-14T23:59:59.500000"),
]


@pytest.mark.parametrize(("epoch", "want"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES])
def test_format_ts_is_pt_heartbeat_utc(epoch: float, want: str) -> None:
    text = format_ts(epoch)
    assert text == want and len(text) == 26  # fits varchar(26)
    assert parse_ts(text) == pytest.approx(epoch, abs=1e-6)


TABLE_CASES = [
    ("default", "percona.heartbeat", "`percona`.`heartbeat`"),
    ("quoted-parts", "`my db`.`hb`", "`my db`.`hb`"),
    ("backtick-inside", "`a``b`.hb", "`a``b`.`hb`"),
    ("dollar-and-digits", "ops$1.hb_2", "`ops$1`.`hb_2`"),
]


@pytest.mark.parametrize(("table", "want"), [c[1:] for c in TABLE_CASES], ids=[c[0] for c in TABLE_CASES])
def test_quote_table(table: str, want: str) -> None:
    assert quote_table(table) == want


@pytest.mark.parametrize(
    "table",
    ["heartbeat", "a.b.c", "", "percona.", "percona.heart beat", "percona.hb; DROP TABLE x"],
    ids=["no-schema", "three-parts", "empty", "no-name", "space", "injection"],
)
def test_bad_table_names_say_how_to_write_them(table: str) -> None:
    with pytest.raises(HeartbeatError) as e:
        quote_table(table)
    assert "schema.table" in str(e.value) and e.value.fix and "percona.heartbeat" in e.value.fix


def test_create_table_is_pt_heartbeats_definition() -> None:
    sql = create_table_sql("percona.heartbeat")
    assert sql.startswith("CREATE TABLE IF NOT EXISTS `percona`.`heartbeat` (ts varchar(26) NOT NULL, ")
    for column in (
        "server_id int unsigned NOT NULL PRIMARY KEY",
        "file varchar(255) DEFAULT NULL",
        "position bigint unsigned DEFAULT NULL",
        "relay_master_log_file varchar(255) DEFAULT NULL",
        "exec_master_log_pos bigint unsigned DEFAULT NULL",
    ):
        assert column in sql


DSN_CASES = [
    ("url", "mysql://hb:secret@db1.example.com:3307", SourceDsn("db1.example.com", 3307, "hb", "secret")),
    ("url-default-port", "mysql://hb@db1", SourceDsn("db1", 3306, "hb", None)),
    ("url-empty-password", "mysql://hb:@db1", SourceDsn("db1", 3306, "hb", "")),
    ("url-escaped-password", "mysql://hb:p%40ss%3Aw@db1:3306/", SourceDsn("db1", 3306, "hb", "p@ss:w")),
    ("url-ipv6", "mysql://hb@[::1]:3306", SourceDsn("::1", 3306, "hb", None)),
    ("host-port", "10.0.0.5:3306", SourceDsn("10.0.0.5", 3306, None, None)),
    ("host-only", "db1", SourceDsn("db1", 3306, None, None)),
    ("scheme-any-case", "MySQL://hb@db1:3306", SourceDsn("db1", 3306, "hb", None)),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in DSN_CASES], ids=[c[0] for c in DSN_CASES])
def test_parse_dsn(text: str, want: SourceDsn) -> None:
    assert parse_dsn(text) == want


BAD_DSN_CASES = [
    ("other-scheme", "postgres://hb@db1:5432", "not a MySQL DSN"),
    ("bad-port", "db1:port", "bad port"),
    ("port-out-of-range", "db1:70000", "bad port"),
    ("port-zero", "db1:0", "port 0"),
    ("no-host", "mysql://hb@:3306", "names no host"),
    ("empty", "", "names no host"),
    ("database-path", "mysql://hb@db1:3306/percona", "path"),
    ("options", "mysql://hb@db1:3306?ssl=1", "path or options"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in BAD_DSN_CASES], ids=[c[0] for c in BAD_DSN_CASES]
)
def test_bad_dsn(text: str, message: str) -> None:
    with pytest.raises(DsnError) as e:
        parse_dsn(text)
    assert message in str(e.value)
    assert e.value.fix and "mysql://user[:password]@host[:port]" in e.value.fix


def test_dsn_never_prints_the_password() -> None:
    assert str(parse_dsn("mysql://hb:secret@db1:3307")) == "hb@db1:3307"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_writer_retries_a_refused_connection_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    stop = threading.Event()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 5:
            stop.set()

    def connect() -> pymysql.connections.Connection:  # type: ignore[type-arg]
        return pymysql.connect(host="127.0.0.1", port=port, user="x", connect_timeout=2)

    writer = HeartbeatWriter(connect, "percona.heartbeat", sleep=sleep, random=lambda: 0.5)
    with caplog.at_level(logging.WARNING, logger="lagd.heartbeat"):
        writer.run(stop)
    # The default schedule: 0.25 s doubling, capped at 1.5 s, half of it jitter.
    assert slept == [pytest.approx(0.75 * min(1.5, 0.25 * 2**i)) for i in range(5)]
    assert writer.written == 0
    assert "reconnecting in" in caplog.text


def test_writer_rejects_a_bad_interval_or_table() -> None:
    with pytest.raises(ValueError):
        HeartbeatWriter(lambda: None, "percona.heartbeat", interval=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(HeartbeatError):
        HeartbeatWriter(lambda: None, "heartbeat")  # type: ignore[arg-type,return-value]


CLI_ERROR_CASES = [
    ("bad-dsn", ["--source", "db1:port"], "bad port"),
    ("bad-scheme", ["--source", "http://db1"], "not a MySQL DSN"),
    ("bad-table", ["--source", "db1:3306", "--table", "heartbeat"], "not schema.table"),
    ("missing-password-file", ["--source", "db1:3306", "--password-file", "no-such-file"], "cannot read"),
]


@pytest.mark.parametrize(
    ("args", "message"), [c[1:] for c in CLI_ERROR_CASES], ids=[c[0] for c in CLI_ERROR_CASES]
)
def test_command_errors_are_one_line_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(heartbeat_command, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lagd heartbeat: error: ") and message in lines[0]
    assert "fix:" in lines[0]
