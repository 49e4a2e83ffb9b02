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
    perf script -i off.data -F tid,time,trace,ip,sym > off.txt
    python -m tests.bench.offcpu_frames off.txt TID [--top 20]

A switch in the trace lacks (perf drops some on an idle CPU: sched_trace.py) loses that
one wait; none is given to another.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_HEAD = re.compile(r"\s(\d+\.\d+):\s")
_STATE = re.compile(r"prev_state=(\S+)")
# Frames worth naming a wait by: the server's C++ methods and its thread's entry.
_NAMED = re.compile(r"::|^handle_slave_sql$|^handle_slave_worker$")


@dataclass(frozen=True)
class OffCpu:
    span: float  # seconds from the first event to the last
    by_state: Counter[str]  # seconds off CPU by the state the thread left in (R, S, D)
    by_frame: Counter[tuple[str, str]]  # (state, innermost named frame) -> seconds
    waits: Counter[tuple[str, str]]  # (state, frame) -> how many waits


def off_cpu(text: str, tid: int) -> OffCpu:
    """``perf script -F tid,time,trace,ip,sym`` output of sched_switch events -> the
    thread ``tid``'s time off CPU, by state and by frame. Pure."""
    me_out, me_in = f"prev_pid={tid} ", f"next_pid={tid} "
    by_state: Counter[str] = Counter()
    by_frame: Counter[tuple[str, str]] = Counter()
    waits: Counter[tuple[str, str]] = Counter()
    first = last = None
    out: tuple[float, tuple[str, str]] | None = None
    for block in text.split("\n\n"):
        lines = [ln for ln in block.strip().splitlines() if ln.strip()]
        m = _HEAD.search(lines[0]) if lines else None
        if m is None:
            continue
        at = float(m.group(1))
        first = at if first is None else first
        last = at
        head = lines[0]
        if me_out in head:
            st = _STATE.search(head)
            out = (at, (st.group(1)[0] if st else "?", _frame(lines[1:])))
        elif me_in in head and out is not None:
            key = out[1]
            by_frame[key] += at - out[0]
            by_state[key[0]] += at - out[0]
            waits[key] += 1
            out = None
    span = (last - first) if first is not None and last is not None else 0.0
    return OffCpu(span, by_state, by_frame, waits)


def _frame(stack: Iterable[str]) -> str:
    """The innermost named server frame of a stack's lines ("address symbol")."""
    for line in stack:
        parts = line.split(None, 1)
        if len(parts) == 2 and _NAMED.search(parts[1]):
            return parts[1].strip()
    return "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("tid", type=int)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)
    with open(args.trace, encoding="utf-8", errors="replace") as f:
        r = off_cpu(f.read(), args.tid)
    span = r.span or 1.0
    print(f"{r.span:.2f} s traced; off CPU: " + ", ".join(
        f"{s} {v:.2f} s ({100 * v / span:.0f}%)" for s, v in r.by_state.most_common()))
    for (state, frame), v in r.by_frame.most_common(args.top):
        n = r.waits[(state, frame)]
        print(f"{v:7.3f} s {100 * v / span:5.1f}%  {n:6d} waits  {1e6 * v / n:7.0f} µs each"
              f"  {state}  {frame}")


if __name__ == "__main__":
    main()
