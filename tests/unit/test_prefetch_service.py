"""Why the relay log cannot be read, said as it is; the resolver leaves a failing replica alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lagd.prefetch.service import check_readable
from lagd.relaylog import InformationSchemaResolver


def test_readable(tmp_path: Path) -> None:
    index = tmp_path / "relay.index"
    index.write_text("./relay.000001\n")
    assert check_readable(index) is None


def test_after_reset_slave_the_index_is_just_gone(tmp_path: Path) -> None:
    (tmp_path / "mysqld-relay-bin.index").write_text("")
    why = check_readable(tmp_path / "relay.index")
    assert why is not None
    assert "does not exist: the replica has no relay log (RESET SLAVE?)" in why
    assert "mysqld-relay-bin.index" in why  # what is there instead
    assert "group" not in why and "usermod" not in why


def test_no_directory(tmp_path: Path) -> None:
    why = check_readable(tmp_path / "nope" / "relay.index")
    assert why is not None and "nor does" in why


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_index_is_a_permission_problem(tmp_path: Path) -> None:
    index = tmp_path / "relay.index"
    index.write_text("")
    index.chmod(0)
    why = check_readable(index)
    assert why is not None and "mysql group" in why


@pytest.mark.skipif(os.geteuid() == 0, reason="root enters everything")
def test_unenterable_directory_is_a_permission_problem(tmp_path: Path) -> None:
    d = tmp_path / "datadir"
    d.mkdir()
    d.chmod(0)
    try:
        why = check_readable(d / "relay.index")
    finally:
        d.chmod(0o700)
    assert why is not None and "permission denied" in why


def test_resolver_pauses_after_a_failed_connect() -> None:
    now = [0.0]
    calls: list[int] = []

    def connect() -> object:
        calls.append(1)
        raise OSError("no route to host")

    r = InformationSchemaResolver(connect, retry_after=lambda n: 5.0 * (n + 1), clock=lambda: now[0])
    assert r._query("s", "t") == ([], [], [])
    assert calls == [1]  # a fresh connection failing is not retried at once
    now[0] = 4.9
    assert r._query("s", "u") == ([], [], [])
    assert calls == [1]  # still paused: the reader goes on with the log's metadata
    now[0] = 5.0
    r._query("s", "t")
    assert calls == [1, 1] and r.failures == 2
    now[0] = 14.9
    r._query("s", "t")
    assert calls == [1, 1]  # the pause grows


# ----- the daemon's engine borrows the daemon's status monitor ----------------------------------


def test_the_daemon_hands_its_own_status_monitor_to_the_prefetch_factory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lagd.config import settings_from_dict  # noqa: PLC0415
    from lagd.daemon import wiring  # noqa: PLC0415

    given: list[object] = []
    monkeypatch.setattr(wiring, "prefetch_factory", lambda _e, _s, monitor, _stall: given.append(monitor))
    parts = wiring.parts(settings_from_dict({}))
    assert given == [parts.monitor]  # one monitor: the replica is polled on one connection


@pytest.mark.asyncio
async def test_the_daemons_engine_starts_from_the_borrowed_monitor_and_leaves_it_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime_fakes import FakeMonitor, FakeSession  # noqa: PLC0415

    from lagd.config import settings_from_dict  # noqa: PLC0415
    from lagd.daemon import wiring  # noqa: PLC0415
    from lagd.mysql.endpoint import Endpoint  # noqa: PLC0415

    index = tmp_path / "db2-relay-bin.index"
    index.write_text("./db2-relay-bin.000007\n")
    monitor, session = FakeMonitor(), FakeSession()
    session.fail = None
    monkeypatch.setattr(wiring, "_pool_bytes", lambda _conn: 1 << 30)
    build = wiring.prefetch_factory(Endpoint("127.0.0.1", 9, "lagd"), session, monitor)  # type: ignore[arg-type]
    prefetcher = await build(settings_from_dict({}).prefetch, index, True)
    assert prefetcher.engine.monitor is monitor and monitor.polls == 1  # where the cursor starts
    await prefetcher.close()
    assert monitor.closed == 0  # the daemon's to close
