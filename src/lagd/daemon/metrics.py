"""Prometheus metrics, built from one daemon snapshot per scrape.

The collector calls ``snapshot_fn`` once per scrape and turns that frozen
value into metric families; it never talks to MySQL, so a scrape costs the
same whatever the server does and a hung server cannot hang it.

Rules the names and values follow (docs/metrics.md lists every metric):

- Prefix ``lagd_``; the same names on MySQL 5.7-9.x and MariaDB.
- A value lagd does not know is left out, never exported as 0: a lag method
  without a value has no ``lagd_replication_lag_seconds`` sample, while its
  ``..._last_success_timestamp_seconds`` and ``..._stale`` samples stay, so
  the absence is visible and alertable.
- Enumerations (replica state, prefetch state, primary lag method) export
  every value, 1 for the current one and 0 for the others: a series that
  comes and goes breaks ``max_over_time`` and alert ``for:`` clauses.
- Replica metrics carry a ``channel`` label (multi-source).
- Each concern (health, replica, lag, prefetch, advisor) is built on its
  own; one that fails is dropped from the scrape and reported by
  ``lagd_scrape_collector_success{collector}`` instead of failing the whole
  scrape, as mysqld_exporter does per collector.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import CollectorRegistry

from lagd.advisor.lookahead import TxKind
from lagd.advisor.runtime import UpcomingView
from lagd.daemon.state import Snapshot
from lagd.lag import LagMethod, LagReading, ReplicaState

__all__ = ["CONTENT_TYPE", "PREFETCH_STATES", "PROBE_OUTCOMES", "SnapshotCollector", "render"]

log = logging.getLogger("lagd.daemon.metrics")

# What render() produces: the classic text format (prometheus_client's
# CONTENT_TYPE_LATEST names a newer version in recent releases).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PREFETCH_STATES = ("starting", "active", "idle", "paused", "backed_off", "off")
PROBE_OUTCOMES = ("ok", "timeout", "error", "refused", "dropped")
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}

SnapshotFn = Callable[[], Snapshot]


def _num(value: Any) -> float | None:
    """A finite-or-infinite number, or None for missing, NaN and non-numbers."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return None if math.isnan(f) else f


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: Sequence[str], value: Any) -> None:
    v = _num(value)
    if v is not None:
        family.add_metric(list(labels), v)


def _nonempty(families: Iterable[Metric]) -> Iterator[Metric]:
    # An empty family still prints HELP/TYPE lines; leaving it out keeps
    # "absent" meaning "lagd does not know".
    return (f for f in families if f.samples)


# --- one function per concern: Snapshot -> families ----------------------------


def daemon_metrics(s: Snapshot) -> Iterator[Metric]:
    build = _gauge("lagd_build_info", "lagd's version; always 1.", ["version"])
    build.add_metric([s.version], 1.0)
    yield build
    yield GaugeMetricFamily("lagd_start_time_seconds", "When the daemon started, seconds since the epoch.",
                            value=s.started_at)
    yield GaugeMetricFamily(
        "lagd_config_reload_error",
        "1 while the last configuration reload was refused (the old configuration stays in force).",
        value=1.0 if s.config_error else 0.0)
    yield GaugeMetricFamily(
        "lagd_main_loop_age_seconds",
        "Seconds since the daemon's main loop last ticked; grows when the event loop is blocked.",
        value=s.loop_age)


def health_metrics(s: Snapshot) -> Iterator[Metric]:
    up = _gauge("lagd_up", "1 when the subsystem's last attempt succeeded, else 0.", ["subsystem"])
    last = _gauge("lagd_subsystem_last_success_timestamp_seconds",
                  "When the subsystem last succeeded, seconds since the epoch; absent if it never did.",
                  ["subsystem"])
    duration = _gauge("lagd_subsystem_duration_seconds", "How long the subsystem's last attempt took.",
                      ["subsystem"])
    for h in s.health:
        up.add_metric([h.name], 1.0 if h.up else 0.0)
        _add(last, [h.name], h.last_success)
        _add(duration, [h.name], h.last_duration)
    yield from _nonempty((up, last, duration))


def replica_metrics(s: Snapshot) -> Iterator[Metric]:
    ch = s.channel
    state = _gauge("lagd_replica_state",
                   "1 for the replica's current state, 0 for the others (every state is always present).",
                   ["channel", "state"])
    current = s.lag.state if s.lag is not None else ReplicaState.UNKNOWN
    for st in ReplicaState:
        state.add_metric([ch, st.value], 1.0 if st is current else 0.0)
    yield state

    info = _gauge("lagd_replica_info", "The replica lagd watches; always 1.",
                  ["channel", "flavor", "source"])
    st_ = s.status
    source = f"{st_.source_host}:{st_.source_port}" if st_ is not None else ""
    info.add_metric([ch, s.replica.flavor or "", source], 1.0)
    yield info

    if st_ is None:
        return  # unknown stays absent; lagd_replica_state{state="unknown"} says so
    for name, doc, value in (
        ("lagd_replica_io_running", "1 when the IO (receiver) thread runs; 0 when stopped or connecting.",
         st_.io_running),
        ("lagd_replica_sql_running", "1 when the SQL (applier) thread runs.", st_.sql_running),
        ("lagd_replica_last_io_errno", "The IO thread's last error number; 0 for none.", st_.last_io_errno),
        ("lagd_replica_last_sql_errno", "The SQL thread's last error number; 0 for none.",
         st_.last_sql_errno),
        ("lagd_replica_sql_delay_seconds", "The configured SQL_Delay (intended lag).", st_.sql_delay),
        ("lagd_replica_relay_log_space_bytes", "Relay_Log_Space: bytes of relay-log files on disk.",
         st_.relay_log_space),
    ):
        g = _gauge(name, doc, ["channel"])
        g.add_metric([ch], float(value))
        yield g


def lag_metrics(s: Snapshot) -> Iterator[Metric]:
    r = s.lag
    if r is None:
        return
    ch = s.channel
    value = _gauge("lagd_replication_lag_seconds",
                   "Replication lag by method; absent while the method has no value (never 0 for unknown).",
                   ["channel", "method"])
    last = _gauge("lagd_replication_lag_last_success_timestamp_seconds",
                  "When the method last had a value, seconds since the epoch; absent if it never had one.",
                  ["channel", "method"])
    stale = _gauge("lagd_replication_lag_stale",
                   "1 when the method has had no value for more than lag.stale_after seconds.",
                   ["channel", "method"])
    clamped = _gauge("lagd_replication_lag_clamped",
                     "1 when the method's raw value was negative (clock skew) and is reported as 0.",
                     ["channel", "method"])
    for m in r.methods:
        labels = [ch, m.method.value]
        _add(value, labels, m.seconds)
        _add(last, labels, m.last_success)
        stale.add_metric(labels, 1.0 if m.stale else 0.0)
        clamped.add_metric(labels, 1.0 if m.clamped else 0.0)
    primary = _gauge("lagd_replication_lag_primary_seconds",
                     "The lag lagd reports: heartbeat if it has a value, else event_time, else sbm; "
                     "absent when none has one.", ["channel"])
    _add(primary, [ch], r.lag)
    undelayed = _gauge("lagd_replication_lag_undelayed_seconds",
                       "The primary lag minus the configured SQL_Delay, never below 0: comparable with "
                       "mysqld-mixin's mysql_slave_lag_seconds; absent when the lag is unknown.", ["channel"])
    _add(undelayed, [ch], r.lag_without_delay)
    primary_method = _gauge("lagd_replication_lag_primary_method",
                            "1 for the method lagd_replication_lag_primary_seconds comes from, 0 for the "
                            "others; all 0 when no method has a value.", ["channel", "method"])
    for method in LagMethod:
        primary_method.add_metric([ch, method.value], 1.0 if r.lag_method is method else 0.0)
    yield from _nonempty((value, last, stale, clamped, primary, undelayed, primary_method))
    yield from _lag_summaries(ch, r)


def _lag_summaries(ch: str, r: LagReading) -> Iterator[Metric]:
    h = r.histogram
    hist = HistogramMetricFamily("lagd_replication_lag_observed_seconds",
                                 "Primary lag, one observation per poll.", labels=["channel"])
    hist.add_metric([ch], [(_le(b), float(c)) for b, c in zip(h.bounds, h.counts, strict=True)],
                    h.sum)
    yield hist

    avg = _gauge("lagd_replication_lag_average_seconds",
                 "Time-weighted mean of the primary lag over the window; absent with no value in it.",
                 ["channel", "window"])
    covered = _gauge("lagd_replication_lag_average_covered_seconds",
                     "Seconds of the window for which the primary lag had a value.", ["channel", "window"])
    for a in r.averages:
        window = f"{a.window / 60:g}m"
        _add(avg, [ch, window], a.seconds)
        covered.add_metric([ch, window], a.covered)

    clock = _gauge("lagd_clock_offset_seconds",
                   "Upper bound on replica clock minus source clock, from heartbeats; absent until known.",
                   ["channel"])
    if r.clock_offset is not None:
        _add(clock, [ch], r.clock_offset.upper_bound)
    skew = _gauge("lagd_clock_skew", "1 when a lag was clamped at 0 or the replica's clock is proven behind.",
                  ["channel"])
    skew.add_metric([ch], 1.0 if r.clock_skew else 0.0)

    backlog = []
    if r.backlog is not None:
        b = r.backlog
        for name, doc, v in (
            ("lagd_backlog_transactions", "Transactions received but not applied.", b.transactions),
            ("lagd_backlog_bytes", "Relay-log bytes received but not applied.", b.bytes),
            ("lagd_backlog_rows", "Row changes received but not applied.", b.rows),
            ("lagd_backlog_oldest_age_seconds",
             "Seconds since the oldest waiting transaction committed on the source.", b.oldest_age),
        ):
            g = _gauge(name, doc, ["channel"])
            _add(g, [ch], v)
            backlog.append(g)

    rates = []
    for name, doc, v in (
        ("lagd_apply_speed_ratio",
         "Source-seconds applied per wall-second (1 keeps pace, above 1 catches up), smoothed.",
         r.rates.speed),
        ("lagd_apply_rows_per_second", "Row changes applied per second, smoothed.", r.rates.rows_per_second),
        ("lagd_apply_transactions_per_second", "Transactions applied per second, smoothed.",
         r.rates.transactions_per_second),
        ("lagd_catchup_eta_seconds", "Seconds until caught up at the current speed; +Inf when it never "
         "catches up, 0 when caught up.", r.eta),
    ):
        g = _gauge(name, doc, ["channel"])
        _add(g, [ch], v)
        rates.append(g)
    counters = []
    for name, doc, v in (
        ("lagd_applied_transactions", "Transactions the SQL thread applied since lagd started (counted "
         "from the relay log: absent without the relay-log reader).", r.rates.transactions_total),
        ("lagd_applied_rows", "Row changes the SQL thread applied since lagd started.", r.rates.rows_total),
        ("lagd_applied_source_seconds", "Source-seconds the SQL thread's position advanced while it had "
         "work, since lagd started: rate() of it is the apply speed.", r.rates.source_seconds_total),
    ):
        c = _counter(name, doc, ["channel"])
        _add(c, [ch], v)
        counters.append(c)
    yield from _nonempty((avg, covered, clock, skew, *backlog, *rates, *counters))


def prefetch_metrics(s: Snapshot) -> Iterator[Metric]:
    p = s.prefetch
    section = s.settings.get("prefetch") if isinstance(s.settings, Mapping) else None
    configured = section.get("enabled") if isinstance(section, Mapping) else None
    # Without settings (tests, an older snapshot) a running engine means enabled.
    enabled = bool(configured) if configured is not None else p is not None
    yield GaugeMetricFamily("lagd_prefetch_enabled", "1 when the configuration enables prefetch.",
                            value=1.0 if enabled else 0.0)
    state = _gauge("lagd_prefetch_state",
                   "1 for the prefetcher's current state, 0 for the others (off: not running).", ["state"])
    current = p.state if p is not None else "off"
    for st in (*PREFETCH_STATES, *(() if current in PREFETCH_STATES else (current,))):
        state.add_metric([st], 1.0 if st == current else 0.0)
    yield state
    if p is None:
        return
    c: Mapping[str, Any] = p.counters if isinstance(p.counters, Mapping) else {}
    pool: Mapping[str, Any] = p.pool if isinstance(p.pool, Mapping) else {}
    families: list[Metric] = []

    for key, name, doc in (
        ("events", "lagd_prefetch_events_read", "Relay-log events the prefetch cursor read."),
        ("row_changes", "lagd_prefetch_row_changes_read", "Row changes the prefetch cursor read."),
        ("transactions", "lagd_prefetch_transactions_read", "Transactions the prefetch cursor read."),
        ("probes_submitted", "lagd_prefetch_probes_submitted", "Probe SELECTs queued."),
        ("rows_probed", "lagd_prefetch_rows_probed", "Keys looked up by probes."),
        ("in_time", "lagd_prefetch_probes_in_time", "Probes that finished before the SQL thread got there."),
        ("late", "lagd_prefetch_probes_late", "Probes that finished after the SQL thread got there."),
        ("jumps", "lagd_prefetch_jumps", "Times the SQL thread overtook the cursor and it jumped ahead."),
        ("resyncs", "lagd_prefetch_resyncs", "Times the cursor lost its place and resynchronised."),
        ("corrupt", "lagd_prefetch_corrupt_events", "Relay-log events that could not be decoded."),
    ):
        f = _counter(name, doc)
        _add(f, [], c.get(key))
        families.append(f)
    found = _counter("lagd_prefetch_rows_found", "Rows probes found (pages warmed in the buffer pool).")
    _add(found, [], pool.get("rows_found"))
    families.append(found)
    reconnects = _counter("lagd_prefetch_reconnects", "Failed probe connection attempts.")
    _add(reconnects, [], pool.get("reconnects"))
    families.append(reconnects)
    # Sessions opened, counted apart from the failures: each one costs the replica a
    # login and its prepared statements again, so churn here is load lagd adds.
    opened = _counter("lagd_prefetch_sessions_opened", "Probe sessions opened (logins on the replica).")
    _add(opened, [], pool.get("connected"))
    families.append(opened)

    polls = _counter("lagd_prefetch_replica_polls", "Polls of the replica's state while prefetching, by "
                     "kind: its whole status, or the SQL thread's position alone between two.", ["kind"])
    _add(polls, ["status"], c.get("status_polls"))
    _add(polls, ["position"], c.get("position_polls"))
    families.append(polls)
    outcomes = _counter("lagd_prefetch_probes", "Probes finished, by outcome.", ["outcome"])
    for outcome, v in zip(PROBE_OUTCOMES, (pool.get("succeeded"), pool.get("timed_out"), pool.get("failed"),
                                           pool.get("refused"), c.get("dropped")), strict=True):
        _add(outcomes, [outcome], v)
    families.append(outcomes)
    skipped = _counter("lagd_prefetch_skipped", "Transactions or probes not prefetched, by reason.",
                       ["reason"])
    raw_skipped = c.get("skipped")
    for reason, n in sorted(raw_skipped.items() if isinstance(raw_skipped, Mapping) else ()):
        _add(skipped, [str(reason)], n)
    families.append(skipped)

    for attr, name, doc in (
        ("lead_transactions", "lagd_prefetch_lead_transactions",
         "Transactions read ahead of the SQL thread."),
        ("lead_rows", "lagd_prefetch_lead_rows", "Row changes and statements read ahead of the SQL thread."),
        ("lead_bytes", "lagd_prefetch_lead_bytes", "Relay-log bytes read ahead of the SQL thread."),
        ("lead_seconds", "lagd_prefetch_lead_seconds", "Source-time span read ahead of the SQL thread."),
        ("lead_pages", "lagd_prefetch_lead_pages", "Pages probes are bringing in ahead of the SQL thread."),
        ("target_transactions", "lagd_prefetch_target_lead_transactions",
         "The lead, in transactions, the controller aims for."),
        ("connections", "lagd_prefetch_connections",
         "Probe sessions lagd may hold: as configured, or fewer where the replica's free connection slots"
         " bind."),
        ("benefit", "lagd_prefetch_benefit_ratio",
         "Apply rate with prefetch / without, last measured; absent until measured."),
    ):
        g = _gauge(name, doc)
        _add(g, [], getattr(p, attr, None))
        families.append(g)
    for key, name, doc in (("busy", "lagd_prefetch_probes_running", "Probes running now."),
                           ("queued", "lagd_prefetch_probes_queued", "Probes waiting for a connection."),
                           ("open", "lagd_prefetch_connections_open",
                            "Probe sessions connected now (closed after 30 s without a probe).")):
        g = _gauge(name, doc)
        _add(g, [], pool.get(key))
        families.append(g)

    issued = _num(pool.get("issued"))
    latency_sum = _num(pool.get("latency_sum"))
    avg = _num(getattr(p, "probe_latency_avg", None))
    if latency_sum is None and issued is not None:
        latency_sum = avg * issued if avg is not None else 0.0
    if issued is not None and latency_sum is not None:
        summary = SummaryMetricFamily("lagd_prefetch_probe_duration_seconds",
                                      "Time probes took on the server (issued probes: ok, timeout, error).")
        summary.add_metric([], int(issued), latency_sum)
        families.append(summary)
    yield from _nonempty(families)


def stall_metrics(s: Snapshot) -> Iterator[Metric]:
    """The SQL thread's time split (absent until measured) and the machine's spare cores."""
    v = s.stall
    if v is None:
        return
    ch = s.channel
    seconds = _counter("lagd_sql_thread_seconds",
                       "Seconds the SQL thread (or the parallel workers, summed) spent per state,"
                       " from /proc; absent until a thread was measured.", ["channel", "state"])
    for state, secs in sorted((v.seconds or {}).items()):
        _add(seconds, [ch, state], secs)
    share = _gauge("lagd_sql_thread_share",
                   "Share of the SQL thread's time per state over the recent window; absent when unknown.",
                   ["channel", "state"])
    for state, frac in sorted((v.shares or {}).items()):
        _add(share, [ch, state], frac)
    spare = _gauge("lagd_machine_spare_cores",
                   "Idle CPU cores of the machine over the last sampling interval.")
    _add(spare, [], v.spare_cores)
    gate = _gauge("lagd_prefetch_gate_open",
                  "1 while the prefetch gate lets probes run on the SQL-thread split, 0 while it holds"
                  " them; absent while no engine uses the split (the reason is in /status).")
    if v.gate_open is not None:
        gate.add_metric([], 1.0 if v.gate_open else 0.0)
    history = _gauge("lagd_innodb_history_length",
                     "InnoDB's purge history length (transactions purge has not processed), as the"
                     " prefetch gate read it; absent when not read lately or not readable (PROCESS).")
    _add(history, [], v.purge_history)
    yield from _nonempty((seconds, share, spare, gate, history))


def _biggest(values: Iterable[float | int | None]) -> float:
    return float(max((v for v in values if v is not None), default=0.0))


def _longest_stall(upcoming: Iterable[UpcomingView]) -> float | None:
    """The longest remaining stall; None (unknown) when any big transaction's is unknown."""
    longest = 0.0
    for u in upcoming:
        if u.remaining_seconds is None:
            return None
        longest = max(longest, u.remaining_seconds)
    return longest


def _rank(fired: bool, severity: str) -> tuple[bool, int]:
    return fired, -_SEVERITY_RANK.get(severity, len(_SEVERITY_RANK))


def advisor_metrics(s: Snapshot) -> Iterator[Metric]:
    a = s.advisor
    if a is None:
        return
    ch = s.channel
    if a.upcoming is not None:
        for name, values, doc in (
            ("lagd_upcoming_transaction_bytes", [u.bytes for u in a.upcoming],
             "Size of the largest big transaction received but not applied; 0 when none."),
            ("lagd_upcoming_transaction_rows", [u.rows for u in a.upcoming],
             "Row changes of the largest big transaction received but not applied; 0 when none."),
        ):
            g = _gauge(name, doc, ["channel"])
            g.add_metric([ch], _biggest(values))
            yield g
        stall = _gauge("lagd_upcoming_transaction_stall_seconds",
                       "Estimated seconds the SQL thread will still spend on the longest big transaction "
                       "received but not applied (shrinks while it applies); 0 when none; absent while "
                       "one's estimate is unknown.", ["channel"])
        _add(stall, [ch], _longest_stall(a.upcoming))
        yield from _nonempty((stall,))
        n = _gauge("lagd_upcoming_transactions", "Big transactions received but not applied.", ["channel"])
        n.add_metric([ch], float(len(a.upcoming)))
        yield n

    if a.large_transactions_seen is not None:
        counts = {k.value: 0.0 for k in TxKind}
        counts.update({str(k): float(v) for k, v in a.large_transactions_seen.items()})
        f = _counter("lagd_large_transactions_seen", "Big transactions seen in the relay log, by kind.",
                     ["channel", "kind"])
        for kind, v in sorted(counts.items()):
            _add(f, [ch, kind], v)
        yield f

    if a.advice is not None:
        per_rule: dict[str, tuple[bool, str]] = {}
        for item in a.advice:
            if not item.rule:
                continue
            severity = item.severity or "info"
            had = per_rule.get(item.rule)
            # One series per rule: a fired verdict wins, then the more severe.
            if had is None or _rank(item.fired, severity) > _rank(*had):
                per_rule[item.rule] = (item.fired, severity)
        g = _gauge("lagd_advice_active", "1 while the advisor rule fires, 0 while it is silent.",
                   ["rule", "severity"])
        for rule, (fired, severity) in sorted(per_rule.items()):
            g.add_metric([rule, severity], 1.0 if fired else 0.0)
        yield from _nonempty((g,))


CONCERNS: tuple[tuple[str, Callable[[Snapshot], Iterable[Metric]]], ...] = (
    ("daemon", daemon_metrics),
    ("health", health_metrics),
    ("replica", replica_metrics),
    ("lag", lag_metrics),
    ("prefetch", prefetch_metrics),
    ("stall", stall_metrics),
    ("advisor", advisor_metrics),
)


class SnapshotCollector:
    """A prometheus_client collector: one ``snapshot_fn()`` call per scrape."""

    def __init__(self, snapshot_fn: SnapshotFn) -> None:
        self.snapshot_fn = snapshot_fn

    def describe(self) -> list[Metric]:
        # Registering must not call snapshot_fn (the daemon may not be ready):
        # no names are reserved, which is fine for a registry of our own.
        return []

    def collect(self) -> Iterator[Metric]:
        success = _gauge("lagd_scrape_collector_success",
                         "1 when the collector built its metrics from the snapshot, 0 when it failed.",
                         ["collector"])
        try:
            snapshot = self.snapshot_fn()
        except Exception:
            log.exception("metrics: the snapshot could not be taken")
            success.add_metric(["snapshot"], 0.0)
            yield success
            return
        success.add_metric(["snapshot"], 1.0)
        for name, build in CONCERNS:
            try:
                families = list(build(snapshot))
            except Exception:
                # A half-built concern would be worse than none: its absence alerts.
                log.exception("metrics: the %s collector failed", name)
                success.add_metric([name], 0.0)
                continue
            success.add_metric([name], 1.0)
            yield from families
        yield success


def render(snapshot_fn: SnapshotFn) -> bytes:
    """The Prometheus text exposition (``CONTENT_TYPE``) of one snapshot, for the HTTP handler."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot_fn))
    return generate_latest(registry)
