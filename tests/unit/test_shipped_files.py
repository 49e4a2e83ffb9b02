"""What a pip install ships besides the code: ``lagctl config example`` prints
the example config, the systemd unit, the alert rules and the dashboard from
the package (the same files as in the source tree), and the driver support
MySQL 8 logins need is a dependency."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from click.testing import CliRunner

from lagd.cli.config import EXAMPLES, config, example_text

ROOT = Path(__file__).resolve().parents[2]
SOURCE = {
    "config": ROOT / "config" / "lagd.toml",
    "unit": ROOT / "systemd" / "lagd.service",
    "alerts": ROOT / "config" / "prometheus" / "lagd-alerts.yml",
    "dashboard": ROOT / "config" / "grafana" / "lagd-dashboard.json",
}


@pytest.mark.parametrize("what", sorted(EXAMPLES))
def test_example_prints_the_shipped_file(what: str) -> None:
    got = CliRunner().invoke(config, ["example", what])
    assert got.exit_code == 0, got.output
    assert got.output == SOURCE[what].read_text(encoding="utf-8") == example_text(what)


def test_example_defaults_to_the_config() -> None:
    got = CliRunner().invoke(config, ["example"])
    assert got.exit_code == 0 and got.output.startswith(SOURCE["config"].read_text(encoding="utf-8")[:40])


def test_package_data_lists_the_data_directory() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = cfg["options.package_data"]["lagd"]
    assert all(f"data/*{Path(name).suffix}" in listed for name in EXAMPLES.values())


def test_cryptography_is_a_dependency() -> None:
    # caching_sha2_password (MySQL 8's default) over TCP without TLS needs RSA.
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "cryptography" in cfg["options"]["install_requires"]
