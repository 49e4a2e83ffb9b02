"""The C accelerator and the pure-Python path give identical events.

Run on every real log file and on seeded random damage to them (which also
proves the reader never raises on what is in a log: damage becomes
CorruptEvent values). Without a compiled accelerator these tests skip; the
rest of the suite then runs on the pure-Python path, and scripts/test runs
the unit tests once more with LAGD_PURE_PYTHON=1 so both paths are covered.
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from lagd.relaylog import EventDecoder, RowChange, TableMapResolver
from lagd.relaylog import _columns as c
from lagd.relaylog._construct import ACCELERATED, constructor
from lagd.relaylog._rowcodec import skip_layout, value_layout

FIXTURES = Path(__file__).parent.parent / "fixtures" / "binlogs"
FILES = sorted(p for p in FIXTURES.iterdir() if not p.name.endswith(".md"))

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="C accelerator not built")


def decode(buf: bytes, accelerated: bool, verify: bool, chunk: int | None = None, values: bool = True,
           warm: bool = False):
    """``warm``: read the log once before, so that the C path knows every table and row
    image it can take, and takes more than a table's second transaction."""
    dec = EventDecoder(TableMapResolver(decode_all=False), verify_checksums=verify, values=values)
    dec.accelerated = accelerated
    if warm:
        dec.start_file("relay-bin.000001")
        dec.decode(buf, 4, len(buf), 0)
        dec.stats = type(dec.stats)()
    dec.start_file("relay-bin.000001")
    if chunk is None:
        events, used = dec.decode(buf, 4, len(buf), 0)
        return events, used, dec.stats
    events, pos = [], 4
    while True:
        part, used = dec.decode(buf[:min(len(buf), pos + chunk)], pos, min(len(buf), pos + chunk), 0)
        events.extend(part)
        if used == pos:
            if pos + chunk >= len(buf):
                return events, used, dec.stats
            chunk *= 2  # an event larger than the window
            continue
        pos = used


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("verify", [True, False])
def test_same_events_on_real_files(path, verify):
    buf = path.read_bytes()
    if buf[:4] != b"\xfebin" or len(buf) < 23:
        pytest.skip("not a whole log")
    fast = decode(buf, True, verify)
    slow = decode(buf, False, verify)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    for field in ("events", "transactions", "row_changes", "rows_unprobeable", "corrupt_events"):
        assert getattr(fast[2], field) == getattr(slow[2], field), field


def without_images(events):
    return [replace(e, before=None, after=None) if isinstance(e, RowChange) else e for e in events]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_rows_without_values_are_the_same_events_without_images(path):
    """The look-ahead tail's reader (values=False): the C path walks the rows by their
    layouts, the Python path decodes them; both give the same events as a reader with
    values, less the images."""
    buf = path.read_bytes()
    if buf[:4] != b"\xfebin" or len(buf) < 23:
        pytest.skip("not a whole log")
    fast = decode(buf, True, True, values=False, warm=True)
    slow = decode(buf, False, True, values=False, warm=True)
    full = decode(buf, True, True, warm=True)
    assert fast[0] == slow[0] == without_images(full[0])
    assert fast[1] == slow[1] == full[1]
    for field in ("events", "transactions", "row_changes", "rows_unprobeable", "corrupt_events"):
        assert getattr(fast[2], field) == getattr(slow[2], field) == getattr(full[2], field), field


@pytest.mark.parametrize("seed", range(400))
def test_same_events_under_random_damage(seed):
    rng = random.Random(seed)
    # Damage must not turn a log into an encrypted one: that file raises by design.
    candidates = [p for p in FILES if p.stat().st_size > 400 and p.read_bytes()[:4] == b"\xfebin"]
    buf = bytearray(rng.choice(candidates).read_bytes())
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(4, len(buf))
        buf[i] = rng.randrange(256)
    data = bytes(buf)
    verify = bool(seed % 2)
    fast = decode(data, True, verify)
    slow = decode(data, False, verify)
    assert fast[0] == slow[0]
    assert fast[2].corrupt_events == slow[2].corrupt_events
    # Without values the C path reads row lengths itself: damage must end the same way.
    fast = decode(data, True, verify, values=False, warm=True)
    slow = decode(data, False, verify, values=False, warm=True)
    assert fast[0] == slow[0]
    assert fast[2].corrupt_events == slow[2].corrupt_events


def test_chunked_reading_gives_the_same_events():
    buf = (FIXTURES / "mariadb-bin.000001").read_bytes()
    whole = decode(buf, True, True)[0]
    for chunk in (40, 97, 300):
        assert decode(buf, True, True, chunk)[0] == whole
        assert decode(buf, False, True, chunk)[0] == whole


# ----- statement-based transactions, built event by event ---------------------------

def _event(typ: int, body: bytes, crc: bool, ts: int = 1_700_000_000) -> bytes:
    size = 19 + len(body) + (4 if crc else 0)
    raw = struct.pack("<IBIIIH", ts, typ, 1, size, 0, 0) + body
    return raw + struct.pack("<I", zlib.crc32(raw)) if crc else raw


def _gtid(seq: int, crc: bool) -> bytes:
    return _event(162, struct.pack("<QIB", seq, 0, 0) + bytes(6), crc)


def _query(sql: bytes, schema: bytes, crc: bool, status: bytes = b"\x00\x00\x00\x00\x00") -> bytes:
    """``status``: flags2 (code 0) by default, a real status block to skip."""
    head = struct.pack("<IIBHH", 7, 3, len(schema), 0, len(status))
    return _event(2, head + status + schema + b"\x00" + sql, crc)


def _intvar(kind: int, value: int, crc: bool) -> bytes:
    return _event(5, struct.pack("<BQ", kind, value), crc)


def _xid(n: int, crc: bool) -> bytes:
    return _event(16, struct.pack("<Q", n), crc)


STATEMENTS = [  # (sql, schema): what the C path takes, and what it leaves to Python
    (b"UPDATE t SET c = 'x' WHERE id = 2", b"db"),
    (b"delete from t where id = 3", b"db"),
    (b"INSERT INTO t VALUES (1)", b""),  # no default schema
    (b"REPLACE INTO t VALUES (1)", b"db"),
    (b"UPDATE t SET c = '\xff\xfe' WHERE id = 4", b"db"),  # not UTF-8: surrogate escapes
    (b"Update t SET c = 1", b"d\xffb"),  # a schema name not UTF-8
    (b"  UPDATE t SET c = 1", b"db"),  # leading space: the Python loop's
    (b"/* hint */ DELETE FROM t", b"db"),  # a comment first: the Python loop's
    (b"UPDATEX t", b"db"),  # not a DML verb: a DDL-like statement to Python
    (b"CALL p()", b"db"),  # DML, but not one the C path takes
    (b"UPDATE", b"db"),  # the verb alone
]


def _statement_log() -> tuple[bytes, bool]:
    """The fixture's header (its FDE decides checksums), then one transaction per statement,
    one with BEGIN and two statements, and one the C path must give back (a standalone GTID)."""
    prefix = LOG_MARIADB[:_first_of(LOG_MARIADB, 162)]
    dec = EventDecoder(TableMapResolver())
    dec.start_file("relay-bin.000001")
    dec.decode(prefix, 4, len(prefix), 0)
    crc = dec.crc
    body = b"".join(_gtid(i + 1, crc) + _query(sql, schema, crc) + _xid(i, crc)
                    for i, (sql, schema) in enumerate(STATEMENTS))
    body += (_gtid(100, crc) + _query(b"BEGIN", b"db", crc) + _query(b"UPDATE t SET c = 1", b"db", crc)
             + _query(b"DELETE FROM t WHERE id = 9", b"db", crc) + _xid(100, crc))
    # INSERTs into an AUTO_INCREMENT table: an Intvar INSERT_ID before each; one with
    # auto_increment_increment 3 (flags2, sql_mode, catalog "std", Q_AUTO_INCREMENT);
    # a LAST_INSERT_ID alone; an INSERT_ID before BEGIN, which names nothing after it.
    auto3 = b"\x00" + bytes(4) + b"\x01" + bytes(8) + b"\x06\x03std" + b"\x03\x03\x00\x01\x00"
    body += _gtid(101, crc) + _intvar(2, 41, crc) + _query(AUTO_INSERTS[0], b"db", crc) + _xid(101, crc)
    body += (_gtid(102, crc) + _intvar(2, 2**40, crc) + _query(AUTO_INSERTS[1], b"db", crc, auto3)
             + _xid(102, crc))
    body += _gtid(103, crc) + _intvar(1, 7, crc) + _query(AUTO_INSERTS[2], b"db", crc) + _xid(103, crc)
    body += (_gtid(104, crc) + _intvar(2, 9, crc) + _query(b"BEGIN", b"db", crc)
             + _query(AUTO_INSERTS[3], b"db", crc) + _xid(104, crc))
    return prefix + body, crc


AUTO_INSERTS = [b"INSERT INTO ev (u) VALUES (1)", b"INSERT INTO ev (u) VALUES (1), (2)",
                b"INSERT INTO ev (u) VALUES (3)", b"INSERT INTO ev (u) VALUES (4)"]


LOG_MARIADB = (FIXTURES / "mariadb-bin.000001").read_bytes()


def _first_of(buf: bytes, typ: int) -> int:
    pos = 4
    while buf[pos + 4] != typ:
        pos += int.from_bytes(buf[pos + 9 : pos + 13], "little")
    return pos


@pytest.mark.parametrize("verify", [True, False])
def test_statement_transactions_give_the_same_events_on_both_paths(verify):
    buf, _crc = _statement_log()
    fast = decode(buf, True, verify)
    slow = decode(buf, False, verify)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1] == len(buf)
    for field in ("events", "transactions", "corrupt_events"):
        assert getattr(fast[2], field) == getattr(slow[2], field), field
    kinds = [type(e).__name__ for e in fast[0]]
    assert kinds.count("Statement") == 2 + len(AUTO_INSERTS) + sum(1 for sql, _ in STATEMENTS
                                                                   if sql != b"UPDATEX t")
    auto = [(e.insert_id, e.auto_increment) for e in fast[0]
            if type(e).__name__ == "Statement" and e.sql.startswith("INSERT INTO ev")]
    assert auto == [(41, 1), (2**40, 3), (None, 1), (None, 1)]


def test_plain_statement_transactions_are_taken_by_the_c_path(monkeypatch):
    buf, _crc = _statement_log()
    seen: list[bytes] = []
    real = EventDecoder._query

    def spy(self, b, pos, *rest):  # the Python loop's Query handler
        seen.append(b[pos : pos + int.from_bytes(b[pos + 9 : pos + 13], "little")])
        return real(self, b, pos, *rest)

    monkeypatch.setattr(EventDecoder, "_query", spy)
    decode(buf, True, True)
    by_python = b"".join(seen)
    for sql, _schema in STATEMENTS[:6]:
        assert sql not in by_python
    for sql in AUTO_INSERTS:  # an Intvar event no longer sends a transaction to Python
        assert sql not in by_python
    for sql, _schema in STATEMENTS[6:]:
        assert sql in by_python


# ----- the pieces: skip layouts and constructors ---------------------------------------

@pytest.mark.parametrize(("col_type", "meta", "nullable", "want"), [
    (c.T_LONG, 0, False, b"\x00\x04"),  # INT NOT NULL: 4 bytes
    (c.T_LONG, 0, True, b"\x01\x04"),  # nullable: its NULL bit counts
    (c.T_VARCHAR, 200, False, b"\x00\xf1"),  # VARCHAR(200) in bytes: a 1-byte length
    (c.T_VARCHAR, 1000, True, b"\x01\xf2"),  # longer: 2 bytes
    (c.T_BLOB, 4, False, b"\x00\xf4"),  # LONGBLOB: a 4-byte length
    (c.T_NEWDECIMAL, (10 << 8) | 2, False, b"\x00\x05"),  # DECIMAL(10,2)
])
def test_skip_layout_gives_each_columns_width_or_length_prefix(col_type, meta, nullable, want):
    tm = SimpleNamespace(types=[col_type], metas=[meta], nullable=[nullable])
    assert skip_layout(tm, (0,)) == want  # type: ignore[arg-type]


def test_skip_layout_lists_the_logged_columns_in_order():
    tm = SimpleNamespace(types=[c.T_LONG, c.T_VARCHAR, c.T_LONG], metas=[0, 30, 0],
                         nullable=[False, True, False])
    assert skip_layout(tm, (0, 1, 2)) == b"\x00\x04\x01\xf1\x00\x04"
    assert skip_layout(tm, (1,)) == b"\x01\xf1"  # a MINIMAL image logs fewer


@dataclass(frozen=True, slots=True)
class Slotted:
    a: object
    b: object


@dataclass(frozen=True)
class Unslotted:  # its fields live in the instance's __dict__: set by name
    a: object
    b: object


@pytest.mark.parametrize("cls", [Slotted, Unslotted])
def test_constructors_build_the_objects_the_class_builds(cls):
    make = constructor(cls)
    assert make(1, "x") == cls(1, "x")
    assert make([1], None).a == [1]
    with pytest.raises(TypeError):
        make(1)


def _layout_table(types, metas, nullable, needed, unsigned=()):
    tm = SimpleNamespace(types=types, metas=metas, nullable=nullable, real_type=lambda col: types[col])
    cols = tuple(SimpleNamespace(unsigned=i in unsigned) for i in range(len(types)))
    return tm, SimpleNamespace(needed=needed, columns=cols)


@pytest.mark.parametrize(("types", "metas", "nullable", "needed", "unsigned", "present", "want"), [
    # id INT NOT NULL (wanted, slot 0), c CHAR(120) skipped by its 1-byte length
    ([c.T_LONG, c.T_STRING], [0, (c.T_STRING << 8) | 120], [False, False], (0,), (), (0, 1),
     b"\x01" b"\x02\x04\x00" b"\x00\xf1\x00"),
    # k BIGINT UNSIGNED NULL in slot 0, TINYINT in slot 1
    ([c.T_LONGLONG, c.T_TINY], [0, 0], [True, False], (0, 1), (0,), (0, 1),
     b"\x02" b"\x07\x08\x00" b"\x02\x01\x01"),
    # MEDIUMINT: 3 bytes; a MINIMAL image logs only the key
    ([c.T_INT24, c.T_VARCHAR], [0, 40], [False, True], (0,), (), (0,), b"\x01" b"\x02\x03\x00"),
    # a needed string key: the generated function's
    ([c.T_VARCHAR, c.T_LONG], [40, 0], [False, False], (0,), (), (0, 1), None),
    # a needed DECIMAL: the generated function's
    ([c.T_NEWDECIMAL], [(10 << 8) | 2], [False], (0,), (), (0,), None),
])
def test_value_layout_only_where_every_needed_column_is_an_integer(
        types, metas, nullable, needed, unsigned, present, want):
    tm, info = _layout_table(types, metas, nullable, needed, unsigned)
    assert value_layout(tm, info, present) == want  # type: ignore[arg-type]
