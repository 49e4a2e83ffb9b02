"""Read the shipped alert rules and pick metric names out of PromQL, for tests.

There is no YAML library among lagd's dependencies, so ``read_rules`` reads
the subset config/prometheus/lagd-alerts.yml is written in (block mappings,
plain, quoted and ``|`` block scalars); test_alert_rules.py checks it finds
as many rules as promtool does.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "lagd-alerts.yml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "lagd-alerts.test.yml"
DASHBOARD = ROOT / "config" / "grafana" / "lagd-dashboard.json"
RUNBOOK = ROOT / "docs" / "runbook.md"

def promtool() -> str:
    """promtool's path; fails (never skips) naming the fix when it is missing."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: run `scripts/bootstrap promtool` "
                    "(or as root: apt-get install -y --no-install-recommends prometheus)")
    return found


_KEY = re.compile(r"^(?P<indent>\s*)(?P<dash>- )?(?P<key>[A-Za-z_]+):(?:\s+(?P<value>.*))?$")


def _scalar(text: str) -> str:
    text = text.strip()
    if text.startswith('"'):
        return str(json.loads(text))  # the file's double-quoted escapes are JSON's (\" and \\)
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return text


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def read_rules(path: Path = RULES) -> list[dict[str, str]]:
    """One flat dict per rule: alert (or record), expr, for, severity and the annotations."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rules: list[dict[str, str]] = []
    i = 0
    while i < len(lines):
        m = _KEY.match(lines[i])
        i += 1
        if m is None or lines[i - 1].lstrip().startswith("#"):
            continue
        key, value = m["key"], m["value"] or ""
        if key in ("alert", "record"):
            rules.append({})
        if not rules:
            continue
        if value in ("|", "|-", ">", ">-"):
            indent = len(m["indent"]) + (2 if m["dash"] else 0)
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
                block.append(lines[i].strip())
                i += 1
            value = ("\n" if value.startswith("|") else " ").join(block).strip()
        elif value:
            value = _scalar(value)
        if value:
            rules[-1][key] = value
    return rules


_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
             "offset", "bool", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"'(?:[^'\\]|\\.)*'", "''", e)
    e = re.sub(r"\{[^{}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\{?\w+\}?", "", e)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", e):
        ident, call = m.group(1), m.group(2)
        if call or ident.lower() in _KEYWORDS:
            continue
        names.add(ident)
    return names


def dashboard_queries(dashboard: dict[str, object]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable of a Grafana dashboard."""
    out: list[tuple[str, str]] = []

    def panels(items: object) -> None:
        for p in items if isinstance(items, list) else []:
            if not isinstance(p, dict):
                continue
            for t in p.get("targets", []):
                if isinstance(t, dict) and t.get("expr"):
                    out.append((f"panel {p.get('title')!r}", str(t["expr"])))
            panels(p.get("panels"))

    panels(dashboard.get("panels"))
    templating = dashboard.get("templating")
    variables = templating.get("list", []) if isinstance(templating, dict) else []
    for v in variables:
        if not isinstance(v, dict) or v.get("type") != "query":
            continue
        q = v.get("query")
        text = str(q.get("query", "")) if isinstance(q, dict) else str(q or "")
        # label_values(selector, label): the label is not a metric name
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", text)
        out.append((f"variable {v.get('name')!r}", m.group(1) if m else text))
    return out
