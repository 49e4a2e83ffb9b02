"""The throttle endpoint of a real `lagd run` on the sandbox.

Fine when caught up; throttled (non-200, with the reason) when the SQL
thread is stopped, the IO thread is stopped, and when lag is unknown (a
daemon whose replica does not answer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from lagd.heartbeat import HeartbeatWriter
from lagd.sandbox.pair import Sandbox
from lagd.sandbox.server import free_port
from tests.integration.daemon_util import LAGD, Daemon, running_daemon

# The same heartbeat writer fixture as the daemon lag tests (a pytest fixture, used by name).
from .test_daemon_lag import TABLE, heartbeat  # noqa: F401


def _wait_check(d: Daemon, want: int, timeout: float = 30.0) -> dict[str, object]:
    last: tuple[int, str] = (0, "")
    def ok(_s: dict[str, object]) -> bool:
        nonlocal last
        last = d.get("/check/lagctl?max_lag=5")
        return last[0] == want
    try:
        d.wait_for(ok, timeout)
    except AssertionError as e:
        raise AssertionError(f"/check never answered {want}; last {last}") from e
    body: dict[str, object] = json.loads(last[1])
    return body


def test_throttle_follows_the_replica(sandbox: Sandbox, heartbeat: HeartbeatWriter,  # noqa: F811
                                      tmp_path: Path) -> None:
    sb = sandbox
    with running_daemon(sb, tmp_path, extra=f'heartbeat_table = "{TABLE}"') as d:
        body = _wait_check(d, 200)
        assert body["ok"] is True and body["method"] in ("heartbeat", "event_time")
        assert d.get("/throttle?max_lag=5")[0] == 200
        assert d.get("/throttle?max_lag=abc")[0] == 400
        head = urllib.request.Request(f"{d.url}/throttle?max_lag=5", method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as r:  # gh-ost asks with HEAD
            assert r.status == 200 and "within" in r.headers["X-Lagd-Throttle-Reason"]

        sb.stop_sql_thread()
        try:
            body = _wait_check(d, 503)
            assert "SQL thread is not running" in str(body["reason"])
            status, text = d.get("/throttle?max_lag=1000")
            assert status == 503 and text.startswith("throttle: ")
        finally:
            sb.start_sql_thread()
        _wait_check(d, 200)

        sb.stop_io_thread()
        try:
            body = _wait_check(d, 503)
            assert "IO thread is not running" in str(body["reason"])
        finally:
            sb.start_io_thread()
        _wait_check(d, 200)


def test_unknown_lag_throttles(sandbox: Sandbox, tmp_path: Path) -> None:
    # A replica that does not answer: nothing listens on the configured port.
    port, dead = free_port(), free_port()
    config = tmp_path / "lagd.toml"
    config.write_text(f'[replica]\nhost = "127.0.0.1"\nport = {dead}\nuser = "nobody"\n'
                      f'[http]\nlisten = "127.0.0.1:{port}"\n[lag]\npoll_interval = 0.5\nstale_after = 5.0\n')
    log = tmp_path / "lagd.log"
    proc = subprocess.Popen([*LAGD, "run", "--config", str(config)], env=dict(os.environ),
                            stderr=open(log, "wb"))  # noqa: SIM115 - closed with the process
    d = Daemon(proc, f"http://127.0.0.1:{port}", config, log)
    try:
        body = _wait_check(d, 503)
        assert body["ok"] is False and body["lag"] is None
        assert "unknown" in str(body["reason"])
        status, text = d.get("/throttle")
        assert status == 503 and "unknown" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
