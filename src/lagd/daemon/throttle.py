"""The throttle check: is this replica within a lag budget right now, and why (not).

Tools that pace writes (gh-ost's ``--throttle-http``, freno-style checks,
``lagctl load``) ask one question between chunks. The answer comes from the
snapshot's headline lag (heartbeat, else event time), never from
Seconds_Behind_Master alone: SBM reads 0 while the IO thread is starved or
reconnecting, which is exactly when writing more makes things worse.

It fails closed: no reading, a stale reading, a stopped or erroring thread,
or a lag that cannot be measured all throttle, with the reason. A throttle
that lets writes through when it does not know is worse than none, because
the tool trusts it.

Status codes: 200 within budget; 429 over budget (freno's "too many"); 503
when the replica's lag is not known or cannot shrink. Any non-200 throttles
gh-ost; the JSON body says which case it is.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lagd.daemon.state import Snapshot
from lagd.lag import LagMethod, ReplicaState

__all__ = ["ThrottleVerdict", "budget_from_query", "decide"]

OK = 200
OVER_BUDGET = 429
UNKNOWN = 503

FALLBACK_BUDGET = 5.0  # seconds, when neither the query nor the settings give one
LOOP_STALL_SECONDS = 10.0  # as /healthz: a main loop this late serves old numbers

_BLOCKED = {
    ReplicaState.UNKNOWN: "replica state unknown",
    ReplicaState.ERROR: "a replication thread stopped on an error",
    ReplicaState.STOPPED: "the SQL thread is not running",
    ReplicaState.IO_STOPPED: "the IO thread is not running, so the source may be ahead by any amount",
}


@dataclass(frozen=True, slots=True)
class ThrottleVerdict:
    ok: bool
    status: int  # HTTP status: 200, 429 or 503
    reason: str
    lag: float | None  # seconds, the headline method's value now; None when unknown
    method: str | None
    max_lag: float
    state: str | None
    # What a pacing client needs beyond the verdict: when the reading was
    # taken, and the work received but not applied yet (lag cannot show it
    # until the SQL thread reaches it), in seconds at the learned apply rate.
    at: float | None = None
    backlog_bytes: int | None = None
    backlog_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        # freno's check shape (StatusCode, Value, Threshold, Message), plus lagd's own fields.
        return {
            "StatusCode": self.status, "Value": self.lag, "Threshold": self.max_lag, "Message": self.reason,
            "ok": self.ok, "throttled": not self.ok, "reason": self.reason, "lag": self.lag,
            "method": self.method, "max_lag": self.max_lag, "state": self.state, "at": self.at,
            "backlog_bytes": self.backlog_bytes, "backlog_seconds": self.backlog_seconds,
        }


def _stale_after(settings: Mapping[str, Any]) -> float:
    lag = settings.get("lag")
    value = lag.get("stale_after") if isinstance(lag, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else 10.0


def default_budget(s: Snapshot) -> float:
    """The advisor's lag budget from the configuration, the same one ``lagctl advise`` uses."""
    adv = s.settings.get("advisor")
    value = adv.get("lag_budget_seconds") if isinstance(adv, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else FALLBACK_BUDGET


def _backlog(s: Snapshot) -> tuple[int | None, float | None]:
    b = s.lag.backlog if s.lag is not None else None
    if b is None:
        return None, None
    rate = s.advisor.apply_rate if s.advisor is not None else None
    bps = rate.bytes_per_second if rate is not None else None
    if bps is not None and math.isfinite(bps) and bps > 0:
        return b.bytes, b.bytes / bps
    return b.bytes, None


def decide(s: Snapshot, max_lag: float, now: float) -> ThrottleVerdict:
    """The verdict with the reading's time and backlog attached; see :func:`judge`."""
    v = judge(s, max_lag, now)
    nbytes, secs = _backlog(s)
    at = s.lag.at if s.lag is not None else None
    return dataclasses.replace(v, at=at, backlog_bytes=nbytes, backlog_seconds=secs)


def judge(s: Snapshot, max_lag: float, now: float) -> ThrottleVerdict:
    """Pure: the verdict for snapshot ``s`` against ``max_lag`` seconds at wall clock ``now``.

    First match wins: a stalled loop, no reading, a stale reading, a state in
    which lag cannot shrink or be trusted, no headline value, SBM as the only
    value, over budget; otherwise fine.
    """
    def no(status: int, reason: str, lag: float | None = None, method: str | None = None) -> ThrottleVerdict:
        state = s.lag.state.value if s.lag is not None else None
        return ThrottleVerdict(False, status, reason, lag, method, max_lag, state)

    if s.loop_age > LOOP_STALL_SECONDS:
        return no(UNKNOWN, f"lagd's main loop stalled for {s.loop_age:.0f} s: its numbers are old")
    r = s.lag
    if r is None:
        why = s.status_error or "no lag reading yet"
        return no(UNKNOWN, f"lag unknown: {why}")
    age = now - r.at
    limit = _stale_after(s.settings)
    if age > limit:
        return no(UNKNOWN, f"lag unknown: the last reading is {age:.0f} s old (stale after {limit:g} s)")
    if r.state in _BLOCKED:
        return no(UNKNOWN, f"{_BLOCKED[r.state]}: {r.state_reason}")
    if r.lag is None or r.lag_method is None:
        return no(UNKNOWN, f"lag unknown: {r.lag_reason}")
    method = r.lag_method.value
    if r.lag_method is LagMethod.SBM:
        return no(UNKNOWN, "only Seconds_Behind_Master has a value, and it reads 0 when the IO thread "
                  f"falls behind ({r.lag_reason}); configure lag.heartbeat_table or give lagd the relay log",
                  r.lag, method)
    if not math.isfinite(r.lag) or r.lag > max_lag:
        return no(OVER_BUDGET, f"lag {r.lag:.1f} s ({method}) is over the budget of {max_lag:g} s",
                  r.lag, method)
    return ThrottleVerdict(True, OK, f"lag {r.lag:.1f} s ({method}) is within the budget of {max_lag:g} s",
                           r.lag, method, max_lag, r.state.value)


class BadBudget(ValueError):
    pass


def budget_from_query(query: Mapping[str, str], default: float) -> float:
    """``max_lag`` (seconds; ``max_lag_ms`` in milliseconds) from the query, else ``default``."""
    for name, scale in (("max_lag", 1.0), ("max_lag_ms", 0.001)):
        text = query.get(name)
        if text is None:
            continue
        try:
            value = float(text) * scale
        except ValueError:
            unit = "seconds" if scale == 1 else "milliseconds"
            raise BadBudget(f"{name}={text!r} is not a number of {unit}") from None
        if not (math.isfinite(value) and value > 0):
            raise BadBudget(f"{name}={text!r} must be a positive number")
        return value
    return default


Handler = Callable[[web.Request], Awaitable[web.Response]]


def routes(snapshot_fn: Callable[[], Snapshot]) -> dict[str, Handler]:
    """``/throttle`` (text, for gh-ost's --throttle-http) and ``/check[/...]`` (freno-like JSON).

    GET and HEAD; the status code is the answer, the body and the
    ``X-Lagd-Throttle-Reason`` header say why.
    """
    def verdict(req: web.Request) -> ThrottleVerdict | web.Response:
        snap = snapshot_fn()
        try:
            budget = budget_from_query(req.query, default_budget(snap))
        except BadBudget as e:
            return web.Response(status=400, text=f"{e}; e.g. /throttle?max_lag=5\n")
        return decide(snap, budget, time.time())

    def headers(v: ThrottleVerdict) -> dict[str, str]:
        # Header values must be one line of latin-1.
        return {"X-Lagd-Throttle-Reason": v.reason.encode("latin-1", "replace").decode("latin-1")[:500],
                "Cache-Control": "no-store"}

    async def throttle(req: web.Request) -> web.Response:
        v = verdict(req)
        if isinstance(v, web.Response):
            return v
        text = ("ok: " if v.ok else "throttle: ") + v.reason + "\n"
        return web.Response(status=v.status, text=text, headers=headers(v))

    async def check(req: web.Request) -> web.Response:
        v = verdict(req)
        if isinstance(v, web.Response):
            return v
        return web.json_response(v.to_json(), status=v.status, headers=headers(v))

    # aiohttp answers HEAD for GET routes (gh-ost sends HEAD).
    return {"GET /throttle": throttle, "GET /check": check, "GET /check/{rest:.*}": check}
