"""lagctl doctor's decisions as tables: grant lines, variables and relay-log events in, findings out.

The checks against a real server are in tests/integration/test_cli_doctor_sandbox.py.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lagd.cli.doctor import (
    FAIL,
    INFO,
    OK,
    WARN,
    Finding,
    binlog_findings,
    doctor,
    encryption_finding,
    grant_findings,
    parse_grants,
    performance_schema_finding,
    relay_info_finding,
    render,
    statement_dml,
)
from lagd.mysql.replica import ServerFlavor

MARIADB = ServerFlavor.from_version_string("10.11.19-MariaDB-0+deb12u1")
MARIADB_104 = ServerFlavor.from_version_string("10.4.33-MariaDB")
MARIADB_1054 = ServerFlavor.from_version_string("10.5.4-MariaDB")
MYSQL = ServerFlavor.from_version_string("8.4.3")
MYSQL_80 = ServerFlavor.from_version_string("8.0.20")
MYSQL_57 = ServerFlavor.from_version_string("5.7.44-log")
ACCOUNT = "'lagd'@'localhost'"

PARSE = [
    ("mariadb lagd", ["GRANT SELECT, BINLOG MONITOR, SLAVE MONITOR ON *.* TO `lagd`@`127.0.0.1` "
                      "IDENTIFIED BY PASSWORD '*3D26CB10A48905CB673E7F3C7CA9239D751ED0C7'"],
     {"SELECT", "BINLOG MONITOR", "SLAVE MONITOR"}, {}, ()),
    ("mysql lagd", ["GRANT SELECT, REPLICATION CLIENT ON *.* TO `lagd`@`localhost`"],
     {"SELECT", "REPLICATION CLIENT"}, {}, ()),
    ("mysql dynamic privileges", ["GRANT USAGE ON *.* TO `u`@`%`",
                                  "GRANT BACKUP_ADMIN,REPLICATION_APPLIER ON *.* TO `u`@`%`"],
     {"USAGE", "BACKUP_ADMIN", "REPLICATION_APPLIER"}, {}, ()),
    ("schema and columns", ["GRANT USAGE ON *.* TO `u`@`%`", "GRANT SELECT ON `shop`.* TO `u`@`%`",
                            "GRANT SELECT (`a`, `b`), UPDATE (`c`) ON `shop`.`t` TO `u`@`%`"],
     {"USAGE"}, {"`shop`.*": {"SELECT"}, "`shop`.`t`": {"SELECT", "UPDATE"}}, ()),
    ("all with grant option", ["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION",
                               "GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION"],
     {"ALL PRIVILEGES", "GRANT OPTION"}, {}, ()),
    ("mariadb role", ["GRANT `monitoring` TO `lagd`@`%`", "GRANT USAGE ON *.* TO `lagd`@`%`"],
     {"USAGE"}, {}, ("`monitoring`",)),
    ("mysql roles", ["GRANT USAGE ON *.* TO `u`@`%`", "GRANT `r1`@`%`,`r2`@`%` TO `u`@`%`"],
     {"USAGE"}, {}, ("`r1`@`%`", "`r2`@`%`")),
]


@pytest.mark.parametrize(("case", "lines", "global_privs", "objects", "roles"), PARSE,
                         ids=[p[0] for p in PARSE])
def test_parse_grants(case: str, lines: list[str], global_privs: set[str], objects: dict[str, set[str]],
                      roles: tuple[str, ...]) -> None:
    g = parse_grants(lines)
    assert (set(g.global_privs), {k: set(v) for k, v in g.object_privs.items()}, g.roles) == (
        global_privs, objects, roles)


def grants(*privs: str, on: dict[str, str] | None = None, roles: str = "") -> list[str]:
    lines = [f"GRANT {', '.join(privs) or 'USAGE'} ON *.* TO `lagd`@`localhost`"]
    lines += [f"GRANT {p} ON {o} TO `lagd`@`localhost`" for o, p in (on or {}).items()]
    if roles:
        lines.append(f"GRANT {roles} TO `lagd`@`localhost`")
    return lines


GRANTS = [
    # (case, flavor, grant lines, status statement worked?, levels, text that must appear)
    ("mariadb exact", MARIADB, grants("SELECT", "BINLOG MONITOR", "SLAVE MONITOR"), True, [OK],
     "has what lagd needs: SELECT, SLAVE MONITOR, BINLOG MONITOR"),
    ("mariadb select only", MARIADB, grants("SELECT"), False, [FAIL],
     "fix: GRANT SLAVE MONITOR, BINLOG MONITOR ON *.* TO 'lagd'@'localhost';"),
    # MariaDB stores REPLICATION CLIENT as BINLOG MONITOR: the MySQL advice is not enough there.
    ("mariadb mysql advice", MARIADB, grants("SELECT", "BINLOG MONITOR"), False, [FAIL],
     "lacks SLAVE MONITOR (SLAVE MONITOR for SHOW ALL SLAVES STATUS)"),
    ("mariadb 10.4", MARIADB_104, grants("SELECT", "REPLICATION CLIENT"), True, [OK], "REPLICATION CLIENT"),
    ("mariadb 10.5.4", MARIADB_1054, grants("SELECT", "REPLICATION SLAVE ADMIN", "BINLOG MONITOR"), True,
     [OK], "REPLICATION SLAVE ADMIN"),
    ("mysql exact", MYSQL, grants("SELECT", "REPLICATION CLIENT"), True, [OK], "SELECT, REPLICATION CLIENT"),
    ("mysql no select", MYSQL, grants("REPLICATION CLIENT"), True, [FAIL],
     "fix: GRANT SELECT ON *.* TO 'lagd'@'localhost';"),
    ("mysql narrow select", MYSQL, grants("REPLICATION CLIENT", on={"`shop`.*": "SELECT"}), True, [OK],
     "SELECT on `shop`.* (lagd prefetches only there)"),
    ("super covers", MARIADB, grants("SELECT", "SUPER"), True, [OK, WARN],
     "SLAVE MONITOR through SUPER, BINLOG MONITOR through SUPER"),
    ("super is too much", MARIADB, grants("SELECT", "SUPER"), True, [OK, WARN],
     "fix: REVOKE SUPER ON *.* FROM 'lagd'@'localhost';"),
    ("all privileges", MYSQL, grants("ALL PRIVILEGES"), True, [OK, WARN],
     "fix: REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'lagd'@'localhost'; "
     "GRANT SELECT, REPLICATION CLIENT ON *.* TO 'lagd'@'localhost';"),
    ("write privileges", MYSQL, grants("SELECT", "REPLICATION CLIENT", "INSERT", "UPDATE",
                                       on={"`mysql`.*": "DELETE"}), True, [OK, WARN],
     "REVOKE INSERT, UPDATE ON *.* FROM 'lagd'@'localhost'; REVOKE DELETE ON `mysql`.* FROM"),
    ("through a role", MARIADB, grants("SELECT", "BINLOG MONITOR", roles="`monitoring`"), True, [OK],
     "SLAVE MONITOR through a role"),
    ("refused whatever the lines say", MYSQL, grants("SELECT", "REPLICATION CLIENT"), False, [FAIL],
     "lacks REPLICATION CLIENT"),
]


@pytest.mark.parametrize(("case", "flavor", "lines", "readable", "levels", "text"), GRANTS,
                         ids=[g[0] for g in GRANTS])
def test_grant_findings(case: str, flavor: ServerFlavor, lines: list[str], readable: bool, levels: list[str],
                        text: str) -> None:
    found = grant_findings(parse_grants(lines), flavor, ACCOUNT, readable)
    shown = "\n".join(render(found))
    # The PROCESS recommendation (info) has a test of its own.
    assert [f.level for f in found if not f.text.startswith("recommended: PROCESS")] == levels, shown
    assert text in shown


ROW = {"log_bin": "0", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}

BINLOG = [
    # (case, variables, statement events seen (None: not looked), level of the binlog_format finding, text)
    ("row, clean relay log", ROW, 0, OK, "no statement-based row changes among 500 events of relay.000007"),
    ("statements in the relay log", ROW, 3, WARN, "3 statement-based row changes among 500 events"),
    ("replica logs statements", dict(ROW, log_bin="1", binlog_format="STATEMENT"), 0, WARN,
     "this replica writes its binary log with binlog_format=STATEMENT"),
    ("replica logs mixed", dict(ROW, log_bin="ON", binlog_format="MIXED"), 0, WARN, "binlog_format=MIXED"),
    # Without a binary log the replica's binlog_format describes nothing.
    ("replica does not log", dict(ROW, binlog_format="STATEMENT"), 0, OK,
     "this replica writes no binary log"),
    ("relay log not readable", ROW, None, INFO, "relay log not looked into (SHOW RELAYLOG EVENTS needs X)"),
]


@pytest.mark.parametrize(("case", "variables", "events", "level", "text"), BINLOG, ids=[b[0] for b in BINLOG])
def test_binlog_findings(case: str, variables: dict[str, str], events: int | None, level: str,
                         text: str) -> None:
    found = binlog_findings(variables, events, "INSERT INTO t VALUES (1)", 500,
                            "SHOW RELAYLOG EVENTS needs X" if events is None else "", "relay.000007")
    first = found[0]
    assert (first.check, first.level) == ("binlog_format", level)
    assert text in first.text
    if level == WARN:
        assert "SET PERSIST binlog_format = 'ROW'" in first.fix
    assert found[-1].check == "row_metadata" and found[-1].level == INFO
    assert "the source's" in found[-1].text and "on the source: SELECT @@GLOBAL" in found[-1].text


def test_no_row_metadata_variable() -> None:
    found = binlog_findings({"log_bin": "0", "binlog_format": "ROW"}, 0, None, 10)
    assert "has no binlog_row_metadata" in found[-1].text


EVENTS = [
    ([{"Event_type": "Query", "Info": "BEGIN"}, {"Event_type": "Write_rows_v1", "Info": "table_id: 18"}],
     0, None),
    ([{"Event_type": "Query", "Info": "INSERT INTO d.t VALUES (1,1)"}], 1, "INSERT INTO d.t VALUES (1,1)"),
    ([{"Event_type": "Query", "Info": "use `shop`; /* app */ UPDATE orders SET x=1"}], 1,
     "/* app */ UPDATE orders SET x=1"),
    ([{"Event_type": "Query", "Info": "CREATE TABLE t (id INT)"}, {"Event_type": "Query", "Info": "COMMIT"}],
     0, None),
    ([{"Event_type": "Execute_load_query", "Info": "LOAD DATA INFILE '/tmp/x' INTO TABLE t"}], 1,
     "LOAD DATA INFILE '/tmp/x' INTO TABLE t"),
]


@pytest.mark.parametrize(("events", "count", "example"), EVENTS,
                         ids=["row", "insert", "use+comment", "ddl", "load"])
def test_statement_dml(events: list[dict[str, Any]], count: int, example: str | None) -> None:
    assert statement_dml(events) == (count, example)


SETTINGS = [
    ("relay info mariadb", relay_info_finding(MARIADB, None), INFO, "n/a on MariaDB"),
    ("relay info mysql 8.4", relay_info_finding(MYSQL, None), OK, "since MySQL 8.0.23"),
    ("relay info mysql 8.0.20 table", relay_info_finding(MYSQL_80, "TABLE"), OK, "=TABLE"),
    ("relay info mysql 5.7 file", relay_info_finding(MYSQL_57, "FILE"), WARN,
     "relay_log_info_repository=FILE"),
    ("encryption mariadb on", encryption_finding(MARIADB, {"encrypt_binlog": "1"}), FAIL,
     "encrypt_binlog=ON"),
    ("encryption mariadb off", encryption_finding(MARIADB, {"encrypt_binlog": "0"}), OK,
     "encrypt_binlog=OFF"),
    ("encryption mysql on", encryption_finding(MYSQL, {"binlog_encryption": "ON"}), FAIL,
     "binlog_encryption=ON"),
    ("encryption unknown", encryption_finding(MYSQL_57, {}), OK, "no binlog_encryption"),
    ("performance_schema on", performance_schema_finding("1"), OK, "performance_schema=ON"),
    ("performance_schema off", performance_schema_finding("0"), INFO, "lagd does not need it"),
]


@pytest.mark.parametrize(("case", "finding", "level", "text"), SETTINGS, ids=[s[0] for s in SETTINGS])
def test_setting_findings(case: str, finding: Finding, level: str, text: str) -> None:
    assert finding.level == level and text in finding.text
    assert (finding.level not in (WARN, FAIL)) or finding.fix  # every problem names its fix


def test_fixes_name_the_statement() -> None:
    file_repo = relay_info_finding(MYSQL_57, "FILE")
    assert "relay_log_info_repository=TABLE and relay_log_recovery=ON" in file_repo.fix
    assert "SET PERSIST binlog_encryption = OFF" in encryption_finding(MYSQL, {"binlog_encryption": "ON"}).fix
    assert "prefetch.enabled = false" in encryption_finding(MARIADB, {"encrypt_binlog": "ON"}).fix


RENDER = [
    ([Finding("a", OK, "fine"), Finding("b", INFO, "note")], "no problems: 1 checks pass"),
    ([Finding("a", FAIL, "bad", "do x")], "1 problem (a): fix it and run lagctl doctor again"),
    ([Finding("a", WARN, "meh", "do y"), Finding("a", FAIL, "bad", "do x"), Finding("c", FAIL, "bad", "z")],
     "3 problems (a, c): fix them and run lagctl doctor again"),
]


@pytest.mark.parametrize(("findings", "last"), RENDER, ids=["clean", "one", "three"])
def test_render(findings: list[Finding], last: str) -> None:
    lines = render(findings)
    assert lines[-1] == last
    fixes = [line.strip() for line in lines if line.strip().startswith("fix: ")]
    assert fixes == [f"fix: {f.fix}" for f in findings if f.level in (WARN, FAIL)]


# --- the command without a server ----------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write(tmp_path: Path, replica: dict[str, Any]) -> Path:
    path = tmp_path / "lagd.toml"
    path.write_text("[replica]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in replica.items()))
    return path


def test_cannot_connect(tmp_path: Path) -> None:
    port = closed_port()
    cfg = write(tmp_path, {"host": "127.0.0.1", "port": port, "connect_timeout": 2.0})
    result = CliRunner().invoke(doctor, ["--config", str(cfg)], env={"LAGD_PASSWORD": "x"})
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[1].startswith(f"FAIL  connect            cannot connect to 127.0.0.1:{port} as lagd: ")
    assert lines[2].strip() == (f"fix: check replica.host (127.0.0.1) and replica.port ({port}) in {cfg}: "
                                "is the server running and listening there?")
    assert lines[-1] == "1 problem (connect): fix it and run lagctl doctor again"


def test_credential_outside_systemd(tmp_path: Path) -> None:
    cfg = write(tmp_path, {"port": closed_port(), "password_credential": "lagd-password"})
    result = CliRunner().invoke(doctor, ["--config", str(cfg)], env={"CREDENTIALS_DIRECTORY": ""})
    assert result.exit_code == 1
    assert "$CREDENTIALS_DIRECTORY is not set" in result.output and "Traceback" not in result.output


def test_invalid_config(tmp_path: Path) -> None:
    cfg = tmp_path / "lagd.toml"
    cfg.write_text("[replica]\nport = 0\n")
    result = CliRunner().invoke(doctor, ["--config", str(cfg)])
    assert result.exit_code == 1
    assert "FAIL  config             replica.port: 0 is out of range" in result.output
    assert f"fix: lagctl config validate {cfg}" in result.output


PROCESS_CASES = [
    ("mariadb without", MARIADB, grants("SELECT", "SLAVE MONITOR", "BINLOG MONITOR"), True),
    ("mariadb with", MARIADB, grants("SELECT", "SLAVE MONITOR", "BINLOG MONITOR", "PROCESS"), False),
    ("mysql needs only SELECT on performance_schema", MYSQL, grants("SELECT", "REPLICATION CLIENT"), False),
]


@pytest.mark.parametrize(("case", "flavor", "lines", "recommended"), PROCESS_CASES,
                         ids=[c[0] for c in PROCESS_CASES])
def test_process_is_recommended_not_required(case: str, flavor: ServerFlavor, lines: list[str],
                                             recommended: bool) -> None:
    found = grant_findings(parse_grants(lines), flavor, ACCOUNT, True)
    rec = [f for f in found if f.text.startswith("recommended: PROCESS")]
    assert [f.level for f in rec] == (["info"] if recommended else [])
    assert FAIL not in [f.level for f in found]
    assert all("PROCESS" not in f.text for f in found if f.level == "warn")  # never "more than it needs"
    if rec:
        assert "without it the SQL-thread split" in rec[0].text
        assert rec[0].fix == f"GRANT PROCESS ON *.* TO {ACCOUNT};"
