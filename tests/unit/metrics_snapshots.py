"""Hand-built daemon snapshots for the metrics tests (no daemon, no server).

``full_snapshot()`` has every part present, so rendering it exports every
metric name lagd has: the dashboard and alert-rule tests use it as the list
of names that exist.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from lagd.advisor.runtime import AdvisorSnapshot
from lagd.daemon.sqlthread import stall_view
from lagd.daemon.state import Health, ReplicaInfo, Snapshot, StallView
from lagd.lag import (
    ApplyRates,
    BacklogReading,
    LagMethod,
    LagReading,
    MethodReading,
    ReplicaState,
)
from lagd.lag_rates import LAG_BUCKETS, ClockOffset, HistogramSnapshot, WindowAverage
from lagd.mysql.replica import IoState, ReplicaStatus
from lagd.prefetch.engine import PrefetchSnapshot

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CHANNEL = "east"


def replica_status(**kw: Any) -> ReplicaStatus:
    """A running replica that is behind; override what a case is about."""
    base: dict[str, Any] = dict(
        channel=CHANNEL, source_host="10.0.0.1", source_port=3306, source_user="repl",
        io_state=IoState.RUNNING, io_thread_state="Waiting for master to send event",
        sql_running=True, sql_state="Reading event from the relay log", seconds_behind=42,
        read_source_log_file="source-bin.000007", read_source_log_pos=90_000,
        relay_log_file="relay-bin.000003", relay_log_pos=900,
        relay_source_log_file="source-bin.000007", exec_source_log_pos=4_000, relay_log_space=95_000,
        last_io_errno=0, last_io_error=None, last_sql_errno=0, last_sql_error=None,
        sql_delay=0, sql_remaining_delay=None, source_server_id=1,
    )
    base.update(kw)
    return ReplicaStatus(**base)


def method(m: LagMethod, seconds: float | None, *, last: float | None = NOW, stale: bool = False,
           clamped: bool = False) -> MethodReading:
    return MethodReading(m, seconds, f"{m.value} reason", last, stale, clamped)


def histogram(*observations: float) -> HistogramSnapshot:
    counts = tuple(sum(1 for o in observations if o <= b) for b in LAG_BUCKETS)
    return HistogramSnapshot(LAG_BUCKETS, counts, len(observations), sum(observations))


def full_reading() -> LagReading:
    """Applying, 42 s behind, every value known."""
    return LagReading(
        at=NOW, state=ReplicaState.APPLYING, state_reason="12 transactions received, not applied",
        heartbeat=method(LagMethod.HEARTBEAT, 42.5), event_time=method(LagMethod.EVENT_TIME, 41.9),
        sbm=method(LagMethod.SBM, 42.0),
        lag=42.5, lag_method=LagMethod.HEARTBEAT, lag_reason="heartbeat",
        backlog=BacklogReading(transactions=12, bytes=65_536, rows=3_000, oldest_age=41.9),
        rates=ApplyRates(speed=1.5, transactions_per_second=300.0, rows_per_second=7_500.0,
                         time_constant=10.0, transactions_total=90_000, rows_total=2_250_000,
                         source_seconds_total=1_234.5),
        eta=85.0, eta_reason="lag 42.5 s shrinks by 0.50 s per second",
        averages=(WindowAverage(60.0, 40.0, 60.0), WindowAverage(300.0, 20.0, 300.0),
                  WindowAverage(900.0, 10.0, 880.0)),
        clock_offset=ClockOffset(0.004, 600, 30, 600.0, False, "tight"),
        clock_skew=False,
        histogram=histogram(0.05, 3.0, 42.5),
        lag_without_delay=42.5,
    )


def full_prefetch() -> PrefetchSnapshot:
    return PrefetchSnapshot(
        state="active", reason="reading ahead",
        counters={"events": 10_000, "row_changes": 8_000, "transactions": 400, "probes_submitted": 600,
                  "rows_probed": 7_900, "in_time": 550, "late": 40, "dropped": 10,
                  "skipped": {"overtaken": 3, "pool_full": 2}, "jumps": 1, "resyncs": 0, "corrupt": 0,
                  "status_polls": 40, "position_polls": 160,
                  "windows": 12},
        lead_transactions=30, lead_rows=900, lead_bytes=120_000, lead_seconds=2.5, lead_pages=850,
        target_transactions=40, connections=8, benefit=1.8, probe_latency_avg=0.002,
        cursor="relay-bin.000003:120900",
        pool={"issued": 590, "succeeded": 580, "failed": 6, "timed_out": 4, "refused": 0,
              "rows_found": 7_700, "reconnects": 1, "connected": 7, "busy": 3, "queued": 5, "open": 6,
              "last_error": None},
    )


def full_advisor() -> dict[str, Any]:
    return {
        "upcoming": [
            {"bytes": 50_000_000, "rows": 1_000_000, "kind": "load_data", "estimated_seconds": 120.0},
            {"bytes": 2_000_000, "rows": 5_000_000, "kind": "bulk_delete", "estimated_seconds": 30.0},
        ],
        "large_transactions_seen": {"load_data": 3, "bulk_delete": 1},
        "advice": [
            {"rule": "parallel_apply", "fired": True, "severity": "warning"},
            {"rule": "binlog_compression", "fired": False, "severity": "info"},
        ],
    }


HEALTH = (
    Health("replica_status", True, "ok", NOW - 1, 0.003),
    Health("heartbeat", True, "ok", NOW - 1, 0.001),
    Health("relay_log", True, "ok", NOW - 0.2, 0.0005),
    Health("prefetch", True, "reading ahead", NOW - 5, 0.0),
    Health("advisor", True, "ok", NOW - 20, 0.05),
)


STALL_SECONDS = {"on_cpu": 20.0, "cpu_wait": 2.0, "disk_read": 71.0, "flush_wait": 3.0, "other_wait": 4.0}


def full_stall(**kw: Any) -> StallView:
    """A replica whose SQL thread waits on reads, the gate open."""
    recent = {"on_cpu": 2.0, "cpu_wait": 0.0, "disk_read": 7.1, "flush_wait": 0.5, "other_wait": 0.4}
    snap = {"seconds": STALL_SECONDS, "recent": recent, "threads": [4242], "headroom_cores": 1.2,
            "verdict": "reads", "text": "SQL thread 71% waiting on disk reads: prefetch can help",
            "prefetch_can_help": True, "purge_history": 4_200}
    args: dict[str, Any] = dict(measured=True, note=None, fresh=True,
                                gate=(True, "SQL thread 71% waiting on disk reads: prefetching"))
    args.update(kw)
    return stall_view({**snap, **args.pop("snap", {})}, **args)


def unmeasured_stall() -> StallView:
    """No PROCESS grant: no thread found, nothing measured."""
    snap = {"seconds": dict.fromkeys(STALL_SECONDS, 0.0), "recent": {}, "threads": [],
            "headroom_cores": 1.5, "verdict": "unknown", "text": "SQL thread not running: nothing to measure",
            "prefetch_can_help": False}
    return stall_view(snap, measured=False, fresh=True, gate=None,
                      note="needs the PROCESS grant (fix: GRANT PROCESS ON *.* TO 'lagd'@'localhost';)")


def full_snapshot(**kw: Any) -> Snapshot:
    base: dict[str, Any] = dict(
        taken_at=NOW, version="1.2.3", started_at=NOW - 3600, config_path="lagd.toml", config_error=None,
        settings={"prefetch": {"enabled": True}},
        replica=ReplicaInfo("127.0.0.1:3306", "lagd", CHANNEL, "mariadb 10.11", None),
        status=replica_status(), status_error=None, lag=full_reading(), prefetch=full_prefetch(),
        prefetch_off_reason=None, advisor=full_advisor(), health=HEALTH, loop_age=0.4, stall=full_stall(),
    )
    base.update(kw)
    if isinstance(base["advisor"], dict):  # written here in its JSON form, partial
        base["advisor"] = AdvisorSnapshot.from_json(base["advisor"])
    return Snapshot(**base)


def empty_snapshot() -> Snapshot:
    """Just started: nothing polled, nothing known."""
    return Snapshot(
        taken_at=NOW, version="1.2.3", started_at=NOW, config_path=None, config_error=None, settings={},
        replica=ReplicaInfo("127.0.0.1:3306", "lagd", "", None, None), status=None,
        status_error="not polled yet", lag=None, prefetch=None, prefetch_off_reason=None, advisor=None,
        health=tuple(Health(h.name, False, "not run yet", None, None) for h in HEALTH), loop_age=0.0,
        stall=unmeasured_stall(),
    )


def stopped_sql_snapshot() -> Snapshot:
    """SQL thread stopped (no error): SBM is NULL, heartbeat and event_time grow, ETA is +Inf."""
    reading = replace(
        full_reading(), state=ReplicaState.STOPPED, state_reason="SQL thread not running (no error)",
        heartbeat=method(LagMethod.HEARTBEAT, 95.0), event_time=method(LagMethod.EVENT_TIME, 94.0),
        sbm=method(LagMethod.SBM, None, last=NOW - 90, stale=True),
        lag=95.0, rates=ApplyRates(0.0, 0.0, 0.0, 60.0), eta=math.inf,
        eta_reason="the SQL thread is not running, so lag cannot shrink",
    )
    stall = full_stall(snap={"threads": [], "recent": {}, "verdict": "unknown",
                             "text": "SQL thread not running: nothing to measure",
                             "prefetch_can_help": False}, gate=None)
    return full_snapshot(status=replica_status(sql_running=False, seconds_behind=None), lag=reading,
                         prefetch=replace(full_prefetch(), state="paused", benefit=None), stall=stall)
