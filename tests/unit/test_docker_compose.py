"""docker/: the compose demo's structure, checked without a Docker engine.

No Docker engine runs where lagd is tested, so nothing here starts a
container: these tests read the files. PyYAML is not a dependency, so
compose.yml and the other YAML files are written in a small subset of YAML
(block mappings and lists, "- key: value" list items, plain or quoted
scalars, comments) and read with
the tiny parser below, which refuses anything outside that subset. When PyYAML
happens to be importable, every file is also loaded with it and both readings
must agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lagd.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
YAML_FILES = ["compose.yml", "prometheus.yml", "grafana/provisioning/datasources/prometheus.yml",
              "grafana/provisioning/dashboards/lagd.yml"]


# --- a YAML subset ---------------------------------------------------------------------


class SubsetError(ValueError):
    pass


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str, where: int) -> Any:
    text = text.strip()
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'"):
            raise SubsetError(f"line {where}: unterminated quote")
        return text[1:-1].replace("''", "'")
    if text[:1] in "[{&*!|>" or text.startswith("- "):
        raise SubsetError(f"line {where}: {text!r} is outside the subset (flow, anchor, tag or block scalar)")
    if text in ("", "~", "null"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


def load_subset(text: str) -> Any:
    lines = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise SubsetError(f"line {n}: tab in indentation")
        body = _strip_comment(raw)
        if body.strip():
            lines.append((len(body) - len(body.lstrip(" ")), body.strip(), n))
    value, end = _block(lines, 0, 0)
    if end != len(lines):
        raise SubsetError(f"line {lines[end][2]}: unexpected indentation")
    return value


def _block(lines: list[tuple[int, str, int]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("-"):
            after = lines[i][1][1:]
            item = after.strip()
            if re.match(r"^[^\"'][^:]*:(\s|$)", item):
                # "- key: value": a mapping whose keys line up with this first one.
                column = indent + 1 + len(after) - len(after.lstrip())
                lines[i] = (column, item, lines[i][2])
                value, i = _block(lines, i, column)
                items.append(value)
                continue
            items.append(_scalar(item, lines[i][2]))
            i += 1
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        _, body, n = lines[i]
        m = re.match(r'^("[^"]*"|[^:"\']+):(?:\s+(.*))?$', body)
        if m is None:
            raise SubsetError(f"line {n}: {body!r} is not 'key: value'")
        key = json.loads(m[1]) if m[1].startswith('"') else m[1].strip()
        if key in mapping:
            raise SubsetError(f"line {n}: duplicate key {key!r}")
        i += 1
        if m[2] is not None:
            mapping[key] = _scalar(m[2], n)
        elif i < len(lines) and lines[i][0] > indent:
            mapping[key], i = _block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i


def load(name: str) -> Any:
    text = (DOCKER / name).read_text()
    data = load_subset(text)
    try:
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415 - optional: only to cross-check
    except ImportError:
        return data
    assert yaml.safe_load(text) == data, f"{name}: the subset parser and PyYAML disagree"
    return data


PARSER_CASES = [
    ("a: 1\nb:\n  - x\n  - 'y'\nc:\n  d: \"e # f\"  # comment\n",
     {"a": 1, "b": ["x", "y"], "c": {"d": "e # f"}}),
    ("v:\n  one:\n  two: 2\n", {"v": {"one": None, "two": 2}}),
    ("l:\n  - a: 1\n    b:\n      - x\n  - a: 2\n", {"l": [{"a": 1, "b": ["x"]}, {"a": 2}]}),
]


@pytest.mark.parametrize(("text", "value"), PARSER_CASES, ids=["nested", "empty values", "list of mappings"])
def test_subset_parser(text: str, value: Any) -> None:
    assert load_subset(text) == value


@pytest.mark.parametrize("text", ["a: [1, 2]\n", "a: &x 1\n", "a: |\n  x\n", "a: 1\n a: 2\n",
                                  "a: 1\na: 2\n"],
                         ids=["flow", "anchor", "block scalar", "bad indent", "duplicate key"])
def test_subset_parser_refuses_the_rest(text: str) -> None:
    with pytest.raises(SubsetError):
        load_subset(text)


# --- compose.yml --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = load("compose.yml")
    return data


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume entry."""
    out = []
    for entry in service.get("volumes") or ():
        parts = entry.split(":")
        assert len(parts) in (2, 3), entry
        out.append((parts[0], parts[1], parts[2] if len(parts) == 3 else "rw"))
    return out


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"source", "replica", "lagd", "heartbeat", "prometheus", "grafana",
                                        "load"}
    s = compose["services"]
    assert s["source"]["image"] == s["replica"]["image"] == "mysql:8.4"
    assert s["load"]["profiles"] == ["load"]  # optional: not started by a plain `up`


@pytest.mark.parametrize("name", ["source", "replica"])
def test_mysql_servers_use_gtid_and_full_row_metadata(compose: dict[str, Any], name: str) -> None:
    command = compose["services"][name]["command"]
    for flag in ("--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--binlog-row-metadata=FULL"):
        assert flag in command, (name, flag)
    assert len({c for c in command if c.startswith("--server-id=")}) == 1


def test_replica_is_configured_by_its_init_script(compose: dict[str, Any]) -> None:
    replica = compose["services"]["replica"]
    init = [(src, dst) for src, dst, _ in mounts(replica) if dst.startswith("/docker-entrypoint-initdb.d/")]
    assert init == [("./replica-init.sql", "/docker-entrypoint-initdb.d/10-replica.sql")]
    sql = (DOCKER / "replica-init.sql").read_text()
    for text in ("CHANGE REPLICATION SOURCE TO", "SOURCE_HOST = 'source'", "SOURCE_AUTO_POSITION = 1",
                 "START REPLICA;", "CREATE USER 'lagd'@'%'", "SET SESSION sql_log_bin = 0",
                 "GRANT SELECT, REPLICATION CLIENT ON *.* TO 'lagd'@'%'"):
        assert text in sql, text
    assert replica["depends_on"]["source"]["condition"] == "service_healthy"
    # The replication account the replica uses is the one the source creates.
    source_sql = (DOCKER / "source-init.sql").read_text()
    assert "CREATE USER 'repl'@'%' IDENTIFIED BY 'demo-repl'" in source_sql
    assert "SOURCE_USER = 'repl'" in sql and "SOURCE_PASSWORD = 'demo-repl'" in sql


def test_lagd_reads_the_replica_datadir_read_only(compose: dict[str, Any]) -> None:
    s = compose["services"]
    replica_data = [(src, dst, mode) for src, dst, mode in mounts(s["replica"]) if dst == "/var/lib/mysql"]
    assert replica_data == [("replica-data", "/var/lib/mysql", "rw")]
    lagd = mounts(s["lagd"])
    # The same path as in the replica's container, so @@relay_log_index holds in lagd's.
    assert ("replica-data", "/var/lib/mysql", "ro") in lagd
    assert all(mode == "ro" for _, _, mode in lagd), lagd
    assert "replica-data" in compose["volumes"] and "source-data" in compose["volumes"]


def test_lagd_image_and_config(compose: dict[str, Any]) -> None:
    lagd = compose["services"]["lagd"]
    assert lagd["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert ("./lagd.toml", "/etc/lagd/lagd.toml", "ro") in mounts(lagd)
    settings = load_settings(DOCKER / "lagd.toml")  # valid, as `lagctl config validate` would say
    assert settings.replica.host == "replica" and settings.replica.port == 3306
    assert settings.replica.password_env in lagd["environment"]
    assert f"127.0.0.1:{settings.http.port}:{settings.http.port}" in lagd["ports"]
    assert settings.lag.heartbeat_table in compose["services"]["heartbeat"]["entrypoint"]


PORTS = [("lagd", 9904), ("prometheus", 9090), ("grafana", 3000)]


@pytest.mark.parametrize(("name", "port"), PORTS, ids=[p[0] for p in PORTS])
def test_ports_are_published_on_loopback_only(compose: dict[str, Any], name: str, port: int) -> None:
    assert compose["services"][name]["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_no_other_service_publishes_ports(compose: dict[str, Any]) -> None:
    assert {n for n, s in compose["services"].items() if "ports" in s} == {p[0] for p in PORTS}


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    named = set(compose["volumes"])
    for name, service in compose["services"].items():
        for src, dst, _ in mounts(service):
            if src.startswith((".", "/")):
                assert (DOCKER / src).exists(), f"{name} mounts {src}, which is not in the repository"
            else:
                assert src in named, f"{name} mounts undeclared volume {src}"
            assert dst.startswith("/"), dst
    for name, service in compose["services"].items():
        build = service.get("build")
        if build:
            assert (DOCKER / build["context"] / build["dockerfile"]).is_file(), name


def test_prometheus_scrapes_lagd_and_loads_the_alert_rules(compose: dict[str, Any]) -> None:
    prom = load("prometheus.yml")
    targets = {(sc["job_name"], t) for sc in prom["scrape_configs"] for st in sc["static_configs"]
               for t in st["targets"]}
    settings = load_settings(DOCKER / "lagd.toml")
    assert ("lagd", f"lagd:{settings.http.port}") in targets  # the alert rules expect job="lagd"
    service_mounts = {dst: src for src, dst, _ in mounts(compose["services"]["prometheus"])}
    for rule_file in prom["rule_files"]:
        assert service_mounts[rule_file] == "../config/prometheus/lagd-alerts.yml"
    assert service_mounts["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"


def test_grafana_provisions_prometheus_and_the_dashboard(compose: dict[str, Any]) -> None:
    service_mounts = {dst: src for src, dst, _ in mounts(compose["services"]["grafana"])}
    assert service_mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    ds = load("grafana/provisioning/datasources/prometheus.yml")["datasources"]
    assert [d["url"] for d in ds if d["type"] == "prometheus"] == ["http://prometheus:9090"]
    providers = load("grafana/provisioning/dashboards/lagd.yml")["providers"]
    path = providers[0]["options"]["path"]
    assert service_mounts[path] == "../config/grafana"
    dashboards = list((DOCKER / "../config/grafana").glob("*.json"))
    assert dashboards, "config/grafana has no dashboard"
    for d in dashboards:
        json.loads(d.read_text())


def test_dockerfile() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert froms[-1] == "python:3.11-slim" and all(f.startswith("python:3.11-slim") for f in froms)
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^RUN pip wheel .* \.$", text, re.MULTILINE)  # the package from the build context
    assert re.search(r"^RUN pip install .*\blagd\b", text, re.MULTILINE)
    entry = re.findall(r"^ENTRYPOINT\s+(\[.*\])$", text, re.MULTILINE)
    assert [json.loads(e) for e in entry] == [["lagd", "run", "--config", "/etc/lagd/lagd.toml"]]
    for path in re.findall(r"^COPY\s+(?!--from)(.+)\s+\S+$", text, re.MULTILINE):
        for src in path.split():
            assert (ROOT / src).exists(), src
