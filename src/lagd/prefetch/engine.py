"""The prefetch engine: a cursor in the relay log, kept a little ahead of the SQL thread.

One asyncio task owns the cursor (a RelayLogReader), the window of
transactions read but not yet applied, and the probe pool. Each step it
looks at where the SQL thread stands and asks ``control.decide_step`` what to
do: read on and submit probes, wait, jump ahead when overtaken, or pause.
The cursor never goes back to the SQL thread's position to rescan; when the
SQL thread passes it, it jumps to where the SQL thread is and counts what it
skipped as late.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from lagd.aio import Signal, cancel_and_wait
from lagd.lag_rates import DecayingRate
from lagd.mysql import changebuf
from lagd.mysql.errors import CONNECTION_KINDS, Kind, kind_of
from lagd.mysql.monitor import ReplicaMonitor, Sample
from lagd.mysql.replica import ReplicaStatus
from lagd.prefetch import control, stall
from lagd.prefetch.fingerprint import ShapeFlights
from lagd.prefetch.inserts import table_keys
from lagd.prefetch.offloop import OneThread
from lagd.prefetch.pool import Outcome, ProbePool
from lagd.prefetch.schema_gate import GatedResolver, SchemaGate, changes_schema, ddl_tables, forget
from lagd.relaylog import (
    CorruptEvent,
    Ddl,
    RelayLogReader,
    RelayPosition,
    Resynced,
    RowChange,
    Statement,
    TransactionEnd,
    TransactionStart,
)

log = logging.getLogger("lagd.prefetch")
# An open gate's reason in /status while something else keeps the probes out (gate_view).
PROBES_OUT = "open, but probes are out"

_CAUGHT_UP_BYTES = 4096  # Read - Exec source position under this: nothing to get ahead of
# Probes in flight until the server shows there is something to warm. Measured
# with the table in memory: a catch-up of 1.3 s was 21% slower while 32 probe
# sessions ran at full speed for the fraction of a second the check needs.
_PROBATION_IN_FLIGHT = 2
_PROBATION_ROWS = 256  # rows probed on probation before the quick check must judge them
_MEASURING = control.Gate(False, "measuring the SQL thread before prefetching", None, True)
_BLIND_CHECKS = 3  # seconds to wait for the applier threads' first readings
# A purge history reading older than this is not used (the gate checks once a second
# and reads it first; /status shows it only while it is that fresh).
_HISTORY_FRESH = 5.0
# Probes that name a table by what information_schema said, not by a table map.
_BY_NAME = frozenset({"statement", "parent"})


@dataclass(slots=True)
class _Trx:
    seq: int
    commit_time: float
    end: tuple[int, int] | None = None  # (file sequence, offset): compared per event, kept cheap
    rows: int = 0  # row changes and statements read of it
    statements: int = 0  # of those, statements (not counted as rows applied)
    bytes: int = 0
    probed: int = 0  # pages its probes may hold in the pool: a key each, more with documents
    rows_probed: int = 0  # of its rows, those given to the batcher (the last ones read)
    start: tuple[str, int] = ("", 0)  # its first event's relay-log file and offset
    read_bytes: int = 0  # relay-log bytes of it the cursor has read (all of them: ``bytes``)
    ended: TransactionEnd | None = None  # where the SQL thread stands once it is applied


@dataclass(slots=True)
class _Inside:
    """The SQL thread inside the transaction ``seq`` (the head): InnoDB's count of the
    rows it changed, when taken, and its rate inside this transaction."""

    seq: int
    trx_id: str
    rows: int
    at: float
    rate: DecayingRate


@dataclass(slots=True)
class PrefetchCounters:
    events: int = 0
    row_changes: int = 0
    transactions: int = 0
    probes_submitted: int = 0
    rows_probed: int = 0  # submitted
    rows_done: int = 0  # in probes that finished: the ones whose reads the server has counted
    in_time: int = 0
    late: int = 0
    dropped: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    jumps: int = 0
    resyncs: int = 0
    corrupt: int = 0
    windows: int = 0
    schema_errors: int = 0  # probes that failed on a missing index, column or table
    status_polls: int = 0  # SHOW ALL SLAVES STATUS (or the MySQL spelling) taken
    position_polls: int = 0  # of the SQL thread's position alone (control.FULL_STATUS_EVERY)
    given: int = 0  # row changes and statements given to the batcher (not passed by or held)


@dataclass(frozen=True, slots=True)
class PrefetchSnapshot:
    """What the metrics and /status show; a copy, safe to hand out."""

    state: str  # "active", "idle", "paused", "backed_off", "off"
    reason: str
    counters: dict[str, Any]
    lead_transactions: int
    lead_rows: int
    lead_bytes: int
    lead_seconds: float
    lead_pages: int
    target_transactions: int
    connections: int
    benefit: float | None
    probe_latency_avg: float | None
    cursor: str | None
    pool: dict[str, Any]
    # Why fewer probe sessions than configured (the replica's free connection slots), or None.
    connections_note: str | None = None


_COUNTER_FIELDS = tuple(f.name for f in dataclasses.fields(PrefetchCounters))


def _described(look: Callable[[str, str], Any], tables: Iterable[tuple[str, str]]
               ) -> list[tuple[str, str, Any]]:
    """(schema, table, inserts.TableKeys or None: unknown) from the resolver's information_schema
    rows, and the same for the parents of their foreign keys, which their INSERTs will check;
    in the cursor's thread, the lookups being blocking."""
    def one(schema: str, table: str) -> tuple[str, str, Any]:
        rows = look(schema, table)
        return schema, table, table_keys(*rows) if rows else None

    out = [one(s, t) for s, t in tables]
    asked = {(s, t) for s, t, _ in out}
    parents = {(fk.parent_schema, fk.parent_table): None for _, _, keys in out if keys is not None
               for fk in keys.foreign}
    return out + [one(s, t) for s, t in parents if (s, t) not in asked]


class PrefetchEngine:
    def __init__(self, reader: RelayLogReader, monitor: ReplicaMonitor, pool: ProbePool,
                 batcher: Any, limits: control.Limits, tuning: control.Tuning, *,
                 window_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 stall_monitor: stall.StallMonitor | None = None, stall_shared: bool = False) -> None:
        self.reader = reader
        self.monitor = monitor
        self.pool = pool
        self.batcher = batcher
        self.limits = limits
        self.tuning = tuning
        self.window_seconds = window_seconds
        self._clock = clock
        self.counters = PrefetchCounters()
        # Statement probes out by shape, and those held for their shape's answer.
        self._flights: ShapeFlights[tuple[Any, tuple[int, int]]] = ShapeFlights()
        # Start with half the page budget as lead: far enough ahead that probes
        # finish before the SQL thread arrives, well short of evicting them.
        self.ctl = control.initial_state(tuning, pool.size, limits.max_pages // 2)
        self._ahead: collections.deque[_Trx] = collections.deque()
        self._by_seq: dict[int, _Trx] = {}
        self._current: _Trx | None = None
        self._pending_seq: int | None = None  # oldest transaction with keys not yet in a probe
        self._pending_row = 0  # and the row of it they start at
        self._seq = 0
        self._applied_seq = 0  # every transaction up to this one is applied
        self._lead_rows = self._lead_bytes = self._lead_pages = 0
        self.state, self.reason = "starting", "starting"
        self._sql_pos: tuple[int, int] | None = None
        self._file_seq: dict[str, int] = {}
        self._head_since: float | None = None  # when the SQL thread reached the head transaction
        self._apply_rows_per_s = 0.0
        # Between two status polls the SQL thread moves on (at 12,000
        # transactions/s a 20 ms poll hides 240 of them): a probe that finishes
        # in that gap is judged against where the SQL thread is estimated to be.
        self._sql_seen_at: float | None = None
        self._popped = 0  # transactions seen applied, cumulative
        self._trx_rate = DecayingRate(0.1)  # a few polls: the rate of the last ~100 ms
        self._win: dict[str, float] = {}
        self.static_off = control.pool_too_small(limits)
        self._sample: Sample | None = None
        self._arrived: tuple[Sample, float] | None = None  # the poll loop's last, when it came
        # The last sample _step took the SQL thread's position from, and that position.
        self._observed: tuple[Sample, RelayPosition] | None = None
        self._new_sample = Signal()
        # The position poll between two full statuses (control.FULL_STATUS_EVERY).
        self._by_gtid: dict[str, _Trx] = {}  # read transactions not yet applied, by GTID
        self._domains: set[str] = set()  # the replication domains of this relay log
        self._gtids: str | None = None  # @@gtid_slave_pos at the last position poll
        self._full_at = -1e9
        self._positions = True  # False: the server has no position statement lagd knows
        self._poll_now = Signal()
        self.poll_active = 0.02  # seconds between status polls while prefetching
        self.poll_idle = 0.25
        # Caught up, the SQL thread has nothing to apply (the daemon's lag loop polls
        # for the lag): a new backlog is noticed up to 0.75 s later than at poll_idle,
        # and measured for control.BASE_SECONDS before any probe anyway. At 4 a second
        # these full statuses were the largest part of lagd's CPU on a caught-up
        # replica (benchmarks.md, 2026-12-07). A stopped SQL thread ("paused") keeps
        # poll_idle: its START is when a catch-up begins.
        self.poll_caught_up = 1.0
        self._checked_rows = 0
        self._checked_reads = -1.0
        self._windows_since_compare = 0
        self._proven = False  # the server read pages for our probes: full speed allowed
        self._start_probation()
        self._probation_from = 0  # rows_probed when the last quick check judged
        pool._on_done = self._on_done  # the engine accounts for every probe
        self.gate = SchemaGate()
        decoder = getattr(reader, "decoder", None)
        if decoder is not None:  # every table definition the cursor resolves passes the gate
            decoder.resolver = GatedResolver(decoder.resolver, self.gate)
        # A DDL's tables (None: all) until its transaction's end is read.
        self._ddl: list[tuple[str, ...] | None] = []
        self._schema_stale: set[str] = set()  # probes failed on them: drop their definitions
        self._read_budget = 0  # bytes _step asks the loop to read off the loop thread
        self._cursor = OneThread("lagd-cursor")
        # The fast gate (control.stall_gate): about a second of the SQL thread's own time.
        self.stall = stall_monitor if tuning.adaptive else None
        # Shared: the daemon starts it and finds the threads; the engine only reads it.
        self._stall_own = not stall_shared
        # Until the SQL thread has been measured for a second, no probes: a cold
        # start's first unmeasured seconds were enough for the older checks to
        # back off for the whole catch-up.
        self.gate_state = _MEASURING if self.stall is not None else control.UNMEASURED
        self._blind_checks = 0  # gate checks with applier threads known but unreadable
        # The SQL thread's relay-log position at the last gate check: its progress in
        # bytes is its apply rate whether the cursor decoded those events or not
        # (while the gate is shut nothing is decoded, so rows are not counted).
        self._gate_pos: tuple[int, int] | None = None
        self._gate_at: float | None = None
        # The count and its _inside_bytes at the last gate check.
        self._gate_inside: tuple[_Inside | None, int] = (None, 0)
        self._gate_threads: tuple[int, ...] = ()  # the applier threads at the last gate check
        self._threads_at: float | None = None  # when those were first seen sampled
        self._stall_seen: dict[str, float] = {}
        self._stall_probed = 0
        self._stall_given = 0  # counters.given at the last gate check
        self._stall_skipped: dict[str, int] = {}  # and the batcher's skipped counts
        self._gate_shut_in_window = False  # the slow comparison skips such windows
        self._appliers_sql: list[str] = [stall.appliers_sql(True), stall.appliers_sql(False)]
        self._appliers_warned = False
        # InnoDB's purge history length at the last gate check (None: not known), read
        # while the gate measures or probes may run; not asked again once the server
        # refused it (no PROCESS: _history_readable). Use it through _history().
        self.purge_history: int | None = None
        # The SQL thread's progress inside a big head transaction (control.rows_behind);
        # None: not inside one, or not counted yet. Not asked again once refused.
        self._inside: _Inside | None = None
        self._inside_at = 0.0
        self._inside_readable = True
        self._inside_warned = False
        self._changebuf_warned = False
        self._buffered_ops: frozenset[str] = frozenset()  # mysql.changebuf, as last read
        self._trx_bytes = 0.0  # relay-log bytes a transaction, a moving average; 0: none decoded yet
        # The batcher's (rows, moving, deletes) when the gate last opened on a measurement,
        # kept while it stays open: what kind of changes a try's first rows are
        # (control.moved_entries, _try_from) and purge's history since holds
        # (control.purge_debt). None: the gate is shut.
        self._opened_counts: tuple[int, int, int] | None = None
        self._history_at = 0.0
        self._history_readable = True
        # Probe sessions the replica's free connection slots allow (control.connection_budget);
        # None: not read yet, the configured number holds. Read every SLOTS_EVERY seconds
        # while probes may run or sessions are open.
        self.slots_cap: int | None = None
        self.slots_reason = "the replica's connection limits are not read yet"
        self._slots_at: float | None = None
        self._slots_failed = False

    # ----- accounting ---------------------------------------------------

    def _on_done(self, probe: Any, tag: Any, outcome: Outcome) -> None:
        seq, row = tag if isinstance(tag, tuple) else (tag, 0)
        trx = self._by_seq.get(seq) if isinstance(seq, int) else None
        if outcome.status == "dropped":
            self.counters.dropped += 1
        elif outcome.status == "scan":
            self._skip("full_scan")
        elif outcome.status == "ok":
            self.counters.rows_done += probe.rows
            if isinstance(seq, int) and self._in_time(seq, row):
                self.counters.in_time += 1
            else:
                self.counters.late += 1
        if outcome.status != "ok":
            self._count_lead(probe, seq, -1)
        if probe.kind == "statement":
            self._statement_answered(probe, trx, outcome)
        if outcome.status == "error" and getattr(outcome, "kind", None) == Kind.SCHEMA:
            # The definition it was built from is not the replica's: resolve the
            # table again (once, between reads) rather than fail on every row.
            self.counters.schema_errors += 1
            self.gate.schema_errors += 1
            self._schema_stale.add(f"{probe.schema}.{probe.table}")

    def _statement_answered(self, probe: Any, trx: _Trx | None, outcome: Outcome) -> None:
        """A statement probe's answer sizes its shape's next batches and how many of them
        may be out (control.statement_window); and a statement,
        counted as one page when sent, may read up to STATEMENT_ROWS rows: what it found
        is what the lead holds in the pool."""
        plan = getattr(probe, "plan", None)
        if plan is not None:
            send, drop = self._flights.answered(plan, outcome.status)
            for p, tag in send:
                if not self._in_time(*tag):
                    # Held while the SQL thread applied its statements: read for nothing now.
                    self._skip("overtaken")
                    self._count_lead(p, tag[0], -1)
                elif not self._send(p, tag, plan):
                    self._count_lead(p, tag[0], -1)
            for p, tag in drop:
                self._skip("shape_timed_out")
                self._count_lead(p, tag[0], -1)
        statements = getattr(self.batcher, "statements", None)
        if statements is not None:
            statements.answered(plan, outcome.status, outcome.seconds)
            if getattr(probe, "upsert", False) and outcome.status == "ok":
                statements.inserts.found(probe.schema, probe.table, probe.rows, outcome.rows)
        more = outcome.rows - (probe.pages or probe.rows)
        if outcome.status == "ok" and trx is not None and more > 0:
            trx.probed += more
            self._lead_pages += more

    @property
    def sql_running(self) -> bool | None:
        """The SQL thread ran at the last status poll; None before the first or when it failed."""
        st = self._sample.status if self._sample is not None else None
        return None if st is None else st.sql_running

    def _sql_seq_estimate(self) -> float:
        """The newest transaction the SQL thread has applied, extrapolated from
        the last poll at its recent rate."""
        if self._sql_seen_at is None:
            return float(self._applied_seq)
        rate = self._trx_rate.value or 0.0
        return self._applied_seq + rate * max(0.0, self._clock() - self._sql_seen_at)

    def _in_time(self, seq: int, row: int) -> bool:
        """The SQL thread has not reached row ``row`` of transaction ``seq`` yet, as far as
        the last poll (extrapolated) and InnoDB's count inside a big transaction tell."""
        return seq > self._sql_seq_estimate() and row >= self._behind(seq)

    def _behind(self, seq: int, passing: bool = False) -> int:
        """Rows of transaction ``seq`` the SQL thread is past (measured inside the head
        transaction; 0 for any other, or before a count); with ``passing``, the rows to
        pass by unprobed: past by the time a probe sent now answers, counted short
        (control.PASS_SHARE)."""
        ins = self._inside
        if ins is None or ins.seq != seq or not self._ahead or self._ahead[0].seq != seq:
            return 0
        if passing:
            return control.rows_behind(ins.rows, ins.at, ins.rate.value, self._clock(),
                                       self._probe_latency(), control.PASS_SHARE)
        return control.rows_behind(ins.rows, ins.at, ins.rate.value, self._clock(), 0.0)

    def _inside_bytes(self) -> int:
        """The SQL thread's progress inside the head transaction in relay-log bytes, for the
        gate's apply rate, which counts bytes and would see none until the commit:
        InnoDB's row count times the head's bytes a row (0: not counted)."""
        ins, head = self._inside, self._ahead[0] if self._ahead else None
        if ins is None or head is None or ins.seq != head.seq or not head.rows:
            return 0
        if head.bytes:  # read to its end: never more than all of it
            return min(head.bytes, ins.rows * head.bytes // head.rows)
        return ins.rows * head.read_bytes // head.rows

    def _inside_moved(self) -> int:
        """Relay-log bytes to add to the position's progress since the last gate check:
        inside a big transaction the position stands still and InnoDB's count is the
        progress, from one count of it to the next (a first count was made over an
        unknown time); at the commit the position's jump takes over, less what was
        counted of it."""
        (was, counted), inside = self._gate_inside, self._inside_bytes()
        self._gate_inside = (self._inside, inside)
        return (inside if self._inside is was else 0) - counted

    def _probe_latency(self) -> float:
        """A probe's mean time from submit to answer so far (0 before the first)."""
        pool = self.pool
        pc = pool.counters
        if not pc.issued:
            return 0.0
        # Behind the probes queued for a session, one after another.
        return pc.latency_sum / pc.issued * (1 + pool.queued / max(1, pool.size))

    def _start_probation(self) -> None:
        # Without the adaptive control there is no check to pass: full speed.
        self._proven = not self.tuning.adaptive

    def _skip(self, reason: str, n: int = 1) -> None:
        self.counters.skipped[reason] = self.counters.skipped.get(reason, 0) + n

    def _key(self, file: str, offset: int) -> tuple[int, int]:
        seq = self._file_seq.get(file)
        if seq is None:
            if len(self._file_seq) > 1000:
                self._file_seq.clear()
            seq = self._file_seq[file] = RelayPosition(file, 4).sequence
        return (seq, offset)

    def _advance_sql(self, pos: tuple[int, int], now: float) -> int:
        """Pop what the SQL thread has applied; returns rows applied."""
        moved = self._sql_pos is None or pos != self._sql_pos
        self._sql_pos = pos
        # Run once a poll for every transaction applied since: the sums are kept in locals
        # and the transactions' own fields read once each.
        ahead, by_seq, by_gtid = self._ahead, self._by_seq, self._by_gtid
        rows = read = size = pages = popped = 0
        seq = self._applied_seq
        while ahead:
            t = ahead[0]
            end = t.end
            if end is None or end > pos:
                break
            ahead.popleft()
            seq = t.seq
            by_seq.pop(seq, None)
            n = t.rows
            rows += n - t.statements
            read += n
            size += t.bytes
            pages += t.probed
            popped += 1
            ended = t.ended
            if ended is not None and ended.gtid:
                by_gtid.pop(ended.gtid, None)
        if popped:
            self._applied_seq = seq
            self._lead_rows -= read
            self._lead_bytes -= size
            self._lead_pages -= pages
            self._popped += popped
        self._trx_rate.add(now, self._popped)
        self._sql_seen_at = now
        if moved:
            self._head_since = now
        return rows

    def _lead(self, now: float) -> control.Lead:
        pages, rows = self._lead_pages, self._lead_rows
        head = self._ahead[0] if self._ahead else None
        ins = self._inside
        if head is not None and ins is not None and ins.seq == head.seq:
            # Inside a big transaction Relay_Log_Pos stands still until it commits:
            # InnoDB's count places the SQL thread. Its keys probed are spread over the
            # last rows read of it (a row may have several: a DELETE's every index); rows
            # before them were passed by, or read while probes were held.
            eaten = self._behind(head.seq)
            span = head.rows_probed
            if span > 0:
                ahead = max(0, head.rows - max(eaten, head.rows - span))
                pages = max(0, pages - (head.probed - head.probed * ahead // span))
            rows = max(0, rows - eaten)
        elif head is not None and self._head_since is not None and head.rows > control.INSIDE_ROWS:
            # Not counted (no PROCESS, or not yet): its recent rate places it.
            eaten = int(self._apply_rows_per_s * (now - self._head_since))
            pages, rows = max(0, pages - eaten), max(0, rows - eaten)
        seconds = 0.0
        if self._ahead:
            newest = self._current or self._ahead[-1]
            seconds = max(0.0, newest.commit_time - self._ahead[0].commit_time)
        return control.Lead(len(self._ahead), rows, self._lead_bytes, seconds, pages)

    def _reset_window(self) -> None:
        self._ahead.clear()
        self._by_seq.clear()
        self._by_gtid.clear()
        self._current = None
        self._applied_seq = self._seq
        self._lead_rows = self._lead_bytes = self._lead_pages = 0
        self._pending_seq = None
        self._inside = None
        self.batcher.reset()
        self.counters.dropped += len(self._flights.clear())  # the lead counts from nothing again

    # ----- the cursor ---------------------------------------------------

    def _submit(self, probes: list[Any]) -> None:
        # A batch can hold keys of several transactions; it is tagged with the
        # oldest, so "in time" means in time for all of them.
        tag = (self._pending_seq, self._pending_row) if self._pending_seq is not None else (self._seq, 0)
        held = self.gate.held_names
        for p in probes:
            if held and p.kind in _BY_NAME and self.gate.held(f"{p.schema}.{p.table}"):
                # A statement, or a foreign key's parent, whose DDL is not applied yet: their
                # probes name the table as information_schema had it, not a table map.
                self._skip("schema_pending")
                continue
            plan = getattr(p, "plan", None) if p.kind == "statement" else None
            # As many of its shape out as it may have (control.statement_window); the
            # others wait in the lead, counted in it, until the shape answers.
            if plan is not None and not self._flights.offer(plan, (p, tag)):
                self._count_lead(p, tag[0], 1)
                continue
            if self._send(p, tag, plan):
                self._count_lead(p, tag[0], 1)

    def _send(self, p: Any, tag: tuple[int, int], plan: str | None) -> bool:
        if not self.pool.submit(p, tag):
            self._skip("pool_full")
            return False
        self.counters.probes_submitted += 1
        self.counters.rows_probed += p.rows
        if plan is not None:
            self._flights.sent(plan)
        return True

    def _count_lead(self, p: Any, seq: int, sign: int) -> None:
        # Pages, not rows: a row with off-page documents is several (rewrite.documents).
        # Taken back only while its transaction is ahead: one applied took its pages along.
        pages = (p.pages or p.rows) * sign
        trx = self._by_seq.get(seq)
        if trx is not None:
            trx.probed += pages
        elif sign < 0:
            return
        self._lead_pages += pages

    def _drop_queued(self) -> None:
        """The pool's queued probes and the statement probes held for their shape's answer
        (those first: a queued probe's "dropped" answer would send the next held one)."""
        for p, tag in self._flights.clear():
            self.counters.dropped += 1
            self._count_lead(p, tag[0], -1)
        self.pool.drop_queued()

    async def _read(self, budget: int) -> None:
        """Read on in the cursor's own thread (files, information_schema), then account on the loop."""
        self._forget_stale()
        look = self._describe()
        batch, parents = await self._cursor.call(self._read_ahead, budget, look)
        for schema, table, keys in parents:
            self.batcher.learn_table(schema, table, keys)
        self._consume(batch)
        unknown = getattr(self.batcher, "unknown_tables", None)
        if look is not None and unknown is not None and (tables := unknown()):
            # Statements name no table map: what their tables are like (for moved_entries
            # and INSERT probes) is looked up off the loop (information_schema, cached).
            for schema, table, keys in await self._cursor.call(_described, look, tables):
                self.batcher.learn_table(schema, table, keys)
        if (start := self._try_from) is not None:
            self._moving_check(start)

    def _read_ahead(self, budget: int, look: Callable[[str, str], Any] | None
                    ) -> tuple[list[Any], list[tuple[str, str, Any]]]:
        """In the cursor's thread: the next events, and the parent tables of the foreign
        keys met in them described, so that their rows' parent probes are made at once."""
        batch = self.reader.read(budget)
        take = getattr(getattr(getattr(self.reader, "decoder", None), "resolver", None),
                       "take_referenced", None)
        if look is None or take is None:
            return batch, []
        return batch, _described(look, take())

    def _move_counts(self) -> tuple[int, int, int] | None:
        """The batcher's (rows, moving, deletes) (ProbeBatcher.moving), or None."""
        rows, moving, deletes = (getattr(self.batcher, n, None) for n in ("rows", "moving", "deletes"))
        if isinstance(rows, int) and isinstance(moving, int) and isinstance(deletes, int):
            return rows, moving, deletes
        return None

    @property
    def _try_from(self) -> tuple[int, int, int] | None:
        """Where a try not yet judged began (the counts at the gate's opening); None: shut,
        unmeasured, or shown to pay, no try to judge."""
        g = self.gate_state
        return self._opened_counts if g.open and g.rate_before is not None and g.since_base == 0 else None

    def _purge_share(self) -> float | None:
        """Of the row changes read since the gate opened, the share that leave purge index
        entries to remove; None: too few to tell, or not counted."""
        start, now = self._opened_counts, self._move_counts()
        if start is None or now is None or now[0] - start[0] < control.MOVING_ROWS:
            return None
        return (now[1] - start[1] + now[2] - start[2]) / (now[0] - start[0])

    def _moving_check(self, start: tuple[int, int, int]) -> None:
        """Right after a read, not at the next gate check: a try on row changes that leave purge
        index entries stops before the probes have built their lead."""
        now = self._move_counts()
        if now is None:
            return
        before = self.gate_state
        after = control.moved_entries(before, now[0] - start[0], now[1] - start[1], now[2] - start[2],
                                      inside=self._head_big(self._clock()) or None)
        if after is not before:
            self._move_gate(before, after)

    def _describe(self) -> Callable[[str, str], Any] | None:
        resolver = getattr(getattr(self.reader, "decoder", None), "resolver", None)
        look: Callable[[str, str], Any] | None = getattr(resolver, "describe", None)
        return look

    def _forget(self, decoder: Any, tables: list[str] | None) -> None:
        """Drop cached definitions (schema_gate.forget) and the statements' view of
        the same tables' indexes."""
        forget(decoder, self.gate, tables)
        if tables is None or tables:
            drop = getattr(self.batcher, "forget_tables", None)
            if drop is not None:
                drop(tables)
            # An index added or dropped changes which statement shapes scan a table.
            plans = getattr(self.pool, "forget_plans", None)
            if plans is not None:
                plans()

    def _forget_stale(self) -> None:
        if self._schema_stale:
            stale, self._schema_stale = list(self._schema_stale), set()
            self._forget(self.reader.decoder, [t.casefold() for t in stale])

    def _consume(self, batch: list[Any]) -> None:
        c = self.counters
        c.events += len(batch)
        gate = self.gate
        held = gate.held_names
        batcher = self.batcher
        add = batcher.add
        # Inside a big transaction: its rows the SQL thread has changed (or will have
        # by the time a probe answers) are passed without a probe.
        head = self._ahead[0] if self._ahead else None
        behind_seq = head.seq if head is not None else -1
        behind = self._behind(behind_seq, passing=True)
        for e in batch:
            # By type, not isinstance: events are final (frozen, slots) and this loop runs
            # for every event of a catch-up, commonest kinds first.
            t = type(e)
            if t is RowChange:
                c.row_changes += 1
                if held and gate.held(e.table.qualified):
                    # Its definition changes before the SQL thread gets here: no probe.
                    self._skip("schema_pending")
                    continue
                cur = self._current
                if not self._take(cur, behind_seq, behind):
                    continue
                if cur is not None and cur.rows >= control.INSIDE_ROWS:
                    batcher.purge_follows = False  # a big transaction: rewrite.PURGED_ENTRIES
                probes = add(e)
                if probes:  # most rows only join a batch
                    self._submit(probes)
            elif t is TransactionStart:
                batcher.purge_follows = True
                self._seq += 1
                trx = _Trx(self._seq, e.commit_time, start=(e.relay_file, e.relay_offset))
                self._current = trx
                self._ahead.append(trx)
                self._by_seq[trx.seq] = trx
            elif t is TransactionEnd:
                c.transactions += 1
                cur = self._current
                if cur is not None:
                    cur.end = self._key(e.relay_file, e.relay_offset)
                    cur.bytes = e.size
                    self._lead_bytes += e.size
                    if e.gtid and self._positions:  # off (a MySQL): no map kept per transaction
                        cur.ended = e
                        self._by_gtid[e.gtid] = cur
                        self._domains.add(e.gtid.partition("-")[0])
                # Relay-log bytes a transaction: what a transaction left to purge costs in
                # the gate's unit (control.StallWindow.trx_bytes).
                self._trx_bytes += 0.01 * (e.size - self._trx_bytes) if self._trx_bytes else e.size
                self._current = None
                if self._ddl:
                    # Held until the SQL thread has applied the DDL's whole transaction.
                    gate.hold(self._ddl.pop(), self._key(e.relay_file, e.relay_offset))
            elif t is Statement:
                cur = self._current
                if cur is not None:
                    # One row to InnoDB's count inside a big transaction: most statements a
                    # MIXED source logs change one row. One that changes more puts the count
                    # ahead of the statements read, and some are passed that could have been
                    # probed (less gain, never a wrong probe).
                    cur.statements += 1
                if not self._take(cur, behind_seq, behind):
                    continue
                probes = batcher.add_statement(e)
                if probes:
                    self._submit(probes)
            elif t is Ddl:
                # Keys read before the DDL match the definition the replica has now.
                self._submit(batcher.flush())
                if changes_schema(e.sql):
                    names = ddl_tables(e.sql, e.schema)  # None: any table may have changed
                    if names != ():
                        self._ddl.append(names)
            elif t is Resynced:
                c.resyncs += 1
                self._reset_window()
            elif t is CorruptEvent:
                c.corrupt += 1
        while self._ddl:  # its end is not read yet: hold to the cursor's position
            gate.hold(self._ddl.pop(), self._key(self.reader.position.file, self.reader.position.offset))
        self._forget(self.reader.decoder, gate.placed())
        self._submit(self.batcher.flush())
        self._pending_seq = None
        cur = self._current
        at = self.reader.position
        if cur is not None and at.file == cur.start[0]:
            cur.read_bytes = at.offset - cur.start[1]

    def _take(self, cur: _Trx | None, behind_seq: int, behind: int) -> bool:
        """Count a row change or statement of the transaction being read; False when the
        SQL thread is past it inside that transaction (passed by, unprobed)."""
        if cur is not None:
            cur.rows += 1
            self._lead_rows += 1
            if cur.rows <= behind and cur.seq == behind_seq:
                self._skip("overtaken")
                return False
            cur.rows_probed += 1
        self.counters.given += 1
        if self._pending_seq is None:  # a batch is in time only if in time for its oldest key
            self._pending_seq = self._seq
            self._pending_row = cur.rows - 1 if cur is not None else 0
        return True

    def _jump(self, pos: RelayPosition) -> None:
        skipped = sum(1 for t in self._ahead if t.probed == 0)
        self._skip("overtaken", skipped)
        self.counters.jumps += 1
        self._drop_queued()
        self.reader.seek(pos)
        self._reset_window()

    # ----- the loop -----------------------------------------------------

    async def _poll_loop(self, stop: asyncio.Event) -> None:
        """Keep the latest status at hand: often while working, rarely while idle."""
        next_discovery = 0.0
        was_running = False
        while not stop.is_set():
            now = self._clock()
            sample = await self._position_poll() if self._positions_due(now) else None
            if sample is None:
                sample = await self.monitor.poll()
                self._full_at = now
                self.counters.status_polls += 1
            else:
                self.counters.position_polls += 1
            now = self._clock()
            self._sample, self._arrived = sample, (sample, now)
            self._new_sample.set()
            running = self._sample.status is not None and self._sample.status.sql_running
            due = now >= next_discovery or running != was_running
            if self.stall is not None and self._stall_own and due:
                # The applier threads change on every START SLAVE and restart.
                tids = await self._appliers()
                self.stall.set_threads(tids or (), looked=tids is not None)
                next_discovery = now + 2.0
            was_running = running
            if self._wants_inside(now):
                await self._count_inside(now)
            self._poll_now.clear()
            await self._poll_now.wait(self._poll_every())

    def _poll_every(self) -> float:
        if self._fast_polls():
            return self.poll_active
        return self.poll_caught_up if self.state == "idle" else self.poll_idle

    def _positions_due(self, now: float) -> bool:
        """A position poll will do: the last full status is fresh and said the SQL thread
        runs, and the engine follows it closely (the 20 ms polls)."""
        st = self._sample.status if self._sample is not None else None
        return (self._positions and bool(self._by_gtid) and st is not None and st.sql_running
                and self._fast_polls() and now - self._full_at < control.FULL_STATUS_EVERY)

    async def _position_poll(self) -> Sample | None:
        """The last full status moved to where ``@@gtid_slave_pos`` places the SQL thread:
        the end of the transaction it names, read by the cursor and not yet applied.
        None when that cannot place it (a transaction not read, several domains moved,
        no answer): then a full status is taken."""
        try:
            gtids = await self.monitor.applied_gtids()
        except Exception as e:
            self._gtids = None
            if kind_of(e) in CONNECTION_KINDS:
                return None  # the full status poll that follows says what is wrong, once
            # Refused or unreadable here (a proxy, a fork): said once, full statuses from now on.
            self._positions = False
            log.info("cannot read the SQL thread's applied GTIDs (%s): its position is polled with"
                     " the full replica status (more of lagd's CPU, nothing else changes)", e)
            return None
        if gtids is None:
            self._positions = False  # a MySQL: its status statement, every poll
            return None
        gtid, why = control.applied_gtid(self._gtids, gtids, self._domains)
        self._gtids = gtids
        last = self._sample
        if gtid is None:
            # A new sample all the same: this poll is an observation (_observe).
            return Sample(time.time(), time.monotonic(), last.status) if why == "same" and last else None
        trx = self._by_gtid.get(gtid)
        end = trx.ended if trx is not None else None
        if end is None or last is None or last.status is None:
            return None
        st = last.status
        status = replace(
            st, relay_log_file=end.relay_file, relay_log_pos=end.relay_offset,
            relay_source_log_file=end.source_file or st.relay_source_log_file,
            exec_source_log_pos=end.source_pos if end.source_pos is not None else st.exec_source_log_pos)
        return Sample(time.time(), time.monotonic(), status)

    def _wants_inside(self, now: float) -> bool:
        """Count the SQL thread's rows inside the head transaction only while probes may
        run or the gate measures, inside a transaction big by its rows read or by the time the SQL
        thread has spent in it, and INSIDE_EVERY after the last count."""
        if not self._inside_readable or now - self._inside_at < control.INSIDE_EVERY:
            return False
        return self._head_big(now) and self._fast_polls() and bool(self.sql_running)

    def _head_big(self, now: float) -> bool:
        """The SQL thread is in a big transaction: counted inside by InnoDB, or big by the
        rows the cursor has read of it or by the time the SQL thread has spent in it."""
        head = self._ahead[0] if self._ahead else None
        if head is None:
            return False
        ins, since = self._inside, self._head_since
        return (ins is not None and ins.seq == head.seq) or head.rows >= control.INSIDE_ROWS or (
            head.rows > 0 and since is not None and now - since >= control.INSIDE_SECONDS)

    async def _count_inside(self, now: float) -> None:
        """InnoDB's count of the rows the SQL thread changed in its open transaction, tied
        to the head transaction; unknown (None) when it cannot be asked, and a refusal
        (no PROCESS) is said once and not asked again."""
        self._inside_at = now
        try:
            trx = await self.monitor.applier_trx()
        except Exception as e:
            self._inside = None
            kind = kind_of(e)
            why = "cannot count the rows the SQL thread changed inside a big transaction (%s): prefetch"
            if kind in (Kind.DENIED, Kind.SCHEMA):
                # Refused (no PROCESS) or not answerable here (a MySQL without
                # performance_schema): said once, not asked again.
                self._inside_readable = False
                fix = "; grant PROCESS to lagd's account" if kind is Kind.DENIED else ""
                log.info(why + " places it there by its recent rate%s", e, fix)
            elif kind not in CONNECTION_KINDS and not self._inside_warned:
                # A lost session is the status poll's to report; anything else once.
                self._inside_warned = True
                log.info(why + " places it by its recent rate until a count answers", e)
            return
        head = self._ahead[0] if self._ahead else None
        if trx is None or head is None:
            self._inside = None  # between two transactions: the position places it
            return
        ins = self._inside
        if ins is None or ins.seq != head.seq or ins.trx_id != trx.trx_id or trx.rows_modified < ins.rows:
            # A new transaction (or one the last count mistook): its rate starts afresh.
            ins = self._inside = _Inside(head.seq, trx.trx_id, trx.rows_modified, now, DecayingRate(1.0))
        ins.rows, ins.at = trx.rows_modified, now
        ins.rate.add(now, trx.rows_modified)

    def _fast_polls(self) -> bool:
        """Poll the status every 20 ms only while probes may run or the SQL thread's speed
        to beat is measured: those follow it closely. While the gate keeps prefetch out
        (CPU-bound, not reads, backing off) the SQL thread is left alone, but for a poll
        at each gate check (``_fresh_sample``): a status a second is all a shut gate judges by."""
        if self.stall is None or self.state not in ("active", "backed_off"):
            return self.state == "active"
        g = self.gate_state
        # Measuring too: the state reads "backed_off" then (no probes), and the speed to
        # beat is bytes applied between two gate checks, which stale positions would skew.
        return g.open or g.base[0] > 0 or g is _MEASURING

    async def _fresh_sample(self) -> None:
        """A status taken now, for a gate check between two slow polls: the SQL thread's
        position at the edge of the second judged, not up to 250 ms before it."""
        self._new_sample.clear()
        self._poll_now.set()
        await self._new_sample.wait(1.0)  # the status session's own deadline is shorter
        if self._sample is not None:
            self._step(self._sample, self._clock())

    async def _read_history(self) -> None:
        """InnoDB's purge history length for the gate (control.PURGE_BEHIND): unknown, not
        0, when it cannot be read; a refusal (no PROCESS) is said once and not asked again."""
        if not self._history_readable:
            return
        try:
            self.purge_history = await self.monitor.history_length()
            self._history_at = self._clock()
        except Exception as e:
            self.purge_history = None
            if kind_of(e) is Kind.DENIED:
                self._history_readable = False
                log.info("cannot read InnoDB's purge history length (%s): the gate cannot tell when "
                         "purge falls behind; grant PROCESS to lagd's account", e)

    def _history(self, now: float) -> int | None:
        """The last purge history reading while it is fresh, else unknown: it is not read
        while the gate keeps prefetch out, and an old reading is not today's."""
        return self.purge_history if now - self._history_at < _HISTORY_FRESH else None

    async def _appliers(self) -> tuple[int, ...] | None:
        """The applier threads' OS ids; () when they cannot be seen (said once), None when
        the SQL thread does not run (nothing to look for)."""
        st = self._sample.status if self._sample is not None else None
        if st is None or not st.sql_running:
            return None
        for sql in list(self._appliers_sql):
            try:
                tids = stall.applier_tids(await self.monitor.query(sql))
            except Exception as e:  # e.g. MySQL has no PROCESSLIST.TID: try the other flavor's
                if len(self._appliers_sql) > 1:
                    self._appliers_sql.remove(sql)
                    continue
                why = f"cannot list the SQL thread's OS thread: {e}"
                tids = ()
            else:
                self._appliers_sql = [sql]
                why = ("the SQL thread is not visible to lagd: grant it PROCESS (MariaDB) or SELECT on"
                       " performance_schema.threads (MySQL) to measure where its time goes")
            if not tids and not self._appliers_warned:
                self._appliers_warned = True
                log.info("%s; prefetch falls back to the with/without comparison", why)
            return tids
        return ()

    async def run(self, stop: asyncio.Event) -> None:
        self.pool.start()
        self._new_sample = Signal()
        self._poll_now = Signal()
        poller = asyncio.create_task(self._poll_loop(stop), name="prefetch-poll")
        next_window = self._clock() + self.window_seconds
        next_check = self._clock() + 1.0
        last_quick = 0.0
        await self._start_window()
        await self._check_slots(self._clock())  # before any probe session opens
        self._checked_rows, self._checked_reads = self.counters.rows_done, self._win["reads"]
        next_gate = self._clock() + 1.0
        if self.stall is not None and self._stall_own:
            self.stall.start()
        try:
            while not stop.is_set():
                if self._sample is None:
                    await self._new_sample.wait()
                    continue
                now = self._clock()
                delay = self._step(self._sample, now)
                if self._read_budget:
                    budget, self._read_budget = self._read_budget, 0
                    await self._read(budget)
                if now >= next_window:
                    await self._end_window(now)
                    next_window = now + self.window_seconds
                elif now >= next_check or (
                        self.counters.rows_done - self._checked_rows >= (256 if self._proven else 64)
                        and now - last_quick >= 0.1):
                    # Soon after probing starts: a replica whose data is in memory
                    # must not pay for probes for a whole window.
                    await self._quick_check(now)
                    next_check, last_quick = now + 1.0, now
                if now >= next_gate or (self.stall is not None and self.stall.threads != self._gate_threads):
                    # Applier threads sampled for the first time (the SQL thread started):
                    # their first reading now rather than at the next tick.
                    if self.state in ("active", "backed_off") and not self._fast_polls():
                        await self._fresh_sample()  # kept out: its polls are 250 ms apart
                    if self.stall is not None and self._fast_polls():
                        # Only while the gate measures or probes may run: it is what judges
                        # them, and a server the gate keeps prefetch out of is left alone.
                        await self._read_history()
                    self._gate_check()
                    await self._check_slots(now)
                    next_gate = now + 1.0
                if delay > 0:
                    # Until the next status (the SQL thread may have moved) or the delay.
                    self._new_sample.clear()
                    await self._new_sample.wait(delay)
                else:
                    await asyncio.sleep(0)
        finally:
            await cancel_and_wait([poller])
            if self.stall is not None and self._stall_own:
                self.stall.stop()
            # The reader (its file, its information_schema session) is closed
            # in the cursor thread, after any read still running there.
            self._cursor.close(last=self.reader.close)
            await self.pool.close()

    def _observe(self, sample: Sample, st: ReplicaStatus, now: float) -> tuple[RelayPosition, bool]:
        """The SQL thread's position in ``sample``, and whether it moved back since the last.

        One poll is one observation. The loop steps again after every read and wait (2-3
        steps a poll in a catch-up), on the sample it has: taken again, the position
        would be popped for nothing and fed to the rate as if the SQL thread had stood
        still since, and the extrapolation between polls (_sql_seq_estimate) would start
        from the last step instead of the poll, counting late probes as in time.
        """
        seen = self._observed
        if seen is not None and seen[0] is sample:
            return seen[1], False
        arrived = self._arrived
        at = arrived[1] if arrived is not None and arrived[0] is sample else now
        pos = RelayPosition(st.relay_log_file, st.relay_log_pos)
        key = self._key(pos.file, pos.offset)
        moved_back = self._sql_pos is not None and key < self._sql_pos
        applied = self._advance_sql(key, min(at, now))
        self._follow_schema(key, moved_back)
        self._win["applied_rows"] = self._win.get("applied_rows", 0) + applied
        self._observed = (sample, pos)
        return pos, moved_back

    def _step(self, sample: Sample, now: float) -> float:
        st = sample.status
        if st is None:
            self.state, self.reason = "paused", sample.error or "no replica status"
            return 1.0
        pos, moved_back = self._observe(sample, st, now)
        if not st.sql_running:
            self.state, self.reason = "paused", "the SQL thread is stopped"
            self._start_probation()
            return 0.5
        if self.static_off is not None:
            # Off by a standing verdict: only keep the cursor with the SQL thread.
            if pos > self.reader.position:
                self.reader.seek(pos)
                self._reset_window()
            self.state, self.reason = "off", self.static_off
            return 0.5
        same_file = st.read_source_log_file == st.relay_source_log_file
        backlog = st.read_source_log_pos - st.exec_source_log_pos if same_file else None
        # The SQL thread moved back: the relay log was started anew (a GTID
        # replica's restart, RESET SLAVE); the cursor's window is gone.
        overtaken = pos > self.reader.position or moved_back
        if backlog is not None and 0 <= backlog < _CAUGHT_UP_BYTES and not self._ahead:
            # Caught up: follow the SQL thread without decoding or probing. The
            # next backlog may be another workload: probation again.
            self._start_probation()
            if overtaken:
                self.reader.seek(pos)
                self._reset_window()
            self.state, self.reason = "idle", "the replica is caught up"
            return 0.25
        step = control.decide_step(
            sql_running=True, overtaken=overtaken, at_tail=self.reader.at_tail,
            enabled=self._enabled, lead=self._lead(now),
            target_transactions=self.ctl.target_transactions, limits=self.limits)
        self.reason = step.reason
        if step.action == "jump":
            self._jump(pos)
            self.state = "active"
            return 0.0
        if step.action == "read":
            self.state = "active"
            if self.pool.queued > self.pool.size * 4:
                return 0.002  # the connections are busy: reading more only queues
            if not self._proven and (
                    self.pool.queued + self.pool.busy >= _PROBATION_IN_FLIGHT
                    or self.counters.rows_probed - self._probation_from >= _PROBATION_ROWS):
                return 0.002  # on probation: a trickle until the quick check sees disk reads
            self._read_budget = 64 * 1024
            return 0.0
        if step.action == "idle":
            self.reader.at_tail = False  # look again next time
            self.state = "active"
            return 0.02
        self.state = "backed_off" if not self._enabled else "active"
        return 0.01 if self._enabled else 0.1

    @property
    def _enabled(self) -> bool:
        return self.ctl.enabled and self.gate_state.open and self.slots_cap != 0

    def _pool_size(self) -> int:
        """The controller's number of sessions, within what the replica's slots allow."""
        return self.ctl.connections if self.slots_cap is None else min(self.ctl.connections, self.slots_cap)

    def _slots_binding(self) -> tuple[bool, bool]:
        """(the slots cap the sessions, to none)."""
        cap = self.slots_cap
        return (cap is not None and cap < self.ctl.connections, cap == 0)

    async def _check_slots(self, now: float) -> None:
        """Every SLOTS_EVERY seconds while probes may run or sessions are open: fit the
        probe sessions to the replica's free connection slots, and close them all after
        IDLE_SESSIONS_SECONDS without a probe."""
        pool = self.pool
        if pool.open and not pool.busy and not pool.queued and \
                time.monotonic() - pool.last_used >= control.IDLE_SESSIONS_SECONDS:
            await pool.close_idle()
        wanted = self._fast_polls() or pool.open > 0 or self._slots_at is None
        if not wanted or (self._slots_at is not None and now - self._slots_at < control.SLOTS_EVERY):
            return
        self._slots_at = now
        probe_open = pool.open
        try:
            slots = await self.monitor.connection_slots()
        except Exception as e:
            # The cap stays as it was: lifting it on a failed reading could take the slots
            # it kept free. A lost session is the monitor's to report, once.
            if not self._slots_failed and kind_of(e) not in CONNECTION_KINDS:
                log.info("cannot read the replica's connection slots (%s): the probe sessions stay"
                         " at %d", e, pool.size)
            self._slots_failed = True
            return
        self._slots_failed = False
        binds = self._slots_binding()
        cap, self.slots_reason = control.connection_budget(self.ctl.connections, slots, probe_open)
        self.slots_cap = None if slots is None else cap
        if self._slots_binding() != binds:
            log.info("prefetch: %s", self.slots_reason)  # the cap starts or stops binding: once each way
        if self._pool_size() != pool.size:
            await pool.resize(self._pool_size())

    def _gate_check(self) -> None:
        """Every second: what the SQL thread's time says about prefetching now."""
        mon = self.stall
        if mon is None:
            return
        seen = mon.totals()
        window = stall.window(self._stall_seen, seen) if self._stall_seen else None
        self._stall_seen = seen
        probed = self.counters.rows_probed - self._stall_probed
        self._stall_probed = self.counters.rows_probed
        given = self.counters.given - self._stall_given
        self._stall_given = self.counters.given
        # Changes read that gave no probe while none was out either (control.UNPROBED_SECONDS).
        unprobed = given if probed == 0 and not self.pool.busy and not self.pool.queued else 0
        why = self._skipped_most()
        now = self._clock()
        window_from = self._gate_at
        wall = now - self._gate_at if self._gate_at is not None else 0.0
        if mon.threads != self._gate_threads:
            self._gate_threads, self._threads_at = mon.threads, now
        pos, last = self._sql_pos, self._gate_pos
        moved = self._inside_moved()
        # A new relay-log file in between: its bytes are not comparable; skip the second.
        applied = max(0, pos[1] - last[1] + moved) \
            if pos is not None and last is not None and pos[0] == last[0] and pos[1] >= last[1] else None
        if not self.gate_state.open and self._ahead:
            # Shut, but the SQL thread is still on transactions probed before:
            # their warm pages would count as its speed alone.
            applied = None
        self._gate_pos, self._gate_at = pos, now
        if self.state not in ("active", "backed_off"):
            # Caught up, paused or off: the SQL thread sleeps or does not run; the
            # next backlog is measured for a second before probes start (unless a
            # hold still runs). Meanwhile a few samples a second are enough.
            fresh = control.UNMEASURED if mon.invisible else _MEASURING
            self.gate_state = control.without_backlog(self.gate_state, fresh)
            mon.hz = 5.0
            return
        # The sampler's budget (stall.THREAD_SAMPLES_PER_S): in full while probes may
        # run or the SQL thread is measured, a quarter while the gate keeps prefetch out.
        mon.hz = stall.MAX_HZ
        mon.budget = stall.THREAD_SAMPLES_PER_S if self._fast_polls() else stall.KEPT_OUT_SAMPLES_PER_S
        if not mon.threads:
            # Not looked for yet, or found but not yet (or never) readable in /proc:
            # wait a few seconds, then let the with/without comparison decide.
            self._blind_checks = self._blind_checks + 1 if mon.looked else 0
            blind = mon.invisible or (mon.looked and self._blind_checks > _BLIND_CHECKS)
            self.gate_state = control.UNMEASURED if blind else _MEASURING
            return
        self._blind_checks = 0
        before = self.gate_state
        if window is None:
            return  # the first reading: measured from now on
        if before.rate_before is None and self._threads_at is not None and (
                window_from is None or window_from < self._threads_at + control.WARMUP_SECONDS):
            # A just-started SQL thread's first second is not its speed: not measured,
            # and no probes meanwhile (a shut gate keeps its hold).
            if before.open:
                self.gate_state = _MEASURING
            return
        span = sum(window.values()) / len(mon.threads)
        young = self._threads_at is not None and now - self._threads_at < control.YOUNG_SECONDS
        w = control.stall_window(window, mon.headroom_over(max(0.5, span)), wall, applied,
                                 self._history(now), self._trx_bytes or None, self._head_big(now),
                                 self._purge_share(), young)
        if w is None:
            return  # no sample in between: nothing new (unmeasured is decided above)
        after = control.stall_gate(before, w, prefetching=probed > 0, unprobed=unprobed,
                                   unprobed_why=why)
        if log.isEnabledFor(logging.DEBUG):
            # Every window the gate judged, not only its moves: what a verdict that
            # looks wrong was made of (a DBA's debug log; the benchmark's gate trace).
            lead = self._lead(now)
            log.debug("prefetch window: wall=%.2f applied=%s reads=%.2f cpu=%.2f queued=%.2f rows_probed=%d"
                      " lead=%d/%d/%d out=%d+%d open=%s hold=%d: %s", w.wall, w.applied, w.read_share,
                      w.cpu_share, w.cpu_wait_share, probed, lead.transactions, lead.rows, lead.pages,
                      self.pool.busy, self.pool.queued, after.open, after.hold, after.reason)
        self._move_gate(before, after)

    def _skipped_most(self) -> str:
        """What the batcher passed most changes by as since the last gate check: for a gate
        that finds nothing to probe, so that its reason names the cause (a table without a
        key). The engine's own passes (overtaken, schema pending) never reach the batcher
        and are not among the changes counted there."""
        batcher = self.batcher
        now: dict[str, int] = dict(getattr(batcher, "skipped", {}))
        was, self._stall_skipped = self._stall_skipped, now
        grown = {k: n - was.get(k, 0) for k, n in now.items() if n > was.get(k, 0)}
        if not grown:
            return ""
        top: str = max(grown, key=grown.__getitem__)
        detail: str | None = getattr(batcher, "last_reason", {}).get(top)
        return top.replace("_", " ") + (f" ({detail})" if detail else "")

    def _move_gate(self, before: control.Gate, after: control.Gate) -> None:
        self.gate_state = after
        if not after.open:
            self._gate_shut_in_window = True
        if not after.open:
            self._opened_counts = None
        elif not before.open and after.rate_before is not None and after.since_base == 0:
            self._opened_counts = self._move_counts()
        if after.open != before.open:
            log.info("prefetch gate: %s", after.reason)
            if not after.open:
                self._drop_queued()

    def _follow_schema(self, sql_pos: tuple[int, int], moved_back: bool) -> None:
        """Release the tables whose DDL the SQL thread has applied: their next table
        map is resolved from the replica as it is now."""
        decoder = getattr(self.reader, "decoder", None)
        if moved_back:
            # A relay log started anew: positions held are of another numbering.
            had = bool(self.gate.held_names)
            self.gate.release_all()
            if had and decoder is not None:
                self._forget(decoder, None)
            return
        if self.gate.held_names and decoder is not None:
            released = self.gate.release(sql_pos)
            if released is None or released:
                # Probes still queued for rows before the DDL name the schema it
                # changed; the SQL thread has applied it, so they could only fail.
                self._drop_queued()
            self._forget(decoder, released)

    async def _start_window(self) -> None:
        await self._read_change_buffering()
        self._win = {"t0": self._clock(), "probed": self.counters.rows_done,
                     "in_time": self.counters.in_time, "late": self.counters.late, "applied_rows": 0,
                     "reads": await self._pool_reads()}

    async def _read_change_buffering(self) -> None:
        """Which secondary-index changes InnoDB buffers (mysql.changebuf), read at each
        window since SET GLOBAL changes it at any time: the batcher leaves those entries
        unprobed. Unreadable: kept as it was, and said once unless the session is lost
        (the status poll's to report)."""
        tell = getattr(self.batcher, "buffer_changes", None)
        if tell is None:
            return
        try:
            got = await self.monitor.variables(*changebuf.VARIABLES)
        except Exception as e:
            if kind_of(e) not in CONNECTION_KINDS and not self._changebuf_warned:
                self._changebuf_warned = True
                log.info("cannot read innodb_change_buffering (%s): prefetch keeps probing as it did", e)
            return
        ops = changebuf.buffered(got)
        if ops != self._buffered_ops:
            self._buffered_ops = ops
            setting = got.get("innodb_change_buffering")
            tell(ops, f" (innodb_change_buffering={setting})" if setting is not None else "")
            log.info("prefetch: InnoDB buffers %s of non-unique secondary indexes%s",
                     " and ".join(sorted(ops)) or "no change",
                     ": their entries are not probed" if ops else ": every index entry is probed")

    async def _pool_reads(self) -> float:
        try:
            got = await self.monitor.global_status("Innodb_buffer_pool_reads")
        except Exception:
            return -1.0
        return float(got.get("Innodb_buffer_pool_reads", -1))

    async def _quick_check(self, now: float) -> None:
        """Every second or 256 probed rows: stop at once when there is nothing to warm."""
        rows = self.counters.rows_done
        # Each check lets probation probe another chunk, whatever it decides.
        self._probation_from = self.counters.rows_probed
        if not self._enabled or not self.tuning.adaptive or rows == self._checked_rows:
            # Nothing of ours to judge: the server's reads meanwhile are the SQL
            # thread's alone. Counting them against the next probes made every
            # cold catch-up look like thrashing (reads of the seconds the gate
            # was shut, against one second of probed keys).
            self._checked_rows, self._checked_reads = rows, -1.0
            return
        reads = await self._pool_reads()
        last_rows, last_reads = self._checked_rows, self._checked_reads
        self._checked_rows, self._checked_reads = rows, reads
        if reads < 0 or last_reads < 0:
            return  # the first reading is the baseline
        w = control.Window(0.0, True, 0, rows - last_rows, int(reads - last_reads), 0, 0)
        # Judged on the probes' state before this sample (worth_warming may prove them now;
        # a sample that does cannot also be one of nothing to warm).
        why = control.nothing_to_warm(w, self._proven)
        if w.probed_rows < control.SAMPLE_ROWS and why is None:
            # Too few keys to judge thrashing: keep counting from the same start.
            self._checked_rows, self._checked_reads = last_rows, last_reads
        if control.worth_warming(w):
            self._proven = True
        # Where the SQL thread's time is measured, the gate judges eviction by its
        # effect (the SQL thread still waits on reads): the server's reads include
        # the SQL thread's own (a row's secondary indexes, pages no probe names),
        # so reads > probed keys says little there.
        shorter = control.thrashing(w) if not self.gate_state.measured else None
        if shorter is not None:
            target = max(self.tuning.min_transactions, self.ctl.target_transactions // 2)
            self.limits = replace(self.limits, max_pages=max(64, self.limits.max_pages // 2))
            if target == self.ctl.target_transactions and self.limits.max_pages <= 64:
                self.ctl = replace(self.ctl, enabled=False, backoff_windows=self.tuning.backoff,
                                   reason=shorter + ", and it is as short as it goes: backing off")
            else:
                self.ctl = replace(self.ctl, target_transactions=target, reason=shorter)
            log.info("prefetch control: %s", self.ctl.reason)
            return
        if why is not None:
            self.ctl = replace(self.ctl, enabled=False, backoff_windows=self.tuning.backoff, reason=why)
            self._drop_queued()
            log.info("prefetch control: %s", why)

    async def _end_window(self, now: float) -> None:
        w0 = self._win
        reads = await self._pool_reads()
        seconds = max(1e-6, now - w0["t0"])
        applied = int(w0.get("applied_rows", 0))
        self._apply_rows_per_s = 0.7 * self._apply_rows_per_s + 0.3 * applied / seconds
        window = control.Window(
            seconds=seconds, prefetching=self.ctl.enabled, applied_rows=applied,
            probed_rows=self.counters.rows_done - int(w0["probed"]),
            pool_reads=int(reads - w0["reads"]) if reads >= 0 and w0["reads"] >= 0 else 10**9,
            in_time=self.counters.in_time - int(w0["in_time"]), late=self.counters.late - int(w0["late"]))
        self.counters.windows += 1
        # A window the fast gate kept (partly) shut is neither "with" nor "without".
        busy = (applied > 0 or window.probed_rows > 0) and not self._gate_shut_in_window
        self._gate_shut_in_window = not self.gate_state.open
        if busy:
            before = self.ctl
            self.ctl = control.evaluate(self.ctl, window, self.tuning, self._windows_since_compare)
            self._windows_since_compare = 0 if before.enabled != self.ctl.enabled or not window.prefetching \
                else self._windows_since_compare + 1
            if self.ctl.reason != before.reason:
                log.info("prefetch control: %s", self.ctl.reason)
            if self._pool_size() != self.pool.size:
                await self.pool.resize(self._pool_size())
        await self._start_window()

    def snapshot(self) -> PrefetchSnapshot:
        now = self._clock()
        lead = self._lead(now)
        c = self.counters
        pc = self.pool.counters
        state = "backed_off" if not self._enabled and self.state == "active" else self.state
        why_off = self._held_elsewhere() or self.gate_state.reason
        return PrefetchSnapshot(
            state=state, reason=why_off if state == "backed_off" else self.reason,
            counters={**{k: getattr(c, k) for k in _COUNTER_FIELDS if k != "skipped"},
                      "skipped": {**dict(c.skipped), **dict(getattr(self.batcher, "skipped", {}))}},
            lead_transactions=lead.transactions, lead_rows=lead.rows, lead_bytes=lead.bytes,
            lead_seconds=lead.seconds, lead_pages=lead.pages,
            target_transactions=self.ctl.target_transactions, connections=self.pool.size,
            benefit=self.ctl.benefit,
            probe_latency_avg=(pc.latency_sum / pc.issued) if pc.issued else None,
            cursor=f"{self.reader.position.file}:{self.reader.position.offset}",
            pool={"issued": pc.issued, "latency_sum": pc.latency_sum, "succeeded": pc.succeeded,
                  "failed": pc.failed,
                  "timed_out": pc.timed_out, "refused": pc.refused, "scans": pc.scans,
                  "explained": pc.explained, "unprepared": pc.unprepared, "rows_found": pc.rows_found,
                  "reconnects": pc.reconnects, "connected": pc.connected, "busy": self.pool.busy,
                  "queued": self.pool.queued, "open": self.pool.open, "last_error": self.pool.last_error},
            connections_note=self.slots_reason if self._slots_binding()[0] else None,
        )

    def _held_elsewhere(self) -> str | None:
        """Why probes stay out while the fast gate would let them run (the slower
        controller backed off, no connection slot free), or None."""
        if not self.ctl.enabled:
            return self.ctl.reason
        return self.slots_reason if self.slots_cap == 0 else None

    def gate_view(self) -> tuple[bool, str]:
        """The fast gate for /status: open or shut, and why. An open gate's last reason
        ("judging them over 4 s") says nothing once something else keeps the probes out:
        then that is the reason given, so /status never shows a judgment that is not made."""
        g = self.gate_state
        held = self._held_elsewhere() if g.open else None
        return g.open, g.reason if held is None else f"{PROBES_OUT}: {held}"

    def stall_snapshot(self) -> dict[str, Any] | None:
        """The applier threads' time split and the fast gate's verdict, for /status and
        metrics (``seconds``: cumulative per state, for ``lagd_sql_thread_seconds_total``);
        None when the engine does not measure (adaptive control off)."""
        if self.stall is None:
            return None
        gate_open, gate_reason = self.gate_view()
        return {**self.stall.snapshot(busy=self.state in ("active", "backed_off")),
                "gate_open": gate_open, "gate_reason": gate_reason,
                "purge_history": self._history(self._clock()),
                "schema": self.gate.snapshot()}


def with_limits(engine: PrefetchEngine, limits: control.Limits) -> None:
    """Apply new limits on reload (the window and counters carry on)."""
    engine.limits = limits
    engine.ctl = replace(engine.ctl, target_transactions=min(
        max(engine.ctl.target_transactions, limits.min_transactions), limits.max_transactions))
