"""Run the real `lagd run` process against the sandbox, for lifecycle and lag tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lagd.sandbox.pair import Sandbox
from lagd.sandbox.server import free_port

LAGD = [str(Path(sys.executable).parent / "lagd")]


def write_config(path: Path, sb: Sandbox, port: int, extra: str = "") -> Path:
    rep = sb.replica()
    path.write_text(f"""[replica]
host = "127.0.0.1"
port = {rep.port}
user = "{rep.dsn.user}"
password_env = "LAGD_TEST_PASSWORD"

[http]
listen = "127.0.0.1:{port}"

[lag]
poll_interval = 0.5
stale_after = 5.0
{extra}
""")
    return path


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, config: Path, log: Path) -> None:
        self.proc, self.url, self.config, self.log = proc, url, config, log

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/status", timeout=5) as r:
            return json.loads(r.read())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_for(self, cond: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.status()
                if cond(last):
                    return last
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"condition not met in {timeout} s; last status lag: {last.get('lag')}\n"
                             f"health: {last.get('health')}\nlog: {self.log.read_text()[-3000:]}")


@contextmanager
def running_daemon(sb: Sandbox, tmp: Path, extra: str = "",
                   env: dict[str, str] | None = None) -> Iterator[Daemon]:
    port = free_port()
    config = write_config(tmp / "lagd.toml", sb, port, extra)
    log = tmp / "lagd.log"
    full_env = dict(os.environ, LAGD_TEST_PASSWORD=sb.replica().dsn.password, **(env or {}))
    proc = subprocess.Popen([*LAGD, "run", "--config", str(config)], env=full_env,
                            stderr=open(log, "wb"))  # noqa: SIM115 - closed with the process
    d = Daemon(proc, f"http://127.0.0.1:{port}", config, log)
    try:
        d.wait_for(lambda s: s.get("lag") is not None, timeout=30)
        yield d
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class NotifySocket:
    """A real unix datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []

    def drain(self) -> list[str]:
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except (TimeoutError, BlockingIOError):
                return self.messages

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in m for m in self.drain()):
                return
        raise AssertionError(f"no {text!r} on NOTIFY_SOCKET in {timeout} s; got {self.messages[-5:]}")

    def close(self) -> None:
        self.sock.close()
