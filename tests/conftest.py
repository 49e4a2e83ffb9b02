"""The whole suite: tests that need the machine to themselves (the ``solo`` mark).

scripts/test runs the suite on two pytest-xdist workers: the tests wait on
servers and timers far more than they compute. A few judge what the machine
does under them (a forecast against the real catch-up, the SQL thread's time
split, prefetch finding idle cores) and carry ``solo``: while one of those
runs, no other test runs on the other worker.

The workers agree through two lock files in the run's shared temp directory.
Every test holds the run lock shared, a solo test holds it exclusively; each
first passes a turnstile, so that a solo test waiting for the lock is not
starved by the other worker taking it again between two of its tests. In a
run without workers only one test runs at a time, and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def _turn(run_dir: Path, solo: bool) -> Iterator[None]:
    with open(run_dir / "solo.turnstile", "a") as gate, open(run_dir / "solo.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, object, object]:
    # Around setup, call and teardown: a module's sandbox and its data are
    # made in its first test's setup and dropped in its last one's teardown.
    basetemp = item.config.getoption("basetemp", None)
    if "PYTEST_XDIST_WORKER" not in os.environ or not basetemp:
        return (yield)
    # xdist gives each worker <the run's base temp>/<worker id>.
    with _turn(Path(basetemp).parent, item.get_closest_marker("solo") is not None):
        return (yield)
