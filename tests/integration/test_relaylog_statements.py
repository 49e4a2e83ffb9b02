"""Statement-based events, LOAD DATA, and schema changes on a real MariaDB replica."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagd.relaylog import (
    Ddl,
    LoadData,
    LogFiles,
    RelayLogReader,
    RowChange,
    RowKind,
    Statement,
    TransactionEnd,
    TransactionStart,
)
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.test_relaylog_sandbox import read_all, resolver_for, sql_position, wait_received
from tests.unit.reference_decoder import iter_raw_events


def reader_at_sql_thread(sb: Sandbox, **kw: Any) -> RelayLogReader:
    return RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb), **kw)


def run_on_source(sb: Sandbox, schema: str, statements: list[str], binlog_format: str = "ROW",
                  local_infile: bool = False) -> None:
    conn = sb.source.connect(schema, local_infile=local_infile)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_format = '{binlog_format}'")
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def test_statement_based_dml_comes_through_as_sql(sql_thread_stopped: Sandbox, schema: str) -> None:
    sb = sql_thread_stopped
    run_on_source(sb, schema, ["CREATE TABLE t (id INT PRIMARY KEY, v INT)"])
    wait_received(sb)
    reader = reader_at_sql_thread(sb)
    read_all(reader)  # skip the DDL
    stmts = [
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        "UPDATE t SET v = v + 1 WHERE id = 2",
        "DELETE FROM t WHERE id = 1",
    ]
    run_on_source(sb, schema, stmts, binlog_format="STATEMENT")
    wait_received(sb)
    events = read_all(reader)
    got = [e for e in events if isinstance(e, Statement)]
    assert [s.sql for s in got] == stmts
    assert {s.schema for s in got} == {schema}
    assert not [e for e in events if isinstance(e, RowChange)]
    assert sum(1 for e in events if isinstance(e, TransactionEnd)) == 3


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "rows.tsv"
    path.write_text("".join(f"{i}\tname-{i}\n" for i in range(1, 1001)))
    yield path


def test_statement_based_load_data_is_one_load_event(
    sql_thread_stopped: Sandbox, schema: str, data_file: Path
) -> None:
    sb = sql_thread_stopped
    run_on_source(sb, schema, ["CREATE TABLE imp (id INT PRIMARY KEY, name VARCHAR(20))"])
    wait_received(sb)
    reader = reader_at_sql_thread(sb)
    read_all(reader)
    load = f"LOAD DATA LOCAL INFILE '{data_file}' INTO TABLE imp"
    run_on_source(sb, schema, [load], binlog_format="STATEMENT", local_infile=True)
    wait_received(sb)
    events = read_all(reader)
    loads = [e for e in events if isinstance(e, LoadData)]
    assert len(loads) == 1
    ld = loads[0]
    assert ld.schema == schema
    assert "LOAD DATA" in ld.sql and "imp" in ld.sql
    assert ld.data_bytes == data_file.stat().st_size
    assert ld.data_lines == 1000
    ends = [e for e in events if isinstance(e, TransactionEnd)]
    assert len(ends) == 1 and ends[0].committed


def test_row_based_load_data_yields_every_row(
    sql_thread_stopped: Sandbox, schema: str, data_file: Path
) -> None:
    sb = sql_thread_stopped
    run_on_source(sb, schema, ["CREATE TABLE imp (id INT PRIMARY KEY, name VARCHAR(20))"])
    wait_received(sb)
    reader = reader_at_sql_thread(sb)
    read_all(reader)
    run_on_source(sb, schema, [f"LOAD DATA LOCAL INFILE '{data_file}' INTO TABLE imp"],
                  local_infile=True)
    wait_received(sb)
    events = read_all(reader)
    rows = [e for e in events if isinstance(e, RowChange)]
    assert [r.key for r in rows] == [(i,) for i in range(1, 1001)]
    assert {r.kind for r in rows} == {RowKind.INSERT}
    ends = [e for e in events if isinstance(e, TransactionEnd)]
    assert len(ends) == 1 and ends[0].rows == 1000


def test_ddl_drops_the_cached_definition(sandbox: Sandbox, schema: str) -> None:
    """information_schema answers are cached per table; DDL in the log drops them.

    The SQL thread runs here, so the replica has applied the DDL by the time
    the reader asks again (a reader far ahead of the SQL thread can ask too
    early; the prefetcher holds back probes on a table past its DDL).
    """
    sb = sandbox
    resolver = resolver_for(sb)
    run_on_source(sb, schema, ["CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)",
                               "INSERT INTO t VALUES (1, 1, 1)"])
    sb.wait_caught_up(timeout=60)
    reader = RelayLogReader(LogFiles(sb.relay_log_index()), sql_position(sb), resolver)
    run_on_source(sb, schema, ["UPDATE t SET a = 2 WHERE id = 1"])
    sb.wait_caught_up(timeout=60)
    first = [e for e in read_all(reader) if isinstance(e, RowChange)]
    assert [ix.name for ix in first[0].table.indexes] == ["PRIMARY"]

    # Same columns, so the table map's bytes do not change: only the DDL tells.
    run_on_source(sb, schema, ["ALTER TABLE t ADD KEY a_idx (a)", "UPDATE t SET a = 3 WHERE id = 1"])
    sb.wait_caught_up(timeout=60)
    events = read_all(reader)
    ddl = [e for e in events if isinstance(e, Ddl)]
    assert ddl and f"{schema}.t" in ddl[0].tables
    after = [e for e in events if isinstance(e, RowChange)]
    assert [ix.name for ix in after[0].table.indexes] == ["PRIMARY", "a_idx"]
    assert after[0].before == (1, 2)  # id and a: the columns some index needs
    assert resolver.lookups == 2  # one per definition: cached in between


def test_log_bin_compress_on_the_source_reaches_the_relay_log_uncompressed() -> None:
    """MariaDB's IO thread uncompresses log_bin_compress events before it
    writes them to the relay log, so the reader sees plain row events."""
    cfg = SandboxConfig(source_extra_options={"log-bin-compress": "ON",
                                              "log-bin-compress-min-len": "10"})
    with Sandbox(cfg) as sb:
        sb.source.query("CREATE DATABASE d")
        sb.source.query("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(200))")
        sb.wait_caught_up(timeout=60)
        sb.stop_sql_thread()
        reader = reader_at_sql_thread(sb)
        sb.source.query("INSERT INTO d.t VALUES (1, %s), (2, %s)", ("x" * 150, "y" * 150))
        sb.source.query("UPDATE d.t SET v = %s", ("z" * 150,))
        wait_received(sb)
        rows = [e for e in read_all(reader) if isinstance(e, RowChange)]
        assert [(r.kind, r.key) for r in rows] == [
            (RowKind.INSERT, (1,)), (RowKind.INSERT, (2,)),
            (RowKind.UPDATE, (1,)), (RowKind.UPDATE, (2,)),
        ]
        assert reader.stats.unsupported_events == {}
        compressed = {165, 166, 167, 168, 169, 170, 171}
        source_types = {t for f in sb.source.datadir.glob("*bin.0*")
                        for _, t, _, _ in iter_raw_events(f.read_bytes())}
        assert source_types & compressed  # the source did compress
        sb.start_sql_thread()


def _fde_checksums(path: Path) -> list[int]:
    """The checksum algorithm byte of each format-description event in a file."""
    buf = path.read_bytes()
    out = []
    for off, typ, _raw, _crc in iter_raw_events(buf):
        if typ == 15:
            size = int.from_bytes(buf[off + 9 : off + 13], "little")
            out.append(buf[off + size - 5])  # algorithm byte, then the 4-byte checksum
    return out


def test_checksum_setting_follows_each_format_description_event() -> None:
    """A relay log holds the replica's own FDE and the source's, and the
    source can change binlog_checksum on the fly: each FDE sets it anew."""
    cfg = SandboxConfig(replica_extra_options={"binlog-checksum": "NONE"})
    with Sandbox(cfg) as sb:
        sb.source.query("CREATE DATABASE d")
        sb.source.query("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
        sb.wait_caught_up(timeout=60)
        sb.stop_sql_thread()
        reader = reader_at_sql_thread(sb)
        expected = []
        for i, setting in enumerate(["CRC32", "NONE", "CRC32"]):
            sb.source.query(f"SET GLOBAL binlog_checksum = {setting}")  # rotates the binlog
            sb.source.query("INSERT INTO d.t VALUES (%s, 1)", (i,))
            sb.source.query("UPDATE d.t SET v = 2 WHERE id = %s", (i,))
            expected += [(RowKind.INSERT, (i,)), (RowKind.UPDATE, (i,))]
        wait_received(sb)
        rows = [e for e in read_all(reader) if isinstance(e, RowChange)]
        assert [(r.kind, r.key) for r in rows] == expected
        assert reader.stats.corrupt_events == 0
        algs = [a for f in sorted(sb.relay_log_dir().glob("*relay-bin.0*")) for a in _fde_checksums(f)]
        assert {0, 1} <= set(algs)  # both settings occur in the relay logs
        sb.start_sql_thread()


def test_transaction_across_a_relay_log_rotation_keeps_rows_and_size(
    sql_thread_stopped: Sandbox, schema: str
) -> None:
    """The IO thread rotates relay logs mid-transaction when max_relay_log_size is hit."""
    sb = sql_thread_stopped
    run_on_source(sb, schema, ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(100))"])
    wait_received(sb)
    reader = reader_at_sql_thread(sb)
    read_all(reader)
    rep = sb.replica()
    old = int(rep.query("SELECT @@GLOBAL.max_relay_log_size AS v")[0]["v"])
    rep.query("SET GLOBAL max_relay_log_size = 4096")
    try:
        inserts = [f"INSERT INTO t VALUES ({i}, '{'x' * 90}')" for i in range(400)]
        run_on_source(sb, schema, ["BEGIN", *inserts, "COMMIT"])
        wait_received(sb)
    finally:
        rep.query(f"SET GLOBAL max_relay_log_size = {old}")
    events = read_all(reader)
    ends = [e for e in events if isinstance(e, TransactionEnd)]
    assert len(ends) == 1 and ends[0].rows == 400
    start = next(e for e in events if isinstance(e, TransactionStart))
    assert start.relay_file != ends[0].relay_file  # it did span files
    # Its size is the relay-log bytes it spans, file after file.
    names = sorted(p.name for p in sb.relay_log_dir().glob("*-relay-bin.0*"))
    spanned = names[names.index(start.relay_file) : names.index(ends[0].relay_file) + 1]
    sizes = [(sb.relay_log_dir() / n).stat().st_size for n in spanned]
    expected = sizes[0] - start.relay_offset + sum(sizes[1:-1]) + ends[0].relay_offset
    assert abs(ends[0].size - expected) <= 4 * len(spanned), (expected, ends[0].size)
