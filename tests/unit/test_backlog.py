"""The backlog's place of the SQL thread in source time."""

from __future__ import annotations

import pytest

from lagd.backlog import Backlog
from lagd.relaylog import RelayPosition, Resynced, TransactionEnd, TransactionStart

RELAY = "relay-bin.000001"


def fill(b: Backlog, commits: list[float]) -> list[RelayPosition]:
    ends, offset = [], 4
    for i, c in enumerate(commits):
        start = TransactionStart(RELAY, offset, None, None, f"0-1-{i}", c, int(c), 1)
        offset += 100
        assert not b.feed([start, TransactionEnd(RELAY, offset, None, None, f"0-1-{i}", True, i, 100, 1, 1, 1,
                                                 frozenset())])
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


def test_a_batch_counts_whole_transactions_and_a_resync_starts_again() -> None:
    b = Backlog()
    fill(b, [100.0] * 3)
    assert (b.transactions, b.rows, b.bytes) == (3, 3, 300)
    start = TransactionStart(RELAY, 400, None, None, "0-1-9", 101.0, 101, 1)
    # Rows are counted from the transaction's end; a start without its end is not counted.
    assert not b.feed([start])
    assert (b.transactions, b.rows) == (3, 3)
    jumped = Resynced("relay-bin.000000", RelayPosition(RELAY, 4), "purged")
    end = TransactionEnd(RELAY, 900, None, None, "0-1-10", True, 10, 500, 7, 1, 1, frozenset())
    assert b.feed([jumped, TransactionStart(RELAY, 400, None, None, "0-1-10", 102.0, 102, 1), end])
    assert (b.transactions, b.rows, b.bytes) == (1, 7, 500)
    assert b.view().oldest_commit_time == 102.0
