"""Column types of row events: metadata, lengths and value decoding.

The hot path never calls these per value for simple types: ``_rowcodec``
generates one straight-line function per table and column set. The helpers
here are what that code calls for the rarer types, and what the table-map
parser uses to size every column.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from lagd.relaylog._wire import WireError

T_DECIMAL: Final = 0
T_TINY: Final = 1
T_SHORT: Final = 2
T_LONG: Final = 3
T_FLOAT: Final = 4
T_DOUBLE: Final = 5
T_NULL: Final = 6
T_TIMESTAMP: Final = 7
T_LONGLONG: Final = 8
T_INT24: Final = 9
T_DATE: Final = 10
T_TIME: Final = 11
T_DATETIME: Final = 12
T_YEAR: Final = 13
T_NEWDATE: Final = 14
T_VARCHAR: Final = 15
T_BIT: Final = 16
T_TIMESTAMP2: Final = 17
T_DATETIME2: Final = 18
T_TIME2: Final = 19
T_TYPED_ARRAY: Final = 20
T_VECTOR: Final = 242
T_JSON: Final = 245
T_NEWDECIMAL: Final = 246
T_ENUM: Final = 247
T_SET: Final = 248
T_TINY_BLOB: Final = 249
T_MEDIUM_BLOB: Final = 250
T_LONG_BLOB: Final = 251
T_BLOB: Final = 252
T_VAR_STRING: Final = 253
T_STRING: Final = 254
T_GEOMETRY: Final = 255

TYPE_NAMES: Final[dict[int, str]] = {
    v: k[2:].lower() for k, v in globals().items() if k.startswith("T_") and isinstance(v, int)
}

# Which types carry how many bytes of table-map metadata.
_META_1: Final = frozenset(
    {T_FLOAT, T_DOUBLE, T_BLOB, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB, T_GEOMETRY, T_JSON,
     T_TIMESTAMP2, T_DATETIME2, T_TIME2, T_VECTOR}
)
_META_2: Final = frozenset({T_VARCHAR, T_VAR_STRING, T_BIT, T_NEWDECIMAL, T_STRING, T_ENUM, T_SET,
                            T_DECIMAL})

# MySQL's optional metadata lists signedness for exactly these types.
NUMERIC_TYPES: Final = frozenset(
    {T_TINY, T_SHORT, T_INT24, T_LONG, T_LONGLONG, T_NEWDECIMAL, T_FLOAT, T_DOUBLE, T_DECIMAL}
)
# ...and a collation for these (ENUM/SET have their own list).
CHARACTER_TYPES: Final = frozenset(
    {T_STRING, T_VARCHAR, T_VAR_STRING, T_BLOB, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB}
)
BLOB_TYPES: Final = frozenset(
    {T_BLOB, T_TINY_BLOB, T_MEDIUM_BLOB, T_LONG_BLOB, T_GEOMETRY, T_JSON, T_VECTOR}
)

_DIG2BYTES: Final = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def read_metadata(col_type: int, buf: bytes, pos: int) -> tuple[int, int]:
    """One column's table-map metadata as an int, and the new position."""
    if col_type in _META_1:
        return buf[pos], pos + 1
    if col_type in _META_2:
        if col_type in (T_VARCHAR, T_VAR_STRING):
            return buf[pos] | (buf[pos + 1] << 8), pos + 2
        # Big-endian pairs: (real type, length), (precision, scale), (bits, bytes).
        return (buf[pos] << 8) | buf[pos + 1], pos + 2
    return 0, pos


def real_type(col_type: int, meta: int) -> tuple[int, int]:
    """The storage type and length hidden in a STRING column's metadata.

    CHAR, ENUM and SET all log as STRING; the first metadata byte says which,
    and two of its bits extend the length beyond 255 (CHAR(255) in utf8mb4).
    """
    if col_type != T_STRING or meta < 256:
        return col_type, meta & 0xFF if col_type == T_STRING else meta
    byte0, byte1 = meta >> 8, meta & 0xFF
    if (byte0 & 0x30) != 0x30:
        return byte0 | 0x30, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return byte0, byte1


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


@dataclass(frozen=True, slots=True)
class Layout:
    """How a column's value is laid out in a row image.

    ``fixed`` is the byte width when constant; otherwise ``prefix`` is the
    width of the little-endian length in front of the data.
    """

    fixed: int | None
    prefix: int = 0


def layout(col_type: int, meta: int) -> Layout:
    """The byte layout of one value, raising WireError for unknown types."""
    t, length = real_type(col_type, meta)
    fixed = {
        T_TINY: 1, T_YEAR: 1, T_SHORT: 2, T_INT24: 3, T_LONG: 4, T_LONGLONG: 8,
        T_DOUBLE: 8, T_DATE: 3, T_NEWDATE: 3, T_TIME: 3, T_TIMESTAMP: 4, T_DATETIME: 8,
        T_NULL: 0,
    }.get(t)
    if fixed is not None:
        return Layout(fixed)
    if t == T_FLOAT:
        return Layout(meta or 4)
    if t in (T_TIMESTAMP2, T_DATETIME2, T_TIME2):
        base = {T_TIMESTAMP2: 4, T_DATETIME2: 5, T_TIME2: 3}[t]
        return Layout(base + (meta + 1) // 2)
    if t == T_NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        if not (0 < precision <= 65 and scale <= 38 and scale <= precision):
            raise WireError(f"DECIMAL({precision},{scale}) is not a valid column")
        return Layout(decimal_size(precision, scale))
    if t in (T_VARCHAR, T_VAR_STRING):
        return Layout(None, 1 if meta < 256 else 2)
    if t == T_STRING:
        return Layout(None, 1 if length < 256 else 2)
    if t == T_ENUM:
        return Layout(length)
    if t == T_SET:
        return Layout(length)
    if t == T_BIT:
        nbits = (meta & 0xFF) * 8 + (meta >> 8)
        return Layout((nbits + 7) // 8)
    if t in BLOB_TYPES:
        if not 1 <= meta <= 4:
            raise WireError(f"blob length width {meta} out of range")
        return Layout(None, meta)
    raise WireError(f"column type {TYPE_NAMES.get(t, t)} is not supported")


# --- value decoders for the rarer types; each takes (buf, pos, meta) -------

def decode_newdecimal(buf: bytes, pos: int, meta: int) -> Decimal:
    precision, scale = meta >> 8, meta & 0xFF
    size = decimal_size(precision, scale)
    raw = bytearray(buf[pos : pos + size])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    intg = precision - scale
    parts: list[str] = []
    p = 0
    lead = _DIG2BYTES[intg % 9]
    if lead:
        parts.append(str(int.from_bytes(raw[p : p + lead], "big")))
        p += lead
    for _ in range(intg // 9):
        parts.append(f"{int.from_bytes(raw[p : p + 4], 'big'):09d}")
        p += 4
    frac: list[str] = []
    for _ in range(scale // 9):
        frac.append(f"{int.from_bytes(raw[p : p + 4], 'big'):09d}")
        p += 4
    tail = _DIG2BYTES[scale % 9]
    if tail:
        frac.append(f"{int.from_bytes(raw[p : p + tail], 'big'):0{scale % 9}d}")
    text = ("".join(parts) or "0") + ("." + "".join(frac) if frac else "")
    return Decimal(("-" if negative else "") + text)


def _frac_micros(buf: bytes, pos: int, fsp: int) -> int:
    n = (fsp + 1) // 2
    if not n:
        return 0
    # 1, 2 or 3 bytes hold hundredths, ten-thousandths or microseconds.
    return int.from_bytes(buf[pos : pos + n], "big") * (0, 10000, 100, 1)[n]


def decode_datetime2(buf: bytes, pos: int, meta: int) -> dt.datetime | str:
    packed = int.from_bytes(buf[pos : pos + 5], "big") - 0x8000000000
    ymd, hms = packed >> 17, packed & 0x1FFFF
    ym, day = ymd >> 5, ymd & 0x1F
    year, month = ym // 13, ym % 13
    hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
    micro = _frac_micros(buf, pos + 5, meta)
    try:
        return dt.datetime(year, month, day, hour, minute, second, micro)
    except ValueError:
        # Zero dates are legal in MySQL but not in Python; keep them as text.
        return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"


def decode_timestamp2(buf: bytes, pos: int, meta: int) -> dt.datetime | str:
    seconds = int.from_bytes(buf[pos : pos + 4], "big")
    if seconds == 0:
        return "0000-00-00 00:00:00"
    micro = _frac_micros(buf, pos + 4, meta)
    # Naive UTC: probes run with time_zone='+00:00' so the value compares right.
    return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=micro)


def decode_time2(buf: bytes, pos: int, meta: int) -> dt.timedelta:
    """MySQL 5.6's TIME (MariaDB's too since 10.3): 3 bytes of hh:mm:ss, then 0-3 of
    fraction. With 6 digits the 6 bytes are one offset integer; with 1-4 the fraction
    is a byte of hundredths or two of ten-thousandths stored apart, and a negative
    time borrows one second from it (my_time.cc, my_time_packed_from_binary). Read
    as one integer, 12:34:56.789 came back as 12:34:58.0198 and -00:00:01.5 as
    -00:00:02.28: keys that match no row."""
    n = (meta + 1) // 2
    if n == 3:
        packed = int.from_bytes(buf[pos : pos + 6], "big") - 0x800000000000
    else:
        whole = int.from_bytes(buf[pos : pos + 3], "big") - 0x800000
        frac = int.from_bytes(buf[pos + 3 : pos + 3 + n], "big")
        if whole < 0 and frac:
            whole += 1
            frac -= 1 << (8 * n)
        packed = (whole << 24) + frac * (0, 10000, 100)[n]
    sign = -1 if packed < 0 else 1
    packed = abs(packed)
    hms, frac = packed >> 24, packed & 0xFFFFFF
    hours, minutes, seconds = (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F
    return sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=frac)


def decode_date(buf: bytes, pos: int, meta: int) -> dt.date | str:
    v = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
    year, month, day = v >> 9, (v >> 5) & 0x0F, v & 0x1F
    try:
        return dt.date(year, month, day)
    except ValueError:
        return f"{year:04d}-{month:02d}-{day:02d}"


def decode_datetime(buf: bytes, pos: int, meta: int) -> dt.datetime | str:
    v = struct.unpack_from("<Q", buf, pos)[0]
    d, t = divmod(v, 1000000)
    year, md = divmod(d, 10000)
    month, day = divmod(md, 100)
    hour, ms = divmod(t, 10000)
    minute, second = divmod(ms, 100)
    try:
        return dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"


def decode_time(buf: bytes, pos: int, meta: int) -> dt.timedelta:
    v = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
    if v & 0x800000:
        v -= 0x1000000
    sign = -1 if v < 0 else 1
    v = abs(v)
    return sign * dt.timedelta(hours=v // 10000, minutes=(v // 100) % 100, seconds=v % 100)


def decode_timestamp(buf: bytes, pos: int, meta: int) -> dt.datetime | str:
    seconds = struct.unpack_from("<I", buf, pos)[0]
    if seconds == 0:
        return "0000-00-00 00:00:00"
    return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)


def decode_bit(buf: bytes, pos: int, meta: int) -> int:
    nbytes = ((meta & 0xFF) * 8 + (meta >> 8) + 7) // 8
    return int.from_bytes(buf[pos : pos + nbytes], "big")


def decode_float(buf: bytes, pos: int, meta: int) -> float:
    return float(struct.unpack_from("<f", buf, pos)[0])
