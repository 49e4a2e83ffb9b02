"""The C accelerator and the pure-Python path give identical events.

Run on every real log file and on seeded random damage to them (which also
proves the reader never raises on what is in a log: damage becomes
CorruptEvent values). Without a compiled accelerator these tests skip; the
rest of the suite then runs on the pure-Python path, and scripts/test runs
the unit tests once more with LAGD_PURE_PYTHON=1 so both paths are covered.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lagd.relaylog import EventDecoder, TableMapResolver
from lagd.relaylog._construct import ACCELERATED

FIXTURES = Path(__file__).parent.parent / "fixtures" / "binlogs"
FILES = sorted(p for p in FIXTURES.iterdir() if not p.name.endswith(".md"))

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="C accelerator not built")


def decode(buf: bytes, accelerated: bool, verify: bool, chunk: int | None = None):
    dec = EventDecoder(TableMapResolver(decode_all=False), verify_checksums=verify)
    dec.accelerated = accelerated
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


def test_chunked_reading_gives_the_same_events():
    buf = (FIXTURES / "mariadb-bin.000001").read_bytes()
    whole = decode(buf, True, True)[0]
    for chunk in (40, 97, 300):
        assert decode(buf, True, True, chunk)[0] == whole
        assert decode(buf, False, True, chunk)[0] == whole
