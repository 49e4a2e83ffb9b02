"""Raw binary-log events -> lagd events.

``EventDecoder`` is the state machine one log stream needs: the checksum and
post-header lengths of the format-description event in force (a relay log
holds the replica's own and the source's), the table maps of the current
transaction, the transaction being read, and LOAD DATA blocks in flight.

It works on a bytes buffer at an offset and returns how far it got, so the
file layer can feed it chunks and keep the partial event at the tail.
"""

from __future__ import annotations

import logging
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import zstandard

from lagd.relaylog import _wire as w
from lagd.relaylog._construct import constructor, fast_transactions
from lagd.relaylog._eventparts import (
    DML,
    KEYWORD,
    MAX_EVENT_SIZE,
    SCHEMA_CHANGING,
    checksum_aware,
    ddl_tables,
    inflate_zstd,
    maria_uncompress,
    tagged_gtid,
    uuid_text,
)
from lagd.relaylog._rowcodec import ImageDecoder, compile_image_decoder, skip_layout, value_layout
from lagd.relaylog._tablemap import MAX_COLUMNS, TableMap, parse_table_map
from lagd.relaylog.errors import EncryptedRelayLogError
from lagd.relaylog.events import (
    CorruptEvent,
    Ddl,
    Event,
    LoadData,
    RowChange,
    RowKind,
    RowsQuery,
    Statement,
    TableInfo,
    TransactionEnd,
    TransactionStart,
)
from lagd.relaylog.schema import SchemaResolver

log = logging.getLogger("lagd.relaylog")

# Where reading resumes after damage is a GTID or BEGIN event: small ones.
# Looking only at small candidates keeps the search linear in the bytes.
_RESUME_EVENT_MAX = 1024
# Caches keyed by log bytes: bounded so a damaged stream cannot grow them.
_MAX_DEFINITION_BYTES = 64 << 20
# A rows event's flag: its statement ran with foreign_key_checks=0 (the replica's SQL thread too).
_NO_FOREIGN_KEY_CHECKS = 0x0002
# A Query event's flags2 bit for foreign_key_checks=0 (OPTION_NO_FOREIGN_KEY_CHECKS, the
# same bit on MySQL and MariaDB).
_STATEMENT_NO_FK_CHECKS = 1 << 26
_MAX_IMAGES_PER_TABLE = 256
_MAX_LOAD_BLOCKS = 64

_ROWS_KIND = {
    w.WRITE_ROWS_EVENT_V1: (RowKind.INSERT, False),
    w.UPDATE_ROWS_EVENT_V1: (RowKind.UPDATE, False),
    w.DELETE_ROWS_EVENT_V1: (RowKind.DELETE, False),
    w.WRITE_ROWS_EVENT_V2: (RowKind.INSERT, True),
    w.UPDATE_ROWS_EVENT_V2: (RowKind.UPDATE, True),
    w.DELETE_ROWS_EVENT_V2: (RowKind.DELETE, True),
    w.PARTIAL_UPDATE_ROWS_EVENT: (RowKind.UPDATE, True),
}
_START_TYPES = frozenset(
    {w.GTID_LOG_EVENT, w.ANONYMOUS_GTID_LOG_EVENT, w.GTID_TAGGED_LOG_EVENT, w.MARIA_GTID_EVENT}
)
# The type byte of an event that can start a transaction (or BEGIN's query).
_START_TYPE_BYTE = re.compile(b"[" + re.escape(bytes(sorted(_START_TYPES | {w.QUERY_EVENT}))) + b"]")
# While skipping to the next transaction after corruption, these still count.
_RESUME_TYPES = _START_TYPES | {w.QUERY_EVENT, w.FORMAT_DESCRIPTION_EVENT, w.ROTATE_EVENT}
# Events that carry nothing a probe, the lag maths or the advisor use.
_IGNORED = frozenset({
    w.STOP_EVENT, w.INTVAR_EVENT, w.RAND_EVENT, w.USER_VAR_EVENT, w.HEARTBEAT_LOG_EVENT,
    w.HEARTBEAT_LOG_EVENT_V2, w.IGNORABLE_LOG_EVENT, w.PREVIOUS_GTIDS_LOG_EVENT,
    w.TRANSACTION_CONTEXT_EVENT, w.VIEW_CHANGE_EVENT, w.MARIA_BINLOG_CHECKPOINT_EVENT,
    w.MARIA_GTID_LIST_EVENT, w.DELETE_FILE_EVENT, w.INCIDENT_EVENT, w.START_EVENT_V3,
})
# Post-header lengths before any FDE says otherwise (binlog v4 defaults).
_DEFAULT_POST_HEADER = {w.QUERY_EVENT: 13, w.ROTATE_EVENT: 8, w.TABLE_MAP_EVENT: 8,
                        w.EXECUTE_LOAD_QUERY_EVENT: 26, w.BEGIN_LOAD_QUERY_EVENT: 4,
                        w.APPEND_BLOCK_EVENT: 4}



@dataclass(slots=True)
class ReaderStats:
    """Counters the reader keeps; the daemon snapshots them for metrics."""

    events: int = 0
    bytes: int = 0
    transactions: int = 0
    row_changes: int = 0
    rows_unprobeable: int = 0
    corrupt_events: int = 0
    skipped_events: int = 0  # dropped while finding the next transaction after corruption
    skipped_bytes: int = 0  # bytes of corrupt and skipped events, and of damaged stretches
    last_skip: str | None = None  # "file:offset: reason" of the latest damage
    unknown_events: dict[int, int] = field(default_factory=dict)
    unsupported_events: dict[str, int] = field(default_factory=dict)
    table_definitions: int = 0
    files: int = 0
    resyncs: int = 0


class _TableDecoder:
    """Decodes the rows of one table definition (one table-map body)."""

    __slots__ = ("_images", "_skips", "_values", "info", "probeable", "qualified", "table_id", "tm",
                 "unchecked")

    def __init__(self, tm: TableMap, info: TableInfo) -> None:
        self.tm = tm
        self.info = info
        # The rows of an event logged with foreign_key_checks=0 (NO_FOREIGN_KEY_CHECKS_F):
        # the SQL thread checks no parent for them, so their table says it has no foreign keys.
        self.unchecked = replace(info, foreign_keys=()) if info.foreign_keys else info
        self.table_id = tm.table_id
        self.qualified = info.qualified
        self.probeable = info.probeable
        self._images: dict[bytes, ImageDecoder] = {}
        self._skips: dict[bytes, bytes | None] = {}  # the C reader's, for rows without values
        # The C reader's, for rows with values: a value layout where every needed column
        # is an integer, else the generated function (the same as _images').
        self._values: dict[bytes, bytes | ImageDecoder] = {}

    def _columns(self, present: bytes) -> tuple[int, ...]:
        bits = int.from_bytes(present, "little")
        return tuple(i for i in range(self.tm.column_count) if bits & (1 << i))

    def skip(self, present: bytes) -> None:
        """Make the image's skip layout for the C reader, which walks rows it
        only counts by it (see ``EventDecoder.values``)."""
        if present not in self._skips:
            if len(self._skips) >= _MAX_IMAGES_PER_TABLE:
                self._skips.clear()
            self._skips[present] = skip_layout(self.tm, self._columns(present))

    def image(self, present: bytes) -> ImageDecoder:
        dec = self._images.get(present)
        if dec is None:
            if len(self._images) >= _MAX_IMAGES_PER_TABLE:
                self._images.clear()  # MINIMAL images of many column sets, or damage
                self._values.clear()
            columns = self._columns(present)
            dec = compile_image_decoder(self.tm, self.info, columns)
            self._images[present] = dec
            self._values[present] = value_layout(self.tm, self.info, columns) or dec
        return dec


# The reader builds these by the hundred thousand a second: through the C
# accelerator when it is built, else by calling the class (same objects).
_new_row = constructor(RowChange)
_new_start = constructor(TransactionStart)
_new_end = constructor(TransactionEnd)
_new_rows_query = constructor(RowsQuery)
_new_statement = constructor(Statement)
_KINDS = (RowKind.INSERT, RowKind.UPDATE, RowKind.DELETE)
_MARIA_GTID = struct.Struct("<QIB")


# Query-event status variables before Q_AUTO_INCREMENT, as every server writes them
# (flags2, sql_mode, catalog), and a few after it: code -> length, or -1 for a string
# whose length byte comes first (Q_CATALOG_CODE also ends in a NUL).
_STATUS_LENGTHS = {0: 4, 1: 8, 2: -2, 4: 6, 5: -1, 6: -1, 7: 2, 8: 2, 9: 8}
_Q_AUTO_INCREMENT = 3


def _auto_increment(buf: bytes, status: int, length: int) -> int:
    """The statement session's auto_increment_increment (Q_AUTO_INCREMENT: written only
    where it or the offset is not 1); 1 where absent or past a variable not known here."""
    p, end = status, status + length
    while p < end:
        code = buf[p]
        if code == _Q_AUTO_INCREMENT:
            return max(1, w.U16.unpack_from(buf, p + 1)[0]) if p + 5 <= end else 1
        size = _STATUS_LENGTHS.get(code)
        if size is None or (size < 0 and p + 1 >= end):
            return 1
        if size < 0:  # a length byte, the string (and Q_CATALOG_CODE's NUL)
            size = 1 + buf[p + 1] + (1 if size == -2 else 0)
        p += 1 + size
    return 1


def _crc_ok(buf: bytes, pos: int, body_end: int) -> bool:
    stored: int = w.U32.unpack_from(buf, body_end)[0]
    return zlib.crc32(buf[pos:body_end]) == stored


class EventDecoder:
    """Turns raw events into lagd events; see the module docstring."""

    def __init__(
        self,
        resolver: SchemaResolver,
        stats: ReaderStats | None = None,
        verify_checksums: bool = True,
        values: bool = True,
    ) -> None:
        self.resolver = resolver
        # False: rows carry no images (before and after None), for a reader that
        # only counts them (the daemon's look-ahead tail). The C path then walks
        # them by their layouts: the tail's decoding was about a fifth of the
        # daemon's CPU in a catch-up, for values it never looked at.
        self.values = values
        self.stats = stats or ReaderStats()
        self.verify = verify_checksums
        self.accelerated = fast_transactions is not None
        self._definitions: dict[bytes, _TableDecoder] = {}
        self._tables: dict[int, _TableDecoder] = {}
        self._load_blocks: dict[int, list[int]] = {}
        self._zstd = zstandard.ZstdDecompressor()
        self.source_file: str | None = None
        self.source_server_id: int | None = None
        self.file = ""
        self._last_end = 4
        self._definition_bytes = 0
        self._nested = False  # decoding the inside of a transaction payload
        self._file_damage = 0  # corrupt events in the current file
        self._file_skipped = 0  # bytes they and the damaged stretches cover
        self._reset_stream()
        self._reset_transaction()

    # ----- stream and transaction state --------------------------------

    def _reset_stream(self) -> None:
        self.crc = False
        self.post_header: dict[int, int] = dict(_DEFAULT_POST_HEADER)
        self._fast_layout = False
        self.own_server_id: int | None = None
        self.saw_foreign_fde = False
        self.server_version = ""

    def _reset_transaction(self) -> None:
        self.in_trx = False
        self.skipping = False
        self._pinned_end: int | None = None
        self._begin(0, None, False, count=False)
        self.in_trx = False

    def _begin(self, offset: int, gtid: str | None, standalone: int | bool,
               count: bool = True) -> None:
        self.in_trx = True
        self.skipping = False  # a transaction start is where reading resumes after damage
        self.trx_began = False  # a BEGIN query was seen (statements do not end it)
        self.trx_standalone = bool(standalone)
        self.trx_gtid = gtid
        self.trx_start = offset
        self.trx_carried = 0  # its bytes in earlier files (relay logs rotate mid-transaction)
        self.trx_rows = 0
        self.trx_row_events = 0
        self.trx_statements = 0
        self.trx_tables: set[str] = set()
        self._insert_id: int | None = None  # an Intvar INSERT_ID event's, for the next statement
        if count:
            self.stats.transactions += 1

    def start_file(self, name: str) -> None:
        """A new log file begins: its own FDE will set the checksum mode."""
        if self.in_trx and self.file:
            # The transaction goes on in the new file: count what it had in the old one.
            self.trx_carried += max(0, self._last_end - self.trx_start)
            self.trx_start = 4
        self._last_end = 4
        self._damage_summary()
        self.file = name
        self._reset_stream()
        self.stats.files += 1

    def _damage_summary(self) -> None:
        """One line per damaged file: what its first warning did not count."""
        if self._file_damage > 1:
            log.warning("relay log %s: %d damaged stretches, %d bytes skipped in all; last: %s",
                        self.file, self._file_damage, self._file_skipped, self.stats.last_skip)
        self._file_damage = self._file_skipped = 0

    def abandon_transaction(self) -> None:
        """Forget a half-read transaction (the reader jumped elsewhere)."""
        self._reset_transaction()
        self._tables.clear()

    def invalidate(self, tables: tuple[str, ...] | None) -> None:
        self.resolver.invalidate(tables if tables else None)
        if not tables:
            self._definitions.clear()
            return
        names = set(tables)
        for key, td in list(self._definitions.items()):
            if td.info.qualified in names:
                del self._definitions[key]

    # ----- the hot loop ------------------------------------------------

    def decode(self, buf: bytes, pos: int, end: int, base: int,
               final: bool = False) -> tuple[list[Event], int]:
        """Decode whole events in ``buf[pos:end]``.

        ``base`` is the file offset of ``buf[0]``. Returns the events and the
        buffer offset of the first byte not consumed (an incomplete event).
        ``final`` says ``end`` is the end of a complete file: an event that
        claims to run past it is damage (reported, then reading resumes at
        the next transaction start found after it), not a partial write.

        The common events of a row-based transaction (GTID, table map, rows,
        XID) are handled inline: this loop runs once per event, several
        hundred thousand times a second.
        """
        out: list[Event] = []
        append = out.append
        unpack_header = w.HEADER.unpack_from
        unpack_gtid = _MARIA_GTID.unpack_from
        definitions = self._definitions
        tables = self._tables
        rows_kind = _ROWS_KIND
        new_start = _new_start
        stats = self.stats
        verify = self.verify
        n_events = 0
        start_pos = pos
        fast = fast_transactions if self.accelerated and type(buf) is bytes else None
        refused_at = -1
        while pos + 19 <= end:
            if fast is not None and pos != refused_at and not self.in_trx and not self.skipping \
                    and self._pinned_end is None and self._fast_layout:
                # The C path takes whole common transactions; where it stops,
                # this loop takes one event and offers it the rest again.
                new_pos, n, rows, unprobeable, trx = fast(
                    buf, pos, end, base, 4 if self.crc else 0, verify, 6,
                    self.post_header.get(w.QUERY_EVENT, 13), definitions, self.file,
                    self.source_file, out, new_start, _new_end, _new_row, _new_rows_query, _KINDS,
                    _new_statement, self.values,
                )
                if new_pos != pos:
                    # Each transaction's end forgets its table maps, as _end does
                    # (a stray table map outside any transaction must not live on).
                    tables.clear()
                    n_events += n
                    stats.row_changes += rows
                    stats.rows_unprobeable += unprobeable
                    stats.transactions += trx
                    pos = new_pos
                    continue
                refused_at = pos
            ts, typ, sid, size, logpos, flags = unpack_header(buf, pos)
            nxt = pos + size
            if size < 19 or size > MAX_EVENT_SIZE or (nxt > end and final):
                why = f"event of {size} bytes runs past the end of the file ({end - pos} left)" \
                    if 19 <= size <= MAX_EVENT_SIZE else f"event size {size}"
                resumed = self._corrupt_header(buf, pos, end, base, out, why)
                if resumed is None:
                    pos = end
                    break
                pos = resumed
                continue
            if nxt > end:
                break
            n_events += 1
            body_end = nxt - 4 if self.crc else nxt
            try:
                if verify and body_end != nxt and not _crc_ok(buf, pos, body_end):
                    if typ in (w.ROTATE_EVENT, w.FORMAT_DESCRIPTION_EVENT, w.PREVIOUS_GTIDS_LOG_EVENT):
                        body_end = nxt  # replica-written events may not carry the source's checksum
                    else:
                        raise w.WireError("checksum mismatch")
                if self.skipping and typ not in _RESUME_TYPES:
                    stats.skipped_events += 1
                    stats.skipped_bytes += size
                elif typ in rows_kind:
                    self._rows(buf, pos, body_end, typ, base + nxt, out)
                elif typ == 19:  # TABLE_MAP_EVENT
                    td = definitions.get(buf[pos + 19 : body_end])
                    if td is None:
                        td = self._new_definition(buf[pos + 19 : body_end])
                    tables[td.table_id] = td
                elif typ == 16:  # XID_EVENT
                    if self.in_trx:
                        append(self._end(base + nxt, logpos, True, w.U64.unpack_from(buf, pos + 19)[0]))
                elif typ == 162 and not self.in_trx:  # MariaDB GTID, the common case
                    seq, domain, gflags = unpack_gtid(buf, pos + 19)
                    text = f"{domain}-{sid}-{seq}"
                    self._begin(base + pos, text, gflags & 1)
                    append(new_start(self.file, base + pos, self.source_file,
                                     logpos - size if logpos else None, text, float(ts), ts, sid,
                                     None, None, None, None, bool(gflags & 1)))
                elif typ in _START_TYPES:
                    append(self._gtid(buf, pos, body_end, typ, ts, sid, size, logpos, base + pos, out))
                elif typ == w.MARIA_ANNOTATE_ROWS_EVENT or typ == w.ROWS_QUERY_LOG_EVENT:
                    text_at = pos + 19 + (1 if typ == w.ROWS_QUERY_LOG_EVENT else 0)
                    append(_new_rows_query(buf[text_at:body_end].decode("utf-8", "replace")))
                elif typ == w.QUERY_EVENT or typ == w.EXECUTE_LOAD_QUERY_EVENT \
                        or typ == w.MARIA_QUERY_COMPRESSED_EVENT:
                    self._query(buf, pos, body_end, typ, ts, sid, size, logpos, base + pos, base + nxt, out)
                else:
                    self._other(buf, pos, body_end, nxt, typ, ts, sid, size, logpos, flags, base, out)
            except EncryptedRelayLogError:
                raise
            except (w.WireError, struct.error, IndexError, ValueError, KeyError, TypeError,
                    UnicodeDecodeError, zstandard.ZstdError, zlib.error) as exc:
                reason = f"{w.EVENT_NAMES.get(typ, typ)}: {exc}"
                if body_end != nxt and "checksum" not in reason and not _crc_ok(buf, pos, body_end):
                    reason += " (and its checksum does not match: the bytes are damaged)"
                self._corrupt(base + pos, reason, out, size)
            pos = nxt
        stats.events += n_events
        stats.bytes += pos - start_pos
        self._last_end = base + pos
        return out, pos

    # ----- event handlers ----------------------------------------------

    def _rows(self, buf: bytes, pos: int, end: int, typ: int, next_offset: int,
              out: list[Event]) -> None:
        kind, v2 = _ROWS_KIND[typ]
        # The image decoders see this event's bytes only, so a damaged
        # length can neither read nor copy beyond it.
        ev = buf[pos:end]
        end = len(ev)
        p = 19
        if self.post_header.get(typ, 8 if not v2 else 10) == 6:
            table_id = w.U32.unpack_from(ev, p)[0]
            p += 4
        else:
            table_id = w.U32.unpack_from(ev, p)[0] | (ev[p + 4] << 32) | (ev[p + 5] << 40)
            p += 6
        rflags = ev[p] | (ev[p + 1] << 8)
        p += 2
        if v2:
            p += ev[p] | (ev[p + 1] << 8)  # extra data, its own 2-byte length included
        ncols, p = w.packed_int(ev, p)
        if not 0 < ncols <= MAX_COLUMNS:
            raise w.WireError(f"row event with {ncols} columns")
        nb = (ncols + 7) // 8
        if p + nb * (2 if kind is RowKind.UPDATE else 1) > end:
            raise w.WireError("row event column bitmaps run past the event")
        present = ev[p : p + nb]
        p += nb
        td = self._tables.get(table_id)
        if kind is RowKind.UPDATE:
            present2 = ev[p : p + nb]
            p += nb
        if td is None:
            raise w.WireError(f"row event for table id {table_id} without a table map")
        self.trx_row_events += 1
        if rflags & 1:  # STMT_END_F
            self.trx_statements += 1
        self.trx_tables.add(td.qualified)
        info = td.unchecked if rflags & _NO_FOREIGN_KEY_CHECKS else td.info
        before_dec = td.image(present)
        mark = len(out)
        if typ == w.PARTIAL_UPDATE_ROWS_EVENT:
            # The after image holds JSON diffs in a different layout; the
            # before image still gives the key, which is what probes need.
            self.stats.unsupported_events["partial_update_after_image"] = \
                self.stats.unsupported_events.get("partial_update_after_image", 0) + 1
            before, p = before_dec(ev, p)
            if p > end:
                raise w.WireError(f"row of {info.qualified} runs past the event")
            out.append(_new_row(info, kind, before if self.values else None, None))
            p = end
        else:
            p = self._row_images(ev, p, end, info, kind, before_dec,
                             td.image(present2) if kind is RowKind.UPDATE else None, out, self.values)
            if not self.values:
                # So that the C path takes this table's next rows without values.
                td.skip(present)
                if kind is RowKind.UPDATE:
                    td.skip(present2)
        n = len(out) - mark
        if p != end:
            del out[mark:]
            raise w.WireError(f"rows of {info.qualified} end at {p}, the event at {end}")
        self.trx_rows += n
        self.stats.row_changes += n
        if not td.probeable:
            self.stats.rows_unprobeable += n
        if self.trx_standalone and rflags & 1 and not self.trx_began:
            out.append(self._end(next_offset, 0, True, None))

    @staticmethod
    def _row_images(ev: bytes, p: int, end: int, info: TableInfo, kind: RowKind,
                first: ImageDecoder, second: ImageDecoder | None, out: list[Event],
                values: bool = True) -> int:
        """Decode the rows of one event; every row must consume bytes.

        Without that check a damaged column set decoding to zero bytes a row
        (a column count of 0, zero-width types) would append rows forever.
        """
        append = out.append
        mark = len(out)
        while p < end:
            start = p
            a, p = first(ev, p)
            if second is not None:
                b, p = second(ev, p)
            if not values:
                append(_new_row(info, kind, None, None))
            elif second is not None:
                append(_new_row(info, kind, a, b))
            elif kind is RowKind.INSERT:
                append(_new_row(info, kind, None, a))
            else:
                append(_new_row(info, kind, a, None))
            if p <= start:
                del out[mark:]
                raise w.WireError(f"a row of {info.qualified} decodes from {p - start} bytes")
        return p

    def _new_definition(self, body: bytes) -> _TableDecoder:
        tid_len = 4 if self.post_header.get(w.TABLE_MAP_EVENT, 8) == 6 else 6
        tm = parse_table_map(body, 0, len(body), tid_len)
        td = _TableDecoder(tm, self.resolver.resolve(tm))
        if len(self._definitions) > 10000 or self._definition_bytes > _MAX_DEFINITION_BYTES:
            self._definitions.clear()  # bounded: a schema with churned tables, or damage
            self._definition_bytes = 0
        self._definitions[body] = td
        self._definition_bytes += len(body)
        self.stats.table_definitions += 1
        return td

    def _gtid(
        self, buf: bytes, pos: int, end: int, typ: int, ts: int, sid: int, size: int,
        logpos: int, offset: int, out: list[Event],
    ) -> TransactionStart:
        if self.in_trx and not self.skipping:
            self._corrupt(offset, "transaction started before the previous one ended", out)
        self.skipping = False
        p = pos + 19
        gtid: str | None = None
        commit_us = immediate_us = None
        trx_len = last_committed = seq_no = None
        standalone = False
        if typ == w.MARIA_GTID_EVENT:
            seq, domain, gflags = _MARIA_GTID.unpack_from(buf, p)
            gtid = f"{domain}-{sid}-{seq}"
            standalone = bool(gflags & 1)
        elif typ == w.GTID_TAGGED_LOG_EVENT:
            fields = tagged_gtid(buf, p, end)
            uuid = uuid_text(bytes(fields.get(1, b"\x00" * 16)))
            tag = fields.get(3)
            gno = int(fields.get(2, 0))
            gtid = f"{uuid}:{tag}:{gno}" if tag else f"{uuid}:{gno}"
            last_committed, seq_no = fields.get(4), fields.get(5)
            immediate_us = fields.get(6)
            commit_us = fields.get(7, immediate_us)
            trx_len = fields.get(8)
        else:
            gno = w.U64.unpack_from(buf, p + 17)[0]
            if typ == w.GTID_LOG_EVENT:
                gtid = f"{uuid_text(buf[p + 1 : p + 17])}:{gno}"
            p += 25
            if p < end and buf[p] == 2:  # logical clock type code
                last_committed, seq_no = struct.unpack_from("<QQ", buf, p + 1)
                p += 17
                if p + 7 <= end:
                    immediate_us = int.from_bytes(buf[p : p + 7], "little")
                    p += 7
                    if immediate_us & (1 << 55):
                        immediate_us &= ~(1 << 55)
                        commit_us = int.from_bytes(buf[p : p + 7], "little")
                        p += 7
                    else:
                        commit_us = immediate_us
                if p < end:
                    trx_len, p = w.packed_int(buf, p)
        self._begin(offset, gtid, standalone)
        return _new_start(
            self.file, offset, self.source_file, logpos - size if logpos else None, gtid,
            commit_us / 1e6 if commit_us else float(ts), ts, sid, trx_len,
            immediate_us / 1e6 if immediate_us else None, last_committed, seq_no, standalone,
        )

    def _query(
        self, buf: bytes, pos: int, end: int, typ: int, ts: int, sid: int, size: int,
        logpos: int, offset: int, next_offset: int, out: list[Event],
    ) -> None:
        # An Intvar event names the value of the Query event after it, whatever it is.
        insert_id, self._insert_id = self._insert_id, None
        p = pos + 19
        _thread_id, exec_time, db_len, _err = struct.unpack_from("<IIBH", buf, p)
        ph = self.post_header.get(typ, 26 if typ == w.EXECUTE_LOAD_QUERY_EVENT else 13)
        status_len = w.U16.unpack_from(buf, p + 11)[0] if ph >= 13 else 0
        file_id = w.U32.unpack_from(buf, p + 13)[0] if typ == w.EXECUTE_LOAD_QUERY_EVENT else 0
        status = p + ph
        p += ph + status_len
        if p + db_len + 1 > end or buf[p + db_len] != 0:
            raise w.WireError(
                f"query event fields (status {status_len} bytes, schema {db_len}) overrun the event"
            )
        # Q_FLAGS2_CODE comes first where a server wrote the status variables: the session's
        # options the SQL thread applies the statement with.
        unchecked = status_len >= 5 and buf[status] == 0 and \
            w.U32.unpack_from(buf, status + 1)[0] & _STATEMENT_NO_FK_CHECKS != 0
        schema = buf[p : p + db_len].decode("utf-8", "replace") or None
        p += db_len + 1
        sql_bytes = buf[p:end]
        if typ == w.MARIA_QUERY_COMPRESSED_EVENT:
            sql_bytes = maria_uncompress(sql_bytes)
        if sql_bytes == b"BEGIN" or sql_bytes.startswith(b"XA START"):
            if not self.in_trx or self.skipping:
                self.skipping = False
                self._start_implicit(ts, sid, size, logpos, offset, out)
            self.trx_began = True
            return
        if sql_bytes == b"COMMIT":
            if self.in_trx:
                out.append(self._end(next_offset, logpos, True, None))
            return
        m = KEYWORD.match(sql_bytes)
        word = m.group(1).upper() if m else b""
        second = (m.group(2) or b"").upper() if m else b""
        if self.skipping:
            if word not in DML and word not in (b"ROLLBACK", b"SAVEPOINT", b"XA"):
                # A DDL is a transaction of its own: a safe place to resume.
                self._reset_transaction()
            else:
                self.stats.skipped_events += 1
                return
        if word == b"ROLLBACK" and second != b"TO":
            if self.in_trx:
                out.append(self._end(next_offset, logpos, False, None))
            return
        if word == b"XA":
            if second in (b"PREPARE", b"COMMIT", b"ROLLBACK") and self.in_trx:
                out.append(self._end(next_offset, logpos, second != b"ROLLBACK", None))
            return
        if word in (b"SAVEPOINT", b"ROLLBACK"):
            return
        implicit = not self.in_trx
        if implicit:
            self._start_implicit(ts, sid, size, logpos, offset, out)
        sql = sql_bytes.decode("utf-8", "surrogateescape")
        self.trx_statements += 1
        if typ == w.EXECUTE_LOAD_QUERY_EVENT:
            data_bytes, lines = self._load_blocks.pop(file_id, [0, 0])
            out.append(LoadData(schema, sql, exec_time, ts, data_bytes, lines))
        elif word in DML:
            step = 1 if insert_id is None else _auto_increment(buf, status, status_len)
            out.append(Statement(schema, sql, exec_time, ts, not unchecked, insert_id, step))
        else:
            tables = ddl_tables(sql, schema) if word in SCHEMA_CHANGING else ()
            out.append(Ddl(schema, sql, tables, ts))
            if word in SCHEMA_CHANGING:
                self.invalidate(tables or None)
            out.append(self._end(next_offset, logpos, True, None))
            return
        if implicit or (self.trx_standalone and not self.trx_began):
            out.append(self._end(next_offset, logpos, True, None))

    def _start_implicit(self, ts: int, sid: int, size: int, logpos: int, offset: int,
                        out: list[Event]) -> None:
        """A transaction without a GTID event (MySQL 5.x, non-GTID): BEGIN or a lone statement."""
        self._begin(offset, None, False)
        out.append(_new_start(self.file, offset, self.source_file,
                              logpos - size if logpos else None, None, float(ts), ts, sid,
                              None, None, None, None, False))

    def _end(self, offset: int, logpos: int, committed: bool, xid: int | None) -> TransactionEnd:
        if self._pinned_end is not None:
            offset = self._pinned_end
        start = self.trx_start
        self.in_trx = False
        self._tables.clear()
        return _new_end(
            self.file, offset, self.source_file, logpos or None, self.trx_gtid, committed, xid,
            self.trx_carried + (offset - start if offset >= start else 0), self.trx_rows,
            self.trx_row_events,
            self.trx_statements, frozenset(self.trx_tables),
        )

    def _other(
        self, buf: bytes, pos: int, end: int, nxt: int, typ: int, ts: int, sid: int, size: int,
        logpos: int, flags: int, base: int, out: list[Event],
    ) -> None:
        if typ == w.FORMAT_DESCRIPTION_EVENT:
            self._fde(buf, pos, nxt, sid)
        elif typ == w.ROTATE_EVENT:
            name = buf[pos + 19 + self.post_header.get(w.ROTATE_EVENT, 8) : end]
            if self.crc and len(name) > 4 and not name[-4:].isascii():
                name = name[:-4]
            # A relay log's own rotate (to the next relay file) comes from the
            # replica's server id; only the source's name a source binlog.
            if not (self.saw_foreign_fde and sid == self.own_server_id):
                self.source_file = name.decode("utf-8", "replace")
                self.source_server_id = sid
        elif typ == w.BEGIN_LOAD_QUERY_EVENT or typ == w.APPEND_BLOCK_EVENT:
            p = pos + 19
            file_id = w.U32.unpack_from(buf, p)[0]
            data = buf[p + self.post_header.get(typ, 4) : end]
            if file_id not in self._load_blocks and len(self._load_blocks) >= _MAX_LOAD_BLOCKS:
                self._load_blocks.clear()  # blocks whose EXECUTE never came (or damage)
            block = self._load_blocks.setdefault(file_id, [0, 0])
            block[0] += len(data)
            block[1] += data.count(b"\n")
        elif typ == w.XA_PREPARE_LOG_EVENT:
            if self.in_trx:
                out.append(self._end(base + nxt, logpos, True, None))
        elif typ == w.TRANSACTION_PAYLOAD_EVENT:
            self._payload(buf, pos, end, base + nxt, out)
        elif typ == w.MARIA_START_ENCRYPTION_EVENT:
            raise EncryptedRelayLogError(self.file)
        elif typ == w.INTVAR_EVENT:
            # INSERT_ID (type 2): the auto-increment value the next statement's first row
            # took on the source; LAST_INSERT_ID (1) names nothing the statement writes.
            if end - pos - 19 >= 9 and buf[pos + 19] == 2:
                self._insert_id = w.U64.unpack_from(buf, pos + 20)[0]
        elif typ in _IGNORED:
            pass
        elif typ in (w.MARIA_WRITE_ROWS_COMPRESSED_V1, w.MARIA_UPDATE_ROWS_COMPRESSED_V1,
                     w.MARIA_DELETE_ROWS_COMPRESSED_V1, w.MARIA_WRITE_ROWS_COMPRESSED,
                     w.MARIA_UPDATE_ROWS_COMPRESSED, w.MARIA_DELETE_ROWS_COMPRESSED):
            key = "mariadb_compressed_rows"
            self.stats.unsupported_events[key] = self.stats.unsupported_events.get(key, 0) + 1
        else:
            self.stats.unknown_events[typ] = self.stats.unknown_events.get(typ, 0) + 1

    def _fde(self, buf: bytes, pos: int, nxt: int, sid: int) -> None:
        p = pos + 19
        version = buf[p + 2 : p + 52].split(b"\x00", 1)[0].decode("ascii", "replace")
        header_len = buf[p + 56]
        if header_len != 19:
            raise w.WireError(f"unsupported common header length {header_len}")
        aware = checksum_aware(version)
        lens_end = nxt - 5 if aware else nxt
        lens = buf[p + 57 : min(lens_end, p + 57 + 255)]  # type codes are one byte
        self.post_header = {i + 1: n for i, n in enumerate(lens)}
        # The C path knows only today's layouts (6-byte table ids, v1/v2 rows).
        ph = self.post_header
        self._fast_layout = ph.get(w.TABLE_MAP_EVENT) == 8 and all(
            ph.get(t, 0) == (10 if t >= w.WRITE_ROWS_EVENT_V2 else 8)
            for t in (w.WRITE_ROWS_EVENT_V1, w.UPDATE_ROWS_EVENT_V1, w.DELETE_ROWS_EVENT_V1,
                      w.WRITE_ROWS_EVENT_V2, w.UPDATE_ROWS_EVENT_V2, w.DELETE_ROWS_EVENT_V2)
        )
        self.crc = aware and buf[nxt - 5] == 1
        self.server_version = version
        if self.own_server_id is None:
            self.own_server_id = sid
        elif sid != self.own_server_id:
            self.saw_foreign_fde = True

    def _payload(self, buf: bytes, pos: int, end: int, outer_end: int, out: list[Event]) -> None:
        if self._nested:
            raise w.WireError("a transaction payload inside a transaction payload")
        p = pos + 19
        size = ctype = usize = None
        while p < end:
            ftype, p = w.packed_int(buf, p)
            if ftype == 0:
                break
            flen, p = w.packed_int(buf, p)
            value, _ = w.packed_int(buf, p)
            p += flen
            if ftype == 1:
                size = value
            elif ftype == 2:
                ctype = value
            elif ftype == 3:
                usize = value
        if p > end or (size is not None and p + size > end):
            raise w.WireError("payload fields run past the event")
        data = buf[p : p + size if size is not None else end]
        if ctype == 0:
            inner = inflate_zstd(self._zstd, data, usize)
        elif ctype in (None, 255):
            inner = bytes(data)
        else:
            raise w.WireError(f"unknown payload compression type {ctype}")
        # Inner events carry no checksums and have no relay offset of their
        # own: the SQL thread applies the payload as one unit.
        saved_crc = self.crc
        self.crc = False
        self._pinned_end = outer_end
        self._nested = True
        try:
            events, stop = self.decode(inner, 0, len(inner), 0)
        finally:
            self.crc = saved_crc
            self._pinned_end = None
            self._nested = False
        out.extend(events)
        if stop != len(inner):
            raise w.WireError("compressed payload ends inside an event")

    # ----- corruption ----------------------------------------------------

    def _corrupt(self, offset: int, reason: str, out: list[Event], size: int = 0) -> None:
        st = self.stats
        st.corrupt_events += 1
        st.skipped_bytes += size
        st.last_skip = f"{self.file}:{offset}: {reason}"
        self._file_damage += 1
        self._file_skipped += size
        # Logged once per file (damage tends to come in runs); the rest is
        # counted in the stats and summed up when the file is left.
        if self._file_damage == 1:
            log.warning("corrupt event in %s at %d: %s; resuming at the next transaction",
                        self.file, offset, reason)
        else:
            log.debug("corrupt event in %s at %d: %s", self.file, offset, reason)
        out.append(CorruptEvent(self.file, offset, reason))
        self._reset_transaction()
        self._tables.clear()
        self.skipping = True

    def _corrupt_header(self, buf: bytes, pos: int, end: int, base: int, out: list[Event],
                        reason: str) -> int | None:
        """Find the next plausible transaction start after a broken header.

        Linear in the bytes searched: each candidate type keeps its own next
        hit, and a candidate is checked only as far as a small event reaches.
        """
        self._corrupt(base + pos, reason, out)
        found = None
        for p in _candidates(buf, pos + 1, end):
            _ts, typ, sid, size, _lp, _fl = w.HEADER.unpack_from(buf, p)
            if not 19 <= size <= _RESUME_EVENT_MAX or p + size > end:
                continue
            if self.source_server_id is not None and sid != self.source_server_id:
                continue
            if typ == w.QUERY_EVENT and buf.find(b"BEGIN", p + 19, p + size) < 0:
                continue
            body_end = p + size - (4 if self.crc else 0)
            if self.crc and zlib.crc32(buf[p:body_end]) != w.U32.unpack_from(buf, body_end)[0]:
                continue
            found = p
            break
        skipped = (found if found is not None else end) - pos
        self.stats.skipped_bytes += skipped
        self._file_skipped += skipped
        return found


def _candidates(buf: bytes, p: int, end: int) -> Iterator[int]:
    """Offsets from ``p`` whose type byte (header offset 4) could start a
    transaction, in order: one pass over the bytes, however many are tried."""
    for m in _START_TYPE_BYTE.finditer(buf, p + 4, end):
        at = m.start() - 4
        if at + 19 > end:
            return
        yield at
