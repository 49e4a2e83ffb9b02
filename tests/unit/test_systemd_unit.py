"""systemd/lagd.service: systemd accepts it, it keeps its hardening, and it
agrees with the example configuration."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lagd.config import DEFAULT_CONFIG_PATH, load_settings

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "lagd.service"
SHIPPED_EXEC = "ExecStart=/usr/bin/lagd "
# docs/install.md quotes the score; raise this only with a reason written there.
MAX_EXPOSURE = 2.0


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail(
            "systemd-analyze is missing, so the unit cannot be checked; "
            "install it: apt-get install -y --no-install-recommends systemd"
        )
    return found


def directives(section: str) -> dict[str, list[str]]:
    """Key -> values of one section; systemd allows a key more than once."""
    out: dict[str, list[str]] = {}
    current = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif line and not line.startswith("#") and current == section:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@pytest.fixture
def verifiable_unit(tmp_path: Path) -> Path:
    """The unit as shipped, except ExecStart points at this environment's lagd.

    `systemd-analyze verify` rejects a unit whose ExecStart binary does not
    exist, and /usr/bin/lagd exists only where lagd is installed system-wide.
    Every other line is verified as shipped.
    """
    lagd = Path(sys.executable).with_name("lagd")
    if not lagd.exists():
        lagd = Path(shutil.which("lagd") or sys.executable)
    text = UNIT.read_text()
    assert text.count(SHIPPED_EXEC) == 1
    copy = tmp_path / "lagd.service"
    copy.write_text(text.replace(SHIPPED_EXEC, f"ExecStart={lagd} "))
    return copy


def test_systemd_analyze_verify_accepts_the_unit(verifiable_unit: Path) -> None:
    done = subprocess.run(
        [systemd_analyze(), "verify", str(verifiable_unit)], capture_output=True, text=True, check=False
    )
    # Other units it loads (mariadb.service, if installed) may have warnings of their own.
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "lagd" in line]
    assert done.returncode == 0, done.stdout + done.stderr
    assert ours == []


def test_security_exposure_stays_low(verifiable_unit: Path) -> None:
    done = subprocess.run(
        [systemd_analyze(), "security", "--offline=true", "--no-pager", str(verifiable_unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    m = re.search(r"Overall exposure level for lagd\.service: ([\d.]+)", done.stdout)
    assert m, done.stdout + done.stderr
    assert float(m[1]) <= MAX_EXPOSURE, done.stdout


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param("Type", "notify", id="notify"),
        pytest.param("NotifyAccess", "main", id="notify-main-only"),
        pytest.param("WatchdogSec", "30", id="watchdog"),
        pytest.param("Restart", "on-failure", id="restart"),
        pytest.param("RestartSec", "5", id="restart-delay"),
        pytest.param("ExecStart", f"/usr/bin/lagd run --config {DEFAULT_CONFIG_PATH}", id="exec"),
        pytest.param("ExecReload", "/bin/kill -HUP $MAINPID", id="reload-is-sighup"),
        pytest.param("TimeoutStopSec", "10", id="stop-timeout"),
        pytest.param("User", "lagd", id="user"),
        pytest.param("Group", "lagd", id="group"),
        pytest.param("SupplementaryGroups", "mysql", id="relay-log-group"),
        pytest.param("ReadOnlyPaths", "/var/lib/mysql", id="relay-log-dir"),
        pytest.param("LoadCredential", "lagd-password:/etc/lagd/password", id="credential"),
        pytest.param("UMask", "0077", id="umask"),
        pytest.param("ProtectSystem", "strict", id="read-only-os"),
        pytest.param("ProtectHome", "yes", id="no-home"),
        pytest.param("PrivateTmp", "yes", id="private-tmp"),
        pytest.param("PrivateDevices", "yes", id="no-devices"),
        pytest.param("NoNewPrivileges", "yes", id="no-new-privileges"),
        pytest.param("ProtectKernelTunables", "yes", id="kernel-tunables"),
        pytest.param("ProtectKernelModules", "yes", id="kernel-modules"),
        pytest.param("ProtectKernelLogs", "yes", id="kernel-logs"),
        pytest.param("ProtectClock", "yes", id="clock"),
        pytest.param("ProtectControlGroups", "yes", id="cgroups"),
        pytest.param("ProtectHostname", "yes", id="hostname"),
        pytest.param("RestrictNamespaces", "yes", id="namespaces"),
        pytest.param("RestrictRealtime", "yes", id="realtime"),
        pytest.param("RestrictSUIDSGID", "yes", id="suid"),
        pytest.param("LockPersonality", "yes", id="personality"),
        pytest.param("MemoryDenyWriteExecute", "yes", id="no-wx-memory"),
        pytest.param("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6", id="address-families"),
        pytest.param("SystemCallArchitectures", "native", id="native-syscalls"),
        pytest.param("CapabilityBoundingSet", "", id="no-capabilities"),
        pytest.param("AmbientCapabilities", "", id="no-ambient-capabilities"),
    ],
)
def test_service_directive(key: str, value: str) -> None:
    assert directives("Service").get(key) == [value]


def test_system_calls_allow_list() -> None:
    assert directives("Service")["SystemCallFilter"][0] == "@system-service"


def test_example_config_uses_the_units_credential() -> None:
    name = directives("Service")["LoadCredential"][0].partition(":")[0]
    example = load_settings(ROOT / "config" / "lagd.toml")
    assert example.replica.password_credential == name


def test_only_setpriority_of_the_resource_calls_is_allowed() -> None:
    """The stall sampler lowers its own thread's priority (prefetch/stall.py SAMPLER_NICE);
    every other resource-tuning call stays filtered."""
    filters = directives("Service")["SystemCallFilter"]
    assert "~@privileged @resources" in filters
    assert filters[-1] == "setpriority"
