"""``lagctl config validate [FILE]``: check a configuration before lagd loads it;
``lagctl config example [WHAT]``: the files shipped with lagd (example config,
systemd unit, Prometheus alert rules, Grafana dashboard), so an install from
a wheel has them.

It loads the file exactly as the daemon does, so "valid" here means the
daemon will accept it on start and on reload. Output is made for a terminal
and for scripts alike: one line per problem on stderr, prefixed with the
file like a compiler's, exit 2; or one summary line on stdout, exit 0.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

from lagd.config import DEFAULT_CONFIG_PATH, ConfigError, CredentialError, Settings, load_settings

# WHAT -> file in the package's data/ directory.
EXAMPLES = {
    "config": "lagd.toml",
    "unit": "lagd.service",
    "alerts": "lagd-alerts.yml",
    "dashboard": "lagd-dashboard.json",
}


def example_text(what: str) -> str:
    """The shipped file named by ``what`` (a key of :data:`EXAMPLES`)."""
    return resources.files("lagd").joinpath("data", EXAMPLES[what]).read_text(encoding="utf-8")


@click.group()
def config() -> None:
    """Check lagd's configuration file, or print the files shipped with lagd."""


@config.command()
@click.argument("what", type=click.Choice(sorted(EXAMPLES)), default="config")
def example(what: str) -> None:
    """Print a shipped file: config (commented lagd.toml, the default), unit
    (systemd), alerts (Prometheus rules) or dashboard (Grafana).

    \b
    lagctl config example > /etc/lagd/lagd.toml
    lagctl config example unit > /etc/systemd/system/lagd.service
    """
    click.echo(example_text(what), nl=False)


@config.command()
@click.argument(
    "file",
    type=click.Path(path_type=Path),  # existence is checked by load_settings, in one line
    default=DEFAULT_CONFIG_PATH,
)
def validate(file: Path) -> None:
    """Check FILE (default /etc/lagd/lagd.toml) the way the daemon loads it; exit 2 when invalid.

    Besides the keys, it checks a password file's permissions. A systemd
    credential can only be checked by the service itself.
    """
    try:
        settings = load_settings(file)
        settings.replica.check_password()
    except ConfigError as e:
        for problem in e.problems:
            click.echo(f"{file}: {problem}", err=True)
        raise click.exceptions.Exit(2) from None
    except CredentialError as e:
        click.echo(f"{file}: {e}", err=True)
        raise click.exceptions.Exit(2) from None
    for note in settings.notes():
        click.echo(f"{file}: note: {note}", err=True)
    click.echo(f"{file}: valid ({_summary(settings)})")


def _summary(s: Settings) -> str:
    r = s.replica
    where = f"socket {r.socket}" if r.socket else f"{r.host}:{r.port}"
    channel = f", channel {r.channel}" if r.channel else ""
    http = f"http {s.http.listen}" if s.http.enabled else "http off"
    prefetch = f"prefetch {s.prefetch.connections} connections" if s.prefetch.enabled else "prefetch off"
    return f"replica {where} as {r.user}{channel}, password from {r.password_source()}; {prefetch}; {http}"
