"""The engine's in-time accounting, between two polls of the SQL thread's position, and inside
one big transaction, where the position stands still."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.status_fixtures import replica_status

from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.monitor import Sample
from lagd.mysql.progress import ApplierTrx
from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine, _Trx
from lagd.prefetch.pool import Outcome, PoolCounters
from lagd.relaylog import (
    Column,
    CorruptEvent,
    Ddl,
    RelayPosition,
    RowChange,
    RowKind,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)
from lagd.relaylog.reader import Resynced


@dataclass
class StubPool:
    size: int = 4
    _on_done: Any = None


@dataclass
class Probe:
    rows: int = 16
    pages: int = 0
    kind: str = "pk"


def engine(clock: list[float], transactions: int = 20) -> PrefetchEngine:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    eng = PrefetchEngine(reader=None, monitor=None, pool=StubPool(), batcher=None,  # type: ignore[arg-type]
                         limits=limits, tuning=tuning, clock=lambda: clock[0])
    for seq in range(1, transactions + 1):  # transaction seq ends at offset 100 * seq of file 1
        t = _Trx(seq, 0.0, end=(1, 100 * seq), rows=1)
        eng._ahead.append(t)
        eng._by_seq[seq] = t
    eng._seq = transactions
    return eng


@pytest.mark.parametrize(("tag", "finished_at", "in_time"), [
    (3, 100.02, True),    # at the poll: the SQL thread had applied 2
    (4, 100.05, False),   # 30 ms later at 100 trx/s it is past 5
    (6, 100.05, True),
    (9, 100.10, False),   # 80 ms later: past 10
    (11, 100.10, True),
])
def test_a_probe_is_in_time_only_ahead_of_the_extrapolated_sql_thread(
    tag: int, finished_at: float, in_time: bool,
) -> None:
    clock = [100.0]
    eng = engine(clock)
    eng._advance_sql((1, 0), 100.0)
    clock[0] = 100.02
    eng._advance_sql((1, 200), 100.02)  # 2 transactions in 20 ms: 100 per second
    clock[0] = finished_at
    eng._on_done(Probe(), tag, Outcome("ok", 16, 0.01))
    assert (eng.counters.in_time, eng.counters.late) == ((1, 0) if in_time else (0, 1))


def test_without_a_rate_the_last_polled_position_decides() -> None:
    clock = [100.0]
    eng = engine(clock)
    eng._advance_sql((1, 300), 100.0)  # first poll: 3 applied, no rate yet
    clock[0] = 105.0
    eng._on_done(Probe(), 4, Outcome("ok", 16, 0.01))
    eng._on_done(Probe(), 3, Outcome("ok", 16, 0.01))
    assert (eng.counters.in_time, eng.counters.late) == (1, 1)


# ----- inside one big transaction: InnoDB's count places the SQL thread -------------

@pytest.mark.parametrize(("counted", "at", "rate", "now", "latency", "behind"), [
    (5_000, 10.0, None, 10.5, 0.05, 5_000),     # no rate yet: the count alone
    (5_000, 10.0, 0.0, 10.5, 0.05, 5_000),
    (5_000, 10.0, 4_000.0, 10.0, 0.0, 5_000),   # counted just now, answers at once
    (5_000, 10.0, 4_000.0, 10.5, 0.0, 7_000),   # half a second on at 4,000 rows/s
    (5_000, 10.0, 4_000.0, 10.5, 0.05, 7_200),  # and a probe's 50 ms
    (5_000, 10.0, 4_000.0, 9.0, 0.0, 5_000),    # a clock before the count: not backwards
])
def test_rows_behind(counted: int, at: float, rate: float | None, now: float, latency: float,
                     behind: int) -> None:
    assert control.rows_behind(counted, at, rate, now, latency) == behind


def test_rows_passed_by_take_a_share_of_the_advance_since_the_count() -> None:
    # Half of 0.55 s at 4,000 rows/s: a row passed that the SQL thread has not reached
    # costs it a read; a row probed that it has passed only a probe.
    assert control.rows_behind(5_000, 10.0, 4_000.0, 10.5, 0.05, share=0.5) == 6_100
    assert control.rows_behind(5_000, 10.0, None, 10.5, 0.05, share=0.5) == 5_000


def test_the_cursor_passes_by_fewer_rows_than_the_sql_thread_is_expected_past() -> None:
    clock = [100.0]
    eng, mon, pool = inside_engine(clock)
    count(eng, mon, 1_000, 100.0)
    count(eng, mon, 3_000, 101.0)  # 2,000 rows a second inside it
    clock[0] = 101.5
    assert eng._behind(1) == 4_000  # expected: the lead and in-time count on it
    eng._ahead[0].rows = 3_000
    eng._consume(rows(2_000))
    passed = int(3_000 + control.PASS_SHARE * 2_000 * 0.5)
    assert eng.counters.skipped == {"overtaken": passed - 3_000} and pool.tags[0] == (1, passed)


class InsideMonitor:
    """The applier's open transaction as the test sets it, or the error it raises."""

    def __init__(self) -> None:
        self.trx: ApplierTrx | None = None
        self.error: Exception | None = None
        self.asked = 0

    async def applier_trx(self) -> ApplierTrx | None:
        self.asked += 1
        if self.error is not None:
            raise self.error
        return self.trx


class InsidePool:
    size = 4
    queued = 0
    _on_done: Any = None

    def __init__(self) -> None:
        self.counters = PoolCounters()
        self.tags: list[Any] = []

    def submit(self, probe: Any, tag: Any) -> bool:
        self.tags.append(tag)
        return True


class OneKeyBatcher:
    def add(self, e: RowChange) -> list[Probe]:
        return [Probe(1)]

    def flush(self) -> list[Probe]:
        return []

    def reset(self) -> None:
        pass


def count(eng: PrefetchEngine, mon: InsideMonitor, rows: int, at: float, trx: str = "77") -> None:
    """InnoDB's count of the SQL thread's transaction ``trx``, asked at ``at``."""
    mon.trx = ApplierTrx(trx, rows, 12)
    asyncio.run(eng._count_inside(at))


def inside_engine(clock: list[float]) -> tuple[PrefetchEngine, InsideMonitor, InsidePool]:
    """An engine with probes allowed, the SQL thread inside transaction 1 (5,000 rows read)."""
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    mon, pool = InsideMonitor(), InsidePool()
    reader = SimpleNamespace(decoder=SimpleNamespace(resolver=None, invalidate=lambda tables: None),
                             position=RelayPosition("relay.000001", 4))
    eng = PrefetchEngine(reader=reader, monitor=mon, pool=pool, batcher=OneKeyBatcher(),  # type: ignore[arg-type]
                         limits=limits, tuning=tuning, clock=lambda: clock[0])
    eng.state, eng.gate_state = "active", control.Gate(True, "open", 0.5, True)
    eng._sample = SimpleNamespace(status=SimpleNamespace(sql_running=True))  # type: ignore[assignment]
    big = _Trx(1, 0.0, rows=5_000)
    eng._ahead.append(big)
    eng._by_seq[1] = big
    eng._current, eng._seq = big, 1
    eng._lead_rows = 5_000
    eng._advance_sql((1, 0), clock[0])
    return eng, mon, pool


def rows(n: int) -> list[RowChange]:
    t = TableInfo("s", "t", (Column("id", "long", False),), None, (), (0,), "table_map")
    return [RowChange(t, RowKind.DELETE, (i,), None) for i in range(n)]


def test_inside_a_big_transaction_rows_the_sql_thread_is_past_are_not_probed() -> None:
    clock = [100.0]
    eng, mon, pool = inside_engine(clock)
    count(eng, mon, 5_400, 100.0)
    eng._consume(rows(1_000))  # rows 5,001-6,000 of the transaction
    assert eng.counters.skipped == {"overtaken": 400}
    assert len(pool.tags) == 600 and pool.tags[0] == (1, 5_400)  # in a probe from its row 5,401 on
    assert eng._current is not None and eng._current.rows_probed == 600
    lead = eng._lead(100.0)
    assert (lead.rows, lead.pages) == (600, 600)  # 6,000 read, 5,400 changed; 600 probed ahead
    count(eng, mon, 5_700, 100.0)
    assert eng._lead(100.0).pages == 300  # the SQL thread took half the probed rows in


def test_pages_inside_count_every_key_of_a_row() -> None:
    """A DELETE's probes name each index of its row: two keys a row, two pages left per
    row the SQL thread has not reached."""
    clock = [100.0]
    eng, mon, _pool = inside_engine(clock)
    eng.batcher.add = lambda e: [Probe(1), Probe(1)]  # type: ignore[method-assign]
    count(eng, mon, 5_000, 100.0)
    eng._consume(rows(1_000))
    assert eng._lead(100.0).pages == 2_000
    count(eng, mon, 5_750, 100.0)
    assert eng._lead(100.0).pages == 500


def test_the_count_moves_on_at_the_rate_measured_inside() -> None:
    clock = [100.0]
    eng, mon, _pool = inside_engine(clock)
    count(eng, mon, 1_000, 100.0)
    clock[0] = 101.0
    count(eng, mon, 3_000, 101.0)  # 2,000 rows a second inside it
    clock[0] = 101.5
    assert eng._behind(1) == 4_000  # half a second on
    assert eng._lead(101.5).rows == 1_000
    assert eng._behind(2) == 0  # no other transaction is measured


@pytest.mark.parametrize(("row", "in_time"), [(5_399, False), (5_400, True)])
def test_a_probe_inside_is_in_time_only_ahead_of_the_counted_row(row: int, in_time: bool) -> None:
    clock = [100.0]
    eng, mon, _ = inside_engine(clock)
    count(eng, mon, 5_400, 100.0)
    eng._on_done(Probe(), (1, row), Outcome("ok", 16, 0.01))
    assert (eng.counters.in_time, eng.counters.late) == ((1, 0) if in_time else (0, 1))


def test_a_new_transaction_or_none_open_is_not_taken_for_the_old_count() -> None:
    clock = [100.0]
    eng, mon, _ = inside_engine(clock)
    count(eng, mon, 4_000, 100.0)
    count(eng, mon, 10, 100.1, trx="78")  # the next transaction's first rows
    assert eng._behind(1) == 10 and eng._inside is not None and eng._inside.rate.value is None
    mon.trx = None  # between two transactions
    asyncio.run(eng._count_inside(100.2))
    assert eng._inside is None and eng._behind(1) == 0


def test_the_count_is_asked_only_inside_a_big_head_transaction_while_probes_may_run() -> None:
    clock = [100.0]
    eng, _mon, _ = inside_engine(clock)
    assert eng._wants_inside(100.0)
    eng._inside_at = 100.0
    assert not eng._wants_inside(100.0 + control.INSIDE_EVERY / 2)  # asked just now
    assert eng._wants_inside(100.0 + control.INSIDE_EVERY * 1.01)
    eng._ahead[0].rows = control.INSIDE_ROWS - 1
    eng._head_since = 200.0 - control.INSIDE_SECONDS / 2
    assert not eng._wants_inside(200.0)  # a small head, just reached: the position places it
    eng._head_since = 200.0 - control.INSIDE_SECONDS * 1.01
    assert eng._wants_inside(200.0)  # but one the SQL thread has spent a while in is big
    eng._ahead[0].rows = control.INSIDE_ROWS
    eng.state, eng.gate_state = "backed_off", control.Gate(False, "the stall is not reads", None, True)
    assert not eng._wants_inside(200.0)  # kept out: no probes to place, nothing measured


def test_without_process_the_count_is_unknown_and_not_asked_again() -> None:
    clock = [100.0]
    eng, mon, _ = inside_engine(clock)
    mon.error = DatabaseError("access denied", kind=Kind.DENIED)
    asyncio.run(eng._count_inside(100.0))
    assert eng._inside is None and not eng._wants_inside(200.0) and mon.asked == 1
    lead = eng._lead(100.0)
    assert lead.rows == 5_000  # placed by the whole transactions' rate, 0 before a window


def test_the_gate_counts_progress_inside_in_bytes_and_the_commit_takes_it_over() -> None:
    """The gate's apply rate is relay-log bytes: inside a big transaction InnoDB's count
    times the head's bytes a row, until the commit moves the position past all of it."""
    clock = [100.0]
    eng, mon, _pool = inside_engine(clock)
    head = eng._ahead[0]
    head.read_bytes = 500_000  # 5,000 rows read: 100 bytes a row
    count(eng, mon, 1_000, 100.0)
    assert eng._inside_bytes() == 100_000
    head.rows, head.end, head.bytes = 6_000, (1, 600_000), 600_000  # read to its end
    count(eng, mon, 5_000, 101.0)
    assert eng._inside_bytes() == 500_000
    count(eng, mon, 7_000, 101.5)  # over the rows read: a primary-key UPDATE writes two undo records
    assert eng._inside_bytes() == 600_000  # never more than the whole transaction
    mon.trx = None
    asyncio.run(eng._count_inside(102.0))
    assert eng._inside_bytes() == 0  # committed: the position has it


class StatementBatcher(OneKeyBatcher):
    def add_statement(self, e: Statement) -> list[Probe]:
        return [Probe(1)]


def test_statements_inside_count_as_rows_there_but_not_as_rows_applied() -> None:
    """A MIXED source logs a batch job's single-row UPDATEs as statements: inside its one
    transaction each is a row to InnoDB's count; applied, they are not row changes."""
    clock = [100.0]
    eng, mon, pool = inside_engine(clock)
    eng.batcher = StatementBatcher()  # type: ignore[assignment]
    count(eng, mon, 5_300, 100.0)
    eng._consume([Statement("s", f"UPDATE t SET c = 1 WHERE id = {i}", 0, 0) for i in range(500)])
    assert eng.counters.skipped == {"overtaken": 300} and len(pool.tags) == 200
    assert pool.tags[0] == (1, 5_300)
    head = eng._ahead[0]
    assert (head.rows, head.statements) == (5_500, 500)
    head.end = (1, 100)
    assert eng._advance_sql((1, 100), 101.0) == 5_000  # the 5,000 row changes, not the statements


@pytest.mark.parametrize(("kind", "asked_again"), [
    (Kind.DENIED, False), (Kind.SCHEMA, False),  # no PROCESS; no performance_schema on a MySQL
    (Kind.TIMEOUT, True), (Kind.LOST, True),
])
def test_a_count_that_fails_is_unknown_and_asked_again_only_when_it_may_answer(
        kind: Kind, asked_again: bool) -> None:
    clock = [100.0]
    eng, mon, _ = inside_engine(clock)
    count(eng, mon, 4_000, 100.0)
    mon.error = DatabaseError("failed", kind=kind)
    asyncio.run(eng._count_inside(100.5))
    assert eng._inside is None and eng._behind(1) == 0
    assert eng._wants_inside(101.0) is asked_again


def test_the_gates_rate_counts_rows_inside_from_one_count_to_the_next() -> None:
    """A first count was made over an unknown time: not progress in the second it lands
    in; at the commit the position's jump, less what was counted, is."""
    clock = [100.0]
    eng, mon, _ = inside_engine(clock)
    eng._ahead[0].read_bytes = 500_000  # 100 bytes a row
    seen = []
    for at, rows in ((100.0, 20_000), (101.0, 25_000), (102.0, 31_000)):
        count(eng, mon, rows, at)
        seen.append(eng._inside_moved())
    mon.trx = None  # committed: the position moves on by the whole transaction
    asyncio.run(eng._count_inside(103.0))
    seen.append(eng._inside_moved())
    assert seen == [0, 500_000, 600_000, -3_100_000]  # the jump less the 3,100,000 counted


# ----- the change buffer, read at each window -----------------------------------------------

class VariablesMonitor:
    """SHOW GLOBAL VARIABLES as the test sets it, or the error it raises."""

    def __init__(self) -> None:
        self.variables_now: dict[str, str] = {}
        self.error: Exception | None = None

    async def variables(self, *names: str) -> dict[str, str]:
        if self.error is not None:
            raise self.error
        return {n: v for n, v in self.variables_now.items() if n in names}


class BufferingBatcher:
    def __init__(self) -> None:
        self.told: list[tuple[frozenset[str], str]] = []

    def buffer_changes(self, ops: frozenset[str], setting: str = "") -> None:
        self.told.append((ops, setting))


def test_the_change_buffer_setting_is_followed_and_kept_when_it_cannot_be_read(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    eng = engine([0.0])
    mon, batcher = VariablesMonitor(), BufferingBatcher()
    eng.monitor, eng.batcher = mon, batcher  # type: ignore[assignment]
    asyncio.run(eng._read_change_buffering())
    assert batcher.told == []  # none buffered, as the batcher starts: nothing to tell
    mon.variables_now = {"innodb_change_buffering": "all", "innodb_change_buffer_max_size": "25"}
    asyncio.run(eng._read_change_buffering())
    asyncio.run(eng._read_change_buffering())  # unchanged: told once
    assert batcher.told == [(frozenset({"inserts", "delete_marks"}), " (innodb_change_buffering=all)")]
    mon.error = DatabaseError("statement timeout", kind=Kind.TIMEOUT)
    asyncio.run(eng._read_change_buffering())
    asyncio.run(eng._read_change_buffering())
    assert len(batcher.told) == 1  # unreadable: kept as it was ...
    assert sum("innodb_change_buffering" in r.getMessage() for r in caplog.records
               if r.levelname == "INFO" and "cannot" in r.getMessage()) == 1  # ... and said once
    mon.error, mon.variables_now = None, {"innodb_change_buffering": "none"}  # SET GLOBAL
    asyncio.run(eng._read_change_buffering())
    assert batcher.told[-1] == (frozenset(), " (innodb_change_buffering=none)")


def test_the_leads_page_budget_counts_a_probes_pages_where_a_row_is_more_than_one() -> None:
    """A clustered probe of rows with off-page documents brings in several pages a row
    (rewrite.documents): the lead's budget counts them, and gives them back if it fails."""
    eng = engine([100.0])
    eng.pool.submit = lambda probe, tag: True  # type: ignore[attr-defined]
    eng._pending_seq, eng._pending_row = 5, 0
    eng._submit([Probe(rows=4, pages=12), Probe(rows=16)])
    assert (eng._lead_pages, eng._by_seq[5].probed, eng.counters.rows_probed) == (28, 28, 20)
    eng._on_done(Probe(rows=4, pages=12), (5, 0), Outcome("error", 0, 0.01))
    assert (eng._lead_pages, eng._by_seq[5].probed) == (16, 16)


def test_the_leads_page_budget_counts_the_rows_a_statement_probe_found() -> None:
    """A statement counts as one page when sent (its rows are unknown, up to
    STATEMENT_ROWS): what its probe found is added when it answers; never taken off."""
    eng = engine([100.0])
    eng.pool.submit = lambda probe, tag: True  # type: ignore[attr-defined]
    eng._pending_seq, eng._pending_row = 5, 0
    batch, few, rows = Probe(rows=16, kind="statement"), Probe(rows=16, kind="statement"), Probe(rows=16)
    eng._submit([batch, few, rows])
    assert (eng._lead_pages, eng._by_seq[5].probed) == (48, 48)
    eng._on_done(batch, (5, 0), Outcome("ok", 800, 0.01))  # 16 statements of 50 rows
    eng._on_done(few, (5, 0), Outcome("ok", 3, 0.01))  # most changed no row: counted as sent
    eng._on_done(rows, (5, 0), Outcome("ok", 16, 0.01))
    assert (eng._lead_pages, eng._by_seq[5].probed) == (832, 832)
    eng._on_done(Probe(rows=1, kind="statement"), (99, 0), Outcome("ok", 50, 0.01))  # applied already
    assert eng._lead_pages == 832


def test_the_purge_share_counts_the_changes_read_since_the_gate_opened_until_it_shuts() -> None:
    eng = engine([100.0])
    counts = SimpleNamespace(rows=1_000, moving=900, deletes=100)  # before: update_k-like
    eng.batcher = counts  # type: ignore[assignment]
    shut = control.Gate(False, "measuring", None, True)
    opened = control.Gate(True, "prefetching", 0.5, True, rate_before=1000.0)
    eng._move_gate(shut, opened)
    assert eng._purge_share() is None  # nothing read since
    counts.rows, counts.moving, counts.deletes = 1_400, 1_000, 120  # 400 more: 100 move, 20 deleted
    assert eng._purge_share() == pytest.approx(0.3)
    # The try paid: the moved_entries check is done, the share still counts from the opening.
    eng._move_gate(opened, control.Gate(True, "pays", 0.5, True, rate_before=1000.0, since_base=3.0))
    counts.rows = 1_800
    assert eng._purge_share() == pytest.approx(0.15)
    eng.pool.drop_queued = lambda: 0  # type: ignore[attr-defined]
    eng._move_gate(opened, shut)
    assert eng._purge_share() is None


def test_a_statement_probes_answer_sizes_its_shapes_next_batches() -> None:
    heard: list[tuple[object, str, float]] = []
    batcher = SimpleNamespace(statements=SimpleNamespace(answered=lambda *a: heard.append(a)))
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    eng = PrefetchEngine(reader=None, monitor=None, pool=StubPool(), batcher=batcher,  # type: ignore[arg-type]
                         limits=limits, tuning=tuning, clock=lambda: 0.0)
    shape = SimpleNamespace(rows=16, pages=0, kind="statement", plan="s\0UPDATE t SET c = ? WHERE k = ?")
    eng._on_done(shape, (1, 0), Outcome("timeout", 0, 0.5))
    eng._on_done(Probe(), (1, 0), Outcome("ok", 16, 0.01))  # a row probe: not a shape's
    assert heard == [("s\0UPDATE t SET c = ? WHERE k = ?", "timeout", 0.5)]


def test_what_an_upserts_primary_key_probe_found_is_told_to_the_insert_batcher() -> None:
    found: list[tuple[str, str, int, int]] = []
    inserts = SimpleNamespace(found=lambda *a: found.append(a))
    batcher = SimpleNamespace(statements=SimpleNamespace(answered=lambda *a: None, inserts=inserts))
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    eng = PrefetchEngine(reader=None, monitor=None, pool=StubPool(), batcher=batcher,  # type: ignore[arg-type]
                         limits=limits, tuning=tuning, clock=lambda: 0.0)

    def probe(upsert: bool) -> SimpleNamespace:
        return SimpleNamespace(rows=16, pages=0, kind="statement", plan=None, schema="s", table="t",
                               upsert=upsert)

    eng._on_done(probe(True), (1, 0), Outcome("ok", 15, 0.01))
    eng._on_done(probe(True), (1, 0), Outcome("timeout", 0, 0.5))  # found nothing: says nothing
    eng._on_done(probe(False), (1, 0), Outcome("ok", 3, 0.01))  # a plain INSERT's
    assert found == [("s", "t", 16, 15)]


def test_a_statement_shape_has_one_probe_out_until_its_first_answers() -> None:
    """16 statements of 40 scattered rows a probe timed out, all 32 sent at once before
    any answered (update_k_range_stmt): a shape starts with one probe out, the others
    held (counted in the lead) until it answers."""
    eng = engine([100.0])
    sent: list[Any] = []
    eng.pool.submit = lambda probe, tag: sent.append(probe) or True  # type: ignore[attr-defined]
    eng.pool.drop_queued = lambda: 0  # type: ignore[attr-defined]
    eng._pending_seq, eng._pending_row = 5, 0
    shape, other = "s\0UPDATE t SET c = ? WHERE k BETWEEN ? AND ?", "s\0DELETE FROM t WHERE id = ?"

    def probe(plan: str) -> SimpleNamespace:
        return SimpleNamespace(rows=16, pages=0, kind="statement", plan=plan, schema="s", table="t")

    first, second, third, fourth = probe(shape), probe(shape), probe(shape), probe(shape)
    eng._submit([first, second, probe(other), third, fourth])
    assert [p.plan for p in sent] == [shape, other]  # one of each shape
    assert eng._lead_pages == eng._by_seq[5].probed == 80 and eng.counters.probes_submitted == 2
    eng._on_done(first, (5, 0), Outcome("ok", 16, 0.02))  # it answers fast: two may be out
    assert sent[2:] == [second, third] and eng.counters.probes_submitted == 4  # the fourth waits
    assert eng._lead_pages == 80 and not eng.counters.skipped

    slow = "s\0UPDATE t SET c = ? WHERE k IN (?)"
    out, held = probe(slow), [probe(slow) for _ in range(40)]
    eng._submit([out, *held])  # all held, in the lead: dropped past 32, a third went unprobed
    assert not eng.counters.skipped and len(sent) == 5 and eng._lead_pages == 80 + 41 * 16
    eng._on_done(out, (5, 0), Outcome("timeout", 0, 0.5))  # held at the size that timed out
    assert eng.counters.skipped == {"shape_timed_out": 40}
    assert eng._lead_pages == 80, "the timed-out probe and the held ones left the lead"
    alone, after = probe(slow), probe(slow)
    eng._submit([alone, after])  # one at a time
    assert sent[-1] is alone and len(sent) == 6
    eng._on_done(alone, (5, 0), Outcome("dropped", 0, 0.0))  # says nothing: the next goes alone
    assert sent[-1] is after and len(sent) == 7
    eng._submit([probe(slow)])  # held behind it ...
    eng._drop_queued()  # ... and let go with the pool's queue (the gate shut), with the fourth
    assert eng.counters.dropped == 1 + 2 and len(sent) == 7
    assert eng._lead_pages == 80 - 16 + 16  # the fourth let go, `after` out
    eng._submit([Probe(), Probe()])  # row probes have no such limit
    assert len(sent) == 9


def test_a_held_statement_probe_the_sql_thread_passed_is_not_sent() -> None:
    """Probes held for their shape's window go out as it answers, those of statements
    the SQL thread applied meanwhile are not: they would read pages for nothing."""
    eng = engine([100.0])
    sent: list[Any] = []
    eng.pool.submit = lambda probe, tag: sent.append(probe) or True  # type: ignore[attr-defined]
    shape = "s\0UPDATE t SET c = ? WHERE id IN (?)"
    first, passed, ahead = (SimpleNamespace(rows=10, pages=0, kind="statement", plan=shape, schema="s",
                                            table="t") for _ in range(3))
    eng._pending_seq, eng._pending_row = 2, 0
    eng._submit([first, passed])
    eng._pending_seq = 9
    eng._submit([ahead])
    assert sent == [first] and eng._lead_pages == 30
    eng._advance_sql((1, 500), 100.0)  # the SQL thread applied 1 to 5
    eng._on_done(first, (2, 0), Outcome("ok", 10, 0.02))
    assert sent == [first, ahead] and eng.counters.skipped == {"overtaken": 1}
    assert eng._lead_pages == 10, "the applied transactions took theirs along; `ahead` is out"


# ----- the position poll between two full statuses ---------------------------------

class GtidMonitor:
    """``@@gtid_slave_pos`` as the test sets it; ``None``: a MySQL, which has none lagd uses."""

    def __init__(self, gtids: str | Exception | None) -> None:
        self.gtids = gtids

    async def applied_gtids(self) -> str | None:
        if isinstance(self.gtids, Exception):
            raise self.gtids
        return self.gtids


def _ended(seq: int) -> TransactionEnd:
    file = "relay.000001" if seq <= 10 else "relay.000002"  # a rotation after the tenth
    return TransactionEnd(file, 100 * seq, "src.000003", 5_000 + 200 * seq, f"0-1-{seq}", True, seq,
                          100, 1, 1, 0, frozenset({"db.t"}))


def positioned(clock: list[float], gtids: str | Exception | None) -> PrefetchEngine:
    eng = engine(clock)
    for t in eng._ahead:  # as _consume fills them
        t.ended = _ended(t.seq)
        eng._by_gtid[f"0-1-{t.seq}"] = t
    eng._domains.add("0")
    eng.monitor = GtidMonitor(gtids)  # type: ignore[assignment]
    eng._sample = Sample(0.0, 0.0, replica_status(relay_log_file="relay.000001", relay_log_pos=200,
                                                  relay_source_log_file="src.000003",
                                                  exec_source_log_pos=5_400))
    eng.state = "active"
    return eng


def test_a_position_poll_moves_the_last_status_to_the_end_of_the_transaction_applied() -> None:
    clock = [100.0]
    eng = positioned(clock, "0-1-12")
    got = asyncio.run(eng._position_poll())
    assert got is not None and got.status is not None and eng._sample is not None
    assert (got.status.relay_log_file, got.status.relay_log_pos) == ("relay.000002", 1200)
    assert (got.status.relay_source_log_file, got.status.exec_source_log_pos) == ("src.000003", 7_400)
    # The rest is the full status's: whether the SQL thread runs, the IO thread's position.
    assert got.status == replace(eng._sample.status, relay_log_file="relay.000002", relay_log_pos=1200,
                                 exec_source_log_pos=7_400)


@pytest.mark.parametrize(("gtids", "placed"), [
    ("0-1-99", False),                 # a transaction the cursor has not read (or has passed)
    ("0-1-12,1-1-4", True),            # domain 1 is not this relay log's: 0 places it
    ("0-2-12", False),                 # domain 0 from another server: not the one read
    (DatabaseError("lost", kind=Kind.LOST), False),
])
def test_a_position_poll_that_cannot_place_the_sql_thread_asks_for_a_full_status(
        gtids: str | Exception, placed: bool) -> None:
    clock = [100.0]
    eng = positioned(clock, gtids)
    got = asyncio.run(eng._position_poll())
    assert (got is not None) is placed
    assert eng._positions  # a lost session: the full status reconnects, positions go on after


def test_a_position_statement_refused_is_said_once_and_not_asked_again(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    eng = positioned(clock, DatabaseError("Unknown system variable 'gtid_slave_pos'", kind=Kind.SCHEMA))
    with caplog.at_level("INFO", logger="lagd.prefetch"):
        assert asyncio.run(eng._position_poll()) is None
    assert not eng._positions and not eng._positions_due(clock[0])
    assert [r.getMessage() for r in caplog.records if "applied GTIDs" in r.getMessage()] != []


def test_an_unchanged_position_keeps_the_last_status_and_a_mysql_is_polled_in_full() -> None:
    clock = [100.0]
    eng = positioned(clock, "0-1-2")
    first = asyncio.run(eng._position_poll())
    eng._sample = first
    again = asyncio.run(eng._position_poll())  # nothing committed since
    assert again is not None and again is not first and again.status == first.status  # a new observation
    eng.monitor = GtidMonitor(None)  # type: ignore[assignment]
    assert asyncio.run(eng._position_poll()) is None
    assert not eng._positions and not eng._positions_due(clock[0])


def _polled(eng: PrefetchEngine, offset: int, came_at: float | None) -> Sample:
    """A status at ``offset`` of relay.000001, as the poll loop leaves it (None: set
    without the poll loop, no arrival time)."""
    s = Sample(0.0, 0.0, replica_status(relay_log_file="relay.000001", relay_log_pos=offset))
    eng._sample = s
    if came_at is not None:
        eng._arrived = (s, came_at)
    return s


def _observe(eng: PrefetchEngine, s: Sample, now: float) -> tuple[RelayPosition, bool]:
    assert s.status is not None
    return eng._observe(s, s.status, now)


def test_a_poll_is_one_observation_however_many_steps_follow_it() -> None:
    # The loop steps after every read and wait: steps on the sample it has must not pop,
    # feed the rate, or restart the extrapolation from the step's time.
    clock = [100.0]
    eng = engine(clock)
    assert _observe(eng, _polled(eng, 100, 100.0), 100.0)[0].offset == 100
    second = _polled(eng, 300, 100.02)  # 2 transactions in 20 ms
    _observe(eng, second, 100.021)
    rate, seen = eng._trx_rate.value, eng._sql_seen_at
    assert (eng._applied_seq, seen) == (3, 100.02)
    for now in (100.025, 100.03, 100.035):  # the same sample, stepped on again
        assert _observe(eng, second, now) == (RelayPosition("relay.000001", 300), False)
    assert (eng._trx_rate.value, eng._sql_seen_at) == (rate, seen)
    clock[0] = 100.04  # 20 ms after the poll at 100 trx/s: past transaction 5, not 3
    assert eng._sql_seq_estimate() == pytest.approx(5.0)


def test_a_poll_taken_while_the_loop_was_busy_counts_from_when_it_came() -> None:
    clock = [100.0]
    eng = engine(clock)
    _observe(eng, _polled(eng, 200, 100.0), 100.015)  # the loop stepped 15 ms after it came
    assert eng._sql_seen_at == 100.0
    _observe(eng, _polled(eng, 300, None), 100.05)  # no arrival time: the step's
    assert eng._sql_seen_at == 100.05


@pytest.mark.parametrize(("since_full", "running", "state", "due"), [
    (0.05, True, "active", True),
    (control.FULL_STATUS_EVERY + 0.01, True, "active", False),  # a full status is due
    (0.05, False, "active", False),                      # stopped: only a full status says it runs again
    (0.05, True, "idle", False),                         # slow polls: each a full status
])
def test_a_position_poll_is_due_only_between_fresh_full_statuses_of_a_running_sql_thread(
        since_full: float, running: bool, state: str, due: bool) -> None:
    clock = [100.0]
    eng = positioned(clock, "0-1-2")
    assert eng._sample is not None and eng._sample.status is not None
    eng._sample = Sample(0.0, 0.0, replace(eng._sample.status, sql_running=running))
    eng.state = state
    eng._full_at = clock[0] - since_full
    assert eng._positions_due(clock[0]) is due


def test_the_events_the_engine_dispatches_by_type_have_no_subclasses() -> None:
    """_consume tells events apart by ``type(e) is``: an event class made a subclass of
    another would be passed by without a word."""
    for cls in (RowChange, TransactionStart, TransactionEnd, Statement, Ddl, Resynced, CorruptEvent):
        assert not cls.__subclasses__(), cls


@pytest.mark.parametrize(("pos", "popped", "applied_rows", "left"), [
    ((1, 50), 0, 0, (4, 40, 4000, 40)),      # inside the first transaction: nothing applied
    ((1, 100), 1, 10, (3, 30, 3000, 30)),    # the first one's end
    ((1, 250), 2, 20, (2, 20, 2000, 20)),    # past the second, short of the third
    ((2, 0), 4, 40, (0, 0, 0, 0)),           # a later file: all of them
])
def test_advance_sql_pops_what_is_applied_and_takes_it_out_of_the_lead(
    pos: tuple[int, int], popped: int, applied_rows: int, left: tuple[int, int, int, int],
) -> None:
    eng = engine([100.0], transactions=0)
    for seq in range(1, 5):  # 10 rows, 1,000 bytes, 10 pages each; ends at 100 * seq of file 1
        t = _Trx(seq, 0.0, end=(1, 100 * seq), rows=10, bytes=1000, probed=10)
        eng._ahead.append(t)
        eng._by_seq[seq] = t
    eng._seq = 4
    eng._lead_rows, eng._lead_bytes, eng._lead_pages = 40, 4000, 40
    assert eng._advance_sql(pos, 100.0) == applied_rows
    assert eng._popped == popped and eng._applied_seq == popped
    assert (len(eng._ahead), eng._lead_rows, eng._lead_bytes, eng._lead_pages) == left
    assert sorted(eng._by_seq) == list(range(popped + 1, 5))


@pytest.mark.parametrize(("ctl_off", "slots", "shown"), [
    (None, None, "probes speed the SQL thread up: judging them over 4 s"),
    ("nothing to warm: the data is in memory", None,
     "open, but probes are out: nothing to warm: the data is in memory"),
    (None, 0, "open, but probes are out: no connection slot free"),
])
def test_an_open_gate_names_what_keeps_the_probes_out(ctl_off: str | None, slots: int | None,
                                                      shown: str) -> None:
    """/status never shows the gate judging probes that something else keeps out."""
    eng, _mon, _pool = inside_engine([100.0])
    eng.gate_state = control.Gate(True, "probes speed the SQL thread up: judging them over 4 s", 0.5, True)
    if ctl_off is not None:
        eng.ctl = replace(eng.ctl, enabled=False, reason=ctl_off)
    eng.slots_cap, eng.slots_reason = slots, "no connection slot free"
    assert eng.gate_view() == (True, shown)
    eng.gate_state = control.Gate(False, "its stall is not reads", None, True)
    assert eng.gate_view() == (False, "its stall is not reads")  # shut: its own reason stands


@pytest.mark.parametrize(("proven", "backs_off"), [
    (False, True),   # on probation: 272 rows without a read is a replica in memory
    (True, False),   # probes have read from disk: 272 rows is too short a sample to stop them
])
def test_a_short_sample_without_reads_stops_probes_only_on_probation(proven: bool, backs_off: bool) -> None:
    clock = [100.0]
    eng = engine(clock)
    eng.gate_state = replace(eng.gate_state, open=True)
    eng.pool = SimpleNamespace(size=4, queued=0, busy=0, drop_queued=lambda: 0)  # type: ignore[assignment]
    readings = iter([5_000.0, 5_000.0])

    async def pool_reads() -> float:
        return next(readings)

    eng._pool_reads = pool_reads  # type: ignore[method-assign]
    eng.counters.rows_done = 64
    asyncio.run(eng._quick_check(100.0))  # the first reading: the baseline
    eng._proven = proven
    eng.counters.rows_done += 272
    asyncio.run(eng._quick_check(100.2))
    assert eng.ctl.enabled is not backs_off, eng.ctl.reason
    assert ("nothing to warm: 272 rows probed, 0 disk reads" in eng.ctl.reason) is backs_off
