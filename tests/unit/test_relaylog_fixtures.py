"""The reader against real MySQL/MariaDB log files (tests/fixtures/binlogs, see ORIGIN.md)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from lagd.relaylog import (
    CorruptEvent,
    Ddl,
    EncryptedRelayLogError,
    NotALogFileError,
    RowChange,
    RowKind,
    RowsQuery,
    Statement,
    TableMapResolver,
    TransactionEnd,
    TransactionStart,
    read_log_files,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "binlogs"
ALL = sorted(p.name for p in FIXTURES.iterdir() if not p.name.endswith(".md"))


def decode(name: str, decode_all: bool = True):
    return read_log_files(FIXTURES / name, resolver=TableMapResolver(decode_all=decode_all))


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


@pytest.mark.parametrize("name", ALL)
def test_every_fixture_decodes_without_raising(name):
    events, stats = decode(name)
    assert stats.events >= 0
    # Transactions pair up, except where a corrupt event broke one off.
    starts, ends = of(events, TransactionStart), of(events, TransactionEnd)
    assert len(starts) - len(ends) <= stats.corrupt_events


def test_compressed_payload_yields_the_row_events_inside_it():
    events, stats = decode("transaction_compression.000001")
    rows = of(events, RowChange)
    assert [(r.table.qualified, r.kind, r.after) for r in rows] == [
        ("test.tb1", RowKind.INSERT, (1,))
    ]
    start, end = of(events, TransactionStart)[0], of(events, TransactionEnd)[0]
    # The payload is one unit for the SQL thread: the transaction ends where it ends.
    assert end.relay_offset == (FIXTURES / "transaction_compression.000001").stat().st_size - 44
    assert start.size == end.size == 234
    assert stats.corrupt_events == 0


@pytest.mark.parametrize(
    "name",
    ["transaction_compression.000001", "binlog_transaction_with_GTID_TAG.000001",
     "json.binlog.000001", "vector.binlog", "minimal_row_metadata.000001", "time_issue.000001",
     "mysql-enum-string-set.000001", "binlog-invisible-columns.000001", "json-opaque.binlog"],
)
def test_transaction_length_equals_the_bytes_of_the_transaction(name):
    events, _ = decode(name)
    pairs = list(zip(of(events, TransactionStart), of(events, TransactionEnd), strict=True))
    assert pairs
    for start, end in pairs:
        assert start.size is not None, "MySQL 8 logs carry transaction_length"
        assert start.size == end.relay_offset - start.relay_offset == end.size


def test_tagged_gtid_decodes():
    events, _ = decode("binlog_transaction_with_GTID_TAG.000001")
    (start,) = of(events, TransactionStart)
    assert start.gtid is not None
    assert start.gtid == "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"
    assert start.gtid_info is not None
    assert start.gtid_info.tag == "mytag"
    assert start.gtid_info.sequence == 3
    assert start.commit_time == pytest.approx(1770368687.207196)
    assert start.size == 296
    (row,) = of(events, RowChange)
    assert row.after == (3, 100, Decimal("250.00"))


def test_mariadb_gtid_and_annotate_rows():
    events, _ = decode("mariadb-bin.000001")
    starts = of(events, TransactionStart)
    assert [s.gtid for s in starts] == ["0-1-1", "0-1-2"]
    assert all(s.gtid_info and s.gtid_info.flavor == "mariadb" for s in starts)
    assert starts[0].commit_time == 1650493084.0  # header time: MariaDB logs no commit timestamp
    queries = of(events, RowsQuery)
    assert queries[0].sql.startswith("insert into outbox")
    rows = of(events, RowChange)
    assert rows[0].table.qualified == "toddy_test.outbox"
    assert rows[0].after[:3] == (62, "foo", 2)  # an ENUM as stored: the index of "JSON"
    assert rows[0].after[4] == dt.datetime(2022, 4, 20, 22, 18, 4)
    assert rows[0].table.key is not None and rows[0].key == (62,)


def test_mysql8_gtid_commit_timestamps():
    events, _ = decode("json.binlog.000001")
    start = of(events, TransactionStart)[0]
    assert start.immediate_commit_time is not None
    assert start.commit_time == start.immediate_commit_time  # same server: original == immediate
    assert start.commit_time != float(start.header_time)
    assert start.last_committed == 0 and start.sequence_number == 1


def test_anonymous_gtid_and_statements():
    events, _ = decode("binlog_transaction_with_anonymous_GTID.000001")
    assert of(events, Ddl) and of(events, Statement)
    assert all(s.gtid is None for s in of(events, TransactionStart))


def test_unsigned_from_minimal_metadata():
    events, _ = decode("minimal_row_metadata.000001")
    (row,) = of(events, RowChange)
    assert row.after == (1, None, "a", None, 3230202323)


def test_primary_key_from_full_metadata_decodes_only_the_key():
    events, _ = decode("vector.binlog", decode_all=False)
    rows = of(events, RowChange)
    assert rows and all(r.table.needed == (0,) for r in rows)
    assert [r.key for r in rows][:2] == [(1,), (2,)]


def test_corrupt_relay_log_is_reported_with_file_and_offset():
    events, stats = decode("corrupt-relay-bin.000624")
    corrupt = of(events, CorruptEvent)
    assert [(c.relay_file, c.relay_offset) for c in corrupt] == [("corrupt-relay-bin.000624", 91204)]
    assert "overrun" in corrupt[0].reason
    assert stats.corrupt_events == 1
    # Everything before the damage was read.
    assert len(of(events, Statement)) == 281


def test_truncated_file_gives_an_error_event_not_a_crash():
    events, stats = decode("binlog_truncated_event.000001")
    assert [type(e) for e in events] == [CorruptEvent]
    assert events[0].relay_offset == 4 and "ends inside an event" in events[0].reason
    assert stats.corrupt_events == 1


def test_encrypted_log_names_the_fix(tmp_path):
    f = tmp_path / "relay-bin.000001"
    f.write_bytes(b"\xfdbin" + bytes(100))
    with pytest.raises(EncryptedRelayLogError) as err:
        read_log_files(f)
    assert "encrypt" in str(err.value) and err.value.fix


def test_not_a_log_file(tmp_path):
    f = tmp_path / "relay-bin.000001"
    f.write_bytes(b"hello world")
    with pytest.raises(NotALogFileError) as err:
        read_log_files(f)
    assert "relay_log_index" in (err.value.fix or "")


def test_garbage_after_a_good_event_resumes_at_next_transaction(tmp_path):
    good = (FIXTURES / "mariadb-bin.000001").read_bytes()
    # Break the first transaction's table map by flipping bytes inside it:
    # with checksums on, the damage is caught and the second transaction survives.
    events, _ = decode("mariadb-bin.000001")
    first_start = of(events, TransactionStart)[0].relay_offset
    bad = bytearray(good)
    bad[first_start + 120] ^= 0xFF
    f = tmp_path / "mariadb-bin.000001"
    f.write_bytes(bytes(bad))
    events, stats = read_log_files(f, resolver=TableMapResolver(decode_all=True))
    assert stats.corrupt_events == 1
    assert [s.gtid for s in of(events, TransactionStart)] == ["0-1-1", "0-1-2"]
    assert len(of(events, TransactionEnd)) == 1
    assert [r.after[0] for r in of(events, RowChange)] == [63]


def test_broken_header_resyncs_on_the_next_transaction(tmp_path):
    good = (FIXTURES / "mariadb-bin.000001").read_bytes()
    events, _ = decode("mariadb-bin.000001")
    first_start = of(events, TransactionStart)[0].relay_offset
    bad = bytearray(good)
    bad[first_start + 9 : first_start + 13] = (5).to_bytes(4, "little")  # event size 5
    f = tmp_path / "mariadb-bin.000001"
    f.write_bytes(bytes(bad))
    events, stats = read_log_files(f, resolver=TableMapResolver(decode_all=True))
    assert stats.corrupt_events >= 1
    assert [r.after[0] for r in of(events, RowChange)] == [63]


def test_insert_id_events_give_their_statement_its_first_auto_increment_value():
    """A MySQL 5.0 relay log of statement-based INSERTs into auto-increment tables: each
    INSERT after an Intvar INSERT_ID event carries that value, the others none."""
    events, _ = decode("corrupt-relay-bin.000624")
    statements = of(events, Statement)
    ids = [(s.sql[:18], s.insert_id, s.auto_increment) for s in statements[:3]]
    assert ids == [("insert into RECORD", 2261912383, 1), ("insert into RECORD", 2261912382, 1),
                   ("insert into PERSON", 539886506, 1)]
    given = [s for s in statements if s.insert_id is not None]
    assert len(given) == 232 and all(s.sql.lower().startswith("insert") for s in given)
    assert all(s.insert_id is None for s in statements if not s.sql.lower().startswith("insert"))


@pytest.mark.parametrize(("status", "step"), [
    (b"", 1),
    # flags2, sql_mode, catalog "std", then auto_increment_increment 2, offset 1
    (b"\x00" + bytes(4) + b"\x01" + bytes(8) + b"\x06\x03std" + b"\x03\x02\x00\x01\x00", 2),
    # the old Q_CATALOG_CODE (NUL-terminated) before it
    (b"\x02\x03std\x00" + b"\x03\x05\x00\x01\x00", 5),
    (b"\x00" + bytes(4) + b"\x04" + bytes(6), 1),  # charset, no auto_increment
    (b"\x80\x01\x03\x02\x00\x01\x00", 1),  # a variable not known here before it: stop
    (b"\x03\x00\x00", 1),  # cut short
])
def test_a_query_events_auto_increment_increment(status: bytes, step: int) -> None:
    from lagd.relaylog.decoder import _auto_increment  # noqa: PLC0415

    buf = b"head" + status + b"tail"
    assert _auto_increment(buf, 4, len(status)) == step
