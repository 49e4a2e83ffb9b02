"""The sandbox's pure parts: GTID arithmetic, option building, state files,
binary lookup. No server is started here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lagd.errors import LagdError
from lagd.sandbox import server as sandbox_server
from lagd.sandbox.pair import (
    Sandbox,
    SandboxConfig,
    SandboxError,
    Server,
    default_state_file,
    gtid_pos_reached,
    parse_gtid_pos,
)
from lagd.sandbox.server import normalize_option, pid_runs_datadir, render_options


def test_parse_gtid_pos() -> None:
    assert parse_gtid_pos("") == {}
    assert parse_gtid_pos("0-1-6") == {0: 6}
    assert parse_gtid_pos("0-1-6,1-2-3") == {0: 6, 1: 3}
    assert parse_gtid_pos(" 0-1-6,\n1-2-3 ") == {0: 6, 1: 3}
    with pytest.raises(SandboxError):
        parse_gtid_pos("0-1")


@pytest.mark.parametrize(
    ("target", "current", "reached"),
    [
        ("", "", True),
        ("0-1-5", "", False),
        ("0-1-5", "0-1-4", False),
        ("0-1-5", "0-1-5", True),
        ("0-1-5", "0-1-9", True),
        # A failover changes the server id, not the sequence order.
        ("0-1-5", "0-2-6", True),
        ("0-1-5,1-1-2", "0-1-5", False),
        ("0-1-5,1-1-2", "1-1-2,0-1-5", True),
    ],
)
def test_gtid_pos_reached(target: str, current: str, reached: bool) -> None:
    assert gtid_pos_reached(target, current) is reached


def test_source_and_replica_options() -> None:
    cfg = SandboxConfig(
        source_buffer_pool_mb=32,
        replica_buffer_pool_mb=96,
        o_direct=True,
        slave_parallel_threads=4,
        slave_parallel_mode="conservative",
    )
    src = cfg.server_options("source", "source")
    rep = cfg.server_options("replica", "replica0")
    assert src["log-bin"] == "source-bin"
    assert "relay-log" not in src
    assert "read-only" not in src
    assert src["innodb-buffer-pool-size"] == "32M"
    assert rep["innodb-buffer-pool-size"] == "96M"
    assert "log-bin" not in rep
    assert rep["relay-log"] == "replica0-relay-bin"
    assert rep["read-only"] == "ON"
    assert rep["slave-parallel-threads"] == "4"
    assert rep["slave-parallel-mode"] == "conservative"
    for opts in (src, rep):
        assert opts["binlog-format"] == "ROW"
        assert opts["binlog-row-image"] == "FULL"
        assert opts["binlog-row-metadata"] == "FULL"
        assert opts["innodb-flush-method"] == "O_DIRECT"
        assert opts["innodb-flush-log-at-trx-commit"] == "2"
        assert opts["sync-binlog"] == "0"
        assert "skip-slave-start" in opts
        assert opts["performance-schema"] == "OFF"


def test_flush_method_is_explicit_both_ways() -> None:
    # 10.6+ defaults to O_DIRECT, so "off" must be spelled out too.
    assert SandboxConfig().server_options("source", "s")["innodb-flush-method"] == "fsync"


def test_replica_log_bin_turns_on_log_slave_updates() -> None:
    rep = SandboxConfig(replica_log_bin=True).server_options("replica", "replica1")
    assert rep["log-bin"] == "replica1-bin"
    assert rep["log-slave-updates"] == "ON"


def test_extra_options_override_defaults_by_normalized_name() -> None:
    cfg = SandboxConfig(replica_extra_options={"innodb_buffer_pool_size": "256M", "--skip-log-bin": None})
    rep = cfg.server_options("replica", "replica0")
    assert rep["innodb-buffer-pool-size"] == "256M"
    assert rep["skip-log-bin"] is None
    assert "--skip-log-bin" in render_options(rep)
    assert "--innodb-buffer-pool-size=256M" in render_options(rep)


@pytest.mark.parametrize(
    "config",
    [
        SandboxConfig(replicas=0),
        SandboxConfig(source_buffer_pool_mb=1),
        SandboxConfig(slave_parallel_mode="fast"),
        SandboxConfig(source_extra_options={"server_id": "9"}),
        SandboxConfig(replica_extra_options={"--port": "3306"}),
    ],
)
def test_invalid_configs_are_refused(config: SandboxConfig) -> None:
    with pytest.raises(SandboxError):
        config.validate()


def test_normalize_option() -> None:
    assert normalize_option("--innodb_flush_method") == "innodb-flush-method"


def test_default_state_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_state_file() == tmp_path / "lagd-sandbox.json"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_state_file().name == f"lagd-sandbox-{os.getuid()}.json"


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert sandbox_server.default_cache_dir() == tmp_path / "lagd"


def _server(tmp_path: Path, **kw: object) -> Server:
    args: dict[str, object] = {
        "name": "replica0",
        "role": "replica",
        "server_id": 2,
        "datadir": tmp_path / "replica0",
        "socket_path": tmp_path / "replica0.sock",
        "port": 40000,
        "options": {"read-only": "ON", "skip-slave-start": None},
        "mariadbd": Path("/usr/sbin/mariadbd"),
    }
    args.update(kw)
    return Server(**args)  # type: ignore[arg-type]


def test_server_state_round_trip(tmp_path: Path) -> None:
    s = _server(tmp_path, pid=1234)
    again = Server.from_state(json.loads(json.dumps(s.to_state())))
    assert again.to_state() == s.to_state()
    assert again.die_with_parent is False  # reattached servers belong to nobody


def test_server_argv_starts_with_no_defaults(tmp_path: Path) -> None:
    argv = _server(tmp_path).argv()
    assert argv[1] == "--no-defaults"
    assert "--bind-address=127.0.0.1" in argv
    assert "--port=40000" in argv
    assert "--server-id=2" in argv
    assert "--skip-slave-start" in argv
    assert f"--datadir={tmp_path / 'replica0'}" in argv


def test_dsn_is_how_lagd_connects(tmp_path: Path) -> None:
    assert _server(tmp_path).dsn.as_kwargs() == {
        "host": "127.0.0.1",
        "port": 40000,
        "user": "lagd",
        "password": "lagd",
    }


def test_too_long_socket_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="shorter base directory"):
        _server(tmp_path, socket_path=tmp_path / ("x" * 120))


def test_pid_check_does_not_match_unrelated_processes(tmp_path: Path) -> None:
    assert not pid_runs_datadir(os.getpid(), tmp_path)
    assert not pid_runs_datadir(2**22 + 7, tmp_path)  # above pid_max: no such process


def test_state_file_errors_are_sandbox_errors(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="no sandbox state"):
        Sandbox.from_state_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SandboxError, match="unreadable"):
        Sandbox.from_state_file(bad)


def test_stop_never_deletes_a_directory_it_did_not_create(tmp_path: Path) -> None:
    state = {
        "version": 1,
        "base_dir": str(tmp_path),
        "gtid": True,
        "servers": [_server(tmp_path, pid=None).to_state()],
    }
    (tmp_path / "s.json").write_text(json.dumps(state))
    Sandbox.from_state_file(tmp_path / "s.json").stop()
    assert (tmp_path / "s.json").exists()


def test_missing_binary_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sandbox_server, "EXTRA_SEARCH_DIRS", ())
    with pytest.raises(LagdError) as info:
        sandbox_server.find_binary("mariadbd")
    assert "MariaDB server is missing" in str(info.value)
    assert "apt-get install -y mariadb-server" in str(info.value)
