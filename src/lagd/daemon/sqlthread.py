"""Where the SQL thread's time goes, whenever the daemon runs: the runtime's side of
:mod:`lagd.prefetch.stall`.

The split (on CPU, waiting for a core, disk reads, flushes, other waits) is
what tells a DBA why the SQL thread is slow, prefetch or not, so the daemon
owns one :class:`~lagd.prefetch.stall.StallMonitor` for its whole life and
lends it to the prefetch engine (which then only reads it and sets its rate).

``ProcStall`` finds the applier threads' OS ids with one query every few
seconds and says why when it cannot (a missing grant, performance_schema off,
a server in another PID namespace or on another host); ``stall_view`` turns
the monitor's readings into the typed :class:`~lagd.daemon.state.StallView`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from lagd.daemon.state import StallView
from lagd.prefetch import stall
from lagd.prefetch.engine import PROBES_OUT
from lagd.prefetch.stall import StallMonitor

SPAN = 10.0  # seconds of the recent split /status and the share gauges show
DISCOVER_EVERY = 2.0  # applier threads change on START SLAVE and restarts
SERVER_NAMES = ("mariadbd", "mysqld")

# How the share of each state reads in a sentence.
PHRASES = {"on_cpu": "on CPU", "cpu_wait": "waiting for a CPU", "disk_read": "waiting on disk reads",
           "flush_wait": "waiting on page flushes and commits",
           "other_wait": "waiting on locks, commits or other threads"}
WORKERS_OTHER = "waiting for work, their turn to commit or locks"
PROBING = "prefetch running, its probes in this split: see prefetch"


# ----- pure ----------------------------------------------------------------------------


def grant_fix(mariadb: bool, account: str) -> str:
    if mariadb:
        return f"needs the PROCESS grant (fix: GRANT PROCESS ON *.* TO {account};)"
    return ("needs performance_schema=ON and SELECT on performance_schema.threads"
            f" (fix: GRANT SELECT ON performance_schema.threads TO {account};)")


def account_of(current_user: str | None, fallback: str) -> str:
    """``lagd@localhost`` (CURRENT_USER()) as ``'lagd'@'localhost'``."""
    if not current_user or "@" not in current_user:
        return f"'{fallback}'@'<host>'"
    user, _, host = current_user.rpartition("@")
    return f"'{user}'@'{host}'"


def foreign_threads(tids: Iterable[int], read: Callable[[str], str]) -> str | None:
    """Why these thread ids are not a MySQL server's threads on this host, or None when they are.

    An id from another host or PID namespace (a container) may name any process
    here: measuring it would be a false number.
    """
    for tid in tids:
        try:
            status = read(f"/proc/{tid}/status")
            tgid = next(line.split()[1] for line in status.splitlines() if line.startswith("Tgid:"))
            comm = read(f"/proc/{tgid}/comm").strip()
        except (OSError, StopIteration, IndexError):
            return (f"the SQL thread's OS thread {tid} is not visible here: lagd must run on the"
                    " replica's host, in its PID namespace (and /proc without hidepid)")
        if comm not in SERVER_NAMES:
            return (f"the SQL thread's OS thread {tid} is process {comm!r} here, not the server:"
                    " lagd must run on the replica's host, in its PID namespace")
    return None


def summary(shares: Mapping[str, float] | None, kind: str, text: str, can_help: bool,
            headroom: float | None, note: str | None, span: float = SPAN, threads: int = 1,
            held_off: bool = False, probing: bool = False) -> str:
    """One line for lagctl status: the split's biggest parts and what they mean for prefetch.

    Parallel workers' idle time (waiting for work or their turn to commit) is
    the same sleep as a lock wait in /proc; it is named for what it mostly is.
    ``held_off``: the gate keeps prefetch out (measuring, or probes did not pay on
    these changes): the split alone would say "can help", which lagd is not doing.
    ``probing``: the gate lets probes run, so the split is the SQL thread's with
    them: its reads are what they left, and a thread on CPU most of the time is
    what they made of it (update_pk: 49% on CPU and 13-15% waiting for a core
    with probes, 1.4x faster than cold), not a reason they cannot help.
    """
    if note is not None:
        return f"SQL thread: not measured: {note}"
    if kind == "idle" or shares is None or kind == "unknown":
        return f"SQL thread: {text.removeprefix('SQL thread ')}"
    top = sorted((s for s in stall.STATES if shares.get(s, 0.0) >= 0.05), key=lambda s: -shares[s])[:2]
    phrases = {**PHRASES, "other_wait": WORKERS_OTHER} if threads > 1 else PHRASES
    split = ", ".join(f"{round(100 * shares[s])}% {phrases[s]}" for s in top) or "no state over 5%"
    if threads > 1 and kind == "reads":  # a small share of eight threads' time can be one always reading
        split += f"; {shares['disk_read'] * threads:.1f} of them on disk reads on average"
    if probing:
        why = PROBING
    elif kind == "reads":
        why = ("prefetch held off, see prefetch" if can_help and held_off else
               "prefetch can help" if can_help else (
            f"no CPU to spare ({headroom:.1f} idle cores): prefetch would slow it down"
            if headroom is not None else "prefetch would slow it down"))
    elif kind == "cpu":
        why = "CPU-bound, prefetch cannot help"
    elif kind == "flush":
        why = "see lagctl advise"
    else:
        why = "prefetch cannot help"
    who = f"{threads} parallel workers" if threads > 1 else "SQL thread"
    return f"{who}: {split} (last {span:g} s): {why}"


def stall_view(snap: Mapping[str, Any], *, measured: bool, note: str | None, fresh: bool,
               gate: tuple[bool, str] | None, span: float = SPAN) -> StallView:
    """The typed view of ``StallMonitor.snapshot()``.

    ``measured``: the monitor has sampled a thread at least once (before that the
    counters are unknown, not 0); ``note``: why no thread is measured, with the
    fix; ``fresh``: the sampler ran lately (a stopped sampler's last split is stale).
    """
    threads = tuple(int(t) for t in snap.get("threads", ()))
    shares = stall.shares(snap.get("recent", {})) if fresh and threads and note is None else None
    kind, text = str(snap.get("verdict")), str(snap.get("text"))
    can_help = bool(snap.get("prefetch_can_help"))
    if note is not None:
        kind, text, can_help = "unknown", f"SQL thread not measured: {note}", False
    elif not fresh:
        kind, text, can_help = "unknown", "SQL thread not measured: the sampler is not running", False
    headroom = snap.get("headroom_cores") if fresh else None
    held = gate is not None and (not gate[0] or gate[1].startswith(PROBES_OUT))
    probing = gate is not None and not held and kind in ("reads", "cpu", "flush", "other")
    if probing and kind != "reads":
        # The split's conclusion ("prefetch cannot help") is of a SQL thread without probes.
        text = f"{text.rpartition(': ')[0] or text}: with {PROBING}"
    return StallView(
        seconds=dict(snap.get("seconds", {})) if measured else None, shares=shares, window_seconds=span,
        verdict=kind, text=text, prefetch_can_help=can_help,
        spare_cores=float(headroom) if headroom is not None else None,
        threads=threads, threads_note=note,
        gate_open=gate[0] if gate else None, gate_reason=gate[1] if gate else None,
        summary=summary(shares, kind, text, can_help, headroom, note, span, len(threads),
                        held_off=held, probing=probing),
        purge_history=int(snap["purge_history"]) if snap.get("purge_history") is not None else None)


# ----- the real collaborator -------------------------------------------------------------


def rows(conn: Any, sql: str) -> list[dict[str, Any]]:
    """A query's rows as dicts, on a blocking connection (run through a BlockingSession)."""
    with conn.cursor() as cur:
        cur.execute(sql)
        names = [d[0] for d in cur.description or ()]
        return [r if isinstance(r, dict) else dict(zip(names, r, strict=False)) for r in cur.fetchall()]


Query = Callable[[str], Awaitable[list[dict[str, Any]]]]


class ProcStall:
    """The daemon's StallMonitor, and the applier threads it measures.

    ``query``: runs one read-only statement on the replica (a session with a
    statement timeout) and returns its rows.
    """

    def __init__(self, query: Query, user: str, monitor: StallMonitor | None = None,
                 read: Callable[[str], str] = stall._read,  # the same reader as the sampler
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.query = query
        self.user = user
        self.monitor = monitor or StallMonitor(read=read)
        self._read = read
        self._clock = clock
        self.note: str | None = None
        self._next = 0.0
        self._running: bool | None = None

    def start(self) -> None:
        self.monitor.start()

    def stop(self) -> None:
        self.monitor.stop()

    async def refresh(self, sql_running: bool, mariadb: bool, engine: bool = False) -> None:
        """Find the applier threads every few seconds and whenever the SQL thread starts or stops.
        ``engine``: a prefetch engine runs, and sets the sampler's rate for its gate;
        without one the split is only reported, at stall.WATCH_SAMPLES_PER_S."""
        if not engine:
            self.monitor.hz, self.monitor.budget = stall.MAX_HZ, stall.WATCH_SAMPLES_PER_S
        now = self._clock()
        if now < self._next and sql_running == self._running:
            return
        self._next, self._running = now + DISCOVER_EVERY, sql_running
        if not sql_running:
            # Nothing to look for: the next start is measured before any probe, not
            # taken for threads lagd cannot see (which opened the gate unmeasured).
            self.monitor.set_threads((), looked=False)
            self.note = None  # the verdict says the SQL thread does not run
            return
        try:
            tids = stall.applier_tids(await self.query(stall.appliers_sql(mariadb)))
            note = None
            if not tids:
                who = await self.query("SELECT CURRENT_USER() AS u")
                note = grant_fix(mariadb, account_of(str(who[0]["u"]) if who else None, self.user))
            else:
                note = foreign_threads(tids, self._read)
        except Exception as e:  # said in /status; the status poll reports a dead server
            tids, note = (), f"cannot list the SQL thread's OS thread: {e}"
        self.note = note
        self.monitor.set_threads(tids if note is None else ())

    def view(self, busy: bool, gate: tuple[bool, str] | None) -> StallView:
        m = self.monitor
        sampled = m.sampled_at
        fresh = sampled is not None and self._clock() - sampled < max(2.0, 5.0 / m.hz)
        return stall_view(m.snapshot(busy=busy, span=SPAN), measured=m.samples > 0, note=self.note,
                          fresh=fresh, gate=gate)
