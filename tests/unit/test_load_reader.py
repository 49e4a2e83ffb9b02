"""Cutting files into chunks at LOAD DATA's record boundaries."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from lagd.load.reader import Dialect, RecordReader, RecordTooLong, field_count, scan

CSV = Dialect(fields_terminated=b",", enclosed=b'"', optionally=True, escaped=b"\\", lines_terminated=b"\n")
TSV = Dialect()


def _chunks(data: bytes, d: Dialect, n: int, block: int, offset: int = 0) -> list[tuple[bytes, int]]:
    r = RecordReader(io.BytesIO(data), d, offset, block=block)
    out: list[tuple[bytes, int]] = []
    while True:
        sink = io.BytesIO()
        got, _ = r.take(n, sink)
        if not got:
            return out
        out.append((sink.getvalue(), got))
        assert r.offset <= len(data)


CASES: list[tuple[str, bytes, Dialect, list[bytes]]] = [
    # name, file, dialect, the records LOAD DATA sees (without terminators)
    ("plain tsv", b"1\ta\n2\tb\n3\tc\n", TSV, [b"1\ta", b"2\tb", b"3\tc"]),
    ("no final terminator", b"1\ta\n2\tb", TSV, [b"1\ta", b"2\tb"]),
    ("escaped newline", b"1\ta\\\nb\n2\tc\n", TSV, [b"1\ta\\\nb", b"2\tc"]),
    ("escaped backslash then newline", b"1\ta\\\\\n2\tc\n", TSV, [b"1\ta\\\\", b"2\tc"]),
    ("newline inside quotes", b'1,"a\nb"\n2,"c"\n', CSV, [b'1,"a\nb"', b'2,"c"']),
    ("doubled quote", b'1,"a""\nb"\n2,x\n', CSV, [b'1,"a""\nb"', b"2,x"]),
    ("escaped quote", b'1,"a\\"\nb"\n2,x\n', CSV, [b'1,"a\\"\nb"', b"2,x"]),
    ("crlf", b"1,a\r\n2,b\r\n", Dialect(b",", lines_terminated=b"\r\n"), [b"1,a", b"2,b"]),
    # An enclosure character is data unless it starts a field, or closes one before a terminator.
    ("quote inside an unenclosed field", b'1,ab"c\n2,x\n', CSV, [b'1,ab"c', b"2,x"]),
    ("lone quote inside an enclosed field", b'1,"a"b\nc",2\n3,x\n', CSV, [b'1,"a"b\nc",2', b"3,x"]),
    ("empty enclosed fields", b'"","",x\n"",\n', CSV, [b'"","",x', b'"",']),
    ("multi-byte field terminator", b'1||"a||\nb"||c\n2||d\n', Dialect(b"||", b'"'),
     [b'1||"a||\nb"||c', b"2||d"]),
]


@pytest.mark.parametrize(("name", "data", "d", "records"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_records(name: str, data: bytes, d: Dialect, records: list[bytes], block: int, n: int) -> None:
    chunks = _chunks(data, d, n, block)
    joined = b"".join(c for c, _ in chunks)
    term = d.lines_terminated
    assert joined == b"".join(r + term for r in records)
    assert sum(k for _, k in chunks) == len(records)
    assert all(k == n for _, k in chunks[:-1])


def test_offsets_resume_exactly() -> None:
    data = b"".join(b'%d,"x\ny",%d\n' % (i, i) for i in range(50)) + b"50,z,50"
    r = RecordReader(io.BytesIO(data), CSV, block=5)
    seen = b""
    while True:
        before = r.offset
        sink = io.BytesIO()
        got, used = r.take(7, sink)
        if not got:
            break
        assert r.offset == before + used
        # A new reader from the recorded offset continues the same records.
        again = io.BytesIO()
        RecordReader(io.BytesIO(data), CSV, before, block=3).take(7, again)
        assert again.getvalue() == sink.getvalue()
        seen += sink.getvalue()
    assert r.offset == len(data)
    assert seen == data + b"\n"


def test_skip_then_take() -> None:
    r = RecordReader(io.BytesIO(b"h1\th2\n1\ta\n2\tb\n"), TSV)
    assert r.take(1, None) == (1, 6)
    sink = io.BytesIO()
    assert r.take(10, sink) == (2, 8) and sink.getvalue() == b"1\ta\n2\tb\n"


def test_unclosed_enclosure_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lagd.load.reader.MAX_RECORD", 100)
    data = b'1,"never closed\n' + b"2,x\n" * 100
    with pytest.raises(RecordTooLong, match="not closed"):
        RecordReader(io.BytesIO(data), CSV, block=16).take(1000, io.BytesIO())


@pytest.mark.parametrize(("record", "d", "n"), [
    (b"1\ta\tb", TSV, 3), (b"1", TSV, 1), (b"", TSV, 1), (b'1,"a,b",c', CSV, 3),
    (b"1,a\\,b,c", CSV, 3), (b'1,"a"",b"', CSV, 2), (b'1,ab"c,d', CSV, 3), (b'"a"b,c",d', CSV, 2),
    (b'1,"never closed,x', CSV, 2),
])
def test_field_count(record: bytes, d: Dialect, n: int) -> None:
    assert field_count(record, d) == n


def test_scan(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"a\r\nb\r\nc")
    facts = scan(p, b"\r\n")
    assert (facts.size, facts.lines) == (7, 3) and len(facts.sha256) == 64
    p.write_bytes(b"a\nb\n")
    assert scan(p, b"\n").lines == 2
