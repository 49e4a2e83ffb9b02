"""Corrupt and truncated relay logs, with and without checksums, fed to a real `lagd run`.

The real replica is never damaged: its relay log is copied into a directory of
the test's own, with its own index, and lagd is pointed at the copy through
``replica.relay_log_index``. The replica's SQL thread stays stopped, so the
position lagd starts from (SHOW SLAVE STATUS) is the same in the copy.

Mutations are seeded (random bit flips, a WRITE_ROWS column count set to 0,
a file cut mid-event, garbage appended): whatever the bytes, lagd must keep
answering /healthz, keep its memory bounded, stop on SIGTERM, and say what it
skipped when the bytes are damaged.
"""

from __future__ import annotations

import random
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox
from tests.faults.faultkit import (
    Checks,
    Lagd,
    assert_nothing_written,
    log_lines,
    record,
    replica_now,
    wait_received,
    write_backlog,
)

RSS_BOUND_MB = 300.0
OBSERVE = 3.0  # seconds each damaged copy is watched
WRITE_ROWS = (23, 30)  # WRITE_ROWS_EVENT v1 and v2
GTID_EVENT = 162  # MariaDB's, the first event of each transaction


@dataclass(frozen=True)
class Copy:
    """The relay log as the replica had it, from the SQL thread's file on."""

    files: list[Path]  # full paths of the real files, oldest first
    start_file: str  # where the fresh events begin (the region to damage)
    start_pos: int


@dataclass
class Damage:
    sb: Sandbox
    crc: Copy
    nocrc: Copy
    since: str


@pytest.fixture(scope="module")
def damage(fsb: Sandbox) -> Iterator[Damage]:
    """A backlog written with CRC32 checksums, then one written without, the SQL thread stopped."""
    fsb.wait_caught_up(timeout=60)
    since = replica_now(fsb.replica())
    fsb.source.query("CREATE DATABASE IF NOT EXISTS dmg")
    fsb.wait_caught_up(timeout=60)
    fsb.stop_sql_thread()
    try:
        crc = _snapshot_after(fsb, lambda: write_backlog(fsb, "dmg", 400, table="a"))
        fsb.source.query("SET GLOBAL binlog_checksum = NONE")
        nocrc = _snapshot_after(fsb, lambda: write_backlog(fsb, "dmg", 400, table="b"))
        print(f"damaged from {crc.start_file}:{crc.start_pos} (crc), {nocrc.start_file}:{nocrc.start_pos}"
              f" (no crc), of {[f.name for f in nocrc.files]}")
        yield Damage(fsb, crc, nocrc, since)
    finally:
        fsb.source.query("SET GLOBAL binlog_checksum = CRC32")
        fsb.start_sql_thread()
        fsb.wait_caught_up(timeout=60)


def _snapshot_after(sb: Sandbox, write: object) -> Copy:
    index = sb.relay_log_index()
    names = [ln.strip() for ln in index.read_text().splitlines() if ln.strip()]
    last = index.parent / Path(names[-1]).name
    start_file, start_pos = last.name, last.stat().st_size
    write()  # type: ignore[operator]
    wait_received(sb)
    names = [ln.strip() for ln in index.read_text().splitlines() if ln.strip()]
    files = [index.parent / Path(n).name for n in names]
    keep = Path(sb.base_dir or ".") / f"relay-copy-{start_file}-{start_pos}"
    keep.mkdir()
    for f in files:
        shutil.copy2(f, keep / f.name)
    copies = [keep / f.name for f in files]
    start_file, start_pos = _fresh(copies, start_file, start_pos)
    return Copy(copies, start_file, start_pos)


def _fresh(files: list[Path], start_file: str, start_pos: int) -> tuple[str, int]:
    """Where the events just written begin. In ``start_file`` past ``start_pos``, unless
    the replica's relay log rotated before they came: SET GLOBAL binlog_checksum rotates
    the source's binlog, and its Rotate may reach the replica after the index was read.
    Then they begin at the first transaction (its GTID event) of a later file."""
    names = [f.name for f in files]
    at = names.index(start_file)
    if files[at].stat().st_size > start_pos:
        return start_file, start_pos
    for f in files[at + 1:]:
        for off, etype, _size in _events(f.read_bytes(), 4):
            if etype == GTID_EVENT:
                return f.name, off
    raise AssertionError(f"no event written after {start_file}:{start_pos} in {names}")


def _events(data: bytes, start: int) -> Iterator[tuple[int, int, int]]:
    """(offset, type, size) of each whole event from ``start`` (a binlog event header is 19 bytes)."""
    pos = start
    while pos + 19 <= len(data):
        etype = data[pos + 4]
        size = struct.unpack_from("<I", data, pos + 9)[0]
        if size < 19 or pos + size > len(data):
            return
        yield pos, etype, size
        pos += size


def _mutate(copy: Copy, how: str, seed: int, dest: Path) -> tuple[Path, str]:
    """A damaged copy in ``dest`` with its own index; returns (index, what was done)."""
    rng = random.Random(seed)
    dest.mkdir()
    for f in copy.files:
        shutil.copy2(f, dest / f.name)
    (dest / "relay.index").write_text("".join(f"./{f.name}\n" for f in copy.files))
    target = dest / copy.start_file
    data = bytearray(target.read_bytes())
    lo = copy.start_pos
    done = ""
    if how == "bitflip":
        flips = sorted(rng.randrange(lo, len(data)) for _ in range(24))
        for off in flips:
            data[off] ^= 1 << rng.randrange(8)
        done = f"24 bits flipped at {flips[:4]}..."
    elif how == "colcount0":
        hits = []
        for off, etype, _size in _events(bytes(data), lo):
            if etype in WRITE_ROWS:
                body = off + 19 + 8  # after the header and the post-header (table id 6, flags 2)
                if etype == 30:
                    body += struct.unpack_from("<H", data, body)[0]  # v2: extra data, length included
                data[body] = 0  # the column count: 0
                hits.append(off)
            if len(hits) == 5:
                break
        done = f"column count 0 in WRITE_ROWS events at {hits}"
        assert hits, "no WRITE_ROWS event to damage"
    elif how == "truncate":
        size = len(data)
        cut = rng.randrange(lo + 1, size)
        del data[cut:]
        done = f"cut at {cut} of {size} bytes"
    elif how == "garbage":
        data += bytes(rng.randrange(256) for _ in range(64 * 1024))
        done = "64 KiB of random bytes appended"
    target.write_bytes(bytes(data))
    return dest / "relay.index", done


CASES = [
    ("crc", "bitflip", 1), ("crc", "colcount0", 2), ("crc", "truncate", 3),
    ("nocrc", "bitflip", 4), ("nocrc", "colcount0", 6),
    ("nocrc", "truncate", 7), ("nocrc", "garbage", 8),
]


@pytest.mark.parametrize(("checksums", "how", "seed"), CASES,
                         ids=[f"{c}-{h}-seed{s}" for c, h, s in CASES])
def test_damaged_relay_log(damage: Damage, tmp_path: Path, checksums: str, how: str, seed: int) -> None:
    check = Checks()
    copy = damage.crc if checksums == "crc" else damage.nocrc
    index, done = _mutate(copy, how, seed, tmp_path / "relay")
    print(f"{checksums}/{how}/seed {seed}: {done}")
    extra = "[prefetch]\nconnections = 2\n"
    d = Lagd(damage.sb, tmp_path, extra=extra, replica_extra=f'relay_log_index = "{index}"')
    try:
        d.wait_for(lambda s: s.get("lag") is not None, timeout=20, what="first lag reading")
        t0 = time.monotonic()
        rss: list[float] = []
        health: list[int] = []
        while time.monotonic() - t0 < OBSERVE and d.alive():
            health.append(d.get("/healthz", timeout=2.0)[0])
            rss.append(d.rss_mb())
            time.sleep(0.25)
        s = d.status() or {}
        log = d.log()
        reported = log_lines(log, r"(corrupt|skipp|checksum|damaged|invalid|malformed|garbage|bad event)")
        health_reasons = [h["reason"] for h in s.get("health", []) if not h["up"]]
        pf = (s.get("prefetch") or {}).get("counters") or {}
        peak = max(rss) if rss else 0.0
        record(f"relay log {checksums}/{how}/seed{seed}", "peak RSS", peak, unit="MB")
        print(f"peak RSS {peak:.0f} MB; /healthz codes {sorted(set(health))}; prefetch corrupt="
              f"{pf.get('corrupt')}; health problems {health_reasons}; log: {reported[:2]}")
        check(d.alive(), f"lagd died on a damaged relay log:\n{log[-1500:]}")
        check(health and all(c == 200 for c in health),
              f"/healthz failed on a damaged relay log: {health}")
        check(peak < RSS_BOUND_MB, f"RSS reached {peak:.0f} MB on a damaged relay log (<{RSS_BOUND_MB:g})")
        # Must be reported: anything a checksum catches, and structural damage. Not: a file cut
        # mid-event (a live relay log looks like that) or, without checksums, flipped bits
        # that may have landed in row values (undetectable by anyone).
        if (checksums == "crc" and how != "truncate") or how in ("colcount0", "garbage"):
            said = (reported or pf.get("corrupt")
                    or any(("corrupt" in r or "skip" in r) for r in health_reasons))
            check(said, "lagd does not report what it skipped in the damaged relay log")
        rc, took = d.terminate()
        record(f"relay log {checksums}/{how}/seed{seed}", "SIGTERM to exit", took if rc is not None else None)
        check(rc == 0, f"exit code {rc} after SIGTERM (None: still running) on a damaged relay log")
    finally:
        d.kill()
    assert_nothing_written(damage.sb.replica(), damage.since)
    check.done()
