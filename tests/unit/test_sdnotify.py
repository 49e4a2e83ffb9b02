"""lagd.daemon.sdnotify against a real unix datagram socket, as systemd would listen."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lagd.daemon import sdnotify


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    # A short name: unix socket paths are limited to 108 bytes.
    path = tmp_path / "n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(path))
        s.settimeout(5)  # a safety net against a hang, not a timing assertion
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        yield s


def received(s: socket.socket) -> list[str]:
    return s.recv(4096).decode().split("\n")


@pytest.mark.parametrize(
    ("send", "lines"),
    [
        pytest.param(lambda: sdnotify.ready(), ["READY=1"], id="ready"),
        pytest.param(
            lambda: sdnotify.ready("replica db1 ok"), ["READY=1", "STATUS=replica db1 ok"], id="ready-status"
        ),
        pytest.param(lambda: sdnotify.status("lag 3 s"), ["STATUS=lag 3 s"], id="status"),
        pytest.param(
            lambda: sdnotify.status("two\nlines"), ["STATUS=two lines"], id="status-newline-flattened"
        ),
        pytest.param(sdnotify.watchdog, ["WATCHDOG=1"], id="watchdog"),
        pytest.param(sdnotify.stopping, ["STOPPING=1"], id="stopping"),
        pytest.param(lambda: sdnotify.notify("A=1", "B=2"), ["A=1", "B=2"], id="notify-lines"),
    ],
)
def test_messages(listener: socket.socket, send: Callable[[], bool], lines: list[str]) -> None:
    assert send() is True
    assert received(listener) == lines


def test_reloading_carries_the_monotonic_clock(listener: socket.socket) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert sdnotify.reloading() is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = received(listener)
    assert first == "RELOADING=1"
    key, _, usec = second.partition("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(usec) <= after


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"lagd-test-{os.getpid()}-{id(monkeypatch)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind("\0" + name)
        s.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.ready() is True
        assert received(s) == ["READY=1"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="unset"),
        pytest.param("", id="empty"),
        pytest.param("vsock:2:1234", id="unsupported-transport"),
        pytest.param("/nonexistent/notify", id="no-listener"),
    ],
)
def test_no_socket_is_a_quiet_false(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    else:
        monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert sdnotify.ready("x") is False
    assert sdnotify.watchdog() is False


def test_newline_in_a_line_is_a_bug(listener: socket.socket) -> None:
    with pytest.raises(ValueError, match="newline"):
        sdnotify.notify("STATUS=a\nREADY=1")


@pytest.mark.parametrize(
    ("usec", "pid", "interval"),
    [
        pytest.param(None, None, None, id="no-watchdog"),
        pytest.param("30000000", None, 15.0, id="half-of-30s"),
        pytest.param("30000000", "OURS", 15.0, id="our-pid"),
        pytest.param("30000000", "OTHER", None, id="someone-elses-pid"),
        pytest.param("0", None, None, id="zero"),
        pytest.param("soon", None, None, id="garbage"),
        pytest.param("500000", None, 0.25, id="sub-second"),
    ],
)
def test_watchdog_interval(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, interval: float | None
) -> None:
    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            pids = {"OURS": str(os.getpid()), "OTHER": str(os.getpid() + 1)}
            monkeypatch.setenv(name, pids.get(value, value))
    assert sdnotify.watchdog_interval() == interval
