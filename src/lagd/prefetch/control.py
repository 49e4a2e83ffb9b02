"""Pure decisions of the prefetch scheduler: how far ahead, and whether it pays.

Two resolvers, each returning a verdict and the reason for it:

- ``decide_step``: given the current lead of the prefetch cursor over the SQL
  thread, read on, wait, jump ahead, or pause.
- ``Controller.evaluate``: given what the last window showed, tune the lead
  target and concurrency, and decide whether prefetching is worth running.

Why a lead limit at all: pages warmed too early are evicted before the SQL
thread needs them (measured: a lead of 500 transactions on a 32 MB pool raised
buffer-pool reads from 67k to 121k and was 44% slower), so the lead is capped
by a share of the buffer pool as well as by transactions, bytes and seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Container

    from lagd.mysql.slots import Slots

PAGE_BYTES = 16384


@dataclass(frozen=True, slots=True)
class Lead:
    """How far the prefetch cursor is ahead of the SQL thread."""

    transactions: int
    rows: int  # row changes read ahead (estimated consumption inside a huge transaction removed)
    bytes: int
    seconds: float  # source time between the SQL thread's transaction and the cursor's
    pages: int  # index pages the queued and running probes may bring in


@dataclass(frozen=True, slots=True)
class Limits:
    min_transactions: int
    max_transactions: int
    max_bytes: int
    max_seconds: float
    max_pages: int  # buffer_pool_share x pool pages
    pool_pages: int = 0  # the buffer pool's pages (0: not known)


@dataclass(frozen=True, slots=True)
class Step:
    action: str  # "read", "wait", "jump", "pause", "idle"
    reason: str


def limits_for(min_trx: int, max_trx: int, max_bytes: int, max_seconds: float,
               pool_bytes: int, pool_share: float) -> Limits:
    return Limits(min_trx, max_trx, max_bytes, max_seconds,
                  max(64, int(pool_bytes * pool_share) // PAGE_BYTES), pool_bytes // PAGE_BYTES)


MIN_POOL_PAGES = 4096  # 64 MB: in a smaller pool prefetched pages are evicted before use
MIN_LEAD_PAGES = 128  # a share leaving fewer is a share of (almost) nothing: 0 turns prefetch off


def pool_too_small(limits: Limits) -> str | None:
    """Why the buffer pool is too small for prefetch to pay, or None.

    Pages brought in ahead must stay until the SQL thread uses them; in a pool
    of some tens of MB they are evicted first and every row is read twice
    (measured with a 32 MB pool: 2.5 reads per row with prefetch against 1.6
    without). Judged on the pool itself: the lead's share of it is kept small
    whatever the pool (``buffer_pool_share``), for another reason (its doc in
    config/lagd.toml)."""
    if 0 < limits.pool_pages < MIN_POOL_PAGES:
        return (f"the buffer pool holds {limits.pool_pages} pages ({limits.pool_pages * PAGE_BYTES >> 20} MB,"
                f" < {MIN_POOL_PAGES * PAGE_BYTES >> 20} MB): prefetched pages would be evicted before the"
                " SQL thread uses them; raise innodb_buffer_pool_size")
    if limits.max_pages < MIN_LEAD_PAGES:
        return (f"prefetch.buffer_pool_share leaves the probes {limits.max_pages} pages (< {MIN_LEAD_PAGES}):"
                " raise it to prefetch")
    return None


def decide_step(*, sql_running: bool, overtaken: bool, at_tail: bool, enabled: bool,
                lead: Lead, target_transactions: int, limits: Limits) -> Step:
    """What the cursor does next. Order matters: safety first, then catching up."""
    if not sql_running:
        return Step("pause", "the SQL thread is stopped: nothing to prefetch for")
    if overtaken:
        return Step("jump", "the SQL thread overtook the cursor: skip to where it is")
    if not enabled:
        return Step("wait", "prefetch is backed off: it did not pay in the last evaluation")
    if lead.pages >= limits.max_pages:
        return Step("wait", f"probes in flight may bring in {lead.pages} pages, the buffer-pool share is "
                            f"{limits.max_pages}: more would evict pages before the SQL thread uses them")
    if lead.bytes >= limits.max_bytes:
        return Step("wait", f"lead {lead.bytes} bytes >= max_lead_bytes {limits.max_bytes}")
    if lead.seconds >= limits.max_seconds:
        return Step("wait", f"lead {lead.seconds:.1f} s >= max_lead_seconds {limits.max_seconds:g}")
    if lead.transactions >= max(limits.min_transactions, target_transactions):
        return Step("wait", f"lead {lead.transactions} transactions reached the target {target_transactions}")
    if at_tail:
        return Step("idle", "read everything the IO thread has written")
    return Step("read", f"lead {lead.transactions} transactions < target {target_transactions}")


# While probes may run the engine needs the SQL thread's position every 20 ms. SHOW ALL
# SLAVES STATUS costs lagd 187-336 us of CPU (asyncmy 163, its 60 columns parsed 136,
# 15% of the event loop's samples in a 4,000-statement/s catch-up); MariaDB's
# @@gtid_slave_pos, a one-column row, 39-55 (tests/bench/bench_polls.py). So between two
# full statuses the engine asks that and finds the transaction it names among those it
# has read (each ends at a known relay-log position); the full status, every
# FULL_STATUS_EVERY, still says whether the SQL thread runs or stopped on an error, and
# where the IO thread is. 0.25 s: the cadence of a shut gate's polls; at 0.1 s a full
# status's own latency on a busy replica (20-50 ms) left one position poll between two.
FULL_STATUS_EVERY = 0.25


def applied_gtid(before: str | None, now: str, ours: Container[str]) -> tuple[str | None, str]:
    """Where MariaDB's ``@@gtid_slave_pos`` (``now``, read after ``before``) says the SQL
    thread went: ``(gtid, "moved")``, ``(None, "same")``, or ``(None, why it cannot tell)``.

    ``ours``: the replication domains of this channel's relay log (its other domains
    belong to other channels of a multi-source replica, or to nothing). A single domain
    of ours moved names the last transaction applied. Two at once (parallel replication
    over several domains commits them out of relay-log order) place it nowhere."""
    if not ours:
        return None, "no transaction of this channel read yet"
    if now == before:
        return None, "same"
    after = _by_domain(now)
    prior = _by_domain(before) if before else {}
    moved = [g for d, g in after.items() if d in ours and prior.get(d) != g]
    if len(moved) == 1:
        return moved[0], "moved"
    if not moved:
        if before is None:
            return None, "no reading before: nothing to compare with"
        gone = [d for d in prior if d in ours and d not in after]
        return (None, "a domain of this channel left the applied position") if gone else (None, "same")
    return None, f"{len(moved)} domains of this channel moved: no single transaction is the last applied"


def _by_domain(gtids: str) -> dict[str, str]:
    """``"0-1-5,1-2-9"`` by domain: ``{"0": "0-1-5", "1": "1-2-9"}``."""
    out = {}
    for part in gtids.split(","):
        g = part.strip()
        if g:
            out[g.partition("-")[0]] = g
    return out


# Inside a transaction the SQL thread's relay-log position stands still until the
# commit: InnoDB's count of the rows it changed (mysql.progress) places it there,
# asked every INSIDE_EVERY seconds while probes may run, once the transaction is big
# by the rows the cursor read of it or by the time the SQL thread has spent in it.
# By rows alone (1,000) it was never asked on delete_big: the page budget held the
# cursor at 871 rows of a 48,000-row transaction, every probed row long applied.
# InnoDB serves INNODB_TRX from a cache it refreshes only when nobody has read it
# for 0.1 s (trx0i_s.cc, CACHE_MIN_IDLE_TIME_NS): asked every 50 ms the count
# stood still for 3.7 s while the SQL thread changed 26,000 rows.
INSIDE_ROWS = 1000
INSIDE_SECONDS = 0.2
INSIDE_EVERY = 0.15
# The cursor passes by unprobed only this share of the SQL thread's advance since the
# last count, extrapolated at its rate: a row passed that it has not reached costs it a
# read, a row probed that it has passed costs a probe. Inside a batch of statement
# UPDATEs its rate swung 5,000-11,000 rows/s from one count to the next, and the whole
# advance, counted 0.25 s apart, overshot by up to 2,300 rows: more than the page
# budget's whole lead (1,300-1,600 rows), so the SQL thread read them itself.
PASS_SHARE = 0.5


def rows_behind(counted: int, counted_at: float, rate: float | None, now: float, latency: float,
                share: float = 1.0) -> int:
    """How many rows of the big transaction the SQL thread is applying a probe sent at
    ``now`` would reach too late: InnoDB's count of the rows it changed (taken at
    ``counted_at``), moved on at its measured rate inside the transaction to ``now`` and
    through one probe's ``latency``; ``share`` of that advance only (PASS_SHARE: the rows
    to pass by unprobed). Without a rate, the count alone.

    Before, the cursor placed the SQL thread by the apply rate of whole transactions,
    which inside one is 0 (nothing commits): it probed the transaction from its first
    row, rows the SQL thread had changed long before (delete_big: 6,896 rows probed of
    193,378, the SQL thread's read share unchanged by them)."""
    if rate is None or rate <= 0:
        return counted
    return counted + int(share * rate * (max(0.0, now - counted_at) + max(0.0, latency)))


@dataclass(frozen=True, slots=True)
class Window:
    """What one evaluation window (a few seconds) showed."""

    seconds: float
    prefetching: bool
    applied_rows: int  # by the SQL thread
    probed_rows: int
    pool_reads: int  # Innodb_buffer_pool_reads delta (server-wide)
    in_time: int
    late: int


@dataclass(frozen=True, slots=True)
class ControlState:
    enabled: bool
    target_transactions: int
    connections: int
    benefit: float | None  # apply rate with / without prefetch, last measured
    reason: str
    off_windows_left: int = 0  # a comparison window without prefetch is running or due
    rate_on: float | None = None
    rate_off: float | None = None
    backoff_windows: int = 0  # windows to stay off after it did not pay


@dataclass(frozen=True, slots=True)
class Tuning:
    min_transactions: int
    max_transactions: int
    min_connections: int
    max_connections: int
    adaptive: bool
    compare_every: int = 12  # on-windows between two comparison (off) windows
    backoff: int = 12  # windows to stay off when prefetch did not pay
    pays_above: float = 1.03  # with/without ratio under which it "does not pay"


def initial_state(t: Tuning, connections: int, target: int) -> ControlState:
    return ControlState(True, max(t.min_transactions, min(target, t.max_transactions)),
                        connections, None, "starting", off_windows_left=0)


# Rows probed before "nothing to warm" may judge: on probation (a trickle of probes, two
# at a time) a few hundred, so a replica whose data is in memory pays for little. Once
# probes have been seen to read from disk (worth_warming), SAMPLE_ROWS, as thrashing asks:
# a probe counts its rows when it answers, after its reads, so a short sample's rows
# can have read before it began. One such sample of 272 rows and 0 reads, a second
# after the SQL thread had stood still for a quarter of a second and the probes had
# thinned, stopped an INSERT catch-up's probes that the stall gate had measured paying
# 2.3x, 27 s into 30: its last 3.6 s ran at half the speed, the SQL thread reading
# 38-46% of its time again (2026-12-07, a thirty-first session).
COLD_ROWS = 200
SAMPLE_ROWS = 1000  # a sample of probed rows that thrashing (and, once proven, the above) judges


def nothing_to_warm(w: Window, proven: bool = False) -> str | None:
    """Why prefetching is pure cost now, or None: probes ran and the server
    read (almost) nothing from disk, so the pages were in memory already.
    Cheap enough to check every second, long before a full window ends;
    ``proven``: probes have read from disk since the probation (SAMPLE_ROWS)."""
    if w.probed_rows >= (SAMPLE_ROWS if proven else COLD_ROWS) and w.pool_reads < 0.02 * w.probed_rows:
        return (f"nothing to warm: {w.probed_rows} rows probed, {w.pool_reads} disk reads: "
                "the data is in memory; backing off")
    return None


def worth_warming(w: Window) -> bool:
    """Probes made the server read from disk: pages were missing, so probing
    at full concurrency can pay. Until then the engine keeps a trickle."""
    return w.probed_rows >= 32 and w.pool_reads >= 0.25 * w.probed_rows


def thrashing(w: Window) -> str | None:
    """Why the lead is too long now, or None: the server read clearly more
    pages than lagd probed keys, so prefetched pages were evicted before the
    SQL thread used them and it read them again."""
    if w.probed_rows >= SAMPLE_ROWS and w.pool_reads > 1.3 * w.probed_rows:
        return (f"{w.pool_reads} disk reads for {w.probed_rows} probed keys: pages are evicted "
                "before use; shortening the lead")
    return None


def evaluate(state: ControlState, w: Window, t: Tuning, windows_since_compare: int) -> ControlState:
    """The controller's verdict after a window. Pure; the engine applies it.

    Three signals, cheapest first:
    1. nothing to warm: probes ran but the server read (almost) nothing from
       disk, so the pages were in memory already; prefetch is pure cost.
    2. late versus in time: the SQL thread overtook probes -> lead up (and
       connections up); all in time with reads falling -> lead down.
    3. with/without comparison: every ``compare_every`` windows one window
       runs without prefetch; if the apply rate with it is not clearly higher,
       it backs off for ``backoff`` windows and then tries again.
    """
    if not t.adaptive:
        return replace(state, enabled=True, reason="adaptive control is off")
    if not w.prefetching:
        rate_off = w.applied_rows / w.seconds if w.seconds > 0 else None
        if state.backoff_windows > 1:
            return replace(state, backoff_windows=state.backoff_windows - 1, enabled=False,
                           rate_off=rate_off, reason=state.reason)
        if state.backoff_windows == 1:
            return replace(state, backoff_windows=0, enabled=True, rate_off=rate_off,
                           reason="backed off long enough: trying prefetch again")
        benefit = None
        if rate_off and state.rate_on is not None:
            benefit = state.rate_on / rate_off
        if benefit is not None and benefit < t.pays_above:
            return replace(state, enabled=False, benefit=benefit, rate_off=rate_off,
                           backoff_windows=t.backoff,
                           reason=f"apply rate with prefetch {state.rate_on:.0f} rows/s vs "
                                  f"{rate_off:.0f} without (x{benefit:.2f}): it does not pay; backing off")
        return replace(state, enabled=True, benefit=benefit, rate_off=rate_off, off_windows_left=0,
                       reason=(f"prefetch pays: x{benefit:.2f} apply rate" if benefit is not None
                               else "comparison window without data: keep prefetching"))
    rate_on = w.applied_rows / w.seconds if w.seconds > 0 else None
    state = replace(state, rate_on=rate_on)
    cold = nothing_to_warm(w)
    if cold is not None:
        return replace(state, enabled=False, backoff_windows=t.backoff, reason=cold)
    done = w.in_time + w.late
    target, conns = state.target_transactions, state.connections
    why = "lead and connections hold"
    if done >= 50 and w.late > 0.2 * done:
        target = min(t.max_transactions, max(target + 1, int(target * 1.5)))
        conns = min(t.max_connections, conns + 1) if target == t.max_transactions else conns
        why = f"{w.late} of {done} probes late: lead target up to {target}"
    elif done >= 50 and w.late < 0.02 * done and target > t.min_transactions:
        target = max(t.min_transactions, int(target * 0.9))
        why = f"all but {w.late} of {done} probes in time: lead target down to {target}"
    state = replace(state, target_transactions=target, connections=conns, reason=why)
    if windows_since_compare >= t.compare_every and w.applied_rows > 0:
        return replace(state, off_windows_left=1, enabled=False,
                       reason=why + "; next window runs without prefetch to compare")
    return state


# ----- statements a probe: a shape's batch by its probes' answers ---------------------

# A batch of statements reads what each of them would (rewrite_sql.STATEMENT_ROWS a
# statement), so its cost is unknown until it answers: 16 ranges of 10 consecutive
# rows answered in 22-28 ms (update_range_stmt), 16 UPDATEs of 40 rows scattered by a
# secondary index read 640 pages, and 107 of 112 such probes ran into the 500 ms
# statement timeout while the SQL thread's own reads queued behind them (it applied
# 15 KiB/s of relay log against 19 before: update_k_range_stmt). A shape whose probes
# answer slower than SLOW_PROBE, or time out, gets half the statements a batch; one
# answering within half of it gets one more, from the row probes' keys a probe ...
SLOW_PROBE = 0.1
# ... up to this many times that. A statement costs lagd more
# than a row change (its literals cut out, its shape looked up), and a probe's round
# trip most of all: 70-200 µs of lagd's CPU in a catch-up. Rows stay at the row cap:
# a longer row probe is a longer wait for the rows at its end (update_pk: 1.95x at
# 32 keys against 2.13x at 16, no less CPU), while update_pk_stmt's statements ran as
# fast at 32 (2.11x against 2.13x) with 6-8% less of lagd's CPU (2026-11-29).
STATEMENT_KEYS_FACTOR = 2


def statement_batch(size: int, most: int, status: str, seconds: float) -> tuple[int, str]:
    """The statements a probe of one shape takes next, after one of its probes answered."""
    if status == "timeout":
        return max(1, size // 2), f"a probe of {size} statements timed out: {max(1, size // 2)} a probe"
    if status != "ok":
        return size, f"a probe {status}: {size} statements a probe, as before"
    if seconds > SLOW_PROBE:
        return max(1, size // 2), (f"a probe of {size} statements took {seconds * 1000:.0f} ms:"
                                   f" {max(1, size // 2)} a probe")
    if seconds <= SLOW_PROBE / 2 and size < most:
        return size + 1, f"a probe of {size} statements took {seconds * 1000:.0f} ms: {size + 1} a probe"
    return min(size, most), f"{min(size, most)} statements a probe"


# A shape's batch size learns from answers, but its first probes went out before any:
# update_k_range_stmt sent a probe a session (32) of 16 statements each at once, every
# one ran into the 500 ms timeout. So the probes a shape may have out at once start
# from one and grow by one an answer (doubling each round trip, as TCP's slow start:
# 32 within about 5), and halve at a timeout: the others wait for room
# (fingerprint.ShapeFlights), and those waiting at a timeout are dropped. A slow answer
# shrinks the batch, not this: grown only by answers within SLOW_PROBE / 2, the window
# of update_k_range_stmt (40 scattered rows a statement, 70-170 ms a probe) stayed at
# one or two, and lagd warmed 27-86 of its statements in time where the burst had
# warmed 276-286 (3 catch-ups each, 2026-11-28).
def statement_window(window: int, most: int, status: str) -> tuple[int, str]:
    """How many probes of one statement shape may be out at once, after one answered."""
    if status == "timeout":
        return max(1, window // 2), f"a probe timed out: {max(1, window // 2)} probes out at once"
    if status != "ok":
        return window, f"a probe {status}: {window} probes out at once, as before"
    return min(most, window + 1), f"a probe answered: {min(most, window + 1)} probes out at once"


# An upsert (INSERT ... ON DUPLICATE KEY UPDATE, INSERT IGNORE) whose row exists stops
# at the primary key: InnoDB inserts into the clustered index first, finds the duplicate
# and updates the row there (or ignores it); its other indexes' new entries are never
# read, but those the update assigns. A probe of them reads a leaf for nothing, a random
# one on a real table: as many pages again as the probes the SQL thread needs. Whether
# the rows exist is what the primary-key probes of a table's upserts found (their rows
# counted, as every probe's are), over about the last EXISTING_KEYS of them. Above
# EXISTING_SHARE the other entries go unprobed: a row that turns out to be new then
# reads its secondary leaves cold, as without lagd, where a probe of each would have
# read ten pages for nothing for every one it warmed.
EXISTING_SHARE = 0.9
EXISTING_KEYS = 128


def upsert_entries(asked: float, found: float) -> tuple[bool, str]:
    """Whether a table's upserts get their secondary (and foreign-key parent) entries
    probed, from the primary-key entries their probes asked for and found (decayed)."""
    if asked < EXISTING_KEYS / 2:
        return True, f"{asked:.0f} primary-key entries of upserts answered: too few to tell if rows exist"
    share = found / asked
    if share >= EXISTING_SHARE:
        return False, (f"{share:.0%} of upserted rows exist: their other entries are not read,"
                       " not probed")
    return True, f"{share:.0%} of upserted rows exist: the new rows' entries are probed"


# ----- connection slots: the replica's other clients come first ----------------------

# Probe sessions take connection slots the replica's own clients may need: at
# max_connections the server refuses the next connection, an application's as
# readily as lagd's. lagd leaves this share of max_connections (at least
# RESERVE_MIN) free over what the other clients use now, and holds no more
# probe sessions than that leaves. Fewer sessions cost little: update_pk caught
# up 1.97x with 8 and 1.90x with 32 (benchmarks.md, 2026-11-25).
RESERVE_SHARE = 0.1
RESERVE_MIN = 10
# Under the account's MAX_USER_CONNECTIONS: sessions lagd must still be able to
# open (its status session's and the cursor's reconnects) ...
OWN_SPARE = 2
# ... and its other sessions on the replica, where they cannot be counted (status,
# the cursor's table lookups, the applier-thread lookups, the advisor's).
OWN_GUESS = 4
SLOTS_EVERY = 5.0  # seconds between two readings while probe sessions may be open
# Probe sessions with nothing to do this long are closed: a gate holding prefetch
# out for minutes (update_k: 120-600 s) would otherwise keep them all open.
IDLE_SESSIONS_SECONDS = 30.0


def connection_budget(wanted: int, slots: Slots | None, probe_open: int) -> tuple[int, str]:
    """How many probe sessions lagd may hold now, and why. Pure.

    ``slots``: the replica's reading (None: not known: ``wanted``, as configured);
    ``probe_open``: lagd's probe sessions open when it was taken, counted in it.
    """
    if slots is None:
        return wanted, "the replica's connection limits are not known"
    most = slots.max_connections
    others = max(0, slots.connected - probe_open)  # lagd's other sessions among them
    reserve = max(RESERVE_MIN, math.ceil(RESERVE_SHARE * most))
    by_server = most - others - reserve
    n = min(wanted, max(0, by_server))
    why = (f"{others} of max_connections {most} in use by other clients, {reserve} kept free for them")
    if slots.user_limit is not None:
        mine = max(0, slots.own - probe_open) if slots.own is not None else OWN_GUESS
        by_user = slots.user_limit - mine - OWN_SPARE
        if by_user < n:
            n = max(0, by_user)
            counted = "" if slots.own is not None else " (not countable here: assumed)"
            why = (f"lagd's account may hold {slots.user_limit} sessions (max_user_connections):"
                   f" {mine} are its other sessions{counted}, {OWN_SPARE} kept for its reconnects")
    if n == wanted:
        return n, f"{n} probe sessions ({why})"
    if n == 0:
        return 0, f"no probe session: {why}"
    return n, f"{n} probe sessions of the {wanted} configured: {why}"


# ----- the fast gate: the SQL thread's own time split (prefetch/stall.py) --------------

READ_SHARE = 0.25  # of the applier's time waiting on disk reads: pages to warm
MIN_HEADROOM = 0.5  # idle cores the probes need; below it they take CPU from the SQL thread
# Applier threads queued for a core this many on average (the SQL thread: this share of
# its time): do not start, and stop without waiting for the verdict.
# Milder queueing is judged by its effect on the apply rate: cold catch-ups on a
# shared 2-core machine queue it 11-18% without any probe, and a fixed 25% shut the
# gate 3 s into a catch-up whose probes were about to pay.
CPU_WAIT_SHARE = 0.5
RAISED = 1.05  # apply rate over this x the rate before prefetch: the probes pay
LOWERED = 0.9  # read share under this x the share before: the probes help (no rate to judge)
# Probing that pays is judged against a speed of the SQL thread alone at most this
# old: a cold pool warms as a catch-up goes on, and a workload can change under a
# backlog (a relay log's bytes a second then mean other work), so an old speed to
# beat says less and less. Measuring again costs BASE_SECONDS without probes (and
# the lead's drain) every REBASE_SECONDS: about 2-3% of a 1.2x gain. Not inside one
# big transaction (StallWindow.inside): the SQL thread alone is measured only once it has
# passed what was probed, which there is the rest of the transaction (a long one would
# go without probes to its end).
REBASE_SECONDS = 30.0
MIN_MEASURED = 0.2  # applier-seconds in a window: less says nothing (a second at a few samples)
BASE_SECONDS = 2.0  # of the SQL thread alone before probes start: its speed to beat
# ... not counting its first second after it starts: a cold SQL thread then reads the
# indexes' upper levels too, and ran at 0.74 (update_pk) and 0.53 (update_k) of its
# speed of the seconds after (200,000-change catch-ups, 256 MB pool): measured from
# its start, a speed to beat that low made any probes look as if they paid.
WARMUP_SECONDS = 1.0
JUDGE_SECONDS = 2.0  # of probing judged together: one second of apply rate is noise
# ... unless it is this far below the rate before: then the probes are judged at once.
# Tries that did not pay on update_k (3 keys a row, at the old 25% page budget) ran
# the SQL thread 8-33% slower for their 3 s, and cost more after they stopped than
# while they ran: 2 tries a 28-s catch-up cost it 7-13%. Probes that pay run it
# 1.3-2.5x faster, so a second under 0.85x is not their noise at a try's start (a try
# that has paid has seconds that low: CONFIRM_SECONDS).
SLOWED = 0.85
# A try that left the SQL thread slower than before over the judged seconds holds
# the gate this many times longer than one that merely did not pay: trying again
# soon costs the same again ...
SLOWED_HOLD = 3
# ... slower by more than the margin a gain must show (RAISED): within it the two
# rates are one speed as far as 2 s can tell. Until 2026-11-29 (a twenty-third
# session) any margin held 30 s: in `mixed` catch-ups of 31-35 s first tries were
# held so at 0.98 and 1.00 of the speed alone (2,389 against 2,445 KiB/s, 2,140
# against 2,145; a third at 0.94 still is), the rest of the catch-up without
# probes, where tries that ran on had paid 1.2-1.3x.
SLOWER = 1 / RAISED
# A try that has paid (one verdict or more since its speed to beat was measured)
# stops only when it does not pay over this many seconds: the two that did not and
# the two after them, judged together. A paying try's seconds with probes are
# uneven (a mixed_fmt catch-up: 794-1,387 KiB/s a second against 700-736 alone),
# and a verdict of two of them that shut a try paying 1.5x held the gate 30 s.
# A try that turned harmful costs 2 s more at most; one that never paid is judged
# as before (update_k's tries: their first two seconds). A try stopped so measures the
# SQL thread alone again rather than holding the gate (stall_gate, "after paying").
CONFIRM_SECONDS = 2 * JUDGE_SECONDS
# What a try must show before it runs on: a gain beyond the SQL thread's own unevenness.
# Two seconds of its apply rate against the two before (each a verdict's compare) spread
# widely on their own: replayed on cold catch-ups (2026-12-07, a twenty-seventh session:
# 623 compares from 6 runs of mixed, update_pk and mixed_fmt, 200,000 changes) the
# seconds "with probes" ran 0.84-1.20x those "alone" (10th-90th percentile), 1.48x at
# most, and 1.05x or more (RAISED) in 39% of them: a try whose probes did nothing was
# judged to pay two times in five and ran REBASE_SECONDS, which on a slow machine left
# mixed at 0.94-1.03x with 9-12 CPU-seconds of lagd and 8-14 of the server's spent on
# probes. So a try that raised the rate by less than SHOWN[0] is compared again: the SQL
# thread measured alone once more (BASE_SECONDS, its lead drained), then probed again,
# each compare's gain kept (Gate.gains). The probes run on once the geometric mean of the gains of n
# compares reaches SHOWN[n - 1]; they stop as a try that did not pay when it falls
# under RAISED, or is under SHOWN[-1] after all of them. The figures are about 2.5 (the
# last 1.65) times the spread of the log of one compare's gain (0.14), over the root of
# n. Replayed on those cold runs (tests/bench/gate_aa.py): 1.9% of tries pass where
# nothing ran (39% at one compare at RAISED); where probes sped the SQL thread up 1.1x,
# 27% pass, 1.2x 73%, 1.3x 93%, 1.5x all (most at the first compare). Over 20 cold
# runs of that day (2,046 compares, a noisier afternoon among them): 3.5%, and 30%,
# 69%, 89%, 99%. A try that does not pass holds the gate as one that did not pay, and
# the next try is judged afresh.
SHOWN = (1.5, 1.3, 1.2, 1.12)
# A speed to beat measured in the applier's first seconds (since lagd found its threads:
# a start, a restart, lagd's own start) is low: a pool the SQL thread has just begun to
# use holds none of its indexes' upper levels or of its undo yet. Replayed on 31 cold
# catch-ups of 5 workloads (2026-12-07, a twenty-eighth session; tests/bench/gate_aa.py),
# the first compare where nothing ran gained 0.92-1.39x, median 1.15x (any compare: median
# 1.02x), and one mixed try passed at once at 1.50x and probed 31 s that, measured alone
# again, gained 0.99x. So that compare's gain counts divided by this: replayed, first tries
# then pass 0 of 30 where nothing ran (3 of 28 before), 32%, 89% and all where probes gain
# 1.1x, 1.2x and 1.5x (69%, all, all before), as any try does (2.3%, 27%, 75%, 99%).
YOUNG_SECONDS = 6.0
YOUNG_BIAS = 1.15
# Purge must not fall behind for the probes' sake. A row change's undo waits in
# InnoDB's history list until purge has removed what it left (delete-marked index
# entries, old row versions). Probes take the reads and index-tree latches purge
# needs, and a SQL thread applying faster leaves it more: in update_k catch-ups
# (200,000 changes) the history stayed under 4,000 cold and reached 160,000 with
# probes held on, work the replica did after the catch-up. InnoDB treats a history
# over 100,000 as "growing huge" (BTR_CUR_FINE_HISTORY_LENGTH: purge then takes
# index trees exclusively while reads are pending). Past it, and grown by
# PURGE_GROWTH since the probes started (growth lagd is part of, not a level it
# found), the gate shuts.
PURGE_BEHIND = 100_000
PURGE_GROWTH = 10_000
# A try that lost and left purge behind by 5% of the rate before or more (a purge
# burst of a few KiB/s is not the cause) holds the gate this many times the usual
# hold, up to MAX_PURGE_HOLD windows, whether or not the apply rate alone was slower:
# that is the workload's row changes (index entries to purge), not a passing state,
# and every try costs more than it lasts (update_k: a 3-s try left 10,000-11,000
# transactions of history, and the catch-up ran 0.90-0.99x with a try every 30-60 s).
# Until 2026-11-25 (evening) only a try no slower without purge held this long: one
# 0.5% slower (1,674 against 1,683 KiB/s) that left 493 KiB/s to purge held 30 s,
# and the try after it cost update_k's catch-up another 3 s.
PURGE_HOLD = 12
MAX_PURGE_HOLD = 600
PURGE_SPAN = 4.0  # seconds of probing before purge's falling behind is judged (purge_debt)
# The history counts transactions, and bytes of debt are its growth times the mean
# transaction's bytes: a proxy that holds for many like transactions. Growth under this
# many is one or a few commits, not purge falling behind: one 48,000-row DELETE's
# commit read as 14 MB/s of debt 3 s into a try that ran its SQL thread 2.5x faster
# (delete_big), and purge cannot have taken a transaction seconds after its commit,
# with probes or without.
PURGE_MIN_TRX = 10
PURGE_READINGS = 3  # ... on the lowest of this many last readings of the history


@dataclass(frozen=True, slots=True)
class StallWindow:
    """About a second of the applier threads' time (stall.py's states, summed) and of
    their progress."""

    seconds: float  # applier-seconds measured
    read_share: float
    cpu_share: float  # on CPU plus queued for a core
    cpu_wait_share: float  # queued for a core
    headroom: float | None  # idle cores on the machine over the window, None when unknown
    wall: float = 0.0  # seconds of the window
    applied: int | None = 0  # relay-log bytes the SQL thread applied in it; None: not comparable
    history: int | None = None  # InnoDB's purge history length at its end; None: not known
    trx_bytes: float | None = None  # relay-log bytes a transaction lately; None: not known
    inside: bool = False  # the SQL thread is inside one big transaction (the engine knows)
    # Of the row changes read since the probes started, the share that leave index entries
    # for purge to remove (purge_debt); None: not known, every one counted as such.
    purge_share: float | None = None
    young: bool = False  # the applier threads found less than YOUNG_SECONDS ago

    @property
    def readers(self) -> float:
        """Applier threads blocked on disk reads, on average over the window: the
        read share for one SQL thread. Parallel workers wait for work (or for
        their turn to commit) most of the time, which no probe changes, so
        their read share is small even when one or two of them always wait on
        a read (8 workers: 9-15% of their time, 1-1.2 threads reading)."""
        return self._threads(self.read_share)

    @property
    def queued(self) -> float:
        """Applier threads runnable but waiting for a core, on average over the
        window: the queue probes would join (the queued share for one SQL thread;
        eight parallel workers on two cores queue 1.5 threads at a 19% share)."""
        return self._threads(self.cpu_wait_share)

    def _threads(self, share: float) -> float:
        """A share of the applier-seconds as threads in that state on average."""
        return share * self.seconds / self.wall if self.wall > 0 else share

    def reads_text(self) -> str:
        pct = round(100 * self.read_share)
        if self.wall > 0 and self.seconds / self.wall > 1.5:
            return (f"applier threads {pct}% waiting on disk reads ({self.readers:.1f} of"
                    f" {self.seconds / self.wall:.0f} threads on average)")
        return f"SQL thread {pct}% waiting on disk reads"


def stall_window(seconds: dict[str, float], headroom: float | None, wall: float = 0.0,
                 applied: int | None = 0, history: int | None = None,
                 trx_bytes: float | None = None, inside: bool = False,
                 purge_share: float | None = None, young: bool = False) -> StallWindow | None:
    total = sum(seconds.values())
    if total <= 0:
        return None
    def share(*names: str) -> float:
        return sum(seconds.get(n, 0.0) for n in names) / total
    return StallWindow(total, share("disk_read"), share("on_cpu", "cpu_wait"), share("cpu_wait"), headroom,
                       wall, applied, history, trx_bytes, inside, purge_share, young)


@dataclass(frozen=True, slots=True)
class Gate:
    """Whether the SQL thread's time says prefetch may run now, and why.

    ``base``: wall seconds and relay-log bytes applied by the SQL thread alone while its
    reads were high; at ``BASE_SECONDS`` the gate opens with ``rate_before``
    (and ``baseline``, the read share) as the speed to beat. ``grace``:
    windows the probes get to catch up before they are judged. ``judged``:
    wall seconds and bytes applied while probing since the last verdict; after
    ``REBASE_SECONDS`` of verdicts that pay, the SQL thread is measured alone
    again (see there). ``history_from``: InnoDB's purge history length when the
    gate opened (None: not known), what purge's falling behind is counted from;
    ``history_recent``: its last readings since; ``history_mark``: its reading when the
    seconds judged now began. ``hold``: windows
    to stay shut after the probes did not pay (reopening at once would flap
    every second); ``fails``: such verdicts in a row, each doubling the hold.
    """

    open: bool
    reason: str
    baseline: float | None = None
    measured: bool = False  # the last verdict came from a measurement
    grace: int = 0
    hold: int = 0
    rate_before: float | None = None
    base: tuple[float, int] = (0.0, 0)
    judged: tuple[float, int] = (0.0, 0)
    fails: int = 0
    since_base: float = 0.0  # wall seconds judged to pay since ``rate_before`` was measured
    history_from: int | None = None
    history_recent: tuple[int, ...] = ()
    history_mark: int | None = None
    rebase: bool = False  # measuring the SQL thread alone again after probes that paid
    base_reads: float = 0.0  # applier threads reading times wall seconds, over ``base``
    # The gains (rate with probes / rate before) of the compares so far that did not yet
    # show a gain beyond the SQL thread's own unevenness (SHOWN); () outside such a run.
    gains: tuple[float, ...] = ()
    young: bool = False  # ``rate_before`` was measured in the applier's first seconds (YOUNG_BIAS)
    # Wall seconds open and row changes and statements read in them that gave no probe,
    # none being out either (UNPROBED_SECONDS); reset by any second with probes.
    unprobed: tuple[float, int] = (0.0, 0)


UNMEASURED = Gate(True, "the SQL thread's time is not measured: the with/without comparison decides")
GRACE_WINDOWS = 1
HOLD_WINDOWS = 10
MAX_HOLD_WINDOWS = 120
CPU_SHARE = 0.6
# An open gate whose cursor reads changes that give no probe at all (tables without a
# usable key, whose row events make the SQL thread scan; excluded schemas; appends
# passed by; rows logged without an image) has nothing to judge, and stayed open: the
# engine decoded every change ahead and polled the SQL thread's position 40-50 times a
# second for nothing. A mixed catch-up with its schema excluded took 9.8-15 CPU-s of
# lagd's that way on a slow machine, 1.6-1.9 with prefetch off; on a faster one 2.4,
# and 1.1-1.2 with this rule (benchmarks.md, 2026-12-07). After this many seconds
# open with changes read and none probed it shuts as a try that did not pay (the hold
# doubling at each), and the next try measures again.
UNPROBED_SECONDS = 3.0


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1024:,.0f} KiB/s of relay log"


def _hold(fails: int) -> int:
    return min(MAX_HOLD_WINDOWS, HOLD_WINDOWS << min(fails, 8))


def purge_debt(gate: Gate, recent: tuple[int, ...], span: float, trx_bytes: float | None,
               share: float | None = None) -> float:
    """Relay-log bytes a second of apply that purge has not kept up with since the probes
    started: work they pushed onto purge, not work done. A catch-up that leaves purge far
    behind ends sooner and costs the replica more after it (update_k with probes held
    on: the SQL thread as fast as cold, then 31 s of purge where cold left none). The
    history rises and falls in bursts as purge takes batches (an insert catch-up's went
    3,000 -> 15,000 -> 3,000 within 6 s), so it is judged from PURGE_SPAN seconds of
    probing on, on the lowest of the last PURGE_READINGS readings: 4 s in, that was
    360-670 a second for insert's probes (which pay), 550-810 for update_pk's (cheap to
    purge: they still pay), 1,150-1,650 for update_k's later tries (2,000-2,500 by 8 s).
    0 when anything of it is unknown or purge kept up.

    Only ``share`` of it is work (see _growth_bytes): the history counts every transaction,
    and an UPDATE of columns in no index leaves purge no index entry to remove."""
    if span < PURGE_SPAN or not recent:
        return 0.0
    return _growth_bytes(gate.history_from, min(recent), span, trx_bytes, share)


def _growth_bytes(start: int | None, end: int | None, seconds: float, trx_bytes: float | None,
                  share: float | None = None) -> float:
    """The history's growth a second between two readings, in relay-log bytes of work for
    purge (0: not known or not grown).

    Of the work, ``share``: that of the row changes behind the growth that leave index
    entries to remove (UPDATEs that move one, DELETEs; see MOVING_SHARE). The rest
    (UPDATEs in place, INSERTs) leaves old row versions whose undo purge frees without
    reading an index. Counting those as debt shut a try on range UPDATEs applying 864
    KiB/s of relay log against 657 alone: 264 "left to purge", and the history after
    that catch-up was no longer than its cold twin's. Unknown (None): all of it."""
    if start is None or end is None or seconds <= 0 or not trx_bytes or end - start < PURGE_MIN_TRX:
        return 0.0
    work = 1.0 if share is None else min(1.0, max(0.0, share))
    return (end - start) / seconds * trx_bytes * work


def purge_behind(history_from: int | None, history: int | None) -> str | None:
    """Why purge has fallen too far behind while probes ran, or None (see PURGE_BEHIND)."""
    if history is None or history_from is None:
        return None
    if history < PURGE_BEHIND or history < history_from + PURGE_GROWTH:
        return None
    return (f"purge is {history:,} transactions behind (InnoDB's history list), {history - history_from:,}"
            " more than when probes started: they take the reads and index latches it needs")


# Row changes that leave purge index entries to remove are where a try costs more than
# it can gain: UPDATEs that move an index entry (a key or an indexed column changes: the
# old entry is delete-marked for purge, the new one inserted elsewhere in the same index)
# and DELETEs (the row is delete-marked in the clustered index and every secondary one).
# UPDATEs: in one 3-s try on update_k (every row moves its `k` entry) the probe
# sessions waited 13.7 s on that index's tree latch, behind purge's and
# the SQL thread's exclusive holds; the SQL thread's own waits on it tripled, and were
# still 1.6x its cold twin's for 13 s after the try.
# Measured (200,000 changes, 256 MB pool): probes held on ran its SQL thread 1.01x, and
# 0.65x once purge was done; each try the gate made cost the catch-up 3-6% (six pairs:
# median 0.94x), however it was judged.
# DELETEs: a try ran the SQL thread 1.6-1.8x faster for its 3 s, and the purge rules
# judged every one to lose (`delete`, 7 runs in two sessions; in the last 4: applied
# 1,150-1,567 KiB/s of relay log before, 2,466-2,709 with probes, 1,611-1,955 of it left
# to purge). Purge then reaches rows whose pages the SQL thread read long before,
# evicted since: in all 4 pairs the run with a try read more pages from disk than its
# cold twin (+8,800 to +41,800, though cold runs alone spread 227,000-350,000). Stopped
# at the first read: 22 probes a run, 1.01x (0.99-1.03, 4 pairs; 1.00x, 0.92-1.30, with
# the 3-s try), half the daemon's CPU. Not inside one big transaction: purge gets its
# undo only after it commits (moved_entries). INSERTs leave purge nothing to remove
# (insert catch-ups ran 1.67x with probes). So a try whose first rows are mostly such
# changes stops before the probes build a lead.
MOVING_SHARE = 0.5
MOVING_ROWS = 100  # row changes read since the try began before their share is judged


def moved_entries(gate: Gate, rows: int, moving: int, deletes: int = 0, inside: bool | None = None) -> Gate:
    """A try's first ``rows`` row changes: ``moving`` UPDATEs that move an index entry and
    ``deletes`` DELETEs, both leaving purge index entries to remove (see MOVING_SHARE).
    Pure. Only a try not yet judged to pay: probes that paid (purge counted) have shown
    the SQL thread gains on these changes.

    DELETEs count only where the SQL thread goes from transaction to transaction. Inside
    one big transaction (``inside``: the engine knows by the time the SQL thread has spent
    in it or InnoDB's count; None: not known there, so its position did not move while
    measured alone, ``rate_before`` 0) purge gets none of its undo before it commits, and a DELETE splits
    no page: there the gate's other rules judge the try, as before DELETEs counted. Not
    by ``rate_before`` alone once InnoDB's count makes it more than 0 inside too. An
    UPDATE that moves an entry splits pages at once, and counts anywhere."""
    if not gate.open or gate.rate_before is None or gate.since_base > 0 or rows < MOVING_ROWS:
        return gate
    big = gate.rate_before == 0 if inside is None else inside
    counted = moving + (0 if big else deletes)
    if counted < MOVING_SHARE * rows:
        return gate
    hold = min(MAX_PURGE_HOLD, PURGE_HOLD * _hold(gate.fails))
    # The kinds named are those counted (sysbench's oltp_write_only has both, a quarter of
    # its rows each); the cause given is the one of the kind that dominates.
    kinds = " and ".join(k for k, n in (("UPDATEs of a key or an indexed column", moving),
                                        ("DELETEs", counted - moving)) if n)
    if 2 * moving >= counted:
        why = ("probes queue on the index's tree latch behind the SQL thread and purge, and leave"
               " purge behind")
    else:
        why = "probes would leave purge behind, to read those pages again long after the SQL thread did"
    return Gate(False, f"{round(100 * counted / rows)}% of the row changes ahead leave index entries for"
                       f" purge to remove ({kinds}): {why}: backing off for {hold} s", None, True, 0, hold,
                fails=gate.fails + 1)


def _nothing_probed(gate: Gate, wall: float, read: int, why: str) -> Gate:
    """An open gate after a second whose changes read gave no probe (UNPROBED_SECONDS)."""
    seconds, changes = gate.unprobed[0] + wall, gate.unprobed[1] + read
    if seconds < UNPROBED_SECONDS:
        return replace(gate, unprobed=(seconds, changes))
    hold = _hold(gate.fails)
    most = f" (most of them: {why})" if why else ""
    return Gate(False, f"nothing to prefetch: none of the {changes:,} row changes and statements read"
                       f" in {seconds:.0f} s gave a probe{most}; backing off for {hold} s",
                None, True, hold=hold, fails=gate.fails + 1)


def without_backlog(gate: Gate, fresh: Gate) -> Gate:
    """The gate while the SQL thread has nothing to apply (caught up, stopped). Pure.

    The next backlog is measured afresh (``fresh``), but a hold runs on, one window
    a gate check: it is time the probes stay out because they did not pay, and a
    caught-up spell does not make them pay. Before, every spell ended it, so a
    replica falling behind again and again on update_k-like changes paid a try a
    spell (about 3 s of a 60-s catch-up with purge counted). ``fails`` is kept for
    the same reason: the next hold that does not pay doubles as it would have.
    """
    if gate.hold > 0 and not gate.open:
        return replace(gate, hold=gate.hold - 1)
    return replace(fresh, fails=gate.fails) if gate.fails and not fresh.open else fresh


def gain_shown(gains: tuple[float, ...]) -> tuple[bool | None, str]:
    """Whether the compares' gains show the probes pay (SHOWN): True, False, or None while
    more compares must tell; and the figures, for the reason. Pure."""
    n = min(len(gains), len(SHOWN))
    mean = math.exp(sum(math.log(max(g, 1e-9)) for g in gains[-n:]) / n)
    need = SHOWN[n - 1]
    # Shown rounded down: a mean of 1.117 under the 1.12 needed must not read "1.12x".
    said = (f"{math.floor(mean * 100) / 100:.2f}x over {n} compare{'s' if n > 1 else ''}, {need:.2f}x"
            f" needed where the SQL thread alone varies this much")
    if mean >= need:
        return True, said
    if mean < RAISED or n == len(SHOWN):
        return False, said
    return None, said


def stall_gate(gate: Gate, w: StallWindow | None, *, prefetching: bool, unprobed: int = 0,
               unprobed_why: str = "") -> Gate:
    """The verdict after about a second of the applier's time. Pure.

    Prefetch starts only while the SQL thread spends a real share of its time
    waiting on reads and the machine has cores to spare, after two seconds of
    its apply rate alone. It stays only while the apply rate with probes beats
    that: every way probes fail shows there (pages evicted before use, probes
    taking the SQL thread's CPU, probes making it wait for free pages or
    latches), and the SQL thread's own shares cannot tell: with warm pages it
    also spends less CPU a row (no page read-in, checksum or eviction), so a
    faster SQL thread can show a smaller on-CPU share. ``prefetching``: probes
    ran in the window; ``unprobed``: without any, the changes read in it that gave none
    (``unprobed_why``: what the most of them were, for the reason).
    """
    if w is None:
        return UNMEASURED
    if w.seconds < MIN_MEASURED:
        return gate
    pct = round(100 * w.read_share)
    if gate.hold > 0:
        return replace(gate, hold=gate.hold - 1)
    if prefetching and gate.unprobed != (0.0, 0):
        gate = replace(gate, unprobed=(0.0, 0))
    if gate.open and gate.rate_before is not None and not prefetching:
        if unprobed <= 0:
            return gate  # no probes this second (lead full, a comparison window): nothing to judge
        return _nothing_probed(gate, w.wall or w.seconds, unprobed, unprobed_why)
    if not gate.open or gate.rate_before is None:
        reads = w.reads_text()
        # Measuring again after probes that paid, its reads are not asked for: the
        # pages those probes warmed keep them low for seconds (mixed_fmt: 19% and
        # 25% of its time, then 32%), and each such second started the measurement
        # anew; the try after it is judged as any other.
        # Otherwise its reads are judged over the seconds measured so far together,
        # not each second alone: a SQL thread reading 27-32% of its time on average
        # has seconds under 25% (mixed_fmt), and each one started the measurement
        # anew. Not a speed-up shown: where measured, the first second after the
        # warm-up decided under either rule (benchmarks.md, 2026-11-29).
        reading = gate.base_reads + w.readers * w.wall
        if (reading >= READ_SHARE * (gate.base[0] + w.wall) if w.wall > 0 else w.readers >= READ_SHARE) \
                or gate.rebase:
            # No probes while the CPU is short; a run of compares (gains) waits for it, not
            # lost: an update_pk try at 1.44x, measured alone again, met 0.3 idle cores for
            # 2 s and began anew with one compare to 1.5x, three times in one catch-up.
            if w.headroom is not None and w.headroom < MIN_HEADROOM:
                return Gate(False, f"{reads}, but the CPU is saturated"
                                   f" ({w.headroom:.1f} idle cores): probes would take it from the SQL"
                                   " thread", None, True, fails=gate.fails, rebase=gate.rebase,
                            gains=gate.gains)
            if w.queued >= CPU_WAIT_SHARE:
                # Idle cores on average, yet the appliers queue for one: they
                # wake together (parallel workers at each group commit), and
                # probes would add to that queue.
                return Gate(False, f"{reads}, but {w.queued:.1f} of its threads wait for a core on"
                                   " average: probes would add to that queue", None, True, fails=gate.fails,
                            rebase=gate.rebase, gains=gate.gains)
            if w.applied is None:
                return gate  # a relay-log file switch: the second's progress is unknown
            base = (gate.base[0] + w.wall, gate.base[1] + w.applied)
            if base[0] < BASE_SECONDS:
                return Gate(False, f"{reads}: measuring its apply rate before prefetching",
                            None, True, base=base, fails=gate.fails, rebase=gate.rebase, base_reads=reading,
                            gains=gate.gains)
            idle = f", {w.headroom:.1f} idle cores" if w.headroom is not None else ""
            return Gate(True, f"{reads}{idle}: prefetching",
                        w.read_share, True, GRACE_WINDOWS, rate_before=base[1] / base[0], fails=gate.fails,
                        history_from=w.history, gains=gate.gains, young=w.young)
        if w.cpu_share >= CPU_SHARE:
            return Gate(False, f"SQL thread {round(100 * w.cpu_share)}% on CPU: CPU-bound,"
                               " prefetch cannot help", None, True, fails=gate.fails)
        return Gate(False, f"{reads}: its stall is not reads, prefetch cannot help", None, True,
                    fails=gate.fails)
    if w.queued >= CPU_WAIT_SHARE:
        hold = _hold(gate.fails)
        who = (f"{w.queued:.1f} applier threads wait for a core on average"
               if w.wall > 0 and w.seconds / w.wall > 1.5 else
               f"the SQL thread waits for a core {round(100 * w.cpu_wait_share)}% of its time")
        return Gate(False, f"{who}: probes compete with it; backing off for {hold} s", None, True,
                    hold=hold, fails=gate.fails + 1)
    behind = purge_behind(gate.history_from, w.history)
    if behind is not None:
        hold = _hold(gate.fails)
        return Gate(False, f"{behind}; backing off for {hold} s", None, True, hold=hold, fails=gate.fails + 1)
    recent = gate.history_recent if w.history is None else (*gate.history_recent, w.history)[-PURGE_READINGS:]
    if gate.grace > 0:
        return replace(gate, grace=gate.grace - 1, history_recent=recent, history_mark=w.history)
    if w.applied is None:
        return replace(gate, history_recent=recent)
    wall, done = gate.judged[0] + w.wall, gate.judged[1] + w.applied
    paid = gate.since_base > 0
    slowed = not paid and gate.rate_before > 0 and done < gate.rate_before * SLOWED * wall
    if wall < JUDGE_SECONDS and not slowed:
        return replace(gate, judged=(wall, done), history_recent=recent)
    rate = done / wall
    span = gate.since_base + wall
    debt = purge_debt(gate, recent, span, w.trx_bytes, w.purge_share)
    if span < PURGE_SPAN:
        # Too early to judge purge on its lowest readings; but where what it left in
        # just these seconds already makes the probes lose, a try need not run on:
        # update_k's tries otherwise ran 5-7 s, and each cost the catch-up more than that.
        early = _growth_bytes(gate.history_mark, w.history, wall, w.trx_bytes, w.purge_share)
        if early and rate - early < gate.rate_before:
            debt = early
    left = f", {_rate(debt)} of it left to purge" if debt else ""
    rate -= debt
    rates = (f"applied {_rate(gate.rate_before)} before, {_rate(rate + debt)} with probes{left};"
             f" reads {round(100 * (gate.baseline or 0.0))}% of its time before, {pct}% now")
    purge_lost = debt >= gate.rate_before * (RAISED - 1) and gate.rate_before > rate
    # A compare of a try that has not paid yet joins the others' (SHOWN); not inside one
    # big transaction, where the SQL thread alone cannot be measured again, nor where the
    # rate alone already decides (slower by the margin, or purge left behind).
    gain = rate / gate.rate_before if gate.rate_before > 0 else 0.0
    gains = (*gate.gains, gain / YOUNG_BIAS if gate.young else gain)
    shown = None if paid or w.inside or purge_lost or gain < SLOWER else gain_shown(gains)
    if shown is not None and gate.young:
        shown = (shown[0], f"{shown[1]} (this one counted {YOUNG_BIAS:g}x lower: its speed before was"
                           " measured in its first seconds, a pool still warming)")
    if shown is not None and shown[0] is None:
        sped = "sped" if gain >= RAISED else "did not speed"
        return Gate(False, f"probes {sped} the SQL thread up ({rates}): {shown[1]}; measuring it alone"
                           " again to compare", None, True, rebase=True, gains=gains, fails=gate.fails)
    if shown is not None and shown[0] is False and gain >= RAISED:
        hold = _hold(gate.fails)
        return Gate(False, f"probes did not speed the SQL thread up beyond its own unevenness ({rates}):"
                           f" {shown[1]}: backing off for {hold} s", None, True, 0, hold,
                    fails=gate.fails + 1)
    if gain >= RAISED:
        pays = f"probes speed the SQL thread up ({rates})" + (f": {shown[1]}" if shown and gate.gains else "")
        since = gate.since_base + wall
        if since >= REBASE_SECONDS and not w.inside:
            return Gate(False, f"{pays}; measuring it alone again: its speed of {since:.0f} s ago"
                               " is no longer the one to beat", None, True, rebase=True)
        return replace(gate, reason=pays, judged=(0.0, 0), fails=0, since_base=since, history_recent=recent,
                       history_mark=w.history, gains=())
    if gate.rate_before == 0 and w.read_share < (gate.baseline or 0.0) * LOWERED:
        # Measured alone inside one big transaction, its rows not counted (the position
        # does not move; without PROCESS, or before the cursor had read it): the read
        # waits are all there is to judge by. No new measurement alone here: it would
        # have to wait for the SQL thread to pass what was probed, which is the
        # rest of the transaction.
        return replace(gate, reason=f"probes cut the SQL thread's read waits ({rates})",
                       judged=(0.0, 0), fails=0)
    if paid and wall < CONFIRM_SECONDS and not purge_lost:
        return replace(gate, reason=f"probes did not pay over {wall:.0f} s after paying"
                                    f" {gate.since_base:.0f} s ({rates}): judging them over"
                                    f" {CONFIRM_SECONDS:.0f} s", judged=(wall, done), history_recent=recent)
    if paid and not w.inside and not purge_lost:
        # Over CONFIRM_SECONDS a try that had paid does not now: its probes, or the SQL
        # thread's speed alone, which may have changed since it was measured (the machine,
        # the workload)? Held as a try that failed, the rest of a catch-up ran without probes
        # on the word of a speed to beat that no longer held: a mixed try paid 1.28x over 3
        # compares and 8 s, then the SQL thread fell to 1,144 KiB/s against 1,511 alone
        # before; held 30 s, it ran 1,214-1,379 alone for 3 s, then up to 1,986 (2026-12-07,
        # a thirty-first session). So it is measured alone again, and the try after it must
        # show its gain anew (SHOWN), as after REBASE_SECONDS; one that does not holds the gate.
        how = ("slowed the SQL thread down" if rate < gate.rate_before * SLOWER
               else "did not speed the SQL thread up")
        return Gate(False, f"probes {how} over {wall:.0f} s after paying {gate.since_base:.0f} s ({rates}):"
                           " measuring it alone again, its speed then may not be its speed now", None, True,
                    rebase=True)
    if purge_lost:
        hold = min(MAX_PURGE_HOLD, PURGE_HOLD * _hold(gate.fails))
        what = ("probes leave purge further behind than they speed the SQL thread up"
                if rate + debt >= gate.rate_before
                else "probes slowed the SQL thread down and left purge behind")
        return Gate(False, f"{what} ({rates}): backing off for {hold} s", None, True, 0, hold,
                    fails=gate.fails + 1)
    if rate < gate.rate_before * SLOWER:  # every at-once verdict (``slowed``) is one of these
        hold = min(MAX_HOLD_WINDOWS, SLOWED_HOLD * _hold(gate.fails))
        return Gate(False, f"probes slowed the SQL thread down ({rates}): backing off for {hold} s",
                    None, True, 0, hold, fails=gate.fails + 1)
    hold = _hold(gate.fails)
    return Gate(False, f"probes did not speed the SQL thread up ({rates}): backing off for {hold} s",
                None, True, 0, hold, fails=gate.fails + 1)
