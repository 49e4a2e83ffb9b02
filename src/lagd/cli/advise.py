"""``lagctl advise``: the advisor's view, from the daemon or, failing that, the replica.

From the daemon (``GET <status url>/status``, the ``advisor`` part): the big
transactions coming in the relay log with the stall each will cause and how
to split it, then the settings advice that fires, with its caveat. When the
daemon cannot be reached (or its advisor is off), lagctl connects to the
replica itself as the configured account, reads its settings and runs the
same rules; it has no look-ahead then, and says so on the first line.

Rich output on a terminal, plain lines when piped; ``--json`` prints the
advisor dict (the daemon's, with ``via`` added). Errors are one line on
stderr: exit 2 for usage and configuration, 1 when neither the daemon nor
the replica can be reached.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from lagd.advisor import AdvisorError, SplitLimits, status_deltas
from lagd.advisor import advise as run_rules
from lagd.advisor.runtime import advice_dicts, gather_replica
from lagd.cli.doctor import connect
from lagd.config import DEFAULT_CONFIG_PATH, ConfigError, CredentialError, Settings, load_settings
from lagd.errors import LagdError
from lagd.mysql.errors import DatabaseError
from lagd.mysql.replica import fetch_replica_status

__all__ = ["advise", "fetch_advisor", "replica_advice"]

_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


class _Unreachable(Exception):
    """The daemon did not give its advisor view; the text says why."""


def _fail(message: str, code: int) -> click.exceptions.Exit:
    click.echo(f"lagctl: error: {message}", err=True)
    return click.exceptions.Exit(code)


# -- the daemon ---------------------------------------------------------------


def fetch_advisor(url: str, timeout: float) -> dict[str, Any]:
    """The advisor part of the daemon's /status; raises _Unreachable with the reason."""
    # No proxy: the daemon listens on loopback, and a proxy from the environment
    # would answer for it (or refuse) instead.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/status", timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        raise _Unreachable(f"HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise _Unreachable(str(e.reason)) from None
    except (TimeoutError, OSError) as e:
        raise _Unreachable(str(e) or type(e).__name__) from None
    try:
        status = json.loads(body)
    except ValueError:
        raise _Unreachable("/status did not answer JSON") from None
    advisor = status.get("advisor") if isinstance(status, dict) else None
    if not isinstance(advisor, dict):
        raise _Unreachable("/status has no advisor part")
    if not advisor.get("enabled", True):
        raise _Unreachable(f"its advisor is off ({advisor.get('reason') or 'advisor.enabled is false'})")
    return advisor


# -- the replica ----------------------------------------------------------------


def _endpoint(s: Settings) -> str:
    r = s.replica
    return r.socket or f"{r.host}:{r.port}"


def _connect(s: Settings) -> Any:
    """lagd's own account on the replica, hardened like every lagd session
    (CredentialError when the password cannot be read, DatabaseError when the
    server cannot be reached)."""
    return connect(s.replica)


def replica_advice(conn: Any, s: Settings, window: float = 0.0) -> dict[str, Any]:
    """The rules over the replica's settings, in the shape of the daemon's advisor dict.

    ``window`` > 0 reads the status twice that many seconds apart, for the
    rules that judge counters growing. Lag comes from Seconds_Behind_Master;
    free space in the load tmpdir only when the replica is on this host.
    """
    server, free = gather_replica(conn)
    facts: dict[str, int | bool | None] = {}
    notes = ["no look-ahead: lagctl does not read the relay log, so coming big transactions are unknown"]
    if window > 0:
        time.sleep(window)
        after, free = gather_replica(conn)
        facts.update(status_deltas(server, after))
        server = after
    r = s.replica
    if r.socket or r.host in _LOCAL_HOSTS:
        facts["load_tmpdir_free_bytes"] = free
    else:
        notes.append("the replica is not on this host: free space in its load tmpdir is not read here")
    try:
        sbm = fetch_replica_status(conn, r.channel, server.flavor).seconds_behind
    except LagdError as e:
        notes.append(f"lag unknown: {e}")
        sbm = None
    if sbm is not None:
        facts["lagging"] = sbm > s.advisor.lag_budget_seconds
    verdicts = run_rules(server.with_facts(**facts))
    limits = SplitLimits.from_settings(None, server)
    return {
        "enabled": True, "reason": None,
        "lag_budget_seconds": s.advisor.lag_budget_seconds, "headroom": s.advisor.headroom,
        "upcoming": None, "upcoming_total": None, "large_transactions_seen": None,
        "lookahead": {"live": False, "reason": notes[0]},
        "advice": advice_dicts(verdicts), "checked_at": time.time(), "error": None,
        "limits": [{"name": n, "bytes": b, "hard": h} for n, b, h in limits.bounds()],
        "apply_rate": None, "seconds_behind": sbm, "server": str(server.flavor), "notes": notes,
    }


# -- output -------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _secs(x: Any) -> str:
    v = _num(x)
    if v is None:
        return "unknown"
    return f"{v:,.1f} s" if v < 100 else f"{v:,.0f} s"


def _size(x: Any) -> str:
    v = _num(x)
    if v is None:
        return "? bytes"
    return f"{v / 2**20:,.1f} MiB" if v >= 2**20 else f"{v:,.0f} bytes"


def _header(via: str, url: str, daemon_error: str | None, a: Mapping[str, Any], endpoint: str) -> str:
    if via == "daemon":
        checked = _num(a.get("checked_at"))
        when = (f"settings checked {time.time() - checked:,.0f} s ago" if checked
                else "settings not checked yet")
        return f"lagd advisor, from the daemon at {url} ({when})"
    return (f"No look-ahead: the lagd daemon at {url} is not usable ({daemon_error}); advice from the "
            f"replica {endpoint}'s settings only, coming big transactions unknown")


def _transaction_title(i: int, u: Mapping[str, Any]) -> str:
    where = f"gtid {u['gtid']}" if u.get("gtid") else f"relay {u.get('relay_start')}"
    rows = f"{u.get('rows') or 0:,} {'file lines' if u.get('rows_are_file_lines') else 'rows'}"
    tables = ", ".join(u.get("tables") or []) or "unknown tables"
    state = []
    if u.get("in_progress"):
        state.append("still being received")
    if u.get("applying"):
        state.append("being applied now")
    tail = f" ({', '.join(state)})" if state else ""
    return f"{i}. {u.get('kind')}, {where}: {rows}, {_size(u.get('bytes'))} on {tables}{tail}"


def _transaction_body(u: Mapping[str, Any]) -> list[str]:
    stall = f"estimated stall: {_secs(u.get('estimated_seconds'))} ({u.get('estimate_basis')})"
    if u.get("applying") and u.get("applying_since") is not None:
        left = u.get("remaining_seconds")
        stall += (f"; about {_secs(left)} left" if left is not None
                  else "; it has run past the estimate, so what is left is unknown")
    lines = [stall,
             f"kind: {u.get('kind_reason')}"]
    split = u.get("split")
    if isinstance(split, Mapping) and split.get("text"):
        # The text starts with the transaction's one-line description, shown above.
        lines += str(split["text"]).splitlines()[1:]
    return lines


def _upcoming_heading(a: Mapping[str, Any]) -> str:
    up = a.get("upcoming")
    if up is None:
        la = a.get("lookahead")
        why = la.get("reason") if isinstance(la, Mapping) else None
        return f"Coming big transactions: unknown ({why or 'no look-ahead'})"
    if not up:
        return "Coming big transactions: none"
    total = a.get("upcoming_total") or len(up)
    more = f", the {len(up)} biggest shown" if total > len(up) else ""
    return f"Coming big transactions: {total}{more}, biggest first"


def _advice_heading(a: Mapping[str, Any]) -> str:
    advice = a.get("advice")
    if advice is None:
        err = a.get("error")
        return "Settings advice: not checked yet" + (f" (last attempt: {err})" if err else "")
    fired = sum(1 for x in advice if x.get("fired"))
    heading = f"Settings advice: {fired} of {len(advice)} rules fire"
    if a.get("error"):
        heading += f" (as of the last good check; the latest failed: {a['error']})"
    return heading


def _rate_line(a: Mapping[str, Any]) -> str | None:
    r = a.get("apply_rate")
    if not isinstance(r, Mapping):
        return "Apply rate: not learned yet" if a.get("upcoming") is not None else None
    rows = _num(r.get("rows_per_second"))
    rows_text = f"{rows:,.0f} rows/s, " if rows is not None else ""
    bps = _num(r.get("bytes_per_second")) or 0.0
    return (f"Apply rate: {rows_text}{_size(bps)}/s ({r.get('scope')}, "
            f"over {_secs(r.get('observed_seconds'))} of apply)")


def _shown_advice(a: Mapping[str, Any], show_all: bool) -> list[Mapping[str, Any]]:
    advice = a.get("advice") or []
    return [x for x in advice if isinstance(x, Mapping) and (show_all or x.get("fired"))]


def _plain(header: str, a: Mapping[str, Any], notes: Sequence[str], show_all: bool) -> list[str]:
    out = [header]
    out += [f"note: {n}" for n in notes]
    rate = _rate_line(a)
    if rate:
        out.append(rate)
    out.append(_upcoming_heading(a))
    for i, u in enumerate(a.get("upcoming") or [], 1):
        out.append(f"  {_transaction_title(i, u)}")
        out += [f"     {line}" for line in _transaction_body(u)]
    out.append(_advice_heading(a))
    for x in _shown_advice(a, show_all):
        if x.get("fired"):
            out.append(f"  [{x.get('severity')}] {x.get('rule')}: {x.get('advice')}")
            out.append(f"     why: {x.get('reason')}")
            if x.get("caveat"):
                out.append(f"     caveat: {x.get('caveat')}")
        else:
            out.append(f"  [silent] {x.get('rule')}: {x.get('reason')}")
    return out


def _rich(header: str, a: Mapping[str, Any], notes: Sequence[str], show_all: bool) -> None:
    from rich.console import Console, Group  # noqa: PLC0415 - only for a terminal
    from rich.panel import Panel  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    console = Console(highlight=False)
    console.print(Text(header, style="bold"))
    for n in notes:
        console.print(Text(f"note: {n}", style="dim"))
    rate = _rate_line(a)
    if rate:
        console.print(Text(rate))
    console.print()
    console.print(Text(_upcoming_heading(a), style="bold"))
    for i, u in enumerate(a.get("upcoming") or [], 1):
        split = u.get("split") if isinstance(u.get("split"), Mapping) else {}
        style = "red" if split.get("needed") else "green" if split.get("needed") is False else "yellow"
        body = Group(*(Text(line) for line in _transaction_body(u)))
        console.print(Panel(body, title=Text(_transaction_title(i, u)), title_align="left",
                            border_style=style))
    console.print()
    console.print(Text(_advice_heading(a), style="bold"))
    for x in _shown_advice(a, show_all):
        sev = str(x.get("severity"))
        if x.get("fired"):
            parts = [Text(str(x.get("advice"))), Text(f"why: {x.get('reason')}", style="dim")]
            if x.get("caveat"):
                parts.append(Text(f"caveat: {x.get('caveat')}", style="italic"))
            console.print(Panel(Group(*parts), title=Text(f"{sev}: {x.get('rule')}"), title_align="left",
                                border_style=_SEVERITY_STYLE.get(sev, "white")))
        else:
            console.print(Text(f"  silent {x.get('rule')}: {x.get('reason')}", style="dim"))


# -- the command ----------------------------------------------------------------------


@click.command("advise")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"lagd's configuration (default: {DEFAULT_CONFIG_PATH} if it exists, else the packaged "
                   "defaults): where the daemon listens, and the replica to read when it does not answer.")
@click.option("--url", default=None,
              help="The daemon's base URL, e.g. http://127.0.0.1:9904 (default: from the configuration).")
@click.option("--json", "as_json", is_flag=True, help="Print the advisor's data as JSON.")
@click.option("--all", "show_all", is_flag=True, help="Also list the rules that do not fire, with why.")
@click.option("--timeout", type=click.FloatRange(min=0.1, max=60), default=3.0, show_default=True,
              help="Seconds to wait for the daemon.")
@click.option("--window", type=click.FloatRange(min=0, max=600), default=0.0, show_default=True,
              help="Without the daemon: read the replica's status twice this many seconds apart, for the "
                   "rules that judge counters growing (redo log waits, buffer-pool misses).")
def advise(config_path: Path | None, url: str | None, as_json: bool, show_all: bool, timeout: float,
                   window: float) -> None:
    """Big transactions coming, their stall and how to split them; settings advice with caveats.

    Asks the daemon; when it does not answer, reads the replica's settings
    itself (no look-ahead then).
    """
    if url is not None and not url.startswith(("http://", "https://")):
        raise click.BadParameter("must start with http:// or https://", param_hint="--url")
    path = config_path if config_path is not None else (
        DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None)
    try:
        settings = load_settings(path)
    except ConfigError as e:
        raise _fail(f"{e.source}: {'; '.join(e.problems)}", 2) from None
    url = (url or settings.status_url()).rstrip("/")

    daemon_error: str | None = None
    try:
        advisor = fetch_advisor(url, timeout)
        via = "daemon"
    except _Unreachable as e:
        daemon_error = str(e)
        via = "replica"
        advisor = _from_replica(settings, url, daemon_error, window)

    if as_json:
        out = {**advisor, "via": via, "daemon_url": url, "daemon_error": daemon_error}
        click.echo(json.dumps(out, indent=1, allow_nan=False, default=str))
        return
    header = _header(via, url, daemon_error, advisor, _endpoint(settings))
    notes = [str(n) for n in advisor.get("notes") or []][1:] if via == "replica" else []
    if _terminal():
        _rich(header, advisor, notes, show_all)
    else:
        click.echo("\n".join(_plain(header, advisor, notes, show_all)))


def _terminal() -> bool:
    return sys.stdout.isatty()


def _from_replica(settings: Settings, url: str, daemon_error: str, window: float) -> dict[str, Any]:
    where = _endpoint(settings)
    prefix = f"the lagd daemon at {url} is not usable ({daemon_error}), and"
    try:
        conn = _connect(settings)
    except CredentialError as e:
        raise _fail(f"{prefix} the replica password cannot be read: {e}", 2) from None
    except DatabaseError as e:
        raise _fail(f"{prefix} the replica {where} cannot be reached: {_mysql_error(e)}", 1) from None
    try:
        return replica_advice(conn, settings, window)
    except (AdvisorError, LagdError) as e:
        raise _fail(f"{prefix} reading the replica {where}'s settings failed: {_mysql_error(e)}", 1) from None
    finally:
        conn.close()


def _mysql_error(e: BaseException) -> str:
    if isinstance(e, DatabaseError):
        return f"{e.detail} ({e.code})" if e.code else e.detail
    return str(e)
