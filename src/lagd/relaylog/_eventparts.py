"""Parts of events that need parsing of their own: statement keywords and the
tables a DDL names, GTID tags, and compressed payloads inflated within bounds.

Pure functions over bytes and text, kept apart from the decoder's state
machine so each can be read (and fuzzed) on its own.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import zstandard

from lagd.relaylog import _wire as w

# An event larger than this is taken as a corrupt header: MySQL caps events
# at max_allowed_packet (1 GiB) plus a little framing.
MAX_EVENT_SIZE = (1 << 30) + (1 << 20)
# A compressed payload may not inflate beyond what it declares, nor ever
# beyond this (a transaction payload is one event of at most MAX_EVENT_SIZE
# on the source, but the inflated transaction has no such cap there).
MAX_INFLATED = 4 << 30

# Atomic and possessive: leading whitespace and comments are skipped without
# backtracking (the plain form took minutes on 32 blanks and an open comment).
KEYWORD = re.compile(rb"^(?>\s+|/\*.*?\*/|#[^\n]*\n|--[^\n]*\n)*+([A-Za-z]+)(?:\s+([A-Za-z]+))?", re.S)
DML = frozenset({b"INSERT", b"UPDATE", b"DELETE", b"REPLACE", b"LOAD", b"CALL", b"DO", b"WITH"})
SCHEMA_CHANGING = frozenset({b"ALTER", b"CREATE", b"DROP", b"RENAME", b"TRUNCATE"})
_NAME = r"(?:`(?:[^`]|``)+`|\w+)"
_DDL_TABLES = re.compile(
    rf"\b(?:TABLE|TABLES)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_NAME}(?:\.{_NAME})?"
    rf"(?:\s*(?:,|\bTO\b)\s*{_NAME}(?:\.{_NAME})?)*)",
    re.I,
)
_IDENT = re.compile(rf"({_NAME})(?:\.({_NAME}))?")


def inflate_zstd(dctx: zstandard.ZstdDecompressor, data: bytes, declared: int | None) -> bytes:
    """Decompress a payload, never to more than it declares.

    The server always writes the uncompressed size. A frame header's content
    size is not trusted either: the output is read in steps, so memory
    follows what actually inflates.
    """
    if declared is None:
        raise w.WireError("compressed payload without its uncompressed size")
    cap = declared
    if cap > MAX_INFLATED:
        raise w.WireError(f"payload declares {cap} bytes uncompressed")
    parts: list[bytes] = []
    got = 0
    with dctx.stream_reader(data) as reader:
        while got <= cap:
            part = reader.read(min(1 << 20, cap + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
    if got != declared:
        raise w.WireError(f"payload inflates to {got} bytes, not the {cap} it declares")
    return b"".join(parts)


def checksum_aware(version: str) -> bool:
    """Servers from MySQL 5.6.1 / MariaDB 5.3 on end the FDE with a checksum field."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        return True
    v = tuple(int(x) for x in m.groups())
    if "MariaDB" in version:
        return v >= (5, 3, 0)
    return v >= (5, 6, 1)


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def tagged_gtid(buf: bytes, p: int, end: int) -> dict[int, Any]:
    """Fields of a GTID_TAGGED_LOG_EVENT (MySQL serialization library, v2)."""
    version = buf[p]
    if version != 2:
        raise w.WireError(f"tagged GTID serialization version {version} is not supported")
    start = p
    payload_size, p = w.varlen_uint(buf, p + 1)
    last_non_ignorable, p = w.varlen_uint(buf, p)
    stop = min(start + payload_size, end)
    fields: dict[int, Any] = {}
    signed = {2, 4, 5}
    while p < stop:
        fid, p = w.varlen_uint(buf, p)
        if fid == 1:
            raw = bytearray()
            for _ in range(16):
                b, p = w.varlen_uint(buf, p)
                raw.append(b)
            fields[1] = bytes(raw)
        elif fid == 3:
            n, p = w.varlen_uint(buf, p)
            fields[3] = buf[p : p + n].decode("ascii", "replace")
            p += n
        elif fid in signed:
            fields[fid], p = w.varlen_sint(buf, p)
        elif fid <= 11:
            fields[fid], p = w.varlen_uint(buf, p)
        elif fid <= last_non_ignorable:
            raise w.WireError(f"unknown mandatory field {fid} in a tagged GTID event")
        else:
            break  # an ignorable newer field: its length is unknown, stop here
    return fields


def maria_uncompress(data: bytes) -> bytes:
    """MariaDB log_bin_compress: a header byte, the length, then zlib.

    Inflates no further than the declared length (and never beyond an
    event's size cap): a damaged stream must not become a zip bomb.
    """
    head = data[0]
    lenlen = head & 0x07
    size = int.from_bytes(data[1 : 1 + lenlen], "big")
    if size > MAX_EVENT_SIZE:
        raise w.WireError(f"compressed query declares {size} bytes")
    d = zlib.decompressobj()
    out = d.decompress(data[1 + lenlen :], size + 1)
    if len(out) != size:
        raise w.WireError("compressed query has the wrong length")
    return out


def _unquote(name: str) -> str:
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def ddl_tables(sql: str, schema: str | None) -> tuple[str, ...]:
    m = _DDL_TABLES.search(sql)
    if not m:
        return ()
    names = []
    for part in re.split(r"\s*(?:,|\bTO\b)\s*", m.group(1), flags=re.I):
        im = _IDENT.fullmatch(part.strip())
        if not im:
            continue
        a, b = (_unquote(x) if x else x for x in im.groups())
        if b:
            names.append(f"{a}.{b}")
        elif schema:
            names.append(f"{schema}.{a}")
    return tuple(names)
