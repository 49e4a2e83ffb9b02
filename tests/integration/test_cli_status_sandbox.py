"""lagctl status against the sandbox: the replica fallback in known states, and the real daemon.

The daemon URL points at a closed port, so ``lagctl status`` asks the replica
itself as the ``lagd`` user. Lag is made deterministic by giving the source's
events an old timestamp (``SET TIMESTAMP``) and holding the SQL thread on a
table lock: ``Seconds_Behind_Master`` then starts above the thresholds, and
the assertions do not depend on how long the test takes.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lagd.cli.status import CRITICAL, OK, WARNING, fetch_daemon, status
from lagd.heartbeat import create_table_sql, format_ts
from lagd.sandbox.pair import Sandbox

OLD = 1000  # seconds: how old the source's events are made to look


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(tmp_path: Path, sandbox: Sandbox, **sections: dict[str, Any]) -> Path:
    data: dict[str, dict[str, Any]] = {
        "replica": {"host": "127.0.0.1", "port": sandbox.replica().port, "user": "lagd",
                    "password_env": "LAGD_PASSWORD"},
        "status": {"daemon_url": f"http://127.0.0.1:{free_port()}"},  # nothing listens there
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    text = "".join(f"[{n}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in vs.items())
                   for n, vs in data.items())
    path = tmp_path / "lagd.toml"
    path.write_text(text)
    return path


def run(cfg: Path, *args: str) -> Any:
    return CliRunner().invoke(status, ["--config", str(cfg), *args], env={"LAGD_PASSWORD": "lagd"})


def fallback_line(cfg: Path) -> str:
    url = next(line.split(" = ")[1].strip('"\n') for line in cfg.read_text().splitlines()
               if line.startswith("daemon_url"))
    return f"lagd daemon not reachable at {url} (connection refused); showing the replica's own status"


def test_caught_up(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.wait_caught_up()
    cfg = write_config(tmp_path, sandbox)
    result = run(cfg)
    lines = result.output.splitlines()
    assert result.exit_code == OK, result.output
    assert lines[0] == fallback_line(cfg)
    assert lines[-1] == "OK: lag 0.0 s by sbm (< 60 s), idle (applied everything received)"
    for text in ("IO thread  running", "SQL thread running", "errors     none",
                 "heartbeat  missing   heartbeat not configured",
                 "event_time missing   relay-log reader not available",
                 "sbm        0.0 s     as reported by the server",
                 "prefetch   off: runs inside the daemon, which is not reachable"):
        assert text in result.output, text

    doc = json.loads(run(cfg, "--json").stdout)
    assert doc["verdict"]["code"] == OK and doc["verdict"]["source"] == "replica"
    assert doc["status"]["sql_running"] is True and doc["lag"]["sbm"]["seconds"] == 0.0
    assert doc["replica"]["flavor"].startswith("MariaDB")


def test_sql_thread_stopped(sql_thread_stopped: Sandbox, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sql_thread_stopped)
    result = run(cfg)
    lines = result.output.splitlines()
    assert result.exit_code == CRITICAL, result.output
    assert lines[0] == fallback_line(cfg)
    assert lines[-1].startswith("CRITICAL: lag unknown, SQL thread not running (no error)")
    # The number that usually reads 0 is missing, with the reason, never a fake 0.
    assert "sbm        missing   server reports NULL: the SQL thread is not running" in result.output
    assert "ETA        never at the current speed" in result.output

    doc = json.loads(run(cfg, "--json").stdout)
    assert (doc["verdict"]["code"], doc["lag"]["state"], doc["lag"]["lag"]) == (CRITICAL, "stopped", None)


@pytest.fixture
def lagging(sandbox: Sandbox, schema: str) -> Iterator[tuple[Sandbox, float]]:
    """The replica's SQL thread waits on a lock inside a transaction the source ran OLD seconds ago.

    Yields the sandbox and the monotonic time just before that transaction:
    the lag then grows by a second a second, from OLD.
    """
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    sandbox.wait_caught_up()
    lock = sandbox.replica().connect()
    try:
        with lock.cursor() as cur:
            cur.execute(f"LOCK TABLES `{schema}`.t WRITE")
        src = sandbox.source.connect()
        try:
            with src.cursor() as cur:
                written = time.monotonic()
                cur.execute(f"SET TIMESTAMP = UNIX_TIMESTAMP() - {OLD}")
                cur.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
        finally:
            src.close()
        deadline = time.monotonic() + 30
        while (sandbox.slave_status()["Seconds_Behind_Master"] or 0) < OLD:
            assert time.monotonic() < deadline, f"no lag: {sandbox.slave_status()}"
            time.sleep(0.05)
        yield sandbox, written
    finally:
        lock.close()  # releases the table lock; the SQL thread goes on
        sandbox.wait_caught_up(timeout=60)


def test_lagging(lagging: tuple[Sandbox, float], tmp_path: Path) -> None:
    sandbox, written = lagging
    cfg = write_config(tmp_path, sandbox)
    result = run(cfg, "--warn", str(OLD // 2), "--crit", "100000")
    # The servers count whole seconds: the lag is OLD plus the seconds since the
    # transaction, one more at most for the truncated timestamp.
    grown = time.monotonic() - written + 1
    lines = result.output.splitlines()
    assert result.exit_code == WARNING, result.output
    assert lines[0] == fallback_line(cfg)
    shown = re.fullmatch(rf"WARNING: lag (\d+) s by sbm \(>= {OLD // 2} s\), applying.*", lines[-1])
    assert shown and OLD <= int(shown[1]) <= OLD + grown, lines[-1]
    assert "state      applying: executed source position is behind the read position" in result.output

    critical = run(cfg, "--warn", "10", "--crit", str(OLD // 2), "--json")
    doc = json.loads(critical.stdout)
    assert critical.exit_code == CRITICAL and doc["verdict"]["status"] == "CRITICAL"
    assert doc["lag"]["lag_method"] == "sbm" and doc["lag"]["lag"] >= OLD


def test_heartbeat_when_configured(sandbox: Sandbox, schema: str, tmp_path: Path) -> None:
    table = f"{schema}.heartbeat"
    sandbox.source.query(create_table_sql(table))
    source_id = int(sandbox.source.query("SELECT @@server_id AS i")[0]["i"])
    written = time.monotonic()
    sandbox.source.query(f"INSERT INTO {table} (ts, server_id) VALUES (%s, %s)",
                         (format_ts(time.time() - OLD), source_id))
    sandbox.wait_caught_up()
    cfg = write_config(tmp_path, sandbox, lag={"heartbeat_table": table})
    result = run(cfg, "--warn", str(OLD // 2), "--crit", "100000")
    # The row's age is OLD plus the seconds since it was written (a loaded machine
    # showed 1,001 s for 1,000), one more at most for the rounding.
    grown = time.monotonic() - written + 1
    assert result.exit_code == WARNING, result.output
    shown = re.fullmatch(r"WARNING: lag (\d+) s by heartbeat .*", result.output.splitlines()[-1])
    assert shown and OLD <= int(shown[1]) <= OLD + grown, result.output.splitlines()[-1]
    age = re.search(r"heartbeat  (\d+) s ", result.output)
    assert age and OLD <= int(age[1]) <= OLD + grown, result.output  # the row's age, not SBM's 0


def _lagd() -> Path:
    return Path(sys.executable).parent / "lagd"


def _has_lagd_run() -> bool:
    try:
        probe = subprocess.run([str(_lagd()), "run", "--help"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@pytest.mark.skipif(not _has_lagd_run(), reason="`lagd run` is not there yet")
def test_real_daemon_caught_up(sandbox: Sandbox, tmp_path: Path) -> None:
    sandbox.wait_caught_up()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = write_config(tmp_path, sandbox, http={"listen": f"127.0.0.1:{port}"}, status={"daemon_url": url},
                       advisor={"enabled": False})
    env = dict(os.environ, LAGD_PASSWORD="lagd")
    daemon = subprocess.Popen([str(_lagd()), "run", "--config", str(cfg)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:  # until the daemon has a reading of the caught-up replica
            snap, why = fetch_daemon(url, timeout=1.0)
            if snap and isinstance(snap.get("lag"), dict) and snap["lag"]["state"] == "idle":
                break
            # A broken /status is a bug to see now, not a reason to wait for the deadline.
            assert not (why or "").startswith("HTTP 5"), f"the daemon's /status fails: {why}"
            assert daemon.poll() is None, daemon.stderr.read().decode() if daemon.stderr else ""
            assert time.monotonic() < deadline, f"the daemon never reported idle: {snap}"
            time.sleep(0.2)
        result = run(cfg)
        assert result.exit_code == OK, result.output
        lines = result.output.splitlines()
        assert lines[0].startswith("replica    127.0.0.1:")  # from the daemon: no fallback line
        assert lines[-1].startswith("OK: lag ")
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
