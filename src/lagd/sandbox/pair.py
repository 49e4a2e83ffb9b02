"""A private MariaDB replication sandbox: one source and N replicas.

Every server is a real ``mariadbd`` started by us on a free loopback port with
its own datadir (a copy of a cached template) under a temporary base
directory, so tests and demos never touch a system MariaDB.  See
docs/sandbox.md for the options and the CLI (``lagctl sandbox``).

Typical use::

    with Sandbox(SandboxConfig(replicas=1)) as sb:
        sb.source.query("CREATE DATABASE t")
        sb.wait_caught_up()
        lag_conn = pymysql.connect(**sb.replica().dsn.as_kwargs())
"""

from __future__ import annotations

import atexit
import json
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import pymysql

from lagd.sandbox.config import (
    SandboxConfig,
    default_state_file,
    gtid_pos_reached,
    parse_gtid_pos,
)
from lagd.sandbox.server import (
    LAGD_PASSWORD,
    LAGD_USER,
    REPL_PASSWORD,
    REPL_USER,
    Dsn,
    PortInUseError,
    Role,
    SandboxError,
    Server,
    default_cache_dir,
    ensure_template,
    find_binary,
    free_port,
)

__all__ = [
    "Dsn",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "Server",
    "default_state_file",
    "gtid_pos_reached",
    "parse_gtid_pos",
]

log = logging.getLogger("lagd.sandbox.pair")

# Exactly what lagd needs, and PROCESS it recommends (the SQL thread's OS thread id);
# see docs/sandbox.md for how this was established.
LAGD_GRANTS = "SELECT, SLAVE MONITOR, BINLOG MONITOR, PROCESS"
# Only a directory holding this file is ever deleted by stop(): a corrupt or
# hand-edited state file must not make us rmtree something else.
_MARKER = ".lagd-sandbox"
_STATE_VERSION = 1

# Sandboxes to stop at interpreter exit; detached ones are never added.
_LIVE: set[Sandbox] = set()


@atexit.register
def _stop_live_sandboxes() -> None:
    for sb in list(_LIVE):
        try:
            sb.stop()
        except Exception:
            log.exception("stopping a sandbox at exit failed")


class Sandbox:
    """A running source/replica topology; a context manager that never leaks."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config if config is not None else SandboxConfig()
        self.base_dir: Path | None = None
        self._servers: list[Server] = []

    def __enter__(self) -> Sandbox:
        if not self._servers:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- topology ----------------------------------------------------------

    @property
    def servers(self) -> list[Server]:
        return list(self._servers)

    @property
    def source(self) -> Server:
        for s in self._servers:
            if s.role == "source":
                return s
        raise SandboxError("the sandbox is not started")

    @property
    def replicas(self) -> list[Server]:
        return [s for s in self._servers if s.role == "replica"]

    def replica(self, index: int = 0) -> Server:
        replicas = self.replicas
        if not 0 <= index < len(replicas):
            raise SandboxError(f"no replica {index}; the sandbox has {len(replicas)}")
        return replicas[index]

    def server(self, name: str) -> Server:
        for s in self._servers:
            if s.name == name:
                return s
        names = ", ".join(s.name for s in self._servers) or "none"
        raise SandboxError(f"no server named {name!r} (servers: {names})")

    # -- start and stop ------------------------------------------------------

    def start(self) -> Sandbox:
        if self._servers:
            raise SandboxError("this sandbox was already started")
        cfg = self.config
        cfg.validate()
        mariadbd = find_binary("mariadbd")
        install_db = find_binary("mariadb-install-db")
        t0 = time.monotonic()
        template = ensure_template(cfg.cache_dir or default_cache_dir(), mariadbd, install_db)
        if cfg.base_dir is not None:
            cfg.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir = Path(tempfile.mkdtemp(prefix="lagd-sandbox-", dir=cfg.base_dir))
        (self.base_dir / _MARKER).write_text("created by lagd.sandbox.pair; deleted on stop\n")
        if not cfg.detached:
            _LIVE.add(self)
        # Anything, even Ctrl-C, between here and a returned sandbox must not
        # leave servers behind: __exit__ does not run when __enter__ raises.
        try:
            names: list[tuple[str, Role]] = [("source", "source")]
            names += [(f"replica{i}", "replica") for i in range(cfg.replicas)]
            for server_id, (name, role) in enumerate(names, start=1):
                datadir = self.base_dir / name
                shutil.copytree(template, datadir, symlinks=True)
                self._servers.append(
                    Server(
                        name=name,
                        role=role,
                        server_id=server_id,
                        datadir=datadir,
                        socket_path=self.base_dir / f"{name}.sock",
                        port=free_port(),
                        options=cfg.server_options(role, name),
                        mariadbd=mariadbd,
                        die_with_parent=not cfg.detached,
                    )
                )
            # Launch all first so the servers initialise in parallel.
            for s in self._servers:
                s.launch()
            for s in self._servers:
                self._wait_ready_new_port(s)
            for s in self._servers:
                self._create_users(s)
            for r in self.replicas:
                self._wire(r)
        except BaseException as e:
            self.stop()
            if isinstance(e, pymysql.err.MySQLError):
                raise SandboxError(f"setting up the sandbox failed: {e}") from e
            raise
        log.info(
            "sandbox up in %.1fs: %s",
            time.monotonic() - t0,
            ", ".join(f"{s.name}=127.0.0.1:{s.port}" for s in self._servers),
        )
        return self

    def _wait_ready_new_port(self, server: Server, attempts: int = 5) -> None:
        for attempt in range(attempts):
            try:
                server.wait_ready(self.config.start_timeout)
                return
            except PortInUseError:
                if attempt == attempts - 1:
                    raise
                log.info("%s: port %d was taken; retrying on another", server.name, server.port)
                server.port = free_port()
                server.launch()

    def stop(self, *, keep: bool | None = None) -> None:
        """SIGTERM every server, SIGKILL what is still up after stop_timeout."""
        running = [s for s in self._servers if s.is_alive()]
        for s in running:
            s.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.stop_timeout
        for s in running:
            if not s.wait_exit(deadline - time.monotonic()):
                log.warning("%s did not shut down in time; killing it", s.name)
                s.kill()
        _LIVE.discard(self)
        keep = self.config.keep if keep is None else keep
        if not keep and self.base_dir is not None and (self.base_dir / _MARKER).is_file():
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def kill_server(self, name: str) -> None:
        """SIGKILL one server, as a crash would."""
        self.server(name).kill()

    def restart_server(self, name: str, *, start_slave: bool = True, timeout: float | None = None) -> None:
        """Start a server again on the same datadir and port.

        Replication is not re-wired (CHANGE MASTER survives in master.info);
        on a replica the threads that were wanted before are started again
        unless ``start_slave`` is False (skip-slave-start semantics).
        """
        s = self.server(name)
        if s.is_alive():
            s.send_signal(signal.SIGTERM)
            if not s.wait_exit(self.config.stop_timeout):
                s.kill()
        s.launch()
        try:
            s.wait_ready(timeout if timeout is not None else self.config.start_timeout)
        except PortInUseError as e:
            # The port cannot move: the replicas' CHANGE MASTER points at it.
            raise SandboxError(f"{name}: port {s.port} was taken while it was down") from e
        if s.role != "replica":
            return
        if not start_slave:
            s.want_io = s.want_sql = False
        elif s.want_io and s.want_sql:
            s.query("START SLAVE")
        elif s.want_io:
            s.query("START SLAVE IO_THREAD")
        elif s.want_sql:
            s.query("START SLAVE SQL_THREAD")

    # -- replication -----------------------------------------------------------

    def _create_users(self, s: Server) -> None:
        # Created on every server with sql_log_bin=0 rather than replicated,
        # so the source's binlog starts empty and each server stands alone.
        stmts = [
            "SET SESSION sql_log_bin = 0",
            f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_PASSWORD}'",
            f"GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'127.0.0.1'",
        ]
        for host in ("localhost", "127.0.0.1"):
            stmts.append(f"CREATE USER IF NOT EXISTS '{LAGD_USER}'@'{host}' IDENTIFIED BY '{LAGD_PASSWORD}'")
            stmts.append(f"GRANT {LAGD_GRANTS} ON *.* TO '{LAGD_USER}'@'{host}'")
        conn = s.connect()
        try:
            with conn.cursor() as cur:
                for stmt in stmts:
                    cur.execute(stmt)
        finally:
            conn.close()

    def _wire(self, r: Server) -> None:
        src = self.source
        common = (
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, "
            "MASTER_USER=%s, MASTER_PASSWORD=%s, MASTER_CONNECT_RETRY=1, "
        )
        if self.config.gtid:
            r.query(common + "MASTER_USE_GTID=slave_pos", (src.port, REPL_USER, REPL_PASSWORD))
        else:
            ms = src.query("SHOW MASTER STATUS")[0]
            r.query(
                common + "MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s, MASTER_USE_GTID=no",
                (src.port, REPL_USER, REPL_PASSWORD, ms["File"], int(ms["Position"])),
            )
        self.start_slave(self.replicas.index(r))
        self._wait_threads_running(r, timeout=30)

    def _wait_threads_running(self, r: Server, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            st = r.query("SHOW SLAVE STATUS")[0]
            if st["Slave_IO_Running"] == "Yes" and st["Slave_SQL_Running"] == "Yes":
                return
            if time.monotonic() > deadline:
                raise SandboxError(f"{r.name}: replication did not start: {_summary(st)}")
            time.sleep(0.05)

    def slave_status(self, replica: int = 0) -> dict[str, Any]:
        rows = self.replica(replica).query("SHOW SLAVE STATUS")
        if not rows:
            raise SandboxError(f"{self.replica(replica).name} is not configured as a replica")
        return rows[0]

    def _control(self, replica: int, stmt: str, io: bool | None, sql: bool | None) -> None:
        r = self.replica(replica)
        r.query(stmt)
        if io is not None:
            r.want_io = io
        if sql is not None:
            r.want_sql = sql

    def start_slave(self, replica: int = 0) -> None:
        self._control(replica, "START SLAVE", True, True)

    def stop_slave(self, replica: int = 0) -> None:
        self._control(replica, "STOP SLAVE", False, False)

    def stop_sql_thread(self, replica: int = 0) -> None:
        self._control(replica, "STOP SLAVE SQL_THREAD", None, False)

    def start_sql_thread(self, replica: int = 0) -> None:
        self._control(replica, "START SLAVE SQL_THREAD", None, True)

    @contextmanager
    def sql_thread_stopped(self, replica: int = 0, timeout: float = 60.0) -> Iterator[None]:
        """The SQL thread stopped for the block (a backlog builds behind it), then started
        and the replicas caught up, however the block ends."""
        self.stop_sql_thread(replica)
        try:
            yield
        finally:
            self.start_sql_thread(replica)
            self.wait_caught_up(timeout=timeout)

    def stop_io_thread(self, replica: int = 0) -> None:
        self._control(replica, "STOP SLAVE IO_THREAD", False, None)

    def start_io_thread(self, replica: int = 0) -> None:
        self._control(replica, "START SLAVE IO_THREAD", True, None)

    def flush_relay_logs(self, replica: int = 0) -> None:
        self.replica(replica).query("FLUSH RELAY LOGS")

    def _relay_log_paths(self, replica: int) -> tuple[Path, Path]:
        r = self.replica(replica)
        if r.is_alive():
            row = r.query("SELECT @@relay_log_basename AS base, @@relay_log_index AS idx")[0]
            if row["base"] and row["idx"]:
                return Path(row["base"]), Path(row["idx"])
        # Down: the same answer the server would give, from our own options.
        base = r.datadir / (r.options.get("relay-log") or f"{r.name}-relay-bin")
        return base, base.with_name(base.name + ".index")

    def relay_log_dir(self, replica: int = 0) -> Path:
        return self._relay_log_paths(replica)[0].parent

    def relay_log_index(self, replica: int = 0) -> Path:
        return self._relay_log_paths(replica)[1]

    def wait_caught_up(self, timeout: float = 30.0, replica: int | None = None) -> None:
        """Block until the replica(s) applied everything the source had logged now."""
        targets = self.replicas if replica is None else [self.replica(replica)]
        deadline = time.monotonic() + timeout
        if self.config.gtid:
            want = str(self.source.query("SELECT @@gtid_binlog_pos AS p")[0]["p"])
        else:
            ms = self.source.query("SHOW MASTER STATUS")[0]
            want_file, want_pos = str(ms["File"]), int(ms["Position"])
        for r in targets:
            while True:
                if self.config.gtid:
                    have = str(r.query("SELECT @@gtid_slave_pos AS p")[0]["p"])
                    done = gtid_pos_reached(want, have)
                else:
                    st = r.query("SHOW SLAVE STATUS")[0]
                    at = (str(st["Relay_Master_Log_File"]), int(st["Exec_Master_Log_Pos"]))
                    done = at >= (want_file, want_pos)
                if done:
                    break
                if time.monotonic() > deadline:
                    st = r.query("SHOW SLAVE STATUS")[0]
                    raise SandboxError(f"{r.name} did not catch up within {timeout:.0f}s: {_summary(st)}")
                time.sleep(0.02)

    # -- detached mode -----------------------------------------------------------

    def write_state(self, path: Path) -> None:
        """Record the running servers so another process can reattach."""
        if self.base_dir is None:
            raise SandboxError("the sandbox is not started")
        data = {
            "version": _STATE_VERSION,
            "base_dir": str(self.base_dir),
            "gtid": self.config.gtid,
            "servers": [s.to_state() for s in self._servers],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def from_state_file(cls, path: Path) -> Sandbox:
        """Reattach to servers started (detached) by another process."""
        try:
            data = json.loads(path.read_text())
            if data.get("version") != _STATE_VERSION:
                raise SandboxError(f"sandbox state {path} has an unknown version")
            servers = [Server.from_state(s) for s in data["servers"]]
            base_dir = Path(data["base_dir"])
            gtid = bool(data.get("gtid", True))
        except FileNotFoundError as e:
            raise SandboxError(f"no sandbox state at {path}") from e
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SandboxError(f"sandbox state {path} is unreadable: {e}") from e
        replicas = sum(1 for s in servers if s.role == "replica")
        sb = cls(SandboxConfig(replicas=replicas, gtid=gtid, detached=True))
        sb.base_dir = base_dir
        sb._servers = servers
        for s in sb.replicas:
            # Assume the state `up` left; a dead replica keeps these for restart.
            s.want_io = s.want_sql = True
        return sb


def _summary(st: dict[str, Any]) -> str:
    parts = [
        f"io={st.get('Slave_IO_Running')}",
        f"sql={st.get('Slave_SQL_Running')}",
        f"read={st.get('Master_Log_File')}:{st.get('Read_Master_Log_Pos')}",
        f"exec={st.get('Relay_Master_Log_File')}:{st.get('Exec_Master_Log_Pos')}",
        f"gtid_io={st.get('Gtid_IO_Pos')}",
    ]
    for key in ("Last_IO_Error", "Last_SQL_Error"):
        if st.get(key):
            parts.append(f"{key}: {st[key]}")
    return ", ".join(parts)
