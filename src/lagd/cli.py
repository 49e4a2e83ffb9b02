"""lagctl: the on-call command line."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="lagd")
def main() -> None:
    """lagctl: inspect and operate lagd and its replica."""


from lagd.cli_sandbox import sandbox  # noqa: E402

main.add_command(sandbox)
