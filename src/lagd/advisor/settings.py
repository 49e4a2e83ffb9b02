"""Server settings that slow a replica down around big transactions: one pure
rule each, over a :class:`ServerSettings` value.

A rule returns an :class:`Advice` whether it fires or not, always with the
reason, like gh-ost's throttle checks: "did not fire because ..." is as
useful to an on-call engineer as the advice itself. A rule whose variables
do not exist on the server's flavor or version, or that concerns the other
role, stays silent with a reason starting "not applicable".

Facts the variables cannot tell (the biggest transaction coming, free bytes
in the load tmpdir, counter deltas over a window, whether the replica lags)
are optional fields the caller fills in; a rule that needs a missing fact
does not fire and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from lagd.errors import LagdError
from lagd.mysql.changebuf import DELETE_MARKS, INSERTS, buffered
from lagd.mysql.replica import ServerFlavor

Role = Literal["source", "replica"]
ROLES: tuple[Role, ...] = ("source", "replica")


class AdvisorError(LagdError):
    """A setting or input the advisor cannot work with."""


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Advice:
    rule: str
    fired: bool
    severity: Severity
    advice: str  # what to do (empty when not fired)
    caveat: str  # what doing it costs or risks
    reason: str  # why it fired or stayed silent, with the values read


_ON = frozenset({"on", "1", "yes", "true"})
_OFF = frozenset({"off", "0", "no", "false"})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """One server's variables and status (names lower-cased), and optional facts."""

    flavor: ServerFlavor
    role: Role
    variables: Mapping[str, str] = field(hash=False, repr=False)
    status: Mapping[str, str] = field(hash=False, repr=False)
    biggest_coming_bytes: int | None = None  # biggest big transaction in the relay log
    statement_load_bytes: int | None = None  # biggest statement-based LOAD DATA file coming
    load_tmpdir_free_bytes: int | None = None
    log_waits_delta: int | None = None  # Innodb_log_waits growth over the caller's window
    buffer_pool_reads_delta: int | None = None
    buffer_pool_read_requests_delta: int | None = None
    free_page_waits_delta: int | None = None  # Innodb_buffer_pool_wait_free growth over the window
    lagging: bool | None = None  # lag beyond the caller's budget

    @classmethod
    def of(
        cls, flavor: ServerFlavor, role: str, variables: Mapping[str, object],
        status: Mapping[str, object], **facts: int | bool | None,
    ) -> ServerSettings:
        if role not in ROLES:
            raise AdvisorError(f"unknown server role {role!r}", fix="give the role as 'source' or 'replica'")
        return cls(
            flavor, role,
            {k.lower(): "" if v is None else str(v) for k, v in variables.items()},
            {k.lower(): "" if v is None else str(v) for k, v in status.items()},
            **facts,  # type: ignore[arg-type]
        )

    def with_facts(self, **facts: int | bool | None) -> ServerSettings:
        return dataclasses.replace(self, **facts)  # type: ignore[arg-type]

    # -- reading ---------------------------------------------------------

    def name_of(self, *names: str) -> str | None:
        """The first of ``names`` this server has (renamed variables)."""
        return next((n for n in names if n in self.variables), None)

    def var(self, *names: str) -> str | None:
        name = self.name_of(*names)
        return None if name is None else self.variables[name]

    def int_var(self, *names: str) -> int | None:
        return _int(self.var(*names))

    def on(self, *names: str) -> bool | None:
        value = self.var(*names)
        if value is None:
            return None
        v = value.strip().lower()
        return True if v in _ON else False if v in _OFF else None

    def status_int(self, name: str) -> int | None:
        return _int(self.status.get(name.lower()))

    def mysql_from(self, version: tuple[int, int, int]) -> bool:
        return self.flavor.is_mysql and self.flavor.version >= version

    @property
    def writes_binlog(self) -> bool:
        return self.on("log_bin") is True

    @property
    def logs_replica_updates(self) -> bool:
        """Whether it writes what its SQL thread applies into its own binlog."""
        return self.writes_binlog and self.on("log_replica_updates", "log_slave_updates") is True

    @property
    def parallel_workers(self) -> tuple[int | None, str]:
        """Applier workers and the variable read (MariaDB: threads; 0 = off)."""
        if self.flavor.is_mariadb:
            return self.int_var("slave_parallel_threads"), "slave_parallel_threads"
        name = self.name_of("replica_parallel_workers", "slave_parallel_workers")
        name = name or "replica_parallel_workers"
        return self.int_var(name), name

    @property
    def redo_capacity(self) -> tuple[int | None, str]:
        """Redo log capacity in bytes, and where it comes from."""
        if self.mysql_from((8, 0, 30)):
            cap = self.int_var("innodb_redo_log_capacity")
            return cap, "innodb_redo_log_capacity"
        size = self.int_var("innodb_log_file_size")
        if size is None:
            return None, "innodb_log_file_size"
        files = self.int_var("innodb_log_files_in_group")
        if self.flavor.is_mariadb or files is None:
            # MariaDB 10.5+ has one redo file; innodb_log_files_in_group is gone (10.6).
            return size, "innodb_log_file_size"
        return size * files, "innodb_log_file_size x innodb_log_files_in_group"


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _na(rule: str, severity: Severity, why: str) -> Advice:
    return Advice(rule, False, severity, "", "", f"not applicable: {why}")


def _quiet(rule: str, severity: Severity, why: str) -> Advice:
    return Advice(rule, False, severity, "", "", why)


def _not_lagging(rule: str, sev: Severity, s: ServerSettings) -> Advice | None:
    """Quiet while the replica does not lag (or its lag is unknown): the rules that call
    this judge a catch-up. None when it lags."""
    if s.lagging is None:
        return _quiet(rule, sev, "lag unknown")
    if not s.lagging:
        return _quiet(rule, sev, "the replica is not lagging")
    return None


def _mib(n: float) -> str:
    return f"{n / (1024 * 1024):,.0f} MiB"


SQL_LOG_BIN_NOTE = (
    "Loading with SET SESSION sql_log_bin=0 keeps the load out of the binary log, and so off the "
    "replicas, but it is only safe when every server loads the same data itself (run the same load "
    "on each replica, also with sql_log_bin=0 so it gets no errant GTID); otherwise the replicas "
    "silently miss those rows."
)


# -- rules ---------------------------------------------------------------------


def rows_query_log_events(s: ServerSettings) -> Advice:
    """Row events without their statement text: lagd cannot tell a LOAD DATA
    from an INSERT ... SELECT, nor show the statement to the on-call."""
    rule, sev = "rows_query_log_events", Severity.INFO
    if s.role != "source":
        return _na(rule, sev, "the source decides what its binary log carries")
    if not s.writes_binlog:
        return _na(rule, sev, "the source writes no binary log (log_bin=OFF)")
    if s.flavor.is_mariadb:
        name = "binlog_annotate_row_events"
    elif s.flavor.version >= (5, 6, 2):
        name = "binlog_rows_query_log_events"
    else:
        return _na(rule, sev, f"{s.flavor} has no binlog_rows_query_log_events (MySQL 5.6.2+)")
    value = s.on(name)
    if value is None:
        return _na(rule, sev, f"{name} not found on {s.flavor}")
    fmt = (s.var("binlog_format") or "").upper()
    if fmt == "STATEMENT":
        return _quiet(rule, sev, "binlog_format=STATEMENT: statements are logged as text anyway")
    if value:
        return _quiet(rule, sev, f"{name}=ON: row events carry the statement that made them")
    advice = (
        f"SET GLOBAL {name}=ON, and set it in the configuration file: row events then carry the "
        "statement that made them, so lagd tells a LOAD DATA from an INSERT ... SELECT and shows it."
    )
    if s.flavor.is_mariadb:
        advice += (" MariaDB replicas receive the text only with log_slave_updates=ON and "
                   "replicate_annotate_row_events=ON (rule annotate_reaches_relay_log).")
    else:
        advice += " It applies to sessions started after the change."
    caveat = ("The statement text, literal values included, goes into the binary log and every relay "
              "log: whoever can read those files sees it. It adds each statement's length to the log "
              "(noticeable only for huge multi-row INSERT texts).")
    return Advice(rule, True, sev, advice, caveat, f"{name}=OFF on the source")


def annotate_reaches_relay_log(s: ServerSettings) -> Advice:
    """A MariaDB replica asks its source for Annotate_rows events only when it
    logs them itself: without that the relay log has no statement text."""
    rule, sev = "annotate_reaches_relay_log", Severity.INFO
    if s.role != "replica":
        return _na(rule, sev, "this is about what a replica requests from its source")
    if not s.flavor.is_mariadb:
        return _na(rule, sev, "MySQL replicas receive Rows_query events whenever the source writes them")
    lsu = s.on("log_slave_updates", "log_replica_updates")
    rare = s.on("replicate_annotate_row_events")
    state = (f"log_bin={'ON' if s.writes_binlog else 'OFF'}, log_slave_updates={'ON' if lsu else 'OFF'}, "
             f"replicate_annotate_row_events={'ON' if rare else 'OFF'}")
    if s.writes_binlog and lsu and rare:
        return _quiet(rule, sev, f"{state}: Annotate_rows events reach the relay log")
    advice = ("Start the replica with log_bin, log_slave_updates=ON and replicate_annotate_row_events=ON "
              "(none is dynamic: a restart), and keep binlog_annotate_row_events=ON on the source.")
    caveat = ("The replica then writes a binary log of everything it applies (disk space, I/O, and its "
              "max_binlog_cache_size now limits big transactions). Without it lagd still classifies "
              "row-based loads by their shape: bulk_insert instead of load_data.")
    return Advice(rule, True, sev, advice, caveat,
                  f"{state}: the IO thread does not request Annotate_rows, so the relay log has no "
                  "statement text (checked on MariaDB 10.11)")


def statement_load_data(s: ServerSettings) -> Advice:
    """LOAD DATA logged statement-based ships the file to every replica, which
    writes it to its load tmpdir and re-runs the whole load as one transaction."""
    rule, sev = "statement_load_data", Severity.WARNING
    if s.role != "source":
        return _na(rule, sev, "the source's binlog_format decides how LOAD DATA is logged")
    if not s.writes_binlog:
        return _na(rule, sev, "the source writes no binary log (log_bin=OFF)")
    fmt = (s.var("binlog_format") or "").upper()
    if not fmt:
        return _na(rule, sev, "binlog_format was not read: how LOAD DATA is logged is not known")
    if fmt != "STATEMENT":
        return _quiet(rule, sev, f"binlog_format={fmt}: LOAD DATA is logged row-based "
                                 "(MIXED logs it row-based too: it is unsafe for statement logging)")
    advice = ("LOAD DATA is logged statement-based: the whole file travels in the binary log, and each "
              "replica writes it to its load tmpdir, then re-runs the load as one transaction for about "
              "as long as the source took. Load with SET SESSION binlog_format=ROW: no temporary file on "
              "the replicas, and lagd counts the rows. Either way one LOAD is one transaction the SQL "
              "thread applies alone: commit it in chunks (split advice).")
    caveat = ("A loading session can still SET SESSION binlog_format=STATEMENT: the global value does not "
              "show it. " + SQL_LOG_BIN_NOTE)
    return Advice(rule, True, sev, advice, caveat, "binlog_format=STATEMENT on the source")


def load_tmpdir_space(s: ServerSettings) -> Advice:
    """A statement-based LOAD DATA needs its whole file written to the replica's
    load tmpdir before it is loaded."""
    rule, sev = "load_tmpdir_space", Severity.CRITICAL
    if s.role != "replica":
        return _na(rule, sev, "the replica writes the file of a statement-based LOAD DATA")
    name = s.name_of("replica_load_tmpdir", "slave_load_tmpdir")
    if name is None:
        return _na(rule, sev, f"no replica_load_tmpdir or slave_load_tmpdir on {s.flavor}")
    where = f"{name}={s.variables[name] or '(tmpdir)'}"
    need = s.statement_load_bytes
    if not need:
        return _quiet(rule, sev, "no statement-based LOAD DATA coming")
    free = s.load_tmpdir_free_bytes
    advice = (f"Free space under {where}, or point {name} at a filesystem with room for the file plus "
              "margin (not dynamic: a restart). It must be a disk that survives a reboot, not a tmpfs: a "
              "replica restarted mid-load needs the file again.")
    caveat = SQL_LOG_BIN_NOTE
    if free is None:
        return Advice(rule, True, Severity.WARNING, advice, caveat,
                      f"a statement-based LOAD DATA of {need:,} bytes is coming and the replica writes "
                      f"it to {where} first; free space there unknown: check it")
    if free < need:
        return Advice(rule, True, sev, advice, caveat,
                      f"a statement-based LOAD DATA of {need:,} bytes is coming but {where} has only "
                      f"{free:,} bytes free: the SQL thread stops with an error when it fills")
    return _quiet(rule, sev, f"{where} has {free:,} bytes free for the {need:,}-byte file coming")


def replica_binlog_cache(s: ServerSettings) -> Advice:
    """A replica that logs what it applies needs the whole transaction to fit in
    max_binlog_cache_size, or its SQL thread stops with error 1197."""
    rule, sev = "replica_binlog_cache", Severity.CRITICAL
    if s.role != "replica":
        return _na(rule, sev, "this is about a replica applying a big transaction")
    if not s.writes_binlog:
        return _na(rule, sev, "this replica writes no binary log (log_bin=OFF)")
    if not s.logs_replica_updates:
        return _na(rule, sev, "this replica does not log what it applies (log_replica_updates/"
                              "log_slave_updates=OFF)")
    limit = s.int_var("max_binlog_cache_size")
    if limit is None:
        return _na(rule, sev, f"max_binlog_cache_size not found on {s.flavor}")
    biggest = s.biggest_coming_bytes
    if biggest is None:
        return _quiet(rule, sev, "no big transaction coming")
    if biggest <= limit:
        return _quiet(rule, sev, f"the biggest coming transaction ({biggest:,} bytes) fits in "
                                 f"max_binlog_cache_size={limit:,}")
    suggest = -(-biggest * 5 // 4 // (1024 * 1024)) * 1024 * 1024  # +25 %, whole MiB up
    advice = (f"SET GLOBAL max_binlog_cache_size={suggest} (dynamic) before the SQL thread reaches it: "
              "otherwise it stops with error 1197, \"Multi-statement transaction required more than "
              "'max_binlog_cache_size' bytes of storage\".")
    caveat = ("Past binlog_cache_size the cache spills to a temporary file in tmpdir, so the replica "
              "needs that much free disk there while it applies. The size compared is the transaction's "
              "size in the relay log, close to what the replica's own binlog needs.")
    return Advice(rule, True, sev, advice, caveat,
                  f"a {biggest:,}-byte transaction is coming and max_binlog_cache_size={limit:,}")


def log_buffer_waits(s: ServerSettings) -> Advice:
    """Innodb_log_waits counts waits for space in the redo log *buffer*: big
    transactions fill a small buffer faster than it is written out."""
    rule, sev = "log_buffer_waits", Severity.WARNING
    total = s.status_int("innodb_log_waits")
    if total is None:
        return _na(rule, sev, f"no Innodb_log_waits status on {s.flavor}")
    size = s.int_var("innodb_log_buffer_size")
    dynamic = s.flavor.is_mysql and s.flavor.version >= (8, 0, 0)
    now = f" (now {size:,} bytes)" if size is not None else ""
    advice = (f"Raise innodb_log_buffer_size{now}, e.g. "
              f"to 64 MiB{' with SET GLOBAL (dynamic)' if dynamic else ' in the configuration (a restart)'}.")
    caveat = "Memory, once. It helps only if the waits grow while big transactions run."
    if s.log_waits_delta is not None:
        if s.log_waits_delta > 0:
            return Advice(rule, True, sev, advice, caveat,
                          f"Innodb_log_waits grew by {s.log_waits_delta:,} over the window")
        return _quiet(rule, sev, "Innodb_log_waits did not grow over the window")
    if total > 0:
        return Advice(rule, True, Severity.INFO, advice, caveat,
                      f"Innodb_log_waits={total:,} since startup (no window given to see it grow)")
    return _quiet(rule, sev, "Innodb_log_waits=0")


def redo_capacity(s: ServerSettings) -> Advice:
    """Redo too small for the write rate: InnoDB must flush pages to advance the
    checkpoint, and when the checkpoint age nears the limit writers stall."""
    rule, sev = "redo_capacity", Severity.WARNING
    cap, source = s.redo_capacity
    if cap is None:
        return _na(rule, sev, f"no {source} on {s.flavor}")
    age = limit = None
    if s.flavor.is_mariadb:
        age, limit = s.status_int("innodb_checkpoint_age"), s.status_int("innodb_checkpoint_max_age")
    elif s.mysql_from((8, 0, 30)):
        cur = s.status_int("innodb_redo_log_current_lsn")
        ckpt = s.status_int("innodb_redo_log_checkpoint_lsn")
        if cur is not None and ckpt is not None:
            age, limit = cur - ckpt, cap
    if s.mysql_from((8, 0, 30)):
        advice = f"SET GLOBAL innodb_redo_log_capacity={2 * cap} (dynamic; now {cap:,} bytes)."
    elif s.flavor.is_mariadb and s.flavor.version >= (10, 9, 0):
        advice = f"SET GLOBAL innodb_log_file_size={2 * cap} (dynamic since MariaDB 10.9; now {cap:,} bytes)."
    else:
        advice = (f"Double {source} (now {cap:,} bytes) in the configuration; it takes a restart.")
    caveat = ("Crash recovery has more redo to replay, and the redo files take that much disk. It does "
              "not shorten one huge apply; it removes the flushing stalls around it.")
    findings = []
    if age is not None and limit:
        ratio = age / limit
        if ratio >= 0.75:
            findings.append(f"checkpoint age {age:,} bytes is {ratio:.0%} of the {limit:,}-byte limit")
    big = s.biggest_coming_bytes
    if big is not None and big > cap / 2:
        findings.append(f"a {big:,}-byte transaction is coming, more than half the {cap:,}-byte redo "
                        f"capacity ({source}): applying it forces checkpoints")
    if findings:
        severity = sev if len(findings) > 1 or "checkpoint age" in findings[0] else Severity.INFO
        return Advice(rule, True, severity, advice, caveat, "; ".join(findings))
    shown = (f"checkpoint age {age:,} of {limit:,} bytes" if age is not None and limit
             else "no checkpoint age known")
    return _quiet(rule, sev, f"{source}={cap:,} bytes; {shown}")


def redo_log_disabled(s: ServerSettings) -> Advice:
    """ALTER INSTANCE DISABLE INNODB REDO_LOG (MySQL 8.0.21+) is for loading a
    new instance that can be rebuilt, never for a server that must survive a crash."""
    rule, sev = "redo_log_disabled", Severity.CRITICAL
    if s.flavor.is_mariadb:
        return _na(rule, sev, "MariaDB cannot disable redo logging")
    if s.flavor.version < (8, 0, 21):
        return _na(rule, sev, f"{s.flavor} cannot disable redo logging (MySQL 8.0.21+)")
    value = s.status.get("innodb_redo_log_enabled")
    if value is None:
        return _na(rule, sev, "no Innodb_redo_log_enabled status")
    if value.upper() != "OFF":
        return _quiet(rule, sev, f"Innodb_redo_log_enabled={value}")
    return Advice(rule, True, sev, "ALTER INSTANCE ENABLE INNODB REDO_LOG now.",
                  "Disabling redo is only for loading data into a new instance that can be rebuilt from "
                  "scratch: a crash or unexpected stop while it is off can leave the instance corrupt "
                  "and unrecoverable.", "Innodb_redo_log_enabled=OFF")


def log_writer_threads(s: ServerSettings) -> Advice:
    """Dedicated log writer threads pay off under high concurrency; a replica's
    applier is low-concurrency, where MySQL documents OFF as faster."""
    rule, sev = "log_writer_threads", Severity.INFO
    if not s.mysql_from((8, 0, 22)):
        return _na(rule, sev, f"innodb_log_writer_threads exists on MySQL 8.0.22+, not {s.flavor}")
    if s.role != "replica":
        return _na(rule, sev, "on a source, concurrency comes from its clients")
    value = s.on("innodb_log_writer_threads")
    if value is None:
        return _na(rule, sev, "innodb_log_writer_threads not found")
    workers, name = s.parallel_workers
    if not value:
        return _quiet(rule, sev, "innodb_log_writer_threads=OFF")
    if workers is not None and workers > 4:
        return _quiet(rule, sev, f"{name}={workers}: apply concurrency is not low")
    return Advice(rule, True, sev,
                  "Try SET GLOBAL innodb_log_writer_threads=OFF (dynamic) and compare the apply rate "
                  "over a while; user threads then write and flush the redo themselves.",
                  "A measured trade-off, not a rule: with many concurrent writers it costs throughput. "
                  "Switch it back if the apply rate drops.",
                  f"innodb_log_writer_threads=ON with {name}={workers}: low apply concurrency")


def parallel_apply(s: ServerSettings) -> Advice:
    """One applier thread: everything queues behind whatever it applies."""
    rule, sev = "parallel_apply", Severity.INFO
    if s.role != "replica":
        return _na(rule, sev, "parallel apply is a replica setting")
    workers, name = s.parallel_workers
    if workers is None:
        return _na(rule, sev, f"{name} not found on {s.flavor}")
    off = workers == 0 if s.flavor.is_mariadb else workers <= 1
    if not off:
        return _quiet(rule, sev, f"{name}={workers}")
    if s.flavor.is_mariadb:
        advice = ("STOP SLAVE; SET GLOBAL slave_parallel_threads=4; START SLAVE (it can only change with "
                  "replication stopped), and set it in the configuration file.")
    else:
        advice = (f"SET GLOBAL {name}=4 with replica_preserve_commit_order=ON; it takes effect at the "
                  "next START REPLICA SQL_THREAD.")
    caveat = ("One huge transaction is applied by one worker anyway: parallel apply does not shorten a "
              "LOAD DATA. It lets the small transactions around it catch up faster; with commit order "
              "preserved, those after it still wait for its commit.")
    return Advice(rule, True, Severity.WARNING if s.lagging else sev, advice, caveat,
                  f"{name}={workers}: one applier thread")


def dependency_tracking(s: ServerSettings) -> Advice:
    """Parallel apply is only as parallel as the dependencies the log allows."""
    rule, sev = "dependency_tracking", Severity.INFO
    if s.flavor.is_mariadb:
        if s.role != "replica":
            return _na(rule, sev, "MariaDB decides on the replica what runs in parallel "
                                  "(slave_parallel_mode)")
        threads = s.int_var("slave_parallel_threads")
        mode = (s.var("slave_parallel_mode") or "").lower()
        if not mode or threads is None:
            return _na(rule, sev, f"no slave_parallel_mode on {s.flavor}")
        if threads == 0:
            return _na(rule, sev, "parallel apply is off (rule parallel_apply)")
        if mode in ("optimistic", "aggressive"):
            return _quiet(rule, sev, f"slave_parallel_mode={mode}")
        return Advice(rule, True, sev,
                      "STOP SLAVE; SET GLOBAL slave_parallel_mode='optimistic'; START SLAVE: "
                      "transactions then run in parallel unless they conflict.",
                      "Conflicting transactions are rolled back and retried; changes to non-transactional "
                      "tables (MyISAM, Aria) are not run optimistically. No help for one huge transaction.",
                      f"slave_parallel_mode={mode} with slave_parallel_threads={threads}")
    if s.role != "source":
        return _na(rule, sev, "binlog_transaction_dependency_tracking is the source's setting")
    if s.flavor.version >= (8, 4, 0):
        return _na(rule, sev, "removed in MySQL 8.4: the source always tracks WRITESET dependencies")
    if s.flavor.version < (5, 7, 22):
        return _na(rule, sev, f"{s.flavor} has no binlog_transaction_dependency_tracking (5.7.22+)")
    value = (s.var("binlog_transaction_dependency_tracking") or "").upper()
    if not value:
        return _na(rule, sev, "binlog_transaction_dependency_tracking not found")
    if value != "COMMIT_ORDER":
        return _quiet(rule, sev, f"binlog_transaction_dependency_tracking={value}")
    return Advice(rule, True, sev,
                  "SET GLOBAL binlog_transaction_dependency_tracking=WRITESET on the source (needs "
                  "transaction_write_set_extraction=XXHASH64, the default): replicas then apply "
                  "transactions that touched different rows in parallel even if they did not commit "
                  "together. (Deprecated in 8.0.35; MySQL 8.4 always does this.)",
                  "Keep replica_preserve_commit_order=ON on replicas if readers rely on commit order. No "
                  "help for one huge transaction, which one worker applies alone.",
                  "binlog_transaction_dependency_tracking=COMMIT_ORDER: replicas run in parallel only "
                  "what committed together on the source")


def durability_on_lagging_replica(s: ServerSettings) -> Advice:
    """A lagging replica fsyncing at every commit spends its single thread waiting on the disk."""
    rule, sev = "durability_on_lagging_replica", Severity.WARNING
    if s.role != "replica":
        return _na(rule, sev, "the source's durability is not negotiable here")
    flush = s.int_var("innodb_flush_log_at_trx_commit")
    sync = s.int_var("sync_binlog")
    if flush is None:
        return _na(rule, sev, f"innodb_flush_log_at_trx_commit not found on {s.flavor}")
    if (calm := _not_lagging(rule, sev, s)) is not None:
        return calm
    syncing = s.writes_binlog and sync == 1
    if flush != 1 and not syncing:
        return _quiet(rule, sev, f"innodb_flush_log_at_trx_commit={flush}, sync_binlog={sync}: "
                                 "no fsync per commit")
    sets = ["innodb_flush_log_at_trx_commit=2"] + (["sync_binlog=0"] if syncing else [])
    return Advice(rule, True, sev,
                  f"SET GLOBAL {', '.join(sets)} on this replica while it catches up (dynamic): the SQL "
                  "thread stops waiting for an fsync per transaction. Set them back once it has caught up.",
                  "After an OS crash or power loss the replica can lose about its last second of applied "
                  "transactions; with GTID auto-positioning and crash-safe replication metadata (MySQL "
                  "relay_log_recovery=ON; MariaDB gtid_slave_pos in InnoDB) it fetches them again. Its own "
                  "binary log may then lack transactions its data has: it matters for a failover candidate "
                  "or a replica that feeds others.",
                  f"lagging with innodb_flush_log_at_trx_commit={flush}, sync_binlog={sync}")


def binlog_compression(s: ServerSettings) -> Advice:
    """Large row loads make large binlogs and relay logs; MySQL 8.0.20+ can
    compress whole transactions with zstd."""
    rule, sev = "binlog_compression", Severity.INFO
    if s.flavor.is_mariadb:
        return _na(rule, sev, "MariaDB's log_bin_compress compresses events one by one, and the replica's IO "
                              "thread writes them uncompressed to the relay log (checked on MariaDB 10.11)")
    if s.flavor.version < (8, 0, 20):
        return _na(rule, sev, f"{s.flavor} has no binlog_transaction_compression (MySQL 8.0.20+)")
    if s.role != "source":
        return _na(rule, sev, "the source compresses; replicas keep what they receive")
    value = s.on("binlog_transaction_compression")
    if value is None:
        return _na(rule, sev, "binlog_transaction_compression not found")
    if value:
        return _quiet(rule, sev, "binlog_transaction_compression=ON")
    big = s.biggest_coming_bytes
    threshold = 64 * 1024 * 1024
    if big is None or big < threshold:
        return _quiet(rule, sev, f"no row-based transaction of {_mib(threshold)} or more seen")
    return Advice(rule, True, sev,
                  "SET SESSION binlog_transaction_compression=ON in the loading session (or GLOBAL): "
                  "large row-based transactions then travel and sit in binlogs and relay logs zstd-"
                  "compressed, often several times smaller.",
                  "zstd costs CPU on the source, and the replica decompresses: it does not make the apply "
                  "shorter, only the transfer and the disk use.",
                  f"a {big:,}-byte transaction with binlog_transaction_compression=OFF")


# The read-miss rate the two buffer pool rules judge by, and the page requests it needs.
MISS_RATE = 0.01
MIN_REQUESTS = 10_000


def buffer_pool_working_set(s: ServerSettings) -> Advice:
    """Every buffer-pool miss is a synchronous random read in the single applier."""
    rule, sev = "buffer_pool_working_set", Severity.WARNING
    reads, requests = s.buffer_pool_reads_delta, s.buffer_pool_read_requests_delta
    if reads is None or requests is None:
        return _quiet(rule, sev, "no Innodb_buffer_pool_reads / _read_requests deltas given")
    if requests < MIN_REQUESTS:
        return _quiet(rule, sev, f"only {requests:,} page requests in the window: too few to judge")
    miss = reads / requests
    if miss < MISS_RATE:
        return _quiet(rule, sev, f"read-miss rate {miss:.2%} ({reads:,} of {requests:,} page requests)")
    size = s.int_var("innodb_buffer_pool_size")
    shown = f" (innodb_buffer_pool_size={size:,} bytes)" if size is not None else ""
    return Advice(rule, True, sev,
                  f"The buffer pool{shown} is far smaller than the pages the "
                  "SQL thread touches. Grow it (dynamic on MySQL 5.7.5+ and MariaDB 10.2+), or let lagd "
                  "prefetch the pages ahead of the SQL thread.",
                  "A one-off scan (backup, report query) causes misses too: judge over a window where the "
                  "replica only applies.",
                  f"read-miss rate {miss:.2%}: {reads:,} of {requests:,} page requests read from disk")


# Free-page waits over the caller's window under this many are a burst (a scan, a pool
# still filling after a restart), not writes falling behind reads. Not a measured line:
# the catch-ups measured waited 0 times cold and 42,000-76,000 times (1,400-2,600 a
# second) with probes, each wait of the SQL thread's 1.7 ms on average.
FREE_WAITS_MIN = 100


def free_page_waits(s: ServerSettings) -> Advice:
    """Innodb_buffer_pool_wait_free counts the times a thread found no free page to read
    into and waited for InnoDB to write dirty pages out: reads then wait on writes, and
    the SQL thread, which needs a page for every row it misses and for its undo log,
    waits with them. Prefetch raises the read rate, and with it these waits
    (FREE_WAITS_MEASURED)."""
    rule, sev = "free_page_waits", Severity.WARNING
    if s.role != "replica":
        return _na(rule, sev, "the SQL thread's waits are the replica's")
    total = s.status_int("innodb_buffer_pool_wait_free")
    if total is None:
        return _na(rule, sev, f"no Innodb_buffer_pool_wait_free status on {s.flavor}")
    if (calm := _not_lagging(rule, sev, s)) is not None:
        return calm
    grown = s.free_page_waits_delta
    if grown is None:
        # Since startup says nothing of now: a restore or a one-off scan may have left them.
        return _quiet(rule, sev, f"Innodb_buffer_pool_wait_free={total:,} since startup (no window given"
                                 " to see it grow)")
    if grown <= 0:
        return _quiet(rule, sev, "Innodb_buffer_pool_wait_free did not grow over the window")
    if grown < FREE_WAITS_MIN:
        return _quiet(rule, sev, f"Innodb_buffer_pool_wait_free grew by only {grown:,} over the window")
    doublewrite = s.var("innodb_doublewrite")
    # ON, DETECT_AND_RECOVER (MySQL 8.0.30+: the same) and fast (later MariaDB: ON without the
    # data files' fsync) write each page twice; OFF and MySQL's DETECT_ONLY do not.
    twice = (doublewrite or "").strip().upper() in ("ON", "1", "DETECT_AND_RECOVER", "FAST")
    advice = ("InnoDB ran out of free buffer-pool pages while the replica lags: dirty pages are written "
              "out slower than pages are read in, and a thread that needs one, the SQL thread among them, "
              "waits for a write. Look at the data files' write latency first.")
    caveat = ("Raising innodb_lru_scan_depth and innodb_io_capacity did not lower these waits where "
              "measured. lagd's probes read pages in faster than the SQL thread alone, so while they run "
              "they add to these waits; the catch-up was faster with them all the same.")
    if twice:
        advice += (f" With innodb_doublewrite={doublewrite} every page is written twice: on storage that"
                   " writes a page atomically it can be turned off (a restart on MariaDB 10.11, where it is"
                   f" read-only; MySQL 8.0.30+ also has DETECT_ONLY). {FREE_WAITS_MEASURED}")
        caveat = ("Without the doublewrite buffer a crash in the middle of a page write can leave a torn "
                  "page that recovery cannot repair: safe only where the filesystem or device writes pages "
                  "atomically; elsewhere such a crash means rebuilding the replica. " + caveat)
    shown = f", innodb_doublewrite={doublewrite}" if doublewrite is not None else ""
    return Advice(rule, True, sev, advice, caveat,
                  f"lagging, and Innodb_buffer_pool_wait_free grew by {grown:,} over the window{shown}")


def change_buffering(s: ServerSettings) -> Advice:
    """With the change buffer off, the SQL thread reads the leaf of every non-unique
    secondary index it inserts into or delete-marks an entry of (mysql.changebuf)."""
    rule, sev = "change_buffering", Severity.INFO
    if s.role != "replica":
        return _na(rule, sev, "the change buffer helps the server that applies the changes")
    if s.flavor.is_mariadb:
        return _na(rule, sev, "MariaDB turned the change buffer off by default in 10.5.15, deprecated it in "
                              "10.9 and removed it in 11.0: lagd does not recommend it there")
    value = s.var("innodb_change_buffering")
    if value is None:
        return _na(rule, sev, f"innodb_change_buffering not found on {s.flavor}")
    ops = buffered(s.variables)
    if ops == {INSERTS, DELETE_MARKS}:
        return _quiet(rule, sev, f"innodb_change_buffering={value}: InnoDB already buffers inserts and "
                                 "delete-marks of non-unique secondary indexes (lagd does not probe them)")
    if (calm := _not_lagging(rule, sev, s)) is not None:
        return calm
    reads, requests = s.buffer_pool_reads_delta, s.buffer_pool_read_requests_delta
    if reads is None or requests is None or requests < MIN_REQUESTS:
        return _quiet(rule, sev, "no buffer pool read deltas over enough page requests to judge")
    miss = reads / requests
    if miss < MISS_RATE:
        return _quiet(rule, sev, f"read-miss rate {miss:.2%}: reads are not what holds the SQL thread")
    return Advice(rule, True, sev,
                  "SET GLOBAL innodb_change_buffering=all on this replica while it catches up (dynamic): "
                  "InnoDB then records changes to non-unique secondary indexes instead of reading their "
                  f"pages. {CHANGE_BUFFER_MEASURED} Set it back (MySQL 8.4's default is none) once it has "
                  "caught up.",
                  "The reads are put off, not saved: InnoDB merges the buffered changes when a page is next "
                  "read (a query on the replica pays for it) or at a slow shutdown, and the buffer takes up "
                  "to innodb_change_buffer_max_size (25%) of the buffer pool. Changes to the primary key's "
                  "rows and to unique indexes gain nothing.",
                  f"lagging with innodb_change_buffering={value} and a read-miss rate of {miss:.2%}")


# benchmarks.md, "Free-page waits" (MariaDB 10.11; cold and prefetched catch-ups).
FREE_WAITS_MEASURED = (
    "Measured on MariaDB 10.11 (catch-ups of 200,000 random primary-key UPDATEs, a 256 MB pool, 3 runs or "
    "more each way): with lagd prefetching, 42,000-76,000 free-page waits a catch-up with doublewrite on and "
    "none with it off, the catch-up 1.15x faster without it (median 26.1 s against 30.0); cold catch-ups "
    "waited for none either way and were 1.25x faster without it (35.7 s against 44.7).")


# benchmarks.md, "The change buffer" (MariaDB 10.11, the same InnoDB mechanism; cold catch-ups).
CHANGE_BUFFER_MEASURED = (
    "Measured on MariaDB 10.11, same InnoDB mechanism (cold catch-ups of 200,000 random changes, a "
    "256 MB pool, 2 runs each): INSERTs 1.42x faster, UPDATEs of an indexed column 1.29x, DELETEs "
    "1.13x; UPDATEs of other columns gained nothing.")


RULES: tuple[Callable[[ServerSettings], Advice], ...] = (
    rows_query_log_events,
    annotate_reaches_relay_log,
    statement_load_data,
    load_tmpdir_space,
    replica_binlog_cache,
    log_buffer_waits,
    redo_capacity,
    redo_log_disabled,
    log_writer_threads,
    parallel_apply,
    dependency_tracking,
    durability_on_lagging_replica,
    binlog_compression,
    buffer_pool_working_set,
    free_page_waits,
    change_buffering,
)


def advise(settings: ServerSettings) -> list[Advice]:
    """Every rule's verdict, fired or not."""
    return [rule(settings) for rule in RULES]


__all__ = [
    "ROLES",
    "RULES",
    "SQL_LOG_BIN_NOTE",
    "Advice",
    "AdvisorError",
    "Role",
    "ServerSettings",
    "Severity",
    "advise",
]
