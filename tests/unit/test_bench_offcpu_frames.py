"""The off-CPU-by-frame reference (tests/bench/offcpu_frames.py): perf script lines in, each
wait of one thread named by its state and its innermost named server frame."""
import pytest
from tests.bench.offcpu_frames import off_cpu


def out(at: float, tid: int, state: str, *user: str) -> str:
    head = (f"mariadbd {tid} [000] {at:.6f}: sched:sched_switch: prev_comm=mariadbd prev_pid={tid}"
            f" prev_prio=120 prev_state={state} ==> next_comm=mariadbd next_pid=99 next_prio=120")
    frames = ["\tffffffff82302a65 __schedule", "\tffffffff82303543 schedule",
              *(f"\t{0xe23b8b + i:x} {fn}" for i, fn in enumerate(user))]
    return "\n".join([head, *frames])


def back(at: float, tid: int, prev: int = 99) -> str:
    return (f"mariadbd {prev} [001] {at:.6f}: sched:sched_switch: prev_comm=mariadbd prev_pid={prev}"
            f" prev_prio=120 prev_state=S ==> next_comm=mariadbd next_pid={tid} next_prio=120"
            "\n\tffffffff82302a65 __schedule")


TRACE = "\n\n".join([
    out(10.000, 7, "D", "[unknown]", "handler::ha_rnd_pos", "Rows_log_event::find_row"), back(10.0002, 7),
    out(10.001, 7, "S", "[unknown]", "[unknown]", "handler::ha_update_row"), back(10.0027, 7),
    out(10.003, 7, "D", "handler::ha_rnd_pos"), back(10.0031, 7),
    out(10.004, 7, "R+", "[unknown]"), back(10.0045, 7),
    out(10.005, 8, "D", "handler::ha_rnd_pos"), back(10.009, 8),  # another thread: not counted
    out(10.006, 7, "S", "handler::ha_write_row"),  # its switch in is missing: that wait is lost
    out(10.007, 7, "S", "rpl_slave_state::update"), back(10.010, 7),
]) + "\n"


def test_each_wait_is_named_by_state_and_innermost_named_frame() -> None:
    r = off_cpu(TRACE.splitlines(), 7)
    assert r.span == pytest.approx(0.010)
    assert dict(r.by_frame) == pytest.approx({
        ("D", "handler::ha_rnd_pos"): 0.0003, ("S", "handler::ha_update_row"): 0.0017,
        ("R", "-"): 0.0005, ("S", "rpl_slave_state::update"): 0.003})
    assert r.waits[("D", "handler::ha_rnd_pos")] == 2
    assert dict(r.by_state) == pytest.approx({"D": 0.0003, "S": 0.0047, "R": 0.0005})


def test_a_thread_not_in_the_trace_has_no_waits() -> None:
    r = off_cpu(TRACE.splitlines(), 5)
    assert not r.by_frame and not r.by_state and r.span == pytest.approx(0.010)
