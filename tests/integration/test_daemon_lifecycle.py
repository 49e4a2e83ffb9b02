"""The real `lagd run` process on the sandbox: systemd notify, reload, stop, a replica crash."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.daemon_util import NotifySocket, running_daemon


@pytest.fixture
def own_sandbox():
    """These tests kill servers: they get a pair of their own."""
    with Sandbox(SandboxConfig()) as sb:
        yield sb


def test_ready_watchdog_reload_and_stop(own_sandbox: Sandbox, tmp_path: Path) -> None:
    sb = own_sandbox
    notify = NotifySocket(tmp_path / "notify.sock")
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "2000000"}
    try:
        with running_daemon(sb, tmp_path, env=env) as d:
            notify.wait_for("READY=1")
            before = sum("WATCHDOG=1" in m for m in notify.drain())
            time.sleep(3)
            assert sum("WATCHDOG=1" in m for m in notify.drain()) >= before + 2  # every 1 s
            assert any("STATUS=" in m for m in notify.messages)

            # A broken config on SIGHUP: it keeps running on the old one and says why.
            good = d.config.read_text()
            d.config.write_text(good + "\n[prefetch]\nconections = 3\n")
            d.proc.send_signal(signal.SIGHUP)
            notify.wait_for("RELOADING=1")
            s = d.wait_for(lambda s: bool(s.get("config_error")))
            assert "conections" in s["config_error"] and "did you mean" in s["config_error"]
            assert d.proc.poll() is None
            assert d.get("/healthz")[0] == 200

            # A good one is applied, and the error clears.
            d.config.write_text(good.replace("stale_after = 5.0", "stale_after = 6.0"))
            d.proc.send_signal(signal.SIGHUP)
            s = d.wait_for(lambda s: not s.get("config_error") and s["settings"]["lag"]["stale_after"] == 6.0)

            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            rc = d.proc.wait(10)
            took = time.monotonic() - t0
            print(f"SIGTERM to exit: {took:.2f} s")
            assert rc == 0
            assert took < 5.0
            notify.wait_for("STOPPING=1", timeout=2)
    finally:
        notify.close()


def test_survives_a_replica_crash_and_restart(own_sandbox: Sandbox, tmp_path: Path) -> None:
    sb = own_sandbox
    with running_daemon(sb, tmp_path) as d:
        d.wait_for(lambda s: s["lag"]["state"] == "idle")
        sb.kill_server(sb.replica().name)
        s = d.wait_for(lambda s: s["lag"]["state"] == "unknown", timeout=20)
        assert s["status_error"]
        code, body = d.get("/readyz")
        assert code == 503 and "no replica status" in body
        assert d.get("/healthz")[0] == 200  # the daemon itself is fine
        code, metrics = d.get("/metrics")
        assert code == 200 and 'lagd_replica_state{channel="",state="unknown"} 1.0' in metrics
        sb.restart_server(sb.replica().name)
        sb.source.query("CREATE DATABASE IF NOT EXISTS after_crash")
        d.wait_for(lambda s: s["lag"]["state"] == "idle" and s["status"] is not None, timeout=60)
        assert d.proc.poll() is None
        assert d.get("/readyz")[0] == 200
