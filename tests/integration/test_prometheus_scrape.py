"""A real Prometheus scrapes a real ``lagd run`` watching the sandbox replica.

The first test stops the replica's SQL thread while the source keeps writing, and
asks Prometheus (HTTP API, PromQL), not lagd, what it saw: an event_time lag
above 0 and the state ``stopped``; Seconds_Behind_Master gone from the
scrape (NULL is not 0) while its last-success and stale series stay; and
after the SQL thread is started again, event_time back at 0.

The second scrapes lagd (prefetch and advisor on) in every replica state it
can be put in, and runs ``promtool check metrics`` on each scrape: names,
types and help pass Prometheus' own lint, and an unknown value is absent.

Prometheus is Debian's ``prometheus`` binary, on a free loopback port with a
temporary config and data directory, scraping every second.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lagd.sandbox.pair import Sandbox
from lagd.sandbox.server import LAGD_PASSWORD, LAGD_USER, free_port

T = TypeVar("T")
PASSWORD_ENV = "LAGD_TEST_SCRAPE_PASSWORD"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
             logs: Callable[[], str] = lambda: "") -> T:
    """Poll until ``probe`` returns something; a deadline, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{logs()}")
        time.sleep(0.25)


def http_get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None


class Proc:
    """A child process with its output in a file, stopped by its own pid."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        self._out = self.log.open("wb")
        self.p = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.name} (exit {self.p.poll()}) ---\n" + "\n".join(text)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
        self._out.close()


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("the prometheus server is not installed: run `scripts/bootstrap promtool` "
                    "(or as root: apt-get install -y --no-install-recommends prometheus)")
    return found


def lagd_config(port: int, listen: int, *, prefetch: bool = False, advisor: bool = False,
                heartbeat: str = "", big_rows: int = 50_000) -> str:
    return f"""
[replica]
host = "127.0.0.1"
port = {port}
user = "{LAGD_USER}"
password_credential = ""
password_env = "{PASSWORD_ENV}"
connect_timeout = 2.0

[lag]
poll_interval = 0.5
stale_after = 5.0
heartbeat_table = "{heartbeat}"

[prefetch]
enabled = {str(prefetch).lower()}

[advisor]
enabled = {str(advisor).lower()}
big_transaction_rows = {big_rows}

[http]
listen = "127.0.0.1:{listen}"
"""


@contextlib.contextmanager
def run_lagd(replica_port: int, tmp_path: Path, *, ready: bool = True,
             **sections: Any) -> Iterator[tuple[str, Proc]]:
    """``lagd run`` on ``replica_port``; yields its host:port and the process
    once /readyz answers 200 (or once /metrics answers, ``ready=False``)."""
    port = free_port()
    config = tmp_path / f"lagd-{port}.toml"
    config.write_text(lagd_config(replica_port, port, **sections), encoding="utf-8")
    env = {**os.environ, PASSWORD_ENV: LAGD_PASSWORD}
    exe = Path(sys.executable).with_name("lagd")  # the console script next to this interpreter
    assert exe.exists(), f"{exe} missing: install lagd into this environment (scripts/bootstrap)"
    lagd = Proc(f"lagd-{port}", [str(exe), "run", "--config", str(config)], tmp_path, env)
    try:
        target = f"127.0.0.1:{port}"
        path = "/readyz" if ready else "/metrics"

        def up() -> bool | None:
            if lagd.p.poll() is not None:
                raise AssertionError(f"lagd exited\n{lagd.tail()}")
            got = http_get(f"http://{target}{path}")
            return True if got is not None and got[0] == 200 else None

        wait_for(f"lagd {path}", up, logs=lagd.tail)
        yield target, lagd
    finally:
        lagd.stop()


@pytest.fixture
def lagd_daemon(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[str, Proc]]:
    """``lagd run`` on the sandbox replica; yields its host:port and the process."""
    with run_lagd(sandbox.replica().port, tmp_path) as got:
        yield got


class PromQL:
    """Instant queries against a Prometheus server's HTTP API."""

    def __init__(self, base: str, logs: Callable[[], str]) -> None:
        self.base, self.logs = base, logs

    def query(self, promql: str) -> list[Any]:
        got = http_get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert got is not None and got[0] == 200, f"{promql}: {got}\n{self.logs()}"
        body = json.loads(got[1])
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, promql: str) -> float | None:
        """The single sample's value, None when the result is empty."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def at_least(self, promql: str, bound: float) -> Callable[[], float | None]:
        def probe() -> float | None:
            v = self.value(promql)
            return v if v is not None and v >= bound else None

        return probe

    def equals(self, promql: str, want: float | None) -> Callable[[], bool | None]:
        return lambda: True if self.value(promql) == want else None


@pytest.fixture
def prometheus(lagd_daemon: tuple[str, Proc], tmp_path: Path) -> Iterator[PromQL]:
    """A Prometheus scraping lagd every second."""
    target, lagd = lagd_daemon
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: lagd
    static_configs:
      - targets: ["{target}"]
""", encoding="utf-8")
    prom = Proc("prometheus", [prometheus_binary(), f"--config.file={config}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], tmp_path)
    base = f"http://127.0.0.1:{port}"

    prom_ql = PromQL(base, lambda: prom.tail() + "\n" + lagd.tail())
    try:
        wait_for("prometheus ready",
                 lambda: True if (r := http_get(f"{base}/-/ready")) and r[0] == 200 else None,
                 logs=prom_ql.logs)
        wait_for("the first successful scrape of lagd", prom_ql.equals('up{job="lagd"}', 1),
                 logs=prom_ql.logs)
        yield prom_ql
    finally:
        prom.stop()


def test_prometheus_sees_the_lag_of_a_stopped_sql_thread(sandbox: Sandbox, schema: str,
                                                          prometheus: PromQL) -> None:
    prom, logs = prometheus, prometheus.logs
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    sandbox.wait_caught_up(timeout=60)
    wait_for("state idle in Prometheus", prom.at_least('lagd_replica_state{state="idle"}', 1), logs=logs)

    stop_writing = threading.Event()

    def write() -> None:
        conn = sandbox.source.connect(schema, autocommit=True)
        try:
            with conn.cursor() as cur:
                while not stop_writing.is_set():
                    cur.execute("INSERT INTO t (v) VALUES (1)")
                    stop_writing.wait(0.1)
        finally:
            conn.close()

    writer = threading.Thread(target=write, name="source-writes")
    sandbox.stop_sql_thread()
    try:
        writer.start()
        # event_time grows a second per second while the SQL thread is stopped
        lag = wait_for("event_time lag >= 2 s in Prometheus",
                       prom.at_least('lagd_replication_lag_seconds{method="event_time"}', 2.0), logs=logs)
        assert lag >= 2.0
        assert prom.value('lagd_replica_state{state="stopped"}') == 1
        assert prom.value("lagd_replica_sql_running") == 0
        assert prom.value("lagd_catchup_eta_seconds") == float("inf")
        assert prom.value('lagd_replication_lag_primary_method{method="event_time"}') == 1
        # SBM is NULL: no sample at all (Prometheus marked the series stale), never 0 ...
        wait_for("sbm to leave the scrape", prom.equals('lagd_replication_lag_seconds{method="sbm"}', None),
                 logs=logs)
        # ... while its history stays, and goes stale after lag.stale_after
        assert prom.value('lagd_replication_lag_last_success_timestamp_seconds{method="sbm"}') is not None
        wait_for("sbm marked stale", prom.at_least('lagd_replication_lag_stale{method="sbm"}', 1), logs=logs)
    finally:
        stop_writing.set()
        writer.join(timeout=30)
        sandbox.start_sql_thread()
    sandbox.wait_caught_up(timeout=60)

    wait_for("event_time back to 0 after the SQL thread restarted",
             prom.equals('lagd_replication_lag_seconds{method="event_time"}', 0), logs=logs)
    peak = prom.value('max_over_time(lagd_replication_lag_seconds{method="event_time"}[5m])')
    assert peak is not None and peak >= 2.0
    assert prom.value('lagd_replication_lag_stale{method="sbm"}') == 0


def promtool_binary() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: run `scripts/bootstrap promtool` "
                    "(or as root: apt-get install -y --no-install-recommends prometheus)")
    return found


def scrape(target: str) -> str:
    got = http_get(f"http://{target}/metrics")
    assert got is not None and got[0] == 200, got
    return got[1]


def samples(text: str) -> dict[str, str]:
    """``name{labels}`` -> value, as printed."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = value
    return out


def check_metrics(text: str, state: str) -> dict[str, str]:
    got = subprocess.run([promtool_binary(), "check", "metrics"], input=text.encode(), capture_output=True,
                         timeout=60, check=False)
    assert got.returncode == 0, f"{state}: promtool check metrics:\n{got.stdout!r}{got.stderr!r}"
    values = samples(text)
    # Unknown is absent, never 0 or NaN.
    assert not [k for k, v in values.items() if v == "NaN"], state
    return values


def state_of(values: dict[str, str]) -> str | None:
    on = [k for k, v in values.items() if k.startswith("lagd_replica_state{") and float(v) == 1]
    return on[0].split('state="')[1].split('"')[0] if on else None


def test_promtool_check_metrics_on_scrapes_in_every_state(sandbox: Sandbox, schema: str,
                                                          tmp_path: Path) -> None:
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    sandbox.wait_caught_up(timeout=60)
    seen: dict[str, dict[str, str]] = {}
    with run_lagd(sandbox.replica().port, tmp_path, prefetch=True, advisor=True) as (target, lagd):
        def reach(state: str) -> dict[str, str]:
            def probe() -> dict[str, str] | None:
                values = samples(scrape(target))
                return values if state_of(values) == state else None

            wait_for(f"state {state}", probe, logs=lagd.tail)
            seen[state] = check_metrics(scrape(target), state)
            return seen[state]

        idle = reach("idle")
        assert float(idle['lagd_catchup_eta_seconds{channel=""}']) == 0
        sandbox.stop_sql_thread()
        try:
            for _ in range(20):
                sandbox.source.query(f"INSERT INTO `{schema}`.t (v) VALUES (1)")
            stopped = reach("stopped")

            # SBM is NULL while stopped: absent, not 0.
            assert not [k for k in stopped if k.startswith("lagd_replication_lag_seconds{") and "sbm" in k]
            assert stopped['lagd_apply_speed_ratio{channel=""}'] == "0.0"
        finally:
            sandbox.start_sql_thread()
        sandbox.wait_caught_up(timeout=60)
        reach("idle")
        sandbox.stop_io_thread()
        try:
            reach("io_stopped")
        finally:
            sandbox.start_io_thread()
        sandbox.wait_caught_up(timeout=60)
        final = reach("idle")
        assert float(final['lagd_applied_transactions_total{channel=""}']) == 20  # each insert once
    # A replica that cannot be reached: state unknown, and the lags absent.
    with run_lagd(free_port(), tmp_path, ready=False) as (target, lagd):
        def unknown() -> dict[str, str] | None:
            values = samples(scrape(target))
            return values if state_of(values) == "unknown" else None

        wait_for("state unknown", unknown, logs=lagd.tail)
        values = check_metrics(scrape(target), "unknown")
        assert not [k for k in values if k.startswith("lagd_replication_lag_seconds{")]
        assert "lagd_catchup_eta_seconds" not in " ".join(values)
    assert set(seen) == {"idle", "stopped", "io_stopped"}
