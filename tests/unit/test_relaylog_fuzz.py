"""Seeded fuzzing of the reader on damaged real logs.

Every fixture log, with and without CRC32 checksums, is damaged by bit flips,
byte overwrites, truncation, splices of other logs' bytes and the issue's own
case (a WRITE_ROWS column count set to 0 without checksums). Each case must
end with events or a RelayLogError, within a time limit, with no more events
than bytes and bounded memory, and the C accelerator and pure Python must
agree where both run.

The fixed seed set runs in the unit suite in a few seconds. A longer run is
opt-in: ``LAGD_FUZZ_CASES=20000 pytest -q tests/unit/test_relaylog_fuzz.py -k long``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import tracemalloc
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from lagd.relaylog import (
    CorruptEvent,
    EventDecoder,
    LogFiles,
    ReaderStats,
    RelayLogError,
    RelayLogReader,
    TableMapResolver,
)
from lagd.relaylog._construct import ACCELERATED

FIXTURES = Path(__file__).parent.parent / "fixtures" / "binlogs"
FDE = 15
ROWS_TYPES = {23: False, 24: False, 25: False, 30: True, 31: True, 32: True}
CASE_SECONDS = 20  # far above any case's time; only a hang reaches it


def _events(buf: bytes) -> list[tuple[int, int]]:
    """(offset, size) of the events of an undamaged log."""
    out, pos = [], 4
    while pos + 19 <= len(buf):
        size = int.from_bytes(buf[pos + 9 : pos + 13], "little")
        if size < 19 or pos + size > len(buf):
            break
        out.append((pos, size))
        pos += size
    return out


def _crc_on(buf: bytes) -> bool | None:
    """The checksum setting of a log's first FDE; None if it predates them."""
    for pos, size in _events(buf):
        if buf[pos + 4] == FDE:
            version = buf[pos + 21 : pos + 71].split(b"\0", 1)[0]
            if version.startswith((b"5.0", b"5.1", b"4.")):
                return None
            return buf[pos + size - 5] == 1
    return None


def with_checksums(buf: bytes, on: bool) -> bytes:
    """The same log with CRC32 checksums switched on or off."""
    was = _crc_on(buf)
    if was is None or was == on:
        return buf
    out = bytearray(buf[:4])
    for pos, size in _events(buf):
        ev = bytearray(buf[pos : pos + size])
        if ev[4] == FDE:
            ev[-5] = 1 if on else 0  # the FDE keeps its checksum field either way
            ev[-4:] = zlib.crc32(bytes(ev[:-4])).to_bytes(4, "little")
        elif on:
            ev[9:13] = (len(ev) + 4).to_bytes(4, "little")  # the checksum covers the size
            ev += zlib.crc32(bytes(ev)).to_bytes(4, "little")
        else:
            del ev[-4:]
            ev[9:13] = len(ev).to_bytes(4, "little")
        out += ev
    return bytes(out)


def _logs() -> list[tuple[str, bytes]]:
    logs = []
    for p in sorted(FIXTURES.iterdir()):
        buf = p.read_bytes()
        if buf[:4] != b"\xfebin" or len(buf) < 200 or p.name.startswith("corrupt"):
            continue
        logs.append((p.name, buf))
        flipped = with_checksums(buf, not _crc_on(buf))
        if flipped is not buf:
            logs.append((f"{p.name}+{'crc' if _crc_on(flipped) else 'nocrc'}", flipped))
    return logs


LOGS = _logs()


def zero_column_count(buf: bytes, nth: int = 0) -> bytes | None:
    """Issue 13's damage: the column count of a row event becomes 0."""
    rows = [(p, s) for p, s in _events(buf) if buf[p + 4] in ROWS_TYPES]
    if not rows:
        return None
    pos, _ = rows[nth % len(rows)]
    at = pos + 19 + 8
    if ROWS_TYPES[buf[pos + 4]]:
        at += int.from_bytes(buf[at : at + 2], "little")
    out = bytearray(buf)
    out[at] = 0
    return bytes(out)


def damage(rng: random.Random, buf: bytes) -> tuple[str, bytes]:
    out = bytearray(buf)
    kind = rng.choice(("flip", "flip", "overwrite", "truncate", "splice", "zero_columns", "mixed"))
    if kind == "zero_columns":
        zeroed = zero_column_count(buf, rng.randrange(16))
        if zeroed is not None:
            return kind, zeroed
        kind = "flip"
    if kind in ("flip", "mixed"):
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(4, len(out))
            out[i] ^= 1 << rng.randrange(8)
    if kind in ("overwrite", "mixed"):
        i = rng.randrange(4, len(out))
        n = rng.randint(1, 8)
        fill = rng.choice((b"\x00" * n, b"\xff" * n, rng.randbytes(n)))
        out[i : i + n] = fill
    if kind in ("splice", "mixed"):
        _, donor = rng.choice(LOGS)
        a = rng.randrange(4, len(donor))
        piece = donor[a : a + rng.randint(1, 400)]
        i = rng.randrange(4, len(out))
        if rng.random() < 0.5:
            out[i:i] = piece
        else:
            out[i : i + len(piece)] = piece
    if kind == "truncate":
        del out[rng.randrange(4, len(out)) :]
    return kind, bytes(out)


@dataclass
class Outcome:
    events: list[object]
    error: str | None
    stats: ReaderStats
    reads: int


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run(path: Path, data: bytes, accelerated: bool, verify: bool) -> Outcome:
    path.write_bytes(data)
    reader = RelayLogReader(LogFiles.of(path), resolver=TableMapResolver(decode_all=False),
                            verify_checksums=verify, chunk_size=1 << 12)
    reader.decoder.accelerated = accelerated
    events: list[object] = []
    error = None
    reads = 0
    try:
        with time_limit(CASE_SECONDS):
            while True:
                batch = reader.read(1 << 12)
                reads += 1
                events.extend(batch)
                assert reads <= len(data) + 2, "reads without progress"
                if not batch and reader.at_tail:
                    break
    except RelayLogError as exc:
        error = type(exc).__name__
    finally:
        reader.close()
    return Outcome(events, error, reader.stats, reads)


def run_live(root: Path, data: bytes, clean: bytes, verify: bool) -> tuple[Outcome, Outcome]:
    """The damaged log rotated away from, then a clean one being written:
    the reader must finish the damaged file and then read the clean one whole."""
    for n, content in ((1, data), (2, clean)):
        (root / f"live-bin.00000{n}").write_bytes(content)
    index = root / "live-bin.index"
    index.write_text("./live-bin.000001\n./live-bin.000002\n")
    reader = RelayLogReader(LogFiles(index), resolver=TableMapResolver(decode_all=False),
                            verify_checksums=verify, chunk_size=1 << 12)
    events: list[object] = []
    error = None
    try:
        with time_limit(CASE_SECONDS):
            for _ in range(len(data) + len(clean) + 2):
                events += reader.read(1 << 12)
                if reader.at_tail:
                    break
            else:
                raise AssertionError("reads without progress")
    except RelayLogError as exc:
        error = type(exc).__name__
    finally:
        reader.close()
    alone = run(root / "alone-bin.000002", clean, False, verify)
    return Outcome(events, error, reader.stats, 0), alone


def check_case(tmp_path: Path, seed: int, *, memory: bool) -> Outcome:
    rng = random.Random(seed)
    name, clean = rng.choice(LOGS)
    kind, data = damage(rng, clean)
    verify = rng.random() < 0.7
    where = f"seed {seed}: {kind} of {name}, verify={verify}"
    if memory:
        tracemalloc.start()
    try:
        slow = run(tmp_path / "relay-bin.000001", data, False, verify)
        if memory:
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        if memory:
            tracemalloc.stop()
    assert len(slow.events) <= len(data), where
    if memory:
        # A few hundred bytes of objects per byte would be a leak or a
        # runaway loop; the damaged log itself is a few KiB.
        assert peak < 4 * (1 << 20) + 400 * len(data), f"{where}: peak {peak}"
    for e in slow.events:
        if type(e) is CorruptEvent:
            assert 0 <= e.relay_offset <= len(data), where
    if ACCELERATED:
        fast = run(tmp_path / "relay-bin.000001", data, True, verify)
        assert fast.error == slow.error, where
        assert fast.events == slow.events, where
        for field in ("events", "transactions", "row_changes", "corrupt_events",
                      "skipped_events", "skipped_bytes"):
            assert getattr(fast.stats, field) == getattr(slow.stats, field), f"{where}: {field}"
    if seed % 5 == 0 and slow.error is None:
        live, alone = run_live(tmp_path, data, clean, verify)
        assert live.error is None, where
        tail = live.events[len(live.events) - len(alone.events):]
        assert [_plain(e) for e in tail] == [_plain(e) for e in alone.events], \
            f"{where}: the next file"
    return slow


def _plain(event: object) -> object:
    """An event without the names of the files it came from (relay and
    source: the source file name is stream state carried across files)."""
    if hasattr(event, "relay_file"):
        event = dataclasses.replace(event, relay_file="")  # type: ignore[type-var]
    if hasattr(event, "source_file"):
        event = dataclasses.replace(event, source_file=None)  # type: ignore[type-var]
    return event


def test_the_fixture_set_has_both_checksum_settings():
    settings = {_crc_on(buf) for _, buf in LOGS}
    assert {True, False} <= settings


@pytest.mark.parametrize("crc", [True, False])
def test_checksum_toggle_keeps_the_events(crc, tmp_path):
    for name, buf in LOGS:
        if _crc_on(buf) is None:
            continue
        a = run(tmp_path / "a.000001", buf, False, True)
        b = run(tmp_path / "b.000001", with_checksums(buf, crc), False, True)
        assert [type(e) for e in a.events] == [type(e) for e in b.events], name
        assert a.stats.corrupt_events == b.stats.corrupt_events, name


@pytest.mark.parametrize("name", sorted({n for n, b in LOGS if zero_column_count(b) is not None}))
def test_zero_column_count_without_checksums_ends(name, tmp_path):
    """Issue 13, item 4: this looped forever and grew to 1.7 GB."""
    buf = with_checksums(dict(LOGS)[name], False)
    data = zero_column_count(buf)
    assert data is not None
    out = check_case_data(tmp_path, data, verify=True)
    assert out.error is None
    assert out.stats.corrupt_events >= 1
    assert out.stats.last_skip is not None and "columns" in out.stats.last_skip


def check_case_data(tmp_path: Path, data: bytes, verify: bool) -> Outcome:
    slow = run(tmp_path / "relay-bin.000001", data, False, verify)
    assert len(slow.events) <= len(data)
    if ACCELERATED:
        fast = run(tmp_path / "relay-bin.000001", data, True, verify)
        assert fast.events == slow.events and fast.error == slow.error
    return slow


@pytest.mark.parametrize("block", range(12))
def test_seeded_damage(block, tmp_path):
    for seed in range(block * 50, block * 50 + 50):
        check_case(tmp_path, seed, memory=seed % 10 == 0)


@pytest.mark.skipif(not os.environ.get("LAGD_FUZZ_CASES"), reason="set LAGD_FUZZ_CASES=N to run")
def test_long_fuzz_run(tmp_path, capsys):
    n = int(os.environ["LAGD_FUZZ_CASES"])
    start = int(os.environ.get("LAGD_FUZZ_SEED", "100000"))
    errors: dict[str, int] = {}
    corrupt = damaged_cases = 0
    for seed in range(start, start + n):
        out = check_case(tmp_path, seed, memory=seed % 50 == 0)
        if out.error:
            errors[out.error] = errors.get(out.error, 0) + 1
        corrupt += out.stats.corrupt_events
        damaged_cases += bool(out.stats.corrupt_events or out.error)
    with capsys.disabled():
        print(f"\nfuzz: {n} cases from seed {start}: {damaged_cases} reported damage,"
              f" {corrupt} corrupt events, errors {errors}")


# ----- crafted damage: the loops whose work a decoded number decides ----------


def event(typ: int, body: bytes) -> bytes:
    size = 19 + len(body)
    return (0).to_bytes(4, "little") + bytes((typ,)) + (1).to_bytes(4, "little") \
        + size.to_bytes(4, "little") + (0).to_bytes(4, "little") + b"\0\0" + body


def query(sql: bytes) -> bytes:
    return event(2, b"\0" * 8 + b"\x00" + b"\0\0" + b"\0\0" + b"\0" + sql)


def packed(n: int) -> bytes:
    if n < 0xFB:
        return bytes((n,))
    return b"\xfe" + n.to_bytes(8, "little")


def payload(data: bytes, ctype: int | None, usize: int | None) -> bytes:
    fields = packed(1) + packed(len(packed(len(data)))) + packed(len(data))
    if ctype is not None:
        fields += packed(2) + packed(len(packed(ctype))) + packed(ctype)
    if usize is not None:
        fields += packed(3) + packed(len(packed(usize))) + packed(usize)
    return event(40, fields + packed(0) + data)


def decode_bounded(buf: bytes) -> tuple[list[object], int]:
    """Decode with the pure-Python path; returns events and the memory peak."""
    dec = EventDecoder(TableMapResolver(decode_all=False))
    dec.accelerated = False
    dec.start_file("crafted.000001")
    tracemalloc.start()
    try:
        with time_limit(10):
            events, used = dec.decode(buf, 0, len(buf), 4, final=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert used == len(buf)
    return events, peak


def test_zstd_payload_inflating_past_its_declared_size_is_damage():
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (16 << 20))
    events, peak = decode_bounded(payload(bomb, 0, 1000) + query(b"BEGIN"))
    (bad,) = [e for e in events if type(e) is CorruptEvent]
    assert "inflates" in bad.reason
    assert peak < 8 << 20


def test_zstd_payload_whose_frame_claims_a_huge_size_is_read_in_steps():
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"x" * 100)
    assert frame[4] == 0x20 and frame[5] == 100  # single segment, 1-byte content size
    # The same frame with an 8-byte content size of 2**40 (a 1 TiB allocation
    # if trusted), declared in the event as 1 MiB: 100 bytes come out.
    lying = frame[:4] + b"\xe0" + (1 << 40).to_bytes(8, "little") + frame[6:]
    assert zstandard.get_frame_parameters(lying).content_size == 1 << 40
    events, peak = decode_bounded(payload(lying, 0, 1 << 20))
    (bad,) = [e for e in events if type(e) is CorruptEvent]
    assert "TRANSACTION_PAYLOAD" in bad.reason  # zstd refuses the window, or too few bytes
    assert peak < 8 << 20


def test_payload_without_uncompressed_size_and_nested_payloads_are_damage():
    events, _ = decode_bounded(payload(b"abc", 0, None))
    assert "uncompressed size" in next(e for e in events if type(e) is CorruptEvent).reason
    inner = payload(b"", 255, 0)
    events, _ = decode_bounded(payload(payload(inner, 255, len(inner)), 255, None))
    assert any(type(e) is CorruptEvent and "inside" in e.reason for e in events)


def test_query_with_blanks_and_an_open_comment_is_linear():
    # The old leading-keyword pattern backtracked exponentially on this.
    events, _ = decode_bounded(query(b" \t" * 2000 + b"/*") + query(b"/*" * 5000 + b" x"))
    assert len(events) <= 6


def test_mariadb_compressed_query_inflating_past_its_size_is_damage():
    body = zlib.compress(b"\0" * (16 << 20))
    data = bytes((0x80 | 1,)) + bytes((10,)) + body
    ev = event(165, b"\0" * 8 + b"\x00" + b"\0\0" + b"\0\0" + b"\0" + data)
    events, peak = decode_bounded(ev)
    assert any(type(e) is CorruptEvent for e in events)
    assert peak < 8 << 20


@pytest.mark.parametrize("ncols", [0, 4097, 1 << 40])
def test_table_map_column_counts_out_of_range_are_damage(ncols):
    body = (7).to_bytes(6, "little") + b"\0\0" + b"\x01d\0" + b"\x01t\0" + packed(ncols) + b"\x03" * 64
    events, _ = decode_bounded(event(19, body))
    (bad,) = [e for e in events if type(e) is CorruptEvent]
    assert "columns" in bad.reason


def test_damage_is_logged_once_per_file_then_summed_up(tmp_path, caplog):
    buf = with_checksums((FIXTURES / "json.binlog.000001").read_bytes(), False)
    for nth in range(3):
        damaged = zero_column_count(buf, nth * 3)
        assert damaged is not None
        buf = damaged
    a, b = tmp_path / "relay-bin.000001", tmp_path / "relay-bin.000002"
    a.write_bytes(buf)
    b.write_bytes(buf)
    caplog.set_level("WARNING", "lagd.relaylog")
    reader = RelayLogReader(LogFiles.of(a, b))
    while True:
        batch = reader.read(1 << 20)
        if not batch and reader.at_tail:
            break
    reader.close()
    assert reader.skipped_events >= 6 and reader.skipped_bytes > 0
    assert reader.last_skip_reason is not None and reader.last_skip_reason.startswith(b.name)
    firsts = [m for m in caplog.messages if m.startswith("corrupt event in")]
    assert [m.split()[3] for m in firsts] == [a.name, b.name]  # one warning per file...
    sums = [m for m in caplog.messages if "damaged stretches" in m]
    assert len(sums) == 1 and a.name in sums[0]  # ...and the first file's sum on leaving it
