"""The advisor inside the daemon: look-ahead, apply rates, settings rules, split advice.

The runtime calls in, from its own tasks, all on the event loop:

- :meth:`AdvisorRuntime.feed` with every batch of the look-ahead reader
  (cheap: the look-ahead's own cost, plus a clock read per batch);
- :meth:`~AdvisorRuntime.applied_up_to` and
  :meth:`~AdvisorRuntime.observe_rates` once per lag poll, in that order:
  the SQL thread's position drops the big transactions it has applied, and
  the relay-log bytes and rows applied between two polls teach the
  :class:`~lagd.advisor.ApplyRateModel`;
- :meth:`~AdvisorRuntime.refresh` every half minute: the replica's variables
  and status over SQL (in a worker thread), and the settings rules;
- :meth:`~AdvisorRuntime.snapshot` for /status, /metrics and lagctl: a
  typed :class:`AdvisorSnapshot` (its field names are the JSON keys), split
  advice computed from the latest rates and limits.

Apply rates. An interval between two polls counts when the SQL thread had
work at its start (state ``applying``, or ``io_stopped`` with a backlog):
it then worked all the interval, or until it ran out of work, which
overstates the seconds by less than one poll. An interval that starts idle
or stopped does not count (its bytes are dropped with its seconds). Bytes
and rows of a transaction count when the SQL thread has passed its end.
Intervals spent inside a big transaction are not counted as intervals:
their seconds have no rows yet, and counting them would drag the rate down
(and the estimate of the very transaction being applied up) for as long as
it applies. The big transaction is counted instead when it ends, its bytes
and rows over the seconds it took. Intervals waiting out SQL_Delay, longer
than ``MAX_POLL_GAP`` seconds, or without the look-ahead's backlog (the
counters do not move then) are not counted.

Big transactions are timed from the polls around their start and their end
(midpoints: about a poll interval of error, so only transactions of several
seconds weigh in, see ``ApplyRateModel.min_seconds``); that also gives a
table its own rate. While one applies, its remaining stall is the estimate
less the seconds it has applied, and unknown once it runs past the estimate.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from lagd.advisor import (
    RULES,
    Advice,
    AdvisorError,
    ApplyRate,
    ApplyRateModel,
    Lookahead,
    LookaheadConfig,
    ServerSettings,
    Severity,
    SplitAdvice,
    SplitLimits,
    TransactionSummary,
    TxKind,
    advise,
    gather_settings,
    load_tmpdir_free_bytes,
    split_advice,
    status_deltas,
)
from lagd.backlog import Backlog
from lagd.config import AdvisorSettings
from lagd.lag import LagReading, ReplicaState
from lagd.mysql.progress import ApplierTrx
from lagd.relaylog import Event, RelayPosition, Resynced

__all__ = [
    "LISTED",
    "LOOKAHEAD_STALE_SECONDS",
    "MAX_POLL_GAP",
    "AdviceView",
    "AdvisorRuntime",
    "AdvisorSnapshot",
    "ApplyRateView",
    "Blocking",
    "LimitView",
    "LookaheadView",
    "RateView",
    "SplitView",
    "UpcomingView",
    "advice_dicts",
    "gather_replica",
    "stall_remaining",
]

log = logging.getLogger("lagd.advisor")

T = TypeVar("T")


class Blocking(Protocol):
    """Runs ``fn(conn)`` on a blocking connection off the event loop
    (``lagd.mysql.session.BlockingSession.run``)."""

    def __call__(self, fn: Callable[[Any], T], /) -> Awaitable[T]: ...

LISTED = 10  # upcoming big transactions in a snapshot, biggest first
LOOKAHEAD_STALE_SECONDS = 60.0  # no batch for this long: the look-ahead reader is not running
MAX_POLL_GAP = 30.0  # seconds between two polls beyond which the interval is not trusted
MIN_INSIDE_SECONDS = 1.0  # rows counted inside a transaction over this long give its own rate
PROGRESS_RETRY = 60.0  # seconds before asking InnoDB for the applier's rows again after a failure
_REMEMBERED = 4096  # big transactions remembered as counted/logged (a re-read is not new)

_RULE_ORDER = {rule.__name__: i for i, rule in enumerate(RULES)}
_SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
_LOG_LEVEL = {Severity.CRITICAL: logging.ERROR, Severity.WARNING: logging.WARNING,
              Severity.INFO: logging.INFO}

_Key = tuple[str | None, str, int, float]


def _key(s: TransactionSummary) -> _Key:
    """One transaction however often it is read (a restarted reader reads it again)."""
    return (s.gtid, s.start.file, s.start.offset, s.commit_time)


def gather_replica(conn: Any) -> tuple[ServerSettings, int | None]:
    """Blocking: the replica's settings, and free bytes in its load tmpdir
    (read on this host: lagd runs beside its replica)."""
    settings = gather_settings(conn, "replica")
    return settings, load_tmpdir_free_bytes(settings)


def advice_dicts(
    verdicts: Iterable[Advice], since: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Verdicts as JSON-ready dicts: fired first, then by severity, then in rule order."""
    ordered = sorted(verdicts, key=lambda a: (not a.fired, _SEVERITY_ORDER.get(a.severity, 3),
                                              _RULE_ORDER.get(a.rule, len(_RULE_ORDER))))
    since = since or {}
    return [{"rule": a.rule, "fired": a.fired, "severity": a.severity.value, "advice": a.advice,
             "caveat": a.caveat, "reason": a.reason, "since": since.get(a.rule) if a.fired else None}
            for a in ordered]


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


# ----- the snapshot's types: what /status, /metrics and lagctl read -------------------------
# Field names are the JSON keys of /status (Snapshot.to_json), which lagctl reads.


@dataclass(frozen=True, slots=True)
class RateView:
    bytes_per_second: float | None
    rows_per_second: float | None
    observed_seconds: float | None
    observed_rows: float | None
    scope: str | None


@dataclass(frozen=True, slots=True)
class ApplyRateView(RateView):
    tables: dict[str, RateView]  # the tables with a rate of their own, fastest learned first


@dataclass(frozen=True, slots=True)
class SplitView:
    needed: bool | None
    text: str | None
    reason: str | None
    chunk_rows: int | None = None
    chunk_bytes: int | None = None
    chunks: int | None = None
    bound: str | None = None
    pause_seconds: float | None = None
    apply_seconds: float | None = None
    chunk_apply_seconds: float | None = None
    worst_lag_without_split: float | None = None
    worst_lag_with_split: float | None = None
    worst_lag_split_no_pause: float | None = None
    commands: tuple[str, ...] = ()
    limits_known: bool = False


@dataclass(frozen=True, slots=True)
class UpcomingView:
    """One big transaction received and not applied (or being received)."""

    gtid: str | None
    kind: str
    kind_reason: str | None
    rows: int | None
    rows_are_file_lines: bool
    bytes: int | None
    size_basis: str | None
    tables: tuple[str, ...]
    statement: str | None
    source_exec_seconds: float | None
    commit_time: float | None
    relay_start: str | None
    relay_end: str | None
    estimated_seconds: float | None
    estimate_basis: str | None
    split: SplitView | None
    in_progress: bool
    applying: bool
    applying_since: float | None
    remaining_seconds: float | None = None  # the stall still ahead; shrinks while it applies


@dataclass(frozen=True, slots=True)
class AdviceView:
    rule: str
    fired: bool
    severity: str
    advice: str
    caveat: str | None
    reason: str | None
    since: float | None  # wall clock when it started to fire


@dataclass(frozen=True, slots=True)
class LookaheadView:
    live: bool
    read_position: str | None
    transactions: int
    big: int
    big_not_listed: int
    abandoned: int
    resyncs: int
    reason: str | None  # why not live


@dataclass(frozen=True, slots=True)
class LimitView:
    name: str
    bytes: int
    hard: bool


@dataclass(frozen=True, slots=True)
class AdvisorSnapshot:
    """The advisor's part of the daemon's snapshot; None values are "not known", never 0."""

    enabled: bool
    reason: str | None  # why it is off
    lag_budget_seconds: float
    headroom: float
    upcoming: tuple[UpcomingView, ...] | None = None  # None: the look-ahead has not reported
    upcoming_total: int | None = None
    large_transactions_seen: dict[str, int] | None = None
    lookahead: LookaheadView | None = None
    advice: tuple[AdviceView, ...] | None = None  # None: the settings were not read yet
    checked_at: float | None = None
    error: str | None = None
    limits: tuple[LimitView, ...] | None = None
    apply_rate: ApplyRateView | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AdvisorSnapshot:
        """From the JSON form (/status, recorded fixtures); missing keys are "not known"."""
        def rate(r: Mapping[str, Any]) -> RateView:
            return _build(RateView, r)

        def apply_rate(r: Mapping[str, Any] | None) -> ApplyRateView | None:
            if r is None:
                return None
            return _build(ApplyRateView, r, tables=lambda t: {k: rate(v) for k, v in (t or {}).items()})

        def upcoming(u: Mapping[str, Any]) -> UpcomingView:
            # Recorded before the remaining stall was reported: nothing applied yet, so all of it.
            u = {"remaining_seconds": u.get("estimated_seconds"), **u}
            return _build(UpcomingView, u, tables=lambda t: tuple(t or ()),
                          split=lambda x: None if x is None else _build(
                              SplitView, x, commands=lambda c: tuple(c or ())))

        def items(conv: Any) -> Any:
            return lambda v: None if v is None else tuple(conv(x) for x in v)

        return _build(cls, d, upcoming=items(upcoming), advice=items(lambda a: _build(AdviceView, a)),
                      lookahead=lambda x: None if x is None else _build(LookaheadView, x),
                      limits=items(lambda x: _build(LimitView, x)), apply_rate=apply_rate)


def _build(cls: type[T], d: Mapping[str, Any], **convert: Callable[[Any], Any]) -> T:
    args = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in d or f.default is dataclasses.MISSING:
            value = d.get(f.name)
            args[f.name] = convert[f.name](value) if f.name in convert else value
    return cls(**args)


def _rate_view(r: ApplyRate) -> RateView:
    return RateView(r.bytes_per_second, r.rows_per_second, r.seconds, r.rows, r.scope)


def apply_rate_view(model: ApplyRateModel, tables: int = 10) -> ApplyRateView | None:
    """The overall rate, and the tables with a rate of their own; None before one was learned."""
    overall = model.rate()
    if overall is None:
        return None
    own = list(model.table_rates().items())[:tables]
    return ApplyRateView(overall.bytes_per_second, overall.rows_per_second, overall.seconds, overall.rows,
                         overall.scope, {t: _rate_view(r) for t, r in own})


def split_view(a: SplitAdvice, limits_known: bool) -> SplitView:
    return SplitView(
        a.needed, a.text, a.reason, a.chunk_rows, a.chunk_bytes, a.chunks, a.bound,
        _finite(a.pause_seconds), _finite(a.apply_seconds), _finite(a.chunk_apply_seconds),
        _finite(a.worst_lag_without_split), _finite(a.worst_lag_with_split),
        _finite(a.worst_lag_split_no_pause), tuple(a.commands), limits_known)


def _secs(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:,.1f} s" if x < 100 else f"{x:,.0f} s"


def _busy(reading: LagReading) -> bool:
    """Whether the SQL thread has work (and is not waiting out SQL_Delay)."""
    if reading.backlog is None or "SQL_Delay" in reading.state_reason:
        return False
    if reading.state is ReplicaState.APPLYING:
        return True
    return reading.state is ReplicaState.IO_STOPPED and reading.backlog.transactions > 0


@dataclass(frozen=True, slots=True)
class _Poll:
    at: float  # wall clock of the reading
    bytes: int  # Backlog.applied_bytes then
    rows: int
    busy: bool
    transactions: int = 0


@dataclass(slots=True)
class _Track:
    """A big transaction the SQL thread is inside: the polls around its start,
    and InnoDB's count of the rows it changed so far (``lagd.mysql.progress``)."""

    before: float  # the last poll before it started
    first_in: float  # the first poll inside it
    last_in: float
    estimate: float | None
    trx_id: str | None = None  # the InnoDB transaction the counts below are of
    first_rows: int = 0  # rows changed at the first count inside it
    first_at: float = 0.0  # wall clock of that count
    rows: int = 0  # rows changed at the last count
    rows_at: float = 0.0
    other_trx: str | None = None  # a different trx id seen once (a retry is bound after two)
    applied: bool = False  # the SQL thread passed its end (the backlog counts its rows)
    total: int = 0  # its rows, from the look-ahead

    @property
    def started(self) -> float:
        return (self.before + self.first_in) / 2

    def count(self, trx_id: str, rows: int, at: float) -> None:
        """One reading of the applier's open transaction."""
        if self.trx_id is None or (trx_id != self.trx_id and trx_id == self.other_trx):
            # The first count, or the same new transaction twice (the SQL thread
            # retried it after a deadlock): measure inside this one.
            self.trx_id, self.first_rows, self.first_at, self.other_trx = trx_id, rows, at, None
        elif trx_id != self.trx_id:
            # Most likely the next transaction: the big one committed between the
            # status poll and this question. Not this transaction's count.
            self.other_trx = trx_id
            return
        self.other_trx = None
        self.rows, self.rows_at = max(rows, self.rows if trx_id == self.trx_id else 0), at

    def inside_rate(self, min_seconds: float = MIN_INSIDE_SECONDS) -> float | None:
        """Rows per second inside this transaction, once counted over ``min_seconds``."""
        seconds, rows = self.rows_at - self.first_at, self.rows - self.first_rows
        if self.trx_id is None or seconds < min_seconds or rows <= 0:
            return None
        return rows / seconds


def inside_estimate(total_rows: int, done_rows: int, rate: float | None,
                    applied_for: float) -> tuple[float, float] | None:
    """(the whole stall, the stall still ahead) of a big transaction ``applied_for``
    seconds in, with ``done_rows`` of its ``total_rows`` changed, going at ``rate``
    rows/s inside it; None without a rate. Rows beyond the total (triggers,
    cascades on the replica) count as nearly done, not as negative time."""
    if rate is None or rate <= 0 or total_rows <= 0:
        return None
    ahead = max(0, total_rows - done_rows) / rate
    return max(0.0, applied_for) + ahead, ahead


class AdvisorRuntime:
    """See the module docstring; one per daemon, driven by ``lagd.daemon.runtime``."""

    def __init__(self, settings: AdvisorSettings) -> None:
        self.settings = settings
        self.model = ApplyRateModel()
        self.lookahead = Lookahead(self._lookahead_config(settings), on_big=self._on_big)
        self.seen: dict[str, int] = {k.value: 0 for k in TxKind}
        # key -> counted (False: logged while it streamed in, not yet complete)
        self._known: collections.OrderedDict[_Key, bool] = collections.OrderedDict()
        self._fed_at: float | None = None  # monotonic
        self._progress_at = 0.0  # monotonic: last look at the transaction being read
        self._read_pos: RelayPosition | None = None  # the look-ahead reader's position
        self._resyncs = 0
        self._pos: RelayPosition | None = None  # the SQL thread's, from the last poll
        self._dropped: list[TransactionSummary] = []  # applied since the last observe_rates
        self._tracks: dict[_Key, _Track] = {}
        self._inside: _Key | None = None  # the big transaction the SQL thread was in at the last poll
        self._count: tuple[str, int, float] | None = None  # (trx id, rows, wall) since the last poll
        self._forfeit = 0  # rows counted inside transactions that were rolled back (stays counted)
        self._progress_after = 0.0  # monotonic: not before this after a failed question
        self.progress_note: str | None = None  # why the rows inside are not counted, if they are not
        self._sql_running = False  # at the last poll
        self._prev: _Poll | None = None
        self._server: ServerSettings | None = None
        self._limits: SplitLimits | None = None
        self._advice: list[Advice] | None = None
        self._firing: dict[str, tuple[Severity, float]] = {}  # rule -> (severity, since)
        self._checked_at: float | None = None
        self._error: str | None = None

    @staticmethod
    def _lookahead_config(s: AdvisorSettings, base: LookaheadConfig | None = None) -> LookaheadConfig:
        return replace(base or LookaheadConfig(), big_bytes=s.big_transaction_bytes,
                       big_rows=s.big_transaction_rows)

    # ----- configuration -------------------------------------------------

    def configure(self, settings: AdvisorSettings) -> None:
        """A reloaded config. New thresholds apply to transactions read from now on."""
        was = self.settings.enabled
        self.settings = settings
        self.lookahead.config = self._lookahead_config(settings, self.lookahead.config)
        if was and not settings.enabled:
            self.reset()
            self._fed_at = None
            self._prev = None
            self._advice, self._firing, self._checked_at, self._error = None, {}, None, None
            log.info("advisor disabled by the configuration")
        elif settings.enabled and not was:
            log.info("advisor enabled by the configuration: it sees big transactions read from now on")

    def reset(self) -> None:
        """A new look-ahead reader starts (at the SQL thread): forget what was listed.
        What was counted stays counted, and is not counted again when read again."""
        self.lookahead.clear()
        self._forfeit += sum(tr.rows for tr in self._tracks.values())
        self._tracks.clear()
        self._inside = None
        self._dropped.clear()
        self._read_pos = None

    # ----- the look-ahead reader -----------------------------------------

    def feed(self, batch: list[Event | Resynced], read_position: RelayPosition | None = None) -> None:
        """Every batch of the look-ahead reader, in order; ``read_position`` is
        the reader's position after it (the size of a transaction still being
        read, when the log does not say it up front)."""
        if not self.settings.enabled:
            return
        now = time.monotonic()
        self._fed_at = now
        if read_position is not None:
            self._read_pos = read_position
        if batch:
            self.lookahead.feed(batch)
            if self.lookahead.stats.resyncs != self._resyncs:
                self._resyncs = self.lookahead.stats.resyncs
                self._tracks.clear()
                self._dropped.clear()
        if now - self._progress_at >= 1.0:
            self._progress_at = now
            current = self.lookahead.in_progress(self._read_pos)
            if current is not None and _key(current) not in self._known:
                self._remember(_key(current), counted=False)
                self._log_big(current)

    def _remember(self, key: _Key, counted: bool) -> None:
        self._known[key] = counted
        self._known.move_to_end(key)
        while len(self._known) > _REMEMBERED:
            self._known.popitem(last=False)

    def _on_big(self, s: TransactionSummary) -> None:
        """The look-ahead read the end of a big transaction."""
        key = _key(s)
        was = self._known.get(key)
        if was:
            return  # read again by a restarted reader
        self.seen[s.kind.value] = self.seen.get(s.kind.value, 0) + 1
        self._remember(key, counted=True)
        # Logged again when it was first seen still being received: only now
        # are its rows, size and the stall estimate final.
        self._log_big(s)

    def _split(self, s: TransactionSummary) -> SplitAdvice | None:
        try:
            return split_advice(s, self.model, self._limits or SplitLimits(),
                                self.settings.lag_budget_seconds, self.settings.headroom)
        except AdvisorError as e:  # the config validates both; kept for safety
            log.warning("advisor: no split advice: %s", e)
            return None

    def _log_big(self, s: TransactionSummary) -> None:
        est, basis = self.model.estimate_seconds(s)
        split = self._split(s)
        what = "being received" if not s.complete else "coming"
        stall = f"about {_secs(est)}" if est is not None else "for an unknown time"
        msg = f"big transaction {what}: {s.describe()}; it will hold the SQL thread {stall} ({basis})"
        if split is not None and split.needed and split.chunk_rows:
            pause = f", {_secs(split.pause_seconds)} apart" if split.pause_seconds is not None else ""
            msg += f"; split it: {split.chunk_rows:,} rows per transaction{pause}"
        over = (est is not None and est > self.settings.lag_budget_seconds) or (
            split is not None and split.needed is True)
        log.log(logging.WARNING if over else logging.INFO, "%s", msg, extra={
            "kind": s.kind.value, "rows": s.rows_estimate, "bytes": s.size_bytes,
            "estimated_seconds": _finite(est), "gtid": s.gtid, "tables": list(s.tables),
            "in_progress": not s.complete,
            "chunk_rows": split.chunk_rows if split is not None and split.needed else None,
            "pause_seconds": split.pause_seconds if split is not None and split.needed else None,
        })

    # ----- the SQL thread, every lag poll --------------------------------

    def applied_up_to(self, pos: RelayPosition, backlog: Backlog) -> None:
        """The SQL thread's Relay_Log_File/Relay_Log_Pos: drop what it applied."""
        del backlog  # the counters are read in observe_rates, which has the time
        if not self.settings.enabled:
            return
        self._pos = pos
        first = self.lookahead.next_coming()
        if first is not None and first.end is not None and first.end <= pos:
            listed = self.lookahead.coming()
            applied = listed[: self.lookahead.applied_up_to(pos)]
            self._dropped.extend(applied)
            for s in applied:
                tr = self._tracks.get(_key(s))
                if tr is not None:
                    tr.applied = True  # the backlog counts all its rows now

    def _head(self) -> TransactionSummary | None:
        """The big transaction the SQL thread is inside now, by its position."""
        pos = self._pos
        if pos is None:
            return None
        head = self.lookahead.next_coming() or self.lookahead.in_progress(self._read_pos)
        if head is None or head.start > pos or (head.end is not None and head.end <= pos):
            return None
        return head

    def wants_progress(self, sql_running: bool) -> bool:
        """Whether to ask InnoDB for the applier's open transaction now: the SQL
        thread runs inside a big transaction (cheap otherwise: never asked)."""
        return (self.settings.enabled and sql_running and self._head() is not None
                and time.monotonic() >= self._progress_after)

    def progress(self, trx: ApplierTrx | None, at: float, error: str | None = None) -> None:
        """The applier's open transaction at wall clock ``at`` (None: none open), or
        ``error``: why it could not be asked (not asked again for a minute)."""
        if error is not None:
            self._progress_after = time.monotonic() + PROGRESS_RETRY
            self.progress_note = f"rows of the transaction being applied not counted: {error}"
            self._count = None
            return
        self.progress_note = None
        self._count = None if trx is None else (trx.trx_id, trx.rows_modified, at)
        head = self._head()
        tr = self._tracks.get(_key(head)) if head is not None else None
        if tr is not None and self._count is not None:
            tr.count(*self._count)
            self._count = None

    def rows_in_progress(self) -> int:
        """Rows changed inside big transactions not yet committed, counted by InnoDB,
        plus those of transactions rolled back (applied work, counted once
        done, so the total never goes back)."""
        return self._forfeit + sum(min(tr.rows, tr.total) for tr in self._tracks.values()
                                   if not tr.applied)

    def current_stall(self, at: float) -> tuple[bool, float | None]:
        """(the SQL thread is inside a big transaction, the seconds it still holds
        it or None when not known) at wall clock ``at``."""
        head = self._head()
        if head is None:
            return False, None
        est, ahead = self._estimate(head, at)
        return True, ahead if ahead is not None else est

    def _estimate(self, t: TransactionSummary, at: float | None) -> tuple[float | None, float | None]:
        """(the whole stall, the stall still ahead at wall clock ``at``) of a big transaction;
        the second is None while it is not being applied (all of it is ahead)."""
        tr = self._tracks.get(_key(t))
        est = self.model.estimate_seconds(t)[0]
        if tr is None or at is None:
            return est, None
        applied_for = at - tr.started
        inside = inside_estimate(t.rows_estimate, tr.rows, tr.inside_rate(), tr.rows_at - tr.started)
        if inside is not None:
            whole, ahead = inside
            return whole, max(0.0, ahead - max(0.0, at - tr.rows_at))
        return est, stall_remaining(est, applied_for)

    def observe_rates(self, reading: LagReading | None, backlog: Backlog) -> None:
        """Teach the apply-rate model what the SQL thread applied since the last poll."""
        if not self.settings.enabled:
            return
        if reading is None:
            self._prev = None
            self._sql_running = False
            self._dropped.clear()
            return
        self._sql_running = reading.state in (ReplicaState.APPLYING, ReplicaState.IO_STOPPED,
                                              ReplicaState.IDLE)
        busy = _busy(reading)
        cur = _Poll(reading.at, backlog.applied_bytes, backlog.applied_rows, busy,
                    backlog.applied_transactions)
        prev, self._prev = self._prev, cur
        # An interval that began inside a big transaction is counted with it, when it ends.
        if prev is not None and prev.busy and reading.backlog is not None and self._inside is None:
            dt = cur.at - prev.at
            nbytes, rows = cur.bytes - prev.bytes, cur.rows - prev.rows
            if 0 < dt <= MAX_POLL_GAP and nbytes >= 0 and rows >= 0:
                trx = cur.transactions - prev.transactions
                self.model.observe(nbytes, rows, dt, transactions=trx if trx >= 0 else None)
        gap_ok = prev is not None and 0 < cur.at - prev.at <= MAX_POLL_GAP
        self._time_big(cur.at, prev.at if gap_ok and prev is not None else None, busy)

    def _time_big(self, now: float, prev_at: float | None, busy: bool) -> None:
        """Time big transactions from the polls around their start and end."""
        dropped, self._dropped = self._dropped, []
        for s in dropped:
            tr = self._tracks.pop(_key(s), None)
            if tr is None or prev_at is None:
                continue  # applied within one poll, or the polls around its end are too far apart
            seconds = (tr.last_in + now) / 2 - tr.started
            if seconds > 0:
                self.model.observe(s.size_bytes, s.rows_estimate, seconds, table=s.table,
                                   transactions=1 if s.rows else None)
            log.info("big transaction applied: %s in about %s (estimated %s when it started)",
                     s.describe(), _secs(seconds), _secs(tr.estimate),
                     extra={"kind": s.kind.value, "rows": s.rows_estimate, "bytes": s.size_bytes,
                            "gtid": s.gtid, "applied_seconds": seconds, "estimated_seconds": tr.estimate})
        self._inside = None
        head = self.lookahead.next_coming() or self.lookahead.in_progress(self._read_pos)
        if head is None or self._pos is None or head.start > self._pos:
            return
        key = _key(head)
        tr = self._tracks.get(key)
        if not busy or prev_at is None:
            # Stopped at its start (or rolled back by a stop), or a gap in the
            # polls: it is timed again from the next poll that sees it applied.
            gone = self._tracks.pop(key, None)
            self._forfeit += gone.rows if gone is not None and not gone.applied else 0
            self._count = None
            return
        if tr is None:
            if len(self._tracks) > 16:
                # Leftovers of transactions never seen to end.
                self._forfeit += sum(t.rows for t in self._tracks.values() if not t.applied)
                self._tracks.clear()
            tr = self._tracks[key] = _Track(prev_at, now, now, self.model.estimate_seconds(head)[0],
                                            total=head.rows_estimate)
        else:
            tr.last_in = now
        self._inside = key
        if self._count is not None:
            tr.count(*self._count)
            self._count = None

    # ----- settings, every half minute -----------------------------------

    async def refresh(self, blocking: Blocking, lag: LagReading | None) -> None:
        """Read the replica's settings and run the rules. Errors are recorded
        for the snapshot and raised (the runtime marks the advisor's health)."""
        if not self.settings.enabled:
            return
        try:
            server, free = await blocking(gather_replica)
        except Exception as e:
            self._error = str(e) or type(e).__name__
            raise
        now = time.time()
        facts: dict[str, int | bool | None] = {"load_tmpdir_free_bytes": free}
        if self._server is not None:
            facts.update(status_deltas(self._server, server))
        if self._live():
            facts.update(self.lookahead.facts(self._read_pos))
        if lag is not None and lag.lag is not None:
            facts["lagging"] = lag.lag > self.settings.lag_budget_seconds
        verdicts = advise(server.with_facts(**facts))
        self._server = server
        self._limits = SplitLimits.from_settings(None, server)
        self._note(verdicts, now)
        self._advice = verdicts
        self._checked_at = now
        self._error = None

    def _note(self, verdicts: list[Advice], now: float) -> None:
        """Log each advice that starts to fire (or changes severity), and each that stops."""
        firing: dict[str, tuple[Severity, float]] = {}
        for a in verdicts:
            if not a.fired:
                continue
            old = self._firing.get(a.rule)
            if old is not None and old[0] == a.severity:
                firing[a.rule] = old
                continue
            firing[a.rule] = (a.severity, now)
            log.log(_LOG_LEVEL.get(a.severity, logging.INFO), "advice %s (%s): %s Why: %s. Caveat: %s",
                    a.rule, a.severity.value, a.advice, a.reason, a.caveat,
                    extra={"rule": a.rule, "severity": a.severity.value, "fired": True})
        for rule, (severity, _since) in self._firing.items():
            if rule not in firing:
                reason = next((a.reason for a in verdicts if a.rule == rule), "rule gone")
                log.info("advice %s no longer applies: %s", rule, reason,
                         extra={"rule": rule, "severity": severity.value, "fired": False})
        self._firing = firing

    # ----- the snapshot ----------------------------------------------------

    def _live(self) -> bool:
        return self._fed_at is not None and time.monotonic() - self._fed_at <= LOOKAHEAD_STALE_SECONDS

    def snapshot(self) -> AdvisorSnapshot:
        """What /status, /metrics and ``lagctl advise`` show.

        ``upcoming`` is None (not known, so not 0) until the look-ahead reader
        feeds it, or when it has not for ``LOOKAHEAD_STALE_SECONDS``; ``advice``
        is None until the replica's settings were read once.
        """
        s = self.settings
        if not s.enabled:
            return AdvisorSnapshot(False, "advisor.enabled is false in the configuration",
                                   s.lag_budget_seconds, s.headroom)
        live = self._live()
        la = self.lookahead
        st = la.stats
        lookahead = LookaheadView(
            live, str(self._read_pos) if self._read_pos else None, st.transactions, st.big, st.big_not_kept,
            st.abandoned, st.resyncs,
            None if live else (
                "the look-ahead reader has not started" if self._fed_at is None else
                f"the look-ahead reader has not read for more than {LOOKAHEAD_STALE_SECONDS:g} s"))
        upcoming: tuple[UpcomingView, ...] | None = None
        total: int | None = None
        if live:
            items: list[TransactionSummary] = []
            keys: set[_Key] = set()
            current = la.in_progress(self._read_pos)
            for t in (*la.coming(), *((current,) if current is not None else ())):
                if _key(t) not in keys:
                    keys.add(_key(t))
                    items.append(t)
            items.sort(key=lambda t: (-t.size_bytes, t.start))
            upcoming = tuple(self._item(t) for t in items[:LISTED])
            total = len(items)
        advice = None
        if self._advice is not None:
            since = {r: at for r, (_, at) in self._firing.items()}
            advice = tuple(AdviceView(**a) for a in advice_dicts(self._advice, since))
        limits = None if self._limits is None else tuple(
            LimitView(n, b, h) for n, b, h in self._limits.bounds())
        return AdvisorSnapshot(
            True, None, s.lag_budget_seconds, s.headroom, upcoming, total, dict(self.seen), lookahead,
            advice, self._checked_at, self._error, limits, apply_rate_view(self.model))

    def _item(self, t: TransactionSummary) -> UpcomingView:
        est, basis = self.model.estimate_seconds(t)
        split = self._split(t)
        pos = self._pos
        # "Applying" only while the SQL thread runs: stopped, it rolled the transaction back.
        applying = (self._sql_running and pos is not None and t.start <= pos
                    and (t.end is None or pos < t.end))
        tr = self._tracks.get(_key(t)) if applying else None
        remaining = est
        if tr is not None and self._prev is not None:
            whole, ahead = self._estimate(t, self._prev.at)
            rate = tr.inside_rate()
            if rate is not None and whole is not None:
                est, basis = whole, (
                    f"{tr.rows:,} of {t.rows_estimate:,} rows changed in {_secs(tr.rows_at - tr.started)}, "
                    f"{rate:,.0f} rows/s inside this transaction (InnoDB's count); "
                    f"before it started: {_secs(tr.estimate)} ({basis})")
            remaining = ahead
            if rate is None and self.progress_note is not None:
                basis = f"{basis}; {self.progress_note}"
        return UpcomingView(
            gtid=t.gtid, kind=t.kind.value, kind_reason=t.kind_reason,
            rows=t.rows_estimate, rows_are_file_lines=t.rows == 0 and bool(t.load_data_lines),
            bytes=t.size_bytes, size_basis=t.size_basis, tables=tuple(t.tables),
            statement=t.statement, source_exec_seconds=t.source_exec_seconds,
            commit_time=t.commit_time, relay_start=str(t.start),
            relay_end=str(t.end) if t.end is not None else None,
            estimated_seconds=_finite(est), estimate_basis=basis,
            split=None if split is None else split_view(split, self._limits is not None),
            in_progress=not t.complete,
            applying=applying, applying_since=tr.started if tr is not None else None,
            remaining_seconds=_finite(remaining))


def stall_remaining(estimate: float | None, applied_for: float) -> float | None:
    """Seconds a big transaction still holds the SQL thread, ``applied_for``
    seconds into it: the estimate less what has passed, so it shrinks as it
    applies. Unknown (None) without an estimate, or once the transaction has
    run past it: the estimate proved wrong and there is no better one."""
    if estimate is None or applied_for > estimate:
        return None
    return estimate - max(0.0, applied_for)
