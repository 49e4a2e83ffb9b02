"""The apply-rate model: what it learns, when a table's own rate counts, and
how it estimates a coming transaction."""

from __future__ import annotations

import dataclasses

import pytest

from lagd.advisor.lookahead import TransactionSummary, TxKind
from lagd.advisor.model import ApplyRateModel
from lagd.relaylog import RelayPosition


def summary(**kw: object) -> TransactionSummary:
    base = TransactionSummary(
        start=RelayPosition("relay-bin.000001", 4),
        end=RelayPosition("relay-bin.000001", 4004),
        gtid="0-1-9",
        source_file="src-bin.000001",
        source_pos=4,
        commit_time=0.0,
        size_bytes=50_000_000,
        size_basis="counted",
        rows=1_000_000,
        row_events=6000,
        statements=1,
        tables=("shop.orders",),
        key_columns=("id",),
        statement=None,
        default_schema=None,
        source_exec_seconds=None,
        load_data_bytes=None,
        load_data_lines=None,
        kind=TxKind.BULK_INSERT,
        kind_reason="test",
        complete=True,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_rate_is_time_weighted_ratio_of_sums() -> None:
    m = ApplyRateModel(half_life_seconds=1e12)  # no decay: plain sums
    m.observe(10_000_000, 100_000, 4.0)
    m.observe(2_000_000, 20_000, 2.0)
    r = m.rate()
    assert r is not None
    assert r.rows_per_second == pytest.approx(120_000 / 6.0)
    assert r.bytes_per_second == pytest.approx(12_000_000 / 6.0)
    assert r.scope == "all tables"


def test_older_apply_fades_with_the_half_life() -> None:
    m = ApplyRateModel(half_life_seconds=10.0)
    m.observe(0, 10_000, 10.0)  # 1,000 rows/s
    m.observe(0, 40_000, 10.0)  # 4,000 rows/s; the first now weighs half
    r = m.rate()
    assert r is not None
    assert r.rows_per_second == pytest.approx((10_000 * 0.5 + 40_000) / (10 * 0.5 + 10))


@pytest.mark.parametrize(
    ("seconds", "rows", "scope"),
    [
        pytest.param(6.0, 5000, "table shop.orders", id="enough-data"),
        pytest.param(4.0, 5000, "all tables", id="too-little-time"),
        pytest.param(6.0, 500, "all tables", id="too-few-rows"),
    ],
)
def test_a_table_uses_its_own_rate_with_enough_data(seconds: float, rows: int, scope: str) -> None:
    m = ApplyRateModel()
    m.observe(1_000_000, 100_000, 10.0)
    m.observe(100_000, rows, seconds, table="shop.orders")
    r = m.rate("shop.orders")
    assert r is not None and r.scope == scope


def test_observe_table_feeds_only_that_table() -> None:
    m = ApplyRateModel()
    m.observe(1_000_000, 100_000, 10.0)
    m.observe_table("shop.orders", 600_000, 60_000, 6.0)
    m.observe_table("shop.items", 1_000, 1_000, 1.0)  # too little time for a rate of its own
    overall, own = m.rate(), m.rate("shop.orders")
    assert overall is not None and overall.rows_per_second == pytest.approx(10_000)  # untouched
    assert own is not None and own.scope == "table shop.orders"
    assert own.rows_per_second == pytest.approx(10_000)
    assert list(m.table_rates()) == ["shop.orders"]
    with pytest.raises(ValueError):
        m.observe_table("shop.orders", -1, 0, 1.0)


def test_no_rate_before_the_minimum_apply_time() -> None:
    m = ApplyRateModel()
    m.observe(1000, 100, 1.0)
    assert m.rate() is None
    m.observe(1000, 100, 0.0)  # no elapsed time: nothing learned
    assert m.rate() is None


def test_tables_are_bounded() -> None:
    m = ApplyRateModel(max_tables=2)
    m.observe(1, 10_000, 9.0, table="a.big")
    m.observe(1, 10_000, 1.0, table="a.small")
    m.observe(1, 10_000, 8.0, table="a.new")  # evicts a.small, the one with least apply time
    assert m.rate("a.small") is not None and m.rate("a.small").scope == "all tables"  # type: ignore[union-attr]
    assert m.rate("a.big").scope == "table a.big"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param((-1, 0, 1.0), "bytes", id="negative-bytes"),
        pytest.param((0, -1, 1.0), "rows", id="negative-rows"),
        pytest.param((0, 0, float("nan")), "nan", id="nan-seconds"),
    ],
)
def test_nonsense_observations_are_refused(args: tuple[int, int, float], error: str) -> None:
    with pytest.raises(ValueError, match="cannot observe"):
        ApplyRateModel().observe(*args)


@pytest.mark.parametrize(
    ("learn", "s", "seconds", "says"),
    [
        pytest.param(
            [(5_000_000, 100_000, 10.0, None)],
            summary(),
            100.0,
            "1,000,000 rows at 10,000 rows/s",
            id="rows-over-rows-per-second",
        ),
        pytest.param(
            [(5_000_000, 100_000, 10.0, "shop.orders"), (1, 1, 10.0, None)],
            summary(),
            100.0,
            "table shop.orders",
            id="table-rate",
        ),
        pytest.param(
            [(5_000_000, 0, 10.0, None)],
            summary(),
            100.0,
            "bytes at 500,000 bytes/s",
            id="bytes-when-no-row-rate",
        ),
        pytest.param(
            [(5_000_000, 100_000, 10.0, None)],
            summary(rows=0, load_data_lines=300_000, load_data_bytes=9_000_000, source_exec_seconds=20),
            30.0,
            "file lines",
            id="statement-load-by-lines",
        ),
        pytest.param(
            [],
            summary(rows=0, load_data_lines=300_000, load_data_bytes=9_000_000, source_exec_seconds=20),
            20.0,
            "the source ran this statement-based load in 20 s",
            id="no-rate-source-time",
        ),
        pytest.param([], summary(), None, "no apply rate learned yet", id="no-rate-row-based"),
    ],
)
def test_estimate_seconds(
    learn: list[tuple[int, int, float, str | None]], s: TransactionSummary, seconds: float | None, says: str
) -> None:
    m = ApplyRateModel(half_life_seconds=1e12)
    for b, r, t, table in learn:
        m.observe(b, r, t, table)
    got, why = m.estimate_seconds(s)
    assert got == (pytest.approx(seconds) if seconds is not None else None)
    assert says in why


def test_per_transaction_and_per_row_costs_are_told_apart_by_different_mixes() -> None:
    # 2 ms per transaction, 0.5 ms per row. Single-row transactions alone cost
    # 2.5 ms a row: a 10,000-row transaction estimated at that rate reads 25 s for 5 s.
    m = ApplyRateModel(min_seconds=1)
    for _ in range(20):
        m.observe(100_000, 400, 400 * 0.0025, transactions=400)  # 400 single-row transactions
    assert m.costs() is None  # every window alike: not told apart
    est, basis = m.estimate_seconds(summary(rows=10_000))
    assert est == pytest.approx(25.0) and "rows/s" in basis
    for _ in range(5):
        m.observe(100_000, 2_000, 40 * 0.002 + 2_000 * 0.0005, transactions=40)  # 50 rows each
    costs = m.costs()
    assert costs is not None and costs == (pytest.approx(0.002), pytest.approx(0.0005))
    est, basis = m.estimate_seconds(summary(rows=10_000))
    assert est == pytest.approx(0.002 + 10_000 * 0.0005) and "different rows per transaction" in basis
    assert "plus 2.0 ms for the transaction" in basis


@pytest.mark.parametrize("windows", [
    [(10, 10, 0.1)],  # one window: nothing to tell apart
    [(10, 10, 0.1), (10, 1_000, 0.05)],  # more rows in less time: a negative cost, not a fit
])
def test_costs_that_do_not_fit_are_not_used(windows: list[tuple[int, int, float]]) -> None:
    m = ApplyRateModel(min_seconds=0.01)
    for trx, rows, seconds in windows:
        m.observe(1_000, rows, seconds, transactions=trx)
    assert m.costs() is None
