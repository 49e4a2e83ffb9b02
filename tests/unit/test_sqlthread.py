"""The daemon's SQL-thread split: finding the threads (ProcStall with a scripted query
and recorded /proc files), the typed view, and the runtime owning it (a fake Stall).

No server: the query is the collaborator boundary; /proc is a dict of files.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from metrics_snapshots import full_snapshot
from runtime_fakes import runtime, settings
from test_runtime import stop_within_budget, until

from lagd.daemon import metrics
from lagd.daemon.sqlthread import ProcStall, account_of, foreign_threads, stall_view
from lagd.daemon.state import StallView
from lagd.lag import ReplicaState
from lagd.prefetch import stall
from lagd.prefetch.stall import StallMonitor

MARIADB_ROWS = [{"tid": 4242, "role": "Slave_SQL"}]


def proc(tid: int, *, comm: str = "mariadbd", state: str = "D", cpu_ns: int = 0, queue_ns: int = 0,
         cpu: tuple[int, int] = (100, 200)) -> dict[str, str]:
    """The /proc files the monitor reads for one thread of process 4000."""
    stat = f"{tid} (mariadbd) {state} 1 " + " ".join(["0"] * 9) + " 5 6 " + " ".join(["0"] * 30)
    return {f"/proc/{tid}/status": f"Name:\t{comm}\nTgid:\t4000\n", "/proc/4000/comm": f"{comm}\n",
            f"/proc/{tid}/stat": stat, f"/proc/{tid}/schedstat": f"{cpu_ns} {queue_ns} 10\n",
            f"/proc/{tid}/io": "read_bytes: 0\n",
            "/proc/stat": f"cpu  {cpu[0]} 0 0 {cpu[1]} 0 0 0 0 0 0\n"}


class Procfs:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def __call__(self, path: str) -> str:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(answers: dict[str, Any], files: dict[str, str]) -> tuple[ProcStall, Procfs, Clock, list[str]]:
    asked: list[str] = []

    async def query(sql: str) -> list[dict[str, Any]]:
        asked.append(sql)
        got = next((v for k, v in answers.items() if k in sql), [])
        if isinstance(got, Exception):
            raise got
        return list(got)

    fs, clock = Procfs(files), Clock()
    monitor = StallMonitor(read=fs, clock=clock, cpus=2)
    return ProcStall(query, "lagd", monitor, read=fs, clock=clock), fs, clock, asked


# ----- finding the threads -------------------------------------------------------------


def test_no_process_grant_says_the_grant_for_the_account() -> None:
    ps, _, _, asked = make({"PROCESSLIST": [], "CURRENT_USER": [{"u": "lagd@10.0.0.%"}]}, proc(4242))
    asyncio.run(ps.refresh(True, mariadb=True))
    assert ps.note == "needs the PROCESS grant (fix: GRANT PROCESS ON *.* TO 'lagd'@'10.0.0.%';)"
    assert ps.monitor.threads == () and "information_schema.PROCESSLIST" in asked[0]
    v = ps.view(busy=True, gate=None)
    assert v.seconds is None and v.shares is None and v.verdict == "unknown"
    assert v.summary.startswith("SQL thread: not measured: needs the PROCESS grant")


def test_mysql_without_performance_schema_says_so() -> None:
    ps, _, _, asked = make({"performance_schema": [], "CURRENT_USER": [{"u": "lagd@localhost"}]}, {})
    asyncio.run(ps.refresh(True, mariadb=False))
    assert "performance_schema.threads" in asked[0]
    assert "GRANT SELECT ON performance_schema.threads TO 'lagd'@'localhost'" in (ps.note or "")


def test_a_failing_query_is_the_note() -> None:
    ps, _, _, _ = make({"PROCESSLIST": RuntimeError("Unknown column 'TID'")}, {})
    asyncio.run(ps.refresh(True, mariadb=True))
    assert ps.note == "cannot list the SQL thread's OS thread: Unknown column 'TID'"


@pytest.mark.parametrize(("files", "why"), [
    ({}, "is not visible here"),
    (proc(4242, comm="bash"), "is process 'bash' here, not the server"),
], ids=["missing", "other-process"])
def test_a_thread_of_another_host_or_namespace_is_not_measured(files: dict[str, str], why: str) -> None:
    assert why in (foreign_threads([4242], Procfs(files)) or "")
    ps, _, _, _ = make({"PROCESSLIST": MARIADB_ROWS}, files)
    asyncio.run(ps.refresh(True, mariadb=True))
    assert ps.note is not None and why in ps.note and ps.monitor.threads == ()


def test_a_stopped_sql_thread_is_not_an_invisible_one() -> None:
    """No threads while it is stopped, but nothing was looked for: the prefetch gate must
    measure its next start, not take it for threads lagd cannot see."""
    ps, _, _, asked = make({"PROCESSLIST": []}, {})
    asyncio.run(ps.refresh(False, mariadb=True))
    assert ps.monitor.threads == () and not ps.monitor.looked and asked == []
    asyncio.run(ps.refresh(True, mariadb=True))  # running, and none visible
    assert ps.monitor.looked and ps.monitor.wanted == ()


@pytest.mark.parametrize(("given", "want"), [("lagd@localhost", "'lagd'@'localhost'"),
                                             ("a@b@c", "'a@b'@'c'"), (None, "'lagd'@'<host>'")])
def test_account_of(given: str | None, want: str) -> None:
    assert account_of(given, "lagd") == want


def test_without_an_engine_the_sampler_only_watches() -> None:
    """No prefetch engine (off, or down): nothing judges the split, so fewer samples a
    second; with one, its gate sets the rate and refresh leaves it alone."""
    ps, _, _, _ = make({"PROCESSLIST": MARIADB_ROWS}, proc(4242))
    ps.monitor.budget = stall.KEPT_OUT_SAMPLES_PER_S  # as an engine keeping prefetch out sets it
    asyncio.run(ps.refresh(True, mariadb=True, engine=True))
    assert ps.monitor.budget == stall.KEPT_OUT_SAMPLES_PER_S
    asyncio.run(ps.refresh(True, mariadb=True, engine=False))
    assert ps.monitor.budget == stall.WATCH_SAMPLES_PER_S < stall.KEPT_OUT_SAMPLES_PER_S
    assert stall.sampling_hz(1, ps.monitor.budget, ps.monitor.hz) == stall.WATCH_SAMPLES_PER_S


def test_found_thread_is_sampled_and_split() -> None:
    files = proc(4242)
    ps, fs, clock, asked = make({"PROCESSLIST": MARIADB_ROWS}, files)
    asyncio.run(ps.refresh(True, mariadb=True))
    assert ps.note is None
    # Not asked again before it is due, unless the SQL thread starts or stops.
    asyncio.run(ps.refresh(True, mariadb=True))
    assert len(asked) == 1
    for i in range(1, 11):  # 1 s: 0.3 s on CPU, 0.7 s blocked on a read, one core idle
        clock.now += 0.1
        fs.files.update(proc(4242, cpu_ns=i * 30_000_000, cpu=(100 + i * 10, 200 + i * 10)))
        ps.monitor.sample()
    v = ps.view(busy=True, gate=(True, "prefetching"))
    assert v.threads == (4242,) and v.seconds is not None and v.shares is not None
    assert v.shares["on_cpu"] == pytest.approx(0.3) and v.shares["disk_read"] == pytest.approx(0.7)
    assert v.verdict == "reads" and v.prefetch_can_help and v.spare_cores == pytest.approx(1.0)
    assert v.gate_open is True and v.gate_reason == "prefetching"
    assert v.summary == ("SQL thread: 70% waiting on disk reads, 30% on CPU (last 10 s): prefetch running,"
                         " its probes in this split: see prefetch")
    # The sampler stopped: its last split is stale, so unknown; the counters stay.
    clock.now += 60
    stale = ps.view(busy=True, gate=None)
    assert stale.shares is None and stale.spare_cores is None and stale.verdict == "unknown"
    assert stale.seconds == v.seconds
    # The SQL thread stops: nothing measured, and it is said.
    asyncio.run(ps.refresh(False, mariadb=True))
    assert ps.monitor.threads == () and len(asked) == 1


# ----- the runtime owns one -------------------------------------------------------------


class FakeStall:
    """The Stall protocol: records what the runtime asks, answers a fixed view."""

    def __init__(self, view: StallView) -> None:
        self.view_ = view
        self.started = self.stopped = 0
        self.refreshed: list[tuple[bool, bool, bool]] = []
        self.asked: list[tuple[bool, tuple[bool, str] | None]] = []

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1

    async def refresh(self, sql_running: bool, mariadb: bool, engine: bool) -> None:
        self.refreshed.append((sql_running, mariadb, engine))

    def view(self, busy: bool, gate: tuple[bool, str] | None) -> StallView:
        self.asked.append((busy, gate))
        return self.view_


UNMEASURED = stall_view({"seconds": {}, "recent": {}, "threads": [], "headroom_cores": None,
                         "verdict": "unknown", "text": "", "prefetch_can_help": False},
                        measured=False, note="needs the PROCESS grant (fix: ...)", fresh=False, gate=None)


@pytest.mark.asyncio
@pytest.mark.parametrize("prefetch", [False, True], ids=["prefetch-off", "prefetch-on"])
async def test_runtime_measures_whether_prefetch_runs_or_not(prefetch: bool) -> None:
    rt, _ = runtime(settings(prefetch={"enabled": prefetch}))
    fake = FakeStall(full_snapshot().stall or UNMEASURED)
    rt.parts.stall = fake
    rt.start()
    try:
        await until(lambda: rt.lag is not None and rt.lag.state is ReplicaState.IDLE
                    and len(fake.refreshed) >= 2, "idle, threads looked for")
        if prefetch:
            await until(lambda: rt.prefetcher is not None and fake.refreshed[-1][2], "prefetcher")
        # running, MariaDB, and an engine (its gate sets the sampler's rate) or not
        assert fake.started == 1 and fake.refreshed[-1] == (True, True, prefetch)
        snap = rt.snapshot()
        assert snap.stall is fake.view_
        busy, gate = fake.asked[-1]
        assert busy is False  # caught up: the SQL thread sleeps, its split says nothing
        assert (gate is not None) is prefetch
        assert snap.to_json()["stall"]["summary"] == fake.view_.summary
    finally:
        await stop_within_budget(rt)
    assert fake.stopped == 1


@pytest.mark.asyncio
async def test_the_engines_fresher_status_says_whether_the_sql_thread_runs() -> None:
    """The lag loop polls every poll_interval, the prefetch engine every 20-250 ms: once
    the engine has a status, its word is the one the threads are looked for by."""
    rt, _ = runtime(settings(prefetch={"enabled": True}))
    fake = FakeStall(full_snapshot().stall or UNMEASURED)
    rt.parts.stall = fake
    rt.start()
    try:
        await until(lambda: rt.prefetcher is not None and len(fake.refreshed) >= 1, "prefetcher")
        assert fake.refreshed[-1][:2] == (True, True)  # the lag reading's word: the engine has none yet
        rt.prefetcher.running = False  # type: ignore[union-attr]
        await until(lambda: fake.refreshed[-1] == (False, True, True), "the engine's word")
    finally:
        await stop_within_budget(rt)


@pytest.mark.asyncio
async def test_unmeasured_is_absent_from_the_metrics_not_zero() -> None:
    rt, _ = runtime()
    rt.parts.stall = FakeStall(UNMEASURED)
    rt.start()
    try:
        await until(lambda: rt.reading is not None, "polled")
        text = metrics.render(rt.snapshot).decode()
    finally:
        await stop_within_budget(rt)
    for name in ("lagd_sql_thread_seconds_total", "lagd_sql_thread_share", "lagd_machine_spare_cores",
                 "lagd_prefetch_gate_open"):
        assert name not in text, name
    assert 'lagd_scrape_collector_success{collector="stall"} 1.0' in text


def test_no_stall_collaborator_no_view() -> None:
    rt, _ = runtime()
    assert rt.snapshot().stall is None


def test_parallel_workers_line_names_them_and_their_idle_time() -> None:
    recent = {"on_cpu": 0.8, "cpu_wait": 1.5, "disk_read": 0.1, "flush_wait": 0.0, "other_wait": 5.6}
    snap = {"seconds": recent, "recent": recent, "threads": list(range(101, 109)), "headroom_cores": 1.0}
    v = stall.verdict(recent, running=True, threads=8)
    view = stall_view({**snap, "verdict": v.kind, "text": v.text, "prefetch_can_help": v.prefetch_can_help},
                      measured=True, note=None, fresh=True, gate=None)
    assert view.summary == ("8 parallel workers: 70% waiting for work, their turn to commit or locks,"
                            " 19% waiting for a CPU (last 10 s): prefetch cannot help")
    reading = {**recent, "disk_read": 1.1, "other_wait": 4.6}
    v = stall.verdict(reading, running=True, threads=8)
    view = stall_view({**snap, "recent": reading, "verdict": v.kind, "text": v.text,
                       "prefetch_can_help": v.prefetch_can_help},
                      measured=True, note=None, fresh=True, gate=None)
    assert view.summary.endswith("; 1.1 of them on disk reads on average (last 10 s): prefetch can help")


@pytest.mark.parametrize(("kind", "text", "shares", "line"), [
    # update_pk with probes (benchmarks.md, "Free-page waits"): CPU-bound because they took its reads
    ("cpu", "SQL thread 64% on CPU, 15% of it waiting for a core: CPU-bound, prefetch cannot help",
     {"on_cpu": 4.9, "cpu_wait": 1.5, "disk_read": 1.9, "other_wait": 1.7},
     "SQL thread: 49% on CPU, 19% waiting on disk reads (last 10 s): prefetch running, its probes in this"
     " split: see prefetch"),
    ("other", "SQL thread 45% waiting on locks, commits or other threads: prefetch cannot help",
     {"on_cpu": 4.0, "disk_read": 1.5, "other_wait": 4.5},
     "SQL thread: 45% waiting on locks, commits or other threads, 40% on CPU (last 10 s): prefetch running,"
     " its probes in this split: see prefetch"),
])
def test_a_split_with_probes_running_is_not_said_to_be_beyond_prefetch(
        kind: str, text: str, shares: dict[str, float], line: str) -> None:
    """Probes that took the SQL thread's reads leave it on CPU: "CPU-bound, prefetch cannot
    help" would be false while they make it 1.4x faster."""
    snap = {"seconds": shares, "recent": shares, "threads": [4242], "headroom_cores": 0.6, "verdict": kind,
            "text": text, "prefetch_can_help": False}
    v = stall_view(snap, measured=True, note=None, fresh=True,
                   gate=(True, "probes speed the SQL thread up (...; reads 51% of its time before, 11% now)"))
    assert v.summary == line
    assert v.text.endswith(": with prefetch running, its probes in this split: see prefetch")
    assert "cannot help" not in v.text and v.verdict == kind
    shut = stall_view(snap, measured=True, note=None, fresh=True, gate=(False, "backing off for 10 s"))
    assert shut.text == text and "prefetch running" not in shut.summary  # without probes: the split's own


@pytest.mark.parametrize(("gate", "ends"), [
    (None, "prefetch can help"),  # no gate (adaptive off): the split alone
    # probes run: the split is the SQL thread's with them
    ((True, "SQL thread 41% waiting on disk reads, 1.3 idle cores: prefetching"),
     "prefetch running, its probes in this split: see prefetch"),
    # the gate is open but something else keeps the probes out
    ((True, "open, but probes are out: no connection slot free"), "prefetch held off, see prefetch"),
    # the gate keeps prefetch out: "can help" would say the opposite of what lagd does
    ((False, "100% of the row changes ahead leave index entries for purge ...: backing off for 120 s"),
     "prefetch held off, see prefetch"),
    ((False, "measuring the SQL thread before prefetching"), "prefetch held off, see prefetch"),
])
def test_the_summary_does_not_promise_prefetch_the_gate_holds_off(gate: tuple[bool, str] | None,
                                                                   ends: str) -> None:
    snap = {"seconds": {"on_cpu": 3.3, "disk_read": 4.1}, "recent": {"on_cpu": 3.3, "disk_read": 4.1},
            "threads": [4242], "headroom_cores": 1.3, "verdict": "reads",
            "text": "SQL thread 55% waiting on disk reads: prefetch can help", "prefetch_can_help": True}
    v = stall_view(snap, measured=True, note=None, fresh=True, gate=gate)
    assert v.summary.endswith(f"(last 10 s): {ends}"), v.summary
    assert v.prefetch_can_help  # the split's own verdict stays in /status
