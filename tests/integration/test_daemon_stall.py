"""A real `lagd run` measures the SQL thread's time split, with prefetch off and on.

The sandbox's lagd account has PROCESS (lagd.sandbox.pair.LAGD_GRANTS), so the
daemon finds the SQL thread by information_schema.PROCESSLIST.TID and samples
it from /proc. The test applies a backlog and checks that the cumulative
split grew and is shown in /status, lagctl status and /metrics; no timing is
asserted (a backlog may apply faster than a status poll).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lagd.sandbox.pair import LAGD_GRANTS, Sandbox
from tests.integration.daemon_util import running_daemon

LAGCTL = str(Path(sys.executable).parent / "lagctl")


@pytest.mark.parametrize("prefetch", [False, True], ids=["prefetch-off", "prefetch-on"])
def test_daemon_shows_the_sql_thread_split(sandbox: Sandbox, schema: str, tmp_path: Path,
                                           prefetch: bool) -> None:
    assert "PROCESS" in LAGD_GRANTS
    sb = sandbox
    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, n INT NOT NULL)")
    sb.source.query("INSERT INTO t SELECT seq, 0 FROM seq_1_to_2000", db=schema)
    sb.wait_caught_up(timeout=60)
    with running_daemon(sb, tmp_path, extra=f"[prefetch]\nenabled = {str(prefetch).lower()}\n") as d:
        found = d.wait_for(lambda s: bool((s.get("stall") or {}).get("threads")))
        assert found["stall"]["threads_note"] is None, found["stall"]
        before = d.wait_for(lambda s: s["stall"]["seconds"] is not None)["stall"]["seconds"]

        # The SQL thread keeps running (a START SLAVE would make a new OS thread,
        # found again within a second or two: a short backlog could be over by then).
        for i in range(200):  # 400,000 row changes on a table in the pool
            sb.source.query(f"UPDATE `{schema}`.t SET n = n + {i}")
        sb.wait_caught_up(timeout=180)

        def applied(s: dict[str, object]) -> bool:
            v = s.get("stall")
            return (isinstance(v, dict) and v["seconds"]["on_cpu"] > before["on_cpu"]
                    and v["shares"] is not None)
        after = d.wait_for(applied)["stall"]
        print(after["summary"], after["seconds"])
        assert after["seconds"]["on_cpu"] > before["on_cpu"]  # it applied: it ran on a CPU
        assert after["spare_cores"] is not None
        assert after["summary"].startswith("SQL thread: ")
        if prefetch:  # the engine judges from the daemon's monitor: its gate is shown
            gated = d.wait_for(lambda s: s["stall"]["gate_reason"] is not None)["stall"]
            assert isinstance(gated["gate_open"], bool)
        else:
            assert after["gate_open"] is None  # no engine: no gate

        _, metrics = d.get("/metrics")
        assert 'lagd_sql_thread_seconds_total{channel="",state="on_cpu"}' in metrics
        assert "lagd_machine_spare_cores " in metrics

        out = subprocess.run([LAGCTL, "status", "--config", str(d.config), "--url", d.url],
                             capture_output=True, text=True, timeout=30,
                             env={"LAGD_TEST_PASSWORD": sb.replica().dsn.password, "PATH": ""})
        line = next((x for x in out.stdout.splitlines() if x.startswith("SQL thread ")), None)
        assert line is not None and "not measured" not in line, out.stdout
