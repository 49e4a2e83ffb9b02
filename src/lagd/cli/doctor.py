"""``lagctl doctor``: is this replica set up the way lagd needs it, and if not, what to do.

Each check prints one line (``ok``, ``warn``, ``FAIL``, or ``info`` for what
is worth knowing but is no problem), and every problem comes with its fix.
Exit 0 when nothing is a problem, 1 otherwise.

The decisions are pure functions of what was read (grant lines, variables,
relay-log events), so they are table-tested; the I/O around them is thin and
runs against the sandbox in the integration tests. Run doctor on the
replica's host as the user lagd runs as: the relay-log check is about this
process's access to the files.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lagd.config import DEFAULT_CONFIG_PATH, ConfigError, ReplicaSettings, Settings, load_settings
from lagd.errors import LagdError
from lagd.mysql.endpoint import Endpoint
from lagd.mysql.errors import ER_SPECIFIC_ACCESS_DENIED, DatabaseError, Kind
from lagd.mysql.replica import ReplicaStatus, ServerFlavor, relay_log_index
from lagd.mysql.session import query

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"
PROBLEMS = frozenset({WARN, FAIL})


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    level: str  # ok, warn, FAIL, info
    text: str
    fix: str = ""


# --- grants (pure) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grants:
    """What ``SHOW GRANTS`` says, privileges in upper case."""

    global_privs: frozenset[str]  # ON *.*
    object_privs: Mapping[str, frozenset[str]]  # "`shop`.*" or "`shop`.`orders`" -> privileges
    roles: tuple[str, ...]  # granted roles, as written


_GRANT_ON = re.compile(r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<obj>(?:(?:FUNCTION|PROCEDURE|PACKAGE(?:\s+BODY)?)"
                       r"\s+)?\S+)\s+TO\s+(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)
_GRANT_ROLE = re.compile(r"^GRANT\s+(?P<roles>.+?)\s+TO\s+", re.IGNORECASE | re.DOTALL)


def _split_privileges(text: str) -> list[str]:
    # Commas inside column lists, "SELECT (a, b)", do not separate privileges.
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    names = []
    for p in out:
        name = " ".join(p.split("(")[0].split()).upper()
        if name:
            names.append("ALL PRIVILEGES" if name == "ALL" else name)
    return names


def parse_grants(lines: Iterable[str]) -> Grants:
    """Parse ``SHOW GRANTS`` lines (MySQL 5.7-9.x, MariaDB 10.x/11.x)."""
    global_privs: set[str] = set()
    objects: dict[str, set[str]] = {}
    roles: list[str] = []
    for line in lines:
        text = line.strip()
        if re.match(r"^GRANT\s+PROXY\s+ON\b", text, re.IGNORECASE):
            continue  # proxying another account: not a privilege on data
        m = _GRANT_ON.match(text)
        if m:
            privs = set(_split_privileges(m["privs"]))
            if re.search(r"\bWITH\b.*\bGRANT\s+OPTION\b", m["rest"], re.IGNORECASE):
                privs.add("GRANT OPTION")
            obj = m["obj"].replace('"', "`")
            (global_privs if obj == "*.*" else objects.setdefault(obj, set())).update(privs)
            continue
        m = _GRANT_ROLE.match(text)
        if m:
            roles += [r.strip() for r in m["roles"].split(",") if r.strip()]
    return Grants(frozenset(global_privs), {k: frozenset(v) for k, v in objects.items()}, tuple(roles))


@dataclass(frozen=True, slots=True)
class Needed:
    name: str  # what to GRANT
    also: frozenset[str]  # other privileges that include it
    why: str


_ALL = frozenset({"ALL PRIVILEGES", "SUPER"})


def needed_privileges(flavor: ServerFlavor) -> tuple[Needed, ...]:
    """The global privileges lagd needs besides SELECT, for this server."""
    if flavor.is_mariadb:
        if flavor.version >= (10, 5, 9):
            return (Needed("SLAVE MONITOR", _ALL | {"REPLICA MONITOR"}, "SHOW ALL SLAVES STATUS"),
                    Needed("BINLOG MONITOR", _ALL | {"REPLICATION CLIENT"}, "binary log status"))
        if flavor.version >= (10, 5, 2):
            # Between the privilege split and SLAVE MONITOR, nothing narrower reads the status.
            return (Needed("REPLICATION SLAVE ADMIN", _ALL, "SHOW ALL SLAVES STATUS"),
                    Needed("BINLOG MONITOR", _ALL | {"REPLICATION CLIENT"}, "binary log status"))
        return (Needed("REPLICATION CLIENT", _ALL, "SHOW ALL SLAVES STATUS"),)
    return (Needed("REPLICATION CLIENT", _ALL, "SHOW REPLICA STATUS"),)


_HARMLESS = frozenset({"USAGE", "SELECT", "SHOW VIEW"})


def grant_findings(grants: Grants, flavor: ServerFlavor, account: str,
                   status_readable: bool | None = None) -> list[Finding]:
    """Missing privileges (FAIL) and more than lagd needs (warn).

    ``status_readable`` is what trying the replica status statement showed:
    it settles the monitor privilege whatever the grant lines say (a role may
    hold it).
    """
    out: list[Finding] = []
    needed = needed_privileges(flavor)
    have = grants.global_privs
    missing = [n.name for n in needed if not (have & ({n.name} | n.also))]
    if status_readable is True:
        missing = [m for m in missing if m != needed[0].name]
    elif status_readable is False and needed[0].name not in missing:
        missing.insert(0, needed[0].name)
    select_global = bool(have & {"SELECT", "ALL PRIVILEGES"})
    select_on = sorted(o for o, p in grants.object_privs.items() if p & {"SELECT", "ALL PRIVILEGES"})
    if not select_global and not select_on:
        missing.insert(0, "SELECT")
    roles = ""
    if grants.roles:
        roles = f" (roles granted: {', '.join(grants.roles)}; lagd does not activate roles)"
    if missing:
        whats = "; ".join(f"{n.name} for {n.why}" for n in needed if n.name in missing)
        why = "SELECT for the prefetch probes and information_schema" if "SELECT" in missing else ""
        why = "; ".join(w for w in (why, whats) if w)
        out.append(Finding("grants", FAIL, f"{account} lacks {', '.join(missing)} ({why}){roles}",
                           f"GRANT {', '.join(missing)} ON *.* TO {account};"))
    else:
        narrow = f"SELECT on {', '.join(select_on)} (lagd prefetches only there)"
        granted = ["SELECT" if select_global else narrow]
        for n in needed:
            via = sorted(have & ({n.name} | n.also))
            if n.name in via:
                granted.append(n.name)
            else:
                granted.append(f"{n.name} through {via[0]}" if via else f"{n.name} through a role")
        out.append(Finding("grants", OK, f"{account} has what lagd needs: {', '.join(granted)}"))
    if flavor.is_mariadb and flavor.version >= (10, 5) and not have & {"PROCESS", "ALL PRIVILEGES"}:
        # MariaDB lists the SQL thread's OS thread id (PROCESSLIST.TID) only to
        # PROCESS; MySQL's performance_schema.threads needs only SELECT.
        out.append(Finding("grants", INFO, f"recommended: PROCESS for {account}: without it the SQL-thread"
                                           " split (where its time goes, and prefetch's fast gate) is not"
                                           " measured", f"GRANT PROCESS ON *.* TO {account};"))
    allowed = _HARMLESS | {n.name for n in needed} | {"REPLICA MONITOR", "REPLICATION CLIENT", "PROCESS"}
    extra_global = sorted(have - allowed)
    extra_objects = {o: sorted(p - _HARMLESS) for o, p in grants.object_privs.items() if p - _HARMLESS}
    if extra_global or extra_objects:
        parts = [", ".join(extra_global) + " ON *.*"] if extra_global else []
        parts += [f"{', '.join(p)} ON {o}" for o, p in sorted(extra_objects.items())]
        if "ALL PRIVILEGES" in extra_global:
            keep = ", ".join(["SELECT", *[n.name for n in needed]])
            fix = f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}; GRANT {keep} ON *.* TO {account};"
        else:
            fix = " ".join(f"REVOKE {p} FROM {account};" for p in parts)
        out.append(Finding("grants", WARN,
                           f"{account} has more than lagd needs: {'; '.join(parts)}. lagd only reads, "
                           "so its password should not be able to change anything", fix))
    return out


# --- server settings (pure) -------------------------------------------------------------------


_DML = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(INSERT|UPDATE|DELETE|REPLACE|LOAD\s+DATA)\b",
                  re.IGNORECASE | re.DOTALL)
_USE = re.compile(r"^\s*use\s+`?[^;]*`?\s*;\s*", re.IGNORECASE)


def statement_dml(events: Iterable[Mapping[str, Any]]) -> tuple[int, str | None]:
    """(count, first example) of statement-based row changes among ``SHOW RELAYLOG EVENTS`` rows."""
    n, example = 0, None
    for e in events:
        kind = str(e.get("Event_type") or "")
        info = str(e.get("Info") or "")
        if kind in ("Execute_load_query", "Execute_load_query_log_event"):
            hit = True
        elif kind == "Query":
            hit = bool(_DML.match(_USE.sub("", info, count=1)))
        else:
            hit = False
        if hit:
            n += 1
            example = example or _USE.sub("", info, count=1)[:80]
    return n, example


_SOURCE_CHECK = ("on the source: SELECT @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, "
                 "@@GLOBAL.binlog_row_metadata")


def _on(value: str | None) -> bool:
    return str(value).strip().upper() in {"1", "ON", "YES", "TRUE"}


def binlog_findings(variables: Mapping[str, str | None], statement_events: int | None = None,
                    example: str | None = None, scanned: int = 0, scan_note: str = "",
                    relay_file: str = "the relay log") -> list[Finding]:
    """binlog_format, row image and metadata, as far as the replica can tell.

    The relay log holds what the source wrote, so statement-based changes in
    it prove the source (or a session on it) logs statements. The replica's
    own variables only describe the source when the replica is set up like it.
    """
    out = []
    fix_format = ("on the source: SET PERSIST binlog_format = 'ROW' (MySQL) or SET GLOBAL binlog_format = "
                  "'ROW' plus binlog_format=ROW in my.cnf (MariaDB), and stop sessions from setting "
                  "binlog_format=STATEMENT")
    if statement_events:
        out.append(Finding("binlog_format", WARN,
                           f"{statement_events} statement-based row changes among {scanned} events of "
                           f"{relay_file} (e.g. {example!r}): the source logs statements for some "
                           "sessions, and lagd prefetches statements only as far as it can rewrite them "
                           "into SELECTs", fix_format))
    fmt = (variables.get("binlog_format") or "").upper()
    logs = _on(variables.get("log_bin"))
    if logs and fmt and fmt != "ROW":
        out.append(Finding("binlog_format", WARN,
                           f"this replica writes its binary log with binlog_format={fmt}; replicas are "
                           "set up like their source (and may become one), so the source likely logs "
                           "statements too",
                           f"{fix_format}; check it {_SOURCE_CHECK}"))
    if not out:
        seen = (f"no statement-based row changes among {scanned} events of {relay_file}"
                if statement_events == 0 else f"relay log not looked into ({scan_note or 'not available'})")
        own = f"this replica logs with binlog_format={fmt}" if logs else "this replica writes no binary log"
        out.append(Finding("binlog_format", OK if statement_events == 0 else INFO,
                           f"{seen}; {own}. The source's setting is what matters: check it {_SOURCE_CHECK}"))
    meta = variables.get("binlog_row_metadata")
    image = variables.get("binlog_row_image")
    if meta is None:
        out.append(Finding("row_metadata", INFO,
                           "the server has no binlog_row_metadata (MySQL < 8.0.1, MariaDB < 10.5): "
                           "lagd takes column names from information_schema"))
    else:
        out.append(Finding("row_metadata", INFO,
                           f"binlog_row_metadata={meta}, binlog_row_image={image} here; only the source's "
                           "values shape the relay log: with FULL metadata lagd reads column names from the "
                           "log, with MINIMAL it asks information_schema; FULL or MINIMAL row image both "
                           f"work. Check {_SOURCE_CHECK}"))
    return out


def relay_info_finding(flavor: ServerFlavor, repository: str | None) -> Finding:
    if flavor.is_mariadb:
        return Finding("relay_log_info", INFO, "n/a on MariaDB (no relay_log_info_repository)")
    if flavor.version >= (8, 0, 23) or repository is None:
        return Finding("relay_log_info", OK,
                       "relay-log positions are kept in tables (always, since MySQL 8.0.23)")
    if repository.upper() == "TABLE":
        return Finding("relay_log_info", OK, "relay_log_info_repository=TABLE")
    return Finding("relay_log_info", WARN,
                   f"relay_log_info_repository={repository}: after a crash the SQL thread's relay-log "
                   "position in the file can be wrong, and lagd reads ahead from that position",
                   "relay_log_info_repository=TABLE and relay_log_recovery=ON in my.cnf, then restart mysqld")


def encryption_finding(flavor: ServerFlavor, variables: Mapping[str, str | None]) -> Finding:
    name = "encrypt_binlog" if flavor.is_mariadb else "binlog_encryption"
    value = variables.get(name)
    if value is None:
        return Finding("encryption", OK, f"no {name} on this server: relay logs are not encrypted")
    if not _on(value):
        return Finding("encryption", OK, f"{name}=OFF: lagd can read the relay logs")
    how = ("encrypt_binlog=OFF in my.cnf and restart" if flavor.is_mariadb
           else "SET PERSIST binlog_encryption = OFF")
    return Finding("encryption", FAIL,
                   f"{name}=ON: the relay logs are encrypted and lagd reads them from disk, "
                   "so it cannot prefetch or measure the backlog",
                   f"{how}; or keep encryption and set prefetch.enabled = false (lag and status still work)")


def performance_schema_finding(value: str | None) -> Finding:
    if value is None:
        return Finding("performance_schema", INFO, "the server has no performance_schema")
    if _on(value):
        return Finding("performance_schema", OK, "performance_schema=ON")
    return Finding("performance_schema", INFO,
                   "performance_schema=OFF: lagd does not need it; with it ON, "
                   "performance_schema.replication_applier_status_by_worker shows what each applier waits on "
                   "(performance_schema=ON in my.cnf, restart)")


# --- reading the server ----------------------------------------------------------------------


def _rows(conn: Any, sql: str) -> list[dict[str, Any]]:
    return query(conn, sql)


def _variable(conn: Any, name: str) -> str | None:
    try:
        rows = _rows(conn, f"SELECT @@GLOBAL.{name} AS v")
    except DatabaseError as e:
        if e.broken:
            raise
        return None  # unknown on this server version
    value = rows[0]["v"] if rows else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return None if value is None else str(value)


_VARIABLES = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
              "relay_log_info_repository", "encrypt_binlog", "binlog_encryption", "performance_schema")


def _account(conn: Any) -> str:
    rows = _rows(conn, "SELECT CURRENT_USER() AS u")
    user, _, host = str(rows[0]["u"]).rpartition("@")
    return f"'{user}'@'{host}'"


def _grant_lines(conn: Any) -> list[str]:
    lines = [str(next(iter(r.values()))) for r in _rows(conn, "SHOW GRANTS")]
    for role in parse_grants(lines).roles:
        # A role's privileges count too; SHOW GRANTS FOR works for roles the user holds.
        try:
            lines += [str(next(iter(r.values()))) for r in _rows(conn, f"SHOW GRANTS FOR {role}")]
        except DatabaseError as e:
            if e.broken:
                raise
            continue
    return lines


def _relaylog_events(conn: Any, flavor: ServerFlavor, status: ReplicaStatus,
                     limit: int = 5000) -> tuple[list[dict[str, Any]], str]:
    """The first ``limit`` events of the SQL thread's relay-log file, or ([], why not)."""
    file = status.relay_log_file.replace("'", "''")
    channel = status.channel.replace("'", "''")
    if flavor.is_mariadb:
        conn_name = f" '{channel}'" if channel else ""
        sql = f"SHOW RELAYLOG{conn_name} EVENTS IN '{file}' LIMIT {limit}"
    else:
        for_channel = f" FOR CHANNEL '{channel}'" if channel else ""
        sql = f"SHOW RELAYLOG EVENTS IN '{file}' LIMIT {limit}{for_channel}"
    try:
        return _rows(conn, sql), ""
    except DatabaseError as e:
        if e.broken:
            raise
        if e.code == ER_SPECIFIC_ACCESS_DENIED:
            need = ("SLAVE MONITOR" if flavor.is_mariadb
                    else "REPLICATION SLAVE, which lagd does not need otherwise")
            return [], f"SHOW RELAYLOG EVENTS needs {need}"
        return [], f"SHOW RELAYLOG EVENTS failed: {e.detail}"


def _is_local(settings: Settings) -> bool:
    r = settings.replica
    return bool(r.socket) or r.host in {"127.0.0.1", "localhost", "::1"}


def relay_access_findings(conn: Any, settings: Settings, status: ReplicaStatus | None) -> list[Finding]:
    from lagd.prefetch.service import check_readable  # noqa: PLC0415 - pulls in the prefetch engine

    who = f"user {getpass.getuser()} (uid {os.geteuid()})"
    try:
        index = relay_log_index(conn, settings.replica.relay_log_index)
    except LagdError as e:
        return [Finding("relay_log_access", FAIL, f"cannot find the relay-log index: {e}",
                        "set replica.relay_log_index in the config")]
    remote = ""
    if not _is_local(settings):
        remote = (f"; the replica is {settings.replica.host}: run lagctl doctor on its host, "
                  "where lagd reads the files")
    try:
        why = check_readable(index)
    except OSError as e:  # e.g. the index's directory does not exist either
        why = f"{index} does not exist ({e.strerror}: {e.filename})"
    if why is None and status is not None and status.relay_log_file:
        current = index.parent / Path(status.relay_log_file).name
        if current.exists() and not os.access(current, os.R_OK):
            why = (f"{current} is not readable by this user: the lagd user needs the mysql group "
                   "(SupplementaryGroups=mysql in the unit) and the files group-readable")
    if why is not None:
        fix = ("run lagd (and this check) as a user in the mysql group: sudo -u lagd -g mysql lagctl doctor; "
               "with relay_log outside the datadir, add ReadOnlyPaths= for it in the unit's drop-in")
        if "no relay log (RESET SLAVE?)" in why:
            fix = ("if replication was reset, START SLAVE creates a new relay log; otherwise set "
                   "replica.relay_log_index to the replica's @@relay_log_index (an absolute path)")
        elif "does not exist" in why:
            fix = "set replica.relay_log_index to the replica's @@relay_log_index (an absolute path)"
        return [Finding("relay_log_access", FAIL, f"as {who}: {why}{remote}", fix)]
    return [Finding("relay_log_access", OK,
                    f"{index} and the current relay log are readable by {who}{remote}")]


def heartbeat_finding(conn: Any, settings: Settings, status: ReplicaStatus | None) -> Finding:
    import time  # noqa: PLC0415

    from lagd.heartbeat import read_heartbeat  # noqa: PLC0415

    table = settings.lag.heartbeat_table
    if not table:
        return Finding("heartbeat", INFO,
                       'not configured (lag.heartbeat_table = ""): lag comes from event time and '
                       "Seconds_Behind_Master; a heartbeat table keeps it right through idle periods "
                       "and chains of replicas")
    server_id = settings.lag.heartbeat_server_id or (status.source_server_id if status else 0) or None
    try:
        row = read_heartbeat(conn, table, server_id)
    except DatabaseError as e:
        if e.broken:
            raise
        return Finding("heartbeat", FAIL, f"reading {table} failed: {e.message}",
                       f"GRANT SELECT ON {table} TO lagd")
    except LagdError as e:
        return Finding("heartbeat", FAIL, e.message, e.fix or "")
    if row is None:
        return Finding("heartbeat", WARN, f"{table} has no row for server_id {server_id}",
                       "run the writer on the source: lagd heartbeat --source DSN --table "
                       f"{table} (or pt-heartbeat --update --utc), or set lag.heartbeat_server_id")
    age = time.time() - row.ts
    return Finding("heartbeat", OK, f"{table}: row of server_id {row.server_id}, written {age:.1f} s ago "
                                    "(by the source's clock)")


def _connect_fix(e: DatabaseError, settings: Settings, config: str) -> str:
    r = settings.replica
    if e.kind is Kind.AUTH:
        return (f"check replica.user ({r.user}) and the password (from {r.password_source()}) in {config}; "
                "the account needs a host part matching this client")
    if e.kind in (Kind.UNREACHABLE, Kind.LOST):
        where = (f"replica.socket ({r.socket})" if r.socket
                 else f"replica.host ({r.host}) and replica.port ({r.port})")
        return f"check {where} in {config}: is the server running and listening there?"
    return f"check replica.* in {config}"


def connect(replica: ReplicaSettings) -> Any:
    """lagctl's session on the replica, hardened like lagd's own: it reads,
    never waits long on a lock, and never hangs on a hung server."""
    return Endpoint.of_replica(replica).connect_blocking(statement_timeout=10.0, read_timeout=15.0)


def run_checks(settings: Settings, config: str) -> list[Finding]:
    """Every check, in order; stops after the connection when there is none."""
    from lagd.mysql.replica import detect_flavor, fetch_replica_status  # noqa: PLC0415

    r = settings.replica
    where = r.socket or f"{r.host}:{r.port}"
    try:
        conn = connect(r)
    except DatabaseError as e:
        return [Finding("connect", FAIL, f"cannot connect to {where} as {r.user}: {e.detail}",
                        _connect_fix(e, settings, config))]
    except LagdError as e:
        return [Finding("connect", FAIL, e.message, e.fix or "")]
    try:
        return _checks_on(conn, settings, where, detect_flavor, fetch_replica_status)
    except DatabaseError as e:
        return [Finding("connect", FAIL, f"lost the connection to {where} during the checks: {e.detail}",
                        _connect_fix(e, settings, config))]
    finally:
        conn.close()


def _checks_on(conn: Any, settings: Settings, where: str, detect_flavor: Any, fetch_replica_status: Any
               ) -> list[Finding]:
    out: list[Finding] = []
    flavor = detect_flavor(conn)
    account = _account(conn)
    out.append(Finding("connect", OK, f"{flavor} at {where} as {account}"))

    status: ReplicaStatus | None = None
    status_readable: bool | None = None
    try:
        status = fetch_replica_status(conn, settings.replica.channel, flavor)
        status_readable = True
        threads = (f"IO {status.io_state.value}, SQL {'running' if status.sql_running else 'stopped'}"
                   + (f", last error: {status.last_error}" if status.last_error else ""))
        chan = f"channel {status.channel!r}" if status.channel else "default channel"
        replica_finding = Finding("replica", OK,
                                  f"replica of {status.source_host}:{status.source_port}, {chan}; "
                                  f"{threads} (lagctl status has the rest)")
    except LagdError as e:
        # Refused: the monitor privilege is missing. Anything else: the statement ran.
        status_readable = "refused" not in e.message
        replica_finding = Finding("replica", FAIL, e.message, e.fix or "")

    try:
        grants = parse_grants(_grant_lines(conn))
        out += grant_findings(grants, flavor, account, status_readable)
    except DatabaseError as e:
        if e.broken:
            raise
        out.append(Finding("grants", WARN, f"SHOW GRANTS failed: {e}", "run doctor as the account lagd uses"))
    out.append(replica_finding)

    variables = {name: _variable(conn, name) for name in _VARIABLES}
    if status is not None:
        events, note = _relaylog_events(conn, flavor, status)
        count, example = statement_dml(events) if events or not note else (None, None)
        out += binlog_findings(variables, count, example, len(events), note, status.relay_log_file)
    else:
        out += binlog_findings(variables, None, None, 0, "no replica status")
    out.append(relay_info_finding(flavor, variables.get("relay_log_info_repository")))
    out.append(encryption_finding(flavor, variables))
    out += relay_access_findings(conn, settings, status)
    out.append(heartbeat_finding(conn, settings, status))
    out.append(performance_schema_finding(variables.get("performance_schema")))
    return out


# --- output ------------------------------------------------------------------------------------

_STYLE = {OK: {"fg": "green"}, WARN: {"fg": "yellow", "bold": True}, FAIL: {"fg": "red", "bold": True},
          INFO: {"dim": True}}


def render(findings: Sequence[Finding]) -> list[str]:
    """Lines with click styles; click.echo drops the styles when not on a terminal."""
    lines = []
    for f in findings:
        level = click.style(f"{f.level:<5}", **_STYLE.get(f.level, {}))  # type: ignore[arg-type]
        lines.append(f"{level} {f.check:<19}{f.text}")
        if f.fix and f.level in PROBLEMS:
            lines.append(f"{'':<25}fix: {f.fix}")
    problems = [f for f in findings if f.level in PROBLEMS]
    if problems:
        names = ", ".join(dict.fromkeys(f.check for f in problems))
        many = len(problems) > 1
        lines.append(f"{len(problems)} problem{'s' if many else ''} ({names}): "
                     f"fix {'them' if many else 'it'} and run lagctl doctor again")
    else:
        lines.append(f"no problems: {sum(f.level == OK for f in findings)} checks pass")
    return lines


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="lagd's config file (default /etc/lagd/lagd.toml when it exists, "
                   "else the packaged defaults).")
def doctor(config_file: Path | None) -> None:
    """Check grants, server settings and relay-log access for lagd; print each problem with its fix.

    Exit 0 when there is no problem, 1 otherwise. Run it on the replica's
    host as the user lagd runs as (e.g. sudo -u lagd -g mysql lagctl doctor).
    """
    path = config_file
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    config = str(path) if path else "(packaged defaults)"
    try:
        settings = load_settings(path)
    except ConfigError as e:
        findings = [Finding("config", FAIL, p, f"lagctl config validate {path}") for p in e.problems]
    else:
        r = settings.replica
        click.echo(f"lagctl doctor: replica {r.socket or f'{r.host}:{r.port}'} as {r.user}, config {config}")
        findings = run_checks(settings, config)
    for line in render(findings):
        click.echo(line)
    raise click.exceptions.Exit(1 if any(f.level in PROBLEMS for f in findings) else 0)
