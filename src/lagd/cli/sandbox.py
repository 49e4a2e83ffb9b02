"""``lagctl sandbox up|status|down``: a detached MariaDB sandbox for trying lagd.

The servers outlive ``up``; a JSON state file tells ``status`` and ``down``
where they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from lagd.errors import LagdError
from lagd.mysql.errors import DRIVER_ERRORS
from lagd.sandbox.pair import Sandbox, SandboxConfig, SandboxError, Server, default_state_file


@contextmanager
def _user_errors() -> Iterator[None]:
    # A LagdError describes something the user can fix: one line, no traceback.
    try:
        yield
    except LagdError as e:
        click.echo(f"lagctl: error: {e}", err=True)
        raise click.exceptions.Exit(2) from None


state_option = click.option(
    "--state",
    "state_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar="LAGD_SANDBOX_STATE",
    help="State file (default: $XDG_RUNTIME_DIR/lagd-sandbox.json or /tmp/lagd-sandbox-UID.json).",
)


@click.group()
def sandbox() -> None:
    """Private MariaDB source and replicas on loopback ports, for trying lagd."""


@sandbox.command()
@click.option("--replicas", type=click.IntRange(1, 16), default=1, show_default=True)
@click.option(
    "--buffer-pool-mb",
    type=click.IntRange(min=8),
    default=64,
    show_default=True,
    help="innodb_buffer_pool_size of every server.",
)
@click.option("--o-direct", is_flag=True, help="innodb_flush_method=O_DIRECT (default: fsync).")
@click.option(
    "--file-pos", is_flag=True, help="File/position replication instead of GTID (slave_pos)."
)
@click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Create the sandbox directory under DIR (default: the system temp dir).",
)
@state_option
def up(
    *,
    replicas: int,
    buffer_pool_mb: int,
    o_direct: bool,
    file_pos: bool,
    base_dir: Path | None,
    state_file: Path | None,
) -> None:
    """Start a source and replicas that keep running after this command."""
    path = state_file or default_state_file()
    with _user_errors():
        if path.exists():
            old = Sandbox.from_state_file(path)
            if any(s.is_alive() for s in old.servers):
                click.echo(
                    f"lagctl: error: a sandbox is already up (state {path}); "
                    "stop it with `lagctl sandbox down`",
                    err=True,
                )
                raise click.exceptions.Exit(1)
            click.echo(f"removing the state of a sandbox that is no longer running ({path})")
            old.stop()
            path.unlink(missing_ok=True)
        config = SandboxConfig(
            replicas=replicas,
            base_dir=base_dir,
            gtid=not file_pos,
            source_buffer_pool_mb=buffer_pool_mb,
            replica_buffer_pool_mb=buffer_pool_mb,
            o_direct=o_direct,
            detached=True,
        )
        sb = Sandbox(config).start()
        try:
            sb.write_state(path)
        except BaseException:
            sb.stop()
            raise
    click.echo(f"sandbox up in {sb.base_dir} (state {path})")
    for s in sb.servers:
        click.echo(f"  {s.name:<10} pid {s.pid:<8} 127.0.0.1:{s.port:<6} socket {s.socket_path}")
    r = sb.replica()
    click.echo(f"connect like lagd: mariadb -h127.0.0.1 -P{r.port} -ulagd -plagd")
    click.echo("stop with: lagctl sandbox down")


@sandbox.command()
@state_option
def status(state_file: Path | None) -> None:
    """Show each server and the replicas' thread states; exit 1 unless all run."""
    path = state_file or default_state_file()
    if not path.exists():
        click.echo(f"no sandbox is up (no state file {path})")
        raise click.exceptions.Exit(1)
    with _user_errors():
        sb = Sandbox.from_state_file(path)
    click.echo(f"sandbox in {sb.base_dir} (state {path})")
    all_alive = True
    for s in sb.servers:
        alive = s.is_alive()
        all_alive &= alive
        line = f"  {s.name:<10} pid {s.pid!s:<8} port {s.port:<6} {'alive' if alive else 'DEAD'}"
        if alive and s.role == "replica":
            line += "  " + _replica_line(s)
        click.echo(line)
    if not all_alive:
        raise click.exceptions.Exit(1)


def _replica_line(replica: Server) -> str:
    try:
        rows = replica.query("SHOW SLAVE STATUS")
    except DRIVER_ERRORS as e:
        return f"unreachable: {e}"
    if not rows:
        return "not replicating"
    st = rows[0]
    text = (
        f"io={st['Slave_IO_Running']} sql={st['Slave_SQL_Running']} "
        f"behind={st['Seconds_Behind_Master']}"
    )
    for key in ("Last_IO_Error", "Last_SQL_Error"):
        if st.get(key):
            text += f" {key}={st[key]!r}"
    return text


@sandbox.command()
@click.option("--keep", is_flag=True, help="Leave the datadirs on disk.")
@state_option
def down(keep: bool, state_file: Path | None) -> None:
    """Stop every server of the sandbox and forget it."""
    path = state_file or default_state_file()
    if not path.exists():
        click.echo(f"no sandbox is up (no state file {path})")
        return
    with _user_errors():
        sb = Sandbox.from_state_file(path)
        sb.stop(keep=keep)
        still = [s.name for s in sb.servers if s.is_alive()]
        if still:
            raise SandboxError(f"could not stop {', '.join(still)}; state kept in {path}")
        path.unlink(missing_ok=True)
    where = f"; datadirs kept in {sb.base_dir}" if keep else ""
    click.echo(f"sandbox stopped{where}")
