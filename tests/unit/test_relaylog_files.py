"""The reader across rotation, purge, replacement and damage of its files.

Real log bytes (a MariaDB binlog fixture) laid out as a relay log with an
index in a temporary directory; the index and files are changed the way the
server changes them. The same situations against a live replica are in
tests/integration/test_relaylog_rotation.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lagd.relaylog import (
    CorruptEvent,
    LogFiles,
    RelayLogPurgedError,
    RelayLogReader,
    RelayPosition,
    Resynced,
    TransactionEnd,
)
from lagd.relaylog.schema import TableMapResolver

FIXTURE = Path(__file__).parent.parent / "fixtures" / "binlogs" / "mariadb-bin.000001"
LOG = FIXTURE.read_bytes()
TRX_PER_FILE = 2  # transactions in the fixture


class RelayDir:
    """A relay-log directory the test rotates and purges like the server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = root / "relay-bin.index"
        self.listed: list[str] = []

    def name(self, n: int) -> str:
        return f"relay-bin.{n:06d}"

    def add(self, n: int, data: bytes = LOG) -> None:
        (self.root / self.name(n)).write_bytes(data)
        self.listed.append(self.name(n))
        self._write_index()

    def purge(self, *ns: int) -> None:
        for n in ns:
            self.listed.remove(self.name(n))
            (self.root / self.name(n)).unlink()
        self._write_index()

    def _write_index(self) -> None:
        self.index.write_text("".join(f"./{n}\n" for n in self.listed))


def ends(batch: list[object]) -> int:
    return sum(type(e) is TransactionEnd for e in batch)


def test_a_file_purged_after_it_was_read_whole_moves_to_the_next(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    assert not r.synced
    assert ends(r.read()) == TRX_PER_FILE and r.at_tail and r.synced
    # The IO thread rotates twice and the SQL thread purges the file the
    # reader still holds open: the old code called this "at the tail" forever.
    d.add(2)
    d.add(3)
    d.purge(1)
    batch = r.read()
    assert not any(type(e) is Resynced for e in batch)
    assert ends(batch) == 2 * TRX_PER_FILE
    assert r.position.file == d.name(3) and r.at_tail


def test_purged_past_the_next_file_resyncs_to_the_sql_thread(tmp_path, caplog):
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4),
                       resync=lambda: RelayPosition(d.name(3), 4))
    r.read()
    d.add(2)
    d.add(3)
    d.purge(1, 2)
    caplog.set_level("INFO", "lagd.relaylog")
    batch = r.read()
    resynced = [e for e in batch if type(e) is Resynced]
    assert len(resynced) == 1 and resynced[0].to == RelayPosition(d.name(3), 4)
    assert "purged" in resynced[0].reason
    assert ends(batch) == TRX_PER_FILE and r.at_tail and r.synced
    assert sum("look-ahead resumes" in m for m in caplog.messages) == 1


def test_a_stale_resync_position_falls_back_to_the_first_later_file(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4),
                       resync=lambda: RelayPosition(d.name(1), 400))  # the status of before
    r.read()
    d.add(2)
    d.add(3)
    d.purge(1, 2)
    batch = r.read()
    (resynced,) = [e for e in batch if type(e) is Resynced]
    assert resynced.to == RelayPosition(d.name(3), 4) and "stale" in resynced.reason
    assert ends(batch) == TRX_PER_FILE


def test_a_file_replaced_under_the_same_name_resyncs(tmp_path):
    # MariaDB's GTID replica and RESET SLAVE start the relay log anew and
    # reuse the names: same name, another file.
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4),
                       resync=lambda: RelayPosition(d.name(1), 4))
    r.read()
    d.purge(1)
    d.add(1)
    batch = r.read()
    assert [type(e) for e in batch].count(Resynced) == 1
    assert "replaced" in next(e for e in batch if type(e) is Resynced).reason
    assert ends(batch) == TRX_PER_FILE and r.synced


def test_renumbered_relay_log_is_not_taken_for_a_purge(tmp_path):
    d = RelayDir(tmp_path)
    for n in (4, 5):
        d.add(n)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(5), 4),
                       resync=lambda: RelayPosition(d.name(1), 4))
    r.read()
    d.purge(4, 5)
    for n in range(1, 7):  # a new series that already reached 6
        d.add(n)
    batch = r.read()
    (resynced,) = [e for e in batch if type(e) is Resynced]
    assert resynced.to == RelayPosition(d.name(1), 4)


def test_without_a_resync_callback_a_lost_file_raises(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    r.read()
    d.add(2)
    d.add(3)
    d.purge(1, 2)
    with pytest.raises(RelayLogPurgedError):
        r.read()


def test_seek_clears_synced_until_the_tail_is_reached_again(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    d.add(2)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    r.read(200)
    assert not r.synced and not r.at_tail  # a prefix only
    while not r.at_tail:
        r.read(200)
    assert r.synced
    r.seek(RelayPosition(d.name(1), 4))
    assert not r.synced


def test_a_file_cut_inside_an_event_that_is_not_the_tail_is_reported(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1, LOG[: len(LOG) - 30])  # the last event cut short, then a rotation
    d.add(2)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    batch = r.read()
    corrupt = [e for e in batch if type(e) is CorruptEvent]
    assert len(corrupt) == 1 and corrupt[0].relay_file == d.name(1)
    assert r.skipped_events == 1 and r.skipped_bytes > 0
    assert r.last_skip_reason is not None and d.name(1) in r.last_skip_reason
    assert ends(batch) >= TRX_PER_FILE  # the next file is read in full
    assert r.position.file == d.name(2) and r.at_tail


def test_a_partial_event_at_the_live_tail_is_waited_for(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1, LOG[: len(LOG) - 30])
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    r.read()
    assert r.at_tail and r.skipped_events == 0
    with open(tmp_path / d.name(1), "ab") as fh:
        fh.write(LOG[len(LOG) - 30 :])
        fh.flush()
        os.fsync(fh.fileno())
    assert ends(r.read()) == 1 and r.skipped_events == 0


def test_an_event_claiming_more_than_a_complete_file_holds_resumes_after_it(tmp_path):
    # Without checksums a damaged size is only visible against the file's end.
    bad = bytearray(LOG)
    first_gtid = _offset_of_type(LOG, 162)
    bad[first_gtid + 9 : first_gtid + 13] = (1 << 29).to_bytes(4, "little")
    p = tmp_path / "one.000001"
    p.write_bytes(bytes(bad))
    r = RelayLogReader(LogFiles.of(p))
    batch = r.read(1 << 26)
    assert any(type(e) is CorruptEvent for e in batch)
    assert ends(batch) == TRX_PER_FILE - 1  # the second transaction is found again
    assert r.at_tail


def _offset_of_type(buf: bytes, typ: int) -> int:
    pos = 4
    while pos + 19 <= len(buf):
        if buf[pos + 4] == typ:
            return pos
        pos += int.from_bytes(buf[pos + 9 : pos + 13], "little")
    raise AssertionError(f"no event of type {typ}")


class ClosingResolver:
    """A resolver with a session of its own (as InformationSchemaResolver has)."""

    def __init__(self) -> None:
        self.inner, self.closed = TableMapResolver(), 0

    def resolve(self, tm):  # type: ignore[no-untyped-def]
        return self.inner.resolve(tm)

    def invalidate(self, tables=None):  # type: ignore[no-untyped-def]
        self.inner.invalidate(tables)

    def close(self) -> None:
        self.closed += 1


def test_close_closes_the_file_and_the_resolvers_session(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    resolver = ClosingResolver()
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4), resolver)
    assert ends(r.read()) == TRX_PER_FILE
    opened = len(os.listdir("/proc/self/fd"))
    r.close()
    assert len(os.listdir("/proc/self/fd")) == opened - 1  # the relay-log file
    assert resolver.closed == 1
    r.close()  # twice is harmless
    assert resolver.closed == 2

def _events_from(r: RelayLogReader) -> list[tuple[str, str, int]]:
    out = []
    while not r.at_tail:
        out += [(type(e).__name__, e.relay_file, e.relay_offset) for e in r.read(200)
                if hasattr(e, "relay_offset")]
    return out


def test_a_forward_seek_in_the_open_file_reads_what_a_fresh_reader_reads(tmp_path):
    # A second copy of the log after the first: its FDE sits mid-file, as a
    # source's does in a relay log after the source rotated.
    d = RelayDir(tmp_path)
    d.add(1, LOG + LOG[4:])
    starts = [e.relay_offset for e in RelayLogReader(LogFiles(d.index)).read()
              if type(e).__name__ == "TransactionStart"]
    assert len(starts) == 2 * TRX_PER_FILE
    target = RelayPosition(d.name(1), starts[-1])  # past the second FDE
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    r.read(200)
    handle = r._fh
    r.seek(RelayPosition(d.name(1), starts[-2]))  # two seeks before the next read
    r.seek(target)
    fresh = RelayLogReader(LogFiles(d.index), target)
    assert _events_from(r) == _events_from(fresh) != []
    assert r._fh is handle  # kept open: only the skipped stretch was walked


def test_a_seek_into_a_new_file_of_the_same_name_reopens_it(tmp_path):
    d = RelayDir(tmp_path)
    d.add(1)
    r = RelayLogReader(LogFiles(d.index), RelayPosition(d.name(1), 4))
    r.read(200)
    # The relay log started anew under the same name (a new inode), twice as long.
    new = tmp_path / "new"
    new.write_bytes(LOG + LOG[4:])
    os.replace(new, tmp_path / d.name(1))
    target = RelayPosition(d.name(1), len(LOG))  # where the second copy starts
    r.seek(target)
    fresh = RelayLogReader(LogFiles(d.index), target)
    assert _events_from(r) == _events_from(fresh) != []
