"""What shapes a sandbox (:class:`SandboxConfig` and the mariadbd options it
implies) and the small pure helpers the sandbox needs: GTID position
arithmetic and the default state-file location.

Import these from :mod:`lagd.sandbox.pair`, which re-exports them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lagd.sandbox.server import DEFAULT_LOG_FILE_SIZE, Role, SandboxError, normalize_option

# Options the sandbox derives itself; overriding them would desynchronise it
# from the server it started.
_MANAGED = frozenset(
    {"datadir", "port", "socket", "bind-address", "server-id", "pid-file", "log-error", "user", "tmpdir"}
)
_PARALLEL_MODES = ("none", "minimal", "conservative", "optimistic", "aggressive")


@dataclass
class SandboxConfig:
    """Everything that shapes a sandbox; the defaults suit a 2-core laptop."""

    replicas: int = 1
    base_dir: Path | None = None  # parent of the per-sandbox temp dir; None: system temp
    cache_dir: Path | None = None  # template cache; None: $XDG_CACHE_HOME/lagd
    gtid: bool = True  # False: MASTER_LOG_FILE/MASTER_LOG_POS replication
    source_buffer_pool_mb: int = 64
    replica_buffer_pool_mb: int = 64
    o_direct: bool = False  # innodb_flush_method O_DIRECT, else fsync (page cache)
    flush_log_at_trx_commit: int = 2
    sync_binlog: int = 0
    replica_log_bin: bool = False
    slave_parallel_threads: int = 0
    slave_parallel_mode: str | None = None
    source_extra_options: dict[str, str | None] = field(default_factory=dict)
    replica_extra_options: dict[str, str | None] = field(default_factory=dict)
    keep: bool = False  # leave the base dir on disk after stop()
    detached: bool = False  # servers outlive this process (lagctl sandbox up)
    start_timeout: float = 60.0
    stop_timeout: float = 20.0

    def validate(self) -> None:
        if self.replicas < 1:
            raise SandboxError(f"a sandbox needs at least one replica, not {self.replicas}")
        if min(self.source_buffer_pool_mb, self.replica_buffer_pool_mb) < 8:
            raise SandboxError("innodb_buffer_pool_size must be at least 8 MB")
        mode = self.slave_parallel_mode
        if mode is not None and mode not in _PARALLEL_MODES:
            raise SandboxError(f"slave_parallel_mode must be one of {', '.join(_PARALLEL_MODES)}")
        for extra in (self.source_extra_options, self.replica_extra_options):
            clash = sorted({normalize_option(k) for k in extra} & _MANAGED)
            if clash:
                raise SandboxError(f"option(s) {', '.join(clash)} are managed by the sandbox")

    def server_options(self, role: Role, name: str) -> dict[str, str | None]:
        """The mariadbd options (beyond the managed ones) for one server."""
        replica = role == "replica"
        opts: dict[str, str | None] = {
            "binlog-format": "ROW",
            "binlog-row-image": "FULL",
            "binlog-row-metadata": "FULL",
            # Replication is wired and started by us, also after restarts.
            "skip-slave-start": None,
            "innodb-buffer-pool-size": (
                f"{self.replica_buffer_pool_mb if replica else self.source_buffer_pool_mb}M"
            ),
            # Spelled out both ways: 10.6+ defaults to O_DIRECT, and a lag
            # experiment must know whether the OS page cache hides reads.
            "innodb-flush-method": "O_DIRECT" if self.o_direct else "fsync",
            "innodb-flush-log-at-trx-commit": str(self.flush_log_at_trx_commit),
            "sync-binlog": str(self.sync_binlog),
            "innodb-log-file-size": DEFAULT_LOG_FILE_SIZE,
            "innodb-log-buffer-size": "4M",
            # A restarted server must come back cold, like a real crash would.
            "innodb-buffer-pool-dump-at-shutdown": "OFF",
            "innodb-buffer-pool-load-at-startup": "OFF",
            "performance-schema": "OFF",
            "skip-name-resolve": None,
            "max-connections": "100",
        }
        if not replica or self.replica_log_bin:
            opts["log-bin"] = f"{name}-bin"
        if replica:
            opts["relay-log"] = f"{name}-relay-bin"
            opts["read-only"] = "ON"
            if self.replica_log_bin:
                opts["log-slave-updates"] = "ON"
            if self.slave_parallel_threads:
                opts["slave-parallel-threads"] = str(self.slave_parallel_threads)
            if self.slave_parallel_mode is not None:
                opts["slave-parallel-mode"] = self.slave_parallel_mode
        extra = self.replica_extra_options if replica else self.source_extra_options
        for key, value in extra.items():
            opts[normalize_option(key)] = value
        return opts


def default_state_file() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "lagd-sandbox.json"
    return Path(tempfile.gettempdir()) / f"lagd-sandbox-{os.getuid()}.json"


def parse_gtid_pos(pos: str) -> dict[int, int]:
    """``"0-1-6,1-2-3"`` -> ``{0: 6, 1: 3}`` (domain -> sequence number)."""
    result: dict[int, int] = {}
    for raw in pos.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            domain, _server, seq = (int(p) for p in item.split("-"))
        except ValueError as e:
            raise SandboxError(f"not a GTID position: {pos!r}") from e
        result[domain] = max(seq, result.get(domain, 0))
    return result


def gtid_pos_reached(target: str, current: str) -> bool:
    """Whether ``current`` has applied everything in ``target``, domain by domain."""
    have = parse_gtid_pos(current)
    return all(have.get(d, -1) >= seq for d, seq in parse_gtid_pos(target).items())
