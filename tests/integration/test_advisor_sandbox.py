"""The advisor on real MariaDB: big LOAD DATA transactions seen in the relay
log before the SQL thread applies them, split advice for them, the apply-time
prediction, and settings gathered over SQL.

MariaDB's IO thread asks its source for Annotate_rows events only when the
replica itself logs what it applies (log_slave_updates), so this module runs
its own sandbox whose replica writes a binlog; the session sandbox's replica
does not, and its relay log carries no statement text.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from lagd.advisor import (
    ApplyRateModel,
    Lookahead,
    SplitLimits,
    TransactionSummary,
    TxKind,
    advise,
    gather_settings,
    load_tmpdir_free_bytes,
    split_advice,
)
from lagd.relaylog import LogFiles, RelayLogReader
from lagd.sandbox.config import gtid_pos_reached
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.test_relaylog_sandbox import sql_position, wait_received

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server_vars"
ROWS = 250_000


@pytest.fixture(scope="module")
def logging_replica() -> Iterator[Sandbox]:
    sb = Sandbox(SandboxConfig(replicas=1, replica_log_bin=True))
    sb.start()
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture
def imp(logging_replica: Sandbox) -> Iterator[tuple[Sandbox, str]]:
    """A fresh schema with table ``imp`` on both servers; the SQL thread stopped."""
    sb = logging_replica
    schema = f"adv_{uuid.uuid4().hex[:8]}"
    sb.source.query(f"CREATE DATABASE {schema}")
    sb.source.query(f"CREATE TABLE {schema}.imp (id INT PRIMARY KEY, k INT NOT NULL, name VARCHAR(20))")
    sb.wait_caught_up(timeout=60)
    try:
        with sb.sql_thread_stopped(timeout=120):
            yield sb, schema
    finally:
        sb.source.query(f"DROP DATABASE {schema}")


def data_file(tmp_path: Path, rows: int, first_id: int = 1) -> Path:
    path = tmp_path / f"rows-{first_id}.tsv"
    path.write_text("".join(f"{i}\t{i * 7 % 1000}\tname-{i}\n" for i in range(first_id, first_id + rows)))
    return path


def load(sb: Sandbox, schema: str, path: Path, *session: str) -> None:
    conn = sb.source.connect(schema, local_infile=True)
    try:
        with conn.cursor() as cur:
            for stmt in session:
                cur.execute(stmt)
            cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE imp")
    finally:
        conn.close()


def look(sb: Sandbox, reader: RelayLogReader, la: Lookahead) -> list[TransactionSummary]:
    """Feed the look-ahead everything received, in 256 KiB slices; returns the
    in-progress reports seen on the way (a big transaction streaming in)."""
    wait_received(sb)
    seen = []
    for _ in range(10_000):
        batch = reader.read(256 * 1024)
        la.feed(batch)
        current = la.in_progress(reader.position)
        if current is not None:
            seen.append(current)
        if not batch and reader.at_tail:
            return seen
    raise AssertionError("reader did not reach the tail")


def only_big(la: Lookahead) -> TransactionSummary:
    (s,) = la.coming()
    assert s.complete and s.end is not None
    if s.start.file == s.end.file:
        assert s.size_bytes == s.end.offset - s.start.offset  # counted = the bytes in the relay log
    return s


def settings_of(sb: Sandbox, role: str) -> Any:
    server = sb.source if role == "source" else sb.replica()
    conn = pymysql.connect(**server.dsn.as_kwargs())  # lagd's own account
    try:
        return gather_settings(conn, role)
    finally:
        conn.close()


def test_row_based_load_with_annotate_is_load_data(imp: tuple[Sandbox, str], tmp_path: Path) -> None:
    sb, schema = imp
    assert str(sb.source.query("SELECT @@binlog_annotate_row_events AS a")[0]["a"]) == "1"  # MariaDB default
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb))
    la = Lookahead()
    path = data_file(tmp_path, ROWS)
    load(sb, schema, path)
    streaming = look(sb, reader, la)

    s = only_big(la)
    assert (s.kind, s.rows, s.tables) == (TxKind.LOAD_DATA, ROWS, (f"{schema}.imp",))
    assert s.statement is not None and s.statement.startswith(f"LOAD DATA LOCAL INFILE '{path}'")
    assert s.key_columns == ("id",) and s.size_basis == "counted"
    # It was visible while it streamed in, before its end was read.
    assert any(p.rows < ROWS and p.kind is TxKind.LOAD_DATA for p in streaming)

    limits = SplitLimits.from_settings(settings_of(sb, "source"), settings_of(sb, "replica"))
    advice = split_advice(s, ApplyRateModel(), limits, lag_budget=30.0)
    assert advice.chunk_rows and advice.commands and "pt-fifo-split" in advice.text
    assert advice.bound == "25% of the redo capacity"  # 16 MiB sandbox redo: a 4 MiB chunk
    print(f"\n{advice.text}")


def test_row_based_load_without_annotate_is_bulk_insert(imp: tuple[Sandbox, str], tmp_path: Path) -> None:
    sb, schema = imp
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb))
    la = Lookahead()
    load(sb, schema, data_file(tmp_path, ROWS), "SET SESSION binlog_annotate_row_events=0")
    look(sb, reader, la)
    s = only_big(la)
    assert (s.kind, s.rows, s.statement) == (TxKind.BULK_INSERT, ROWS, None)
    assert "no statement text" in s.kind_reason


def test_statement_based_load_is_load_data(imp: tuple[Sandbox, str], tmp_path: Path) -> None:
    sb, schema = imp
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb))
    la = Lookahead()
    path = data_file(tmp_path, ROWS)
    load(sb, schema, path, "SET SESSION binlog_format=STATEMENT")
    look(sb, reader, la)
    s = only_big(la)
    assert (s.kind, s.rows, s.load_data_lines, s.load_data_bytes) == (
        TxKind.LOAD_DATA, 0, ROWS, path.stat().st_size)
    assert s.statement_based and s.tables == (f"{schema}.imp",)
    assert s.source_exec_seconds is not None
    print(f"\nstatement-based LOAD DATA of {ROWS:,} rows: the source ran it in {s.source_exec_seconds} s")


def apply_seconds(sb: Sandbox) -> float:
    """Start the SQL thread and time it until it has applied all the source logged."""
    want = str(sb.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"])
    conn = sb.replica().connect()
    try:
        with conn.cursor() as cur:
            t0 = time.monotonic()
            cur.execute("START SLAVE SQL_THREAD")
            while True:
                cur.execute("SELECT @@gtid_slave_pos")
                row = cur.fetchone()
                if row is not None and gtid_pos_reached(want, str(row[0])):
                    return time.monotonic() - t0
                if time.monotonic() - t0 > 300:
                    raise AssertionError("the replica did not catch up in 300 s")
                time.sleep(0.01)
    finally:
        conn.close()


def test_predicted_apply_time_of_a_coming_load(imp: tuple[Sandbox, str], tmp_path: Path) -> None:
    """Learn the apply rate from a first applied load, predict a bigger one
    before the SQL thread reaches it, then measure. Printed, not asserted."""
    sb, schema = imp
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb))
    la = Lookahead()
    # Whatever time the first load took is the rate to learn (it may apply in
    # well under a second on a fast machine): no minimum of observed apply.
    model = ApplyRateModel(min_seconds=1e-9)

    load(sb, schema, data_file(tmp_path, 400_000, first_id=1))
    look(sb, reader, la)
    first = only_big(la)
    took = apply_seconds(sb)
    assert took > 0  # the model needs elapsed time; a clock step of 0 would leave it unlearned
    model.observe(first.size_bytes, first.rows, took, table=first.table)
    sb.stop_sql_thread()
    assert la.applied_up_to(sql_position(sb)) == 1

    load(sb, schema, data_file(tmp_path, 1_200_000, first_id=1_000_001))
    look(sb, reader, la)
    coming = only_big(la)
    predicted, basis = model.estimate_seconds(coming)
    measured = apply_seconds(sb)
    sb.stop_sql_thread()  # the fixture restarts it

    assert predicted is not None, basis
    ratio = max(predicted, measured) / min(predicted, measured)
    print(f"\nlearned: {first.rows:,} rows, {first.size_bytes:,} bytes applied in {took:.2f} s"
          f"\ncoming:  {coming.rows:,} rows, {coming.size_bytes:,} bytes"
          f"\npredicted {predicted:.2f} s ({basis})\nmeasured  {measured:.2f} s; ratio {ratio:.2f}")


def test_gather_settings_from_the_sandbox(logging_replica: Sandbox) -> None:
    sb = logging_replica
    src, rep = settings_of(sb, "source"), settings_of(sb, "replica")
    assert src.flavor.is_mariadb and (src.role, rep.role) == ("source", "replica")
    assert src.on("binlog_annotate_row_events") is True and rep.logs_replica_updates
    assert rep.status_int("Innodb_log_waits") is not None
    recorded = json.loads((FIXTURES / "mariadb-10.11-replica.json").read_text())
    if rep.flavor.version[:2] == (10, 11):
        assert set(rep.variables) == set(recorded["variables"])  # the fixture is complete
    free = load_tmpdir_free_bytes(rep)
    assert free is not None and free > 0  # lagd runs beside the replica here
    verdicts = {a.rule: a for a in advise(rep.with_facts(load_tmpdir_free_bytes=free))}
    # This replica logs what it applies: Annotate_rows reach it; parallel apply is off.
    assert not verdicts["annotate_reaches_relay_log"].fired
    assert verdicts["parallel_apply"].fired
