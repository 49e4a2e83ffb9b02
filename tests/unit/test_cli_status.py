"""lagctl status: the verdict as a table, and the command against a recorded daemon.

The daemon path is served by a tiny aiohttp server in a thread, answering with
the recorded documents in tests/fixtures/status (made by status_fixtures.py
from lagd's own classes). The replica fallback against a real server is in
tests/integration/test_cli_status_sandbox.py; here it only meets closed ports.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner
from status_fixtures import DIR, FIXTURES, NO_GRANT, READS, SLEEPING, as_json, stall

from lagd.cli import status as cli_status
from lagd.cli.status import (
    CRITICAL,
    OK,
    UNKNOWN,
    WARNING,
    Origin,
    render_plain,
    render_rich,
    screen_rows,
    verdict,
)
from lagd.daemon.state import StallView, _plain

NOW = 1_800_000_000.0


def method(name: str, seconds: float | None, reason: str = "r", stale: bool = False) -> dict[str, Any]:
    return {"method": name, "seconds": seconds, "reason": reason, "last_success": None, "stale": stale,
            "clamped": False}


def snap(state: str = "idle", lag: float | None = 0.0, by: str | None = "heartbeat", *, age: float = 0.5,
         status: dict[str, Any] | None = None, eta: Any = 0.0, reason: str = "why") -> dict[str, Any]:
    """A /status document with only what the verdict reads; override what a case is about."""
    return {
        "taken_at": NOW, "settings": {"lag": {"stale_after": 10.0, "poll_interval": 1.0}},
        "status": status if status is not None else {"sql_running": True, "last_sql_errno": 0,
                                                     "last_io_errno": 0},
        "status_error": None,
        "lag": {"at": NOW - age, "state": state, "state_reason": reason, "lag": lag,
                "lag_method": by if lag is not None else None, "lag_reason": "no method has a value: x",
                "eta": eta, "heartbeat": method("heartbeat", lag), "event_time": method("event_time", None),
                "sbm": method("sbm", None)},
    }


DUP = {"sql_running": False, "last_sql_errno": 1062,
       "last_sql_error": "Duplicate entry '7' for key 'PRIMARY'", "last_io_errno": 0}
IO_ERR = {"sql_running": True, "last_sql_errno": 0, "last_io_errno": 1236,
          "last_io_error": "Got fatal error 1236 from master: could not find next log"}

VERDICTS = [
    # (case, snapshot, expected code, text the line must contain)
    ("nothing at all", None, UNKNOWN, "UNKNOWN: no status"),
    ("daemon starting", {"lag": None, "status_error": "not polled yet"}, UNKNOWN,
     "no lag reading yet (not polled"),
    ("stale reading", snap(lag=1.0, age=45.0), UNKNOWN, "45.0 s old (stale after 10.0 s)"),
    ("idle", snap(lag=0.3), OK, "OK: lag 0.3 s by heartbeat (< 60 s), idle"),
    ("just under warn", snap("applying", 59.9, eta=12.0), OK,
     "lag 59.9 s by heartbeat (< 60 s), applying, caught up in about 12.0 s"),
    ("warn is inclusive", snap("applying", 60.0, eta=30.0), WARNING,
     "WARNING: lag 60.0 s by heartbeat (>= 60 s)"),
    ("just under crit", snap("applying", 299.0, "event_time"), WARNING, "lag 299 s by event_time (>= 60 s)"),
    ("crit is inclusive", snap("applying", 300.0, "sbm"), CRITICAL, "CRITICAL: lag 300 s by sbm (>= 300 s)"),
    ("not catching up", snap("applying", 100.0, eta="inf"), WARNING, "not catching up at the current speed"),
    ("sql error, small lag", snap("error", 5.0, status=DUP), CRITICAL,
     "CRITICAL: lag 5.0 s by heartbeat (< 60 s), SQL thread stopped: Last_SQL_Error 1062: Duplicate entry"),
    ("io error", snap("error", 2.0, status=IO_ERR), CRITICAL,
     "IO thread stopped: Last_IO_Error 1236: Got fatal"),
    ("stopped, lag unknown", snap("stopped", None, reason="SQL thread not running (no error)"), CRITICAL,
     "CRITICAL: lag unknown, SQL thread not running (no error)"),
    ("io stopped", snap("io_stopped", 10.0, reason="IO thread stopped: nothing new arrives"), WARNING,
     "WARNING: lag 10.0 s by heartbeat (< 60 s), IO thread stopped"),
    ("io stopped, lag unknown", snap("io_stopped", None, reason="IO thread connecting"), WARNING,
     "WARNING: lag unknown, IO thread connecting"),
    ("io stopped, lag critical", snap("io_stopped", 400.0), CRITICAL,
     "CRITICAL: lag 400 s by heartbeat (>= 300 s)"),
    ("unreachable", snap("unknown", None, reason="no replica status: connection refused"), UNKNOWN,
     "UNKNOWN: lag unknown, no replica status: connection refused"),
    # The last known waiting transaction only gets older: a lower bound above crit is critical.
    ("unreachable, old backlog", snap("unknown", 500.0, "event_time"), CRITICAL, "lag 500 s by event_time"),
    ("applying, no method", snap("applying", None), UNKNOWN, "UNKNOWN: lag unknown: no method has a value"),
    ("idle but old heartbeat", snap("idle", 70.0), WARNING,
     "WARNING: lag 70.0 s by heartbeat (>= 60 s), idle"),
]


@pytest.mark.parametrize(("case", "doc", "code", "text"), VERDICTS, ids=[v[0] for v in VERDICTS])
def test_verdict(case: str, doc: dict[str, Any] | None, code: int, text: str) -> None:
    got_code, line = verdict(doc, 60.0, 300.0)
    assert (got_code, text in line) == (code, True), line
    assert "\n" not in line


def test_verdict_line_is_capped() -> None:
    long = dict(DUP, last_sql_error="x" * 5000)
    _, line = verdict(snap("error", 5.0, status=long), 60, 300)
    assert len(line) == 300 and line.endswith("...")


FIXTURE_VERDICTS = [
    ("caught_up", OK, "OK: lag 0.3 s by heartbeat (< 60 s), idle"),
    ("lagging", WARNING, "WARNING: lag 120 s by heartbeat (>= 60 s), applying, caught up in about 600 s"),
    ("sql_error", CRITICAL,
     "CRITICAL: lag 412 s by heartbeat (>= 300 s), SQL thread stopped: Last_SQL_Error 1062"),
    ("io_stopped", WARNING,
     "WARNING: lag 95.0 s by heartbeat (>= 60 s), IO thread connecting, retrying after"),
    ("starting", UNKNOWN, "UNKNOWN: no lag reading yet (not polled yet)"),
]


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DIR / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize(("name", "code", "start"), FIXTURE_VERDICTS, ids=[f[0] for f in FIXTURE_VERDICTS])
def test_verdict_of_recorded_status(name: str, code: int, start: str) -> None:
    got, line = verdict(load(name), 60, 300)
    assert (got, line[: len(start)]) == (code, start)


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in {"raw", "settings", "advisor"}}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_shape(value[0])]
    return None


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_recorded_status_has_the_shape_of_snapshot_to_json(name: str) -> None:
    # Drift guard: a field added to the snapshot must reach the recorded documents.
    fresh = as_json(FIXTURES[name]())
    assert _shape(load(name)) == _shape(fresh), "regenerate: .venv/bin/python tests/unit/status_fixtures.py"


# --- the command against a recorded daemon ------------------------------------------------


@contextmanager
def serve(body: bytes, status: int = 200) -> Iterator[str]:
    """A tiny HTTP server answering GET /status with ``body``, in a thread of its own."""
    loop = asyncio.new_event_loop()

    async def handler(_req: web.Request) -> web.Response:
        return web.Response(body=body, status=status, content_type="application/json")

    app = web.Application()
    app.router.add_get("/status", handler)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(tmp_path: Path, **sections: dict[str, Any]) -> Path:
    """A lagd.toml pointing at nothing that listens, unless a section says otherwise."""
    data: dict[str, dict[str, Any]] = {
        "replica": {"host": "127.0.0.1", "port": closed_port(), "user": "lagd", "connect_timeout": 2.0},
        "status": {"daemon_url": f"http://127.0.0.1:{closed_port()}"},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    lines = []
    for name, values in data.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path = tmp_path / "lagd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli_status.status, list(args), env=env or {"LAGD_PASSWORD": "x"})


DAEMON_SCREENS = [
    ("caught_up", OK, ["heartbeat  0.3 s", "event_time 0.0 s", "averages   1 min 0.3 s", "ETA        0 s",
                       "prefetch   idle", "in time 99% (950 of 962 probes)", "advice     none active"]),
    ("lagging", WARNING, ["backlog    4,200 transactions, 310.0 MiB, 51,000 rows; oldest committed 118 s",
                          "apply      1.20 source-seconds per second", "ETA        600 s (10 min)",
                          "prefetch   active", "in time 95% (950 of 1,000 probes); benefit x1.30",
                          "not probed: no_key 7",
                          "coming     LOAD DATA: 2,000,000 rows, 180.0 MiB, about 340 s (6 min) to apply",
                          "split: split it into 10 chunks", "[warning] durability_on_lagging_replica",
                          "SQL thread 71% waiting on disk reads, 20% on CPU (last 10 s): prefetch can help"]),
    ("sql_error", CRITICAL, ["SQL thread stopped", "SQL error  Last_SQL_Error 1062: Could not execute",
                             "sbm        missing   server reports NULL: the SQL thread is not running "
                             "(stale)",
                             "ETA        never at the current speed", "prefetch   paused"]),
    ("io_stopped", WARNING, ["IO thread  connecting", "IO error   Last_IO_Error 2003",
                             "event_time missing   applied everything received, but the IO thread is "
                             "connecting"]),
    ("starting", UNKNOWN, ["source     no replica status: not polled yet", "lag        no reading yet",
                           "prefetch   off: starting",
                           "SQL thread not measured: needs the PROCESS grant (fix: GRANT PROCESS ON *.* TO"]),
]


@pytest.mark.parametrize(("name", "code", "texts"), DAEMON_SCREENS, ids=[d[0] for d in DAEMON_SCREENS])
def test_status_from_the_daemon(tmp_path: Path, name: str, code: int, texts: list[str]) -> None:
    with serve((DIR / f"{name}.json").read_bytes()) as url:
        result = run("--config", str(config(tmp_path)), "--url", url)
    lines = result.output.splitlines()
    assert result.exit_code == code, result.output
    assert lines[0].startswith("replica    127.0.0.1:3306 (MariaDB 10.11.19) as lagd")  # no fallback note
    assert lines[-1] == verdict(load(name), 60, 300)[1]
    for text in texts:
        assert text in result.output, text
    assert "\x1b[" not in result.output  # piped: plain text


def test_json_from_the_daemon(tmp_path: Path) -> None:
    with serve((DIR / "sql_error.json").read_bytes()) as url:
        result = run("--config", str(config(tmp_path)), "--url", url + "/status", "--json")
    assert result.exit_code == CRITICAL
    doc = json.loads(result.output)
    v = doc.pop("verdict")
    assert doc == load("sql_error")  # the snapshot exactly as served
    assert (v["code"], v["status"], v["source"], v["daemon_error"]) == (2, "CRITICAL", "daemon", None)
    assert v["line"].startswith("CRITICAL: lag 412 s by heartbeat (>= 300 s)")


@pytest.mark.parametrize(("warn", "crit", "code"), [("100", "200", WARNING), ("10", "110", CRITICAL),
                                                    ("130", "1000", OK)])
def test_thresholds_from_options(tmp_path: Path, warn: str, crit: str, code: int) -> None:
    with serve((DIR / "lagging.json").read_bytes()) as url:
        result = run("--config", str(config(tmp_path)), "--url", url, "--warn", warn, "--crit", crit)
    assert result.exit_code == code, result.output


def test_thresholds_from_the_config(tmp_path: Path) -> None:
    cfg = config(tmp_path, status={"warn_lag_seconds": 200.0, "crit_lag_seconds": 400.0})
    with serve((DIR / "lagging.json").read_bytes()) as url:
        result = run("--config", str(cfg), "--url", url)
    assert result.exit_code == OK
    assert result.output.splitlines()[-1].startswith("OK: lag 120 s by heartbeat (< 200 s)")


def test_url_from_the_config(tmp_path: Path) -> None:
    with serve((DIR / "caught_up.json").read_bytes()) as url:
        result = run("--config", str(config(tmp_path, status={"daemon_url": url})))
    assert result.exit_code == OK, result.output


FALLBACKS = [
    # (what the "daemon" answers, the reason the first line gives)
    (None, "connection refused"),
    ((b"oops", 500), "HTTP 500 Internal Server Error"),
    ((b"<html>hello</html>", 200), "the answer is not JSON; is that URL lagd?"),
    ((b'{"metrics": 1}', 200), "the answer is not a lagd /status document; is that URL lagd?"),
]


@pytest.mark.parametrize(("answer", "reason"), FALLBACKS, ids=["down", "http-500", "not-json", "not-lagd"])
def test_daemon_not_answering_falls_back_to_the_replica(tmp_path: Path, answer: Any, reason: str) -> None:
    cfg = config(tmp_path)
    if answer is None:
        url = f"http://127.0.0.1:{closed_port()}"
        result = run("--config", str(cfg), "--url", url)
    else:
        with serve(answer[0], answer[1]) as url:
            result = run("--config", str(cfg), "--url", url)
    lines = result.output.splitlines()
    assert lines[0] == f"lagd daemon not reachable at {url} ({reason}); showing the replica's own status"
    # Neither answers: the verdict says what is wrong, never a lag of 0.
    assert result.exit_code == UNKNOWN, result.output
    assert lines[-1].startswith("UNKNOWN: lag unknown, no replica status: replica 127.0.0.1:")
    assert "Traceback" not in result.output


def test_fallback_password_problem_is_one_line(tmp_path: Path) -> None:
    cfg = config(tmp_path, replica={"password_credential": "lagd-password"})
    result = run("--config", str(cfg), env={"CREDENTIALS_DIRECTORY": ""})
    assert result.exit_code == UNKNOWN
    assert "$CREDENTIALS_DIRECTORY is not set" in result.output.splitlines()[-1]


def test_json_fallback_keeps_stdout_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_status.status, ["--config", str(config(tmp_path)), "--json"])
    assert result.exit_code == UNKNOWN
    doc = json.loads(result.stdout)
    assert doc["verdict"]["source"] == "replica" and doc["verdict"]["daemon_error"] == "connection refused"
    assert doc["lag"]["sbm"]["seconds"] is None and doc["lag"]["state"] == "unknown"
    assert "showing the replica's own status" in result.stderr


USAGE = [
    (["--warn", "300", "--crit", "60"], "--warn 300 must be above 0 and below --crit 60"),
    (["--warn", "abc"], "'abc' is not a valid float"),
    (["--watch", "0"], "0"),
]


@pytest.mark.parametrize(("args", "text"), USAGE, ids=["warn-above-crit", "not-a-number", "watch-zero"])
def test_usage_mistakes_are_unknown_not_critical(tmp_path: Path, args: list[str], text: str) -> None:
    result = run("--config", str(config(tmp_path)), *args)
    assert result.exit_code == UNKNOWN and text in result.output


def test_bad_config_is_said_in_one_line_and_the_screen_goes_on(tmp_path: Path) -> None:
    # A refused SIGHUP leaves the daemon on its old config while the file is
    # broken: that is when on-call runs lagctl status, so it must still ask.
    bad = tmp_path / "bad.toml"
    bad.write_text("[prefetch]\nconections = 4\n")
    result = run("--config", str(bad), "--url", "http://127.0.0.1:9")
    assert result.exit_code == UNKNOWN  # nothing answers here: neither daemon nor replica
    first = result.output.splitlines()[0]
    assert "did you mean prefetch.connections?" in first and "built-in defaults" in first
    assert "Traceback" not in result.output


def test_watch_ends_cleanly_on_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_status.time, "sleep", sleep)
    with serve((DIR / "sql_error.json").read_bytes()) as url:
        result = run("--config", str(config(tmp_path)), "--url", url, "--watch", "5")
    assert result.exit_code == 0  # Ctrl-C is the way out, not a failure
    assert calls == [5.0, 5.0]
    assert result.output.count("CRITICAL: lag 412 s") == 2


def test_rich_on_a_terminal() -> None:
    doc = load("lagging")
    origin = Origin("replica", "http://127.0.0.1:9904", "connection refused")
    code, line = verdict(doc, 60, 300)
    out = io.StringIO()
    render_rich(screen_rows(doc, origin), origin, code, line, out, force_terminal=True, width=200)
    text = out.getvalue()
    assert "\x1b[" in text  # colour
    assert "lagd daemon not reachable at http://127.0.0.1:9904 (connection refused)" in text
    assert line in text
    plain = render_plain(screen_rows(doc, origin), origin, code, line)
    assert "\x1b[" not in plain and plain.splitlines()[-1] == line


ADVISOR = [
    # (what the daemon's advisor says, what the screen must show)
    ({"enabled": False, "reason": "advisor.enabled is false in the configuration"},
     "advisor    off: advisor.enabled is false in the configuration"),
    ({"enabled": True, "upcoming": None, "advice": None, "error": None,
      "lookahead": {"reason": "the look-ahead reader has not started"}},
     "coming     not known: the look-ahead reader has not started"),
    ({"enabled": True, "upcoming": [], "advice": None, "error": "SHOW GLOBAL VARIABLES failed"},
     "advice     settings not checked yet: SHOW GLOBAL VARIABLES failed"),
    ({"enabled": True, "upcoming": [{"kind": "UPDATE", "rows": 90_000, "bytes": 2**25, "applying": True,
                                     "estimated_seconds": None}], "upcoming_total": 7, "advice": []},
     "coming     UPDATE: 90,000 rows, 32.0 MiB (being applied now)\n           and 2 more big transactions"),
    (None, "advisor    no advice yet (or advisor.enabled = false)"),
]


@pytest.mark.parametrize(("advisor", "text"), ADVISOR,
                         ids=["off", "not known", "not checked", "applying", "none"])
def test_advisor_on_the_screen(advisor: Any, text: str) -> None:
    doc = dict(load("lagging"), advisor=advisor)
    origin = Origin("daemon", "http://127.0.0.1:9904")
    code, line = verdict(doc, 60, 300)
    assert text in render_plain(screen_rows(doc, origin), origin, code, line)


def test_a_fault_shows_on_the_screen_with_its_fix_and_duration() -> None:
    doc = load("starting")
    doc["health"] = [{"name": "replica_status", "up": False, "failing_since": doc["taken_at"] - 125,
                      "reason": "replica 127.0.0.1:3306: Access denied for user 'lagd' (error 1045)",
                      "fix": "check replica.user and the password", "last_success": None,
                      "last_duration": None},
                     {"name": "relay_log", "up": False, "reason": "not run yet", "failing_since": None}]
    origin = Origin("daemon", "http://127.0.0.1:9904")
    code, line = verdict(doc, 60, 300)
    text = render_plain(screen_rows(doc, origin), origin, code, line)
    assert ("fault      replica_status: replica 127.0.0.1:3306: Access denied for user 'lagd' (error 1045) "
            "(fix: check replica.user and the password); for 125 s (2 min)") in text
    assert "relay_log" not in text


@pytest.mark.parametrize(("name", "code"),
                         [("caught_up", WARNING), ("lagging", WARNING), ("sql_error", CRITICAL)])
def test_a_refused_reload_is_on_the_verdict_and_the_screen(name: str, code: int) -> None:
    doc = load(name)
    doc["config_error"] = "reload refused, still running on the previous config: lag.poll_interval: bad"
    got, line = verdict(doc, 60, 300)
    assert got == code and "reload refused" in line
    rows = screen_rows(doc, Origin("daemon", "http://127.0.0.1:9904", None))
    assert any(r.label == "config" and "reload refused" in r.text for r in rows)


CPU = {"on_cpu": 8.0, "cpu_wait": 0.8, "disk_read": 0.4, "flush_wait": 0.2, "other_wait": 0.6}
FLUSH = {"on_cpu": 2.0, "cpu_wait": 0.0, "disk_read": 0.5, "flush_wait": 6.0, "other_wait": 1.5}
LOCKS = {"on_cpu": 2.0, "cpu_wait": 0.0, "disk_read": 0.5, "flush_wait": 0.5, "other_wait": 7.0}
STALL_LINES = [
    (stall(READS), "SQL thread 71% waiting on disk reads, 20% on CPU (last 10 s): prefetch can help"),
    (stall(READS, headroom=0.2), "SQL thread 71% waiting on disk reads, 20% on CPU (last 10 s): no CPU to"
                                 " spare (0.2 idle cores): prefetch would slow it down"),
    (stall(CPU), "SQL thread 80% on CPU, 8% waiting for a CPU (last 10 s): CPU-bound, prefetch cannot help"),
    (stall(FLUSH), "SQL thread 60% waiting on page flushes and commits, 20% on CPU (last 10 s):"
                   " see lagctl advise"),
    (stall(LOCKS), "SQL thread 70% waiting on locks, commits or other threads, 20% on CPU (last 10 s):"
                   " prefetch cannot help"),
    (stall(SLEEPING, busy=False), "SQL thread idle: the replica is caught up"),
    (stall({}, threads=()), "SQL thread not running: nothing to measure"),
    (stall({}, threads=(), note=NO_GRANT), "SQL thread not measured: needs the PROCESS grant"
                                           " (fix: GRANT PROCESS ON *.* TO 'lagd'@'localhost';)"),
]


@pytest.mark.parametrize(("view", "line"), STALL_LINES,
                         ids=["reads", "reads-no-cpu", "cpu", "flush", "locks", "idle", "stopped",
                              "no-grant"])
def test_sql_thread_line_for_each_verdict(view: StallView, line: str) -> None:
    doc = dict(load("lagging"), stall=as_json_part(view))
    origin = Origin("daemon", "http://127.0.0.1:9904")
    code, verdict_line = verdict(doc, 60, 300)
    assert line in render_plain(screen_rows(doc, origin), origin, code, verdict_line).splitlines()


def test_sql_thread_line_without_the_daemon() -> None:
    doc = load("lagging")
    origin = Origin("replica", "http://127.0.0.1:9904", "connection refused")
    text = render_plain(screen_rows(doc, origin), origin, OK, "OK")
    assert "SQL thread not measured: the daemon measures it and is not reachable" in text


def as_json_part(view: StallView) -> Any:
    return json.loads(json.dumps(_plain(view)))


@pytest.mark.parametrize(("note", "shown"), [
    (None, False),
    ("15 probe sessions of the 32 configured: 120 of max_connections 151 in use by other clients,"
     " 16 kept free for them", True),
])
def test_fewer_probe_connections_than_configured_are_said_with_why(note: str | None, shown: bool) -> None:
    doc = load("lagging")
    doc["prefetch"]["connections_note"] = note
    origin = Origin("daemon", "http://127.0.0.1:9904")
    code, line = verdict(doc, 60, 300)
    text = render_plain(screen_rows(doc, origin), origin, code, line)
    assert ("fewer connections: 15 probe sessions of the 32 configured" in text) is shown
