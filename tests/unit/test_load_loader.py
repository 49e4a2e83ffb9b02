"""The loader loop with fakes of its collaborators: a source that reads the chunk file, a replica check."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lagd.load.loader import Loader, Options, Progress, Tick
from lagd.load.reader import Dialect, scan
from lagd.load.replicas import ReplicaCheck
from lagd.load.sql import LoadError, LoadSpec, Table

SPEC = LoadSpec(Table("shop", "t"), Dialect(ignore_lines=1))


class FakeSource:
    """Counts the records of each LOAD DATA from the chunk file it names; logs every statement."""

    where = "source fake:3306"

    def __init__(self, warnings: int = 0) -> None:
        self.log: list[str] = []
        self.loaded: list[bytes] = []  # committed chunk contents
        self.pending: list[bytes] = []
        self.offset = 0
        self.warnings = warnings

    def query(self, sql: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        self.log.append(sql.split(maxsplit=1)[0] + " " + sql.split()[1])
        if "SHOW WARNINGS" in sql:
            return [("Warning", 1265, "Data truncated for column 'n' at row 1")]
        if "log_bin" in sql:
            return [(1, 1 << 40)]
        return []

    def execute(self, sql: str, args: Sequence[Any] | None = None) -> tuple[int, int]:
        self.log.append(sql.split(maxsplit=1)[0])
        m = re.match(r"LOAD DATA LOCAL INFILE '([^']+)'", sql)
        if m:
            data = Path(m.group(1)).read_bytes()
            self.pending.append(data)
            return data.count(b"\n"), self.warnings
        if sql.startswith("UPDATE") and args is not None:
            assert args[-1] == self.offset, "the guard is the last committed offset"
            self.next_offset = args[0]
            return 1, 0
        return 0, 0

    def commit(self) -> None:
        self.log.append("COMMIT")
        self.loaded += self.pending
        self.pending = []
        self.offset = getattr(self, "next_offset", self.offset)

    def rollback(self) -> None:
        self.log.append("ROLLBACK")
        self.pending = []


def _file(tmp_path: Path, n: int) -> Path:
    p = tmp_path / "f.tsv"
    p.write_bytes(b"id\tv\n" + b"".join(b"%d\tx\n" % i for i in range(n)))
    return p


def _loader(db: FakeSource, path: Path, ask: Any, **kw: Any) -> tuple[Loader, list[Tick], list[float]]:
    ticks: list[Tick] = []
    sleeps: list[float] = []
    opts = Options(**kw)
    loader = Loader(db, SPEC, path, scan(path, b"\n"), opts, ask, report=ticks.append, sleep=sleeps.append)
    return loader, ticks, sleeps


def test_chunks_commit_with_their_progress_row(tmp_path: Path) -> None:
    path = _file(tmp_path, 1000)
    db = FakeSource()
    loader, ticks, _ = _loader(db, path, None, fixed_rows=300)
    end = loader.run(Progress(0, 0, 0, 0, False))
    assert b"".join(db.loaded) == path.read_bytes().split(b"\n", 1)[1]  # the header is skipped
    assert [len(c.splitlines()) for c in db.loaded] == [300, 300, 300, 100]
    assert end == Progress(path.stat().st_size, 1000, 1000, 4, True)
    loads = [i for i, s in enumerate(db.log) if s == "LOAD"]
    for i in loads:
        assert db.log[i + 1:i + 3] == ["UPDATE", "COMMIT"]  # same transaction
    assert ticks[-1].records == 1000 and ticks[-1].waiting is None


def test_resume_from_the_committed_offset(tmp_path: Path) -> None:
    path = _file(tmp_path, 100)
    data = path.read_bytes()
    offset = len(b"id\tv\n") + sum(len(b"%d\tx\n" % i) for i in range(40))
    db = FakeSource()
    db.offset = offset
    loader, _, _ = _loader(db, path, None, fixed_rows=25)
    end = loader.run(Progress(offset, 40, 40, 2, False))
    assert b"".join(db.loaded) == data[offset:]
    assert end.records == 100 and end.chunks == 2 + 3


def test_waits_while_a_replica_is_over_budget_or_unknown(tmp_path: Path) -> None:
    path = _file(tmp_path, 10)
    answers = [
        [ReplicaCheck("r1", True, "ok", 0.1), ReplicaCheck("r2", False, "lag unknown: SQL thread", None)],
        [ReplicaCheck("r1", False, "lag 4.0 s over", 4.0), ReplicaCheck("r2", True, "ok", 0.0)],
    ]
    asked: list[float] = []

    def ask(max_lag: float) -> list[ReplicaCheck]:
        asked.append(max_lag)
        return answers.pop(0) if answers else [ReplicaCheck("r1", True, "ok", 0.0)]

    db = FakeSource()
    loader, ticks, sleeps = _loader(db, path, ask, fixed_rows=100, budget=6.0, headroom=0.5)
    loader.run(Progress(0, 0, 0, 0, False))
    assert asked[0] == 3.0  # budget x (1 - headroom)
    assert len(sleeps) == 2
    waits = [t.waiting for t in ticks if t.waiting]
    assert "r2: lag unknown" in waits[0] and "r1: lag 4.0 s" in waits[1]
    assert len(db.loaded) == 1


def test_warnings_roll_the_chunk_back(tmp_path: Path) -> None:
    path = _file(tmp_path, 10)
    db = FakeSource(warnings=2)
    loader, _, _ = _loader(db, path, None, fixed_rows=5)
    with pytest.raises(LoadError, match="Data truncated"):
        loader.run(Progress(0, 0, 0, 0, False))
    assert db.loaded == [] and "ROLLBACK" in db.log and "UPDATE" not in db.log


def test_chunks_adapt_to_the_lag_they_cause(tmp_path: Path) -> None:
    path = _file(tmp_path, 40_000)
    lags = iter([0.0, 10.0, 0.0, 0.0])  # asked before each chunk: the first causes 10 s of lag

    def ask(max_lag: float) -> list[ReplicaCheck]:
        return [ReplicaCheck("r1", True, "ok", next(lags, 0.0))]

    db = FakeSource()
    loader, _, _ = _loader(db, path, ask, budget=5.0, headroom=0.5)
    loader.run(Progress(0, 0, 0, 0, False))
    sizes = [len(c.splitlines()) for c in db.loaded]
    assert sizes[0] == 1000  # the probe
    assert sizes[1] == 250  # 10 s against a 2.5 s target: at most /4
    assert sizes[2] == 500  # no lag seen: grow, at most x2
