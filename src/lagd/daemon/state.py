"""The daemon's state as one immutable snapshot: what /metrics, /status and lagctl read.

Every part is a frozen value made by the subsystem that owns it; the snapshot
only bundles the latest ones. Readers never query MySQL: a scrape costs the
same whatever the server is doing, and a hung server cannot hang a scrape.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lagd.advisor.runtime import AdvisorSnapshot
from lagd.lag import LagReading
from lagd.mysql.replica import ReplicaStatus
from lagd.prefetch.engine import PrefetchSnapshot


@dataclass(frozen=True, slots=True)
class Health:
    """One subsystem's last attempt: the ``up`` and duration of its collector.

    ``failing_since`` (wall clock) and ``fix`` are set while it fails: how long
    the fault lasts and what a DBA can do about it.
    """

    name: str
    up: bool
    reason: str
    last_success: float | None  # wall clock
    last_duration: float | None  # seconds the last attempt took
    failing_since: float | None = None
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """The replica lagd watches, as configured and as far as it is known."""

    endpoint: str  # "127.0.0.1:3306" or a socket path
    user: str
    channel: str
    flavor: str | None  # None until the server was reached once
    relay_log_index: str | None  # None until the relay log was located

    @property
    def where(self) -> str:
        """How messages name it: ``replica 127.0.0.1:3306``."""
        return f"replica {self.endpoint}"


@dataclass(frozen=True, slots=True)
class StallView:
    """Where the SQL thread's (or the parallel workers') time goes, measured from /proc.

    ``seconds``: cumulative per state (``lagd.prefetch.stall.STATES``) since the
    daemon started, None until a thread was ever sampled; ``shares``: the split
    over the last ``window_seconds``, None when unknown (no thread measured, no
    sample in the window, the sampler stopped). ``threads_note``: why no thread
    is measured, with the fix. ``gate_*``: the prefetch engine's fast gate
    (None while no engine runs or it does not use the split).
    """

    seconds: dict[str, float] | None
    shares: dict[str, float] | None
    window_seconds: float
    verdict: str  # reads, cpu, flush, other, idle, unknown
    text: str
    prefetch_can_help: bool
    spare_cores: float | None  # idle cores of the machine over the last sampling interval
    threads: tuple[int, ...]  # OS thread ids measured
    threads_note: str | None
    gate_open: bool | None
    gate_reason: str | None
    summary: str  # the one line lagctl status prints
    # InnoDB's purge history length as the prefetch gate last read it (once a second while
    # it measures or probes may run); None when not read lately or not readable (no PROCESS).
    purge_history: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: float  # wall clock
    version: str
    started_at: float
    config_path: str | None
    config_error: str | None  # the last reload's problem, when it kept the old config
    settings: dict[str, Any]  # public (secret-free) settings
    replica: ReplicaInfo
    status: ReplicaStatus | None
    status_error: str | None
    lag: LagReading | None
    prefetch: PrefetchSnapshot | None
    prefetch_off_reason: str | None  # why prefetch does not run, with the fix
    advisor: AdvisorSnapshot | None
    health: tuple[Health, ...]
    loop_age: float  # seconds since the main loop last ticked
    stall: StallView | None = None  # None: the daemon has no stall monitor (tests, other hosts)

    @property
    def channel(self) -> str:
        return self.status.channel if self.status is not None else self.replica.channel

    def failing(self) -> tuple[Health, ...]:
        """The subsystems that fail now, for /readyz and lagctl."""
        return tuple(h for h in self.health if not h.up)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(self)
        return out


_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass's fields, minus those not shown


def _fields(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() builds a tuple of Field objects each call: a /status
    # walks a few hundred objects, and that was most of its 3 ms.
    names = _FIELDS.get(cls)
    if names is None:
        # properties worth showing are listed explicitly; "methods" is not one
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name != "methods")
    return names


def _float(value: float) -> Any:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None if math.isnan(value) else value


def _other(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _kind(cls: type) -> Any:
    """How a value of ``cls`` becomes JSON-ready, decided once a type: the isinstance and
    is_dataclass tests for every value of a few hundred were half of to_json's time."""
    if issubclass(cls, enum.Enum):
        return lambda v: v.value
    if issubclass(cls, str | int | type(None)):  # bool is an int
        return None
    if dataclasses.is_dataclass(cls):
        names = _fields(cls)
        return lambda v: {name: _plain(getattr(v, name)) for name in names}
    if issubclass(cls, Mapping):
        return lambda v: {str(k): _plain(x) for k, x in v.items()}
    if issubclass(cls, frozenset | set):
        return lambda v: sorted((_plain(x) for x in v), key=str)
    if issubclass(cls, list | tuple):
        return lambda v: [_plain(x) for x in v]
    if issubclass(cls, float):
        return _float
    return _other


_KINDS: dict[type, Any] = {}


def _plain(value: Any) -> Any:
    """JSON-ready data: dataclasses to dicts, enums to values, inf to a string."""
    cls = type(value)
    try:
        convert = _KINDS[cls]
    except KeyError:
        convert = _KINDS[cls] = _kind(cls)
    return value if convert is None else convert(value)
