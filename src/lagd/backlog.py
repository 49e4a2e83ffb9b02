"""What the replica has received but not applied, from the relay log.

A look-ahead reader decodes every transaction between the SQL thread and the
end of the relay log; this module keeps just enough of each to answer: how
many transactions, bytes and row changes are queued, when the oldest of them
was committed on the source (the event-time lag), and how much the SQL thread
applied since the last look (apply rates).

Memory stays small for a huge backlog (a 1 GB relay log of single-row
transactions is about four million of them): consecutive small transactions
share one bucket (at most ``BUCKET_TRX`` of them, spanning at most
``BUCKET_SPAN`` seconds of source time), so the head's commit time is exact
to within that span.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from lagd.relaylog import RelayPosition, Resynced, TransactionEnd, TransactionStart

BUCKET_TRX = 32
BUCKET_SPAN = 0.25  # seconds of source time


@dataclass(slots=True)
class _Bucket:
    first_commit: float
    last_commit: float
    # End of its last complete transaction, as the event gave it: a RelayPosition
    # per transaction (a file-name parse each) was a third of the backlog's cost.
    end_file: str | None = None
    end_offset: int = 0
    transactions: int = 0
    rows: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class BacklogView:
    transactions: int
    bytes: int
    rows: int
    oldest_commit_time: float | None  # source commit time of the oldest unapplied transaction
    newest_commit_time: float | None
    reader_at_tail: bool
    # Where the SQL thread is in source time, finer than whole seconds (see Backlog.position).
    position: float | None = None


class Backlog:
    def __init__(self) -> None:
        self._buckets: collections.deque[_Bucket] = collections.deque()
        self._open: _Bucket | None = None  # bucket of the transaction being read
        self._trx_commit: float | None = None
        self.transactions = self.bytes = self.rows = 0
        self.applied_transactions = self.applied_rows = self.applied_bytes = 0
        self.at_tail = False
        # The commit second of the last bucket applied, and how many of its transactions were.
        self._last_second: float | None = None
        self._last_second_applied = 0

    # ----- feeding (the look-ahead reader) --------------------------------

    def feed(self, events: Iterable[object]) -> bool:
        """One batch of the look-ahead reader, in order; True when the reader jumped in it
        (a Resynced: its relay log was purged under it), and this starts again from there."""
        resynced = False
        buckets = self._buckets
        for e in events:
            t = type(e)
            if t is TransactionStart:
                self._trx_commit = e.commit_time  # type: ignore[attr-defined]
            elif t is TransactionEnd:
                # Inline: once per transaction of the whole backlog, in the event loop.
                commit = self._trx_commit if self._trx_commit is not None else 0.0
                rows, size = e.rows, e.size  # type: ignore[attr-defined]
                b = buckets[-1] if buckets else None
                if (b is None or b.transactions >= BUCKET_TRX or commit - b.first_commit > BUCKET_SPAN
                        or rows > 1000 or b.rows > 1000):
                    b = _Bucket(commit, commit)
                    buckets.append(b)
                b.last_commit = commit
                b.end_file, b.end_offset = e.relay_file, e.relay_offset  # type: ignore[attr-defined]
                b.transactions += 1
                b.rows += rows
                b.bytes += size
                self.transactions += 1
                self.rows += rows
                self.bytes += size
                self._trx_commit = None
            elif t is Resynced:
                self.reset()
                resynced = True
        return resynced

    def reset(self) -> None:
        """The reader jumped (relay log purged under it): start again from its new place."""
        self._buckets.clear()
        self.transactions = self.bytes = self.rows = 0
        self._trx_commit = None
        self._last_second = None

    # ----- the SQL thread moved ------------------------------------------

    def applied_up_to(self, pos: RelayPosition) -> None:
        while self._buckets:
            b = self._buckets[0]
            if b.end_file is None or RelayPosition(b.end_file, b.end_offset) > pos:
                break
            self._buckets.popleft()
            if b.first_commit == self._last_second:
                self._last_second_applied += b.transactions
            else:
                self._last_second, self._last_second_applied = b.first_commit, b.transactions
            self.transactions -= b.transactions
            self.rows -= b.rows
            self.bytes -= b.bytes
            self.applied_transactions += b.transactions
            self.applied_rows += b.rows
            self.applied_bytes += b.bytes

    def position(self) -> float | None:
        """The SQL thread's place in source time: the commit time of the oldest
        transaction not applied, and within a whole second (MariaDB's and old
        MySQL's logs carry only the second) the share of that second's
        transactions already applied. Whole seconds alone make the apply speed
        a staircase: at a poll every half second it reads 0 or 2 source-seconds
        per second for a true 1, and a catch-up's first seconds forecast 3 s for 15."""
        if not self._buckets:
            return self._trx_commit
        head = self._buckets[0]
        second = head.first_commit
        if not second.is_integer() or head.last_commit != second:
            return second  # sub-second times (MySQL 8's original_commit_timestamp)
        waiting = 0
        for b in self._buckets:
            if b.first_commit != second or b.last_commit != second:
                break
            waiting += b.transactions
        applied = self._last_second_applied if self._last_second == second else 0
        if self._buckets[-1].last_commit == second and not self.at_tail:
            return second  # the rest of that second is not read yet: its share is not known
        return second + applied / (applied + waiting) if waiting else second

    def view(self) -> BacklogView:
        head = self._buckets[0] if self._buckets else None
        tail = self._buckets[-1] if self._buckets else None
        oldest = head.first_commit if head else self._trx_commit
        return BacklogView(self.transactions, self.bytes, self.rows, oldest,
                           tail.last_commit if tail else self._trx_commit, self.at_tail,
                           self.position())
