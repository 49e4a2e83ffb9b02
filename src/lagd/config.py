"""lagd's configuration: one TOML file checked against one schema.

The daemon (at start and on SIGHUP) and ``lagctl config validate`` load it
the same way: the packaged ``defaults.toml`` with the user's file merged over
it table by table, then validation. Every problem becomes one line that
names the key, the value found and what is allowed, so a DBA can fix a file
without reading this code. The schema forbids unknown keys everywhere: a
typo would otherwise silently leave the default in force.

The replica password is not part of the settings: only its source is (see
:mod:`lagd.config_credentials`).
"""

from __future__ import annotations

import copy
import difflib
import enum
import functools
import ipaddress
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic import model_validator as _model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from lagd import config_credentials
from lagd.config_credentials import CredentialError
from lagd.errors import LagdError

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "RELOAD",
    "AdvisorSettings",
    "ConfigError",
    "CredentialError",
    "HttpSettings",
    "LagSettings",
    "LogSettings",
    "PrefetchSettings",
    "Reload",
    "ReplicaSettings",
    "Settings",
    "StatusSettings",
    "changed_keys",
    "load_settings",
    "packaged_defaults",
    "parse_listen",
    "parse_size",
    "reload_actions",
    "settings_from_dict",
]

DEFAULT_CONFIG_PATH = Path("/etc/lagd/lagd.toml")

_KiB, _MiB, _GiB = 2**10, 2**20, 2**30
_SIZE_UNITS = {
    "": 1, "b": 1,
    # K/M/G mean powers of 1024, as in my.cnf, which is what a DBA types by habit.
    "k": _KiB, "kib": _KiB, "m": _MiB, "mib": _MiB, "g": _GiB, "gib": _GiB,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


class ConfigError(LagdError):
    """The configuration cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: Sequence[str], fix: str | None = None) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(f"invalid configuration {source}: " + " | ".join(self.problems), fix)


# -- value checks (each raises ValueError with the reason, said after the value) --


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like "64MiB", "16 MB" or "1G" (my.cnf style)."""
    if isinstance(value, int):
        return value
    m = _SIZE.fullmatch(value)
    if m is None or m[2].lower() not in _SIZE_UNITS:
        raise ValueError("is not a size")
    return int(m[1]) * _SIZE_UNITS[m[2].lower()]


def parse_listen(text: str) -> tuple[str, int]:
    """(host, port) of "host:port"; an IPv6 host comes in brackets: "[::1]:9904"."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("is not [IPv6 address]:port") from None
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host:
            raise ValueError("needs brackets around an IPv6 address, like [::1]:9904")
        if sep and not _HOSTNAME.fullmatch(host):
            raise ValueError("does not start with a host name or IP address")
    if not sep or not port.isdigit():
        raise ValueError("is not host:port")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"has port {int(port)}, outside 1..65535")
    return host, int(port)


_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def _host(text: str) -> str:
    if text.startswith("/"):
        raise ValueError("is a path; a unix socket goes in replica.socket")
    if not _HOSTNAME.fullmatch(text):
        try:
            ipaddress.ip_address(text)
        except ValueError:
            raise ValueError("is not a host name or IP address") from None
    return text


def _listen(text: str) -> str:
    parse_listen(text)
    return text


def _absolute_or_empty(text: str) -> str:
    # systemd starts lagd in /, so a relative path would not mean what it says.
    if text and not text.startswith("/"):
        raise ValueError("is not an absolute path")
    return text


def _credential_name(text: str) -> str:
    if text in {".", ".."} or "/" in text or (text and not text.isprintable()) or " " in text:
        raise ValueError("is not a credential name")
    return text


def _env_name(text: str) -> str:
    if text and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise ValueError("is not an environment variable name")
    return text


def _schema_table(text: str) -> str:
    if text and not re.fullmatch(r"[\w$]+\.[\w$]+", text):
        raise ValueError('is not "schema.table"')
    return text


def _url(text: str) -> str:
    parts = urlsplit(text)
    if text and (parts.scheme not in {"http", "https"} or not parts.netloc):
        raise ValueError("is not an http:// or https:// URL")
    return text


# -- markers that let an error say what a key allows ------------------------------


@dataclass(frozen=True)
class _Allowed:
    text: str


@dataclass(frozen=True)
class _Unit:
    name: str


_SECONDS = _Unit("seconds")


def _human_size(n: int) -> str:
    for unit, size in (("GiB", _GiB), ("MiB", _MiB), ("KiB", _KiB)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class _SizeCheck:
    lo: int
    hi: int

    def __call__(self, value: object) -> object:
        # Anything but an int or a string goes on to the integer check, which names its type.
        if isinstance(value, bool) or not isinstance(value, int | str):
            return value
        n = parse_size(value)
        if not self.lo <= n <= self.hi:
            raise ValueError("is out of range")
        return n

    @property
    def allowed(self) -> str:
        return (
            f"a size from {_human_size(self.lo)} to {_human_size(self.hi)}: bytes as an integer, "
            'or a string like "64MiB" (KiB, MiB, GiB; KB, MB, GB are powers of 1000)'
        )


_Path = Annotated[str, AfterValidator(_absolute_or_empty), _Allowed('an absolute path, or "" (not set)')]
_Schemas = Annotated[
    tuple[Annotated[str, Field(min_length=1, max_length=64)], ...],
    Field(strict=False),  # TOML arrays arrive as lists; they are kept as tuples (frozen)
    _Allowed("a list of schema names (strings of 1..64 characters)"),
]


class _Section(BaseModel):
    # strict: "8" is not 8 and true is not 1 -- a config file that needs coercion has a mistake in it.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _rule(line: str) -> PydanticCustomError:
    """A problem involving more than one key; the line names them itself."""
    return PydanticCustomError("lagd_rule", line)


# -- the schema -----------------------------------------------------------------------


class ReplicaSettings(_Section):
    host: Annotated[str, AfterValidator(_host), _Allowed("a host name or IP address")]
    port: Annotated[int, Field(ge=1, le=65535)]
    socket: _Path
    user: Annotated[str, Field(min_length=1, max_length=80)]
    password_file: _Path
    password_credential: Annotated[
        str, AfterValidator(_credential_name), _Allowed('a systemd credential name, or "" (not set)')
    ]
    password_env: Annotated[
        str, AfterValidator(_env_name), _Allowed('an environment variable name, or "" (not set)')
    ]
    channel: Annotated[str, Field(max_length=64)]
    connect_timeout: Annotated[float, Field(gt=0, le=300), _SECONDS]
    relay_log_index: _Path
    flavor: Literal["auto", "mysql", "mariadb"]

    def password(self, environ: Mapping[str, str] | None = None) -> str:
        """Read the password now, from the first configured source; never cached here."""
        return config_credentials.resolve_password(
            credential=self.password_credential,
            file=self.password_file,
            env_var=self.password_env,
            environ=os.environ if environ is None else environ,
        )

    def check_password(self, environ: Mapping[str, str] | None = None) -> None:
        """Raise :class:`CredentialError` if :meth:`password` would (credentials: in the service only)."""
        config_credentials.check_password_source(
            credential=self.password_credential,
            file=self.password_file,
            env_var=self.password_env,
            environ=os.environ if environ is None else environ,
        )

    def password_source(self) -> str:
        return config_credentials.password_source(
            credential=self.password_credential, file=self.password_file, env_var=self.password_env
        )


class LagSettings(_Section):
    poll_interval: Annotated[float, Field(ge=0.1, le=60), _SECONDS]
    heartbeat_table: Annotated[
        str, AfterValidator(_schema_table), _Allowed('"schema.table" of a pt-heartbeat table, or "" (off)')
    ]
    heartbeat_server_id: Annotated[int, Field(ge=0, le=2**32 - 1)]
    stale_after: Annotated[float, Field(gt=0, le=3600), _SECONDS]

    @_model_validator(mode="after")
    def _stale_after_a_poll(self) -> Self:
        if self.stale_after <= self.poll_interval:
            raise _rule(
                f"lag.stale_after ({self.stale_after}) must be longer than lag.poll_interval "
                f"({self.poll_interval}): the heartbeat is read once per poll, so it would always look stale"
            )
        return self

    @property
    def heartbeat(self) -> tuple[str, str] | None:
        """(schema, table) of the heartbeat table, None when off."""
        if not self.heartbeat_table:
            return None
        schema, _, table = self.heartbeat_table.partition(".")
        return schema, table


class PrefetchSettings(_Section):
    enabled: bool
    connections: Annotated[int, Field(ge=1, le=64)]
    max_keys_per_probe: Annotated[int, Field(ge=1, le=1000)]
    statement_timeout_ms: Annotated[int, Field(ge=10, le=60000)]
    min_lead_transactions: Annotated[int, Field(ge=0, le=100_000)]
    max_lead_transactions: Annotated[int, Field(ge=1, le=100_000)]
    max_lead_bytes: Annotated[int, BeforeValidator(_SizeCheck(_MiB, 16 * _GiB))]
    max_lead_seconds: Annotated[float, Field(gt=0, le=3600), _SECONDS]
    buffer_pool_share: Annotated[float, Field(ge=0, le=0.9)]
    adaptive: bool
    evaluate_window_seconds: Annotated[float, Field(ge=1, le=3600), _SECONDS]
    schemas: _Schemas
    exclude_schemas: _Schemas

    @_model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.min_lead_transactions > self.max_lead_transactions:
            raise _rule(
                f"prefetch.min_lead_transactions ({self.min_lead_transactions}) is greater than "
                f"prefetch.max_lead_transactions ({self.max_lead_transactions}); lower the first or "
                "raise the second"
            )
        both = [s for s in self.schemas if s in self.exclude_schemas]
        if both:
            raise _rule(
                f"prefetch.schemas and prefetch.exclude_schemas both name {', '.join(both)}; "
                "remove it from one of them"
            )
        return self


class AdvisorSettings(_Section):
    enabled: bool
    lag_budget_seconds: Annotated[float, Field(gt=0, le=86400), _SECONDS]
    big_transaction_bytes: Annotated[int, BeforeValidator(_SizeCheck(_KiB, 64 * _GiB))]
    big_transaction_rows: Annotated[int, Field(ge=1, le=10**9)]
    headroom: Annotated[float, Field(gt=0, le=1)]


class HttpSettings(_Section):
    listen: Annotated[
        str, AfterValidator(_listen), _Allowed('host:port, like "127.0.0.1:9904" or "[::1]:9904"')
    ]
    enabled: bool

    @property
    def host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return parse_listen(self.listen)[1]

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"


class LogSettings(_Section):
    level: Literal["debug", "info", "warning", "error"]
    format: Literal["text", "json"]


class StatusSettings(_Section):
    warn_lag_seconds: Annotated[float, Field(gt=0, le=86400 * 7), _SECONDS]
    crit_lag_seconds: Annotated[float, Field(gt=0, le=86400 * 7), _SECONDS]
    daemon_url: Annotated[
        str, AfterValidator(_url), _Allowed('an http:// or https:// URL, or "" (derived from http.listen)')
    ]

    @_model_validator(mode="after")
    def _warn_before_crit(self) -> Self:
        if self.warn_lag_seconds >= self.crit_lag_seconds:
            raise _rule(
                f"status.warn_lag_seconds ({self.warn_lag_seconds}) must be below "
                f"status.crit_lag_seconds ({self.crit_lag_seconds})"
            )
        return self


class Settings(_Section):
    """The whole configuration, frozen; build it with :func:`load_settings`."""

    replica: ReplicaSettings
    lag: LagSettings
    prefetch: PrefetchSettings
    advisor: AdvisorSettings
    http: HttpSettings
    log: LogSettings
    status: StatusSettings

    def status_url(self) -> str:
        """Where lagctl finds the daemon: status.daemon_url, else http.listen."""
        if self.status.daemon_url:
            return self.status.daemon_url.rstrip("/")
        # A wildcard listener is reachable on loopback; connecting to 0.0.0.0 is not portable.
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.http.host, self.http.host)  # noqa: S104
        return f"http://{f'[{host}]' if ':' in host else host}:{self.http.port}"

    def notes(self) -> tuple[str, ...]:
        """Things worth a warning that are not errors."""
        out = []
        if self.http.enabled and not self.http.loopback:
            out.append(
                f"http.listen {self.http.listen} is not a loopback address: /metrics and /status "
                "are reachable from the network; firewall the port or listen on 127.0.0.1"
            )
        r = self.replica
        if r.password_credential and r.password_file:
            out.append("replica.password_file is ignored: replica.password_credential is set and comes first")
        if r.socket and r.host not in {"127.0.0.1", "localhost", "::1"}:
            out.append(f"replica.host {r.host} is ignored: replica.socket is set and comes first")
        return tuple(out)

    def public_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready data for /status and logs, with nothing secret in it."""
        d = self.model_dump(mode="json")
        d["replica"]["password_source"] = self.replica.password_source()
        url = urlsplit(self.status.daemon_url)
        if url.password is not None or url.username is not None:
            netloc = "<redacted>@" + url.netloc.rpartition("@")[2]
            d["status"]["daemon_url"] = urlunsplit(url._replace(netloc=netloc))
        return d


# -- what a reload (SIGHUP) does with each setting -------------------------------------


class Reload(enum.StrEnum):
    """How a changed setting takes effect on reload, from cheapest to dearest."""

    IN_PLACE = "applied in place"
    RELAY = "restarts the relay-log reader and prefetch"
    HTTP = "restarts the HTTP server"
    ALL = "restarts every subsystem (new connections to the replica)"


# Every key, once. tests/unit/test_reload.py checks that none is missing and
# that each IN_PLACE key really changes the running daemon.
RELOAD: Final[Mapping[str, Reload]] = {
    **{f"replica.{k}": Reload.ALL for k in (
        "host", "port", "socket", "user", "password_file", "password_credential", "password_env",
        "channel", "connect_timeout", "flavor")},
    "replica.relay_log_index": Reload.RELAY,
    # Read at every poll.
    **{f"lag.{k}": Reload.IN_PLACE for k in (
        "poll_interval", "heartbeat_table", "heartbeat_server_id", "stale_after")},
    # The probe sessions and the rewriter are made with these: a new engine.
    **{f"prefetch.{k}": Reload.RELAY for k in (
        "enabled", "connections", "max_keys_per_probe", "statement_timeout_ms", "schemas",
        "exclude_schemas")},
    # The running engine takes these (limits, tuning, window).
    **{f"prefetch.{k}": Reload.IN_PLACE for k in (
        "min_lead_transactions", "max_lead_transactions", "max_lead_bytes", "max_lead_seconds",
        "buffer_pool_share", "adaptive", "evaluate_window_seconds")},
    **{f"advisor.{k}": Reload.IN_PLACE for k in (
        "enabled", "lag_budget_seconds", "big_transaction_bytes", "big_transaction_rows", "headroom")},
    "http.listen": Reload.HTTP,
    "http.enabled": Reload.HTTP,
    "log.level": Reload.IN_PLACE,
    "log.format": Reload.IN_PLACE,
    # lagctl reads these; the daemon only shows them.
    **{f"status.{k}": Reload.IN_PLACE for k in ("warn_lag_seconds", "crit_lag_seconds", "daemon_url")},
}


def reload_actions(changed: Iterable[str]) -> frozenset[Reload]:
    """What a reload that changes the dotted keys ``changed`` must do (ALL includes RELAY
    and IN_PLACE, not HTTP); a key missing from the table gets the safe choice, ALL."""
    return frozenset(RELOAD.get(k, Reload.ALL) for k in changed)


# -- loading ----------------------------------------------------------------------------


@functools.cache
def _defaults() -> dict[str, Any]:
    text = resources.files("lagd").joinpath("defaults.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def packaged_defaults() -> dict[str, Any]:
    """The packaged defaults as TOML data (a copy: sizes still as strings like "64MiB")."""
    return copy.deepcopy(_defaults())


def load_settings(path: Path | None) -> Settings:
    """The settings of the file at ``path`` over the packaged defaults (None: defaults only)."""
    if path is None:
        return _validate(_defaults(), "(packaged defaults)")
    return _validate(_merge(_defaults(), _read_toml(path)), str(path))


def settings_from_dict(data: Mapping[str, Any], source: str = "(dict)") -> Settings:
    """Like :func:`load_settings` for data already parsed (tests, tools)."""
    return _validate(_merge(_defaults(), data), source)


def changed_keys(old: Settings, new: Settings) -> tuple[str, ...]:
    """Dotted keys whose value differs, e.g. for the reload log line."""
    a, b = old.model_dump(), new.model_dump()
    return tuple(f"{s}.{k}" for s in a for k in a[s] if a[s][k] != b[s][k])


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    # Tables merge key by key; anything else (arrays too) replaces the default whole.
    out = dict(base)
    for key, value in over.items():
        old = base.get(key)
        both_tables = isinstance(value, Mapping) and isinstance(old, Mapping)
        out[key] = _merge(old, value) if both_tables else value  # type: ignore[arg-type]
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    def fail(problem: str, fix: str) -> ConfigError:
        # One self-contained line: it is all `lagctl config validate` prints.
        return ConfigError(str(path), [f"{problem}; {fix}"])

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail(
            "the file does not exist",
            "create it (`lagctl config example > FILE` writes a commented example) or pass its path",
        ) from None
    except IsADirectoryError:
        raise fail("is a directory, not a file", "pass the path of the TOML file") from None
    except PermissionError:
        raise fail(
            "cannot read the file: permission denied",
            "run as root or as the user lagd runs as, or make the file readable by that user",
        ) from None
    except OSError as e:
        raise fail(f"cannot read the file: {e.strerror}", "check the path and the disk") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise fail(f"is not UTF-8 text (byte {e.start})", "save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        m = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", str(e))
        where, what = (f" at {m[2]}", m[1]) if m else ("", str(e))
        raise fail(
            f"TOML syntax error{where}: {what}",
            'correct the syntax: strings need double quotes, tables look like [prefetch], keys "key = value"',
        ) from None


def _validate(data: Mapping[str, Any], source: str) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(
            source,
            [_problem(err) for err in e.errors()],
            "correct the keys named; docs/configuration.md lists every key and its allowed values",
        ) from None


# -- turning pydantic's errors into one line each ----------------------------------------

_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _problem(err: ErrorDetails) -> str:
    loc, kind, value = err["loc"], err["type"], err.get("input")
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    if kind == "extra_forbidden":
        return _unknown_key([str(p) for p in loc], value)
    if kind == "lagd_rule":
        return err["msg"]
    field = _field_at(loc)
    allowed = _allowed(field, path) if field else "see docs/configuration.md"
    if kind == "value_error":
        reason = str(err.get("ctx", {}).get("error", err["msg"]))
    elif kind in _RANGE_ERRORS:
        reason = "is out of range"
    elif kind == "literal_error":
        reason = "is not a valid choice"
    elif kind == "string_too_short":
        reason = "is empty" if value == "" else "is too short"
    elif kind == "string_too_long":
        reason = "is too long"
    elif kind == "missing":
        return f"{path} is missing; allowed: {allowed}"
    elif isinstance(value, Mapping):
        return f"{path} is a table; allowed: {allowed}"
    else:
        reason = f"is {_toml_kind(value)}"
    return f"{path}: {_show(value)} {reason}; allowed: {allowed}"


def _field_at(loc: tuple[int | str, ...]) -> FieldInfo | None:
    model: type[BaseModel] | None = Settings
    field = None
    for part in loc:
        if isinstance(part, int):
            continue  # an element of a list: described by the list's key
        if model is None or part not in model.model_fields:
            return None
        field = model.model_fields[part]
        model = _section_model(field)
    return field


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    ann = field.annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _allowed(field: FieldInfo, path: str) -> str:
    for m in field.metadata:
        if isinstance(m, _Allowed):
            return m.text
        if isinstance(m, BeforeValidator) and isinstance(m.func, _SizeCheck):
            return m.func.allowed
    ann = field.annotation
    if _section_model(field):
        return f"a table [{path}]"
    if get_origin(ann) is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(ann))
    kind = _KIND_WORDS.get(ann, "a value")
    unit = next((f" of {m.name}" for m in field.metadata if isinstance(m, _Unit)), "")
    limits = {
        k: getattr(m, k)
        for m in field.metadata
        for k in ("ge", "gt", "le", "lt", "min_length", "max_length")
        if getattr(m, k, None) is not None
    }
    if "min_length" in limits or "max_length" in limits:
        return f"{kind} of {limits.get('min_length', 0)}..{limits['max_length']} characters"
    if "ge" in limits and "le" in limits:
        return f"{kind}{unit} {limits['ge']}..{limits['le']}"
    ops = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
    bounds = " and ".join(f"{sym} {limits[k]}" for k, sym in ops if k in limits)
    return f"{kind}{unit} {bounds}".rstrip()


_KIND_WORDS: dict[object, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
}


def _unknown_key(loc: list[str], value: object) -> str:
    path, name, parent = ".".join(loc), loc[-1], loc[:-1]
    sections = {s: _section_model(f) for s, f in Settings.model_fields.items()}
    if parent == ["replica"] and "pass" in name.lower():
        return (
            f"unknown key {path}: lagd does not read a password from its configuration file; "
            "set replica.password_credential (systemd), replica.password_file or replica.password_env"
        )
    if parent:
        model = sections.get(parent[0])
        siblings = list(model.model_fields) if model else []
        match = difflib.get_close_matches(name, siblings, n=1)
        if match:
            return f"unknown key {path}; did you mean {parent[0]}.{match[0]}?"
    elif isinstance(value, Mapping):
        match = difflib.get_close_matches(name, list(sections), n=1)
        if match:
            return f"unknown section [{name}]; did you mean [{match[0]}]?"
        return f"unknown section [{name}]; allowed sections: {', '.join(sections)}"
    # A key in the wrong table, or above every table header.
    elsewhere = [
        f"{s}.{k}"
        for s, model in sections.items()
        if model and s not in parent
        for k in model.model_fields
        if difflib.get_close_matches(name, [k], cutoff=0.8)
    ]
    if elsewhere:
        return f"unknown key {path}; did you mean {' or '.join(elsewhere)}?"
    if parent:
        model = sections.get(parent[0])
        keys = ", ".join(model.model_fields) if model else ""
        return f"unknown key {path}; allowed keys in [{parent[0]}]: {keys}"
    return f"unknown key {path}; keys belong in a section: {', '.join(f'[{s}]' for s in sections)}"


def _toml_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in ((int, "an integer"), (float, "a float"), (str, "a string"), (list, "an array")):
        if isinstance(value, kind):
            return name
    return "a date/time"


def _show(value: object) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
