"""pymysqlreplication as the tests' reference decoder (the one place it is imported).

lagd's own decoder is what runs in production: pymysqlreplication decodes
every value of every row (about 7,000 rows/s here), far slower than a replica
applies. It stays as the independent second opinion: the differential tests
compare both decoders on the same events, and the reader benchmark measures
against it. It is driven through its internal packet API
(``BinLogPacketWrapper`` over a PyMySQL packet), which is why the version is
pinned and ``tests/unit/test_pmr_contract.py`` proves that API.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication import row_event
from pymysqlreplication.packet import BinLogPacketWrapper

from lagd.relaylog import _wire as w
from lagd.relaylog._eventparts import checksum_aware

_ROWS = {
    w.WRITE_ROWS_EVENT_V1: "insert", w.WRITE_ROWS_EVENT_V2: "insert",
    w.UPDATE_ROWS_EVENT_V1: "update", w.UPDATE_ROWS_EVENT_V2: "update",
    w.DELETE_ROWS_EVENT_V1: "delete", w.DELETE_ROWS_EVENT_V2: "delete",
}
_ALLOWED = frozenset({row_event.TableMapEvent, row_event.WriteRowsEvent,
                      row_event.UpdateRowsEvent, row_event.DeleteRowsEvent})


class _ControlConnection:
    """What pymysqlreplication asks of its control connection, without a server."""

    def __init__(self, dbms: str) -> None:
        self.charset = "utf8mb4"
        self._dbms = dbms

    def _get_dbms(self) -> str:
        return self._dbms


@dataclass(frozen=True, slots=True)
class ReferenceRow:
    schema: str
    table: str
    kind: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def iter_raw_events(buf: bytes) -> Iterator[tuple[int, int, bytes, bool]]:
    """(offset, type, raw event, has checksum) for each whole event of a log file."""
    if buf[:4] != w.MAGIC:
        raise ValueError("not a binary log")
    pos, crc = 4, False
    while pos + 19 <= len(buf):
        _ts, typ, _sid, size, _lp, _fl = w.HEADER.unpack_from(buf, pos)
        if size < 19 or pos + size > len(buf):
            return
        if typ == w.FORMAT_DESCRIPTION_EVENT:
            version = buf[pos + 21 : pos + 71].split(b"\x00", 1)[0].decode("ascii", "replace")
            crc = checksum_aware(version) and buf[pos + size - 5] == 1
        yield pos, typ, buf[pos : pos + size], crc
        pos += size


class ReferenceDecoder:
    """Decodes table-map and row events with pymysqlreplication."""

    def __init__(self, dbms: str = "mysql") -> None:
        self._ctl = _ControlConnection(dbms)
        self._tables: dict[int, Any] = {}

    def event(self, raw: bytes, use_checksum: bool) -> Any:
        """The pymysqlreplication event object for one raw event (or None)."""
        packet = MysqlPacket(b"\x00" + raw, "utf8")  # the OK byte a network packet starts with
        wrapper = BinLogPacketWrapper(
            packet, self._tables, self._ctl, (8, 0, 0), use_checksum, _ALLOWED,
            None, None, None, None, False, False, False, False, False,
        )
        return wrapper.event

    def rows(self, raw: bytes, use_checksum: bool) -> list[ReferenceRow]:
        ev = self.event(raw, use_checksum)
        kind = _ROWS.get(raw[4])
        if ev is None or kind is None:
            return []
        out = []
        for r in ev.rows:
            out.append(ReferenceRow(
                ev.schema, ev.table, kind,
                r.get("before_values") if kind == "update" else
                (r.get("values") if kind == "delete" else None),
                r.get("after_values") if kind == "update" else
                (r.get("values") if kind == "insert" else None),
            ))
        return out


def reference_rows(path: str | Path, dbms: str = "mysql") -> Iterator[ReferenceRow]:
    """Every row change in a log file, decoded by pymysqlreplication."""
    dec = ReferenceDecoder(dbms)
    buf = Path(path).read_bytes()
    for _off, typ, raw, crc in iter_raw_events(buf):
        if typ == w.TABLE_MAP_EVENT or typ in _ROWS:
            yield from dec.rows(raw, crc)
