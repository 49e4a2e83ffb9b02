"""The recorded ``/status`` documents in tests/fixtures/status, and how they were made.

Each is a real :class:`lagd.daemon.state.Snapshot` built from lagd's own values (a
``LagTracker`` fed a few polls, a ``PrefetchSnapshot``, an advisor dict in the
shape the daemon serves) and written with ``Snapshot.to_json()``, so the
files have exactly the daemon's shape. ``test_cli_status.py`` checks that
they still do; when ``state.py`` grows a field, regenerate them:

    .venv/bin/python tests/unit/status_fixtures.py

No clock is read: every time is relative to ``NOW``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from lagd.advisor.runtime import AdvisorSnapshot
from lagd.config import settings_from_dict
from lagd.daemon.sqlthread import stall_view
from lagd.daemon.state import Health, ReplicaInfo, Snapshot, StallView
from lagd.heartbeat import HeartbeatRow, format_ts
from lagd.lag import Backlog, LagInputs, LagReading, LagTracker
from lagd.mysql.replica import IoState, ReplicaStatus
from lagd.prefetch.engine import PrefetchSnapshot
from lagd.prefetch.stall import verdict

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DIR = Path(__file__).resolve().parents[1] / "fixtures" / "status"


def replica_status(**kw: Any) -> ReplicaStatus:
    base: dict[str, Any] = dict(
        channel="", source_host="db1.example.com", source_port=3306, source_user="repl",
        io_state=IoState.RUNNING, io_thread_state="Waiting for master to send event",
        sql_running=True, sql_state="Slave has read all relay log; waiting for more updates",
        seconds_behind=0, read_source_log_file="db1-bin.000042", read_source_log_pos=81_000,
        relay_log_file="db2-relay-bin.000007", relay_log_pos=5_000,
        relay_source_log_file="db1-bin.000042", exec_source_log_pos=81_000, relay_log_space=90_000,
        last_io_errno=0, last_io_error=None, last_sql_errno=0, last_sql_error=None,
        sql_delay=0, sql_remaining_delay=None, source_server_id=1,
        gtid_io_pos="0-1-5077", gtid_slave_pos="0-1-5077", using_gtid="Slave_Pos", parallel_mode="optimistic",
    )
    base.update(kw)
    return ReplicaStatus(**base)


def track(polls: list[tuple[float, ReplicaStatus | None, float | None, Backlog | None, int]]) -> LagReading:
    """Feed (seconds before NOW, status, heartbeat age, backlog, applied transactions) polls."""
    tracker = LagTracker(stale_after=10.0)
    reading = None
    for before, st, hb_age, backlog, applied in polls:
        now = NOW - before
        row = None if hb_age is None else HeartbeatRow(1, now - hb_age, format_ts(now - hb_age))
        reading = tracker.update(LagInputs(
            now=now, monotonic=10_000.0 - before, status=st,
            status_error=None if st is not None else "OperationalError: (2003, \"Can't connect\")",
            heartbeat=row, heartbeat_error=None if row or hb_age is None else "no row",
            backlog=backlog, applied_transactions=applied, applied_rows=applied * 12))
    assert reading is not None
    return reading


def prefetch(state: str, reason: str, in_time: int, late: int, benefit: float | None,
             lead: int = 40) -> PrefetchSnapshot:
    counters = {"events": 90_000, "row_changes": 60_000, "transactions": 5_000, "probes_submitted": 4_000,
                "rows_probed": 52_000, "in_time": in_time, "late": late, "dropped": 3, "jumps": 2,
                "resyncs": 0, "corrupt": 0, "windows": 12, "skipped": {"no_key": 7}}
    pool = {"issued": in_time + late + 3, "succeeded": in_time + late, "failed": 0, "timed_out": 3,
            "refused": 0, "rows_found": 50_000, "reconnects": 0, "connected": 8, "busy": 2, "queued": 5,
            "last_error": None}
    return PrefetchSnapshot(
        state=state, reason=reason, counters=counters, lead_transactions=lead, lead_rows=lead * 12,
        lead_bytes=lead * 3_000, lead_seconds=2.5, lead_pages=lead * 10, target_transactions=60,
        connections=8, benefit=benefit, probe_latency_avg=0.0021, cursor="db2-relay-bin.000007:91000",
        pool=pool)


ADVICE_QUIET = [
    {"rule": "parallel_apply", "fired": False, "severity": "warning", "advice": "", "caveat": "",
     "reason": "slave_parallel_threads=8", "since": None},
]
ADVICE_LAGGING = [
    {"rule": "durability_on_lagging_replica", "fired": True, "severity": "warning",
     "advice": "SET GLOBAL innodb_flush_log_at_trx_commit = 2 while the replica catches up",
     "caveat": "up to a second of applied transactions is lost on an OS crash; the replica refetches them",
     "reason": "innodb_flush_log_at_trx_commit=1 on a replica 120 s behind", "since": NOW - 300},
    *ADVICE_QUIET,
]
UPCOMING_LOAD = [
    {"gtid": "0-1-9312", "kind": "LOAD DATA", "kind_reason": "statement-based LOAD DATA",
     "rows": 2_000_000, "rows_are_file_lines": False, "bytes": 180 * 2**20, "size_basis": "relay log bytes",
     "tables": ["shop.orders"], "statement": None, "source_exec_seconds": None, "commit_time": NOW - 20,
     "relay_start": "db2-relay-bin.000007:120000", "relay_end": "db2-relay-bin.000008:9000000",
     "estimated_seconds": 340.0, "estimate_basis": "apply rate of shop.orders", "in_progress": False,
     "applying": False, "applying_since": None,
     "split": {"needed": True, "chunks": 10, "chunk_rows": 200_000, "reason": "340 s is over the 60 s budget",
               "text": "split it into 10 chunks of 200,000 rows with a 30 s pause: "
                       "worst lag 45 s instead of 340 s"}},
]


def advisor_dict(upcoming: list[dict[str, Any]] | None,
                 advice: list[dict[str, Any]] | None) -> dict[str, Any]:
    """In the shape of AdvisorRuntime.snapshot()."""
    return {"enabled": True, "reason": None, "lag_budget_seconds": 60.0, "headroom": 0.5,
            "upcoming": upcoming, "upcoming_total": None if upcoming is None else len(upcoming),
            "large_transactions_seen": {"LOAD DATA": len(upcoming or ())},
            "lookahead": {"live": upcoming is not None, "read_position": "db2-relay-bin.000008:9000000",
                          "transactions": 5_000, "big": len(upcoming or ()), "big_not_listed": 0,
                          "abandoned": 0, "resyncs": 0, "reason": None},
            "advice": advice, "checked_at": NOW - 12, "error": None, "limits": None, "apply_rate": None}


def health(*down: str) -> tuple[Health, ...]:
    names = ("replica_status", "heartbeat", "relay_log", "prefetch", "advisor")
    return tuple(Health(n, n not in down, "ok" if n not in down else "down", NOW - 1, 0.003) for n in names)


def snapshot(*, status: ReplicaStatus | None, lag: LagReading | None, prefetch_: PrefetchSnapshot | None,
             advisor: dict[str, Any] | None, status_error: str | None = None, off: str | None = None,
             down: tuple[str, ...] = (), stall: StallView | None = None) -> Snapshot:
    settings = settings_from_dict({"lag": {"heartbeat_table": "percona.heartbeat"}})
    return Snapshot(
        taken_at=NOW + 0.4, version="0.1.0", started_at=NOW - 3_600, config_path="/etc/lagd/lagd.toml",
        config_error=None, settings=settings.public_dict(),
        replica=ReplicaInfo("127.0.0.1:3306", "lagd", "", "MariaDB 10.11.19",
                            "/var/lib/mysql/db2-relay-bin.index"),
        status=status, status_error=status_error, lag=lag, prefetch=prefetch_, prefetch_off_reason=off,
        advisor=None if advisor is None else AdvisorSnapshot.from_json(advisor), health=health(*down),
        loop_age=0.4, stall=stall)


def stall(recent: dict[str, float], *, busy: bool = True, threads: tuple[int, ...] = (4242,),
          headroom: float | None = 1.4, note: str | None = None,
          gate: tuple[bool, str] | None = None) -> StallView:
    """A StallView as the daemon makes it, from a recorded split (seconds per state over 10 s)."""
    v = verdict(recent, running=bool(threads), busy=busy, headroom=headroom)
    snap = {"seconds": {s: 10 * x for s, x in recent.items()}, "recent": recent, "threads": list(threads),
            "headroom_cores": headroom, "verdict": v.kind, "text": v.text,
            "prefetch_can_help": v.prefetch_can_help}
    return stall_view(snap, measured=note is None, note=note, fresh=True, gate=gate)


READS = {"on_cpu": 2.0, "cpu_wait": 0.1, "disk_read": 7.1, "flush_wait": 0.3, "other_wait": 0.5}
SLEEPING = {"on_cpu": 0.05, "cpu_wait": 0.0, "disk_read": 0.0, "flush_wait": 0.0, "other_wait": 9.95}
NO_GRANT = "needs the PROCESS grant (fix: GRANT PROCESS ON *.* TO 'lagd'@'localhost';)"


def caught_up() -> Snapshot:
    st = replica_status()
    empty = Backlog(0, 0, 0, None)
    lag = track([(b, st, 0.3, empty, 5_000 + int(600 - b)) for b in range(600, -1, -10)])
    return snapshot(status=st, lag=lag, prefetch_=prefetch("idle", "the replica is caught up", 950, 12, 1.4),
                    advisor=advisor_dict([], ADVICE_QUIET), stall=stall(SLEEPING, busy=False))


def lagging() -> Snapshot:
    st = replica_status(seconds_behind=117, exec_source_log_pos=40_000)
    polls = []
    for b in range(300, -1, -10):
        age = 120.0 + b * 0.2  # catching up: the lag shrank from 180 s to 120 s over 5 minutes
        polls.append((b, st, age, Backlog(4_200, 310 * 2**20, 51_000, NOW - b - age + 2), 9_000 - b * 10))
    lag = track(polls)
    return snapshot(status=st, lag=lag,
                    prefetch_=prefetch("active", "reading ahead of the SQL thread", 950, 50, 1.3),
                    advisor=advisor_dict(UPCOMING_LOAD, ADVICE_LAGGING),
                    stall=stall(READS, gate=(True, "the SQL thread waits on reads: prefetching")))


def sql_error() -> Snapshot:
    st = replica_status(
        sql_running=False, sql_state=None, seconds_behind=None, exec_source_log_pos=20_000,
        last_sql_errno=1062,
        last_sql_error="Could not execute Write_rows_v1 event on table shop.orders; Duplicate entry '7' for "
        "key 'PRIMARY', Error_code: 1062; handler error HA_ERR_FOUND_DUPP_KEY")
    # Stopped: the oldest waiting transaction stays the same, so event_time grows with the clock.
    waiting = Backlog(900, 40 * 2**20, 9_000, NOW - 410)
    polls = [(b, st, 412.0 - b, waiting, 7_000) for b in range(60, -1, -10)]
    return snapshot(status=st, lag=track(polls),
                    prefetch_=prefetch("paused", "the SQL thread is stopped", 400, 20, None),
                    advisor=None, stall=stall(dict.fromkeys(READS, 0.0), threads=()))


def io_stopped() -> Snapshot:
    st = replica_status(
        io_state=IoState.CONNECTING, io_thread_state="Reconnecting after a failed master event read",
        seconds_behind=None, last_io_errno=2003,
        last_io_error="error reconnecting to master 'repl@db1.example.com:3306' - retry-time: 60  "
        "maximum-retries: 86400  message: Can't connect to server on 'db1.example.com' "
        "(111 \"Connection refused\")")
    polls = [(b, st, 95.0 - b, Backlog(0, 0, 0, None), 5_000) for b in range(60, -1, -10)]
    return snapshot(status=st, lag=track(polls),
                    prefetch_=prefetch("idle", "the replica is caught up", 950, 12, 1.4),
                    advisor=advisor_dict([], ADVICE_QUIET), stall=stall(SLEEPING, busy=False))


def starting() -> Snapshot:
    return snapshot(status=None, lag=None, prefetch_=None, advisor=None, status_error="not polled yet",
                    off="starting: waiting for the replica's status", down=("replica_status", "prefetch"),
                    stall=stall({}, threads=(), note=NO_GRANT))


FIXTURES: dict[str, Callable[[], Snapshot]] = {
    "caught_up": caught_up, "lagging": lagging, "sql_error": sql_error, "io_stopped": io_stopped,
    "starting": starting,
}


def as_json(snap: Snapshot) -> Any:
    """``to_json()`` as the daemon's HTTP handler writes it (the raw status row is a mapping)."""
    def default(v: Any) -> Any:
        if isinstance(v, Mapping):
            return dict(v)
        if isinstance(v, datetime):
            return v.isoformat()
        raise TypeError(type(v))

    return json.loads(json.dumps(snap.to_json(), default=default))


def write_all() -> None:
    DIR.mkdir(parents=True, exist_ok=True)
    for name, make in FIXTURES.items():
        (DIR / f"{name}.json").write_text(json.dumps(as_json(make()), indent=1) + "\n")


if __name__ == "__main__":
    write_all()
