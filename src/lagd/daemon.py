"""lagd: the daemon entry point (grown by the daemon issue)."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="lagd")
def main() -> None:
    """lagd: replication-lag mitigation daemon."""
