"""The SQL thread's time from the kernel's scheduler events: a reference for stall.py.

``prefetch/stall.py`` samples /proc many times a second and splits the time
between two samples by what the samples caught. The kernel's tracepoints
record every change instead: ``sched_switch`` each time the thread leaves a
CPU, with its state (D: uninterruptible, a disk read's or a flush's wait; S:
a lock, a condition, another thread; R: preempted) and its kernel stack, and
``sched_stat_runtime`` the CPU time it ran before. The independent measurement
issue 10 asked to check stall.py against.

Only events in the thread's own context are used. On this machine (a VM, Linux
6.1) the switch *to* a thread and its wakeup are mostly missing from the trace
when they happen on an idle CPU (a dd of O_DIRECT reads: 15,220 switches out,
197 in), so the time off CPU after a switch out is the time to the next
switch out less the CPU time reported in between. That time includes the wait
for a core after the thread was woken: stall.py counts that wait as
``cpu_wait``.

``split`` is pure (``perf script`` lines in, seconds per state out);
``PerfTrace`` runs ``perf record``. Tracing needs root (or
``perf_event_paranoid`` <= -1) and Debian's linux-perf.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from lagd.prefetch.stall import FLUSH_WAITS

_EVENT = re.compile(
    r"^\s*\S.*?\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+sched:(sched_switch|sched_stat_runtime):\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")
# What the time off CPU after a switch out was, by the state the thread left in.
OFF_STATES = ("read", "flush", "other", "preempted")


def _events(lines: Iterable[str]) -> Iterator[tuple[float, str, dict[str, str], list[str]]]:
    """(time, event, fields, kernel stack's function names) per event of ``perf script``."""
    cur: tuple[float, str, dict[str, str]] | None = None
    stack: list[str] = []
    for line in lines:
        m = _EVENT.match(line)
        if m:
            if cur is not None:
                yield (*cur, stack)
            # prev_comm/next_comm may hold spaces: the numeric and state fields do not.
            cur, stack = (float(m.group(2)), m.group(3), dict(_FIELD.findall(m.group(4)))), []
        elif cur is not None and line.strip():
            parts = line.split()
            stack.append(parts[1] if len(parts) > 1 else parts[0])
    if cur is not None:
        yield (*cur, stack)


def off_state(prev_state: str, stack: list[str]) -> str:
    """What a switch out was, from its state and kernel stack."""
    if prev_state.startswith("D"):
        # stall.py's rule for a wchan, over every frame: a flush, else a page read.
        return "flush" if any(x in fr for fr in stack for x in FLUSH_WAITS) else "read"
    if prev_state.startswith("R"):
        return "preempted"
    return "other"


def split(lines: Iterable[str], tids: Iterable[int], start: float, end: float) -> dict[str, float]:
    """Seconds the threads ``tids`` spent in ``[start, end]``: ``on_cpu`` and, per
    :data:`OFF_STATES`, off CPU after a switch out in that state (to the next
    switch out, less the CPU time reported in between). The time before a
    thread's first switch out and after its last is not counted: ``unknown``.
    """
    wanted = {str(t) for t in tids}
    out = dict.fromkeys(("on_cpu", *OFF_STATES, "unknown"), 0.0)
    last: dict[str, tuple[float, str]] = {}  # tid -> (time of its last switch out, what it was)
    ran: dict[str, float] = {}  # tid -> CPU seconds reported since

    def add(key: str, lo: float, hi: float) -> None:
        lo, hi = max(lo, start), min(hi, end)
        if hi > lo:
            out[key] += hi - lo

    first: float | None = None
    for at, event, f, stack in _events(lines):
        first = at if first is None else first
        if event == "sched_stat_runtime":
            tid = f.get("pid", "")
            if tid in wanted:
                ran[tid] = ran.get(tid, 0.0) + int(f.get("runtime", "0")) / 1e9
            continue
        tid = f.get("prev_pid", "")
        if tid not in wanted:
            continue
        run = ran.pop(tid, 0.0)
        before = last.get(tid)
        if before is None:
            add("unknown", first, at)
        else:
            off_until = max(before[0], at - run)
            add(before[1], before[0], off_until)  # off CPU first, then it ran up to this switch
            add("on_cpu", off_until, at)
        last[tid] = (at, off_state(f.get("prev_state", ""), stack))
    for at, _ in last.values():
        add("unknown", at, end)
    return out


class PerfTrace:
    """``perf record`` of the scheduler events of some threads, timed by CLOCK_MONOTONIC
    (the clock of ``time.monotonic()``), from ``__enter__`` to ``__exit__``."""

    def __init__(self, tids: Iterable[int], out: Path) -> None:
        self.tids = tuple(tids)
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None
        self.lost: str | None = None

    @staticmethod
    def unavailable() -> str | None:
        """Why tracing cannot run here, or None."""
        if shutil.which("perf") is None:
            return "perf is not installed (Debian: apt-get install linux-perf)"
        paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
        if os.geteuid() != 0 and paranoid.exists() and int(paranoid.read_text()) > -1:
            return "tracepoints need root or kernel.perf_event_paranoid <= -1"
        return None

    def __enter__(self) -> PerfTrace:
        left = " || ".join(f"prev_pid == {t}" for t in self.tids)
        ran = " || ".join(f"pid == {t}" for t in self.tids)
        # A large buffer and a higher priority: on two saturated cores perf's own writer
        # could fall behind, and the kernel would drop events (perf then says so: ``lost``).
        self.proc = subprocess.Popen(
            ["nice", "-n", "-10", "perf", "record", "-m", "8M", "-k", "CLOCK_MONOTONIC", "-a", "-g",
             "-o", str(self.out),
             "-e", "sched:sched_switch", "--filter", left,
             "-e", "sched:sched_stat_runtime", "--filter", ran],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # perf says nothing when it is ready: its output file has its header then.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not self.out.exists() or self.out.stat().st_size == 0):
            if self.proc.poll() is not None:
                raise RuntimeError(f"perf record failed: {self.proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        # "Processed N events and lost M chunks!": the split is then not exact.
        self.lost = next((ln.strip() for ln in err.splitlines() if "lost" in ln.lower()), None)

    def lines(self) -> list[str]:
        return subprocess.run(
            ["perf", "script", "-i", str(self.out), "-F", "comm,tid,cpu,time,event,trace,ip,sym"],
            capture_output=True, text=True, check=True).stdout.splitlines()
