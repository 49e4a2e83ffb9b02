"""The reader held back while the replica rotates and purges its relay log.

Issue 13, item 1: a reader whose file was purged before it moved on called
that "the tail" and showed an empty backlog while thousands of transactions
waited. Here a replica with a tiny max_relay_log_size rotates every 64 KiB
(and on FLUSH RELAY LOGS twice 50 ms apart under a write load) while the SQL
thread purges behind it and the reader is paused. Afterwards, with the SQL
thread stopped so the truth stands still, the transactions the reader has
read beyond the SQL thread must be exactly those the SQL thread has not
applied (counted by GTID), or the reader must say it resynchronised and
then count them all. Never a silent 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lagd.relaylog import (
    LogFiles,
    RelayLogReader,
    RelayPosition,
    Resynced,
    TableMapResolver,
    TransactionEnd,
)
from lagd.sandbox.pair import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def tiny() -> Iterator[Sandbox]:
    """A pair whose replica rotates its relay log every 64 KiB (and purges)."""
    sb = Sandbox(SandboxConfig(
        replicas=1, source_buffer_pool_mb=32, replica_buffer_pool_mb=32,
        replica_extra_options={"max-relay-log-size": "65536", "relay-log-purge": "ON"},
    ))
    sb.start()
    sb.source.query("CREATE DATABASE rot")
    sb.source.query("CREATE TABLE rot.t (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(500))")
    sb.wait_caught_up(timeout=60)
    try:
        yield sb
    finally:
        sb.stop()


def sql_position(sb: Sandbox) -> RelayPosition:
    st = sb.slave_status()
    return RelayPosition(st["Relay_Log_File"], int(st["Relay_Log_Pos"]))


def seq_no(gtid_pos: str) -> int:
    """The sequence number of domain 0 in a MariaDB GTID position."""
    for part in gtid_pos.split(","):
        domain, _server, seq = part.strip().split("-")
        if domain == "0":
            return int(seq)
    return 0


def burst(sb: Sandbox, transactions: int, pad: int = 400) -> None:
    with sb.source.connect(db="rot") as conn, conn.cursor() as cur:
        for _ in range(transactions):
            cur.execute("INSERT INTO t (pad) VALUES (REPEAT('x', %s))", (pad,))


def wait_received(sb: Sandbox, timeout: float = 60) -> None:
    want = seq_no(str(sb.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"]))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.slave_status()
        if seq_no(str(st.get("Gtid_IO_Pos") or "")) >= want:
            time.sleep(0.3)  # the last bytes reach the file after the position moved
            return
        time.sleep(0.05)
    raise AssertionError("the replica did not receive the source's binlog in time")


def read_to_tail(reader: RelayLogReader) -> list[Any]:
    out: list[Any] = []
    for _ in range(100_000):
        batch = reader.read()
        out.extend(batch)
        if reader.at_tail:
            return out
    raise AssertionError("the reader did not reach the tail")


def check_backlog(sb: Sandbox, events: list[Any], reader: RelayLogReader) -> int:
    """With the SQL thread stopped: what the reader counts beyond it is the truth."""
    applied = seq_no(str(sb.replica().query("SELECT @@gtid_slave_pos AS p")[0]["p"]))
    logged = seq_no(str(sb.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"]))
    pending = logged - applied
    since = max((i for i, e in enumerate(events) if type(e) is Resynced), default=-1)
    seen = {seq_no(e.gtid) for e in events[since + 1 :] if type(e) is TransactionEnd and e.gtid}
    waiting = {s for s in seen if s > applied}
    assert reader.at_tail and reader.synced
    assert pending > 0, "the test must leave work for the SQL thread"
    assert waiting == set(range(applied + 1, logged + 1)), (
        f"reader counts {len(waiting)} of {pending} pending transactions")
    return pending


def test_paused_reader_across_rotations_and_purges(tiny: Sandbox, caplog) -> None:
    sb = tiny
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb),
                            TableMapResolver(), resync=lambda: sql_position(sb))
    try:
        read_to_tail(reader)
        held = reader.position.file
        # Paused: ~400 KiB applied and purged (six or more rotations)...
        burst(sb, 800)
        sb.wait_caught_up(timeout=120)
        assert not (sb.relay_log_dir() / held).exists(), "the held file was purged"
        # ...then more that the SQL thread has not applied yet.
        sb.stop_sql_thread()
        burst(sb, 300)
        wait_received(sb)
        caplog.set_level(logging.INFO, "lagd.relaylog")
        events = read_to_tail(reader)
        assert any(type(e) is Resynced for e in events) or any(
            "going on with" in m for m in caplog.messages)
        assert sum(held in m for m in caplog.messages) == 1  # said once why
        assert check_backlog(sb, events, reader) == 300
    finally:
        reader.close()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)


def test_two_flushes_50ms_apart_under_load(tiny: Sandbox) -> None:
    sb = tiny
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb),
                            TableMapResolver(), resync=lambda: sql_position(sb))
    stop = threading.Event()

    def writer() -> None:
        with sb.source.connect(db="rot") as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("INSERT INTO t (pad) VALUES ('y')")
                time.sleep(0.0025)  # about 400 writes/s

    t = threading.Thread(target=writer, daemon=True)
    try:
        read_to_tail(reader)
        t.start()
        for _ in range(3):
            time.sleep(0.3)
            reader.read()  # keeps up, then is held back over the flushes
            sb.flush_relay_logs()
            time.sleep(0.05)
            sb.flush_relay_logs()
            time.sleep(0.5)  # the SQL thread applies and purges the flushed files
        stop.set()
        t.join()
        sb.stop_sql_thread()
        burst(sb, 50, pad=10)
        wait_received(sb)
        events = read_to_tail(reader)
        check_backlog(sb, events, reader)
    finally:
        stop.set()
        reader.close()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)


def test_bursts_with_a_stopped_sql_thread_are_counted_whole(tiny: Sandbox) -> None:
    """Tiny files and nothing purged: the reader walks every rotation."""
    sb = tiny
    sb.stop_sql_thread()
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb),
                            TableMapResolver(), resync=lambda: sql_position(sb))
    try:
        events: list[Any] = []
        for _ in range(4):
            burst(sb, 150)
            events += reader.read(1 << 14)  # partly behind, partly caught up
        wait_received(sb)
        events += read_to_tail(reader)
        assert not any(type(e) is Resynced for e in events)
        assert check_backlog(sb, events, reader) == 600
        assert reader.stats.files >= 5
    finally:
        reader.close()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)


def test_stop_start_slave_under_a_held_reader(tiny: Sandbox, caplog) -> None:
    """A GTID replica starts its relay log anew on START SLAVE: the files the
    reader holds are dropped and names come back for other files."""
    sb = tiny
    sb.stop_sql_thread()
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb),
                            TableMapResolver(), resync=lambda: sql_position(sb))
    try:
        burst(sb, 200)
        wait_received(sb)
        events = reader.read(1 << 14)  # behind, with a file open
        before = sorted(p.name for p in LogFiles(sb.relay_log_index()).names())
        sb.stop_slave()
        sb.start_slave()
        sb.stop_sql_thread()
        burst(sb, 100)
        wait_received(sb)
        after = sorted(p.name for p in LogFiles(sb.relay_log_index()).names())
        caplog.set_level(logging.INFO, "lagd.relaylog")
        events += read_to_tail(reader)
        print(f"\nrelay files before {before}, after {after}; "
              f"resyncs {reader.stats.resyncs}; log {[m for m in caplog.messages if 'relay log' in m]}")
        check_backlog(sb, events, reader)
    finally:
        reader.close()
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)
