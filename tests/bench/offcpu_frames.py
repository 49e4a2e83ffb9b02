"""Where one server thread waits, by the server function it waited in: off-CPU time from the
kernel's switches, each named by its state and the innermost named frame of its user stack.

``sched_trace.py`` splits a thread's time by state (read, flush, other, preempted); it
cannot tell one "other" wait from another, and an S-state wait inside a row update (a
free page, a page being written out) looks there like a lock. With DWARF user stacks
``perf`` names the server's exported functions (``handler::ha_update_row``,
``rpl_slave_state::update``) even in a stripped ``mariadbd``; InnoDB's own are
``[unknown]``, so a wait is named by the innermost frame that has a name.

A wait lasts from the thread's switch out to its next switch in. Both events are wanted,
so the recording is system-wide with a filter, not ``-t`` (whose events are the
thread's own switches out only)::

    perf record -e sched:sched_switch -a --filter "prev_pid == TID || next_pid == TID" \\
        --call-graph dwarf,8192 -o off.data -- sleep 8
    perf script -i off.data -F comm,tid,cpu,time,event,trace,ip,sym > off.txt
    python -m tests.bench.offcpu_frames off.txt TID [--top 20]

The lines are read as sched_trace.py reads its own (``_events``). A switch in the trace
lacks (perf drops some on an idle CPU: sched_trace.py) loses that one wait; none is given
to another.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from tests.bench.sched_trace import _events

# Frames worth naming a wait by: the server's C++ methods and its thread's entry.
_NAMED = re.compile(r"::|^handle_slave_sql$|^handle_slave_worker$")


@dataclass(frozen=True)
class OffCpu:
    span: float  # seconds from the first event to the last
    by_frame: Counter[tuple[str, str]]  # (state R/S/D, innermost named frame) -> seconds off CPU
    waits: Counter[tuple[str, str]]  # (state, frame) -> how many waits

    @property
    def by_state(self) -> Counter[str]:
        """Seconds off CPU by the state the thread left in."""
        out: Counter[str] = Counter()
        for (state, _), seconds in self.by_frame.items():
            out[state] += seconds
        return out


def off_cpu(lines: Iterable[str], tid: int) -> OffCpu:
    """``perf script`` lines of sched_switch events (the fields above) -> the thread
    ``tid``'s time off CPU, by state and by frame. Pure."""
    me = str(tid)
    by_frame: Counter[tuple[str, str]] = Counter()
    waits: Counter[tuple[str, str]] = Counter()
    first = last = None
    out: tuple[float, tuple[str, str]] | None = None
    for at, event, f, stack in _events(lines):
        first = at if first is None else first
        last = at
        if event != "sched_switch":
            continue
        if f.get("prev_pid") == me:
            out = (at, (f.get("prev_state", "?")[:1] or "?", _frame(stack)))
        elif f.get("next_pid") == me and out is not None:
            by_frame[out[1]] += at - out[0]
            waits[out[1]] += 1
            out = None
    span = (last - first) if first is not None and last is not None else 0.0
    return OffCpu(span, by_frame, waits)


def _frame(stack: Iterable[str]) -> str:
    """The innermost named server frame of a stack's function names."""
    return next((fn for fn in stack if _NAMED.search(fn)), "-")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("tid", type=int)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)
    with open(args.trace, encoding="utf-8", errors="replace") as f:
        r = off_cpu(f, args.tid)
    span = r.span or 1.0
    print(f"{r.span:.2f} s traced; off CPU: " + ", ".join(
        f"{s} {v:.2f} s ({100 * v / span:.0f}%)" for s, v in r.by_state.most_common()))
    for (state, frame), v in r.by_frame.most_common(args.top):
        n = r.waits[(state, frame)]
        print(f"{v:7.3f} s {100 * v / span:5.1f}%  {n:6d} waits  {1e6 * v / n:7.0f} µs each"
              f"  {state}  {frame}")


if __name__ == "__main__":
    main()
