"""The SQL thread's time split from recorded /proc readings (lagd.prefetch.stall)."""

from __future__ import annotations

import collections
import os
import threading
import time

import pytest

from lagd.prefetch import stall
from lagd.prefetch.stall import STATES, StallMonitor, ThreadSample, classify, verdict

TICK = stall._TICK_NS

# Recorded from a MariaDB 10.11 replica's SQL thread (fields after the state abridged as read).
STAT = ("31989 (mariadbd) {state} 31958 31958 9515 0 -1 4194368 1200 0 0 0 {utime} {stime} 0 0 20 0 13 0"
        " 163960 3133440 412 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")
IO = ("rchar: 1718215764\nwchar: 1412192253\nsyscr: 261658\nsyscw: 195457\nread_bytes: {read}\n"
      "write_bytes: 1409220608\ncancelled_write_bytes: 0\n")


def test_parsers() -> None:
    assert stall.parse_stat(STAT.format(state="D", utime=150, stime=50)) == ("D", 200 * TICK)
    assert stall.parse_stat("7 (odd) name)) S 1 1 1 0 -1 0 0 0 0 0 3 4 0 0")[0] == "S"
    assert stall.parse_schedstat("175184791 13740280 448\n") == (175184791.0, 13740280.0)
    assert stall.parse_io(IO.format(read=184500224)) == 184500224
    assert stall.parse_io("rchar: 1\n") is None
    assert stall.parse_cpu_line("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n") == (150.0, 1000.0)


def s(at: float, state: str, cpu: float | None, queue: float | None = None, wchan: str | None = None,
      read: int | None = None) -> ThreadSample:
    return ThreadSample(1, at, state, None if cpu is None else cpu * 1e9,
                        None if queue is None else queue * 1e9, wchan, read)


@pytest.mark.parametrize(("prev", "cur", "split"), [
    # 20 ms apart. On CPU all the time.
    (s(0, "R", 1.0, 0.0), s(0.02, "R", 1.02, 0.0), {"on_cpu": 0.02}),
    # 5 ms on CPU, 5 ms queued for a core, blocked in a page read the rest.
    (s(0, "R", 1.0, 0.0), s(0.02, "D", 1.005, 0.005, "io_schedule", 10), {"on_cpu": 0.005, "cpu_wait": 0.005,
                                                                          "disk_read": 0.01}),
    # D at the start only: still the read that blocked it.
    (s(0, "D", 1.0, 0.0), s(0.02, "R", 1.01, 0.0), {"on_cpu": 0.01, "disk_read": 0.01}),
    # Blocked in an fsync, nothing read: a flush (commit) wait.
    (s(0, "D", 1.0, 0.0, "file_write_and_wait_range", 5), s(0.02, "D", 1.0, 0.0, "jbd2_log_wait_commit", 5),
     {"flush_wait": 0.02}),
    # wchan hidden from another user ("0" read as None): D counts as a read.
    (s(0, "S", 1.0, 0.0), s(0.02, "D", 1.0, 0.0), {"disk_read": 0.02}),
    # Sleeping on a futex: a lock, a condition, another thread.
    (s(0, "S", 1.0, 0.0), s(0.02, "S", 1.002, 0.0), {"on_cpu": 0.002, "other_wait": 0.018}),
    # No schedstat: utime+stime ticks are too coarse, the state decides.
    (s(0, "R", None), s(0.02, "R", None), {"on_cpu": 0.02}),
    (s(0, "S", None), s(0.02, "S", None), {"other_wait": 0.02}),
])
def test_classify(prev: ThreadSample, cur: ThreadSample, split: dict[str, float]) -> None:
    got = classify(prev, cur)
    assert got == pytest.approx({**dict.fromkeys(STATES, 0.0), **split})
    assert sum(got.values()) == pytest.approx(cur.at - prev.at)


def secs(**kw: float) -> dict[str, float]:
    return {**dict.fromkeys(STATES, 0.0), **kw}


@pytest.mark.parametrize(("seconds", "kw", "kind", "helps", "words"), [
    (secs(on_cpu=0.2, disk_read=0.71, other_wait=0.09), {}, "reads", True,
     "SQL thread 71% waiting on disk reads: prefetch can help"),
    (secs(on_cpu=0.2, disk_read=0.71, other_wait=0.09), {"headroom": 0.1}, "reads", False, "no CPU to spare"),
    (secs(on_cpu=0.88, disk_read=0.02, other_wait=0.1), {}, "cpu", False,
     "SQL thread 88% on CPU: CPU-bound, prefetch cannot help"),
    (secs(on_cpu=0.5, cpu_wait=0.3, other_wait=0.2), {}, "cpu", False, "30% of it waiting for a core"),
    (secs(on_cpu=0.3, flush_wait=0.6, other_wait=0.1), {}, "flush", False, "page flushes"),
    (secs(on_cpu=0.3, other_wait=0.7), {}, "other", False, "70% waiting on locks"),
    (secs(), {}, "unknown", False, "no samples"),
    (secs(other_wait=1.0), {"busy": False}, "idle", False, "caught up"),
    (secs(), {"running": False}, "unknown", False, "not running"),
])
def test_verdict(seconds: dict[str, float], kw: dict[str, object], kind: str, helps: bool,
                 words: str) -> None:
    args: dict[str, object] = {"running": True, **kw}
    v = verdict(seconds, **args)  # type: ignore[arg-type]
    assert (v.kind, v.prefetch_can_help) == (kind, helps)
    assert words in v.text


def test_headroom() -> None:
    assert stall.cpu_headroom((100.0, 1000.0), (250.0, 1200.0), 2) == pytest.approx(0.5)
    assert stall.cpu_headroom((100.0, 1000.0), (100.0, 1000.0), 2) is None


@pytest.mark.parametrize(("rows", "tids"), [
    ([{"tid": 31989, "role": "Slave_SQL"}, {"tid": 31988, "role": "Slave_IO"}], (31989,)),
    ([{"tid": 5, "role": "Slave_SQL"}, {"tid": 7, "role": "Slave_worker"},
      {"tid": 6, "role": "Slave_worker"}], (6, 7)),
    ([{"tid": 9, "role": "thread/sql/replica_sql"}, {"tid": 10, "role": "thread/sql/replica_worker"}], (10,)),
    ([{"tid": 9, "role": "thread/sql/replica_sql"}, {"tid": 8, "role": "thread/sql/replica_io"}], (9,)),
    ([{"tid": None, "role": "Slave_SQL"}], ()),
    ([], ()),
])
def test_applier_tids(rows: list[dict[str, object]], tids: tuple[int, ...]) -> None:
    assert stall.applier_tids(rows) == tids


def test_monitor_over_recorded_files() -> None:
    files: dict[str, str] = {}
    clock = [0.0]

    def put(state: str, run_ns: int, utime: int, read: int, busy: int, idle: int) -> None:
        files["/proc/42/stat"] = STAT.format(state=state, utime=utime, stime=0)
        files["/proc/42/schedstat"] = f"{run_ns} 0 10\n"
        files["/proc/42/io"] = IO.format(read=read)
        files["/proc/42/wchan"] = "0"
        files["/proc/stat"] = f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n"

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    mon = StallMonitor(read=read, clock=lambda: clock[0], cpus=2)
    mon.set_threads([42])
    put("R", 0, 0, 0, 1000, 1000)
    mon.sample()
    clock[0] = 1.0
    put("D", 200_000_000, 20, 4096, 1100, 1100)  # 0.2 s on CPU, then blocked reading; 1 of 2 cores idle
    mon.sample()
    assert mon.seconds == pytest.approx(secs(on_cpu=0.2, disk_read=0.8))
    assert mon.headroom_over(1.0) == pytest.approx(1.0)
    snap = mon.snapshot()
    assert (snap["verdict"], snap["prefetch_can_help"]) == ("reads", True)
    assert "80% waiting on disk reads" in snap["text"]
    del files["/proc/42/stat"]  # the thread is gone (STOP SLAVE): no sample, no time
    clock[0] = 2.0
    mon.sample()
    assert sum(mon.seconds.values()) == pytest.approx(1.0)
    mon.set_threads([])
    assert mon.snapshot()["verdict"] == "unknown"


def test_off_cpu_time_seen_between_samples_follows_the_recent_wait_mix() -> None:
    # Short reads: the sample after the first interval caught one, the next did not;
    # the second interval's 10 ms off CPU still count as reads, not as CPU.
    seq = [s(0, "R", 1.0, 0.0), s(0.02, "D", 1.01, 0.0), s(0.04, "R", 1.02, 0.0)]
    files: dict[str, str] = {}
    clock = [0.0]

    def read(path: str) -> str:
        if path not in files:
            raise PermissionError(path)  # /proc/<tid>/io of another user's process
        return files[path]

    mon = StallMonitor(read=read, clock=lambda: clock[0], cpus=1)
    mon.set_threads([1])
    for sample in seq:
        clock[0] = sample.at
        files["/proc/1/stat"] = STAT.format(state=sample.state, utime=0, stime=0)
        files["/proc/1/schedstat"] = f"{int(sample.cpu_ns or 0)} 0 1"
        mon.sample()
    assert mon.seconds == pytest.approx(secs(on_cpu=0.02, disk_read=0.02))


@pytest.mark.parametrize(("seconds", "threads", "kind", "helps", "words"), [
    # Eight workers, 1.1 of them always on a read: the gate's measure, not the diluted share.
    (secs(on_cpu=0.8, cpu_wait=1.5, disk_read=1.1, other_wait=4.6), 8, "reads", True,
     "8 parallel workers: 1.1 of them waiting on disk reads on average (14% of their time): prefetch"),
    # Mostly idle workers are not "waiting on locks".
    (secs(on_cpu=0.8, cpu_wait=1.5, disk_read=0.1, other_wait=5.6), 8, "other", False,
     "8 parallel workers: 70% of their time waiting for work, their turn to commit or locks"),
    (secs(on_cpu=6.0, cpu_wait=1.0, other_wait=1.0), 8, "cpu", False, "8 parallel workers: 88% on CPU"),
    # One thread: as before.
    (secs(on_cpu=0.3, disk_read=0.14, other_wait=0.56), 1, "other", False, "SQL thread 56% waiting on locks"),
])
def test_verdict_for_parallel_workers(seconds: dict[str, float], threads: int, kind: str, helps: bool,
                                      words: str) -> None:
    v = verdict(seconds, running=True, threads=threads)
    assert (v.kind, v.prefetch_can_help) == (kind, helps)
    assert words in v.text


def test_the_sampler_thread_yields_to_the_server_and_the_rest_of_lagd_does_not() -> None:
    """Its own thread at SAMPLER_NICE (the SQL thread first when a read completes);
    the caller's priority stays as it was."""
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    sampled = threading.Event()
    mon = StallMonitor(read=lambda path: (sampled.set(), "cpu 1 0 1 1 0 0 0 0")[1])
    mon.set_threads([])
    mon.start(hz=200)
    try:
        assert sampled.wait(5)
        assert mon._thread is not None and mon._thread.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, mon._thread.native_id) == stall.SAMPLER_NICE
    finally:
        mon.stop()
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_a_refused_priority_is_said_once(monkeypatch, caplog) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(stall.os, "setpriority", refuse)
    monkeypatch.setattr(stall, "_nice_refused", [])
    with caplog.at_level("INFO", logger="lagd.prefetch.stall"):
        stall._yield_to_the_server()
        stall._yield_to_the_server()
    said = [r.getMessage() for r in caplog.records if "lower its priority" in r.getMessage()]
    assert len(said) == 1 and "setpriority" in said[0]


# ----- the sampler's files stay open ---------------------------------------------------


def test_proc_files_read_afresh_from_open_descriptors(tmp_path) -> None:
    a, b, gone = tmp_path / "a", tmp_path / "b", tmp_path / "gone"
    a.write_text("one")
    b.write_text("two")
    files = stall.ProcFiles()
    try:
        assert files.read_many([str(a), str(b), str(gone)]) == ["one", "two", None]
        fd = files._fds[str(a)]
        a.write_text("three")  # the same file, read again from offset 0 through the same descriptor
        assert files.read_many([str(a), str(b), str(gone)]) == ["three", "two", None]
        assert files._fds[str(a)] == fd
        gone.write_text("here")  # a file that could not be opened is tried again
        assert files.read_many([str(a), str(gone)]) == ["three", "here"]
        assert set(files._fds) == {str(a), str(gone)}  # b is no longer asked for: closed
    finally:
        files.close()
    assert files._fds == {}


def test_proc_files_ask_a_refused_file_again_only_when_the_files_change(tmp_path, monkeypatch) -> None:
    """Under the hardened unit another user's /proc/<tid>/io cannot be opened: asked at
    every sample, it cost a failing open() each; now once per set of files asked for."""
    a, io = tmp_path / "a", tmp_path / "io"
    a.write_text("one")
    io.write_text("hidden")
    opened: list[str] = []
    real_open = os.open

    def guarded(path: str, flags: int, *args: int) -> int:
        opened.append(os.path.basename(path))
        if path == str(io):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(stall.os, "open", guarded)
    files = stall.ProcFiles()
    try:
        for _ in range(3):
            assert files.read_many([str(a), str(io)]) == ["one", None]
        assert opened == ["a", "io"]  # each tried once, the refusal remembered
        assert files.read_many([str(io)]) == [None]  # another set of files: asked again
        assert opened == ["a", "io", "io"]
    finally:
        files.close()


def _end(worker: threading.Thread, done: threading.Event) -> None:
    """Let ``worker`` finish and wait until the kernel has released it: join() returns
    as the thread finishes, its /proc entry goes a moment later."""
    done.set()
    worker.join()
    for _ in range(500):
        if not os.path.exists(f"/proc/{worker.native_id}"):
            break
        time.sleep(0.01)


def test_proc_files_see_a_threads_time_grow_and_its_end() -> None:
    done = threading.Event()
    worker = threading.Thread(target=lambda: (sum(range(200_000)), done.wait(5)))
    worker.start()
    path = f"/proc/{worker.native_id}/schedstat"
    files = stall.ProcFiles()
    try:
        [first] = files.read_many([path])
        assert first is not None
        spent = stall.parse_schedstat(first)[0]
        _end(worker, done)
        assert files.read_many([path]) == [None]  # the thread is gone: ESRCH, not its last text
    finally:
        files.close()
    assert spent > 0


needs_c = pytest.mark.skipif(stall.READ_BATCH is None, reason="the C reader is not built (pure Python)")


@needs_c
def test_a_batch_reads_as_read_many_does(tmp_path) -> None:
    """The same texts, None and reopening as read_many, one (time, texts) a sample."""
    a, gone = tmp_path / "a", tmp_path / "gone"
    a.write_text("one")
    files = stall.ProcFiles()
    try:
        t0 = time.monotonic()
        batch = files.read_batch([str(a), str(gone)], 3, 0.01)
        assert [texts for _, texts in batch] == [("one", None)] * 3
        times = [at for at, _ in batch]
        assert t0 < times[0] < times[1] < times[2] <= time.monotonic()  # time.monotonic's clock
        assert times[2] - times[0] >= 0.02 * 0.9  # a wait before each sample
        gone.write_text("here")  # tried again, as read_many does
        assert files.read_batch([str(a), str(gone)], 1, 0.0)[0][1] == ("one", "here")
        assert files.read_many([str(a), str(gone)]) == ["one", "here"]
    finally:
        files.close()


@needs_c
def test_a_batch_gives_none_for_a_thread_that_ended_and_drops_its_file() -> None:
    done = threading.Event()
    worker = threading.Thread(target=done.wait, args=(5,))
    worker.start()
    path = f"/proc/{worker.native_id}/stat"
    files = stall.ProcFiles()
    try:
        [(_, (text,))] = files.read_batch([path], 1, 0.0)
        assert text is not None and stall.parse_stat(text)[0] in "SR"
        _end(worker, done)
        assert files.read_batch([path], 2, 0.0)[0][1] == (None,)
        assert path not in files._fds  # reopened (and refused) at the next batch, not read stale
    finally:
        files.close()


@needs_c
@pytest.mark.parametrize("args", [
    ((), 0, 0.0),  # no sample
    ((), 65, 0.0),  # too many in one batch
    ((), 1, -1.0),  # a negative wait
    (tuple(range(stall.MAX_CELLS + 1)), 1, 0.0),  # too many files
    (tuple(range(stall.MAX_CELLS // 2 + 1)), 2, 0.0),  # too many files times samples
])
def test_a_batch_refuses_what_it_cannot_bound(args: tuple[tuple[int, ...], int, float]) -> None:
    assert stall.READ_BATCH is not None
    with pytest.raises(ValueError, match="read_batch"):
        stall.READ_BATCH(*args)


@needs_c
def test_the_sampler_thread_samples_in_batches_at_its_rate() -> None:
    """The real /proc sampled by the thread in batches: each sample accounted, a thread
    asleep on an Event counted as waiting, /proc/stat read for the idle cores."""
    busy = threading.Event()
    worker = threading.Thread(target=lambda: busy.wait(5))
    worker.start()
    mon = StallMonitor()
    mon.set_threads([worker.native_id])
    try:
        mon.start(hz=50)
        deadline = time.monotonic() + 5
        while mon.samples < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mon.samples >= 10
        seconds = mon.totals()
        assert seconds["other_wait"] > 0  # waiting on an Event: asleep, neither CPU nor disk
        assert seconds["disk_read"] == 0
        assert mon.headroom_over(1.0) is not None
    finally:
        mon.stop()
        busy.set()
        worker.join()


@needs_c
def test_more_appliers_than_a_batch_holds_are_sampled_one_sample_a_wake() -> None:
    """Over MAX_CELLS files a sample (over a thousand workers) the batch would refuse
    them: the sampler reads them as before, never dies on it."""
    mon = StallMonitor()
    gone = 4_194_304 * 2  # over any pid_max: threads that do not exist
    mon.set_threads(range(gone, gone + stall.MAX_CELLS // len(stall.THREAD_FILES) + 1))
    try:
        mon.start(hz=50)
        deadline = time.monotonic() + 10
        while mon.sampled_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mon.sampled_at is not None
        assert mon._thread is not None and mon._thread.is_alive()
        assert mon.headroom_over(10.0) is None or mon.headroom_over(10.0) >= 0
    finally:
        mon.stop()


def test_a_restarted_sampler_does_not_leave_the_old_thread_running() -> None:
    """stop() and start() back to back: the old thread sees its own stop, not the new flag."""
    mon = StallMonitor()
    mon.set_threads([threading.get_native_id()])
    mon.start(hz=50)
    old = mon._thread
    mon.stop()
    mon.start(hz=50)
    try:
        assert old is not None
        old.join(2)
        assert not old.is_alive()
        assert mon._thread is not None and mon._thread.is_alive()
    finally:
        mon.stop()


def test_a_sample_of_threads_set_away_meanwhile_is_not_kept() -> None:
    mon = StallMonitor(read=lambda path: "cpu 1 0 1 1 0 0 0 0" if path == "/proc/stat" else
                       ("1 (mariadbd) D 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1 1" if path.endswith("/stat")
                        else "100 10 1" if path.endswith("schedstat") else ""))
    mon.set_threads([7])
    mon.sample()
    mon.set_threads([8])  # rediscovered: 7 is gone
    mon._take(5.0, (7,), ["1 (mariadbd) D 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1 1", "100 10 1", "", "",
                          "cpu 1 0 1 1 0 0 0 0"])
    assert mon.threads == ()


@pytest.mark.parametrize(("times", "cutoff", "want"), [
    ((1.0, 2.0, 3.0), 1.5, 2.0),  # the oldest reading at or after the cutoff
    ((1.0, 2.0, 3.0), 2.0, 2.0),  # one taken at the cutoff counts
    ((1.0, 2.0, 3.0), 0.0, 1.0),  # all of them: the oldest
    ((1.0, 2.0, 3.0), 5.0, "latest"),  # none: the latest stands in
    ((), 1.0, "latest"),
])
def test_since_finds_the_oldest_reading_in_the_span(times: tuple[float, ...], cutoff: float,
                                                    want: object) -> None:
    history = collections.deque((t, t) for t in times)
    assert stall._since(history, cutoff, "latest") == want
