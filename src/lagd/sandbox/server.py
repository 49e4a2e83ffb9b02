"""One private ``mariadbd`` of the sandbox: finding the binaries, the cached
template datadir, and the life cycle of a single server process.

Kept apart from :mod:`lagd.sandbox.pair` (which wires servers into a replication
topology) so that each module reads in one sitting; import from
:mod:`lagd.sandbox.pair`, which re-exports the public names.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pymysql
from pymysql.connections import Connection
from pymysql.cursors import DictCursor

from lagd.errors import LagdError

log = logging.getLogger("lagd.sandbox.pair")

Role = Literal["source", "replica"]

# Debian puts mariadbd in /usr/sbin, which is not on an ordinary user's PATH.
EXTRA_SEARCH_DIRS: tuple[str, ...] = ("/usr/sbin", "/usr/local/sbin")
INSTALL_FIX = "apt-get install -y mariadb-server, or run scripts/bootstrap"

# Part of the template cache key: bump when the install-db invocation changes.
_TEMPLATE_FORMAT = "2"
# The template is installed with this redo log size so servers started with
# the default do not resize the log (a few hundred ms) on their first start.
DEFAULT_LOG_FILE_SIZE = "16M"
# AF_UNIX paths are limited to 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
_PR_SET_PDEATHSIG = 1
# Fixed, well-known credentials: the servers listen on loopback only and hold
# throwaway data, and tests and docs need to know them.
LAGD_USER = "lagd"
LAGD_PASSWORD = "lagd"  # noqa: S105
REPL_USER = "repl"
REPL_PASSWORD = "repl"  # noqa: S105


class SandboxError(LagdError):
    """The sandbox could not be set up or operated."""


class PortInUseError(SandboxError):
    """mariadbd could not bind its TCP port; the caller picks another one."""


def find_binary(name: str) -> Path:
    """Locate a MariaDB program on PATH or in the sbin directories."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs += [d for d in EXTRA_SEARCH_DIRS if d not in dirs]
    found = shutil.which(name, path=os.pathsep.join(dirs)) if dirs else None
    if found is None:
        where = ", ".join(dirs) if dirs else "an empty search path"
        raise SandboxError(f"MariaDB server is missing: {name} was not found in {where}", fix=INSTALL_FIX)
    return Path(found)


def running_as_root() -> bool:
    return os.geteuid() == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    Another process may take it before mariadbd binds it; the caller retries
    on :class:`PortInUseError`.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lagd"


def server_version(mariadbd: Path) -> str:
    try:
        out = subprocess.run(
            [str(mariadbd), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as e:
        raise SandboxError(f"cannot run {mariadbd} --version: {e}", fix=INSTALL_FIX) from e
    if out.returncode != 0:
        raise SandboxError(f"{mariadbd} --version failed: {out.stderr.strip()[-500:]}")
    return out.stdout.strip()


def _install_db_argv(install_db: Path, datadir: Path) -> list[str]:
    argv = [
        str(install_db),
        "--no-defaults",
        f"--datadir={datadir}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        # Otherwise install-db fails on machines whose hostname does not
        # resolve (common in containers).
        "--skip-name-resolve",
        f"--innodb-log-file-size={DEFAULT_LOG_FILE_SIZE}",
    ]
    if running_as_root():
        argv.append("--user=root")
    return argv


def ensure_template(cache_dir: Path, mariadbd: Path, install_db: Path) -> Path:
    """Return a pristine datadir for this mariadbd version, installing it once.

    install-db takes seconds; copying its result takes milliseconds, so every
    server of every sandbox starts from a copy of this cached template.
    """
    version = server_version(mariadbd)
    key_src = "\n".join([version, _TEMPLATE_FORMAT, *_install_db_argv(install_db, Path("-"))])
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    final = cache_dir / f"template-{key}"
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".install-", dir=cache_dir))
    log.info("installing a template datadir for %s (once per version) in %s", version, final)
    try:
        # Its bootstrap server clears its tmpdir of #sql* files too (Server.tmpdir).
        (work / "tmp").mkdir()
        out = subprocess.run(
            _install_db_argv(install_db, work / "data"),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "TMPDIR": str(work / "tmp")},
        )
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).splitlines()[-20:])
            raise SandboxError(f"mariadb-install-db failed (exit {out.returncode}):\n{tail}")
        (work / "data" / "lagd-template.txt").write_text(version + "\n")
        # The rename publishes the template atomically; a concurrent run that
        # won the race already published an identical one, so ours goes.
        try:
            os.rename(work / "data", final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn making the child get SIGKILL when its parent dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so
    servers must be started from a long-lived thread (the main thread in
    practice).
    """
    libc = _LIBC

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl, and then no signal
        # will ever come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, None if there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may contain spaces; the state follows it.
    return stat.rpartition(")")[2].split()[0]


def pid_runs_datadir(pid: int, datadir: Path) -> bool:
    """Whether ``pid`` is a live mariadbd serving ``datadir``.

    Guards against signalling an unrelated process that reused the pid of a
    server recorded in a stale state file.
    """
    state = _proc_state(pid)
    if state is None:
        return False
    if state in ("Z", "X"):
        # A zombie still answers kill(pid, 0); reap it if it is our child.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--datadir={datadir}".encode() in argv


def render_options(options: Mapping[str, str | None]) -> list[str]:
    """``{"log-bin": "x", "skip-slave-start": None}`` -> ``--log-bin=x --skip-slave-start``."""
    return [f"--{k}" if v is None else f"--{k}={v}" for k, v in options.items()]


def normalize_option(name: str) -> str:
    """mariadbd treats ``_`` and ``-`` alike in option names; so do we, for overrides."""
    return name.strip().lstrip("-").replace("_", "-")


@dataclass(frozen=True)
class Dsn:
    """How lagd itself connects: TCP on loopback as the ``lagd`` user."""

    host: str
    port: int
    user: str
    password: str

    def as_kwargs(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password}


class Server:
    """One mariadbd: its files, its port, and its process (if it runs)."""

    def __init__(
        self,
        *,
        name: str,
        role: Role,
        server_id: int,
        datadir: Path,
        socket_path: Path,
        port: int,
        options: Mapping[str, str | None],
        mariadbd: Path,
        die_with_parent: bool = True,
        pid: int | None = None,
    ) -> None:
        if len(str(socket_path).encode()) > _MAX_SOCKET_PATH:
            raise SandboxError(
                f"socket path {socket_path} is longer than a unix socket allows; use a shorter base directory"
            )
        self.name = name
        self.role: Role = role
        self.server_id = server_id
        self.datadir = datadir
        self.socket_path = socket_path
        self.port = port
        self.options: dict[str, str | None] = dict(options)
        self.mariadbd = mariadbd
        self.die_with_parent = die_with_parent
        self.pid = pid
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        # The replication threads the user wants running, so that a restart
        # brings back what a kill took away (see Sandbox.restart_server).
        self.want_io = False
        self.want_sql = False

    def __repr__(self) -> str:
        return f"Server({self.name!r}, port={self.port}, pid={self.pid})"

    @property
    def error_log(self) -> Path:
        return self.datadir / "mariadbd.err"

    @property
    def tmpdir(self) -> Path:
        """The server's own tmpdir, beside its datadir (inside it, it would be a schema).
        Every mariadbd deletes each ``#sql*`` file in its tmpdir as it starts
        (``mysql_rm_tmp_tables``): servers sharing /tmp lost the internal temporary
        table of a query running while another one started (CI: "Error on delete of
        '/tmp/#sql-temptable-...MAI'" on a ``SHOW COLUMNS``)."""
        return self.datadir.with_name(self.datadir.name + ".tmp")

    @property
    def dsn(self) -> Dsn:
        return Dsn(host="127.0.0.1", port=self.port, user=LAGD_USER, password=LAGD_PASSWORD)

    def argv(self) -> list[str]:
        # --no-defaults must come first, and keeps any system my.cnf out.
        argv = [str(self.mariadbd), "--no-defaults"]
        if running_as_root():
            argv.append("--user=root")
        managed = {
            "datadir": str(self.datadir),
            "port": str(self.port),
            "socket": str(self.socket_path),
            "bind-address": "127.0.0.1",
            "server-id": str(self.server_id),
            "pid-file": str(self.datadir / "mariadbd.pid"),
            "log-error": str(self.error_log),
            "tmpdir": str(self.tmpdir),
        }
        return argv + render_options(managed) + render_options(self.options)

    # -- process life cycle --------------------------------------------------

    def launch(self) -> None:
        """Start mariadbd without waiting for it; see :meth:`wait_ready`."""
        if self.is_alive():
            raise SandboxError(f"{self.name} is already running (pid {self.pid})")
        self.error_log.touch()
        self.tmpdir.mkdir(exist_ok=True)
        self._log_offset = self.error_log.stat().st_size
        with self.error_log.open("ab") as err:
            # stdout/stderr must not inherit the caller's pipes: a detached
            # server would hold them open and hang whoever reads them to EOF.
            self._proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                # Own session: a Ctrl-C on the terminal reaches Python only,
                # which then shuts the servers down in order.
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()) if self.die_with_parent else None,  # noqa: PLW1509
            )
        self.pid = self._proc.pid
        log.debug("%s: started pid %d on port %d", self.name, self.pid, self.port)

    def is_alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self.pid is not None and pid_runs_datadir(self.pid, self.datadir)

    def wait_ready(self, timeout: float) -> None:
        """Poll the unix socket until the server answers."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.is_alive():
                new_log = self.tail_error_log(since=self._log_offset)
                if "Address already in use" in new_log:
                    raise PortInUseError(f"{self.name}: port {self.port} is in use")
                code = self._proc.returncode if self._proc is not None else "?"
                raise SandboxError(
                    f"{self.name}: mariadbd exited (code {code}) before answering; "
                    f"last lines of {self.error_log}:\n{new_log}"
                )
            try:
                self.connect(connect_timeout=2).close()
                return
            except pymysql.err.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"{self.name}: mariadbd did not answer within {timeout:.0f}s; "
                    f"last lines of {self.error_log}:\n{self.tail_error_log()}"
                )
            time.sleep(0.05)

    def send_signal(self, sig: signal.Signals) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(sig)
        elif self.pid is not None and pid_runs_datadir(self.pid, self.datadir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def wait_exit(self, timeout: float) -> bool:
        """Wait until the process is gone (and reaped, if ours); True if it is."""
        if self._proc is not None:
            try:
                self._proc.wait(timeout=max(timeout, 0))
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.is_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """SIGKILL, as a crash would; InnoDB recovers on the next start."""
        self.send_signal(signal.SIGKILL)
        self.wait_exit(10)

    # -- SQL ---------------------------------------------------------------------

    def connect(self, db: str | None = None, **kw: Any) -> Connection[Any]:
        """Root over the unix socket, autocommit on: for setup and tests."""
        kw.setdefault("autocommit", True)
        return pymysql.connections.Connection(
            unix_socket=str(self.socket_path), user="root", password="", database=db, **kw
        )

    def query(self, sql: str, args: Any = None, db: str | None = None) -> list[dict[str, Any]]:
        """Run one statement on a fresh root connection; rows as dicts."""
        conn = self.connect(db, cursorclass=DictCursor)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def tail_error_log(self, lines: int = 20, since: int = 0) -> str:
        try:
            with self.error_log.open("rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no error log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- state file ------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "server_id": self.server_id,
            "pid": self.pid,
            "port": self.port,
            "socket": str(self.socket_path),
            "datadir": str(self.datadir),
            "mariadbd": str(self.mariadbd),
            "options": self.options,
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> Server:
        role = data["role"]
        if role not in ("source", "replica"):
            raise SandboxError(f"bad role {role!r} in sandbox state")
        return cls(
            name=str(data["name"]),
            role=role,
            server_id=int(data["server_id"]),
            datadir=Path(data["datadir"]),
            socket_path=Path(data["socket"]),
            port=int(data["port"]),
            options=dict(data.get("options", {})),
            mariadbd=Path(data["mariadbd"]),
            die_with_parent=False,
            pid=int(data["pid"]) if data.get("pid") is not None else None,
        )
