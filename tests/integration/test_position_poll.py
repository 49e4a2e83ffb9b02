"""The prefetch engine's position poll on a real MariaDB replica.

Between two full statuses the engine asks only ``@@gtid_slave_pos`` and
places the SQL thread at the end of the transaction that GTID names, as the
relay-log reader decoded it (control.FULL_STATUS_EVERY). That holds only if
the server's ``Relay_Log_Pos``, ``Relay_Master_Log_File`` and
``Exec_Master_Log_Pos`` stand exactly where the reader's ``TransactionEnd``
says, once that transaction is applied: checked here at transactions the SQL
thread stopped after, across a relay-log rotation.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from lagd.mysql.monitor import Sample
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.relaylog import LogFiles, RelayLogReader, TransactionEnd
from lagd.sandbox.pair import Sandbox, SandboxConfig
from tests.integration.engine_util import run_held
from tests.integration.test_prefetch_statements import write
from tests.integration.test_relaylog_sandbox import read_all, resolver_for, sql_position, wait_received


def _applied(sb: Sandbox, end: TransactionEnd, timeout: float = 30.0) -> dict[str, object]:
    """The status once the SQL thread has stopped at ``end``. (UNTIL master_gtid_pos would
    restart the IO thread too, which in GTID mode fetches the relay log anew.)"""
    sb.replica().query(f"START SLAVE SQL_THREAD UNTIL RELAY_LOG_FILE = '{end.relay_file}',"
                       f" RELAY_LOG_POS = {end.relay_offset}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = sb.slave_status()
        if st["Slave_SQL_Running"] == "No":
            return st
        time.sleep(0.05)
    raise AssertionError(f"the SQL thread did not stop at {end}")


def test_a_gtid_applied_places_the_sql_thread_at_its_transactions_end(sandbox: Sandbox, schema: str) -> None:
    sandbox.source.query("CREATE TABLE t (id INT PRIMARY KEY, v INT)", db=schema)
    sandbox.wait_caught_up(timeout=60)
    with sandbox.sql_thread_stopped():
        start = sql_position(sandbox)
        for i in range(1, 13):
            sandbox.source.query(f"INSERT INTO t VALUES ({i}, {i})", db=schema)
            if i == 6:
                wait_received(sandbox)
                sandbox.flush_relay_logs()  # the later ones in the next relay-log file
        wait_received(sandbox)
        reader = RelayLogReader(LogFiles(sandbox.relay_log_index()), start, resolver_for(sandbox))
        ends = [e for e in read_all(reader) if isinstance(e, TransactionEnd)]
        reader.close()
        assert len(ends) >= 12 and all(e.gtid for e in ends)
        assert len({e.relay_file for e in ends}) == 2
        # Not the last one: the SQL thread judges UNTIL at the next event, which it waits for.
        for end in (ends[2], ends[7], ends[-2]):
            assert end.gtid is not None
            st = _applied(sandbox, end)
            assert sandbox.replica().query("SELECT @@GLOBAL.gtid_slave_pos AS p")[0]["p"] == end.gtid
            assert (st["Relay_Log_File"], int(st["Relay_Log_Pos"])) == (end.relay_file, end.relay_offset)
            source = (st["Relay_Master_Log_File"], int(st["Exec_Master_Log_Pos"]))
            # The source's binlog name comes from its Rotate at the start of a relay-log file
            # the reader primed from; a file an earlier test began with FLUSH RELAY LOGS has
            # none, and then the name is unknown (the engine keeps the full status's), never
            # another one. Red in CI once that way, when such a test ran first on the worker.
            assert end.source_pos == source[1] and end.source_file in (source[0], None), (end, source)


def test_the_engine_follows_the_sql_thread_by_position_polls_in_order(sandbox: Sandbox, schema: str) -> None:
    """A catch-up of 3,000 transactions the cursor has read ahead: between two full statuses
    the engine places the SQL thread by ``@@gtid_slave_pos``, and no full status ever finds
    it behind where a position poll placed it (the engine would take that for a restart)."""
    _follow_in_order(sandbox, schema)


def test_with_parallel_replication_no_status_is_behind_a_position_poll() -> None:
    """Parallel workers commit in order within a domain, and Relay_Log_Pos follows the
    commits: the same holds with 4 of them (optimistic, MariaDB's default mode)."""
    with Sandbox(SandboxConfig(replicas=1, slave_parallel_threads=4, slave_parallel_mode="optimistic")) as sb:
        sb.source.query("CREATE DATABASE pp")
        _follow_in_order(sb, "pp")


def _follow_in_order(sb: Sandbox, schema: str) -> None:
    sb.source.query("CREATE TABLE t (id INT PRIMARY KEY, c INT NOT NULL)", db=schema)
    sb.source.query("INSERT INTO t SELECT seq, 0 FROM seq_1_to_3000", db=schema)
    sb.wait_caught_up(timeout=60)
    seen: list[tuple[str, tuple[str, int]]] = []
    with sb.sql_thread_stopped():
        write(sb, schema, "ROW", [f"UPDATE t SET c = c + 1 WHERE id = {i}" for i in range(1, 3001)],
              per_trx=1)
        wait_received(sb)
        # A lead over the whole backlog (and a page budget for it): the SQL thread, let go,
        # finds every transaction read ahead and is placed by position polls all the way.
        opts = PrefetchOptions(connections=2, adaptive=False, min_lead_transactions=3500,
                               max_lead_transactions=4000)

        def watch(engine: PrefetchEngine, _probe: Any) -> None:
            if getattr(engine, "_watched", False):
                return
            engine._watched = True  # type: ignore[attr-defined]
            full, position = engine.monitor.poll, engine._position_poll

            async def full_poll() -> Sample:
                s = await full()
                if s.status is not None:
                    seen.append(("status", (s.status.relay_log_file, s.status.relay_log_pos)))
                return s

            async def position_poll() -> Sample | None:
                last = engine._sample
                s = await position()
                if s is not None and s is not last and s.status is not None:  # placed by a GTID
                    seen.append(("position", (s.status.relay_log_file, s.status.relay_log_pos)))
                return s

            engine.monitor.poll = full_poll  # type: ignore[method-assign]
            engine._position_poll = position_poll  # type: ignore[method-assign]

        engine = asyncio.run(run_held(sb, schema, "SELECT * FROM t WHERE id = 1 FOR UPDATE", opts, 4 << 30,
                                      watch, lambda e: e.counters.transactions >= 2900))
    placed = {pos for kind, pos in seen if kind == "position"}
    assert engine.counters.position_polls > 0 and placed, (engine.counters, sorted(placed), len(seen))
    keys = [pos for _, pos in seen]
    back = {a for a, b in itertools.pairwise(keys) if a > b}
    assert not back, [s for s in seen if s[1] in back]


def test_gtid_slave_pos_moves_on_a_replica_by_file_and_position() -> None:
    """MASTER_USE_GTID = no (MariaDB's default before 10.10): the SQL thread records each
    transaction's GTID all the same, so the position poll holds there too."""
    with Sandbox(SandboxConfig(replicas=1, gtid=False)) as sb:
        assert sb.slave_status()["Using_Gtid"] == "No"
        sb.source.query("CREATE DATABASE p")
        sb.source.query("CREATE TABLE p.t (id INT PRIMARY KEY)")
        for i in range(1, 4):
            sb.source.query(f"INSERT INTO p.t VALUES ({i})")
        sb.wait_caught_up(timeout=60)  # by file and position
        applied = sb.replica().query("SELECT @@GLOBAL.gtid_slave_pos AS p")[0]["p"]
        assert applied == sb.source.query("SELECT @@GLOBAL.gtid_binlog_pos AS p")[0]["p"]
