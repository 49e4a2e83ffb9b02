"""Follow a replica's relay-log files from disk.

The reader starts where the SQL thread stands (Relay_Log_File/Relay_Log_Pos),
walks the relay-log index across rotations, and at the end of the file being
written returns what it has and tries again later: a short read there is the
IO thread still writing, not an error.

"At the tail" is claimed only for the last file the index lists, and only
while that name still belongs to the file being read. When the file under
the reader left the index (purged: the SQL thread overtook it), was deleted
or was replaced by a new file of the same name (the relay log started anew),
the reader finishes what the open handle still holds and then either goes on
with the next file (its file was read whole and the index lists the one
numbered after it: nothing was missed) or asks the replica where the SQL
thread is and resumes there, emitting ``Resynced``. Either way it says so in
the log once, and ``synced`` stays False until the new tail is reached.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lagd.relaylog import _wire as w
from lagd.relaylog._eventparts import MAX_EVENT_SIZE
from lagd.relaylog.decoder import EventDecoder, ReaderStats
from lagd.relaylog.errors import (
    EncryptedRelayLogError,
    NotALogFileError,
    RelayLogAccessError,
    RelayLogPurgedError,
)
from lagd.relaylog.events import CorruptEvent, Event
from lagd.relaylog.position import RelayPosition, file_sequence
from lagd.relaylog.schema import SchemaResolver, TableMapResolver

log = logging.getLogger("lagd.relaylog")

ResyncFn = Callable[[], RelayPosition]


@dataclass(frozen=True, slots=True)
class Resynced:
    """The reader jumped: a file was purged under it. Any half-read
    transaction is gone; reading goes on from ``to``."""

    from_file: str
    to: RelayPosition
    reason: str


class LogFiles:
    """The ordered list of log files a reader walks.

    With an index file it is the relay log as the server keeps it, growing
    and rotating; with a fixed list every file is complete (tests, tools).
    """

    def __init__(self, index: Path | None = None, files: Sequence[Path] = ()) -> None:
        if (index is None) == (not files):
            raise ValueError("give either an index file or a list of files")
        self.index = index
        self._fixed = [Path(f) for f in files]

    @classmethod
    def of(cls, *files: str | Path) -> LogFiles:
        return cls(files=[Path(f) for f in files])

    @property
    def live(self) -> bool:
        """True when the last file may still grow."""
        return self.index is not None

    def names(self) -> list[Path]:
        if self.index is None:
            return list(self._fixed)
        try:
            text = self.index.read_text("utf-8", "replace")
        except FileNotFoundError:
            raise RelayLogAccessError(str(self.index), "the relay-log index file does not exist (deleted, or"
                                      " the relay log was started anew)", missing=True) from None
        except PermissionError:
            raise RelayLogAccessError(str(self.index), "permission denied") from None
        out = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            p = Path(line)
            # Index entries are relative to the datadir; the index lives there
            # unless relay_log names another directory, then entries are absolute.
            out.append(p if p.is_absolute() else self.index.parent / p.name)
        return out

    def path_of(self, name: str) -> Path:
        for p in self.names():
            if p.name == name:
                return p
        if self.index is not None:
            return self.index.parent / name
        raise FileNotFoundError(name)

    def after(self, name: str) -> Path | None:
        names = self.names()
        for i, p in enumerate(names):
            if p.name == name:
                return names[i + 1] if i + 1 < len(names) else None
        return None


_CONTROL_TYPES = (w.FORMAT_DESCRIPTION_EVENT, w.ROTATE_EVENT, w.MARIA_START_ENCRYPTION_EVENT)


def _walk(fh: BinaryIO, start: int, upto: int, file_size: int,
          controls: list[tuple[int, bytes]]) -> int:
    """Step over event headers from ``start`` to ``upto``, appending the control
    events met (offset, bytes) to ``controls``; the offset reached."""
    pos = start
    while pos < upto:
        fh.seek(pos)
        block = fh.read(min(1 << 20, upto - pos + 19))
        p = 0
        while p + 19 <= len(block) and pos + p < upto:
            _ts, typ, _sid, size, _lp, _fl = w.HEADER.unpack_from(block, p)
            if size < 19 or size > MAX_EVENT_SIZE:
                return upto  # damaged: let the decoder report it when it gets there
            if typ in _CONTROL_TYPES:
                if p + size <= len(block):
                    raw = block[p : p + size]
                else:
                    fh.seek(pos + p)
                    raw = fh.read(min(size, max(0, file_size - pos - p)))
                controls.append((pos + p, raw))
            p += size
        pos += p
        if len(block) < 19:
            break
    return pos


class RelayLogReader:
    """Reads events from a position onward; see the module docstring.

    ``read()`` never blocks: it returns the events decoded from what is on
    disk now (an empty list at the tail). ``follow()`` polls. ``values=False``:
    row changes carry no images, for a reader that counts them.
    """

    def __init__(
        self,
        files: LogFiles,
        start: RelayPosition | None = None,
        resolver: SchemaResolver | None = None,
        *,
        resync: ResyncFn | None = None,
        chunk_size: int = 1 << 20,
        verify_checksums: bool = True,
        values: bool = True,
    ) -> None:
        self.files = files
        self.stats = ReaderStats()
        self.decoder = EventDecoder(resolver or TableMapResolver(), self.stats, verify_checksums, values)
        self._resync_fn = resync
        self.chunk_size = chunk_size
        if start is None:
            first = files.names()
            if not first:
                raise RelayLogAccessError(str(files.index), "the index lists no files", missing=True)
            start = RelayPosition(first[0].name, 4)
        self._fh: BinaryIO | None = None
        self._pending = b""  # bytes of an incomplete event at the tail
        self.position = start  # where the next unread event starts
        self.at_tail = False
        self._synced = False
        self._resyncs_in_read = 0
        self._opened = False
        self._skip_from: int | None = None  # a forward seek in the open file, walked by the next read
        # file -> how far its control events are known, and those events
        self._walks: dict[tuple[str, int, int], tuple[int, list[tuple[int, bytes]]]] = {}

    # ----- public --------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once the reader has reached the live tail since it was made,
        last ``seek()``-ed or resynchronised; False again after each of those.

        Until then what it has read is only a prefix of what is waiting: a
        caller must not publish a backlog (least of all an empty one) from it.
        """
        return self._synced

    @property
    def skipped_events(self) -> int:
        """Events lost to damage: corrupt ones and those dropped after them."""
        return self.stats.corrupt_events + self.stats.skipped_events

    @property
    def skipped_bytes(self) -> int:
        return self.stats.skipped_bytes

    @property
    def last_skip_reason(self) -> str | None:
        """``file:offset: reason`` of the latest damage, None if none yet."""
        return self.stats.last_skip

    def read(self, max_bytes: int | None = None) -> list[Event | Resynced]:
        """Decode what is available now, up to about ``max_bytes`` of log."""
        budget = max_bytes if max_bytes is not None else self.chunk_size
        out: list[Event | Resynced] = []
        self.at_tail = False
        self._resyncs_in_read = 0
        while budget > 0:
            try:
                got = self._read_some(out, min(budget, self.chunk_size))
            except FileNotFoundError:
                self._close()
                out.append(self._resync("is gone (purged before lagd opened it)"))
                continue
            if got == 0:
                if not self._advance_file(out):
                    self.at_tail = True
                    self._synced = True
                    break
                continue
            budget -= got
        return out

    def follow(
        self, poll_interval: float = 0.05, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[list[Event | Resynced]]:
        """Yield batches forever (until ``should_stop()``), sleeping at the tail."""
        while not should_stop():
            batch = self.read()
            if batch:
                yield batch
            else:
                time.sleep(poll_interval)

    def close(self) -> None:
        """The open relay-log file and the schema resolver's connection, if it has one."""
        self._close()
        closer = getattr(self.decoder.resolver, "close", None)
        if callable(closer):
            closer()

    def seek(self, position: RelayPosition) -> None:
        """Start reading at ``position`` (a transaction boundary)."""
        fh, here = self._fh, self.position
        if fh is not None and position.file == here.file and position.offset >= here.offset:
            # Forward in the open file: the next read walks the stretch skipped
            # (in the reader's thread: seek() may be called on an event loop).
            if self._skip_from is None:
                self._skip_from = here.offset  # where decoding stopped; later seeks keep it
            self._pending = b""
        else:
            self._close()
        self.decoder.abandon_transaction()
        self.position = position
        self._synced = False

    # ----- internals -----------------------------------------------------

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None
        self._pending = b""
        self._opened = False
        self._skip_from = None

    def _open(self) -> BinaryIO:
        path = self.files.path_of(self.position.file)
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open across calls while tailing
        except PermissionError:
            raise RelayLogAccessError(str(path), "permission denied") from None
        except IsADirectoryError:
            raise NotALogFileError(str(path), b"") from None
        magic = fh.read(4)
        if magic == w.ENCRYPTED_MAGIC:
            fh.close()
            raise EncryptedRelayLogError(str(path))
        if magic != w.MAGIC:
            if len(magic) < 4 and self.files.live:
                fh.close()
                raise BlockingIOError(errno.EAGAIN, "log file header not written yet")
            fh.close()
            raise NotALogFileError(str(path), magic)
        self.decoder.start_file(path.name)
        if self.position.offset > 4:
            self._prime(fh, self.position.offset)
        else:
            self.position = RelayPosition(path.name, 4)
        fh.seek(self.position.offset)
        self._fh = fh
        self._opened = True
        return fh

    def _prime(self, fh: BinaryIO, upto: int) -> None:
        """Learn the FDE, checksum mode and source file in force at ``upto``.

        Only control events matter here, so everything else is skipped by its
        header's length. What a file's walk found is kept (per file identity:
        MariaDB reuses relay-log names for new files), so the next seek into
        the same file walks only the part not walked yet: a prefetcher that
        jumps forward often must not rescan the file from the start each time.
        """
        st = os.fstat(fh.fileno())
        key = (self.position.file, st.st_dev, st.st_ino)
        walked, controls = self._walks.get(key, (4, []))
        pos = _walk(fh, walked, upto, st.st_size, controls)
        # One identity per name, and only the files seeked into lately.
        self._walks = {k: v for k, v in list(self._walks.items())[-32:] if k[0] != key[0]}
        self._walks[key] = (max(walked, min(pos, upto)), controls)
        for offset, raw in controls:
            if offset < upto:
                self.decoder.decode(raw, 0, len(raw), offset)
        self.decoder.abandon_transaction()

    def _skip_ahead(self, fh: BinaryIO, start: int) -> bool:
        """Go on from ``start`` (where decoding stopped) to the position a seek set,
        in the open file (False: it is not the file of that name any more).

        The decoder has seen every control event up to ``start``, so only the
        stretch skipped needs walking. Reopening would prime from the file's
        start (or its last walk), walking the headers of everything decoded since:
        a prefetcher overtaken now and then walked its whole relay log a second time.
        """
        own = os.fstat(fh.fileno())
        try:
            st = os.stat(self.files.path_of(self.position.file))
        except OSError:
            return False  # gone: the reopen says why
        if (st.st_dev, st.st_ino) != (own.st_dev, own.st_ino):
            return False  # a new file of the same name (the relay log started anew)
        found: list[tuple[int, bytes]] = []
        _walk(fh, start, self.position.offset, own.st_size, found)
        for offset, raw in found:
            self.decoder.decode(raw, 0, len(raw), offset)
        self.decoder.abandon_transaction()
        fh.seek(self.position.offset)
        return True

    def _read_some(self, out: list[Event | Resynced], want: int) -> int:
        """Read and decode one chunk; return the bytes consumed (0 at EOF)."""
        fh = self._fh
        if fh is not None and self._skip_from is not None:
            start, self._skip_from = self._skip_from, None
            if not self._skip_ahead(fh, start):
                self._close()
                fh = None
        if fh is None:
            try:
                fh = self._open()
            except BlockingIOError:
                return 0
            except FileNotFoundError:
                if not self.files.live:
                    raise RelayLogAccessError(self.position.file, "file does not exist",
                                              missing=True) from None
                raise
        data = fh.read(want)
        if not data and not self._pending:
            return 0
        buf = self._pending + data if self._pending else data
        base = self.position.offset
        events, used = self.decoder.decode(buf, 0, len(buf), base)
        out.extend(events)
        self._pending = buf[used:]
        self.position = RelayPosition(self.position.file, base + used, self.position.sequence)
        if used == 0 and not data:
            return 0
        if used == 0 and len(self._pending) > self.chunk_size:
            # One event larger than a chunk: read the rest of it in one go,
            # but no more than the file holds (a damaged size claims up to
            # 1 GiB, and a read of n bytes allocates n bytes first).
            head = w.HEADER.unpack_from(self._pending, 0)
            on_disk = os.fstat(fh.fileno()).st_size - fh.tell()
            rest = fh.read(max(0, min(head[3] - len(self._pending), on_disk)))
            self._pending += rest
            return len(rest) or 0
        return used or len(data)

    def _advance_file(self, out: list[Event | Resynced]) -> bool:
        """At EOF: go on (True) when there is more to read here or elsewhere,
        or say this is the live tail (False)."""
        fh = self._fh
        if fh is None:
            return False
        name = self.position.file
        if not self.files.live:
            nxt = self.files.after(name)
            self._finish(out)
            if nxt is None:
                return False
            self._close()
            self.position = RelayPosition(nxt.name, 4)
            return True
        names = self.files.names()
        # The file is complete once a later one is listed, but the rotate is
        # written before that: look at the size after reading the index.
        size = os.fstat(fh.fileno()).st_size
        if size > fh.tell():
            return True
        listed = next((i for i, p in enumerate(names) if p.name == name), None)
        if listed is None:
            # Confirm with a second look: MariaDB rewrites the index in place
            # when it purges, so one read can see it half written.
            names = self.files.names()
            listed = next((i for i, p in enumerate(names) if p.name == name), None)
        gone = self._gone(fh, size, names[listed] if listed is not None else None)
        if gone is None:
            if listed is None or listed + 1 >= len(names):
                return False
            self._finish(out)
            self._close()
            self.position = RelayPosition(names[listed + 1].name, 4)
            return True
        whole = self._finish(out)
        self._close()
        # Purging removes the oldest files, so after a purge of this file
        # every listed one is numbered after it; a listed file numbered at or
        # below it means the relay log started anew with new numbers.
        seq = file_sequence(name)
        nxt = next((p for p in names if file_sequence(p.name) == seq + 1), None)
        purged = listed is None and all(file_sequence(p.name) > seq for p in names)
        if purged and whole and nxt is not None:
            log.info("relay log %s %s after lagd had read all of it; going on with %s",
                     name, gone, nxt.name)
            self.position = RelayPosition(nxt.name, 4)
            return True
        out.append(self._resync(gone if whole else f"{gone}, and it ended inside an event"))
        return True

    def _gone(self, fh: BinaryIO, size: int, listed: Path | None) -> str | None:
        """Why the open file is no longer the one its name stands for, if so."""
        if listed is None:
            return "left the relay-log index (purged, or deleted when the relay log was started anew)"
        try:
            st = os.stat(listed)
        except FileNotFoundError:
            return "was deleted"
        except OSError:
            return None  # cannot tell: keep reading what is open
        own = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != (own.st_dev, own.st_ino):
            return "was replaced by a new file of the same name (the relay log started anew)"
        if size < fh.tell():
            return "shrank below the read position"
        return None

    def _finish(self, out: list[Event | Resynced]) -> bool:
        """The open file is complete: decode what is left of it. True when it
        ended on an event boundary (nothing damaged or cut at its end)."""
        if not self._pending:
            return True
        base = self.position.offset
        events, used = self.decoder.decode(self._pending, 0, len(self._pending), base, final=True)
        out.extend(events)
        self._pending = self._pending[used:]
        self.position = RelayPosition(self.position.file, base + used, self.position.sequence)
        if self._pending:
            self._truncated(out)
        return False

    def _truncated(self, out: list[Event | Resynced]) -> None:
        reason = f"file ends inside an event ({len(self._pending)} bytes of it)"
        st = self.stats
        st.corrupt_events += 1
        st.skipped_bytes += len(self._pending)
        st.last_skip = f"{self.position.file}:{self.position.offset}: {reason}"
        log.warning("%s at %d: %s", self.position.file, self.position.offset, reason)
        out.append(CorruptEvent(self.position.file, self.position.offset, reason))
        self.decoder.abandon_transaction()
        self.position = RelayPosition(self.position.file, self.position.offset + len(self._pending),
                                      self.position.sequence)
        self._pending = b""

    def _resync(self, reason: str) -> Resynced:
        gone = self.position.file
        self._resyncs_in_read += 1
        if self._resync_fn is None or self._resyncs_in_read > 2:
            # No one to ask, or the SQL thread's own position is gone too (the
            # relay logs were deleted, or the status is stale): do not spin.
            raise RelayLogPurgedError(gone)
        target = self._resync_fn()
        names = self.files.names()
        if names and all(p.name != target.file for p in names):
            later = [p for p in names if file_sequence(p.name) > file_sequence(gone)]
            start = (later or names)[0]
            reason += (f"; the SQL thread's {target} is not listed either (a stale status),"
                       f" so from the start of {start.name}")
            target = RelayPosition(start.name, 4)
        self.stats.resyncs += 1
        log.info("relay log %s %s; lagd's look-ahead resumes at %s", gone, reason, target)
        self._close()
        self.decoder.abandon_transaction()
        self.position = target
        self._synced = False
        return Resynced(gone, target, reason)


def read_log_files(
    *paths: str | Path, resolver: SchemaResolver | None = None, verify_checksums: bool = True
) -> tuple[list[Event | Resynced], ReaderStats]:
    """Decode complete log files (tools and tests)."""
    reader = RelayLogReader(LogFiles.of(*paths), resolver=resolver,
                            verify_checksums=verify_checksums)
    events: list[Event | Resynced] = []
    try:
        while True:
            batch = reader.read(1 << 26)
            if not batch and reader.at_tail:
                break
            events.extend(batch)
    finally:
        reader.close()
    return events, reader.stats


def relay_log_index_for(datadir: str | os.PathLike[str], basename: str) -> Path:
    return Path(datadir) / f"{basename}.index"
