"""How many rows per transaction, and when to send the next one: pure decisions with reasons.

The chunk is the advisor's (lagd.advisor.split): what the slowest replica
applies in a share of the lag budget,

    C = a x L x r_apply        (a = headroom, L = lag budget, r = rows/s)

capped by the hard limits a transaction must respect (SplitLimits). The
next chunk goes out only when every replica's lag is at most
``L x (1 - a)``: the chunk then adds about ``a x L`` of apply time, so the
lag stays under L.

r_apply comes from each replica's lagd (its learned apply rate). When no
lagd has learned one yet, the first chunk is a small probe, and the next
sizes come from the lag each chunk was seen to cause: the chunk is scaled by
target / observed (at most x2 up, at most /4 down per step), which keeps a
chunk's apply near ``a x L`` whatever the rate estimate said.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lagd.advisor.split import SplitLimits

__all__ = ["ChunkPlan", "ReplicaRate", "adapt", "initial_chunk", "resume_threshold"]

PROBE_ROWS = 1_000
MIN_ROWS = 100
MAX_ROWS = 5_000_000
GROW_AT_MOST = 2.0
SHRINK_AT_MOST = 0.25


@dataclass(frozen=True, slots=True)
class ReplicaRate:
    """One replica's apply rate as its lagd reports it (None: not learned yet)."""

    name: str  # the lagd URL
    rows_per_second: float | None
    scope: str = ""  # "table shop.orders" or "all tables"


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    rows: int
    reason: str
    apply_seconds: float | None  # one chunk's expected apply on the slowest replica


def _round_down(n: float) -> int:
    # Two significant digits, as the advisor's advice prints them.
    if n < 100:
        return max(1, int(n))
    scale = 10 ** (int(math.log10(n)) - 1)
    return int(n // scale * scale)


def _clamp(rows: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, _round_down(rows)))


def resume_threshold(budget: float, headroom: float) -> float:
    """Lag every replica must be at or under before the next chunk is sent."""
    return budget * (1.0 - headroom) if headroom < 1 else budget * 0.1


def _limit_rows(limits: SplitLimits, bytes_per_row: float | None) -> tuple[int, str] | None:
    if not bytes_per_row:
        return None
    hard = [(b, name) for name, b, _ in limits.bounds()]
    if not hard:
        return None
    b, name = min(hard)
    return int(b / bytes_per_row), name


def initial_chunk(
    rates: Sequence[ReplicaRate],
    budget: float,
    headroom: float,
    *,
    limits: SplitLimits | None = None,
    bytes_per_row: float | None = None,
    fixed_rows: int | None = None,
) -> ChunkPlan:
    """The first chunk: the user's fixed size, else the model over the slowest known rate, else a probe."""
    cap = _limit_rows(limits or SplitLimits(), bytes_per_row)
    hi = min(MAX_ROWS, cap[0]) if cap else MAX_ROWS
    capped = f"; capped by {cap[1]}" if cap and cap[0] < MAX_ROWS else ""
    if fixed_rows is not None:
        rows = max(1, min(fixed_rows, hi))
        note = capped if rows < fixed_rows else ""
        return ChunkPlan(rows, f"{rows:,} rows as given by --chunk-rows{note}", None)
    known = [r for r in rates if r.rows_per_second]
    if not known:
        rows = min(PROBE_ROWS, hi)
        why = "no replica's lagd has learned an apply rate yet" if rates else "no --replica-lagd to ask"
        return ChunkPlan(rows, f"a probe of {rows:,} rows: {why}; later chunks follow the lag they cause",
                         None)
    slow = min(known, key=lambda r: r.rows_per_second or math.inf)
    rps = slow.rows_per_second or 0.0
    rows = _clamp(headroom * budget * rps, MIN_ROWS, hi)
    return ChunkPlan(rows, f"{headroom:g} x {budget:g} s at {rps:,.0f} rows/s, the apply rate of {slow.name} "
                     f"({slow.scope or 'all tables'}), the slowest replica{capped}", rows / rps)


def adapt(
    rows: int,
    observed_lag: float | None,
    budget: float,
    headroom: float,
    *,
    source_seconds: float | None = None,
    hi: int = MAX_ROWS,
) -> ChunkPlan:
    """The next chunk from the last one's ``rows`` and the lag it was seen to add.

    The chunk's source run time is a floor under what it costs the replica:
    a single applier is rarely much faster than the source that ran the same
    rows, and the lag a chunk adds shows up late (binlog transfer, lagd's
    poll), so a chunk that merely looked cheap is not grown past what the
    source took a^L to write. Nothing measured at all: grow.
    """
    target = headroom * budget
    seen, what = observed_lag, "added lag"
    if source_seconds is not None and source_seconds > 0 and (seen is None or source_seconds > seen):
        seen, what = source_seconds, "source time"
    if seen is None or seen <= 0:
        new = _clamp(rows * GROW_AT_MOST, MIN_ROWS, hi)
        return ChunkPlan(new, f"no lag seen after {rows:,} rows: grow to {new:,}", None)
    factor = max(SHRINK_AT_MOST, min(GROW_AT_MOST, target / seen))
    new = _clamp(rows * factor, MIN_ROWS, hi)
    return ChunkPlan(new, f"{rows:,} rows gave {what} {seen:.1f} s against a target of {target:.1f} s: "
                     f"{new:,} rows next", seen * new / rows)
