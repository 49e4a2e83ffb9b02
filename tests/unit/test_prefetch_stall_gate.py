"""The fast gate: prefetch runs only while the SQL thread waits on reads and the CPU has room."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from test_inserts import SBTEST

from lagd.prefetch import control, stall
from lagd.prefetch import engine as engine_module
from lagd.prefetch.control import Gate, StallWindow, stall_gate
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import RelayPosition, Statement


def w(read: float, cpu: float = 0.3, queued: float = 0.0, headroom: float | None = 1.0,
      seconds: float = 1.0, rate: float = 1000.0) -> StallWindow:
    """A second of the SQL thread's time and progress: ``rate`` KiB of relay log applied."""
    return StallWindow(seconds, read, cpu, queued, headroom, 1.0, int(rate * 1024))


SHUT = Gate(False, "x", None, True)
MEASURING = Gate(False, "x", None, True, base=(1.0, 1000 * 1024))  # a second of the SQL thread alone so far
# Opened at 60% read waits and 1,000 rows/s, grace spent.
OPEN = Gate(True, "x", 0.6, True, rate_before=1000.0 * 1024)
HALF_JUDGED = replace(OPEN, judged=(1.0, 1000 * 1024))
# A try opened after a first compare that gained 1.45x (control.SHOWN): 1.2x or more now
# shows it pays (the tests of what else judges a paying try start from here).
COMPARED = (1.45,)

CASES = [
    # (name, gate before, window, prefetching in the window, open after, words in the reason)
    ("unmeasured-defers", SHUT, None, False, True, "not measured"),
    ("too-little-measured-keeps", SHUT, w(0.9, seconds=0.1), False, False, "x"),
    ("reads-first-second-measures-the-rate", SHUT, w(0.71), False, False, "measuring its apply rate"),
    ("reads-and-room-start", MEASURING, w(0.71), False, True, "71% waiting on disk reads, 1.0 idle cores"),
    ("reads-unknown-headroom-start", MEASURING, w(0.5, headroom=None), False, True,
     "50% waiting on disk reads"),
    ("reads-no-room-stay-shut", MEASURING, w(0.71, headroom=0.2), False, False, "CPU is saturated"),
    ("cpu-bound-stay-shut", MEASURING, w(0.05, cpu=0.88), False, False, "88% on CPU: CPU-bound"),
    ("other-waits-stay-shut", SHUT, w(0.1, cpu=0.3), False, False, "stall is not reads"),
    ("grace-window", Gate(True, "x", 0.6, True, grace=1, rate_before=1000.0 * 1024), w(0.6), True, True, "x"),
    ("one-second-is-not-judged", OPEN, w(0.3, rate=900), True, True, "x"),
    ("one-second-far-slower-is", OPEN, w(0.3, rate=800), True, False,
     "probes slowed the SQL thread down (applied 1,000 KiB/s of relay log before, 800 KiB/s"),
    ("two-seconds-slower-hold-longer", HALF_JUDGED, w(0.3, rate=600), True, False,
     f"backing off for {control.SLOWED_HOLD * control.HOLD_WINDOWS} s"),
    ("slower-beyond-the-margin-holds-longer", HALF_JUDGED, w(0.3, rate=880), True, False,
     f"slowed the SQL thread down (applied 1,000 KiB/s of relay log before, 940 KiB/s of relay log"
     f" with probes; reads 60% of its time before, 30% now): backing off for"
     f" {control.SLOWED_HOLD * control.HOLD_WINDOWS} s"),
    ("slower-within-the-margin-did-not-pay", HALF_JUDGED, w(0.3, rate=960), True, False,
     f"did not speed the SQL thread up (applied 1,000 KiB/s of relay log before, 980 KiB/s of relay"
     f" log with probes; reads 60% of its time before, 30% now): backing off for {control.HOLD_WINDOWS} s"),
    ("as-fast-is-not-slower", HALF_JUDGED, w(0.3, rate=1000), True, False,
     f"did not speed the SQL thread up (applied 1,000 KiB/s of relay log before, 1,000 KiB/s of relay"
     f" log with probes; reads 60% of its time before, 30% now): backing off for {control.HOLD_WINDOWS} s"),
    # 1.2x at a first compare: within what the SQL thread alone varies (control.SHOWN).
    ("faster-compare-again", HALF_JUDGED, w(0.3, rate=1400), True, False,
     "probes sped the SQL thread up (applied 1,000 KiB/s of relay log before, 1,200 KiB/s of relay log"
     " with probes; reads 60% of its time before, 30% now): 1.20x over 1 compare, 1.50x needed where the"
     " SQL thread alone varies this much; measuring it alone again to compare"),
    ("faster-beyond-its-unevenness-keep", HALF_JUDGED, w(0.3, rate=2200), True, True,
     "applied 1,000 KiB/s of relay log before, 1,600 KiB/s of relay log with probes"),
    ("faster-again-keep", replace(HALF_JUDGED, gains=COMPARED), w(0.3, rate=1400), True, True,
     "1,200 KiB/s of relay log with probes; reads 60% of its time before, 30% now): 1.31x over 2 compares,"
     " 1.30x needed"),
    ("faster-again-not-enough-compare-again", replace(HALF_JUDGED, gains=(1.2,)), w(0.3, rate=1400), True,
     False, "1.20x over 2 compares, 1.30x needed where the SQL thread alone varies this much; measuring"),
    ("not-faster-in-a-run-of-compares-compare-again", replace(HALF_JUDGED, gains=(1.3, 1.2)),
     w(0.3, rate=1000), True, False, "did not speed the SQL thread up (applied 1,000 KiB/s of relay log"
     " before, 1,000 KiB/s of relay log with probes; reads 60% of its time before, 30% now): 1.15x over 3"
     " compares, 1.20x needed where the SQL thread alone varies this much; measuring it alone again"),
    ("not-shown-after-four-compares-stop", replace(HALF_JUDGED, gains=(1.05, 1.1, 1.1)), w(0.3, rate=1400),
     True, False, "did not speed the SQL thread up beyond its own unevenness (applied 1,000 KiB/s of"
     " relay log before, 1,200 KiB/s of relay log with probes; reads 60% of its time before, 30% now):"
     f" 1.11x over 4 compares, 1.12x needed where the SQL thread alone varies this much: backing off for"
     f" {control.HOLD_WINDOWS} s"),
    ("faster-with-less-cpu-keep", replace(HALF_JUDGED, gains=COMPARED), w(0.1, cpu=0.2, rate=1400), True,
     True, "speed the SQL"),
    ("reads-fall-but-not-faster-stop", HALF_JUDGED, w(0.3, rate=1000), True, False, "did not speed"),
    ("probes-do-not-lower-stop", HALF_JUDGED, w(0.58, rate=900), True, False, "reads 60% of its time before"),
    ("saturated-while-probing-is-judged-by-its-effect", replace(HALF_JUDGED, gains=COMPARED),
     w(0.2, cpu=0.6, headroom=0.1, rate=1500), True, True, "speed the SQL thread up"),
    ("sql-thread-queued-stop", OPEN, w(0.2, cpu=0.8, queued=0.5), True, False, "waits for a core 50%"),
    ("sql-thread-queued-some-is-judged", HALF_JUDGED, w(0.2, cpu=0.6, queued=0.3, rate=800), True, False,
     "1,000 KiB/s of relay log before, 900 KiB/s"),
    ("open-without-baseline-measures", Gate(True, "x", None, True), w(0.4), True, False, "measuring"),
    # A try that has paid (since_base > 0) is stopped by four seconds that do not, not two.
    ("paid-two-seconds-under-judge-on", replace(HALF_JUDGED, since_base=4.0), w(0.3, rate=600), True, True,
     "probes did not pay over 2 s after paying 4 s (applied 1,000 KiB/s of relay log before, 800 KiB/s"),
    ("paid-one-second-far-slower-is-not-judged-at-once", replace(OPEN, since_base=4.0), w(0.3, rate=500),
     True, True, "x"),
    # ... and then measured alone again: the speed it paid against may no longer be the one.
    ("paid-four-seconds-under-measure-again", replace(OPEN, since_base=4.0, judged=(3.0, 3000 * 1024)),
     w(0.3, rate=1000), True, False, "did not speed the SQL thread up over 4 s after paying 4 s (applied"
     " 1,000 KiB/s of relay log before, 1,000 KiB/s of relay log with probes; reads 60% of its time before,"
     " 30% now): measuring it alone again"),
    ("paid-four-seconds-slower-measure-again", replace(OPEN, since_base=4.0, judged=(3.0, 2400 * 1024)),
     w(0.3, rate=800), True, False, "slowed the SQL thread down over 4 s after paying 4 s (applied 1,000"
     " KiB/s of relay log before, 800 KiB/s"),
    ("paid-two-under-two-over-pay", replace(OPEN, since_base=4.0, judged=(3.0, 2600 * 1024)),
     w(0.3, rate=1800), True, True, "probes speed the SQL thread up"),
    ("open-but-not-probing-waits", OPEN, w(0.4, rate=5), False, True, "x"),
]


@pytest.mark.parametrize(("before", "window", "prefetching", "open_", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_stall_gate(before: Gate, window: StallWindow | None, prefetching: bool, open_: bool,
                    words: str) -> None:
    after = stall_gate(before, window, prefetching=prefetching)
    assert after.open is open_
    assert words in after.reason


# Seconds of an open try, each (probes ran, changes read that gave none): open after them?
NOTHING_TO_PROBE = [
    ("lead-full-no-reads-stays-open", [(False, 0)] * 5, True),
    ("two-seconds-unprobed-stays-open", [(False, 500)] * 2, True),
    ("three-seconds-unprobed-shuts", [(False, 500)] * 3, False),
    ("a-second-with-probes-starts-the-count-again", [(False, 500), (False, 500), (True, 0), (False, 500),
                                                     (False, 500)], True),
    ("seconds-without-reads-do-not-count", [(False, 500), (False, 0), (False, 500), (False, 0)], True),
]


@pytest.mark.parametrize(("seconds", "open_"), [c[1:] for c in NOTHING_TO_PROBE],
                         ids=[c[0] for c in NOTHING_TO_PROBE])
def test_a_try_whose_changes_give_no_probe_shuts_after_three_seconds(
        seconds: list[tuple[bool, int]], open_: bool) -> None:
    g = OPEN
    for probed, unprobed in seconds:
        g = stall_gate(g, w(0.6), prefetching=probed, unprobed=unprobed, unprobed_why="no key")
    assert g.open is open_
    if not open_:
        assert g.reason == ("nothing to prefetch: none of the 1,500 row changes and statements read in"
                            " 3 s gave a probe (most of them: no key); backing off for"
                            f" {control.HOLD_WINDOWS} s")
        assert g.hold == control.HOLD_WINDOWS and g.fails == 1 and g.unprobed == (0.0, 0)


def test_after_probes_did_not_pay_the_gate_holds_shut_longer_each_time_then_measures_again() -> None:
    g = stall_gate(HALF_JUDGED, w(0.6), prefetching=True)
    assert not g.open and g.hold == control.HOLD_WINDOWS and g.fails == 1
    for _ in range(control.HOLD_WINDOWS):
        g = stall_gate(g, w(0.7), prefetching=False)  # reads are high, but it just failed
        assert not g.open
    g = stall_gate(g, w(0.7, rate=700), prefetching=False)
    g = stall_gate(g, w(0.7, rate=900), prefetching=False)
    assert g.open and g.baseline == 0.7 and g.rate_before == 800 * 1024 and g.grace == control.GRACE_WINDOWS
    g = stall_gate(replace(g, grace=0, judged=(1.0, 800 * 1024)), w(0.7, rate=800), prefetching=True)
    assert not g.open and g.hold == 2 * control.HOLD_WINDOWS and g.fails == 2  # failed again: twice as long
    many = replace(HALF_JUDGED, fails=30)
    assert stall_gate(many, w(0.6), prefetching=True).hold == control.MAX_HOLD_WINDOWS


def test_a_verdict_that_pays_forgets_the_failures() -> None:
    g = stall_gate(replace(HALF_JUDGED, fails=3), w(0.2, rate=2000), prefetching=True)
    assert g.open and g.fails == 0 and g.judged == (0.0, 0)


def test_the_apply_rate_before_is_measured_over_two_seconds_of_high_reads() -> None:
    g = stall_gate(SHUT, w(0.1, rate=500), prefetching=False)
    assert not g.open and g.base == (0.0, 0)  # reads low: not started
    g = stall_gate(g, w(0.3, rate=500), prefetching=False)
    g = stall_gate(g, w(0.1, rate=5000), prefetching=False)  # 20% over the two: start again
    assert not g.open and g.base == (0.0, 0) and "stall is not reads" in g.reason
    g = stall_gate(g, w(0.6, rate=500), prefetching=False)
    g = stall_gate(g, w(0.6, rate=700), prefetching=False)
    assert g.open and g.rate_before == 600 * 1024


@pytest.mark.parametrize(("shares", "open_"), [
    ((0.30, 0.21), True),  # mixed_fmt's seconds alone: 27-32% on average, some under 25%
    ((0.21, 0.30), False),  # the first second decides whether to start at all
    ((0.26, 0.20), False),  # 23% over the two
    ((0.50, 0.05), True),
])
def test_the_reads_before_prefetching_are_judged_over_the_seconds_measured_together(
        shares: tuple[float, float], open_: bool) -> None:
    g = SHUT
    for share in shares:
        g = stall_gate(g, w(share), prefetching=False)
    assert g.open is open_


def test_a_window_across_relay_log_files_is_skipped() -> None:
    across = replace(w(0.6), applied=None)
    assert stall_gate(MEASURING, across, prefetching=False) == MEASURING
    assert stall_gate(HALF_JUDGED, across, prefetching=True) == HALF_JUDGED


@pytest.mark.parametrize(("read_now", "open_"), [(0.3, True), (0.58, False)])
def test_inside_one_big_transaction_the_read_waits_judge(read_now: float, open_: bool) -> None:
    """The SQL thread's position stands still until the transaction commits."""
    stuck = replace(OPEN, rate_before=0.0, judged=(1.0, 0))
    assert stall_gate(stuck, w(read_now, rate=0), prefetching=True).open is open_


@pytest.mark.parametrize("rate", [0, 7_000])
def test_inside_one_big_transaction_the_read_waits_judge_across_its_commit(rate: int) -> None:
    """Measured alone without a count (no PROCESS; the cursor had not read it): the
    second its commit moves the position, or its rows counted, are no speed to compare
    with the 0 measured before."""
    stuck = replace(OPEN, rate_before=0.0, judged=(1.0, 0))
    assert stall_gate(stuck, w(0.3, rate=rate), prefetching=True).open


@pytest.mark.parametrize(("growth", "debt"), [
    (control.PURGE_MIN_TRX - 1, 0.0),  # a big transaction's commit or a few: no proxy for bytes
    (control.PURGE_MIN_TRX, control.PURGE_MIN_TRX * 14e6 / 2),
])
def test_purge_debt_counts_many_transactions_not_a_commit(growth: int, debt: float) -> None:
    assert control._growth_bytes(100, 100 + growth, 2.0, 14e6) == debt


def test_a_big_transactions_commit_early_in_a_try_is_not_purge_left_behind() -> None:
    """delete_big: 3 s into a try that ran the SQL thread 2.5x faster inside a 48,000-row
    DELETE, its commit (+1 history, 14 MB a transaction) read as 14,112 KiB/s to purge."""
    g = stall_gate(MEASURING, replace(w(0.5), history=50), prefetching=False)
    g = stall_gate(g, replace(w(0.4, rate=1500), history=50, trx_bytes=14e6), prefetching=True)  # grace
    g = stall_gate(g, replace(w(0.35, rate=2500), history=51, trx_bytes=14e6), prefetching=True)
    g = stall_gate(g, replace(w(0.3, rate=2500), history=51, trx_bytes=14e6), prefetching=True)
    assert g.open and "probes speed the SQL thread up" in g.reason


def test_inside_one_big_transaction_counted_probes_that_pay_go_on_past_the_rebase_time() -> None:
    """InnoDB's count gives a speed alone there too (rate_before > 0); measuring alone again
    would still wait for the rest of the transaction."""
    g = OPEN
    for _ in range(int(control.REBASE_SECONDS) + 2):
        g = stall_gate(g, replace(w(0.3, rate=1500), inside=True), prefetching=True)
        assert g.open, g.reason
    for _ in range(int(control.JUDGE_SECONDS)):  # out of it: at the next verdict, measured alone again
        g = stall_gate(g, w(0.3, rate=1500), prefetching=True)
    assert not g.open and "measuring it alone again" in g.reason


def test_inside_one_big_transaction_probes_that_pay_go_on_past_the_rebase_time() -> None:
    """Measuring alone again would wait for the rest of the transaction."""
    g = replace(OPEN, rate_before=0.0, judged=(1.0, 0))
    for _ in range(int(control.REBASE_SECONDS)):
        g = stall_gate(g, w(0.3, rate=0), prefetching=True)
        assert g.open


@pytest.mark.parametrize(("read_share", "open_", "words"), [
    (0.15, True, "applier threads 15% waiting on disk reads (1.2 of 8 threads on average)"),
    (0.02, False, "(0.2 of 8 threads on average): its stall is not reads"),
])
def test_parallel_workers_count_threads_reading_not_their_share(read_share: float, open_: bool,
                                                                words: str) -> None:
    """Eight workers mostly wait for work or for their turn to commit, which no probe changes."""
    eight = StallWindow(8.0, read_share, 0.2, 0.0, 1.0, 1.0, 1000 * 1024)
    g = stall_gate(MEASURING, eight, prefetching=False)
    assert g.open is open_ and words in g.reason


def test_probes_that_pay_are_judged_against_a_fresh_speed_of_the_sql_thread_alone() -> None:
    """A cold pool warms and a workload changes under a backlog: after REBASE_SECONDS of
    verdicts that pay, the SQL thread is measured alone again, then judged anew."""
    g, paid = replace(HALF_JUDGED, gains=COMPARED), 1.0
    while g.open:
        g = stall_gate(g, w(0.2, rate=1400), prefetching=True)
        paid += 1.0
    assert paid == control.REBASE_SECONDS  # two judged seconds a verdict, 1 s judged before the loop
    assert "measuring it alone again: its speed of 30 s ago" in g.reason
    assert g.fails == 0 and g.hold == 0 and g.base == (0.0, 0) and g.rate_before is None and g.rebase
    assert g.gains == ()  # measured right after probes: a compare of its own
    g = stall_gate(g, w(0.6, rate=1300), prefetching=False)  # the pool is warmer now: 1,300 alone
    g = stall_gate(g, w(0.6, rate=1300), prefetching=False)
    assert g.open and g.rate_before == 1300 * 1024 and g.since_base == 0.0
    g = stall_gate(replace(g, grace=0), w(0.3, rate=1350), prefetching=True)
    g = stall_gate(g, w(0.3, rate=1350), prefetching=True)  # beat the old 1,000, not 1,300 * 1.05
    assert not g.open and "did not speed" in g.reason


def test_a_try_that_paid_and_then_does_not_is_measured_alone_again_not_held() -> None:
    """Four seconds under the speed to beat after a try paid: the machine or the workload
    may have slowed the SQL thread alone as much. Measured alone again, probes that still
    gain over its speed now run on after their compares; were they the cause, that try
    fails its compares and holds the gate."""
    g = replace(HALF_JUDGED, gains=COMPARED)
    g = stall_gate(g, w(0.2, rate=1400), prefetching=True)
    assert g.open and g.since_base == control.JUDGE_SECONDS
    for _ in range(int(control.CONFIRM_SECONDS)):  # the machine slows: 800 with probes
        g = stall_gate(g, w(0.3, rate=800), prefetching=True)
    assert not g.open and g.rebase and g.hold == 0 and g.gains == () and g.rate_before is None
    assert "slowed the SQL thread down over 4 s after paying 2 s" in g.reason
    for _ in range(int(control.BASE_SECONDS)):  # alone now: 600
        g = stall_gate(g, w(0.5, rate=600), prefetching=False)
    assert g.open and g.rate_before == 600 * 1024
    for _ in range(1 + int(control.JUDGE_SECONDS)):  # 800 with probes: 1.33x, not yet shown
        g = stall_gate(g, w(0.3, rate=800), prefetching=True)
    assert not g.open and g.rebase and g.hold == 0 and "1.33x over 1 compare" in g.reason
    for _ in range(int(control.BASE_SECONDS)):
        g = stall_gate(g, w(0.5, rate=600), prefetching=False)
    for _ in range(1 + int(control.JUDGE_SECONDS)):
        g = stall_gate(g, w(0.3, rate=800), prefetching=True)
    assert g.open and "1.33x over 2 compares, 1.30x needed" in g.reason
    # Were the probes the cause, the try after measuring again fails and holds.
    g = replace(HALF_JUDGED, gains=COMPARED, since_base=4.0, judged=(3.0, 2400 * 1024))
    g = stall_gate(g, w(0.3, rate=800), prefetching=True)
    for _ in range(int(control.BASE_SECONDS)):
        g = stall_gate(g, w(0.5, rate=1000), prefetching=False)
    assert g.open
    while g.open:  # the grace second, then 0.8x: under SLOWED, judged at once
        g = stall_gate(g, w(0.3, rate=800), prefetching=True)
    assert g.hold == control.SLOWED_HOLD * control.HOLD_WINDOWS and "slowed" in g.reason


def test_a_gain_within_the_sql_threads_unevenness_is_compared_again_until_shown() -> None:
    """1.3x at a first compare is what two seconds of the SQL thread alone can show
    against the two before (control.SHOWN): measured alone again, probed again, and only
    the second 1.3x lets the probes run on."""
    g = MEASURING
    g = stall_gate(g, w(0.6, rate=1000), prefetching=False)
    assert g.open and g.gains == ()
    for _ in range(1 + int(control.JUDGE_SECONDS)):  # the grace second, then two judged
        g = stall_gate(g, w(0.3, rate=1300), prefetching=True)
    assert not g.open and g.rebase and g.gains == (pytest.approx(1.3),)
    assert "1.30x over 1 compare, 1.50x needed" in g.reason and g.hold == 0
    for _ in range(int(control.BASE_SECONDS)):  # alone again: its reads are not asked for
        g = stall_gate(g, w(0.2, rate=1000), prefetching=False)
    assert g.open and g.gains == (pytest.approx(1.3),)
    for _ in range(1 + int(control.JUDGE_SECONDS)):
        g = stall_gate(g, w(0.3, rate=1300), prefetching=True)
    assert g.open and g.gains == () and g.since_base == control.JUDGE_SECONDS
    assert "1.30x over 2 compares, 1.30x needed" in g.reason


def test_a_run_of_compares_waits_for_the_cpu_and_goes_on() -> None:
    """Measured alone again between two compares, a saturated CPU keeps the probes out
    but not the compares made: the next try is their second, not a first again."""
    g = Gate(False, "x; measuring it alone again to compare", None, True, rebase=True, gains=(1.44,))
    g = stall_gate(g, w(0.4, headroom=0.3), prefetching=False)
    assert not g.open and "CPU is saturated" in g.reason and g.rebase and g.gains == (1.44,)
    g = stall_gate(g, w(0.4, queued=0.6), prefetching=False)
    assert not g.open and "wait for a core" in g.reason and g.rebase and g.gains == (1.44,)
    for _ in range(int(control.BASE_SECONDS)):
        g = stall_gate(g, w(0.2, rate=1000), prefetching=False)
    assert g.open and g.gains == (1.44,)


@pytest.mark.parametrize(("gains", "shown"), [
    ((1.04,), False), ((1.05,), None), ((1.49,), None), ((1.5,), True),
    ((1.2, 1.0), None), ((1.2, 0.9), False), ((1.3, 1.3), True),
    ((1.2, 1.2, 1.2), True), ((1.1, 1.1, 1.1, 1.1), False), ((1.1, 1.1, 1.1, 1.2), True),
])
def test_gain_shown(gains: tuple[float, ...], shown: bool | None) -> None:
    assert control.gain_shown(gains)[0] is shown


def young_try(gain: float) -> Gate:
    """A first try against a speed measured in the SQL thread's first seconds, judged."""
    g = stall_gate(MEASURING, replace(w(0.6, rate=1000), young=True), prefetching=False)
    assert g.open and g.young
    for _ in range(1 + int(control.JUDGE_SECONDS)):  # the grace second, then two judged
        g = stall_gate(g, w(0.3, rate=1000 * gain), prefetching=True)
    return g


def test_a_compare_against_a_speed_of_the_first_seconds_counts_less() -> None:
    """A pool the SQL thread has just begun to use makes its speed alone low (YOUNG_BIAS):
    1.7x against it counts as 1.48x, under SHOWN[0]; measured alone again, the next
    compare joins it as any second compare does."""
    g = young_try(1.7)
    assert not g.open and g.rebase and g.gains == (pytest.approx(1.7 / control.YOUNG_BIAS),) and g.hold == 0
    assert "1.47x over 1 compare, 1.50x needed" in g.reason
    assert "this one counted 1.15x lower: its speed before was measured in its first seconds" in g.reason
    for _ in range(int(control.BASE_SECONDS)):  # its threads older now
        g = stall_gate(g, w(0.2, rate=1000), prefetching=False)
    assert g.open and not g.young
    for _ in range(1 + int(control.JUDGE_SECONDS)):
        g = stall_gate(g, w(0.3, rate=1300), prefetching=True)
    assert g.open and "1.38x over 2 compares, 1.30x needed" in g.reason and "lower" not in g.reason


@pytest.mark.parametrize(("gain", "open_", "hold", "words"), [
    (1.8, True, 0, "probes speed the SQL thread up"),  # 1.57x counted: runs on
    (1.1, False, control.HOLD_WINDOWS, "beyond its own unevenness"),  # 0.96x counted
    (1.02, False, control.HOLD_WINDOWS, "did not speed the SQL thread up ("),  # not even a low speed
])
def test_a_first_compare_against_a_speed_of_the_first_seconds(gain: float, open_: bool, hold: int,
                                                               words: str) -> None:
    g = young_try(gain)
    assert g.open is open_ and g.hold == hold and words in g.reason


def test_measured_alone_again_its_reads_are_not_asked_for() -> None:
    """The pages the probes warmed keep the SQL thread's reads low for seconds after
    they stop: a second under READ_SHARE does not start the measurement anew."""
    g = Gate(False, "x; measuring it alone again", None, True, rebase=True)
    g = stall_gate(g, w(0.19, rate=775), prefetching=False)
    assert not g.open and g.base == (1.0, 775 * 1024) and g.rebase
    g = stall_gate(g, w(0.24, rate=789), prefetching=False)
    assert g.open and g.rate_before == 782 * 1024 and not g.rebase
    # Not after a try that did not pay, nor at a catch-up's start: there reads decide.
    assert "stall is not reads" in stall_gate(SHUT, w(0.19), prefetching=False).reason
    # ... and a saturated machine still keeps it shut.
    again = Gate(False, "x", None, True, rebase=True)
    saturated = stall_gate(again, w(0.19, headroom=0.2), prefetching=False)
    assert not saturated.open and "CPU is saturated" in saturated.reason


@pytest.mark.parametrize(("queued_share", "open_", "words"), [
    # Eight workers on two cores, 19% of their time runnable: 1.5 threads queued for a core.
    (0.19, False, "1.5 of its threads wait for a core on average: probes would add to that queue"),
    (0.05, True, "prefetching"),
])
def test_parallel_workers_queued_for_a_core_keep_the_gate_shut(queued_share: float, open_: bool,
                                                               words: str) -> None:
    eight = StallWindow(8.0, 0.15, 0.3, queued_share, 1.0, 1.0, 1000 * 1024)
    g = stall_gate(MEASURING, eight, prefetching=False)
    assert g.open is open_ and words in g.reason
    assert g.hold == 0  # measured without probes: judged again next second


def test_parallel_workers_queueing_while_probing_stop_at_once() -> None:
    eight = StallWindow(8.0, 0.1, 0.4, 0.1, 1.0, 1.0, 1000 * 1024)  # 0.8 threads queued
    g = stall_gate(OPEN, eight, prefetching=True)
    assert not g.open and "0.8 applier threads wait for a core on average" in g.reason and g.hold > 0


def test_saturation_keeps_a_shut_gate_shut_without_holding_it() -> None:
    shut_alone = stall_gate(MEASURING, w(0.5, headroom=0.2), prefetching=False)
    assert not shut_alone.open and shut_alone.hold == 0  # measured without probes: judge again next second


# ----- purge must not fall behind for the probes' sake ----------------------------------------

def hw(history: int | None, rate: float = 1400.0) -> StallWindow:
    """A second of probing that pays by its apply rate, with the purge history length at its end."""
    return replace(w(0.1, rate=rate), history=history)


@pytest.mark.parametrize(("history_from", "history", "open_", "words"), [
    (2_000, 90_000, True, "x"),  # grown, but under InnoDB's own "growing huge"
    (2_000, 100_000, False, "purge is 100,000 transactions behind (InnoDB's history list), 98,000 more"),
    (95_000, 104_000, True, "x"),  # over the line, but it was there before the probes: not their doing yet
    (95_000, 105_000, False, "10,000 more than when probes started"),
    (None, 500_000, True, "x"),  # not known when the gate opened: nothing to count from
    (2_000, None, True, "x"),  # not known now (the question failed): unknown is not "behind"
])
def test_probes_that_leave_purge_far_behind_stop(history_from: int | None, history: int | None,
                                                  open_: bool, words: str) -> None:
    g = stall_gate(replace(OPEN, reason="x", history_from=history_from), hw(history), prefetching=True)
    assert g.open is open_
    assert words in g.reason
    if not open_:
        assert g.hold == control.HOLD_WINDOWS and g.fails == 1 and "backing off for 10 s" in g.reason


def opened_at(history: int) -> Gate:
    """Measured alone for two seconds (1,000 KiB/s, 60% reads); the history read when it opened."""
    g = stall_gate(replace(MEASURING, gains=COMPARED), replace(w(0.6), history=history), prefetching=False)
    assert g.open and g.history_from == history and g.gains == COMPARED
    return replace(g, grace=0)


# The history a second after the gate opened at 10,000, 8 s of probing at 1,400 KiB/s (1.4x).
STEADY = [10_000 + 3_000 * s for s in range(1, 9)]  # update_k, probes held on: ~3,000 a second
BURSTS = [11_000, 14_000, 18_000, 12_000, 11_000, 16_000, 19_000, 11_500]  # an insert catch-up's bursts
CHEAP = [10_000 + 800 * s for s in range(1, 9)]  # update_pk: a little behind


@pytest.mark.parametrize(("history", "trx_bytes", "open_", "words"), [
    (STEADY, 600, False, "1,400 KiB/s of relay log with probes, 879 KiB/s of relay log of it left to purge"),
    (BURSTS, 600, True, "1,400 KiB/s of relay log with probes, 110 KiB/s of relay log of it left to purge"),
    (CHEAP, 300, True, "1,400 KiB/s of relay log with probes, 176 KiB/s of relay log of it left to purge"),
    (STEADY, None, True, "1,400 KiB/s of relay log with probes;"),  # bytes a transaction not known
    ([None] * 8, 600, True, "1,400 KiB/s of relay log with probes;"),  # the history not known
    ([10_000 - 500 * s for s in range(1, 9)], 600, True, "with probes;"),  # purge catching up: no credit
])
def test_work_the_probes_leave_to_purge_is_not_counted_as_done(history: list[int | None],
                                                                trx_bytes: float | None, open_: bool,
                                                                words: str) -> None:
    g = opened_at(10_000)
    for h in history:
        g = stall_gate(g, replace(w(0.1, rate=1400), history=h, trx_bytes=trx_bytes), prefetching=True)
        if not g.open:
            break
    assert g.open is open_
    assert words in g.reason


@pytest.mark.parametrize(("share", "open_", "words"), [
    (None, False, "879 KiB/s of relay log of it left to purge"),  # not known: all of it is work
    (1.0, False, "879 KiB/s of relay log of it left to purge"),  # update_k: every UPDATE moves a k entry
    (0.5, False, "439 KiB/s of relay log of it left to purge"),  # half the changes move one
    (0.25, True, "330 KiB/s of relay log of it left to purge"),  # after the 8 s: less growth a second
    # UPDATEs in place (a range of rows' c): their undo is freed, no index entry to remove
    (0.0, True, "1,400 KiB/s of relay log with probes; reads"),
])
def test_only_changes_that_leave_index_entries_count_as_work_left_to_purge(
        share: float | None, open_: bool, words: str) -> None:
    g = opened_at(10_000)
    for h in STEADY:
        g = stall_gate(g, replace(w(0.1, rate=1400), history=h, trx_bytes=600, purge_share=share),
                       prefetching=True)
        if not g.open:
            break
    assert g.open is open_
    assert words in g.reason


def test_a_try_on_changes_in_place_is_not_stopped_early_by_purge() -> None:
    g = stall_gate(replace(MEASURING, gains=COMPARED), replace(w(0.6), history=10_000), prefetching=False)
    g = stall_gate(g, replace(w(0.1, rate=1200), history=10_500, trx_bytes=600, purge_share=0.0),
                   prefetching=True)
    for second in (1, 2):
        g = stall_gate(g, replace(w(0.1, rate=1400), history=10_500 + 3_000 * second, trx_bytes=600,
                                  purge_share=0.0), prefetching=True)
    assert g.open and "left to purge" not in g.reason


def test_purge_is_not_judged_on_the_first_seconds_of_probing() -> None:
    """Its history rises and falls in bursts: over two seconds an insert catch-up's
    looks like update_k's."""
    g = opened_at(10_000)
    for h in STEADY[:2]:
        g = stall_gate(g, replace(w(0.1, rate=1400), history=h, trx_bytes=600), prefetching=True)
    assert g.open and "left to purge" not in g.reason


@pytest.mark.parametrize(("growth", "trx_bytes", "open_", "words"), [
    # update_k: what purge left in just the first two seconds already makes the probes lose
    (3_000, 600, False, "1,400 KiB/s of relay log with probes, 1,758 KiB/s of relay log of it left to purge"),
    (3_000, 600, False, f"leave purge further behind than they speed the SQL thread up (applied 1,000"
                        f" KiB/s of relay log before, 1,400 KiB/s of relay log with probes, 1,758 KiB/s"
                        f" of relay log of it left to purge; reads 60% of its time before, 10% now):"
                        f" backing off for {control.PURGE_HOLD * control.HOLD_WINDOWS} s"),
    # an insert burst: not enough to lose, and too early to judge purge: the apply rate decides
    (1_000, 300, True, "1,400 KiB/s of relay log with probes;"),
])
def test_a_try_whose_first_seconds_leave_purge_far_behind_stops_then(growth: int, trx_bytes: int,
                                                                     open_: bool, words: str) -> None:
    g = stall_gate(replace(MEASURING, gains=COMPARED), replace(w(0.6), history=10_000), prefetching=False)
    grace = replace(w(0.1, rate=1200), history=10_500, trx_bytes=trx_bytes)
    g = stall_gate(g, grace, prefetching=True)
    assert g.open and g.history_mark == 10_500
    for second in (1, 2):
        win = replace(w(0.1, rate=1400), history=10_500 + growth * second, trx_bytes=trx_bytes)
        g = stall_gate(g, win, prefetching=True)
    assert g.open is open_
    assert words in g.reason


@pytest.mark.parametrize(("rate", "growth", "trx_bytes", "hold", "words"), [
    # No slower on the apply rate alone; purge made it lose: the long hold.
    (1030, 1_000, 600, control.PURGE_HOLD * control.HOLD_WINDOWS, "leave purge further behind"),
    # update_k's first try: 0.5% slower alone, and 30% of it left to purge. That held
    # 30 s, and the next try cost as much again.
    (995, 500, 600, control.PURGE_HOLD * control.HOLD_WINDOWS, "slowed the SQL thread down and left purge"),
    # Purge's part a few KiB/s (a burst): the try did not pay anyway, the usual hold.
    (1030, 60, 300, control.HOLD_WINDOWS, "probes did not speed the SQL thread up"),
])
def test_a_try_that_purge_made_lose_holds_long(rate: int, growth: int, trx_bytes: int, hold: int,
                                                words: str) -> None:
    g = stall_gate(MEASURING, replace(w(0.6), history=10_000), prefetching=False)
    g = stall_gate(g, replace(w(0.1, rate=1000), history=10_000, trx_bytes=trx_bytes), prefetching=True)
    for second in (1, 2):  # after the grace second, two judged
        g = stall_gate(g, replace(w(0.1, rate=rate), history=10_000 + growth * second, trx_bytes=trx_bytes),
                       prefetching=True)
    assert not g.open and g.hold == hold
    assert words in g.reason


def test_a_try_that_paid_is_stopped_by_purge_without_waiting_for_more_seconds() -> None:
    """Seconds that do not pay judge a try that has paid again over more seconds, but
    not when purge falling behind made it lose: that is the workload's, not noise."""
    g = stall_gate(MEASURING, replace(w(0.6), history=10_000), prefetching=False)
    g = replace(g, grace=0, since_base=10.0)
    for second in (1, 2):  # 12 s in, purge 1,500 transactions behind: 73 KiB/s of it left to purge
        g = stall_gate(g, replace(w(0.1, rate=995), history=10_000 + 1_500 * second, trx_bytes=600),
                       prefetching=True)
    assert not g.open and "slowed the SQL thread down and left purge" in g.reason


def test_holds_after_purge_fell_behind_grow_to_ten_minutes() -> None:
    holds = []
    g = Gate(False, "x", None, True)
    for fails in range(5):
        g = stall_gate(replace(MEASURING, fails=fails), replace(w(0.6), history=10_000), prefetching=False)
        g = stall_gate(g, replace(w(0.1, rate=1200), history=10_000, trx_bytes=600), prefetching=True)
        for second in (1, 2):
            g = stall_gate(g, replace(w(0.1, rate=1400), history=10_000 + 3_000 * second, trx_bytes=600),
                           prefetching=True)
        holds.append(g.hold)
    assert holds == [120, 240, 480, 600, 600]


HELD = Gate(False, "probes leave purge behind: backing off for 120 s", None, True, hold=120, fails=1)


@pytest.mark.parametrize(("gate", "fresh", "want"), [
    (HELD, engine_module._MEASURING, replace(HELD, hold=119)),  # a hold runs on while caught up
    (replace(HELD, hold=1), engine_module._MEASURING, replace(HELD, hold=0)),
    (replace(HELD, hold=0), engine_module._MEASURING, replace(engine_module._MEASURING, fails=1)),
    (OPEN, engine_module._MEASURING, engine_module._MEASURING),  # probes paid: measured afresh
    (Gate(False, "88% on CPU", None, True), engine_module._MEASURING, engine_module._MEASURING),
    (HELD, control.UNMEASURED, replace(HELD, hold=119)),
    (replace(HELD, hold=0), control.UNMEASURED, control.UNMEASURED),  # no split: the comparison decides
])
def test_without_a_backlog_a_hold_runs_on_and_the_next_backlog_is_measured_afresh(
        gate: Gate, fresh: Gate, want: Gate) -> None:
    assert control.without_backlog(gate, fresh) == want


def test_the_gate_remembers_the_purge_history_it_opened_at() -> None:
    g = stall_gate(replace(MEASURING, gains=COMPARED), replace(w(0.7), history=3_000), prefetching=False)
    assert g.open and g.history_from == 3_000
    # ... and keeps it through the verdicts that pay, with the last readings.
    g = stall_gate(replace(g, grace=0, judged=(1.0, 1000 * 1024)), hw(4_000), prefetching=True)
    assert g.open and g.history_from == 3_000 and g.history_recent == (4_000,)


def test_stall_window_shares() -> None:
    sw = control.stall_window({"on_cpu": 0.2, "cpu_wait": 0.1, "disk_read": 0.6, "other_wait": 0.1}, 1.5)
    assert sw == StallWindow(pytest.approx(1.0), pytest.approx(0.6), pytest.approx(0.3),  # type: ignore[arg-type]
                             pytest.approx(0.1), 1.5)  # type: ignore[arg-type]
    assert control.stall_window({"on_cpu": 0.0}, None) is None


# ----- the engine applies it --------------------------------------------------------------

class FakeStall:
    """Stands in for stall.StallMonitor: cumulative seconds set by the test."""

    def __init__(self, threads: tuple[int, ...] = (7,), wanted: tuple[int, ...] | None = None,
                 looked: bool = True) -> None:
        self.threads = threads
        self.wanted = threads if wanted is None else wanted
        self.looked = looked
        self.hz = 5.0
        self.seconds = dict.fromkeys(("on_cpu", "cpu_wait", "disk_read", "flush_wait", "other_wait"), 0.0)
        self.headroom: float | None = 1.0

    @property
    def invisible(self) -> bool:
        return self.looked and not self.wanted

    def headroom_over(self, span: float) -> float | None:
        return self.headroom

    def totals(self) -> dict[str, float]:
        return dict(self.seconds)

    def add(self, **kw: float) -> None:
        for k, v in kw.items():
            self.seconds[k] += v


class FakePool:
    size = 4
    _on_done = None
    dropped = 0
    busy = queued = 0  # probes out

    def drop_queued(self) -> int:
        self.dropped += 1
        return 0


def engine_with(fake: FakeStall) -> tuple[PrefetchEngine, FakePool]:
    limits = control.limits_for(10, 1000, 64 << 20, 30.0, 256 << 20, 0.25)
    tuning = control.Tuning(10, 1000, 4, 8, adaptive=True)
    pool = FakePool()
    clock = iter(range(10**6))  # each gate check a second after the last
    eng = PrefetchEngine(None, None, pool, None, limits, tuning,  # type: ignore[arg-type]
                         stall_monitor=fake, clock=lambda: float(next(clock)))  # type: ignore[arg-type]
    eng.state = "active"
    return eng, pool


def test_the_engine_opens_on_reads_and_shuts_when_probes_do_not_pay() -> None:
    fake = FakeStall()
    eng, pool = engine_with(fake)
    eng._gate_check()  # first reading: nothing to compare yet
    assert not eng.gate_state.open and "measuring" in eng.gate_state.reason and fake.hz == 50.0
    eng._sql_pos = (1, 0)
    eng._gate_check()  # the position to measure from
    for _ in range(2):  # two seconds of its apply rate alone
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open and "70% waiting on disk reads" in eng.gate_state.reason
    assert eng.gate_state.rate_before == 500 * 1024
    for _ in range(3):  # a second of grace, two judged: probes ran, the SQL thread went no faster
        fake.add(on_cpu=0.5, disk_read=0.3, cpu_wait=0.2)
        eng.counters.rows_probed += 300
        eng._sql_pos = (1, eng._sql_pos[1] + 480 * 1024)
        eng._gate_check()
    assert not eng.gate_state.open and not eng._enabled
    assert "500 KiB/s of relay log before, 480 KiB/s of relay log with probes" in eng.gate_state.reason
    assert pool.dropped == 1


def test_the_engine_shuts_a_try_whose_changes_give_no_probe_and_names_why() -> None:
    """A table without a key: the cursor decoded its rows and polled for nothing."""
    eng, pool = opened_engine(SimpleNamespace(skipped={}, last_reason={"no_key": "app.log: no primary key"}))
    fake: Any = eng.stall
    for second in range(3):
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng.counters.given += 400
        eng.batcher.skipped["no_key"] = 400 * (second + 1)
        pool.busy = 1 if second == 0 else 0  # a probe out: not counted as nothing probed
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open  # two seconds of nothing probed
    fake.add(on_cpu=0.3, disk_read=0.7)
    eng.counters.given += 400
    eng.batcher.skipped["no_key"] = 1600
    eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
    eng._gate_check()
    assert not eng.gate_state.open and not eng._enabled
    assert eng.gate_state.reason == (
        "nothing to prefetch: none of the 1,200 row changes and statements read in 3 s gave a probe"
        f" (most of them: no key (app.log: no primary key)); backing off for {control.HOLD_WINDOWS} s")


def test_at_debug_the_engine_logs_every_second_the_gate_judges(caplog: pytest.LogCaptureFixture) -> None:
    """Its moves alone do not show what a verdict that looks wrong was made of."""
    fake = FakeStall()
    eng, _pool = engine_with(fake)
    eng._gate_check()
    eng._sql_pos = (1, 0)
    eng._gate_check()
    with caplog.at_level(logging.DEBUG, logger="lagd.prefetch"):
        for _ in range(2):
            fake.add(on_cpu=0.3, disk_read=0.7)
            eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
            eng._gate_check()
    windows = [r.getMessage() for r in caplog.records if r.getMessage().startswith("prefetch window:")]
    assert len(windows) == 2
    assert "applied=512000 reads=0.70" in windows[1] and "open=True" in windows[1]
    assert windows[1].endswith("70% waiting on disk reads, 1.0 idle cores: prefetching")


def test_a_shut_gate_does_not_measure_the_sql_thread_alone_on_transactions_probed_before() -> None:
    """Their pages are warm: seconds on them would make the speed to beat too high."""
    fake = FakeStall()
    eng, _pool = engine_with(fake)
    eng._sql_pos = (1, 0)
    eng._gate_check()
    eng._ahead.append(engine_module._Trx(1, 0.0, probed=16))  # a probed transaction still ahead
    for _ in range(3):
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert not eng.gate_state.open and eng.gate_state.base == (0.0, 0)
    eng._ahead.clear()  # the SQL thread passed them
    for _ in range(2):
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open and eng.gate_state.rate_before == 500 * 1024


def test_a_just_started_sql_threads_first_second_is_not_its_speed() -> None:
    """Cold, it reads the indexes' upper levels too: its first second is slower than the
    seconds after, and measured, it would make any probes look as if they paid."""
    fake = FakeStall(threads=())
    eng, _pool = engine_with(fake)
    eng._sql_pos = (1, 0)
    eng._gate_check()  # no thread sampled yet
    fake.threads = (7,)  # the SQL thread started: its first sample, read at once (the run loop)
    eng._gate_check()
    for kib in [200, 500]:  # KiB a second: the first second cold, then one of the two measured
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + kib * 1024)
        eng._gate_check()
        assert not eng.gate_state.open and "measuring" in eng.gate_state.reason
    fake.add(on_cpu=0.3, disk_read=0.7)
    eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
    eng._gate_check()
    assert eng.gate_state.open and eng.gate_state.rate_before == 500 * 1024
    assert eng.gate_state.young  # measured in its first seconds (YOUNG_BIAS)
    # Threads that change while probes run (parallel workers found again) are not a start.
    fake.threads = (7, 8)
    fake.add(on_cpu=0.3, disk_read=0.3)
    eng._sql_pos = (1, eng._sql_pos[1] + 800 * 1024)
    eng.counters.rows_probed += 10
    eng._gate_check()
    assert eng.gate_state.open


def test_threads_found_long_ago_are_not_measured_as_young() -> None:
    fake = FakeStall(threads=())
    eng, _pool = engine_with(fake)
    eng._sql_pos = (1, 0)
    eng._gate_check()
    fake.threads = (7,)
    eng._gate_check()
    assert eng._threads_at is not None
    eng._threads_at -= 2 * control.YOUNG_SECONDS  # found, then caught up a while
    for _ in range(int(control.BASE_SECONDS)):
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open and not eng.gate_state.young


@pytest.mark.parametrize(("threads", "budget", "hz"), [
    (1, 100.0, 50.0), (2, 100.0, 50.0), (8, 100.0, 12.5), (64, 100.0, 5.0),  # measuring or probing
    (1, 25.0, 25.0), (8, 25.0, 5.0),  # kept out
    (0, 100.0, 50.0),  # none found yet
])
def test_the_sampler_keeps_a_budget_of_thread_samples(threads: int, budget: float, hz: float) -> None:
    assert stall.sampling_hz(threads, budget) == hz


@pytest.mark.parametrize(("gate", "budget"), [
    (engine_module._MEASURING, stall.THREAD_SAMPLES_PER_S),
    (OPEN, stall.THREAD_SAMPLES_PER_S),
    (Gate(False, "88% on CPU: CPU-bound", None, True), stall.KEPT_OUT_SAMPLES_PER_S),
])
def test_the_engine_samples_in_full_only_while_it_measures_or_probes(gate: Gate, budget: float) -> None:
    fake = FakeStall(threads=tuple(range(8)))
    eng, _pool = engine_with(fake)
    eng.gate_state = gate
    eng._gate_check()
    assert fake.hz == stall.MAX_HZ and fake.budget == budget


@pytest.mark.parametrize(("fake", "measuring_checks"), [
    (FakeStall(threads=(), wanted=(), looked=False), 99),  # not looked for yet: no probes meanwhile
    (FakeStall(threads=(), wanted=(7,)), 3),  # found, but /proc hides it: a few seconds, then go on
])
def test_threads_not_measured_yet_keep_the_gate_shut(fake: FakeStall, measuring_checks: int) -> None:
    eng, _ = engine_with(fake)
    shut = 0
    for _ in range(10):
        fake.add(on_cpu=1.0)
        eng._gate_check()
        shut += not eng.gate_state.open
    assert shut == min(10, measuring_checks)
    assert eng.gate_state.open is (measuring_checks < 10)


def test_without_visible_threads_the_gate_stays_open() -> None:
    fake = FakeStall(threads=())
    eng, _ = engine_with(fake)
    for _ in range(3):
        fake.add(on_cpu=1.0)
        eng._gate_check()
    assert eng.gate_state == control.UNMEASURED


def test_a_start_of_the_sql_thread_is_measured_before_any_probe() -> None:
    """While the SQL thread is stopped there are no threads to find: that is not "lagd
    cannot see them", so its next start is measured before any probe. Before, every start
    opened the gate unmeasured until the threads were found (2,500 rows probed at each
    start of an update_k catch-up the gate then kept out)."""
    mon = stall.StallMonitor(read=lambda path: "", clock=lambda: 0.0)
    mon.set_threads((), looked=False)  # what discovery does while the SQL thread is stopped
    assert not mon.invisible
    eng, _ = engine_with(mon)  # type: ignore[arg-type]
    eng.state = "paused"
    eng._gate_check()
    assert eng.gate_state == engine_module._MEASURING
    eng.state = "active"  # started; its threads not yet found
    for _ in range(5):
        eng._gate_check()
        assert not eng.gate_state.open
    mon.set_threads(())  # running, looked for, none visible (no PROCESS): the comparison decides
    assert mon.invisible
    for _ in range(5):
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
    assert asyncio.run(eng._appliers()) is None  # stopped: nothing to look for, not "invisible"


# ----- the quick check beside the gate ----------------------------------------------------

class ReadsMonitor:
    """Innodb_buffer_pool_reads as the test sets it."""

    def __init__(self) -> None:
        self.reads = 0

    async def global_status(self, *names: str) -> dict[str, int]:
        return {"Innodb_buffer_pool_reads": self.reads}


def quick(eng: PrefetchEngine, mon: ReadsMonitor, *, probed: int, reads: int) -> None:
    eng.counters.rows_done += probed
    mon.reads += reads
    asyncio.run(eng._quick_check(0.0))


@pytest.mark.parametrize(("measured", "backs_off"), [(False, True), (True, False)])
def test_reads_beyond_probed_keys_shorten_the_lead_only_where_the_gate_cannot_judge(
        measured: bool, backs_off: bool) -> None:
    eng, _ = engine_with(FakeStall())
    mon = ReadsMonitor()
    eng.monitor = mon  # type: ignore[assignment]
    eng.gate_state = control.Gate(True, "x", 0.5, measured, rate_before=1000.0)
    target = eng.ctl.target_transactions
    quick(eng, mon, probed=1, reads=0)  # the baseline
    quick(eng, mon, probed=1500, reads=3000)  # the SQL thread's own reads beside the probes'
    assert (eng.ctl.target_transactions < target) is backs_off


def test_reads_while_the_gate_was_shut_are_not_counted_against_the_probes() -> None:
    eng, _ = engine_with(FakeStall())
    mon = ReadsMonitor()
    eng.monitor = mon  # type: ignore[assignment]
    target = eng.ctl.target_transactions
    quick(eng, mon, probed=1, reads=0)
    eng.gate_state = control.Gate(False, "shut", None, False)
    for _ in range(5):  # five seconds of the SQL thread alone, reading
        quick(eng, mon, probed=0, reads=2000)
    eng.gate_state = control.UNMEASURED
    quick(eng, mon, probed=0, reads=0)  # open again: a fresh baseline
    quick(eng, mon, probed=1200, reads=1300)
    assert eng.ctl.target_transactions == target and eng.ctl.enabled


@pytest.mark.parametrize(("state", "gate", "every"), [
    ("active", OPEN, 0.02),  # probing: the lead follows the SQL thread
    ("backed_off", MEASURING, 0.02),  # the speed to beat is being measured
    ("backed_off", Gate(False, "88% on CPU: CPU-bound", None, True), 0.25),  # kept out: a gate check a second
    ("paused", OPEN, 0.25),  # the SQL thread is stopped: its START begins a catch-up
    ("idle", OPEN, 1.0),  # caught up: a new backlog is measured before any probe anyway
])
def test_a_caught_up_replica_is_polled_once_a_second(state: str, gate: Gate, every: float) -> None:
    eng, _ = engine_with(FakeStall())
    eng.state, eng.gate_state = state, gate
    assert eng._poll_every() == every


@pytest.mark.parametrize(("state", "gate", "fast"), [
    ("active", OPEN, True),  # probing: the lead follows the SQL thread
    ("backed_off", engine_module._MEASURING, True),  # the speed to beat is being measured
    ("backed_off", MEASURING, True),
    ("backed_off", Gate(False, "88% on CPU: CPU-bound", None, True), False),  # kept out
    ("backed_off", Gate(False, "did not pay", None, True, hold=10, fails=1), False),
    ("active", Gate(False, "the stall is not reads", None, True), False),  # a jump left it "active"
    ("idle", OPEN, False),  # caught up
    ("paused", OPEN, False),  # the SQL thread is stopped
])
def test_the_status_is_polled_often_only_while_probes_may_run_or_the_sql_thread_is_measured(
        state: str, gate: Gate, fast: bool) -> None:
    eng, _ = engine_with(FakeStall())
    eng.state, eng.gate_state = state, gate
    assert eng._fast_polls() is fast


class HistoryMonitor:
    """The purge history length as the test sets it, or the error it raises."""

    def __init__(self, history: int | None = 0, error: Exception | None = None) -> None:
        self.history, self.error, self.asked = history, error, 0

    async def history_length(self) -> int | None:
        self.asked += 1
        if self.error is not None:
            raise self.error
        return self.history


def test_the_engine_gives_the_gate_the_purge_history_and_stops_probes_that_leave_purge_behind() -> None:
    fake = FakeStall()
    eng, pool = engine_with(fake)
    mon = HistoryMonitor(2_000)
    eng.monitor = mon  # type: ignore[assignment]
    eng._sql_pos = (1, 0)
    for _ in range(3):  # the first reading, then two seconds of the SQL thread alone
        asyncio.run(eng._read_history())
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open and eng.gate_state.history_from == 2_000
    mon.history = 150_000  # probes pay by the apply rate, but purge fell far behind
    asyncio.run(eng._read_history())
    fake.add(on_cpu=0.5, disk_read=0.1)
    eng.counters.rows_probed += 300
    eng._sql_pos = (1, eng._sql_pos[1] + 900 * 1024)
    eng._gate_check()
    assert not eng.gate_state.open and "purge is 150,000 transactions behind" in eng.gate_state.reason
    assert pool.dropped == 1
    assert eng.purge_history == 150_000


def test_an_old_purge_history_reading_is_unknown_to_the_gate_and_to_status() -> None:
    """Read only while the gate measures or probes may run: after a long hold the last
    reading is minutes old, and neither the gate nor /status takes it for today's."""
    fake = FakeStall()
    fake.snapshot = lambda busy: {}  # type: ignore[attr-defined]
    eng, _ = engine_with(fake)
    eng.monitor = HistoryMonitor(9_000)  # type: ignore[assignment]
    asyncio.run(eng._read_history())  # at 0 on the fake clock
    assert [eng._history(t) for t in (0.0, 4.9, 5.0, 300.0)] == [9_000, 9_000, None, None]
    for _ in range(6):
        eng._clock()
    snap = eng.stall_snapshot()
    assert snap is not None and snap["purge_history"] is None


def test_without_process_the_purge_history_is_unknown_and_not_asked_again(
        caplog: pytest.LogCaptureFixture) -> None:
    from lagd.mysql.errors import DatabaseError, Kind  # noqa: PLC0415

    caplog.set_level("INFO", logger="lagd.prefetch")
    eng, _ = engine_with(FakeStall())
    denied = DatabaseError("Access denied; you need the PROCESS privilege", kind=Kind.DENIED)
    mon = HistoryMonitor(error=denied)
    eng.monitor = mon  # type: ignore[assignment]
    eng.purge_history = 5  # whatever was known before is not kept
    for _ in range(3):
        asyncio.run(eng._read_history())
    assert eng.purge_history is None and mon.asked == 1
    assert sum("grant PROCESS" in r.getMessage() for r in caplog.records) == 1
    # Another failure (the connection dropped) is unknown for that second only.
    mon2 = HistoryMonitor(error=DatabaseError("lost", kind=Kind.LOST))
    eng2, _ = engine_with(FakeStall())
    eng2.monitor = mon2  # type: ignore[assignment]
    asyncio.run(eng2._read_history())
    mon2.error, mon2.history = None, 7
    asyncio.run(eng2._read_history())
    assert eng2.purge_history == 7 and mon2.asked == 2


def test_a_hold_outlives_a_caught_up_spell() -> None:
    """A replica that falls behind again soon after probes did not pay is not tried again
    before the hold ends, whatever happened in between."""
    fake = FakeStall()
    eng, _ = engine_with(fake)
    eng.gate_state = replace(HELD, hold=3)
    eng.state = "idle"
    for _ in range(2):
        eng._gate_check()
    eng.state = "backed_off"  # a new backlog, 2 s later
    eng._sql_pos = (1, 0)
    fake.add(on_cpu=0.3, disk_read=0.7)
    eng._gate_check()
    assert not eng.gate_state.open and eng.gate_state.hold == 0 and "purge" in eng.gate_state.reason
    fake.add(on_cpu=0.3, disk_read=0.7)
    eng._sql_pos = (1, 500 * 1024)
    eng._gate_check()  # the hold is over: the SQL thread is measured alone
    assert "measuring its apply rate" in eng.gate_state.reason and eng.gate_state.fails == 1


# A try's first row changes, by how many leave purge index entries to remove: UPDATEs
# that move an entry, and DELETEs (control.moved_entries).
INSIDE_BIG = replace(OPEN, rate_before=0.0)  # measured alone inside one transaction


@pytest.mark.parametrize(("gate", "rows", "moving", "deletes", "open_", "hold"), [
    (OPEN, 100, 100, 0, False, 120),  # update_k: every row
    (OPEN, 100, 0, 100, False, 120),  # delete: every row
    (OPEN, 100, 50, 0, False, 120),  # half
    (OPEN, 100, 30, 20, False, 120),  # half, of both kinds
    (OPEN, 100, 49, 0, True, 0),
    (OPEN, 99, 99, 0, True, 0),  # too few rows yet to judge
    (OPEN, 200, 40, 30, True, 0),  # the benchmark's "mixed": 20% indexed updates, 15% deletes
    (INSIDE_BIG, 100, 0, 100, True, 0),  # one big DELETE: purge waits for its commit anyway
    (INSIDE_BIG, 100, 100, 0, False, 120),  # UPDATEs that move entries split pages at once
    (replace(OPEN, fails=2), 100, 100, 0, False, 480),  # holds grow as the purge holds do
    (replace(OPEN, fails=5), 100, 100, 0, False, 600),  # ... to ten minutes
    (replace(OPEN, since_base=4.0), 100, 100, 0, True, 0),  # probes already paid, purge counted
    (control.UNMEASURED, 100, 100, 0, True, 0),  # no measured try to stop
    (SHUT, 100, 100, 0, False, 0),
])
def test_a_try_on_changes_that_leave_purge_entries_stops_at_its_first_rows(
        gate: Gate, rows: int, moving: int, deletes: int, open_: bool, hold: int) -> None:
    g = control.moved_entries(gate, rows, moving, deletes)
    assert (g.open, g.hold) == (open_, hold)
    if g is not gate:
        pct = round(100 * (moving + deletes) / rows)
        assert f"{pct}% of the row changes ahead leave index entries for purge" in g.reason
        # what the DBA reads is the cause of the kind that dominates, and the kinds counted
        assert ("tree latch" in g.reason) == (moving >= deletes), g.reason
        assert ("UPDATEs of a key" in g.reason) == (moving > 0) and ("DELETEs)" in g.reason) == (deletes > 0)
        assert g.fails == gate.fails + 1 and g.rate_before is None


def opened_engine(batcher: object) -> tuple[PrefetchEngine, FakePool]:
    fake = FakeStall()
    eng, pool = engine_with(fake)
    eng.batcher = batcher
    eng._gate_check()
    eng._sql_pos = (1, 0)
    eng._gate_check()
    for _ in range(2):
        fake.add(on_cpu=0.3, disk_read=0.7)
        eng._sql_pos = (1, eng._sql_pos[1] + 500 * 1024)
        eng._gate_check()
    assert eng.gate_state.open
    return eng, pool


@pytest.mark.parametrize(("moving", "deletes"), [(250, 0), (0, 250), (100, 50)])
def test_the_engine_stops_a_try_after_its_first_read_of_changes_that_leave_purge_entries(
        moving: int, deletes: int) -> None:
    batcher = SimpleNamespace(rows=1_000, moving=900, deletes=50)  # before the try: not counted
    eng, pool = opened_engine(batcher)
    assert eng._try_from == (1_000, 900, 50)
    # the first read: 250 rows
    batcher.rows, batcher.moving, batcher.deletes = 1_250, 900 + moving, 50 + deletes
    eng._moving_check(eng._try_from)
    assert not eng.gate_state.open and eng.gate_state.hold == 120 and pool.dropped == 1
    assert eng._try_from is None


def test_the_engine_lets_a_try_inside_one_big_delete_run() -> None:
    batcher = SimpleNamespace(rows=0, moving=0, deletes=0)
    eng, pool = opened_engine(batcher)
    # Measured alone inside one transaction: its position did not move.
    eng.gate_state = replace(eng.gate_state, rate_before=0.0)
    batcher.rows, batcher.deletes = 250, 250
    eng._moving_check(eng._try_from)  # type: ignore[arg-type]
    assert eng.gate_state.open and pool.dropped == 0


def test_the_engine_lets_a_try_inside_one_big_delete_run_whatever_the_speed_measured() -> None:
    """InnoDB's count makes the speed alone inside a transaction more than 0: the engine
    says it is inside one (the SQL thread has spent 0.2 s in it)."""
    batcher = SimpleNamespace(rows=0, moving=0, deletes=0)
    eng, pool = opened_engine(batcher)
    assert eng.gate_state.rate_before
    big = engine_module._Trx(1, 0.0, rows=250)
    eng._ahead.append(big)
    eng._head_since = -10.0  # the engine's clock counts seconds from 0
    batcher.rows, batcher.deletes = 250, 250
    eng._moving_check(eng._try_from)  # type: ignore[arg-type]
    assert eng.gate_state.open and pool.dropped == 0


@pytest.mark.parametrize(("inside", "rate_before", "stops"), [
    (None, 1000.0, True), (None, 0.0, False),  # not known: the speed measured alone says
    (True, 1000.0, False), (True, 0.0, False),
])
def test_deletes_count_for_the_early_stop_only_outside_one_big_transaction(
        inside: bool | None, rate_before: float, stops: bool) -> None:
    gate = replace(OPEN, rate_before=rate_before)
    assert control.moved_entries(gate, 250, 0, 250, inside=inside).open is not stops


def test_the_engine_lets_a_try_on_other_changes_run() -> None:
    batcher = SimpleNamespace(rows=0, moving=0, deletes=0)
    eng, pool = opened_engine(batcher)
    batcher.rows, batcher.moving, batcher.deletes = 250, 20, 30  # a few among others
    eng._moving_check(eng._try_from)  # type: ignore[arg-type]
    assert eng.gate_state.open and pool.dropped == 0


def test_a_batcher_without_counts_leaves_no_try_to_judge() -> None:
    eng, _ = opened_engine(None)
    assert eng._try_from is None


class IndexedResolver:
    """Stands in for the cursor's information_schema resolver."""

    def __init__(self, tables: dict[tuple[str, str], Any]) -> None:
        self.tables = tables
        self.asked: list[tuple[str, str]] = []

    def describe(self, schema: str, table: str) -> Any:
        self.asked.append((schema, table))
        return self.tables.get((schema, table))


class StatementReader:
    """Stands in for the relay-log reader: each read gives the next batch of events."""

    def __init__(self, batches: list[list[object]], resolver: IndexedResolver) -> None:
        self.batches = batches
        self.decoder = SimpleNamespace(resolver=resolver, invalidate=lambda tables: None)
        self.position = RelayPosition("relay.000001", 4)

    def read(self, budget: int) -> list[object]:
        return self.batches.pop(0) if self.batches else []


@pytest.mark.parametrize(("set_list", "indexed", "counts", "open_"), [
    ("k = {}", SBTEST, (150, 150), False),  # update_k on a MIXED/STATEMENT source
    ("c = 'x{}'", SBTEST, (150, 0), True),  # update_pk: nothing indexed moves
    ("k = {}", None, (0, 0), True),  # indexes unknown (lookup failed): uncounted, the try runs
])
def test_a_try_on_statements_is_judged_by_their_set_lists_after_one_read(
        set_list: str, indexed: Any, counts: tuple[int, int], open_: bool) -> None:
    batcher = ProbeBatcher()
    eng, pool = opened_engine(batcher)
    pool.submit = lambda probe, tag: True  # type: ignore[attr-defined]
    resolver = IndexedResolver({} if indexed is None else {("s", "t"): indexed})
    stmts: list[object] = [Statement("s", f"UPDATE t SET {set_list.format(i)} WHERE id = {i}", 0, 0)
                           for i in range(150)]
    eng.reader = StatementReader([stmts], resolver)  # type: ignore[assignment]
    asyncio.run(eng._read(1 << 20))
    assert resolver.asked == [("s", "t")]
    assert (batcher.rows, batcher.moving) == counts
    assert eng.gate_state.open == open_
    if not open_:
        assert "leave index entries for purge" in eng.gate_state.reason and eng.gate_state.hold == 120
