"""lagd.daemon.metrics: hand-built snapshots in, the text exposition parsed back out."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from metrics_snapshots import (
    CHANNEL,
    NOW,
    empty_snapshot,
    full_advisor,
    full_snapshot,
    stopped_sql_snapshot,
)
from prometheus_client.parser import text_string_to_metric_families

from lagd.daemon import metrics
from lagd.daemon.metrics import PREFETCH_STATES, SnapshotCollector, render
from lagd.daemon.state import Snapshot
from lagd.lag import ReplicaState

ROOT = Path(__file__).resolve().parents[2]
ABSENT = object()

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(snapshot: Snapshot) -> Samples:
    text = render(lambda: snapshot).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def families(snapshot: Snapshot) -> dict[str, str]:
    """Family name -> type, as a scraper sees them."""
    text = render(lambda: snapshot).decode()
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


LAG = "lagd_replication_lag_seconds"
LAST = "lagd_replication_lag_last_success_timestamp_seconds"
STALE = "lagd_replication_lag_stale"

CH = {"channel": CHANNEL}
DEFAULT = {"channel": ""}

# everything present
FULL: list[tuple[str, dict[str, str], Any]] = [
    (LAG, {**CH, "method": "heartbeat"}, 42.5),
    (LAG, {**CH, "method": "event_time"}, 41.9),
    (LAG, {**CH, "method": "sbm"}, 42.0),
    (STALE, {**CH, "method": "sbm"}, 0.0),
    ("lagd_replication_lag_primary_seconds", CH, 42.5),
    ("lagd_replication_lag_primary_method", {**CH, "method": "heartbeat"}, 1.0),
    ("lagd_replication_lag_primary_method", {**CH, "method": "sbm"}, 0.0),
    ("lagd_replica_state", {**CH, "state": "applying"}, 1.0),
    ("lagd_replica_io_running", CH, 1.0),
    ("lagd_replica_sql_running", CH, 1.0),
    ("lagd_replica_last_sql_errno", CH, 0.0),
    ("lagd_backlog_transactions", CH, 12.0),
    ("lagd_backlog_bytes", CH, 65_536.0),
    ("lagd_backlog_rows", CH, 3_000.0),
    ("lagd_backlog_oldest_age_seconds", CH, 41.9),
    ("lagd_apply_speed_ratio", CH, 1.5),
    ("lagd_apply_rows_per_second", CH, 7_500.0),
    ("lagd_apply_transactions_per_second", CH, 300.0),
    ("lagd_catchup_eta_seconds", CH, 85.0),
    ("lagd_replication_lag_average_seconds", {**CH, "window": "1m"}, 40.0),
    ("lagd_replication_lag_average_seconds", {**CH, "window": "15m"}, 10.0),
    ("lagd_clock_offset_seconds", CH, 0.004),
    ("lagd_clock_skew", CH, 0.0),
    ("lagd_replication_lag_observed_seconds_bucket", {**CH, "le": "0.1"}, 1.0),
    ("lagd_replication_lag_observed_seconds_bucket", {**CH, "le": "60.0"}, 3.0),
    ("lagd_replication_lag_observed_seconds_bucket", {**CH, "le": "+Inf"}, 3.0),
    ("lagd_replication_lag_observed_seconds_count", CH, 3.0),
    ("lagd_replication_lag_observed_seconds_sum", CH, 45.55),
    ("lagd_up", {"subsystem": "heartbeat"}, 1.0),
    ("lagd_subsystem_last_success_timestamp_seconds", {"subsystem": "advisor"}, NOW - 20),
    ("lagd_subsystem_duration_seconds", {"subsystem": "replica_status"}, 0.003),
    ("lagd_build_info", {"version": "1.2.3"}, 1.0),
    ("lagd_config_reload_error", {}, 0.0),
    ("lagd_prefetch_enabled", {}, 1.0),
    ("lagd_prefetch_state", {"state": "active"}, 1.0),
    ("lagd_prefetch_events_read_total", {}, 10_000.0),
    ("lagd_prefetch_row_changes_read_total", {}, 8_000.0),
    ("lagd_prefetch_transactions_read_total", {}, 400.0),
    ("lagd_prefetch_probes_total", {"outcome": "ok"}, 580.0),
    ("lagd_prefetch_probes_total", {"outcome": "timeout"}, 4.0),
    ("lagd_prefetch_probes_total", {"outcome": "error"}, 6.0),
    ("lagd_prefetch_probes_total", {"outcome": "refused"}, 0.0),
    ("lagd_prefetch_probes_total", {"outcome": "dropped"}, 10.0),
    ("lagd_prefetch_rows_probed_total", {}, 7_900.0),
    ("lagd_prefetch_rows_found_total", {}, 7_700.0),
    ("lagd_prefetch_probes_in_time_total", {}, 550.0),
    ("lagd_prefetch_probes_late_total", {}, 40.0),
    ("lagd_prefetch_skipped_total", {"reason": "overtaken"}, 3.0),
    ("lagd_prefetch_lead_transactions", {}, 30.0),
    ("lagd_prefetch_lead_seconds", {}, 2.5),
    ("lagd_prefetch_lead_pages", {}, 850.0),
    ("lagd_prefetch_target_lead_transactions", {}, 40.0),
    ("lagd_prefetch_connections", {}, 8.0),
    ("lagd_prefetch_connections_open", {}, 6.0),
    ("lagd_prefetch_sessions_opened_total", {}, 7.0),
    ("lagd_prefetch_benefit_ratio", {}, 1.8),
    ("lagd_prefetch_probe_duration_seconds_count", {}, 590.0),
    ("lagd_prefetch_probe_duration_seconds_sum", {}, 0.002 * 590),
    ("lagd_upcoming_transaction_bytes", CH, 50_000_000.0),
    ("lagd_upcoming_transaction_rows", CH, 5_000_000.0),
    ("lagd_upcoming_transaction_stall_seconds", CH, 120.0),
    ("lagd_large_transactions_seen_total", {**CH, "kind": "load_data"}, 3.0),
    ("lagd_large_transactions_seen_total", {**CH, "kind": "insert_select"}, 0.0),
    ("lagd_advice_active", {"rule": "parallel_apply", "severity": "warning"}, 1.0),
    ("lagd_sql_thread_seconds_total", {**CH, "state": "disk_read"}, 71.0),
    ("lagd_sql_thread_seconds_total", {**CH, "state": "on_cpu"}, 20.0),
    ("lagd_sql_thread_share", {**CH, "state": "disk_read"}, 0.71),
    ("lagd_sql_thread_share", {**CH, "state": "on_cpu"}, 0.2),
    ("lagd_machine_spare_cores", {}, 1.2),
    ("lagd_prefetch_gate_open", {}, 1.0),
    ("lagd_innodb_history_length", {}, 4200.0),
    ("lagd_advice_active", {"rule": "binlog_compression", "severity": "info"}, 0.0),
]
# SQL thread stopped: NULL SBM leaves no sample, but its history stays
STOPPED: list[tuple[str, dict[str, str], Any]] = [
    (LAG, {**CH, "method": "sbm"}, ABSENT),
    (LAST, {**CH, "method": "sbm"}, NOW - 90),
    (STALE, {**CH, "method": "sbm"}, 1.0),
    (LAG, {**CH, "method": "event_time"}, 94.0),
    ("lagd_replica_state", {**CH, "state": "stopped"}, 1.0),
    ("lagd_replica_state", {**CH, "state": "applying"}, 0.0),
    ("lagd_replica_sql_running", CH, 0.0),
    ("lagd_catchup_eta_seconds", CH, math.inf),
    ("lagd_apply_speed_ratio", CH, 0.0),
    ("lagd_prefetch_benefit_ratio", {}, ABSENT),
    ("lagd_prefetch_state", {"state": "paused"}, 1.0),
    ("lagd_sql_thread_seconds_total", {**CH, "state": "disk_read"}, 71.0),  # the counter stays
    ("lagd_sql_thread_share", {**CH, "state": "disk_read"}, ABSENT),  # nothing measured now
    ("lagd_prefetch_gate_open", {}, ABSENT),
]
# just started: nothing known, nothing made up
EMPTY: list[tuple[str, dict[str, str], Any]] = [
    ("lagd_replica_state", {**DEFAULT, "state": "unknown"}, 1.0),
    ("lagd_replication_lag_primary_seconds", DEFAULT, ABSENT),
    (LAG, {**DEFAULT, "method": "event_time"}, ABSENT),
    (STALE, {**DEFAULT, "method": "event_time"}, ABSENT),
    ("lagd_replica_sql_running", DEFAULT, ABSENT),
    ("lagd_catchup_eta_seconds", DEFAULT, ABSENT),
    ("lagd_up", {"subsystem": "replica_status"}, 0.0),
    ("lagd_subsystem_last_success_timestamp_seconds", {"subsystem": "replica_status"}, ABSENT),
    ("lagd_prefetch_enabled", {}, 0.0),
    ("lagd_prefetch_state", {"state": "off"}, 1.0),
    ("lagd_prefetch_lead_transactions", {}, ABSENT),
    ("lagd_upcoming_transaction_bytes", DEFAULT, ABSENT),
    ("lagd_build_info", {"version": "1.2.3"}, 1.0),
    # no PROCESS grant: never measured is absent, not 0; the spare cores are known
    ("lagd_sql_thread_seconds_total", {**DEFAULT, "state": "disk_read"}, ABSENT),
    ("lagd_sql_thread_share", {**DEFAULT, "state": "disk_read"}, ABSENT),
    ("lagd_machine_spare_cores", {}, 1.5),
    ("lagd_prefetch_gate_open", {}, ABSENT),
    ("lagd_innodb_history_length", {}, ABSENT),  # not readable without PROCESS: absent, not 0
]
CASES: list[tuple[str, Callable[[], Snapshot], str, dict[str, str], Any]] = [
    *(("full", full_snapshot, *c) for c in FULL),
    *(("stopped", stopped_sql_snapshot, *c) for c in STOPPED),
    *(("empty", empty_snapshot, *c) for c in EMPTY),
]


@pytest.mark.parametrize(("case", "snapshot_fn", "name", "labels", "want"), CASES,
                         ids=[f"{c[0]}-{c[2]}-{'-'.join(c[3].values())}" for c in CASES])
def test_sample(case: str, snapshot_fn: Callable[[], Snapshot], name: str, labels: dict[str, str],
                want: Any) -> None:
    got = scrape(snapshot_fn()).get(key(name, **labels), ABSENT)
    if want is ABSENT:
        assert got is ABSENT, f"{name}{labels} must be absent, got {got}"
    else:
        assert got is not ABSENT, f"{name}{labels} missing"
        assert got == pytest.approx(want)


@pytest.mark.parametrize("snapshot_fn", [full_snapshot, stopped_sql_snapshot, empty_snapshot])
def test_every_state_is_present_and_exactly_one_is_set(snapshot_fn: Callable[[], Snapshot]) -> None:
    s = snapshot_fn()
    got = scrape(s)
    replica = {dict(k[1])["state"]: v for k, v in got.items() if k[0] == "lagd_replica_state"}
    prefetch = {dict(k[1])["state"]: v for k, v in got.items() if k[0] == "lagd_prefetch_state"}
    methods = [v for k, v in got.items() if k[0] == "lagd_replication_lag_primary_method"]
    assert set(replica) == {st.value for st in ReplicaState}
    assert set(prefetch) == set(PREFETCH_STATES)
    assert sum(replica.values()) == 1 and sum(prefetch.values()) == 1
    assert sum(methods) == (1 if s.lag is not None and s.lag.lag is not None else 0)


def test_stale_and_last_success_stay_for_every_method_while_lag_is_unknown() -> None:
    s = stopped_sql_snapshot()
    assert s.lag is not None
    gone = replace(s.lag, heartbeat=replace(s.lag.heartbeat, seconds=None), event_time=replace(
        s.lag.event_time, seconds=None), lag=None, lag_method=None)
    got = scrape(replace(s, lag=gone))
    for method in ("heartbeat", "event_time", "sbm"):
        assert key(LAG, channel=CHANNEL, method=method) not in got
        assert key(STALE, channel=CHANNEL, method=method) in got
        assert key(LAST, channel=CHANNEL, method=method) in got
    assert key("lagd_replication_lag_primary_seconds", channel=CHANNEL) not in got
    assert got[key("lagd_replication_lag_primary_method", channel=CHANNEL, method="heartbeat")] == 0


@pytest.mark.parametrize(
    ("advisor", "name", "want"),
    [
        ({"upcoming": []}, "lagd_upcoming_transaction_bytes", 0.0),  # known: nothing big is coming
        ({"upcoming": []}, "lagd_upcoming_transactions", 0.0),
        ({"upcoming": []}, "lagd_upcoming_transaction_stall_seconds", 0.0),  # nothing coming
        # An unknown estimate is absent, not 0 (an alert on > 300 must not be fooled).
        ({"upcoming": [{"bytes": 5}]}, "lagd_upcoming_transaction_stall_seconds", ABSENT),
        ({"upcoming": [{"estimated_seconds": 900.0}, {"estimated_seconds": None}]},
         "lagd_upcoming_transaction_stall_seconds", ABSENT),
        # Being applied: what remains of it, not the whole estimate.
        ({"upcoming": [{"estimated_seconds": 900.0, "remaining_seconds": 120.0},
                       {"estimated_seconds": 60.0}]}, "lagd_upcoming_transaction_stall_seconds", 120.0),
        ({"advice": []}, "lagd_upcoming_transaction_bytes", ABSENT),  # not reported: not known
        ({}, "lagd_large_transactions_seen_total", ABSENT),
        (full_advisor(), "lagd_upcoming_transactions", 2.0),
    ],
)
def test_advisor_shapes(advisor: dict[str, Any], name: str, want: Any) -> None:
    got = {k[0]: v for k, v in scrape(full_snapshot(advisor=advisor)).items() if k[0] == name}
    assert got.get(name, ABSENT) == want


def test_one_series_per_advice_rule_fired_wins() -> None:
    advice = [{"rule": "r", "fired": False, "severity": "critical"},
              {"rule": "r", "fired": True, "severity": "warning"},
              {"rule": "q", "fired": False, "severity": "info"},
              {"rule": "q", "fired": False, "severity": "critical"}]
    got = {dict(k[1])["rule"]: (dict(k[1])["severity"], v)
           for k, v in scrape(full_snapshot(advisor={"advice": advice})).items()
           if k[0] == "lagd_advice_active"}
    assert got == {"r": ("warning", 1.0), "q": ("critical", 0.0)}


def test_config_reload_error() -> None:
    got = scrape(full_snapshot(config_error="prefetch.connections: 99 is above 64"))
    assert got[key("lagd_config_reload_error")] == 1.0


def test_one_snapshot_call_per_scrape_and_none_on_register() -> None:
    calls: list[int] = []

    def snapshot_fn() -> Snapshot:
        calls.append(1)
        return full_snapshot()

    collector = SnapshotCollector(snapshot_fn)
    assert collector.describe() == []
    assert calls == []
    render(snapshot_fn)
    assert len(calls) == 1


def test_a_failing_snapshot_is_reported_not_raised() -> None:
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    got = scrape_fn(broken)
    assert got == {key("lagd_scrape_collector_success", collector="snapshot"): 0.0}


def test_a_failing_concern_drops_only_its_own_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_s: Snapshot) -> list[Any]:
        raise ValueError("bad advisor data")

    concerns = tuple((n, broken if n == "advisor" else f) for n, f in metrics.CONCERNS)
    monkeypatch.setattr(metrics, "CONCERNS", concerns)
    got = scrape(full_snapshot())
    assert got[key("lagd_scrape_collector_success", collector="advisor")] == 0.0
    assert got[key("lagd_scrape_collector_success", collector="lag")] == 1.0
    assert key("lagd_replication_lag_primary_seconds", channel=CHANNEL) in got
    assert not any(k[0].startswith("lagd_upcoming_") for k in got)


def scrape_fn(fn: Callable[[], Snapshot]) -> Samples:
    text = render(fn).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_types() -> None:
    types = families(full_snapshot())
    assert types["lagd_replication_lag_observed_seconds"] == "histogram"
    assert types["lagd_prefetch_probe_duration_seconds"] == "summary"
    assert types["lagd_prefetch_probes"] == "counter"
    assert types["lagd_large_transactions_seen"] == "counter"
    assert types["lagd_replication_lag_seconds"] == "gauge"
    assert all(name.startswith("lagd_") for name in types)


def test_every_exported_family_is_documented() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(lagd_[a-z0-9_]+)", doc))
    exported = {n + "_total" if t == "counter" else n for n, t in families(full_snapshot()).items()}
    assert exported - documented == set(), "exported but not in docs/metrics.md"
    assert {d for d in documented if not d.endswith(("_bucket", "_sum", "_count"))} - exported == set(), \
        "documented but not exported"


def test_promtool_check_metrics_on_every_unit_snapshot() -> None:
    """The exposition passes promtool's lint (names, types, HELP) in every
    shape the unit snapshots take; tests/integration/test_prometheus_scrape.py
    does the same on scrapes of a live daemon."""
    import subprocess  # noqa: PLC0415

    from promql_names import promtool  # noqa: PLC0415

    for snapshot_fn in (full_snapshot, stopped_sql_snapshot, empty_snapshot):
        text = render(snapshot_fn)
        got = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60,
                             check=False)
        assert got.returncode == 0, (snapshot_fn.__name__, got.stdout + got.stderr)
