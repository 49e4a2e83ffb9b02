"""The fast gate: prefetch runs only while the SQL thread waits on reads and the CPU has room."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lagd.prefetch import control
from lagd.prefetch.control import Gate, StallWindow, stall_gate
from lagd.prefetch.engine import PrefetchEngine


def w(read: float, cpu: float = 0.3, queued: float = 0.0, headroom: float | None = 1.0,
      seconds: float = 1.0) -> StallWindow:
    return StallWindow(seconds, read, cpu, queued, headroom)


SHUT = Gate(False, "x", None, True)
OPEN = Gate(True, "x", 0.6, True)  # opened at 60% read waits, grace spent

CASES = [
    # (name, gate before, window, prefetching in the window, open after, words in the reason)
    ("unmeasured-defers", SHUT, None, False, True, "not measured"),
    ("too-little-measured-keeps", SHUT, w(0.9, seconds=0.1), False, False, "x"),
    ("reads-and-room-start", SHUT, w(0.71), False, True, "71% waiting on disk reads, 1.0 idle cores"),
    ("reads-unknown-headroom-start", SHUT, w(0.5, headroom=None), False, True, "50% waiting on disk reads"),
    ("reads-no-room-stay-shut", SHUT, w(0.71, headroom=0.2), False, False, "CPU is saturated"),
    ("cpu-bound-stay-shut", SHUT, w(0.05, cpu=0.88), False, False, "88% on CPU: CPU-bound"),
    ("other-waits-stay-shut", SHUT, w(0.1, cpu=0.3), False, False, "stall is not reads"),
    ("grace-window", Gate(True, "x", 0.6, True, grace=1), w(0.6), True, True, "x"),
    ("probes-lower-reads-keep", OPEN, w(0.3), True, True, "from 60% to 30%"),
    ("probes-do-not-lower-stop", OPEN, w(0.58), True, False, "did not lower"),
    ("saturated-stop-at-once", OPEN, w(0.3, headroom=0.1), True, False, "CPU is saturated"),
    ("sql-thread-queued-stop", OPEN, w(0.3, cpu=0.6, queued=0.3), True, False, "waits for a core 30%"),
    ("open-without-baseline-measures-one", Gate(True, "x", None, True), w(0.4), True, True, "40%"),
    ("open-but-not-probing-rebases", OPEN, w(0.4), False, True, "40% waiting on disk reads"),
]


@pytest.mark.parametrize(("before", "window", "prefetching", "open_", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_stall_gate(before: Gate, window: StallWindow | None, prefetching: bool, open_: bool,
                    words: str) -> None:
    after = stall_gate(before, window, prefetching=prefetching)
    assert after.open is open_
    assert words in after.reason


def test_after_probes_did_not_help_the_gate_holds_shut_then_measures_again() -> None:
    g = stall_gate(OPEN, w(0.6), prefetching=True)
    assert not g.open and g.hold == control.HOLD_WINDOWS
    for _ in range(control.HOLD_WINDOWS):
        g = stall_gate(g, w(0.7), prefetching=False)  # reads are high, but it just failed
        assert not g.open
    g = stall_gate(g, w(0.7), prefetching=False)
    assert g.open and g.baseline == 0.7 and g.grace == control.GRACE_WINDOWS


def test_saturation_while_probing_holds_the_gate_shut_a_few_seconds() -> None:
    g = stall_gate(OPEN, w(0.5, headroom=0.2), prefetching=True)
    assert not g.open and g.hold == control.SATURATED_HOLD
    shut_alone = stall_gate(SHUT, w(0.5, headroom=0.2), prefetching=False)
    assert not shut_alone.open and shut_alone.hold == 0  # measured without probes: judge again next second


def test_stall_window_shares() -> None:
    sw = control.stall_window({"on_cpu": 0.2, "cpu_wait": 0.1, "disk_read": 0.6, "other_wait": 0.1}, 1.5)
    assert sw == StallWindow(pytest.approx(1.0), pytest.approx(0.6), pytest.approx(0.3),  # type: ignore[arg-type]
                             pytest.approx(0.1), 1.5)  # type: ignore[arg-type]
    assert control.stall_window({"on_cpu": 0.0}, None) is None


# ----- the engine applies it --------------------------------------------------------------

class FakeStall:
    """Stands in for stall.StallMonitor: cumulative seconds set by the test."""

    def __init__(self, threads: tuple[int, ...] = (7,)) -> None:
        self.threads = threads
        self.seconds = dict.fromkeys(("on_cpu", "cpu_wait", "disk_read", "flush_wait", "other_wait"), 0.0)
        self.headroom: float | None = 1.0

    def totals(self) -> dict[str, float]:
        return dict(self.seconds)

    def add(self, **kw: float) -> None:
        for k, v in kw.items():
            self.seconds[k] += v


class FakePool:
    size = 4
    _on_done = None
    dropped = 0

    def drop_queued(self) -> int:
        self.dropped += 1
        return 0


def engine_with(fake: FakeStall) -> tuple[PrefetchEngine, FakePool]:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    pool = FakePool()
    eng = PrefetchEngine(None, None, pool, None, limits, tuning,  # type: ignore[arg-type]
                         stall_monitor=fake)  # type: ignore[arg-type]
    eng.state = "active"
    return eng, pool


def test_the_engine_opens_on_reads_and_shuts_when_cpu_bound() -> None:
    fake = FakeStall()
    eng, pool = engine_with(fake)
    eng._gate_check()  # first reading: nothing to compare yet
    assert eng.gate_state.open  # unmeasured: the slow comparison decides
    fake.add(on_cpu=0.3, disk_read=0.7)
    eng._gate_check()
    assert eng.gate_state.open and "70% waiting on disk reads" in eng.gate_state.reason
    fake.headroom = 0.1
    fake.add(on_cpu=0.7, disk_read=0.3)
    eng._gate_check()
    assert not eng.gate_state.open and not eng._enabled
    assert pool.dropped == 1


def test_without_visible_threads_the_gate_stays_open() -> None:
    fake = FakeStall(threads=())
    eng, _ = engine_with(fake)
    for _ in range(3):
        fake.add(on_cpu=1.0)
        eng._gate_check()
    assert eng.gate_state == control.UNMEASURED


class FakeMonitor:
    """MySQL: PROCESSLIST has no TID column, performance_schema answers."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def query(self, sql: str) -> list[dict[str, object]]:
        self.asked.append(sql)
        if "PROCESSLIST" in sql:
            raise RuntimeError("(1054, \"Unknown column 'TID' in 'field list'\")")
        return [{"tid": 41, "role": "thread/sql/replica_sql"}, {"tid": 40, "role": "thread/sql/replica_io"}]


def test_applier_threads_are_found_through_the_flavor_that_answers() -> None:
    eng, _ = engine_with(FakeStall())
    mon = FakeMonitor()
    eng.monitor = mon  # type: ignore[assignment]
    eng._sample = SimpleNamespace(status=SimpleNamespace(sql_running=True))  # type: ignore[assignment]
    assert asyncio.run(eng._appliers()) == (41,)
    assert asyncio.run(eng._appliers()) == (41,)
    assert [("PROCESSLIST" in q) for q in mon.asked] == [True, False, False]  # the MySQL way, remembered
    eng._sample = SimpleNamespace(status=SimpleNamespace(sql_running=False))  # type: ignore[assignment]
    assert asyncio.run(eng._appliers()) == ()
