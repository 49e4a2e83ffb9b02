"""lagd: the daemon's entry point and lifecycle.

One ``asyncio.run``: the runtime's tasks, the HTTP server, signals and the
systemd notify protocol. SIGTERM/SIGINT stop it (probes in flight are
abandoned: their server-side timeout ends them), SIGHUP re-reads the config
and keeps the old one, saying why, when the new one is invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from lagd.config import (
    DEFAULT_CONFIG_PATH,
    RELOAD,
    ConfigError,
    Reload,
    Settings,
    changed_keys,
    load_settings,
    reload_actions,
)
from lagd.daemon import _stop_before_start, autogroup, sdnotify, wiring
from lagd.daemon.http import HttpServer
from lagd.daemon.runtime import Runtime
from lagd.daemon.state import Snapshot
from lagd.errors import LagdError
from lagd.heartbeat import heartbeat_command

log = logging.getLogger("lagd")
T = TypeVar("T")

STOP_BUDGET = 4.0  # seconds: exit well within systemd's and the 5 s


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        for key in ("rule", "severity", "kind", "rows", "bytes", "estimated_seconds"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log.format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log.level.upper())


YOUNG_GC_THRESHOLD = 10_000  # net new container objects between two young collections


def tune_gc() -> None:
    """Collect reference cycles less often than Python's default (700).

    A relay-log read holds a few thousand container objects (events, row
    images) until the engine has consumed them: with the default, each read
    was traversed by several young collections and promoted into the older
    generations, 28% of the cursor thread's CPU in a catch-up (about 2 µs a
    row; benchmarks: 0-2 collections a catch-up now, about 430 before). lagd
    makes few cycles (the young collections found 0-63 objects a catch-up).
    What start-up made (modules, sqlglot's tables) is frozen: it lives as
    long as the process, and full collections no longer walk it.
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (lagd's install has it), else asyncio's.

    The event loop is lagd's hottest code while it prefetches: each probe answer is a
    loop turn (its socket's readiness, the driver's protocol, the waiting task): a
    quarter of the event loop's CPU in a random-INSERT catch-up on asyncio's own
    loop, whose turn costs more than uvloop's (docs/prefetch.md, "The driver").
    ``LAGD_EVENT_LOOP=asyncio`` keeps asyncio's (to compare, or should uvloop
    misbehave on a platform).
    """
    if os.environ.get("LAGD_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop  # noqa: PLC0415 - optional: asyncio's loop without it
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on the loop ``loop_factory`` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def status_line(rt: Runtime) -> str:
    """The one-line STATUS= for systemctl status."""
    lag = rt.lag
    if lag is None:
        return "starting: no lag reading yet"
    known = lag.lag is not None and lag.lag_method is not None
    value = f"{lag.lag:.1f}s by {lag.lag_method.value}" if known and lag.lag_method else "unknown"
    pf = rt.prefetcher.snapshot().state if rt.prefetcher is not None else "off"
    return f"{lag.state.value}: lag {value}; prefetch {pf}"


RuntimeFactory = Callable[[Settings, "Path | None", Callable[[], None]], Runtime]


class Daemon:
    def __init__(self, settings: Settings, config_path: Path | None,
                 make_runtime: RuntimeFactory = wiring.runtime) -> None:
        self.settings = settings
        self.config_path = config_path
        self.make_runtime = make_runtime
        self.runtime = make_runtime(settings, config_path, self._ready)
        self.http: HttpServer | None = None
        self.stop = asyncio.Event()
        self.reload_requested = asyncio.Event()

    def _snapshot(self) -> Snapshot:
        return self.runtime.snapshot()

    def _ready(self) -> None:
        sdnotify.ready(status_line(self.runtime))
        log.info("ready: %s", status_line(self.runtime))

    async def _start_http(self) -> None:
        if self.settings.http.enabled:
            # Through self: a reload may replace the runtime under a running server.
            self.http = HttpServer(self._snapshot, self.settings.http.host, self.settings.http.port)
            await self.http.start()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload_requested.set)
        for note in self.settings.notes():
            log.warning("config: %s", note)
        try:
            await self._start_http()
        except OSError as e:
            raise LagdError(f"cannot listen on {self.settings.http.listen}: {e.strerror or e}",
                            fix="choose a free port in http.listen, or stop what uses it") from e
        self.runtime.start()
        watchdog = asyncio.create_task(self._watchdog(), name="watchdog")
        try:
            while not self.stop.is_set():
                waiters = [asyncio.create_task(self.stop.wait()),
                           asyncio.create_task(self.reload_requested.wait())]
                await asyncio.wait(waiters, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
                if self.reload_requested.is_set() and not self.stop.is_set():
                    self.reload_requested.clear()
                    await self.reload()
                sdnotify.status(status_line(self.runtime))
        finally:
            sdnotify.stopping()
            log.info("stopping")
            watchdog.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._shutdown(), STOP_BUDGET)
        return 0

    async def _shutdown(self) -> None:
        await self.runtime.stop()
        if self.http is not None:
            await self.http.stop()

    async def reload(self) -> None:
        """Re-read the config; each changed key takes effect as config.RELOAD declares."""
        sdnotify.reloading()
        try:
            new = load_settings(self.config_path)
            new.replica.check_password()
            changed = changed_keys(self.settings, new)
            actions = reload_actions(changed)
            fresh = self.make_runtime(new, self.config_path, lambda: None) if Reload.ALL in actions else None
        except LagdError as e:
            problems = getattr(e, "problems", None) or (str(e),)
            msg = "; ".join(problems)
            self.runtime.config_error = f"reload refused, still running on the previous config: {msg}"
            log.error("reload refused, keeping the previous config: %s", msg)
            sdnotify.ready(f"reload refused: {msg[:200]}")
            return
        self.runtime.config_error = None
        log.info("reloaded %s: %s", self.config_path, "; ".join(
            f"{k} ({RELOAD.get(k, Reload.ALL)})" for k in changed) or "nothing changed")
        if any(k.startswith("log.") for k in changed):
            setup_logging(new)
        self.settings = new
        if fresh is not None:
            # The replica, its credentials or the sessions change: start the subsystems afresh.
            await self.runtime.stop()
            self.runtime = fresh
            self.runtime.start()
        else:
            self.runtime.apply(new)
            if Reload.RELAY in actions:
                await self.runtime.restart_relay()
        if Reload.HTTP in actions:
            if self.http is not None:
                await self.http.stop()
                self.http = None
            try:
                await self._start_http()
            except OSError as e:
                self.runtime.config_error = f"cannot listen on {new.http.listen}: {e.strerror or e}"
                log.error("reload: %s; the HTTP server is off until the next reload",
                          self.runtime.config_error)
        sdnotify.ready(status_line(self.runtime))

    async def _watchdog(self) -> None:
        """WATCHDOG=1 only while the main loop and the lag poller make progress."""
        interval = sdnotify.watchdog_interval()
        if interval is None:
            return
        while True:
            rt = self.runtime
            now = time.monotonic()
            fresh_loop = now - rt.loop_tick < 3 * max(1.0, interval)
            fresh_lag = now - rt.last_lag_loop < max(30.0, 5 * self.settings.lag.poll_interval)
            if fresh_loop and fresh_lag:
                sdnotify.watchdog()
            else:
                log.error("not pinging the watchdog: main loop %.0f s, lag poller %.0f s behind",
                          now - rt.loop_tick, now - rt.last_lag_loop)
            await asyncio.sleep(interval)


@click.group()
@click.version_option(package_name="lagd")
def main() -> None:
    """lagd: replication-lag mitigation daemon."""


@main.command("run")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help=f"TOML config (default {DEFAULT_CONFIG_PATH} when it exists, else built-in defaults)")
def run_command(config_path: Path | None) -> None:
    """Run the daemon in the foreground (systemd: Type=notify)."""
    # Until the event loop takes the signals over, a stop request ends lagd
    # cleanly (exit 0), not by the signal: nothing has started that needs undoing.
    # (The ``lagd`` command, lagd.daemon.command, does so before the imports already.)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_before_start)
    if config_path is None and DEFAULT_CONFIG_PATH.exists():
        config_path = DEFAULT_CONFIG_PATH
    try:
        settings = load_settings(config_path)
        settings.replica.check_password()
    except ConfigError as e:
        for p in e.problems:
            click.echo(f"lagd: {p}", err=True)
        sys.exit(2)
    except LagdError as e:
        click.echo(f"lagd: {e}", err=True)
        sys.exit(2)
    setup_logging(settings)
    tune_gc()
    autogroup.share_nice()
    try:
        sys.exit(run_async(Daemon(settings, config_path).run()))
    except LagdError as e:
        log.error("%s", e)
        sys.exit(1)


main.add_command(heartbeat_command)


if __name__ == "__main__":
    main()
