"""The HTTP server: routes as a table, and clients that cannot hold its sockets.

A real server on a loopback port with short timeouts: slow-loris clients
(headers that never finish, idle kept-alive connections, more sockets than
the cap) are closed or refused, and a normal scrape still answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp import web
from status_fixtures import caught_up, starting

from lagd.daemon.http import HttpServer, readiness, routes
from lagd.lag import ReplicaState

SNAP = caught_up()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[HttpServer]:
    async def hello(_req: web.Request) -> web.Response:
        return web.Response(text="hello\n")

    s = HttpServer(lambda: SNAP, "127.0.0.1", 0, extra={"GET /hello": hello}, header_timeout=0.3,
                   idle_timeout=0.3, max_connections=8)
    await s.start()
    yield s
    await s.stop()


async def get(s: HttpServer, path: str) -> tuple[int, bytes]:
    r, w = await asyncio.open_connection("127.0.0.1", s.port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(r.read(), 10)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def closed_by_server(r: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(r.read(), 10) is not None
    except ConnectionError:
        return True


def test_routes_are_a_table() -> None:
    assert set(routes(lambda: SNAP)) == {"GET /metrics", "GET /status", "GET /healthz", "GET /readyz",
                                         "GET /throttle", "GET /check", "GET /check/{rest:.*}"}


@pytest.mark.asyncio
async def test_every_route_answers(server: HttpServer) -> None:
    for path, code in (("/metrics", 200), ("/status", 200), ("/healthz", 200), ("/readyz", 200),
                       ("/hello", 200), ("/nope", 404)):
        got, _ = await get(server, path)
        assert got == code, path


@pytest.mark.asyncio
async def test_slow_headers_are_cut_and_a_scrape_still_answers(server: HttpServer) -> None:
    loris = []
    for _ in range(6):
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ")  # and never the end of the headers
        loris.append((r, w))
    assert (await get(server, "/healthz"))[0] == 200  # while they hang on
    for r, _ in loris:
        assert await closed_by_server(r)
    assert server.expired >= 6 and server.open == 0
    code, body = await get(server, "/metrics")
    assert code == 200 and b"lagd_replica_state" in body


@pytest.mark.asyncio
async def test_headers_dribbled_a_byte_at_a_time_are_cut(server: HttpServer) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server.port)
    w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    for _ in range(200):  # each byte well within any idle timeout, the whole never complete
        if r.at_eof() or w.is_closing():
            break
        try:
            w.write(b"X")
            await w.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.02)
        if server.expired:
            break
    assert await closed_by_server(r) and server.expired == 1


@pytest.mark.asyncio
async def test_an_idle_kept_alive_connection_is_closed(server: HttpServer) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server.port)
    w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await r.readuntil(b"ok\n")).startswith(b"HTTP/1.1 200")
    assert await closed_by_server(r)  # no second request: closed after the idle time


@pytest.mark.asyncio
async def test_beyond_the_cap_a_connection_is_refused_not_queued(server: HttpServer) -> None:
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(8)]
    for _ in range(100):
        if server.open == 8:
            break
        await asyncio.sleep(0.01)
    code, body = await get(server, "/healthz")
    assert code == 503 and body == b"too many connections\n" and server.refused == 1
    for r, _ in held:
        assert await closed_by_server(r)
    assert (await get(server, "/healthz"))[0] == 200


def test_readiness() -> None:
    assert readiness(SNAP, now=SNAP.taken_at) == (True, "ready: state idle")
    ok, why = readiness(starting())
    assert not ok and why.startswith("no replica status: not polled yet")
    assert SNAP.lag is not None
    lag = replace(SNAP.lag, state=ReplicaState.UNKNOWN, state_reason="not known yet: x")
    withheld = replace(SNAP, lag=lag)
    assert readiness(withheld, now=SNAP.taken_at) == (False, "state unknown: not known yet: x")
