"""``lagctl status``: one screen for the on-call engineer, and a Nagios check.

It reads the daemon's ``GET /status`` (``Snapshot.to_json()``). When the
daemon does not answer it asks the replica itself (replica status, plus the
heartbeat table when one is configured) through the same ``LagTracker`` the
daemon uses, so the screen has the same shape and the same rules: a lag that
cannot be measured is "missing" with its reason, never 0. The first line then
says so, because the numbers lagd adds (event time, backlog, averages,
prefetch, advice) need the daemon.

The last line is the verdict, made by :func:`verdict`, a pure function of the
snapshot and the thresholds, and the exit code is Nagios's: 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN. Mistakes (a bad option, an invalid config file) also
exit 3: a monitoring system must not read them as "the replica is critical".
"""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import click

from lagd import __version__
from lagd.config import DEFAULT_CONFIG_PATH, ConfigError, Settings, load_settings

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
LABELS = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}

HTTP_TIMEOUT = 3.0  # seconds: the daemon answers from memory; longer means it is hung
_MAX_LINE = 300  # a Last_SQL_Error can be long; Nagios keeps only so much of a line


# --- the verdict (pure) ---------------------------------------------------------------


def verdict(snapshot: Mapping[str, Any] | None, warn: float, crit: float) -> tuple[int, str]:
    """The lag verdict, raised to WARNING when the daemon refused a reload:
    it runs on a config that is not the one on disk, which on-call must know
    even while replication is fine."""
    code, line = _lag_verdict(snapshot, warn, crit)
    refused = _map(snapshot).get("config_error") if snapshot else None
    if refused and code == OK:
        return WARNING, _line(WARNING, f"{line.removeprefix('OK: ')}; {refused}")
    if refused:
        return code, _line(code, f"{line.split(': ', 1)[-1]}; {refused}")
    return code, line


def _lag_verdict(snapshot: Mapping[str, Any] | None, warn: float, crit: float) -> tuple[int, str]:
    """The Nagios code and the one-line verdict for a ``/status`` document.

    Precedence, first match wins: no lag reading, or a reading older than the
    daemon's ``lag.stale_after`` -> UNKNOWN (nothing current to judge);
    state ``error``/``stopped`` -> CRITICAL; lag >= ``crit`` -> CRITICAL;
    ``io_stopped`` -> WARNING; state ``unknown`` or lag missing -> UNKNOWN;
    lag >= ``warn`` -> WARNING; else OK.
    """
    if not snapshot:
        return UNKNOWN, "UNKNOWN: no status to judge"
    lag = snapshot.get("lag")
    if not isinstance(lag, Mapping):
        why = snapshot.get("status_error") or "the daemon has not measured lag yet"
        return UNKNOWN, _line(UNKNOWN, f"no lag reading yet ({why})")
    age = _age(snapshot, lag)
    limit = _stale_limit(snapshot)
    if age is not None and age > limit:
        return UNKNOWN, _line(
            UNKNOWN,
            f"the last lag reading is {_secs(age)} old (stale after {_secs(limit)}): lagd's lag "
            "loop is stuck; see journalctl -u lagd",
        )
    state = str(lag.get("state") or "unknown")
    value = _num(lag.get("lag"))
    method = lag.get("lag_method")
    status = snapshot.get("status") if isinstance(snapshot.get("status"), Mapping) else None
    lag_text = _lag_text(value, method, warn, crit)
    state_text = _state_text(state, lag, status)

    if state in ("error", "stopped"):
        return CRITICAL, _line(CRITICAL, f"{lag_text}, {state_text}")
    if value is not None and value >= crit:
        return CRITICAL, _line(CRITICAL, f"{lag_text}, {state_text}")
    if state == "io_stopped":
        return WARNING, _line(WARNING, f"{lag_text}, {state_text}")
    if state == "unknown":
        return UNKNOWN, _line(UNKNOWN, f"{lag_text}, {state_text}")
    if value is None:
        return UNKNOWN, _line(UNKNOWN, f"{lag_text}: {lag.get('lag_reason') or 'no method has a value'}")
    if value >= warn:
        return WARNING, _line(WARNING, f"{lag_text}, {state_text}")
    return OK, _line(OK, f"{lag_text}, {state_text}")


def _line(code: int, text: str) -> str:
    line = f"{LABELS[code]}: {' '.join(text.split())}"
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 3] + "..."


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if value == "inf":
        return math.inf
    if isinstance(value, int | float):
        return float(value)
    return None


def _age(snapshot: Mapping[str, Any], lag: Mapping[str, Any]) -> float | None:
    taken, at = _num(snapshot.get("taken_at")), _num(lag.get("at"))
    return None if taken is None or at is None else max(0.0, taken - at)


def _stale_limit(snapshot: Mapping[str, Any]) -> float:
    lag_settings = _map(_map(snapshot.get("settings")).get("lag"))
    stale_after = _num(lag_settings.get("stale_after")) or 10.0  # the daemon's default (defaults.toml)
    poll = _num(lag_settings.get("poll_interval")) or 1.0
    # A few missed polls are a slow server, not a stuck daemon.
    return max(stale_after, 3 * poll)


def _lag_text(value: float | None, method: Any, warn: float, crit: float) -> str:
    if value is None:
        return "lag unknown"
    by = f" by {method}" if method else ""
    if value >= crit:
        bound = f">= {crit:g} s"
    elif value >= warn:
        bound = f">= {warn:g} s"
    else:
        bound = f"< {warn:g} s"
    return f"lag {_secs(value, human=False)}{by} ({bound})"


def _state_text(state: str, lag: Mapping[str, Any], status: Mapping[str, Any] | None) -> str:
    reason = str(lag.get("state_reason") or "")
    if state == "error" and status is not None:
        if not status.get("sql_running") and status.get("last_sql_errno"):
            return (f"SQL thread stopped: Last_SQL_Error {status['last_sql_errno']}: "
                    f"{status.get('last_sql_error') or ''}").rstrip(": ")
        if status.get("last_io_errno"):
            return (f"IO thread stopped: Last_IO_Error {status['last_io_errno']}: "
                    f"{status.get('last_io_error') or ''}").rstrip(": ")
    if state in ("error", "stopped", "io_stopped", "unknown"):
        return reason or state
    if state == "applying":
        eta = _num(lag.get("eta"))
        if eta is not None and math.isinf(eta):
            return "applying, not catching up at the current speed"
        if eta:
            return f"applying, caught up in about {_secs(eta)}"
        return "applying"
    if state == "idle":
        return "idle (applied everything received)"
    return reason or state


# --- formatting -------------------------------------------------------------------------


def _secs(x: float | None, *, human: bool = True) -> str:
    """Seconds as people read them: 0.4 s, 412 s (7 min); ``human=False`` leaves out the minutes."""
    if x is None:
        return "?"
    if math.isinf(x):
        return "inf"
    # One decimal below 100 s, so 59.9 s does not read as "60 s (< 60 s)".
    text = f"{x:.1f} s" if abs(x) < 100 else f"{x:.0f} s"
    if not human:
        return text
    if abs(x) >= 3600:
        text += f" ({x / 3600:.1f} h)"
    elif abs(x) >= 120:
        text += f" ({x / 60:.0f} min)"
    return text


def _bytes(n: Any) -> str:
    v = _num(n)
    if v is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def _count(n: Any) -> str:
    v = _num(n)
    return "?" if v is None else f"{v:,.0f}"


# --- the screen -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the screen: a label (empty on continuation lines), text and a tone."""

    label: str
    text: str
    tone: str = ""  # "", "ok", "warn", "crit", "dim"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the snapshot came from."""

    source: str  # "daemon" or "replica"
    url: str
    daemon_error: str | None = None  # why the daemon did not answer

    def header(self) -> str | None:
        if self.source == "daemon":
            return None
        return (f"lagd daemon not reachable at {self.url} ({self.daemon_error}); "
                "showing the replica's own status")


_CODE_TONE = {OK: "ok", WARNING: "warn", CRITICAL: "crit", UNKNOWN: "warn"}
_STATE_TONE = {"idle": "ok", "applying": "", "io_stopped": "warn", "stopped": "crit", "error": "crit",
               "unknown": "warn"}


def screen_rows(snap: Mapping[str, Any], origin: Origin) -> list[Row]:
    """Everything but the first (origin) and last (verdict) lines."""
    rows: list[Row] = []
    status = snap.get("status") if isinstance(snap.get("status"), Mapping) else None
    lag = snap.get("lag") if isinstance(snap.get("lag"), Mapping) else None
    rows += _replica_rows(snap, status)
    rows += _fault_rows(snap)
    if snap.get("config_error"):
        rows.append(Row("config", str(snap["config_error"]), "warn"))
    rows += _lag_rows(snap, lag, origin)
    rows += _progress_rows(lag, origin)
    rows += _stall_rows(snap, origin)
    rows += _prefetch_rows(snap, origin)
    rows += _advisor_rows(snap.get("advisor"), origin)
    return rows


def _replica_rows(snap: Mapping[str, Any], status: Mapping[str, Any] | None) -> list[Row]:
    rep = _map(snap.get("replica"))
    channel = str((status or {}).get("channel", rep.get("channel", "")) or "")
    channel_text = f"channel {channel!r}" if channel else "default channel"
    flavor = rep.get("flavor") or "flavor not known yet"
    who = f"{rep.get('endpoint', '?')} ({flavor}) as {rep.get('user', '?')}"
    rows = [Row("replica", f"{who}, {channel_text}")]
    if status is None:
        why = snap.get("status_error") or "not polled yet"
        rows.append(Row("source", f"no replica status: {why}", "crit"))
        return rows
    gtid = ""
    if status.get("using_gtid"):
        gtid = f", GTID {status['using_gtid']}"
    elif status.get("auto_position") is not None:
        gtid = ", GTID auto-position" if status["auto_position"] else ", file/position"
    rows.append(Row("source", f"{status.get('source_host')}:{status.get('source_port')} "
                              f"(server_id {status.get('source_server_id')}){gtid}"))
    io = str(status.get("io_state") or "?")
    io_tone = "ok" if io == "running" else "warn" if io == "connecting" else "crit"
    rows.append(Row("IO thread", f"{io}: {status.get('io_thread_state') or '-'}", io_tone))
    sql_on = bool(status.get("sql_running"))
    rows.append(Row("SQL thread", f"{'running' if sql_on else 'stopped'}: {status.get('sql_state') or '-'}",
                    "ok" if sql_on else "crit"))
    for thread, key in (("IO", "io"), ("SQL", "sql")):
        errno = status.get(f"last_{key}_errno")
        if errno:
            message = status.get(f"last_{key}_error") or ""
            rows.append(Row(f"{thread} error", f"Last_{thread}_Error {errno}: {message}", "crit"))
    if not status.get("last_io_errno") and not status.get("last_sql_errno"):
        rows.append(Row("errors", "none"))
    if status.get("sql_delay"):
        rows.append(Row("delay", f"SQL_Delay {status['sql_delay']} s (intended; included in the lag)"))
    return rows


def _fault_rows(snap: Mapping[str, Any]) -> list[Row]:
    """Each subsystem that fails now: its cause, the fix, and for how long."""
    rows: list[Row] = []
    taken_at = _num(snap.get("taken_at"))
    for h in snap.get("health") or ():
        if not isinstance(h, Mapping) or h.get("up") is not False or h.get("reason") == "not run yet":
            continue
        reason, fix = str(h.get("reason") or "failing"), h.get("fix")
        since = _num(h.get("failing_since"))
        text = f"{h.get('name', '?')}: {reason}"
        if fix and str(fix) not in reason:
            text += f" (fix: {fix})"
        if since is not None and taken_at is not None:
            text += f"; for {_secs(max(0.0, taken_at - since))}"
        rows.append(Row("fault" if not rows else "", text, "warn"))
    return rows


def _method_row(m: Mapping[str, Any], taken_at: float | None) -> Row:
    name = str(m.get("method", "?"))
    seconds = _num(m.get("seconds"))
    if seconds is not None:
        note = " (clamped: clock skew)" if m.get("clamped") else ""
        return Row("", f"{name:<11}{_secs(seconds, human=False):<9} {m.get('reason', '')}{note}")
    # Missing is never shown as 0: the reason says why there is no value.
    last = _num(m.get("last_success"))
    when = ""
    if last is not None and taken_at is not None:
        when = f"; last value {_secs(max(0.0, taken_at - last))} ago"
    stale = " (stale)" if m.get("stale") else ""
    return Row("", f"{name:<11}{'missing':<9} {m.get('reason', '')}{when}{stale}",
               "warn" if m.get("stale") else "dim")


def _lag_rows(snap: Mapping[str, Any], lag: Mapping[str, Any] | None, origin: Origin) -> list[Row]:
    if lag is None:
        return [Row("lag", "no reading yet", "warn")]
    taken_at = _num(snap.get("taken_at"))
    rows = [Row("lag", f"{'method':<11}{'value':<9} why")]
    for name in ("heartbeat", "event_time", "sbm"):
        m = lag.get(name)
        if isinstance(m, Mapping):
            rows.append(_method_row(m, taken_at))
    value = _num(lag.get("lag"))
    if value is None:
        rows.append(Row("", f"=> lag unknown: {lag.get('lag_reason', '')}", "warn"))
    else:
        rows.append(Row("", f"=> {_secs(value)} by {lag.get('lag_reason', lag.get('lag_method'))}"))
    if origin.source == "daemon":
        parts = []
        for a in lag.get("averages") or ():
            w, s = _num(a.get("window")), _num(a.get("seconds"))
            label = f"{(w or 0) / 60:.0f} min"
            parts.append(f"{label} {_secs(s, human=False) if s is not None else 'n/a'}")
        rows.append(Row("averages", ", ".join(parts) or "none yet"))
    else:
        rows.append(Row("averages", "need the daemon (it keeps the history)", "dim"))
    if lag.get("clock_skew"):
        off = lag.get("clock_offset") or {}
        rows.append(Row("clock", f"skew: {off.get('reason', 'a value was clamped at 0')}", "warn"))
    state = str(lag.get("state", "unknown"))
    rows.append(Row("state", f"{state}: {lag.get('state_reason', '')}", _STATE_TONE.get(state, "")))
    return rows


def _progress_rows(lag: Mapping[str, Any] | None, origin: Origin) -> list[Row]:
    if lag is None:
        return []
    rows = []
    b = lag.get("backlog")
    if isinstance(b, Mapping):
        oldest = _num(b.get("oldest_age"))
        age = f"; oldest committed {_secs(oldest)} ago" if oldest is not None else ""
        rows.append(Row("backlog", f"{_count(b.get('transactions'))} transactions, {_bytes(b.get('bytes'))}, "
                                   f"{_count(b.get('rows'))} rows{age}"))
    else:
        why = ("needs the daemon (it reads the relay log)" if origin.source == "replica"
               else "unknown: relay-log reader not available")
        rows.append(Row("backlog", why, "dim"))
    r = _map(lag.get("rates"))
    speed = _num(r.get("speed"))
    if speed is None:
        rows.append(Row("apply", "not measured yet (needs two readings of the daemon)", "dim"))
    else:
        tps, rps = _num(r.get("transactions_per_second")), _num(r.get("rows_per_second"))
        pairs = ((tps, "trx/s"), (rps, "rows/s"))
        extra = "".join(f", {v:,.0f} {unit}" for v, unit in pairs if v is not None)
        rows.append(Row("apply", f"{speed:.2f} source-seconds per second{extra}",
                        "warn" if speed <= 1 and _num(lag.get("lag")) else ""))
    eta = _num(lag.get("eta"))
    reason = lag.get("eta_reason") or ""
    if eta is None:
        rows.append(Row("ETA", f"unknown: {reason}", "dim"))
    elif math.isinf(eta):
        rows.append(Row("ETA", f"never at the current speed: {reason}", "warn"))
    elif eta == 0:
        rows.append(Row("ETA", f"0 s: {reason}" if reason else "0 s (caught up)", "ok"))
    else:
        rows.append(Row("ETA", f"{_secs(eta)}: {reason}"))
    return rows


def _stall_rows(snap: Mapping[str, Any], origin: Origin) -> list[Row]:
    """Where the SQL thread's time goes, in one line (``StallView.summary``)."""
    if origin.source == "replica":
        return [Row("SQL thread", "not measured: the daemon measures it and is not reachable", "dim")]
    v = snap.get("stall")
    if not isinstance(v, Mapping):
        return []  # a daemon too old to measure it
    kind = str(v.get("verdict"))
    tone = "ok" if v.get("prefetch_can_help") else ("warn" if kind == "unknown" and v.get("threads_note")
                                                    else "")
    return [Row("SQL thread", str(v.get("summary", "")).removeprefix("SQL thread: "), tone)]


def _prefetch_rows(snap: Mapping[str, Any], origin: Origin) -> list[Row]:
    p = snap.get("prefetch")
    if not isinstance(p, Mapping):
        why = snap.get("prefetch_off_reason")
        if origin.source == "replica":
            why = "runs inside the daemon, which is not reachable"
        return [Row("prefetch", f"off: {why or 'not started yet'}", "warn")]
    state = str(p.get("state", "?"))
    tone = {"active": "ok", "idle": "ok", "paused": "warn", "backed_off": "warn", "off": "warn"}
    rows = [Row("prefetch", f"{state}: {p.get('reason', '')}", tone.get(state, ""))]
    lead = (f"lead {_count(p.get('lead_transactions'))} transactions, {_bytes(p.get('lead_bytes'))}, "
            f"{_secs(_num(p.get('lead_seconds')))} (target {_count(p.get('target_transactions'))}); "
            f"{_count(p.get('connections'))} connections")
    rows.append(Row("", lead))
    if p.get("connections_note"):
        rows.append(Row("", f"fewer connections: {p['connections_note']}", "warn"))
    c = _map(p.get("counters"))
    in_time, late = _num(c.get("in_time")) or 0, _num(c.get("late")) or 0
    if in_time + late:
        ratio = f"in time {in_time / (in_time + late):.0%} ({in_time:,.0f} of {in_time + late:,.0f} probes)"
    else:
        ratio = "in time: no probe finished yet"
    benefit = _num(p.get("benefit"))
    gain = f"benefit x{benefit:.2f} apply rate" if benefit is not None else "benefit not measured yet"
    rows.append(Row("", f"{ratio}; {gain}"))
    skipped = _map(c.get("skipped"))
    top = sorted(((n, str(r)) for r, v in skipped.items() if (n := _num(v))), reverse=True)[:SKIPPED_SHOWN]
    if top:
        # The reasons are the label values of lagd_prefetch_skipped_total (docs/metrics.md):
        # what prefetch left to the SQL thread, most first.
        more = f" and {len(skipped) - len(top)} more reasons" if len(skipped) > len(top) else ""
        rows.append(Row("", "not probed: " + ", ".join(f"{r} {n:,.0f}" for n, r in top) + more))
    return rows


SKIPPED_SHOWN = 4


_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _advisor_rows(advisor: Any, origin: Origin) -> list[Row]:
    if not isinstance(advisor, Mapping):
        why = ("needs the daemon" if origin.source == "replica"
               else "no advice yet (or advisor.enabled = false)")
        return [Row("advisor", why, "dim")]
    if advisor.get("enabled") is False:
        return [Row("advisor", f"off: {advisor.get('reason') or 'advisor.enabled is false'}", "dim")]
    rows: list[Row] = []
    upcoming = advisor.get("upcoming")
    if upcoming is None:
        # Not known is not "none coming": the look-ahead reader has not reported.
        why = _map(advisor.get("lookahead")).get("reason") or "the look-ahead reader has not reported yet"
        rows.append(Row("coming", f"not known: {why}", "dim"))
    else:
        items = [u for u in upcoming if isinstance(u, Mapping)]
        for i, u in enumerate(items[:5]):
            est = _num(u.get("estimated_seconds"))
            unit = "rows (file lines)" if u.get("rows_are_file_lines") else "rows"
            where = ""
            if u.get("applying"):
                where = " (being applied now)"
            elif u.get("in_progress"):
                where = " (still arriving)"
            eta = f", about {_secs(est)} to apply" if est is not None else ""
            size = f"{_count(u.get('rows'))} {unit}, {_bytes(u.get('bytes'))}"
            text = f"{u.get('kind', 'transaction')}: {size}{eta}{where}"
            rows.append(Row("coming" if i == 0 else "", text, "warn"))
            split = u.get("split")
            if isinstance(split, Mapping) and split.get("text"):
                rows.append(Row("", f"  split: {split['text']}"))
        total = int(_num(advisor.get("upcoming_total")) or len(items))
        if total > 5:
            rows.append(Row("", f"and {total - 5} more big transactions"))
        if not items:
            rows.append(Row("coming", "no big transaction in the relay log"))
    advice = advisor.get("advice")
    if advice is None:
        error = advisor.get("error")
        rows.append(Row("advice", f"settings not checked yet{f': {error}' if error else ''}", "dim"))
        return rows
    fired = [a for a in advice if isinstance(a, Mapping) and a.get("fired")]
    fired.sort(key=lambda a: _SEVERITY_ORDER.get(str(a.get("severity")), 3))
    for i, a in enumerate(fired):
        sev = str(a.get("severity", "info"))
        tone = {"critical": "crit", "warning": "warn"}.get(sev, "")
        text = f"[{sev}] {a.get('rule', '?')}: {a.get('advice', '')}"
        rows.append(Row("advice" if i == 0 else "", text, tone))
        if a.get("caveat"):
            rows.append(Row("", f"  caveat: {a['caveat']}", "dim"))
    if not fired:
        rows.append(Row("advice", "none active"))
    return rows


# --- output -----------------------------------------------------------------------------

_LABEL_WIDTH = 11


def render_plain(rows: Sequence[Row], origin: Origin, code: int, line: str) -> str:
    """The screen as plain text: no colour, no box drawing, easy to grep and mail."""
    out = []
    header = origin.header()
    if header:
        out.append(header)
    for r in rows:
        out.append(f"{r.label:<{_LABEL_WIDTH}}{r.text}".rstrip())
    out.append(line)
    return "\n".join(out) + "\n"


_RICH_STYLE = {"ok": "green", "warn": "yellow", "crit": "bold red", "dim": "dim", "": ""}


def render_rich(rows: Sequence[Row], origin: Origin, code: int, line: str, file: TextIO | None = None,
                *, force_terminal: bool | None = None, width: int | None = None) -> None:
    from rich.console import Console  # noqa: PLC0415 - only a terminal pays for importing rich
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    console = Console(file=file, force_terminal=force_terminal, width=width, highlight=False)
    header = origin.header()
    if header:
        console.print(Text(header, style="bold yellow"))
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for r in rows:
        table.add_row(r.label, Text(r.text, style=_RICH_STYLE.get(r.tone, "")))
    console.print(table)
    console.print(Text(line, style=f"bold {_RICH_STYLE[_CODE_TONE[code]]}".strip()))


# --- getting the snapshot -----------------------------------------------------------------


def status_endpoint(base: str) -> str:
    """``{url}/status`` unless the URL already names it."""
    base = base.rstrip("/")
    return base if base.endswith("/status") else f"{base}/status"


def fetch_daemon(url: str, timeout: float = HTTP_TIMEOUT) -> tuple[dict[str, Any] | None, str | None]:
    """(snapshot, None) from the daemon, or (None, why it did not answer)."""
    # No proxies: lagctl talks to the daemon on this host, whatever http_proxy says.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(status_endpoint(url), timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        return None, f"HTTP {e.code} {e.reason}"
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, ConnectionRefusedError):
            return None, "connection refused"
        if isinstance(reason, TimeoutError):
            return None, f"no answer in {timeout:g} s"
        return None, str(getattr(reason, "strerror", None) or reason)
    except TimeoutError:
        return None, f"no answer in {timeout:g} s"
    except (OSError, ValueError) as e:
        return None, str(e)
    try:
        data = json.loads(body)
    except ValueError:
        return None, "the answer is not JSON; is that URL lagd?"
    if not isinstance(data, dict) or "lag" not in data:
        return None, "the answer is not a lagd /status document; is that URL lagd?"
    return data, None


def _jsonable(value: Any) -> Any:
    # Snapshot.to_json() leaves a few values json cannot write (the raw status row is a mappingproxy).
    def default(v: Any) -> Any:
        if isinstance(v, Mapping):
            return dict(v)
        if isinstance(v, datetime):
            return v.isoformat()
        if isinstance(v, bytes | bytearray):
            return bytes(v).decode("utf-8", "replace")
        return str(v)

    return json.loads(json.dumps(value, default=default))


def replica_snapshot(settings: Settings, config_path: Path | None) -> dict[str, Any]:
    """A snapshot made by asking the replica directly, shaped like the daemon's ``/status``.

    The replica is read by the function the daemon polls with
    (:func:`lagd.daemon.wiring.read_replica`) and judged by the same tracker.
    """
    import asyncio  # noqa: PLC0415 - only the fallback needs these

    from lagd.daemon.state import ReplicaInfo, Snapshot  # noqa: PLC0415
    from lagd.daemon.wiring import read_replica  # noqa: PLC0415
    from lagd.lag import LagTracker  # noqa: PLC0415

    r = settings.replica
    reading = asyncio.run(read_replica(settings))
    lag = LagTracker(stale_after=settings.lag.stale_after).update(reading.inputs())
    flavor = reading.flavor
    snap = Snapshot(
        taken_at=reading.wall, version=__version__, started_at=reading.wall,
        config_path=str(config_path) if config_path else None, config_error=None,
        settings=settings.public_dict(),
        replica=ReplicaInfo(r.socket or f"{r.host}:{r.port}", r.user, r.channel,
                            str(flavor) if flavor else None, None),
        status=reading.status, status_error=reading.status_error, lag=lag, prefetch=None,
        prefetch_off_reason="the daemon is not running; prefetch runs inside it",
        advisor=None, health=(), loop_age=0.0)
    return dict(_jsonable(snap.to_json()))


# --- the command ------------------------------------------------------------------------


class _NagiosCommand(click.Command):
    """A usage mistake exits 3 (UNKNOWN), not click's 2, which Nagios reads as CRITICAL."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            e.exit_code = UNKNOWN  # type: ignore[misc]
            raise


def _fail(message: str) -> click.exceptions.Exit:
    click.echo(f"lagctl status: {message}", err=True)
    return click.exceptions.Exit(UNKNOWN)


def _settings(config_file: Path | None) -> tuple[Settings, Path | None]:
    path = config_file
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    try:
        return load_settings(path), path
    except ConfigError as e:
        # A broken file is exactly when on-call needs the screen (a refused
        # SIGHUP leaves the daemon on its previous config): say so, and go on
        # with the built-in defaults to ask the daemon, which knows its config.
        problems = "; ".join(e.problems)
        click.echo(f"lagctl: {path}: {problems}; using the built-in defaults for lagctl itself "
                   f"(check it with: lagctl config validate {path})", err=True)
        return load_settings(None), None


def _is_terminal() -> bool:
    return sys.stdout.isatty()


@click.command(cls=_NagiosCommand)
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="lagd's config file (default /etc/lagd/lagd.toml when it exists, "
                   "else the packaged defaults).")
@click.option("--url", default=None,
              help="The daemon's base URL (default from status.daemon_url / http.listen).")
@click.option("--warn", type=float, default=None,
              help="Lag in seconds for WARNING (default status.warn_lag_seconds).")
@click.option("--crit", type=float, default=None,
              help="Lag in seconds for CRITICAL (default status.crit_lag_seconds).")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot JSON with a \"verdict\" key.")
@click.option("--watch", type=click.FloatRange(min=0.2), is_flag=False, flag_value=2.0, default=None,
              metavar="[SECONDS]", help="Refresh every SECONDS (default 2) until Ctrl-C.")
def status(config_file: Path | None, url: str | None, warn: float | None, crit: float | None,
           as_json: bool, watch: float | None) -> None:
    """Lag, replica state, backlog, prefetch and advice on one screen; the last line is the verdict.

    Exit codes are Nagios's: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. When the
    daemon does not answer, it asks the replica directly and says so first.
    """
    settings, path = _settings(config_file)
    warn = settings.status.warn_lag_seconds if warn is None else warn
    crit = settings.status.crit_lag_seconds if crit is None else crit
    if not 0 < warn < crit:
        raise _fail(f"--warn {warn:g} must be above 0 and below --crit {crit:g}; "
                    "lower --warn or raise --crit")
    base = (url or settings.status_url()).rstrip("/")
    code = UNKNOWN
    try:
        while True:
            code = _once(settings, path, base, warn, crit, as_json, clear=watch is not None)
            if watch is None:
                break
            time.sleep(watch)
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends: a clean exit, not an error.
        raise click.exceptions.Exit(0) from None
    raise click.exceptions.Exit(code)


def _once(settings: Settings, path: Path | None, base: str, warn: float, crit: float, as_json: bool,
          *, clear: bool) -> int:
    snap, why = fetch_daemon(base)
    if snap is not None:
        origin = Origin("daemon", base)
    else:
        origin = Origin("replica", base, why)
        snap = replica_snapshot(settings, path)
    code, line = verdict(snap, warn, crit)
    if as_json:
        header = origin.header()
        if header:
            click.echo(header, err=True)
        doc = dict(snap)
        doc["verdict"] = {"code": code, "status": LABELS[code], "line": line, "source": origin.source,
                          "url": base, "daemon_error": origin.daemon_error, "warn": warn, "crit": crit}
        click.echo(json.dumps(doc, indent=None if clear else 1, sort_keys=False))
        return code
    rows = screen_rows(snap, origin)
    if _is_terminal():
        if clear:
            click.clear()
        render_rich(rows, origin, code, line)
    else:
        if clear:
            click.echo("")
        click.echo(render_plain(rows, origin, code, line), nl=False)
    return code
