"""Errors the relay-log reader raises; each names the problem and the fix."""

from __future__ import annotations

from lagd.errors import LagdError


class RelayLogError(LagdError):
    """Base for relay-log problems."""


class EncryptedRelayLogError(RelayLogError):
    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path} is encrypted (binlog/relay-log encryption is on); lagd reads relay logs"
            " from disk and cannot decrypt them",
            fix="turn off relay-log encryption on this replica (MySQL: binlog_encryption=OFF;"
            " MariaDB: encrypt_binlog=OFF) or run lagd with prefetch disabled",
        )


_PERMISSION_FIX = (
    "give the lagd user read access to the relay-log directory (e.g. add it to the"
    " mysql group: usermod -aG mysql lagd, and check the directory's group read and"
    " execute bits) and point relay_log_index at the right file")
# A missing index is not a permission problem: RESET SLAVE/REPLICA deletes the
# relay log and the server starts a new one when replication starts again.
_MISSING_FIX = (
    "none if the relay log was just started anew (RESET SLAVE / RESET REPLICA deletes it; lagd reads"
    " the new one when the server makes it); otherwise point replica.relay_log_index at the right file")


class RelayLogAccessError(RelayLogError):
    def __init__(self, path: str, reason: str, *, missing: bool = False) -> None:
        super().__init__(f"cannot read relay log {path}: {reason}",
                         fix=_MISSING_FIX if missing else _PERMISSION_FIX)


class NotALogFileError(RelayLogError):
    def __init__(self, path: str, magic: bytes) -> None:
        super().__init__(
            f"{path} is not a MySQL/MariaDB log file (starts with {magic!r})",
            fix="check relay_log_index in the lagd config: it must name the replica's"
            " relay-log index file (SELECT @@relay_log_index)",
        )


class RelayLogPurgedError(RelayLogError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"relay log {name} was purged before lagd read it and no replica status is"
            " available to resynchronise from",
            fix="give the reader a resync callback (the daemon does), or restart from the SQL"
            " thread's Relay_Log_File/Relay_Log_Pos",
        )
