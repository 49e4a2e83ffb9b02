"""The Grafana dashboard and the alert rules query only metrics lagd exports.

The exported names come from rendering a snapshot with every part present
(tests/unit/metrics_snapshots.py), so renaming a metric in lagd.daemon.metrics
breaks this test until the dashboard and the rules follow.
"""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from metrics_snapshots import full_snapshot
from prometheus_client.parser import text_string_to_metric_families
from promql_names import DASHBOARD, dashboard_queries, metric_names, promtool, read_rules

from lagd.daemon.metrics import render

PROMETHEUS_OWN = {"up"}  # set by Prometheus for every target


@cache
def exported() -> frozenset[str]:
    text = render(full_snapshot).decode()
    # Sample names already carry _total, _bucket, _sum and _count.
    return frozenset(s.name for f in text_string_to_metric_families(text) for s in f.samples)


def dashboard() -> dict[str, object]:
    loaded = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


QUERIES = [(where, expr) for where, expr in dashboard_queries(dashboard())] + [
    (f"alert {r['alert']}", r["expr"]) for r in read_rules()
]


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[q[0] for q in QUERIES])
def test_queries_use_exported_names_only(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: no metric name found in {expr!r}"
    unknown = names - exported() - PROMETHEUS_OWN
    assert not unknown, f"{where} queries metrics lagd does not export: {sorted(unknown)}"


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('up{job="lagd"} == 0', {"up"}),
        ("lagd_a > 300 and (deriv(lagd_a[10m]) >= 0 or lagd_b > 1e3)", {"lagd_a", "lagd_b"}),
        ('sum by (le) (increase(lagd_h_bucket{instance=~"$instance"}[$__rate_interval]))', {"lagd_h_bucket"}),
        ('lagd_a unless on (job, instance) lagd_b offset 5m', {"lagd_a", "lagd_b"}),
        ('label_replace(lagd_a, "x", "$1", "y", "(.*)")', {"lagd_a"}),
        ("absent(lagd_a) or vector(1)", {"lagd_a"}),
    ],
)
def test_metric_names_reads_promql(expr: str, want: set[str]) -> None:
    assert metric_names(expr) == want


def test_dashboard_covers_the_topics() -> None:
    d = dashboard()
    exprs = " ".join(e for _w, e in dashboard_queries(d))
    for name in ("lagd_replication_lag_seconds", "lagd_backlog_transactions", "lagd_apply_speed_ratio",
                 "lagd_catchup_eta_seconds", "lagd_prefetch_probes_in_time_total",
                 "lagd_prefetch_lead_transactions", "lagd_upcoming_transaction_stall_seconds",
                 "lagd_replica_state", "lagd_prefetch_state", "lagd_sql_thread_seconds_total",
                 "lagd_prefetch_gate_open", "lagd_innodb_history_length", "lagd_prefetch_connections_open"):
        assert name in exprs, f"the dashboard shows no {name}"


def test_dashboard_panels_are_unique_and_use_the_datasource_variable() -> None:
    d = dashboard()
    panels = d["panels"]
    assert isinstance(panels, list)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("targets"), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]


def test_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    # promtool parses rule expressions: each panel query becomes a recording
    # rule, with Grafana's variables replaced by what Grafana would put there.
    subs = {"$__rate_interval": "1m", "$instance": ".*", "$channel": ".*"}
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_where, expr) in enumerate(dashboard_queries(dashboard())):
        for var, text in subs.items():
            expr = expr.replace(var, text)
        assert "$" not in expr, f"unexpected Grafana variable in {expr!r}"
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(expr)}"]
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert got.returncode == 0, got.stdout + got.stderr
    assert re.search(rf"SUCCESS: {len(dashboard_queries(dashboard()))} rules found", got.stdout), got.stdout
