"""``lagctl load FILE --table db.t --source DSN``: a lag-throttled, resumable LOAD DATA on the source.

The file goes in transactions of a chunk size set by the replicas' apply
rate and the lag budget; before each chunk every ``--replica-lagd`` is asked
whether its replica is within the budget, and the load waits while one is
not (or cannot tell). Each chunk commits with its progress row, so after
Ctrl-C, kill -9 or a crash the same command resumes after the last
committed chunk. docs/load.md has the model and the measurements.

Errors the user can fix are one line on stderr with the fix, exit 2;
Ctrl-C exits 130 after saying where a rerun resumes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import click

from lagd.errors import LagdError
from lagd.heartbeat.cli import parse_dsn
from lagd.load.loader import Loader, Options, Tick
from lagd.load.planner import ReplicaRate, resume_threshold
from lagd.load.reader import Dialect, FileFacts, RecordTooLong, scan
from lagd.load.replicas import ReplicaCheck, check, fetch_rate
from lagd.load.sql import DEFAULT_PROGRESS_TABLE, LoadError, LoadSpec, load_statement, parse_table
from lagd.mysql.errors import DatabaseError, Kind
from lagd.mysql.source import SourceLogin, SourceWriter

__all__ = ["load"]

PASSWORD_ENV: Final = "LAGCTL_SOURCE_PASSWORD"  # noqa: S105 - the variable's name
FORMATS: Final = {  # LOAD DATA's own defaults are the TSV ones
    "tsv": Dialect(),
    "csv": Dialect(fields_terminated=b",", enclosed=b'"', optionally=True, escaped=b"\\"),
}
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"', "Z": "\x1a",
                   "b": "\b"}


def unescape(text: str, option: str) -> bytes:
    """``\\t``, ``\\n``, ``\\r\\n``... as the mysql client reads separator options."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise LoadError(f"{option} {text!r}: unknown escape \\{nxt}",
                                fix="use \\t, \\n, \\r, \\0, \\\\, \\' or \\\"")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out).encode("utf-8")


@contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except (LagdError, RecordTooLong) as e:
        click.echo(f"lagctl load: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None


def _dialect(fmt: str, fields: str | None, enclosed: str | None, opt_enclosed: str | None,
             escaped: str | None, lines: str | None, ignore_lines: int) -> Dialect:
    base = FORMATS[fmt]
    if enclosed is not None and opt_enclosed is not None:
        raise LoadError("--fields-enclosed-by and --fields-optionally-enclosed-by both given",
                        fix="give one of them")
    enc, optionally = base.enclosed, base.optionally
    if enclosed is not None:
        enc, optionally = unescape(enclosed, "--fields-enclosed-by"), False
    if opt_enclosed is not None:
        enc, optionally = unescape(opt_enclosed, "--fields-optionally-enclosed-by"), True
    try:
        return Dialect(
            fields_terminated=base.fields_terminated if fields is None
            else unescape(fields, "--fields-terminated-by"),
            enclosed=enc, optionally=optionally,
            escaped=base.escaped if escaped is None else unescape(escaped, "--fields-escaped-by"),
            lines_terminated=base.lines_terminated if lines is None
            else unescape(lines, "--lines-terminated-by"),
            ignore_lines=ignore_lines)
    except ValueError as e:
        raise LoadError(str(e), fix="see LOAD DATA's FIELDS and LINES options") from None


def _password(dsn_password: str | None, password_file: Path | None) -> str:
    if dsn_password is not None:
        return dsn_password
    if password_file is not None:
        try:
            text = password_file.read_text()
        except OSError as e:
            raise LoadError(f"cannot read --password-file {password_file}: {e.strerror}",
                            fix="give a readable file holding the password") from None
        return text.splitlines()[0] if text else ""
    return os.environ.get(PASSWORD_ENV, "")


def _secs(x: float) -> str:
    if x < 90:
        return f"{x:.0f} s"
    return f"{x / 60:.0f} min" if x < 5400 else f"{x / 3600:.1f} h"


class _Line:
    """The progress line: redrawn in place on a terminal, a line every few seconds otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0
        self.last_wait: str | None = None
        self.width = 0

    def __call__(self, t: Tick) -> None:
        pct = 100.0 * t.offset / t.total_bytes if t.total_bytes else 100.0
        rate = t.records_this_run / t.elapsed if t.elapsed > 0 else 0.0
        filled = int(pct / 5)
        bar = "[" + "#" * filled + "." * (20 - filled) + "]"
        parts = [f"{bar} {pct:5.1f}%", f"{t.records:,} rows", f"{rate:,.0f} rows/s"]
        bps = t.bytes_this_run / t.elapsed if t.elapsed > 0 else 0.0
        parts.append(f"ETA {_secs((t.total_bytes - t.offset) / bps)}" if bps > 0 else "ETA ?")
        parts.append(f"chunk {t.chunk_rows:,}")
        parts.append(f"waiting: {t.waiting}" if t.waiting else "loading")
        text = "  ".join(parts)
        now = time.monotonic()
        if self.tty:
            pad = max(0, self.width - len(text))
            click.echo("\r" + text + " " * pad, nl=False, err=True)
            self.width = len(text)
        elif now - self.last_print >= 5 or t.waiting != self.last_wait:
            click.echo(text, err=True)
            self.last_print = now
        self.last_wait = t.waiting

    def end(self) -> None:
        if self.tty and self.width:
            click.echo("", err=True)


@click.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--table", "table_name", required=True, metavar="SCHEMA.TABLE", help="The table to load into.")
@click.option("--source", required=True, metavar="DSN",
              help="The source to load on: mysql://user[:password]@host[:port] or host:port.")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"Read the password from this file unless the DSN has one (else ${PASSWORD_ENV}).")
@click.option("--replica-lagd", "replica_urls", multiple=True, metavar="URL",
              help="A replica's lagd, e.g. http://replica1:9904 (repeat for each replica).")
@click.option("--no-throttle", is_flag=True, help="Load without asking any replica (no --replica-lagd).")
@click.option("--max-lag", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Lag budget in seconds the load may cause on any replica.")
@click.option("--headroom", type=click.FloatRange(min=0.05, max=1.0), default=0.5, show_default=True,
              help="Share of the budget one chunk may take.")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=None,
              help="Fixed rows per transaction instead of the model's (still throttled).")
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), default="tsv", show_default=True,
              help="Separator defaults: tsv is LOAD DATA's own; csv is , optionally enclosed by \".")
@click.option("--fields-terminated-by", default=None, help="FIELDS TERMINATED BY, e.g. '\\t' or ','.")
@click.option("--fields-enclosed-by", default=None, help="FIELDS ENCLOSED BY.")
@click.option("--fields-optionally-enclosed-by", default=None, help="FIELDS OPTIONALLY ENCLOSED BY.")
@click.option("--fields-escaped-by", default=None, help="FIELDS ESCAPED BY ('' for none).")
@click.option("--lines-terminated-by", default=None, help="LINES TERMINATED BY, e.g. '\\r\\n'.")
@click.option("--ignore-lines", type=click.IntRange(min=0), default=0, help="IGNORE n LINES (a header).")
@click.option("--columns", default=None, help="Column list in file order, e.g. 'id,name,@skip'.")
@click.option("--set", "set_clause", default=None, help="SET clause, e.g. 'total = @a * @b'.")
@click.option("--replace", is_flag=True, help="REPLACE rows with duplicate keys.")
@click.option("--ignore", is_flag=True, help="IGNORE rows with duplicate keys.")
@click.option("--character-set", default=None, help="CHARACTER SET of the file, e.g. utf8mb4.")
@click.option("--allow-warnings", is_flag=True,
              help="Commit chunks with warnings (default: roll the chunk back and stop).")
@click.option("--progress-table", default=DEFAULT_PROGRESS_TABLE, show_default=True,
              help="Where on the source each chunk's progress is committed.")
@click.option("--tmpdir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Directory for the one chunk file (default: the system temp dir).")
@click.option("--restart", is_flag=True, help="Forget this file's progress and load it from the start.")
@click.option("--dry-run", is_flag=True, help="Check everything and print the plan; load nothing.")
def load(file: Path, table_name: str, source: str, password_file: Path | None, replica_urls: tuple[str, ...],
         no_throttle: bool, max_lag: float, headroom: float, chunk_rows: int | None, fmt: str,
         fields_terminated_by: str | None, fields_enclosed_by: str | None,
         fields_optionally_enclosed_by: str | None, fields_escaped_by: str | None,
         lines_terminated_by: str | None, ignore_lines: int, columns: str | None, set_clause: str | None,
         replace: bool, ignore: bool, character_set: str | None, allow_warnings: bool, progress_table: str,
         tmpdir: str | None, restart: bool, dry_run: bool) -> None:
    """Load FILE into a table on the source in lag-sized, throttled, resumable transactions."""
    with _user_errors():
        if replace and ignore:
            raise LoadError("--replace and --ignore both given", fix="give one of them")
        if not replica_urls and not no_throttle and not dry_run:
            raise LoadError("no --replica-lagd to ask about replica lag",
                            fix="give --replica-lagd http://<replica>:<port> for each replica, "
                                "or --no-throttle to load without waiting for them")
        dialect = _dialect(fmt, fields_terminated_by, fields_enclosed_by, fields_optionally_enclosed_by,
                           fields_escaped_by, lines_terminated_by, ignore_lines)
        cols = tuple(c.strip() for c in columns.split(",") if c.strip()) if columns else ()
        spec = LoadSpec(parse_table(table_name), dialect, cols, set_clause,
                        "REPLACE" if replace else "IGNORE" if ignore else None, character_set)
        options = Options(budget=max_lag, headroom=headroom, fixed_rows=chunk_rows,
                          allow_warnings=allow_warnings or ignore or replace, tmpdir=tmpdir,
                          progress_table=parse_table(progress_table, "--progress-table"))
        dsn = parse_dsn(source)
        login = SourceLogin(dsn.host, dsn.port, dsn.user, _password(dsn.password, password_file))
        facts = scan(file, dialect.lines_terminated)
        db = SourceWriter(login)
        try:
            _run(db, spec, file, facts, options, replica_urls, restart, dry_run)
        finally:
            db.close()


def _run(db: SourceWriter, spec: LoadSpec, file: Path, facts: FileFacts, options: Options,
         urls: tuple[str, ...], restart: bool, dry_run: bool) -> None:
    rates = [fetch_rate(u, str(spec.table)) for u in urls]

    def ask(max_lag: float) -> list[ReplicaCheck]:
        return [check(u, max_lag) for u in urls]

    bpr = facts.size / facts.lines if facts.lines else None
    line = _Line()
    loader = Loader(db, spec, file, facts, options, ask if urls else None, rates, line, bytes_per_row=bpr,
                    refresh_rates=lambda: [fetch_rate(u, str(spec.table)) for u in urls])
    columns = loader.check_source()
    if dry_run:
        _print_plan(loader, spec, file, facts, options, urls, rates, columns)
        return
    if restart:
        from lagd.load.sql import progress_delete  # noqa: PLC0415 - only here
        loader.prepare()
        db.execute(progress_delete(options.progress_table), loader.key)
        db.commit()
    p = loader.prepare()
    if p.done:
        click.echo(f"{file.name} is already loaded into {spec.table} ({p.records:,} records in {p.chunks} "
                   "chunks); --restart loads it again", err=True)
        return
    if p.offset:
        click.echo(f"resuming {file.name} at byte {p.offset:,} of {facts.size:,}: {p.records:,} records in "
                   f"{p.chunks} chunks were committed before", err=True)
    t0 = time.monotonic()
    interrupted: list[bool] = []

    def on_sigint(signum: int, frame: object) -> None:
        # Ctrl-C inside the driver's LOAD DATA LOCAL exchange can come back as
        # a lost connection (error 2013): remember that the user asked to stop.
        interrupted.append(True)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        end = loader.run(p)
    except (KeyboardInterrupt, DatabaseError) as e:
        if isinstance(e, DatabaseError) and not interrupted:
            raise
        line.end()
        # The open chunk dies with the connection; its progress row was not committed.
        # (No query here: the connection may be in the middle of a LOAD DATA exchange.)
        after = loader.committed or p
        where = f" ({after.records:,} records committed)"
        click.echo(f"lagctl load: interrupted{where}; rerun the same command to resume", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        signal.signal(signal.SIGINT, previous)
    line.end()
    took = time.monotonic() - t0
    click.echo(f"loaded {file.name} into {spec.table}: {end.records:,} records ({end.affected:,} rows "
               f"affected) in {end.chunks} chunks; this run {_secs(took)}, largest chunk "
               f"{loader.largest:,} rows", err=True)


def _print_plan(loader: Loader, spec: LoadSpec, file: Path, facts: FileFacts, options: Options,
                urls: tuple[str, ...], rates: list[ReplicaRate], columns: list[str]) -> None:
    plan = loader.plan()
    try:
        prior = loader.read_progress()
    except DatabaseError as e:
        if e.kind is not Kind.SCHEMA:
            raise
        prior = None  # no progress table yet: nothing was loaded by lagctl
    records = max(0, facts.lines - spec.dialect.ignore_lines)
    chunks = -(-records // plan.rows) if plan.rows else 0
    out = [
        f"file: {file} ({facts.size:,} bytes, about {records:,} records, sha256 {facts.sha256[:16]}...)",
        f"into: {spec.table} on {loader.db.where}, columns {', '.join(spec.columns or columns)}",
        f"each chunk, in one transaction with its progress row in {options.progress_table}:",
        f"  {load_statement(spec, '<chunk file>')}",
        f"chunk: {plan.rows:,} rows: {plan.reason}",
        f"chunks: about {chunks:,} at that size (the size adapts to the lag each chunk causes)",
    ]
    if urls:
        thr = resume_threshold(options.budget, options.headroom)
        out.append(f"pacing: each chunk waits until every replica's lag is at most {thr:g} s (budget "
                   f"{options.budget:g} s, headroom {options.headroom:g}); asking:")
        for r in rates:
            rate = (f"{r.rows_per_second:,.0f} rows/s ({r.scope})" if r.rows_per_second
                    else "no rate learned yet")
            out.append(f"  {r.name}/check  apply rate {rate}")
    else:
        out.append("pacing: none (no --replica-lagd): chunks follow each other at the source's pace")
    if prior is None or (not prior.offset and not prior.done):
        out.append("resume: nothing committed yet; the load starts at the first record")
    elif prior.done:
        out.append(f"resume: already loaded ({prior.records:,} records); --restart loads it again")
    else:
        out.append(f"resume: from byte {prior.offset:,} ({prior.records:,} records committed in "
                   f"{prior.chunks} chunks)")
    click.echo("\n".join(out))
