"""The fault suite: faults injected into real sandbox servers under a real `lagd run`.

Every test here is also an integration test (it needs mariadbd). Each module
shares one sandbox of its own, started with the replica's general log on
(see faultkit.GENERAL_LOG); a test that breaks replication puts it back
(faultkit.ensure_replicating) before the next one runs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagd.sandbox.pair import Sandbox
from tests.faults import faultkit

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.faults)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist the tests run in worker processes: each hands its
    # timings to the controller, which prints the summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fault_timings"] = json.dumps(faultkit.TIMINGS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    output = getattr(node, "workeroutput", None) or {}
    faultkit.TIMINGS.extend(tuple(t) for t in json.loads(output.get("fault_timings", "[]")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if faultkit.TIMINGS:
        terminalreporter.section("fault suite: measured times")
        for fault, what, seconds in faultkit.TIMINGS:
            unit = what[what.rindex("(") + 1:-1] if what.endswith(")") else "s"
            shown = "not reached" if seconds is None else f"{seconds:.2f} {unit}"
            terminalreporter.write_line(f"{fault}: {what} = {shown}")


@pytest.fixture(scope="module")
def fsb() -> Iterator[Sandbox]:
    """This module's own source + replica, general log on the replica."""
    with Sandbox(faultkit.sandbox_config()) as sb:
        yield sb


@pytest.fixture
def db(fsb: Sandbox, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh replicated database for one test; replication is healthy again afterwards."""
    stem = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:30]
    name = f"f_{stem}_{uuid.uuid4().hex[:6]}"
    faultkit.ensure_replicating(fsb)
    fsb.source.query(f"CREATE DATABASE `{name}`")
    fsb.wait_caught_up(timeout=60)
    try:
        yield name
    finally:
        try:
            faultkit.ensure_replicating(fsb)
            fsb.source.query(f"DROP DATABASE IF EXISTS `{name}`")
        except Exception:  # a broken sandbox fails the next test, not this teardown
            pass
