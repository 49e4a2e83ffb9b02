"""The systemd notify protocol, without libsystemd: one datagram per message.

Under ``Type=notify`` systemd passes a unix datagram socket in
$NOTIFY_SOCKET and waits for READY=1 before it calls the service started;
with ``WatchdogSec=`` it restarts the service when WATCHDOG=1 pings stop.
Outside systemd the variable is unset and every call is a cheap no-op, so
the daemon calls these unconditionally.

After a reload (RELOADING=1) systemd considers the service reloading until
the next READY=1: send :func:`ready` again when the new configuration is in
force, or when the old one was kept.
"""

from __future__ import annotations

import os
import socket
import time


def notify(*lines: str) -> bool:
    """Send ``lines`` (``KEY=value``) as one message; False when not under systemd or it failed.

    Failure is not raised: the daemon must keep running without a service
    manager, and a lost watchdog ping shows up as systemd's restart, which
    names the cause in the journal.
    """
    address = os.environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        address = "\0" + address[1:]  # Linux abstract socket namespace
    elif not address.startswith("/"):
        return False  # unset, or a transport we do not speak (vsock)
    for line in lines:
        if "\n" in line:
            raise ValueError(f"a notify line cannot contain a newline: {line!r}")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto("\n".join(lines).encode(), address)
    except OSError:
        return False
    return True


def ready(status: str = "") -> bool:
    """Startup (or a reload) is complete."""
    return notify("READY=1", *(_status_line(status) if status else ()))


def status(text: str) -> bool:
    """A one-line state shown by ``systemctl status``."""
    return notify(*_status_line(text))


def watchdog() -> bool:
    """The keep-alive ping; send it every :func:`watchdog_interval` seconds."""
    return notify("WATCHDOG=1")


def reloading() -> bool:
    """A reload began; systemd wants the monotonic time to match it with the request."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}")


def stopping() -> bool:
    """Shutdown began; systemd stops expecting watchdog pings."""
    return notify("STOPPING=1")


def watchdog_interval() -> float | None:
    """Seconds between watchdog pings (half systemd's timeout), None when no watchdog is set.

    $WATCHDOG_PID names the process the watchdog is meant for; a child that
    inherited the environment must not ping on its parent's behalf.
    """
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    if not usec.isdigit() or int(usec) == 0:
        return None
    return int(usec) / 2 / 1_000_000


def _status_line(text: str) -> tuple[str]:
    # The protocol is line-based: a newline inside a status would start a bogus assignment.
    return ("STATUS=" + " ".join(text.splitlines()),)
