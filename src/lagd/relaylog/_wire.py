"""Binary-log wire primitives: event header, type codes, integer encodings.

Everything here is pure and works on ``bytes`` at an offset, so that the hot
path never slices more than it has to.
"""

from __future__ import annotations

import struct
from typing import Final

MAGIC: Final = b"\xfebin"
ENCRYPTED_MAGIC: Final = b"\xfdbin"
HEADER_LEN: Final = 19
CHECKSUM_LEN: Final = 4

HEADER: Final = struct.Struct("<IBIIIH")  # timestamp, type, server_id, size, log_pos, flags
U16: Final = struct.Struct("<H")
U32: Final = struct.Struct("<I")
U64: Final = struct.Struct("<Q")

# Event type codes (MySQL and MariaDB share the low range).
UNKNOWN_EVENT: Final = 0
START_EVENT_V3: Final = 1
QUERY_EVENT: Final = 2
STOP_EVENT: Final = 3
ROTATE_EVENT: Final = 4
INTVAR_EVENT: Final = 5
LOAD_EVENT: Final = 6
CREATE_FILE_EVENT: Final = 8
APPEND_BLOCK_EVENT: Final = 9
EXEC_LOAD_EVENT: Final = 10
DELETE_FILE_EVENT: Final = 11
NEW_LOAD_EVENT: Final = 12
RAND_EVENT: Final = 13
USER_VAR_EVENT: Final = 14
FORMAT_DESCRIPTION_EVENT: Final = 15
XID_EVENT: Final = 16
BEGIN_LOAD_QUERY_EVENT: Final = 17
EXECUTE_LOAD_QUERY_EVENT: Final = 18
TABLE_MAP_EVENT: Final = 19
WRITE_ROWS_EVENT_V0: Final = 20
UPDATE_ROWS_EVENT_V0: Final = 21
DELETE_ROWS_EVENT_V0: Final = 22
WRITE_ROWS_EVENT_V1: Final = 23
UPDATE_ROWS_EVENT_V1: Final = 24
DELETE_ROWS_EVENT_V1: Final = 25
INCIDENT_EVENT: Final = 26
HEARTBEAT_LOG_EVENT: Final = 27
IGNORABLE_LOG_EVENT: Final = 28
ROWS_QUERY_LOG_EVENT: Final = 29
WRITE_ROWS_EVENT_V2: Final = 30
UPDATE_ROWS_EVENT_V2: Final = 31
DELETE_ROWS_EVENT_V2: Final = 32
GTID_LOG_EVENT: Final = 33
ANONYMOUS_GTID_LOG_EVENT: Final = 34
PREVIOUS_GTIDS_LOG_EVENT: Final = 35
TRANSACTION_CONTEXT_EVENT: Final = 36
VIEW_CHANGE_EVENT: Final = 37
XA_PREPARE_LOG_EVENT: Final = 38
PARTIAL_UPDATE_ROWS_EVENT: Final = 39
TRANSACTION_PAYLOAD_EVENT: Final = 40
HEARTBEAT_LOG_EVENT_V2: Final = 41
GTID_TAGGED_LOG_EVENT: Final = 42
MARIA_ANNOTATE_ROWS_EVENT: Final = 160
MARIA_BINLOG_CHECKPOINT_EVENT: Final = 161
MARIA_GTID_EVENT: Final = 162
MARIA_GTID_LIST_EVENT: Final = 163
MARIA_START_ENCRYPTION_EVENT: Final = 164
MARIA_QUERY_COMPRESSED_EVENT: Final = 165
MARIA_WRITE_ROWS_COMPRESSED_V1: Final = 166
MARIA_UPDATE_ROWS_COMPRESSED_V1: Final = 167
MARIA_DELETE_ROWS_COMPRESSED_V1: Final = 168
MARIA_WRITE_ROWS_COMPRESSED: Final = 169
MARIA_UPDATE_ROWS_COMPRESSED: Final = 170
MARIA_DELETE_ROWS_COMPRESSED: Final = 171

# The flag the server sets on events it made up rather than logged (the
# Rotate/FDE pair that starts a relay log's copy of a source stream).
LOG_EVENT_ARTIFICIAL_F: Final = 0x20

EVENT_NAMES: Final[dict[int, str]] = {
    value: name
    for name, value in globals().items()
    if name.endswith("_EVENT")
    or "_EVENT_" in name
    or (name.startswith("MARIA_")
    and isinstance(value, int))
}


class WireError(ValueError):
    """A field does not fit the bytes it was read from."""


def packed_int(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a length-encoded integer (the client protocol's): value, new pos."""
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFC:
        return buf[pos + 1] | (buf[pos + 2] << 8), pos + 3
    if first == 0xFD:
        return buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16), pos + 4
    if first == 0xFE:
        return U64.unpack_from(buf, pos + 1)[0], pos + 9
    raise WireError(f"invalid length-encoded integer prefix 0x{first:02x}")


def varlen_uint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned integer in MySQL's serialization-library encoding.

    The count of trailing one bits in the first byte says how many more bytes
    follow; the value sits above those marker bits (little-endian).
    """
    first = buf[pos]
    extra = 0
    while extra < 8 and first & (1 << extra):
        extra += 1
    size = extra + 1
    if pos + size > len(buf):
        raise WireError("serialized integer runs past the end of the event")
    if size == 9:
        return U64.unpack_from(buf, pos + 1)[0], pos + 9
    raw = int.from_bytes(buf[pos : pos + size], "little")
    return raw >> size, pos + size


def varlen_sint(buf: bytes, pos: int) -> tuple[int, int]:
    """Signed (zig-zag) variant of :func:`varlen_uint`."""
    raw, pos = varlen_uint(buf, pos)
    return (-(raw >> 1) - 1 if raw & 1 else raw >> 1), pos


def cstring_at(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """A NUL-terminated string no further than ``end``."""
    stop = buf.find(b"\x00", pos, end)
    if stop < 0:
        raise WireError("unterminated string")
    return buf[pos:stop], stop + 1
