"""lagd.config: one line per problem, defaults under the file, the password's
sources and privacy, `lagctl config validate`, and docs that match the code."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lagd.cli.config import config
from lagd.config import (
    ConfigError,
    CredentialError,
    Settings,
    changed_keys,
    load_settings,
    packaged_defaults,
    parse_listen,
    parse_size,
    settings_from_dict,
)

ROOT = Path(__file__).resolve().parents[2]
LEAD_BYTES = (
    "a size from 1MiB to 16GiB: bytes as an integer, "
    'or a string like "64MiB" (KiB, MiB, GiB; KB, MB, GB are powers of 1000)'
)
LISTEN = 'host:port, like "127.0.0.1:9904" or "[::1]:9904"'


def problems_of(data: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as e:
        settings_from_dict(data)
    return e.value.problems


# -- every kind of mistake is one line naming key, value and what is allowed ----

BAD = [
    pytest.param(
        {"prefetch": {"conections": 8}},
        "unknown key prefetch.conections; did you mean prefetch.connections?",
        id="typo-key",
    ),
    pytest.param(
        {"prefech": {"connections": 8}},
        "unknown section [prefech]; did you mean [prefetch]?",
        id="typo-section",
    ),
    pytest.param(
        {"lag": {"connections": 8}},
        "unknown key lag.connections; did you mean prefetch.connections?",
        id="key-in-wrong-section",
    ),
    pytest.param(
        {"connections": 8},
        "unknown key connections; did you mean prefetch.connections?",
        id="key-above-every-section",
    ),
    pytest.param(
        {"log": {"colour": True}},
        "unknown key log.colour; allowed keys in [log]: level, format",
        id="unknown-key-no-suggestion",
    ),
    pytest.param(
        {"replica": {"password": "hunter2"}},
        "unknown key replica.password: lagd does not read a password from its configuration file; "
        "set replica.password_credential (systemd), replica.password_file or replica.password_env",
        id="password-in-file",
    ),
    pytest.param(
        {"prefetch": {"connections": "8"}},
        'prefetch.connections: "8" is a string; allowed: an integer 1..64',
        id="string-for-int",
    ),
    pytest.param(
        {"prefetch": {"enabled": 1}},
        "prefetch.enabled: 1 is an integer; allowed: true or false",
        id="int-for-bool",
    ),
    pytest.param(
        {"replica": {"port": 3306.0}},
        "replica.port: 3306.0 is a float; allowed: an integer 1..65535",
        id="float-for-int",
    ),
    pytest.param(
        {"prefetch": 5}, "prefetch: 5 is an integer; allowed: a table [prefetch]", id="scalar-for-section"
    ),
    pytest.param(
        {"prefetch": {"connections": 0}},
        "prefetch.connections: 0 is out of range; allowed: an integer 1..64",
        id="connections-below",
    ),
    pytest.param(
        {"prefetch": {"connections": 65}},
        "prefetch.connections: 65 is out of range; allowed: an integer 1..64",
        id="connections-above",
    ),
    pytest.param(
        {"prefetch": {"statement_timeout_ms": 5}},
        "prefetch.statement_timeout_ms: 5 is out of range; allowed: an integer 10..60000",
        id="timeout-below",
    ),
    pytest.param(
        {"prefetch": {"buffer_pool_share": 0.95}},
        "prefetch.buffer_pool_share: 0.95 is out of range; allowed: a number 0..0.9",
        id="share-above",
    ),
    pytest.param(
        {"advisor": {"headroom": 0}},
        "advisor.headroom: 0 is out of range; allowed: a number > 0 and <= 1",
        id="headroom-zero",
    ),
    pytest.param(
        {"replica": {"connect_timeout": -1}},
        "replica.connect_timeout: -1 is out of range; allowed: a number of seconds > 0 and <= 300",
        id="negative-duration",
    ),
    pytest.param(
        {"prefetch": {"min_lead_transactions": 6000}},
        "prefetch.min_lead_transactions (6000) is greater than prefetch.max_lead_transactions (5000); "
        "lower the first or raise the second",
        id="min-above-max-lead",
    ),
    pytest.param(
        {"status": {"warn_lag_seconds": 300}},
        "status.warn_lag_seconds (300.0) must be below status.crit_lag_seconds (300.0)",
        id="warn-not-below-crit",
    ),
    pytest.param(
        {"lag": {"stale_after": 0.5}},
        "lag.stale_after (0.5) must be longer than lag.poll_interval (1.0): "
        "the heartbeat is read once per poll, so it would always look stale",
        id="stale-before-poll",
    ),
    pytest.param(
        {"prefetch": {"schemas": ["app", "mysql"]}},
        "prefetch.schemas and prefetch.exclude_schemas both name mysql; remove it from one of them",
        id="schema-included-and-excluded",
    ),
    pytest.param(
        {"prefetch": {"schemas": "app"}},
        'prefetch.schemas: "app" is a string; allowed: a list of schema names (strings of 1..64 characters)',
        id="string-for-list",
    ),
    pytest.param(
        {"prefetch": {"schemas": ["app", ""]}},
        'prefetch.schemas[1]: "" is empty; allowed: a list of schema names (strings of 1..64 characters)',
        id="empty-schema-name",
    ),
    pytest.param(
        {"prefetch": {"max_lead_bytes": "64 MegaBytes"}},
        f'prefetch.max_lead_bytes: "64 MegaBytes" is not a size; allowed: {LEAD_BYTES}',
        id="size-bad-unit",
    ),
    pytest.param(
        {"prefetch": {"max_lead_bytes": "1.5GiB"}},
        f'prefetch.max_lead_bytes: "1.5GiB" is not a size; allowed: {LEAD_BYTES}',
        id="size-fraction",
    ),
    pytest.param(
        {"prefetch": {"max_lead_bytes": "100GiB"}},
        f'prefetch.max_lead_bytes: "100GiB" is out of range; allowed: {LEAD_BYTES}',
        id="size-too-big",
    ),
    pytest.param(
        {"prefetch": {"max_lead_bytes": 4096}},
        f"prefetch.max_lead_bytes: 4096 is out of range; allowed: {LEAD_BYTES}",
        id="size-int-too-small",
    ),
    pytest.param(
        {"prefetch": {"max_lead_bytes": True}},
        f"prefetch.max_lead_bytes: true is a boolean; allowed: {LEAD_BYTES}",
        id="size-boolean",
    ),
    pytest.param(
        {"http": {"listen": "9904"}},
        f'http.listen: "9904" is not host:port; allowed: {LISTEN}',
        id="listen-port-only",
    ),
    pytest.param(
        {"http": {"listen": "::1:9904"}},
        f'http.listen: "::1:9904" needs brackets around an IPv6 address, like [::1]:9904; allowed: {LISTEN}',
        id="listen-ipv6-without-brackets",
    ),
    pytest.param(
        {"http": {"listen": "[::g]:9904"}},
        f'http.listen: "[::g]:9904" is not [IPv6 address]:port; allowed: {LISTEN}',
        id="listen-bad-ipv6",
    ),
    pytest.param(
        {"http": {"listen": "127.0.0.1:99040"}},
        f'http.listen: "127.0.0.1:99040" has port 99040, outside 1..65535; allowed: {LISTEN}',
        id="listen-port-range",
    ),
    pytest.param(
        {"http": {"listen": ":9904"}},
        f'http.listen: ":9904" does not start with a host name or IP address; allowed: {LISTEN}',
        id="listen-no-host",
    ),
    pytest.param(
        {"log": {"level": "verbose"}},
        'log.level: "verbose" is not a valid choice; allowed: one of debug, info, warning, error',
        id="level-choice",
    ),
    pytest.param(
        {"replica": {"flavor": "percona"}},
        'replica.flavor: "percona" is not a valid choice; allowed: one of auto, mysql, mariadb',
        id="flavor-choice",
    ),
    pytest.param(
        {"replica": {"host": "/run/mysqld/mysqld.sock"}},
        'replica.host: "/run/mysqld/mysqld.sock" is a path; a unix socket goes in replica.socket; '
        "allowed: a host name or IP address",
        id="socket-in-host",
    ),
    pytest.param(
        {"replica": {"socket": "mysqld.sock"}},
        'replica.socket: "mysqld.sock" is not an absolute path; allowed: an absolute path, or "" (not set)',
        id="relative-path",
    ),
    pytest.param(
        {"replica": {"user": ""}},
        'replica.user: "" is empty; allowed: a string of 1..80 characters',
        id="empty-user",
    ),
    pytest.param(
        {"replica": {"password_credential": "../password"}},
        'replica.password_credential: "../password" is not a credential name; '
        'allowed: a systemd credential name, or "" (not set)',
        id="credential-with-slash",
    ),
    pytest.param(
        {"replica": {"password_env": "LAGD-PASSWORD"}},
        'replica.password_env: "LAGD-PASSWORD" is not an environment variable name; '
        'allowed: an environment variable name, or "" (not set)',
        id="env-name",
    ),
    pytest.param(
        {"lag": {"heartbeat_table": "heartbeat"}},
        'lag.heartbeat_table: "heartbeat" is not "schema.table"; '
        'allowed: "schema.table" of a pt-heartbeat table, or "" (off)',
        id="heartbeat-without-schema",
    ),
    pytest.param(
        {"status": {"daemon_url": "localhost:9904"}},
        'status.daemon_url: "localhost:9904" is not an http:// or https:// URL; '
        'allowed: an http:// or https:// URL, or "" (derived from http.listen)',
        id="url-without-scheme",
    ),
]


@pytest.mark.parametrize(("data", "line"), BAD)
def test_each_mistake_is_one_line(data: dict[str, Any], line: str) -> None:
    assert problems_of(data) == (line,)


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    found = problems_of(
        {"prefetch": {"connections": 0, "conections": 8}, "log": {"level": "loud"}, "http": {"listen": "x"}}
    )
    assert [p.split(";")[0] for p in found] == [
        "prefetch.connections: 0 is out of range",
        "unknown key prefetch.conections",
        'http.listen: "x" is not host:port',
        'log.level: "loud" is not a valid choice',
    ]


# -- the file itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(None, "the file does not exist; create it", id="missing"),
        pytest.param("dir", "is a directory, not a file", id="directory"),
        pytest.param(
            b"[prefetch]\nconnections = \n",
            "TOML syntax error at line 2, column 15: Invalid value; correct the syntax",
            id="toml-syntax",
        ),
        pytest.param(
            b'[log]\nlevel = "info"\n[log]\n',
            "TOML syntax error at line 3, column 5: Cannot declare ('log',) twice",
            id="toml-table-twice",
        ),
        pytest.param(
            b'[log]\nlevel = "\xff"\n', "is not UTF-8 text (byte 15); save the file as UTF-8", id="latin1"
        ),
    ],
)
def test_file_problems_are_one_line(tmp_path: Path, content: bytes | str | None, problem: str) -> None:
    path = tmp_path / "lagd.toml"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert len(e.value.problems) == 1
    assert problem in e.value.problems[0]
    assert str(path) in str(e.value)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests may run as root, who reads any file: the denial is simulated.
    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ConfigError) as e:
        load_settings(tmp_path / "lagd.toml")
    assert e.value.problems[0].startswith("cannot read the file: permission denied; run as root")


# -- defaults under the file -------------------------------------------------------------

SPEC_DEFAULTS = {
    "replica.host": "127.0.0.1", "replica.port": 3306, "replica.socket": "", "replica.user": "lagd",
    "replica.password_file": "", "replica.password_credential": "", "replica.password_env": "LAGD_PASSWORD",
    "replica.channel": "", "replica.connect_timeout": 5.0, "replica.relay_log_index": "",
    "replica.flavor": "auto",
    "lag.poll_interval": 1.0, "lag.heartbeat_table": "", "lag.heartbeat_server_id": 0,
    "lag.stale_after": 10.0,
    "prefetch.enabled": True, "prefetch.connections": 32, "prefetch.max_keys_per_probe": 16,
    "prefetch.statement_timeout_ms": 500, "prefetch.min_lead_transactions": 100,
    "prefetch.max_lead_transactions": 5000, "prefetch.max_lead_bytes": 64 << 20,
    "prefetch.max_lead_seconds": 30.0, "prefetch.buffer_pool_share": 0.08, "prefetch.adaptive": True,
    "prefetch.evaluate_window_seconds": 10.0, "prefetch.schemas": (),
    "prefetch.exclude_schemas": ("mysql", "sys", "performance_schema", "information_schema"),
    "advisor.enabled": True, "advisor.lag_budget_seconds": 60.0, "advisor.big_transaction_bytes": 16 << 20,
    "advisor.big_transaction_rows": 50000, "advisor.headroom": 0.5,
    "http.listen": "127.0.0.1:9904", "http.enabled": True,
    "log.level": "info", "log.format": "text",
    "status.warn_lag_seconds": 60.0, "status.crit_lag_seconds": 300.0, "status.daemon_url": "",
}  # fmt: skip


def value_at(settings: Settings, dotted: str) -> Any:
    section, key = dotted.split(".")
    return getattr(getattr(settings, section), key)


def test_packaged_defaults_are_the_documented_ones() -> None:
    defaults = load_settings(None)
    assert {k: value_at(defaults, k) for k in SPEC_DEFAULTS} == SPEC_DEFAULTS
    keys = {f"{s}.{k}" for s, model in Settings.model_fields.items() for k in model.annotation.model_fields}  # type: ignore[union-attr]
    assert keys == set(SPEC_DEFAULTS)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param({}, {}, id="empty-file-is-all-defaults"),
        pytest.param(
            {"prefetch": {"connections": 4}},
            {"prefetch.connections": 4},
            id="one-key-keeps-its-siblings",
        ),
        pytest.param(
            {"prefetch": {"exclude_schemas": ["mysql"]}},
            {"prefetch.exclude_schemas": ("mysql",)},
            id="array-replaces-default",
        ),
        pytest.param(
            {"replica": {"socket": "/run/mysqld/mysqld.sock"}, "log": {"format": "json"}},
            {"replica.socket": "/run/mysqld/mysqld.sock", "log.format": "json"},
            id="two-sections",
        ),
        pytest.param(
            {"advisor": {"big_transaction_bytes": "1GB", "lag_budget_seconds": 30}},
            {"advisor.big_transaction_bytes": 10**9, "advisor.lag_budget_seconds": 30.0},
            id="size-and-integer-seconds",
        ),
    ],
)
def test_file_merges_over_defaults(tmp_path: Path, data: dict[str, Any], expected: dict[str, Any]) -> None:
    path = tmp_path / "lagd.toml"
    path.write_text(
        "".join(
            f"[{s}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in t.items()) for s, t in data.items()
        )
    )
    settings = load_settings(path)
    assert {k: value_at(settings, k) for k in SPEC_DEFAULTS} == SPEC_DEFAULTS | expected


@pytest.mark.parametrize(
    ("text", "size"),
    [
        pytest.param(1234, 1234, id="int"),
        pytest.param("1234", 1234, id="digits"),
        pytest.param("64MiB", 64 << 20, id="MiB"),
        pytest.param("64 mib", 64 << 20, id="lowercase-with-space"),
        pytest.param("64M", 64 << 20, id="mycnf-M"),
        pytest.param("2GiB", 2 << 30, id="GiB"),
        pytest.param("16KiB", 16 << 10, id="KiB"),
        pytest.param("16KB", 16000, id="KB-decimal"),
        pytest.param("5MB", 5_000_000, id="MB-decimal"),
        pytest.param("1GB", 10**9, id="GB-decimal"),
    ],
)
def test_sizes(text: int | str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("listen", "host", "port", "loopback", "url"),
    [
        pytest.param("127.0.0.1:9904", "127.0.0.1", 9904, True, "http://127.0.0.1:9904", id="v4-loopback"),
        pytest.param("[::1]:9904", "::1", 9904, True, "http://[::1]:9904", id="v6-loopback"),
        pytest.param("localhost:80", "localhost", 80, True, "http://localhost:80", id="localhost"),
        pytest.param("0.0.0.0:9904", "0.0.0.0", 9904, False, "http://127.0.0.1:9904", id="v4-wildcard"),
        pytest.param("[::]:9904", "::", 9904, False, "http://[::1]:9904", id="v6-wildcard"),
        pytest.param("10.1.2.3:9904", "10.1.2.3", 9904, False, "http://10.1.2.3:9904", id="v4-private"),
        pytest.param(
            "db1.example.com:9904", "db1.example.com", 9904, False, "http://db1.example.com:9904", id="name"
        ),
    ],
)
def test_listen_addresses(listen: str, host: str, port: int, loopback: bool, url: str) -> None:
    assert parse_listen(listen) == (host, port)
    settings = settings_from_dict({"http": {"listen": listen}})
    assert (settings.http.host, settings.http.port, settings.http.loopback) == (host, port, loopback)
    assert settings.status_url() == url
    assert any("not a loopback address" in n for n in settings.notes()) is not loopback


@pytest.mark.parametrize(
    ("data", "note"),
    [
        pytest.param({}, None, id="defaults-have-no-notes"),
        pytest.param({"http": {"listen": "0.0.0.0:9904", "enabled": False}}, None, id="http-off"),
        pytest.param(
            {"replica": {"password_credential": "c", "password_file": "/etc/lagd/password"}},
            "replica.password_file is ignored: replica.password_credential is set and comes first",
            id="file-shadowed-by-credential",
        ),
        pytest.param(
            {"replica": {"socket": "/run/mysqld/mysqld.sock", "host": "db1"}},
            "replica.host db1 is ignored: replica.socket is set and comes first",
            id="host-shadowed-by-socket",
        ),
    ],
)
def test_notes(data: dict[str, Any], note: str | None) -> None:
    assert settings_from_dict(data).notes() == ((note,) if note else ())


def test_status_url_from_config_wins() -> None:
    s = settings_from_dict({"status": {"daemon_url": "https://db1:9904/"}})
    assert s.status_url() == "https://db1:9904"


def test_heartbeat_table_split() -> None:
    assert settings_from_dict({}).lag.heartbeat is None
    assert settings_from_dict({"lag": {"heartbeat_table": "percona.heartbeat"}}).lag.heartbeat == (
        "percona",
        "heartbeat",
    )


def test_changed_keys() -> None:
    old = settings_from_dict({})
    new = settings_from_dict({"prefetch": {"connections": 4}, "log": {"level": "debug"}})
    assert changed_keys(old, new) == ("prefetch.connections", "log.level")
    assert changed_keys(old, old) == ()


def test_settings_are_frozen() -> None:
    s = settings_from_dict({})
    with pytest.raises(ValueError, match="frozen"):
        s.prefetch.connections = 1  # type: ignore[misc]


# -- the password: order of sources, file permissions, never shown -------------------------


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Any]:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "lagd-password").write_text("from-credential")
    pw = tmp_path / "password"
    pw.write_text("from-file\n")
    pw.chmod(0o600)
    return {"creds": str(creds), "file": str(pw)}


@pytest.mark.parametrize(
    ("replica", "environ", "password"),
    [
        pytest.param(
            {"password_credential": "lagd-password", "password_file": "FILE"},
            {"CREDENTIALS_DIRECTORY": "CREDS", "LAGD_PASSWORD": "from-env"},
            "from-credential",
            id="credential-first",
        ),
        pytest.param(
            {"password_file": "FILE"}, {"LAGD_PASSWORD": "from-env"}, "from-file", id="file-before-env"
        ),
        pytest.param({}, {"LAGD_PASSWORD": "from-env"}, "from-env", id="env-default-name"),
        pytest.param({"password_env": "DB_PW"}, {"DB_PW": "from-env"}, "from-env", id="env-own-name"),
        pytest.param({}, {}, "", id="env-unset-is-empty"),
        pytest.param({"password_env": ""}, {"LAGD_PASSWORD": "x"}, "", id="no-source-is-empty"),
    ],
)
def test_password_source_order(
    sources: dict[str, Any], replica: dict[str, str], environ: dict[str, str], password: str
) -> None:
    fill = {"FILE": sources["file"], "CREDS": sources["creds"]}
    settings = settings_from_dict({"replica": {k: fill.get(v, v) for k, v in replica.items()}})
    env = {k: fill.get(v, v) for k, v in environ.items()}
    assert settings.replica.password(env) == password


def test_password_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGD_PASSWORD", "s3cret")
    assert settings_from_dict({}).replica.password() == "s3cret"


@pytest.mark.parametrize(
    ("replica", "environ", "mode", "message"),
    [
        pytest.param(
            {"password_credential": "lagd-password"}, {}, 0o600,
            '"lagd-password" but $CREDENTIALS_DIRECTORY is not set', id="credential-outside-systemd",
        ),
        pytest.param(
            {"password_credential": "other"}, {"CREDENTIALS_DIRECTORY": "CREDS"}, 0o600,
            'systemd passed no credential named "other" (fix: add LoadCredential=other:',
            id="credential-not-loaded",
        ),
        pytest.param(
            {"password_file": "MISSING"}, {}, 0o600, "does not exist", id="file-missing"),
        pytest.param(
            {"password_file": "CREDS"}, {}, 0o600, "is not a regular file", id="file-is-directory"),
        pytest.param(
            {"password_file": "FILE"}, {}, 0o644, "(mode 0644) (fix: run `chmod 600 ", id="world-readable"),
        pytest.param(
            {"password_file": "FILE"}, {}, 0o640, "(mode 0640) (fix: run `chmod 600 ", id="group-readable"),
        pytest.param(
            {"password_file": "FILE"}, {}, 0o620, "(mode 0620) (fix: run `chmod 600 ", id="group-writable"),
        pytest.param(
            {"password_file": "FILE"}, {}, 0o602, "(mode 0602) (fix: run `chmod 600 ", id="world-writable"),
    ],
)  # fmt: skip
def test_password_source_problems(
    sources: dict[str, Any], replica: dict[str, str], environ: dict[str, str], mode: int, message: str
) -> None:
    Path(sources["file"]).chmod(mode)
    fill = {"FILE": sources["file"], "CREDS": sources["creds"], "MISSING": sources["file"] + ".missing"}
    settings = settings_from_dict({"replica": {k: fill.get(v, v) for k, v in replica.items()}})
    env = {k: fill.get(v, v) for k, v in environ.items()}
    with pytest.raises(CredentialError) as e:
        settings.replica.password(env)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_password_never_shows(sources: dict[str, Any]) -> None:
    secret = "from-file"
    settings = settings_from_dict({"replica": {"password_file": sources["file"]}})
    assert settings.replica.password({}) == secret
    public = settings.public_dict()
    assert public["replica"]["password_source"] == f"file {sources['file']}"
    for shown in (
        repr(settings),
        str(settings),
        repr(settings.replica),
        settings.model_dump_json(),
        json.dumps(public),
    ):
        assert secret not in shown


def test_password_key_in_file_is_not_echoed() -> None:
    (line,) = problems_of({"replica": {"password": "hunter2"}})
    assert "hunter2" not in line


def test_public_dict_redacts_url_credentials() -> None:
    s = settings_from_dict({"status": {"daemon_url": "https://ops:t0ken@db1:9904"}})
    assert s.public_dict()["status"]["daemon_url"] == "https://<redacted>@db1:9904"


# -- lagctl config validate -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "pw_mode", "code", "stdout_lines", "stderr"),
    [
        pytest.param("", None, 0, 1, [], id="empty-is-valid"),
        pytest.param(
            '[http]\nlisten = "0.0.0.0:9904"\n', None, 0, 1, ["note: http.listen 0.0.0.0:9904 is"], id="note"
        ),
        pytest.param(
            "[prefetch]\nconections = 8\nconnections = 0\n[log]\nlevel = 1\n", None, 2, 0,
            ["prefetch.connections: 0 is out of range", "unknown key prefetch.conections; did you mean",
             "log.level: 1 is not a valid choice"],
            id="three-problems",
        ),
        pytest.param(None, None, 2, 0, ["the file does not exist"], id="missing-file"),
        pytest.param("[prefetch\n", None, 2, 0, ["TOML syntax error at line 1, column 10"], id="syntax"),
        pytest.param("", 0o644, 2, 0, ["(mode 0644) (fix: run `chmod 600 "], id="world-readable-password"),
        pytest.param("", 0o600, 0, 1, [], id="private-password-file"),
    ],
)  # fmt: skip
def test_lagctl_config_validate(
    tmp_path: Path, content: str | None, pw_mode: int | None, code: int, stdout_lines: int, stderr: list[str]
) -> None:
    path = tmp_path / "lagd.toml"
    if pw_mode is not None:
        pw = tmp_path / "password"
        pw.write_text("pw\n")
        pw.chmod(pw_mode)
        content = f'[replica]\npassword_file = "{pw}"\n' + (content or "")
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(config, ["validate", str(path)], env={"LAGD_PASSWORD": None})
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert len(result.stdout.splitlines()) == stdout_lines
    if stdout_lines:
        assert result.stdout.startswith(f"{path}: valid (replica 127.0.0.1:3306 as lagd, password from ")
    err = result.stderr.splitlines()
    assert len(err) == len(stderr)
    for line, expected in zip(err, stderr, strict=True):
        assert line.startswith(f"{path}: ")
        assert expected in line


def test_validate_skips_credentials_outside_systemd(tmp_path: Path) -> None:
    path = tmp_path / "lagd.toml"
    path.write_text('[replica]\npassword_credential = "lagd-password"\n')
    result = CliRunner().invoke(config, ["validate", str(path)], env={"CREDENTIALS_DIRECTORY": None})
    assert result.exit_code == 0
    assert "password from systemd credential lagd-password" in result.stdout


# -- the example and the docs agree with the packaged defaults ----------------------------------


def test_example_config_is_valid_and_its_commented_values_are_the_defaults() -> None:
    text = (ROOT / "config" / "lagd.toml").read_text()
    load_settings(ROOT / "config" / "lagd.toml")
    uncommented = tomllib.loads(re.sub(r"(?m)^# ?([a-z_]+ = .*)$", r"\1", text))
    defaults = packaged_defaults()
    commented = {(s, k) for s, table in tomllib.loads(text).items() for k in defaults[s] if k not in table}
    assert {f"{s}.{k}" for s, k in commented} | {"replica.password_credential"} == set(SPEC_DEFAULTS)
    for s, k in commented:
        assert uncommented[s][k] == defaults[s][k], f"{s}.{k}"
    settings_from_dict(uncommented)


def test_configuration_doc_lists_every_key_with_its_default() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = dict(re.findall(r"(?m)^\| `([a-z_]+\.[a-z_]+)` \| `(.*?)` \|", doc))
    defaults = packaged_defaults()
    assert set(rows) == set(SPEC_DEFAULTS)
    for key, default in rows.items():
        section, name = key.split(".")
        assert tomllib.loads(f"v = {default}")["v"] == defaults[section][name], key
