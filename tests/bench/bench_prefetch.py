"""Catch-up benchmark: how much faster a cold replica applies a backlog with lagd prefetching.

Setup (cached, see prefetch_setup.py): a sysbench-like table at least 16x the
replica's 256 MB buffer pool (O_DIRECT, so the OS page cache hides nothing)
and, per workload, a backlog of row changes in the replica's relay log.

Each run restores the base replica with one workload's backlog, restarts it
cold, optionally starts lagd, starts the SQL thread and times it until it has
applied everything. In one invocation, per workload:

  cold            256 MB pool, no lagd
  prefetch        256 MB pool, lagd prefetching
  hot             a pool holding the whole table, warmed first: the physical bound
  parallel        MariaDB parallel replication, 8 threads, optimistic, no lagd
  parallel+pf     the same with lagd

and two harm checks on update_pk: the whole table in memory, and a 32 MB pool,
each with and without lagd. It prints a table and JSON, plots replica lag
over time, and writes docs/benchmarks.md.

    .venv/bin/python -m tests.bench.bench_prefetch [--workloads update_pk,...] [--modes ...]
        [--rows 20000000] [--changes 50000] [--setup-only] [--rebuild]
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from lagd.mysql.progress import history_length, history_length_sql
from lagd.prefetch import stall
from lagd.prefetch.stall import StallMonitor
from lagd.relaylog import (
    LogFiles,
    RelayLogReader,
    Statement,
    TableMapResolver,
    TransactionEnd,
    TransactionStart,
)
from lagd.sandbox.pair import Sandbox, SandboxConfig
from lagd.sandbox.server import default_cache_dir, free_port
from tests.bench import prefetch_runner, prefetch_setup, server_threads
from tests.bench.server_threads import ServerThreads

MODES = {
    # name: (buffer pool, parallel threads, lagd prefetching, warm the pool first)
    "cold": ("256M", 0, False, False),
    "prefetch": ("256M", 0, True, False),
    "hot": ("6G", 0, False, True),
    "parallel": ("256M", 8, False, False),
    "parallel+pf": ("256M", 8, True, False),
    "harm_hot": ("6G", 0, False, True),
    "harm_hot+pf": ("6G", 0, True, True),
    "harm_32m": ("32M", 0, False, False),
    "harm_32m+pf": ("32M", 0, True, False),
}
DEFAULT_MODES = "cold,prefetch,hot,parallel,parallel+pf"
HARM_MODES = "harm_hot,harm_hot+pf,harm_32m,harm_32m+pf"
SERVER_OPTIONS: dict[str, str] = {}  # extra replica options for every run (--server-options)
PF_OPTIONS: dict[str, Any] = {}  # lagd's prefetch settings for the runs (--pf-options)
LAG_OPTIONS: dict[str, Any] = {}  # lagd's [lag] settings for the runs (--lag-options; experiments)
PROCESS_GRANT = [True]  # give lagd's account PROCESS so that the stall gate can measure (--process-grant)
NICE = [10]  # lagd's nice value in the runs (--nice), as the systemd unit sets it
LAGD = ["engine"]  # how lagd runs in the runs with it (--lagd): its engine alone, or `lagd run`
SQL_WAITS = [False]  # sample the SQL thread's performance_schema waits each second (--sql-waits)
GATE_TRACE = [False]  # the daemon logs at debug: every window the gate judged (--gate-trace)
POOL_PAGES = [False]  # count the pool's pages of each index at the end of a run (--pool-pages)
# What --sql-waits turns on in the replica: every wait instrument, timed, and the
# summaries by thread; a long history of single waits to see who waits long on an
# index's tree latch, and in which mode. Costly, so both runs of a pair carry it.
WAITS_OPTIONS = {"performance-schema": "ON", "performance-schema-instrument": "wait/%=ON",
                 "performance-schema-events-waits-history-long-size": "1000000"}
POOL_BYTES = {"256M": 256 << 20, "6G": 6 << 30, "32M": 32 << 20}
PURGED_AT = 1000  # purge history length under which a run's purge counts as done
PURGE_WAIT_S = 180.0  # after the catch-up, at most this long


def set_pool(pool: str) -> None:
    """Use ``pool`` (e.g. "64M") instead of 256M for the cold/prefetch/parallel modes:
    a smaller table keeps the table/pool ratio of the full setup."""
    units = {"M": 20, "G": 30}
    POOL_BYTES[pool] = int(pool[:-1]) << units[pool[-1].upper()]
    for name, (p, threads, pf, warm) in list(MODES.items()):
        if p == "256M":
            MODES[name] = (pool, threads, pf, warm)


@dataclass
class Run:
    workload: str
    mode: str
    seconds: float
    rows: int
    pool_reads: int
    lagd_cpu: float | None
    lag: list[tuple[float, float]]  # (seconds since start, lag behind the backlog's end in source seconds)
    prefetch: dict[str, Any] | None
    server_cpu: float = 0.0  # the replica's mariadbd, CPU seconds during the run
    server_io: dict[str, Any] | None = None  # InnoDB counters' deltas during the run; "threads": by role
    # (seconds since start, transactions applied) about every quarter second: the SQL
    # thread's speed through the run, e.g. how its first seconds (a pool still filling)
    # compare with the rest, which is what the stall gate's speed to beat is measured on
    progress: list[tuple[float, int]] | None = None
    # (seconds since start, purge history length) twice a second, through the catch-up and
    # after it until purge is done; and when that was (None: not done within PURGE_WAIT_S).
    history: list[tuple[float, int]] | None = None
    purged_seconds: float | None = None
    # (seconds since start, reads, ms reading, writes, ms writing) of the datadir's block
    # device, cumulative, twice a second (disk_counts): the disk's latency through the run
    disk: list[tuple[float, int, int, int, int]] | None = None
    # (seconds since start, {state: cumulative seconds}) of the SQL thread, twice a second,
    # sampled by the benchmark in every run (stall.StallMonitor), cold ones too
    split: list[tuple[float, dict[str, float]]] | None = None
    # --sql-waits: (seconds since start, {event: [count, seconds]}) deltas about every second,
    # the SQL thread's own waits as the server's performance_schema times them
    waits: list[tuple[float, dict[str, list[float]]]] | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def commit_times(datadir: Path) -> tuple[list[int], list[float], float, int]:
    """Source end positions of the backlog's transactions, their commit times, and row changes
    (a statement-based log's statements: a statement per change in the benchmark's workloads)."""
    index = next(datadir.glob("*-relay-bin.index"))
    reader = RelayLogReader(LogFiles(index), resolver=TableMapResolver())
    ends: list[int] = []
    times: list[float] = []
    commit = 0.0
    rows = 0
    while True:
        batch = reader.read(1 << 24)
        if not batch and reader.at_tail:
            break
        for e in batch:
            if isinstance(e, TransactionStart):
                commit = e.commit_time
            elif isinstance(e, TransactionEnd) and e.source_pos is not None:
                ends.append(e.source_pos)
                times.append(commit)
                rows += e.rows
            elif isinstance(e, Statement):
                rows += 1
    reader.close()
    return ends, times, (times[-1] if times else 0.0), rows


def _machine_busy() -> tuple[float, float, float]:
    """(busy, total, stolen) CPU seconds of the whole machine so far, from /proc/stat.
    Stolen: time the hypervisor gave this machine's cores to others. On one machine 35%
    of its CPU time was stolen, and a cold insert catch-up took 35 s, then 126 s, then
    70 s: a pair whose runs had different shares stolen compares the host's load too."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = v[3] + v[4]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(v) - idle) / tick, sum(v) / tick, (v[7] if len(v) > 7 else 0) / tick


def disk_counts(path: Path) -> tuple[int, int, int, int]:
    """(reads completed, ms spent reading, writes completed, ms spent writing) so far of
    the block device holding ``path``, from /proc/diskstats. A slow stretch of one run
    (the SQL thread's reads longer while alone) reads here as the disk's own latency."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    lines = [line.split() for line in Path("/proc/diskstats").read_text().splitlines()]
    f = next((f for f in lines if int(f[0]) == major and int(f[1]) == minor), None)
    if f is None:
        # A partition's numbers are not listed under a device-mapper or overlay id: the first disk.
        f = next(f for f in lines if not f[2].startswith(("loop", "ram")))
    return int(f[3]), int(f[6]), int(f[7]), int(f[10])


def _daemon_child() -> None:
    """In the forked lagd run: the unit's nice value, a session of its own as systemd
    starts a service (lagd then gives its autogroup that nice value: daemon/autogroup.py),
    and death with the benchmark (a benchmark killed mid-run left its lagd running, a
    stray load on the next runs)."""
    os.nice(NICE[0])
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _cpu_seconds(pid: int) -> float:
    user, system = _user_sys(f"/proc/{pid}/stat")
    return user + system


def _user_sys(stat: str) -> tuple[float, float]:
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_split(pid: int) -> tuple[float, float, dict[str, float]]:
    """The daemon's user and system CPU seconds so far, and each of its threads' by
    the name lagd gives it (lagd.threadname; the event loop is the main thread:
    probes, polls, the engine's accounting, the look-ahead tail). Read from /proc,
    not a profiler: a sampling profiler counts as the loop's the time lagd (nice 10)
    waits for a core after each probe it sends wakes a server thread. Threads that
    ended are in neither (their CPU is the process's "other")."""
    user, system = _user_sys(f"/proc/{pid}/stat")
    threads: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "event_loop" if task.name == str(pid) else (task / "comm").read_text().strip()
            threads[name] = threads.get(name, 0.0) + sum(_user_sys(str(task / "stat")))
        except OSError:  # the thread ended between the listing and the read
            continue
    return user, system, threads


# Pages read = buffer_pool_reads (a page wanted now) + read_ahead (InnoDB guessed it);
# read_ahead_evicted: guessed, and gone before anyone wanted it.
STATUS_VARS = ("Innodb_buffer_pool_reads", "Innodb_buffer_pool_wait_free", "Innodb_buffer_pool_pages_flushed",
               "Innodb_data_writes", "Innodb_pages_read", "Innodb_buffer_pool_read_ahead",
               "Innodb_buffer_pool_read_ahead_evicted")


def status_of(server: Any, wanted: tuple[str, ...] = STATUS_VARS) -> dict[str, int]:
    """Counters of SHOW GLOBAL STATUS, by name, on a sandbox server."""
    names = ", ".join(f"'{n}'" for n in wanted)
    rows = server.query(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
    return {r["Variable_name"]: int(r["Value"]) for r in rows}


def _pool_reads(server: Any) -> int:
    return status_of(server)["Innodb_buffer_pool_reads"]


def run_one(sb: Sandbox, cache: Path, meta: dict[str, Any], workload: str, mode: str) -> Run:
    pool, threads, prefetch, warm = MODES[mode]
    rep = sb.replica()
    if rep.is_alive():
        rep.send_signal(signal.SIGTERM)
        rep.wait_exit(300)
    prefetch_setup.restore(cache, workload, rep.datadir)
    # The copy leaves gigabytes of dirty page cache; written back during the
    # run it would compete with the replica's own I/O, unevenly across runs.
    os.sync()
    rep.options["innodb-buffer-pool-size"] = pool
    rep.options["innodb-log-file-size"] = "1G"
    rep.options.update(SERVER_OPTIONS)
    if SQL_WAITS[0]:
        rep.options.update(WAITS_OPTIONS)
    for key in ("slave-parallel-threads", "slave-parallel-mode"):
        rep.options.pop(key, None)
    if threads:
        rep.options["slave-parallel-threads"] = str(threads)
        rep.options["slave-parallel-mode"] = "optimistic"
    sb.restart_server(rep.name, start_slave=False, timeout=300)
    ends, times, newest, rows = commit_times(rep.datadir)
    rows = rows or len(ends)  # nothing counted: a change per transaction
    if warm:
        rep.query("SELECT COUNT(*) FROM bench.sbtest1 FORCE INDEX (PRIMARY)")
        rep.query("SELECT COUNT(k) FROM bench.sbtest1 FORCE INDEX (k_1)")
    status0 = status_of(rep)
    reads0 = status0["Innodb_buffer_pool_reads"]
    child = None
    if prefetch and PROCESS_GRANT[0]:
        # lagd's stall gate finds the SQL thread's OS id in PROCESSLIST, which needs
        # PROCESS (docs/prefetch.md); the sandbox's lagd account lacks it.
        for row in rep.query("SELECT Host FROM mysql.user WHERE User = %s", (rep.dsn.user,)):
            rep.query(f"GRANT PROCESS ON *.* TO '{rep.dsn.user}'@'{row['Host']}'")
    daemon = None
    if prefetch and LAGD[0] == "daemon":
        daemon = DaemonRun(sb, rep)
        cpu0 = _cpu_seconds(daemon.pid)
        split0 = _cpu_split(daemon.pid)
    elif prefetch:
        spec = {"host": rep.dsn.host, "port": rep.dsn.port, "user": rep.dsn.user,
                "password": rep.dsn.password, "index": str(sb.relay_log_index()),
                "pool_bytes": POOL_BYTES[pool], "options": PF_OPTIONS, "nice": NICE[0]}
        child = prefetch_runner.start(spec)
        cpu0 = _cpu_seconds(child.pid)
    st = rep.query("SHOW SLAVE STATUS")[0]
    target = int(st["Read_Master_Log_Pos"])
    t0 = time.monotonic()
    server_cpu0 = _cpu_seconds(rep.pid) if rep.pid else 0.0
    busy0 = _machine_busy()
    # One connection for the whole poll: a fresh one every 50 ms (connect,
    # authenticate, tear down) cost the machine more CPU than lagd itself.
    poll = rep.connect(cursorclass=pymysql.cursors.DictCursor)
    poll_cur = poll.cursor()

    def slave_status() -> dict[str, Any]:
        poll_cur.execute("SHOW SLAVE STATUS")
        return dict(poll_cur.fetchone())

    rep.query("START SLAVE SQL_THREAD")
    lag: list[tuple[float, float]] = []
    progress: list[tuple[float, int]] = []
    waits = SqlWaits(poll_cur) if SQL_WAITS[0] else None
    history: list[tuple[float, int]] = []
    disk: list[tuple[float, int, int, int, int]] = []
    # The SQL thread's split, sampled by the benchmark itself in every run, cold ones too
    # (lagd's gate trace has it only for runs with lagd): (seconds since start, cumulative
    # seconds per state) twice a second.
    split: list[tuple[float, dict[str, float]]] = []
    sampler = StallMonitor()
    looked = 0.0
    threads = ServerThreads(rep.pid, rep.dsn.user) if rep.pid else None

    def sample_threads() -> None:
        if threads is not None:
            poll_cur.execute(server_threads.PROCESSLIST_SQL)
            threads.sample(poll_cur.fetchall())

    def history_len() -> int:
        poll_cur.execute(history_length_sql(mariadb=True))  # as lagd reads it
        n = history_length(poll_cur.fetchall())
        if n is None:
            raise RuntimeError("the replica's purge history length cannot be read (INNODB_METRICS)")
        return n

    try:
        while True:
            if waits is not None:
                waits.sample(time.monotonic() - t0)
            if not history or time.monotonic() - t0 - history[-1][0] >= 0.5:
                history.append((round(time.monotonic() - t0, 2), history_len()))
                disk.append((history[-1][0], *disk_counts(rep.datadir)))
                sample_threads()
                if not sampler.wanted and time.monotonic() - looked >= 1.0:
                    looked = time.monotonic()
                    poll_cur.execute(stall.appliers_sql(mariadb=True))
                    tids = stall.applier_tids(poll_cur.fetchall())
                    if tids:
                        sampler.set_threads(tids)
                        sampler.start()
                if sampler.wanted:
                    split.append((history[-1][0], {k: round(v, 3) for k, v in sampler.totals().items()}))
            st = slave_status()
            now = time.monotonic() - t0
            pos = int(st["Exec_Master_Log_Pos"])
            i = bisect.bisect_right(ends, pos)
            lag.append((now, newest - times[i] if i < len(times) else 0.0))
            if not progress or now - progress[-1][0] >= 0.25:
                progress.append((round(now, 2), i))
            if pos >= target:
                break
            if st["Slave_SQL_Running"] != "Yes":
                raise RuntimeError(f"the SQL thread stopped: {st['Last_SQL_Error']}")
            time.sleep(0.05)
    finally:
        sampler.stop()  # else its thread outlives the run, reading /proc 50 times a second
    seconds = time.monotonic() - t0
    sample_threads()
    if waits is not None:
        waits.sample(seconds, force=True)
    # The catch-up is over when the SQL thread is, but the work it leaves to purge
    # (undo of UPDATEs and DELETEs, delete-marked index entries) is part of the cost:
    # a run that starves purge ends sooner and leaves more. Wait for it, counted apart.
    purged = None
    while time.monotonic() - t0 < seconds + PURGE_WAIT_S:
        left = history_len()
        history.append((round(time.monotonic() - t0, 2), left))
        if left <= PURGED_AT:
            purged = time.monotonic() - t0
            break
        time.sleep(0.25)
    poll.close()
    server_cpu = (_cpu_seconds(rep.pid) - server_cpu0) if rep.pid else 0.0
    busy1 = _machine_busy()
    machine_busy = (busy1[0] - busy0[0]) / max(1e-9, busy1[1] - busy0[1])  # share of all cores
    status1 = status_of(rep)
    reads = status1["Innodb_buffer_pool_reads"] - reads0
    server_io = {k: status1[k] - status0[k] for k in STATUS_VARS}
    server_io["machine_busy_pct"] = round(100 * machine_busy)
    if threads is not None:
        server_io["threads"] = threads.result()  # sampled to the catch-up's end: purge's wait left out
    if POOL_PAGES[0]:
        # Which index's pages the pool holds at the end: where a run's extra reads went.
        for r in rep.query("SELECT INDEX_NAME AS i, COUNT(*) AS n FROM information_schema.INNODB_BUFFER_PAGE"
                           f" WHERE TABLE_NAME LIKE '%{prefetch_setup.TABLE}%' GROUP BY INDEX_NAME"):
            server_io[f"pool_pages_{r['i']}"] = int(r["n"])
    server_io["stolen_pct"] = round(100 * (busy1[2] - busy0[2]) / max(1e-9, busy1[1] - busy0[1]))
    cpu = snap = None
    if daemon is not None:
        cpu = _cpu_seconds(daemon.pid) - cpu0
        user1, system1, threads1 = _cpu_split(daemon.pid)
        user, system = user1 - split0[0], system1 - split0[1]
        threads = {k: round(v - split0[2].get(k, 0.0), 2) for k, v in threads1.items()}
        snap = daemon.finish()
        snap["cpu_split"] = {"user": round(user, 2), "system": round(system, 2), **threads,
                             "other_threads": round(user + system - sum(threads.values()), 2)}
    if child is not None:
        cpu = _cpu_seconds(child.pid) - cpu0
        snap = prefetch_runner.stop(child)
    progress.append((round(seconds, 2), len(ends)))
    return Run(workload, mode, seconds, rows, reads, cpu, lag, snap, server_cpu, server_io, progress,
               history, purged, disk or None, split or None, waits.deltas if waits is not None else None)


class SqlWaits:
    """The SQL thread's waits, by instrument, from performance_schema: an account of
    where it spends its time that does not come from lagd's own /proc sampler."""

    QUERY = ("SELECT s.EVENT_NAME, s.COUNT_STAR, s.SUM_TIMER_WAIT"
             " FROM performance_schema.events_waits_summary_by_thread_by_event_name s"
             " JOIN performance_schema.threads t USING (THREAD_ID)"
             " WHERE t.NAME = 'thread/sql/slave_sql' AND s.COUNT_STAR > 0")

    LONG = ("SELECT t.NAME AS thread, h.THREAD_ID, h.EVENT_ID, h.OPERATION, h.TIMER_WAIT,"
            " h.OBJECT_INSTANCE_BEGIN"
            " FROM performance_schema.events_waits_history_long h JOIN performance_schema.threads t"
            " USING (THREAD_ID) WHERE h.EVENT_NAME = 'wait/synch/sxlock/innodb/index_tree_rw_lock'"
            " AND h.TIMER_WAIT > 100000000")  # over 100 µs
    # The pool's own account each second: what it read and flushed, how full and dirty it
    # is, and how pages move between the LRU list's old and young parts.
    POOL = ("SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_buffer_pool_reads',"
            " 'Innodb_buffer_pool_pages_flushed', 'Innodb_buffer_pool_pages_made_young',"
            " 'Innodb_buffer_pool_pages_made_not_young', 'Innodb_buffer_pool_wait_free',"
            " 'Innodb_buffer_pool_pages_dirty', 'Innodb_buffer_pool_pages_free',"
            " 'Innodb_buffer_pool_read_ahead', 'Innodb_buffer_pool_read_ahead_evicted')")
    LEVELS = ("Innodb_buffer_pool_pages_dirty", "Innodb_buffer_pool_pages_free")

    def __init__(self, cur: Any) -> None:
        self.cur = cur
        cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = 'YES'"
                    " WHERE NAME IN ('events_waits_current', 'events_waits_history_long')")
        self.seen: dict[int, int] = {}  # thread -> last event id counted
        self.pool: dict[str, int] = {}
        self.last: dict[str, tuple[int, int]] = {}
        self.at = -1.0
        self.deltas: list[tuple[float, dict[str, list[float]]]] = []

    def sample(self, now: float, force: bool = False) -> None:
        if not force and now - self.at < 1.0:
            return
        self.at = now
        self.cur.execute(self.QUERY)
        cur = {r["EVENT_NAME"]: (int(r["COUNT_STAR"]), int(r["SUM_TIMER_WAIT"])) for r in self.cur.fetchall()}
        delta: dict[str, list[float]] = {}
        for name, (n, ps) in cur.items():
            n0, ps0 = self.last.get(name, (0, 0))
            if n > n0:
                delta[name] = [n - n0, round((ps - ps0) / 1e12, 4)]  # picoseconds
        self.last = cur
        self.cur.execute(self.LONG)
        top: dict[int, int] = {}
        for r in self.cur.fetchall():
            tid, eid = int(r["THREAD_ID"]), int(r["EVENT_ID"])
            if eid <= self.seen.get(tid, 0):
                continue
            top[tid] = max(top.get(tid, 0), eid)
            # The latch's address tells one index's tree latch from another's (within a run).
            key = f"long:{r['thread']}:{r['OPERATION']}:{int(r['OBJECT_INSTANCE_BEGIN']) % 100000}"
            count, secs = delta.get(key, [0.0, 0.0])
            delta[key] = [count + 1, round(secs + int(r["TIMER_WAIT"]) / 1e12, 4)]
        self.seen.update(top)
        self.cur.execute(self.POOL)
        for r in self.cur.fetchall():
            name, value = r["Variable_name"], int(r["Value"])
            if name in self.LEVELS:
                delta[f"pool:{name}"] = [value, 0.0]
            elif name in self.pool:
                delta[f"pool:{name}"] = [value - self.pool[name], 0.0]
            self.pool[name] = value
        self.deltas.append((round(now, 2), delta))


class DaemonRun:
    """`lagd run` on the replica, configured as shipped but for the benchmark's own prefetch
    options, at the unit's nice value: the whole daemon (its relay-log tail, lag, advisor,
    HTTP) rather than the engine alone. While it runs, /status is asked twice a second and
    the slowest answer kept, the latency a DBA's `lagctl status` would see mid catch-up."""

    def __init__(self, sb: Sandbox, rep: Any) -> None:
        workdir = Path(rep.datadir).parent
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = workdir / "bench-lagd.log"

        def toml(options: dict[str, Any]) -> str:
            return "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())

        lag = f"\n[lag]\n{toml(LAG_OPTIONS)}\n" if LAG_OPTIONS else ""
        config = workdir / "bench-lagd.toml"
        config.write_text(f"""[replica]
host = "{rep.dsn.host}"
port = {rep.dsn.port}
user = "{rep.dsn.user}"
password_env = "LAGD_BENCH_PASSWORD"
relay_log_index = "{sb.relay_log_index()}"

[http]
listen = "{self.url.removeprefix('http://')}"

[log]
format = "json"
level = "{'debug' if GATE_TRACE[0] else 'info'}"

[prefetch]
{toml(PF_OPTIONS)}
{lag}""")
        env = dict(os.environ, LAGD_BENCH_PASSWORD=rep.dsn.password)
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lagd.daemon", "run", "--config", str(config)], env=env,
                stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_daemon_child)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        # Up, not merely answering: its prefetch engine watches the stopped SQL thread, and
        # its look-ahead tail has read the backlog, as on a replica where lagd ran while the
        # lag built up (its start-up is not the catch-up's). Before, the tail read the whole
        # backlog in the catch-up's first second: 0.5-0.7 CPU-seconds in a 3.4-s hot one.
        seen: list[int] = []

        def up() -> bool:
            st = self.status()
            if st is None:
                return False
            backlog = ((st.get("lag") or {}).get("backlog") or {}).get("transactions")
            seen.append(backlog or 0)
            # /status is a snapshot the daemon refreshes about once a second: unchanged
            # for 2 s, the tail is at the end of the relay log.
            read = len(seen) >= 10 and len(set(seen[-10:])) == 1 and seen[-1] > 0
            if PF_OPTIONS.get("enabled") is False:
                return read
            return read and (st.get("prefetch") or {}).get("state") == "paused"

        while not up():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lagd run did not come up: {self.log.read_text()[-1500:]}")
            time.sleep(0.2)
        self.t0 = time.time()  # the SQL thread starts next: the gate's moves are timed from here
        self.slowest = 0.0
        self._done = threading.Event()
        self._asker = threading.Thread(target=self._ask, daemon=True)
        self._asker.start()

    def status(self, timeout: float = 10.0) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/status", timeout=timeout) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def _ask(self) -> None:
        while not self._done.wait(0.5):
            t = time.monotonic()
            got = self.status()
            self.slowest = max(self.slowest, time.monotonic() - t if got is not None else float("inf"))

    def finish(self) -> dict[str, Any]:
        """The daemon's /status prefetch and stall sections, its gate moves (from its log)
        and the slowest /status answer; then SIGTERM."""
        self._done.set()
        self._asker.join()
        st = self.status() or {}
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        moves: list[tuple[float, str]] = []
        windows: list[tuple[float, str]] = []
        said: list[tuple[float, str]] = []  # the prefetch engine's own log: what else stopped probes
        for ln in self.log.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(ln)
            except ValueError:
                continue
            for mark, into in (("prefetch gate:", moves), ("prefetch window:", windows)):
                _, sep, msg = str(rec.get("msg", "")).partition(mark)
                if sep:
                    into.append((round(rec["ts"] - self.t0, 1), msg.strip()))
            if rec.get("level") != "debug" and str(rec.get("logger", "")).startswith("lagd.prefetch"):
                said.append((round(rec["ts"] - self.t0, 1), str(rec.get("msg", ""))[:300]))
        out = dict(st.get("prefetch") or {})
        out["stall"] = st.get("stall") or {}
        out["gate_log"] = moves
        if windows:
            out["gate_windows"] = windows
        out["prefetch_log"] = said
        out["status_slowest_s"] = round(self.slowest, 3)
        out["lagd"] = "daemon"
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--pool", default="256M", help="buffer pool of the cold/prefetch/parallel modes")
    ap.add_argument("--process-grant", action=argparse.BooleanOptionalAction, default=True,
                    help="grant lagd PROCESS on the replica (without it the stall gate cannot measure)")
    ap.add_argument("--pairs", type=int, default=0,
                    help="instead of --modes: N rounds of cold/prefetch pairs, round-robin over the "
                         "workloads, each pair in the order opposite to the one before")
    ap.add_argument("--pair-bases", default="cold",
                    help=f"with --pairs: the modes each paired with its lagd twin, of {','.join(PF_OF)}")
    ap.add_argument("--changes", type=int, default=50_000)
    ap.add_argument("--workloads", default=",".join(prefetch_setup.WORKLOADS))
    ap.add_argument("--modes", default=DEFAULT_MODES)
    ap.add_argument("--harm", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the two harm checks on update_pk")
    ap.add_argument("--plan", default="",
                    help='runs per workload, e.g. "update_pk:cold,prefetch;delete:cold"')
    ap.add_argument("--setup-only", action="store_true")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("docs"), help="where benchmarks.md and the plot go")
    ap.add_argument("--pf-options", default="{}", help="JSON of prefetch options (experiments)")
    ap.add_argument("--lag-options", default="{}", help="JSON of [lag] options (experiments)")
    ap.add_argument("--server-options", default="{}", help="JSON of extra replica options for all runs")
    ap.add_argument("--lagd", choices=("engine", "daemon"), default="engine",
                    help="in the runs with lagd: its prefetch engine alone, or the whole daemon (lagd run)")
    ap.add_argument("--sql-waits", action="store_true",
                    help="turn on the replica's wait instruments and keep the SQL thread's waits each second")
    ap.add_argument("--gate-trace", action="store_true",
                    help="the daemon logs at debug: each window its stall gate judged, kept in the run")
    ap.add_argument("--pool-pages", action="store_true",
                    help="at the end of each run, count the buffer pool's pages of each index of the table")
    ap.add_argument("--nice", type=int, default=10, help="lagd's nice value (the systemd unit's Nice=)")
    ap.add_argument("--report", type=Path, default=None,
                    help="only print the pairs table of a benchmark-runs.jsonl written earlier")
    args = ap.parse_args(argv)
    if args.report:
        runs = [load_run(json.loads(ln), args.changes) for ln in args.report.read_text().splitlines() if ln]
        print(pairs_table(runs))
        return 0
    NICE[0] = args.nice
    LAGD[0] = args.lagd
    SQL_WAITS[0] = args.sql_waits
    GATE_TRACE[0] = args.gate_trace
    POOL_PAGES[0] = args.pool_pages
    set_pool(args.pool)
    PROCESS_GRANT[0] = args.process_grant
    PF_OPTIONS.update(json.loads(args.pf_options))
    LAG_OPTIONS.update(json.loads(args.lag_options))
    SERVER_OPTIONS.update(json.loads(args.server_options))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cache = args.cache or default_cache_dir() / "bench" / f"prefetch-{args.rows}"
    if args.rebuild:
        (cache / "meta.json").unlink(missing_ok=True)
    wanted = [w for w in args.workloads.split(",") if w]
    if args.plan:
        wanted = sorted({part.partition(":")[0] for part in args.plan.split(";")})
    # The harm checks run on update_pk's backlog, whatever the workloads asked for.
    built = [*wanted, *(["update_pk"] if args.harm and "update_pk" not in wanted else [])]
    meta = prefetch_setup.build(cache, args.rows, args.changes, built)
    if args.setup_only:
        print(json.dumps(meta, indent=2))
        return 0
    plan = [(w, m) for w in wanted for m in args.modes.split(",") if m]
    if args.pairs:
        plan = pairs_plan(wanted, args.pair_bases.split(","), args.pairs)
    if args.plan:  # "update_pk:cold,prefetch,hot;delete:cold,prefetch"
        plan = [(w, m) for part in args.plan.split(";") for w, _, ms in [part.partition(":")]
                for m in ms.split(",") if m]
    if args.harm:
        plan += [("update_pk", m) for m in HARM_MODES.split(",")]
    results: list[Run] = []
    cfg = SandboxConfig(gtid=False, o_direct=True, replica_buffer_pool_mb=256)
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "benchmark-runs.jsonl"  # every run as it ends: a cut-short invocation keeps its pairs
    with Sandbox(cfg) as sb:
        for workload, mode in plan:
            r = run_one(sb, cache, meta, workload, mode)
            results.append(r)
            with raw.open("a") as f:
                f.write(json.dumps(run_record(r)) + "\n")
            pf = r.prefetch or {}
            print(f"{workload:<10} {mode:<12} {r.seconds:7.1f} s {r.rate:9,.0f} rows/s "
                  f"{r.pool_reads:9d} pool reads  server CPU {r.server_cpu:.1f} s  {r.server_io}"
                  + (f"  lagd CPU {r.lagd_cpu:.1f} s {pf.get('thread_cpu') or pf.get('cpu_split')}"
                     f"  gate {gate_summary(r)}" if r.lagd_cpu else ""),
                  flush=True)
    report = summarise(results, meta)
    print(report["table"])
    print(pairs_table(results))
    print(json.dumps(report["json"], indent=1))
    if not args.pairs:
        plot(results, args.out / "benchmark-lag.png")
        write_doc(report, meta, args.out / "benchmarks.md")
    return 0


def run_record(r: Run) -> dict[str, Any]:
    return {"workload": r.workload, "mode": r.mode, "seconds": round(r.seconds, 2), "rows": r.rows,
            "pool_reads": r.pool_reads, "lagd_cpu_s": r.lagd_cpu, "server_cpu_s": round(r.server_cpu, 2),
            "server_io": r.server_io, "prefetch": r.prefetch, "progress": r.progress,
            "history": r.history, "purged_s": round(r.purged_seconds, 2) if r.purged_seconds else None,
            **({"disk": r.disk} if r.disk is not None else {}),
            **({"split": r.split} if r.split is not None else {}),
            **({"waits": r.waits} if r.waits is not None else {})}


def load_run(d: dict[str, Any], changes: int) -> Run:
    # Runs saved before statements were counted have 0 rows: the setup's changes, one a statement.
    return Run(d["workload"], d["mode"], d["seconds"], d["rows"] or changes, d["pool_reads"],
               d["lagd_cpu_s"], [], d["prefetch"], d["server_cpu_s"], d["server_io"], d.get("progress"),
               d.get("history"), d.get("purged_s"), d.get("disk"), d.get("split"), d.get("waits"))


def gate_summary(r: Run) -> str:
    """What decided during a prefetch run: the stall gate (its transitions and last verdict)
    and the slower controller (its last state when that is not active)."""
    pf = r.prefetch or {}
    stall = pf.get("stall") or {}
    moves = pf.get("gate_log") or []
    shut = sum(1 for _, msg in moves if "prefetching" not in msg and "measuring it alone again" not in msg)
    rebased = sum(1 for _, msg in moves if "measuring it alone again" in msg)
    text = (f"gate {'open' if stall.get('gate_open') else 'shut'} at the end, shut {shut}x"
            f"{f', re-measured {rebased}x' if rebased else ''}: "
            f"{stall.get('gate_reason', 'not measured')}")
    if pf.get("state") == "backed_off":
        text += f"; controller backed off: {pf.get('reason')}"
    return text


def split_summary(r: Run) -> str:
    """The SQL thread's time during a prefetch run, from lagd's stall monitor."""
    secs = ((r.prefetch or {}).get("stall") or {}).get("seconds") or {}
    total = sum(secs.values())
    if not total:
        return "-"
    short = {"on_cpu": "CPU", "disk_read": "reads", "cpu_wait": "runnable", "flush_wait": "flush",
             "other_wait": "other"}
    return " ".join(f"{short.get(k, k)} {100 * v / total:.0f}%" for k, v in secs.items() if v)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


PF_OF = {"cold": "prefetch", "parallel": "parallel+pf", "harm_hot": "harm_hot+pf", "harm_32m": "harm_32m+pf"}


def pairs_plan(workloads: list[str], bases: list[str], rounds: int) -> list[tuple[str, str]]:
    """Round-robin (round 1 of every workload, then round 2, ...), so that a slow stretch of
    the machine hits several workloads once rather than one workload N times, and each pair
    in the order opposite to the one before (cold,prefetch then prefetch,cold): an A/A test
    showed the second run of a pair slower by up to 13% with no lagd in either, a bias that
    the same order in every pair would hand to one side."""
    plan = []
    for i in range(rounds):
        for w in workloads:
            for base in bases:
                pair = [(w, base), (w, PF_OF[base])]
                plan += pair[::-1] if i % 2 else pair
    return plan


def pair_ratios(results: list[Run]) -> dict[str, list[tuple[Run, Run]]]:
    """Each run with lagd paired with its twin without lagd (the run of the same workload and
    base mode next to it, before or after), per workload and mode ("update_pk",
    "update_pk parallel", "update_pk harm_32m"); a run whose twin never came stays out."""
    pairs: dict[str, list[tuple[Run, Run]]] = {}
    waiting: dict[tuple[str, str], Run] = {}
    base_of = {pf: base for base, pf in PF_OF.items()}
    for r in results:
        base = r.mode if r.mode in PF_OF else base_of.get(r.mode)
        if base is None:
            continue
        other = waiting.get((r.workload, base))
        if other is None or other.mode == r.mode:  # nothing to pair with, or a newer run of the same side
            waiting[(r.workload, base)] = r
            continue
        del waiting[(r.workload, base)]
        name = r.workload if base == "cold" else f"{r.workload} {base}"
        pairs.setdefault(name, []).append((other, r) if other.mode == base else (r, other))
    return pairs


def pairs_table(results: list[Run]) -> str:
    """Speed-up (cold seconds / prefetch seconds) per pair: median and spread."""
    lines = ["| workload | pairs | median prefetch/cold | spread | with purge | history left, cold/prefetch"
             " | cold s (median) | lagd CPU µs/row | CPU stolen %, cold/prefetch"
             " | SQL thread (last prefetch run) | what decided (last prefetch run) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w, ps in pair_ratios(results).items():
        ratios = [c.seconds / p.seconds for c, p in ps]
        # Until purge was done too (history under PURGED_AT): the catch-up's whole cost.
        purged = [c.purged_seconds / p.purged_seconds for c, p in ps if c.purged_seconds and p.purged_seconds]
        left = ", ".join(f"{_left(c)}/{_left(p)}" for c, p in ps)
        us = [1e6 * p.lagd_cpu / p.rows for _, p in ps if p.lagd_cpu and p.rows]
        stolen = ", ".join(f"{_stolen(c)}/{_stolen(p)}" for c, p in ps)
        last = ps[-1][1]
        lines.append(f"| {w} | {len(ps)} | {_median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x | "
                     f"{f'{_median(purged):.2f}x' if purged else '-'} | {left} | "
                     f"{_median([c.seconds for c, _ in ps]):.1f} | {f'{_median(us):.1f}' if us else '-'} | "
                     f"{stolen} | {split_summary(last)} | {gate_summary(last)} |")
    return "\n".join(lines)


def _stolen(r: Run) -> str:
    """The machine's CPU time stolen by the hypervisor during the run, % ("-": not kept)."""
    pct = (r.server_io or {}).get("stolen_pct")
    return "-" if pct is None else str(pct)


def _left(r: Run) -> str:
    """The purge history length when the SQL thread was done ("-" for runs before it was kept)."""
    if not r.history:
        return "-"
    at = [n for t, n in r.history if t <= r.seconds + 0.01]
    return f"{(at or [r.history[0][1]])[-1] / 1000:.0f}k"


def summarise(results: list[Run], meta: dict[str, Any]) -> dict[str, Any]:
    by = {(r.workload, r.mode): r for r in results}
    lines = [f"{'workload':<10} {'mode':<12} {'seconds':>8} {'rows/s':>9} {'pool reads':>10} "
             f"{'lagd CPU s':>10} {'us/row':>7} {'vs base':>8} {'of hot':>7}"]
    out = []
    for r in results:
        base = next((b for b in ("harm_hot", "harm_32m", "parallel") if r.mode.startswith(b)), "cold")
        cold = by.get((r.workload, base))
        hot = by.get((r.workload, "hot"))
        vs_cold = r.rate / cold.rate if cold and cold.rate else None
        of_hot = r.rate / hot.rate if hot and hot.rate else None
        us = 1e6 * r.lagd_cpu / r.rows if r.lagd_cpu and r.rows else None
        cpu_s = f"{r.lagd_cpu:.1f}" if r.lagd_cpu else "-"
        us_s = f"{us:.1f}" if us else "-"
        vs_s = f"{vs_cold:.2f}x" if vs_cold else "-"
        lines.append(f"{r.workload:<10} {r.mode:<12} {r.seconds:8.1f} {r.rate:9,.0f} {r.pool_reads:10d} "
                     f"{cpu_s:>10} {us_s:>7} {vs_s:>8} {_pct(of_hot):>7}")
        pf = r.prefetch or {}
        out.append({"workload": r.workload, "mode": r.mode, "seconds": round(r.seconds, 2),
                    "rows": r.rows, "rows_per_s": round(r.rate), "pool_reads": r.pool_reads,
                    "lagd_cpu_s": round(r.lagd_cpu, 2) if r.lagd_cpu else None,
                    "server_cpu_s": round(r.server_cpu, 2), "server_io": r.server_io,
                    "lagd_us_per_row": round(us, 1) if us else None,
                    "vs_baseline": round(vs_cold, 3) if vs_cold else None, "baseline": base,
                    "of_hot": round(of_hot, 3) if of_hot else None,
                    "prefetch": {k: pf.get(k) for k in ("state", "reason", "counters", "benefit",
                                                         "target_transactions", "probe_latency_avg")}
                    if pf else None})
    setup = {k: meta[k] for k in ("rows", "table_bytes", "changes")}
    return {"table": "\n".join(lines), "json": {"setup": setup, "runs": out}}


def plot(results: list[Run], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - a plotting dependency only the report needs

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    workloads = sorted({r.workload for r in results if r.mode in ("cold", "prefetch", "hot")})
    if not workloads:
        return
    fig, axes = plt.subplots(len(workloads), 1, figsize=(8, 2.6 * len(workloads)), squeeze=False)
    for ax, w in zip(axes[:, 0], workloads, strict=True):
        for r in results:
            if r.workload == w and r.mode in ("cold", "prefetch", "hot", "parallel"):
                ax.plot([t for t, _ in r.lag], [lag for _, lag in r.lag],
                        label=f"{r.mode} ({r.seconds:.1f} s)")
        ax.set_title(f"{w}: replica lag while catching up")
        ax.set_xlabel("seconds since the SQL thread started")
        ax.set_ylabel("lag (source s)")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x else "-"


def write_doc(report: dict[str, Any], meta: dict[str, Any], path: Path) -> None:
    runs = report["json"]["runs"]
    rows = ["| workload | mode | seconds | rows/s | pool reads | lagd CPU µs/row | vs baseline | of hot |",
            "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        vs = f"{r['vs_baseline']:.2f}x ({r['baseline']})" if r["vs_baseline"] else "-"
        rows.append(f"| {r['workload']} | {r['mode']} | {r['seconds']} | {r['rows_per_s']:,} | "
                    f"{r['pool_reads']:,} | {r['lagd_us_per_row'] or '-'} | {vs} | {_pct(r['of_hot'])} |")
    text = BENCH_DOC.format(rows=meta["rows"], gb=meta["table_bytes"] / 2**30, changes=meta["changes"],
                            table="\n".join(rows), when=time.strftime("%Y-%m-%d"),
                            json=json.dumps(report["json"], indent=1))
    path.write_text(text)


BENCH_DOC = """# Benchmarks

Written by `python -m tests.bench.bench_prefetch` on {when}, on this project's
2-core build machine (shared, noisy: compare rows in one run, not across runs).

Setup: a sysbench-like table of {rows:,} rows ({gb:.1f} GiB of InnoDB data and
index), a replica with a 256 MB buffer pool and `innodb_flush_method=O_DIRECT`;
a backlog of about {changes:,} row changes per workload in the replica's relay
log; each run restores the same data, restarts the replica cold and times the
SQL thread until it has applied everything.

Modes: `cold` (no lagd), `prefetch` (lagd), `hot` (a pool holding the whole
table, warmed first: the physical bound), `parallel` (MariaDB parallel
replication, 8 threads, optimistic), `parallel+pf` (both). Harm checks:
`harm_hot` (everything in memory) and `harm_32m` (a 32 MB pool), each without
and with lagd. "vs baseline" is the apply rate against the run named in
brackets; "of hot" the fraction of the hot bound.

What the figures mean, where the time goes, and runs made after later
changes: [prefetch.md](prefetch.md#benchmark).

{table}

![replica lag over time](benchmark-lag.png)

<details><summary>JSON</summary>

```json
{json}
```

</details>
"""


if __name__ == "__main__":
    sys.exit(main())
