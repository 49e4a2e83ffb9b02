"""The file as records, streamed: cut at record boundaries the way LOAD DATA reads them.

A chunk must end where LOAD DATA would end a row, or a row is split in two
(or two glued together). A line terminator does not end a record when it is
escaped (preceded by an odd run of the escape character) or inside an
enclosed field that has not been closed yet. Blocks of the file are split on the terminator in C
(``bytes.split``); only records whose block holds an escape or enclosure
character are checked in Python, and only when the dialect has one.

With an enclosure character, each such record is matched against a regular
expression of LOAD DATA's field rules (:func:`_field_re`): a field is
enclosed only when it starts with the enclosure character, and only an
enclosure character followed by a terminator closes it.

The reader never holds more than one block plus one chunk's slice of it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

__all__ = ["BLOCK", "Dialect", "FileFacts", "RecordReader", "RecordTooLong", "field_count", "scan"]

BLOCK = 1 << 20
MAX_RECORD = 64 << 20


class RecordTooLong(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Dialect:
    """LOAD DATA's FIELDS/LINES options as bytes; the defaults are LOAD DATA's own (TSV)."""

    fields_terminated: bytes = b"\t"
    enclosed: bytes = b""
    optionally: bool = False  # OPTIONALLY ENCLOSED BY
    escaped: bytes = b"\\"
    lines_terminated: bytes = b"\n"
    ignore_lines: int = 0

    def __post_init__(self) -> None:
        if not self.lines_terminated:
            raise ValueError("LINES TERMINATED BY must not be empty")
        if not self.fields_terminated:
            raise ValueError("FIELDS TERMINATED BY must not be empty")
        if len(self.enclosed) > 1 or len(self.escaped) > 1:
            raise ValueError("ENCLOSED BY and ESCAPED BY take one character (or none)")
        if self.ignore_lines < 0:
            raise ValueError("IGNORE n LINES needs n >= 0")


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True, slots=True)
class FileFacts:
    size: int
    sha256: str
    lines: int  # line terminators, plus one for an unterminated last line: records, at most


def scan(path: Path, terminator: bytes, on_block: Callable[[int], None] | None = None) -> FileFacts:
    """Size, SHA-256 and line count in one pass of bounded memory."""
    h = hashlib.sha256()
    size = lines = 0
    tail = b""
    last = b""
    keep = len(terminator) - 1
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
            size += len(block)
            data = tail + block
            lines += data.count(terminator)
            # A multi-byte terminator may straddle two blocks.
            tail = data[len(data) - keep:] if keep and not data.endswith(terminator) else b""
            last = data
            if on_block is not None:
                on_block(size)
    if size and not last.endswith(terminator):
        lines += 1
    return FileFacts(size, h.hexdigest(), lines)


def _field_re(d: Dialect) -> bytes:
    """One field as LOAD DATA reads it, as a regular expression (possessive: no backtracking).

    A field that starts with the enclosure character is enclosed: it ends at
    an enclosure character followed by a field terminator or the end of the
    record; any other enclosure character in it is data (doubled or not). An
    escape character takes the byte after it, terminators included.
    """
    ft = re.escape(d.fields_terminated)
    esc = re.escape(d.escaped) + b"." if d.escaped else None
    not_esc = b"(?!" + re.escape(d.escaped) + b")" if d.escaped else b""
    plain = (esc + b"|" if esc else b"") + b"(?!" + ft + b")" + not_esc + b"."
    if not d.enclosed:
        return b"(?:" + plain + b")*+"
    q = re.escape(d.enclosed)
    # A doubled enclosure character is one literal one (checked first, as the server does).
    inner = ((esc + b"|" if esc else b"") + q + q + b"|" + q + b"(?!" + ft + rb"|\Z)|(?!" + q + b")"
             + not_esc + b".")
    enclosed = q + b"(?:" + inner + b")*+" + q + b"(?=" + ft + rb"|\Z)"
    return b"(?:" + enclosed + b"|(?!" + q + b")(?:" + plain + b")*+)"


class _Check:
    """Whether a piece ending before a line terminator is a whole record."""

    def __init__(self, d: Dialect) -> None:
        self.esc = d.escaped
        self.enc = d.enclosed
        self.pairs = re.compile(re.escape(d.escaped) + b".", re.DOTALL) if d.escaped else None
        field = _field_re(d)
        ft = re.escape(d.fields_terminated)
        self.record = re.compile(field + b"(?:" + ft + field + b")*+", re.DOTALL) if d.enclosed else None

    def whole(self, rec: bytes) -> bool:
        if self.record is not None:
            return self.record.fullmatch(rec) is not None
        if self.pairs is not None and self.esc in rec:
            # The terminator after a lone trailing escape character is escaped.
            return not self.pairs.sub(b"", rec).endswith(self.esc)
        return True

    def special(self, data: bytes) -> bool:
        return bool((self.esc and self.esc in data) or (self.enc and self.enc in data))


class RecordReader:
    """Records from byte ``offset`` on; :meth:`take` copies the next n records to a sink.

    ``offset`` always points at the start of the next record not yet taken,
    so it is the resume point to record with a committed chunk.
    """

    def __init__(self, f: BinaryIO, dialect: Dialect, offset: int = 0, block: int = BLOCK) -> None:
        self._f = f
        self._term = dialect.lines_terminated
        self._check = _Check(dialect)
        self._block = block
        self._records: list[bytes] = []
        self._i = 0
        self._carry = b""
        self._eof = False
        self._tail = False  # the last record of _records has no terminator in the file
        f.seek(offset)
        self.offset = offset

    def _refill(self) -> bool:
        while not self._eof:
            data = self._f.read(self._block)
            if not data:
                self._eof = True
                raw, pieces, self._carry = self._carry, ([self._carry] if self._carry else []), b""
                self._tail = bool(pieces)
            else:
                raw = self._carry + data
                pieces = raw.split(self._term)
                self._carry = pieces.pop()
            if self._check.special(raw):
                pieces = self._merge(pieces)
            if len(self._carry) > MAX_RECORD:
                raise RecordTooLong(
                    f"a record at byte {self.offset} runs past {MAX_RECORD // 2**20} MiB without ending: "
                    "an enclosure character is not closed, or the line terminator is not the file's")
            if pieces:
                self._records, self._i = pieces, 0
                return True
        return False

    def at_end(self) -> bool:
        """No record left (reads ahead one block when the current one is used up)."""
        return self._i >= len(self._records) and not self._refill()

    def _merge(self, pieces: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        acc: bytes | None = None
        for p in pieces:
            cur = p if acc is None else acc + self._term + p
            if self._check.whole(cur):
                out.append(cur)
                acc = None
            else:
                acc = cur
        if acc is not None:
            if self._eof:
                out.append(acc)  # an unclosed enclosure at the end: LOAD DATA judges it
            else:
                self._carry = acc + self._term + self._carry
        return out

    def take(self, n: int, sink: _Sink | None) -> tuple[int, int]:
        """Copy up to ``n`` records (each with its terminator) to ``sink`` (None: skip them).

        Returns (records, bytes of the file consumed); fewer records only at the end.
        """
        got = used = 0
        while got < n:
            if self._i >= len(self._records) and not self._refill():
                break
            k = min(n - got, len(self._records) - self._i)
            part = self._records[self._i:self._i + k]
            self._i += k
            body = self._term.join(part) + self._term
            if sink is not None:
                sink.write(body)
            consumed = len(body)
            if self._tail and self._eof and self._i == len(self._records):
                consumed -= len(self._term)  # the file's last record had none
            used += consumed
            got += k
        self.offset += used
        return got, used


def field_count(record: bytes, d: Dialect) -> int:
    """Fields in one record (without its terminator), counting as LOAD DATA splits them."""
    field = re.compile(_field_re(d), re.DOTALL)
    ft = d.fields_terminated
    n = pos = 0
    while True:
        m = field.match(record, pos)
        n += 1
        if m is None:
            return n  # an enclosed field never closed: the rest is that one field
        pos = m.end()
        if not record.startswith(ft, pos):
            return n
        pos += len(ft)
