"""The engine's in-time accounting, between two polls of the SQL thread's position."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine, _Trx
from lagd.prefetch.pool import Outcome


@dataclass
class StubPool:
    size: int = 4
    _on_done: Any = None


@dataclass
class Probe:
    rows: int = 16


def engine(clock: list[float], transactions: int = 20) -> PrefetchEngine:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    eng = PrefetchEngine(reader=None, monitor=None, pool=StubPool(), batcher=None,  # type: ignore[arg-type]
                         limits=limits, tuning=tuning, clock=lambda: clock[0])
    for seq in range(1, transactions + 1):  # transaction seq ends at offset 100 * seq of file 1
        t = _Trx(seq, 0.0, end=(1, 100 * seq), rows=1)
        eng._ahead.append(t)
        eng._by_seq[seq] = t
    eng._seq = transactions
    return eng


@pytest.mark.parametrize(("tag", "finished_at", "in_time"), [
    (3, 100.02, True),    # at the poll: the SQL thread had applied 2
    (4, 100.05, False),   # 30 ms later at 100 trx/s it is past 5
    (6, 100.05, True),
    (9, 100.10, False),   # 80 ms later: past 10
    (11, 100.10, True),
])
def test_a_probe_is_in_time_only_ahead_of_the_extrapolated_sql_thread(
    tag: int, finished_at: float, in_time: bool,
) -> None:
    clock = [100.0]
    eng = engine(clock)
    eng._advance_sql((1, 0), 100.0)
    clock[0] = 100.02
    eng._advance_sql((1, 200), 100.02)  # 2 transactions in 20 ms: 100 per second
    clock[0] = finished_at
    eng._on_done(Probe(), tag, Outcome("ok", 16, 0.01))
    assert (eng.counters.in_time, eng.counters.late) == ((1, 0) if in_time else (0, 1))


def test_without_a_rate_the_last_polled_position_decides() -> None:
    clock = [100.0]
    eng = engine(clock)
    eng._advance_sql((1, 300), 100.0)  # first poll: 3 applied, no rate yet
    clock[0] = 105.0
    eng._on_done(Probe(), 4, Outcome("ok", 16, 0.01))
    eng._on_done(Probe(), 3, Outcome("ok", 16, 0.01))
    assert (eng.counters.in_time, eng.counters.late) == (1, 1)
