"""Chunk sizes and pacing: tables of inputs -> plan."""

from __future__ import annotations

import pytest

from lagd.advisor.split import SplitLimits
from lagd.load.planner import MIN_ROWS, PROBE_ROWS, ReplicaRate, adapt, initial_chunk, resume_threshold


@pytest.mark.parametrize(("rates", "rows", "words"), [
    ([], PROBE_ROWS, "no --replica-lagd"),
    ([ReplicaRate("r1", None)], PROBE_ROWS, "has learned an apply rate yet"),
    ([ReplicaRate("r1", 100_000.0, "all tables")], 250_000, "r1"),
    ([ReplicaRate("r1", 100_000.0), ReplicaRate("r2", 9_000.0, "table a.b")], 22_000, "r2 (table a.b)"),
])
def test_initial_chunk(rates: list[ReplicaRate], rows: int, words: str) -> None:
    plan = initial_chunk(rates, 5.0, 0.5)
    assert plan.rows == rows and words in plan.reason


def test_initial_chunk_capped_by_binlog_cache() -> None:
    limits = SplitLimits(source_max_binlog_cache_size=1_000_000)
    plan = initial_chunk([ReplicaRate("r1", 1e6)], 5.0, 0.5, limits=limits, bytes_per_row=100.0)
    assert plan.rows == 10_000 and "max_binlog_cache_size" in plan.reason
    fixed = initial_chunk([], 5.0, 0.5, fixed_rows=50_000, limits=limits, bytes_per_row=100.0)
    assert fixed.rows == 10_000


@pytest.mark.parametrize(("rows", "lag", "source_s", "new"), [
    (10_000, 5.0, None, 5_000),  # twice the target: halve
    (10_000, 1.25, None, 20_000),  # half the target: double
    (10_000, 0.1, None, 20_000),  # far under: at most x2
    (10_000, 100.0, None, 2_500),  # far over: at most /4
    (10_000, 0.0, None, 20_000),  # applied between two looks: grow
    (10_000, None, 5.0, 5_000),  # no lagd: the source's time stands in
    (10_000, 1.0, 5.0, 5_000),  # the source's time is a floor under the lag seen
    (10_000, 5.0, 1.0, 5_000),
    (150, 100.0, None, MIN_ROWS),
])
def test_adapt(rows: int, lag: float | None, source_s: float | None, new: int) -> None:
    assert adapt(rows, lag, 5.0, 0.5, source_seconds=source_s).rows == new


def test_resume_threshold_leaves_room_for_one_chunk() -> None:
    assert resume_threshold(5.0, 0.5) == 2.5
    assert resume_threshold(10.0, 0.2) == 8.0
    assert resume_threshold(10.0, 1.0) == 1.0
