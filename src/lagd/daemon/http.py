"""/metrics, /status, /healthz and /readyz, served from the runtime's snapshot.

Liveness comes from the freshness of the main loop (a ticker task stamps it
every second), not from MySQL: a replica that is down is a reason to report
state "unknown", not to get lagd restarted. Readiness says whether lagd has
a usable picture of its replica, with the reason when not.

The routes are one table (:func:`routes`, ``"GET /path" -> handler``): a new
endpoint is one more entry. Every handler answers from memory.

Clients cannot hold the daemon's sockets: a request's headers must arrive
within ``HEADER_TIMEOUT`` seconds of the connection (or of the previous
request on a kept-alive one), an idle kept-alive connection is closed after
``IDLE_TIMEOUT``, and beyond ``MAX_CONNECTIONS`` open sockets a new one is
answered 503 and closed, so a slow-loris client leaves room for a scrape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from aiohttp import web

from lagd.daemon import throttle
from lagd.daemon.metrics import CONTENT_TYPE, render
from lagd.daemon.state import Snapshot
from lagd.lag import ReplicaState

log = logging.getLogger("lagd.daemon.http")

LIVENESS_SECONDS = 10.0
HEADER_TIMEOUT = 10.0  # seconds for a request's headers to arrive
IDLE_TIMEOUT = 30.0  # seconds a kept-alive connection may wait for its next request
# Bounds file descriptors, not work: a burst of scrapes (several Prometheus
# servers, a dashboard refresh, gh-ost polling) must still be answered, while
# the header and idle deadlines are what close slow or silent clients. 512 plus
# lagd's own MySQL sessions stays under systemd's default soft LimitNOFILE=1024.
MAX_CONNECTIONS = 512

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SnapshotFn = Callable[[], Snapshot]


def routes(snapshot_fn: SnapshotFn) -> dict[str, Handler]:
    """``"METHOD /path" -> handler`` for every endpoint."""

    async def metrics(_req: web.Request) -> web.Response:
        body = render(snapshot_fn)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def status(_req: web.Request) -> web.Response:
        # Compact: json's C encoder writes no indentation, and its Python one took 3-4
        # times as long (0.6 ms of a ~1.1 ms answer), CPU taken from a catch-up as often as
        # /status is polled. Pretty-printing is the reader's (lagctl status, jq).
        return web.Response(text=json.dumps(snapshot_fn().to_json(), separators=(",", ":")),
                            content_type="application/json")

    async def healthz(_req: web.Request) -> web.Response:
        snap = snapshot_fn()
        if snap.loop_age > LIVENESS_SECONDS:
            return web.Response(status=503, text=f"main loop stalled for {snap.loop_age:.0f} s\n")
        return web.Response(text="ok\n")

    async def readyz(_req: web.Request) -> web.Response:
        ready, reason = readiness(snapshot_fn())
        return web.Response(status=200 if ready else 503, text=reason + "\n")

    return {"GET /metrics": metrics, "GET /status": status, "GET /healthz": healthz, "GET /readyz": readyz,
            **throttle.routes(snapshot_fn)}


def make_app(snapshot_fn: SnapshotFn, extra: Mapping[str, Handler] | None = None) -> web.Application:
    app = web.Application()
    for key, handler in {**routes(snapshot_fn), **(extra or {})}.items():
        method, _, path = key.partition(" ")
        if method == "GET":
            app.router.add_get(path, handler)  # and HEAD: gh-ost's --throttle-http sends HEAD
        else:
            app.router.add_route(method, path, handler)
    return app


def readiness(s: Snapshot, now: float | None = None) -> tuple[bool, str]:
    """Pure: can the numbers lagd serves be trusted now, and why (not)."""
    now = time.time() if now is None else now
    if s.loop_age > LIVENESS_SECONDS:
        return False, f"main loop stalled for {s.loop_age:.0f} s"
    if s.status is None:
        fix = next((h.fix for h in s.health if h.name == "replica_status" and h.fix), None)
        why = f"no replica status: {s.status_error or 'not polled yet'}"
        return False, why + (f" (fix: {fix})" if fix and fix not in why else "")
    if s.lag is None:
        return False, "no lag reading yet"
    age = now - s.lag.at
    if age > 30:
        return False, f"the last lag reading is {age:.0f} s old"
    if s.lag.state is ReplicaState.UNKNOWN:
        return False, f"state unknown: {s.lag.state_reason}"
    return True, f"ready: state {s.lag.state.value}"


class _Guard(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: the header deadline and the cap."""

    def __init__(self, inner: asyncio.Protocol, server: HttpServer) -> None:
        self.inner, self.server = inner, server
        self.transport: asyncio.Transport | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, to find a header end split across reads
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but uvloop's (lagd's loop, daemon.main.loop_factory) are
        # not asyncio.Transport subclasses: an isinstance check refused every connection.
        self.transport = stream = cast(asyncio.Transport, transport)
        if self.server.open >= self.server.max_connections:
            stream.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                         b"Connection: close\r\nContent-Length: 21\r\n\r\ntoo many connections\n")
            stream.close()
            self.server.refused += 1
            return
        self.counted = True
        self.server.open += 1
        self._arm(self.server.header_timeout)
        self.inner.connection_made(transport)

    def _arm(self, seconds: float) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.server.expired += 1
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return
        seen = self.tail + data
        if b"\r\n\r\n" in seen:
            # A request is complete: the next one gets the idle time, then the header time.
            self._arm(self.server.idle_timeout + self.server.header_timeout)
        self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.counted else None

    def pause_writing(self) -> None:
        if self.counted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.counted:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        if self.counted:
            self.counted = False
            self.server.open -= 1
            self.inner.connection_lost(exc)


class HttpServer:
    def __init__(self, snapshot_fn: SnapshotFn, host: str, port: int, *,
                 extra: Mapping[str, Handler] | None = None, header_timeout: float = HEADER_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT, max_connections: int = MAX_CONNECTIONS) -> None:
        self.runner = web.AppRunner(make_app(snapshot_fn, extra), access_log=None, handle_signals=False,
                                    keepalive_timeout=idle_timeout)
        self.host, self.port = host, port
        self.header_timeout, self.idle_timeout = header_timeout, idle_timeout
        self.max_connections = max_connections
        self.open = 0  # connections now
        self.refused = 0  # connections answered 503 at the cap
        self.expired = 0  # connections closed for slow headers or idleness
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        await self.runner.setup()
        handler: Any = self.runner.server
        assert handler is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Guard(handler(), self), self.host, self.port,
                                                reuse_address=True)
        if self.port == 0:
            self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("serving /metrics /status /healthz /readyz on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self.runner.cleanup()
