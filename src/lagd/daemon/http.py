"""/metrics, /status, /healthz and /readyz, served from the runtime's snapshot.

Liveness comes from the freshness of the main loop (a ticker task stamps it
every second), not from MySQL: a replica that is down is a reason to report
state "unknown", not to get lagd restarted. Readiness says whether lagd has
a usable picture of its replica, with the reason when not.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from aiohttp import web

from lagd.daemon.metrics import CONTENT_TYPE, render
from lagd.daemon.state import Snapshot
from lagd.daemon.throttle import add_routes as add_throttle_routes

log = logging.getLogger("lagd.daemon.http")

LIVENESS_SECONDS = 10.0


def make_app(snapshot_fn: Callable[[], Snapshot]) -> web.Application:
    async def metrics(_req: web.Request) -> web.Response:
        body = render(snapshot_fn)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def status(_req: web.Request) -> web.Response:
        return web.Response(text=json.dumps(snapshot_fn().to_json(), indent=1),
                            content_type="application/json")

    async def healthz(_req: web.Request) -> web.Response:
        snap = snapshot_fn()
        if snap.loop_age > LIVENESS_SECONDS:
            return web.Response(status=503, text=f"main loop stalled for {snap.loop_age:.0f} s\n")
        return web.Response(text="ok\n")

    async def readyz(_req: web.Request) -> web.Response:
        ready, reason = readiness(snapshot_fn())
        return web.Response(status=200 if ready else 503, text=reason + "\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/status", status)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    add_throttle_routes(app, snapshot_fn)
    return app


def readiness(s: Snapshot) -> tuple[bool, str]:
    """Pure: can the numbers lagd serves be trusted now, and why (not)."""
    if s.loop_age > LIVENESS_SECONDS:
        return False, f"main loop stalled for {s.loop_age:.0f} s"
    if s.status is None:
        return False, f"no replica status: {s.status_error or 'not polled yet'}"
    if s.lag is None:
        return False, "no lag reading yet"
    age = time.time() - s.lag.at
    if age > 30:
        return False, f"the last lag reading is {age:.0f} s old"
    return True, f"ready: state {s.lag.state.value}"


class HttpServer:
    def __init__(self, snapshot_fn: Callable[[], Snapshot], host: str, port: int) -> None:
        self.runner = web.AppRunner(make_app(snapshot_fn), access_log=None, handle_signals=False)
        self.host, self.port = host, port

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, reuse_address=True)
        await site.start()
        log.info("serving /metrics /status /healthz /readyz on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        await self.runner.cleanup()
