"""Concurrent probe SELECTs on the local replica, which they must never harm.

N workers, each owning one connection, take probes from a bounded queue. Every
session is set up so that a probe can only read and can never hold the SQL
thread up for long:

- ``TRANSACTION READ ONLY`` and autocommit: the server itself refuses writes,
  and each probe's metadata lock ends with the statement.
- ``READ UNCOMMITTED``: no read view and no undo-log walks; the probe wants the
  current pages (the ones the SQL thread will touch), not an old version.
- a server-side statement timeout (MariaDB ``max_statement_time``, MySQL
  ``MAX_EXECUTION_TIME``) and a short ``lock_wait_timeout``, so a probe queued
  behind a DDL's metadata lock gives up instead of adding to the queue.

The pool also refuses any text that is not a plain SELECT (defence in depth:
``rewrite`` only makes SELECTs). Driver: asyncmy, chosen by
tests/bench/bench_drivers.py (client CPU per probe about half of aiomysql's
and of PyMySQL in threads).

Probes with parameters (row probes; and statement and INSERT-entry batches of
integer values, rewrite_sql.integer_arguments) run as server-side prepared
statements, asyncmy's statement cache of ``PREPARED_PER_CONNECTION`` texts a
connection: no escaping in lagd, no parse in the server, which shares the
replica's cores with the SQL thread (bench_drivers, 16-key probes: client CPU
57 -> 40 µs a probe, the server's 123 -> 100). Only the texts most used lately
do, as many as a connection keeps (HotTexts); past that every probe would
prepare its text again. Other statement probes carry their values in their
text, each text a one-off: they stay plain queries. Their rows (``SELECT *``,
or ISNULL of a table's documents, up to ``rewrite_sql.STATEMENT_ROWS``) are
counted as they stream in, none kept (``_count_rows``), and a statement shape
whose plan reads a whole table is not probed at all (``lagd.mysql.plan``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lagd.aio import cancel_and_wait
from lagd.mysql.backoff import backoff_delay
from lagd.mysql.endpoint import hardening_sql, streaming_cursor
from lagd.mysql.errors import ER_LOCK_WAIT_TIMEOUT, DatabaseError, Kind, is_database_error, translate
from lagd.mysql.plan import explain_sql, full_scan

log = logging.getLogger("lagd.prefetch.pool")

_LOCKING = re.compile(r"\bFOR\s+(UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b|\bINTO\b", re.I)
# Quoted strings and identifiers, read left to right as the server reads them: without
# backslashes and comments (see _unquoted) a quote closes at the next one of its kind.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")


class ProbeLike(Protocol):
    @property
    def sql(self) -> str: ...
    @property
    def params(self) -> tuple[Any, ...]: ...


def session_setup(mariadb: bool, timeout_ms: int) -> list[str]:
    """The statements that make a probe session harmless (see module doc)."""
    return [*hardening_sql(mariadb, timeout_ms / 1000),
            "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
            # The decoder gives TIMESTAMP values as UTC; compared in another
            # zone a key would point at the wrong page.
            "SET SESSION time_zone = '+00:00'"]


def refuse_reason(sql: str) -> str | None:
    """Why this text must not run as a probe, or None when it may.

    Looked for outside quotes: a statement probe carries the statement's literals, and a
    key such as 'a;b' or 'moved into stock' was refused (an error logged at every probe).
    """
    head = sql.lstrip()[:7].upper()
    if head != "SELECT " and head[:5] != "WITH ":
        return "not a SELECT"
    # The words first: the regex over a 600-byte probe cost 15 µs. Every construct refused
    # below holds one of these three (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE, INTO);
    # FOR and LOCK themselves are not asked, since every INSERT-entry probe says FORCE INDEX.
    up = sql.upper()
    if ";" not in sql and "UPDATE" not in up and "SHARE" not in up and "INTO" not in up:
        return None
    code = _unquoted(sql)
    if ";" in code:
        return "more than one statement"
    if _LOCKING.search(code):
        return "locking read or INTO"
    return None


def _unquoted(sql: str) -> str:
    """The text with its quoted strings and identifiers emptied, where that is certain.

    A backslash (an escape, or not, by the server's sql_mode) or a comment (which hides
    a quote from the server but not from a regex) could make this read a quote where
    the server does not, and hide code: then the whole text is checked, quotes and all.
    """
    if "'" not in sql and '"' not in sql and "`" not in sql:
        return sql
    if "\\" in sql or "/*" in sql or "#" in sql or "--" in sql:
        return sql
    return _QUOTED.sub("''", sql)


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # "ok", "timeout", "lock_wait", "error", "refused", "dropped", "scan" (not sent: _plan)
    rows: int  # rows the probe found (pages it warmed)
    seconds: float
    error: str | None = None
    kind: Kind | None = None  # why it failed, e.g. Kind.SCHEMA: an index or table DDL removed


@dataclass(slots=True)
class PoolCounters:
    issued: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    refused: int = 0
    scans: int = 0  # statement probes not sent: their shape's plan reads a whole table
    explained: int = 0  # statement shapes explained
    unprepared: int = 0  # probes with arguments sent as plain queries (HotTexts)
    rows_found: int = 0
    latency_sum: float = 0.0
    reconnects: int = 0
    connected: int = 0


# Texts refuse_reason has passed, kept so that a row probe's text (one of a few per
# index, rewrite.padded_size) is checked once, not at every probe: the check was 5% of
# the event loop's CPU in a random-INSERT catch-up. Statement probes carry their values
# in their text and are checked each time.
APPROVED_TEXTS = 4096

# Statement shapes whose plan the pool keeps (ProbePool._plan); past it, all are
# explained again.
PLANS = 4096
# ... and for how long: a table grows (a scan of a small table is let through) and
# its statistics change, so a verdict is renewed this often.
PLAN_SECONDS = 600.0
_UNKNOWN = "?"  # a shape not explained yet (a verdict is a reason or None)

# How often the watchdog looks for probes past their deadline (see ProbePool._watch).
WATCH_EVERY = 0.25

# Prepared statements a probe connection keeps (least recently used goes). The
# server's max_prepared_stmt_count (16,382 by default) is shared by all its
# clients: 32 connections keep at most 1,024. rewrite.padded_size keeps an
# index to about five probe texts, so a few tables' worth stays cached.
PREPARED_PER_CONNECTION = 32

# How many probes the uses of each text are counted over before the texts that run
# prepared are chosen again (HotTexts).
HOT_WINDOW = 4096


class HotTexts:
    """Which probe texts with arguments run prepared: the most used lately, as many as a
    connection keeps.

    Each connection keeps PREPARED_PER_CONNECTION statements, least recently used going.
    Past that many texts in turn (a workload over many tables and indexes, five texts an
    index: rewrite_sql.padded_size) every probe would prepare its text again and close
    another: a round trip and a parse more than a plain query. So the texts most used over
    the last HOT_WINDOW probes run prepared, up to that many (the first ones as they come),
    and the others as plain queries with their arguments written in by the driver, as
    before prepared statements. Pure: counts in, a verdict out.
    """

    def __init__(self, most: int = PREPARED_PER_CONNECTION, window: int = HOT_WINDOW) -> None:
        self.most, self.window = most, window
        self._hot: set[str] = set()
        self._uses: Counter[str] = Counter()
        self._counted = 0

    def prepared(self, sql: str) -> bool:
        self._uses[sql] += 1
        self._counted += 1
        if self._counted >= self.window:
            self._hot = {text for text, _ in self._uses.most_common(self.most)}
            self._uses.clear()
            self._counted = 0
        if sql in self._hot:
            return True
        if len(self._hot) < self.most:
            self._hot.add(sql)
            return True
        return False


Connect = Callable[..., Awaitable[Any]]
Done = Callable[[Any, Any, Outcome], None]  # (probe, tag, outcome)


class ProbePool:
    """``submit()`` queues a probe (and an opaque tag); ``on_done`` hears back."""

    def __init__(self, connect: Connect, *, mariadb: bool, size: int, timeout_ms: int,
                 on_done: Done, queue_limit: int | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 where: str = "replica", connect_timeout: float = 5.0, hang_slack: float = 2.0) -> None:
        self._connect = connect
        self._setup = session_setup(mariadb, timeout_ms)
        self.where = where
        # asyncmy has no read timeout: a probe that outlives its server-side
        # timeout by this much means the server hangs, and the connection goes.
        self._probe_deadline = timeout_ms / 1000 + hang_slack
        self._inflight: dict[int, float] = {}  # worker -> when its probe was sent (perf_counter)
        self._overdue: set[int] = set()  # workers the watchdog cancelled for their deadline
        self._watchdog: asyncio.Task[None] | None = None
        self._approved: set[str] = set()
        self._hot = HotTexts()
        self._mariadb = mariadb
        # shape (Probe.plan) -> (why it is not probed or None, when explained: time.monotonic)
        self._plans: dict[str, tuple[str | None, float]] = {}
        self._scanned: set[str] = set()  # tables whose shapes were refused, said once
        self._connect_deadline = connect_timeout + 2.0
        self.size = size
        self._on_done = on_done
        self._sleep = sleep
        self._queue: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue(queue_limit or size * 4)
        self._workers: list[asyncio.Task[None]] = []
        self.counters = PoolCounters()
        self.busy = 0
        self.open = 0  # sessions connected now (connection_budget counts them as lagd's)
        self.last_used = time.monotonic()  # when a probe last finished
        self.last_error: str | None = None
        self._connect_failing = False
        self._started = False

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    @property
    def full(self) -> bool:
        return self._queue.full()

    def submit(self, probe: ProbeLike, tag: Any = None) -> bool:
        """Queue a probe; False (and nothing queued) when the queue is full."""
        try:
            self._queue.put_nowait((probe, tag))
        except asyncio.QueueFull:
            return False
        return True

    async def wait_room(self) -> None:
        """Until the queue has room (or the pool is idle)."""
        while self._queue.full():
            await asyncio.sleep(0.001)

    def drop_queued(self, keep: Callable[[Any], bool] = lambda _tag: False) -> int:
        """Throw away queued probes whose tag ``keep`` rejects (the SQL
        thread got there first: running them now would only cost)."""
        kept, dropped = [], 0
        while not self._queue.empty():
            probe, tag = self._queue.get_nowait()
            if keep(tag):
                kept.append((probe, tag))
            else:
                dropped += 1
                self._on_done(probe, tag, Outcome("dropped", 0, 0.0))
        for item in kept:
            self._queue.put_nowait(item)
        return dropped

    def start(self) -> None:
        self._started = True
        self._add_workers()
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._watch(), name="probe-watchdog")

    def _add_workers(self) -> None:
        self._workers += [asyncio.create_task(self._worker(i), name=f"probe-{i}")
                          for i in range(len(self._workers), self.size)]

    async def resize(self, size: int) -> None:
        """Change the number of sessions (the controller tunes it, the replica's free
        connection slots bound it). New workers connect at their first probe; the
        ones let go close their sessions (a probe in flight is abandoned: its
        server-side timeout ends it). At 0 the queued probes are dropped."""
        if size == self.size:
            return
        self.size = size
        gone, self._workers = self._workers[size:], self._workers[:size]
        await self._cancel(gone)
        if self._started:
            self._add_workers()
        if size == 0:
            self.drop_queued()

    async def close_idle(self) -> None:
        """Close every session while there is nothing to probe; the workers stay, and
        connect again at their next probe."""
        started = self._started
        await self.close()
        if started:
            self.start()

    async def close(self) -> None:
        """Cancel the workers; a probe in flight is abandoned (its server-side
        timeout ends it), queued probes are dropped."""
        self._started = False
        dog, self._watchdog = self._watchdog, None
        await self._cancel(self._workers + ([dog] if dog is not None else []))
        self._workers = []
        self.drop_queued()

    @staticmethod
    async def _cancel(workers: list[asyncio.Task[None]]) -> None:
        await cancel_and_wait(workers)

    async def open_session(self) -> Any:
        """One probe session, set up as the module doc says (no deadline: the caller's)."""
        conn = await self._connect(prepared=PREPARED_PER_CONNECTION)
        try:
            async with conn.cursor() as cur:
                for stmt in self._setup:
                    await cur.execute(stmt)
        except BaseException:
            _close_quietly(conn)
            raise
        return conn

    async def _open(self) -> Any:
        attempt = 0
        while True:
            try:
                conn = await asyncio.wait_for(self.open_session(), self._connect_deadline)
                self.counters.connected += 1
                self.open += 1
                self._connect_failing = False
                return conn
            except asyncio.CancelledError:
                raise
            except Exception as e:  # server down or restarting: keep trying
                fault = translate(e, self.where)
                self.last_error = f"connect: {fault}"
                if not self._connect_failing:
                    # The monitor logs the replica's faults with their fixes: one
                    # line for the whole pool here, not one per worker.
                    self._connect_failing = True
                    # A full server is news the monitor's open session never hears: its fix here.
                    fix = f" ({fault.fix})" if fault.kind is Kind.FULL and fault.fix else ""
                    log.info("probe connections failing: %s; retrying with backoff%s", fault.message, fix)
                self.counters.reconnects += 1
                await self._sleep(backoff_delay(attempt))
                attempt += 1

    async def _watch(self) -> None:
        """Cancel a probe past its deadline, as asyncio.timeout would, from one timer for the
        whole pool: an asyncio.timeout for each probe scheduled a timer and cancelled it, 7%
        of the event loop's CPU in a random-INSERT catch-up. The worker turns the
        cancellation into a timeout (``_worker``); late by at most WATCH_EVERY on a deadline
        of seconds."""
        while True:
            await asyncio.sleep(min(WATCH_EVERY, self._probe_deadline / 4))
            now = time.perf_counter()
            for n, sent in list(self._inflight.items()):
                if now - sent >= self._probe_deadline and n not in self._overdue and n < len(self._workers):
                    self._overdue.add(n)
                    self._workers[n].cancel()

    def forget_plans(self) -> None:
        """A DDL changed a table (an index added or dropped): explain every shape again."""
        self._plans.clear()
        self._scanned.clear()

    def _verdict(self, key: str) -> str | None:
        """The shape's verdict while fresh (PLAN_SECONDS), else _UNKNOWN."""
        known = self._plans.get(key)
        if known is None or time.monotonic() - known[1] >= PLAN_SECONDS:
            return _UNKNOWN
        return known[0]

    async def _plan(self, cur: Any, probe: ProbeLike, key: str) -> str | None:
        """The shape's verdict (lagd.mysql.plan), explained on this session the first time.
        An EXPLAIN the server refuses (a grant the SELECT alone does not need, such as SHOW
        VIEW for a view) is a verdict too: the plan cannot be read, so no probe. Any other
        failure raises as the probe's own would (a lost session, a timeout, a table a DDL
        has not made yet), and the shape is explained again next time."""
        try:
            # A prepared probe's arguments in its text, as the driver writes them (mogrify).
            text = cur.mogrify(probe.sql, probe.params) if probe.params else probe.sql.replace("%%", "%")
            await cur.execute(explain_sql(text, self._mariadb))
            columns = [d[0] for d in cur.description or ()]
            why = full_scan(columns, await cur.fetchall())
        except Exception as e:
            fault = translate(e, self.where)
            # The server's own answer (client errors, 2000-2999, are the session's state).
            answered = fault.code is not None and not 2000 <= fault.code < 3000
            if not (is_database_error(e) and answered and fault.kind in (Kind.DENIED, Kind.OTHER)):
                raise
            why = f"its plan could not be read ({fault.message})"
        self.counters.explained += 1
        if len(self._plans) >= PLANS:
            self._plans.clear()
        self._plans[key] = (why, time.monotonic())
        table = f"{getattr(probe, 'schema', '')}.{getattr(probe, 'table', '')}"
        if why is not None and table not in self._scanned:
            self._scanned.add(table)
            log.info("statements on %s not probed where %s; e.g. %.200s", table, why, probe.sql)
        return why

    def _approve(self, probe: ProbeLike) -> str | None:
        """refuse_reason, once per row-probe text (APPROVED_TEXTS)."""
        sql = probe.sql
        if sql in self._approved:
            return None
        reason = refuse_reason(sql)
        if reason is None and probe.params:
            if len(self._approved) >= APPROVED_TEXTS:
                self._approved.clear()
            self._approved.add(sql)
        return reason

    async def _worker(self, n: int) -> None:
        conn: Any = None
        cur: Any = None  # one cursor per connection: probes run one after another on it
        rows_of: Any = None  # ... and one that streams (_count_rows)
        held: tuple[Any, Any] | None = None  # taken from the queue, not yet answered
        try:
            while True:
                probe, tag = held = await self._queue.get()
                reason = self._approve(probe)
                if reason is not None:
                    self.counters.refused += 1
                    log.error("refused probe (%s): %.200s", reason, probe.sql)
                    held = None
                    self._on_done(probe, tag, Outcome("refused", 0, 0.0, reason))
                    continue
                # None: may be sent; _UNKNOWN: its shape is explained first; else why it is not.
                key = getattr(probe, "plan", None)
                scan = None if key is None else self._verdict(key)
                if scan is not None and scan is not _UNKNOWN:
                    held = None
                    self._not_sent(probe, tag, scan, 0.0)
                    continue
                if conn is None:
                    conn = await self._open()
                    cur, rows_of = conn.cursor(), streaming_cursor(conn)
                self.busy += 1
                self._inflight[n] = t0 = time.perf_counter()
                outcome: Outcome | None = None
                try:
                    try:
                        if key is not None and scan is _UNKNOWN:
                            scan = await self._plan(cur, probe, key)
                        if scan is None:  # else not sent (answered below)
                            if probe.params:
                                if self._hot.prepared(probe.sql):
                                    await cur.execute(probe.sql, probe.params)  # prepared (module doc)
                                else:  # a plain query: HotTexts
                                    self.counters.unprepared += 1
                                    await cur.execute(cur.mogrify(probe.sql, probe.params))
                                found = len(await cur.fetchall())
                            else:  # no arguments: asyncmy neither prepares nor formats the text
                                found = await _count_rows(rows_of, probe.sql.replace("%%", "%"))
                            outcome = Outcome("ok", found, time.perf_counter() - t0)
                            self.counters.succeeded += 1
                            self.counters.rows_found += found
                    except asyncio.CancelledError:
                        if n not in self._overdue:
                            raise
                        self._overdue.discard(n)
                        task = asyncio.current_task()
                        if task is not None and task.uncancel() > 0:
                            raise  # let go (resize, close) as well
                        raise TimeoutError from None
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # any failure is one probe's, never the worker's
                    outcome, broken = self._classify(e, time.perf_counter() - t0)
                    if broken:
                        self._close(conn)
                        conn = cur = rows_of = None
                finally:
                    self._inflight.pop(n, None)
                    self.busy -= 1
                    self.last_used = time.monotonic()
                held = None
                if outcome is None:  # explained just now: its plan reads a whole table
                    self._not_sent(probe, tag, str(scan), time.perf_counter() - t0)
                    continue
                self.counters.issued += 1
                self.counters.latency_sum += outcome.seconds
                self._on_done(probe, tag, outcome)
        except asyncio.CancelledError:
            self._overdue.discard(n)
            if held is not None:  # let go mid-probe (resize, close): its keys are not warmed
                self._on_done(held[0], held[1], Outcome("dropped", 0, 0.0))
            raise
        finally:
            if conn is not None:
                self._close(conn)

    def _not_sent(self, probe: Any, tag: Any, why: str, seconds: float) -> None:
        """A statement probe whose shape's plan reads a whole table: answered, not sent."""
        self.counters.scans += 1
        self._on_done(probe, tag, Outcome("scan", 0, seconds, why))

    def _close(self, conn: Any) -> None:
        self.open -= 1
        _close_quietly(conn)

    def _classify(self, e: BaseException, seconds: float) -> tuple[Outcome, bool]:
        """What a failed probe was, and whether its connection must go.

        Server-side refusals (timeouts, a dropped index) leave the session
        sound: reconnecting for each would only add load while DDL runs.
        """
        if isinstance(e, TimeoutError):
            e = DatabaseError(f"{self.where}: probe unanswered after {self._probe_deadline:g} s",
                              kind=Kind.LOST, where=self.where)
        fault = translate(e, self.where)
        if fault.kind is Kind.TIMEOUT:
            if fault.code == ER_LOCK_WAIT_TIMEOUT:
                self.counters.failed += 1
                return Outcome("lock_wait", 0, seconds, fault.message, fault.kind), False
            self.counters.timed_out += 1
            return Outcome("timeout", 0, seconds, fault.message, fault.kind), False
        self.counters.failed += 1
        self.last_error = fault.message
        broken = fault.broken or fault.kind is Kind.OTHER
        return Outcome("error", 0, seconds, self.last_error, fault.kind), broken


# Rows a streamed result is read in, at a time (_count_rows).
STREAM_ROWS = 64


async def _count_rows(cur: Any, sql: str) -> int:
    """Run a text probe and count its rows as they arrive, keeping none. A statement
    probe is ``SELECT *`` of up to STATEMENT_ROWS rows of whatever its table holds; read
    whole (fetchall), 256 rows of 1 MB each would be 256 MB in lagd for one probe, on a
    host whose largest process, the first the kernel's OOM killer picks, is the replica."""
    await cur.execute(sql)
    found = 0
    while rows := await cur.fetchmany(STREAM_ROWS):
        found += len(rows)
    return found


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # already gone
        log.debug("closing a probe connection failed", exc_info=True)
