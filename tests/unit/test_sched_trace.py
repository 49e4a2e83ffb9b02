"""The kernel-trace reference for stall.py (tests/bench/sched_trace.py): perf script lines in,
seconds per state out."""
from pathlib import Path

import pytest
from tests.bench.sched_trace import OFF_STATES, _events, off_state, split

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sched" / "perf-script-cold-catchup.txt"


def switch(at: float, tid: int, state: str, *stack: str) -> list[str]:
    head = (f"mariadbd {tid} [000] {at:.6f}: sched:sched_switch: prev_comm=mariadbd prev_pid={tid}"
            f" prev_prio=120 prev_state={state} ==> next_comm=swapper/0 next_pid=0 next_prio=120")
    return [head, *(f"\tffffffff8226{i:04x} {fn}" for i, fn in enumerate(stack)), ""]


def ran(at: float, tid: int, ns: int) -> list[str]:
    return [f"mariadbd {tid} [000] {at:.6f}: sched:sched_stat_runtime: comm=mariadbd pid={tid}"
            f" runtime={ns} [ns]", "\tffffffff813bf5dd update_curr", ""]


# Thread 7: out in D (a read) at 1.000, ran 0.2 ms, out in S at 1.005, ran 0.1 ms, out
# preempted at 1.020, ran 3 ms, out in D on an fsync at 1.030; thread 8 is not asked for.
TRACE = [*switch(1.000, 7, "D", "io_schedule", "iomap_dio_rw", "__x64_sys_pread64"),
         *ran(1.0049, 7, 200_000), *switch(1.005, 7, "S", "futex_wait"),
         *switch(1.010, 8, "D", "io_schedule"),
         *ran(1.0199, 7, 100_000), *switch(1.020, 7, "R"),
         *ran(1.0299, 7, 3_000_000), *switch(1.030, 7, "D", "jbd2_log_wait_commit", "ext4_sync_file")]


@pytest.mark.parametrize(("start", "end", "want"), [
    # the whole trace and 10 ms after: off CPU first, then the CPU time reported before the next switch
    (1.000, 1.040, {"read": 0.0048, "other": 0.0149, "preempted": 0.007, "on_cpu": 0.0033,
                    "flush": 0.0, "unknown": 0.010}),
    # a window that starts inside the read and ends inside the preemption
    (1.002, 1.025, {"read": 0.0028, "other": 0.0149, "preempted": 0.005, "on_cpu": 0.0003,
                    "flush": 0.0, "unknown": 0.0}),
    # before the first switch out the state is not known
    (0.990, 1.000, {"read": 0.0, "other": 0.0, "preempted": 0.0, "on_cpu": 0.0, "flush": 0.0,
                    "unknown": 0.0}),
])
def test_split_by_the_state_each_switch_out_left_in(start, end, want):
    got = split(TRACE, [7], start, end)
    assert got == pytest.approx(want, abs=1e-9)


def test_other_threads_and_unknown_time():
    got = split(TRACE, [8], 1.000, 1.040)
    # thread 8's only event is a switch out: before it and after it nothing is known
    assert got["unknown"] == pytest.approx(0.040)
    assert sum(v for k, v in got.items() if k != "unknown") == 0.0
    both = split(TRACE, [7, 8], 1.000, 1.040)
    assert both["read"] == pytest.approx(0.0048)  # thread 8 never switched out again


@pytest.mark.parametrize(("state", "stack", "want"), [
    ("D", ["io_schedule_timeout", "__iomap_dio_rw", "__x64_sys_pread64"], "read"),
    ("D", ["jbd2_log_wait_commit", "ext4_sync_file", "__x64_sys_fsync"], "flush"),
    ("D", ["file_write_and_wait_range"], "flush"),
    ("D", [], "read"),
    ("S", ["futex_wait"], "other"),
    ("I", [], "other"),
    ("R", ["irqentry_exit_to_user_mode"], "preempted"),
    ("R+", [], "preempted"),
])
def test_off_state(state, stack, want):
    assert off_state(state, stack) == want


def test_recorded_trace_accounts_for_every_second():
    """A real excerpt (tests/fixtures/sched/ORIGIN.md): each event parsed, every second
    of the span in exactly one state, the CPU time equal to what the kernel reported."""
    lines = FIXTURE.read_text().splitlines()
    events = list(_events(lines))
    assert len(events) == 57
    assert {e for _, e, _, _ in events} == {"sched_switch", "sched_stat_runtime"}
    start, end = events[0][0], events[-1][0]
    got = split(lines, [14019], start, end)
    assert sum(got.values()) == pytest.approx(end - start)
    switches = [at for at, e, _, _ in events if e == "sched_switch"]
    reported = sum(int(f["runtime"]) for at, e, f, _ in events
                   if e == "sched_stat_runtime" and switches[0] < at <= switches[-1]) / 1e9
    assert got["on_cpu"] == pytest.approx(reported)
    assert all(got[s] > 0 for s in ("read", "other", "preempted"))
    assert got["flush"] == 0.0
    assert set(got) == {"on_cpu", *OFF_STATES, "unknown"}
