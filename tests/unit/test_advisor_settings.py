"""Every settings rule on the recorded MariaDB 10.11 sets and the documented
MySQL 8.0 / 8.4 defaults (tests/fixtures/server_vars/ORIGIN.md): where it
fires, where it stays quiet, and where it is not applicable."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lagd.advisor import settings as rules
from lagd.advisor.gather import status_deltas
from lagd.advisor.settings import RULES, Advice, AdvisorError, ServerSettings, Severity, advise
from lagd.mysql.replica import ServerFlavor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server_vars"
MARIA_SRC, MARIA_REP = "mariadb-10.11-source.json", "mariadb-10.11-replica.json"
MY80, MY84 = "mysql-8.0-defaults.json", "mysql-8.4-defaults.json"


@cache
def _doc(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def load(name: str, role: str, *, version: str | None = None, variables: dict[str, str | None] | None = None,
         status: dict[str, str | None] | None = None, **facts: Any) -> ServerSettings:
    """A fixture, with variables/status overridden (None removes one) and facts added."""
    doc = _doc(name)
    v = {**doc["variables"], **(variables or {})}
    s = {**doc["status"], **(status or {})}
    flavor = ServerFlavor.from_version_string(version or doc["version"])
    return ServerSettings.of(flavor, role, {k: x for k, x in v.items() if x is not None},
                             {k: x for k, x in s.items() if x is not None}, **facts)


FIRES, QUIET, NA = "fires", "quiet", "n/a"
R = rules


def case(ident: str, *values: Any) -> Any:
    return pytest.param(*values, id=ident)


GIB = 1024 ** 3
# A lagging replica that reads 5% of its page requests from disk.
READING: dict[str, Any] = {"lagging": True, "buffer_pool_reads_delta": 5_000,
                           "buffer_pool_read_requests_delta": 100_000}
# (rule, settings, expected, a phrase the reason, advice or caveat must contain)
CASES: list[Any] = [
    # rows_query_log_events
    case("rowsquery-mariadb-default-on", R.rows_query_log_events, load(MARIA_SRC, "source"), QUIET,
         "binlog_annotate_row_events=ON"),
    case("rowsquery-mariadb-off", R.rows_query_log_events,
         load(MARIA_SRC, "source", variables={"binlog_annotate_row_events": "OFF"}), FIRES,
         "replicate_annotate_row_events=ON"),
    case("rowsquery-mysql80-default-off", R.rows_query_log_events, load(MY80, "source"), FIRES,
         "SET GLOBAL binlog_rows_query_log_events=ON"),
    case("rowsquery-mysql84-default-off", R.rows_query_log_events, load(MY84, "source"), FIRES,
         "literal values"),
    case("rowsquery-statement-format", R.rows_query_log_events,
         load(MY80, "source", variables={"binlog_format": "STATEMENT"}), QUIET, "logged as text anyway"),
    case("rowsquery-no-binlog", R.rows_query_log_events, load(MY80, "source", variables={"log_bin": "OFF"}),
         NA, "log_bin=OFF"),
    case("rowsquery-replica-role", R.rows_query_log_events, load(MARIA_REP, "replica"), NA, "source decides"),
    # annotate_reaches_relay_log
    case("annotate-recorded-replica-without-binlog", R.annotate_reaches_relay_log, load(MARIA_REP, "replica"),
         FIRES, "log_bin=OFF, log_slave_updates=OFF"),
    case("annotate-replica-logging-updates", R.annotate_reaches_relay_log,
         load(MARIA_REP, "replica", variables={"log_bin": "ON", "log_slave_updates": "ON"}), QUIET,
         "reach the relay log"),
    case("annotate-mysql", R.annotate_reaches_relay_log, load(MY80, "replica"), NA, "MySQL replicas"),
    case("annotate-source-role", R.annotate_reaches_relay_log, load(MARIA_SRC, "source"), NA, "requests"),
    # statement_load_data
    case("stmtload-mariadb-row", R.statement_load_data, load(MARIA_SRC, "source"), QUIET,
         "binlog_format=ROW"),
    case("stmtload-mariadb-statement", R.statement_load_data,
         load(MARIA_SRC, "source", variables={"binlog_format": "STATEMENT"}), FIRES, "sql_log_bin=0"),
    case("stmtload-mysql-mixed", R.statement_load_data,
         load(MY84, "source", variables={"binlog_format": "MIXED"}), QUIET, "MIXED logs it row-based"),
    case("stmtload-replica-role", R.statement_load_data, load(MY80, "replica"), NA, "binlog_format decides"),
    # load_tmpdir_space
    case("tmpdir-nothing-coming", R.load_tmpdir_space, load(MARIA_REP, "replica"), QUIET,
         "no statement-based LOAD DATA"),
    case("tmpdir-free-unknown", R.load_tmpdir_space, load(MARIA_REP, "replica", statement_load_bytes=GIB),
         FIRES, "slave_load_tmpdir=<tmpdir> first; free space there unknown"),
    case("tmpdir-too-small-mysql84", R.load_tmpdir_space,
         load(MY84, "replica", statement_load_bytes=GIB, load_tmpdir_free_bytes=GIB // 2), FIRES,
         "replica_load_tmpdir=<tmpdir> has only"),
    case("tmpdir-enough-mysql57-name", R.load_tmpdir_space,
         load(MY80, "replica", version="5.7.44", variables={"replica_load_tmpdir": None},
                      statement_load_bytes=GIB, load_tmpdir_free_bytes=2 * GIB),
         QUIET, "slave_load_tmpdir=<tmpdir> has 2,147,483,648 bytes free"),
    case("tmpdir-source-role", R.load_tmpdir_space, load(MY80, "source", statement_load_bytes=GIB), NA,
         "replica writes"),
    # replica_binlog_cache
    case("binlogcache-mariadb-replica-no-binlog", R.replica_binlog_cache,
         load(MARIA_REP, "replica", biggest_coming_bytes=GIB), NA, "log_bin=OFF"),
    case("binlogcache-default-unlimited", R.replica_binlog_cache,
         load(MY80, "replica", biggest_coming_bytes=GIB), QUIET, "fits in max_binlog_cache_size"),
    case("binlogcache-too-small", R.replica_binlog_cache,
         load(MY84, "replica", variables={"max_binlog_cache_size": str(GIB)}, biggest_coming_bytes=2 * GIB),
         FIRES, "error 1197"),
    case("binlogcache-no-replica-updates", R.replica_binlog_cache,
         load(MY80, "replica", variables={"log_replica_updates": "OFF", "log_slave_updates": "OFF"},
                      biggest_coming_bytes=GIB),
         NA, "does not log what it applies"),
    case("binlogcache-nothing-coming", R.replica_binlog_cache, load(MY80, "replica"), QUIET,
         "no big transaction coming"),
    # log_buffer_waits
    case("logwaits-recorded-zero", R.log_buffer_waits, load(MARIA_REP, "replica"), QUIET,
         "Innodb_log_waits=0"),
    case("logwaits-growing-mariadb", R.log_buffer_waits, load(MARIA_REP, "replica", log_waits_delta=12),
         FIRES, "in the configuration (a restart)"),
    case("logwaits-not-growing", R.log_buffer_waits,
         load(MY80, "replica", status={"Innodb_log_waits": "40"}, log_waits_delta=0), QUIET, "did not grow"),
    case("logwaits-since-startup-mysql", R.log_buffer_waits,
         load(MY84, "source", status={"Innodb_log_waits": "40"}), FIRES, "SET GLOBAL (dynamic)"),
    case("logwaits-absent", R.log_buffer_waits, load(MY80, "source", status={"Innodb_log_waits": None}), NA,
         "no Innodb_log_waits"),
    # redo_capacity
    case("redo-recorded-idle", R.redo_capacity, load(MARIA_SRC, "source"), QUIET,
         "innodb_log_file_size=16,777,216"),
    case("redo-mariadb-checkpoint-age-high", R.redo_capacity,
         load(MARIA_REP, "replica", status={"Innodb_checkpoint_age": "11000000"}), FIRES,
         "SET GLOBAL innodb_log_file_size=33554432 (dynamic since MariaDB 10.9"),
    case("redo-mysql80-checkpoint-age-high", R.redo_capacity,
         load(MY80, "replica", status={"Innodb_redo_log_current_lsn": "119566408"}), FIRES,
         "SET GLOBAL innodb_redo_log_capacity=209715200"),
    case("redo-big-transaction-coming", R.redo_capacity,
         load(MY84, "replica", biggest_coming_bytes=200_000_000), FIRES, "applying it forces checkpoints"),
    case("redo-mysql-before-8030", R.redo_capacity,
         load(MY80, "replica", version="8.0.28", biggest_coming_bytes=60_000_000), FIRES,
         "innodb_log_file_size x innodb_log_files_in_group (now 100,663,296 bytes) in the "
                 "configuration; it takes a restart"),
    case("redo-absent", R.redo_capacity, load(MY80, "replica", variables={"innodb_redo_log_capacity": None}),
         NA, "no innodb_redo_log_capacity"),
    # redo_log_disabled
    case("redooff-mysql80-on", R.redo_log_disabled, load(MY80, "replica"), QUIET,
         "Innodb_redo_log_enabled=ON"),
    case("redooff-disabled", R.redo_log_disabled,
         load(MY84, "source", status={"Innodb_redo_log_enabled": "OFF"}), FIRES, "can be rebuilt"),
    case("redooff-mysql-before-8021", R.redo_log_disabled, load(MY80, "source", version="8.0.20"), NA,
         "8.0.21+"),
    case("redooff-mariadb", R.redo_log_disabled, load(MARIA_SRC, "source"), NA, "MariaDB"),
    # log_writer_threads
    case("writers-mysql80-default-replica", R.log_writer_threads, load(MY80, "replica"), FIRES,
         "replica_parallel_workers=4"),
    case("writers-many-workers", R.log_writer_threads,
         load(MY84, "replica", variables={"replica_parallel_workers": "16"}), QUIET, "not low"),
    case("writers-off", R.log_writer_threads,
         load(MY84, "replica", variables={"innodb_log_writer_threads": "OFF"}), QUIET, "=OFF"),
    case("writers-source-role", R.log_writer_threads, load(MY80, "source"), NA, "clients"),
    case("writers-mysql-before-8022", R.log_writer_threads, load(MY80, "replica", version="8.0.21"), NA,
         "8.0.22+"),
    case("writers-mariadb", R.log_writer_threads, load(MARIA_REP, "replica"), NA, "8.0.22+"),
    # parallel_apply
    case("parallel-mariadb-recorded-off", R.parallel_apply, load(MARIA_REP, "replica"), FIRES,
         "slave_parallel_threads=0"),
    case("parallel-mariadb-on", R.parallel_apply,
         load(MARIA_REP, "replica", variables={"slave_parallel_threads": "4"}), QUIET,
         "slave_parallel_threads=4"),
    case("parallel-mysql84-default", R.parallel_apply, load(MY84, "replica"), QUIET,
         "replica_parallel_workers=4"),
    case("parallel-mysql-old-name-off", R.parallel_apply,
         load(MY80, "replica", version="8.0.25", variables={"replica_parallel_workers": None,
                                                                   "slave_parallel_workers": "0"}),
         FIRES, "one worker anyway"),
    case("parallel-source-role", R.parallel_apply, load(MY80, "source"), NA, "replica setting"),
    # dependency_tracking
    case("deps-mysql80-commit-order", R.dependency_tracking, load(MY80, "source"), FIRES,
         "=WRITESET on the source"),
    case("deps-mysql80-writeset", R.dependency_tracking,
         load(MY80, "source", variables={"binlog_transaction_dependency_tracking": "WRITESET"}), QUIET,
         "=WRITESET"),
    case("deps-mysql84-removed", R.dependency_tracking, load(MY84, "source"), NA, "removed in MySQL 8.4"),
    case("deps-mysql-replica", R.dependency_tracking, load(MY80, "replica"), NA, "source's setting"),
    case("deps-mysql-too-old", R.dependency_tracking, load(MY80, "source", version="5.7.21"), NA, "5.7.22+"),
    case("deps-mariadb-parallel-off", R.dependency_tracking, load(MARIA_REP, "replica"), NA,
         "parallel apply is off"),
    case("deps-mariadb-conservative", R.dependency_tracking,
         load(MARIA_REP, "replica", variables={"slave_parallel_threads": "4",
                                                       "slave_parallel_mode": "conservative"}),
         FIRES, "slave_parallel_mode='optimistic'"),
    case("deps-mariadb-optimistic", R.dependency_tracking,
         load(MARIA_REP, "replica", variables={"slave_parallel_threads": "4"}), QUIET, "optimistic"),
    case("deps-mariadb-source", R.dependency_tracking, load(MARIA_SRC, "source"), NA, "on the replica"),
    # durability_on_lagging_replica
    case("durability-mysql-defaults-lagging", R.durability_on_lagging_replica,
         load(MY80, "replica", lagging=True), FIRES, "innodb_flush_log_at_trx_commit=2, sync_binlog=0"),
    case("durability-not-lagging", R.durability_on_lagging_replica, load(MY80, "replica", lagging=False),
         QUIET, "not lagging"),
    case("durability-lag-unknown", R.durability_on_lagging_replica, load(MY84, "replica"), QUIET,
         "lag unknown"),
    case("durability-sandbox-already-relaxed", R.durability_on_lagging_replica,
         load(MARIA_REP, "replica", lagging=True), QUIET, "no fsync per commit"),
    case("durability-mariadb-flush1", R.durability_on_lagging_replica,
         load(MARIA_REP, "replica", variables={"innodb_flush_log_at_trx_commit": "1"}, lagging=True), FIRES,
         "failover candidate"),
    case("durability-source-role", R.durability_on_lagging_replica, load(MY80, "source", lagging=True), NA,
         "source"),
    # binlog_compression
    case("compression-big-load", R.binlog_compression,
         load(MY80, "source", biggest_coming_bytes=100 * 1024 ** 2), FIRES,
         "binlog_transaction_compression=ON"),
    case("compression-nothing-big", R.binlog_compression, load(MY84, "source"), QUIET,
         "no row-based transaction"),
    case("compression-on", R.binlog_compression,
         load(MY80, "source", variables={"binlog_transaction_compression": "ON"},
                      biggest_coming_bytes=GIB),
         QUIET, "=ON"),
    case("compression-replica-role", R.binlog_compression, load(MY80, "replica", biggest_coming_bytes=GIB),
         NA, "the source"),
    case("compression-too-old", R.binlog_compression, load(MY80, "source", version="8.0.19"), NA, "8.0.20+"),
    case("compression-mariadb", R.binlog_compression, load(MARIA_SRC, "source", biggest_coming_bytes=GIB), NA,
         "log_bin_compress"),
    # buffer_pool_working_set
    case("bufferpool-no-deltas", R.buffer_pool_working_set, load(MARIA_REP, "replica"), QUIET,
         "no Innodb_buffer_pool_reads"),
    case("bufferpool-5-percent-misses", R.buffer_pool_working_set,
         load(MARIA_REP, "replica", buffer_pool_reads_delta=5_000, buffer_pool_read_requests_delta=100_000),
         FIRES, "innodb_buffer_pool_size=67,108,864"),
    case("bufferpool-hits", R.buffer_pool_working_set,
         load(MY80, "replica", buffer_pool_reads_delta=50, buffer_pool_read_requests_delta=100_000), QUIET,
         "0.05%"),
    case("bufferpool-too-few-requests", R.buffer_pool_working_set,
         load(MY80, "replica", buffer_pool_reads_delta=500, buffer_pool_read_requests_delta=5_000), QUIET,
         "too few"),
    # change_buffering
    # free_page_waits
    case("freewait-mariadb-growing-doublewrite-on", R.free_page_waits,
         load(MARIA_REP, "replica", lagging=True, free_page_waits_delta=48_339), FIRES,
         "innodb_doublewrite=ON every page is written twice"),
    case("freewait-mysql84-growing", R.free_page_waits,
         load(MY84, "replica", lagging=True, free_page_waits_delta=120), FIRES,
         "grew by 120 over the window"),
    case("freewait-doublewrite-off", R.free_page_waits,
         load(MARIA_REP, "replica", variables={"innodb_doublewrite": "OFF"}, lagging=True,
              free_page_waits_delta=500), FIRES, "write latency first"),
    case("freewait-mariadb-fast", R.free_page_waits,
         load(MARIA_REP, "replica", version="11.4.4-MariaDB", variables={"innodb_doublewrite": "fast"},
              lagging=True, free_page_waits_delta=500), FIRES,
         "innodb_doublewrite=fast every page is written"),
    case("freewait-detect-only", R.free_page_waits,
         load(MY84, "replica", version="8.0.32", variables={"innodb_doublewrite": "DETECT_ONLY"},
              lagging=True, free_page_waits_delta=500), FIRES, "innodb_doublewrite=DETECT_ONLY"),
    case("freewait-a-burst", R.free_page_waits,
         load(MARIA_REP, "replica", lagging=True, free_page_waits_delta=99), QUIET, "grew by only 99"),
    case("freewait-not-growing", R.free_page_waits,
         load(MARIA_REP, "replica", lagging=True, free_page_waits_delta=0), QUIET, "did not grow"),
    case("freewait-since-startup-only", R.free_page_waits,
         load(MY80, "replica", status={"Innodb_buffer_pool_wait_free": "73610"}, lagging=True), QUIET,
         "73,610 since startup"),
    case("freewait-not-lagging", R.free_page_waits,
         load(MARIA_REP, "replica", lagging=False, free_page_waits_delta=500), QUIET, "not lagging"),
    case("freewait-lag-unknown", R.free_page_waits, load(MARIA_REP, "replica", free_page_waits_delta=500),
         QUIET, "lag unknown"),
    case("freewait-absent", R.free_page_waits,
         load(MY80, "replica", status={"Innodb_buffer_pool_wait_free": None}, lagging=True), NA,
         "no Innodb_buffer_pool_wait_free"),
    case("freewait-source-role", R.free_page_waits,
         load(MARIA_SRC, "source", lagging=True, free_page_waits_delta=500), NA, "replica's"),
    case("changebuf-mysql84-lagging-reading", R.change_buffering, load(MY84, "replica", **READING),
         FIRES, "SET GLOBAL innodb_change_buffering=all"),
    case("changebuf-mysql80-default-all", R.change_buffering, load(MY80, "replica", **READING),
         QUIET, "already buffers"),
    case("changebuf-inserts-only", R.change_buffering,
         load(MY80, "replica", variables={"innodb_change_buffering": "inserts"}, **READING), FIRES,
         "=inserts"),
    case("changebuf-no-room", R.change_buffering,
         load(MY80, "replica", variables={"innodb_change_buffer_max_size": "0"}, **READING), FIRES,
         "read-miss rate"),
    case("changebuf-not-lagging", R.change_buffering, load(MY84, "replica", lagging=False), QUIET,
         "not lagging"),
    case("changebuf-lag-unknown", R.change_buffering, load(MY84, "replica"), QUIET, "lag unknown"),
    case("changebuf-no-deltas", R.change_buffering, load(MY84, "replica", lagging=True), QUIET,
         "no buffer pool"),
    case("changebuf-hits", R.change_buffering,
         load(MY84, "replica", **{**READING, "buffer_pool_reads_delta": 50}), QUIET, "not what holds"),
    case("changebuf-mariadb", R.change_buffering, load(MARIA_REP, "replica", **READING), NA,
         "removed it in 11.0"),
    case("changebuf-source-role", R.change_buffering, load(MY84, "source", lagging=True), NA, "applies"),
    case("changebuf-mysql-without-it", R.change_buffering,
         load(MY84, "replica", variables={"innodb_change_buffering": None}, **READING), NA, "not found"),
]


@pytest.mark.parametrize(("rule", "settings", "expected", "phrase"), CASES)
def test_rule(rule: Any, settings: ServerSettings, expected: str, phrase: str) -> None:
    a: Advice = rule(settings)
    assert a.rule == rule.__name__
    if expected == FIRES:
        assert a.fired, a.reason
        assert a.advice and a.caveat
    elif expected == QUIET:
        assert not a.fired and not a.reason.startswith("not applicable"), a.reason
    else:
        assert not a.fired and a.reason.startswith("not applicable"), a.reason
    assert phrase in " | ".join((a.reason, a.advice, a.caveat))


def test_every_rule_is_in_the_table() -> None:
    tested = {p.values[0].__name__ for p in CASES}
    assert tested == {r.__name__ for r in RULES}


@pytest.mark.parametrize("fixture", [MARIA_SRC, MARIA_REP, MY80, MY84])
@pytest.mark.parametrize("role", ["source", "replica"])
def test_every_rule_answers_on_every_fixture(fixture: str, role: str) -> None:
    for a in advise(load(fixture, role)):
        assert a.reason
        assert isinstance(a.severity, Severity)
        assert not a.fired or (a.advice and a.caveat)


@pytest.mark.parametrize(("rule", "settings", "severity"), [
    case("tmpdir-unknown-is-warning", R.load_tmpdir_space,
         load(MARIA_REP, "replica", statement_load_bytes=GIB), Severity.WARNING),
    case("tmpdir-full-is-critical", R.load_tmpdir_space,
         load(MARIA_REP, "replica", statement_load_bytes=GIB,
                                               load_tmpdir_free_bytes=1),
         Severity.CRITICAL),
    case("single-applier-lagging-is-warning", R.parallel_apply, load(MARIA_REP, "replica", lagging=True),
         Severity.WARNING),
    case("redo-big-transaction-alone-is-info", R.redo_capacity,
         load(MY84, "replica", biggest_coming_bytes=200_000_000), Severity.INFO),
])
def test_severity(rule: Any, settings: ServerSettings, severity: Severity) -> None:
    assert rule(settings).severity is severity


def test_an_unknown_role_is_a_user_error() -> None:
    with pytest.raises(AdvisorError) as e:
        load(MY80, "primary")
    assert e.value.fix and "'source' or 'replica'" in e.value.fix


@pytest.mark.parametrize(("before", "after", "want"), [
    case("growth",
         {"Innodb_log_waits": "3", "Innodb_buffer_pool_reads": "10",
                  "Innodb_buffer_pool_read_requests": "1000", "Innodb_buffer_pool_wait_free": "7"},
         {"Innodb_log_waits": "5", "Innodb_buffer_pool_reads": "60",
                  "Innodb_buffer_pool_read_requests": "21000", "Innodb_buffer_pool_wait_free": "907"},
         {"log_waits_delta": 2, "buffer_pool_reads_delta": 50, "buffer_pool_read_requests_delta": 20000,
          "free_page_waits_delta": 900}),
    case("restart-in-between", {"Innodb_log_waits": "30"}, {"Innodb_log_waits": "1"},
         {"log_waits_delta": None}),
])
def test_status_deltas(before: dict[str, str], after: dict[str, str], want: dict[str, int | None]) -> None:
    got = status_deltas(load(MY80, "replica", status=before), load(MY80, "replica", status=after))
    assert {k: got[k] for k in want} == want


# Every variable and status a rule reads, removed: advice still reads as
# sentences, with no "unknown" standing where a number should be.
_ALL_FACTS: dict[str, Any] = dict(lagging=True, biggest_coming_bytes=200_000_000, statement_load_bytes=GIB,
                                  log_waits_delta=5, buffer_pool_reads_delta=5_000,
                                  buffer_pool_read_requests_delta=50_000, free_page_waits_delta=900)


@pytest.mark.parametrize("fixture", [MARIA_SRC, MARIA_REP, MY80, MY84])
@pytest.mark.parametrize("role", ["source", "replica"])
@pytest.mark.parametrize("known", [True, False], ids=["values-known", "values-missing"])
def test_advice_text_is_rendered_from_values(fixture: str, role: str, known: bool) -> None:
    variables: dict[str, str | None] = {}
    if not known:
        variables = {k: None for k in ("innodb_log_buffer_size", "innodb_buffer_pool_size",
                                       "max_binlog_cache_size", "binlog_format", "innodb_doublewrite")}
    for a in advise(load(fixture, role, variables=variables, **_ALL_FACTS)):
        for text in (a.advice, a.caveat, a.reason):
            for leak in ("unknown bytes", "=unknown", "None", "<pause>", "nan"):
                assert leak not in (text or ""), f"{a.rule}: {leak!r} in {text!r}"
