"""The backlog's place of the SQL thread in source time."""

from __future__ import annotations

import pytest

from lagd.backlog import Backlog
from lagd.relaylog import RelayPosition, TransactionEnd, TransactionStart

RELAY = "relay-bin.000001"


def fill(b: Backlog, commits: list[float]) -> list[RelayPosition]:
    ends, offset = [], 4
    for i, c in enumerate(commits):
        b.start(TransactionStart(RELAY, offset, None, None, f"0-1-{i}", c, int(c), 1))
        offset += 100
        b.end(TransactionEnd(RELAY, offset, None, None, f"0-1-{i}", True, i, 100, 1, 1, 1, frozenset()))
        ends.append(RelayPosition(RELAY, offset))
    return ends


def test_within_a_whole_second_the_position_is_the_share_of_it_applied() -> None:
    b = Backlog()
    ends = fill(b, [100.0] * 64 + [101.0] * 64)  # two buckets of 32 per second
    b.at_tail = True
    assert b.position() == 100.0
    b.applied_up_to(ends[31])
    assert b.position() == pytest.approx(100.5)
    assert b.view().oldest_commit_time == 100.0  # event time stays the commit second
    b.applied_up_to(ends[63])
    assert b.position() == 101.0
    b.applied_up_to(ends[95])
    assert b.position() == pytest.approx(101.5) == b.view().position


def test_sub_second_commit_times_are_the_position() -> None:
    b = Backlog()
    ends = fill(b, [100.25] * 40 + [100.5])
    b.applied_up_to(ends[31])
    assert b.position() == 100.25


def test_a_second_not_read_to_its_end_is_not_divided() -> None:
    b = Backlog()
    ends = fill(b, [100.0] * 64)
    b.at_tail = False  # more of second 100 may come
    b.applied_up_to(ends[31])
    assert b.position() == 100.0
