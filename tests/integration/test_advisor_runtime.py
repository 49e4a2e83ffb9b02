"""The advisor runtime against the sandbox replica: refresh over a real PyMySQL
connection in a worker thread (as lagd.daemon.runtime's ``blocking`` runs it), and
a big transaction followed from the relay log until the SQL thread has
applied it, with positions and lag readings taken from the server."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import pymysql
import pymysql.cursors
import pytest

from lagd.advisor import RULES, ApplyRateModel
from lagd.advisor.runtime import AdvisorRuntime
from lagd.backlog import Backlog
from lagd.config import load_settings
from lagd.lag import Backlog as LagBacklog
from lagd.lag import LagInputs, LagReading, LagTracker, ReplicaState
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.replica import fetch_replica_status
from lagd.relaylog import (
    LogFiles,
    RelayLogReader,
    RelayPosition,
)
from lagd.sandbox.pair import Sandbox
from tests.integration.test_relaylog_sandbox import sql_position, wait_received

T = TypeVar("T")
ROWS = 500_000


@pytest.fixture
def conn(sandbox: Sandbox) -> Iterator[Any]:
    """lagd's own account on the replica, DictCursor, as Runtime._sync makes it."""
    c = pymysql.connect(**sandbox.replica().dsn.as_kwargs(), autocommit=True,
                        cursorclass=pymysql.cursors.DictCursor)
    try:
        yield c
    finally:
        c.close()


def blocking_on(conn: Any) -> Callable[[Callable[[Any], T]], Awaitable[T]]:
    async def blocking(fn: Callable[[Any], T]) -> T:
        return await asyncio.to_thread(fn, conn)
    return blocking


def advisor() -> AdvisorRuntime:
    return AdvisorRuntime(load_settings(None).advisor)  # the packaged defaults


def lag_of(seconds: float | None) -> LagReading:
    base = LagTracker().update(LagInputs(now=time.time(), monotonic=time.monotonic(), status=None))
    return replace(base, lag=seconds)


@pytest.mark.asyncio
async def test_refresh_runs_every_rule_on_the_replica(conn: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lagd.advisor")
    adv = advisor()
    blocking = blocking_on(conn)
    t0 = time.time()
    await adv.refresh(blocking, None)
    snap = adv.snapshot().to_json()
    assert snap["error"] is None and t0 <= snap["checked_at"] <= time.time()
    advice = {a["rule"]: a for a in snap["advice"]}
    assert set(advice) == {r.__name__ for r in RULES}
    fired = [a["fired"] for a in snap["advice"]]
    assert fired == sorted(fired, reverse=True)  # fired ones first
    # The sandbox replica applies with one thread: slave_parallel_threads=0.
    assert advice["parallel_apply"]["fired"] and advice["parallel_apply"]["since"] >= t0
    assert advice["durability_on_lagging_replica"]["reason"] == "lag unknown"
    assert "not applicable" in advice["rows_query_log_events"]["reason"]  # a source rule
    assert {"name": "25% of the redo capacity", "bytes": 4 * 1024 * 1024, "hard": False} in snap["limits"]
    logged = {r.rule: r for r in caplog.records if hasattr(r, "rule")}  # type: ignore[attr-defined]
    assert set(logged) == {a["rule"] for a in snap["advice"] if a["fired"]}
    assert logged["parallel_apply"].severity == advice["parallel_apply"]["severity"]  # type: ignore[attr-defined]
    print("\n" + "\n".join(r.getMessage() for r in caplog.records))

    # Again, lagging past the budget: counter deltas over the window and the
    # lag fact reach the rules. Only what changed is logged: parallel_apply
    # turns from info to warning on a lagging replica.
    caplog.clear()
    await adv.refresh(blocking, lag_of(adv.settings.lag_budget_seconds + 60))
    advice = {a["rule"]: a for a in adv.snapshot().to_json()["advice"]}
    assert "over the window" in advice["log_buffer_waits"]["reason"]
    assert "innodb_flush_log_at_trx_commit=2" in advice["durability_on_lagging_replica"]["reason"]
    again = [(r.rule, r.severity) for r in caplog.records if getattr(r, "fired", False)]  # type: ignore[attr-defined]
    assert again == [("parallel_apply", "warning")] and advice["parallel_apply"]["severity"] == "warning"

    caplog.clear()
    await adv.refresh(blocking, lag_of(0.0))
    assert [(r.rule, r.severity) for r in caplog.records if getattr(r, "fired", True) is False] == []
    back = [(r.rule, r.severity) for r in caplog.records if hasattr(r, "rule")]  # type: ignore[attr-defined]
    assert back == [("parallel_apply", "info")]  # back to info: logged as a change again


@pytest.mark.asyncio
async def test_a_failed_refresh_is_recorded_raised_and_cleared(sandbox: Sandbox) -> None:
    adv = advisor()
    c = pymysql.connect(**sandbox.replica().dsn.as_kwargs(), cursorclass=pymysql.cursors.DictCursor)
    await adv.refresh(blocking_on(c), None)
    checked = adv.snapshot().to_json()["checked_at"]
    c.close()
    with pytest.raises(DatabaseError) as info:
        await adv.refresh(blocking_on(c), None)
    assert info.value.kind is Kind.LOST  # the closed connection, in lagd's words
    snap = adv.snapshot().to_json()
    assert snap["error"] and snap["checked_at"] == checked and snap["advice"]  # the last advice stays
    c = pymysql.connect(**sandbox.replica().dsn.as_kwargs(), cursorclass=pymysql.cursors.DictCursor)
    try:
        await adv.refresh(blocking_on(c), None)
    finally:
        c.close()
    assert adv.snapshot().to_json()["error"] is None


class Tail:
    """lagd.daemon.runtime's tail task: the reader feeds the Backlog and the advisor."""

    def __init__(self, sb: Sandbox, adv: AdvisorRuntime, backlog: Backlog) -> None:
        self.reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb))
        self.adv, self.backlog = adv, backlog

    def read_all(self) -> None:
        while True:
            batch = self.reader.read(256 * 1024)
            self.backlog.feed(batch)
            self.adv.feed(batch, self.reader.position)
            if not batch and self.reader.at_tail:
                return


@pytest.mark.asyncio
async def test_a_big_transaction_from_the_relay_log_until_it_is_applied(
    sandbox: Sandbox, schema: str, conn: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lagd.advisor")
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, k INT NOT NULL)")
    sb.wait_caught_up(timeout=60)
    adv = advisor()
    adv.model = ApplyRateModel(min_seconds=0.1, min_rows=100)  # learn from a load of about a second
    backlog, tracker = Backlog(), LagTracker()
    sb.stop_sql_thread()
    try:
        tail = Tail(sb, adv, backlog)
        sb.source.query(f"INSERT INTO `{schema}`.t SELECT seq, seq % 7 FROM `{schema}`.seq_1_to_{ROWS}")
        wait_received(sb)
        # Read_Master_Log_Pos can run ahead of the relay-log bytes on disk (the
        # IO thread's write cache): read until the transaction's end is there.
        deadline = time.monotonic() + 30
        while (tail.read_all(), backlog.transactions)[1] < 1:
            assert time.monotonic() < deadline, "the transaction's end never reached the relay log"
            await asyncio.sleep(0.05)
        await adv.refresh(blocking_on(conn), None)
        (u,) = adv.snapshot().to_json()["upcoming"]
        # No Annotate_rows in this replica's relay log (it does not log what
        # it applies): classified by its shape.
        assert (u["kind"], u["rows"], u["tables"]) == ("bulk_insert", ROWS, [f"{schema}.t"])
        assert not u["in_progress"] and u["estimated_seconds"] is None
        split = u["split"]
        assert split["limits_known"] and split["bound"] == "25% of the redo capacity" and split["chunk_rows"]
        seen = [r for r in caplog.records if r.getMessage().startswith("big transaction coming")]
        assert len(seen) == 1 and seen[0].rows == ROWS  # type: ignore[attr-defined]

        # The daemon's lag loop, faster: the SQL thread's position, the
        # Backlog, a lag reading, the rates.
        def poll() -> LagReading:
            st = fetch_replica_status(conn)
            pos = RelayPosition(st.relay_log_file, st.relay_log_pos)
            backlog.applied_up_to(pos)
            adv.applied_up_to(pos, backlog)
            v = backlog.view()
            reading = tracker.update(LagInputs(
                now=time.time(), monotonic=time.monotonic(), status=st,
                backlog=LagBacklog(v.transactions, v.bytes, v.rows, v.oldest_commit_time),
                applied_transactions=backlog.applied_transactions, applied_rows=backlog.applied_rows))
            adv.observe_rates(reading, backlog)
            tail.read_all()
            return reading

        assert poll().state is ReplicaState.STOPPED
        t0 = time.monotonic()
        sb.start_sql_thread()
        deadline = time.monotonic() + 120
        while (reading := poll()).state is not ReplicaState.IDLE or adv.snapshot().to_json()["upcoming"]:
            assert time.monotonic() < deadline, reading.state_reason
            await asyncio.sleep(0.1)
        took = time.monotonic() - t0
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)

    snap = adv.snapshot().to_json()
    assert snap["upcoming"] == [] and snap["large_transactions_seen"]["bulk_insert"] == 1
    rate = snap["apply_rate"]
    assert rate is not None and rate["observed_rows"] >= ROWS * 0.9
    (applied,) = [r for r in caplog.records if r.getMessage().startswith("big transaction applied")]
    timed = applied.applied_seconds  # type: ignore[attr-defined]
    assert 0 < timed <= took + 0.5
    assert rate["tables"][f"{schema}.t"]["rows_per_second"] == pytest.approx(ROWS / timed, rel=0.02)
    print(f"\n{ROWS:,} rows applied in {took:.2f} s (from START SLAVE to idle); the advisor timed it "
          f"at {timed:.2f} s: {ROWS / timed:,.0f} rows/s for {schema}.t; overall "
          f"{rate['rows_per_second']:,.0f} rows/s")
