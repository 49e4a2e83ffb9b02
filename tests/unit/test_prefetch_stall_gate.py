"""The fast gate: prefetch runs only while the SQL thread waits on reads and the CPU has room."""

from __future__ import annotations

import pytest

from lagd.prefetch import control
from lagd.prefetch.control import Gate, StallWindow, stall_gate


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


def test_stall_window_shares() -> None:
    sw = control.stall_window({"on_cpu": 0.2, "cpu_wait": 0.1, "disk_read": 0.6, "other_wait": 0.1}, 1.5)
    assert sw == StallWindow(pytest.approx(1.0), pytest.approx(0.6), pytest.approx(0.3),  # type: ignore[arg-type]
                             pytest.approx(0.1), 1.5)  # type: ignore[arg-type]
    assert control.stall_window({"on_cpu": 0.0}, None) is None
