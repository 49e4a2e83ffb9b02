"""Table tests for the prefetch scheduler's pure decisions and the pool's guards."""

from __future__ import annotations

import pytest

from lagd.prefetch import control
from lagd.prefetch.pool import HotTexts, refuse_reason, session_setup
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.relaylog import Statement

LIMITS = control.Limits(min_transactions=20, max_transactions=400, max_bytes=1 << 20,
                        max_seconds=30.0, max_pages=1000)


def lead(trx: int = 0, rows: int = 0, nbytes: int = 0, seconds: float = 0.0, pages: int = 0) -> control.Lead:
    return control.Lead(trx, rows, nbytes, seconds, pages)


@pytest.mark.parametrize(
    ("kw", "action", "why"),
    [
        ({"sql_running": False}, "pause", "stopped"),
        ({"overtaken": True}, "jump", "overtook"),
        ({"enabled": False}, "wait", "backed off"),
        ({"lead": lead(pages=1000)}, "wait", "buffer-pool share"),
        ({"lead": lead(nbytes=1 << 20)}, "wait", "max_lead_bytes"),
        ({"lead": lead(seconds=31)}, "wait", "max_lead_seconds"),
        ({"lead": lead(trx=50)}, "wait", "reached the target"),
        ({"lead": lead(trx=10), "at_tail": True}, "idle", "read everything"),
        ({"lead": lead(trx=10)}, "read", "< target"),
        # The SQL thread overtaking wins over every limit: the cursor must move.
        ({"overtaken": True, "lead": lead(pages=5000)}, "jump", "overtook"),
        # Stopped SQL thread wins over everything.
        ({"sql_running": False, "overtaken": True}, "pause", "stopped"),
    ],
    ids=["sql-stopped", "overtaken", "backed-off", "page-budget", "bytes", "seconds", "target",
         "tail", "read", "jump-beats-limits", "pause-beats-jump"],
)
def test_decide_step(kw, action, why):
    args = {"sql_running": True, "overtaken": False, "at_tail": False, "enabled": True,
            "lead": lead(), "target_transactions": 50, "limits": LIMITS} | kw
    step = control.decide_step(**args)
    assert step.action == action
    assert why in step.reason


def test_page_budget_is_a_share_of_the_pool():
    lim = control.limits_for(20, 400, 1 << 26, 30.0, pool_bytes=256 << 20, pool_share=0.25)
    assert lim.max_pages == (64 << 20) // 16384


TUNING = control.Tuning(min_transactions=20, max_transactions=400, min_connections=4,
                        max_connections=8, adaptive=True, compare_every=3, backoff=4)


def window(prefetching=True, applied=10_000, probed=10_000, reads=8_000, in_time=500, late=0, seconds=5.0):
    return control.Window(seconds, prefetching, applied, probed, reads, in_time, late)


def state(**kw):
    return control.ControlState(**({"enabled": True, "target_transactions": 100, "connections": 8,
                                    "benefit": None, "reason": "x"} | kw))


@pytest.mark.parametrize(
    ("st", "w", "since", "expect"),
    [
        (state(), window(reads=10), 0, {"enabled": False, "backoff_windows": 4}),
        (state(), window(late=200, in_time=300), 0, {"enabled": True, "target_transactions": 150}),
        (state(target_transactions=400, connections=6), window(late=200, in_time=300), 0,
         {"target_transactions": 400, "connections": 7}),
        (state(), window(late=0, in_time=1000), 0, {"target_transactions": 90}),
        (state(), window(), 3, {"enabled": False, "off_windows_left": 1}),
        (state(rate_on=2000.0), window(prefetching=False, applied=10_000), 0,
         {"enabled": False, "backoff_windows": 4}),  # 2000 vs 2000 rows/s: does not pay
        (state(rate_on=6000.0), window(prefetching=False, applied=10_000), 0,
         {"enabled": True, "benefit": 3.0}),
        (state(enabled=False, backoff_windows=3), window(prefetching=False), 0,
         {"enabled": False, "backoff_windows": 2}),
        (state(enabled=False, backoff_windows=1), window(prefetching=False), 0,
         {"enabled": True, "backoff_windows": 0}),
    ],
    ids=["nothing-to-warm", "late-lead-up", "late-at-max-adds-connection", "all-in-time-lead-down",
         "compare-window-due", "does-not-pay", "pays-x3", "backing-off", "backoff-over"],
)
def test_evaluate(st, w, since, expect):
    got = control.evaluate(st, w, TUNING, since)
    for key, value in expect.items():
        assert getattr(got, key) == pytest.approx(value), (key, got.reason)
    assert got.reason


def test_not_adaptive_always_on():
    t = control.Tuning(20, 400, 4, 8, adaptive=False)
    assert control.evaluate(state(enabled=False), window(reads=0), t, 99).enabled


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT 1 FROM `d`.`t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (%s)", None),
        ("  SELECT 1 FROM t", None),
        ("UPDATE t SET a = 1", "not a SELECT"),
        ("DELETE FROM t", "not a SELECT"),
        ("SELECT 1 FROM t FOR UPDATE", "locking read or INTO"),
        ("SELECT 1 FROM t FOR SHARE", "locking read or INTO"),
        ("SELECT 1 FROM t LOCK IN SHARE MODE", "locking read or INTO"),
        ("SELECT 1 INTO @x FROM t", "locking read or INTO"),
        ("SELECT 1 FROM t; DROP TABLE t", "more than one statement"),
        ("select 1 from t for update", "locking read or INTO"),
        ("SELECT 1 FROM t FOR\n  UPDATE", "locking read or INTO"),
        ("SELECT 1 FROM t FoR sHaRe", "locking read or INTO"),
        ("SELECT 1 FROM t FORCE INDEX (k) WHERE k IN (1) lock\tin share  mode", "locking read or INTO"),
        # Words that hold UPDATE or INTO but are no such construct: checked, then let through.
        ("SELECT 1 FROM t FORCE INDEX (`updated_at`) WHERE `updated_at` IN ('2024-01-01')", None),
        ("SELECT 1 FROM `into_t` FORCE INDEX (`PRIMARY`) WHERE `id` IN (1)", None),
        # A statement probe carries the statement's literals: what is quoted is data.
        ("SELECT * FROM t WHERE s = 'a;b' LIMIT 256", None),
        ("SELECT * FROM t WHERE s IN ('moved into stock', 'for update', 'lock in share mode')", None),
        ('SELECT * FROM t WHERE s = "it\'s; into" AND `for update` = 1', None),
        ("SELECT * FROM t WHERE s = 'it''s' AND n = 'a;b'", None),
        ("SELECT 1 FROM `into`.`t;x`", None),
        ("SELECT 1 FROM t WHERE s = 'x' FOR UPDATE", "locking read or INTO"),
        ("SELECT 1 FROM t WHERE s = 'x'; DROP TABLE t", "more than one statement"),
        ("SELECT 1 FROM t WHERE s = 'x' INTO @v", "locking read or INTO"),
        # Unpaired or escaped quotes, comments: the server could read a quote where the
        # check does not, so the whole text is checked (data included, as before).
        ("SELECT 1 FROM t WHERE s = 'a\\' FOR UPDATE -- '", "locking read or INTO"),
        ("SELECT 1 FROM t WHERE s = 'a\\' AND u = 'into'", "locking read or INTO"),
        ("SELECT 1 FROM t /* ' */ FOR UPDATE /* ' */", "locking read or INTO"),
        ("SELECT 1 FROM t # it's\n FOR UPDATE -- '", "locking read or INTO"),
        ("SELECT 1 FROM t WHERE a = 1 --1 '\n' FOR UPDATE '\n'", "locking read or INTO"),
        ("SELECT 1 FROM t WHERE s = 'unclosed; FOR UPDATE", "more than one statement"),
    ],
)
def test_refuse_reason(sql, reason):
    assert refuse_reason(sql) == reason


@pytest.mark.parametrize(
    ("mariadb", "timeout_stmt"),
    [(True, "SET SESSION max_statement_time = 0.500"), (False, "SET SESSION MAX_EXECUTION_TIME = 500")],
    ids=["mariadb", "mysql"],
)
def test_session_setup_is_read_only_with_a_timeout(mariadb, timeout_stmt):
    stmts = session_setup(mariadb, 500)
    assert "SET SESSION TRANSACTION READ ONLY" in stmts
    assert "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED" in stmts
    assert "SET SESSION time_zone = '+00:00'" in stmts
    assert "SET SESSION lock_wait_timeout = 1" in stmts
    assert timeout_stmt in stmts


@pytest.mark.parametrize(("probed", "reads", "worth"), [
    (16, 16, False),    # too few rows to judge
    (64, 64, True),     # every probed row was a disk read: cold data
    (64, 16, True),     # a quarter
    (64, 15, False),
    (256, 0, False),    # in memory already
])
def test_worth_warming(probed, reads, worth):
    w = control.Window(0.0, True, 0, probed, reads, 0, 0)
    assert control.worth_warming(w) is worth


@pytest.mark.parametrize(("probed", "reads", "proven", "cold"), [
    (199, 0, False, False),   # too few rows on probation
    (200, 0, False, True),    # a probation's sample: in memory
    (200, 4, False, False),   # 2% of them read: not all in memory
    (272, 0, True, False),    # probes have read before: a short sample's reads can predate it
    (999, 0, True, False),
    (1000, 19, True, True),   # a thousand rows with under 2% read: in memory now
    (1000, 20, True, False),
])
def test_nothing_to_warm_asks_more_rows_once_probes_have_read(probed: int, reads: int, proven: bool,
                                                              cold: bool) -> None:
    w = control.Window(0.0, True, 0, probed, reads, 0, 0)
    why = control.nothing_to_warm(w, proven)
    assert (why is not None) is cold
    assert why is None or f"{probed} rows probed, {reads} disk reads" in why


@pytest.mark.parametrize(("pool_mb", "share", "off"), [
    (32, 0.25, "the buffer pool holds 2048 pages (32 MB, < 64 MB)"),  # the harm check's pool
    (64, 0.08, None),  # the sandbox's pool at the default share: a 327-page lead
    (256, 0.08, None),
    (1024, 0.0, "leaves the probes 64 pages"),  # a share of nothing turns prefetch off
])
def test_pool_too_small_judges_the_pool_and_a_share_of_nothing(pool_mb: int, share: float,
                                                               off: str | None) -> None:
    limits = control.limits_for(100, 5000, 64 << 20, 30.0, pool_mb << 20, share)
    got = control.pool_too_small(limits)
    assert (got is None) if off is None else (got is not None and off in got), got


def test_a_statement_probe_whose_literals_hold_a_semicolon_or_into_is_sent() -> None:
    b = ProbeBatcher()
    probes = [*b.add_statement(Statement("shop", "UPDATE t SET v = 1 WHERE name = 'a;b'", 0, 1)),
              *b.add_statement(Statement("shop", "DELETE FROM t WHERE note = 'moved into stock'", 0, 1)),
              *b.flush()]
    assert len(probes) == 2
    assert [refuse_reason(p.sql) for p in probes] == [None, None]


@pytest.mark.parametrize(("size", "status", "seconds", "expected", "why"), [
    (16, "timeout", 0.5, 8, "timed out"),
    (1, "timeout", 0.5, 1, "timed out"),  # never below one statement a probe
    (16, "ok", 0.3, 8, "took 300 ms"),  # slower than SLOW_PROBE
    (16, "ok", 0.03, 16, "16 statements"),  # fast, at the most already
    (8, "ok", 0.03, 9, "took 30 ms: 9"),  # fast: one more
    (8, "ok", 0.07, 8, "8 statements"),  # between half SLOW_PROBE and SLOW_PROBE: kept
    (8, "error", 0.0, 8, "error"),  # a failure says nothing of the batch's cost
    (8, "dropped", 0.0, 8, "dropped"),
])
def test_a_statement_shapes_batch_follows_its_probes_answers(size: int, status: str, seconds: float,
                                                             expected: int, why: str) -> None:
    got, reason = control.statement_batch(size, 16, status, seconds)
    assert got == expected and why in reason, reason


@pytest.mark.parametrize(("window", "status", "expected", "why"), [
    (1, "ok", 2, "answered: 2 probes out"),  # a new shape's window grows by its answers
    (31, "ok", 32, "32 probes out"),
    (32, "ok", 32, "32 probes out"),  # at the most
    (32, "timeout", 16, "timed out: 16"),
    (1, "timeout", 1, "1 probes out"),  # one out, always
    (8, "dropped", 8, "dropped"),  # says nothing of the shape's cost
    (8, "error", 8, "error"),
])
def test_the_probes_a_statement_shape_has_out_follow_its_answers(window: int, status: str, expected: int,
                                                                 why: str) -> None:
    got, reason = control.statement_window(window, 32, status)
    assert got == expected and why in reason, reason


@pytest.mark.parametrize(("asked", "found", "probed", "why"), [
    (0, 0, True, "too few to tell"),
    (63, 63, True, "too few to tell"),
    (64, 58, False, "91% of upserted rows exist"),
    (128, 128, False, "100% of upserted rows exist"),
    (128, 115, True, "90% of upserted rows exist: the new rows' entries are probed"),
    (200, 20, True, "10% of upserted rows exist"),
])
def test_upserts_probe_their_other_entries_unless_their_rows_exist(asked: float, found: float, probed: bool,
                                                                  why: str) -> None:
    got, reason = control.upsert_entries(asked, found)
    assert got is probed and why in reason


# ----- the position poll: where @@gtid_slave_pos places the SQL thread -------------

@pytest.mark.parametrize(("before", "now", "ours", "gtid", "why"), [
    (None, "0-1-5", {"0"}, "0-1-5", "moved"),                          # the first reading
    ("0-1-5", "0-1-5", {"0"}, None, "same"),
    ("0-1-5", "0-1-9", {"0"}, "0-1-9", "moved"),
    ("0-1-5,7-3-2", "0-1-9,7-3-4", {"0"}, "0-1-9", "moved"),           # 7: another channel's
    ("0-1-5,7-3-2", "0-1-5,7-3-4", {"0"}, None, "same"),               # only the other channel moved
    ("0-1-5, 7-3-2", "7-3-2,0-1-5", {"0", "7"}, None, "same"),         # spelled in another order
    ("0-1-5,1-1-2", "0-1-6,1-1-3", {"0", "1"}, None, "2 domains"),     # parallel over two domains
    (None, "0-1-5,1-1-2", {"0", "1"}, None, "2 domains"),
    ("0-1-5", "", {"0"}, None, "left"),                                 # RESET: nothing applied
    ("0-1-5", "0-1-5", set(), None, "no transaction"),                 # none read yet: unplaced
    (None, "7-3-2", {"0"}, None, "no reading before"),                   # only another channel's
])
def test_applied_gtid_names_one_transaction_or_says_why_not(
        before: str | None, now: str, ours: set[str], gtid: str | None, why: str) -> None:
    got, reason = control.applied_gtid(before, now, ours)
    assert got == gtid
    assert why in reason


def test_hot_texts_are_the_first_ones_then_the_most_used_of_each_window() -> None:
    hot = HotTexts(most=2, window=10)
    # The first two texts as they come; a third waits for the window's count.
    got = [hot.prepared(t) for t in ("a", "b", "c", "a", "c", "c")]
    assert got == [True, True, False, True, False, False]
    # The tenth use closes the window: c 5, b 3, a 2 -> c and b from then on.
    assert [hot.prepared(t) for t in ("c", "c", "b", "b")] == [False, False, True, True]
    assert [hot.prepared(t) for t in ("a", "b", "c")] == [False, True, True]


def test_hot_texts_under_the_cache_size_all_run_prepared() -> None:
    hot = HotTexts(most=32, window=64)
    texts = [f"SELECT {i}" for i in range(20)]
    assert all(hot.prepared(t) for _ in range(10) for t in texts)


def test_hot_texts_over_the_cache_size_keep_it_to_the_most_used() -> None:
    hot = HotTexts(most=4, window=100)
    # In every 60 probes 4 hot texts 5 times each, 40 cold ones once: after the first
    # window only the hot ones run prepared.
    for _ in range(3):
        for i in range(40):
            hot.prepared(f"cold {i}")
            if i % 2 == 0:
                hot.prepared(f"hot {i % 8 // 2}")
    assert [hot.prepared(f"hot {i}") for i in range(4)] == [True] * 4
    assert not any(hot.prepared(f"cold {i}") for i in range(40))
