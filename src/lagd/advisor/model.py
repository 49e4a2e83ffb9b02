"""How fast this replica really applies, learned from what it applied.

The caller reports applied work as it measures it, e.g. between two polls of
the SQL thread's position: so many relay-log bytes and rows applied in so
many seconds, on one table when the work touched only one. The model keeps
exponentially decayed sums of bytes, rows and seconds, overall and per
table, and the rate is their ratio: a time-weighted average, where a long
observation counts for more than a short one, and older apply time fades
with a half-life measured in seconds *of apply* (an idle replica keeps
what it learned).

A table's own rate is used once it has at least ``min_seconds`` of
observed apply and ``min_rows`` rows behind it (defaults: 5 s and 1,000
rows); below that, timing noise dominates and the overall rate is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lagd.advisor.lookahead import TransactionSummary

# How different the windows' rows per transaction must be before the two costs are told
# apart: 1 - cos² of the angle between the transactions and rows columns.
MIN_SPREAD = 0.05


@dataclass(frozen=True, slots=True)
class ApplyRate:
    """A learned rate and what it rests on (decayed amounts)."""

    bytes_per_second: float
    rows_per_second: float | None  # None with fewer than min_rows rows behind it
    seconds: float
    rows: float
    scope: str  # "table shop.orders" or "all tables"


@dataclass(slots=True)
class _Sums:
    bytes: float = 0.0
    rows: float = 0.0
    seconds: float = 0.0

    def add(self, nbytes: int, rows: int, seconds: float, half_life: float) -> None:
        keep = math.pow(0.5, seconds / half_life)
        self.bytes = self.bytes * keep + nbytes
        self.rows = self.rows * keep + rows
        self.seconds = self.seconds * keep + seconds


@dataclass(slots=True)
class _Fit:
    """Decayed sums for seconds ~ a * transactions + b * rows (least squares, no intercept)."""

    tt: float = 0.0
    tr: float = 0.0
    rr: float = 0.0
    ts: float = 0.0
    rs: float = 0.0
    seconds: float = 0.0

    def add(self, trx: int, rows: int, seconds: float, half_life: float) -> None:
        keep = math.pow(0.5, seconds / half_life)
        self.tt = self.tt * keep + trx * trx
        self.tr = self.tr * keep + trx * rows
        self.rr = self.rr * keep + rows * rows
        self.ts = self.ts * keep + trx * seconds
        self.rs = self.rs * keep + rows * seconds
        self.seconds = self.seconds * keep + seconds

    def solve(self, min_spread: float) -> tuple[float, float] | None:
        """(seconds per transaction, seconds per row), or None while the windows'
        mixes of rows per transaction are too alike to tell the two apart."""
        det = self.tt * self.rr - self.tr * self.tr
        if self.tt <= 0 or self.rr <= 0 or det <= min_spread * self.tt * self.rr:
            return None
        a = (self.ts * self.rr - self.rs * self.tr) / det
        b = (self.rs * self.tt - self.ts * self.tr) / det
        return (a, b) if a >= 0 and b > 0 else None


class ApplyRateModel:
    """Apply rates of one replica; see the module docstring."""

    def __init__(
        self,
        half_life_seconds: float = 300.0,
        min_seconds: float = 5.0,
        min_rows: int = 1000,
        max_tables: int = 1000,
    ) -> None:
        if half_life_seconds <= 0 or min_seconds <= 0 or min_rows < 0 or max_tables < 1:
            raise ValueError("half-life and minimum seconds must be > 0, min_rows >= 0, max_tables >= 1")
        self.half_life_seconds = half_life_seconds
        self.min_seconds = min_seconds
        self.min_rows = min_rows
        self.max_tables = max_tables
        self._all = _Sums()
        self._tables: dict[str, _Sums] = {}
        self._fit = _Fit()

    def observe(self, bytes: int, rows: int, seconds: float, table: str | None = None,
                transactions: int | None = None) -> None:
        """``bytes`` (relay-log bytes) and ``rows`` applied in ``seconds``;
        ``table`` when all of it was on that one table; ``transactions``: how
        many, when counted (windows with different rows per transaction tell
        the per-transaction cost from the per-row cost)."""
        if bytes < 0 or rows < 0 or seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"cannot observe {bytes} bytes, {rows} rows in {seconds} s")
        if seconds == 0:
            return  # nothing measured: a rate needs elapsed time
        self._all.add(bytes, rows, seconds, self.half_life_seconds)
        if transactions is not None and transactions > 0:
            self._fit.add(transactions, rows, seconds, self.half_life_seconds)
        if table is not None:
            self._table(table).add(bytes, rows, seconds, self.half_life_seconds)

    def observe_table(self, table: str, bytes: int, rows: int, seconds: float) -> None:
        """Like :meth:`observe` with ``table``, but into that table's rate only:
        for work timed on its own (one big transaction from start to end)
        whose bytes the overall rate already counts another way."""
        if bytes < 0 or rows < 0 or seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"cannot observe {bytes} bytes, {rows} rows in {seconds} s")
        if seconds > 0:
            self._table(table).add(bytes, rows, seconds, self.half_life_seconds)

    def _table(self, table: str) -> _Sums:
        sums = self._tables.get(table)
        if sums is None:
            if len(self._tables) >= self.max_tables:
                # Bounded: forget the table with the least apply time behind it.
                del self._tables[min(self._tables, key=lambda t: self._tables[t].seconds)]
            sums = self._tables[table] = _Sums()
        return sums

    def rate(self, table: str | None = None) -> ApplyRate | None:
        """The table's own rate when it has enough data behind it, else the
        overall rate; None before ``min_seconds`` of apply were observed."""
        if table is not None:
            own = self._tables.get(table)
            if own is not None and own.seconds >= self.min_seconds and own.rows >= self.min_rows:
                return self._rate(own, f"table {table}")
        return self._rate(self._all, "all tables") if self._all.seconds >= self.min_seconds else None

    def table_rates(self) -> dict[str, ApplyRate]:
        """The tables whose own rate :meth:`rate` would use, most observed first."""
        own = [(t, s) for t, s in self._tables.items()
               if s.seconds >= self.min_seconds and s.rows >= self.min_rows]
        own.sort(key=lambda ts: -ts[1].seconds)
        return {t: self._rate(s, f"table {t}") for t, s in own}

    def _rate(self, s: _Sums, scope: str) -> ApplyRate:
        rows = s.rows / s.seconds if s.rows >= self.min_rows else None
        return ApplyRate(s.bytes / s.seconds, rows, s.seconds, s.rows, scope)

    def costs(self) -> tuple[float, float] | None:
        """(seconds per transaction, seconds per row) fitted over windows with
        different mixes, once ``min_seconds`` of them were observed; None before,
        or while every window had about the same rows per transaction."""
        if self._fit.seconds < self.min_seconds:
            return None
        return self._fit.solve(MIN_SPREAD)

    def estimate_seconds(self, summary: TransactionSummary) -> tuple[float | None, str]:
        """How long ``summary`` will hold the SQL thread, and on what basis.

        Rows over rows/s when both are known (apply cost goes with rows:
        index lookups, locks, undo), else bytes over bytes/s. With no rate
        learned yet, a statement-based load is estimated by the source's own
        run time, since the replica re-runs the same statement.
        """
        rate = self.rate(summary.table)
        rows = summary.rows_estimate
        exec_note = (
            f"; the source ran it in {summary.source_exec_seconds} s"
            if summary.source_exec_seconds is not None else ""
        )
        costs = self.costs() if rate is not None and rate.scope == "all tables" else None
        if costs is not None and rows and summary.rows:
            # One transaction pays its commit once: the overall rows/s of small
            # transactions would charge it once per row.
            per_trx, per_row = costs
            return per_trx + rows * per_row, (
                f"{rows:,} rows at {1 / per_row:,.0f} rows/s plus {per_trx * 1000:,.1f} ms for the "
                f"transaction, the costs fitted over {_secs(self._fit.seconds)} of apply with "
                f"different rows per transaction{exec_note}")
        if rate is not None:
            what = "file lines" if summary.rows == 0 else "rows"
            if rows and rate.rows_per_second:
                return rows / rate.rows_per_second, (
                    f"{rows:,} {what} at {rate.rows_per_second:,.0f} rows/s, the apply rate learned "
                    f"for {rate.scope} over {_secs(rate.seconds)} of apply{exec_note}"
                )
            if rate.bytes_per_second > 0 and summary.size_bytes:
                return summary.size_bytes / rate.bytes_per_second, (
                    f"{summary.size_bytes:,} bytes at {rate.bytes_per_second:,.0f} bytes/s, the apply "
                    f"rate learned for {rate.scope} over {_secs(rate.seconds)} of apply{exec_note}"
                )
        learned = f"needs {self.min_seconds:g} s of observed apply"
        if summary.statement_based and summary.source_exec_seconds is not None:
            return float(summary.source_exec_seconds), (
                f"no apply rate learned yet ({learned}); the source ran this statement-based "
                f"{'load' if summary.load_data_bytes is not None else 'statement'} in "
                f"{summary.source_exec_seconds} s (whole seconds) and the replica re-runs it"
            )
        return None, (
            f"no apply rate learned yet ({learned}), and the log carries no source run time "
            "for row-based changes"
        )


def _secs(x: float) -> str:
    return f"{x:.1f} s" if x < 10 else f"{x:,.0f} s"


__all__ = ["ApplyRate", "ApplyRateModel"]
