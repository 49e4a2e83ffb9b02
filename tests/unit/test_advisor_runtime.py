"""The advisor runtime fed the way lagd.daemon.runtime feeds it: synthetic relay-log
events into the look-ahead and the Backlog, SQL-thread positions and lag
readings per poll. ``refresh`` needs a real server: see
tests/integration/test_advisor_runtime.py."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest
from metrics_snapshots import full_snapshot
from prometheus_client.parser import text_string_to_metric_families

from lagd.advisor import ApplyRateModel, TxKind
from lagd.advisor import runtime as advisor_runtime
from lagd.advisor.runtime import AdvisorRuntime, inside_estimate
from lagd.backlog import Backlog
from lagd.config import AdvisorSettings, settings_from_dict
from lagd.daemon.metrics import render
from lagd.lag import BacklogReading, LagInputs, LagReading, LagTracker, ReplicaState
from lagd.mysql.progress import ApplierTrx
from lagd.relaylog import (
    Column,
    Event,
    Index,
    RelayPosition,
    Resynced,
    RowChange,
    RowKind,
    RowsQuery,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)

T0 = 1_700_000_000.0
RELAY = "relay-bin.000007"


def table(name: str) -> TableInfo:
    pk = Index("PRIMARY", (0,), unique=True, primary=True)
    cols = (Column("id", "LONG", False), Column("qty", "LONG", True))
    return TableInfo("shop", name, cols, pk, (pk,), (0,), "table_map")


ORDERS, ITEMS = table("orders"), table("items")


def settings(**over: Any) -> AdvisorSettings:
    base: dict[str, Any] = {"enabled": True, "lag_budget_seconds": 30.0, "big_transaction_bytes": "1MiB",
                            "big_transaction_rows": 1000, "headroom": 0.5}
    return settings_from_dict({"advisor": {**base, **over}}).advisor


class Replica:
    """Plays lagd.daemon.runtime's part: the tail task feeds the Backlog and the
    advisor one batch at a time; a poll moves the SQL thread."""

    def __init__(self, adv: AdvisorRuntime) -> None:
        self.adv = adv
        self.backlog = Backlog()
        self.offset = 4
        self.gno = 0
        self.t = T0

    def trx(
        self, rows: int, tbl: TableInfo = ORDERS, kind: RowKind = RowKind.INSERT, text: str | None = None,
        complete: bool = True,
    ) -> tuple[list[Event], RelayPosition, RelayPosition]:
        self.gno += 1
        gtid = f"0-1-{self.gno}"
        start = self.offset
        size = 100 + 25 * rows
        self.offset += size
        ev: list[Event] = [TransactionStart(RELAY, start, "src-bin.000001", start, gtid, T0 + self.gno,
                                            int(T0) + self.gno, 1)]
        if text is not None:
            ev.append(RowsQuery(text))
        ev += [RowChange(tbl, kind, None, (i, 1)) for i in range(rows)]
        if complete:
            ev.append(TransactionEnd(RELAY, self.offset, "src-bin.000001", self.offset, gtid, True, self.gno,
                                     size, rows, max(1, rows // 300), 1, frozenset({tbl.qualified})))
        return ev, RelayPosition(RELAY, start), RelayPosition(RELAY, self.offset)

    def feed(self, events: list[Any], at: RelayPosition | None = None) -> None:
        self.backlog.feed(events)
        self.adv.feed(events, at or RelayPosition(RELAY, self.offset))

    def poll(self, pos: RelayPosition, state: ReplicaState = ReplicaState.APPLYING, dt: float = 1.0,
             reason: str = "transactions received, not applied") -> LagReading:
        self.t += dt
        self.backlog.applied_up_to(pos)
        self.adv.applied_up_to(pos, self.backlog)
        reading = lag_reading(self.t, state, self.backlog.transactions, reason)
        self.adv.observe_rates(reading, self.backlog)
        return reading


def lag_reading(at: float, state: ReplicaState, backlog: int = 1, reason: str = "") -> LagReading:
    base = LagTracker().update(LagInputs(now=at, monotonic=at, status=None))
    return replace(base, state=state, state_reason=reason or state.value,
                   backlog=BacklogReading(backlog, backlog * 100, backlog, None))


def upcoming(adv: AdvisorRuntime) -> list[dict[str, Any]]:
    up = adv.snapshot().to_json()["upcoming"]
    assert isinstance(up, list)
    return up


# -- the look-ahead ------------------------------------------------------------


def test_big_transactions_are_listed_biggest_first_and_counted() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    small, _, _ = r.trx(3)
    bulk, _, _ = r.trx(1_500, ITEMS)
    load, _, _ = r.trx(4_000, text="LOAD DATA LOCAL INFILE '/srv/x.tsv' INTO TABLE orders")
    r.feed(small + bulk[:700])  # batches split anywhere, as the reader's are
    r.feed(bulk[700:] + load + r.trx(2)[0])

    snap = adv.snapshot().to_json()
    assert [(u["kind"], u["rows"], u["tables"]) for u in snap["upcoming"]] == [
        ("load_data", 4_000, ["shop.orders"]), ("bulk_insert", 1_500, ["shop.items"])]
    first = snap["upcoming"][0]
    assert first["bytes"] == 100 + 25 * 4_000 and first["statement"].startswith("LOAD DATA LOCAL")
    assert first["gtid"] == "0-1-3" and not first["in_progress"] and not first["applying"]
    assert first["estimated_seconds"] is None and "no apply rate learned yet" in first["estimate_basis"]
    assert first["split"] is not None and first["split"]["needed"] is None  # no rate, no limits known yet
    assert not first["split"]["limits_known"]
    assert snap["upcoming_total"] == 2
    zero = {k.value: 0 for k in TxKind}
    assert snap["large_transactions_seen"] == {**zero, "load_data": 1, "bulk_insert": 1}
    assert snap["lookahead"]["live"] and snap["lookahead"]["transactions"] == 4
    # Not read from the server yet: not known, rather than "nothing fires".
    assert (snap["advice"], snap["checked_at"], snap["error"], snap["apply_rate"]) == (None, None, None, None)
    json.dumps(snap, allow_nan=False)


def test_the_list_is_bounded() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    for n in range(advisor_runtime.LISTED + 5):
        r.feed(r.trx(1_000 + n)[0])
    snap = adv.snapshot().to_json()
    listed = advisor_runtime.LISTED
    assert len(snap["upcoming"]) == listed and snap["upcoming_total"] == listed + 5
    assert snap["upcoming"][0]["rows"] == 1_000 + advisor_runtime.LISTED + 4


def test_a_big_transaction_is_logged_as_it_streams_in_and_again_when_complete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lagd.advisor")
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    events, start, _ = r.trx(3_000, kind=RowKind.DELETE)
    r.feed(events[:2_000], at=RelayPosition(RELAY, start.offset + 50_000))  # the reader's position
    (u,) = upcoming(adv)
    assert u["in_progress"] and u["relay_end"] is None and u["rows"] == 1_999
    assert u["kind"] == "bulk_delete" and "so far" in u["kind_reason"]
    assert adv.snapshot().to_json()["large_transactions_seen"]["bulk_delete"] == 0  # counted once complete
    r.feed(events[2_000:])
    (u,) = upcoming(adv)
    assert not u["in_progress"] and u["rows"] == 3_000
    assert adv.snapshot().to_json()["large_transactions_seen"]["bulk_delete"] == 1
    big = [rec for rec in caplog.records if rec.getMessage().startswith("big transaction")]
    assert len(big) == 2 and "being received" in big[0].getMessage()
    assert (big[0].kind, big[0].bytes) == ("bulk_delete", 50_000)  # type: ignore[attr-defined]
    # Only the second line has the final numbers.
    assert "big transaction coming" in big[1].getMessage() and big[1].rows == 3_000  # type: ignore[attr-defined]


def test_a_new_big_transaction_is_logged_with_its_numbers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lagd.advisor")
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    r.feed(r.trx(2_000, text="UPDATE shop.orders SET qty = 0")[0])
    (rec,) = caplog.records
    assert rec.name == "lagd.advisor" and rec.levelno == logging.INFO  # no rate: not known to be over budget
    assert "big transaction coming: bulk_update" in rec.getMessage()
    got = {k: getattr(rec, k) for k in ("kind", "rows", "bytes", "estimated_seconds", "gtid", "in_progress")}
    assert got == {"kind": "bulk_update", "rows": 2_000, "bytes": 50_100, "estimated_seconds": None,
                   "gtid": "0-1-1", "in_progress": False}


def test_a_restarted_reader_does_not_count_again_and_resynced_clears() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    events, _, _ = r.trx(1_200)
    r.feed(events)
    adv.reset()  # what the runtime does when it starts a new reader at the SQL thread
    assert upcoming(adv) == []
    r.feed(events)  # read again from the SQL thread's position
    assert len(upcoming(adv)) == 1 and adv.snapshot().to_json()["large_transactions_seen"]["bulk_insert"] == 1
    r.feed([Resynced(RelayPosition(RELAY, 4), RelayPosition("relay-bin.000009", 4), "file purged")])
    assert upcoming(adv) == [] and adv.snapshot().to_json()["lookahead"]["resyncs"] == 1


def test_an_idle_reader_makes_the_list_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    adv = AdvisorRuntime(settings())
    assert adv.snapshot().to_json()["upcoming"] is None  # the reader has not started
    assert "not started" in adv.snapshot().to_json()["lookahead"]["reason"]
    r = Replica(adv)
    r.feed([])
    assert adv.snapshot().to_json()["upcoming"] == []  # known: nothing big is coming
    now = advisor_runtime.time.monotonic()
    monkeypatch.setattr(advisor_runtime.time, "monotonic",
                        lambda: now + advisor_runtime.LOOKAHEAD_STALE_SECONDS + 1)
    snap = adv.snapshot().to_json()
    assert snap["upcoming"] is None and not snap["lookahead"]["live"]


# -- apply rates ------------------------------------------------------------------


def test_rates_are_learned_from_busy_polls_and_give_estimates() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    ends = []
    for _ in range(40):
        ev, _, end = r.trx(10)  # 350 bytes, 10 rows
        r.feed(ev)
        ends.append(end)
    big, big_start, _ = r.trx(9_000)
    r.feed(big)
    r.poll(RelayPosition(RELAY, 4))  # busy from here on
    for i in range(4, 40, 4):  # 4 transactions (40 rows, 1,400 bytes) a second
        r.poll(ends[i - 1])
    rate = adv.snapshot().to_json()["apply_rate"]
    assert rate is not None and rate["scope"] == "all tables" and rate["tables"] == {}
    assert rate["bytes_per_second"] == pytest.approx(1_400)
    assert rate["observed_seconds"] == pytest.approx(9, rel=0.03)  # decayed with a 300 s half-life
    assert rate["rows_per_second"] is None  # 360 rows: fewer than the model's 1,000 to trust a rows rate
    (u,) = upcoming(adv)
    assert u["estimated_seconds"] == pytest.approx(u["bytes"] / 1_400)
    assert u["split"]["needed"] is True and u["split"]["chunk_bytes"] <= 0.5 * 30 * 1_400
    assert big_start == ends[-1]


def test_intervals_that_start_without_work_or_in_sql_delay_do_not_count() -> None:
    adv = AdvisorRuntime(settings())
    adv.model = ApplyRateModel(min_seconds=1e-6)  # any observed second gives a rate
    r = Replica(adv)
    ev, _, end = r.trx(10)
    r.feed(ev)
    r.poll(RelayPosition(RELAY, 4), ReplicaState.IDLE)
    r.poll(RelayPosition(RELAY, 4), ReplicaState.STOPPED, dt=100)
    r.poll(RelayPosition(RELAY, 4), reason="waiting out SQL_Delay=3600 s, 20 s remaining", dt=100)
    r.poll(end, ReplicaState.IDLE)
    assert adv.model.rate() is None


def test_a_long_gap_between_polls_is_not_trusted() -> None:
    adv = AdvisorRuntime(settings())
    adv.model = ApplyRateModel(min_seconds=1e-6)
    r = Replica(adv)
    ev, _, end = r.trx(10)
    r.feed(ev)
    r.poll(RelayPosition(RELAY, 4))
    r.poll(end, ReplicaState.IDLE, dt=advisor_runtime.MAX_POLL_GAP + 1)
    assert adv.model.rate() is None
    adv.observe_rates(None, r.backlog)  # no reading: the next interval starts afresh
    r.poll(end)
    assert adv.model.rate() is None


def test_a_big_transaction_is_timed_for_its_table(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lagd.advisor")
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    ev, start, end = r.trx(6_000, text="INSERT INTO shop.orders SELECT * FROM shop.staging")
    r.feed(ev)
    r.poll(start, ReplicaState.STOPPED)  # stopped right before it: not being applied
    (u,) = upcoming(adv)
    assert not u["applying"] and u["applying_since"] is None  # at its start, but the SQL thread is stopped
    t_stopped = r.t
    for _ in range(6):
        r.poll(start)
    (u,) = upcoming(adv)
    assert u["applying"] and u["applying_since"] == pytest.approx(t_stopped + 0.5)
    r.poll(end, ReplicaState.IDLE)
    assert upcoming(adv) == []
    # From midway between the stopped poll and the first applying one, to
    # midway between the last applying poll and the one past its end: 6 s.
    rates = adv.model.table_rates()
    assert list(rates) == ["shop.orders"]
    assert rates["shop.orders"].rows_per_second == pytest.approx(1_000)
    assert adv.snapshot().apply_rate is not None
    assert adv.snapshot().apply_rate.tables["shop.orders"].rows_per_second == pytest.approx(1_000)
    done = [rec for rec in caplog.records if rec.getMessage().startswith("big transaction applied")]
    assert len(done) == 1 and done[0].applied_seconds == pytest.approx(6)  # type: ignore[attr-defined]

    # The next load onto that table is estimated at that table's rate.
    ev2, _, _ = r.trx(12_000, text="INSERT INTO shop.orders SELECT * FROM shop.staging")
    r.feed(ev2)
    (u,) = upcoming(adv)
    assert u["estimated_seconds"] == pytest.approx(12) and "table shop.orders" in u["estimate_basis"]


def test_a_stop_inside_a_big_transaction_restarts_its_timing() -> None:
    adv = AdvisorRuntime(settings())
    adv.model = ApplyRateModel(min_seconds=1)
    r = Replica(adv)
    ev, start, end = r.trx(6_000)
    r.feed(ev)
    r.poll(RelayPosition(RELAY, 4))
    r.poll(start)
    r.poll(start, ReplicaState.STOPPED, dt=500)  # STOP SLAVE rolls it back
    r.poll(start, ReplicaState.STOPPED)
    for _ in range(3):
        r.poll(start)
    r.poll(end, ReplicaState.IDLE)
    # Timed from the restart only: 3 s, not the 500 s it was stopped.
    assert adv.model.table_rates()["shop.orders"].seconds == pytest.approx(3, rel=0.01)


def test_the_stall_estimate_shrinks_as_it_applies_and_the_rate_holds() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    ends = []
    for _ in range(40):
        ev, _, end = r.trx(10)  # 350 bytes, 10 rows
        r.feed(ev)
        ends.append(end)
    big, start, end = r.trx(2_000)  # 50,100 bytes: about 36 s at 1,400 bytes/s
    r.feed(big)
    r.poll(RelayPosition(RELAY, 4))
    for i in range(4, 40, 4):  # 1,400 bytes a second
        r.poll(ends[i - 1])
    (u,) = upcoming(adv)
    estimate = u["estimated_seconds"]
    assert estimate == pytest.approx(50_100 / 1_400) and u["remaining_seconds"] == estimate
    assert not u["applying"]
    seen = []
    for _ in range(50):  # inside it: no rows for 50 s
        r.poll(start)
        (u,) = upcoming(adv)
        seen.append((u["estimated_seconds"], u["remaining_seconds"]))
    # The seconds without rows do not drag the rate down: the estimate holds...
    assert all(est == pytest.approx(estimate) for est, _ in seen)
    # ...and what remains shrinks with every poll, then is unknown once overrun.
    remaining = [rem for _, rem in seen]
    known = [x for x in remaining if x is not None]
    assert known == sorted(known, reverse=True) and known[0] == pytest.approx(estimate - 0.5)
    assert known[-1] < 1.0 and remaining[-1] is None
    r.poll(end, ReplicaState.IDLE)
    # Counted when it ended: its bytes over its seconds, into the overall rate too.
    rate = adv.model.rate()
    assert rate is not None and rate.bytes_per_second == pytest.approx(
        (1_400 * 9 + 50_100) / (9 + 50), rel=0.1)


def test_the_stall_metric_is_absent_when_unknown() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    r.feed(r.trx(2_000)[0])  # no rate learned: estimate unknown
    text = render(lambda: full_snapshot(advisor=adv.snapshot())).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "lagd_upcoming_transactions" in names
    assert "lagd_upcoming_transaction_stall_seconds" not in names


# -- enabled / disabled ------------------------------------------------------------


def test_disabled_does_nothing_and_says_so() -> None:
    adv = AdvisorRuntime(settings(enabled=False))
    r = Replica(adv)
    r.feed(r.trx(5_000)[0])
    r.poll(RelayPosition(RELAY, 4))
    snap = adv.snapshot().to_json()
    assert snap["enabled"] is False and "advisor.enabled" in snap["reason"]
    assert all(snap[k] is None for k in ("upcoming", "large_transactions_seen", "advice", "apply_rate"))
    adv.configure(settings(big_transaction_rows=100))
    r.feed(r.trx(200)[0])
    assert [u["rows"] for u in upcoming(adv)] == [200] and adv.lookahead.config.big_rows == 100
    adv.configure(settings(enabled=False))
    assert adv.snapshot().to_json()["upcoming"] is None and adv.lookahead.coming() == ()


@pytest.mark.asyncio
async def test_refresh_does_nothing_when_disabled() -> None:
    async def blocking(fn: Any) -> Any:
        raise AssertionError("no server access while disabled")

    adv = AdvisorRuntime(settings(enabled=False))
    await adv.refresh(blocking, None)
    assert adv.snapshot().to_json()["checked_at"] is None


def test_a_config_reload_changes_the_thresholds_for_what_comes_next() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    r.feed(r.trx(1_500)[0])
    adv.configure(settings(big_transaction_rows=2_000, lag_budget_seconds=5.0))
    r.feed(r.trx(1_500)[0])
    snap = adv.snapshot().to_json()
    assert [u["rows"] for u in snap["upcoming"]] == [1_500] and snap["lag_budget_seconds"] == 5.0


# -- the snapshot as its readers read it ------------------------------------------


def test_the_snapshot_feeds_the_metrics() -> None:
    adv = AdvisorRuntime(settings())
    adv.model = ApplyRateModel(min_seconds=1)
    r = Replica(adv)
    r.feed(r.trx(10)[0])
    r.poll(RelayPosition(RELAY, 4))
    r.poll(RelayPosition(RELAY, r.offset), ReplicaState.IDLE)
    r.feed(r.trx(2_000, text="LOAD DATA INFILE 'f' INTO TABLE orders")[0] + r.trx(1_000, ITEMS)[0])
    text = render(lambda: full_snapshot(advisor=adv.snapshot())).decode()
    got = {(s.name, s.labels.get("kind")): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    assert got[("lagd_upcoming_transactions", None)] == 2
    assert got[("lagd_upcoming_transaction_rows", None)] == 2_000
    assert got[("lagd_upcoming_transaction_stall_seconds", None)] > 0
    assert got[("lagd_large_transactions_seen_total", "load_data")] == 1
    assert got[("lagd_large_transactions_seen_total", "bulk_insert")] == 1
    json.dumps(adv.snapshot().to_json(), allow_nan=False)


def test_rows_counted_inside_a_big_transaction_refine_and_shrink_its_stall() -> None:
    """InnoDB's count of the rows the SQL thread changed inside the big
    transaction (lagd.mysql.progress): once counted over a second, the stall
    is the rows left at the rate inside it, it shrinks as they are applied,
    and the rows count in the applied total before the commit (never going back)."""
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    ends = []
    for _ in range(40):
        ev, _, end = r.trx(10)
        r.feed(ev)
        ends.append(end)
    big, start, end = r.trx(2_000)
    r.feed(big)
    r.poll(RelayPosition(RELAY, 4))
    for i in range(4, 40, 4):
        r.poll(ends[i - 1])
    before = upcoming(adv)[0]["estimated_seconds"]
    assert not adv.wants_progress(sql_running=True)  # not at it yet: never asked
    r.poll(ends[-1])
    applied = r.backlog.applied_rows
    counted = []
    for k in range(1, 6):  # 200 rows a second inside it
        assert adv.wants_progress(sql_running=True)  # the SQL thread is at it: asked every poll
        r.t += 1.0
        r.backlog.applied_up_to(start)
        adv.applied_up_to(start, r.backlog)
        adv.progress(ApplierTrx("4242", 200 * k, 7), r.t)
        adv.observe_rates(lag_reading(r.t, ReplicaState.APPLYING, 1), r.backlog)
        (u,) = upcoming(adv)
        counted.append((u["estimated_seconds"], u["remaining_seconds"], adv.current_stall(r.t)))
        assert r.backlog.applied_rows + adv.rows_in_progress() == applied + 200 * k
    # The first count binds the transaction; a second later its own rate is known.
    est, left, (inside, ahead) = counted[-1]
    assert inside and ahead == pytest.approx(left)
    assert left == pytest.approx((2_000 - 1_000) / 200)
    assert est != pytest.approx(before) and "inside this transaction" in upcoming(adv)[0]["estimate_basis"]
    lefts = [x[1] for x in counted[1:]]
    assert lefts == sorted(lefts, reverse=True)
    # The next transaction's count (the big one committed between the two questions) is not its own.
    adv.progress(ApplierTrx("4243", 1, 7), r.t)
    assert adv.rows_in_progress() == 1_000
    r.poll(end, ReplicaState.IDLE)
    assert adv.rows_in_progress() == 0 and r.backlog.applied_rows == applied + 2_000


def test_a_count_that_cannot_be_had_is_unknown_and_not_asked_again_at_once() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    big, start, _end = r.trx(2_000)
    r.feed(big)
    r.poll(start)
    assert adv.wants_progress(sql_running=True)
    adv.progress(None, r.t, error="Access denied; you need the PROCESS privilege (error 1227)")
    assert not adv.wants_progress(sql_running=True)
    assert adv.progress_note is not None and "PROCESS" in adv.progress_note
    r.poll(start)
    assert adv.rows_in_progress() == 0  # not counted, not 0 rows applied: the counter just does not move


def test_rows_counted_in_a_transaction_rolled_back_by_a_stop_stay_counted() -> None:
    adv = AdvisorRuntime(settings())
    r = Replica(adv)
    big, start, _end = r.trx(2_000)
    r.feed(big)
    r.poll(RelayPosition(RELAY, 4))
    r.poll(start)
    adv.progress(ApplierTrx("9", 500, 7), r.t)
    r.poll(start)
    assert adv.rows_in_progress() == 500
    r.poll(start, ReplicaState.STOPPED)  # rolled back: the work was done, the total does not go back
    assert adv.rows_in_progress() == 500


@pytest.mark.parametrize(("total", "done", "rate", "applied_for", "want"), [
    (2_000, 1_000, 200.0, 5.0, (10.0, 5.0)),
    (2_000, 2_500, 200.0, 9.0, (9.0, 0.0)),  # more rows than the log's (triggers): nearly done
    (2_000, 100, None, 1.0, None),  # not counted over a second yet
    (0, 0, 100.0, 1.0, None),
])
def test_inside_estimate(total: int, done: int, rate: float | None, applied_for: float,
                         want: tuple[float, float] | None) -> None:
    got = inside_estimate(total, done, rate, applied_for)
    assert got == (None if want is None else pytest.approx(want))
