"""Asking each replica's lagd: may the next chunk go (``/check``), and how fast it applies (``/status``).

Fails closed like the endpoint it asks: a lagd that does not answer, or
answers something else than a verdict, holds the load back, with the reason.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from lagd.load.planner import ReplicaRate

__all__ = ["ReplicaCheck", "check", "fetch_rate"]


@dataclass(frozen=True, slots=True)
class ReplicaCheck:
    url: str
    ok: bool
    reason: str
    lag: float | None
    at: float | None = None  # wall clock of lagd's reading
    backlog_seconds: float | None = None  # received, not applied, at the learned apply rate


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    # No proxy: lagd listens on the replica's host, and a proxy from the
    # environment would answer in its place.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def check(url: str, max_lag: float, timeout: float = 3.0) -> ReplicaCheck:
    """One replica's verdict against ``max_lag`` seconds."""
    base = url.rstrip("/")
    try:
        code, body = _get(f"{base}/check/lagctl-load?max_lag={max_lag:.3f}", timeout)
    except (urllib.error.URLError, OSError) as e:
        why = getattr(e, "reason", None) or e
        return ReplicaCheck(url, False, f"lagd at {base} does not answer ({why})", None)
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict) or "ok" not in data:
        return ReplicaCheck(url, False, f"lagd at {base} answered HTTP {code} without a verdict "
                            "(is it a lagd with the throttle endpoint?)", None)
    ok = bool(data["ok"]) and code == 200
    return ReplicaCheck(url, ok, str(data.get("reason") or f"HTTP {code}"), _number(data.get("lag")),
                        _number(data.get("at")), _number(data.get("backlog_seconds")))


def fetch_rate(url: str, table: str, timeout: float = 3.0) -> ReplicaRate:
    """The replica's learned apply rate: the table's own when lagd has one, else its overall rate."""
    base = url.rstrip("/")
    try:
        code, body = _get(f"{base}/status", timeout)
        status = json.loads(body) if code == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        status = None
    advisor = status.get("advisor") if isinstance(status, dict) else None
    rate = advisor.get("apply_rate") if isinstance(advisor, dict) else None
    if not isinstance(rate, dict):
        return ReplicaRate(base, None)
    tables = rate.get("tables")
    own = tables.get(table) if isinstance(tables, dict) else None
    if isinstance(own, dict) and _number(own.get("rows_per_second")):
        scope = str(own.get("scope") or f"table {table}")
        return ReplicaRate(base, _number(own.get("rows_per_second")), scope)
    return ReplicaRate(base, _number(rate.get("rows_per_second")), str(rate.get("scope") or "all tables"))

