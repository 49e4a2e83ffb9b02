"""Fixtures for the integration tests: real mariadbd servers from lagd.sandbox.pair.

One source/replica pair (GTID replication) serves the whole session; starting
it costs about a second once the template datadir is cached. Tests isolate
themselves with their own schema (the ``schema`` fixture) instead of resetting
the servers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox, SandboxConfig

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Hooks in a conftest see every collected item, not only this directory's.
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """A started source + one replica, GTID replication, 64 MB buffer pools."""
    sb = Sandbox(SandboxConfig(replicas=1, source_buffer_pool_mb=64, replica_buffer_pool_mb=64))
    sb.start()
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture
def schema(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on the source (replicated), dropped after the test."""
    stem = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    name = f"t_{stem}_{uuid.uuid4().hex[:6]}"
    sandbox.source.query(f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        sandbox.source.query(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def sql_thread_stopped(sandbox: Sandbox) -> Iterator[Sandbox]:
    """Replica 0's SQL thread is stopped for the test, then restarted and caught up."""
    with sandbox.sql_thread_stopped():
        yield sandbox
