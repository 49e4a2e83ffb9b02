"""``lagctl advise`` with click's CliRunner against the sandbox replica.

The daemon is a closed port (bound, not listening: refused at once), so the
command falls back to the replica; and a real ``lagd.daemon.http`` app serving a
snapshot of a real AdvisorRuntime (refreshed from the sandbox, fed synthetic
relay-log events) stands in for a running daemon.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors
import pytest
from aiohttp import web
from click.testing import CliRunner, Result

from lagd.advisor import RULES
from lagd.advisor.runtime import AdvisorRuntime
from lagd.cli import advise as cli_advise
from lagd.cli.advise import advise
from lagd.config import settings_from_dict
from lagd.daemon.http import make_app
from lagd.daemon.state import ReplicaInfo, Snapshot
from lagd.relaylog import (
    Column,
    Event,
    Index,
    RelayPosition,
    RowChange,
    RowKind,
    RowsQuery,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)
from lagd.sandbox.pair import Sandbox

PASSWORD_ENV = "LAGD_TEST_ADVISE_PASSWORD"


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: connections are refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def write_config(tmp_path: Path, replica_port: int, http_port: int, **advisor: Any) -> Path:
    path = tmp_path / "lagd.toml"
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in advisor.items())
    path.write_text(
        "[replica]\n"
        f'host = "127.0.0.1"\nport = {replica_port}\nuser = "lagd"\npassword_env = "{PASSWORD_ENV}"\n'
        "connect_timeout = 3.0\n"
        f'[http]\nlisten = "127.0.0.1:{http_port}"\n'
        + (f"[advisor]\n{extra}" if extra else "")
    )
    return path


def run(args: list[str], password: str) -> Result:
    return CliRunner().invoke(advise, args, env={PASSWORD_ENV: password, "http_proxy": "http://127.0.0.1:9"})


@pytest.fixture
def config(sandbox: Sandbox, tmp_path: Path, closed_port: int) -> Path:
    return write_config(tmp_path, sandbox.replica().port, closed_port)


@pytest.fixture
def password(sandbox: Sandbox) -> str:
    return str(sandbox.replica().dsn.password)


# -- the daemon is down: the replica itself -----------------------------------------


def test_falls_back_to_the_replica_and_says_there_is_no_look_ahead(
    config: Path, password: str, closed_port: int,
) -> None:
    r = run(["--config", str(config)], password)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    daemon = f"the lagd daemon at http://127.0.0.1:{closed_port} is not usable ("
    assert lines[0].startswith(f"No look-ahead: {daemon}")
    assert "refused" in lines[0] and "coming big transactions unknown" in lines[0]
    assert "Coming big transactions: unknown (no look-ahead" in r.output
    assert re.search(rf"^Settings advice: \d+ of {len(RULES)} rules fire$", r.output, re.M)
    # The sandbox replica: one applier thread, no binlog of what it applies.
    assert any(line.startswith("  [info] parallel_apply: STOP SLAVE; SET GLOBAL slave_parallel_threads=4")
               for line in lines)
    assert any(line.startswith("  [info] annotate_reaches_relay_log: ") for line in lines)
    assert "     why: slave_parallel_threads=0: one applier thread" in lines
    assert any(line.startswith("     caveat: One huge transaction") for line in lines)
    assert "[silent]" not in r.output
    print("\n" + r.output)


def test_json_from_the_replica(config: Path, password: str) -> None:
    r = run(["--config", str(config), "--json"], password)
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["via"] == "replica" and "refused" in data["daemon_error"]
    assert data["upcoming"] is None and data["lookahead"]["live"] is False
    advice = {a["rule"]: a for a in data["advice"]}
    assert set(advice) == {rule.__name__ for rule in RULES}
    assert advice["parallel_apply"]["fired"] and advice["parallel_apply"]["severity"] == "info"
    assert data["seconds_behind"] == 0  # caught up, so lagging is known: False
    assert advice["durability_on_lagging_replica"]["reason"] == "the replica is not lagging"
    assert {"name": "25% of the redo capacity", "bytes": 4 << 20, "hard": False} in data["limits"]


def test_all_and_window(config: Path, password: str) -> None:
    r = run(["--config", str(config), "--all", "--window", "0.2"], password)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "  [silent] log_buffer_waits: Innodb_log_waits did not grow over the window" in lines
    shown = sum(line.startswith("  [silent] ") or bool(re.match(r"  \[(info|warning|critical)\] ", line))
                for line in lines)
    assert shown == len(RULES)


def test_exit_1_when_neither_daemon_nor_replica_answers(
    tmp_path: Path, closed_port: int, password: str,
) -> None:
    r = run(["--config", str(write_config(tmp_path, closed_port, closed_port))], password)
    assert r.exit_code == 1
    (line,) = r.output.splitlines()
    daemon = f"the lagd daemon at http://127.0.0.1:{closed_port} is not usable ("
    assert line.startswith(f"lagctl: error: {daemon}")
    assert f"and the replica 127.0.0.1:{closed_port} cannot be reached: Can't connect" in line


def test_exit_1_when_the_replica_refuses_the_login(config: Path) -> None:
    r = run(["--config", str(config)], "wrong password")
    assert r.exit_code == 1
    (line,) = r.output.splitlines()
    assert "cannot be reached: Access denied for user 'lagd'" in line and "(1045)" in line


def test_exit_2_for_configuration_and_usage(tmp_path: Path, config: Path, password: str) -> None:
    r = run(["--config", str(tmp_path / "missing.toml")], password)
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert line.startswith(f"lagctl: error: {tmp_path / 'missing.toml'}: the file does not exist; ")
    bad = tmp_path / "bad.toml"
    bad.write_text("[advisor]\nheadroom = 2.0\n")
    r = run(["--config", str(bad)], password)
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and "advisor.headroom" in r.output
    r = run(["--config", str(config), "--url", "ftp://127.0.0.1:1"], password)
    assert r.exit_code == 2 and "must start with http:// or https://" in r.output
    pw_file = tmp_path / "pw"
    pw_file.write_text("x\n")
    pw_file.chmod(0o644)
    cfg = tmp_path / "pw.toml"
    text = config.read_text().replace(f'password_env = "{PASSWORD_ENV}"', f'password_file = "{pw_file}"')
    cfg.write_text(text)
    r = run(["--config", str(cfg)], password)
    assert r.exit_code == 2 and "readable or writable by group or others" in r.output


# -- the daemon is up -----------------------------------------------------------------


def _table() -> TableInfo:
    pk = Index("PRIMARY", (0,), unique=True, primary=True)
    return TableInfo("shop", "orders", (Column("id", "LONG", False), Column("k", "LONG", True)), pk, (pk,),
                     (0,), "table_map")


def big_load(rows: int) -> list[Event]:
    t, size = _table(), 100 + 30 * rows
    return [TransactionStart("relay-bin.000002", 4, "src-bin.000001", 4, "0-1-77", 1.7e9, 1_700_000_000, 1),
            RowsQuery("LOAD DATA INFILE '/srv/import/orders.tsv' INTO TABLE shop.orders"),
            *(RowChange(t, RowKind.INSERT, None, (i, i)) for i in range(rows)),
            TransactionEnd("relay-bin.000002", 4 + size, "src-bin.000001", 4 + size, "0-1-77", True, 9, size,
                           rows, rows // 300, 1, frozenset({"shop.orders"}))]


def advisor_of(sandbox: Sandbox, **settings: Any) -> AdvisorRuntime:
    adv = AdvisorRuntime(settings_from_dict({"advisor": settings}).advisor)
    conn = pymysql.connect(**sandbox.replica().dsn.as_kwargs(), cursorclass=pymysql.cursors.DictCursor)

    async def blocking(fn: Any) -> Any:
        return await asyncio.to_thread(fn, conn)

    try:
        asyncio.run(adv.refresh(blocking, None))
    finally:
        conn.close()
    adv.feed(big_load(200_000), RelayPosition("relay-bin.000002", 4 + 100 + 30 * 200_000))
    return adv


def snapshot_of(adv: AdvisorRuntime) -> Snapshot:
    return Snapshot(taken_at=time.time(), version="test", started_at=time.time(), config_path=None,
                    config_error=None, settings={},
                    replica=ReplicaInfo("127.0.0.1:3306", "lagd", "", None, None), status=None,
                    status_error="not polled", lag=None, prefetch=None, prefetch_off_reason=None,
                    advisor=adv.snapshot(), health=(), loop_age=0.1)


@pytest.fixture
def daemon() -> Iterator[Any]:
    """Serves lagd.daemon.http's app for a snapshot function set by the test; yields (set, url)."""
    current: dict[str, Any] = {}
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(make_app(lambda: current["fn"]()), access_log=None)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return int(runner.addresses[0][1])

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield current, f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_from_the_daemon(sandbox: Sandbox, daemon: Any, config: Path, password: str) -> None:
    current, url = daemon
    adv = advisor_of(sandbox)
    current["fn"] = lambda: snapshot_of(adv)
    r = run(["--config", str(config), "--url", url + "/"], password)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(f"lagd advisor, from the daemon at {url} (settings checked ")
    assert "Coming big transactions: 1, biggest first" in lines
    title = "  1. load_data, gtid 0-1-77: 200,000 rows, 5.7 MiB on shop.orders"
    assert any(line.startswith(title) for line in lines)
    assert "     estimated stall: unknown (no apply rate learned yet" in r.output
    assert "     Split advice incomplete: no apply rate learned yet" in r.output
    assert "pt-fifo-split" in r.output and "sql_log_bin=0" in r.output
    assert "Apply rate: not learned yet" in lines
    assert any(line.startswith("  [info] parallel_apply: STOP SLAVE; SET GLOBAL slave_parallel_threads=4")
               for line in lines)
    print("\n" + r.output)

    data = json.loads(run(["--url", url, "--json"], password).output)
    assert data["via"] == "daemon" and data["daemon_error"] is None
    assert data["upcoming"][0]["gtid"] == "0-1-77" and data["large_transactions_seen"]["load_data"] == 1


def test_a_daemon_with_its_advisor_off_falls_back(sandbox: Sandbox, daemon: Any, config: Path,
                                                   password: str) -> None:
    current, url = daemon
    adv = AdvisorRuntime(settings_from_dict({"advisor": {"enabled": False}}).advisor)
    current["fn"] = lambda: snapshot_of(adv)
    r = run(["--config", str(config), "--url", url], password)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("No look-ahead:") and "its advisor is off (advisor.enabled is false" in first


def test_rich_on_a_terminal(sandbox: Sandbox, daemon: Any, config: Path, password: str,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    current, url = daemon
    adv = advisor_of(sandbox, lag_budget_seconds=5.0)
    current["fn"] = lambda: snapshot_of(adv)
    monkeypatch.setattr(cli_advise, "_terminal", lambda: True)
    r = run(["--config", str(config), "--url", url], password)
    assert r.exit_code == 0, r.output
    assert "╭─ 1. load_data, gtid 0-1-77" in r.output and "╭─ info: parallel_apply" in r.output
    print("\n" + r.output)
