"""Exception hierarchy shared by lagd's modules."""

from __future__ import annotations

from collections.abc import Iterable


class LagdError(Exception):
    """Base of every error lagd raises on purpose.

    The command-line tools print these as one line (``lagctl: error: ...``)
    instead of a traceback: they describe a situation the user can fix.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message


class ServerVersionError(LagdError):
    """``SELECT VERSION()`` returned something lagd cannot place as MySQL or MariaDB."""


class ReplicaStatusError(LagdError):
    """A replica status row does not have the shape its server dialect promises.

    ``columns`` names the offending result-set columns, so a report can say
    which column was missing or held a value of the wrong kind.
    """

    def __init__(
        self, message: str, fix: str | None = None, *, columns: Iterable[str] = ()
    ) -> None:
        super().__init__(message, fix)
        self.columns = tuple(columns)


class NotAReplicaError(LagdError):
    """The server has no replication configured, or not the channel asked for.

    ``channels`` lists the channels the server does have ('' is the default
    channel), empty when it is not a replica at all.
    """

    def __init__(
        self, message: str, fix: str | None = None, *, channels: Iterable[str] = ()
    ) -> None:
        super().__init__(message, fix)
        self.channels = tuple(channels)
