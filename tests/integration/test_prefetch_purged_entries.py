"""Entries purge comes back for are left to the SQL thread, on a real replica (rewrite.PURGED_ENTRIES).

The SQL thread waits on the backlog's first change while the engine reads the
rest: single-row DELETEs and UPDATEs of an indexed column, each its own
transaction, then one transaction of DELETEs bigger than control.INSIDE_ROWS.
Outside it only the rows are probed (their `k` entries counted as moved or
deleted); inside it, once the engine has read INSIDE_ROWS rows of it, the
DELETEs' `k` entries are probed too (purge waits for the commit there). The
replica ends equal to the source.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lagd.prefetch import control
from lagd.prefetch.engine import PrefetchEngine
from lagd.prefetch.service import PrefetchOptions
from lagd.sandbox.pair import Sandbox
from tests.integration.engine_util import run_held
from tests.integration.test_prefetch_foreign_keys import _assert_same_data, _backlog

ROWS = 6000
SMALL = 100  # single-row transactions of each kind
BIG = control.INSIDE_ROWS + 500  # DELETEs in one transaction


def test_moved_and_deleted_entries_are_probed_only_inside_a_big_transaction(
        sandbox: Sandbox, schema: str) -> None:
    sb = sandbox
    big_from = ROWS - BIG + 1
    backlog = ["UPDATE t SET c = 1 WHERE id = 1"]  # held: the SQL thread waits here
    backlog += [f"DELETE FROM t WHERE id = {i}" for i in range(2, 2 + SMALL)]
    backlog += [f"UPDATE t SET k = k + 7 WHERE id = {i}" for i in range(1000, 1000 + SMALL)]
    backlog += ["BEGIN", f"DELETE FROM t WHERE id >= {big_from} ORDER BY id", "COMMIT"]
    _backlog(sb, schema, [
        "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, c INT NOT NULL DEFAULT 0, KEY k (k))",
        f"INSERT INTO t (id, k) SELECT seq, seq * 3 FROM seq_1_to_{ROWS}"], backlog, "ROW")
    probed: dict[str, set[int]] = {}

    def seen(_engine: PrefetchEngine, probe: Any) -> None:
        if probe.schema == schema:
            ids = probe.params[1::2] if probe.index == "k" else probe.params  # (k, id) pairs
            probed.setdefault(str(probe.index), set()).update(ids)

    def enough(engine: PrefetchEngine) -> bool:
        return engine.counters.row_changes >= 1 + 2 * SMALL + BIG and not engine.batcher.pending

    try:
        # A lead long enough for the whole backlog (the page budget is a share of the pool).
        opts = PrefetchOptions(connections=4, adaptive=False, min_lead_transactions=1000)
        engine = asyncio.run(run_held(sb, schema, "SELECT * FROM t WHERE id = 1 FOR UPDATE", opts, 1 << 30,
                                      seen, enough))
    finally:
        sb.start_sql_thread()
        sb.wait_caught_up(timeout=60)
    skipped = engine.snapshot().counters["skipped"]
    print("probed:", {k: len(v) for k, v in probed.items()}, "skipped:", skipped)
    small = set(range(2, 2 + SMALL)) | set(range(1000, 1000 + SMALL))
    assert small <= probed.get("PRIMARY", set())  # every row is probed
    assert not probed.get("k", set()) & small  # none of their k entries
    assert skipped.get("deleted_entry", 0) >= SMALL and skipped.get("moved_entry", 0) >= 2 * SMALL
    inside = probed.get("k", set())
    # The big transaction's DELETEs past its first INSIDE_ROWS rows probe their k entries.
    assert inside and min(inside) >= big_from + control.INSIDE_ROWS - 1, sorted(inside)[:5]
    assert len(inside) >= BIG - control.INSIDE_ROWS - 16  # (a batch may still wait at the end)
    _assert_same_data(sb, schema, ("t",))
