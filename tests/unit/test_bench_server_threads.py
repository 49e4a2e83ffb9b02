"""The benchmark's split of the replica's CPU and reads by whose thread did them
(tests/bench/server_threads.py): roles from recorded PROCESSLIST rows, intervals
from recorded /proc readings."""
import pytest
from tests.bench.server_threads import PAGE_BYTES, add_interval, role_of, roles

LAGD = "lagd"


@pytest.mark.parametrize(("command", "user", "want"), [
    ("Slave_SQL", "system user", "sql"),
    ("Slave_worker", "system user", "sql"),
    ("Slave_IO", "system user", "server"),
    ("Daemon", "system user", "server"),  # InnoDB purge coordinator and the like
    ("Daemon", "event_scheduler", "server"),
    ("Execute", "lagd", "lagd"),  # a probe running
    ("Sleep", "lagd", "lagd"),  # a probe session between probes
    ("Query", "root", "clients"),  # the benchmark's own polls
    ("Sleep", "app", "clients"),
    (None, None, "server"),
])
def test_role_of(command: str | None, user: str | None, want: str) -> None:
    assert role_of(command, user, LAGD) == want


def test_roles_skip_rows_without_a_thread() -> None:
    rows = [{"tid": 11, "user": "system user", "command": "Slave_SQL"},
            {"tid": 12, "user": "lagd", "command": "Sleep"},
            {"tid": None, "user": "root", "command": "Query"}]
    assert roles(rows, LAGD) == {11: "sql", 12: "lagd"}


def test_an_interval_goes_to_the_role_seen_now() -> None:
    totals: dict[str, list[float]] = {}
    before = {11: (1.0, 0), 12: (0.5, PAGE_BYTES), 13: (2.0, 0)}
    now = {11: (1.5, 4 * PAGE_BYTES), 12: (0.75, 3 * PAGE_BYTES), 13: (2.25, 0), 14: (0.1, PAGE_BYTES)}
    # 13 and 14 have no row: the server's own (14 started inside the interval: from 0).
    add_interval(totals, before, now, {11: "sql", 12: "lagd"})
    assert totals == {"sql": [0.5, 4.0], "lagd": [0.25, 2.0], "server": [0.35, 1.0]}


def test_a_cached_thread_serves_another_client_next() -> None:
    totals: dict[str, list[float]] = {}
    add_interval(totals, {20: (0.0, 0)}, {20: (1.0, 0)}, {20: "lagd"})
    add_interval(totals, {20: (1.0, 0)}, {20: (1.5, 0)}, {20: "clients"})
    assert totals == {"lagd": [1.0, 0.0], "clients": [0.5, 0.0]}
