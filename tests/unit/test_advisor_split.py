"""Split advice: the chunk formula, the bounds, the pause, the expected lag,
and the commands. The first test is docs/advisor.md's worked example."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lagd.advisor.lookahead import TransactionSummary, TxKind
from lagd.advisor.model import ApplyRateModel
from lagd.advisor.settings import AdvisorError, ServerSettings
from lagd.advisor.split import SplitLimits, _round_down, split_advice
from lagd.mysql.replica import ServerFlavor
from lagd.relaylog import RelayPosition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server_vars"


def summary(**kw: object) -> TransactionSummary:
    base = TransactionSummary(
        start=RelayPosition("relay-bin.000001", 4),
        end=RelayPosition("relay-bin.000002", 4004),
        gtid="0-1-9",
        source_file="src-bin.000001",
        source_pos=4,
        commit_time=0.0,
        size_bytes=500_000_000,
        size_basis="counted",
        rows=10_000_000,
        row_events=60_000,
        statements=1,
        tables=("shop.orders",),
        key_columns=("id",),
        statement="LOAD DATA LOCAL INFILE '/data/orders.csv' INTO TABLE orders",
        default_schema=None,
        source_exec_seconds=None,
        load_data_bytes=None,
        load_data_lines=None,
        kind=TxKind.LOAD_DATA,
        kind_reason="test",
        complete=True,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def model(rows_per_second: float = 40_000, bytes_per_row: float = 50) -> ApplyRateModel:
    m = ApplyRateModel(half_life_seconds=1e12)
    m.observe(int(rows_per_second * bytes_per_row * 10), int(rows_per_second * 10), 10.0)
    return m


REDO_100_MIB = SplitLimits(redo_capacity_bytes=100 * 1024 * 1024)


def test_worked_example() -> None:
    """10 M rows of 50 bytes, replica applies 40,000 rows/s, budget 30 s, a = 0.5,
    redo 100 MiB, source writes 100,000 rows/s."""
    a = split_advice(summary(), model(), REDO_100_MIB, 30.0, 0.5, source_rows_per_second=100_000)
    assert a.needed is True
    assert a.apply_seconds == pytest.approx(250.0)
    # a x L x r = 600,000 rows (30 MB), but 25 % of the redo is 26,214,400 bytes = 524,288 rows.
    assert a.bound == "25% of the redo capacity"
    assert a.chunk_rows == 520_000  # two significant digits, rounded down
    assert a.chunk_bytes == 26_000_000
    assert a.chunks == 20
    assert a.chunk_apply_seconds == pytest.approx(13.0)
    assert a.pause_seconds == pytest.approx(13.0 - 5.2)
    assert a.worst_lag_without_split == pytest.approx(250.0)
    assert a.worst_lag_with_split == pytest.approx(13.0)
    assert a.worst_lag_split_no_pause == pytest.approx(5.2 + 20 * 7.8)
    assert "pt-fifo-split --fifo \"$FIFO\" --lines 520000 '/data/orders.csv'" in a.commands[0]
    assert "sleep 7.8" in a.commands[0]
    assert 'bytesPerChunk: "26000000"' in a.commands[1] and 'maxRate: "2000000"' in a.commands[1]
    assert "sql_log_bin=0" in a.text and "Worst lag: 250 s without a split" in a.text


def test_the_lag_budget_sets_the_chunk_without_tighter_limits() -> None:
    a = split_advice(summary(), model(), SplitLimits(), 30.0, 0.5)
    assert (a.bound or "").startswith("lag budget")
    assert a.chunk_rows == 600_000 and a.chunk_apply_seconds == pytest.approx(15.0)
    # Source rate unknown: pause a whole chunk's apply time; without a pause the backlog is the whole load.
    assert a.pause_seconds == pytest.approx(15.0)
    assert a.worst_lag_split_no_pause == pytest.approx(250.0)


@pytest.mark.parametrize(
    ("limits", "bound"),
    [
        pytest.param(
            SplitLimits(source_max_binlog_cache_size=10_000_000),
            "max_binlog_cache_size on the source",
            id="source-binlog-cache",
        ),
        pytest.param(
            SplitLimits(replica_max_binlog_cache_size=10_000_000),
            "max_binlog_cache_size on the replica",
            id="replica-binlog-cache",
        ),
        pytest.param(
            SplitLimits(group_replication_transaction_size_limit=10_000_000),
            "group_replication_transaction_size_limit",
            id="group-replication",
        ),
    ],
)
def test_a_hard_limit_below_the_transaction_makes_a_split_necessary(limits: SplitLimits, bound: str) -> None:
    fast = model(rows_per_second=10_000_000)  # applies in 1 s: only the limit calls for a split
    a = split_advice(summary(), fast, limits, 30.0)
    assert a.needed is True and a.bound == bound
    assert a.chunk_rows == 200_000  # 10 MB / 50 bytes
    assert "exceeds " + bound in a.reason


def test_no_split_when_it_fits_the_budget() -> None:
    a = split_advice(summary(rows=100_000, size_bytes=5_000_000), model(), REDO_100_MIB, 30.0)
    assert a.needed is False and a.chunk_rows is None and a.commands == ()
    assert "within the lag budget" in a.reason and a.apply_seconds == pytest.approx(2.5)


def test_without_a_rate_only_limits_can_size_chunks() -> None:
    a = split_advice(summary(), ApplyRateModel(), REDO_100_MIB, 30.0)
    assert a.needed is None and a.apply_seconds is None
    assert a.chunk_rows == 520_000 and a.pause_seconds is None
    assert a.text.splitlines()[1].startswith("Split advice incomplete: no apply rate")
    nothing = split_advice(summary(), ApplyRateModel(), SplitLimits(), 30.0)
    assert nothing.chunk_rows is None and nothing.commands == ()


def test_a_statement_based_load_is_sized_by_the_source_run_time() -> None:
    s = summary(
        rows=0,
        load_data_lines=3_000_000,
        load_data_bytes=150_000_000,
        size_bytes=150_001_000,
        source_exec_seconds=100,
        statement="LOAD DATA INFILE 'x.tsv' INTO TABLE imp",
        default_schema="shop",
        tables=("shop.imp",),
    )
    a = split_advice(s, ApplyRateModel(), SplitLimits(), 30.0)
    assert a.apply_seconds == pytest.approx(100.0)
    assert a.chunk_rows == 450_000  # 0.5 x 30 s x 30,000 lines/s
    assert a.pause_seconds == pytest.approx(0.0)  # the replica re-runs at the source's own pace
    assert "--lines 450000 'x.tsv'" in a.commands[0] and "INTO TABLE \\`shop\\`.\\`imp\\`" in a.commands[0]
    assert 'bytesPerChunk: "22500000"' in a.commands[1]  # 50 file bytes per line


@pytest.mark.parametrize(
    ("kind", "expect"),
    [
        pytest.param(
            TxKind.INSERT_SELECT, "INSERT INTO shop.orders SELECT ... FROM <source table>", id="insert-select"
        ),
        pytest.param(
            TxKind.BULK_UPDATE,
            "UPDATE shop.orders SET ... WHERE <your condition> AND `id` >= @lo",
            id="bulk-update",
        ),
        pytest.param(TxKind.BULK_DELETE, "ORDER BY `id` LIMIT 600000", id="bulk-delete"),
        pytest.param(TxKind.BULK_INSERT, "Commit every 600,000 rows", id="bulk-insert"),
        pytest.param(TxKind.OTHER, "Commit every 600,000 rows", id="other"),
    ],
)
def test_commands_fit_the_kind(kind: TxKind, expect: str) -> None:
    a = split_advice(summary(kind=kind, statement=None), model(), SplitLimits(), 30.0)
    assert expect in a.commands[0]
    if kind is TxKind.BULK_DELETE:
        assert a.commands[1].startswith("pt-archiver --source D=shop,t=orders --purge")
    assert "sql_log_bin" not in a.text


@pytest.mark.parametrize(
    ("budget", "headroom", "fix"),
    [
        pytest.param(0.0, 0.5, "lag budget", id="zero-budget"),
        pytest.param(30.0, 1.5, "headroom", id="headroom-over-one"),
        pytest.param(30.0, 0.0, "headroom", id="zero-headroom"),
    ],
)
def test_bad_budget_or_headroom_is_a_user_error(budget: float, headroom: float, fix: str) -> None:
    with pytest.raises(AdvisorError) as e:
        split_advice(summary(), model(), SplitLimits(), budget, headroom)
    assert e.value.fix and fix in e.value.fix


@pytest.mark.parametrize(
    ("n", "want"),
    [
        pytest.param(7.9, 7, id="small"),
        pytest.param(524_288, 520_000, id="two-digits"),
        pytest.param(1_999_999, 1_900_000, id="millions"),
        pytest.param(0.2, 1, id="at-least-one"),
    ],
)
def test_round_down(n: float, want: int) -> None:
    assert _round_down(n) == want


def load(name: str, role: str) -> ServerSettings:
    doc = json.loads((FIXTURES / name).read_text())
    return ServerSettings.of(
        ServerFlavor.from_version_string(doc["version"]), role, doc["variables"], doc["status"]
    )


def test_limits_from_settings() -> None:
    src, rep = load("mysql-8.0-defaults.json", "source"), load("mysql-8.0-defaults.json", "replica")
    lim = SplitLimits.from_settings(src, rep)
    assert lim.source_max_binlog_cache_size == lim.replica_max_binlog_cache_size == 18446744073709547520
    assert lim.redo_capacity_bytes == 104_857_600 and lim.group_replication_transaction_size_limit is None
    maria = SplitLimits.from_settings(
        load("mariadb-10.11-source.json", "source"), load("mariadb-10.11-replica.json", "replica")
    )
    assert maria.replica_max_binlog_cache_size is None  # the sandbox replica writes no binlog
    assert maria.redo_capacity_bytes == 16 * 1024 * 1024


# Rendered from values: what may never show in advice text, whatever is unknown.
LEAKS = ("<pause>", "unknown without", "unknown split", "unknown rows", "about unknown", "None", "nan",
         "inf s", "{", "sleep  ", "unknown s ")
RATES = {
    "no-rate": ApplyRateModel(),
    "rate": model(),
    "slow-rate": model(rows_per_second=500),
}
LIMITS = {"no-limits": SplitLimits(), "redo": REDO_100_MIB}


@pytest.mark.parametrize("kind", list(TxKind), ids=[k.value for k in TxKind])
@pytest.mark.parametrize("rate", list(RATES))
@pytest.mark.parametrize("limits", list(LIMITS))
@pytest.mark.parametrize("statement_based", [False, True], ids=["row-based", "statement-based"])
def test_advice_text_has_no_placeholder_left(kind: TxKind, rate: str, limits: str,
                                             statement_based: bool) -> None:
    extra: dict[str, object] = {}
    if statement_based:
        extra = {"rows": 0, "load_data_lines": 3_000_000, "load_data_bytes": 150_000_000,
                 "source_exec_seconds": 100}
    s = summary(kind=kind, statement=None if kind is not TxKind.LOAD_DATA else summary().statement,
                **extra)
    a = split_advice(s, RATES[rate], LIMITS[limits], 30.0)
    rendered = "\n".join((a.text, a.reason, *a.commands))
    for leak in LEAKS:
        if leak == "{" and kind is TxKind.LOAD_DATA:
            continue  # MySQL Shell's util.importTable takes a JS object
        assert leak not in rendered, f"{leak!r} in:\n{rendered}"
    assert "Worst lag:" in a.text or a.needed is False
    if a.pause_seconds is None:
        assert "sleep" not in rendered.replace("sleep 0.1", "") or "lagd gives that pause" in rendered
    json.dumps(dataclasses.asdict(a), allow_nan=True)


def test_worst_lag_says_what_is_known() -> None:
    unknown = split_advice(summary(), ApplyRateModel(), REDO_100_MIB, 30.0)
    assert "Worst lag: not known until lagd has measured how fast this replica applies." in unknown.text
    known = split_advice(summary(), model(), REDO_100_MIB, 30.0, source_rows_per_second=100_000)
    assert "Worst lag: 250 s without a split; 13.0 s split with the pause; " in known.text
    assert "needs this replica's measured apply rate" not in known.text
