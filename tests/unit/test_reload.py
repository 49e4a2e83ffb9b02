"""SIGHUP: every setting is declared in config.RELOAD, and does what it declares.

Each key is changed alone in a real config file and reloaded by the real
Daemon.reload over a Runtime with fake collaborators; the test then checks the
running daemon, not only the settings object: an in-place key must have
reached the part that uses it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_fakes import FakeParts, FakePrefetcher

from lagd.config import (
    RELOAD,
    Reload,
    Settings,
    changed_keys,
    packaged_defaults,
    reload_actions,
    settings_from_dict,
)
from lagd.daemon import main as daemon_main
from lagd.daemon.main import Daemon
from lagd.daemon.runtime import Runtime
from lagd.daemon.wiring import configure_engine
from lagd.mysql.monitor import ReplicaMonitor
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.pool import ProbePool
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import LogFiles, RelayLogReader, RelayPosition, TableMapResolver

BASE: dict[str, dict[str, Any]] = {
    "lag": {"poll_interval": 0.1, "stale_after": 5.0, "heartbeat_table": "percona.heartbeat"},
    "prefetch": {"enabled": True}, "advisor": {"enabled": True}, "http": {"enabled": False},
}

NEW: dict[str, Any] = {
    "replica.host": "10.0.0.9", "replica.port": 3307, "replica.socket": "/run/mysqld/other.sock",
    "replica.user": "lagd2", "replica.password_file": "<file>", "replica.password_credential": "lagd-pw",
    "replica.password_env": "OTHER_PASSWORD", "replica.channel": "east", "replica.connect_timeout": 7.0,
    "replica.flavor": "mariadb", "replica.relay_log_index": "/var/lib/mysql/relay-bin.index",
    "lag.poll_interval": 0.2, "lag.heartbeat_table": "ops.heartbeat", "lag.heartbeat_server_id": 7,
    "lag.stale_after": 20.0,
    "prefetch.enabled": False, "prefetch.connections": 4, "prefetch.max_keys_per_probe": 8,
    "prefetch.statement_timeout_ms": 300, "prefetch.schemas": ["shop"], "prefetch.exclude_schemas": ["x"],
    "prefetch.min_lead_transactions": 50, "prefetch.max_lead_transactions": 4000,
    "prefetch.max_lead_bytes": "128MiB", "prefetch.max_lead_seconds": 20.0, "prefetch.buffer_pool_share": 0.5,
    "prefetch.adaptive": False, "prefetch.evaluate_window_seconds": 20.0,
    "advisor.enabled": False, "advisor.lag_budget_seconds": 99.0, "advisor.big_transaction_bytes": "32MiB",
    "advisor.big_transaction_rows": 12345, "advisor.headroom": 0.7,
    "http.listen": "127.0.0.1:9999", "http.enabled": True,
    "log.level": "debug", "log.format": "json",
    "status.warn_lag_seconds": 31.0, "status.crit_lag_seconds": 600.0, "status.daemon_url": "http://127.0.0.1:1",
}


def all_keys() -> list[str]:
    return [f"{section}.{key}" for section, keys in packaged_defaults().items() for key in keys]


def test_every_setting_has_a_reload_policy() -> None:
    assert sorted(RELOAD) == sorted(all_keys())
    assert sorted(NEW) == sorted(all_keys())


def toml(data: dict[str, dict[str, Any]]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    return "\n".join(f"[{s}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in keys.items())
                     for s, keys in data.items())


def with_key(key: str, tmp: Path) -> dict[str, dict[str, Any]]:
    section, name = key.split(".")
    data = {s: dict(v) for s, v in BASE.items()}
    value = NEW[key]
    if value == "<file>":
        (tmp / "pw").write_text("secret\n")
        (tmp / "pw").chmod(0o600)
        value = str(tmp / "pw")
    data.setdefault(section, {})[name] = value
    return data


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.mark.asyncio
@pytest.mark.parametrize("key", sorted(NEW))
async def test_reload_applies_each_setting_as_declared(key: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       root_logging: None) -> None:
    monkeypatch.setenv("LAGD_PASSWORD", "secret")
    monkeypatch.setenv("OTHER_PASSWORD", "secret")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    (tmp_path / "lagd-pw").write_text("secret\n")
    (tmp_path / "lagd-pw").chmod(0o600)
    cfg = tmp_path / "lagd.toml"
    cfg.write_text(toml(BASE))
    made: list[tuple[Runtime, FakeParts]] = []

    def make(s: Settings, path: Path | None, on_ready: Any) -> Runtime:
        fakes = FakeParts(s)
        rt = Runtime(s, fakes.parts(), path, on_ready)
        rt.poll_timeout = 0.3
        made.append((rt, fakes))
        return rt

    old = daemon_main.load_settings(cfg)
    d = Daemon(old, cfg, make_runtime=make)
    http_starts: list[Settings] = []

    async def start_http() -> None:
        http_starts.append(d.settings)

    monkeypatch.setattr(d, "_start_http", start_http)
    rt, fakes = made[0]
    rt.start()
    try:
        for _ in range(500):
            if rt.prefetcher is not None:
                break
            await asyncio.sleep(0.01)
        assert isinstance(rt.prefetcher, FakePrefetcher)
        relay_task = rt._tasks["relay"]

        cfg.write_text(toml(with_key(key, tmp_path)))
        await d.reload()
        new = d.settings
        assert rt.config_error is None and d.runtime.config_error is None
        assert changed_keys(old, new) == (key,)
        policy = RELOAD[key]
        if policy is Reload.ALL:
            assert len(made) == 2 and d.runtime is made[1][0] and made[1][0].settings == new
            assert rt.stopping
            return
        assert d.runtime is rt and rt.settings == new and len(made) == 1
        if policy is Reload.RELAY:
            assert rt._tasks["relay"] is not relay_task
            if key == "replica.relay_log_index":
                for _ in range(500):
                    if fakes.relay.configured:
                        break
                    await asyncio.sleep(0.01)
                assert fakes.relay.configured == new.replica.relay_log_index
        elif policy is Reload.HTTP:
            assert http_starts == [new]
        else:
            assert rt._tasks["relay"] is relay_task
            await check_in_place(key, new, rt, fakes)
    finally:
        await d.runtime.stop()
        await rt.stop()


async def check_in_place(key: str, new: Settings, rt: Runtime, fakes: FakeParts) -> None:
    section, name = key.split(".")
    if key in ("lag.heartbeat_table", "lag.heartbeat_server_id"):
        await rt.poll_once()
        table, server_id = fakes.heartbeat.calls[-1]
        assert table == new.lag.heartbeat_table and server_id == (new.lag.heartbeat_server_id or 1)
    elif key == "lag.stale_after":
        assert rt.tracker.stale_after == new.lag.stale_after
    elif key == "lag.poll_interval":
        assert rt.settings.lag.poll_interval == new.lag.poll_interval  # the loop reads it every round
    elif section == "prefetch":
        assert isinstance(rt.prefetcher, FakePrefetcher)
        assert rt.prefetcher.configured[-1] == new.prefetch
    elif section == "advisor":
        assert rt.advisor.settings == new.advisor
        la = rt.advisor.lookahead.config
        a = new.advisor
        assert (la.big_bytes, la.big_rows) == (a.big_transaction_bytes, a.big_transaction_rows)
    elif key == "log.level":
        assert logging.getLogger().level == logging.DEBUG
    elif key == "log.format":
        assert isinstance(logging.getLogger().handlers[0].formatter, daemon_main._JsonFormatter)
    elif section == "status":
        assert rt.snapshot().settings["status"][name] == getattr(new.status, name)
    else:
        raise AssertionError(f"no check for in-place key {key}")


def test_reload_actions() -> None:
    # A key unknown to the table gets the safe choice.
    assert reload_actions(["replica.host", "http.listen"]) == {Reload.ALL, Reload.HTTP}
    assert reload_actions(["no.such_key"]) == {Reload.ALL}
    assert reload_actions([]) == frozenset()


# ----- the in-place prefetch settings reach a real engine ------------------------------------


def engine(p: Any) -> PrefetchEngine:
    async def never() -> Any:
        raise AssertionError("no connection in this test")

    limits = control.limits_for(p.min_lead_transactions, p.max_lead_transactions, p.max_lead_bytes,
                                p.max_lead_seconds, 1 << 30, p.buffer_pool_share)
    tuning = control.Tuning(p.min_lead_transactions, p.max_lead_transactions, 2, 4, p.adaptive)
    start = RelayPosition("relay-bin.000001", 4)
    reader = RelayLogReader(LogFiles.of("relay-bin.000001"), start, TableMapResolver())
    pool = ProbePool(never, mariadb=True, size=4, timeout_ms=100, on_done=lambda *_: None)
    return PrefetchEngine(reader, ReplicaMonitor(never), pool, ProbeBatcher(max_keys=4), limits, tuning,
                          window_seconds=p.evaluate_window_seconds)


def test_configure_engine_applies_every_in_place_prefetch_setting() -> None:
    old = settings_from_dict({}).prefetch
    e = engine(old)
    keys = {k.split(".")[1]: NEW[k] for k, v in RELOAD.items()
            if k.startswith("prefetch.") and v is Reload.IN_PLACE}
    new = settings_from_dict({"prefetch": keys}).prefetch
    configure_engine(e, new, 1 << 30)
    assert (e.limits.min_transactions, e.limits.max_transactions) == (50, 4000)
    # The tuning kept the old bounds before (the "one place" of the issue).
    assert (e.tuning.min_transactions, e.tuning.max_transactions) == (50, 4000)
    assert e.limits.max_bytes == 128 << 20 and e.limits.max_seconds == 20.0
    assert e.limits.max_pages == (1 << 30) // 2 // control.PAGE_BYTES  # buffer_pool_share 0.5
    assert e.tuning.adaptive is False and e.ctl.enabled
    assert e.window_seconds == 20.0
    # A share too small for prefetch to pay turns it off at once, and back.
    configure_engine(e, settings_from_dict({"prefetch": {"buffer_pool_share": 0.0}}).prefetch, 1 << 30)
    assert e.static_off is not None
    configure_engine(e, new, 1 << 30)
    assert e.static_off is None
