"""The loader loop: wait for the replicas, send one chunk, commit it with its progress row, adapt.

Collaborators come in as arguments (the source connection, the replica
check, the clock), so the loop is tested with fakes of them and run for real
against the sandbox. The file is read once, forwards, one chunk at a time:
each chunk's records go to one reused temporary file that LOAD DATA LOCAL
sends to the server (the driver reads a named file), so memory holds at most
one block of the file.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lagd.advisor.split import SplitLimits
from lagd.load.planner import ChunkPlan, ReplicaRate, adapt, initial_chunk, resume_threshold
from lagd.load.reader import FileFacts, RecordReader, field_count
from lagd.load.replicas import ReplicaCheck
from lagd.load.sql import (
    LoadError,
    LoadSpec,
    Table,
    load_statement,
    progress_ddl,
    progress_insert,
    progress_select,
    progress_update,
)
from lagd.mysql.source import LOCAL_INFILE_FIX

__all__ = ["Loader", "Options", "Progress", "Source", "Tick"]

FRESH_WAIT = 3.0  # seconds to wait for a lagd reading newer than the last commit, at most
RATES_EVERY = 5.0  # seconds between asking the replicas' lagd for their learned apply rates again



class Source(Protocol):
    where: str

    def query(self, sql: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]: ...
    def execute(self, sql: str, args: Sequence[Any] | None = None) -> tuple[int, int]: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Options:
    budget: float = 5.0  # seconds of replica lag the load may cause
    headroom: float = 0.5  # share of the budget one chunk may take
    fixed_rows: int | None = None
    poll_interval: float = 0.5
    allow_warnings: bool = False
    tmpdir: str | None = None
    progress_table: Table = field(default_factory=lambda: Table("lagd", "load_progress"))


@dataclass(frozen=True, slots=True)
class Progress:
    offset: int
    records: int
    affected: int
    chunks: int
    done: bool


@dataclass(frozen=True, slots=True)
class Tick:
    """What the progress line shows, after a chunk or while waiting."""

    offset: int
    total_bytes: int
    records: int  # committed, all runs
    records_this_run: int
    bytes_this_run: int
    elapsed: float  # this run
    chunk_rows: int
    waiting: str | None  # why the next chunk waits, None while loading
    last_reason: str  # the chunk size's reason


def _max_lag(checks: Sequence[ReplicaCheck]) -> float | None:
    lags = [c.lag for c in checks if c.lag is not None]
    return max(lags) if lags else None


class Loader:
    def __init__(
        self,
        db: Source,
        spec: LoadSpec,
        path: Path,
        facts: FileFacts,
        options: Options,
        ask: Callable[[float], list[ReplicaCheck]] | None,
        rates: Sequence[ReplicaRate] = (),
        report: Callable[[Tick], None] = lambda _t: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
        bytes_per_row: float | None = None,
        refresh_rates: Callable[[], Sequence[ReplicaRate]] | None = None,
    ) -> None:
        self.db, self.spec, self.path, self.facts, self.o = db, spec, path, facts, options
        self.ask, self.rates, self.report, self.clock, self.sleep = ask, rates, report, clock, sleep
        self.bytes_per_row = bytes_per_row
        self.refresh_rates = refresh_rates
        self.wall = wall
        self.largest = 0  # rows in the largest chunk committed: the crash-recovery exposure
        self.committed: Progress | None = None  # as of the last commit of this run
        self._limits: SplitLimits | None = None
        self._rates_at = 0.0
        self.key = (facts.sha256, str(spec.table))
        self.lock_name = f"lagd.load:{facts.sha256[:32]}:{spec.table}"[:64]

    # --- before the first chunk --------------------------------------------------

    def check_source(self) -> list[str]:
        """local_infile on, the table and named columns exist, the first record's fields fit.

        Returns the table's columns. Raises LoadError with the fix.
        """
        row = self.db.query("SELECT @@GLOBAL.local_infile")
        if not row or not int(row[0][0] or 0):
            raise LoadError(f"{self.db.where}: local_infile is OFF, so LOAD DATA LOCAL is refused",
                            fix=LOCAL_INFILE_FIX)
        t = self.spec.table
        cols = [str(r[0]) for r in self.db.query(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION", (t.schema, t.name))]
        if not cols:
            raise LoadError(f"{self.db.where}: table {t} does not exist (or the account cannot see it)",
                            fix="create the table first, or name an existing one with --table schema.table")
        lower = {c.lower() for c in cols}
        named = [c.strip().strip("`") for c in self.spec.columns if not c.strip().startswith("@")]
        missing = [c for c in named if c.lower() not in lower]
        if missing:
            raise LoadError(f"{t} has no column {', '.join(missing)}",
                            fix=f"name columns of {t} in --columns ({', '.join(cols)}), "
                                "or @var to skip a field")
        self._check_fields(len(self.spec.columns) or len(cols), cols)
        return cols

    def _first_record(self) -> bytes | None:
        class Keep:
            data = b""

            def write(self, b: bytes) -> int:
                self.data += b
                return len(b)

        with self.path.open("rb") as f:
            r = RecordReader(f, self.spec.dialect, 0, block=1 << 16)
            r.take(self.spec.dialect.ignore_lines, None)
            keep = Keep()
            got, _ = r.take(1, keep)
        return keep.data[: -len(self.spec.dialect.lines_terminated)] if got else None

    def _check_fields(self, expected: int, cols: list[str]) -> None:
        rec = self._first_record()
        if rec is None:
            return
        n = field_count(rec, self.spec.dialect)
        if n != expected:
            into = (f"the {expected} entries of --columns" if self.spec.columns
                    else f"the {expected} columns of {self.spec.table} ({', '.join(cols)})")
            raise LoadError(
                f"{self.path.name}: the first record has {n} field{'s' if n != 1 else ''}, but it loads into "
                f"{into}",
                fix="list the file's fields in order with --columns (@name to drop one), or check "
                    "--fields-terminated-by / --format")

    def read_progress(self) -> Progress | None:
        rows = self.db.query(progress_select(self.o.progress_table), self.key)
        self.db.commit()  # end the read's snapshot: later reads see the later commits
        if not rows:
            return None
        off, rec, aff, chunks, done = rows[0]
        return Progress(int(off), int(rec), int(aff), int(chunks), bool(done))

    def prepare(self) -> Progress:
        """The lock, the progress table and this file's row in it; its state to resume from."""
        # A few seconds: a loader killed a moment ago holds it until the server notices.
        got = self.db.query("SELECT GET_LOCK(%s, 5)", (self.lock_name,))
        if not got or got[0][0] != 1:
            raise LoadError(f"another lagctl load is loading {self.path.name} into {self.spec.table} now",
                            fix="wait for it to finish, or stop it; a rerun then resumes where it stopped")
        for stmt in progress_ddl(self.o.progress_table):
            self.db.execute(stmt)
        self.db.execute(progress_insert(self.o.progress_table),
                        (*self.key, str(self.path)[-500:], self.facts.size))
        self.db.commit()
        p = self.read_progress()
        assert p is not None
        if p.offset > self.facts.size:
            raise LoadError(f"the progress row says byte {p.offset}, past the end of the file",
                            fix="rerun with --restart to load the file from its start")
        return p

    def plan(self) -> ChunkPlan:
        return initial_chunk(self.rates, self.o.budget, self.o.headroom, limits=self.limits(),
                             bytes_per_row=self.bytes_per_row, fixed_rows=self.o.fixed_rows)

    def limits(self) -> SplitLimits:
        """The source's binlog cache bounds a chunk: a transaction over it fails."""
        if self._limits is None:
            rows = self.db.query("SELECT @@GLOBAL.log_bin, @@GLOBAL.max_binlog_cache_size")
            self._limits = (SplitLimits(source_max_binlog_cache_size=int(rows[0][1]))
                            if rows and int(rows[0][0] or 0) and rows[0][1] is not None else SplitLimits())
        return self._limits

    def _next(self, plan: ChunkPlan, added: float | None, source_s: float | None) -> ChunkPlan:
        """The lag each chunk caused decides the next; the model over the replicas'
        latest learned rates caps it, so growth stops at what they apply in headroom x budget."""
        lagged = adapt(plan.rows, added, self.o.budget, self.o.headroom, source_seconds=source_s)
        if self.refresh_rates is not None and self.clock() - self._rates_at >= RATES_EVERY:
            self.rates, self._rates_at = list(self.refresh_rates()), self.clock()
        if not any(r.rows_per_second for r in self.rates):
            return lagged
        model = self.plan()
        return model if model.rows < lagged.rows else lagged

    # --- the loop ----------------------------------------------------------------

    def _apply_estimate(self, plan: ChunkPlan, source_s: float | None) -> float:
        """The last chunk's apply on the slowest replica: the model's, floored by its source time."""
        return max(plan.apply_seconds or 0.0, source_s or 0.0)

    def _held(self, c: ReplicaCheck, threshold: float, since: float | None, unseen: float,
              waited: float) -> str | None:
        """Why replica ``c`` holds the next chunk back, None when it does not.

        ``unseen``: the last chunk's apply time as estimated here (at least
        its source time), for a lagd that has not looked since it committed.
        """
        if not c.ok:
            return c.reason
        stale = since is not None and c.at is not None and c.at < since
        if stale and (c.lag or 0.0) + unseen > threshold and waited < FRESH_WAIT:
            # That chunk is invisible to its lagd yet, and it may be enough to matter.
            return "waiting for a reading taken after the last commit"
        if c.lag is not None and c.backlog_seconds and c.lag + c.backlog_seconds > threshold:
            return (f"lag {c.lag:.1f} s + {c.backlog_seconds:.1f} s of received transactions still to apply "
                    f"is over {threshold:g} s")
        return None

    def _wait(self, threshold: float, since: float | None, unseen: float,
              tick: Callable[[str | None], None]) -> tuple[float | None, float | None]:
        """Until every replica is within ``threshold``: (lag when released, peak lag seen).

        Lag counts what is received but not applied (at the learned apply
        rate), so a chunk the SQL thread has not reached yet is not mistaken
        for no lag.
        """
        if self.ask is None:
            return None, None
        peak: float | None = None
        start = self.clock()
        while True:
            checks = self.ask(threshold)
            ahead = [c.lag + (c.backlog_seconds or 0.0) for c in checks if c.lag is not None]
            lag = max(ahead) if ahead else None
            if lag is not None:
                peak = lag if peak is None else max(peak, lag)
            waited = self.clock() - start
            whys = [(c, self._held(c, threshold, since, unseen, waited)) for c in checks]
            held = [(c, why) for c, why in whys if why is not None]
            if not held:
                return lag, peak
            tick("; ".join(f"{c.url}: {why}" for c, why in held))
            self.sleep(self.o.poll_interval)

    def run(self, progress: Progress) -> Progress:
        spec, o = self.spec, self.o
        self._rates_at = self.clock()
        threshold = resume_threshold(o.budget, o.headroom)
        plan = self.plan()
        started = self.clock()
        done_run = 0
        p = progress

        def tick(waiting: str | None) -> None:
            self.report(Tick(p.offset, self.facts.size, p.records, done_run, p.offset - progress.offset,
                             self.clock() - started, plan.rows, waiting, plan.reason))

        with self.path.open("rb") as f, tempfile.NamedTemporaryFile(
                prefix="lagctl-load-", suffix=".chunk", dir=o.tmpdir) as tmp:
            reader = RecordReader(f, spec.dialect, p.offset)
            if p.offset == 0:
                reader.take(spec.dialect.ignore_lines, None)
            statement = load_statement(spec, tmp.name)
            released_at: float | None = None
            source_s: float | None = None
            committed_at: float | None = None
            while not reader.at_end():
                lag_then, peak = self._wait(threshold, committed_at, self._apply_estimate(plan, source_s),
                                            tick)
                if released_at is not None and o.fixed_rows is None:
                    added = None if peak is None else max(0.0, peak - released_at)
                    plan = self._next(plan, added, source_s)
                released_at = lag_then if lag_then is not None else 0.0
                tmp.seek(0)
                tmp.truncate()
                start_offset = reader.offset
                got, _ = reader.take(plan.rows, tmp)
                tmp.flush()
                if not got:
                    break
                t0 = self.clock()
                affected, warnings = self.db.execute(statement)
                if warnings and not o.allow_warnings:
                    shown = self.db.query("SHOW WARNINGS LIMIT 3")
                    self.db.rollback()
                    text = "; ".join(f"{w[2]} (code {w[1]})" for w in shown) or f"{warnings} warnings"
                    raise LoadError(f"a chunk from byte {start_offset} gave {warnings} warnings, so it was "
                                    f"rolled back: {text}",
                                    fix="fix the file or the --columns/--set options; --ignore or --replace "
                                        "for duplicate keys; --allow-warnings loads rows as the server "
                                        "adjusts them")
                done = reader.offset >= self.facts.size
                moved, _ = self.db.execute(progress_update(o.progress_table),
                                           (reader.offset, got, affected, int(done), *self.key, p.offset))
                if moved != 1:
                    self.db.rollback()
                    raise LoadError("the progress row moved under this load: another loader ran on this file",
                                    fix="run one lagctl load per file and table; rerun to resume")
                self.db.commit()
                committed_at = self.wall()
                source_s = self.clock() - t0
                done_run += got
                self.largest = max(self.largest, got)
                p = Progress(reader.offset, p.records + got, p.affected + affected, p.chunks + 1, done)
                self.committed = p
                tick(None)
        if not p.done:
            # The file ended on a record boundary the last chunk did not know was the last.
            self.db.execute(f"UPDATE {o.progress_table.quoted} SET done = 1 WHERE file_sha256 = %s "
                            "AND target = %s", self.key)
            self.db.commit()
            p = Progress(p.offset, p.records, p.affected, p.chunks, True)
        return p
