"""Where the SQL thread's time goes, measured from the kernel: on CPU, waiting for a
CPU, blocked on disk reads, or waiting on something else.

Prefetch helps only an applier that waits for page reads, and only with CPU to
spare: on a CPU-bound replica its probes take cycles from the SQL thread. So
this module measures the applier threads directly instead of inferring it from
lag or buffer-pool counters.

Finding the threads (their Linux thread ids):

- MariaDB (10.5+): ``information_schema.PROCESSLIST.TID``, for the rows whose
  COMMAND is ``Slave_SQL`` (or ``Slave_worker`` with parallel replication).
  It needs no performance_schema (off by default, and off in the sandbox) but
  the PROCESS privilege (recommended in lagd's grants; without it the query
  sees only lagd's own sessions). MariaDB 10.11
  does not name its threads: every task's ``comm`` is ``mariadbd``, so /proc
  alone cannot tell the SQL thread from a connection.
- MySQL 8: ``performance_schema.threads.THREAD_OS_ID`` for
  ``thread/sql/replica_sql`` / ``replica_worker`` (``slave_*`` before 8.0.26).

With parallel replication the workers apply and the SQL thread only
distributes: the workers are measured, the coordinator only without them.

Per thread, many times a second (``StallMonitor.sample``):

- ``/proc/<tid>/schedstat``: nanoseconds on CPU and waiting on a run queue
  (exact, not sampled; world-readable);
- ``/proc/<tid>/stat``: the state letter (R running, D uninterruptible: disk,
  S sleeping: a lock, a condition, a commit) for the time off CPU; also
  utime+stime when schedstat is missing;
- ``/proc/<tid>/wchan`` (where a blocked thread sleeps) tells a page read from
  an fsync, and ``/proc/<tid>/io`` read_bytes confirms reads. Both need the
  right to ptrace the server (same user or CAP_SYS_PTRACE); without it (lagd
  as its own user under the hardened unit) every D state counts as a disk read,
  which is what it mostly is for an applier (commits with
  innodb_flush_log_at_trx_commit=1 are the exception: their fsync shows as D).

Machine CPU headroom comes from /proc/stat. Everything that decides is a pure
function over recorded samples; ``StallMonitor`` only reads files.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lagd.prefetch import control
from lagd.threadname import name_this_thread

T = TypeVar("T")
Batch = list[tuple[float, tuple[str | None, ...]]]  # (monotonic time, each file's text or None) a sample

try:
    # Batches of samples read with the GIL released once (_procread.c): from Python
    # each read and each wait handed the GIL over and back, six times a sample.
    if os.environ.get("LAGD_PURE_PYTHON"):
        raise ImportError("pure Python requested")
    from lagd.prefetch._procread import MAX_CELLS as _MAX_CELLS
    from lagd.prefetch._procread import read_batch as _read_batch

    READ_BATCH: Callable[[tuple[int, ...], int, float], Batch] | None = _read_batch
    # Files times samples in one batch: more threads, fewer samples a batch; past it
    # (over a thousand appliers) a sample a wake, as without the C reader.
    MAX_CELLS = _MAX_CELLS
except ImportError:
    READ_BATCH, MAX_CELLS = None, 0
# A batch spans at most this long: what the gate and /status see of the split is
# this much older than with one sample a wake (a second judged: under a tenth).
BATCH_SECONDS = 0.1

log = logging.getLogger("lagd.prefetch.stall")

STATES = ("on_cpu", "cpu_wait", "disk_read", "flush_wait", "other_wait")

# Thread-samples a second, all applier threads together: the SQL thread at 50 Hz, eight
# parallel workers at 12.5 (a sample of one thread costs about 30 µs, and eight at
# 50 Hz took 2% of a core from a machine their own queue for a core already
# saturated). Their sum per second is what the gate judges, so its precision holds.
# While the gate keeps prefetch out it only watches for reads to rise: a quarter of
# that. Sampling eight workers of a statement-based parallel catch-up slowed it
# (0.86-0.96x with lagd sending no probe, 0.97-0.99x with lagd unable to see the
# threads; benchmarks.md), so the sampler is kept to what is judged.
THREAD_SAMPLES_PER_S = 100.0
KEPT_OUT_SAMPLES_PER_S = 25.0
# With no prefetch engine (prefetch off in the config, or the engine down) nothing
# judges the split: it is only reported (lagd_sql_thread_seconds_total, /status over
# the last 2 s, whose on-CPU and queue shares are exact from schedstat; only the
# off-CPU time is split by samples). On the 2-core benchmark VM a sample costs
# about 300 µs of CPU however little it reads (waking the thread, taking the GIL):
# at 50 Hz, 1.9% of a core, most of what lagd cost while only watching an update_k
# catch-up (2.1-2.4 CPU-seconds).
WATCH_SAMPLES_PER_S = 20.0
MIN_HZ, MAX_HZ = 5.0, 50.0


def sampling_hz(threads: int, budget: float = THREAD_SAMPLES_PER_S, wish: float = MAX_HZ) -> float:
    """Samples a second of each thread: ``wish``, within ``budget`` thread-samples a
    second for all of them, and never under MIN_HZ."""
    return max(MIN_HZ, min(wish, budget / max(1, threads)))


_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")
_MIX_DECAY = 0.98  # per sample: at 50 Hz the wait mix of about the last second
# Where a thread blocked in D sleeps when it waits for data or metadata to be
# written, not read (fsync of the redo log at commit, page write-back): parts of
# the kernel function names in its wchan (tests/bench/sched_trace.py: in its stack).
FLUSH_WAITS = ("fsync", "sync_file", "write_and_wait", "writeback", "jbd2", "issue_flush",
               "log_wait_commit", "wait_transaction")

# The sampler thread's nice value. At the priority of the rest of lagd it woke,
# took a core and kept the SQL thread waiting when its read completed, and then
# found it runnable (R) instead of reading: against the kernel's own record
# (tests/bench/sched_trace.py) the read share of cold catch-ups read 23-31%
# where the thread read 29-41% of the time (four runs), and it preempted the
# SQL thread 0.4-0.9 s a 10-s catch-up. At nice 19 the woken SQL thread goes
# first: 36% against 39% (the 39 with its wait for a core after each read),
# 0.1 s of preemptions. docs/prefetch.md, "Checked against the kernel's own record".
SAMPLER_NICE = 19
_nice_refused: list[str] = []  # why the sampler could not lower its priority, said once


def _yield_to_the_server() -> None:
    """Lower the calling thread's (only its) priority to SAMPLER_NICE."""
    try:
        # On Linux a thread id names one thread: the rest of lagd keeps its priority.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SAMPLER_NICE)
    except (OSError, AttributeError) as e:
        if not _nice_refused:
            _nice_refused.append(str(e))
            log.info("the stall sampler cannot lower its priority (%s): the SQL thread's read share"
                     " reads low by up to a quarter (systemd: allow setpriority in SystemCallFilter)", e)


# ----- finding the applier threads --------------------------------------------

MARIADB_APPLIERS_SQL = ("SELECT TID AS tid, COMMAND AS role FROM information_schema.PROCESSLIST"
                        " WHERE COMMAND IN ('Slave_SQL', 'Slave_worker')")
MYSQL_APPLIERS_SQL = ("SELECT THREAD_OS_ID AS tid, NAME AS role FROM performance_schema.threads"
                      " WHERE NAME IN ('thread/sql/replica_sql', 'thread/sql/slave_sql',"
                      " 'thread/sql/replica_worker', 'thread/sql/slave_worker')")


def appliers_sql(mariadb: bool) -> str:
    """The query that lists the applier threads' OS ids (columns ``tid``, ``role``)."""
    return MARIADB_APPLIERS_SQL if mariadb else MYSQL_APPLIERS_SQL


def applier_tids(rows: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
    """The threads that apply: the workers when there are any, else the SQL thread."""
    sql: list[int] = []
    workers: list[int] = []
    for r in rows:
        tid = r.get("tid")
        if tid is None or int(tid) <= 0:
            continue
        role = str(r.get("role") or "").lower()
        if role.endswith("worker"):
            workers.append(int(tid))
        elif role.endswith(("slave_sql", "replica_sql")):  # never the IO thread
            sql.append(int(tid))
    return tuple(sorted(workers or sql))


# ----- reading /proc (pure parsers) ------------------------------------------------

@dataclass(frozen=True, slots=True)
class ThreadSample:
    """One reading of one thread. ``None``: not readable here."""

    tid: int
    at: float  # monotonic seconds
    state: str  # R, D, S, ...
    cpu_ns: float | None  # cumulative on CPU (schedstat; else utime+stime)
    queue_ns: float | None  # cumulative runnable but waiting for a CPU (schedstat)
    wchan: str | None = None
    read_bytes: int | None = None


def parse_stat(text: str) -> tuple[str, float]:
    """(state letter, utime+stime in ns) from /proc/<tid>/stat."""
    rest = text[text.rindex(")") + 2:].split()  # comm may hold spaces and parentheses
    return rest[0], (int(rest[11]) + int(rest[12])) * _TICK_NS


def parse_schedstat(text: str) -> tuple[float, float]:
    """(ns on CPU, ns waiting on a run queue) from /proc/<tid>/schedstat."""
    run, wait, _slices = text.split()
    return float(run), float(wait)


def parse_io(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return None


def parse_cpu_line(text: str) -> tuple[float, float]:
    """(busy, total) jiffies from the first ``cpu`` line of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            f = [float(x) for x in line.split()[1:]]
            idle = f[3] + (f[4] if len(f) > 4 else 0.0)  # idle + iowait: a core free to run
            total = sum(f[:8])  # guest time is already inside user/nice
            return total - idle, total
    raise ValueError("no cpu line in /proc/stat")


def cpu_headroom(prev: tuple[float, float], cur: tuple[float, float], cpus: int) -> float | None:
    """Idle cores between two /proc/stat readings (None: no time passed)."""
    total = cur[1] - prev[1]
    if total <= 0:
        return None
    return max(0.0, cpus * (1.0 - (cur[0] - prev[0]) / total))


# ----- the classifier ---------------------------------------------------------------

def off_state(prev: ThreadSample, cur: ThreadSample) -> str | None:
    """What ``cur`` shows the thread waiting on, or None when it is running."""
    if cur.state == "R":
        return None
    if cur.state == "D":
        read = cur.read_bytes is not None and prev.read_bytes is not None and cur.read_bytes > prev.read_bytes
        if cur.wchan and any(w in cur.wchan for w in FLUSH_WAITS) and not read:
            return "flush_wait"
        return "disk_read"
    return "other_wait"


def classify(prev: ThreadSample, cur: ThreadSample,
             mix: Mapping[str, float] | None = None) -> dict[str, float]:
    """Seconds per state between two samples of one thread.

    On-CPU and run-queue time are exact when schedstat is there. The rest of
    the interval is off CPU; a sample is an instant, so off-CPU time is split by
    ``mix``: how often recent samples caught the thread in each wait (a read of
    80 µs is caught by some samples, not by the two around it). Without a mix,
    by what the two ends show.
    """
    wall = max(0.0, cur.at - prev.at)
    out = dict.fromkeys(STATES, 0.0)
    if wall == 0.0:
        return out
    if cur.cpu_ns is not None and prev.cpu_ns is not None:
        on = min(wall, max(0.0, (cur.cpu_ns - prev.cpu_ns) / 1e9))
    else:
        on = wall if cur.state == "R" else 0.0
    queued = 0.0
    if cur.queue_ns is not None and prev.queue_ns is not None:
        queued = min(wall - on, max(0.0, (cur.queue_ns - prev.queue_ns) / 1e9))
    out["on_cpu"], out["cpu_wait"] = on, queued
    off = wall - on - queued
    if mix is None:
        seen = off_state(prev, cur) or (off_state(prev, prev) if prev.state != "R" else None)
        mix = {seen: 1.0} if seen else {}
    total = sum(mix.values())
    if total <= 0:
        out["on_cpu"] += off  # running whenever looked at: schedstat's rounding
        return out
    for state, weight in mix.items():
        out[state] += off * weight / total
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # "reads", "cpu", "flush", "other", "idle", "unknown"
    text: str
    prefetch_can_help: bool


# The verdict a DBA reads and the gate that decides judge by the same thresholds.
READ_SHARE, CPU_SHARE, MIN_HEADROOM = control.READ_SHARE, control.CPU_SHARE, control.MIN_HEADROOM


def shares(seconds: Mapping[str, float]) -> dict[str, float] | None:
    total = sum(seconds.get(s, 0.0) for s in STATES)
    if total <= 0:
        return None
    return {s: seconds.get(s, 0.0) / total for s in STATES}


def verdict(seconds: Mapping[str, float], *, running: bool, busy: bool = True,
            headroom: float | None = None, threads: int = 1) -> Verdict:
    """What the split says about prefetch, in words a DBA reads in lagctl status.

    ``running``: applier threads were found; ``busy``: there is a backlog (an
    idle SQL thread waiting for events sleeps, which says nothing);
    ``headroom``: idle cores, or None when unknown; ``threads``: how many
    applier threads the seconds are summed over. Parallel workers spend most
    of their time waiting for work or for their turn to commit, which /proc
    cannot tell from a lock wait; their reads are judged as the gate judges
    them, by how many of them wait on a read on average (control.StallWindow).
    """
    if not running:
        return Verdict("unknown", "SQL thread not running: nothing to measure", False)
    if not busy:
        return Verdict("idle", "SQL thread idle: the replica is caught up", False)
    split = shares(seconds)
    if split is None:
        return Verdict("unknown", "no samples of the SQL thread yet", False)
    pct = {s: round(100 * v) for s, v in split.items()}
    cpu = split["on_cpu"] + split["cpu_wait"]
    many = threads > 1
    who = f"{threads} parallel workers:" if many else "SQL thread"
    readers = split["disk_read"] * threads
    if readers >= READ_SHARE:
        reads = (f"{who} {readers:.1f} of them waiting on disk reads on average ({pct['disk_read']}% of"
                 " their time)" if many else f"{who} {pct['disk_read']}% waiting on disk reads")
        if headroom is not None and headroom < MIN_HEADROOM:
            return Verdict("reads", f"{reads}, but the machine has no CPU to spare ({headroom:.1f} idle"
                                    " cores): prefetch would slow it down", False)
        return Verdict("reads", f"{reads}: prefetch can help", True)
    if cpu >= CPU_SHARE:
        waiting = f", {pct['cpu_wait']}% of it waiting for a core" if split["cpu_wait"] >= 0.1 else ""
        return Verdict("cpu", f"{who} {round(100 * cpu)}% on CPU{waiting}: CPU-bound,"
                              " prefetch cannot help", False)
    if split["flush_wait"] >= max(split["other_wait"], READ_SHARE):
        return Verdict("flush", f"{who} {pct['flush_wait']}% waiting on page flushes and commits:"
                                " see lagctl advise", False)
    if many:
        return Verdict("other", f"{who} {pct['other_wait']}% of their time waiting for work, their turn"
                                " to commit or locks: prefetch cannot help", False)
    return Verdict("other", f"SQL thread {pct['other_wait']}% waiting on locks, commits or other threads:"
                            " prefetch cannot help", False)


# ----- the sampler -------------------------------------------------------------------

Reader = Callable[[str], str]  # path -> text (raises OSError when unreadable)


def _read(path: str) -> str:
    # Plain system calls: a text-mode open() builds a buffered reader and a decoder
    # per file (53 -> 32 µs a sample). The sampler keeps its files open (ProcFiles).
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts).decode("ascii", "replace")


# What a sample reads of each thread, in this order (thread_sample's arguments).
THREAD_FILES = ("stat", "schedstat", "wchan", "io")


def thread_sample(tid: int, at: float, stat: str | None, schedstat: str | None, wchan: str | None,
                  io: str | None) -> ThreadSample | None:
    """One sample of a thread from its files' texts (None: not readable), or None when it is
    gone. Pure."""
    if stat is None:
        return None
    try:
        state, ticks = parse_stat(stat)
    except (ValueError, IndexError):
        return None
    cpu: float | None = ticks
    queue: float | None = None
    if schedstat is not None:
        with contextlib.suppress(ValueError):  # no schedstat: utime+stime, queue unknown
            cpu, queue = parse_schedstat(schedstat)
    where: str | None = None
    if state == "D" and wchan is not None:  # only a blocked thread's wait site tells anything
        where = wchan.strip() or None
        if where == "0":  # the kernel hides it from other users
            where = None
    read_bytes = None
    if io is not None:
        with contextlib.suppress(ValueError):
            read_bytes = parse_io(io)
    return ThreadSample(tid, at, state, cpu, queue, where, read_bytes)


def _read_each(read: Reader, paths: Iterable[str]) -> list[str | None]:
    out: list[str | None] = []
    for path in paths:
        try:
            out.append(read(path))
        except OSError:
            out.append(None)
    return out


class ProcFiles:
    """The sampler's /proc files, kept open between samples.

    A sample reads four files of each applier thread and /proc/stat. Opened, read
    to the end and closed one by one, that was 16 system calls for one thread
    (wchan was read only in D), each giving the GIL back and taking it again,
    against 5 now; and while the event loop ran
    each taking-back waited for it: against a thread holding the GIL a sample
    cost 1,300 µs of CPU and 14.6 of the 50 a second were made; kept open and read
    with one pread each, 600 µs and 31. /proc's files make their text afresh on
    a read at offset 0. Only the sampler's thread uses an instance.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        # Files the kernel refused to open (the hardened unit: another user's
        # /proc/<tid>/io), not tried again until the files asked for change: each
        # sample tried them afresh, one failing open() a sample.
        self._refused: set[str] = set()
        self._asked: tuple[str, ...] = ()

    def read_many(self, paths: list[str]) -> list[str | None]:
        """Each file's text, None where it cannot be opened or read (a thread gone,
        a file hidden); a file that failed is opened afresh next time, one refused
        (permission) once the files asked for change."""
        self._open(paths)
        fds = self._fds
        out: list[str | None] = []
        for path in paths:
            fd = fds.get(path)
            try:
                if fd is None:
                    raise OSError("not open")
                out.append(os.pread(fd, 4096, 0).decode("ascii", "replace"))
            except OSError:
                out.append(None)
                self._drop(path)
        return out

    def read_batch(self, paths: list[str], n: int, interval: float) -> Batch:
        """``n`` samples of the files ``interval`` seconds apart (a wait before each),
        each (monotonic time, texts as read_many gives them), read in C (READ_BATCH)."""
        assert READ_BATCH is not None
        self._open(paths)
        fds = tuple(self._fds.get(p, -1) for p in paths)
        batch = READ_BATCH(fds, n, interval)
        for i, path in enumerate(paths):
            if fds[i] >= 0 and any(texts[i] is None for _, texts in batch):
                self._drop(path)  # opened afresh next time, as read_many does
        return batch

    def _open(self, paths: list[str]) -> None:
        asked = tuple(paths)
        if asked != self._asked:
            self._asked, self._refused = asked, set()
        if len(self._fds) > len(paths) or any(p not in self._fds and p not in self._refused for p in paths):
            self._reopen(paths)

    def _reopen(self, paths: list[str]) -> None:
        wanted = set(paths)
        for path in [p for p in self._fds if p not in wanted]:
            self._drop(path)
        for path in paths:
            if path not in self._fds and path not in self._refused:
                try:
                    self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except PermissionError:
                    self._refused.add(path)
                except OSError:
                    pass  # a thread gone: tried again next sample

    def _drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for path in list(self._fds):
            self._drop(path)


class StallMonitor:
    """Accumulates the applier threads' split and the machine's idle cores.

    ``set_threads(tids)`` whenever the applier threads are (re)discovered (after
    a restart or START SLAVE they change); ``sample()`` many times a second, or
    ``start()`` a daemon thread that does; ``seconds`` (state -> seconds,
    summed over the threads) and ``snapshot()`` for metrics and /status.
    """

    def __init__(self, *, read: Reader = _read, clock: Callable[[], float] = time.monotonic,
                 cpus: int | None = None) -> None:
        self._read = read
        # The real /proc: kept open (ProcFiles); any other reader (recorded samples) by path.
        self._files = ProcFiles() if read is _read else None
        self._clock = clock
        self.cpus = cpus or os.cpu_count() or 1
        self._lock = threading.Lock()
        self._last: dict[int, ThreadSample] = {}
        self._mix: dict[int, dict[str, float]] = {}  # per thread: recent samples per wait, decayed
        self._wanted: tuple[int, ...] = ()
        # Looked for while the SQL thread ran: an empty set now means "not visible". A
        # stopped SQL thread has no threads to find, which says nothing of whether lagd
        # can see them once it starts (set_threads(..., looked=False)).
        self.looked = False
        self._history: collections.deque[tuple[float, dict[str, float]]] = collections.deque(maxlen=2048)
        self.seconds: dict[str, float] = dict.fromkeys(STATES, 0.0)
        self.samples = 0
        # /proc/stat readings with their time: idle cores are judged over a second
        # or more. One 20 ms interval holds 2 jiffies a core, so its headroom is
        # 0, 1 or 2 cores at random; the gate read it once a second and shut on
        # that noise about 2 s into every catch-up.
        self._cpu_history: collections.deque[tuple[float, tuple[float, float]]] = \
            collections.deque(maxlen=2048)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.hz = MAX_HZ  # samples a second of each thread; the engine lowers it when nothing is judged
        self.budget = THREAD_SAMPLES_PER_S  # ... and all threads together at most this (sampling_hz)

    @property
    def threads(self) -> tuple[int, ...]:
        return tuple(self._last)

    @property
    def sampled_at(self) -> float | None:
        """When the last sample was taken (monotonic), None before the first."""
        with self._lock:
            return self._history[-1][0] if self._history else None

    @property
    def wanted(self) -> tuple[int, ...]:
        """The threads last set, sampled or not (a /proc hidden from lagd reads none)."""
        return self._wanted

    @property
    def invisible(self) -> bool:
        """Looked for while the SQL thread ran, and none found: lagd cannot see the
        applier threads (no PROCESS grant), so the gate cannot measure them."""
        return self.looked and not self._wanted

    def set_threads(self, tids: Iterable[int], *, looked: bool = True) -> None:
        """The applier threads to sample; ``looked=False`` when there was nothing to look
        for (the SQL thread is stopped)."""
        self.looked = looked
        with self._lock:
            keep = {t: self._last.get(t) for t in tids}
            self._last = {t: s for t, s in keep.items() if s is not None}
            self._wanted = tuple(keep)

    def sample(self) -> None:
        now = self._clock()
        tids = self._wanted
        paths = _paths(tids)
        texts = self._files.read_many(paths) if self._files is not None else _read_each(self._read, paths)
        self._take(now, tids, texts)

    def _take(self, now: float, tids: tuple[int, ...], texts: Sequence[str | None]) -> None:
        """Account one sample: ``texts`` of ``tids``' THREAD_FILES and /proc/stat, read at ``now``."""
        n = len(THREAD_FILES)
        got = {t: thread_sample(t, now, *texts[n * i : n * i + n]) for i, t in enumerate(tids)}
        with self._lock:
            wanted = self._wanted
            for tid, cur in got.items():
                if tid not in wanted:
                    continue  # set_threads while the sample was read: its thread is gone
                if cur is None:
                    self._last.pop(tid, None)
                    continue
                prev = self._last.get(tid)
                if prev is not None:
                    mix = self._mix.setdefault(tid, {})
                    for k in mix:
                        mix[k] *= _MIX_DECAY
                    seen = off_state(prev, cur)
                    if seen is not None:
                        mix[seen] = mix.get(seen, 0.0) + 1.0
                    for state, secs in classify(prev, cur, mix).items():
                        self.seconds[state] += secs
                    self.samples += 1
                self._last[tid] = cur
            self._history.append((now, dict(self.seconds)))
            if texts[-1] is None:
                return
            try:
                cpu = parse_cpu_line(texts[-1])
            except ValueError:
                return
            self._cpu_history.append((now, cpu))

    def headroom_over(self, span: float) -> float | None:
        """Idle cores over about the last ``span`` seconds, None when unknown."""
        with self._lock:
            if len(self._cpu_history) < 2:
                return None
            now, latest = self._cpu_history[-1]
            start = _since(self._cpu_history, now - span, latest)
        return cpu_headroom(start, latest, self.cpus)

    def start(self, hz: float | None = None) -> None:
        """Sample ``hz`` times a second in a daemon thread (procfs reads never wait on a
        disk, but they are not the event loop's work either)."""
        if hz is not None:
            self.hz = hz

        # Each start its own stop: a thread still inside a batch when stop() and start()
        # follow each other must not see a cleared flag and run on beside the new one.
        # Its own files too: the old thread closes its own as it ends.
        stop = self._stop = threading.Event()
        files = self._files = ProcFiles() if self._files is not None else None
        batches = files if READ_BATCH is not None and self._clock is time.monotonic else None

        def loop() -> None:
            name_this_thread("lagd-stall")
            _yield_to_the_server()
            try:
                while not stop.is_set():
                    interval = 1.0 / sampling_hz(len(self._wanted), self.budget, self.hz)
                    tids = self._wanted
                    if batches is not None and len(paths := _paths(tids)) <= MAX_CELLS:
                        n = max(1, min(int(BATCH_SECONDS / interval + 1e-9), MAX_CELLS // len(paths)))
                        for at, texts in batches.read_batch(paths, n, interval):
                            self._take(at, tids, texts)
                    elif not stop.wait(interval):
                        self.sample()
            finally:
                if files is not None:
                    files.close()
        self._thread = threading.Thread(target=loop, name="lagd-stall-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def totals(self) -> dict[str, float]:
        """A copy of ``seconds`` (cumulative per state)."""
        with self._lock:
            return dict(self.seconds)

    def recent(self, span: float = 2.0) -> dict[str, float]:
        """Seconds per state over about the last ``span`` seconds."""
        with self._lock:
            if not self._history:
                return dict.fromkeys(STATES, 0.0)
            now, latest = self._history[-1]
            start = _since(self._history, now - span, latest)
            return window(start, latest)

    def snapshot(self, *, busy: bool = True, span: float = 2.0) -> dict[str, Any]:
        """Counters (seconds per state, cumulative: for ``lagd_sql_thread_seconds_total``),
        the verdict over the last ``span`` seconds, idle cores."""
        recent = self.recent(span)
        headroom = self.headroom_over(span)
        with self._lock:
            seconds = dict(self.seconds)
            threads = list(self._wanted)
        v = verdict(recent, running=bool(threads), busy=busy, headroom=headroom, threads=len(threads))
        return {"seconds": seconds, "recent": recent, "threads": threads, "headroom_cores": headroom,
                "verdict": v.kind, "text": v.text, "prefetch_can_help": v.prefetch_can_help}


def _paths(tids: tuple[int, ...]) -> list[str]:
    """The files a sample reads, in the order ``StallMonitor._take`` expects them."""
    paths = [f"/proc/{t}/{name}" for t in tids for name in THREAD_FILES]
    paths.append("/proc/stat")
    return paths


def _since(history: collections.deque[tuple[float, T]], cutoff: float, latest: T) -> T:
    """The oldest reading taken at ``cutoff`` or later (``latest`` if none), found from the
    newest back: from the oldest, a 2-s span of a 2,048-reading history walked ~1,900 of
    them, with the sampler's lock held, at every gate check and /status."""
    found = latest
    for at, value in reversed(history):
        if at < cutoff:
            break
        found = value
    return found


def window(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Seconds per state between two readings of ``StallMonitor.seconds``."""
    return {s: after.get(s, 0.0) - before.get(s, 0.0) for s in STATES}
