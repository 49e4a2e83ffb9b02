"""Damaged copies of real MariaDB relay logs, with and without checksums.

Issue 13, item 4: with the source at binlog_checksum=NONE, one flipped bit
that made a WRITE_ROWS column count 0 sent the decoder into an endless loop
(RSS 65 MB -> 1.7 GB in 12 s). Here a replica of a NONE source and one of a
CRC32 source record a varied row workload; copies of their relay logs get
the issue's exact damage, cuts mid-event and seeded random damage. Every
case must end (events or a RelayLogError) with bounded events and memory,
the C accelerator and pure Python agreeing. The live reader is left alone:
the server's own files are never modified.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagd.relaylog import CorruptEvent, LogFiles, RelayLogReader, TransactionEnd
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.unit.test_relaylog_fuzz import (
    _crc_on,
    _events,
    check_case_data,
    damage,
    run,
    zero_column_count,
)

TYPES_SQL = """CREATE TABLE t (
  id INT NOT NULL PRIMARY KEY, k BIGINT UNSIGNED, s VARCHAR(40), c CHAR(10),
  b BLOB, d DECIMAL(12,3), dt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR,
  e ENUM('a','b','c'), st SET('x','y','z'), bt BIT(13), f FLOAT, db DOUBLE,
  j LONGTEXT, KEY k_idx (k))"""


def workload(sb: Sandbox, db: str) -> None:
    sb.source.query(TYPES_SQL, db=db)
    with sb.source.connect(db=db) as conn, conn.cursor() as cur:
        for i in range(120):
            cur.execute(
                "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, NOW(6), NOW(3), '12:34:56.78',"
                " 2024, 'b', 'x,z', b'1010101010101', 1.5, 2.25, %s)",
                (i, i * 7, f"s{i}" * (i % 5), f"c{i % 10}", bytes(range(i % 256)) * 3,
                 f"{i}.125", f'{{"k": {i}}}'))
        cur.execute("UPDATE t SET s = 'u', k = k + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id % 7 = 0")
        cur.execute("BEGIN")
        for i in range(1000, 1200):
            cur.execute("INSERT INTO t (id, k) VALUES (%s, %s)", (i, i))
        cur.execute("COMMIT")


def record(sb: Sandbox, into: Path) -> list[Path]:
    """Copies of the replica's relay logs after the workload (SQL thread held)."""
    sb.source.query("CREATE DATABASE IF NOT EXISTS dmg")
    sb.wait_caught_up(timeout=60)
    sb.stop_sql_thread()
    try:
        workload(sb, "dmg")
        sb.flush_relay_logs()
        _wait_received(sb)
        index = sb.relay_log_index()
        into.mkdir(parents=True, exist_ok=True)
        out = []
        for line in index.read_text().splitlines():
            if line.strip():
                src = index.parent / Path(line.strip()).name
                shutil.copy(src, into / src.name)
                out.append(into / src.name)
        return out
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=120)
        sb.source.query("DROP DATABASE dmg")


def _wait_received(sb: Sandbox) -> None:
    want = str(sb.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if str(sb.slave_status().get("Gtid_IO_Pos") or "") == want:
            time.sleep(0.3)
            return
        time.sleep(0.05)
    raise AssertionError("the replica did not receive the workload in time")


def _recorded(into: Path, **options: str) -> list[Path]:
    # A pair of its own: the session's shared replica holds every earlier
    # test's relay log, and the biggest of those files would make each case
    # decode hundreds of MB.
    pair = Sandbox(SandboxConfig(
        replicas=1, source_buffer_pool_mb=32, replica_buffer_pool_mb=32,
        source_extra_options=dict(options), replica_extra_options=dict(options),
    ))
    pair.start()
    try:
        return record(pair, into)
    finally:
        pair.stop()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Path]]]:
    """Relay logs of the same workload from a CRC32 and a NONE replication pair."""
    root = tmp_path_factory.mktemp("relaylogs")
    crc = _recorded(root / "crc32", **{"binlog-checksum": "CRC32"})
    none = _recorded(root / "none", **{"binlog-checksum": "NONE"})
    yield {"crc32": crc, "none": none}


def biggest(paths: list[Path]) -> bytes:
    return max((p.read_bytes() for p in paths), key=len)


def test_the_recordings_have_the_checksum_settings_they_claim(logs) -> None:
    for setting, paths in logs.items():
        events, error = _decode_all(paths)
        assert error is None and events, setting
        assert sum(type(e) is TransactionEnd for e in events) >= 100
        assert not any(type(e) is CorruptEvent for e in events)
    assert _crc_on(biggest(logs["crc32"])) is True
    assert _crc_on(biggest(logs["none"])) is False


def _decode_all(paths: list[Path]) -> tuple[list[object], str | None]:
    reader = RelayLogReader(LogFiles.of(*paths))
    out: list[object] = []
    try:
        while True:
            batch = reader.read(1 << 22)
            out += batch
            if not batch and reader.at_tail:
                return out, None
    finally:
        reader.close()


@pytest.mark.parametrize("setting", ["none", "crc32"])
def test_zero_column_count_in_a_real_relay_log(logs, setting, tmp_path) -> None:
    """The issue's bit: every row event of the file in turn gets 0 columns."""
    buf = biggest(logs[setting])
    rows = [p for p, _ in _events(buf) if buf[p + 4] in (23, 24, 25, 30, 31, 32)]
    assert len(rows) > 50
    for nth in range(0, len(rows), max(1, len(rows) // 25)):
        data = zero_column_count(buf, nth)
        assert data is not None
        for verify in (True, False):
            out = check_case_data(tmp_path, data, verify)
            assert out.error is None
            assert out.stats.corrupt_events >= 1
            assert out.stats.skipped_bytes > 0


@pytest.mark.parametrize("setting", ["none", "crc32"])
def test_real_relay_log_cut_mid_event_before_a_rotation(logs, setting, tmp_path) -> None:
    paths = logs[setting]
    buf = biggest(paths)
    cut = tmp_path / "relay-bin.000001"
    events = _events(buf)
    middle = events[len(events) // 2]
    cut.write_bytes(buf[: middle[0] + middle[1] // 2])
    nxt = tmp_path / "relay-bin.000002"
    nxt.write_bytes(buf)
    got, error = _decode_all([cut, nxt])
    assert error is None
    corrupt = [e for e in got if type(e) is CorruptEvent]
    assert corrupt and corrupt[0].relay_file == cut.name
    whole, _ = _decode_all([nxt])
    assert got[-len(whole):] == whole  # the next file is read in full after the damage


@pytest.mark.parametrize("setting", ["none", "crc32"])
def test_seeded_damage_of_real_relay_logs(logs, setting, tmp_path) -> None:
    buf = biggest(logs[setting])
    for seed in range(150):
        rng = random.Random(seed)
        _kind, data = damage(rng, buf)
        slow = run(tmp_path / "relay-bin.000001", data, False, rng.random() < 0.7)
        assert len(slow.events) <= len(data)
        check_case_data(tmp_path, data, verify=seed % 2 == 0)
