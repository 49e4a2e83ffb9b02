"""config/prometheus/lagd-alerts.yml: valid for promtool, tested firing and silent, each with a runbook."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from promql_names import ROOT, RULE_TESTS, RULES, RUNBOOK, promtool, read_rules

SEVERITIES = {"critical", "warning", "info"}
ALERTS = [r["alert"] for r in read_rules() if "alert" in r]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def test_promtool_check_rules_finds_every_rule() -> None:
    got = run("check", "rules", "--lint=all", "--lint-fatal", str(RULES.relative_to(ROOT)))
    assert got.returncode == 0, got.stdout + got.stderr
    found = re.search(r"SUCCESS: (\d+) rules found", got.stdout)
    assert found is not None, got.stdout
    assert int(found.group(1)) == len(read_rules()), "the test's YAML reader missed rules"


def test_promtool_test_rules() -> None:
    got = run("test", "rules", str(RULE_TESTS.relative_to(ROOT)))
    assert got.returncode == 0, got.stdout + got.stderr


def _evals() -> dict[str, set[str]]:
    """Alert name -> {"fires", "silent"}, from the promtool test file."""
    text = RULE_TESTS.read_text(encoding="utf-8")
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"alertname: (\w+)\n\s+exp_alerts:( \[\])?", text):
        out.setdefault(m.group(1), set()).add("silent" if m.group(2) else "fires")
    return out


@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_is_tested_firing_and_silent(alert: str) -> None:
    assert _evals().get(alert) == {"fires", "silent"}


@pytest.mark.parametrize("rule", read_rules(), ids=ALERTS)
def test_every_alert_has_severity_annotations_and_a_runbook_section(rule: dict[str, str]) -> None:
    alert = rule["alert"]
    assert rule.get("severity") in SEVERITIES
    assert rule.get("summary") and rule.get("description")
    assert rule.get("runbook_url") == f"docs/runbook.md#{alert.lower()}"
    headings = re.findall(r"^## (\w+)\s*$", RUNBOOK.read_text(encoding="utf-8"), re.M)
    assert alert in headings, f"docs/runbook.md has no '## {alert}' section"


def test_runbook_has_a_section_per_alert_and_no_other() -> None:
    headings = re.findall(r"^## (Lagd\w+)\s*$", RUNBOOK.read_text(encoding="utf-8"), re.M)
    assert sorted(headings) == sorted(ALERTS)


def test_a_missing_promtool_fails_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(pytest.fail.Exception, match=r"scripts/bootstrap promtool.*apt-get install -y"):
        promtool()
