"""``lagd heartbeat``: run the writer from the command line."""

from __future__ import annotations

import getpass
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import click

from lagd.errors import LagdError
from lagd.heartbeat.table import DEFAULT_TABLE, DsnError, quote_table
from lagd.heartbeat.writer import HeartbeatWriter
from lagd.mysql.endpoint import Endpoint

log = logging.getLogger("lagd.heartbeat")


@dataclass(frozen=True, slots=True)
class SourceDsn:
    host: str
    port: int = 3306
    user: str | None = None  # None: the login name, as the mysql client does
    password: str | None = None

    def __str__(self) -> str:
        who = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{who}{host}:{self.port}"


_DSN_FIX: Final = "write it as mysql://user[:password]@host[:port] or host:port"


def parse_dsn(text: str) -> SourceDsn:
    """``mysql://user[:password]@host[:port]`` or ``host[:port]``; user and password are %-decoded."""
    if "://" in text:
        if not text.lower().startswith("mysql://"):
            raise DsnError(f"--source {text.split('://', maxsplit=1)[0]}:// is not a MySQL DSN", fix=_DSN_FIX)
        parts = urlsplit(text)
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise DsnError(f"--source {text!r} has a path or options lagd does not take", fix=_DSN_FIX)
    else:
        parts = urlsplit("//" + text)
        if parts.path or parts.query or parts.fragment:
            raise DsnError(f"--source {text!r} is not host:port", fix=_DSN_FIX)
    try:
        port = parts.port
    except ValueError:
        raise DsnError(f"--source {text!r} has a bad port", fix=_DSN_FIX) from None
    if not parts.hostname:
        raise DsnError(f"--source {text!r} names no host", fix=_DSN_FIX)
    if port == 0:
        raise DsnError(f"--source {text!r} has port 0", fix=_DSN_FIX)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return SourceDsn(parts.hostname, port or 3306, user, password)


def source_connect(dsn: SourceDsn, password: str) -> Callable[[], Any]:
    """Connections for the writer: it writes, so not READ ONLY, but bounded
    like every lagd session, so a hung source costs a beat, not the writer."""
    # No user in the DSN: the login name, as the mysql client does.
    endpoint = Endpoint(dsn.host, dsn.port, dsn.user or getpass.getuser(), password, connect_timeout=5.0,
                        role="source")
    return lambda: endpoint.connect_blocking(read_only=False, statement_timeout=5.0, read_timeout=5.0,
                                             lock_wait_timeout=2)


@contextmanager
def _user_errors() -> Iterator[None]:
    # A LagdError is something the user can fix: one line, no traceback.
    try:
        yield
    except LagdError as e:
        click.echo(f"lagd heartbeat: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None


@click.command("heartbeat")
@click.option(
    "--source",
    "source",
    required=True,
    metavar="DSN",
    help="The server to write to: mysql://user[:password]@host[:port] or host:port.",
)
@click.option(
    "--password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read the password from this file (first line) unless the DSN has one.",
)
@click.option("--table", default=DEFAULT_TABLE, show_default=True, help="schema.table, pt-heartbeat layout.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option("--create-table", is_flag=True, help="Create the schema and table if missing.")
@click.option(
    "--server-id",
    type=click.IntRange(0, 2**32 - 1),
    default=None,
    help="Row to write (default: the server's @@server_id).",
)
def heartbeat_command(
    *,
    source: str,
    password_file: Path | None,
    table: str,
    interval: float,
    create_table: bool,
    server_id: int | None,
) -> None:
    """Write pt-heartbeat compatible heartbeats on the source, pausing while it is read-only.

    The password comes from the DSN, else --password-file, else the
    LAGD_HEARTBEAT_PASSWORD environment variable.
    """
    with _user_errors():
        dsn = parse_dsn(source)
        password = dsn.password
        if password is None and password_file is not None:
            try:
                text = password_file.read_text()
            except OSError as e:
                raise DsnError(
                    f"cannot read --password-file {password_file}: {e.strerror}",
                    fix="give a readable file holding the password",
                ) from None
            password = text.splitlines()[0] if text else ""
        if password is None:
            password = os.environ.get("LAGD_HEARTBEAT_PASSWORD")
        quote_table(table)

        connect = source_connect(dsn, password or "")

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        writer = HeartbeatWriter(connect, table, interval, server_id, create_table=create_table)
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info("writing heartbeats to %s on %s every %s s", table, dsn, interval)
        try:
            writer.run(stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("stopped after %d heartbeats", writer.written)
