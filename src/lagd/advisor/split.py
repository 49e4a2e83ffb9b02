"""How to commit a big transaction in chunks so the replica lags at most the budget.

The chunk is what the replica applies in a share of the lag budget:

    C = a x L x r_apply        (rows and bytes; a = headroom, L = lag budget)

clamped below the hard limits a chunk must respect: max_binlog_cache_size
on the source (and on a replica that logs what it applies),
group_replication_transaction_size_limit, and a share of the redo capacity.
A chunk the replica applies in t_apply = C / r_apply while the source
writes it in t_source = C / r_source leaves lag at about t_apply only if
the source pauses ``max(0, t_apply - t_source)`` between chunks; otherwise
the backlog grows by that much per chunk. docs/advisor.md works an example.

The transaction seen in the relay log has already committed on the source:
this advice is for the rest of an import, or its next run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lagd.advisor.lookahead import TransactionSummary, TxKind, load_data_target
from lagd.advisor.model import ApplyRateModel
from lagd.advisor.settings import SQL_LOG_BIN_NOTE, AdvisorError, ServerSettings


@dataclass(frozen=True, slots=True)
class SplitLimits:
    """Hard limits on one chunk's size in bytes (None: no such limit).

    ``redo_share`` of the redo capacity is a heuristic, not a server limit:
    redo written for row changes is of the order of the row-event bytes, and
    a chunk that fills the redo forces checkpoints while it runs.
    """

    source_max_binlog_cache_size: int | None = None
    replica_max_binlog_cache_size: int | None = None  # only when the replica logs what it applies
    group_replication_transaction_size_limit: int | None = None  # 0 or None: no limit
    redo_capacity_bytes: int | None = None
    redo_share: float = 0.25

    @classmethod
    def from_settings(
        cls, source: ServerSettings | None = None, replica: ServerSettings | None = None,
        redo_share: float = 0.25,
    ) -> SplitLimits:
        src_cache = source.int_var("max_binlog_cache_size") if source and source.writes_binlog else None
        rep_cache = (replica.int_var("max_binlog_cache_size")
                     if replica and replica.logs_replica_updates else None)
        gr = source.int_var("group_replication_transaction_size_limit") if source else None
        redo = [c for c in (s.redo_capacity[0] for s in (source, replica) if s is not None) if c]
        return cls(src_cache, rep_cache, gr or None, min(redo) if redo else None, redo_share)

    def bounds(self) -> list[tuple[str, int, bool]]:
        """(name, bytes, hard): a transaction over a hard bound fails; the
        redo share is advice."""
        out = []
        if self.source_max_binlog_cache_size:
            out.append(("max_binlog_cache_size on the source", self.source_max_binlog_cache_size, True))
        if self.replica_max_binlog_cache_size:
            out.append(("max_binlog_cache_size on the replica", self.replica_max_binlog_cache_size, True))
        if self.group_replication_transaction_size_limit:
            out.append(("group_replication_transaction_size_limit",
                        self.group_replication_transaction_size_limit, True))
        if self.redo_capacity_bytes:
            out.append((f"{self.redo_share:.0%} of the redo capacity",
                        int(self.redo_capacity_bytes * self.redo_share), False))
        return out


@dataclass(frozen=True, slots=True)
class SplitAdvice:
    """The verdict for one big transaction. Seconds and bytes throughout;
    None where the inputs do not allow a number."""

    needed: bool | None  # None: no apply rate and no limit says either way
    kind: TxKind
    chunk_rows: int | None
    chunk_bytes: int | None
    chunks: int | None
    bound: str | None  # what decided the chunk size
    apply_seconds: float | None  # the whole transaction on this replica
    chunk_apply_seconds: float | None
    pause_seconds: float | None  # between chunks, on the source
    worst_lag_without_split: float | None
    worst_lag_with_split: float | None  # chunked, with the pause
    worst_lag_split_no_pause: float | None
    commands: tuple[str, ...]
    reason: str
    text: str


def _round_down(n: float) -> int:
    """Two significant digits, down: 123,456 rows -> 120,000."""
    if n < 100:
        return max(1, int(n))
    scale = 10 ** (int(math.log10(n)) - 1)
    return int(n // scale * scale)


def _secs(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:,.1f} s" if x < 100 else f"{x:,.0f} s"


def _bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / (1024 * 1024):,.1f} MiB" if n >= 1024 * 1024 else f"{n:,.0f} bytes"


def split_advice(
    summary: TransactionSummary,
    model: ApplyRateModel,
    limits: SplitLimits,
    lag_budget: float,
    headroom: float = 0.5,
    *,
    source_rows_per_second: float | None = None,
) -> SplitAdvice:
    """Chunk size, pause and expected lag for ``summary``; see the module docstring.

    ``lag_budget`` is seconds of lag the replica may reach; ``headroom`` the
    share of it one chunk may take. ``source_rows_per_second`` is how fast
    the source writes the load; for a statement-based load it is read from
    the source's run time when not given.
    """
    if not lag_budget > 0:
        raise AdvisorError(f"lag budget {lag_budget} s is not positive",
                           fix="set the lag budget to the seconds of lag the replica may reach, e.g. 30")
    if not 0 < headroom <= 1:
        raise AdvisorError(f"headroom {headroom} is outside (0, 1]",
                           fix="set headroom to the share of the lag budget one chunk may use, e.g. 0.5")
    rows = summary.rows_estimate
    bpr = summary.bytes_per_row
    apply_s, basis = model.estimate_seconds(summary)
    rate = model.rate(summary.table)
    rows_ps = rate.rows_per_second if rate else None
    bytes_ps = rate.bytes_per_second if rate else None
    exec_s = summary.source_exec_seconds
    if rate is None and summary.statement_based and exec_s:
        rows_ps = rows / exec_s if rows else None
        bytes_ps = summary.size_bytes / exec_s
    if source_rows_per_second is None and summary.statement_based and exec_s and rows:
        source_rows_per_second = rows / exec_s

    # The chunk the lag budget allows, in bytes (rows follow via bytes/row).
    target = headroom * lag_budget
    candidates: list[tuple[str, float]] = []
    if rows_ps and bpr:
        candidates.append((f"lag budget ({headroom:g} x {lag_budget:g} s at {rows_ps:,.0f} rows/s)",
                           target * rows_ps * bpr))
    elif bytes_ps:
        candidates.append((f"lag budget ({headroom:g} x {lag_budget:g} s at {bytes_ps:,.0f} bytes/s)",
                           target * bytes_ps))
    bounds = limits.bounds()
    candidates += [(name, float(b)) for name, b, _ in bounds]
    must = [name for name, b, hard in bounds if hard and b < summary.size_bytes]

    if apply_s is not None and apply_s <= lag_budget and not must:
        reason = (f"it holds the SQL thread about {_secs(apply_s)}, within the lag budget of "
                  f"{_secs(lag_budget)} ({basis})")
        return SplitAdvice(False, summary.kind, None, None, None, None, apply_s, None, None, apply_s,
                           None, None, (), reason, f"{summary.describe()}\nNo split needed: {reason}.")

    bound, chunk_b = min(candidates, key=lambda c: c[1]) if candidates else (None, None)
    chunk_rows = _round_down(chunk_b / bpr) if chunk_b is not None and bpr else None
    if chunk_rows is not None and bpr:
        chunk_b = chunk_rows * bpr
    chunks = math.ceil(rows / chunk_rows) if chunk_rows and rows else (
        math.ceil(summary.size_bytes / chunk_b) if chunk_b else None)

    t_chunk = None
    if chunk_rows and rows_ps:
        t_chunk = chunk_rows / rows_ps
    elif chunk_b and bytes_ps:
        t_chunk = chunk_b / bytes_ps
    t_src = chunk_rows / source_rows_per_second if chunk_rows and source_rows_per_second else None
    pause = None if t_chunk is None else max(0.0, t_chunk - (t_src or 0.0))
    no_pause = None
    if t_chunk is not None and chunks:
        if t_src is None:
            no_pause = apply_s  # a source at least as fast as the replica: the backlog is the whole load
        elif t_src >= t_chunk:
            no_pause = t_chunk
        else:
            no_pause = t_src + chunks * (t_chunk - t_src)

    if must:
        needed: bool | None = True
        why = f"the transaction ({_bytes(summary.size_bytes)}) exceeds {', '.join(must)}"
    elif apply_s is not None:
        needed = True
        why = f"it holds the SQL thread about {_secs(apply_s)}, over the lag budget of {_secs(lag_budget)}"
    else:
        needed = None
        why = "no apply rate learned yet, so its apply time is unknown"
    reason = f"{why} ({basis})" if apply_s is not None else why
    if bound is not None:
        reason += f"; the chunk size is set by {bound}"

    # One chunk holds it all: chunking commands would only repeat the load.
    commands = _commands(summary, chunk_rows, chunk_b, pause, rows_ps) if chunks != 1 else ()
    text = _text(summary, needed, reason, chunk_rows, chunk_b, chunks, t_chunk, pause, t_src,
                 apply_s, no_pause, commands)
    return SplitAdvice(needed, summary.kind, chunk_rows, int(chunk_b) if chunk_b else None, chunks, bound,
                       apply_s, t_chunk, pause, apply_s, t_chunk if pause is not None else None, no_pause,
                       commands, reason, text)


_NO_PAUSE = ("pause between chunks as long as the replica takes to apply one: lagd gives that pause "
             "once it has measured this replica's apply rate")


def _commands(summary: TransactionSummary, chunk_rows: int | None, chunk_b: float | None,
              pause: float | None, rows_ps: float | None) -> tuple[str, ...]:
    """Commands for the kind; every number in them is a value lagd has (an
    unknown pause leaves the sleep out and says so, never a placeholder).
    The <...> left are the user's own: their condition, their file options."""
    if not chunk_rows:
        return ()
    table = summary.table or "<table>"
    key = f"`{summary.key_columns[0]}`" if summary.key_columns else "<primary key>"
    text = summary.statement or ""
    then = f"sleep {pause:.1f} s; repeat" if pause is not None else f"repeat ({_NO_PAUSE})"
    if summary.kind is TxKind.LOAD_DATA:
        path, target = load_data_target(text, summary.default_schema)
        path = path or "<file>"
        target = target or summary.table or "<schema>.<table>"
        schema, _, tbl = target.partition(".")
        file_bpr = (summary.load_data_bytes / summary.load_data_lines
                    if summary.load_data_bytes and summary.load_data_lines else summary.bytes_per_row)
        approx = ("" if summary.load_data_lines
                  else "  // file bytes per row approximated by its row-event bytes")
        sleep = f"  sleep {pause:.1f}\n" if pause is not None else f"  # {_NO_PAUSE}\n"
        out = [
            f"FIFO=\"$PWD/lagd-chunks.fifo\"\n"
            f"pt-fifo-split --fifo \"$FIFO\" --lines {chunk_rows} '{path}' &\n"
            f"until [ -p \"$FIFO\" ]; do sleep 0.1; done\n"
            f"while [ -e \"$FIFO\" ]; do\n"
            f"  mysql --local-infile=1 -e \"LOAD DATA LOCAL INFILE '$FIFO' "
            f"INTO TABLE \\`{schema}\\`.\\`{tbl}\\` <your FIELDS/LINES options>\" || break\n"
            f"{sleep}"
            f"done"
        ]
        if file_bpr:
            rate = f", maxRate: \"{int(rows_ps * file_bpr)}\"" if rows_ps else ""
            out.append(f"// MySQL Shell (MySQL servers), one LOAD DATA transaction per chunk:\n"
                       f"util.importTable(\"{path}\", {{schema: \"{schema}\", table: \"{tbl}\", threads: 1, "
                       f"bytesPerChunk: \"{int(chunk_rows * file_bpr)}\"{rate}}}){approx}")
        return tuple(out)
    if summary.kind is TxKind.INSERT_SELECT:
        apart = f", {pause:.1f} s apart" if pause is not None else f"; {_NO_PAUSE}"
        return (f"-- one key range per statement, each its own transaction (autocommit){apart}:\n"
                f"INSERT INTO {table} SELECT ... FROM <source table> WHERE <source key> >= @lo "
                f"AND <source key> < @lo + {chunk_rows};  -- then SET @lo = @lo + {chunk_rows}",)
    if summary.kind is TxKind.BULK_UPDATE:
        return (f"UPDATE {table} SET ... WHERE <your condition> AND {key} >= @lo AND {key} < @lo + "
                f"{chunk_rows};  -- autocommit; SET @lo = @lo + {chunk_rows}; {then}",)
    if summary.kind is TxKind.BULK_DELETE:
        db, _, tbl = table.partition(".")
        archiver_sleep = f" --sleep {max(1, math.ceil(pause))}" if pause is not None else ""
        return (f"DELETE FROM {table} WHERE <your condition> ORDER BY {key} LIMIT {chunk_rows};  "
                f"-- autocommit; {then} until it deletes 0 rows",
                f"pt-archiver --source D={db},t={tbl or '<table>'} --purge --where '<your condition>' "
                f"--limit {chunk_rows} --commit-each{archiver_sleep}")
    apart = f", {pause:.1f} s apart," if pause is not None else ""
    tail = "" if pause is not None else f"; {_NO_PAUSE}"
    return (f"Commit every {chunk_rows:,} rows (about {_bytes(chunk_b)}){apart} instead of "
            f"once at the end{tail}.",)


def _worst_lag(apply_s: float | None, t_chunk: float | None, no_pause: float | None) -> str:
    """The worst-lag sentence from the values known; never a list of unknowns."""
    parts = [f"{_secs(v)} {what}" for v, what in (
        (apply_s, "without a split"), (t_chunk, "split with the pause"), (no_pause, "split without it"))
        if v is not None]
    if not parts:
        return "Worst lag: not known until lagd has measured how fast this replica applies."
    missing = "" if len(parts) == 3 else " (the rest needs this replica's measured apply rate)"
    return f"Worst lag: {'; '.join(parts)}{missing}."


def _text(summary: TransactionSummary, needed: bool | None, reason: str, chunk_rows: int | None,
          chunk_b: float | None, chunks: int | None, t_chunk: float | None, pause: float | None,
          t_src: float | None, apply_s: float | None, no_pause: float | None,
          commands: tuple[str, ...]) -> str:
    lines = [summary.describe()]
    verdict = {True: "Split it", False: "No split needed", None: "Split advice incomplete"}[needed]
    lines.append(f"{verdict}: {reason}.")
    if chunk_rows or chunk_b:
        size = (f"{chunk_rows:,} rows (about {_bytes(chunk_b)})" if chunk_rows and chunk_b
                else f"{chunk_rows:,} rows" if chunk_rows else f"about {_bytes(chunk_b)}")
        lines.append(f"Chunk: {size} per transaction"
                     + (f", {chunks:,} chunks" if chunks and chunks > 1 else
                        ": one chunk holds the whole transaction" if chunks == 1 else "") + ".")
    if pause is not None and t_chunk is not None:
        src = (f"the source writes a chunk in {_secs(t_src)}" if t_src is not None
               else "the source's rate is unknown, so the pause is a whole chunk's apply time")
        lines.append(f"Pause {_secs(pause)} between chunks: the replica applies a chunk in "
                     f"{_secs(t_chunk)} and {src}.")
    lines.append(_worst_lag(apply_s, t_chunk, no_pause))
    lines.extend(commands)
    if summary.kind is TxKind.LOAD_DATA:
        lines.append(SQL_LOG_BIN_NOTE)
    return "\n".join(lines)


__all__ = ["SplitAdvice", "SplitLimits", "split_advice"]
