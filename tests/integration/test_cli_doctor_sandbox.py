"""lagctl doctor against the sandbox: a clean setup passes; each planted problem prints its fix.

Problems are planted the way they happen in production: an account created
with only SELECT (the MySQL advice applied to MariaDB goes the same way), a
session on the source that logs statements (``SET SESSION
binlog_format='STATEMENT'``; doctor sees it in the replica's relay log), a
wrong relay-log path, a heartbeat table that does not exist.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lagd.cli.doctor import doctor
from lagd.sandbox.pair import Sandbox


def write_config(tmp_path: Path, sandbox: Sandbox, user: str = "lagd", **sections: dict[str, Any]) -> Path:
    data: dict[str, dict[str, Any]] = {
        "replica": {"host": "127.0.0.1", "port": sandbox.replica().port, "user": user,
                    "password_env": "LAGD_PASSWORD"},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path = tmp_path / "lagd.toml"
    path.write_text("".join(f"[{n}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in vs.items())
                            for n, vs in data.items()))
    return path


def run(cfg: Path, password: str = "lagd") -> Any:
    return CliRunner().invoke(doctor, ["--config", str(cfg)], env={"LAGD_PASSWORD": password})


def fresh_relay_log(sandbox: Sandbox) -> None:
    """Start a new relay-log file and wait for the SQL thread to move into it.

    Doctor looks at the SQL thread's current file; other tests of the session
    may have left statement-based events in the old one.
    """
    sandbox.wait_caught_up()
    before = sandbox.slave_status()["Relay_Log_File"]
    sandbox.flush_relay_logs()
    deadline = time.monotonic() + 30
    while sandbox.slave_status()["Relay_Log_File"] == before:
        assert time.monotonic() < deadline, "the SQL thread did not move to the new relay log"
        time.sleep(0.05)


def test_clean_setup_passes(sandbox: Sandbox, tmp_path: Path) -> None:
    fresh_relay_log(sandbox)
    result = run(write_config(tmp_path, sandbox))
    assert result.exit_code == 0, result.output
    for text in ("ok    connect            MariaDB 10.",
                 "ok    grants             'lagd'@'127.0.0.1' has what lagd needs: SELECT, SLAVE MONITOR, "
                 "BINLOG MONITOR",
                 "ok    replica            replica of 127.0.0.1:",
                 "ok    binlog_format      no statement-based row changes",
                 "ok    encryption         encrypt_binlog=OFF",
                 "ok    relay_log_access",
                 "info  heartbeat          not configured"):
        assert text in result.output, text
    assert result.output.splitlines()[-1].startswith("no problems: ")


@pytest.fixture
def select_only(sandbox: Sandbox) -> Iterator[str]:
    """An account on the replica with only SELECT, as a MySQL-minded guide might leave it."""
    replica = sandbox.replica()
    replica.query("CREATE USER 'doctor_sel'@'127.0.0.1' IDENTIFIED BY 'pw'")
    replica.query("GRANT SELECT ON *.* TO 'doctor_sel'@'127.0.0.1'")
    try:
        yield "doctor_sel"
    finally:
        replica.query("DROP USER 'doctor_sel'@'127.0.0.1'")


def test_missing_grant(sandbox: Sandbox, select_only: str, tmp_path: Path) -> None:
    result = run(write_config(tmp_path, sandbox, user=select_only), password="pw")
    assert result.exit_code == 1
    lines = [line.strip() for line in result.output.splitlines()]
    grants = next(i for i, line in enumerate(lines) if line.startswith("FAIL  grants"))
    assert "'doctor_sel'@'127.0.0.1' lacks SLAVE MONITOR, BINLOG MONITOR" in lines[grants]
    assert lines[grants + 1] == "fix: GRANT SLAVE MONITOR, BINLOG MONITOR ON *.* TO 'doctor_sel'@'127.0.0.1';"
    replica = [line for line in lines if line.startswith("FAIL  replica")]
    assert len(replica) == 1 and "refused SHOW ALL SLAVES STATUS" in replica[0]


def test_more_privileges_than_needed(sandbox: Sandbox, select_only: str, tmp_path: Path) -> None:
    sandbox.replica().query("GRANT SUPER, INSERT ON *.* TO 'doctor_sel'@'127.0.0.1'")
    result = run(write_config(tmp_path, sandbox, user=select_only), password="pw")
    assert result.exit_code == 1
    assert ("warn  grants             'doctor_sel'@'127.0.0.1' has more than lagd needs: "
            "INSERT, SUPER ON *.*") in result.output
    assert "fix: REVOKE INSERT, SUPER ON *.* FROM 'doctor_sel'@'127.0.0.1';" in result.output


@pytest.fixture
def statement_logged(sandbox: Sandbox, schema: str) -> Iterator[Sandbox]:
    """A session on the source logs its changes as statements; they reach the replica's relay log."""
    fresh_relay_log(sandbox)
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v INT)")
    conn = sandbox.source.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            cur.execute(f"INSERT INTO `{schema}`.t VALUES (1, 1), (2, 2)")
            cur.execute(f"UPDATE `{schema}`.t SET v = v + 1 WHERE id = 1")
    finally:
        conn.close()
    sandbox.wait_caught_up()
    try:
        yield sandbox
    finally:
        fresh_relay_log(sandbox)  # leave no statement events behind for later tests


def test_statement_based_binlog(statement_logged: Sandbox, tmp_path: Path) -> None:
    result = run(write_config(tmp_path, statement_logged))
    assert result.exit_code == 1, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    warn = next(i for i, line in enumerate(lines) if line.startswith("warn  binlog_format"))
    assert "2 statement-based row changes among" in lines[warn]
    assert "(e.g. 'INSERT INTO `t_" in lines[warn]
    assert lines[warn + 1].startswith(
        "fix: on the source: SET PERSIST binlog_format = 'ROW' (MySQL) or "
        "SET GLOBAL binlog_format = 'ROW' plus binlog_format=ROW in my.cnf (MariaDB)")
    assert lines[-1] == "1 problem (binlog_format): fix it and run lagctl doctor again"


def test_wrong_relay_log_path_and_missing_heartbeat(sandbox: Sandbox, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sandbox, replica={"relay_log_index": str(tmp_path / "nope" / "relay.index")},
                       lag={"heartbeat_table": "nope.heartbeat"})
    result = run(cfg)
    assert result.exit_code == 1
    lines = [line.strip() for line in result.output.splitlines()]
    relay = next(i for i, line in enumerate(lines) if line.startswith("FAIL  relay_log_access"))
    assert "relay.index does not exist" in lines[relay]
    assert lines[relay + 1] == ("fix: set replica.relay_log_index to the replica's @@relay_log_index "
                                "(an absolute path)")
    hb = next(i for i, line in enumerate(lines) if line.startswith("FAIL  heartbeat"))
    assert "heartbeat table nope.heartbeat does not exist" in lines[hb]
    assert lines[hb + 1].startswith(
        "fix: create it on the source (lagd heartbeat --source DSN --create-table")


def test_wrong_password(sandbox: Sandbox, tmp_path: Path) -> None:
    result = run(write_config(tmp_path, sandbox), password="wrong")
    assert result.exit_code == 1
    assert "FAIL  connect" in result.output and "Access denied for user 'lagd'" in result.output
    assert "fix: check replica.user (lagd) and the password (from environment variable LAGD_PASSWORD" \
        in result.output
