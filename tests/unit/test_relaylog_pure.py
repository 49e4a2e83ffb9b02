"""Pure pieces of the reader: positions, wire integers, column codecs."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest

from lagd.relaylog import _columns as c
from lagd.relaylog import _wire as w
from lagd.relaylog._eventparts import ddl_tables
from lagd.relaylog.position import Position, RelayPosition, file_sequence


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("relay-bin.000001:900", "relay-bin.000002:4"),  # later file wins over offset
        ("relay-bin.000002:4", "relay-bin.000002:5"),
        ("relay-bin.999999:4", "relay-bin.1000000:4"),  # counter grows past six digits
    ],
)
def test_relay_positions_order_across_files(a, b):
    pa, pb = RelayPosition.parse(a), RelayPosition.parse(b)
    assert pa < pb and pb > pa and pa != pb
    assert Position(pa, "src.1", 99) < Position(pb, "src.0", 5)  # relay order only


def test_relay_position_strips_directories_and_prints_back():
    p = RelayPosition("./replica-relay-bin.000012", 1234)
    assert p.file == "replica-relay-bin.000012" and p.sequence == 12
    assert str(p) == "replica-relay-bin.000012:1234"
    assert RelayPosition.parse(str(p)) == p


@pytest.mark.parametrize("text", ["relay-bin.000001", "relay-bin.000001:x", ":"])
def test_relay_position_parse_rejects(text):
    with pytest.raises(ValueError, match="FILE:OFFSET"):
        RelayPosition.parse(text)


def test_unnumbered_file_sorts_first():
    assert file_sequence("vector.binlog") == 0


@pytest.mark.parametrize(
    ("raw", "value", "size"),
    [(b"\x05", 5, 1), (b"\xfb", None, 0), (b"\xfc\x01\x02", 0x0201, 3),
     (b"\xfd\x01\x02\x03", 0x030201, 4), (b"\xfe" + (2**40).to_bytes(8, "little"), 2**40, 9)],
)
def test_packed_int(raw, value, size):
    if value is None:
        with pytest.raises(w.WireError):
            w.packed_int(raw, 0)
    else:
        assert w.packed_int(raw, 0) == (value, size)


@pytest.mark.parametrize(
    ("raw", "value"),
    [(bytes([3 << 1]), 3), (((300 << 2) | 0b01).to_bytes(2, "little"), 300),
     (((70000 << 3) | 0b011).to_bytes(3, "little"), 70000),
     (b"\xff" + (2**63).to_bytes(8, "little"), 2**63)],
)
def test_serialization_varlen_uint(raw, value):
    assert w.varlen_uint(raw, 0) == (value, len(raw))


def test_serialization_varlen_sint_zigzag():
    assert w.varlen_sint(bytes([(5 << 1) << 1]), 0)[0] == 5
    assert w.varlen_sint(bytes([((4 << 1) | 1) << 1]), 0)[0] == -5


@pytest.mark.parametrize(
    ("hexbytes", "precision", "scale", "value"),
    [
        ("800000000a", 10, 0, Decimal("10")),  # DECIMAL(10,0): 1 + 4 bytes
        ("80fa00", 6, 2, Decimal("250.00")),  # DECIMAL(6,2): 2 + 1 bytes
        ("7f05ff", 6, 2, Decimal("-250.00")),  # negative: every bit inverted
        ("8004d2162e", 10, 4, Decimal("1234.5678")),  # DECIMAL(10,4): 3 + 2 bytes
        ("800000010000000a", 18, 9, Decimal("1.000000010")),  # a full 9-digit fraction group
    ],
)
def test_newdecimal(hexbytes, precision, scale, value):
    raw = bytes.fromhex(hexbytes)
    assert c.decimal_size(precision, scale) == len(raw)
    assert c.decode_newdecimal(raw, 0, (precision << 8) | scale) == value


def test_datetime2_and_fractions():
    # 2022-04-20 22:18:04, fsp 0: year*13+month=26290, day 20
    ymd = (2022 * 13 + 4) << 5 | 20
    hms = 22 << 12 | 18 << 6 | 4
    packed = ((ymd << 17) | hms) + 0x8000000000
    raw = packed.to_bytes(5, "big")
    assert c.decode_datetime2(raw, 0, 0) == dt.datetime(2022, 4, 20, 22, 18, 4)
    assert c.decode_datetime2(raw + (123456).to_bytes(3, "big"), 0, 6) == dt.datetime(
        2022, 4, 20, 22, 18, 4, 123456
    )
    assert c.decode_datetime2((0x8000000000).to_bytes(5, "big"), 0, 0) == "0000-00-00 00:00:00"


def _time2_bytes(sign: int, h: int, m: int, s: int, micro: int, fsp: int) -> bytes:
    """The server's writer (my_time.cc, my_time_packed_to_binary), with C's arithmetic:
    the integer part by an arithmetic shift (floor), the fraction by truncating %."""
    nr = sign * (((h << 12 | m << 6 | s) << 24) + micro)
    whole, frac = nr >> 24, int(math.fmod(nr, 1 << 24))
    if fsp in (1, 2):
        return (whole + 0x800000).to_bytes(3, "big") + (int(frac / 10000) & 0xFF).to_bytes(1, "big")
    if fsp in (3, 4):
        return (whole + 0x800000).to_bytes(3, "big") + (int(frac / 100) & 0xFFFF).to_bytes(2, "big")
    if fsp in (5, 6):
        return (nr + 0x800000000000).to_bytes(6, "big")
    return (whole + 0x800000).to_bytes(3, "big")


@pytest.mark.parametrize(
    ("sign", "h", "m", "s", "micro", "fsp"),
    [
        (1, 12, 34, 56, 789000, 3),  # read as one integer this was 12:34:58.019840
        (-1, 0, 0, 1, 500000, 3),  # the fraction borrows a second: was -00:00:02.28
        (-1, 0, 0, 1, 500000, 1),
        (-1, 838, 59, 59, 0, 3),
        (1, 838, 59, 59, 990000, 2),
        (-1, 0, 0, 0, 10000, 2),
        (-1, 1, 2, 3, 123400, 4),
        (1, 0, 0, 0, 0, 4),
        (-1, 0, 0, 1, 0, 1),  # a negative whole second: no fraction to borrow from
        (-1, 0, 0, 1, 500001, 6),
        (1, 23, 59, 59, 999999, 6),
        (-1, 12, 0, 0, 0, 0),
    ],
)
def test_time2(sign, h, m, s, micro, fsp):
    want = sign * dt.timedelta(hours=h, minutes=m, seconds=s, microseconds=micro)
    assert c.decode_time2(_time2_bytes(sign, h, m, s, micro, fsp), 0, fsp) == want


@pytest.mark.parametrize(
    ("col_type", "meta", "expected"),
    [
        (c.T_STRING, (c.T_STRING << 8) | 40, (c.T_STRING, 40)),  # CHAR(10) utf8mb4
        (c.T_STRING, (c.T_ENUM << 8) | 1, (c.T_ENUM, 1)),
        (c.T_STRING, (c.T_SET << 8) | 2, (c.T_SET, 2)),
        (c.T_STRING, ((c.T_STRING & ~0x30 | 0x20) << 8) | (480 & 0xFF), (c.T_STRING, 480)),
        (c.T_VARCHAR, 1020, (c.T_VARCHAR, 1020)),
    ],
)
def test_real_type_of_string_columns(col_type, meta, expected):
    assert c.real_type(col_type, meta) == expected


@pytest.mark.parametrize(
    ("col_type", "meta", "layout"),
    [
        (c.T_LONG, 0, c.Layout(4)), (c.T_INT24, 0, c.Layout(3)), (c.T_DATETIME2, 6, c.Layout(8)),
        (c.T_TIMESTAMP2, 3, c.Layout(6)), (c.T_TIME2, 0, c.Layout(3)),
        (c.T_VARCHAR, 255, c.Layout(None, 1)), (c.T_VARCHAR, 256, c.Layout(None, 2)),
        (c.T_BLOB, 4, c.Layout(None, 4)), (c.T_NEWDECIMAL, (10 << 8) | 4, c.Layout(5)),
        (c.T_BIT, (1 << 8) | 1, c.Layout(2)),
    ],
)
def test_layouts(col_type, meta, layout):
    assert c.layout(col_type, meta) == layout


def test_unknown_type_is_a_wire_error():
    with pytest.raises(w.WireError, match="not supported"):
        c.layout(c.T_TYPED_ARRAY, 0)


@pytest.mark.parametrize(
    ("sql", "schema", "tables"),
    [
        ("ALTER TABLE t ADD COLUMN x INT", "db", ("db.t",)),
        ("alter table `odd name`.`t``x` add index (a)", "db", ("odd name.t`x",)),
        ("DROP TABLE IF EXISTS a, b.c /* generated by server */", "db", ("db.a", "b.c")),
        ("RENAME TABLE a TO b", "db", ("db.a", "db.b")),
        ("TRUNCATE TABLE s.t", None, ("s.t",)),
        ("CREATE DATABASE x", "db", ()),
    ],
)
def test_ddl_table_names(sql, schema, tables):
    assert ddl_tables(sql, schema) == tables
