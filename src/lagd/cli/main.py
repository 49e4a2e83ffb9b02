"""lagctl: the on-call command line."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="lagd")
def main() -> None:
    """lagctl: inspect and operate lagd and its replica."""


from lagd.cli.advise import advise  # noqa: E402
from lagd.cli.config import config  # noqa: E402
from lagd.cli.doctor import doctor  # noqa: E402
from lagd.cli.load import load  # noqa: E402
from lagd.cli.sandbox import sandbox  # noqa: E402
from lagd.cli.status import status  # noqa: E402

main.add_command(status)
main.add_command(doctor)
main.add_command(advise)
main.add_command(config)
main.add_command(sandbox)
main.add_command(load)


if __name__ == "__main__":
    main()
