"""A rows event logged with foreign_key_checks=0 (NO_FOREIGN_KEY_CHECKS_F) hands its rows a
table without foreign keys: the SQL thread checks no parent for them, so prefetch must not
probe one. The flag is set on real recorded rows events; both decoders must agree."""

from __future__ import annotations

import dataclasses

import pytest
from test_relaylog_fuzz import FIXTURES, ROWS_TYPES, _events, with_checksums

from lagd.relaylog import EventDecoder, ForeignKey, RowChange, Statement, TableInfo, TableMapResolver
from lagd.relaylog._construct import ACCELERATED
from lagd.relaylog._tablemap import TableMap

FK = ForeignKey("to_parent", (0,), "s", "parent", ("id",))


class WithForeignKeys(TableMapResolver):
    """Every table has a foreign key on its first column (as information_schema would say)."""

    def resolve(self, tm: TableMap) -> TableInfo:
        return dataclasses.replace(super().resolve(tm), foreign_keys=(FK,))


def flagged(buf: bytes, nth: int) -> tuple[bytes, int]:
    """The log (checksums off) with the ``nth`` rows event's NO_FOREIGN_KEY_CHECKS_F set, and
    how many rows events it has."""
    buf = with_checksums(buf, False)
    rows = [p for p, _ in _events(buf) if buf[p + 4] in ROWS_TYPES]
    out = bytearray(buf)
    out[rows[nth] + 19 + 6] |= 0x02  # the flags follow the 6-byte table id
    return bytes(out), len(rows)


def foreign_keys_by_row(data: bytes, accelerated: bool) -> list[tuple[ForeignKey, ...]]:
    """Each row's table's foreign keys. Read twice, the second time counted: the C path
    takes a transaction only once it knows its table maps and row images (test_speedups)."""
    dec = EventDecoder(WithForeignKeys(), verify_checksums=False)
    dec.accelerated = accelerated
    for _ in range(2):
        dec.start_file("relay-bin.000001")
        events, _used = dec.decode(data, 4, len(data), 0)
    return [e.table.foreign_keys for e in events if isinstance(e, RowChange)]


LOG = FIXTURES / "mariadb-bin.000001"


@pytest.mark.parametrize("accelerated", [False, True] if ACCELERATED else [False])
def test_rows_logged_without_foreign_key_checks_have_none_to_check(accelerated: bool) -> None:
    plain, n = flagged(LOG.read_bytes(), 0)
    assert n >= 2
    clean = foreign_keys_by_row(with_checksums(LOG.read_bytes(), False), accelerated)
    assert clean and all(fks == (FK,) for fks in clean)
    got = foreign_keys_by_row(plain, accelerated)
    assert len(got) == len(clean)
    # The flagged (first) event's rows have no parent to check; the later events' have.
    first = got.index((FK,))
    assert first >= 1 and set(got[:first]) == {()} and set(got[first:]) == {(FK,)}


STATEMENT_LOG = FIXTURES / "binlog_transaction_with_anonymous_GTID.000001"  # MySQL 8: one INSERT


def statement_checks(data: bytes, accelerated: bool) -> list[bool]:
    dec = EventDecoder(TableMapResolver(), verify_checksums=False)
    dec.accelerated = accelerated
    for _ in range(2):  # as foreign_keys_by_row: the second read is the one the C path takes
        dec.start_file("relay-bin.000001")
        events, _used = dec.decode(data, 4, len(data), 0)
    return [e.foreign_key_checks for e in events if isinstance(e, Statement)]


def with_statement_flags2(buf: bytes, bit: int) -> bytes:
    """The log (checksums off) with ``bit`` set in its DML Query event's flags2 (Q_FLAGS2_CODE,
    the first status variable: code 0, then 4 bytes)."""
    buf = with_checksums(buf, False)
    out = bytearray(buf)
    queries = [p for p, size in _events(buf) if buf[p + 4] == 2 and b"INSERT" in buf[p : p + size]]
    assert len(queries) == 1
    body = queries[0] + 19
    status = body + 13
    assert int.from_bytes(buf[body + 11 : body + 13], "little") >= 5 and buf[status] == 0
    flags2 = int.from_bytes(buf[status + 1 : status + 5], "little") | bit
    out[status + 1 : status + 5] = flags2.to_bytes(4, "little")
    return bytes(out)


@pytest.mark.parametrize("accelerated", [False, True] if ACCELERATED else [False])
@pytest.mark.parametrize(("bit", "checks"), [
    (0, True),  # as recorded
    (1 << 26, False),  # OPTION_NO_FOREIGN_KEY_CHECKS: foreign_key_checks=0
    (1 << 27, True),  # OPTION_RELAXED_UNIQUE_CHECKS (unique_checks=0): not this
], ids=["recorded", "no-fk-checks", "unique-checks-off"])
def test_statements_say_whether_their_session_checked_foreign_keys(
        accelerated: bool, bit: int, checks: bool) -> None:
    assert statement_checks(with_statement_flags2(STATEMENT_LOG.read_bytes(), bit), accelerated) == [checks]
